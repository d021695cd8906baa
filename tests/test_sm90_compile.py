"""Every catalog kernel, in every dtype and config, compiles for sm_90 (H100/H200) with Triton's own
compiler, on CPU: what the interpreter cannot check (tests/sm90_compile.py says how)."""
from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from bot import catalog

SCRIPT = Path(__file__).with_name("sm90_compile.py")
# The whole compile pass runs in the first test's setup: minutes on CI's 2 cores, twice as long
# on a machine half as fast. Its limits sit well above both (pytest's default here is 600 s).
COMPILE_LIMIT_S = 2400
pytestmark = pytest.mark.timeout(COMPILE_LIMIT_S + 60)
H200_SHARED = 227 * 1024      # the most shared memory one block may use on an H100/H200


def _nvidia_backend() -> str:
    """Why the check cannot run here, or ''."""
    try:
        import triton.backends.nvidia as nvidia
    except ImportError:
        return "this Triton build has no NVIDIA backend"
    if not (Path(nvidia.__file__).parent / "bin" / "ptxas").exists() and not shutil.which("ptxas"):
        return "no ptxas (Triton's wheel bundles one; this build does not)"
    return ""


@pytest.fixture(scope="module")
def compiled() -> dict[str, dict]:
    why = _nvidia_backend()
    if why:
        pytest.skip(why)
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"} | {"TRITON_DEFAULT_FP_FUSION": "1"}
    proc = subprocess.run([sys.executable, str(SCRIPT)], capture_output=True, text=True, env=env,
                          timeout=COMPILE_LIMIT_S)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return {r["entry"]: r for r in map(json.loads, proc.stdout.splitlines())}


@pytest.mark.parametrize("entry", [e.name for e in catalog.ENTRIES] + ["matmul_epilogue_tf32"])
def test_catalog_kernel_compiles_for_sm90(compiled, entry):
    result = compiled[entry]
    assert not result["error"], result["error"]
    assert result["kernels"] > 0
    assert result["max_shared"] <= H200_SHARED, f"{entry} needs {result['max_shared']} bytes of shared memory"
    if entry in ("max", "min_dim0"):     # the GPU keeps NaN as torch.amax/amin do: max.NaN / min.NaN
        assert result["nan_min_max"], f"{entry}: no max.NaN/min.NaN in the PTX"


@pytest.mark.parametrize("entry", ["sum", "max", "argmax", "cross_entropy"])
def test_aligned_kernels_load_vectors(compiled, entry):
    # Their small cases have odd rows of 1031: the aligned kernel, whose row body loads whole
    # 16-byte vectors where the other kernels would load element by element.
    assert compiled[entry]["aligned_kernels"] > 0
    vectorized = compiled[entry]["vectorized"]
    assert any(name.endswith("_aligned_kernel") for name in vectorized), f"{entry}: no vector loads in the aligned kernel's PTX"


@pytest.mark.parametrize("entry", ["layernorm", "rmsnorm", "add_rmsnorm"])
def test_norm_weights_load_vectors_on_odd_rows(compiled, entry):
    # Their small cases have odd rows only (97, 1031, 11), so the body loads element by element;
    # the weights up to their last whole 16-byte vector still load as vectors (the rest in a tail
    # tile). Rows of 1031 give the tiles the 8+ elements a thread that a vector needs.
    vectorized = compiled[entry]["vectorized"]
    assert vectorized, f"{entry}: only single-element loads in every kernel"
