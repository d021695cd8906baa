"""Pasted PyTorch code: the code split from the words around it (fenced or bare), and its function
read into a Reading: scalar parameters as constants, the tensor parameters in order, the returned
expression inlined (bot.request.torch_code) and parsed to IR, with what the IR or the kernels would
read otherwise than PyTorch refused, and comments that say what the code does not. A pasted
nn.Module goes first through bot.request.pasted_module; pasted_source and pasted_class give the
pasted file as a spec's reference.
"""
from __future__ import annotations

import ast
import copy
import io
import re
import textwrap
import tokenize

from bot import ir
from bot.generators.interface import GenerationError
from bot.ops import matmul as mmf
from bot.ops import conv, norm
from bot.request import pasted_module
from bot.request.promotion import refuse_promotion
from bot.request.messages import SUPPORTED
from bot.request.reading import Reading
from bot.request.torch_code import Inline, SizesWritten, cast_dtype, refuse_other_meanings, returned, settled
from bot.request.words import one_eps

_FENCE = re.compile(r"```[\w+-]*[ \t]*\n(.*?)```", re.S)
_CODE_START = re.compile(r"^[ \t]*(?:import\s|from\s+\S+\s+import\s|@|def\s+\w+\s*\(|class\s+\w+)", re.M)


def split_code(text: str) -> tuple[str | None, str]:
    """(code, prose): a fenced or bare `def` and the words around it."""
    for m in _FENCE.finditer(text):
        if re.search(r"^\s*def\s", m.group(1), re.M):
            return textwrap.dedent(m.group(1)), text[:m.start()] + " ; " + text[m.end():]
    m = _CODE_START.search(text)
    if not m or not re.search(r"^\s*def\s+\w+\s*\(", text[m.start():], re.M):
        return None, text
    lines = textwrap.dedent(text[m.start():]).splitlines()
    for end in range(len(lines), 0, -1):        # words after the function are prose
        try:
            ast.parse("\n".join(lines[:end]))
        except SyntaxError:
            continue
        return "\n".join(lines[:end]), text[:m.start()] + " ; " + "\n".join(lines[end:])
    return "\n".join(lines), text[:m.start()]


def pasted_class(request: str, inputs: list[str]) -> str | None:
    """The pasted module class a spec with these inputs (in order) can take as its reference, or None."""
    code, _ = split_code(request)
    try:
        built = pasted_module.buildable(ast.parse(code)) if code else None
    except SyntaxError:
        return None
    return built[0] if built and built[1] == inputs else None


def pasted_source(request: str) -> str:
    """The code pasted in a request, as pasted: a pasted module's reference.py."""
    code, _ = split_code(request)
    if code is None:
        raise GenerationError("the request holds no pasted code to use as the reference")
    return code if code.endswith("\n") else code + "\n"


def read_code(code: str, rd: Reading, said: list[tuple[str | None, list[int]]] = (),
              init_said: dict[str, int | float] | None = None) -> None:
    """Pasted code -> rd: the operator its function returns, the function's name and tensor
    parameters (and a pasted module's, with the shapes and dtype its get_inputs makes, or where it has
    none, the shapes the words said of forward's tensors, `said`, beside its learned tensors')."""
    tree, aliases = _parsed(code, rd, init_said)
    fn = _the_function(tree)
    env, tensors = _parameters(fn, rd)
    inline = Inline(env, aliases, {f.name: f for f in tree.body if isinstance(f, ast.FunctionDef) and f is not fn})
    marked = returned(fn, inline)                    # its casts marked: what PyTorch promotes reads them
    ret, kept_cast = settled(copy.deepcopy(marked))
    sizes = SizesWritten(_known_shapes(rd, said, tensors))
    ret = sizes.visit(ret)
    rd.sized_dims = {n: sorted(d) for n, d in sizes.read.items()}      # kept at these sizes in every case
    node = _returned_node(fn, ret, f"line {rd.pasted.line}: forward" if rd.pasted else fn.name, rd)
    _refuse_other_parameters(fn, node, tensors)
    _read_casts_and_eps(fn, node, ret, inline.casts, rd)
    rd.node, rd.name, rd.inputs = node, fn.name, tensors
    if rd.pasted:
        _take_pasted(rd, said)
        named = rd.pasted.dtypes and rd.dtypes == rd.pasted.dtypes       # get_inputs' dtype, not the words'
        for dtype in rd.dtypes:         # words' dtypes cast the learned tensors too; constants keep their own
            refuse_promotion(marked, dtype, [n for n in tensors if n in rd.pasted.learned_shapes] if named else [],
                             bool(named))
    _refuse_kept_cast(fn, kept_cast, rd)


