"""The layout family: ops that move data without arithmetic on it. permute and transpose of a
pointwise body (x.transpose(1, 2), relu(x).permute(0, 2, 1), x.T where it is not a matmul operand),
and concatenation along a dim (torch.cat, torch.stack as a cat of unsqueezed tensors).

permute: one program per BLOCK_A x BLOCK_L tile of two output dims, the output's last (L) and the
one the input steps through contiguously (A; where that is L itself, the output's dim before it).
The tile loads along the input's contiguous dim and stores along the output's, so both are whole
lines of memory, and Triton moves the tile between the two layouts through shared memory. The
other dims are the grid's batch, each split into its index by scalar math once per program.
Neighbouring dims a permutation keeps together are merged first, and unit dims dropped, so a
batched transpose of the last two dims of [B, H, S, D] is one batch dim and one tile.

cat: one launch; program (i, k) copies the i-th BLOCK of its input k's elements, read as rows of
[outer, inner_k] (outer: the dims before the cat dim; inner_k: the rest) into the output's rows at
column offset sum(inner_j for j < k).

Owns its IR rule (the functions, their dims as torch reads them), the output shape, the torch call
and the kernels with their config spaces and default rules.
"""
from __future__ import annotations

import ast
import math
import re

from bot.codegen.code import Code, jit_source, launch
from bot.codegen.kernel_file import KernelFile, _expanded
from bot.ops import pointwise, view
from bot.ops.entry import Entry
from bot.ops.node import MOVERS, Call, IRError, Node, arguments, broadcast_shapes, call, input_names, is_int_literal, \
    number, prints
from bot.ops.text import COUNT_WORDS, FLAGS as _F, blank as _blank, blank_span

NAME = "layout"
PERMUTE, CAT = "permute", "cat"
OPS = {PERMUTE, CAT}
MOVERS.add(PERMUTE)
ROOT = True
MAX_RANK = 5
MAX_NUMEL = 2**34                   # the kernels index with int64 where a tensor needs it
SUPPORTED = ("", "permute/transpose of a tensor (x.permute(0, 2, 1), x.transpose(1, 2), x.T), torch.cat and "
             "torch.stack along a dim")
ALIASES = {"concat": CAT, "concatenate": CAT, "swapaxes": "transpose", "swapdims": "transpose", "moveaxis": "movedim"}
KEYWORDS = {PERMUTE: {"dims"}, CAT: {"tensors", "dim", "axis"}, "stack": {"tensors", "dim", "axis"},
            "movedim": {"source", "destination"}}
OUTPUT_DTYPES: dict[str, str] = {}
WORDS: list = []

# permute: tile (BLOCK_A x BLOCK_L) and warps. Square tiles for a transpose; flat, wide ones where
# the last dim stays the input's contiguous one (rows copied whole, BLOCK_A rows a program).
PERMUTE_CONFIGS = [{"BLOCK_A": a, "BLOCK_L": l, "num_warps": w}
                   for a, l, w in [(64, 64, 4), (32, 32, 4), (64, 128, 8), (128, 64, 8), (1, 1024, 4),
                                   (4, 512, 4), (16, 128, 4), (2, 2048, 8)]]
# cat: elements a program and warps.
CAT_CONFIGS = [{"BLOCK": b, "num_warps": w} for b, w in [(1024, 4), (2048, 8), (4096, 8), (512, 4)]]


# ---------------------------------------------------------------- words

# "transpose x", "transpose dims 1 and 2", "permute to (0, 2, 1)", "concatenate x and y along dim 1",
# "stack a, b and c", "转置", "拼接"
TRANSPOSE_WORD = re.compile(r"\btranspos(?:e|ed|ing)\b|转置", _F)
PERMUTE_WORD = re.compile(r"\bpermut(?:e|ed|ation)\b|维度(?:置换|重排)|置换维度", _F)
CAT_WORD = re.compile(r"\bconcat(?:enat(?:e|ed|es|ing|ion))?\b|拼接", _F)
STACK_WORD = re.compile(r"\bstack(?:ed|s|ing)?\b|堆叠", _F)
LAYOUT_WORD = re.compile("|".join(p.pattern for p in (TRANSPOSE_WORD, PERMUTE_WORD, CAT_WORD, STACK_WORD)), _F)
_PAIR = re.compile(r"\b(?:dims?|axes|axis|dimensions?)\s*(-?\d)\s*(?:and|,|&|with)\s*(-?\d)\b|"
                   r"第\s*(-?\d)\s*维?\s*(?:和|与)\s*第\s*(-?\d)\s*维", _F)
