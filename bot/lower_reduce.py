"""Lowering of reductions over any dim, argmax/argmin and cross entropy to Triton (stage 4).

sum/mean/max/min(body, dim=d) and argmax/argmin(x, dim=d) view the body as [A, D, B], D the
reduced dim, and pick a layout per case at launch. B > 1, the cols kernel: tiles [BLOCK_D, BLOCK_B]
whose BLOCK_B outputs lie side by side in memory, so each tile row is one coalesced load. B == 1
(the last dim), the rows kernel: tiles [BLOCK_R, BLOCK_D] of BLOCK_R rows. Both loop over D in
BLOCK_D chunks. The cols kernel folds each chunk into one accumulator per lane of the tile, reduced
once after the loop; the rows kernel of sum/mean/max/min reduces each chunk as it arrives into
accumulators one column wide; argmax/argmin keep one per lane of the tile in the cols kernel and,
in the rows kernel, each row's running extreme and its index (a chunk's extreme that beats it is
searched for its first index; a chunk that does not costs one reduction). Both may split D over
SPLIT_D programs, which write float32 partials that a small kernel combines in a
fixed order: deterministic, no atomics.

cross_entropy(logits body, target) is a row kernel over the last dim: an online logsumexp over
BLOCK_V chunks, less the target's logit, read directly; 'mean' sums the per-row losses in one
program, again in a fixed order.

Bodies are written by bot.lower_triton's machinery (float32 math) and the files follow its
layout and tuning contract. The launchers' helpers are real functions here, copied into kernel.py
with inspect.getsource. This module imports neither torch nor triton.
"""
from __future__ import annotations

import math
from dataclasses import dataclass

from bot import ir
from bot.lower_triton import (EDGE_LINES, NEG_INF, POS_INF, RESERVED as TRITON_RESERVED, _Input, _KernelFile,
                              _require_full, REDUCE_FILL, _row_config, _row_tile, _wrap, align_elements,
                              aligned_chunk, aligned_span, fold_line, jit_source, kernel_inputs,
                              reduce_call, refuse_empty_dim, sm_count_line)
from runner.protocol import IGNORE_INDEX

MAX_CONFIGS = 12            # a small, deliberate space: the benchmark times each config on each case
NO_INDEX = 2**31 - 1        # an index no element has: it loses every tie to a real one (int32 indices)
MAX_ARG_DIM = 2**30         # argmax/argmin dims shorter than this keep start + lane far from int32 overflow