def _known_shapes(rd: Reading, said: list[tuple[str | None, list[int]]], tensors: list[str]) -> dict[str, list]:
    """Each tensor's shapes, a case each, where they are known before the cases are read: get_inputs'
    (and learned tensors'), the words' by name, or all the words' for a function of one tensor."""
    if rd.pasted and rd.pasted.shapes:
        return {n: [s] for n, s in rd.pasted.shapes.items()}
    known: dict[str, list] = {}
    for label, shape in said:
        if label in tensors:
            known.setdefault(label, []).append(shape)
    if len(tensors) == 1 and not known and said:
        known[tensors[0]] = [shape for _, shape in said]
    return known | ({n: [s] for n, s in rd.pasted.learned_shapes.items()} if rd.pasted else {})


def _parsed(code: str, rd: Reading, init_said: dict[str, int | float] | None) -> tuple[ast.Module, set[str]]:
    """The code's tree (a pasted module's: its forward as one function, in rd.pasted) and the names
    its imports alias."""
    try:
        tree = ast.parse(code)
    except SyntaxError as e:
        raise GenerationError(f"the pasted code does not parse: {e.msg} (line {e.lineno})") from None
    aliases = {a.asname for n in tree.body if isinstance(n, (ast.Import, ast.ImportFrom)) for a in n.names if a.asname}
    if pasted_module.is_module(tree):       # a pasted nn.Module (shapes in get_inputs): read as one function
        rd.pasted = pasted_module.read(tree, init_said)
        tree = ast.parse(rd.pasted.function)
    else:
        _refuse_telling_comments(code, tree)
    return tree, aliases


def _the_function(tree: ast.Module) -> ast.FunctionDef:
    """The pasted function (the last one); anything beside it but imports and docstrings is refused."""
    funcs = [n for n in tree.body if isinstance(n, ast.FunctionDef)]
    if not funcs:
        raise GenerationError("paste a plain function, e.g. 'def fused(x, bias): return F.gelu(x + bias)'")
    for stmt in tree.body:
        docstring = isinstance(stmt, ast.Expr) and isinstance(stmt.value, ast.Constant) and isinstance(stmt.value.value, str)
        if not (docstring or isinstance(stmt, (ast.FunctionDef, ast.Import, ast.ImportFrom))):
            raise GenerationError(f"line {stmt.lineno} of the pasted code, {ast.unparse(stmt)[:60]!r}, is not read: I read "
                                  "the function alone. Say shapes, dtypes and anything else about it in words beside "
                                  "the code, e.g. 'for fp16 8x16'.")
    return funcs[-1]


def _returned_node(fn: ast.FunctionDef, ret: ast.expr, where: str, rd: Reading) -> ir.Node:
    """The IR node of what the function returns; where: how messages name it."""
    src = ast.unparse(ret)
    refuse_other_meanings(where, ret)
    try:
        node = ir.parse(src, as_written=True)
    except ir.IRError as e:
        hint = " For a hand-written norm, call F.layer_norm or F.rms_norm instead." if re.search(r"\bmean\(", src) else ""
        if rd.pasted:                          # a module: its line and the one thing missing, briefly
            brief = str(e).split(" Supported:")[0].split(". The offline generator supports")[0].rstrip(".")
            raise GenerationError(f"{where} returns {src[:100]!r}: {brief}.{hint}") from None
        supported = "" if ir.SUPPORTED_TEXT in str(e) else f" {SUPPORTED}"
        raise GenerationError(f"{fn.name} returns {src!r}: {e}.{hint}{supported}") from None
    if node.op in ir.REDUCE | ir.ARG_REDUCE and node.attr("dim") is None:
        if node.attr("keepdim"):
            raise GenerationError(f"{where} returns {src!r}: {node.op} over every element with keepdim=True is "
                                  "not supported; reduce over a dim, or drop keepdim (one value)")
        return ir.with_dim(node, ir.ALL)        # as PyTorch reads it: over every element
    if node.op in ir.SCANS and node.attr("dim") is None:
        raise GenerationError(f"{where} returns {src!r}: torch.{node.op} needs a dim, e.g. dim=-1")
    return node


