"""The sort template: a sort, argsort or top-k over any one dim of a tensor, viewed as [A, D, B] with D
sorted: A * B lines of D elements (line r: a = r // B, b = r % B; where B > 1, neighbouring lines are
neighbouring in memory, so a tile's columns load together).

Each value becomes an int64 key that sorts as the value does (its float32 bits made order-preserving
as a signed integer, inverted for descending) with its index in the low 32 bits: equal values keep
their order, a stable sort, with one bitonic sort (tl.sort) of the keys. A program sorts BLOCK_R
lines of one chunk of CHUNK elements (a power of two); where one chunk holds the whole line, it
writes the first K (D for a sort, k for a top-k) values, decoded from the keys, and indices. A longer
line (a top-k's only) is cut into chunks that each keep their first K keys, and the merge kernel
sorts a line's kept keys together for its first K. -0.0 sorts as 0.0 and every NaN as the largest
value, as torch sorts them.
"""
from __future__ import annotations

from dataclasses import dataclass

from bot.codegen.code import jit_source
from bot.codegen.dim_kernel import ReducedBodyFile, _fit
from bot.codegen.kernel_file import _expanded

# The most keys one program sorts: a line (or a top-k's kept keys, together) at most this long.
MAX_TILE = 16384
_LAST = "0x7FFFFFFFFFFFFFFF"     # the largest int64 key: padding, which sorts after every value


# ---------------------------------------------------------------- launcher helpers (copied into kernel.py)

