"""The attention family: scaled dot-product attention, softmax(q @ k^T * scale [+ causal mask]) @ v,
as torch.nn.functional.scaled_dot_product_attention defines it (is_causal's mask aligned to the top
left, scale 1/sqrt(E) by default, enable_gqa's key/value heads shared by groups of query heads).

One program per BLOCK_M query rows of one (batch, head): it walks the keys BLOCK_N at a time keeping
each row's running maximum and sum (the online softmax), so the [L, S] scores never reach memory and
q, k, v are each read once per program. q @ k^T is accumulated over the head dim BLOCK_E at a time,
so wide heads (E = 1024) fit; the output tile [BLOCK_M, Ev] stays in registers. A causal program
stops at its last row's diagonal. fp16/bf16 probabilities are rounded to the inputs' dtype for
p @ v (tensor cores), float32 stays IEEE float32 throughout.

Wide value heads (Ev > WIDE_EV) leave that tile room for only a few rows a program, so every
program rereads all of k and v through dots too small to run well. They take two kernels instead,
torch's own math path as two tiled products: the scores q @ k^T of a group of heads into a float32
workspace, then per output tile each row's maximum and sum over its scores and p @ v.

Owns its IR rule, the output shape, the torch call and the kernel with its config space and default.
"""
from __future__ import annotations

import ast
import re

from bot.codegen.code import Code, jit_source, launch
from bot.codegen.kernel_file import KernelFile
from bot.ops import pointwise
from bot.ops.entry import Entry
from bot.ops.node import Call, IRError, Node, arguments, call, flag, is_none, number, prints, to_text
from bot.ops.text import FLAGS as _F, blank as _blank

NAME = "attention"
SDPA = "scaled_dot_product_attention"
# sdpa_grad(q, k, v, g, wrt='k', ...): a training kernel's part (bot.autodiff writes it), the gradient
# of q, k or v given the output's, g; k's and v's per query head (bot.autodiff sums a group's)
SDPA_GRAD = "sdpa_grad"
OPS = {SDPA, SDPA_GRAD}
ROOT = True
MAX_RANK = 4
MAX_NUMEL = 2**34                   # the kernel indexes with int64
SUPPORTED = ("", "scaled_dot_product_attention(q, k, v) with attn_mask (bool or additive), is_causal, scale and "
             "enable_gqa")
ALIASES = {"sdpa": SDPA}
KEYWORDS = {SDPA: {"query", "key", "value", "attn_mask", "dropout_p", "is_causal", "scale", "enable_gqa"},
            SDPA_GRAD: {"wrt", "is_causal", "scale", "enable_gqa"}}
OUTPUT_DTYPES: dict[str, str] = {}
WORDS: list = []

WIDE_EV = 256                       # value head dims past this take the two-kernel path ...
WIDE_SCORES = 1 << 28               # ... where one head's [L, S] float32 scores fit in 1 GiB, and
WIDE_KEYS = 1 << 20                 # ... S / BLOCK_N key tiles fit a grid's axis 1 (65535) at BLOCK_N 16
WORKSPACE = 1 << 26                 # scores held at once (256 MiB of float32): heads go in groups
GRAD_MAX_HEAD = 256                 # the gradient kernels hold a head's whole row (q, k, v, g) in a tile
DEFAULT_SHAPES = [[4, 16, 2048, 64], [1, 8, 1000, 80]]    # no shape named: a model's, and an odd one
# query rows and keys a step (BLOCK_M x BLOCK_N), the head dim's chunk for q @ k^T, warps, stages
CONFIGS = [{"BLOCK_M": m, "BLOCK_N": n, "BLOCK_E": e, "num_warps": w, "num_stages": s}
           for m, n, e, w, s in [(64, 64, 64, 4, 3), (64, 64, 64, 4, 2), (128, 64, 64, 8, 3), (64, 32, 64, 4, 3),
                                 (128, 128, 64, 8, 3), (32, 32, 64, 4, 2), (16, 16, 128, 8, 1), (32, 16, 64, 8, 1),
                                 (64, 64, 128, 4, 3)]]


# ---------------------------------------------------------------- words

# "causal self-attention", "scaled dot product attention", "flash attention", "grouped-query attention",
# "sdpa", "因果注意力"
ATTENTION_WORD = re.compile(
    r"(?:\b(?:non[\s_-]?causal|causal|bidirectional)[\s_-]+)?(?:\b(?:scaled[\s_-]+)?dot[\s_-]+product[\s_-]+|"
    r"\bflash[\s_-]*|\bself[\s_-]*|\bmulti[\s_-]?head(?:ed)?[\s_-]+|\bgrouped[\s_-]*query[\s_-]+)*attention\b|"
    r"\bsdpa\b|\bgqa\b|(?:因果|双向)?(?:自|多头|分组查询)?注意力", _F)
_CAUSAL = re.compile(r"\bcausal\b|\bautoregressive\b|因果", _F)
_NOT_CAUSAL = re.compile(r"\bnon[\s_-]?causal\b|\bbidirectional\b|\bnot\s+causal\b|双向|非因果", _F)
_GROUPED = re.compile(r"\bgrouped[\s_-]*query\b|\bgqa\b|分组查询", _F)
_SCALE = re.compile(r"\b(?:softmax\s+)?scale\s*(?:of|=|:|is|by)?\s*(\d*\.?\d+(?:e-?\d+)?)\b|缩放\s*(?:为|是|=)?\s*"
                    r"(\d*\.?\d+)", _F)


def attention_words(text: str) -> tuple[str, str, list[str]]:
    """(expression, text without the words read, notes) for 'causal attention over 4x16x2048x64 in
    fp16': q, k and v are the inputs (k and v take q's shape unless given theirs)."""
    causal = bool(_CAUSAL.search(text)) and not _NOT_CAUSAL.search(text)
    args = ["q", "k", "v"] + ["is_causal=True"] * causal
    m = _SCALE.search(text)
    if m:
        args.append(f"scale={float(m.group(1) or m.group(2))!r}")
    if _GROUPED.search(text):
        args.append("enable_gqa=True")
    notes = [] if causal or _NOT_CAUSAL.search(text) else ["'causal' not said: every query attends to every key"]
    for pattern in (_SCALE, _NOT_CAUSAL, _CAUSAL, _GROUPED, ATTENTION_WORD):
        text = pattern.sub(_blank, text)
    return f"{SDPA}({', '.join(args)})", text, notes


# ---------------------------------------------------------------- IR rule

