"""Kernel launches of a worker, counted by the CUDA driver's tool interface for the judge.

The judge builds runner/launch_count.c (once per job, with the C compiler Triton itself needs and
the CUPTI headers and library Triton ships), makes a shared page (a memfd), and starts each CUDA
worker with the driver told to inject the library (CUDA_INJECTION64_PATH, the way NVIDIA's
profilers attach). The library counts every launch by kernel name into the page; the judge reads
the counts before and after each call. A count therefore never passes through the worker's Python.
"""
from __future__ import annotations

import hashlib
import mmap
import os
import shutil
import struct
import subprocess
from pathlib import Path

SOURCE = Path(__file__).with_name("launch_count.c")
MAGIC = 0x6B626C61756E6368
SLOTS, NAME = 64, 120
HEADER = struct.Struct("=QQQII")          # magic, total, overflow, used, error (kb_page in the C file)
SLOT = struct.Struct(f"=Q{NAME}s")
PAGE_BYTES = HEADER.size + SLOTS * SLOT.size


class Unavailable(Exception):
    """This host cannot count launches; the message says what is missing."""


def _triton_nvidia() -> Path:
    try:
        import triton
    except ImportError as e:
        raise Unavailable(f"Triton is not installed ({e})") from None
    return Path(triton.__file__).parent / "backends" / "nvidia"


def build(folder: Path) -> Path:
    """The injection library, compiled into folder (named by its source's hash)."""
    nvidia = _triton_nvidia()
    include, cupti = nvidia / "include", nvidia / "lib" / "cupti"
    if not (include / "cupti.h").exists() or not any(cupti.glob("libcupti.so*")):
        raise Unavailable(f"this Triton ships no CUPTI (looked for {include / 'cupti.h'} and {cupti}/libcupti.so)")
    compiler = shutil.which(os.environ.get("CC", "cc")) or shutil.which("gcc")
    if compiler is None:
        raise Unavailable("no C compiler (cc or gcc) on PATH; Triton needs one too")
    digest = hashlib.sha256(SOURCE.read_bytes() + str(nvidia).encode()).hexdigest()[:16]
    library = folder / f"launch_count-{digest}.so"
    if library.exists():
        return library
    folder.mkdir(parents=True, exist_ok=True)
    cmd = [compiler, "-O2", "-shared", "-fPIC", f"-I{include}", str(SOURCE), f"-L{cupti}", "-lcupti",
           f"-Wl,-rpath,{cupti}", "-o", str(library)]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=120)
    if proc.returncode != 0:
        raise Unavailable(f"building the launch counter failed: {proc.stderr.strip()[-400:]}")
    return library


class Counter:
    """One worker's shared page: env() for its start, counts() while it runs."""

    def __init__(self, library: Path) -> None:
        self.library = library
        self.fd = os.memfd_create("kernelbot-launches", os.MFD_CLOEXEC)
        os.ftruncate(self.fd, PAGE_BYTES)
        self.page = mmap.mmap(self.fd, PAGE_BYTES, mmap.MAP_SHARED, mmap.PROT_READ)

    def env(self) -> dict[str, str]:
        return {"CUDA_INJECTION64_PATH": str(self.library), "KERNELBOT_LAUNCH_FD": str(self.fd)}

    def problem(self) -> str:
        """Why nothing is being counted ('' when counting): read after the worker's CUDA started."""
        magic, _, _, _, error = HEADER.unpack_from(self.page, 0)
        if magic != MAGIC:
            return "the CUDA driver did not load the launch counter into the worker"
        return f"CUPTI refused the launch callbacks (CUptiResult {error})" if error else ""

    def counts(self) -> dict[str, int]:
        """Launches so far by kernel name, plus '<other kernels>' past the page's slots."""
        _, total, overflow, used, _ = HEADER.unpack_from(self.page, 0)
        counts = {}
        for i in range(min(used, SLOTS)):
            count, raw = SLOT.unpack_from(self.page, HEADER.size + i * SLOT.size)
            name = raw.split(b"\0", 1)[0].decode("utf-8", "replace")
            counts[name] = counts.get(name, 0) + count
        if overflow:
            counts["<other kernels>"] = overflow
        return counts

    def close(self) -> None:
        self.page.close()
        os.close(self.fd)


def launched(before: dict[str, int], after: dict[str, int]) -> dict[str, int]:
    """The launches between two counts, by kernel name."""
    return {name: n - before.get(name, 0) for name, n in after.items() if n > before.get(name, 0)}


def of_kernels(launches: dict[str, int], kernels: set[str]) -> int:
    """How many of the launches were of the named @triton.jit functions (Triton names a compiled
    kernel after its function)."""
    return sum(n for name, n in launches.items() if name in kernels)
