"""The wire between the trusted judge and an untrusted worker: a unix socketpair carrying
length-prefixed JSON messages, with tensors as raw bytes in memfds passed beside them
(SCM_RIGHTS). Plain bytes are all that crosses: no Python object of the worker's reaches the
judge, and the judge reads a tensor only as the dtype and shape it fixed itself.

Each side trusts nothing the other sends: a message over MAX_MESSAGE bytes, more fds than
MAX_FDS, or a tensor whose memfd is not a regular file of exactly the size asked for is a
ChannelError, never a hang or an allocation the sender chose.
"""
from __future__ import annotations

import json
import mmap
import os
import socket
import stat
import struct

import torch

MAX_MESSAGE = 1 << 20        # JSON bytes per message: sources, configs and errors fit with room
MAX_FDS = 253               # fds per message: Linux's own bound (SCM_MAX_FD); spec.MAX_TENSORS keeps a call under it
_HEADER = struct.Struct("!I")

DTYPES = {str(d).removeprefix("torch."): d for d in (
    torch.float16, torch.bfloat16, torch.float32, torch.float64, torch.int8, torch.int16, torch.int32, torch.int64,
    torch.uint8, torch.bool)}


class ChannelError(Exception):
    """The other side broke the protocol, went away, or sent something outside its bounds."""


def pair() -> tuple[socket.socket, socket.socket]:
    """(judge end, worker end); the worker end is inheritable, for pass_fds."""
    judge, worker = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
    worker.set_inheritable(True)
    return judge, worker


def send(sock: socket.socket, message: dict, fds: list[int] = ()) -> None:
    body = json.dumps(message).encode()
    if len(body) > MAX_MESSAGE:
        raise ChannelError(f"message of {len(body)} bytes is over the {MAX_MESSAGE} byte limit")
    data = _HEADER.pack(len(body)) + body
    if len(fds) > MAX_FDS:
        raise ChannelError(f"{len(fds)} tensors in one message; the channel carries at most {MAX_FDS}")
    try:
        socket.send_fds(sock, [data[:1]], list(fds)) if fds else sock.sendall(data[:1])
        sock.sendall(data[1:])
    except OSError as e:
        raise ChannelError(f"could not send: {e}") from None


def recv(sock: socket.socket, timeout: float | None = None) -> tuple[dict, list[int]]:
    """The next message and the fds that came with it; ChannelError on EOF, timeout or bad data (the
    fds of a message refused are closed: none is kept)."""
    sock.settimeout(timeout)
    fds: list[int] = []
    try:
        first, fds, flags, _ = socket.recv_fds(sock, 1, MAX_FDS)
        return _message(sock, first, flags), fds
    except socket.timeout:
        close(fds)
        raise ChannelError(f"no answer within {timeout:.0f} s") from None
    except OSError as e:
        close(fds)
        raise ChannelError(f"channel failed: {e}") from None
    except ChannelError:
        close(fds)
        raise


def _message(sock: socket.socket, first: bytes, flags: int) -> dict:
    """The message whose first byte came (with flags) beside its fds: read whole, checked."""
    if flags & socket.MSG_CTRUNC:      # more fds than MAX_FDS: the kernel dropped the rest
        raise ChannelError(f"a message came with more than {MAX_FDS} tensors")
    if not first:
        raise ChannelError("the other side closed the channel")
    (size,) = _HEADER.unpack(first + _exactly(sock, _HEADER.size - 1))
    if size > MAX_MESSAGE:
        raise ChannelError(f"message of {size} bytes is over the {MAX_MESSAGE} byte limit")
    try:
        message = json.loads(_exactly(sock, size))
    except ValueError:
        raise ChannelError("message is not JSON") from None
    if not isinstance(message, dict):
        raise ChannelError("message is not a JSON object")
    return message


def _exactly(sock: socket.socket, n: int) -> bytes:
    chunks, left = [], n
    while left:
        chunk = sock.recv(min(left, 1 << 16))
        if not chunk:
            raise ChannelError("the other side closed the channel mid-message")
        chunks.append(chunk)
        left -= len(chunk)
    return b"".join(chunks)


# --- tensors as memfds ------------------------------------------------------------------------

def tensor_fd(t: torch.Tensor) -> int:
    """A memfd holding t's elements in row-major order, as raw bytes (the caller closes it)."""
    flat = t.detach().contiguous().cpu().reshape(-1)
    data = flat.view(torch.uint8).numpy().tobytes() if flat.numel() else b""
    fd = os.memfd_create("kernelbot-tensor", os.MFD_CLOEXEC)
    os.ftruncate(fd, len(data))
    if data:
        with mmap.mmap(fd, len(data)) as m:
            m[:] = data
    return fd


def describe(t: torch.Tensor) -> dict:
    return {"dtype": str(t.dtype).removeprefix("torch."), "shape": list(t.shape)}


def dtype_of(name) -> torch.dtype:
    if name not in DTYPES:
        raise ChannelError(f"dtype {name!r} is not one the judge reads")
    return DTYPES[name]


def read_tensor(fd: int, dtype: torch.dtype, shape: list[int]) -> torch.Tensor:
    """The tensor of exactly this dtype and shape from fd's bytes, copied out (later writes to the
    memfd change nothing; the caller closes fd). A file that is not regular or not exactly that
    size is refused."""
    info = os.fstat(fd)
    nbytes = torch.Size(shape).numel() * torch.empty((), dtype=dtype).element_size()
    if not stat.S_ISREG(info.st_mode):
        raise ChannelError("a tensor came as something other than a plain memory file")
    if info.st_size != nbytes:
        raise ChannelError(f"a tensor came with {info.st_size} bytes where {dtype} {list(shape)} has {nbytes}")
    if not nbytes:
        return torch.empty(shape, dtype=dtype)
    # pread, not mmap: a sender that shrinks the file after the size check gives a short read here
    # (refused), where a mapping would take the judge down with SIGBUS
    data = bytearray(nbytes)
    view, done = memoryview(data), 0
    while done < nbytes:
        got = os.preadv(fd, [view[done:]], done)
        if got <= 0:
            raise ChannelError(f"a tensor's file shrank to {done} bytes while it was read")
        done += got
    return torch.frombuffer(data, dtype=torch.uint8).view(dtype).reshape(shape)


def close(fds: list[int]) -> None:
    for fd in fds:
        os.close(fd)