def convert(c: Call) -> Node | None:
    if c.fname == SDPA_GRAD:
        return _grad(c)
    if c.fname != SDPA:
        return None
    given = arguments(c, ("query", "key", "value", "attn_mask", "dropout_p", "is_causal", "scale", "enable_gqa"))
    if not {"query", "key", "value"} <= set(given):
        raise IRError("scaled_dot_product_attention takes query, key and value, e.g. F.scaled_dot_product_attention(q, k, v)")
    if "dropout_p" in given and number(given["dropout_p"]) != 0:
        raise IRError("scaled_dot_product_attention with dropout_p > 0 is random; a kernel is judged against a "
                      "reference that gives one answer (dropout_p=0.0)")
    scale = None if is_none(given.get("scale")) else number(given["scale"])
    q, k, v = (c.expr(given[n]) for n in ("query", "key", "value"))
    mask = [] if is_none(given.get("attn_mask")) else [c.expr(given["attn_mask"])]
    if mask and flag(given.get("is_causal")):
        raise IRError("scaled_dot_product_attention with both attn_mask and is_causal=True: torch refuses the pair; "
                      "give one (a causal attn_mask, or is_causal alone)")
    return call(SDPA, q, k, v, *mask, causal=flag(given.get("is_causal")), scale=scale,
                gqa=flag(given.get("enable_gqa")))


def attn_mask(node: Node) -> Node | None:
    """An attention's attn_mask (its fourth argument): bool (False: the key is left out) or added to the
    scores, broadcast over [batch, heads, L, S]; None where it has none."""
    return node.args[3] if node.op == SDPA and len(node.args) > 3 else None


def reads_mask(node: Node, position: int) -> bool:
    """Whether argument `position` of node may be a bool mask: an attention's attn_mask."""
    return node.op == SDPA and position == 3


def _grad(c: Call) -> Node:
    wrt = c.kw.get("wrt")
    wrt = wrt.value if isinstance(wrt, ast.Constant) else None
    if len(c.args) != 4 or wrt not in ("q", "k", "v") or not set(c.kw) <= KEYWORDS[SDPA_GRAD]:
        raise IRError("sdpa_grad takes (q, k, v, g, wrt='q', 'k' or 'v') and the attention's keywords, as "
                      "bot.autodiff writes it")
    scale = None if is_none(c.kw.get("scale")) else number(c.kw["scale"])
    return call(SDPA_GRAD, *map(c.expr, c.args), wrt=wrt, causal=flag(c.kw.get("is_causal")), scale=scale,
                gqa=flag(c.kw.get("enable_gqa")))


@prints(SDPA, SDPA_GRAD)
def _text(node: Node, text) -> str:
    wrt = f", wrt={node.attr('wrt')!r}" if node.op == SDPA_GRAD else ""
    mask = "" if attn_mask(node) is None else f", attn_mask={text(attn_mask(node))}"
    return f"{node.op}({', '.join(text(a) for a in node.args[:3 if mask else 4])}{mask}{wrt}{_keywords(node)})"


def _keywords(node: Node) -> str:
    out = ", is_causal=True" if node.attr("causal") else ""
    out += f", scale={node.attr('scale')!r}" if node.attr("scale") is not None else ""
    return out + (", enable_gqa=True" if node.attr("gqa") else "")


def check(node: Node) -> None:
    """q, k and v (and a gradient's g) are inputs or earlier stages' outputs."""
    if any(a.op != "input" for a in node.args):
        raise IRError(f"{node.op} reads q, k and v as they are: each is an input or a kernel's output")


def output_shape(node: Node, shapes: dict[str, list[int]]) -> list[int]:
    q, k, v = (list(shapes[a.name]) for a in node.args[:3])
    if not (2 <= len(q) <= MAX_RANK and len(k) == len(v) == len(q)):
        raise IRError(f"scaled_dot_product_attention here takes q, k, v of one rank from 2 to {MAX_RANK} "
                      f"([batch, heads, L, E]); got {q}, {k}, {v}")
    if k[-1] != q[-1] or v[-2] != k[-2]:
        raise IRError(f"scaled_dot_product_attention: q {q} and k {k} need one head dim E, k and v {v} one key count S")
    lead = _batch(node, q, k, v)
    if node.op == SDPA:
        _check_mask(node, shapes, lead + [q[-2], k[-2]], v[-1])
        return lead + [q[-2], v[-1]]
    if max(q[-1], v[-1]) > GRAD_MAX_HEAD:
        raise IRError(f"attention's gradient kernels take head dims up to {GRAD_MAX_HEAD}; q's is {q[-1]}, v's {v[-1]}")
    g = list(shapes[node.args[3].name])
    if g != lead + [q[-2], v[-1]]:
        raise IRError(f"sdpa_grad: g {g} is not the attention's output shape {lead + [q[-2], v[-1]]}")
    return lead + {"q": q[-2:], "k": k[-2:], "v": v[-2:]}[node.attr("wrt")]


def _check_mask(node: Node, shapes: dict[str, list[int]], scores: list[int], ev: int) -> None:
    """An attn_mask broadcasts over the scores [..., L, S] (as torch broadcasts it), and its value heads
    fit the flash kernel, which reads it (the wide heads' two kernels do not)."""
    mask = attn_mask(node)
    if mask is None:
        return
    m = list(shapes[mask.name])
    if len(m) > len(scores) or any(a not in (1, b) for a, b in zip(m[::-1], scores[::-1])):
        raise IRError(f"scaled_dot_product_attention: attn_mask {m} does not broadcast over the scores {scores}")
    if ev > WIDE_EV:
        raise IRError(f"scaled_dot_product_attention with attn_mask takes value heads up to {WIDE_EV}; v's is {ev}")


def _batch(node: Node, q: list[int], k: list[int], v: list[int]) -> list[int]:
    """The batch dims: torch's broadcast, the heads' dim by groups where enable_gqa."""
    out = []
    for d, (a, b, c) in enumerate(zip(q[:-2], k[:-2], v[:-2])):
        heads = d == len(q) - 3
        if b != c:
            raise IRError(f"scaled_dot_product_attention: k {k} and v {v} differ in dim {d}")
        grouped = node.attr("gqa") and heads and a % b == 0
        if not (a == b or b == 1 or a == 1 or grouped):
            raise IRError(f"scaled_dot_product_attention: dim {d} of q {q} and of k {k} do not broadcast" +
                          ("" if not heads else "; with enable_gqa=True, k's heads must divide q's"))
        out.append(a if grouped else max(a, b))
    return out


def torch_text(node: Node, a: list[str]) -> str:
    mask = f", attn_mask={a[3]}" if attn_mask(node) is not None else ""
    return f"torch.nn.functional.{SDPA}({', '.join(a[:3])}{mask}{_keywords(node)})"


def _no_torch(node: Node, a: list[str]) -> str:
    raise IRError("sdpa_grad is a part of a training kernel: the judge checks it through the forward's autograd")


TORCH_OPS = {SDPA: torch_text, SDPA_GRAD: _no_torch}


def over_text(node: Node) -> str:
    return ""


def reference_property(node: Node) -> tuple[str, bool]:
    return "", False


# ---------------------------------------------------------------- launcher helpers (copied into kernel.py)

