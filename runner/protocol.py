"""The wire contract between bot and runner: plain data, no torch, no bot imports.

A spec (spec.json) names inputs, each with one dtype per dtype variant and one
shape per case. A job is plain JSON (see JOB_KINDS); a result is plain JSON with
an optional PNG. Both sides import this module; nothing here runs generated code.
"""
from __future__ import annotations

import functools
import math
import os
import re
from dataclasses import dataclass
from pathlib import Path

DTYPE_ALIASES: dict[str, str] = {
    "float16": "float16", "fp16": "float16", "half": "float16", "f16": "float16",
    "bfloat16": "bfloat16", "bf16": "bfloat16",
    "float32": "float32", "fp32": "float32", "float": "float32", "f32": "float32", "single": "float32",
    "int64": "int64", "long": "int64", "i64": "int64",
    "bool": "bool",
}
DTYPES: tuple[str, ...] = ("float16", "bfloat16", "float32")     # what kernels compute in
INDEX_DTYPE = "int64"                                             # class indices (cross-entropy target)
MASK_DTYPE = "bool"                                               # boolean masks
SHORT: dict[str, str] = {"float16": "fp16", "bfloat16": "bf16", "float32": "fp32", "int64": "i64", "bool": "b1"}
ITEMSIZE: dict[str, int] = {"float16": 2, "bfloat16": 2, "float32": 4, "int64": 8, "bool": 1}
# index: int64 uniform in [0, size of dim "index_dim" (default: the last) of the input named by
# "index_of"), about one in eight IGNORE_INDEX (padding) unless "padding" is false or an index (the
# loss's own ignore_index, drawn instead); mask: bool,
# True or False with even odds; sign: -1.0 or 1.0 with even odds (a ±1 target: hinge_embedding_loss's);
# zeros: normal values, about half of them exactly 0 (a float compared for equality with 0, such as a
# mask made of ones: both branches taken, its other uses still see values of every size); whole: int64
# uniform in ["range"][0] .. ["range"][1] - 1 (a pasted get_inputs' torch.randint(low, high, size) that
# the module reads as numbers, not indices: an int attention mask, counts)
DOMAINS: tuple[str, ...] = ("normal", "positive", "nonzero", "unit", "sign", "zeros", "index", "mask", "whole")
# The domains of inputs that hold no float values: the output's dtype is the other inputs'.
NOT_FLOAT_DOMAINS: tuple[str, ...] = ("index", "mask", "whole")
IGNORE_INDEX = -100        # torch's cross_entropy default: a row with this target adds no loss

JOB_KINDS: tuple[str, ...] = ("reference_test", "kernel_test", "benchmark", "verify")


def canonical_dtype(name: str) -> str:
    """'fp16' -> 'float16'; raises ValueError naming what is supported."""
    key = str(name).strip().lower().removeprefix("torch.")
    if key not in DTYPE_ALIASES:
        raise ValueError(f"unsupported dtype {name!r}; supported: float16 (fp16), bfloat16 (bf16), float32 (fp32), "
                         "int64 for class indices and bool for masks")
    return DTYPE_ALIASES[key]


@dataclass(frozen=True)
class Case:
    index: int
    shapes: dict[str, list[int]]     # input name -> shape

    @property
    def label(self) -> str:
        """The first input's shape, e.g. '5333x497'; other shapes in brackets when they differ."""
        names = list(self.shapes)
        first = "x".join(map(str, self.shapes[names[0]])) or "scalar"
        others = [f"{n}:{'x'.join(map(str, s))}" for n, s in self.shapes.items() if s != self.shapes[names[0]]]
        return first + (f" ({', '.join(others)})" if others else "")


# Triton's interpreter runs every program in Python: on the cpu backend cases shrink to this many
# elements per tensor, the harness's and the generated tests' alike (shrunk_sizes, copied verbatim).
CPU_MAX_ELEMENTS = 65536


# Odd, non-power-of-two sizes for the extra case, handed out from the largest spec size down.
ODD_SIZES = (97, 37, 13, 11, 7, 5, 3)


def odd_sizes(shapes: list[list[int]], fixed=(), least: int = 1) -> dict[int, int]:
    """The odd-sized case's map, old size -> new: every size other than 1 replaced by an odd one, the
    largest by 97, the next by 37, and so on; fixed sizes stay, none goes below least."""
    distinct = sorted({d for s in shapes for d in s if d != 1 and d not in fixed}, reverse=True)
    return {d: max(odd, least) for d, odd in zip(distinct, ODD_SIZES)}


def shrunk_sizes(shapes, max_elements, fixed=(), least=1):
    # Halve the largest size (every dim of that size together, so equal sizes stay equal and
    # broadcasting and a matmul's K survive) until no tensor has more than max_elements, or no size
    # can shrink further: sizes in `fixed` (a pasted module's channels, its kernel's sizes) never
    # change, and none goes below `least` (a convolution's or pooling window's extent): old -> new.
    sizes = {d: d for s in shapes for d in s}
    while max(math.prod(sizes[d] for d in s) for s in shapes) > max_elements:
        movable = [d for d in sizes if d not in fixed and sizes[d] > max(least, 1)]
        if not movable:
            break
        largest = max(movable, key=sizes.get)
        sizes[largest] = max(least, math.ceil(sizes[largest] / 2))
    return sizes