def _refuse_other_parameters(fn: ast.FunctionDef, node: ir.Node, tensors: list[str]) -> None:
    """What the function returns must use its tensor parameters, all of them and no other name."""
    used = ir.input_names(node)
    if unknown := [n for n in used if n not in tensors]:
        raise GenerationError(f"{fn.name} uses {', '.join(unknown)}, which is not one of its parameters")
    if unused := [n for n in tensors if n not in used]:
        constants = [n for n in unused if n in ("e", "pi")]
        raise GenerationError(f"{fn.name}'s parameter {', '.join(unused)} is not used in what it returns; "
                              + (f"{constants[0]} reads as the constant there: rename the parameter"
                                 if constants else "remove it or use it"))


def _refuse_kept_cast(fn: ast.FunctionDef, kept_cast: str | None, rd: Reading) -> None:
    """A cast to one dtype not cast back changes the output's dtype, unless every tested dtype is that
    one already (get_inputs' float32 tensors and .float()); otherwise it is refused."""
    if not kept_cast:
        return
    target = cast_dtype(kept_cast)
    if target and rd.dtypes and set(rd.dtypes) == {target}:
        rd.op_notes.append(f"{kept_cast!r} casts to {target}, the dtype every tested input already has")
        return
    raise GenerationError(f"{fn.name} casts with {kept_cast!r}, so in PyTorch it returns that dtype whatever "
                          f"its inputs' dtype ({', '.join(rd.dtypes) or 'each dtype tested'} here); the kernel "
                          "returns its inputs' dtype. Cast back at the end (.to(x.dtype)), drop the cast, or test "
                          "that dtype only.")


def _read_casts_and_eps(fn: ast.FunctionDef, node: ir.Node, ret: ast.expr, casts: bool, rd: Reading) -> None:
    """Casts noted (one kept to the end: _refuse_kept_cast); a norm's eps written in the code is taken
    (rms_norm without one is refused)."""
    if casts:
        rd.op_notes.append("ignored dtype casts (.float(), .to(...)): inputs and output keep each tested dtype")
    if node.op in ir.NORMS and norm.eps_given(ret):
        rd.eps = one_eps(rd.eps, node.attr("eps"))
    elif node.op == "rmsnorm":
        raise GenerationError(f"{fn.name} calls rms_norm without an eps, which in PyTorch is the dtype's machine "
                              "epsilon (9.8e-4 in float16, 1.2e-7 in float32); give eps=..., e.g. eps=1e-6")


def _take_pasted(rd: Reading, said: list[tuple[str | None, list[int]]]) -> None:
    """A pasted module's name, and the shapes and dtype its get_inputs makes (float32 unless it says),
    or the words' shapes of its forward's tensors beside its learned tensors' own."""
    pasted = rd.pasted
    rd.name = pasted.name
    from_words = not pasted.shapes
    if from_words:
        pasted.shapes = _said_of_forward(said, [n for n in rd.inputs if n not in pasted.parameters], pasted)
    if not pasted.shapes:
        return
    if missing := [n for n in rd.inputs if n not in pasted.shapes]:
        raise GenerationError(f"get_inputs gives no tensor for {', '.join(missing)}")
    rd.node = conv.batchless(mmf.broadcast_batches(mmf.vector_products(rd.node, pasted.shapes),
                                                   lambda x: _stored_shape(x, pasted.shapes)), pasted.shapes)
    mm = ir.matmul_node(rd.node)
    if mm and all(x.op == "input" for x in mm.args):       # a chain's matmul of a computed operand: by input
        a, b = ((x.name, mmf.logical(pasted.shapes[x.name], mm.attr(key), x.name)) for x, key in zip(mm.args, ("ta", "tb")))
        rd.shapes = [(None, mmf.operand_problem(a, b))]
        rd.batched = len(a[1]) >= 3
    else:
        rd.shapes = [(n, pasted.shapes[n]) for n in rd.inputs]
    rd.op_notes += [f"get_inputs gives {n} as a number: the judge draws it as a 0-d tensor, and the kernel takes it "
                    f"so (torch.tensor({n}))" for n in rd.inputs if pasted.shapes[n] == []]
    if not rd.dtypes and not from_words:
        rd.dtypes = pasted.dtypes or ["float32"]
        if not pasted.dtypes:
            rd.op_notes.append("get_inputs makes float32 tensors (torch's default); say 'fp16', 'bf16' or "
                               "'all dtypes' to test others")