# Config spaces, after the default's pick for each of the spec's cases (_reduce_config), from
# sweeps on an H200 (docs/BENCHMARKS.md).
# cols layout: narrow, deep tiles first. The cols kernel keeps one accumulator per lane, so a tile
# 64 outputs wide (one 128-byte line of fp16 per row) and 64-256 rows deep needs no block reduction
# per step; with SPLIT_D 1 and 3-8 pipelined stages, 128 such programs read an 8192x8192 fp16 matrix
# at 88% of copy bandwidth on an H200 (wide tiles split 64-128 ways: 79%; fp32 96% against 91%).
# Then wide tiles: BLOCK_B of 1024 neighbouring outputs puts every thread on its own columns and D
# is split 64-128 ways. Wide, split tiles also win where rows are not 16-byte aligned (7919x6007),
# which narrow tiles read element by element.
COLS_CONFIGS = [
    {"BLOCK_B": 64, "BLOCK_D": 128, "SPLIT_D": 1, "num_warps": 8, "num_stages": 6},
    {"BLOCK_B": 64, "BLOCK_D": 256, "SPLIT_D": 1, "num_warps": 8, "num_stages": 3},
    {"BLOCK_B": 64, "BLOCK_D": 128, "SPLIT_D": 1, "num_warps": 8, "num_stages": 4},
    {"BLOCK_B": 64, "BLOCK_D": 64, "SPLIT_D": 1, "num_warps": 4, "num_stages": 6},
    {"BLOCK_B": 64, "BLOCK_D": 64, "SPLIT_D": 1, "num_warps": 8, "num_stages": 8},
    {"BLOCK_B": 1024, "BLOCK_D": 8, "SPLIT_D": 64, "num_warps": 4, "num_stages": 3},
    {"BLOCK_B": 1024, "BLOCK_D": 4, "SPLIT_D": 128, "num_warps": 4, "num_stages": 3},
    {"BLOCK_B": 2048, "BLOCK_D": 4, "SPLIT_D": 128, "num_warps": 8, "num_stages": 1},
    {"BLOCK_B": 256, "BLOCK_D": 16, "SPLIT_D": 128, "num_warps": 2, "num_stages": 1},
    {"BLOCK_B": 256, "BLOCK_D": 32, "SPLIT_D": 64, "num_warps": 4, "num_stages": 1},
    {"BLOCK_B": 128, "BLOCK_D": 32, "SPLIT_D": 16, "num_warps": 4, "num_stages": 3},
]
# argmax/argmin keep one accumulator per lane of the tile (16-32 per thread here): small tiles,
# few warps, many programs in flight (8192x8192 fp16 argmax on an H200: 512 x w1 38 us, 2048 x w4
# 43 us, 8192 x w8 82 us).
ARG_COLS_CONFIGS = [
    {"BLOCK_B": 512, "BLOCK_D": 4, "SPLIT_D": 64, "num_warps": 2, "num_stages": 3},
    {"BLOCK_B": 1024, "BLOCK_D": 4, "SPLIT_D": 64, "num_warps": 4, "num_stages": 3},
    {"BLOCK_B": 2048, "BLOCK_D": 2, "SPLIT_D": 64, "num_warps": 8, "num_stages": 3},
    {"BLOCK_B": 1024, "BLOCK_D": 2, "SPLIT_D": 128, "num_warps": 4, "num_stages": 1},
    {"BLOCK_B": 256, "BLOCK_D": 8, "SPLIT_D": 128, "num_warps": 2, "num_stages": 1},
    {"BLOCK_B": 128, "BLOCK_D": 16, "SPLIT_D": 16, "num_warps": 2, "num_stages": 3},
    {"BLOCK_B": 128, "BLOCK_D": 32, "SPLIT_D": 8, "num_warps": 4, "num_stages": 1},
]
# Rows: one row per one-warp program in pipelined 256-512 chunks (the running extreme; 8192x8192
# fp16 argmax on an H200: 512 x w1 s3 35.0 us, s1 36.8, 1024 x w2 s3 35.8, 8192 x w8 59.7).
ARG_ROWS_CONFIGS = [
    {"BLOCK_R": 1, "BLOCK_D": 512, "SPLIT_D": 1, "num_warps": 1, "num_stages": 3},
    {"BLOCK_R": 1, "BLOCK_D": 512, "SPLIT_D": 1, "num_warps": 1, "num_stages": 4},
    {"BLOCK_R": 1, "BLOCK_D": 256, "SPLIT_D": 1, "num_warps": 1, "num_stages": 4},
    {"BLOCK_R": 1, "BLOCK_D": 1024, "SPLIT_D": 1, "num_warps": 2, "num_stages": 3},
    {"BLOCK_R": 1, "BLOCK_D": 1024, "SPLIT_D": 1, "num_warps": 2, "num_stages": 1},
    {"BLOCK_R": 1, "BLOCK_D": 512, "SPLIT_D": 1, "num_warps": 1, "num_stages": 1},
    {"BLOCK_R": 1, "BLOCK_D": 2048, "SPLIT_D": 1, "num_warps": 4, "num_stages": 1},
    {"BLOCK_R": 2, "BLOCK_D": 1024, "SPLIT_D": 1, "num_warps": 2, "num_stages": 1},
    {"BLOCK_R": 8, "BLOCK_D": 128, "SPLIT_D": 1, "num_warps": 2, "num_stages": 1},
    {"BLOCK_R": 1, "BLOCK_D": 2048, "SPLIT_D": 16, "num_warps": 4, "num_stages": 1},
]
# rows layout: one or a few rows per program in 1K to 8K chunks, pipelined or not; long rows split.
ROWS_CONFIGS = [
    {"BLOCK_R": 1, "BLOCK_D": 2048, "SPLIT_D": 1, "num_warps": 4, "num_stages": 3},
    {"BLOCK_R": 1, "BLOCK_D": 2048, "SPLIT_D": 1, "num_warps": 4, "num_stages": 1},
    {"BLOCK_R": 2, "BLOCK_D": 4096, "SPLIT_D": 1, "num_warps": 8, "num_stages": 1},
    {"BLOCK_R": 4, "BLOCK_D": 2048, "SPLIT_D": 1, "num_warps": 8, "num_stages": 1},
    {"BLOCK_R": 1, "BLOCK_D": 1024, "SPLIT_D": 1, "num_warps": 4, "num_stages": 1},
    {"BLOCK_R": 1, "BLOCK_D": 8192, "SPLIT_D": 1, "num_warps": 8, "num_stages": 1},
    {"BLOCK_R": 16, "BLOCK_D": 128, "SPLIT_D": 1, "num_warps": 4, "num_stages": 1},
    {"BLOCK_R": 1, "BLOCK_D": 4096, "SPLIT_D": 16, "num_warps": 8, "num_stages": 1},
]
# cross entropy: persistent programs (PER_SM per SM) for rows that fit one tile; one row per one-warp
# program in pipelined 512-wide chunks (8192x8192 fp16 on an H200: 41.5 us, against 43.5 for one
# 8192-wide tile on 4 warps), then one row per program in 1K to 8K chunks (vocabularies of
# 32K-128K loop), with and without pipelined loads; short rows stacked.
CROSS_ENTROPY_CONFIGS = [
    {"BLOCK_R": 1, "BLOCK_V": 8192, "num_warps": 4, "num_stages": 1, "PER_SM": 4},
    {"BLOCK_R": 1, "BLOCK_V": 512, "num_warps": 1, "num_stages": 3},
    {"BLOCK_R": 1, "BLOCK_V": 512, "num_warps": 1, "num_stages": 4},
    {"BLOCK_R": 1, "BLOCK_V": 8192, "num_warps": 8, "num_stages": 1},
    {"BLOCK_R": 1, "BLOCK_V": 2048, "num_warps": 4, "num_stages": 3},
    {"BLOCK_R": 1, "BLOCK_V": 4096, "num_warps": 8, "num_stages": 1},
    {"BLOCK_R": 1, "BLOCK_V": 1024, "num_warps": 4, "num_stages": 1},
    {"BLOCK_R": 1, "BLOCK_V": 8192, "num_warps": 4, "num_stages": 1},
    {"BLOCK_R": 16, "BLOCK_V": 256, "num_warps": 4, "num_stages": 1},
]

# Names the generated kernel.py uses besides lower_triton's; an input with one is renamed there.
RESERVED = TRITON_RESERVED | {
    "a", "s", "d", "d_lo", "d_hi", "start", "n_cols", "acc_idx", "index", "nan", "has_nan", "wins", "out_offs",
    "dst", "dst_idx", "dst_ptr", "idx_ptr", "ws_ptr", "ws_idx_ptr", "losses", "losses_ptr", "dim", "A", "D", "B",
    "M", "V", "chunk", "block", "picked", "pick", "loss", "num_stages", "LOG2E", "scaled_max", "new_max", "SPLIT",
    "SPLIT_P2", "BLOCK_B", "BLOCK_D", "BLOCK_R", "BLOCK_V", "NUM_STAGES", "FINAL", "_fit", "_fit_stages",
    "_reduce_config", "_reduce_tiles", "_combine_block", "_cross_entropy_config", "_cross_entropy_tiles",
    "acc_start", "take", "lane", "arg_reduce", "kept", "first", "step", "next_rows", "r0", "PER_SM", "sms",
    "top", "at", "same",
}


ALIGNED_COMMENT = ("    # One row per program, for rows of no whole number of 16-byte vectors (odd lengths), which\n"
                   "    # start unaligned: the other kernels' tiles then load element by element. Here the row's\n"
                   "    # body, from its first to its last 16-byte boundary, loads in vectors; its head and tail\n"
                   "    # (each under ALIGN elements) come in one edge tile after it.\n")


# The launcher's test for the aligned kernel: odd rows long enough (1024+) for one per program.
ALIGNED_LAUNCH = ("    # Rows of no whole number of 16-byte vectors, 1024+ long: the aligned kernel, one per program.\n"
                  "    if {also}{n} % ALIGN and {n} >= 1024:\n")


# ---------------------------------------------------------------- launcher helpers (copied into kernel.py)

def _fit(block, n):
    # A tile extent no wider than n needs (configs' blocks are powers of two, and so is this).
    return min(block, 1 << (n - 1).bit_length())


