"""Operator IR: a small expression language for the offline generator.

A spec names its operator as an expression string, e.g. ``relu(x + y)``,
``softmax(x * 0.5)``, ``rmsnorm(x, weight, eps=1e-6)``. This module parses that
string (with Python's ``ast``, allowing only the node types below) into a tree of
:class:`Node`, checks it, and infers shapes. What each function means, how it is
checked and how its shape follows is its operator family's (bot.ops, walked through
bot.ops.registry); this module is the driver. Lowerings read the tree; people read
and edit the string.
"""
from __future__ import annotations

import ast
import functools

from bot.ops import (argreduce, attention, chain, channel_norm, conv, fill, fused, layout, loss, matmul,
                     norm, pointwise, reduce, registry, scan, softmax, view)
from bot.ops.node import (ALL, CONSTANTS, Call, IRError, Node, broadcast_shapes, call, const, inp, input_names,
                          is_float_call, is_int_literal, number, to_text)
from runner import protocol

__all__ = ["IRError", "Node", "broadcast_shapes", "call", "const", "inp", "input_names", "is_int_literal", "to_text"]

# The families' vocabularies, for the modules that ask which family an op belongs to.
UNARY, BINARY, COMPARE, POINTWISE = pointwise.UNARY, pointwise.BINARY, pointwise.COMPARE, pointwise.OPS
COMPOSITES, POSITIVE_DOMAIN_OPS = pointwise.COMPOSITES, pointwise.POSITIVE_DOMAIN_OPS
REDUCE, ARG_REDUCE, ROW_PRESERVING, NORMS, LOSSES = reduce.OPS, argreduce.OPS, softmax.OPS, norm.OPS, loss.OPS
SCANS = scan.OPS
LOGICAL = set(reduce.LOGICAL)                   # any, all: a bool output
ROW_OPS = REDUCE | ROW_PRESERVING | NORMS       # lowered over whole rows when over the last dim
ROOT_OPS = {op for f in registry.ROOT_FAMILIES for op in f.OPS}     # ops that may only stand at the root
MATMUL = matmul.MATMUL                          # one per expression; the rest is its epilogue
CONV = conv.CONV                                # likewise
DEFAULT_EPS = norm.DEFAULT_EPS
SUPPORTED_TEXT = registry.supported_text()


# ---------------------------------------------------------------- parsing

def parse(text: str, as_written: bool = False) -> Node:
    """Parse an expression string into a checked IR tree. In a spec, a reduction without a dim is
    over the last dim; as_written (code a person typed or pasted) leaves its dim None, as PyTorch
    reads it: over all elements, which the caller must settle or refuse."""
    node = _tree(text, as_written)
    check(node)
    return node


def constant_shape(text: str) -> list[int] | None:
    """The shape of a tensor an expression computes from numbers alone (torch.arange, torch.ones and
    math on them): a constant no kernel computes by itself. None where it reads an input or is a number."""
    node = _tree(text, as_written=True)
    if input_names(node) or node.op == "const":
        return None
    return list(output_shape(node, {}))


def only_views(text: str) -> bool:
    """Whether the expression only views its input (a slice, a reshape): no kernel computes it."""
    return _views_only(_tree(text, as_written=True))


def _views_only(node: Node) -> bool:
    return all(s.node.op in view.OPS for s in stages(node))


def _tree(text: str, as_written: bool) -> Node:
    try:
        tree = ast.parse(text.strip(), mode="eval")
    except SyntaxError as e:
        raise IRError(f"cannot parse expression {text!r}: {e.msg}. Write it like 'relu(x + y)'.") from None
    node = _untransposed(_convert(tree.body))
    if fused.claims(node):          # a reduction inside an expression without a dim is over every element
        node = _settled(node)
    node = fused.collapsed(node)
    if not as_written:
        node = with_dim(node, -1) if node.op in REDUCE | ARG_REDUCE | SCANS and node.attr("dim") is None else node
        if node.op in ROW_PRESERVING and node.attr("dim") != -1:
            raise IRError(f"{node.op} is supported over the last dim (dim=-1) only")
    return node


