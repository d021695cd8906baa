"""The scan template: a cumulative op (a running sum, product, max or min) over any one dim of a
pointwise body, the body viewed as [A, D, B] with D scanned; the output has the body's shape.

B > 1, the cols kernel: tiles [BLOCK_D, BLOCK_B] of BLOCK_B neighbouring columns of one a, so each
tile row is one coalesced load, scanned over axis 0. B == 1 (the last dim), the rows kernel: tiles
[BLOCK_R, BLOCK_D] of BLOCK_R rows, scanned over axis 1. Both walk D in BLOCK_D chunks in order,
each chunk scanned in registers (Triton's associative scan) and combined with the running value
the chunks before it left (`carry`), which the chunk's last lane then holds. Where few column
blocks would each walk all of D alone, the look-back kernel takes the cols tiles one a program,
D's chunks side by side, each chunk's carry from the totals the chunks before it publish. A reverse scan walks
D from its end (lane i of a chunk reads d = D - 1 - (start + i)), so the same forward scan of the
tile runs backwards over D; an exclusive scan reads each lane's value one step behind (the first
reads the op's identity). The math is the family's (bot.ops.scan.scan_math), in float32."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

from bot.codegen.code import body_text, indented, jit_source
from bot.codegen.dim_kernel import ReducedBodyFile, _fit, _fit_stages
from bot.codegen.kernel_file import _expanded


@dataclass(frozen=True)
class ScanMath:
    """The family's math for one op: its identity (what masked lanes and an exclusive scan's first
    lane hold), the scan of a tile over an axis (x, axis) and the combine of two values (a, b)."""
    identity: str
    scan: Callable[[str, int], str]
    combine: Callable[[str, str], str]


# ---------------------------------------------------------------- launcher helpers (copied into kernel.py)

def _scan_config(A, D, B):
    # The default config for a body viewed as [A, D, B], D scanned. B > 1: tiles of up to 128
    # columns, narrowed (to 16) while fewer than 512 programs would run, since each program walks
    # all of D alone; some 4K elements a tile, up to 256 deep (deep tiles keep loads in flight: a
    # [256, 16] tile was the space's best on 8192 and 6007 columns). B == 1: rows up to 1024 long
    # in one chunk with a program per row; longer rows in 512-wide chunks on 2 warps, pipelined 4
    # deep (the space's best on rows of 6007); short rows several per program so a tile holds
    # some 1K elements.
    if B > 1 and A * -(-B // 128) < 512 and D > 128:
        # few column blocks: D's chunks too run side by side, each one tile, chained by look-back
        return {"BLOCK_B": _fit(64, B), "BLOCK_D": 128, "num_warps": 4, "num_stages": 1, "LOOKBACK": 1}
    if B > 1:
        block = _fit(128, B)
        while block > 16 and A * -(-B // block) < 512:
            block //= 2
        return {"BLOCK_B": block, "BLOCK_D": _fit(min(256, 4096 // block), D), "num_warps": 4, "num_stages": 1,
                "LOOKBACK": 0}
    if D > 1024:
        return {"BLOCK_R": 1, "BLOCK_D": 512, "num_warps": 2, "num_stages": 4}
    block_d = _fit(1024, D)
    return {"BLOCK_R": max(1, min(16, 1024 // block_d)), "BLOCK_D": block_d, "num_warps": 4 if block_d >= 512 else 2,
            "num_stages": 1}


def _scan_tiles(config, A, D, B, elem_bytes):
    # The config fitted to this case, so any config runs on any case: (block, BLOCK_D, num_warps,
    # num_stages, lookback), block being BLOCK_B (B > 1) or BLOCK_R; elem_bytes, what a tile
    # element loads. Keys a config lacks (one made for the other layout) come from the default.
    config = {**_scan_config(A, D, B), **config}
    block = _fit(config["BLOCK_B"], B) if B > 1 else _fit(config["BLOCK_R"], A)
    # a cols tile of at most 16K elements (a rows config's chunk, 1024 x 64, outgrows shared memory)
    block_d = _fit(config["BLOCK_D"] if B == 1 else min(config["BLOCK_D"], max(1, 16384 // block)), D)
    stages = _fit_stages(config["num_stages"], block * block_d * elem_bytes)
    return block, block_d, config["num_warps"], stages, bool(B > 1 and config.get("LOOKBACK"))


# ---------------------------------------------------------------- kernel.py

@dataclass(frozen=True)
class _Layout:
    """Where a scan kernel's tile lies in the body's [A, D, B] view."""
    name: str                # kernel suffix
    block: str               # the tile's extent across D: BLOCK_B or BLOCK_R
    comment: str
    locate: tuple[str, ...]  # the program's columns or rows
    carry: str               # the running value's shape: one per column or row, kept 2-d
    lane: str                # each lane's step along D in the tile
    keep: str                # which columns or rows exist
    offs: str                # the elements' offsets, from `d`
    axis: int                # the tile's D axis


_COLS = _Layout(
    "cols", "BLOCK_B",
    "# BLOCK_B neighbouring columns of one a, scanned down D in [BLOCK_D, BLOCK_B] tiles: each tile\n"
    "# row is one coalesced load.",
    ("n_cols = tl.cdiv(B, BLOCK_B)", "a = (tl.program_id(0) // n_cols).to(tl.int64)",
     "cols = (tl.program_id(0) % n_cols) * BLOCK_B + tl.arange(0, BLOCK_B)[None, :]"),
    "[1, BLOCK_B]", "tl.arange(0, BLOCK_D)[:, None]", "(cols < B)", "(a * D + {d}) * B + cols", 0)


_ROWS = _Layout(
    "rows", "BLOCK_R",
    "# BLOCK_R rows (the scanned dim is the last), each scanned along itself in [BLOCK_R, BLOCK_D] tiles.",
    ("rows = tl.program_id(0).to(tl.int64) * BLOCK_R + tl.arange(0, BLOCK_R)[:, None]",),
    "[BLOCK_R, 1]", "tl.arange(0, BLOCK_D)[None, :]", "(rows < A)", "rows * D + {d}", 1)


class ScanKernel(ReducedBodyFile):
    description = ("The body viewed as [A, D, B], D scanned: tiles [BLOCK_D, BLOCK_B] of neighbouring columns when\n"
                   "B > 1 (cols kernel), [BLOCK_R, BLOCK_D] of whole rows when B == 1 (rows kernel). D is read in\n"
                   "BLOCK_D chunks in order, each scanned in registers and combined with the running value; or\n"
                   "(LOOKBACK) each cols tile is a program, its carry from the totals of the chunks before it.")
    block_key = "BLOCK_D"

    def __init__(self, spec, node, inputs, options, body, spaces: tuple[list[dict], list[dict]], math_: ScanMath):
        super().__init__(spec, node, inputs, options, body)
        self.op, self.dim, self.spaces, self.math = node.op, node.attr("dim"), spaces, math_
        self.reverse, self.exclusive = bool(node.attr("reverse")), bool(node.attr("exclusive"))
        if not isinstance(self.dim, int):
            raise ValueError(f"{self.op} runs over one integer dim, got {self.dim!r}")
        self.views = [self._view(case, full) for case, full in enumerate(self.fulls)]     # (A, D, B) per case

    def configs(self) -> list[dict]:
        defaults = [_scan_config(*view) for view in self.views]
        layouts = {b > 1 for _, _, b in self.views}
        cols, rows = self.spaces
        candidates = (cols if True in layouts else []) + (rows if False in layouts else [])
        return self._space(defaults + candidates,
                           lambda config: [_scan_tiles(config, *view, self.max_elem_bytes) for view in self.views])

    def source(self) -> str:
        return self._file([self._kernel(_COLS), self._kernel(_ROWS), self._lookback_kernel()],
                          [_fit, _fit_stages, _scan_config, _scan_tiles, _expanded], self._launcher())

    def _position(self) -> str:
        """Lane i's position along D in the chunk starting at step `start`: from the end when reversed."""
        return "D - 1 - (start + lane)" if self.reverse else "start + lane"

    def _loads(self, layout: _Layout) -> list[str]:
        """val: the body at each lane's position, or (exclusive) one step behind it, where the first
        reads the identity; masked lanes hold the identity, which changes no scan."""
        read = "d + 1" if self.exclusive and self.reverse else "d - 1" if self.exclusive else "d"
        inside = "(src < D)" if self.exclusive and self.reverse else "(src >= 0)" if self.exclusive else ""
        src = [f"src = {read}"] if self.exclusive else []
        mask = " & ".join(p for p in ("in_d", inside, layout.keep) if p)
        offs = layout.offs.format(d="src" if self.exclusive else "d")
        return [*src, f"mask = {mask}", f"offs = {offs}", *self.body_values("offs", self.math.identity)]

    def _kernel(self, layout: _Layout) -> str:
        params = [f"{i.local}_ptr" for i in self.body_inputs] + ["dst_ptr", "A", "D", "B"]
        params += [f"{layout.block}: tl.constexpr", "BLOCK_D: tl.constexpr", "NUM_STAGES: tl.constexpr"]
        last = "BLOCK_D - 1"
        step = [f"d = {self._position()}", "in_d = d >= 0" if self.reverse else "in_d = d < D",
                *self._loads(layout),
                f"scanned = {self.math.combine('carry', self.math.scan('val', layout.axis))}",
                f"tl.store(dst_ptr + {layout.offs.format(d='d')}, scanned.to(dst_ptr.dtype.element_ty), "
                f"mask=in_d & {layout.keep})",
                "# The running value through this chunk: its last lane (masked lanes hold the identity).",
                f"carry = tl.sum(tl.where(lane == {last}, scanned, 0.0), axis={layout.axis}, keep_dims=True)"]
        lines = [*layout.locate, f"lane = {layout.lane}",
                 f"carry = tl.full({layout.carry}, {self.math.identity}, tl.float32)",
                 "for start in tl.range(0, D, BLOCK_D, num_stages=NUM_STAGES):", *indented(step)]
        comment = body_text(layout.comment.split("\n"))
        return jit_source(f"{self.name}_{layout.name}_kernel", params, lines, comment)

    def _lookback_kernel(self) -> str:
        """The cols layout with D's chunks as programs too: each scans its one tile, publishes the
        tile's total, and looks back over the chunks before it (decoupled look-back, as CUB's scans
        do) for its carry: their totals, one chunk at a time (a window of 16 at one look measured
        slower), until one whose carry-inclusive prefix is out."""
        params = [f"{i.local}_ptr" for i in self.body_inputs] + ["dst_ptr", "A", "D", "B", "state_ptr", "part_ptr"]
        params += ["BLOCK_B: tl.constexpr", "BLOCK_D: tl.constexpr"]
        combine, identity = self.math.combine, self.math.identity
        wait = ["at = j * blocks + q",
                "flag = tl.atomic_add(state_ptr + 1 + at, 0, sem=\"acquire\")",
                "while flag == 0:",
                "    flag = tl.atomic_add(state_ptr + 1 + at, 0, sem=\"acquire\")",
                "# flag 1: chunk j's total (look further back); 2: its prefix, carry included (stop)",
                "got = tl.load(part_ptr + (at * 2 + flag - 1) * BLOCK_B + lane_b, cache_modifier=\".cg\")",
                f"carry = {combine('got', 'carry')}",
                "j = tl.where(flag == 2, -1, j - 1)"]
        lines = ["# A ticket, not the program id, orders the chunks: every lower ticket has started, so",
                 "# no program waits on one that cannot run.",
                 "ticket = tl.atomic_add(state_ptr, 1)",
                 "n_cols = tl.cdiv(B, BLOCK_B)",
                 "blocks = A * n_cols",
                 "q = ticket % blocks",
                 "start = (ticket // blocks) * BLOCK_D",
                 "a = (q // n_cols).to(tl.int64)",
                 "lane_b = tl.arange(0, BLOCK_B)[None, :]",
                 "cols = (q % n_cols) * BLOCK_B + lane_b",
                 f"lane = {_COLS.lane}",
                 f"d = {self._position()}", "in_d = d >= 0" if self.reverse else "in_d = d < D",
                 *self._loads(_COLS),
                 f"local = {self.math.scan('val', 0)}",
                 "total = tl.sum(tl.where(lane == BLOCK_D - 1, local, 0.0), axis=0, keep_dims=True)",
                 "me = ticket * 2 * BLOCK_B + lane_b",
                 "tl.store(part_ptr + me, total)",
                 "tl.debug_barrier()      # every thread's part stored before the flag says so",
                 "tl.atomic_xchg(state_ptr + 1 + ticket, 1, sem=\"release\")",
                 f"carry = tl.full([1, BLOCK_B], {identity}, tl.float32)",
                 "j = ticket // blocks - 1",
                 "while j >= 0:", *indented(wait),
                 f"tl.store(part_ptr + me + BLOCK_B, {combine('carry', 'total')})",
                 "tl.debug_barrier()",
                 "tl.atomic_xchg(state_ptr + 1 + ticket, 2, sem=\"release\")",
                 f"scanned = {combine('carry', 'local')}",
                 f"tl.store(dst_ptr + {_COLS.offs.format(d='d')}, scanned.to(dst_ptr.dtype.element_ty), "
                 f"mask=in_d & {_COLS.keep})"]
        return jit_source(f"{self.name}_lookback_kernel", params, lines)

    def _launcher(self) -> str:
        first = self.body_inputs[0].local
        text = self._head()
        text += ("    # The body as [A, D, B]: D the scanned dim (as written, for this rank), B what follows it.\n"
                 f"    dim = {self.dim} % len(shape)\n"
                 "    A, D, B = math.prod(shape[:dim]), shape[dim], math.prod(shape[dim + 1:])\n"
                 f"    out = torch.empty(shape, dtype={self.out_dtype(first)}, device={first}.device)\n"
                 "    if out.numel() == 0:\n        return out\n")
        text += self._config_line("_scan_config(A, D, B)")
        text += ("    block, BLOCK_D, num_warps, num_stages, lookback = _scan_tiles(config, A, D, B, "
                 f"{self._elem_bytes()})\n")
        args = [i.local for i in self.body_inputs] + ["out", "A", "D", "B"]
        tiles = ["BLOCK_D=BLOCK_D", "NUM_STAGES=num_stages", "num_warps=num_warps"]
        text += ("    if lookback:\n"
                 "        tiles = A * _cdiv(B, block) * _cdiv(D, BLOCK_D)\n"
                 "        # the ticket counter, then a flag per tile; each tile's total and prefix\n"
                 f"        state = torch.zeros(1 + tiles, dtype=torch.int32, device={first}.device)\n"
                 f"        part = torch.empty((tiles, 2, block), dtype=torch.float32, device={first}.device)\n")
        text += self._launch(f"{self.name}_lookback_kernel", "(tiles,)",
                             args + ["state", "part", "BLOCK_B=block", "BLOCK_D=BLOCK_D", "num_warps=num_warps"],
                             "        ")
        text += "    elif B > 1:\n"
        text += self._launch(f"{self.name}_cols_kernel", "(A * _cdiv(B, block),)", args + ["BLOCK_B=block", *tiles],
                             "        ")
        text += "    else:\n"
        text += self._launch(f"{self.name}_rows_kernel", "(_cdiv(A, block),)", args + ["BLOCK_R=block", *tiles],
                             "        ")
        return text + "    return out\n"