_LAST_TWO = re.compile(r"\b(?:the\s+)?last\s+two\s+dim(?:ension)?s\b|最后两维", _F)
_ORDER = re.compile(r"\(\s*(\d(?:\s*,\s*\d)+)\s*\)|\[\s*(\d(?:\s*,\s*\d)+)\s*\]|"
                    r"\b(?:to|order|dims)\s+(\d(?:\s*,\s*\d)+)\b", _F)
# "two tensors", "two 1024x512 tensors" (the shape read out before: a ';' and spaces), "两个张量"
_COUNT = re.compile(r"\b(two|three|four|2|3|4)\s+[;\s]*(?:tensors|inputs|arrays|matrices)\b|([两三四])个(?:张量|输入)", _F)


def layout_words(text: str, shapes: list[tuple[str | None, list[int]]], names: list[str],
                 dims: list[int]) -> tuple[str, str, list[str]]:
    """(expression, text without the words read, notes) for a transpose, permute, cat or stack in
    words. names: the single-letter inputs the words name; dims: the dims they name ('along dim 1')."""
    found = [(m.start(), p) for p in (TRANSPOSE_WORD, PERMUTE_WORD, CAT_WORD, STACK_WORD) if (m := p.search(text))]
    word = min(found, key=lambda f: f[0])[1]
    text = LAYOUT_WORD.sub(_blank, text)
    if word in (CAT_WORD, STACK_WORD):
        return _joined(word is STACK_WORD, text, names, dims)
    if len(set(names)) > 1:
        raise IRError(f"a {'transpose' if word is TRANSPOSE_WORD else 'permute'} moves one tensor, but the words name "
                      f"{', '.join(dict.fromkeys(names))}; write it as code, e.g. 'x.transpose(1, 2) + y'")
    x = names[0] if names else "x"
    if word is PERMUTE_WORD:
        return _permuted(x, text, shapes)
    return _transposed(x, text, shapes, dims)


def is_order(shape: list[int]) -> bool:
    """Whether a shape the reader took is a permute's order, (0, 2, 1): no size is 0."""
    return sorted(shape) == list(range(len(shape)))


def _permuted(x: str, text: str, shapes: list[tuple[str | None, list[int]]]) -> tuple[str, str, list[str]]:
    """x.permute(order) of the order the words give: 'to 2,0,1', or a tuple the shape reader took."""
    orders = [s for _, s in shapes if is_order(s)]
    if m := _ORDER.search(text):
        orders.append([int(d) for d in re.findall(r"\d", next(g for g in m.groups() if g))])
        text = blank_span(text, m)
    if len(orders) != 1:
        raise IRError("permute needs the new order of the dims, once: say e.g. 'permute x to (0, 2, 1)'")
    return f"{x}.permute({', '.join(map(str, orders[0]))})", text, []


def _transposed(x: str, text: str, shapes: list[tuple[str | None, list[int]]], dims: list[int]) -> tuple[str, str, list[str]]:
    """x.transpose(a, b) of the dims the words name, else a matrix's x.T or the last two dims."""
    if m := _PAIR.search(text):
        a, b = (g for g in m.groups() if g is not None)
        return f"{x}.transpose({a}, {b})", blank_span(text, m), []
    if len(dims) == 2:
        return f"{x}.transpose({dims[0]}, {dims[1]})", text, []
    if dims:
        raise IRError(f"transpose swaps two dims; the words name only dim {dims[0]}: say e.g. 'transpose dims 1 and 2'")
    ranks = {len(s) for _, s in shapes}
    if m := _LAST_TWO.search(text):
        return f"{x}.transpose(-2, -1)", blank_span(text, m), []
    if ranks - {2}:
        return f"{x}.transpose(-2, -1)", text, ["transpose: swapping the last two dims (say e.g. 'transpose dims 0 "
                                                 "and 1' for others)"]
    return f"{x}.T", text, []