def _untransposed(node: Node) -> Node:
    """The tree with each transpose that is not a matmul operand (the product takes those as flags)
    a permute: x.T of a matrix, x.mT and x.transpose(d0, d1) of any rank."""
    args = tuple(_untransposed(a) for a in node.args)
    if node.op != matmul.TRANSPOSE:
        return Node(node.op, args, node.name, node.value, node.attrs)
    if node.attr("swap"):
        return layout.swapped(args[0], *node.attr("swap"))
    return layout.reordered(args[0], (1, 0)) if node.attr("form") == "T" else layout.swapped(args[0], -2, -1)


def _settled(node: Node) -> Node:
    """The tree with each reduction below its root that names no dim over every element, as PyTorch reads it."""
    args = tuple(_settled(a) for a in node.args)
    node = Node(node.op, args, node.name, node.value, node.attrs)
    return node if node.op not in fused.REDUCTIONS or node.attr("dim") is not None else with_dim(node, ALL)


def with_dim(node: Node, dim: int | str) -> Node:
    """The root reduction (or scan) over dim: an int, or ALL (every element)."""
    return call(node.op, *node.args, **{**dict(node.attrs), "dim": dim})


_BINOPS = {ast.Add: "add", ast.Sub: "sub", ast.Mult: "mul", ast.Div: "div"}
_LOGICAL = {ast.BitAnd: "and", ast.BitOr: "or", ast.BitXor: "xor"}
_CMPOPS = {ast.Gt: "gt", ast.GtE: "ge", ast.Lt: "lt", ast.LtE: "le", ast.Eq: "eq", ast.NotEq: "ne"}


def _func_name(f: ast.expr) -> str:
    # torch.relu, F.gelu, torch.nn.functional.silu, x.exp -> last attribute name
    if isinstance(f, ast.Name):
        return f.id
    if isinstance(f, ast.Attribute):
        return f.attr
    raise IRError(f"unsupported call target {ast.unparse(f)!r}")


def _convert(n: ast.expr) -> Node:
    if isinstance(n, ast.Name):
        if n.id in CONSTANTS:
            return const(CONSTANTS[n.id])
        return inp(n.id)
    if isinstance(n, ast.Attribute) and isinstance(n.value, ast.Name) and n.value.id in ("math", "torch") \
            and n.attr in CONSTANTS:                  # math.pi, torch.e
        return const(CONSTANTS[n.attr])
    if isinstance(n, ast.Attribute) and n.attr in ("T", "mT"):     # a matmul operand's transpose
        return matmul.transposed(_convert(n.value), n.attr)
    if isinstance(n, ast.Constant):
        if isinstance(n.value, bool) or not isinstance(n.value, (int, float)):
            raise IRError(f"unsupported constant {n.value!r}: only numbers")
        return const(n.value)
    if isinstance(n, ast.UnaryOp):
        if isinstance(n.op, ast.USub):
            inner = _convert(n.operand)
            return const(-inner.value) if inner.op == "const" else call("neg", inner)
        if isinstance(n.op, ast.UAdd):
            return _convert(n.operand)
        if isinstance(n.op, ast.Invert):        # ~mask: logical_not's node
            return pointwise.inverted(_convert(n.operand))
        raise IRError(f"unsupported operator in {ast.unparse(n)!r}")
    if isinstance(n, ast.BinOp):
        if isinstance(n.op, ast.MatMult):
            return matmul.product(_convert(n.left), _convert(n.right), tf32=False)
        if isinstance(n.op, ast.Pow):
            return pointwise.power(n.left, n.right, _convert)
        if type(n.op) in _LOGICAL:             # mask & mask, |, ^
            return pointwise.logical(_LOGICAL[type(n.op)], _convert(n.left), _convert(n.right))
        if isinstance(n.op, (ast.Mod, ast.FloorDiv)):   # torch's % is remainder (the divisor's sign), not fmod
            name = "remainder" if isinstance(n.op, ast.Mod) else "floor_divide"
            return _convert_call(ast.Call(ast.Name(name, ast.Load()), [n.left, n.right], []))
        if type(n.op) not in _BINOPS:
            raise IRError(f"unsupported operator in {ast.unparse(n)!r}; use + - * / // ** %")
        return call(_BINOPS[type(n.op)], _convert(n.left), _convert(n.right))
    if isinstance(n, ast.Compare):
        if len(n.ops) != 1 or type(n.ops[0]) not in _CMPOPS:
            raise IRError(f"unsupported comparison {ast.unparse(n)!r}; compare two values at a time")
        return call(_CMPOPS[type(n.ops[0])], _convert(n.left), _convert(n.comparators[0]))
    if isinstance(n, ast.Call):
        return const(number(n)) if is_float_call(n) else _convert_call(n)
    if isinstance(n, ast.Subscript):
        return view.subscript(n, _convert)
    if isinstance(n, ast.Attribute) and n.attr == "shape":
        raise IRError(_size_read(ast.unparse(n)))
    raise IRError(f"unsupported syntax {ast.unparse(n)!r}. Supported: {SUPPORTED_TEXT}")


