"""The row template: an op over the last dim of a pointwise body, as BLOCK_M rows of N per
program. A row up to BLOCK_N long is one tile (one read); longer rows go through the looped
kernel in BLOCK_N-wide chunks; reductions over rows of no whole number of 16-byte vectors take
an aligned kernel. The family supplies the math (RowPlan: the statistics of a tile, their running
fold over chunks, the output); the config space and the default rule (ROW_CONFIGS, _row_config)
are the layout's, shared by every row family. Also the aligned-row pieces the cross-entropy
kernel reuses."""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Callable

from bot.codegen.code import Code, body_text, indented, jit_source, launch
from bot.codegen.kernel_file import Body, KernelFile, KernelInput, _expanded_strides, _require_full, empty_line, shape_lines
from bot.ops.node import Node, broadcast_shapes, input_names

# Row ops, after the default's pick for each of the spec's cases: one row per program with 4, 8
# or 16 warps, or two rows of 8K (BLOCK_N is the tile's width in elements: 16384 holds two);
# rows longer than 4096, 2048 or 1024 read in chunks (1K chunks won on rows of 6007 elements,
# which are not 16-byte aligned in fp16); short rows stacked into tiles of
# up to 1K or 4K elements (see _row_tile for how a config fits a shape); and whole rows of up to
# 16K-64K elements in one tile on 16 or 32 warps (one read of a vocabulary-long row).
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
    {"BLOCK_M": 1, "BLOCK_N": 16384, "num_warps": 16},
    {"BLOCK_M": 1, "BLOCK_N": 32768, "num_warps": 16},
    {"BLOCK_M": 1, "BLOCK_N": 32768, "num_warps": 32},
    {"BLOCK_M": 1, "BLOCK_N": 65536, "num_warps": 32},
]


def _row_config(rows, n, stack=1024, chunk=8192, wide=16, whole=8192):
    # The default config for `rows` rows of n: a row up to `whole` long is one tile (one read); a
    # longer one goes through the looped kernel in `chunk`-wide pieces. Short rows are stacked
    # BLOCK_M to a tile of about `stack` elements while at least ~256 programs remain (the 132 SMs
    # of an H200 twice over). Warps grow with the tile, to `wide` on whole rows past 4096 elements
    # and 32 on tiles past 8192. The launcher's family picks stack, chunk, wide and whole
    # (tests/default_vs_best.py measures the choice against every config of the space).
    block_n, block_m, widest = max(16, 1 << (n - 1).bit_length()), 1, whole
    if block_n > widest:            # a long row: chunk-wide pieces, one row a program, 16 warps
        block_n = widest = chunk
        stack, wide = 0, 16
    while block_m * block_n < stack and rows >= 2 * block_m * 256:
        block_m *= 2
    tile = block_m * block_n
    warps = 4 if tile <= 1024 else 8 if tile <= 4096 else wide if tile <= 8192 else 32
    return {"BLOCK_M": block_m, "BLOCK_N": widest, "num_warps": warps}


