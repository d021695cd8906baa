"""The judge's channel to its workers (runner.channel): tensors as memfds beside JSON messages, bounded
by what the kernel passes in one message, and a call with many tensors judged whole."""
from __future__ import annotations

import json
import os
import socket

import pytest
import torch

from bot import ir, lower_torch
from bot.spec import MAX_TENSORS, SpecError, validate
from runner import channel
from runner.verify import verify


def test_a_message_carries_many_tensors_exactly():
    judge, worker = channel.pair()
    tensors = [torch.arange(k + 1, dtype=torch.float32) * k for k in range(60)]
    channel.send(worker, {"n": len(tensors)}, [channel.tensor_fd(t) for t in tensors])
    message, fds = channel.recv(judge, timeout=10)
    assert message == {"n": 60} and len(fds) == 60
    got = [channel.read_tensor(fd, torch.float32, [k + 1]) for k, fd in enumerate(fds)]
    channel.close(fds)
    assert all(torch.equal(g, t) for g, t in zip(got, tensors))


def test_more_tensors_than_the_bound_are_refused_on_both_sides(monkeypatch):
    monkeypatch.setattr(channel, "MAX_FDS", 4)      # the real bound is the kernel's own: no sender passes more
    judge, worker = channel.pair()
    fds = [os.memfd_create("t") for _ in range(5)]
    with pytest.raises(channel.ChannelError, match="at most 4"):
        channel.send(worker, {}, fds)
    body = json.dumps({}).encode()        # a sender that skips send()'s check: the receiver refuses it
    socket.send_fds(worker, [channel._HEADER.pack(len(body))[:1]], fds)
    worker.sendall(channel._HEADER.pack(len(body))[1:] + body)
    with pytest.raises(channel.ChannelError, match="more than"):
        channel.recv(judge, timeout=10)
    channel.close(fds)


def spec_of(n: int) -> dict:
    names = [f"x{k}" for k in range(n)]
    return {"name": "many", "expression": " + ".join(names),
            "inputs": [{"name": x, "dtypes": ["float32"], "shapes": [[3, 5]]} for x in names]}


def test_an_operator_of_twenty_inputs_is_judged_whole(tmp_path):
    # each call sends 20 tensors and takes 21 back (the output, then the inputs, checked unchanged)
    spec = validate(spec_of(20))
    node = ir.parse(spec["expression"])
    (tmp_path / "spec.json").write_text(json.dumps(spec))
    (tmp_path / "reference.py").write_text(lower_torch.reference_source(spec, node))
    (tmp_path / "kernel.py").write_text(ir.kernel_source(spec, node, {}))
    result = verify(tmp_path / "spec.json", tmp_path / "reference.py", tmp_path / "kernel.py", backend="cpu")
    assert result["status"] == "pass", result["summary"]


def test_a_spec_past_the_tensor_bound_is_refused_naming_it():
    with pytest.raises(SpecError, match=f"at most {MAX_TENSORS} tensors in all"):
        validate(spec_of(MAX_TENSORS))


def test_a_tensor_file_shrunk_after_its_size_check_is_refused_not_fatal(monkeypatch):
    # a hostile worker may truncate its memfd between the judge's fstat and its read: a short read,
    # refused, where reading through a mapping would kill the judge with SIGBUS
    fd = channel.tensor_fd(torch.ones(4, 4))
    real = os.fstat(fd)
    os.ftruncate(fd, 16)
    monkeypatch.setattr(channel.os, "fstat", lambda _: real)
    with pytest.raises(channel.ChannelError, match="shrank to 16 bytes"):
        channel.read_tensor(fd, torch.float32, [4, 4])
    os.close(fd)


def test_the_fds_of_a_message_cut_short_are_closed():
    judge, worker = channel.pair()
    before = len(os.listdir("/proc/self/fd"))
    fds = [channel.tensor_fd(torch.ones(3)) for _ in range(8)]
    socket.send_fds(worker, [channel._HEADER.pack(100)[:1]], fds)     # the header's first byte, then nothing
    channel.close(fds)
    worker.close()
    with pytest.raises(channel.ChannelError, match="mid-message"):
        channel.recv(judge, timeout=10)
    judge.close()
    assert len(os.listdir("/proc/self/fd")) == before - 2       # the pair's own two ends are closed too