def _size_read(text: str) -> str:
    """Why a size read (x.shape[d], x.size(d)) was left unread: it becomes a number only in pasted code
    where every case gives the tensor one size along that dim."""
    return (f"{text!r} reads a tensor's size, which the kernel can take only as a number: in pasted code (a function "
            "or module) where every case gives the tensor the same size along that dim and each tensor's shape is "
            "known (get_inputs, or said by name, e.g. 'x 64x128'); give cases that agree there, or one shape")


def _convert_call(n: ast.Call) -> Node:
    """A call, read by the family that owns the function."""
    written = _func_name(n.func).lower()
    fname = registry.ALIASES.get(written, written)
    args = list(n.args)
    # method style: x.exp() -> exp(x)
    if isinstance(n.func, ast.Attribute) and not _is_module_path(n.func.value):
        args = [n.func.value] + args
    kw = {k.arg: k.value for k in n.keywords if k.arg}
    if not args and "input" in kw:      # torch.softmax(input=x, dim=-1): torch's first tensor, by its name
        args = [kw.pop("input")]
    _check_keywords(fname, n, kw)
    if fname == chain.OUTPUTS:
        return _several(args)
    family = registry.owner(fname)
    node = family and family.convert(Call(fname, written if isinstance(n.func, ast.Name) else "", args, kw, _convert))
    if node is None and fname == "size" and isinstance(n.func, ast.Attribute):
        raise IRError(_size_read(ast.unparse(n)))
    if node is None:
        raise IRError(f"unsupported function {fname!r}. Supported: {SUPPORTED_TEXT}")
    return node


def _several(args: list[ast.expr]) -> Node:
    """outputs(a, b, ...): a function's several results, at the root only (ir.check)."""
    if len(args) < 2:
        raise IRError("outputs(...) takes two or more results, e.g. outputs(x * 2.0, x + y)")
    return call(chain.OUTPUTS, *(_convert(a) for a in args))


def _check_keywords(fname: str, n: ast.Call, kw: dict) -> None:
    """Each function is read with its family's keywords; any other (alpha=, dtype=, out=,
    rounding_mode=, ...) may change the result, so it is refused rather than dropped.
    inplace=False alone is accepted anywhere."""
    if any(k.arg is None for k in n.keywords):
        raise IRError(f"{fname}(**...) is not supported: spell out its arguments")
    if "inplace" in kw and isinstance(kw["inplace"], ast.Constant) and kw["inplace"].value is False:
        del kw["inplace"]
    extra = sorted(set(kw) - registry.KEYWORDS.get(fname, set()))
    if extra and fname not in registry.FUNCTIONS:
        raise IRError(f"unsupported function {fname!r}. Supported: {SUPPORTED_TEXT}")
    if extra:
        raise IRError(f"{fname} with {', '.join(f'{k}={ast.unparse(kw[k])}' for k in extra)} is not supported by the "
                      f"offline generator (it would change what {fname} computes)")


def _is_module_path(v: ast.expr) -> bool:
    names = {"torch", "F", "nn", "functional", "tl", "math", "np", "special", "linalg"}
    if isinstance(v, ast.Name):
        return v.id in names
    return isinstance(v, ast.Attribute) and v.attr in names


# ---------------------------------------------------------------- checks and queries

def check(node: Node) -> None:
    """The tree is one family's kernel (check_single), or a chain of them (bot.ops.chain): raises
    IRError naming what no split avoids. An op with an output dtype of its own (argmax, any) is the
    outermost but for views: PyTorch's math around it would change the output's dtype."""
    if not input_names(node):           # constants alone (torch.ones(4) * 2): nothing for a kernel to read
        raise IRError("the expression has no inputs; name at least one tensor, e.g. relu(x)")
    results = node.args if node.op == chain.OUTPUTS else (node,)
    for result in results:
        _check_result(result)
    if all(_views_only(r) or (r.op == "input" and node.op == chain.OUTPUTS) for r in results):
        what = "returns its inputs or views of them" if len(results) > 1 else "only views its input"
        raise IRError(f"{to_text(node)} {what}: there is no computation to write a kernel for")