def entry(spec: dict, file: str) -> str:
    """The name a file's callable goes by: the spec's name, or for reference.py a pasted nn.Module
    class (spec "reference_class"), which its worker builds once as Class(*get_init_inputs())."""
    return (spec.get("reference_class") or spec["name"]) if file == "reference.py" else spec["name"]


def init_scale(inputs, name, shapes):
    # The scale a learned weight is drawn at (spec "parameter": its path in the pasted module): its
    # layer's initial scale 1/sqrt(fan_in), fan_in its dims after the first as torch counts them, and
    # a bias its weight's. Standard normal weights would grow each layer's output by sqrt(fan_in)
    # until a deep module's float16 reference overflows or rounds to another answer. Derived from
    # the shapes and the module's own parameter paths, never from a number in the spec; copied
    # verbatim into the generated tests (bot.testgen), so both draw alike.
    paths = {i["parameter"]: i["name"] for i in inputs if i.get("parameter")}
    path = next((i.get("parameter") for i in inputs if i["name"] == name), None)
    if not path:
        return 1.0
    weight = paths.get(path[:-len("bias")] + "weight") if path.endswith("bias") else name
    shape = shapes.get(weight) if weight else None
    if not shape or len(shape) < 2:
        return 1.0
    return 1.0 / math.sqrt(math.prod(shape[1:]))


def accumulated_length(reduce, shapes):
    # How many elements each output accumulates over, from the spec's "reduce" and the inputs'
    # shapes by name: a chain's longest sum, else the named inputs' broadcast shape at its dim
    # (None: every element; a list: the product over those dims). Copied verbatim into the
    # generated tests (bot.testgen), so both sides size the tolerance alike.
    if reduce.get("lengths"):
        return max(reduce["lengths"])
    named = [list(shapes[n]) for n in reduce["inputs"]]
    rank = max(len(s) for s in named)
    shape = [max(s[i - rank + len(s)] if i - rank + len(s) >= 0 else 1 for s in named) for i in range(rank)]
    dim = reduce["dim"]
    if dim is None:
        return math.prod(shape)
    return math.prod(shape[d] for d in dim) if isinstance(dim, list) else shape[dim]


def size_rules(spec: dict) -> tuple[list[int], int]:
    """(fixed sizes, least size) of the spec (derived by bot.spec): what shrinking and the odd-sized
    case may not change, and the size no dim goes below."""
    return list(spec.get("fixed_sizes", [])), int(spec.get("least_size", 1))


def parameters(spec: dict) -> list[str]:
    """The pasted module's learned tensors the spec takes as its last inputs ("conv.weight"), in order:
    the judge makes them like any input, and binds them into the module it calls as the reference."""
    return [i["parameter"] for i in spec["inputs"] if i.get("parameter")]


def cases(spec: dict) -> list[Case]:
    inputs = spec["inputs"]
    n = len(inputs[0]["shapes"])
    return [Case(i, {inp["name"]: list(inp["shapes"][i]) for inp in inputs}) for i in range(n)]


def float_inputs(spec: dict) -> list[dict]:
    """The spec's inputs that hold float values (not class indices, not masks), in order: the output
    takes their dtype."""
    return [i for i in spec["inputs"] if _holds_floats(i)]


def grad_indices(spec: dict) -> list[int]:
    """The positions of the inputs a training kernel's backward gives gradients for: the float ones
    but those the spec marks "grad": false (class weights, which torch differentiates nowhere)."""
    return [k for k, i in enumerate(spec["inputs"]) if _holds_floats(i) and i.get("grad", True)]


def _holds_floats(inp: dict) -> bool:
    return inp.get("domain", "normal") not in NOT_FLOAT_DOMAINS


def dtype_variants(spec: dict) -> list[dict[str, str]]:
    """One dict (input name -> dtype) per dtype variant."""
    inputs = spec["inputs"]
    n = len(inputs[0]["dtypes"])
    return [{inp["name"]: canonical_dtype(inp["dtypes"][j]) for inp in inputs} for j in range(n)]


def variant_label(variant: dict[str, str]) -> str:
    """'float16' when all float inputs share it (int64 indices and bool masks aside), else 'x:float16,y:float32'."""
    floats = {k: v for k, v in variant.items() if v not in (INDEX_DTYPE, MASK_DTYPE)} or variant
    values = set(floats.values())
    if len(values) == 1:
        return values.pop()
    return ",".join(f"{k}:{v}" for k, v in floats.items())


def queue_name(backend: str) -> str:
    """Huey queue per backend, so a session's target picks the hosts that run it."""
    return f"kernelbot-{backend}"


# Keys in the queue's key-value store (works the same on SQLite and Redis).
def heartbeat_key(job_id: str) -> str:
    return f"hb:{job_id}"


def result_key(job_id: str) -> str:
    return f"result:{job_id}"


