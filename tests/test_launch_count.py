"""runner.launch_count: the injection library builds with what Triton ships, and the judge reads
the page it writes. The counting itself runs on a GPU (tests/judge_attacks, test_harness)."""
from __future__ import annotations

import ctypes
import mmap
import os

import pytest

from runner import launch_count as lc


def write_page(counter: lc.Counter, total: int, slots: list[tuple[str, int]], overflow: int = 0) -> None:
    with mmap.mmap(counter.fd, lc.PAGE_BYTES, mmap.MAP_SHARED, mmap.PROT_WRITE | mmap.PROT_READ) as page:
        lc.HEADER.pack_into(page, 0, lc.MAGIC, total, overflow, len(slots), 0)
        for i, (name, n) in enumerate(slots):
            lc.SLOT.pack_into(page, lc.HEADER.size + i * lc.SLOT.size, n, name.encode())


def test_the_judge_reads_launches_by_name_between_two_counts(tmp_path):
    counter = lc.Counter(tmp_path / "unused.so")
    try:
        assert counter.problem() == "the CUDA driver did not load the launch counter into the worker"
        write_page(counter, 3, [("_add_kernel", 2), ("vectorized_elementwise_kernel", 1)])
        before = counter.counts()
        write_page(counter, 6, [("_add_kernel", 4), ("vectorized_elementwise_kernel", 2)], overflow=1)
        after = counter.counts()
        assert counter.problem() == ""
        assert lc.launched(before, after) == {"_add_kernel": 2, "vectorized_elementwise_kernel": 1,
                                              "<other kernels>": 1}
        assert lc.of_kernels(lc.launched(before, after), frozenset({"_add_kernel"})) == 2
        assert lc.of_kernels(lc.launched(before, after), frozenset({"_other"})) == 0
    finally:
        counter.close()


def test_the_library_builds_and_reports_into_the_page_when_the_driver_loads_it(tmp_path, monkeypatch):
    library = lc.build(tmp_path)
    assert lc.build(tmp_path) == library          # built once per source
    counter = lc.Counter(library)
    try:
        # What the driver does on cuInit, done by hand: the library maps the page and subscribes.
        # Without a GPU CUPTI refuses the subscription, and the page says so.
        monkeypatch.setenv("KERNELBOT_LAUNCH_FD", str(os.dup(counter.fd)))
        assert ctypes.CDLL(str(library)).InitializeInjection() == 1
        problem = counter.problem()
        assert problem == "" or problem.startswith("CUPTI refused the launch callbacks"), problem
    finally:
        counter.close()


def test_a_host_without_a_c_compiler_is_told_what_is_missing(tmp_path, monkeypatch):
    monkeypatch.setenv("PATH", str(tmp_path))
    monkeypatch.setenv("CC", "no-such-cc")
    with pytest.raises(lc.Unavailable, match="no C compiler"):
        lc.build(tmp_path)