def _attention_config(e, ev, wide):
    # The output tile [BLOCK_M, Ev] lives in registers: fewer rows a program as Ev grows.
    block_e = min(128, max(16, 1 << (e - 1).bit_length()))
    # To 128: q·k over the whole head dim at once (halves of it took twice as long at 80); three
    # stages (the best of the space or within 3% of it at E 64, 80 and 128, causal or not, on an H100).
    if ev <= 128:
        return {"BLOCK_M": 64, "BLOCK_N": 64, "BLOCK_E": block_e, "num_warps": 4, "num_stages": 3}
    if ev <= 256:
        return {"BLOCK_M": 32, "BLOCK_N": 32, "BLOCK_E": 64, "num_warps": 8, "num_stages": 1}
    if wide:    # the two-kernel path: 64 x 64 tiles of scores and of the output, the head dim 64 at a time
        return {"BLOCK_M": 64, "BLOCK_N": 64, "BLOCK_E": 64, "num_warps": 4, "num_stages": 2}
    return {"BLOCK_M": 16, "BLOCK_N": 16, "BLOCK_E": 128, "num_warps": 8, "num_stages": 1}


def _batch_strides(t, shape):
    # A tensor's strides over the leading dims `shape` of [B, H, L, S] (the output's [B, H], or all four
    # for an attn_mask over the scores); 0 along a dim it broadcasts.
    sizes = [1] * (4 - t.dim()) + list(t.shape)
    strides = [0] * (4 - t.dim()) + list(t.stride())
    return [s if n != 1 or m == 1 else 0 for n, m, s in zip(sizes, shape, strides)]


# ---------------------------------------------------------------- kernel.py

def kernel_source(spec: dict, node: Node, options: dict | None = None) -> str:
    return (_GradKernel if node.op == SDPA_GRAD else _AttentionKernel).render(spec, node, options)


