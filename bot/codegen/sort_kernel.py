"""The sort template: a sort, argsort or top-k over any one dim of a tensor, viewed as [A, D, B] with D
sorted: A * B lines of D elements (line r: a = r // B, b = r % B; where B > 1, neighbouring lines are
neighbouring in memory, so a tile's columns load together).

Each value becomes a key that sorts as the value does (its bits made order-preserving as a signed
integer, inverted for descending) with its index in the low bits: equal values keep their order, a
stable sort, with one bitonic sort (tl.sort) of the keys. Keys are int32 where the values are 16-bit
and a line at most 65536 long (the value's 16 bits over the index's: half the bits a float32 value's
int64 key moves through the sort), else int64 (float32 bits over a 32-bit index). A program sorts
BLOCK_R lines of one chunk of CHUNK elements (a power of two); where one chunk holds the whole line,
it writes the first K (D for a sort, k for a top-k) values, decoded from the keys, and indices. A
longer line (a top-k's only) is cut into chunks that each keep their first K keys, and the merge
kernel sorts a line's kept keys together for its first K. -0.0 sorts as 0.0 and every NaN as the
largest value, as torch sorts them.
"""
from __future__ import annotations

from dataclasses import dataclass

from bot.codegen.code import jit_source
from bot.codegen.dim_kernel import ReducedBodyFile, _fit
from bot.codegen.kernel_file import _expanded

# The most keys one program sorts: a line (or a top-k's kept keys, together) at most this long.
MAX_TILE = 16384
# 16-bit values' keys: NARROW's codes (0: int64 keys) in the launcher
_NARROW = "{torch.float16: 1, torch.bfloat16: 2}"


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

_PACKED = jit_source("_packed", ["val", "index", "DESCENDING: tl.constexpr", "NARROW: tl.constexpr"], [
    "if NARROW:",
    "    # the value in its own 16-bit dtype (what torch sorts), sign-extended bits over a 16-bit index",
    "    half = val.to(tl.float16 if NARROW == 1 else tl.bfloat16)",
    "    bits = half.to(tl.int16, bitcast=True).to(tl.int32)",
    "    bits = tl.where(half == 0.0, 0, tl.where(half != half, 0x7FFF, bits))   # -0.0 as 0.0, NaN largest",
    "    key = bits ^ ((bits >> 15) & 0x7FFF)",
    "    if DESCENDING:",
    "        key = ~key",
    "    return (key << 16) | index.to(tl.int32)",
    "else:",
    "    val = tl.where(val == 0.0, 0.0, val)           # -0.0 sorts as 0.0",
    "    val = tl.where(val != val, float(\"nan\"), val)  # every NaN one NaN, the largest",
    "    bits = val.to(tl.int32, bitcast=True)",
    "    # negative floats' magnitude bits flipped: the bits order as signed integers as the floats do",
    "    key = bits ^ ((bits >> 31) & 0x7FFFFFFF)",
    "    if DESCENDING:",
    "        key = ~key",
    "    return (key.to(tl.int64) << 32) | index.to(tl.int64)"],
    "    # A value as a key that sorts as it does, its index below: equal values keep their order.\n")

_LAST = jit_source("_last", ["NARROW: tl.constexpr"], [
    "if NARROW:",
    "    return tl.full([1, 1], 0x7FFFFFFF, tl.int32)",
    "else:",
    "    return tl.full([1, 1], 0x7FFFFFFFFFFFFFFF, tl.int64)"],
    "    # The largest key: padding, which sorts after every value.\n")