def _row_tile(rows, n, config):
    # (BLOCK_M, BLOCK_N, num_warps) of a config fitted to `rows` rows of n. The config's BLOCK_N is
    # the widest tile in elements: a row up to that long is one tile, a longer one is read in
    # BLOCK_N-wide chunks; up to BLOCK_M rows share a tile while it stays that small and there
    # are rows to fill it. So every config runs correctly on every shape.
    block_n = min(max(16, 1 << (n - 1).bit_length()), config["BLOCK_N"])
    block_m = min(config["BLOCK_M"], config["BLOCK_N"] // block_n, 1 << max(0, rows - 1).bit_length())
    return max(1, block_m), block_n, config["num_warps"]


_ROW_LAYOUT = ("d1", "m1", "s1", "d2", "m2", "s2")     # _row_strides' row terms, a launch argument each


def _row_strides(name, shape, full):
    # How a row kernel reads an input broadcast against rows of `full` ([..., N]): row r starts at
    # (r // d1 % m1) * s1 + (r // d2 % m2) * s2, column c at c * cs. The rows' dims, each with the
    # input's stride there (0 where broadcast), are merged into runs read alike; the runs the input
    # has (strides not 0) are at most two: [S, N] or [B, 1, N] under [B, S, N], a per-row value
    # [B, S, 1], a vector [N], a head's rows [1, H, 1, N] under [B, H, S, N]. Returns
    # (d1, m1, s1, d2, m2, s2, cs).
    strides = _expanded_strides(shape, full)
    runs = []                       # [size, stride] of each run of row dims read as one, outer first
    for size, stride in zip(full[:-1], strides[:-1]):
        if size == 1:               # its index is always 0
            continue
        if runs and runs[-1][1] == stride * size:      # contiguous with the next, or both broadcast
            runs[-1] = [runs[-1][0] * size, stride]
        else:
            runs.append([size, stride])
    terms, inner = [], 1
    for size, stride in reversed(runs):
        if stride:
            terms.append((inner, size, stride))
        inner *= size
    if len(terms) > 2:
        raise ValueError(f"input {name} has shape {list(shape)}, broadcast against {list(full)} in more places "
                         "than a row kernel reads (two runs of dims it holds); expand it to the full shape first")
    (d1, m1, s1), (d2, m2, s2) = (terms + [(1, 1, 0)] * 2)[:2]
    return d1, m1, s1, d2, m2, s2, strides[-1]


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


def align_elements(inputs: list[KernelInput]) -> str:
    """Launcher line: ALIGN, the elements in 16 bytes of the narrowest input."""
    sizes = [f"{i.local}.element_size()" for i in inputs]
    narrowest = sizes[0] if len(sizes) == 1 else f"min({', '.join(sizes)})"
    return f"    ALIGN = 16 // {narrowest}     # elements per 16 bytes of the narrowest input\n"


def sm_count_line(target: str, like: str, indent: str = "    ") -> str:
    """A launcher line setting target to the SM count of the GPU tensor `like` is on (4 on the CPU
    interpreter): what persistent kernels size their grids by."""
    return (f"{indent}{target} = torch.cuda.get_device_properties({like}.device).multi_processor_count "
            f"if {like}.is_cuda else 4\n")


@dataclass
class RowPlan:
    """How one row op is computed from the tile `val` of body values (masked lanes hold fill)."""
    fill: str
    single: list[str]           # statistics from a tile holding whole rows
    init: list[str]             # looped: before the first pass over the chunks
    chunk: list[str]            # looped: fold one chunk into the statistics
    final: list[str]            # looped: after the first pass
    output: str                 # per element (softmax, norms) or per row ("result", reductions)
    reduces: bool = False       # one value per row: stored from `result`, and the aligned kernel
    edge: tuple[str, ...] = ()  # reductions: fold the aligned kernel's edge tile `val` into acc
    guard: str = ""             # launcher lines before the launch (an empty dim torch refuses)
    # the default's warps for tiles past 4096 elements (_row_config's wide): 8 was the best of the
    # space for softmax and rmsnorm on rows of 6007, within 2% of 16 on rows of 8192
    wide_warps: int = 8
    # the longest row the default reads as one tile, and the chunk of longer rows (_row_config's
    # whole and chunk; reductions walk long rows 1024 at a time whatever this says)
    whole: int = 8192


class RowKernel(KernelFile):
    description = ("BLOCK_M rows of N per program, each row one BLOCK_N tile when it fits (one read);\n"
                   "longer rows go through the looped kernel in BLOCK_N chunks.")
    block_key = "BLOCK_N"

    def __init__(self, spec, node, inputs, options, plan: Callable[[Node, str | None, str | None], RowPlan],
                 body: Callable[[Node, list[KernelInput]], Body]):
        by_name = {i.name: i for i in inputs}
        body_inputs = [i for i in inputs if i.name in input_names(node.args[0])]
        extras = iter(by_name[a.name] for a in node.args[1:])
        self.weight = next(extras) if node.attr("has_weight") else None
        self.bias = next(extras) if node.attr("has_bias") else None
        self.affine = [e for e in (self.weight, self.bias) if e]
        super().__init__(spec, body(node.args[0], body_inputs), inputs, body_inputs, options)
        self.plan = plan(node, self.weight and self.weight.local, self.bias and self.bias.local)
        self.reduces = self.plan.reduces
        # Inputs that are full in every case are read at the row's own offsets; the others get a
        # row stride and a constexpr column stride, decided at launch. Every case is checked here.
        fulls = [broadcast_shapes([i.shapes[c] for i in body_inputs]) for c in range(len(inputs[0].shapes))]
        self.rows_of = [(math.prod(full[:-1]), full[-1] if full else 1) for full in fulls]    # (R, N) per case
        self.partial = []
        for i in body_inputs:
            for shape, full in zip(i.shapes, fulls):
                _row_strides(i.name, shape, full)
            if any(math.prod(shape) != math.prod(full) for shape, full in zip(i.shapes, fulls)):
                self.partial.append(i)

    def default_shape(self) -> tuple[int, int, int, int]:
        """_row_config's (stack, chunk, wide, whole) for this kernel: a reduction stacks rows to 4096
        elements and walks long rows 1024 at a time, a norm (weights) stacks to 2048, softmax-like
        ops to 1024 and take long rows in chunks as wide as their longest whole row; wide and whole
        are the plan's."""
        if self.reduces:
            return 4096, 1024, self.plan.wide_warps, self.plan.whole
        return (2048 if self.affine else 1024), self.plan.whole, self.plan.wide_warps, self.plan.whole

    def configs(self) -> list[dict]:
        defaults = [_row_config(rows, n, *self.default_shape()) for rows, n in self.rows_of]
        return self._space(defaults + ROW_CONFIGS, lambda config: [_row_tile(*case, config) for case in self.rows_of])

    def source(self) -> str:
        kernels = [self._kernel(looped=False), self._kernel(looped=True)]
        kernels += [self._aligned_kernel()] if self._aligns() else []
        return self._file(kernels, [_row_config, _row_tile, _expanded_strides, _row_strides, _require_full],
                          self._launcher())

    def _aligns(self) -> bool:
        """Whether the file has the aligned kernel: reductions whose inputs are all read at the
        row's own offsets (one offset serves every input)."""
        return self.reduces and not self.partial

    def _params(self) -> list[str]:
        params = [f"{i.local}_ptr" for i in self.inputs] + ["out_ptr", "R", "N"]
        params += [f"{i.local}_{k}" for i in self.partial for k in _ROW_LAYOUT]
        params += [f"{i.local}_cs: tl.constexpr" for i in self.partial]
        params += ["ALIGN: tl.constexpr", "TAIL: tl.constexpr"] if self.affine else []
        return params + ["BLOCK_M: tl.constexpr", "BLOCK_N: tl.constexpr"]

    def _tile(self, cols: str) -> list[str]:
        """Load one [BLOCK_M, BLOCK_N] tile of every body input and compute val, the body's values."""
        lines = [f"cols = {cols}", "mask = (rows < R) & (cols < N)"]
        for i in self.body_inputs:
            x = i.local
            offs = (f"(rows // {x}_d1 % {x}_m1) * {x}_s1 + (rows // {x}_d2 % {x}_m2) * {x}_s2 + cols * {x}_cs"
                    if i in self.partial else "rows * N + cols")
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
        return ["if TAIL:     # the columns after the weights' last whole 16-byte vector", *indented(tile)]

    def _kernel(self, looped: bool) -> str:
        code = Code()("rows = tl.program_id(0).to(tl.int64) * BLOCK_M + tl.arange(0, BLOCK_M)[:, None]")
        if self.affine:
            code("# The weights load in 16-byte vectors only under a mask that ends on one: the tile",
                 "# writes the columns before NV, the tail tile (odd N only) the rest.",
                 "NV = tl.multiple_of(N // ALIGN * ALIGN, ALIGN) if TAIL else N")
        if not looped:
            comment = "    # BLOCK_M whole rows per program (N <= BLOCK_N): every input is read once.\n"
            code.extend(self._tile("tl.arange(0, BLOCK_N)[None, :]") + self.plan.single + self._write() + self._tail())
        else:
            comment = ("    # Rows longer than BLOCK_N, in BLOCK_N-wide chunks: the first pass gathers each row's\n"
                       + ("    # statistics, the second recomputes each chunk and writes it.\n" if not self.reduces
                          else "    # result.\n"))
            chunk_loop = "for start in range(0, N, BLOCK_N):"
            tile = self._tile("start + tl.arange(0, BLOCK_N)[None, :]")
            code.extend(self.plan.init)
            with code.block(chunk_loop):
                code.extend(tile + self.plan.chunk)
            code.extend(self.plan.final)
            if self.reduces:
                code.extend(self._write())
            else:
                with code.block(chunk_loop):
                    code.extend(tile + self._write())
                code.extend(self._tail())
        suffix = "_looped_kernel" if looped else "_kernel"
        return jit_source(f"{self.name}{suffix}", self._params(), code.lines, comment)

    def _aligned_kernel(self) -> str:
        lines = [*aligned_span("BLOCK_M", "N"),
                 *self.plan.init,
                 "for i in range(0, tl.cdiv(hi - lo, BLOCK_N)):",
                 *indented(self._flat_tile(*aligned_chunk("BLOCK_N")) + self.plan.chunk),
                 *EDGE_LINES, *self.body_values("offs", self.plan.fill),
                 "# Reduced, then folded into the accumulators' first lane.",
                 *self.plan.edge,
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
                + launch(f"{self.name}_aligned_kernel", "(R,)", args, "        ") + "\n"
                "        return out\n")

    def _launcher(self) -> str:
        first = self.inputs[0].local
        text = self._signature_and_prologue()
        checks = [f'_require_full("{i.name}", {i.local}.shape, shape)' for i in self.body_inputs
                  if i not in self.partial]
        text += body_text(shape_lines([i.local for i in self.body_inputs], checks, always=bool(self.partial)))
        text += "    N = shape[-1]\n    R = shape[:-1].numel()\n"
        for i in self.partial:
            layout = ", ".join(f"{i.local}_{k}" for k in (*_ROW_LAYOUT, "cs"))
            text += f'    {layout} = _row_strides("{i.name}", {i.local}.shape, shape)\n'
        for e in self.affine:
            text += f'    _require_full("{e.name}", {e.local}.shape, shape[-1:])\n'
        text += align_elements(self.affine) if self.affine else ""
        if self.reduces:
            text += f"    out = torch.empty(shape[:-1], dtype={self.out_dtype(first)}, device={first}.device)\n"
        else:
            text += body_text([empty_line(first, self.out_dtype(first), "shape")])
        text += self.plan.guard
        stack, chunk, wide, whole = self.default_shape()
        text += self._config_line(f"_row_config(R, N, {stack}, {chunk}, {wide}, {whole})")
        text += "    BLOCK_M, BLOCK_N, num_warps = _row_tile(R, N, config)\n"
        text += self._aligned_launch() if self._aligns() else ""
        text += f"    kernel = {self.name}_kernel if N <= BLOCK_N else {self.name}_looped_kernel\n"
        args = [i.local for i in self.inputs] + ["out", "R", "N"]
        args += [f"{i.local}_{k}" for i in self.partial for k in _ROW_LAYOUT]
        args += [f"{i.local}_cs={i.local}_cs" for i in self.partial]
        args += ["ALIGN=ALIGN", "TAIL=N % ALIGN != 0"] if self.affine else []
        text += "    grid = (_cdiv(R, BLOCK_M),)\n"
        text += launch("kernel", "grid", args + ["BLOCK_M=BLOCK_M", "BLOCK_N=BLOCK_N", "num_warps=num_warps"], "    ") + "\n"
        return text + "    return out\n"