class _AttentionKernel(KernelFile):
    block_key = "BLOCK_N"
    description = ("One program per BLOCK_M query rows of one (batch, head): the keys BLOCK_N at a time with a\n"
                   "running maximum and sum per row (online softmax); the scores never reach memory.")

    def __init__(self, spec, node, inputs, options):
        self.q, self.k, self.v = (next(i for i in inputs if i.name == a.name) for a in node.args[:3])
        mask = attn_mask(node)
        self.mask = None if mask is None else next(i for i in inputs if i.name == mask.name)
        super().__init__(spec, pointwise.triton_body(node.args[0], [self.q]), inputs, [], options)
        self.node = node

    def configs(self) -> list[dict]:
        return self._space(CONFIGS)

    def source(self) -> str:
        kernels = [self._kernel(), self._scores_kernel(), self._pv_kernel()]
        return self._file(kernels, [_attention_config, _batch_strides], self._launcher())

    def _kernel(self) -> str:
        params = ["q_ptr", "k_ptr", "v_ptr", "mask_ptr", "out_ptr", "H", "L", "S", "E", "EV", "group", "sqb", "sqh",
                  "skb", "skh", "svb", "svh", "smb", "smh", "sml", "sms", "qk_scale", "mask_scale",
                  "CAUSAL: tl.constexpr", "MASK: tl.constexpr", "PRECISION: tl.constexpr", "BLOCK_M: tl.constexpr",
                  "BLOCK_N: tl.constexpr", "BLOCK_E: tl.constexpr", "BLOCK_EV: tl.constexpr", "Q_RESIDENT: tl.constexpr"]
        code = Code()("pid_m = tl.program_id(0)",
                      "bh = tl.program_id(1).to(tl.int64)")
        _heads(code, "qkv")
        code("out_ptr += bh * L * EV")
        with code.block("if MASK:"):
            code("# attn_mask: 1 bool (a key left out where False), 2 added to the scores; read through its",
                 "# strides over [batch, heads, L, S], 0 where it broadcasts",
                 "mask_ptr += b * smb + h * smh")
        _online_softmax(code, "Q_RESIDENT", masks=True)
        code("out = acc / l_i[:, None]")
        with code.block("if MASK:"):
            code("# a row whose every key is masked out gives zeros, as torch's attention does",
                 "out = tl.where(l_i[:, None] > 0.0, out, 0.0)")
        code("tl.store(out_ptr + rows[:, None] * EV + offs_ev[None, :], out.to(out_ptr.dtype.element_ty), "
             "mask=row_in[:, None] & (offs_ev < EV)[None, :])")
        return jit_source(f"{self.name}_kernel", params, code.lines)

    def _scores_kernel(self) -> str:
        """Wide heads, first kernel: one BLOCK_M x BLOCK_N tile of a head's scores q @ k^T * qk_scale
        into the workspace (one [L, S] slab per head of the group from bh0); a causal tile wholly
        past its rows' diagonal is skipped (never read)."""
        params = ["q_ptr", "k_ptr", "ws_ptr", "H", "L", "S", "E", "group", "bh0", "sqb", "sqh", "skb", "skh",
                  "qk_scale", "CAUSAL: tl.constexpr", "PRECISION: tl.constexpr", "BLOCK_M: tl.constexpr",
                  "BLOCK_N: tl.constexpr", "BLOCK_E: tl.constexpr"]
        code = Code()("pid_m = tl.program_id(0)",
                      "pid_n = tl.program_id(1)",
                      "slab = tl.program_id(2).to(tl.int64)",
                      "bh = bh0 + slab")
        _heads(code, "qk")
        code("ws_ptr += slab * L * S",
             "rows = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)",
             "cols = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)",
             "row_in = rows < L",
             "col_in = cols < S")
        _last_key(code)
        with code.block("if pid_n * BLOCK_N < hi:"):
            _scores(code)
            code("tl.store(ws_ptr + rows[:, None] * S + cols[None, :], s * qk_scale, "
                 "mask=row_in[:, None] & col_in[None, :])")
        return jit_source(f"{self.name}_scores_kernel", params, code.lines)

    def _pv_kernel(self) -> str:
        """Wide heads, second kernel: BLOCK_M rows by BLOCK_E value columns of the output. A first
        walk over the rows' scores finds each row's maximum and sum, a second adds p @ v."""
        params = ["v_ptr", "ws_ptr", "out_ptr", "H", "L", "S", "EV", "group", "bh0", "svb", "svh",
                  "CAUSAL: tl.constexpr", "PRECISION: tl.constexpr", "BLOCK_M: tl.constexpr",
                  "BLOCK_N: tl.constexpr", "BLOCK_E: tl.constexpr"]
        code = Code()("pid_m = tl.program_id(0)",
                      "pid_e = tl.program_id(1)",
                      "slab = tl.program_id(2).to(tl.int64)",
                      "bh = bh0 + slab")
        _heads(code, "v")
        code("ws_ptr += slab * L * S",
             "out_ptr += bh * L * EV",
             "rows = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)",
             "offs_n = tl.arange(0, BLOCK_N)",
             "evs = pid_e * BLOCK_E + tl.arange(0, BLOCK_E)",
             "row_in = rows < L",
             "ev_in = evs < EV",
             'm_i = tl.full([BLOCK_M], float("-inf"), tl.float32)',
             "l_i = tl.zeros([BLOCK_M], tl.float32)",
             "acc = tl.zeros([BLOCK_M, BLOCK_E], tl.float32)")
        _last_key(code)
        load = ["cols = start_n + offs_n",
                "col_in = cols < S",
                "s = tl.load(ws_ptr + rows[:, None] * S + cols[None, :], mask=row_in[:, None] & col_in[None, :], "
                "other=0.0)"]
        with code.block("for start_n in range(0, hi, BLOCK_N):"):
            code(*load)
            _kept(code)
            code('s = tl.where(keep, s, float("-inf"))',
                 "m_new = tl.maximum(m_i, tl.max(s, 1))",
                 "l_i = l_i * tl.exp2(m_i - m_new) + tl.sum(tl.exp2(s - m_new[:, None]), 1)",
                 "m_i = m_new")
        with code.block("for start_n in range(0, hi, BLOCK_N):"):
            code(*load)
            _kept(code)
            code('p = tl.exp2(tl.where(keep, s, float("-inf")) - m_i[:, None])',
                 "v = tl.load(v_ptr + cols[:, None] * EV + evs[None, :], mask=col_in[:, None] & ev_in[None, :], "
                 "other=0.0)",
                 "acc = tl.dot(p.to(v.dtype), v, acc, input_precision=PRECISION)")
        code("out = acc / l_i[:, None]",
             "tl.store(out_ptr + rows[:, None] * EV + evs[None, :], out.to(out_ptr.dtype.element_ty), "
             "mask=row_in[:, None] & ev_in[None, :])")
        return jit_source(f"{self.name}_pv_kernel", params, code.lines)

    def _launcher(self) -> str:
        q, k, v, node = self.q.local, self.k.local, self.v.local, self.node
        scale = node.attr("scale")
        text = self._signature_and_prologue()
        text += (f"    L, E, S, EV = {q}.shape[-2], {q}.shape[-1], {k}.shape[-2], {v}.shape[-1]\n"
                 f"    lead = [max(a, b) for a, b in zip({q}.shape[:-2], {k}.shape[:-2])]\n")
        text += ("    full = [1] * (2 - len(lead)) + lead\n"
                 f"    out = torch.empty([*lead, L, EV], dtype={self.out_dtype(q)}, device={q}.device)\n"
                 "    if out.numel() == 0:\n        return out\n"
                 f"    heads_kv = [1, 1, *{k}.shape[:-2]][-1]\n"
                 "    group = full[1] // heads_kv if heads_kv > 1 else 1\n"
                 f"    qk_scale = {'1.0 / math.sqrt(E)' if scale is None else repr(scale)} * 1.4426950408889634\n")
        text += ("    # Wide value heads: two kernels (scores, then p @ v) where one head's float32 scores\n"
                 "    # fit the workspace and its key tiles the grid; else the flash kernel, in small tiles.\n"
                 f"    wide = EV > {WIDE_EV} and 0 < L * S <= {WIDE_SCORES} and S < {WIDE_KEYS}\n"
                 "    # float32: the two kernels' products in three TF32 ones each (the operands' TF32 parts and\n"
                 "    # remainders), as close to the float32 product as IEEE FMA, on the tensor cores; the flash\n"
                 "    # kernel's tiles leave no shared memory for them, so it multiplies in IEEE float32\n"
                 f'    precision = ("tf32x3" if wide else "ieee") if {q}.dtype == torch.float32 else None\n')
        text += self._config_line("_attention_config(E, EV, wide)")
        shared = ["full[1]", "L", "S"]
        flags = [f"CAUSAL={bool(node.attr('causal'))}", "PRECISION=precision", 'BLOCK_M=config["BLOCK_M"]',
                 'BLOCK_N=config["BLOCK_N"]', 'BLOCK_E=config["BLOCK_E"]']
        options = ['num_warps=config["num_warps"]', 'num_stages=config["num_stages"]']
        text += ("    if wide:\n"
                 "        # Wide value heads: the scores of up to 65535 heads at a time, in a float32\n"
                 f"        # workspace of at most {WORKSPACE} scores (or one head's), then p @ v.\n"
                 "        heads = full[0] * full[1]\n"
                 f"        per = max(1, min(heads, 65535, {WORKSPACE} // (L * S)))\n"
                 f"        ws = torch.empty((per, L, S), dtype=torch.float32, device={q}.device)\n")
        text += ("        for bh0 in range(0, heads, per):\n"
                 "            group_heads = min(per, heads - bh0)\n"
                 '            grid = (_cdiv(L, config["BLOCK_M"]), _cdiv(S, config["BLOCK_N"]), group_heads)\n'
                 + launch(f"{self.name}_scores_kernel", "grid",
                          [q, k, "ws", *shared, "E", "group", "bh0", f"*_batch_strides({q}, full)",
                           f"*_batch_strides({k}, full)", "qk_scale", *flags, *options], "            ") + "\n"
                 '            grid = (_cdiv(L, config["BLOCK_M"]), _cdiv(EV, config["BLOCK_E"]), group_heads)\n'
                 + launch(f"{self.name}_pv_kernel", "grid",
                          [v, "ws", "out", *shared, "EV", "group", "bh0", f"*_batch_strides({v}, full)", *flags,
                           *options], "            ") + "\n"
                 "        return out\n")
        text += '    grid = (_cdiv(L, config["BLOCK_M"]), full[0] * full[1])\n'
        if self.mask is None:
            mask = [q, "0, 0, 0, 0", "qk_scale", "MASK=0"]
        else:
            m = self.mask.local
            text += (f"    # attn_mask: left out where False (bool), else added to the scores, which the kernel holds\n"
                     f"    # over the scale (1 / scale: mask_scale)\n"
                     f"    mask_kind = 1 if {m}.dtype == torch.bool else 2\n"
                     f"    mask_scale = {'math.sqrt(E)' if scale is None else repr(1.0 / scale)}\n")
            mask = [m, f"*_batch_strides({m}, [*full, L, S])", "mask_scale", "MASK=mask_kind"]
        args = [q, k, v, mask[0], "out", *shared, "E", "EV", "group", f"*_batch_strides({q}, full)",
                f"*_batch_strides({k}, full)", f"*_batch_strides({v}, full)", mask[1], "qk_scale", mask[2], mask[3],
                *flags,
                "BLOCK_EV=max(16, 1 << (EV - 1).bit_length())", 'Q_RESIDENT=E <= config["BLOCK_E"]', *options]
        return text + launch(f"{self.name}_kernel", "grid", args, "    ") + "\n    return out\n"


