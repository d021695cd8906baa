"""Lowering of the operator IR to Triton: the kernel (stage 4).

A pointwise expression becomes one flat kernel over the output's elements. A row op
(sum/mean/max/min, softmax/log_softmax, layernorm/rmsnorm over the last dim, each of
a pointwise prologue) becomes a kernel over tiles of whole rows, plus a looped twin
for rows longer than one tile. Everything is computed in float32 and cast to the
output dtype (the first input's) on store; the launcher has the reference's signature
plus a keyword-only config, one of the small space (CONFIGS) the benchmark stage sweeps.

The launchers' small Python helpers (block choice, broadcast layout, input checks)
are defined here as real functions, used here to check the spec's cases, and copied
into kernel.py with inspect.getsource, so generator and kernel agree by construction.
This module imports neither torch nor triton: a bot-only host can run it.
"""
from __future__ import annotations

import inspect
import json
import math
import re
from dataclasses import dataclass

from bot import ir
from bot.lower_torch import (ExprWriter, OpWriter, call_writer, doc_text, fmt_const, fold_constants, local_names,
                             plain_text)
from runner import protocol

NEG_INF, POS_INF = 'float("-inf")', 'float("inf")'
WARPS = (1, 2, 4, 8, 16, 32)

# The config spaces the benchmark stage sweeps on each case (docs/CONTRACTS.md, tuning contract).
# Pointwise: block size x warps; the default (_pointwise_config) is one of them.
POINTWISE_CONFIGS = [{"BLOCK": block, "num_warps": warps} for block in (1024, 2048, 4096) for warps in (4, 8)]
# Row ops, after the default's pick for each of the spec's cases: one row per program with 4, 8
# or 16 warps, or two rows of 8K (BLOCK_N is the tile's width in elements: 16384 holds two);
# rows longer than 4096, 2048 or 1024 read in chunks (1K chunks won on rows of 6007 elements,
# which are not 16-byte aligned in fp16); short rows stacked into tiles of
# up to 1K or 4K elements (see _row_tile for how a config fits a shape).
ROW_CONFIGS = [
    {"BLOCK_M": 1, "BLOCK_N": 8192, "num_warps": 4},
    {"BLOCK_M": 1, "BLOCK_N": 8192, "num_warps": 8},
    {"BLOCK_M": 1, "BLOCK_N": 8192, "num_warps": 16},
    {"BLOCK_M": 2, "BLOCK_N": 16384, "num_warps": 8},
    {"BLOCK_M": 1, "BLOCK_N": 4096, "num_warps": 8},
    {"BLOCK_M": 1, "BLOCK_N": 1024, "num_warps": 4},
    {"BLOCK_M": 1, "BLOCK_N": 2048, "num_warps": 4},
    {"BLOCK_M": 16, "BLOCK_N": 1024, "num_warps": 4},
    {"BLOCK_M": 64, "BLOCK_N": 4096, "num_warps": 8},
]

# Names generated kernel.py uses itself; an input with one of these names is renamed there.
RESERVED = {  # plus dim1.. in broadcast kernels
    "torch", "triton", "tl", "math", "block_start", "offs", "n_elements", "mask", "shape", "out", "out_ptr",
    "grid", "dims", "idx", "INT32_INDEX", "BLOCK", "num_warps", "kernel", "rows", "cols", "R", "N", "val", "res", "row_max",
    "row_sum", "new_max", "acc", "result", "mean", "m2", "count", "n_chunk", "chunk_mean", "dev", "delta",
    "total", "rstd", "BLOCK_M", "BLOCK_N", "_body", "_tanh", "_gelu", "_gelu_tanh", "_silu", "_powi", "_max_nan",
    "_min_nan", "_broadcast_offsets",
    "_pointwise_config", "_row_config", "_row_tile", "_broadcast_layout", "_expanded_strides", "_require_full",
    "_row_strides", "CONFIGS", "TUNED", "tuning_key", "config", "_erf",
    "row", "base", "end", "lo", "hi", "i", "lane", "edge", "ALIGN",     # the aligned row kernel
    "NV", "TAIL",     # the norms' weights in whole vectors
}


# ---------------------------------------------------------------- launcher helpers (copied into kernel.py)

def _pointwise_config(n):
    # The default config for n outputs, as measured on an H200: 1024-element blocks; 8 warps
    # while the grid is about one wave (more loads in flight per SM), 4 once there are many
    # blocks (as fast for plain reads, and faster where broadcast index math costs registers).
    # A 160x1024 output thus spreads over 160 programs.
    return {"BLOCK": 1024, "num_warps": 4 if n >= 1 << 22 else 8}


def _row_config(rows, n):
    # The default config for `rows` rows of n: a row up to 8192 long is one tile (one read); a
    # longer one goes through the looped kernel in 8192-wide chunks. Short rows are stacked
    # BLOCK_M to a tile of ~1K elements while at least ~256 programs remain (the 132 SMs of an
    # H200 twice over): on an H200 that beat bigger tiles for e.g. 5333 rows of 497. Warps grow
    # with the tile.
    block_n = min(max(16, 1 << (n - 1).bit_length()), 8192)
    block_m = 1
    while block_m * block_n < 1024 and rows >= 2 * block_m * 256:
        block_m *= 2
    tile = block_m * block_n
    return {"BLOCK_M": block_m, "BLOCK_N": 8192, "num_warps": 4 if tile <= 1024 else 8 if tile <= 4096 else 16}