def _sort_config(A, D, B, K):
    # The default config for lines of D in an [A, D, B] view, the first K of each kept. A top-k of
    # 128 or fewer of a line past 1024: 1024-long chunks, a program each on 4 warps, doubled while
    # the chunks' kept keys outgrow the merge's tile (each chunk sorts less, and more programs run:
    # the space's best on vocabulary-long lines). Else a line that fits one program's tile is one
    # chunk; a longer one in 4096-long chunks, doubled likewise. Some 4K keys a program: several
    # short lines together (16 where B > 1, so a tile's columns load as whole sectors), on a warp
    # for each 512 keys.
    few = K <= 128 and D > 1024
    chunk = 1024 if few else 4096 if D > 16384 else _fit(16384, D)
    while chunk < min(D, 16384) and -(-D // chunk) * K > 16384:
        chunk *= 2
    if few:
        return {"BLOCK_R": 1, "CHUNK": chunk, "num_warps": 4}
    rows = max(16 if B > 1 else 1, 4096 // chunk)
    return {"BLOCK_R": rows, "CHUNK": chunk, "num_warps": max(1, min(16, rows * chunk // 512))}


def _sort_tiles(config, A, D, B, K):
    # The config fitted to this case: (BLOCK_R, CHUNK, MERGE, num_warps), MERGE the merge kernel's
    # tile (1 where one chunk holds the line), or None where a line's kept keys outgrow one tile
    # (a sort of more than 16K, or a top-k whose chunks' first K together are).
    # The chunk is at least K long (each keeps K) and at most the line; a tile at most 16K keys.
    config = {**_sort_config(A, D, B, K), **config}
    chunk = max(_fit(config["CHUNK"], D), 1 << (K - 1).bit_length())
    chunks = -(-D // chunk)
    if chunk > 16384 or (chunks > 1 and chunks * K > 16384):
        return None
    rows = max(1, min(_fit(config["BLOCK_R"], A * B), 16384 // chunk))
    merge = 1 if chunks == 1 else _fit(16384, chunks * K)
    return rows, chunk, merge, config["num_warps"]


# ---------------------------------------------------------------- kernel.py

_PACKED = jit_source("_packed", ["val", "index", "DESCENDING: tl.constexpr"], [
    "val = tl.where(val == 0.0, 0.0, val)           # -0.0 sorts as 0.0",
    "val = tl.where(val != val, float(\"nan\"), val)  # every NaN one NaN, the largest",
    "bits = val.to(tl.int32, bitcast=True)",
    "# negative floats' magnitude bits flipped: the bits order as signed integers as the floats do",
    "key = bits ^ ((bits >> 31) & 0x7FFFFFFF)",
    "if DESCENDING:",
    "    key = ~key",
    "return (key.to(tl.int64) << 32) | index.to(tl.int64)"],
    "    # A float32 value as an int64 key that sorts as it does, its index below: equal values keep\n"
    "    # their order.\n")

_STORE = jit_source("_store_span", ["packed", "rows", "lane", "R", "START", "K", "B", "values_ptr", "indices_ptr",
                                    "DESCENDING: tl.constexpr", "VALUES: tl.constexpr", "INDICES: tl.constexpr"], [
    "a, b = rows // B, rows % B",
    "offs = (a * K + lane - START) * B + b",
    "keep = (rows < R) & (lane >= START) & (lane < START + K)",
    "if VALUES:",
    "    key = (packed >> 32).to(tl.int32)",
    "    if DESCENDING:",
    "        key = ~key",
    "    val = (key ^ ((key >> 31) & 0x7FFFFFFF)).to(tl.float32, bitcast=True)",
    "    tl.store(values_ptr + offs, val.to(values_ptr.dtype.element_ty), mask=keep)",
    "if INDICES:",
    "    tl.store(indices_ptr + offs, packed & 0x7FFFFFFF, mask=keep)"],
    "    # Sorted keys START to START + K of each line: the values they encode and their indices.\n")


@dataclass(frozen=True)
class Pick:
    """What the kernel writes of each sorted line: `kind` "first" (the first k, or all where k is
    None: a sort, a top-k), "kth" (the k-th, its dim dropped: kthvalue) or "median" (the lower median,
    the ((D - 1) // 2)-th, its dim dropped); the values, the indices or both; largest first or not."""
    kind: str
    k: int | None
    values: bool
    indices: bool
    descending: bool
    keepdim: bool = False

    def span(self, d: int) -> tuple[int, int]:
        """(the first sorted position written, how many) on lines of d."""
        if self.kind == "kth":
            return self.k - 1, 1
        if self.kind == "median":
            return (d - 1) // 2, 1
        return 0, d if self.k is None else self.k

    def span_text(self) -> str:
        """The launcher's `START, K = ...` for lines of D."""
        if self.kind == "kth":
            return f"START, K = {self.k - 1}, 1"
        if self.kind == "median":
            return "START, K = (D - 1) // 2, 1"
        return f"START, K = 0, {'D' if self.k is None else self.k}"


class SortKernel(ReducedBodyFile):
    description = ("The input viewed as [A, D, B], D sorted: lines of D as int64 keys (the value's order-\n"
                   "preserving bits, the index below them: stable), BLOCK_R lines a program, sorted whole (tl.sort)\n"
                   "in one CHUNK, or (a long line) in chunks whose first keys the merge kernel sorts together;\n"
                   "sorted positions START to START + K of each line written.")
    block_key = "CHUNK"

    def __init__(self, spec, node, inputs, options, body, pick: Pick):
        super().__init__(spec, node, inputs, options, body)
        self.op, self.dim, self.pick = node.op, node.attr("dim"), pick
        self.views = [self._view(case, full) for case, full in enumerate(self.fulls)]     # (A, D, B) per case

    def _kept(self, d: int) -> int:
        """How many sorted keys of a line the kernel needs: up to the last it writes."""
        return sum(self.pick.span(d))

    def configs(self) -> list[dict]:
        defaults = [_sort_config(a, d, b, self._kept(d)) for a, d, b in self.views]
        candidates = [{**c, "BLOCK_R": r, "num_warps": w} for c in defaults
                      for r, w in ((1, 4), (1, 8), (2, 8), (4, 8), (8, 4), (16, 8), (32, 16))]
        # shorter chunks for a top-k of few: each sorts less, and more programs run, merged after
        chunked = [{"BLOCK_R": r, "CHUNK": n, "num_warps": w} for n in (1024, 2048, 4096)
                   for r, w in ((1, 4), (2, 8), (4, 8))]

        def fitted(config):
            return [_sort_tiles(config, a, d, b, self._kept(d)) for a, d, b in self.views]
        return self._space([c for c in defaults + candidates + chunked if None not in fitted(c)], fitted)

    def source(self) -> str:
        text = self._file([_PACKED, _STORE, self._chunk_kernel(), self._merge_kernel()],
                          [_fit, _sort_config, _sort_tiles, _expanded], self._launcher())
        pick = self.pick
        said = ("the values (the input's dtype) and their int64 indices" if pick.values and pick.indices else
                "the values, in the input's dtype" if pick.values else "int64 indices")
        return text.replace("the output has the first input's dtype", f"the outputs are {said}")

    def _flags(self) -> list[str]:
        return [f"DESCENDING={self.pick.descending}", f"VALUES={self.pick.values}", f"INDICES={self.pick.indices}"]

    def _chunk_kernel(self) -> str:
        x = self.body_inputs[0].local
        params = [f"{x}_ptr", "values_ptr", "indices_ptr", "kept_ptr", "R", "D", "B", "START", "K",
                  "BLOCK_R: tl.constexpr", "CHUNK: tl.constexpr", "WHOLE: tl.constexpr",
                  "DESCENDING: tl.constexpr", "VALUES: tl.constexpr", "INDICES: tl.constexpr"]
        lines = ["rows = tl.program_id(0).to(tl.int64) * BLOCK_R + tl.arange(0, BLOCK_R)[:, None]",
                 "lane = tl.arange(0, CHUNK)[None, :]",
                 "d = tl.program_id(1) * CHUNK + lane",
                 "mask = (rows < R) & (d < D)",
                 "a, b = rows // B, rows % B",
                 "offs = (a * D + d) * B + b",
                 *self.body_values("offs", "0.0"),
                 f"packed = tl.sort(tl.where(mask, _packed(val, d, DESCENDING), {_LAST}), dim=1)",
                 "if WHOLE:",
                 "    _store_span(packed, rows, lane, R, START, K, B, values_ptr, indices_ptr, DESCENDING, VALUES, "
                 "INDICES)",
                 "else:",
                 "    # this chunk's first START + K keys, beside the other chunks' of its line, for the merge",
                 "    KEPT = START + K",
                 "    kept = rows * (tl.num_programs(1) * KEPT) + tl.program_id(1) * KEPT + lane",
                 "    tl.store(kept_ptr + kept, packed, mask=(rows < R) & (lane < KEPT))"]
        return jit_source(f"{self.name}_chunk_kernel", params, lines,
                          "    # BLOCK_R lines, chunk program_id(1) of each, sorted.\n")

    def _merge_kernel(self) -> str:
        params = ["kept_ptr", "values_ptr", "indices_ptr", "R", "B", "START", "K", "M", "MERGE: tl.constexpr",
                  "DESCENDING: tl.constexpr", "VALUES: tl.constexpr", "INDICES: tl.constexpr"]
        lines = ["rows = tl.program_id(0).to(tl.int64) + tl.zeros([1, 1], tl.int64)",
                 "lane = tl.arange(0, MERGE)[None, :]",
                 f"packed = tl.load(kept_ptr + rows * M + lane, mask=lane < M, other={_LAST})",
                 "packed = tl.sort(packed, dim=1)",
                 "_store_span(packed, rows, lane, R, START, K, B, values_ptr, indices_ptr, DESCENDING, VALUES, INDICES)"]
        return jit_source(f"{self.name}_merge_kernel", params, lines,
                          "    # One line's kept keys, every chunk's first START + K, sorted together.\n")

    def _launcher(self) -> str:
        x = self.body_inputs[0].local
        text = self._head()
        kept_dim = "(K,)" if self.pick.kind == "first" else "(1,)" if self.pick.keepdim else "()"
        text += ("    # The input as [A, D, B]: D the sorted dim (as written, for this rank), B what follows it.\n"
                 f"    dim = {self.dim} % len(shape)\n"
                 "    A, D, B = math.prod(shape[:dim]), shape[dim], math.prod(shape[dim + 1:])\n"
                 "    # sorted positions START to START + K of each line are written\n"
                 f"    {self.pick.span_text()}\n"
                 f"    out_shape = shape[:dim] + {kept_dim} + shape[dim + 1:]\n")
        if self.pick.values:
            text += f"    values = torch.empty(out_shape, dtype={self.out_dtype(x)}, device={x}.device)\n"
        if self.pick.indices:
            text += f"    indices = torch.empty(out_shape, dtype=torch.int64, device={x}.device)\n"
        returned = ", ".join(n for n, on in (("values", self.pick.values), ("indices", self.pick.indices)) if on)
        first = returned.split(", ")[0]
        text += f"    if {first}.numel() == 0:\n        return {returned}\n"
        text += self._config_line("_sort_config(A, D, B, START + K)")
        text += ("    tiles = _sort_tiles(config, A, D, B, START + K)\n"
                 "    if tiles is None:\n"
                 "        raise ValueError(f'the first {START + K} of lines of {D}: each chunk\\'s would outgrow one '\n"
                 "                         'program together; ask for fewer')\n"
                 "    BLOCK_R, CHUNK, MERGE, num_warps = tiles\n"
                 "    chunks = _cdiv(D, CHUNK)\n")
        outs = [("values" if self.pick.values else first), ("indices" if self.pick.indices else first)]
        flags = self._flags()
        text += ("    # a long line's chunks each keep their first START + K keys, merged after\n"
                 f"    kept = {first} if chunks == 1 else torch.empty((A * B, chunks * (START + K)), dtype=torch.int64, "
                 f"device={x}.device)\n")
        text += self._launch(f"{self.name}_chunk_kernel", "(_cdiv(A * B, BLOCK_R), chunks)",
                             [x, *outs, "kept", "A * B", "D", "B", "START", "K", "BLOCK_R=BLOCK_R", "CHUNK=CHUNK",
                              "WHOLE=chunks == 1", *flags, "num_warps=num_warps"])
        text += "    if chunks > 1:\n"
        text += self._launch(f"{self.name}_merge_kernel", "(A * B,)",
                             ["kept", *outs, "A * B", "B", "START", "K", "chunks * (START + K)", "MERGE=MERGE", *flags,
                              "num_warps=max(1, min(16, MERGE // 512))"], "        ")
        return text + f"    return {returned}\n"