def _joined(stack: bool, text: str, names: list[str], dims: list[int]) -> tuple[str, str, list[str]]:
    """torch.cat / torch.stack of the inputs the words name (or of as many as they count), along the
    dim they name, else dim 0 as torch's default."""
    fn, notes = "stack" if stack else "cat", []
    parts = list(dict.fromkeys(names))
    if len(parts) < 2:
        m = _COUNT.search(text)
        said = (m.group(1) or m.group(2)) if m else "2"
        count = COUNT_WORDS[said] if said in COUNT_WORDS else int(said)
        if m:
            text = blank_span(text, m)
        parts = ["a", "b", "c", "d"][:count]
        notes.append(f"{fn}: {count} tensors, {', '.join(parts)}")
    if len(dims) > 1:
        raise IRError(f"torch.{fn} joins along one dim; the words name dims {', '.join(map(str, dims))}: which one?")
    if not dims:
        notes.append(f"{fn}: along dim 0, torch.{fn}'s default (say e.g. 'along dim 1' for another)")
    return f"torch.{fn}([{', '.join(parts)}], dim={dims[0] if dims else 0})", text, notes


# ---------------------------------------------------------------- IR rule

def convert(c: Call) -> Node | None:
    if c.fname == PERMUTE:
        return _permute(c)
    if c.fname == "movedim":
        return _movedim(c)
    if c.fname in (CAT, "stack"):
        return _cat(c)
    return None


def swapped(x: Node, d0: int, d1: int) -> Node:
    """x.transpose(d0, d1): a permutation of any rank that swaps two dims."""
    return call(PERMUTE, x, swap=(d0, d1))


def reordered(x: Node, dims: tuple[int, ...]) -> Node:
    """x.permute(*dims): the output's dim k is x's dim dims[k]."""
    if sorted(d % len(dims) for d in dims) != list(range(len(dims))) or not all(-len(dims) <= d < len(dims)
                                                                                   for d in dims):
        raise IRError(f"permute dims {tuple(dims)} are not a permutation of 0..{len(dims) - 1}")
    return call(PERMUTE, x, dims=tuple(d % len(dims) for d in dims))


def _ints(c: Call, values: list[ast.expr], what: str) -> tuple[int, ...]:
    if len(values) == 1 and isinstance(values[0], (ast.Tuple, ast.List)):
        values = list(values[0].elts)
    if not values or not all(is_int_literal(v) for v in values):
        raise IRError(f"{c.fname} takes {what} as integers, e.g. x.{c.fname}(0, 2, 1); got "
                      f"{', '.join(ast.unparse(v) for v in values) or 'nothing'}")
    return tuple(int(number(v)) for v in values)


def _permute(c: Call) -> Node:
    if not c.args:
        raise IRError("permute needs a tensor and its new order of dims, e.g. x.permute(0, 2, 1)")
    x = c.expr(c.args[0])
    given = c.args[1:] + ([c.kw.pop("dims")] if "dims" in c.kw else [])
    return reordered(x, _ints(c, given, "the new order of dims"))


def _movedim(c: Call) -> Node:
    given = arguments(c, ("input", "source", "destination"))
    if len(given) != 3 or not all(is_int_literal(given[k]) for k in ("source", "destination")):
        raise IRError("movedim is read with one integer source and destination dim, e.g. torch.movedim(x, 1, -1)")
    return call(PERMUTE, c.expr(given["input"]), move=(int(number(given["source"])),
                                                       int(number(given["destination"]))))


def _cat(c: Call) -> Node:
    given = arguments(c, ("tensors", "dim"))
    if "axis" in given:
        given["dim"] = given.pop("axis")
    tensors, dim = given.get("tensors"), given.get("dim", ast.Constant(0))
    if not isinstance(tensors, (ast.List, ast.Tuple)) or not tensors.elts:
        raise IRError(f"{c.fname} takes a list of tensors written out, e.g. torch.{c.fname}([a, b], dim=1)")
    if not is_int_literal(dim):
        raise IRError(f"{c.fname} takes an integer dim, e.g. torch.{c.fname}([a, b], dim=1); got {ast.unparse(dim)!r}")
    d = int(number(dim))
    parts = [c.expr(t) for t in tensors.elts]
    if any(p.op == "const" for p in parts):
        raise IRError(f"{c.fname} of a number: each part must be a tensor")
    if c.fname == "stack":          # a new dim: each part unsqueezed there, then joined along it
        parts = [call(view.UNSQUEEZE, p, dim=d) for p in parts]
    return call(CAT, *parts, dim=d)


