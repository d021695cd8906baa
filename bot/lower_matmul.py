"""Lowering of a matmul with a pointwise epilogue to Triton: the kernel (stage 4).

`relu(a @ b + bias) * 0.5 + residual` becomes one tiled tl.dot kernel: a program computes a
BLOCK_M x BLOCK_N tile of a [M, K] @ b [K, N] into a float32 accumulator, applies everything
around the matmul (the epilogue) to that tile, and stores it once in the output dtype. A batch
(a [B, M, K] @ b [B, K, N], or one b [K, N] shared by the batch) is tiled the same way.

The kernel is persistent (a few programs per SM walk the tiles of the whole batch) and loads its
operand tiles with TMA (host-made tensor descriptors): on an H200, 4096^3 fp16 took 185 us against
191 us for one program per tile with pointer loads (cuBLAS 180), and 32 x 1024^3 117 against 123
(cuBLAS 104). A float16/bfloat16 output with aligned rows is stored by TMA, in two halves, and
its tile loop and K loop are flattened into one pipelined loop: 32 x 1024^3 fp16 then took 109.7
us against 118.8 (cuBLAS 107.9). TMA needs the operands' rows to start on 16-byte boundaries; an odd K or N breaks
that (and made the pointer loads scalar: 3001x2999 @ 2999x3007 fp16 at 61 TFLOP/s, 889 us). As
Inductor does (pad_mm), the launcher then first copies the offending operands into zero-padded
buffers with aligned rows.

Like bot.lower_triton, whose file layout and epilogue writer this reuses, the launcher's
Python helpers are real functions here, used to check the spec's cases and copied into
kernel.py with inspect.getsource. This module imports neither torch nor triton.
"""
from __future__ import annotations

import dataclasses

from bot import ir
from bot.lower_triton import (RESERVED, _expanded_strides, _Input, _KernelFile, _wrap, jit_source, kernel_inputs,
                              sm_count_line)
from runner import protocol

MAX_BLOCK = 256             # a wider tile's operands no longer fit in shared memory

# The space the benchmark sweeps, biggest tile first (the order _default_config walks). Hopper
# matmul tiles from Triton's tutorial and Inductor's mm configs: 128x256 and 256x128 with 8 warps
# (two warpgroups) are the fastest at large sizes (128x256 with BLOCK_K 32 and 4 stages measured
# 2% ahead of BLOCK_K 64 and 3 stages at 4096^3 fp16); 128x128 trades reuse for more
# programs; the small tiles keep small matrices spread over the SMs. BLOCK_K 64 is 128 bytes of
# fp16 per row, one full shared-memory swizzle line; GROUP_M 8 as in the tutorial.
CONFIGS = [
    {"BLOCK_M": bm, "BLOCK_N": bn, "BLOCK_K": bk, "GROUP_M": 8, "num_warps": w, "num_stages": s}
    for bm, bn, bk, w, s in [(128, 256, 32, 8, 4), (128, 256, 64, 8, 3), (256, 128, 64, 8, 3), (128, 128, 64, 8, 4),
                             (128, 128, 64, 4, 4), (128, 128, 32, 4, 4), (128, 64, 64, 4, 4), (64, 128, 64, 4, 4),
                             (64, 64, 64, 4, 3), (64, 64, 32, 4, 4), (32, 32, 64, 2, 3)]
]

# Names the matmul kernel and its launcher use themselves, on top of lower_triton's.
MATMUL_RESERVED = RESERVED | {
    "pid", "tiles_m", "tiles_n", "tiles", "tile", "matrix", "group_size", "first_m", "group_m", "pid_m", "pid_n",
    "batch", "batches", "k", "M", "K", "BLOCK_K", "GROUP_M", "INPUT_PRECISION", "precision", "num_stages",
    "_matmul_dims", "B_KMAJOR", "b_kmajor", "a_desc", "b_desc", "a_tile", "b_tile", "b_batched", "sms",
    "per_sm", "_per_sm", "_shared_bytes", "out_desc", "TMA_STORE", "tma_store", "half", "first_col", "left", "right",
    "TensorDescriptor", "_epilogue_strides", "_default_config", "_fit_config", "K_pad", "N_pad", "_padded_length",
    "_pad", "_pad_kernel",
}


