"""The dim template: a reduction over any one dim of a pointwise body, the body viewed as [A, D, B]
with D reduced. B > 1, the cols kernel: tiles [BLOCK_D, BLOCK_B] whose BLOCK_B outputs lie side by
side in memory, so each tile row is one coalesced load. B == 1 (the last dim), the rows kernel:
tiles [BLOCK_R, BLOCK_D] of BLOCK_R rows. Both loop over D in BLOCK_D chunks. The cols kernel folds
each chunk into one accumulator per lane of the tile, reduced once after the loop; the rows kernel
of sum/mean/max/min reduces each chunk as it arrives into accumulators one column wide;
argmax/argmin keep one per lane of the tile in the cols kernel and, in the rows kernel, each row's
running extreme and its index (a chunk's extreme that beats it is searched for its first index; a
chunk that does not costs one reduction). Both may split D over SPLIT_D programs, which write
float32 partials that a small kernel combines in a fixed order: deterministic, no atomics.

The reduce and argreduce families lower to it with their config spaces; the default rule
(_reduce_config) is the layout's. ReducedBodyFile is also the cross-entropy file's base."""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Callable

from bot.codegen.code import body_text, indented, jit_source, launch, wrap
from bot.codegen.kernel_file import Body, KernelFile, KernelInput, _expanded
from bot.codegen.row_kernel import (EDGE_LINES, _row_config, _row_tile, align_elements, aligned_chunk, aligned_span,
                                    refuse_empty_dim)
from bot.ops.node import ALL, WITH_INDICES, Node, broadcast_shapes, input_names

MAX_CONFIGS = 12            # a small, deliberate space: the benchmark times each config on each case


NO_INDEX = 2**31 - 1        # an index no element has: it loses every tie to a real one (int32 indices)