def permutation(node: Node, rank: int) -> list[int]:
    """The permute node's order of dims for a body of this rank: output dim k is the body's dim [k]."""
    try:
        return _order(rank, *_form(node))
    except ValueError as e:
        raise IRError(str(e)) from None


def _form(node: Node) -> tuple:
    """(dims, swap, move): the permute as written, one of them given."""
    return node.attr("dims"), node.attr("swap"), node.attr("move")


def check(node: Node) -> None:
    """A permute is over a pointwise body (the root rule); a cat joins inputs or earlier stages' outputs."""
    if node.op == CAT and any(a.op != "input" for a in node.args):
        raise IRError("cat joins tensors: each part is an input or a kernel's output")


def output_shape(node: Node, shapes: dict[str, list[int]]) -> list[int]:
    if node.op == PERMUTE:
        full = broadcast_shapes([shapes[n] for n in input_names(node.args[0])])
        return [full[d] for d in permutation(node, len(full))]
    parts = [list(shapes[a.name]) for a in node.args]
    rank = len(parts[0])
    d = node.attr("dim")
    if not -rank <= d < rank or rank == 0:
        raise IRError(f"cat along dim {d}, but its parts have {rank} dims")
    d %= rank
    for p in parts[1:]:
        if len(p) != rank or p[:d] + p[d + 1:] != parts[0][:d] + parts[0][d + 1:]:
            raise IRError(f"cat along dim {d}: parts of shapes {parts} differ in another dim")
    return parts[0][:d] + [sum(p[d] for p in parts)] + parts[0][d + 1:]


def torch_text(node: Node, a: list[str]) -> str:
    """The op in PyTorch over its operands' texts; a permute made contiguous (the copy its kernel makes)."""
    if node.op == CAT:
        return f"torch.cat([{', '.join(a)}], dim={node.attr('dim')})"
    if node.attr("dims") is not None:
        return f"torch.permute({a[0]}, {node.attr('dims')}).contiguous()"
    fn = "transpose" if node.attr("swap") else "movedim"
    pair = node.attr("swap") or node.attr("move")
    return f"torch.{fn}({a[0]}, {pair[0]}, {pair[1]}).contiguous()"


TORCH_OPS = {op: torch_text for op in OPS}


@prints(*OPS)
def _text(node: Node, text) -> str:
    if node.op == CAT:
        return f"cat([{', '.join(text(a) for a in node.args)}], dim={node.attr('dim')})"
    x = text(node.args[0])
    if node.attr("dims") is not None:
        return f"permute({x}, {node.attr('dims')})"
    pair = node.attr("swap") or node.attr("move")
    return f"{'transpose' if node.attr('swap') else 'movedim'}({x}, {pair[0]}, {pair[1]})"


def over_text(node: Node) -> str:
    return ""


def reference_property(node: Node) -> tuple[str, bool]:
    return "", False


# ---------------------------------------------------------------- launcher helpers (copied into kernel.py)

def _order(rank, dims, swap, move):
    # The permutation for a tensor of this rank (output dim k is input dim order[k]): dims as
    # given, or the identity with two dims swapped (transpose) or one moved (movedim).
    if dims is not None:
        if len(dims) != rank:
            raise ValueError(f"permute{tuple(dims)} names {len(dims)} dims, but the tensor has {rank}")
        return list(dims)
    pair = swap or move
    if not (-max(rank, 1) <= pair[0] < max(rank, 1) and -max(rank, 1) <= pair[1] < max(rank, 1)):
        raise ValueError(f"{'transpose' if swap else 'movedim'} of dims {tuple(pair)}, but the tensor has {rank}")
    a, b = pair[0] % max(rank, 1), pair[1] % max(rank, 1)
    order = list(range(rank))
    if swap:
        order[a], order[b] = order[b], order[a]
    else:
        order.insert(b, order.pop(a))
    return order