# ---------------------------------------------------------------- launcher helpers (copied into kernel.py)

def _matmul_dims(a_name, a_shape, b_name, b_shape):
    # (batch, M, N, K) of a [M, K] @ b [K, N], a [B, M, K] @ b [B, K, N] or a [B, M, K] @ b [K, N].
    ok = len(a_shape) in (2, 3) and len(b_shape) in (2, len(a_shape)) and a_shape[-1] == b_shape[-2]
    if not ok or (len(b_shape) == 3 and b_shape[0] != a_shape[0]):
        raise ValueError(f"cannot multiply {a_name} {list(a_shape)} by {b_name} {list(b_shape)}: this kernel "
                         "multiplies [M, K] @ [K, N], [B, M, K] @ [B, K, N] or [B, M, K] @ [K, N]")
    batch = a_shape[0] if len(a_shape) == 3 else 1
    return batch, a_shape[-2], b_shape[-1], a_shape[-1]


def _epilogue_strides(name, shape, out_shape, along=(True, True)):
    # The element strides the kernel reads an epilogue input with (0 where it broadcasts): over the
    # batch, then over the output's rows and columns where the kernel was generated to read it
    # along them (`along`); a bias [N] is read as one row, a per-row [M, 1] as one column.
    m, n = out_shape[-2:]
    if len(shape) > len(out_shape) or any(d not in (1, o) for d, o in zip(reversed(shape), reversed(out_shape))):
        raise ValueError(f"input {name} has shape {list(shape)}, which does not broadcast to the matmul's output "
                         f"{list(out_shape)}; the epilogue reads a vector [{n}], one value per row [{m}, 1], the full "
                         f"{list(out_shape)}" + (f" or [{m}, {n}]" if len(out_shape) == 3 else "")
                         + " or a single value [1]")
    sb, sm, sn = _expanded_strides(shape, [1] * (3 - len(out_shape)) + list(out_shape))
    if (sm and not along[0]) or (sn and not along[1]):
        kind = {(False, True): f"a vector [{n}]", (True, False): f"one value per row [{m}, 1]"}.get(
            tuple(along), "a single value [1]")
        raise ValueError(f"input {name} has shape {list(shape)}, but this kernel was generated for {kind} there; "
                         "regenerate it for these shapes")
    return [sb] + [stride for stride, read in zip((sm, sn), along) if read]