MAX_ARG_DIM = 2**30         # argmax/argmin dims shorter than this keep start + lane far from int32 overflow


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
    # The default config for a body viewed as [A, D, B], D reduced. B > 1, with 128 or more
    # 64-wide column blocks: each block walks all of D 64 rows at a time, pipelined 6 deep. With
    # fewer: 256 x 16 tiles, each thread on its own columns (the tile reduces inside threads),
    # and D split until ~1024 programs run (a split may be one chunk). B == 1: whole-row tiles as
    # the row kernels choose them, D split while fewer than ~1024 programs run and each split
    # keeps 16+ BLOCK_D chunks (8 programs per SM: loads enough in flight without pipelining). Rows
    # not of whole 16-byte vectors take the unpipelined 256 x 16 tiles whatever their count.
    # tests/default_vs_best.py measures these against the space. arg_reduce (argmax/argmin): small tiles instead,
    # 512 x 4 pipelined (two accumulators per tile element) where rows are 16-byte aligned, or one
    # row on one warp in 512-wide chunks, not pipelined: pipelining gained little on aligned rows
    # and lost much on rows that are not 16-byte aligned (docs/BENCHMARKS.md).
    # rows of a whole number of 16-byte vectors (B % 8 == 0 in any float dtype); on others pipelined
    # loads go element by element (a sum over dim 1 of 128x4096x4095 ran at a sixth of torch's speed)
    aligned = B % 8 == 0
    if B > 1 and not arg_reduce and aligned and A * -(-B // 64) >= 128:
        # enough 64-wide column blocks to fill the GPU: each walks all of D, 6 chunks in flight
        return {"BLOCK_B": _fit(64, B), "BLOCK_D": 64, "SPLIT_D": 1, "num_warps": 4, "num_stages": 6}
    if B > 1:
        # argmax/argmin on aligned rows: 512 x 4 tiles pipelined 3 deep; on others 256 x 8 not
        # pipelined (the space's best on 8192 and on 6007 columns)
        key, block = "BLOCK_B", _fit(512 if arg_reduce and aligned else 256, B)
        block_d, warps, stages = ((4, 2, 3) if aligned else (8, 2, 1)) if arg_reduce else (16, 2, 1)
        programs = A * -(-B // block)
    elif arg_reduce:
        key, block, block_d, warps, stages = "BLOCK_R", 1, _fit(512, D), 1, 1
        programs = A
    else:
        key, stages = "BLOCK_R", 1
        block, block_d, warps = _row_tile(A, D, _row_config(A, D))
        programs = -(-A // block)
    split, depth = 1, 1 if B > 1 and not arg_reduce else 16      # chunks each split keeps, at least
    while programs * split < 1024 and D >= split * depth * block_d:
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


# ---------------------------------------------------------------- kernel.py

@dataclass(frozen=True)
class Reduction:
    """The family's math the template writes with (bot.ops.reduce.reduction): what masked lanes
    hold, the combine of a tile over an axis (x, axis, keep_dims) and the line folding x into the
    accumulators `acc`. argmax/argmin pass their extreme's (max's, min's)."""
    fill: str
    combine: Callable[..., str]
    fold: Callable[[str], str]


def _full_shapes(body_inputs: list[KernelInput]) -> list[list[int]]:
    """The body's shape per case, which the launcher expands every body input to."""
    return [broadcast_shapes([i.shapes[case] for i in body_inputs]) for case in range(len(body_inputs[0].shapes))]


class ReducedBodyFile(KernelFile):
    """What the dim-reduction and cross-entropy files add to every kernel file's: the launcher's
    head, the body's shape per case, and the bytes a tile element loads."""

    def __init__(self, spec, node, inputs, options, body: Callable[[Node, list[KernelInput]], Body]):
        body_names = input_names(node.args[0])
        body_inputs = [i for i in inputs if i.name in body_names]
        super().__init__(spec, body(node.args[0], body_inputs), inputs, body_inputs, options)
        self.fulls = _full_shapes(body_inputs)
        # Worst-case bytes one tile element loads (float32 inputs): what pipelining may keep in flight.
        self.max_elem_bytes = 4 * len(body_inputs)

    def _head(self) -> str:
        """Signature, contiguous inputs, and the body's `shape`, which every body input is expanded to."""
        text = self._signature_and_prologue()
        text += f"    shape = _broadcast_shape({', '.join(f'{i.local}.shape' for i in self.body_inputs)})\n"
        if any(math.prod(i.shapes[c]) != math.prod(full) for i in self.body_inputs for c, full in enumerate(self.fulls)):
            text += ("    # The kernels read every input at the body's own offsets: an input broadcast over it (a\n"
                     "    # per-row [N] beside an [N, C]) is copied out to the body's shape first.\n")
        return text + "".join(f"    {i.local} = _expanded({i.local}, shape)\n" for i in self.body_inputs)

    def _view(self, case: int, full: list[int]) -> tuple[int, int, int]:
        """(A, D, B) of the body of case `case` (shape full): D the dim the family's op works over
        (self.dim), A the product of the dims before it, B of those after it."""
        if not -len(full) <= self.dim < len(full):
            raise ValueError(f"{self.op} over dim {self.dim}, but case {case + 1} has shape {full}")
        d = self.dim % len(full)
        return math.prod(full[:d]), full[d], math.prod(full[d + 1:])

    def _elem_bytes(self) -> str:
        return " + ".join(f"{i.local}.element_size()" for i in self.body_inputs)

    @staticmethod
    def _launch(kernel: str, grid: str, args: list[str], indent: str = "    ") -> str:
        return f"{indent}grid = {grid}\n" + launch(kernel, "grid", args, indent) + "\n"


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




_TL_EXTREME = {"argmax": "tl.max", "argmin": "tl.min"}     # NaN is handled apart for these


_BEATEN = {"argmax": "<=", "argmin": ">="}                  # a lane's value stays unless val beats it


class DimKernel(ReducedBodyFile):
    description = ("The body viewed as [A, D, B], D reduced: tiles [BLOCK_D, BLOCK_B] of neighbouring outputs when\n"
                   "B > 1 (cols kernel), [BLOCK_R, BLOCK_D] of whole rows when B == 1 (rows kernel). D is read in\n"
                   "BLOCK_D chunks, split over SPLIT_D programs whose float32 partials the combine kernel\n"
                   "reduces in a fixed order (deterministic).")
    block_key = "BLOCK_D"

    def __init__(self, spec, node, inputs, options, body, spaces: tuple[list[dict], list[dict]], arg: bool,
                 reduction: Reduction):
        super().__init__(spec, node, inputs, options, body)
        self.op, self.dim, self.arg, self.spaces = node.op, node.attr("dim", -1), arg, spaces
        self.reduction = reduction
        # torch.max(x, dim) whole: the extreme's values stored beside its indices
        self.values = node.op in WITH_INDICES
        self.op = WITH_INDICES.get(node.op, self.op)
        if not (isinstance(self.dim, int) or self.dim == ALL):
            raise ValueError(f"{self.op} takes one integer dim, or every element, got {self.dim!r}")
        self.views = [self._view(case, full) for case, full in enumerate(self.fulls)]     # (A, D, B) per case
        for case, (_, d, _) in enumerate(self.views):
            if self.arg and d >= MAX_ARG_DIM:
                raise ValueError(f"{self.op} over a dim of {d} (case {case + 1}); this kernel indexes dims "
                                 f"shorter than {MAX_ARG_DIM}")

    def _view(self, case: int, full: list[int]) -> tuple[int, int, int]:
        """(A, D, B) of the body: D the reduced dim, or every element as [1, D, 1]."""
        if self.dim == ALL:
            return 1, math.prod(full), 1
        return super()._view(case, full)

    def configs(self) -> list[dict]:
        defaults = [_reduce_config(*view, self.arg) for view in self.views]
        layouts = {b > 1 for _, _, b in self.views}
        cols, rows = self.spaces
        candidates = (cols if True in layouts else []) + (rows if False in layouts else [])
        return self._space(defaults + candidates, lambda config: [
            _reduce_tiles(config, *view, self.max_elem_bytes, self.arg) for view in self.views])[:MAX_CONFIGS]

    def source(self) -> str:
        kernels = [self._kernel(_COLS), self._kernel(_ROWS), self._aligned_kernel(), self._combine_kernel()]
        helpers = [_row_config, _row_tile, _fit, _fit_stages, _reduce_config, _reduce_tiles, _combine_block,
                   _expanded]
        text = self._file(kernels, helpers, self._launcher())
        # The file head speaks of float outputs; argmax/argmin return indices.
        if self.values:
            return text.replace("the output has the first input's dtype", "the outputs are the values (the first "
                                "input's dtype) and their int64 indices")
        return text.replace("the output has the first input's dtype", "the output holds int64 indices") \
            if self.arg else text

    def _ptrs(self) -> list[str]:
        return ["dst_ptr"] + (["idx_ptr"] if self.arg else []) + self._value_ptr()

    def _value_ptr(self) -> list[str]:
        """The values output's pointer, where the kernel stores the extreme too."""
        return ["val_ptr"] if self.values else []

    def _returned(self) -> str:
        """What the launcher returns: the output, or the values and their indices."""
        return "values, out" if self.values else "out"

    def _dsts(self) -> list[str]:
        """What the launcher passes for _ptrs: the output, or the partials of a split."""
        return ["dst"] + (["dst_idx"] if self.arg else [])

    def _running(self, layout: _Layout) -> bool:
        """Whether argmax/argmin keep each output's running extreme and index (rows kernel) rather
        than one (value, tile start) per lane (cols kernel)."""
        return self.arg and layout is _ROWS

    def _init(self, layout: _Layout) -> list[str]:
        if not self.arg:
            return [f"acc = tl.full({layout.acc}, {self.reduction.fill}, tl.float32)"]
        if self._running(layout):
            return [f"result = tl.full([BLOCK_R], {self.reduction.fill}, tl.float32)",
                    "index = tl.full([BLOCK_R], 0, tl.int32) + d_lo"]
        return [f"acc = tl.full({layout.tile}, {self.reduction.fill}, tl.float32)",
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
            folded = "val" if layout.per_lane else self.reduction.combine("val", layout.axis, keep_dims=True)
            return [self.reduction.fold(folded)]
        if self._running(layout):
            return ["# The chunk's extreme, NaN if it holds one, replaces the running one if it beats it or is a",
                    "# first NaN (equal values keep the earlier index, as in torch); only then is the chunk",
                    "# searched for its first index. Most chunks of most data cost this one reduction.",
                    f"top = {self.reduction.combine('val', 1)}",
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
            return [f"result = {self.reduction.combine('acc', axis)}"]
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
            also = [f"tl.store(val_ptr + out_offs, result{expand}.to(val_ptr.dtype.element_ty), mask={keep})"]
            return [f"tl.store(dst_ptr + out_offs, {value}{expand}.to(dst_ptr.dtype.element_ty), mask={keep})",
                    *(also if self.values else [])]
        lines = [f"tl.store(dst_ptr + out_offs, result{expand}, mask={keep})"]
        return lines + ([f"tl.store(idx_ptr + out_offs, index{expand}, mask={keep})"] if self.arg else [])

    def _kernel(self, layout: _Layout) -> str:
        params = [f"{i.local}_ptr" for i in self.body_inputs] + self._ptrs() + ["A", "D", "B", "chunk"]
        params += [f"{layout.block}: tl.constexpr", "BLOCK_D: tl.constexpr", "FINAL: tl.constexpr",
                   "NUM_STAGES: tl.constexpr"]
        loop = [f"d = start + {layout.lane}", f"mask = {layout.mask}", f"offs = {layout.offs}",
                *self.body_values("offs", self.reduction.fill), *self._fold(layout)]
        lines = [*layout.locate, "s = tl.program_id(1)", "d_lo = s * chunk", "d_hi = tl.minimum(d_lo + chunk, D)",
                 *self._init(layout),
                 "# NUM_STAGES > 1 pipelines the loads through shared memory (cp.async).",
                 "for start in tl.range(d_lo, d_hi, BLOCK_D, num_stages=NUM_STAGES):",
                 *indented(loop),
                 *self._after_loop(layout), f"out_offs = {layout.out_offs}",
                 "if FINAL:", *indented(self._store(True, layout.expand, layout.keep)),
                 "else:", *indented(self._store(False, layout.expand, layout.keep))]
        comment = body_text(layout.comment.split("\n"))
        return jit_source(f"{self.name}_{layout.name}_kernel", params, lines, comment)

    def _aligned_kernel(self) -> str:
        offs, mask = aligned_chunk("BLOCK_D")
        position = ["d = (offs - base).to(tl.int32)"] if self.arg else []
        values = [*position, *self.body_values("offs", self.reduction.fill)]
        lines = [*aligned_span("BLOCK_R", "D"), "d_lo = 0     # the whole row", *self._init(_ROWS),
                 "for i in tl.range(0, tl.cdiv(hi - lo, BLOCK_D), num_stages=NUM_STAGES):",
                 *indented([f"offs = {offs}", f"mask = {mask}", *values, *self._fold(_ROWS)]),
                 *EDGE_LINES, *values, *(self._edge_fold() if self.arg else self._fold(_ROWS)),
                 *self._after_loop(_ROWS), "out_offs = rows", *self._store(True, "[:, None]", "rows < A")]
        params = [f"{i.local}_ptr" for i in self.body_inputs] + ["dst_ptr", *self._value_ptr(), "A", "D"]
        params += [f"{c}: tl.constexpr" for c in ("BLOCK_R", "BLOCK_D", "NUM_STAGES", "ALIGN")]
        return jit_source(f"{self.name}_aligned_kernel", params, lines, ALIGNED_COMMENT)

    def _edge_fold(self) -> list[str]:
        """argmax/argmin's fold of the aligned kernel's edge tile, after the row's body: the head
        precedes the body, so the edge also takes a tie it holds at an earlier index."""
        return [f"top = {self.reduction.combine('val', 1)}",
                f"at = tl.min(tl.where(mask & ((val == top[:, None]) | (val != val)), d, {NO_INDEX}), axis=1)",
                "same = (top == result) | ((top != top) & (result != result))",
                f"take = (~(top {_BEATEN[self.op]} result) & (result == result)) | (same & (at < index))",
                "index = tl.where(take, at, index)",
                "result = tl.where(take, top, result)"]

    def _combine_kernel(self) -> str:
        params = ["ws_ptr"] + (["ws_idx_ptr"] if self.arg else []) + ["dst_ptr", *self._value_ptr(), "M", "SPLIT", "D",
                                                                      "BLOCK: tl.constexpr", "SPLIT_P2: tl.constexpr"]
        loads = [f"acc = tl.load(ws_ptr + s * M + out_offs, mask=mask, other={self.reduction.fill})"]
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
        return refuse_empty_dim(self.op, "D", "dim") + f"    if out.numel() == 0:\n        return {self._returned()}\n"

    def _launcher(self) -> str:
        first = self.body_inputs[0].local
        dtype = "torch.int64" if self.arg else self.out_dtype(first)
        text = self._head()
        if self.dim == ALL:
            text += ("    # Every element reduced: the body as [1, D, 1].\n"
                     "    dim, A, D, B = None, 1, math.prod(shape), 1\n"
                     f"    out = torch.empty((), dtype={dtype}, device={first}.device)\n")
        else:
            text += ("    # The body as [A, D, B]: D the reduced dim (as written, for this rank), B what follows it.\n"
                     f"    dim = {self.dim} % len(shape)\n"
                     "    A, D, B = math.prod(shape[:dim]), shape[dim], math.prod(shape[dim + 1:])\n"
                     f"    out = torch.empty(shape[:dim] + shape[dim + 1:], dtype={dtype}, device={first}.device)\n")
        if self.values:
            text += f"    values = torch.empty(out.shape, dtype={self.out_dtype(first)}, device={first}.device)\n"
        text += self._empty_dims()
        arg_reduce = ["arg_reduce=True"] if self.arg else []
        text += self._config_line(f"_reduce_config({', '.join(['A', 'D', 'B', *arg_reduce])})")
        text += wrap("block, BLOCK_D, SPLIT, chunk, num_warps, num_stages = _reduce_tiles",
                      ["config", "A", "D", "B", self._elem_bytes(), *arg_reduce], "    ") + "\n"
        text += align_elements(self.body_inputs) + ALIGNED_LAUNCH.format(also="B == 1 and SPLIT == 1 and ", n="D")
        vals = ["values"] if self.values else []
        returned = self._returned()
        aligned = [i.local for i in self.body_inputs] + ["out", *vals, "A", "D", "BLOCK_R=1", "BLOCK_D=BLOCK_D",
                                                         "NUM_STAGES=num_stages", "ALIGN=ALIGN", "num_warps=num_warps"]
        text += self._launch(f"{self.name}_aligned_kernel", "(A,)", aligned, "        ") + f"        return {returned}\n"
        text += "    # One split writes the output; more write float32 partials for the combine kernel.\n"
        for dst, kind in zip(self._dsts(), ("float32", "int32")):
            text += (f"    {dst} = out if SPLIT == 1 else "
                     f"torch.empty((SPLIT, A * B), dtype=torch.{kind}, device=out.device)\n")
        args = [i.local for i in self.body_inputs] + self._dsts() + vals + ["A", "D", "B", "chunk"]
        consts = ["BLOCK_D=BLOCK_D", "FINAL=SPLIT == 1", "NUM_STAGES=num_stages", "num_warps=num_warps"]
        text += "    if B > 1:\n"
        text += self._launch(f"{self.name}_cols_kernel", "(A * _cdiv(B, block), SPLIT)",
                             args + ["BLOCK_B=block"] + consts, "        ")
        text += "    else:\n"
        text += self._launch(f"{self.name}_rows_kernel", "(_cdiv(A, block), SPLIT)",
                             args + ["BLOCK_R=block"] + consts, "        ")
        text += "    if SPLIT > 1:\n        BLOCK, SPLIT_P2 = _combine_block(A * B, SPLIT)\n"
        combine = self._dsts() + ["out", *vals, "A * B", "SPLIT", "D", "BLOCK=BLOCK", "SPLIT_P2=SPLIT_P2",
                                  "num_warps=4"]
        text += launch(f"{self.name}_combine_kernel", "(_cdiv(A * B, BLOCK),)", combine, "        ") + "\n"
        return text + f"    return {returned}\n"