def _permute_layout(shape, perm, batch_dims):
    # The permuted copy as tiles: (sizes, source strides, output strides), each with batch_dims
    # batch entries, then the tile's A and L dims. Unit dims are dropped and output neighbours the
    # source also holds side by side merged; L is the output's last dim, A the dim the source
    # steps through contiguously (or, where that is L, the output's dim before it).
    out_shape = [shape[p] for p in perm]
    src_of = [math.prod(shape[p + 1:]) for p in perm]
    dims = []
    for size, src in zip(out_shape, src_of):
        if size == 1:
            continue
        if dims and dims[-1][1] == src * size:
            dims[-1] = [dims[-1][0] * size, src]
        else:
            dims.append([size, src])
    dims = [[1, 0]] * (2 - len(dims)) + dims
    dst, step = [], 1
    for size, _ in reversed(dims):
        dst.insert(0, step)
        step *= size
    a = len(dims) - 2
    for k in range(len(dims) - 1):
        if dims[k][1] == 1:
            a = k
    order = [k for k in range(len(dims) - 1) if k != a] + [a, len(dims) - 1]
    if len(order) - 2 > batch_dims:
        raise ValueError(f"permuting {list(shape)} by {list(perm)} leaves {len(order) - 2} batch dims; this kernel "
                         f"was generated for at most {batch_dims}: regenerate it for these shapes")
    pad = [(1, 0, 0)] * (batch_dims + 2 - len(order))
    rows = pad + [(dims[k][0], dims[k][1], dst[k]) for k in order]
    return [r[0] for r in rows], [r[1] for r in rows], [r[2] for r in rows]


def _permute_config(n_a, n_l, transposed):
    # A transpose takes 64x128 tiles in 8 warps (within 2% of the space's best at 8192x8192 and 6%
    # at 7919x6007, where 64x64 tiles lost 21%); a copy of whole rows takes 1024 elements a program,
    # as many rows as fit.
    if transposed:
        return {"BLOCK_A": 64, "BLOCK_L": 128, "num_warps": 8}
    if n_l >= 1024:
        return {"BLOCK_A": 1, "BLOCK_L": 1024, "num_warps": 4}
    return {"BLOCK_A": 4, "BLOCK_L": 512, "num_warps": 4} if n_l > 128 else {"BLOCK_A": 16, "BLOCK_L": 128,
                                                                            "num_warps": 4}


def _cat_shape(shapes, dim):
    # The joined shape and the dim (from 0): the parts agree in every dim but dim.
    rank = len(shapes[0])
    if not -rank <= dim < rank:
        raise ValueError(f"cat along dim {dim} of {rank}-d tensors")
    dim %= rank
    rest = [list(s[:dim]) + list(s[dim + 1:]) for s in shapes]
    if any(len(s) != rank or r != rest[0] for s, r in zip(shapes, rest)):
        raise ValueError(f"cat along dim {dim}: parts of shapes {[list(s) for s in shapes]} differ in another dim")
    joined = 0
    for s in shapes:
        joined += s[dim]
    return [*shapes[0][:dim], joined, *shapes[0][dim + 1:]], dim


def _cat_config(n):
    # 1024 elements a program; 4096 in 8 warps once the parts are large.
    return {"BLOCK": 4096, "num_warps": 8} if n >= 1 << 22 else {"BLOCK": 1024, "num_warps": 4}


# ---------------------------------------------------------------- kernel.py

def kernel_source(spec: dict, node: Node, options: dict | None = None) -> str:
    """kernel.py of a permute over a pointwise body, or of a cat of its inputs."""
    return (_PermuteKernel if node.op == PERMUTE else _CatKernel).render(spec, node, options)