def _check_result(node: Node) -> None:
    """One result's rules: no number alone, outputs(...) only at the root, an op with a dtype of its own
    outermost."""
    if node.op == "const" or not input_names(node):
        raise IRError(f"a result is {to_text(node)}, which reads no input: return tensors the inputs give")
    if nested := next((sub for sub in node.walk() if sub.op == chain.OUTPUTS), None):
        raise IRError(f"{to_text(nested)}: several results are the function's return value, not an operand")
    top = node
    while top.op in view.OPS:
        top = top.args[0]
    if inner := next((sub for a in top.args for sub in a.walk() if registry.output_dtype(sub)), None):
        raise IRError(f"{to_text(inner)} gives {registry.output_dtype(inner)} values, which PyTorch's math around it "
                      "turns into another dtype than the inputs' (or refuses); it must be the outermost operation")


@functools.lru_cache(maxsize=512)         # bounded: a long-running bot parses new trees all day
def stages(node: Node) -> tuple[chain.Stage, ...]:
    """The tree's stages: one where one family lowers it whole, else the fewest chain.plan finds."""
    if node.op in fill.OPS:         # a constant alone: no stage computes it (check refuses it as a whole)
        return (chain.Stage("", node),)
    try:
        if node.op not in view.OPS or node.args[0].op != "input":     # a view of an input: a stage of a chain
            check_single(node)
        return (chain.Stage("", node),)
    except IRError:
        return tuple(chain.plan(node, check_single))


def is_chain(node: Node) -> bool:
    return len(stages(node)) > 1


def check_single(node: Node) -> None:
    """Root ops (reductions, row ops, losses) may only stand at the root, over a pointwise body,
    and their family checks their operands; a matmul has plain-input operands, and everything
    around it is its epilogue (the matmul family checks it)."""
    if fused.claims(node):
        fused.check(node)
        if not input_names(node):
            raise IRError("the expression has no inputs; name at least one tensor, e.g. relu(x)")
        return
    root = registry.root_family(node.op)
    body = node.args[0] if root else node
    for sub in body.walk():
        if sub.op == matmul.DIAG:
            raise IRError(matmul.DIAG_ALONE)
        if sub.op in ROOT_OPS:
            raise IRError(f"{sub.op} must be the outermost operation (e.g. softmax(x * 2) is fine, softmax(x) * 2 is not)")
        if sub.op not in POINTWISE | {"input", "const", MATMUL, CONV}:
            raise IRError(f"unsupported op {sub.op!r}. Supported: {SUPPORTED_TEXT}")
    if root:
        root.check(node)
    if matmul.matmul_node(node) and conv.conv_node(node):
        raise IRError("one matmul or convolution per kernel; chain them as separate operators")
    matmul.check(node)
    conv.check(node)
    if not input_names(node):
        raise IRError("the expression has no inputs; name at least one tensor, e.g. relu(x)")


def kind(node: Node) -> str:
    """'pointwise', 'matmul' (with its epilogue), 'reduce', 'argreduce', 'softmax'
    (softmax/log_softmax), 'norm', 'loss', ...: the name of the family that lowers the tree, or
    'chain' where it takes several kernels."""
    return chain.NAME if is_chain(node) else registry.family(node).NAME


def kernel_source(spec: dict, node: Node, options: dict) -> str:
    """kernel.py: the family's file, or a chain's stages in one file."""
    whole = [i["name"] for i in spec["inputs"] if i.get("domain") == "whole"]
    if whole:
        return _whole_cast(spec, node, options, whole)
    node = settled(node, {i["name"]: i["shapes"][0] for i in spec["inputs"]})
    if not is_chain(node):
        return registry.kernel_source(spec, node, options)
    return chain.kernel_source(spec, list(stages(node)), lambda s, n: registry.kernel_source(s, n, {}), output_shape)