def _fit_stages(num_stages, stage_bytes):
    # Pipelined loads keep num_stages tiles in shared memory: at most 96 KiB of the 228 KiB of an
    # H200 SM, so any config compiles on any case, whatever the tile and the inputs' dtypes.
    return max(1, min(num_stages, 96 * 1024 // stage_bytes))


def _reduce_config(A, D, B, arg_reduce=False):
    # The default config for a body viewed as [A, D, B], D reduced. B > 1: tiles up to 1024
    # outputs wide and 8K elements deep, each thread on its own columns (the tile reduces inside
    # threads). B == 1: whole-row tiles as the row kernels choose them. Then D is split in two
    # while fewer than ~1024 programs run (8 per SM of an H200: loads enough in flight without
    # pipelining) and each keeps 8+ BLOCK_D chunks. An 8192x8192 sum over dim 0 thus gets 8
    # column blocks x 128 splits of 64 rows. arg_reduce (argmax/argmin): small tiles instead,
    # 512 x 4 pipelined (two accumulators per tile element), or one row on one warp in 512-wide
    # chunks, not pipelined: 3 stages gain 5% on 8192x8192 fp16 but lose 1.6x on 7919x6007 fp32,
    # whose rows are not 16-byte aligned (H200).
    if B > 1:
        key, block = "BLOCK_B", _fit(512 if arg_reduce else 1024, B)
        block_d, warps, stages = (4, 2, 3) if arg_reduce else (max(8, 8192 // block), 4, 1)
        programs = A * -(-B // block)
    elif arg_reduce:
        key, block, block_d, warps, stages = "BLOCK_R", 1, _fit(512, D), 1, 1
        programs = A
    else:
        key, stages = "BLOCK_R", 1
        block, block_d, warps = _row_tile(A, D, _row_config(A, D))
        programs = -(-A // block)
    split = 1
    while programs * split < 1024 and D >= split * 16 * block_d:
        split *= 2
    return {key: block, "BLOCK_D": block_d, "SPLIT_D": split, "num_warps": warps, "num_stages": stages}


def _reduce_tiles(config, A, D, B, elem_bytes, arg_reduce=False):
    # The config fitted to this case, so any config runs on any case: (BLOCK_B or BLOCK_R, BLOCK_D,
    # SPLIT, chunk, num_warps, num_stages); split s reduces d in [s * chunk, (s + 1) * chunk).
    # Keys a config lacks (one made for the other layout) come from the default.
    config = {**_reduce_config(A, D, B, arg_reduce), **config}
    block = _fit(config["BLOCK_B"], B) if B > 1 else _fit(config["BLOCK_R"], A)
    block_d = _fit(config["BLOCK_D"], D)
    split = min(config["SPLIT_D"], -(-D // block_d))
    chunk = -(-D // (split * block_d)) * block_d
    stages = _fit_stages(config["num_stages"], block * block_d * elem_bytes)
    return block, block_d, -(-D // chunk), chunk, config["num_warps"], stages


def _combine_block(M, split):
    # (BLOCK, SPLIT_P2) of the combine kernel: tiles [SPLIT_P2, BLOCK] of up to 4K partials.
    split_p2 = 1 << (split - 1).bit_length()
    return _fit(max(1, 4096 // split_p2), M), split_p2


def _cross_entropy_config(R, V):
    # The default config for R rows of V classes: row tiles as the row kernels choose them (a
    # vocabulary longer than 8192 is read in 8192-wide chunks), on at most 4 warps (8192 classes
    # on an H200: 45 us on 4 warps, 46 on 8, 53 on 16).
    block_r, block_v, warps = _row_tile(R, V, _row_config(R, V))
    return {"BLOCK_R": block_r, "BLOCK_V": block_v, "num_warps": min(warps, 4), "num_stages": 1}


def _cross_entropy_tiles(config, R, V, elem_bytes):
    # The config fitted to this case: (BLOCK_R, BLOCK_V, num_warps, num_stages).
    block_r, block_v = _fit(config["BLOCK_R"], R), _fit(config["BLOCK_V"], V)
    return block_r, block_v, config["num_warps"], _fit_stages(config["num_stages"], block_r * block_v * elem_bytes)


# ---------------------------------------------------------------- kernel.py

def kernel_source(spec: dict, node: ir.Node, options: dict | None = None) -> str:
    """kernel.py for sum/mean/max/min or argmax/argmin over any dim, or cross_entropy: kernels,
    the tuning block and a launcher `def <spec name>(<inputs>, *, config=None)` with the
    reference's signature, as bot.lower_triton.kernel_source writes them. options may carry
    {"block": int, "num_warps": int} from review: BLOCK_D (BLOCK_V) and num_warps are pinned."""
    if node.op not in ir.REDUCE | ir.ARG_REDUCE | ir.LOSSES:
        raise ValueError(f"lower_reduce lowers sum/mean/max/min, argmax/argmin and cross_entropy, not {node.op}")
    options, inputs = kernel_inputs(spec, options, RESERVED)
    kernel = _CrossEntropyKernel if node.op in ir.LOSSES else _ReduceKernel
    return kernel(spec, node, inputs, options).source()


def _full_shapes(op: str, body_inputs: list[_Input]) -> list[list[int]]:
    """The body's shape per case. Every body input must have it: the kernels read them all at
    the same offsets (broadcasting inputs would need per-dim index math)."""
    fulls = []
    for case in range(len(body_inputs[0].shapes)):
        full = ir.broadcast_shapes([i.shapes[case] for i in body_inputs])
        for i in body_inputs:
            if math.prod(i.shapes[case]) != math.prod(full):
                raise ValueError(f"input {i.name} has shape {i.shapes[case]} in case {case + 1}, but {op} reads every "
                                 f"input of its body at the full shape {full}; broadcasting inputs are not "
                                 f"supported here (expand them to {full})")
        fulls.append(full)
    return fulls


class _ReduceFile(_KernelFile):
    """What the reduce and cross-entropy files add to lower_triton's: the launcher's head, pinned
    review options, and a tuning space of at most MAX_CONFIGS."""

    def __init__(self, spec, node, inputs, options):
        body_names = ir.input_names(node.args[0])
        body_inputs = [i for i in inputs if i.name in body_names]
        super().__init__(spec, node.args[0], inputs, body_inputs, options)
        self.fulls = _full_shapes(node.op, body_inputs)
        # Worst-case bytes one tile element loads (float32 inputs): what pipelining may keep in flight.
        self.max_elem_bytes = 4 * len(body_inputs)

    def _head(self) -> str:
        """Signature, contiguous inputs, and the body's `shape`, which every body input must have."""
        text = self._signature_and_prologue()
        text += f"    shape = torch.broadcast_shapes({', '.join(f'{i.local}.shape' for i in self.body_inputs)})\n"
        return text + "".join(f'    _require_full("{i.name}", {i.local}.shape, shape)\n' for i in self.body_inputs)

    def _elem_bytes(self) -> str:
        return " + ".join(f"{i.local}.element_size()" for i in self.body_inputs)

    @staticmethod
    def _launch(kernel: str, grid: str, args: list[str], indent: str = "    ") -> str:
        return f"{indent}grid = {grid}\n" + _wrap(f"{kernel}[grid]", args, indent) + "\n"


# ---------------------------------------------------------------- sum/mean/max/min, argmax/argmin

@dataclass(frozen=True)
class _Layout:
    """Where a reduce kernel's tile lies in the body's [A, D, B] view."""
    name: str               # kernel suffix
    block: str              # the tile's extent over the outputs: BLOCK_B or BLOCK_R
    comment: str
    locate: tuple[str, ...]  # the program's outputs
    acc: str                # sum/mean/max/min's accumulators: the tile, or the tile reduced over D (kept 2-d)
    tile: str               # the tile's shape (argmax/argmin keep one accumulator per lane)
    lane: str               # each lane's position along D in the tile
    mask: str
    offs: str
    axis: int               # the tile's D axis
    out_offs: str           # the outputs' offsets in the output, or in split s's partials
    keep: str               # which outputs exist
    expand: str             # a reduced vector back to the tile's rank

    @property
    def per_lane(self) -> bool:
        """Whether sum/mean/max/min keep one accumulator per lane (argmax/argmin always do)."""
        return self.acc == self.tile


_COLS = _Layout(
    "cols", "BLOCK_B",
    "# BLOCK_B neighbouring outputs of one a, reduced over split s's part of D in [BLOCK_D, BLOCK_B]\n"
    "# tiles: the outputs are contiguous in memory, so each tile row is one coalesced load.",
    ("n_cols = tl.cdiv(B, BLOCK_B)", "a = (tl.program_id(0) // n_cols).to(tl.int64)",
     "cols = (tl.program_id(0) % n_cols) * BLOCK_B + tl.arange(0, BLOCK_B)[None, :]"),
    "[BLOCK_D, BLOCK_B]", "[BLOCK_D, BLOCK_B]", "tl.arange(0, BLOCK_D)[:, None]", "(d < d_hi) & (cols < B)",
    "(a * D + d) * B + cols", 0, "s.to(tl.int64) * A * B + a * B + cols", "cols < B", "[None, :]")
_ROWS = _Layout(
    "rows", "BLOCK_R",
    "# BLOCK_R rows (the reduced dim is the last), each reduced over split s's part of it in\n"
    "# [BLOCK_R, BLOCK_D] tiles.",
    ("rows = tl.program_id(0).to(tl.int64) * BLOCK_R + tl.arange(0, BLOCK_R)[:, None]",),
    "[BLOCK_R, 1]", "[BLOCK_R, BLOCK_D]", "tl.arange(0, BLOCK_D)[None, :]", "(rows < A) & (d < d_hi)",
    "rows * D + d", 1, "s.to(tl.int64) * A + rows", "rows < A", "[:, None]")

_FILL = {**REDUCE_FILL, "argmax": NEG_INF, "argmin": POS_INF}
_TL_EXTREME = {"argmax": "tl.max", "argmin": "tl.min"}     # NaN is handled apart for these
_BEATEN = {"argmax": "<=", "argmin": ">="}                  # a lane's value stays unless val beats it


class _ReduceKernel(_ReduceFile):
    description = ("The body viewed as [A, D, B], D reduced: tiles [BLOCK_D, BLOCK_B] of neighbouring outputs when\n"
                   "B > 1 (cols kernel), [BLOCK_R, BLOCK_D] of whole rows when B == 1 (rows kernel). D is read in\n"
                   "BLOCK_D chunks, split over SPLIT_D programs whose float32 partials the combine kernel\n"
                   "reduces in a fixed order (deterministic).")
    block_key = "BLOCK_D"

    def __init__(self, spec, node, inputs, options):
        super().__init__(spec, node, inputs, options)
        self.op, self.dim, self.arg = node.op, node.attr("dim", -1), node.op in ir.ARG_REDUCE
        if not isinstance(self.dim, int):
            raise ValueError(f"{self.op} takes one integer dim, got {self.dim!r}")
        self.views = []         # (A, D, B) per case
        for case, full in enumerate(self.fulls):
            if not -len(full) <= self.dim < len(full):
                raise ValueError(f"{self.op} over dim {self.dim}, but case {case + 1} has shape {full}")
            d = self.dim % len(full)
            self.views.append((math.prod(full[:d]), full[d], math.prod(full[d + 1:])))
            if self.arg and full[d] >= MAX_ARG_DIM:
                raise ValueError(f"{self.op} over a dim of {full[d]} (case {case + 1}); this kernel indexes dims "
                                 f"shorter than {MAX_ARG_DIM}")

    def configs(self) -> list[dict]:
        defaults = [_reduce_config(*view, self.arg) for view in self.views]
        layouts = {b > 1 for _, _, b in self.views}
        cols, rows = (ARG_COLS_CONFIGS, ARG_ROWS_CONFIGS) if self.arg else (COLS_CONFIGS, ROWS_CONFIGS)
        candidates = (cols if True in layouts else []) + (rows if False in layouts else [])
        return self._space(defaults + candidates, lambda config: [
            _reduce_tiles(config, *view, self.max_elem_bytes, self.arg) for view in self.views])[:MAX_CONFIGS]

    def source(self) -> str:
        kernels = [self._kernel(_COLS), self._kernel(_ROWS), self._aligned_kernel(), self._combine_kernel()]
        helpers = [_row_config, _row_tile, _fit, _fit_stages, _reduce_config, _reduce_tiles, _combine_block,
                   _require_full]
        text = self._file(kernels, helpers, self._launcher())
        # lower_triton's file head speaks of float outputs; argmax/argmin return indices.
        return text.replace("the output has the first input's dtype", "the output holds int64 indices") \
            if self.arg else text

    def _ptrs(self) -> list[str]:
        return ["dst_ptr"] + (["idx_ptr"] if self.arg else [])

    def _dsts(self) -> list[str]:
        """What the launcher passes for _ptrs: the output, or the partials of a split."""
        return ["dst"] + (["dst_idx"] if self.arg else [])

    def _running(self, layout: _Layout) -> bool:
        """Whether argmax/argmin keep each output's running extreme and index (rows kernel) rather
        than one (value, tile start) per lane (cols kernel)."""
        return self.arg and layout is _ROWS

    def _init(self, layout: _Layout) -> list[str]:
        if not self.arg:
            return [f"acc = tl.full({layout.acc}, {_FILL[self.op]}, tl.float32)"]
        if self._running(layout):
            return [f"result = tl.full([BLOCK_R], {_FILL[self.op]}, tl.float32)",
                    "index = tl.full([BLOCK_R], 0, tl.int32) + d_lo"]
        return [f"acc = tl.full({layout.tile}, {_FILL[self.op]}, tl.float32)",
                f"acc_start = tl.full({layout.tile}, 0, tl.int32) + d_lo"]

    def _fold(self, layout: _Layout) -> list[str]:
        """Fold the tile into the accumulators. Across rows (rows kernel), sum/mean/max/min reduce it
        over D first (kept as a size-1 axis): one column wide, a 2K-8K-wide tile costs few registers
        beyond its loads. Over columns (cols kernel) they keep one accumulator per lane, reduced
        once after the loop, so a narrow, deep tile needs no block reduction per step (8192x8192
        fp16 mean over dim 0 on an H200, 64 x 128 tiles: 50 us reduced per step, 35.5 per lane).
        argmax/argmin keep one (value, tile start) per lane in the cols kernel: per element a compare
        and two selects. In the rows kernel they reduce each chunk to its extreme first, and search
        only a chunk that beats the running extreme for its first index (8192x8192 fp16 argmax on
        an H200: 35.0 us, 37.7 per lane)."""
        if not self.arg:
            folded = "val" if layout.per_lane else reduce_call(self.op, "val", layout.axis, keep_dims=True)
            return [fold_line(self.op, folded)]
        if self._running(layout):
            return ["# The chunk's extreme, NaN if it holds one, replaces the running one if it beats it or is a",
                    "# first NaN (equal values keep the earlier index, as in torch); only then is the chunk",
                    "# searched for its first index. Most chunks of most data cost this one reduction.",
                    f"top = {reduce_call(self.op[3:], 'val', 1)}",
                    f"take = ~(top {_BEATEN[self.op]} result) & (result == result)",
                    "if tl.max(take.to(tl.int32), axis=0) > 0:",
                    f"    at = tl.min(tl.where((val == top[:, None]) | (val != val), d, {NO_INDEX}), axis=1)",
                    "    index = tl.where(take, at, index)",
                    "    result = tl.where(take, top, result)"]
        return ["# A lane takes a value that beats its own, or a first NaN (a NaN lane keeps its NaN), so",
                "# equal values keep the earlier index, as in torch. Masked lanes hold the fill: never taken.",
                f"take = ~(val {_BEATEN[self.op]} acc) & (acc == acc)",
                "acc = tl.where(take, val, acc)",
                "acc_start = tl.where(take, start, acc_start)"]

    def _final(self, axis: int, expand: str) -> list[str]:
        """result (and index) of the accumulators along axis; expand brings a result back to their rank."""
        if not self.arg:
            return [f"result = {reduce_call(self.op, 'acc', axis)}"]
        return ["# The extreme, then the first index holding it; NaN is the extreme wherever one occurs.",
                "nan = acc != acc",
                f"has_nan = tl.max(nan.to(tl.int32), axis={axis}) > 0",
                f"result = {_TL_EXTREME[self.op]}(acc, axis={axis})",
                f"wins = tl.where(has_nan{expand}, nan, acc == result{expand})",
                f"index = tl.min(tl.where(wins, acc_idx, {NO_INDEX}), axis={axis})",
                'result = tl.where(has_nan, float("nan"), result)']

    def _after_loop(self, layout: _Layout) -> list[str]:
        """result (and index) from the accumulators left by the loop."""
        if self._running(layout):
            return []
        return [*([f"acc_idx = acc_start + {layout.lane}"] if self.arg else []),
                *self._final(layout.axis, layout.expand)]

    def _store(self, final: bool, expand: str, keep: str) -> list[str]:
        """Store the outputs (cast to the output's dtype), or split s's float32 partials."""
        if final:
            value = "index" if self.arg else "(result / D)" if self.op == "mean" else "result"
            return [f"tl.store(dst_ptr + out_offs, {value}{expand}.to(dst_ptr.dtype.element_ty), mask={keep})"]
        lines = [f"tl.store(dst_ptr + out_offs, result{expand}, mask={keep})"]
        return lines + ([f"tl.store(idx_ptr + out_offs, index{expand}, mask={keep})"] if self.arg else [])

    def _kernel(self, layout: _Layout) -> str:
        params = [f"{i.local}_ptr" for i in self.body_inputs] + self._ptrs() + ["A", "D", "B", "chunk"]
        params += [f"{layout.block}: tl.constexpr", "BLOCK_D: tl.constexpr", "FINAL: tl.constexpr",
                   "NUM_STAGES: tl.constexpr"]
        loop = [f"d = start + {layout.lane}", f"mask = {layout.mask}", f"offs = {layout.offs}",
                *self.body_values("offs", _FILL[self.op]), *self._fold(layout)]
        lines = [*layout.locate, "s = tl.program_id(1)", "d_lo = s * chunk", "d_hi = tl.minimum(d_lo + chunk, D)",
                 *self._init(layout),
                 "# NUM_STAGES > 1 pipelines the loads through shared memory (cp.async).",
                 "for start in tl.range(d_lo, d_hi, BLOCK_D, num_stages=NUM_STAGES):",
                 *("    " + line for line in loop),
                 *self._after_loop(layout), f"out_offs = {layout.out_offs}",
                 "if FINAL:", *("    " + line for line in self._store(True, layout.expand, layout.keep)),
                 "else:", *("    " + line for line in self._store(False, layout.expand, layout.keep))]
        comment = "".join(f"    {line}\n" for line in layout.comment.split("\n"))
        return jit_source(f"{self.name}_{layout.name}_kernel", params, lines, comment)

    def _aligned_kernel(self) -> str:
        offs, mask = aligned_chunk("BLOCK_D")
        position = ["d = (offs - base).to(tl.int32)"] if self.arg else []
        values = [*position, *self.body_values("offs", _FILL[self.op])]
        lines = [*aligned_span("BLOCK_R", "D"), "d_lo = 0     # the whole row", *self._init(_ROWS),
                 "for i in tl.range(0, tl.cdiv(hi - lo, BLOCK_D), num_stages=NUM_STAGES):",
                 *("    " + line for line in [f"offs = {offs}", f"mask = {mask}", *values, *self._fold(_ROWS)]),
                 *EDGE_LINES, *values, *(self._edge_fold() if self.arg else self._fold(_ROWS)),
                 *self._after_loop(_ROWS), "out_offs = rows", *self._store(True, "[:, None]", "rows < A")]
        params = [f"{i.local}_ptr" for i in self.body_inputs] + ["dst_ptr", "A", "D"]
        params += [f"{c}: tl.constexpr" for c in ("BLOCK_R", "BLOCK_D", "NUM_STAGES", "ALIGN")]
        return jit_source(f"{self.name}_aligned_kernel", params, lines, ALIGNED_COMMENT)

    def _edge_fold(self) -> list[str]:
        """argmax/argmin's fold of the aligned kernel's edge tile, after the row's body: the head
        precedes the body, so the edge also takes a tie it holds at an earlier index."""
        return [f"top = {reduce_call(self.op[3:], 'val', 1)}",
                f"at = tl.min(tl.where(mask & ((val == top[:, None]) | (val != val)), d, {NO_INDEX}), axis=1)",
                "same = (top == result) | ((top != top) & (result != result))",
                f"take = (~(top {_BEATEN[self.op]} result) & (result == result)) | (same & (at < index))",
                "index = tl.where(take, at, index)",
                "result = tl.where(take, top, result)"]

    def _combine_kernel(self) -> str:
        params = ["ws_ptr"] + (["ws_idx_ptr"] if self.arg else []) + ["dst_ptr", "M", "SPLIT", "D",
                                                                      "BLOCK: tl.constexpr", "SPLIT_P2: tl.constexpr"]
        loads = [f"acc = tl.load(ws_ptr + s * M + out_offs, mask=mask, other={_FILL[self.op]})"]
        if self.arg:
            loads.append(f"acc_idx = tl.load(ws_idx_ptr + s * M + out_offs, mask=mask, other={NO_INDEX})")
        lines = ["s = tl.arange(0, SPLIT_P2)[:, None]",
                 "out_offs = tl.program_id(0).to(tl.int64) * BLOCK + tl.arange(0, BLOCK)[None, :]",
                 "mask = (s < SPLIT) & (out_offs < M)", *loads, *self._final(0, "[None, :]"),
                 *self._store(True, "[None, :]", "out_offs < M")]
        comment = "    # The SPLIT partials of BLOCK outputs, reduced in a fixed order (deterministic) and cast.\n"
        return jit_source(f"{self.name}_combine_kernel", params, lines, comment)

    def _empty_dims(self) -> str:
        """Launcher lines for empty inputs, which no kernel launch handles: torch's answers (a sum over
        nothing is 0, a mean NaN; max, min, argmax and argmin refuse), or an empty output as it is."""
        if self.op in ("sum", "mean"):
            fill = "0.0" if self.op == "sum" else 'float("nan")'
            return ("    if out.numel() == 0 or D == 0:\n"
                    f"        return out.fill_({fill})   # an empty output, or a {self.op} over nothing\n")
        return refuse_empty_dim(self.op, "D", "dim") + "    if out.numel() == 0:\n        return out\n"

    def _launcher(self) -> str:
        first = self.body_inputs[0].local
        dtype = "torch.int64" if self.arg else f"{first}.dtype"
        text = self._head()
        text += ("    # The body as [A, D, B]: D the reduced dim (as written, for this rank), B what follows it.\n"
                 f"    dim = {self.dim} % len(shape)\n"
                 "    A, D, B = math.prod(shape[:dim]), shape[dim], math.prod(shape[dim + 1:])\n"
                 f"    out = torch.empty(shape[:dim] + shape[dim + 1:], dtype={dtype}, device={first}.device)\n")
        text += self._empty_dims()
        arg_reduce = ["arg_reduce=True"] if self.arg else []
        text += self._config_line(f"_reduce_config({', '.join(['A', 'D', 'B', *arg_reduce])})")
        text += _wrap("block, BLOCK_D, SPLIT, chunk, num_warps, num_stages = _reduce_tiles",
                      ["config", "A", "D", "B", self._elem_bytes(), *arg_reduce], "    ") + "\n"
        text += align_elements(self.body_inputs) + ALIGNED_LAUNCH.format(also="B == 1 and SPLIT == 1 and ", n="D")
        aligned = [i.local for i in self.body_inputs] + ["out", "A", "D", "BLOCK_R=1", "BLOCK_D=BLOCK_D",
                                                         "NUM_STAGES=num_stages", "ALIGN=ALIGN", "num_warps=num_warps"]
        text += self._launch(f"{self.name}_aligned_kernel", "(A,)", aligned, "        ") + "        return out\n"
        text += "    # One split writes the output; more write float32 partials for the combine kernel.\n"
        for dst, kind in zip(self._dsts(), ("float32", "int32")):
            text += (f"    {dst} = out if SPLIT == 1 else "
                     f"torch.empty((SPLIT, A * B), dtype=torch.{kind}, device=out.device)\n")
        args = [i.local for i in self.body_inputs] + self._dsts() + ["A", "D", "B", "chunk"]
        consts = ["BLOCK_D=BLOCK_D", "FINAL=SPLIT == 1", "NUM_STAGES=num_stages", "num_warps=num_warps"]
        text += "    if B > 1:\n"
        text += self._launch(f"{self.name}_cols_kernel", "(A * triton.cdiv(B, block), SPLIT)",
                             args + ["BLOCK_B=block"] + consts, "        ")
        text += "    else:\n"
        text += self._launch(f"{self.name}_rows_kernel", "(triton.cdiv(A, block), SPLIT)",
                             args + ["BLOCK_R=block"] + consts, "        ")
        text += "    if SPLIT > 1:\n        BLOCK, SPLIT_P2 = _combine_block(A * B, SPLIT)\n"
        combine = self._dsts() + ["out", "A * B", "SPLIT", "D", "BLOCK=BLOCK", "SPLIT_P2=SPLIT_P2", "num_warps=4"]
        text += _wrap(f"{self.name}_combine_kernel[(triton.cdiv(A * B, BLOCK),)]", combine, "        ") + "\n"
        return text + "    return out\n"


# ---------------------------------------------------------------- cross entropy

class _CrossEntropyKernel(_ReduceFile):
    description = ("BLOCK_R rows of V class logits per program, read in BLOCK_V chunks: an online logsumexp less\n"
                   "the target's logit (read directly) gives loss = logsumexp(row) - row[target]. A target of\n"
                   f"{IGNORE_INDEX} (torch's default ignore_index, padding) adds no loss and no count to 'mean';\n"
                   "any other target outside [0, V) picks 0 (torch would raise). 'mean' writes float32 per-row\n"
                   "losses that one program sums in a fixed order (deterministic), over the rows not ignored.")
    block_key = "BLOCK_V"

    def __init__(self, spec, node, inputs, options):
        super().__init__(spec, node, inputs, options)
        self.mean = node.attr("reduction", "mean") == "mean"
        self.target = next(i for i in inputs if i.name == node.args[1].name)
        if self.target in self.body_inputs:
            raise ValueError("cross_entropy's target (class indices) cannot also be part of the logits")
        self.rows_of = [(math.prod(full[:-1]), full[-1]) for full in self.fulls]     # (R, V) per case
        for case, (full, (rows, _)) in enumerate(zip(self.fulls, self.rows_of)):
            if math.prod(self.target.shapes[case]) != rows:
                raise ValueError(f"cross_entropy's target {self.target.name} has shape {self.target.shapes[case]} in "
                                 f"case {case + 1}; it needs one class index per row of the logits: {full[:-1]}")

    def configs(self) -> list[dict]:
        defaults = [_cross_entropy_config(*rows) for rows in self.rows_of]
        return self._space(defaults + CROSS_ENTROPY_CONFIGS, lambda config: [
            (*_cross_entropy_tiles(config, *rows, self.max_elem_bytes), config.get("PER_SM", 0))
            for rows in self.rows_of])[:MAX_CONFIGS]

    def source(self) -> str:
        kernels = [self._kernel(), self._persistent_kernel(), self._aligned_kernel()]
        kernels += [self._mean_kernel()] if self.mean else []
        helpers = [_row_config, _row_tile, _fit, _fit_stages, _cross_entropy_config, _cross_entropy_tiles,
                   _require_full]
        return self._file(kernels, helpers, self._launcher())

    def _params(self) -> list[str]:
        return [f"{i.local}_ptr" for i in self.body_inputs] + [f"{self.target.local}_ptr", "dst_ptr", "R", "V",
                                                               "BLOCK_R: tl.constexpr", "BLOCK_V: tl.constexpr"]

    def _target(self) -> str:
        return f"{self.target.local} = tl.load({self.target.local}_ptr + rows, mask=rows < R, other=0)"

    def _loss(self) -> list[str]:
        """From row_max and row_sum of `rows` and their targets: the target's logit, read directly
        (a target outside [0, V) picks 0 and reads nothing), the loss (0 for an ignored row), and
        its store."""
        t = self.target.local
        return [f"pick = (rows < R) & ({t} >= 0) & ({t} < V)",
                *(f"{i.local} = tl.load({i.local}_ptr + rows * V + {t}, mask=pick, other=0.0).to(tl.float32)"
                  for i in self.body_inputs),
                f"picked = tl.sum(tl.where(pick, {self.body_call()}, 0.0), axis=1)",
                f"loss = tl.where({t} == {IGNORE_INDEX}, 0.0, (row_max + tl.log(row_sum) - picked)[:, None])",
                "tl.store(dst_ptr + rows, loss.to(dst_ptr.dtype.element_ty), mask=rows < R)"]

    @staticmethod
    def _online_update() -> list[str]:
        """Fold the tile `val` into row_max and row_sum (online logsumexp)."""
        return ["new_max = tl.maximum(row_max, tl.max(val, axis=1))",
                "# exp(v - m) as exp2(v * log2(e) - m * log2(e)): one fused multiply-add before each exp2.",
                "scaled_max = new_max * LOG2E",
                "row_sum = (row_sum * tl.exp2(row_max * LOG2E - scaled_max)",
                "           + tl.sum(tl.exp2(val * LOG2E - scaled_max[:, None]), axis=1))",
                "row_max = new_max"]

    def _looped(self, head: list[str], loop: str, tile: list[str], after: list[str]) -> list[str]:
        """A looped kernel's lines: `head` (locating its rows), the targets, the online logsumexp
        over `loop` of `tile` (the lines loading val), what comes `after` the loop, the loss."""
        return [*head, f"LOG2E: tl.constexpr = {math.log2(math.e)!r}",
                "# The targets first: their load is under way while the logits stream.",
                self._target(),
                f"row_max = tl.full([BLOCK_R], {NEG_INF}, tl.float32)",
                "row_sum = tl.zeros([BLOCK_R], tl.float32)",
                "# Online logsumexp: the running sum is rescaled to each new running max. NUM_STAGES > 1",
                "# pipelines the loads through shared memory (cp.async).",
                loop, *("    " + line for line in tile + self._online_update()), *after, *self._loss()]

    def _kernel(self) -> str:
        tile = ["cols = start + tl.arange(0, BLOCK_V)[None, :]", "mask = (rows < R) & (cols < V)",
                *self.body_values("rows * V + cols", NEG_INF)]
        lines = self._looped(["rows = tl.program_id(0).to(tl.int64) * BLOCK_R + tl.arange(0, BLOCK_R)[:, None]"],
                             "for start in tl.range(0, V, BLOCK_V, num_stages=NUM_STAGES):", tile, [])
        return jit_source(f"{self.name}_kernel", self._params() + ["NUM_STAGES: tl.constexpr"], lines,
                          "    # BLOCK_R rows per program in BLOCK_V-wide chunks.\n")

    def _aligned_kernel(self) -> str:
        offs, mask = aligned_chunk("BLOCK_V")
        tile = [f"offs = {offs}", f"mask = {mask}", *self.body_values("offs", NEG_INF)]
        edge = [*EDGE_LINES, *self.body_values("offs", NEG_INF), *self._online_update()]
        lines = self._looped(aligned_span("BLOCK_R", "V"),
                             "for i in tl.range(0, tl.cdiv(hi - lo, BLOCK_V), num_stages=NUM_STAGES):", tile, edge)
        return jit_source(f"{self.name}_aligned_kernel",
                          self._params() + ["NUM_STAGES: tl.constexpr", "ALIGN: tl.constexpr"], lines, ALIGNED_COMMENT)

    def _persistent_kernel(self) -> str:
        # The prefetched raw tiles are named <input>_next, unless an input already has such a name.
        suffix, names = "_next", {i.local for i in self.inputs}
        while any(f"{i.local}{suffix}" in names for i in self.body_inputs):
            suffix += "_"
        fill = NEG_INF if self.is_bare_input else "0.0"
        prefetch = [f"{i.local}{suffix} = tl.load({i.local}_ptr + next_rows * V + cols, mask=(next_rows < R) & "
                    f"(cols < V), other={fill})" for i in self.body_inputs]
        values = [f"{i.local} = {i.local}{suffix}.to(tl.float32)" for i in self.body_inputs]
        values.append(f"val = {self.body_call()}" if self.is_bare_input
                      else f"val = tl.where((rows < R) & (cols < V), {self.body_call()}, {NEG_INF})")
        lines = [f"LOG2E: tl.constexpr = {math.log2(math.e)!r}",
                 "cols = tl.arange(0, BLOCK_V)[None, :]",
                 "first = tl.program_id(0) * BLOCK_R",
                 "step = tl.num_programs(0) * BLOCK_R",
                 "next_rows = first + tl.arange(0, BLOCK_R)[:, None].to(tl.int64)",
                 *prefetch,
                 "for r0 in range(first, R, step):",
                 "    rows = next_rows",
                 *("    " + line for line in values),
                 "    # The next rows' loads go out before these rows are reduced: they stay in flight",
                 "    # through the reductions (a register double buffer).",
                 "    next_rows = rows + step",
                 *("    " + line for line in prefetch),
                 "    row_max = tl.max(val, axis=1)",
                 "    row_sum = tl.sum(tl.exp2(val * LOG2E - (row_max * LOG2E)[:, None]), axis=1)",
                 "    " + self._target(),
                 *("    " + line for line in self._loss())]
        comment = ("    # Persistent: this program takes rows pid, pid + G, ... (G programs), each in one\n"
                   "    # BLOCK_V-wide tile (BLOCK_V >= V).\n")
        return jit_source(f"{self.name}_persistent_kernel", self._params(), lines, comment)

    def _mean_kernel(self) -> str:
        t = self.target.local
        lines = ["acc = tl.zeros([BLOCK], tl.float32)",
                 "count = tl.zeros([BLOCK], tl.float32)",
                 "for start in range(0, R, BLOCK):",
                 "    offs = start + tl.arange(0, BLOCK)",
                 "    acc += tl.load(losses_ptr + offs, mask=offs < R, other=0.0)",
                 f"    kept = tl.load({t}_ptr + offs, mask=offs < R, other={IGNORE_INDEX}) != {IGNORE_INDEX}",
                 "    count += kept.to(tl.float32)",
                 "tl.store(dst_ptr, (tl.sum(acc, axis=0) / tl.sum(count, axis=0)).to(dst_ptr.dtype.element_ty))"]
        comment = ("    # One program sums the per-row losses in a fixed order (deterministic, no atomics) and\n"
                   "    # divides by the rows not ignored (none: 0 / 0, NaN, as in torch).\n")
        return jit_source(f"{self.name}_mean_kernel", ["losses_ptr", f"{t}_ptr", "dst_ptr", "R", "BLOCK: tl.constexpr"],
                          lines, comment)

    def _launcher(self) -> str:
        first, t = self.body_inputs[0].local, self.target
        text = self._head()
        text += ("    # R rows of V classes, one class index per row.\n"
                 "    V = shape[-1]\n    R = shape[:-1].numel()\n"
                 f'    _require_full("{t.name}", {t.local}.shape, shape[:-1])\n'
                 f"    out = torch.empty({'()' if self.mean else 'shape[:-1]'}, dtype={first}.dtype, "
                 f"device={first}.device)\n")
        text += self._config_line("_cross_entropy_config(R, V)")
        text += _wrap("BLOCK_R, BLOCK_V, num_warps, num_stages = _cross_entropy_tiles",
                      ["config", "R", "V", self._elem_bytes()], "    ") + "\n"
        if self.mean:
            text += f"    losses = torch.empty(R, dtype=torch.float32, device={first}.device)  # summed below\n"
        tensors = [i.local for i in self.body_inputs] + [t.local, "losses" if self.mean else "out", "R", "V"]
        args = tensors + ["BLOCK_R=BLOCK_R", "BLOCK_V=BLOCK_V", "num_warps=num_warps"]
        text += align_elements(self.body_inputs) + ALIGNED_LAUNCH.format(also="", n="V")
        text += self._launch(f"{self.name}_aligned_kernel", "(R,)", tensors + [
            "BLOCK_R=1", "BLOCK_V=BLOCK_V", "num_warps=num_warps", "NUM_STAGES=num_stages", "ALIGN=ALIGN"], "        ")
        text += ("    # PER_SM > 0: that many persistent programs per SM (4 on the CPU interpreter), if a row\n"
                 "    # fits one tile (H200, 8192 fp16 classes: 41.0 against 43.9 us one program per row in one\n"
                 "    # sweep, 45.5 against 43.4 in another); else one program per BLOCK_R rows.\n"
                 '    elif config.get("PER_SM", 0) and BLOCK_V >= V:\n' + sm_count_line("sms", "out", "        "))
        text += self._launch(f"{self.name}_persistent_kernel", '(min(triton.cdiv(R, BLOCK_R), config["PER_SM"] * sms),)',
                             args, "        ")
        text += "    else:\n"
        text += self._launch(f"{self.name}_kernel", "(triton.cdiv(R, BLOCK_R),)", args + ["NUM_STAGES=num_stages"],
                             "        ")
        if self.mean:
            text += ("    # One program, 8192 rows a step: each step waits out a load's latency, and one step\n"
                     "    # covers the usual batch of rows.\n"
                     f"    {self.name}_mean_kernel[(1,)](losses, {t.local}, out, R, BLOCK=8192, num_warps=16)\n")
        return text + "    return out\n"
