"""Every catalog kernel, in every dtype and config, compiles for sm_90 (H100/H200) with Triton's own
compiler, on CPU: what the interpreter cannot check (tests/sm90_compile.py says how)."""
from __future__ import annotations

import atexit
import json
import os
import shutil
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from pathlib import Path

import pytest

from bot import catalog

SCRIPT = Path(__file__).with_name("sm90_compile.py")
ENTRIES = [e.name for e in catalog.ENTRIES] + ["matmul_epilogue_tf32", "conv2d_3x3_channels_last"]
# Compiling every entry takes minutes on CI's 2 cores. conftest starts one compile process for the
# whole test run as soon as collection is done (under pytest-xdist, the first worker to claim the
# run's folder starts it) and hands it every entry, so it runs beside the rest of the suite; it
# writes each answer to the run's folder, where each test, in whichever worker, waits only for its
# own entry, well under pytest's 600 s limit even when this module runs first. Triton's compile
# cache makes reruns quick.
ENTRY_LIMIT_S = 540
H200_SHARED = 227 * 1024      # the most shared memory one block may use on an H100/H200
# one folder per test run: pytest-xdist's run id is the same in every worker
_RUN = Path(tempfile.gettempdir()) / f"kernelbot-sm90-{os.environ.get('PYTEST_XDIST_TESTRUNUID') or uuid.uuid4().hex}"


def _nvidia_backend() -> str:
    """Why the check cannot run here, or ''."""
    try:
        import triton.backends.nvidia as nvidia
    except ImportError:
        return "this Triton build has no NVIDIA backend"
    if not (Path(nvidia.__file__).parent / "bin" / "ptxas").exists() and not shutil.which("ptxas"):
        return "no ptxas (Triton's wheel bundles one; this build does not)"
    return ""


def start_compiling() -> None:
    """Compile every entry in the background from now on, once a test run (conftest calls this
    after collection): tests/sm90_compile.py --serve, its answers one JSON line each in the run's
    folder. The process that claims the folder starts it; alone, it also ends it at exit (under
    xdist a worker can finish while another still waits, so the compile runs to its end)."""
    if _nvidia_backend():
        return
    _RUN.mkdir(exist_ok=True)
    try:
        os.close(os.open(_RUN / "owner", os.O_CREAT | os.O_EXCL | os.O_WRONLY))
    except FileExistsError:
        return
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"} | {"TRITON_DEFAULT_FP_FUSION": "1"}
    with (_RUN / "answers.jsonl").open("w") as answers, (_RUN / "stderr.log").open("w") as log:
        proc = subprocess.Popen([sys.executable, str(SCRIPT), "--serve"], stdin=subprocess.PIPE, stdout=answers,
                                stderr=log, text=True, env=env, start_new_session=True)
    proc.stdin.write("".join(f"{name}\n" for name in ENTRIES))
    proc.stdin.close()                     # it answers them in order, then exits
    (_RUN / "pid").write_text(str(proc.pid))
    if not os.environ.get("PYTEST_XDIST_WORKER"):
        atexit.register(lambda: proc.poll() is None and proc.kill())
    threading.Thread(target=proc.wait, daemon=True).start()       # reaped when it ends: no zombie


def result(entry: str) -> dict:
    """The compile process's answer for entry, waiting for it up to ENTRY_LIMIT_S."""
    deadline = time.monotonic() + ENTRY_LIMIT_S
    while True:
        path = _RUN / "answers.jsonl"
        answers = path.read_text().splitlines(keepends=True) if path.exists() else []
        found = [json.loads(line) for line in answers if line.endswith("\n") and json.loads(line)["entry"] == entry]
        if found:
            return found[0]
        if not _running():
            pytest.fail(f"the compile process ended without {entry}: {(_RUN / 'stderr.log').read_text()[-3000:]}")
        if time.monotonic() > deadline:
            pytest.fail(f"compiling {entry} for sm_90 took over {ENTRY_LIMIT_S} s")
        time.sleep(0.5)


def _running() -> bool:
    """Whether the run's compile process is still at work (or about to start: claimed, no pid yet),
    not ended and not a zombie (Linux's /proc tells)."""
    if not (_RUN / "pid").exists():
        return True
    try:
        return Path(f"/proc/{(_RUN / 'pid').read_text()}/stat").read_text().split(")")[-1].split()[0] != "Z"
    except OSError:
        return False


@pytest.fixture(scope="module")
def compiler():
    why = _nvidia_backend()
    if why:
        pytest.skip(why)
    start_compiling()
    return result


@pytest.mark.parametrize("entry", ENTRIES)
def test_catalog_kernel_compiles_for_sm90(compiler, entry):
    result = compiler(entry)
    assert not result["error"], result["error"]
    assert result["kernels"] > 0
    assert result["max_shared"] <= H200_SHARED, f"{entry} needs {result['max_shared']} bytes of shared memory"
    if entry in ("max", "min_dim0"):     # the GPU keeps NaN as torch.amax/amin do: max.NaN / min.NaN
        assert result["nan_min_max"], f"{entry}: no max.NaN/min.NaN in the PTX"


@pytest.mark.parametrize("entry", ["sum", "max", "argmax", "cross_entropy"])
def test_aligned_kernels_load_vectors(compiler, entry):
    # Their small cases have odd rows of 1031: the aligned kernel, whose row body loads whole
    # 16-byte vectors where the other kernels would load element by element.
    result = compiler(entry)
    assert result["aligned_kernels"] > 0
    vectorized = result["vectorized"]
    assert any(name.endswith("_aligned_kernel") for name in vectorized), f"{entry}: no vector loads in the aligned kernel's PTX"


@pytest.mark.parametrize("entry", ["layernorm", "rmsnorm", "add_rmsnorm"])
def test_norm_weights_load_vectors_on_odd_rows(compiler, entry):
    # Their small cases have odd rows only (97, 1031, 11), so the body loads element by element;
    # the weights up to their last whole 16-byte vector still load as vectors (the rest in a tail
    # tile). Rows of 1031 give the tiles the 8+ elements a thread that a vector needs.
    vectorized = compiler(entry)["vectorized"]
    assert vectorized, f"{entry}: only single-element loads in every kernel"