def _grad_config(e, ev):
    # The gradient kernels keep a head's whole rows in registers: smaller tiles as the heads widen.
    if max(e, ev) <= 64:        # 3 stages: the best of 11 tiles for the fused backward on an H100 and an H200
        return {"BLOCK_M": 64, "BLOCK_N": 64, "num_warps": 4, "num_stages": 3}
    if max(e, ev) <= 128:
        return {"BLOCK_M": 64, "BLOCK_N": 32, "num_warps": 4, "num_stages": 2}
    return {"BLOCK_M": 32, "BLOCK_N": 32, "num_warps": 8, "num_stages": 1}


# query rows and keys a step of the gradient kernels, warps, stages
GRAD_CONFIGS = [{"BLOCK_M": m, "BLOCK_N": n, "num_warps": w, "num_stages": s}
                for m, n, w, s in [(64, 64, 4, 2), (64, 32, 4, 2), (32, 64, 4, 2), (32, 32, 8, 1), (128, 64, 8, 2),
                                   (16, 16, 2, 1)]]


class _GradKernel(KernelFile):
    block_key = "BLOCK_N"
    description = ("The gradient of attention's q, k or v from its output's, g (FlashAttention-2's backward): a first\n"
                   "kernel runs the forward's online softmax per BLOCK_M query rows and keeps each row's log-sum-exp\n"
                   "and delta = rowsum(g * out) (float32); then q's gradient per BLOCK_M rows walks the keys\n"
                   "(ds = p * (g @ v^T - delta), dq = ds @ k * scale), and k's or v's per BLOCK_N keys walks the\n"
                   "query rows (dv = p^T @ g, dk = ds^T @ q * scale). The scores never reach memory. k's and\n"
                   "v's are per query head; grouped heads are summed by the next stage.")

    def __init__(self, spec, node, inputs, options):
        self.q, self.k, self.v, self.g = (next(i for i in inputs if i.name == a.name) for a in node.args)
        super().__init__(spec, pointwise.triton_body(node.args[0], [self.q]), inputs, [], options)
        self.node = node

    def configs(self) -> list[dict]:
        return self._space(GRAD_CONFIGS)

    def source(self) -> str:
        second = self._dq_kernel() if self.node.attr("wrt") == "q" else self._dkv_kernel()
        return self._file([self._stats_kernel(), second], [_grad_config, _batch_strides], self._launcher())

    _PARAMS = ["q_ptr", "k_ptr", "v_ptr", "g_ptr", "stats_ptr", "out_ptr", "H", "L", "S", "E", "EV", "group", "sqb",
               "sqh", "skb", "skh", "svb", "svh", "qk_scale", "sm_scale", "CAUSAL: tl.constexpr",
               "PRECISION: tl.constexpr", "BLOCK_M: tl.constexpr", "BLOCK_N: tl.constexpr", "BLOCK_E: tl.constexpr",
               "BLOCK_EV: tl.constexpr"]

    def _stats_kernel(self) -> str:
        """Per BLOCK_M query rows: the forward's softmax, then each row's log2-sum-exp2 and delta."""
        code = Code()("pid_m = tl.program_id(0)",
                      "bh = tl.program_id(1).to(tl.int64)")
        _heads(code, "qkv")
        code("g_ptr += bh * L * EV",
             "stats_ptr += bh * L * 2")
        _online_softmax(code, "True")         # BLOCK_E holds the whole head here
        code("g = tl.load(g_ptr + rows[:, None] * EV + offs_ev[None, :], mask=row_in[:, None] & "
             "(offs_ev < EV)[None, :], other=0.0).to(tl.float32)",
             "# delta = rowsum(g * out): softmax's gradient subtracts it from g @ v^T",
             "delta = tl.sum(g * (acc / l_i[:, None]), 1)",
             "tl.store(stats_ptr + rows * 2, m_i + tl.log2(l_i), mask=row_in)",
             "tl.store(stats_ptr + rows * 2 + 1, delta, mask=row_in)")
        return jit_source(f"{self.name}_stats_kernel", self._PARAMS, code.lines)

    def _dq_kernel(self) -> str:
        """Per BLOCK_M query rows: dq = sum over the keys of (p * (g @ v^T - delta)) @ k, times the scale."""
        code = Code()("pid_m = tl.program_id(0)",
                      "bh = tl.program_id(1).to(tl.int64)")
        _heads(code, "qkv")
        code("g_ptr += bh * L * EV",
             "stats_ptr += bh * L * 2",
             "out_ptr += bh * L * E",
             "rows = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)",
             "row_in = rows < L")
        _head_tiles(code)
        code("q = tl.load(q_ptr + rows[:, None] * E + offs_e[None, :], mask=row_in[:, None] & e_in[None, :], "
             "other=0.0).to(k_ptr.dtype.element_ty)",
             *_upstream_rows(),
             "lse = tl.load(stats_ptr + rows * 2, mask=row_in, other=0.0)",
             "delta = tl.load(stats_ptr + rows * 2 + 1, mask=row_in, other=0.0)",
             "dq = tl.zeros([BLOCK_M, BLOCK_E], tl.float32)")
        _last_key(code)
        with code.block("for start_n in range(0, hi, BLOCK_N):"):
            code("cols = start_n + tl.arange(0, BLOCK_N)",
                 "col_in = cols < S")
            _key_tiles(code)
            _kept(code)
            _ds(code)
            code("dq = tl.dot(ds.to(k.dtype), k, dq, input_precision=PRECISION)")
        code("tl.store(out_ptr + rows[:, None] * E + offs_e[None, :], (dq * sm_scale).to(out_ptr.dtype.element_ty), "
             "mask=row_in[:, None] & e_in[None, :])")
        return jit_source(f"{self.name}_dq_kernel", self._PARAMS, code.lines)

    def _dkv_kernel(self) -> str:
        """Per BLOCK_N keys: dv = p^T @ g, or dk = ds^T @ q times the scale, over the query rows
        (a causal tile from the first row block that reaches its first key)."""
        wrt_v = self.node.attr("wrt") == "v"
        width = "EV" if wrt_v else "E"
        code = Code()("pid_n = tl.program_id(0)",
                      "bh = tl.program_id(1).to(tl.int64)")
        _heads(code, "qkv")
        code("g_ptr += bh * L * EV",
             "stats_ptr += bh * L * 2",
             f"out_ptr += bh * S * {width}",
             "cols = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)",
             "col_in = cols < S")
        _head_tiles(code)
        _key_tiles(code)
        code(f"acc = tl.zeros([BLOCK_N, BLOCK_{width}], tl.float32)")
        _first_row(code)
        with code.block("for start_m in range(lo, L, BLOCK_M):"):
            _query_rows(code, "q_ptr", "g_ptr", "stats_ptr")
            _kept(code)
            code("keep = keep & row_in[:, None]")
            if wrt_v:
                _probabilities(code)
                code("acc = tl.dot(tl.trans(p).to(g.dtype), g, acc, input_precision=PRECISION)")
            else:
                _ds(code)
                code("acc = tl.dot(tl.trans(ds).to(q.dtype), q, acc, input_precision=PRECISION)")
        code("acc = acc * sm_scale" if not wrt_v else "# v's gradient takes no scale",
             f"tl.store(out_ptr + cols[:, None] * {width} + offs_{width.lower()}[None, :], "
             f"acc.to(out_ptr.dtype.element_ty), mask=col_in[:, None] & {width.lower()}_in[None, :])")
        return jit_source(f"{self.name}_dkv_kernel", self._PARAMS, code.lines)

    def _scales_and_stats(self) -> str:
        """Launcher lines: the dots' precision, the scales, the config and the statistics' buffer."""
        q, scale = self.q.local, self.node.attr("scale")
        return (f'    precision = "ieee" if {q}.dtype == torch.float32 else None\n'
                f"    sm_scale = {'1.0 / math.sqrt(E)' if scale is None else repr(scale)}\n"
                "    qk_scale = sm_scale * 1.4426950408889634      # base-2 exponentials\n"
                + self._config_line("_grad_config(E, EV)")
                + "    # each query row's log-sum-exp and delta, float32\n"
                f"    stats = torch.empty((full[0] * full[1], L, 2), dtype=torch.float32, device={q}.device)\n")

    def _shared_args(self, block_m: str = 'config["BLOCK_M"]', block_n: str = 'config["BLOCK_N"]') -> list[str]:
        """The kernels' arguments after their tensors; a program's tile is block_m x block_n."""
        q, k, v = self.q.local, self.k.local, self.v.local
        return ["full[1]", "L", "S", "E", "EV", "group", f"*_batch_strides({q}, full)", f"*_batch_strides({k}, full)",
                f"*_batch_strides({v}, full)", "qk_scale", "sm_scale", f"CAUSAL={bool(self.node.attr('causal'))}",
                "PRECISION=precision", f"BLOCK_M={block_m}", f"BLOCK_N={block_n}",
                "BLOCK_E=max(16, 1 << (E - 1).bit_length())", "BLOCK_EV=max(16, 1 << (EV - 1).bit_length())",
                'num_warps=config["num_warps"]', 'num_stages=config["num_stages"]']

    def _launcher(self) -> str:
        q, k, v, g, node = self.q.local, self.k.local, self.v.local, self.g.local, self.node
        wrt = node.attr("wrt")
        text = self._signature_and_prologue()
        text += (f"    L, E, S, EV = {q}.shape[-2], {q}.shape[-1], {k}.shape[-2], {v}.shape[-1]\n"
                 f"    lead = [max(a, b) for a, b in zip({q}.shape[:-2], {k}.shape[:-2])]\n"
                 "    full = [1] * (2 - len(lead)) + lead\n"
                 f"    # {wrt}'s gradient, at every (batch, query head)\n"
                 f"    out = torch.empty([*lead, {'L, E' if wrt == 'q' else 'S, E' if wrt == 'k' else 'S, EV'}], "
                 f"dtype={self.out_dtype(q)}, device={q}.device)\n"
                 "    if out.numel() == 0:\n        return out\n"
                 f"    heads_kv = [1, 1, *{k}.shape[:-2]][-1]\n"
                 "    group = full[1] // heads_kv if heads_kv > 1 else 1\n")
        text += self._scales_and_stats()
        args = [q, k, v, g, "stats", "out", *self._shared_args()]
        text += ('    grid = (_cdiv(L, config["BLOCK_M"]), full[0] * full[1])\n'
                 + launch(f"{self.name}_stats_kernel", "grid", args, "    ") + "\n")
        if wrt == "q":
            text += launch(f"{self.name}_dq_kernel", "grid", args, "    ") + "\n"
        else:
            text += ('    grid = (_cdiv(S, config["BLOCK_N"]), full[0] * full[1])\n'
                     + launch(f"{self.name}_dkv_kernel", "grid", args, "    ") + "\n")
        return text + "    return out\n"