_STORE = jit_source("_store_span", ["packed", "rows", "lane", "R", "START", "K", "B", "values_ptr", "indices_ptr",
                                    "DESCENDING: tl.constexpr", "VALUES: tl.constexpr", "INDICES: tl.constexpr",
                                    "NARROW: tl.constexpr"], [
    "a, b = rows // B, rows % B",
    "offs = (a * K + lane - START) * B + b",
    "keep = (rows < R) & (lane >= START) & (lane < START + K)",
    "if VALUES:",
    "    key = packed >> (16 if NARROW else 32)",
    "    if DESCENDING:",
    "        key = ~key",
    "    if NARROW:",
    "        bits = (key ^ ((key >> 15) & 0x7FFF)).to(tl.int16)",
    "        val = bits.to(tl.float16 if NARROW == 1 else tl.bfloat16, bitcast=True)",
    "    else:",
    "        key = key.to(tl.int32)",
    "        val = (key ^ ((key >> 31) & 0x7FFFFFFF)).to(tl.float32, bitcast=True)",
    "    tl.store(values_ptr + offs, val.to(values_ptr.dtype.element_ty), mask=keep)",
    "if INDICES:",
    "    index = packed & (0xFFFF if NARROW else 0x7FFFFFFF)",
    "    tl.store(indices_ptr + offs, index.to(tl.int64), mask=keep)"],
    "    # Sorted keys START to START + K of each line: the values they encode and their indices.\n")