def _whole_cast(spec: dict, node: Node, options: dict, whole: list[str]) -> str:
    """kernel.py for a spec with int64 inputs read as numbers: the kernels of the spec with those inputs
    in the float inputs' dtypes, behind an entry that casts them so, as PyTorch's type promotion reads an
    int tensor beside a float one (a kernel would otherwise take its output dtype from an int input)."""
    anchor = protocol.float_inputs(spec)[0]
    inner = {**spec, "name": f"{spec['name']}_on_floats", "inputs": [
        {k: v for k, v in i.items() if k != "range"} | {"dtypes": anchor["dtypes"], "domain": "normal"}
        if i["name"] in whole else i for i in spec["inputs"]]}
    names = [i["name"] for i in spec["inputs"]]
    source = kernel_source(inner, node, options)
    entry = next(f for f in ast.parse(source).body if isinstance(f, ast.FunctionDef) and f.name == inner["name"])
    tuned = [a.arg for a in entry.args.kwonlyargs] == ["config"]        # a chain's entry takes no config
    cast = [f"{n}.to({anchor['name']}.dtype)" if n in whole else n for n in names] + ["config=config"] * tuned
    return (source.rstrip("\n") + "\n\n\n"
            f"def {spec['name']}({', '.join(names + ['*', 'config=None'] * tuned)}):\n"
            f"    # {', '.join(whole)}: whole numbers (int64), read in {anchor['name']}'s dtype as PyTorch promotes them\n"
            f"    return {inner['name']}({', '.join(cast)})\n")


def stage_cases(node: Node, cases: list[dict[str, list[int]]]) -> list[dict[str, list[int]]]:
    """Each case's shapes with every stage output's beside the inputs'."""
    return [chain.stage_shapes(list(stages(node)), c, output_shape) for c in cases]


def matmul_node(node: Node) -> Node | None:
    return matmul.matmul_node(node)


def index_inputs(node: Node) -> dict[str, dict]:
    """Integer inputs: index input name -> its spec fields: "index_of" (the input whose dim it
    indexes), and where not class indices (the last dim, a padding value among them) "index_dim" and
    "padding": False; class indices a loss ignores other than at -100, "padding": that index."""
    if is_chain(node):
        steps = {s.name: s.node for s in stages(node)}
        found = {k: v for s in stages(node) for k, v in index_inputs(s.node).items()}
        return {_viewed(k, steps): {**v, "index_of": _source(v["index_of"], steps)} for k, v in found.items()}
    return registry.index_inputs(node)


def no_grad_inputs(node: Node) -> set[str]:
    """Float inputs that get no gradient in torch: the class weights of a class loss."""
    return {w.name for sub in node.walk() if sub.op in loss.OPS and (w := loss.class_weight(sub)) is not None
            and w.op == "input"}


def _viewed(name: str, steps: dict[str, Node]) -> str:
    """The input an earlier stage's output views (target.unsqueeze(1) as gather's index: target); a
    computed one (an argmax's indices) stays itself."""
    while name in steps and steps[name].op in view.OPS and steps[name].args[0].op == "input":
        name = steps[name].args[0].name
    return name


def _source(name: str, steps: dict[str, Node]) -> str:
    """The input an earlier stage's output stands for as what indices index: its first input, whose
    dims a row op or a pointwise stage keeps (cross_entropy(log_softmax(x), t): x)."""
    while name in steps:
        name = input_names(steps[name])[0]
    return name


def reduced(node: Node, rank: int = 0) -> tuple[list[str], int | list[int] | None] | None:
    """(inputs, dim) whose broadcast length at dim (the product of the lengths of a list of dims)
    the op accumulates over (its error grows with the sqrt of it), or None for ops that accumulate
    nothing."""
    if fused.claims(node):
        return input_names(node), fused.reduced_dim(node)
    if node.op in REDUCE | ARG_REDUCE | SCANS:
        dim = node.attr("dim", -1)
        return input_names(node.args[0]), None if dim == ALL else dim      # None: every element
    if node.op in LOSSES:
        return loss.reduced(node)
    if node.op == attention.SDPA:            # each output is a weighted sum of S rows of v: k's dim -2
        return [node.args[1].name], -2
    if node.op in channel_norm.OPS:       # rank: the body's, for the dims a statistic spans
        return input_names(node.args[0]), channel_norm.reduced_dims(node, rank)
    mm = matmul_node(node)
    if mm:
        return [mm.args[0].name], -2 if mm.attr("ta") else -1      # a's K dim
    cv = conv.conv_node(node)
    if cv is None:
        return None
    # a convolution's K, dims of its weight: C_in / groups and the taps ([C_out, C_in / groups, *taps]),
    # or a transposed one's C_in and taps ([C_in, C_out / groups, *taps]: every group's channels)
    return [cv.args[1].name], [0 if cv.attr("transposed") else 1, *range(2, cv.attr("nd") + 2)]