def _stored_shape(x: ir.Node, shapes: dict[str, list[int]]) -> list[int] | None:
    """A matmul operand's shape as it lies (an input's, or what the IR computes), None where unknown."""
    try:
        return list(shapes[x.name]) if x.op == "input" else ir.output_shape(x, shapes)
    except (ir.IRError, KeyError):
        return None


def _said_of_forward(said: list[tuple[str | None, list[int]]], own: list[str],
                     pasted: pasted_module.Pasted) -> dict[str, list[int]]:
    """Every input's shape, for a module without get_inputs where the words give each of forward's own
    tensors one shape by name ('q 2x8x128x64, k ..., v ...'), or, beside learned tensors (an
    nn.Linear's weight), the one shape of its one tensor ('for 16x1024'); {} otherwise (the words'
    shapes are then read as for any code, a case each)."""
    named = {label: shape for label, shape in said if label in own}
    if len(named) == len(own) == len(said) and (pasted.learned_shapes or len(own) > 1):
        given = named
    elif len(own) == len(said) == 1 and pasted.learned_shapes and said[0][0] not in pasted.learned_shapes:
        given = {own[0]: said[0][1]}
    else:
        return {}
    return {**given, **pasted.learned_shapes}


# Comments or docstrings that give shapes, dtypes or dims, which the code does not say.
_TELLING = re.compile(r"\d+\s*[x×,]\s*\d+|\[\s*\d|\b(?:fp16|bf16|fp32|float\d*|half|bfloat16|dtype|dim|axis|keepdim|"
                      r"shape|shapes|all\s+elements|actually|should)\b", re.I)


def _refuse_telling_comments(code: str, tree: ast.Module) -> None:
    texts = [tok.string for tok in _tokens(code) if tok.type == tokenize.COMMENT]
    texts += [ast.get_docstring(n) or "" for n in ast.walk(tree) if isinstance(n, (ast.FunctionDef, ast.Module))]
    for text in texts:
        if m := _TELLING.search(text):
            raise GenerationError(f"the pasted code's comment or docstring {text.strip()[:60]!r} says {m.group(0)!r}, "
                                  "which the code itself does not: comments are not read. Say shapes and dtypes in "
                                  "words beside the code (e.g. 'for fp16 8x16') and dims in the code.")


def _tokens(code: str) -> list[tokenize.TokenInfo]:
    try:
        return list(tokenize.generate_tokens(io.StringIO(code).readline))
    except (tokenize.TokenError, SyntaxError):
        return []


def _parameters(fn: ast.FunctionDef, rd: Reading) -> tuple[dict[str, ast.expr], list[str]]:
    """Constants for scalar parameters (recorded in rd.scalars), and the tensor parameters in order."""
    a = fn.args
    positional = a.posonlyargs + a.args
    defaults = [None] * (len(positional) - len(a.defaults)) + list(a.defaults)
    env: dict[str, ast.expr] = {}
    tensors: list[str] = []
    for arg, default in [*zip(positional, defaults), *zip(a.kwonlyargs, a.kw_defaults)]:
        name, note = arg.arg, ast.unparse(arg.annotation) if arg.annotation else ""
        if name == "self":
            continue
        if "shape" in name:                       # F.layer_norm(x, normalized_shape, ...): not an input
            env[name] = ast.Tuple(elts=[], ctx=ast.Load())
        elif default is not None and not (isinstance(default, ast.Constant) and default.value is None):
            try:
                value = ast.literal_eval(default)
            except ValueError:
                raise GenerationError(f"parameter {name} has a default {ast.unparse(default)!r} "
                                      "that is not a constant") from None
            env[name] = ast.Constant(value)
            if isinstance(value, (int, float)) and not isinstance(value, bool):
                rd.scalars[name] = value
        elif note in ("float", "int"):
            raise GenerationError(f"parameter {name} is a number without a default; give it one, "
                                  f"e.g. '{name}: {note} = 1e-6'")
        else:
            tensors.append(name)
    return env, tensors