def _row_tile(rows, n, config):
    # (BLOCK_M, BLOCK_N, num_warps) of a config fitted to `rows` rows of n. The config's BLOCK_N is
    # the widest tile in elements: a row up to that long is one tile, a longer one is read in
    # BLOCK_N-wide chunks; up to BLOCK_M rows share a tile while it stays that small and there
    # are rows to fill it. So every config runs correctly on every shape.
    block_n = min(max(16, 1 << (n - 1).bit_length()), config["BLOCK_N"])
    block_m = min(config["BLOCK_M"], config["BLOCK_N"] // block_n, 1 << max(0, rows - 1).bit_length())
    return max(1, block_m), block_n, config["num_warps"]


def _expanded_strides(shape_in, shape):
    # Element strides of a contiguous tensor of shape_in broadcast to shape (0 where broadcast).
    strides, step = [0] * len(shape), 1
    for i in range(1, len(shape_in) + 1):
        if shape_in[-i] != 1:
            strides[-i] = step
        step *= shape_in[-i]
    return strides


def _broadcast_layout(shape, shapes, rank=None):
    # Output dims and each input's strides over them (0 where broadcast). Neighbouring dims that
    # every input steps through contiguously are merged: fewer dims, fewer divisions per element.
    # Padded with leading size-1 dims to `rank`, the number of dims the kernel was generated for.
    strides = [_expanded_strides(s, shape) for s in shapes]
    dims, merged = [], [[] for _ in shapes]
    for d in reversed(range(len(shape))):
        if shape[d] == 1:
            continue
        if dims and all(st[d] == m[0] * dims[0] for st, m in zip(strides, merged)):
            dims[0] *= shape[d]
            continue
        dims.insert(0, shape[d])
        for st, m in zip(strides, merged):
            m.insert(0, st[d])
    if rank is None:
        return dims, merged
    if len(dims) > rank:
        raise ValueError(f"inputs of shapes {[list(s) for s in shapes]} broadcast over {len(dims)} separate dims of "
                         f"{list(shape)}; this kernel was generated for at most {rank}: regenerate it for these shapes")
    pad = rank - len(dims)
    return [1] * pad + dims, [[0] * pad + m for m in merged]


def _require_full(name, shape, full):
    # The kernel reads this input at the output's own offsets: it must hold every output element.
    if math.prod(shape) != math.prod(full):
        raise ValueError(f"input {name} has shape {list(shape)}, but this kernel was generated for the full "
                         f"shape {list(full)}; regenerate it for these shapes")


def _row_strides(name, shape, full):
    # (row stride, column stride) a row kernel reads an input with against rows of `full` ([..., N]):
    # the whole tensor (N, 1), one vector shared by all rows (0, 1), one value per row (1, 0),
    # or a single value (0, 0). Other broadcasts would need per-dim index math: refused.
    shape = [1] * (len(full) - len(shape)) + list(shape)
    if shape == list(full):
        return full[-1], 1
    if all(d == 1 for d in shape[:-1]) and shape[-1] == full[-1]:
        return 0, 1
    if shape[-1] == 1 and shape[:-1] == list(full[:-1]):
        return 1, 0
    if all(d == 1 for d in shape):
        return 0, 0
    raise ValueError(f"input {name} has shape {list(shape)}; a row op over the last dim of {list(full)} reads each "
                     f"input as the full {list(full)}, a last-dim vector [{full[-1]}], one value per row "
                     f"{list(full[:-1]) + [1]} or a single value [1]")


def tuning_source(configs: list[dict]) -> str:
    """The tuning block of kernel.py (docs/CONTRACTS.md): the config space, the winners per case
    (empty until the benchmark's export fills it in) and the key both are looked up by."""
    if not 1 <= len(configs) <= protocol.MAX_CONFIGS:
        raise ValueError(f"a kernel carries 1 to {protocol.MAX_CONFIGS} configs, got {len(configs)}")
    lines = "".join(f"    {json.dumps(config)},\n" for config in configs)
    return ("# The configs the benchmark stage tries on each case (block sizes, warps, stages).\n"
            f"CONFIGS = [\n{lines}]\n"
            "# tuning_key(inputs) -> the config that won on the runner's GPU; the export fills it in.\n"
            "TUNED = {}\n\n\n" + inspect.getsource(protocol.tuning_key))


# ---------------------------------------------------------------- float32 math helpers (emitted when used)

_HELPERS = {
    "_tanh": ('''
@triton.jit
def _tanh(x):
    # tanh from exp (libdevice's is not available everywhere); exp(-2|x|) never overflows.
    t = tl.exp(-2.0 * tl.abs(x))
    y = (1.0 - t) / (1.0 + t)
    return tl.where(x < 0, -y, y)
''', ()),
    "_erf": ('''
@triton.jit
def _erf(x):
    # Eigen's fast float erf: a rational function on [-4, 4] (erf there is +-1 in float32), within
    # 4.4e-7 of erf. Half libdevice's operations: a matmul epilogue's GELU runs 10% faster on an H200.
    x = tl.minimum(tl.maximum(x, -4.0), 4.0)
    x2 = x * x
    p = x2 * -2.72614225801306e-10 + 2.77068142495902e-08
    p = x2 * p + -2.10102402082508e-06
    p = x2 * p + -5.69250639462346e-05
    p = x2 * p + -7.34990630326855e-04
    p = x2 * p + -2.95459980854025e-03
    p = x2 * p + -1.60960333262415e-02
    q = x2 * -1.45660718464996e-05 + -2.13374055278905e-04
    q = x2 * q + -1.68282697438203e-03
    q = x2 * q + -7.37332916720468e-03
    q = x2 * q + -1.42647390514189e-02
    return x * p / q
''', ()),
    "_gelu": ('''
@triton.jit
def _gelu(x):
    return 0.5 * x * (1.0 + _erf(x * 0.7071067811865476))
''', ("_erf",)),
    "_gelu_tanh": ('''
@triton.jit
def _gelu_tanh(x):
    return 0.5 * x * (1.0 + _tanh(0.7978845608028654 * (x + 0.044715 * x * x * x)))
''', ("_tanh",)),
    "_silu": ('''
@triton.jit
def _silu(x):
    return x * tl.sigmoid(x)
''', ()),
    "_max_nan": ('''
@triton.jit
def _max_nan(a, b):
    # torch's max: NaN wins (on the GPU one max.NaN instruction, as cheap as a plain max).
    return tl.maximum(a, b, propagate_nan=tl.PropagateNan.ALL)
''', ()),
    "_min_nan": ('''
@triton.jit
def _min_nan(a, b):
    # torch's min: NaN wins.
    return tl.minimum(a, b, propagate_nan=tl.PropagateNan.ALL)
''', ()),
    "_powi": ('''
@triton.jit
def _powi(x, E: tl.constexpr):
    # x ** E for an integer E >= 1 by repeated multiplication (exact sign for negative x).
    y = x
    for _ in tl.static_range(E - 1):
        y = y * x
    return y
''', ()),
}


def _wrap(head: str, args: list[str], indent: str) -> str:
    """`head(args)` on one line when it fits in 100 columns, else with the args wrapped below."""
    line = f"{indent}{head}({', '.join(args)})"
    if len(line) <= 100:
        return line
    lines, current = [], indent + "    "
    for arg in args:
        if len(current) + len(arg) + 2 > 100 and current.strip():
            lines.append(current.rstrip())
            current = indent + "    "
        current += arg + ", "
    return "\n".join([f"{indent}{head}(", *lines, current.rstrip(), f"{indent})"])


def jit_source(name: str, params: list[str], lines: list[str], comment: str = "") -> str:
    """A @triton.jit function: its signature, a comment block (lines ending in newlines), the body."""
    return (f"@triton.jit\n{_wrap(f'def {name}', params, '')}:\n{comment}"
            + "".join(f"    {line}\n" for line in lines))


def refuse_empty_dim(op: str, size: str, dim: str) -> str:
    """Launcher lines: max/min/argmax/argmin over a dim of `size` 0 raise as torch does, where a
    launch would answer -inf or a made-up index. dim: the launcher's expression for the dim."""
    return (f"    if {size} == 0:\n"
            f'        raise IndexError(f"{op} over dim {{{dim}}} of shape {{tuple(shape)}}, which is empty: torch '
            'refuses that too")\n')


def aligned_span(block: str, n: str) -> list[str]:
    """An aligned kernel's first lines: one row of n elements per program (`block`, its tile's row
    count, is 1), the row's flat span [base, end), and its first and last ALIGN-element (16-byte)
    boundaries lo and hi. Chunk i of the body [lo, hi) is `aligned_chunk`; the head and the tail
    outside it (each under ALIGN elements) share one edge tile, `EDGE_LINES`."""
    return ["row = tl.program_id(0).to(tl.int64)",
            f"rows = row + tl.arange(0, {block})[:, None]     # {block} is 1",
            f"base = row * {n}",
            f"end = base + {n}",
            "# The first and the last ALIGN-element (16-byte) boundaries inside the row.",
            "lo = tl.multiple_of((base + ALIGN - 1) // ALIGN * ALIGN, ALIGN)",
            "hi = tl.multiple_of(end // ALIGN * ALIGN, ALIGN)"]


def aligned_chunk(block: str) -> tuple[str, str]:
    """(offs, mask) of chunk i of an aligned row's body: whole 16-byte vectors."""
    return f"lo + i * {block} + tl.arange(0, {block})[None, :]", "offs < hi"


EDGE_LINES = ["# The edge tile: the head [base, lo) in its first ALIGN lanes, the tail [hi, end) in the next.",
              "lane = tl.arange(0, 2 * ALIGN)[None, :]",
              "offs = tl.where(lane < ALIGN, base + lane, hi + lane - ALIGN)",
              "mask = tl.where(lane < ALIGN, offs < lo, offs < end)"]


def align_elements(inputs: list[_Input]) -> str:
    """Launcher line: ALIGN, the elements in 16 bytes of the narrowest input."""
    sizes = [f"{i.local}.element_size()" for i in inputs]
    narrowest = sizes[0] if len(sizes) == 1 else f"min({', '.join(sizes)})"
    return f"    ALIGN = 16 // {narrowest}     # elements per 16 bytes of the narrowest input\n"


def sm_count_line(target: str, like: str, indent: str = "    ") -> str:
    """A launcher line setting target to the SM count of the GPU tensor `like` is on (4 on the CPU
    interpreter): what persistent kernels size their grids by."""
    return (f"{indent}{target} = torch.cuda.get_device_properties({like}.device).multi_processor_count "
            f"if {like}.is_cuda else 4\n")


def _triton_pow(node: ir.Node, a: list[str]) -> str:
    e = node.attr("exponent")
    if e == 0:
        return f"({a[0]} * 0.0 + 1.0)"
    if e == 0.5:
        return f"tl.sqrt({a[0]})"
    if e == -0.5:
        return f"tl.rsqrt({a[0]})"
    if e == int(e):
        power = f"_powi({a[0]}, {abs(int(e))})"
        return power if e > 0 else f"(1.0 / {power})"
    return f"tl.exp2({fmt_const(e)} * tl.log2({a[0]}))"    # fractional: domain is positive


# tl.maximum/minimum drop NaN by default; torch's maximum, minimum, relu, clamp and max/min keep it.
NAN_WINS = "propagate_nan=tl.PropagateNan.ALL"


def _triton_clamp(node: ir.Node, a: list[str]) -> str:
    text = a[0]
    if node.attr("min") is not None:
        text = f"tl.maximum({text}, {fmt_const(node.attr('min'))}, {NAN_WINS})"
    if node.attr("max") is not None:
        text = f"tl.minimum({text}, {fmt_const(node.attr('max'))}, {NAN_WINS})"
    return text


# What sum/mean/max/min start from, and masked lanes hold: they change no result.
REDUCE_FILL = {"sum": "0.0", "mean": "0.0", "max": NEG_INF, "min": POS_INF}


def reduce_call(op: str, x: str, axis: int, keep_dims: bool = False) -> str:
    """Triton for sum/mean/max/min of x over axis (mean is left to divide); max/min keep NaN."""
    keep = ", keep_dims=True" if keep_dims else ""
    if op in ("sum", "mean"):
        return f"tl.sum({x}, axis={axis}{keep})"
    return f"tl.reduce({x}, {axis}, _{op}_nan{keep})"


def fold_line(op: str, x: str) -> str:
    """acc folded with x for sum/mean/max/min; max/min keep NaN."""
    if op in ("sum", "mean"):
        return f"acc += {x}"
    return f"acc = tl.{op}imum(acc, {x}, {NAN_WINS})"


TRITON_OPS: dict[str, OpWriter] = {
    **{op: call_writer(f"tl.{op}") for op in ("abs", "exp", "log", "sqrt", "rsqrt", "sigmoid", "where")},
    "maximum": lambda node, a: f"tl.maximum({a[0]}, {a[1]}, {NAN_WINS})",
    "minimum": lambda node, a: f"tl.minimum({a[0]}, {a[1]}, {NAN_WINS})",
    "tanh": call_writer("_tanh"),
    "silu": call_writer("_silu"),
    "relu": lambda node, a: f"tl.maximum({a[0]}, 0.0, {NAN_WINS})",
    "gelu": lambda node, a: f"_gelu_tanh({a[0]})" if node.attr("approximate") == "tanh" else f"_gelu({a[0]})",
    "pow": _triton_pow,
    "clamp": _triton_clamp,
}


# ---------------------------------------------------------------- options

def parse_options(feedback: list[str]) -> dict:
    """Knobs a reviewer can ask for in words: 'block size 2048', 'BLOCK=4096', 'num_warps 8',
    '8 warps'. The latest mention wins."""
    options: dict[str, int] = {}
    patterns = {
        "block": r"\bblock(?:[ _-]?size)?\s*(?:=|:|to|of|is)?\s*(\d+)",
        "num_warps": r"\bnum[ _-]?warps\s*(?:=|:|to|of|is)?\s*(\d+)|\b(\d+)\s+warps\b",
    }
    for text in feedback:
        for key, pattern in patterns.items():
            for match in re.finditer(pattern, text, re.IGNORECASE):
                options[key] = int(next(g for g in match.groups() if g))
    return options


def _check_options(options: dict) -> None:
    block, warps = options.get("block"), options.get("num_warps")
    if block is not None and (block < 16 or block > 65536 or block & (block - 1)):
        raise ValueError(f"block size must be a power of two from 16 to 65536 (Triton tiles are), got {block}")
    if warps is not None and warps not in WARPS:
        raise ValueError(f"num_warps must be one of {', '.join(map(str, WARPS))}, got {warps}")


# ---------------------------------------------------------------- kernel.py

@dataclass
class _Input:
    name: str           # as in the spec (and the launcher's signature)
    local: str          # variable name in kernel.py
    shapes: list[list[int]]


def kernel_source(spec: dict, node: ir.Node, options: dict | None = None) -> str:
    """kernel.py: @triton.jit kernel(s), the tuning block (CONFIGS, TUNED, tuning_key) and a
    launcher `def <spec name>(<inputs>, *, config=None)` with the reference's signature that
    allocates the output (torch.empty) and launches with the given config, else the one tuned
    for the inputs, else one chosen from the sizes. options may carry {"block": int,
    "num_warps": int} from a reviewer's correction: the default and every config keep them."""
    options, inputs = kernel_inputs(spec, options, RESERVED)
    if node.op in ir.ROW_OPS:
        return _RowKernel(spec, node, inputs, options).source()
    return _PointwiseKernel(spec, node, inputs, options).source()


def kernel_inputs(spec: dict, options: dict | None, reserved: set[str]) -> tuple[dict, list[_Input]]:
    """What every lowering starts from: the reviewer's options checked, and the spec's inputs
    with the local names kernel.py gives them (renamed where they clash with `reserved`)."""
    options = dict(options or {})
    _check_options(options)
    if spec["name"] in reserved:
        raise ValueError(f"operator name {spec['name']!r} clashes with a name kernel.py uses; rename the operator")
    locals_ = local_names([i["name"] for i in spec["inputs"]], reserved)
    return options, [_Input(i["name"], locals_[i["name"]], i["shapes"]) for i in spec["inputs"]]


class _KernelFile:
    """What pointwise and row kernels share: the body helper, math helpers, tuning, file layout."""

    description: str
    block_key: str          # the config key a reviewer's 'block size N' sets
    imports = ""            # import lines the file adds to torch's and triton's

    def __init__(self, spec: dict, body: ir.Node, inputs: list[_Input], body_inputs: list[_Input], options: dict):
        self.spec, self.name, self.inputs, self.options = spec, spec["name"], inputs, options
        self.body_inputs = body_inputs
        names = {i.name: i.local for i in body_inputs}
        writer = ExprWriter(TRITON_OPS, names, as_number="to(tl.float32)", taken=RESERVED)
        expr = writer.write(fold_constants(body))
        self.body_lines, self.body_expr = writer.lines, expr
        self.is_bare_input = body.op == "input"
        self.body_text = doc_text(plain_text(body))

    def body_call(self) -> str:
        """The float32 body on the loaded inputs: a call of the _body helper, or the input itself."""
        if self.is_bare_input:
            return self.body_expr
        return f"_body({', '.join(i.local for i in self.body_inputs)})"

    def body_values(self, offs: str, fill: str) -> list[str]:
        """Load every body input at offs (lanes where `mask`) and compute val, the body's values,
        fill in masked lanes. A bare input loads its masked lanes as the fill: no select."""
        if self.is_bare_input:
            return [f"val = tl.load({self.body_inputs[0].local}_ptr + {offs}, mask=mask, other={fill}).to(tl.float32)"]
        loads = [f"{i.local} = tl.load({i.local}_ptr + {offs}, mask=mask, other=0.0).to(tl.float32)"
                 for i in self.body_inputs]
        return loads + [f"val = tl.where(mask, {self.body_call()}, {fill})"]

    def _body_helper(self) -> list[str]:
        if self.is_bare_input:
            return []
        return [jit_source("_body", [i.local for i in self.body_inputs], [*self.body_lines, f"return {self.body_expr}"],
                           f"    # {self.body_text} in float32\n")]

    def _math_helpers(self, kernels: list[str]) -> list[str]:
        text = " ".join(self.body_lines + [self.body_expr] + kernels)
        used = [h for h in _HELPERS if re.search(rf"\b{h}\b", text)]
        return [_HELPERS[h][0] for h in _HELPERS if h in used or any(h in _HELPERS[u][1] for u in used)]

    def pins(self) -> dict[str, int]:
        """Config values a reviewer asked for: the default and every config in CONFIGS keep them."""
        keys = {"block": self.block_key, "num_warps": "num_warps"}
        return {keys[k]: v for k, v in self.options.items() if k in keys}

    def _space(self, candidates: list[dict], fitted=lambda config: config) -> list[dict]:
        """CONFIGS: the candidates with the reviewer's pins, dropping any that fit every case of
        the spec as an earlier one does (`fitted`: what a config becomes on the cases)."""
        seen, space = [], []
        for config in ({**c, **self.pins()} for c in candidates):
            if fitted(config) not in seen:
                seen.append(fitted(config))
                space.append(config)
        return space[:protocol.MAX_CONFIGS]

    def _config_line(self, default: str) -> str:
        """The launcher's choice of config; `default` is the heuristic's call."""
        pins = self.pins()
        lines = "    # The caller's config, else the one tuned for these inputs, else the default.\n"
        if pins:
            asked = ", ".join(f'"{k}": {v}' for k, v in pins.items())
            default = f"{{**{default}, {asked}}}"
            lines += "    # Asked for in review: the default and every config in CONFIGS keep it.\n"
        names = ", ".join(i.local for i in self.inputs) + ("," if len(self.inputs) == 1 else "")
        return lines + f"    config = config or TUNED.get(tuning_key(({names}))) or {default}\n"

    def _file(self, kernels: list[str], py_helpers: list, launcher: str) -> str:
        head = (f'"""Triton kernel for {self.name}: {doc_text(self.spec.get("description") or self.spec["expression"])}.\n\n'
                f"Generated by kernelbot from `{doc_text(self.spec['expression'])}`.\n{self.description}\n"
                'Math in float32; the output has the first input\'s dtype."""\n'
                "import math\n\nimport torch\nimport triton\nimport triton.language as tl\n" + self.imports)
        blocks = [head, tuning_source(self.configs()), *self._math_helpers(kernels), *self._body_helper(), *kernels,
                  *(inspect.getsource(f) for f in py_helpers), launcher]
        return "\n\n".join(block.strip("\n") + "\n" for block in blocks if block)

    def _signature_and_prologue(self) -> str:
        # config is keyword-only: the positional parameters are the reference's, all tensors.
        head = (f"def {self.name}({', '.join(i.local for i in self.inputs)}, *, config=None):\n"
                "    # The kernels index contiguous memory; inputs may arrive as views.\n")
        return head + "".join(f"    {i.local} = {i.local}.contiguous()\n" for i in self.inputs)


class _PointwiseKernel(_KernelFile):
    description = ("One program per BLOCK outputs of the flattened output. Full blocks load and store without a\n"
                   "mask (vectorized whatever the size); only the last, partial block is masked.")
    block_key = "BLOCK"

    def __init__(self, spec, node, inputs, options):
        super().__init__(spec, node, inputs, inputs, options)
        out_shapes = spec["outputs"][0]["shapes"]
        # Inputs with every output element in every case are read at the flat offset (the fast
        # path); the others get a constexpr flag and broadcast strides, decided at launch.
        self.broadcast = [i for i in inputs if any(math.prod(s) != math.prod(o) for s, o in zip(i.shapes, out_shapes))]
        self.rank = max([1] + [len(_broadcast_layout(o, [i.shapes[c] for i in self.broadcast])[0])
                               for c, o in enumerate(out_shapes)])

    def configs(self) -> list[dict]:
        return self._space(POINTWISE_CONFIGS)

    def source(self) -> str:
        helpers = [_pointwise_config, _require_full] + ([_expanded_strides, _broadcast_layout] if self.broadcast else [])
        return self._file([self._offsets_helper(), self._kernel()], helpers, self._launcher())

    def _offsets_helper(self) -> str:
        if not self.broadcast:
            return ""
        r = self.rank
        lines = []
        for k in range(r - 1, 0, -1):
            lines += [f"off {'=' if k == r - 1 else '+='} (i % dim{k}) * s{k}", f"i = i // dim{k}"]
        lines.append("return off + i * s0" if r > 1 else "return i * s0")
        params = ["i"] + [f"dim{k}" for k in range(1, r)] + [f"s{k}" for k in range(r)]
        comment = ("    # Offset into a broadcast input of output element i: split i into one index per output\n"
                   "    # dim and weight each by the input's stride there (0 where it is broadcast).\n")
        return jit_source("_broadcast_offsets", params, lines, comment)

    def _kernel(self) -> str:
        r = self.rank
        params = [f"{i.local}_ptr" for i in self.inputs] + ["out_ptr", "n_elements"]
        if self.broadcast:
            params += [f"dim{k}" for k in range(1, r)]
            params += [f"{i.local}_s{k}" for i in self.broadcast for k in range(r)]
            params += [f"{i.local}_full: tl.constexpr" for i in self.broadcast] + ["INT32_INDEX: tl.constexpr"]
        params.append("BLOCK: tl.constexpr")
        lines = ["# int64 offsets: more than 2**31 elements are safe.",
                 "block_start = tl.program_id(0).to(tl.int64) * BLOCK",
                 "offs = block_start + tl.arange(0, BLOCK)"]
        if self.broadcast:
            lines += ["# Broadcast index math in int32 when the output allows: int64 division is much slower.",
                      "if INT32_INDEX:", "    idx = offs.to(tl.int32)", "else:", "    idx = offs"]
        for i in self.broadcast:
            args = ", ".join(["idx"] + [f"dim{k}" for k in range(1, r)] + [f"{i.local}_s{k}" for k in range(r)])
            lines += [f"if {i.local}_full:", f"    {i.local}_offs = offs",
                      "else:", f"    {i.local}_offs = _broadcast_offsets({args})"]
        lines += ["if block_start + BLOCK <= n_elements:",
                  "    # A full block: no mask, so loads and stores vectorize even when n_elements is odd."]
        lines += ["    " + line for line in self._load_compute_store(masked=False)]
        lines += ["else:", "    # The one partial block at the end.", "    mask = offs < n_elements"]
        lines += ["    " + line for line in self._load_compute_store(masked=True)]
        return jit_source(f"{self.name}_kernel", params, lines)

    def _load_compute_store(self, masked: bool) -> list[str]:
        mask = ", mask=mask" if masked else ""
        lines = []
        for i in self.inputs:
            offs = f"{i.local}_offs" if i in self.broadcast else "offs"
            lines.append(f"{i.local} = tl.load({i.local}_ptr + {offs}{mask}).to(tl.float32)")
        lines.append(f"tl.store(out_ptr + offs, {self.body_call()}.to(out_ptr.dtype.element_ty){mask})")
        return lines

    def _launcher(self) -> str:
        first = self.inputs[0].local
        shapes = ", ".join(f"{i.local}.shape" for i in self.inputs)
        text = self._signature_and_prologue()
        text += f"    shape = torch.broadcast_shapes({shapes})\n"
        text += "".join(f'    _require_full("{i.name}", {i.local}.shape, shape)\n'
                        for i in self.inputs if i not in self.broadcast)
        args = [i.local for i in self.inputs] + ["out", "n_elements"]
        if self.broadcast:
            strides = ", ".join(f"{i.local}_strides" for i in self.broadcast)
            text += (f"    dims, ({strides},) = _broadcast_layout(shape, [{', '.join(f'{i.local}.shape' for i in self.broadcast)}], "
                     f"rank={self.rank})\n")
            args += ["*dims[1:]"] + [f"*{i.local}_strides" for i in self.broadcast]
            args += [f"{i.local}_full={i.local}.numel() == n_elements" for i in self.broadcast]
            args.append("INT32_INDEX=n_elements < 2**31")
        text += f"    out = torch.empty(shape, dtype={first}.dtype, device={first}.device)\n"
        text += "    n_elements = out.numel()\n"
        text += self._config_line("_pointwise_config(n_elements)")
        text += '    BLOCK, num_warps = config["BLOCK"], config["num_warps"]\n'
        text += "    grid = (triton.cdiv(n_elements, BLOCK),)\n"
        text += _wrap(f"{self.name}_kernel[grid]", args + ["BLOCK=BLOCK", "num_warps=num_warps"], "    ") + "\n"
        return text + "    return out\n"


@dataclass
class _RowPlan:
    """How one row op is computed from the tile `val` of body values (masked lanes hold fill)."""
    fill: str
    single: list[str]           # statistics from a tile holding whole rows
    init: list[str]             # looped: before the first pass over the chunks
    chunk: list[str]            # looped: fold one chunk into the statistics
    final: list[str]            # looped: after the first pass
    output: str                 # per element (softmax, norms) or per row ("result", reductions)


def _row_plan(node: ir.Node, weight: str | None, bias: str | None) -> _RowPlan:
    op = node.op
    if op in ir.REDUCE:
        fill = REDUCE_FILL[op]
        scale = " / N" if op == "mean" else ""
        return _RowPlan(fill, [f"result = {reduce_call(op, 'val', 1)}{scale}"],
                        [f"acc = tl.full([BLOCK_M, BLOCK_N], {fill}, tl.float32)"], [fold_line(op, "val")],
                        [f"result = {reduce_call(op, 'acc', 1)}{scale}"], "result")
    if op in ir.ROW_PRESERVING:
        output = ("tl.exp(val - row_max[:, None]) / row_sum[:, None]" if op == "softmax"
                  else "val - row_max[:, None] - tl.log(row_sum)[:, None]")
        return _RowPlan(NEG_INF, ["row_max = tl.max(val, axis=1)", "row_sum = tl.sum(tl.exp(val - row_max[:, None]), axis=1)"],
                        [f"row_max = tl.full([BLOCK_M], {NEG_INF}, tl.float32)", "row_sum = tl.zeros([BLOCK_M], tl.float32)"],
                        ["# online softmax: rescale the running sum to the new running max",
                         "new_max = tl.maximum(row_max, tl.max(val, axis=1))",
                         "row_sum = row_sum * tl.exp(row_max - new_max) + tl.sum(tl.exp(val - new_max[:, None]), axis=1)",
                         "row_max = new_max"], [], output)
    eps = fmt_const(node.attr("eps"))
    affine = (f" * {weight}" if weight else "") + (f" + {bias}" if bias else "")
    if op == "rmsnorm":
        return _RowPlan("0.0", [f"rstd = tl.rsqrt(tl.sum(val * val, axis=1) / N + {eps})"],
                        ["acc = tl.zeros([BLOCK_M, BLOCK_N], tl.float32)"], ["acc += val * val"],
                        [f"rstd = tl.rsqrt(tl.sum(acc, axis=1) / N + {eps})"], f"val * rstd[:, None]{affine}")
    return _RowPlan("0.0",
                    ["mean = tl.sum(val, axis=1) / N",
                     "dev = tl.where(mask, val - mean[:, None], 0.0)",
                     f"rstd = tl.rsqrt(tl.sum(dev * dev, axis=1) / N + {eps})"],
                    ["mean = tl.zeros([BLOCK_M], tl.float32)", "m2 = tl.zeros([BLOCK_M], tl.float32)",
                     "count = tl.zeros([BLOCK_M], tl.float32)"],
                    ["# Chan et al.: merge the chunk's mean and squared deviations into the running ones",
                     "n_chunk = tl.sum(mask.to(tl.float32), axis=1)",
                     "chunk_mean = tl.sum(val, axis=1) / n_chunk",
                     "dev = tl.where(mask, val - chunk_mean[:, None], 0.0)",
                     "delta = chunk_mean - mean",
                     "total = count + n_chunk",
                     "mean += delta * (n_chunk / total)",
                     "m2 += tl.sum(dev * dev, axis=1) + delta * delta * (count * n_chunk / total)",
                     "count = total"],
                    [f"rstd = tl.rsqrt(m2 / N + {eps})"], f"(val - mean[:, None]) * rstd[:, None]{affine}")


class _RowKernel(_KernelFile):
    description = ("BLOCK_M rows of N per program, each row one BLOCK_N tile when it fits (one read);\n"
                   "longer rows go through the looped kernel in BLOCK_N chunks.")
    block_key = "BLOCK_N"

    def __init__(self, spec, node, inputs, options):
        by_name = {i.name: i for i in inputs}
        body_inputs = [i for i in inputs if i.name in ir.input_names(node.args[0])]
        extras = iter(by_name[a.name] for a in node.args[1:])
        self.weight = next(extras) if node.attr("has_weight") else None
        self.bias = next(extras) if node.attr("has_bias") else None
        self.affine = [e for e in (self.weight, self.bias) if e]
        super().__init__(spec, node.args[0], inputs, body_inputs, options)
        self.op, self.reduces = node.op, node.op in ir.REDUCE
        self.plan = _row_plan(node, self.weight and self.weight.local, self.bias and self.bias.local)
        # Inputs that are full in every case are read at the row's own offsets; the others get a
        # row stride and a constexpr column stride, decided at launch. Every case is checked here.
        fulls = [ir.broadcast_shapes([i.shapes[c] for i in body_inputs]) for c in range(len(inputs[0].shapes))]
        self.rows_of = [(math.prod(full[:-1]), full[-1] if full else 1) for full in fulls]    # (R, N) per case
        self.partial = []
        for i in body_inputs:
            for shape, full in zip(i.shapes, fulls):
                _row_strides(i.name, shape, full)
            if any(math.prod(shape) != math.prod(full) for shape, full in zip(i.shapes, fulls)):
                self.partial.append(i)

    def configs(self) -> list[dict]:
        defaults = [_row_config(rows, n) for rows, n in self.rows_of]
        return self._space(defaults + ROW_CONFIGS, lambda config: [_row_tile(*case, config) for case in self.rows_of])

    def source(self) -> str:
        kernels = [self._kernel(looped=False), self._kernel(looped=True)]
        kernels += [self._aligned_kernel()] if self._aligns() else []
        return self._file(kernels, [_row_config, _row_tile, _row_strides, _require_full], self._launcher())

    def _aligns(self) -> bool:
        """Whether the file has the aligned kernel: reductions whose inputs are all read at the
        row's own offsets (one offset serves every input)."""
        return self.reduces and not self.partial

    def _params(self) -> list[str]:
        params = [f"{i.local}_ptr" for i in self.inputs] + ["out_ptr", "R", "N"]
        params += [f"{i.local}_rs" for i in self.partial]
        params += [f"{i.local}_cs: tl.constexpr" for i in self.partial]
        params += ["ALIGN: tl.constexpr", "TAIL: tl.constexpr"] if self.affine else []
        return params + ["BLOCK_M: tl.constexpr", "BLOCK_N: tl.constexpr"]

    def _tile(self, cols: str) -> list[str]:
        """Load one [BLOCK_M, BLOCK_N] tile of every body input and compute val, the body's values."""
        lines = [f"cols = {cols}", "mask = (rows < R) & (cols < N)"]
        for i in self.body_inputs:
            offs = f"rows * {i.local}_rs + cols * {i.local}_cs" if i in self.partial else "rows * N + cols"
            lines.append(f"{i.local} = tl.load({i.local}_ptr + {offs}, mask=mask, other=0.0).to(tl.float32)")
        lines.append(f"val = tl.where(mask, {self.body_call()}, {self.plan.fill})")
        return lines

    def _flat_tile(self, offs: str, mask: str) -> list[str]:
        """_tile at element offsets `offs` shared by every input (the aligned kernel's)."""
        return [f"offs = {offs}", f"mask = {mask}", *self.body_values("offs", self.plan.fill)]

    def _write(self) -> list[str]:
        """Store the output: one value per row, or the tile's output elements (with weights, the
        columns before NV; `_tail` writes the rest)."""
        if self.reduces:
            return ["tl.store(out_ptr + rows, result[:, None].to(out_ptr.dtype.element_ty), mask=rows < R)"]
        return self._store_tile("NV" if self.affine else "N")

    def _store_tile(self, limit: str) -> list[str]:
        """Load the weights, compute and store the tile's output, over its columns before `limit`."""
        loads = [f"{e.local} = tl.load({e.local}_ptr + cols, mask=cols < {limit}, other=0.0).to(tl.float32)"
                 for e in self.affine]
        mask = "mask" if limit == "N" else f"mask & (cols < {limit})"
        return loads + [f"res = {self.plan.output}",
                        f"tl.store(out_ptr + rows * N + cols, res.to(out_ptr.dtype.element_ty), mask={mask})"]

    def _tail(self) -> list[str]:
        """With weights: the columns from NV to N (under ALIGN, odd N only) in one more tile. A mask
        at N would split the weights' loads into single elements, as rows of odd N split the body's
        anyway (on an H200, 7919x6007 fp16 layernorm: 146 -> 92 us). TAIL is constexpr: kernels
        for whole vectors have no tail code (masked off, it cost 8192x8192 fp16 layernorm 3%)."""
        if not self.affine:
            return []
        tile = self._tile("NV + tl.arange(0, ALIGN)[None, :]") + self._store_tile("N")
        return ["if TAIL:     # the columns after the weights' last whole 16-byte vector",
                *("    " + line for line in tile)]

    def _kernel(self, looped: bool) -> str:
        lines = ["rows = tl.program_id(0).to(tl.int64) * BLOCK_M + tl.arange(0, BLOCK_M)[:, None]"]
        if self.affine:
            lines += ["# The weights load in 16-byte vectors only under a mask that ends on one: the tile",
                      "# writes the columns before NV, the tail tile (odd N only) the rest.",
                      "NV = tl.multiple_of(N // ALIGN * ALIGN, ALIGN) if TAIL else N"]
        if not looped:
            comment = "    # BLOCK_M whole rows per program (N <= BLOCK_N): every input is read once.\n"
            lines += self._tile("tl.arange(0, BLOCK_N)[None, :]") + self.plan.single + self._write() + self._tail()
        else:
            comment = ("    # Rows longer than BLOCK_N, in BLOCK_N-wide chunks: the first pass gathers each row's\n"
                       + ("    # statistics, the second recomputes each chunk and writes it.\n" if not self.reduces
                          else "    # result.\n"))
            chunk_loop = "for start in range(0, N, BLOCK_N):"
            tile = self._tile("start + tl.arange(0, BLOCK_N)[None, :]")
            lines += self.plan.init + [chunk_loop] + ["    " + x for x in tile + self.plan.chunk] + self.plan.final
            if self.reduces:
                lines += self._write()
            else:
                lines += [chunk_loop] + ["    " + x for x in tile + self._write()] + self._tail()
        suffix = "_looped_kernel" if looped else "_kernel"
        return jit_source(f"{self.name}{suffix}", self._params(), lines, comment)

    def _aligned_kernel(self) -> str:
        lines = [*aligned_span("BLOCK_M", "N"),
                 *self.plan.init,
                 "for i in range(0, tl.cdiv(hi - lo, BLOCK_N)):",
                 *("    " + line for line in self._flat_tile(*aligned_chunk("BLOCK_N")) + self.plan.chunk),
                 *EDGE_LINES, *self.body_values("offs", self.plan.fill),
                 "# Reduced, then folded into the accumulators' first lane.",
                 f"edge = {reduce_call(self.op, 'val', 1, keep_dims=True)}",
                 fold_line(self.op, f"tl.where(tl.arange(0, BLOCK_N)[None, :] == 0, edge, {self.plan.fill})"),
                 *self.plan.final, *self._write()]
        comment = ("    # One row per program, for rows of no whole number of 16-byte vectors (odd N), which start\n"
                   "    # unaligned: the tiles of the kernels above then load element by element. Here the row's\n"
                   "    # body, from its first to its last 16-byte boundary, loads in vectors whatever N is; the\n"
                   "    # head and tail (each under ALIGN elements; N >= 2 * ALIGN) take one more masked tile.\n")
        return jit_source(f"{self.name}_aligned_kernel", self._params() + ["ALIGN: tl.constexpr"], lines, comment)

    def _aligned_launch(self) -> str:
        """The launcher's branch to the aligned kernel: odd rows long enough (1024+ elements) that
        one row is a program's worth of work, in tiles of at most 2048 (7919x6007 fp16 sum on an
        H200: 31.6 us in 1024- or 2048-wide tiles on 4 warps, 37 us on 8; 34.3 us unaligned)."""
        args = [i.local for i in self.inputs] + ["out", "R", "N", "BLOCK_M=1", "BLOCK_N=BLOCK_N", "ALIGN=ALIGN",
                                                  "num_warps=num_warps"]
        return (align_elements(self.body_inputs) +
                "    if N % ALIGN and N >= 1024:\n"
                "        BLOCK_N = min(BLOCK_N, 2048)\n"
                "        num_warps = min(num_warps, max(1, BLOCK_N // 256))\n"
                + _wrap(f"{self.name}_aligned_kernel[(R,)]", args, "        ") + "\n"
                "        return out\n")

    def _launcher(self) -> str:
        first = self.inputs[0].local
        text = self._signature_and_prologue()
        text += f"    shape = torch.broadcast_shapes({', '.join(f'{i.local}.shape' for i in self.body_inputs)})\n"
        text += "    N = shape[-1]\n    R = shape[:-1].numel()\n"
        for i in self.body_inputs:
            if i in self.partial:
                text += f'    {i.local}_rs, {i.local}_cs = _row_strides("{i.name}", {i.local}.shape, shape)\n'
            else:
                text += f'    _require_full("{i.name}", {i.local}.shape, shape)\n'
        for e in self.affine:
            text += f'    _require_full("{e.name}", {e.local}.shape, shape[-1:])\n'
        text += align_elements(self.affine) if self.affine else ""
        out_shape = "shape[:-1]" if self.reduces else "shape"
        text += f"    out = torch.empty({out_shape}, dtype={first}.dtype, device={first}.device)\n"
        text += refuse_empty_dim(self.op, "N", "-1") if self.op in ("max", "min") else ""
        text += self._config_line("_row_config(R, N)")
        text += "    BLOCK_M, BLOCK_N, num_warps = _row_tile(R, N, config)\n"
        text += self._aligned_launch() if self._aligns() else ""
        text += f"    kernel = {self.name}_kernel if N <= BLOCK_N else {self.name}_looped_kernel\n"
        args = [i.local for i in self.inputs] + ["out", "R", "N"]
        args += [f"{i.local}_rs" for i in self.partial] + [f"{i.local}_cs={i.local}_cs" for i in self.partial]
        args += ["ALIGN=ALIGN", "TAIL=N % ALIGN != 0"] if self.affine else []
        text += "    grid = (triton.cdiv(R, BLOCK_M),)\n"
        text += _wrap("kernel[grid]", args + ["BLOCK_M=BLOCK_M", "BLOCK_N=BLOCK_N", "num_warps=num_warps"], "    ") + "\n"
        return text + "    return out\n"
