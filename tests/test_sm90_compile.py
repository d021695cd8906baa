"""Every catalog kernel, in every dtype and config, compiles for sm_90 (H100/H200) with Triton's own
compiler, on CPU: what the interpreter cannot check (tests/sm90_compile.py says how)."""
from __future__ import annotations

import atexit
import json
import os
import shutil
import subprocess
import sys
import threading
from pathlib import Path
from typing import Iterator

import pytest

from bot import catalog

SCRIPT = Path(__file__).with_name("sm90_compile.py")
ENTRIES = [e.name for e in catalog.ENTRIES] + ["matmul_epilogue_tf32"]
# Compiling every entry takes minutes on CI's 2 cores. conftest starts one compile process as soon as
# collection is done and hands it every entry, so it runs beside the rest of the suite (which keeps
# one core busy); each test then waits only for its own entry, well under pytest's 600 s limit even
# when this module runs first. Triton's compile cache makes reruns quick.
ENTRY_LIMIT_S = 540
H200_SHARED = 227 * 1024      # the most shared memory one block may use on an H100/H200
_SERVED: list["Compiler"] = []


def _nvidia_backend() -> str:
    """Why the check cannot run here, or ''."""
    try:
        import triton.backends.nvidia as nvidia
    except ImportError:
        return "this Triton build has no NVIDIA backend"
    if not (Path(nvidia.__file__).parent / "bin" / "ptxas").exists() and not shutil.which("ptxas"):
        return "no ptxas (Triton's wheel bundles one; this build does not)"
    return ""


def start_compiling(log_dir: Path) -> None:
    """Compile every entry in the background from now on (conftest calls this after collection)."""
    if not _SERVED and not _nvidia_backend():
        _SERVED.append(Compiler(log_dir / "sm90-stderr.log", ENTRIES))


class Compiler:
    """tests/sm90_compile.py --serve, handed every entry at once; its answers are kept by entry."""

    def __init__(self, log: Path, entries: list[str]):
        env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"} | {"TRITON_DEFAULT_FP_FUSION": "1"}
        self.log = log
        self.proc = subprocess.Popen([sys.executable, str(SCRIPT), "--serve"], stdin=subprocess.PIPE,
                                     stdout=subprocess.PIPE, stderr=log.open("w"), text=True, env=env)
        self.proc.stdin.write("".join(f"{name}\n" for name in entries))
        self.proc.stdin.close()                     # it answers them in order, then exits
        self.results: dict[str, dict] = {}
        self.changed = threading.Condition()
        threading.Thread(target=self._read, daemon=True).start()
        atexit.register(self.close)

    def _read(self) -> None:
        for line in self.proc.stdout:
            with self.changed:
                answer = json.loads(line)
                self.results[answer["entry"]] = answer
                self.changed.notify_all()
        with self.changed:
            self.changed.notify_all()

    def result(self, entry: str) -> dict:
        with self.changed:
            self.changed.wait_for(lambda: entry in self.results or self.proc.poll() is not None, ENTRY_LIMIT_S)
            if entry in self.results:
                return self.results[entry]
        if self.proc.poll() is None:
            pytest.fail(f"compiling {entry} for sm_90 took over {ENTRY_LIMIT_S} s")
        pytest.fail(f"the compile process ended without {entry}: {self.log.read_text()[-3000:]}")

    def close(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
        self.proc.wait()


@pytest.fixture(scope="module")
def compiler(tmp_path_factory) -> Iterator[Compiler]:
    why = _nvidia_backend()
    if why:
        pytest.skip(why)
    start_compiling(tmp_path_factory.mktemp("sm90"))
    yield _SERVED[0]
    _SERVED.pop().close()


@pytest.mark.parametrize("entry", ENTRIES)
def test_catalog_kernel_compiles_for_sm90(compiler, entry):
    result = compiler.result(entry)
    assert not result["error"], result["error"]
    assert result["kernels"] > 0
    assert result["max_shared"] <= H200_SHARED, f"{entry} needs {result['max_shared']} bytes of shared memory"
    if entry in ("max", "min_dim0"):     # the GPU keeps NaN as torch.amax/amin do: max.NaN / min.NaN
        assert result["nan_min_max"], f"{entry}: no max.NaN/min.NaN in the PTX"


@pytest.mark.parametrize("entry", ["sum", "max", "argmax", "cross_entropy"])
def test_aligned_kernels_load_vectors(compiler, entry):
    # Their small cases have odd rows of 1031: the aligned kernel, whose row body loads whole
    # 16-byte vectors where the other kernels would load element by element.
    result = compiler.result(entry)
    assert result["aligned_kernels"] > 0
    vectorized = result["vectorized"]
    assert any(name.endswith("_aligned_kernel") for name in vectorized), f"{entry}: no vector loads in the aligned kernel's PTX"


@pytest.mark.parametrize("entry", ["layernorm", "rmsnorm", "add_rmsnorm"])
def test_norm_weights_load_vectors_on_odd_rows(compiler, entry):
    # Their small cases have odd rows only (97, 1031, 11), so the body loads element by element;
    # the weights up to their last whole 16-byte vector still load as vectors (the rest in a tail
    # tile). Rows of 1031 give the tiles the 8+ elements a thread that a vector needs.
    vectorized = compiler.result(entry)["vectorized"]
    assert vectorized, f"{entry}: only single-element loads in every kernel"