class _JointGradKernel(_GradKernel):
    """q's, k's and v's gradients at once (a training kernel's backward where q, k and v are inputs of
    one batch): the stats kernel once, q's gradient per query block, and k's and v's together per
    key block, which walks the query rows of every query head of its group (enable_gqa: no sum after)."""

    description = ("The gradients of attention's q, k and v from its output's, g (FlashAttention-2's backward): a\n"
                   "first kernel runs the forward's online softmax per BLOCK_M query rows and keeps each row's\n"
                   "log-sum-exp and delta = rowsum(g * out) (float32); then q's gradient per BLOCK_M rows walks the\n"
                   "keys, and k's and v's together per BLOCK_M keys walk the query rows of every query head that\n"
                   "shares the key head. The scores never reach memory.")

    def source(self) -> str:
        return self._file([self._stats_kernel(), self._dq_kernel(), self._joint_dkv_kernel()],
                          [_grad_config, _batch_strides], self._launcher())

    def _joint_dkv_kernel(self) -> str:
        code = Code()("pid_n = tl.program_id(0)",
                      "bkv = tl.program_id(1).to(tl.int64)",
                      "HK = H // group",
                      "b = bkv // HK",
                      "hk = bkv % HK",
                      "k_ptr += b * skb + hk * skh",
                      "v_ptr += b * svb + hk * svh",
                      "cols = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)",
                      "col_in = cols < S")
        _head_tiles(code)
        _key_tiles(code)
        code("dk = tl.zeros([BLOCK_N, BLOCK_E], tl.float32)",
             "dv = tl.zeros([BLOCK_N, BLOCK_EV], tl.float32)")
        _first_row(code)
        with code.block("for j in range(0, group):"):
            code("# query head h of this key head's group: its q, g and stats",
                 "h = hk * group + j",
                 "qh_ptr = q_ptr + b * sqb + h * sqh",
                 "gh_ptr = g_ptr + (b * H + h) * L * EV",
                 "sh_ptr = stats_ptr + (b * H + h) * L * 2")
            with code.block("for start_m in range(lo, L, BLOCK_M):"):
                _query_rows(code, "qh_ptr", "gh_ptr", "sh_ptr")
                _kept(code)
                code("keep = keep & row_in[:, None]")
                _ds(code)
                code("dv = tl.dot(tl.trans(p).to(g.dtype), g, dv, input_precision=PRECISION)",
                     "dk = tl.dot(tl.trans(ds).to(q.dtype), q, dk, input_precision=PRECISION)")
        code("kv = bkv * S",
             "tl.store(dk_ptr + (kv + cols)[:, None] * E + offs_e[None, :], (dk * sm_scale).to(dk_ptr.dtype.element_ty), "
             "mask=col_in[:, None] & e_in[None, :])",
             "tl.store(dv_ptr + (kv + cols)[:, None] * EV + offs_ev[None, :], dv.to(dv_ptr.dtype.element_ty), "
             "mask=col_in[:, None] & ev_in[None, :])")
        params = [p for p in self._PARAMS if p != "out_ptr"]
        params[params.index("stats_ptr") + 1:params.index("stats_ptr") + 1] = ["dk_ptr", "dv_ptr"]
        return jit_source(f"{self.name}_dkv_kernel", params, code.lines)

    def _launcher(self) -> str:
        q, k, v, g = self.q.local, self.k.local, self.v.local, self.g.local
        text = self._signature_and_prologue()
        text += (f"    L, E, S, EV = {q}.shape[-2], {q}.shape[-1], {k}.shape[-2], {v}.shape[-1]\n"
                 f"    full = [1] * (4 - {q}.dim()) + list({q}.shape[:-2])\n"
                 f"    batch_kv, heads_kv = ([1] * (4 - {k}.dim()) + list({k}.shape[:-2]))[-2:]\n"
                 f"    if batch_kv != full[0] or heads_kv == 0 or full[1] % heads_kv or max(E, EV) > {GRAD_MAX_HEAD}:\n"
                 f'        raise ValueError(f"q {{list({q}.shape)}}, k {{list({k}.shape)}}: this backward takes q, k and v '
                 f'of one batch, the query heads whole groups of the key heads, head dims up to {GRAD_MAX_HEAD}; "\n'
                 '                         "regenerate the kernel for these shapes")\n'
                 "    # query heads share key head h // group (enable_gqa, or one key head broadcast)\n"
                 "    group = full[1] // heads_kv\n"
                 f"    d_q, d_k, d_v = torch.empty_like({q}), torch.empty_like({k}), torch.empty_like({v})\n"
                 f"    if {q}.numel() == 0 or {k}.numel() == 0:\n"
                 "        return d_q.zero_(), d_k.zero_(), d_v.zero_()\n")
        text += self._scales_and_stats()
        shared = self._shared_args()
        turned = self._shared_args('config["BLOCK_N"]', 'config["BLOCK_M"]')
        text += ('    grid = (_cdiv(L, config["BLOCK_M"]), full[0] * full[1])\n'
                 + launch(f"{self.name}_stats_kernel", "grid", [q, k, v, g, "stats", "d_q", *shared], "    ") + "\n"
                 + launch(f"{self.name}_dq_kernel", "grid", [q, k, v, g, "stats", "d_q", *shared], "    ") + "\n"
                 + "    # k's and v's per BLOCK_M keys (the dq tile turned over: many keys a program, few query\n"
                 + "    # rows a step)\n"
                 + '    grid = (_cdiv(S, config["BLOCK_M"]), full[0] * heads_kv)\n'
                 + launch(f"{self.name}_dkv_kernel", "grid", [q, k, v, g, "stats", "d_k", "d_v", *turned], "    ")
                 + "\n")
        return text + "    return d_q, d_k, d_v\n"