class _PermuteKernel(KernelFile):
    block_key = "BLOCK_L"
    description = ("One program copies a BLOCK_A x BLOCK_L tile of the output's last dim (L) and the dim the\n"
                   "input steps through contiguously (A), loading along the input's lines and storing along the\n"
                   "output's; the other dims are the grid's batch. The body is applied to each value loaded.")

    def __init__(self, spec, node, inputs, options):
        body_names = input_names(node.args[0])
        body_inputs = [i for i in inputs if i.name in body_names]
        super().__init__(spec, pointwise.triton_body(node.args[0], body_inputs), inputs, body_inputs, options)
        ranks = [len(broadcast_shapes([i.shapes[c] for i in body_inputs])) for c in range(len(body_inputs[0].shapes))]
        self.form = _form(node)
        self.batch = max(0, max(ranks) - 2)

    def configs(self) -> list[dict]:
        return self._space(PERMUTE_CONFIGS)

    def source(self) -> str:
        return self._file([self._kernel()], [_order, _permute_layout, _permute_config, _expanded], self._launcher())

    def _kernel(self) -> str:
        b = self.batch
        params = [*(f"{i.local}_ptr" for i in self.body_inputs), "out_ptr", *(f"n{k}" for k in range(b)), "n_a",
                  "n_l", *(f"src{k}" for k in range(b)), "src_a", "src_l", *(f"dst{k}" for k in range(b)), "dst_a",
                  "TRANSPOSED: tl.constexpr", "INT64: tl.constexpr", "BLOCK_A: tl.constexpr", "BLOCK_L: tl.constexpr"]
        code = Code()("tiles_l = tl.cdiv(n_l, BLOCK_L)",
                      "tiles_a = tl.cdiv(n_a, BLOCK_A)",
                      "pid = tl.program_id(0)",
                      "t_l = pid % tiles_l",
                      "t_a = (pid // tiles_l) % tiles_a",
                      "rest = pid // (tiles_l * tiles_a)",
                      "# the batch index, split into its dims (int64: batch offsets may pass 2**31)",
                      "src = tl.zeros([], tl.int64)",
                      "dst = tl.zeros([], tl.int64)")
        for k in reversed(range(b)):
            code(f"i = rest % n{k}" if k else "i = rest", *([f"rest = rest // n{k}"] if k else []),
                 f"src += i.to(tl.int64) * src{k}", f"dst += i.to(tl.int64) * dst{k}")
        code("offs_a = t_a * BLOCK_A + tl.arange(0, BLOCK_A)",
             "offs_l = t_l * BLOCK_L + tl.arange(0, BLOCK_L)")
        with code.block("if INT64:"):
            code("offs_a = offs_a.to(tl.int64)", "offs_l = offs_l.to(tl.int64)")
        code("mask = (offs_a[:, None] < n_a) & (offs_l[None, :] < n_l)",
             "# the source's contiguous dim written with stride 1, so its loads vectorize")
        with code.block("if TRANSPOSED:"):
            code("src_offs = src + offs_a[:, None] + offs_l[None, :] * src_l")
        with code.block("else:"):
            code("src_offs = src + offs_a[:, None] * src_a + offs_l[None, :]")
        code.extend(f"{i.local} = tl.load({i.local}_ptr + src_offs, mask=mask).to(tl.float32)"
                    for i in self.body_inputs)
        code("tl.store(out_ptr + dst + offs_a[:, None] * dst_a + offs_l[None, :], "
             f"{self.body_call()}.to(out_ptr.dtype.element_ty), mask=mask)")
        return jit_source(f"{self.name}_kernel", params, code.lines)

    def _launcher(self) -> str:
        body = [i.local for i in self.body_inputs]
        text = self._signature_and_prologue()
        text += f"    shape = list(_broadcast_shape({', '.join(f'{x}.shape' for x in body)}))\n"
        text += "".join(f"    {x} = _expanded({x}, shape)\n" for x in body)
        dims, swap, move = self.form
        text += (f"    order = _order(len(shape), {dims}, {swap}, {move})\n"
                 f"    out = torch.empty([shape[d] for d in order], dtype={self.out_dtype(body[0])}, "
                 f"device={body[0]}.device)\n"
                 "    if out.numel() == 0:\n        return out\n"
                 f"    sizes, src, dst = _permute_layout(shape, order, {self.batch})\n"
                 "    transposed = src[-1] != 1\n")
        text += self._config_line("_permute_config(sizes[-2], sizes[-1], transposed)")
        text += ('    BLOCK_A, BLOCK_L = config["BLOCK_A"], config["BLOCK_L"]\n'
                 "    grid = (_cdiv(sizes[-2], BLOCK_A) * _cdiv(sizes[-1], BLOCK_L) * "
                 "math.prod(sizes[:-2]),)\n")
        args = [*body, "out", "*sizes", "*src", "*dst[:-1]", "TRANSPOSED=transposed", "INT64=out.numel() >= 2**31",
                "BLOCK_A=BLOCK_A", "BLOCK_L=BLOCK_L", 'num_warps=config["num_warps"]']
        text += launch(f"{self.name}_kernel", "grid", args, "    ") + "\n"
        return text + "    return out\n"