_FIRST = jit_source("_first_keys", ["keys", "ROWS: tl.constexpr", "N: tl.constexpr", "KEEP: tl.constexpr",
                                    "LEVELS: tl.constexpr"], [
    "h = keys",
    "for level in tl.static_range(LEVELS):",
    "    h = tl.reshape(h, [(ROWS * (N // KEEP)) >> (level + 1), 2, KEEP])",
    "    flip = tl.where(tl.arange(0, 2) == 1, -1, 0).to(h.dtype)[None, :, None]",
    "    h = tl.min(tl.sort(h ^ flip, dim=2) ^ flip, axis=1)",
    "return tl.sort(tl.reshape(h, [ROWS, KEEP]), dim=1)"],
    "    # The KEEP smallest of each row of N keys (N = KEEP * 2**LEVELS), sorted: a bitonic top-k. Groups of\n"
    "    # KEEP paired, the first sorted up and the second down (its keys inverted through the sort); the\n"
    "    # smaller of each pair of places is a bitonic run holding the pair's KEEP smallest. Halved so\n"
    "    # until one group is left: a top-k of few sorts groups of k, not the whole row.\n")


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
        # chunk lengths for a top-k of few: shorter ones run more programs, longer ones leave the merge less
        chunked = [{"BLOCK_R": r, "CHUNK": n, "num_warps": w} for n in (1024, 2048, 4096, 8192, 16384)
                   for r, w in ((1, 4), (2, 8), (4, 8))]

        def fitted(config):
            return [_sort_tiles(config, a, d, b, self._kept(d)) for a, d, b in self.views]
        return self._space([c for c in defaults + candidates + chunked if None not in fitted(c)], fitted)

    def source(self) -> str:
        text = self._file([_PACKED, _LAST, _STORE, _FIRST, self._chunk_kernel(), self._merge_kernel()],
                          [_fit, _sort_config, _sort_tiles, _expanded], self._launcher())
        pick = self.pick
        said = ("the values (the input's dtype) and their int64 indices" if pick.values and pick.indices else
                "the values, in the input's dtype" if pick.values else "int64 indices")
        return text.replace("the output has the first input's dtype", f"the outputs are {said}")

    def _flags(self) -> list[str]:
        return [f"DESCENDING={self.pick.descending}", f"VALUES={self.pick.values}", f"INDICES={self.pick.indices}",
                "NARROW=NARROW"]

    def _chunk_kernel(self) -> str:
        x = self.body_inputs[0].local
        params = [f"{x}_ptr", "values_ptr", "indices_ptr", "kept_ptr", "R", "D", "B", "START", "K",
                  "BLOCK_R: tl.constexpr", "CHUNK: tl.constexpr", "WHOLE: tl.constexpr", "KEEP: tl.constexpr",
                  "LEVELS: tl.constexpr",
                  "DESCENDING: tl.constexpr", "VALUES: tl.constexpr", "INDICES: tl.constexpr", "NARROW: tl.constexpr"]
        lines = ["rows = tl.program_id(0).to(tl.int64) * BLOCK_R + tl.arange(0, BLOCK_R)[:, None]",
                 "lane = tl.arange(0, CHUNK)[None, :]",
                 "d = tl.program_id(1) * CHUNK + lane",
                 "mask = (rows < R) & (d < D)",
                 "a, b = rows // B, rows % B",
                 "offs = (a * D + d) * B + b",
                 *self.body_values("offs", "0.0"),
                 "packed = tl.where(mask, _packed(val, d, DESCENDING, NARROW), _last(NARROW))",
                 "packed = _first_keys(packed, BLOCK_R, CHUNK, KEEP, LEVELS)",
                 "first = tl.arange(0, KEEP)[None, :]",
                 "if WHOLE:",
                 "    _store_span(packed, rows, first, R, START, K, B, values_ptr, indices_ptr, DESCENDING, VALUES, "
                 "INDICES, NARROW)",
                 "else:",
                 "    # this chunk's first START + K keys, beside the other chunks' of its line, for the merge",
                 "    KEPT = START + K",
                 "    kept = rows * (tl.num_programs(1) * KEPT) + tl.program_id(1) * KEPT + first",
                 "    tl.store(kept_ptr + kept, packed, mask=(rows < R) & (first < KEPT))"]
        return jit_source(f"{self.name}_chunk_kernel", params, lines,
                          "    # BLOCK_R lines, chunk program_id(1) of each, sorted.\n")

    def _merge_kernel(self) -> str:
        params = ["kept_ptr", "values_ptr", "indices_ptr", "R", "B", "START", "K", "M", "MERGE: tl.constexpr",
                  "KEEP: tl.constexpr", "LEVELS: tl.constexpr",
                  "DESCENDING: tl.constexpr", "VALUES: tl.constexpr", "INDICES: tl.constexpr", "NARROW: tl.constexpr"]
        lines = ["rows = tl.program_id(0).to(tl.int64) + tl.zeros([1, 1], tl.int64)",
                 "lane = tl.arange(0, MERGE)[None, :]",
                 "packed = tl.load(kept_ptr + rows * M + lane, mask=lane < M, other=_last(NARROW))",
                 "packed = _first_keys(packed, 1, MERGE, KEEP, LEVELS)",
                 "_store_span(packed, rows, tl.arange(0, KEEP)[None, :], R, START, K, B, values_ptr, indices_ptr, "
                 "DESCENDING, VALUES, INDICES, NARROW)"]
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
                 "    chunks = _cdiv(D, CHUNK)\n"
                 "    # int32 keys for 16-bit values on lines whose indices fit 16 bits (NARROW 1: fp16, 2: bf16)\n"
                 f"    NARROW = {_NARROW}.get({self.out_dtype(x)}, 0) if D <= 65536 else 0\n"
                 "    # the sorted keys a program keeps: the first START + K, to a power of two\n"
                 "    KEEP = min(CHUNK, 1 << (START + K - 1).bit_length())\n")
        outs = [("values" if self.pick.values else first), ("indices" if self.pick.indices else first)]
        flags = self._flags()
        text += ("    # a long line's chunks each keep their first START + K keys, merged after\n"
                 f"    kept = {first} if chunks == 1 else torch.empty((A * B, chunks * (START + K)), "
                 f"dtype=torch.int32 if NARROW else torch.int64, device={x}.device)\n")
        text += self._launch(f"{self.name}_chunk_kernel", "(_cdiv(A * B, BLOCK_R), chunks)",
                             [x, *outs, "kept", "A * B", "D", "B", "START", "K", "BLOCK_R=BLOCK_R", "CHUNK=CHUNK",
                              "WHOLE=chunks == 1", "KEEP=KEEP", "LEVELS=(CHUNK // KEEP).bit_length() - 1", *flags,
                              "num_warps=num_warps"])
        text += "    if chunks > 1:\n"
        text += self._launch(f"{self.name}_merge_kernel", "(A * B,)",
                             ["kept", *outs, "A * B", "B", "START", "K", "chunks * (START + K)", "MERGE=MERGE",
                              "KEEP=KEEP", "LEVELS=(MERGE // KEEP).bit_length() - 1", *flags,
                              "num_warps=max(1, min(16, MERGE // 512))"], "        ")
        return text + f"    return {returned}\n"