def fused_backward(spec: dict, node: Node, cases: list[dict[str, list[int]]], name: str,
                   upstream: str) -> tuple[str, list[str]] | None:
    """For a training kernel: (a kernel.py part defining name(q, k, v, upstream) -> (dq, dk, dv), its
    tensor arguments) where node is attention of three distinct inputs of one batch whose query heads
    are whole groups of the key heads, with head dims the gradient kernels hold; else None."""
    if node.op != SDPA or any(a.op != "input" for a in node.args) or len({a.name for a in node.args}) < 3:
        return None
    q, k, v = (a.name for a in node.args)
    for c in cases:
        qb, kb = ([1] * (4 - len(c[n])) + list(c[n][:-2]) for n in (q, k))
        if qb[0] != kb[0] or qb[1] % kb[1] or max(c[q][-1], c[v][-1]) > GRAD_MAX_HEAD:
            return None
    grad = call(SDPA_GRAD, *node.args, Node("input", name=upstream), wrt="q", causal=node.attr("causal"),
                scale=node.attr("scale"), gqa=node.attr("gqa"))
    tensors = {i["name"]: i for i in spec["inputs"]}
    part = {"name": name, "expression": f"the gradients of {to_text(node)}",
            "inputs": [tensors[q], tensors[k], tensors[v], {"name": upstream, "dtypes": tensors[q]["dtypes"], "shapes": []}]}
    return _JointGradKernel.render(part, grad, {}), [q, k, v, upstream]


def _first_row(code: Code) -> None:
    """lo: the first query row a key block's program walks from (causal: the block that reaches its first key)."""
    code("lo = 0")
    with code.block("if CAUSAL:"):
        code("lo = (pid_n * BLOCK_N // BLOCK_M) * BLOCK_M")


def _query_rows(code: Code, q: str, g: str, stats: str) -> None:
    """A key block's step: BLOCK_M query rows from start_m, their q, g and statistics (log-sum-exp, delta)."""
    code("rows = start_m + tl.arange(0, BLOCK_M)",
         "row_in = rows < L",
         f"q = tl.load({q} + rows[:, None] * E + offs_e[None, :], mask=row_in[:, None] & e_in[None, :], "
         "other=0.0).to(k_ptr.dtype.element_ty)",
         *_upstream_rows(g),
         f"lse = tl.load({stats} + rows * 2, mask=row_in, other=0.0)",
         f"delta = tl.load({stats} + rows * 2 + 1, mask=row_in, other=0.0)")


def _upstream_rows(ptr: str = "g_ptr") -> list[str]:
    """g at the rows, in the operands' dtype for the dots (an earlier stage's g is float32)."""
    return [f"g = tl.load({ptr} + rows[:, None] * EV + offs_ev[None, :], mask=row_in[:, None] & ev_in[None, :], "
            "other=0.0).to(v_ptr.dtype.element_ty)"]


def _head_tiles(code: Code) -> None:
    """The head dims' offsets: a gradient kernel loads a row's whole head (E, EV up to BLOCK_E, BLOCK_EV)."""
    code("offs_e = tl.arange(0, BLOCK_E)",
         "offs_ev = tl.arange(0, BLOCK_EV)",
         "e_in = offs_e < E",
         "ev_in = offs_ev < EV")


def _key_tiles(code: Code) -> None:
    """k and v at the keys cols."""
    code("k = tl.load(k_ptr + cols[:, None] * E + offs_e[None, :], mask=col_in[:, None] & e_in[None, :], other=0.0)",
         "v = tl.load(v_ptr + cols[:, None] * EV + offs_ev[None, :], mask=col_in[:, None] & ev_in[None, :], other=0.0)")


def _probabilities(code: Code) -> None:
    """p: the softmax of rows x cols, recomputed from each row's log-sum-exp (0 where not kept)."""
    code("s = tl.dot(q, tl.trans(k), input_precision=PRECISION) * qk_scale",
         "p = tl.where(keep, tl.exp2(s - lse[:, None]), 0.0)")