class _CatKernel(KernelFile):
    block_key = "BLOCK"
    description = ("One launch: program (i, k) copies the i-th BLOCK of part k's elements, read as rows of\n"
                   "[outer, inner_k], into the output's rows at part k's column offset.")

    def __init__(self, spec, node, inputs, options):
        self.parts = [next(i for i in inputs if i.name == a.name) for a in node.args]
        super().__init__(spec, pointwise.triton_body(node.args[0], self.parts[:1]), inputs, [], options)
        self.dim = node.attr("dim")

    def configs(self) -> list[dict]:
        return self._space(CAT_CONFIGS)

    def source(self) -> str:
        return self._file([self._copy(), self._kernel()], [_cat_shape, _cat_config], self._launcher())

    def _copy(self) -> str:
        lines = ["start = tl.program_id(0).to(tl.int64) * BLOCK",
                 "if start < n:",
                 "    offs = start + tl.arange(0, BLOCK)",
                 "    mask = offs < n",
                 "    if INT32:",
                 "        # int32 index math where the output allows: int64 division is much slower",
                 "        offs = offs.to(tl.int32)",
                 "    x = tl.load(src_ptr + offs, mask=mask)",
                 "    dst = (offs // inner) * total + offset + offs % inner",
                 "    tl.store(out_ptr + dst, x.to(out_ptr.dtype.element_ty), mask=mask)"]
        return jit_source("_copy_part", ["src_ptr", "out_ptr", "n", "inner", "total", "offset", "INT32: tl.constexpr",
                                         "BLOCK: tl.constexpr"], lines,
                          "    # BLOCK of one part's n elements into its columns of the output's rows\n")

    def _kernel(self) -> str:
        k_all = range(len(self.parts))
        # a pointer per part, named by its place: a tensor may be several parts (cat([x, x]))
        params = [*(f"part{k}_ptr" for k in k_all), "out_ptr", *(f"n{k}" for k in k_all),
                  *(f"inner{k}" for k in k_all), "total", "INT32: tl.constexpr", "BLOCK: tl.constexpr"]
        code = Code()("part = tl.program_id(1)")
        offset = "0"
        for k in k_all:
            with code.block(f"if part == {k}:"):
                code(f"_copy_part(part{k}_ptr, out_ptr, n{k}, inner{k}, total, {offset}, INT32, BLOCK)")
            offset = f"inner{k}" if offset == "0" else f"{offset} + inner{k}"
        return jit_source(f"{self.name}_kernel", params, code.lines)

    def _launcher(self) -> str:
        parts = [p.local for p in self.parts]
        first = parts[0]
        text = self._signature_and_prologue()
        text += (f"    parts = [{', '.join(parts)}]\n"
                 f"    shape, dim = _cat_shape([p.shape for p in parts], {self.dim})\n"
                 f"    out = torch.empty(shape, dtype={self.out_dtype(first)}, device={first}.device)\n"
                 "    if out.numel() == 0:\n        return out\n"
                 "    outer = math.prod(shape[:dim])\n"
                 "    inner = [p.numel() // outer for p in parts]\n")
        text += self._config_line("_cat_config(out.numel())")
        text += "    grid = (_cdiv(max(inner) * outer, config[\"BLOCK\"]), len(parts))\n"
        args = [*parts, "out", "*(outer * i for i in inner)", "*inner", "out.numel() // outer", "INT32=out.numel() < 2**31",
                'BLOCK=config["BLOCK"]', 'num_warps=config["num_warps"]']
        text += launch(f"{self.name}_kernel", "grid", args, "    ") + "\n"
        return text + "    return out\n"


ENTRIES = (
    Entry("transpose", "transpose the last two dims of x on {shapes}, each in {dtypes}", "transpose(x, -2, -1)"),
    Entry("cat", "concatenate x and y along the last dim on {shapes}, each in {dtypes}", "cat([x, y], dim=-1)"),
)