def _default_config(batch, M, N):
    # The biggest tile of CONFIGS (listed biggest first) that still gives every one of an H200's
    # 132 SMs a program: a bigger tile reuses each operand tile it loads more, a smaller one keeps
    # a small problem spread over the GPU.
    for config in CONFIGS:
        if batch * -(-M // config["BLOCK_M"]) * -(-N // config["BLOCK_N"]) >= 132:
            return config
    return CONFIGS[-1]


def _shared_bytes(bm, bn, bk, num_stages, itemsize):
    # Shared memory a program of these tiles takes: num_stages buffered operand tiles, and half an
    # output tile that a TMA store stages (float32 tiles take twice fp16's).
    return ((bm + bn) * bk * num_stages + bm * bn // 2) * itemsize


def _fit_config(config, M, N, K, itemsize):
    # (BLOCK_M, BLOCK_N, BLOCK_K, num_stages) of config for this problem, so any config runs any
    # case: no tile side wider than its matrix needs (a power of two, at least 16, tl.dot's least),
    # and BLOCK_K halved until the program fits in 208 KB of shared memory (an H200 has 227 KB per
    # block, an A100 163 KB).
    bm, bn, bk = (min(config[key], max(16, 1 << (n - 1).bit_length()))
                  for key, n in (("BLOCK_M", M), ("BLOCK_N", N), ("BLOCK_K", K)))
    while _shared_bytes(bm, bn, bk, config["num_stages"], itemsize) > 208 * 1024 and bk > 16:
        bk //= 2
    return bm, bn, bk, config["num_stages"]


def _per_sm(bm, bn, bk, num_stages, itemsize):
    # How many programs of these tiles one SM holds at once, by the shared memory they take (an
    # H200 SM has 228 KB): the persistent grid starts that many per SM, so small tiles keep several
    # programs' loads in flight (H200, 32 x 1024^3 fp16, 64 x 64 x 64 tiles in 3 stages: 2.9x the
    # time of 128 x 256 tiles with one program per SM, 1.4x with 4).
    return max(1, 224 * 1024 // _shared_bytes(bm, bn, bk, num_stages, itemsize))


def _padded_length(n, itemsize):
    # The length to store rows of n elements with: n where such rows start on 16-byte boundaries,
    # else n rounded up to a multiple of 64 (to a power of two from 16 when shorter), so a padded K
    # is a multiple of every BLOCK_K in CONFIGS: its K loop reads no tile past the padding.
    # _fit_config picks the same tiles for the padded length as for n. An empty K becomes 16 zeros:
    # TMA needs every dim positive, and the product is then zeros, as torch's is.
    if n and n * itemsize % 16 == 0:
        return n
    return -(-n // 64) * 64 if n > 64 else max(16, 1 << (n - 1).bit_length())


# The copy into a padded buffer (kernel.py's _pad), emitted into every kernel.py: whether an
# operand needs it is known only at launch. The kernel writes every element of the buffer, the
# zeros too, so the buffer is allocated with torch.empty and written once.
_PAD_SOURCE = '''
@triton.jit
def _pad_kernel(src_ptr, dst_ptr, R, C, R_pad, C_pad, TRANSPOSE: tl.constexpr, BLOCK_R: tl.constexpr,
                BLOCK_C: tl.constexpr):
    # One BLOCK_R x BLOCK_C tile of src [R, C] padded to [R_pad, C_pad] (of the matrix
    # program_id(1) of a batch): src where it has elements, zeros past its last row and column.
    # Stored into dst [R_pad, C_pad], or transposed into dst [C_pad, R_pad].
    pid = tl.program_id(0)
    tiles_c = tl.cdiv(C_pad, BLOCK_C)
    batch = tl.program_id(1).to(tl.int64)
    rows = ((pid // tiles_c) * BLOCK_R + tl.arange(0, BLOCK_R)).to(tl.int64)[:, None]
    cols = (pid % tiles_c) * BLOCK_C + tl.arange(0, BLOCK_C)[None, :]
    x = tl.load(src_ptr + batch * R * C + rows * C + cols, mask=(rows < R) & (cols < C), other=0.0)
    inside = (rows < R_pad) & (cols < C_pad)
    if TRANSPOSE:
        tl.store(dst_ptr + batch * R_pad * C_pad + tl.trans(cols) * R_pad + tl.trans(rows), tl.trans(x),
                 mask=tl.trans(inside))
    else:
        tl.store(dst_ptr + batch * R_pad * C_pad + rows * C_pad + cols, x, mask=inside)


def _pad(x, R_pad, C_pad, transpose=False):
    # x [..., R, C] (contiguous) copied into a new [..., R_pad, C_pad] (transposed: [..., C_pad,
    # R_pad]), zeros in the rows and columns added. Tiles of 16 x 256, 4096 elements a program:
    # the tile does not matter here (3001 x 2999 fp16 on an H200: 11.8-12.4 us, 70% of copy, for
    # 1 x 4096 to 64 x 64 tiles on 2-8 warps; torch's F.pad 30.9 us), since rows of odd length
    # load element by element. Square 64 x 64 tiles to transpose (4096 x 4096 float32 on an
    # H200: 34.7 us, where torch's x.t().contiguous() takes 125.4 us).
    shape = (C_pad, R_pad) if transpose else (R_pad, C_pad)
    padded = torch.empty((*x.shape[:-2], *shape), dtype=x.dtype, device=x.device)
    BLOCK_R, BLOCK_C = (64, 64) if transpose else (16, 256)
    grid = (triton.cdiv(R_pad, BLOCK_R) * triton.cdiv(C_pad, BLOCK_C), x.shape[0] if x.dim() == 3 else 1)
    _pad_kernel[grid](x, padded, x.shape[-2], x.shape[-1], R_pad, C_pad, TRANSPOSE=transpose, BLOCK_R=BLOCK_R,
                      BLOCK_C=BLOCK_C, num_warps=4)
    return padded
'''


# ---------------------------------------------------------------- kernel.py

def kernel_source(spec: dict, node: ir.Node, options: dict | None = None) -> str:
    """kernel.py for a tree holding one matmul of two inputs inside a pointwise epilogue: the
    tuning block, the @triton.jit kernel and a launcher `def <spec name>(<inputs>, *, config=None)`
    with the reference's signature. options may carry {"block": int, "num_warps": int} from a
    reviewer's correction ('block size 64': 64 x 64 output tiles), kept by every config."""
    options, inputs = kernel_inputs(spec, options, MATMUL_RESERVED)
    if options.get("block", 0) > MAX_BLOCK:
        raise ValueError(f"a matmul tile side is at most {MAX_BLOCK} (the operand tiles live in shared memory), "
                         f"got {options['block']}")
    return _MatmulKernel(spec, node, inputs, options).source()


def _substitute(node: ir.Node, old: ir.Node, new: ir.Node) -> ir.Node:
    if node == old:
        return new
    return dataclasses.replace(node, args=tuple(_substitute(a, old, new) for a in node.args))


class _MatmulKernel(_KernelFile):
    block_key = "BLOCK_M"
    imports = "from triton.tools.tensor_descriptor import TensorDescriptor\n"
    description = ("Persistent programs, as many per SM as fit, each computing BLOCK_M x BLOCK_N tiles of the\n"
                   "output (of any matrix of the batch) in turn: a K loop of tl.dot on operand tiles that TMA\n"
                   "copies into shared memory, into a float32 accumulator, then the epilogue on the tile and its\n"
                   "store. A float16/bfloat16 output whose rows are 16-byte aligned is stored by TMA, and its tile\n"
                   "loop and K loop are pipelined as one, so the next tile's loads overlap this tile's epilogue.\n"
                   "Tiles are walked in groups of GROUP_M rows, so tiles loaded together are reused from L2.\n"
                   "Operands whose rows do not start on 16-byte boundaries (odd K or N) are first copied\n"
                   "into zero-padded buffers (_pad), as TMA requires.")

    def __init__(self, spec, node, inputs, options):
        ir.check(node)      # one matmul of two inputs, inside a pointwise epilogue
        matmul = ir.matmul_node(node)
        if matmul is None:
            raise ValueError(f"{ir.to_text(node)} has no matmul; lower it with bot.lower_triton")
        by_name = {i.name: i for i in inputs}
        self.a, self.b = (by_name[arg.name] for arg in matmul.args)
        self.tf32 = bool(matmul.attr("tf32"))
        # The epilogue is the tree with the matmul replaced by `acc`, its float32 tile. The
        # placeholder's name cannot clash with an input's: it is no identifier.
        placeholder = f"({self.a.name} @ {self.b.name})"
        epilogue = _substitute(node, matmul, ir.inp(placeholder))
        names = ir.input_names(epilogue)
        self.epilogue_inputs = [i for i in inputs if i.name in names]
        acc = _Input(placeholder, "acc", [])
        super().__init__(spec, epilogue, inputs, [acc] + self.epilogue_inputs, options)
        self.cases = []     # (M, N, K) per case; unsupported shapes are refused now, not at launch
        strides = {e.name: [] for e in self.epilogue_inputs}
        for case in range(len(self.a.shapes)):
            _, m, n, k = _matmul_dims(self.a.name, self.a.shapes[case], self.b.name, self.b.shapes[case])
            self.cases.append((m, n, k))
            for e in self.epilogue_inputs:
                strides[e.name].append(_epilogue_strides(e.name, e.shapes[case], self.a.shapes[case][:-1] + [n]))
        # Whether the kernel reads each epilogue input along the rows and along the columns: only
        # where some case varies there. A bias [N] is then one row of loads, not a whole tile.
        self.along = {name: (any(s[1] for s in cases), any(s[2] for s in cases)) for name, cases in strides.items()}

    def source(self) -> str:
        helpers = [_matmul_dims, _default_config, _shared_bytes, _fit_config, _per_sm, _padded_length]
        if self.epilogue_inputs:
            helpers += [_expanded_strides, _epilogue_strides]
        return self._file([self._kernel(), _PAD_SOURCE], helpers, self._launcher())

    def pins(self) -> dict[str, int]:
        """A reviewer's 'block size N' is a square N x N output tile."""
        pins = super().pins()
        if "BLOCK_M" in pins:
            pins["BLOCK_N"] = pins["BLOCK_M"]
        return pins

    def configs(self) -> list[dict]:
        # Configs that every case shrinks to the same tiles as an earlier one are dropped: sweeping
        # them would time one kernel twice. (Tiles equal at fp16's 2 bytes are equal at any width.)
        # A float32-only spec lists each config with the BLOCK_K the launcher gives it in shared
        # memory (128x256x64 in 3 stages runs with BLOCK_K 32), so tables and TUNED name it right.
        widths = {protocol.ITEMSIZE[d] for i in self.spec["inputs"] if i["name"] == self.a.name for d in i["dtypes"]}
        candidates = CONFIGS if widths != {4} else [
            {**c, "BLOCK_K": _fit_config(c, 1 << 30, 1 << 30, 1 << 30, 4)[2]} for c in CONFIGS]
        return self._space(candidates, lambda config: [
            (_fit_config(config, m, n, k, 2), config["GROUP_M"], config["num_warps"]) for m, n, k in self.cases])

    def _kernel(self) -> str:
        params = ["a_desc", "b_desc"] + [f"{e.local}_ptr" for e in self.epilogue_inputs]
        params += ["out_ptr", "out_desc", "M", "N", "K", "batches", "b_batched"]
        params += [param for e in self.epilogue_inputs for param, _ in self._strides(e)]
        constexprs = ("INPUT_PRECISION", "B_KMAJOR", "TMA_STORE", "BLOCK_M", "BLOCK_N", "BLOCK_K", "GROUP_M")
        params += [f"{c}: tl.constexpr" for c in constexprs]
        lines = [
            "# Persistent: program p computes output tiles p, p + P, p + 2P, ... of all the batch's (P",
            "# programs: per SM, as many as its shared memory holds), so no last wave leaves SMs idle.",
            "# With a TMA store, flatten merges this loop and the K loop into one pipelined loop: the",
            "# next tile's operand loads are in flight during this tile's epilogue (H200, 32 x 1024^3",
            "# fp16: 118.8 us nested, 109.7 us flattened; cuBLAS 107.9). A pointer store stays nested:",
            "# flattened, its layout change could not reuse the operand buffers, and a float32 128 x 256",
            "# tile with an epilogue then needed 272 KB of shared memory.",
            "tiles_m = tl.cdiv(M, BLOCK_M)",
            "tiles_n = tl.cdiv(N, BLOCK_N)",
            "tiles = tiles_m * tiles_n",
            "group_size = GROUP_M * tiles_n",
            "for tile in tl.range(tl.program_id(0), batches * tiles, tl.num_programs(0), flatten=TMA_STORE):",
            "    # Tiles run down GROUP_M row tiles before moving one column tile right, so the programs",
            "    # running at once share their tiles of a and b in L2 instead of each streaming all of b.",
            "    matrix = tile // tiles",
            "    pid = tile % tiles",
            "    first_m = (pid // group_size) * GROUP_M",
            "    group_m = min(tiles_m - first_m, GROUP_M)",
            "    pid_m = first_m + (pid % group_size) % group_m",
            "    pid_n = (pid % group_size) // group_m",
            "    # a is [batches, M, K] and b [1 or batches, K, N] (K-major: [.., N, K]), read by TMA: each",
            "    # tile is one asynchronous copy into shared memory, pipelined over the K loop, and what lies",
            "    # past an edge reads as zeros, so partial tiles need no masks. Where the launcher padded",
            "    # them, K is the padded length and the added columns of a and rows of b are zeros too.",
            "    acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)",
            "    for k in range(0, tl.cdiv(K, BLOCK_K)):",
            "        a_tile = a_desc.load([matrix, pid_m * BLOCK_M, k * BLOCK_K]).reshape(BLOCK_M, BLOCK_K)",
            "        if B_KMAJOR:",
            "            # b was copied K-major, the layout TF32 tensor cores (wgmma) read float32 B in.",
            "            b_tile = b_desc.load([matrix * b_batched, pid_n * BLOCK_N, k * BLOCK_K]).reshape(BLOCK_N, BLOCK_K)",
            "            acc = tl.dot(a_tile, tl.trans(b_tile), acc, input_precision=INPUT_PRECISION)",
            "        else:",
            "            b_tile = b_desc.load([matrix * b_batched, k * BLOCK_K, pid_n * BLOCK_N]).reshape(BLOCK_K, BLOCK_N)",
            "            acc = tl.dot(a_tile, b_tile, acc, input_precision=INPUT_PRECISION)",
            "    # The epilogue and the store, in two halves of BLOCK_N // 2 columns: each half's epilogue",
            "    # inputs and temporaries take half the registers (H200, gelu(a @ b + bias) + residual fp16:",
            "    # 4096^3 223.0 -> 216.7 us, 3001x2999x3007 170.5 -> 154.1). int64 offsets, so outputs past",
            "    # 2**31 elements are safe.",
            "    batch = matrix.to(tl.int64)",
            "    rows = (pid_m * BLOCK_M + tl.arange(0, BLOCK_M)).to(tl.int64)[:, None]",
        ]
        # Inputs that do not vary along the columns (one value per row or per matrix) load once
        # for both halves; the others, per half.
        per_half = [e for e in self.epilogue_inputs if self.along[e.name][1]]
        for e in self.epilogue_inputs:
            if e not in per_half:
                lines += ["    " + line for line in self._epilogue_load(e)]
        lines += [
            "    left, right = tl.split(tl.permute(acc.reshape(BLOCK_M, 2, BLOCK_N // 2), (0, 2, 1)))",
            "    for half in tl.static_range(2):",
            "        if half == 0:",
            "            acc = left",
            "        else:",
            "            acc = right",
            "        first_col = pid_n * BLOCK_N + half * (BLOCK_N // 2)",
            "        cols = first_col + tl.arange(0, BLOCK_N // 2)[None, :]",
            "        mask = (rows < M) & (cols < N)",
        ]
        for e in per_half:
            lines += ["        " + line for line in self._epilogue_load(e)]
        if not self.is_bare_input:
            lines.append(f"        acc = {self.body_call()}")
        lines += [
            "        if TMA_STORE:",
            "            # A TMA store of the half (what lies past an edge is not written): its staging",
            "            # buffer in shared memory is half a tile, which leaves room for the operand stages",
            "            # (32 x 1024^3 fp16: 111.6 us through pointers, 109.7 us so).",
            "            out_desc.store([matrix, pid_m * BLOCK_M, first_col],",
            "                           acc.to(out_ptr.dtype.element_ty).reshape(1, BLOCK_M, BLOCK_N // 2))",
            "        else:",
            "            tl.store(out_ptr + batch * M * N + rows * N + cols, acc.to(out_ptr.dtype.element_ty), mask=mask)",
        ]
        return jit_source(f"{self.name}_kernel", params, lines)

    def _strides(self, e: _Input) -> list[tuple[str, str]]:
        """(kernel parameter, offset term) of each stride the kernel reads epilogue input e with."""
        reads = zip(("sb", "sm", "sn"), ("batch", "rows", "cols"), (True, *self.along[e.name]))
        return [(f"{e.local}_{s}", f"{index} * {e.local}_{s}") for s, index, read in reads if read]

    def _epilogue_load(self, e: _Input) -> list[str]:
        """Load an epilogue input over the tile: the whole tile, one row or one column of it
        (broadcast by the arithmetic), or one value per matrix."""
        mask = {(True, True): ", mask=mask, other=0.0", (True, False): ", mask=rows < M, other=0.0",
                (False, True): ", mask=cols < N, other=0.0", (False, False): ""}[self.along[e.name]]
        return [f"{e.local}_offs = {' + '.join(term for _, term in self._strides(e))}",
                f"{e.local} = tl.load({e.local}_ptr + {e.local}_offs{mask}).to(tl.float32)"]

    def _launcher(self) -> str:
        a, b, first = self.a, self.b, self.inputs[0].local
        text = self._signature_and_prologue()
        text += (f'    batch, M, N, K = _matmul_dims("{a.name}", {a.local}.shape, "{b.name}", {b.local}.shape)\n'
                 f"    shape = (*{a.local}.shape[:-1], N)\n")
        if self.epilogue_inputs:
            text += ("    # The epilogue reads each input with its batch stride, and its row and column strides\n"
                     "    # where the kernel reads it along rows and columns; 0 where it broadcasts.\n")
            text += "".join(f'    {e.local}_strides = _epilogue_strides("{e.name}", {e.local}.shape, shape, '
                            f'{self.along[e.name]})\n' for e in self.epilogue_inputs)
        text += (f"    out = torch.empty(shape, dtype={first}.dtype, device={first}.device)\n"
                 "    if out.numel() == 0:\n        return out      # no rows, columns or matrices: nothing to compute\n")
        text += self._config_line("_default_config(batch, M, N)")
        if self.tf32:
            text += ("    # float32 inputs round to TF32 on the tensor cores (the spec allows it); float16 and\n"
                     '    # bfloat16 take tl.dot\'s default, the tensor cores too.\n'
                     f'    precision = "tf32" if {a.local}.dtype == torch.float32 else None\n'
                     "    # TF32 tensor cores read float32 tiles of B only K-major: a row-major B would load\n"
                     "    # element by element (4096^3 on an H200: 985 us). B is copied transposed (below).\n"
                     f"    b_kmajor = precision == \"tf32\"\n")
        else:
            text += ("    # float32 inputs multiply in exact IEEE float32 (the spec does not allow TF32): right but\n"
                     "    # slow. float16 and bfloat16 take tl.dot's default, the tensor cores.\n"
                     f'    precision = "ieee" if {a.local}.dtype == torch.float32 else None\n')
        text += self._padding()
        text += ("    # The config's tiles, shrunk to this problem and to shared memory.\n"
                 f"    BLOCK_M, BLOCK_N, BLOCK_K, num_stages = _fit_config(config, M, N, K_pad, "
                 f"{a.local}.element_size())\n")
        b_block = "[1, BLOCK_N, BLOCK_K] if b_kmajor else [1, BLOCK_K, BLOCK_N]" if self.tf32 else "[1, BLOCK_K, BLOCK_N]"
        text += ("    # TMA descriptors of the operands as [matrices, rows, columns] (one matrix when 2-d), in\n"
                 "    # tiles of the config; tiles past an edge read as zeros.\n"
                 f"    a_desc = TensorDescriptor.from_tensor({a.local}.reshape(-1, *{a.local}.shape[-2:]), "
                 "[1, BLOCK_M, BLOCK_K])\n"
                 f"    b_desc = TensorDescriptor.from_tensor({b.local}.reshape(-1, *{b.local}.shape[-2:]), {b_block})\n"
                 "    # A float16 or bfloat16 output is stored by TMA too where its rows start on 16-byte\n"
                 "    # boundaries, else (an odd N, or float32) through pointers. A float32 tile's epilogue with\n"
                 "    # inputs took up to 336 KB of shared memory with the TMA store (128 x 256 compiled for\n"
                 "    # sm_90), more than an SM has; through pointers, TF32 4096^3 ran as fast (351.2 against\n"
                 "    # 349.4 us on an H200).\n"
                 "    tma_store = out.element_size() == 2 and N * 2 % 16 == 0\n"
                 "    out_desc = TensorDescriptor.from_tensor(out.reshape(-1, M, N), [1, BLOCK_M, BLOCK_N // 2]) if tma_store else None\n"
                 "    # Persistent programs: as many as the SMs hold at once, or one per tile where there are fewer.\n"
                 + sm_count_line("sms", "out")
                 + f"    per_sm = _per_sm(BLOCK_M, BLOCK_N, BLOCK_K, num_stages, {a.local}.element_size())\n"
                 + "    grid = (min(batch * triton.cdiv(M, BLOCK_M) * triton.cdiv(N, BLOCK_N), sms * per_sm),)\n")
        args = ["a_desc", "b_desc"] + [e.local for e in self.epilogue_inputs]
        args += ["out", "out_desc", "M", "N", "K_pad", "batch", f"1 if {b.local}.dim() == 3 else 0"]
        args += [f"*{e.local}_strides" for e in self.epilogue_inputs]
        args += ["INPUT_PRECISION=precision", f"B_KMAJOR={'b_kmajor' if self.tf32 else 'False'}", "TMA_STORE=tma_store",
                 "BLOCK_M=BLOCK_M", "BLOCK_N=BLOCK_N", "BLOCK_K=BLOCK_K", 'GROUP_M=config["GROUP_M"]',
                 'num_warps=config["num_warps"]', "num_stages=num_stages"]
        text += _wrap(f"{self.name}_kernel[grid]", args, "    ") + "\n"
        return text + "    return out\n"

    def _padding(self) -> str:
        """The launcher's copy of operands whose rows are not 16-byte aligned into padded buffers."""
        a, b = self.a.local, self.b.local
        return ("    # TMA reads an operand only if its start and its rows start on 16-byte boundaries (an\n"
                "    # odd K or N breaks that; the pointer loads this kernel had before fell back to scalar\n"
                "    # loads there: 3001x2999 @ 2999x3007 fp16 on an H200, 889 us, cuBLAS 500 us). Such\n"
                "    # operands are copied into zero-padded buffers with aligned rows first: zero columns of "
                f"{a}\n"
                f"    # times zero rows of {b} add nothing (so {b} takes K_pad rows whenever K is padded), and the\n"
                "    # output stays [M, N]. Aligned operands are used as they are (4096 x 4096: no copy).\n"
                f"    K_pad, N_pad = _padded_length(K, {a}.element_size()), _padded_length(N, {b}.element_size())\n"
                f"    if K_pad != K or {a}.data_ptr() % 16:\n"
                f"        {a} = _pad({a}, M, K_pad)\n"
                + self._pad_b())

    def _pad_b(self) -> str:
        """The launcher's copy of b where it needs one; a TF32 kernel always copies b, transposed."""
        b = self.b.local
        pad = f"(K_pad, N_pad) != (K, N) or {b}.data_ptr() % 16:\n        {b} = _pad({b}, K_pad, N_pad)\n"
        if not self.tf32:
            return f"    if {pad}"
        return (f"    if b_kmajor:     # [.., N, K_pad]: padded and transposed in one copy\n"
                f"        {b} = _pad({b}, K_pad, N, transpose=True)\n"
                f"    elif {pad}")