def runner_key(backend: str, runner: str) -> str:
    """One runner's presence (runner: its id, host/gpuN or host/pidN), under its backend."""
    return f"runner:{backend}:{runner}"


RUNNERS_KEY = "runners"     # the backend's runner ids, whose presences a status reads


# Per-dtype tolerances (FlagGems' rtol). atol grows with sqrt(reduced length):
# the rounding error of a sum grows like a random walk over its terms.
RTOL: dict[str, float] = {"float16": 1e-3, "bfloat16": 1.6e-2, "float32": 1.3e-6}
ATOL: dict[str, float] = {"float16": 1e-4, "bfloat16": 1e-3, "float32": 1e-6}
# A float32 matmul that allows TF32 rounds its inputs to 10 mantissa bits: per product an error
# of ~2**-11, which a K-long sum of unit-variance products turns into ~sqrt(K) * 2**-11 * 0.6.
TF32_TOL: tuple[float, float] = (1e-3, 2e-3)
# An erf in float32 (torch's on CPU and GPU, libdevice's, the kernels' own) is within a few units in
# the last place of 1: GELU's 0.5 * x * (1 + erf(x / sqrt 2)) keeps that error, times |x| / 2, once
# 1 + erf cancels for x << 0 (torch's float32 gelu on 4096x4096 was 2.7 units off there).
ERF_ULPS = 4.0


def tolerance(dtype: str, reduce_len: int = 1, tf32: bool = False, matmul: bool = False,
              scan: bool = False) -> tuple[float, float]:
    """(rtol, atol) for comparing an output of this dtype against a float64 reference.

    atol grows with sqrt(reduce_len): rounding errors of a sum's terms add up like a random walk.
    A float32 matmul's partial sums themselves grow like sqrt(k), and each addition rounds at
    that size, so its error grows like K: visible only when the output keeps float32 precision
    (float16 and bfloat16 outputs round far more coarsely than that). A scan (cumsum) is the same
    walk with every partial sum an output, so it grows the same way."""
    rtol, atol = TF32_TOL if tf32 and dtype == "float32" else (RTOL[dtype], ATOL[dtype])
    growth = reduce_len if (matmul or scan) and dtype == "float32" and not tf32 else reduce_len ** 0.5
    return rtol, atol * max(1, growth)


def check_backend(name: str) -> str:
    """A backend is 'cpu' or 'cuda', optionally with a host class after a dash ('cuda-h200'):
    runners subscribe to its queue, so a session's target picks the hosts that run it."""
    if not re.fullmatch(r"(cpu|cuda)(-[a-z0-9_]+)?", name or ""):
        raise ValueError(f"backend {name!r} is not 'cpu', 'cuda' or 'cuda-NAME' (e.g. cuda-h200)")
    return name


# Said wherever a cpu backend's numbers are shown (result summary, report, chart).
CPU_TIMING_NOTE = ("cpu backend (Triton's interpreter): it checks correctness only; its timings say nothing "
                   "about GPU speed")


def device_type(backend: str) -> str:
    """Where a backend runs kernels: 'cpu' (Triton's interpreter) or 'cuda' (for 'cuda', 'cuda-h200', ...)."""
    return "cpu" if backend.split("-")[0] == "cpu" else "cuda"


def benchmarks_compile(device_type: str) -> bool:
    """Whether benchmarks on this device type time torch.compile: always on a GPU; on cpu only where
    the runner has KERNELBOT_CPU_COMPILE=1 (Inductor's C++ build takes minutes there)."""
    return device_type != "cpu" or os.environ.get("KERNELBOT_CPU_COMPILE") == "1"


# Tuning (issue 6). A generated kernel.py may carry a config space and the winners per case:
#   CONFIGS = [{"BLOCK_M": 128, ..., "num_warps": 8, "num_stages": 3}, ...]
#   TUNED = {tuning_key(inputs): config, ...}      # filled in by the benchmark's export
#   def NAME(*inputs, *, config=None)              # None: TUNED, else the launcher's default
# The generated file carries a verbatim copy of tuning_key, so both sides key cases alike.
LEAN_LAUNCH_MARKER = "# ---- copied into kernel.py from here\n"


@functools.cache
def lean_launch_source() -> str:
    """The lean launch block every kernel.py carries, exactly: runner/lean_launch.py below its marker
    (the generator copies it, the integrity check accepts nothing else under its names)."""
    text = Path(__file__).with_name("lean_launch.py").read_text()
    return text[text.index(LEAN_LAUNCH_MARKER) + len(LEAN_LAUNCH_MARKER):]


MAX_CONFIGS = 32


def tuning_key(tensors):
    # "4096x4096:float16|4096:float16": every input's shape and dtype, in order.
    return "|".join("x".join(map(str, t.shape)) + ":" + str(t.dtype).removeprefix("torch.") for t in tensors)


def config_label(config: dict) -> str:
    """A config in a few characters for tables and charts: 'BLOCK_M=128 BLOCK_N=64 w8 s3'."""
    short = {"num_warps": "w", "num_stages": "s"}
    return " ".join(f"{short[k]}{v}" if k in short else f"{k}={v}" for k, v in config.items())