# Where an input is marked twice, the later domain here wins: positive values are nonzero, and ±1 is
# both nonzero and (but for log's sake) a value to compare with.
_DOMAIN_ORDER = ("normal", "zeros", "nonzero", "sign", "positive", "unit", "index")


def domains(node: Node) -> dict[str, str]:
    """Input domain per input: 'positive' under log/sqrt/rsqrt/fractional pow, 'unit' under log(1 - x), 'nonzero' in a
    denominator or under a negative pow, 'sign' compared with 1 or -1, 'zeros' with 0 (pointwise.domains), 'index'
    for indices, else 'normal'."""
    out = {n: "normal" for n in input_names(node)}
    out.update(dict.fromkeys(index_inputs(node), "index"))

    def mark(sub: Node, dom: str) -> None:
        for leaf in sub.walk():
            if leaf.op == "input" and _DOMAIN_ORDER.index(dom) > _DOMAIN_ORDER.index(out[leaf.name]):
                out[leaf.name] = dom

    for sub in node.walk():
        pointwise.domains(sub, mark)
        channel_norm.domains(sub, mark)
        loss.domains(sub, mark)
    return out


def output_shape(node: Node, shapes: dict[str, list[int]]) -> list[int]:
    """Output shape of the expression for one case's input shapes (the first result's, of several:
    output_shapes gives each)."""
    if node.op == chain.OUTPUTS:
        return output_shapes(node, shapes)[0]
    missing = [n for n in input_names(node) if n not in shapes]
    if missing:
        raise IRError(f"no shape given for input(s) {', '.join(missing)}")
    if is_chain(node):
        steps = list(stages(node))
        return output_shape(steps[-1].node, chain.stage_shapes(steps, shapes, output_shape))
    return registry.family(node).output_shape(node, shapes)


def output_shapes(node: Node, shapes: dict[str, list[int]]) -> list[list[int]]:
    """Each result's shape for one case: one, or those of outputs(...)."""
    return [output_shape(r, shapes) for r in (node.args if node.op == chain.OUTPUTS else (node,))]


def settled(node: Node, shapes: dict[str, list[int]]) -> Node:
    """The tree with what waits for the inputs' shapes written out: prelu's weight viewed onto x's channels,
    a convolution's padding='same' as numbers."""
    return conv.same_settled(pointwise.prelu_settled(node, lambda n: output_shape(n, shapes)), shapes)


def size_rules(node: Node, cases: list[dict[str, list[int]]]) -> tuple[set[int], int]:
    """(sizes the runner may not change, the least size any dim may take) when it makes odd-sized
    and shrunk cases: a convolution's channels and kernel, a pooling window's extent. The family's
    rule where it has one."""
    if is_chain(node):          # every stage's rules, each over the shapes it sees
        fixed, least = set(), 1
        for stage, per_case in ((s, stage_cases(node, cases)) for s in stages(node)):
            f, n = size_rules(stage.node, per_case)
            fixed, least = fixed | f, max(least, n)
        return fixed, least
    rule = getattr(registry.family(node), "size_rules", None)
    return rule(node, cases) if rule else (set(), 1)


def max_numel(node: Node) -> int:
    """The most elements a tensor may have: the family's MAX_NUMEL (kernels indexing with int64), else 2**31 - 1."""
    if is_chain(node):
        return min(max_numel(s.node) for s in stages(node))
    return getattr(registry.family(node), "MAX_NUMEL", 2**31 - 1)


def max_rank(node: Node) -> int:
    """The most dims an input may have: the family's MAX_RANK, else 4."""
    if is_chain(node):
        return max(max_rank(s.node) for s in stages(node))
    return getattr(registry.family(node), "MAX_RANK", 4)


def output_dtype(node: Node, float_dtype: str) -> str:
    """The output's dtype: int64 indices for argmax/argmin, bool for any/all, else the float inputs' dtype."""
    steps = {s.name: s.node for s in stages(node)}
    last = stages(node)[-1].node
    while last.op in view.OPS and last.args[0].name in steps:      # a view keeps its operand's dtype
        last = steps[last.args[0].name]
    return registry.output_dtype(last) or float_dtype