def _ds(code: Code) -> None:
    """ds = p * (g @ v^T - delta): the softmax's gradient at the scores of rows x cols."""
    _probabilities(code)
    code("dp = tl.dot(g, tl.trans(v), input_precision=PRECISION)",
         "ds = p * (dp - delta[:, None])")


def _online_softmax(code: Code, resident: str, masks: bool = False) -> None:
    """The flash forward of a program's BLOCK_M query rows: the keys BLOCK_N at a time, each row's
    running maximum m_i and sum l_i (base 2: qk_scale holds log2(e)) and acc = the unnormalized
    p @ v, so that the output is acc / l_i. resident: a constexpr expression, true where the head
    dim fits one BLOCK_E tile, so that q is loaded once for every key tile. The whole key tiles every
    row attends to (under CAUSAL: left of the first row's diagonal) go first, without masks; the
    last tile and the diagonal's after, masked. masks: the kernel takes an attn_mask (its MASK)."""
    code("rows = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)",
         "offs_n = tl.arange(0, BLOCK_N)",
         "offs_ev = tl.arange(0, BLOCK_EV)",
         "row_in = rows < L",
         'm_i = tl.full([BLOCK_M], float("-inf"), tl.float32)',
         "l_i = tl.zeros([BLOCK_M], tl.float32)",
         "acc = tl.zeros([BLOCK_M, BLOCK_EV], tl.float32)")
    with code.block(f"if {resident}:"):
        code("offs_e = tl.arange(0, BLOCK_E)",
             "q = tl.load(q_ptr + rows[:, None] * E + offs_e[None, :], mask=row_in[:, None] & (offs_e < E)[None, :], "
             "other=0.0).to(k_ptr.dtype.element_ty)")
    _last_key(code)
    code("unmasked = S // BLOCK_N * BLOCK_N")
    with code.block("if CAUSAL:"):
        code("unmasked = tl.minimum(unmasked, pid_m * BLOCK_M // BLOCK_N * BLOCK_N)")
    with code.block("for start_n in range(0, unmasked, BLOCK_N):"):
        _key_tile(code, resident, masked=False, masks=masks)
    with code.block("for start_n in range(unmasked, hi, BLOCK_N):"):
        _key_tile(code, resident, masked=True, masks=masks)


def _key_tile(code: Code, resident: str, masked: bool, masks: bool) -> None:
    """One step of the online softmax over keys start_n + offs_n; masked: keys past S or (CAUSAL) past
    a row's diagonal count for nothing; masks: the attn_mask's tile applies (under MASK). The scale is
    applied inside the exponent (one FMA a score)."""
    code("cols = start_n + offs_n",
         "col_in = cols < S")
    cols = "col_in[:, None] & " if masked else ""
    with code.block(f"if {resident}:"):
        code(f"k = tl.load(k_ptr + cols[:, None] * E + offs_e[None, :], mask={cols}(offs_e < E)[None, :], other=0.0)",
             "s = tl.dot(q, tl.trans(k), input_precision=PRECISION)")
    with code.block("else:"):
        _scores(code)
    if masked:
        _kept(code)
        code('s = tl.where(keep, s, float("-inf"))')
    if masks:
        _masked_scores(code)
    code("# base-2 exponentials: qk_scale holds log2(e)",
         "m_new = tl.maximum(m_i, tl.max(s, 1) * qk_scale)",
         "m_exp = m_new")
    if masks:
        with code.block("if MASK:"):
            code("# a row with no key yet (its scores all -inf): 0 subtracted, no NaN from -inf - -inf",
                 'm_exp = tl.where(m_new == float("-inf"), 0.0, m_new)')
    code("alpha = tl.exp2(m_i - m_exp)",
         "p = tl.exp2(s * qk_scale - m_exp[:, None])",
         "l_i = l_i * alpha + tl.sum(p, 1)",
         f"v = tl.load(v_ptr + cols[:, None] * EV + offs_ev[None, :], mask={cols}(offs_ev < EV)[None, :], other=0.0)",
         "acc = tl.dot(p.to(v.dtype), v, acc * alpha[:, None], input_precision=PRECISION)",
         "m_i = m_new")


def _heads(code: Code, tensors: str) -> None:
    """A kernel's prologue: its (batch, head) bh and the tensors' pointers moved to that head."""
    code("b = bh // H",
         "h = bh % H")
    for t in tensors:
        head = "h" if t == "q" else "(h // group)"
        code(*(["# enable_gqa: query heads h share key/value head h // group"] if t == "k" else []),
             f"{t}_ptr += b * s{t}b + {head} * s{t}h")


def _last_key(code: Code) -> None:
    """hi: the keys a program's rows attend to (a causal row i attends to keys j <= i)."""
    code("hi = S")
    with code.block("if CAUSAL:"):
        code("# top-left aligned: nothing past the last row's diagonal",
             "hi = tl.minimum(S, (pid_m + 1) * BLOCK_M)")


def _scores(code: Code) -> None:
    """s = q @ k^T for rows x cols, summed over the head dim BLOCK_E at a time."""
    code("offs_e = tl.arange(0, BLOCK_E)",
         "s = tl.zeros([BLOCK_M, BLOCK_N], tl.float32)")
    with code.block("for e0 in range(0, E, BLOCK_E):"):
        code("es = e0 + offs_e",
             "q = tl.load(q_ptr + rows[:, None] * E + es[None, :], mask=row_in[:, None] & (es < E)[None, :], "
             "other=0.0).to(k_ptr.dtype.element_ty)",
             "k = tl.load(k_ptr + cols[:, None] * E + es[None, :], mask=col_in[:, None] & (es < E)[None, :], "
             "other=0.0)",
             "s = tl.dot(q, tl.trans(k), s, input_precision=PRECISION)")


def _masked_scores(code: Code) -> None:
    """Under MASK: the attn_mask's tile applied to the scores s, before their row maximum: a bool one
    leaves keys out, an additive one is added over the scale (mask_scale is 1 / scale)."""
    with code.block("if MASK:"):
        code("mv = tl.load(mask_ptr + rows[:, None] * sml + cols[None, :] * sms, mask=row_in[:, None] & "
             "col_in[None, :], other=0)")
        with code.block("if MASK == 1:"):
            code('s = tl.where(mv != 0, s, float("-inf"))')
        with code.block("else:"):
            code("s = s + mv.to(tl.float32) * mask_scale")


def _kept(code: Code) -> None:
    """keep: the scores that count (keys that exist, and under CAUSAL not past the row's diagonal)."""
    code("keep = col_in[None, :]")
    with code.block("if CAUSAL:"):
        code("keep = keep & (cols[None, :] <= rows[:, None])")


ENTRIES = (
    Entry("attention_causal", "causal attention over {shapes}, each in {dtypes}",
          "scaled_dot_product_attention(q, k, v, is_causal=True)", kind="compute",
          big="4x16x2048x64, 1x8x1000x80", small="1x2x40x16, 2x1x33x24"),
)
