"""A pasted PyTorch module -> the plain function bot.request_parse reads (stage 1).

Kernel engineers paste the module they want faster, often in the layout KernelBench and many model
repos use: module-level size constants, `class Model(nn.Module)` whose `__init__` takes arguments,
a `forward`, and `get_inputs()` / `get_init_inputs()`. This module evaluates what is constant there
(sizes, the init arguments, `self.` attributes set from them, math constants), writes each
parameter-free submodule call as the function it computes, and hands the parser one plain function
of the tensors forward takes, with the shapes and dtypes get_inputs makes. The reference stage is the
pasted file itself, so the kernel is judged against exactly what was pasted. What cannot be read is
refused naming its line and the one thing missing.
"""
from __future__ import annotations

import ast
import math
import re
from dataclasses import dataclass, field

from bot.generators.interface import GenerationError

_TORCH_DTYPES = {"float16": "float16", "half": "float16", "bfloat16": "bfloat16", "float32": "float32",
                 "float": "float32"}
_MAKERS = {"rand", "randn", "ones", "zeros", "empty", "full", "randint", "rand_like", "randn_like"}
_MATH = {"pi": math.pi, "e": math.e, "tau": math.tau, "inf": math.inf}
_MATH_FNS = {"sqrt": math.sqrt, "exp": math.exp, "log": math.log, "tanh": math.tanh, "erf": math.erf,
             "cos": math.cos, "sin": math.sin, "log2": math.log2, "log10": math.log10, "pow": math.pow}
_BUILTINS = {"int": int, "float": float, "abs": abs, "min": min, "max": max, "round": round, "len": len,
             "tuple": tuple, "list": list}
_MAX_SIZE = 1 << 40          # bigger constants are not sizes: refuse rather than compute them


@dataclass(frozen=True)
class _Dtype:
    name: str                # a float dtype get_inputs names, e.g. torch.float16


@dataclass(frozen=True)
class _Sub:
    """A submodule set in __init__: its nn class and constructor arguments (constants)."""
    cls: str
    args: tuple
    kwargs: dict
    line: int


@dataclass(frozen=True)
class _Opaque:
    """An attribute set in a way this reader does not evaluate."""
    line: int
    text: str


@dataclass
class Pasted:
    function: str                                   # `def forward(<tensors>): ...`, constants resolved
    entry: str | None                               # the nn.Module class reference.py calls
    name: str | None                                # the spec's name: the class's, unless it is "Model"
    line: int                                       # forward's return statement, for messages
    shapes: dict[str, list[int]] = field(default_factory=dict)   # per forward parameter, from get_inputs
    dtypes: list[str] = field(default_factory=list)  # the float dtype get_inputs gives, if it names one


class _NotConstant(Exception):
    def __init__(self, node: ast.AST):
        self.node = node


# ---------------------------------------------------------------- the pasted layout

def is_module(tree: ast.Module) -> bool:
    """A file holding an nn.Module subclass, a get_inputs(), or a method (a def taking self)."""
    for n in tree.body:
        if isinstance(n, ast.ClassDef) and any(_is_nn_module(b) for b in n.bases):
            return True
        if isinstance(n, ast.FunctionDef) and (n.name == "get_inputs" or _takes_self(n)):
            return True
    return False


def _layout(tree: ast.Module) -> tuple[dict[str, ast.FunctionDef], ast.ClassDef | None, ast.FunctionDef | None]:
    """(module-level functions, the module class: Model or else the last one, its forward)."""
    functions = {n.name: n for n in tree.body if isinstance(n, ast.FunctionDef)}
    classes = [n for n in tree.body if isinstance(n, ast.ClassDef) and any(_is_nn_module(b) for b in n.bases)]
    cls = next((c for c in classes if c.name == "Model"), classes[-1] if classes else None)
    methods = {m.name: m for m in cls.body if isinstance(m, ast.FunctionDef)} if cls else {}
    return functions, cls, methods.get("forward") or next((f for f in functions.values() if _takes_self(f)), None)


def buildable(tree: ast.Module) -> tuple[str, list[str]] | None:
    """(class name, forward's tensor parameters) of a pasted module the runner can build as
    Class(*get_init_inputs()) and use as the reference; None for other code."""
    functions, cls, forward = _layout(tree)
    if cls is None or forward is None or "get_init_inputs" not in functions:
        return None
    return cls.name, [a.arg for a in forward.args.args[1:]]


def read(tree: ast.Module) -> Pasted:
    """The pasted module as one plain function; GenerationError naming what cannot be read."""
    env = _module_constants(tree)
    functions, cls, forward = _layout(tree)
    methods = {m.name: m for m in cls.body if isinstance(m, ast.FunctionDef)} if cls else {}
    if forward is None:
        where = f"class {cls.name}" if cls else "the pasted code"
        raise GenerationError(f"{where} has no forward(self, ...): paste the module's forward with its class")
    attrs = _init_attributes(methods.get("__init__"), functions.get("get_init_inputs"), env, cls)
    tensors = [a.arg for a in forward.args.args[1:]]
    fn = _Resolver(env, attrs, set(tensors) | _local_names(forward)).function(forward)
    name = re.sub(r"(?<=[a-z0-9])(?=[A-Z])", "_", cls.name).lower() if cls and cls.name != "Model" else None
    line = next((s.lineno for s in ast.walk(forward) if isinstance(s, ast.Return)), forward.lineno)
    built = buildable(tree)
    pasted = Pasted(ast.unparse(fn), built[0] if built else None, name, line)
    if "get_inputs" in functions:
        _read_inputs(functions["get_inputs"], env, tensors, pasted)
    return pasted


def _is_nn_module(base: ast.expr) -> bool:
    return ast.unparse(base) in ("nn.Module", "torch.nn.Module", "Module")


def _takes_self(fn: ast.FunctionDef) -> bool:
    return bool(fn.args.args) and fn.args.args[0].arg == "self"


def _local_names(fn: ast.FunctionDef) -> set[str]:
    return {t.id for n in ast.walk(fn) if isinstance(n, (ast.Assign, ast.AnnAssign, ast.AugAssign))
            for t in ast.walk(n.targets[0] if isinstance(n, ast.Assign) else n.target) if isinstance(t, ast.Name)}


# ---------------------------------------------------------------- constants

def _module_constants(tree: ast.Module) -> dict:
    """Module-level names bound to constants (sizes, tuples of them); others are _Opaque."""
    env: dict = {}
    for n in tree.body:
        target, value = _assigned(n)
        if target is None:
            continue
        try:
            _bind(target, _const(value, env), env)
        except _NotConstant:
            for t in ast.walk(target):
                if isinstance(t, ast.Name):
                    env[t.id] = _Opaque(n.lineno, ast.unparse(n)[:60])
    return env


def _assigned(n: ast.stmt) -> tuple[ast.expr | None, ast.expr | None]:
    if isinstance(n, ast.Assign) and len(n.targets) == 1:
        return n.targets[0], n.value
    if isinstance(n, ast.AnnAssign) and n.value is not None:
        return n.target, n.value
    return None, None


def _bind(target: ast.expr, value, env: dict) -> None:
    if isinstance(target, ast.Name):
        env[target.id] = value
    elif isinstance(target, (ast.Tuple, ast.List)) and isinstance(value, (tuple, list)) \
            and len(value) == len(target.elts):
        for t, v in zip(target.elts, value):
            _bind(t, v, env)
    else:
        raise _NotConstant(target)


def _const(n: ast.expr, env: dict):
    """The value of a constant expression (numbers, strings, tuples and lists, sizes, math)."""
    if isinstance(n, ast.Constant):
        return n.value
    if isinstance(n, ast.Name):
        value = env.get(n.id, _BUILTINS.get(n.id, n))
        if value is n or isinstance(value, _Opaque):
            raise _NotConstant(n)
        return value
    if isinstance(n, ast.Attribute):
        path = ast.unparse(n)
        if path.startswith("math.") and n.attr in _MATH:
            return _MATH[n.attr]
        if path.startswith("torch.") and n.attr in _TORCH_DTYPES:
            return _Dtype(_TORCH_DTYPES[n.attr])
        raise _NotConstant(n)
    if isinstance(n, (ast.Tuple, ast.List)):
        items: list = []
        for e in n.elts:
            if isinstance(e, ast.Starred):
                items += list(_const(e.value, env))
            else:
                items.append(_const(e, env))
        return tuple(items) if isinstance(n, ast.Tuple) else items
    if isinstance(n, ast.UnaryOp) and isinstance(n.op, (ast.USub, ast.UAdd, ast.Not)):
        v = _const(n.operand, env)
        return -v if isinstance(n.op, ast.USub) else +v if isinstance(n.op, ast.UAdd) else not v
    if isinstance(n, ast.BinOp):
        return _binop(n, _const(n.left, env), _const(n.right, env))
    if isinstance(n, ast.Subscript):
        return _const(n.value, env)[_const(n.slice, env)]
    if isinstance(n, ast.Slice):
        return slice(*(None if p is None else _const(p, env) for p in (n.lower, n.upper, n.step)))
    if isinstance(n, ast.Call) and not n.keywords:
        return _call(n, [_const(a, env) for a in n.args])
    raise _NotConstant(n)


def _binop(n: ast.BinOp, a, b):
    numbers = all(isinstance(v, (int, float)) for v in (a, b))
    if isinstance(n.op, ast.Pow) and not (numbers and abs(b) <= 64):
        raise _NotConstant(n)
    if isinstance(n.op, ast.Mult) and not numbers and not (isinstance(b, int) and 0 <= b <= 64 or
                                                           isinstance(a, int) and 0 <= a <= 64):
        raise _NotConstant(n)
    ops = {ast.Add: lambda: a + b, ast.Sub: lambda: a - b, ast.Mult: lambda: a * b, ast.Div: lambda: a / b,
           ast.FloorDiv: lambda: a // b, ast.Mod: lambda: a % b, ast.Pow: lambda: a ** b}
    if type(n.op) not in ops:
        raise _NotConstant(n)
    try:
        value = ops[type(n.op)]()
    except (TypeError, ZeroDivisionError, OverflowError):
        raise _NotConstant(n) from None
    if isinstance(value, (int, float)) and abs(value) > _MAX_SIZE and not math.isinf(value):
        raise _NotConstant(n)
    return value


def _call(n: ast.Call, args: list):
    path = ast.unparse(n.func)
    fn = _MATH_FNS.get(path[5:]) if path.startswith("math.") else _BUILTINS.get(path)
    if fn is None:
        raise _NotConstant(n)
    try:
        return fn(*args)
    except (TypeError, ValueError, OverflowError):
        raise _NotConstant(n) from None


def _returned_constant(fn: ast.FunctionDef, env: dict):
    """What a constant function (get_init_inputs) returns, its local assignments evaluated."""
    local = dict(env)
    for stmt in fn.body:
        if isinstance(stmt, ast.Return) and stmt.value is not None:
            return _const(stmt.value, local)
        target, value = _assigned(stmt)
        if target is not None:
            _bind(target, _const(value, local), local)
        elif not (isinstance(stmt, ast.Expr) and isinstance(stmt.value, ast.Constant)):
            raise _NotConstant(stmt)
    raise _NotConstant(fn)


def _refuse_constant(n: ast.AST, what: str) -> None:
    raise GenerationError(f"line {n.lineno}: {what} {ast.unparse(n)[:60]!r} is not a constant I can evaluate "
                          "(numbers, tuples, module-level sizes and math constants)")


# ---------------------------------------------------------------- __init__ and its arguments

def _init_attributes(init: ast.FunctionDef | None, init_inputs: ast.FunctionDef | None, env: dict,
                     cls: ast.ClassDef | None) -> dict:
    """self.<name> -> its constant value, a _Sub (a submodule) or an _Opaque."""
    if init is None:
        return {}
    local = dict(env)
    local.update(_init_arguments(init, init_inputs, env, cls))
    attrs: dict = {}
    for stmt in init.body:
        if _is_super_init(stmt) or isinstance(stmt, ast.Expr) and isinstance(stmt.value, ast.Constant):
            continue
        target, value = _assigned(stmt)
        if isinstance(target, ast.Attribute) and ast.unparse(target.value) == "self":
            attrs[target.attr] = _attribute(value, local, stmt.lineno)
            continue
        if isinstance(target, ast.Name):
            try:
                local[target.id] = _const(value, local)
                continue
            except _NotConstant:
                pass
        for t in ast.walk(stmt):          # anything else: what it sets on self is not known
            if isinstance(t, ast.Attribute) and isinstance(t.ctx, ast.Store) and ast.unparse(t.value) == "self":
                attrs[t.attr] = _Opaque(stmt.lineno, ast.unparse(stmt)[:60])
    return attrs


def _init_arguments(init: ast.FunctionDef, init_inputs: ast.FunctionDef | None, env: dict,
                    cls: ast.ClassDef | None) -> dict:
    a = init.args
    params = [p.arg for p in a.args[1:]]
    defaults = dict(zip(params[len(params) - len(a.defaults):], a.defaults))
    defaults.update({p.arg: d for p, d in zip(a.kwonlyargs, a.kw_defaults) if d is not None})
    given: list = []
    if init_inputs is not None:
        try:
            given = list(_returned_constant(init_inputs, env))
        except (_NotConstant, TypeError) as e:
            node = e.node if isinstance(e, _NotConstant) else init_inputs
            _refuse_constant(node if hasattr(node, "lineno") else init_inputs, "get_init_inputs returns")
    if len(given) > len(params):
        raise GenerationError(f"get_init_inputs gives {len(given)} values but {cls.name}.__init__ takes "
                              f"{len(params)} ({', '.join(params) or 'none'})")
    values = dict(zip(params, given))
    for p in [*params, *(k.arg for k in a.kwonlyargs)]:
        if p in values:
            continue
        if p not in defaults:
            raise GenerationError(f"{cls.name}.__init__ takes {p}, which nothing gives: add get_init_inputs() "
                                  f"returning its value (e.g. 'def get_init_inputs(): return [{p}]'), or a default")
        try:
            values[p] = _const(defaults[p], env)
        except _NotConstant:
            _refuse_constant(defaults[p], f"the default of {p},")
    return values


def _is_super_init(stmt: ast.stmt) -> bool:
    return isinstance(stmt, ast.Expr) and isinstance(stmt.value, ast.Call) and \
        re.fullmatch(r"super\((\w+, self)?\)\.__init__", ast.unparse(stmt.value.func)) is not None


def _attribute(value: ast.expr, env: dict, line: int):
    try:
        return _const(value, env)
    except _NotConstant:
        pass
    if isinstance(value, ast.Call) and (path := ast.unparse(value.func)).split(".")[0] in ("nn", "torch") \
            and "." in path:
        try:
            args = tuple(_const(a, env) for a in value.args)
            kwargs = {k.arg: _const(k.value, env) for k in value.keywords if k.arg}
            return _Sub(path.rsplit(".", 1)[1], args, kwargs, line)
        except _NotConstant:
            pass
    return _Opaque(line, ast.unparse(value)[:60])


# ---------------------------------------------------------------- forward -> a plain function

class _Resolver(ast.NodeTransformer):
    """forward with self.<constant> and module-level constants written in, submodule calls written as
    the functions they compute, and constant subexpressions (math.sqrt(2 / math.pi)) folded."""

    def __init__(self, env: dict, attrs: dict, shadowed: set[str]):
        self.env, self.attrs, self.shadowed = env, attrs, shadowed

    def function(self, forward: ast.FunctionDef) -> ast.FunctionDef:
        args = ast.arguments(posonlyargs=[], args=[ast.arg(a.arg) for a in forward.args.args[1:]],
                             kwonlyargs=[], kw_defaults=[], defaults=[])
        body = [self.visit(s) for s in forward.body
                if not (isinstance(s, ast.Expr) and isinstance(s.value, ast.Constant))]
        fn = ast.FunctionDef("forward", args, body, [], None, type_params=[])
        return ast.fix_missing_locations(fn)

    def visit_Attribute(self, n: ast.Attribute) -> ast.expr:
        if ast.unparse(n.value) != "self":
            return self._folded(self.generic_visit(n))
        value = self.attrs.get(n.attr)
        if value is None:
            raise GenerationError(f"line {n.lineno}: forward reads self.{n.attr}, which __init__ does not set "
                                  "(paste the class with its __init__ and get_init_inputs, or write the value)")
        if isinstance(value, _Opaque):
            raise GenerationError(f"line {n.lineno}: self.{n.attr} is set on line {value.line} by {value.text!r}, "
                                  "which is not a constant I can evaluate")
        if isinstance(value, _Sub):
            raise GenerationError(f"line {n.lineno}: self.{n.attr} is nn.{value.cls}, used here other than by "
                                  f"calling it; write {n.attr}'s call, self.{n.attr}(x)")
        return _literal(value, n)

    def visit_Name(self, n: ast.Name) -> ast.expr:
        if n.id in self.shadowed or n.id not in self.env:
            return n
        value = self.env[n.id]
        if isinstance(value, _Opaque):
            raise GenerationError(f"line {n.lineno}: forward reads {n.id}, set on line {value.line} by "
                                  f"{value.text!r}, which is not a constant I can evaluate")
        return _literal(value, n) if isinstance(value, (int, float, tuple, list, str)) else n

    def visit_Call(self, n: ast.Call) -> ast.expr:
        f = n.func
        if isinstance(f, ast.Attribute) and ast.unparse(f.value) == "self":
            sub = self.attrs.get(f.attr)
            if not isinstance(sub, _Sub):
                what = "a method of the class" if sub is None else "not a submodule"
                raise GenerationError(f"line {n.lineno}: self.{f.attr}(...) calls {what}; write what it computes "
                                      "in forward itself")
            args = [self.visit(a) for a in n.args]
            return functional(sub, args, [self.visit(k) for k in n.keywords], n.lineno)
        return self._folded(self.generic_visit(n))

    def visit_BinOp(self, n: ast.BinOp) -> ast.expr:
        return self._folded(self.generic_visit(n))

    def _folded(self, n: ast.expr) -> ast.expr:
        """A number where the expression is a constant (math.sqrt(2.0 / math.pi)), else n."""
        try:
            value = _const(n, {})
        except (_NotConstant, TypeError, ValueError, IndexError, KeyError):
            return n
        return _literal(value, n) if isinstance(value, (int, float)) and not isinstance(value, bool) else n


def _literal(value, at: ast.AST) -> ast.expr:
    if isinstance(value, (tuple, list)):
        node = ast.Tuple([_literal(v, at) for v in value], ast.Load())
    elif isinstance(value, (int, float)) and value < 0:
        node = ast.UnaryOp(ast.USub(), ast.Constant(-value))
    else:
        node = ast.Constant(value)
    return ast.copy_location(node, at)


# ---------------------------------------------------------------- submodules

# Parameter-free nn classes -> the torch function each computes, and the constructor's positional
# parameters in PyTorch's order (passed on as keywords). Classes holding learned weights (Linear,
# Conv*, BatchNorm, affine LayerNorm) are refused: their kernel takes the weights as inputs.
_FUNCTIONAL = {
    "ReLU": ("torch.relu", ()), "Sigmoid": ("torch.sigmoid", ()), "Tanh": ("torch.tanh", ()),
    "SiLU": ("F.silu", ()), "GELU": ("F.gelu", ("approximate",)), "Identity": ("", ()),
    "Softmax": ("torch.softmax", ("dim",)), "LogSoftmax": ("torch.log_softmax", ("dim",)),
    "LeakyReLU": ("F.leaky_relu", ("negative_slope",)), "ELU": ("F.elu", ("alpha",)), "SELU": ("F.selu", ()),
    "CELU": ("F.celu", ("alpha",)), "ReLU6": ("F.relu6", ()), "Hardtanh": ("F.hardtanh", ("min_val", "max_val")),
    "Hardsigmoid": ("F.hardsigmoid", ()), "Hardswish": ("F.hardswish", ()), "Softplus": ("F.softplus", ("beta", "threshold")),
    "Softsign": ("F.softsign", ()), "Mish": ("F.mish", ()), "Tanhshrink": ("F.tanhshrink", ()),
    "LogSigmoid": ("F.logsigmoid", ()), "Softshrink": ("F.softshrink", ("lambd",)), "Hardshrink": ("F.hardshrink", ("lambd",)),
    "CrossEntropyLoss": ("F.cross_entropy", ("weight", "size_average", "ignore_index", "reduce", "reduction")),
    "LayerNorm": ("F.layer_norm", ("normalized_shape", "eps", "elementwise_affine", "bias")),
    "RMSNorm": ("F.rms_norm", ("normalized_shape", "eps", "elementwise_affine")),
}
_WEIGHTED = {"Linear": "a linear layer (x @ W.T + b) with learned weights", "Bilinear": "a bilinear layer",
             "Embedding": "an embedding lookup", "MultiheadAttention": "attention",
             "Dropout": "dropout (random in training mode)"}
_FAMILIES = [(r"Conv", "a convolution"), (r"ConvTranspose", "a transposed convolution"), (r"BatchNorm", "batch norm"),
             (r"InstanceNorm", "instance norm"), (r"GroupNorm", "group norm"), (r"Pool", "pooling"),
             (r"LSTM|GRU|RNN", "a recurrent layer"), (r"Loss$", "a loss"), (r"Transformer", "a transformer block")]


def functional(sub: _Sub, args: list[ast.expr], keywords: list[ast.keyword], line: int) -> ast.expr:
    """The call of the function nn.<cls>(...) computes on args."""
    if sub.cls not in _FUNCTIONAL:
        raise GenerationError(f"line {line}: nn.{sub.cls} (set on line {sub.line}) is {_what(sub.cls)}, which the "
                              "offline generator does not lower")
    path, params = _FUNCTIONAL[sub.cls]
    options = {k: v for k, v in {**dict(zip(params, sub.args)), **sub.kwargs}.items()
               if v is not None and k != "inplace"}
    if sub.cls in ("LayerNorm", "RMSNorm"):
        if options.pop("elementwise_affine", True) or options.pop("bias", False):
            raise GenerationError(f"line {line}: nn.{sub.cls} (set on line {sub.line}) holds a learned weight"
                                  f"{' and bias' if sub.cls == 'LayerNorm' else ''}, which the offline generator "
                                  "takes as kernel inputs: write F.layer_norm(x, shape, weight, bias, eps=...) "
                                  "in a function taking them, or give elementwise_affine=False")
        shape = options.pop("normalized_shape", ())
        args = [args[0], _literal(tuple(shape) if isinstance(shape, (tuple, list)) else (shape,), ast.Constant(0))]
    if not path:
        return args[0]
    kw = [ast.keyword(k, _literal(v, ast.Constant(0))) for k, v in options.items()]
    return ast.Call(_path(path), args, kw + keywords)


def _what(cls: str) -> str:
    if cls in _WEIGHTED:
        return _WEIGHTED[cls]
    return next((what for pattern, what in _FAMILIES if re.search(pattern, cls)), "a module the reader does not know")


def _path(dotted: str) -> ast.expr:
    parts = dotted.split(".")
    node: ast.expr = ast.Name(parts[0], ast.Load())
    for p in parts[1:]:
        node = ast.Attribute(node, p, ast.Load())
    return node


# ---------------------------------------------------------------- get_inputs

def _read_inputs(fn: ast.FunctionDef, env: dict, tensors: list[str], pasted: Pasted) -> None:
    """Shapes and the dtype of forward's tensors from what get_inputs returns."""
    local = dict(env)
    made: list[ast.expr] | None = None
    for stmt in fn.body:
        if isinstance(stmt, ast.Return) and isinstance(stmt.value, (ast.List, ast.Tuple)):
            made = list(stmt.value.elts)
            break
        target, value = _assigned(stmt)
        if isinstance(target, ast.Name) and _is_tensor(value, local):
            local[target.id] = _Made(*_tensor(value, local, target.id))
        elif target is not None:
            try:
                _bind(target, _const(value, local), local)
            except _NotConstant:
                _refuse_constant(value, "get_inputs computes")
    if made is None:
        raise GenerationError(f"line {fn.lineno}: get_inputs must return a list of the tensors forward takes, "
                              "e.g. 'return [torch.randn(batch_size, dim)]'")
    if len(made) != len(tensors):
        raise GenerationError(f"get_inputs returns {len(made)} values but forward takes {len(tensors)} "
                              f"({', '.join(tensors)})")
    dtypes = set()
    for name, expr in zip(tensors, made):
        shape, dtype = _tensor(expr, local, name)
        pasted.shapes[name] = shape
        if dtype:
            dtypes.add(dtype)
    if len(dtypes) > 1:
        raise GenerationError(f"get_inputs makes tensors of {' and '.join(sorted(dtypes))}; the offline kernels take "
                              "one float dtype for every input")
    pasted.dtypes = sorted(dtypes)


@dataclass(frozen=True)
class _Made:
    """A local tensor of get_inputs: its shape and dtype (None: torch's default)."""
    shape: list[int]
    dtype: str | None


# Functions and methods that keep their tensor argument's shape (get_inputs often shapes values:
# torch.rand(n) * scale, .softmax(dim=-1), torch.triu(...)).
_SAME_SHAPE = {"abs", "exp", "log", "sigmoid", "tanh", "relu", "softmax", "log_softmax", "triu", "tril", "clamp",
               "sign", "neg", "sqrt", "contiguous", "cuda", "to", "half", "float", "bfloat16", "clone", "detach",
               "requires_grad_", "mul", "add", "sub", "div"}


def _is_tensor(value: ast.expr | None, env: dict) -> bool:
    return value is not None and any(isinstance(n, ast.Call) and _maker(n) or
                                     isinstance(n, ast.Name) and isinstance(env.get(n.id), _Made)
                                     for n in ast.walk(value))


def _maker(call: ast.Call) -> bool:
    return isinstance(call.func, ast.Attribute) and ast.unparse(call.func.value) == "torch" \
        and call.func.attr in _MAKERS


def _tensor(expr: ast.expr, env: dict, name: str) -> tuple[list[int], str | None]:
    """(shape, dtype or None) of a tensor get_inputs makes."""
    if isinstance(expr, ast.Name) and isinstance(env.get(expr.id), _Made):
        return env[expr.id].shape, env[expr.id].dtype
    if isinstance(expr, ast.Call) and _maker(expr):
        return _made(expr, env)
    if isinstance(expr, ast.BinOp):
        shapes = [_tensor(s, env, name) for s in (expr.left, expr.right) if _is_tensor(s, env)]
        if shapes:
            return _broadcast([s for s, _ in shapes], expr, name), next((d for _, d in shapes if d), None)
    if isinstance(expr, ast.UnaryOp) and _is_tensor(expr.operand, env):
        return _tensor(expr.operand, env, name)
    if isinstance(expr, ast.Attribute) and expr.attr in ("T", "mT") and _is_tensor(expr.value, env):
        shape, dtype = _tensor(expr.value, env, name)
        return shape[:-2] + shape[-2:][::-1], dtype
    if isinstance(expr, ast.Call) and isinstance(expr.func, ast.Attribute) and expr.func.attr in _SAME_SHAPE:
        inner = expr.func.value if _is_tensor(expr.func.value, env) else next(
            (a for a in expr.args if _is_tensor(a, env)), None)
        if inner is not None:
            shape, dtype = _tensor(inner, env, name)
            return shape, _cast(expr, env) or dtype
    if not _is_tensor(expr, env):
        raise GenerationError(f"line {expr.lineno}: get_inputs gives {name} {ast.unparse(expr)[:40]}, which is not "
                              "a tensor; the offline kernels take tensors only: make it a constant in forward or an "
                              "__init__ argument")
    raise GenerationError(f"line {expr.lineno}: I cannot tell the shape get_inputs gives {name} from "
                          f"{ast.unparse(expr)[:60]!r}; make it with torch.rand/randn/randint(sizes, dtype=...)")


def _broadcast(shapes: list[list[int]], at: ast.expr, name: str) -> list[int]:
    rank = max(len(s) for s in shapes)
    out = []
    for sizes in zip(*([1] * (rank - len(s)) + s for s in shapes)):
        if len(set(sizes) - {1}) > 1:
            raise GenerationError(f"line {at.lineno}: get_inputs combines tensors of shapes "
                                  f"{' and '.join(map(str, shapes))} for {name}, which do not broadcast")
        out.append(max(sizes))
    return out


def _made(base: ast.Call, env: dict) -> tuple[list[int], str | None]:
    """torch.rand(*sizes, dtype=...) and its kin."""
    kinds = {k.arg: k.value for k in base.keywords}
    args = list(base.args)
    if base.func.attr == "randint":              # randint(high, size) or randint(low, high, size)
        args, dtype = args[-1:], None
    else:
        args, dtype = args[:1] if base.func.attr == "full" else args, _cast(base, env)
    try:
        sizes = _const(kinds["size"], env) if "size" in kinds else _const(ast.Tuple(args, ast.Load()), env)
    except _NotConstant as e:
        _refuse_constant(e.node if hasattr(e.node, "lineno") else base, "the size")
    sizes = _flat(sizes)
    if not all(isinstance(s, int) and not isinstance(s, bool) and s > 0 for s in sizes):
        raise GenerationError(f"line {base.lineno}: get_inputs makes a tensor of sizes {sizes}; sizes must be "
                              "positive integers")
    return sizes, dtype


def _flat(v) -> list:
    return [x for item in v for x in _flat(item)] if isinstance(v, (tuple, list)) else [v]


def _cast(call: ast.Call, env: dict) -> str | None:
    """The float dtype a maker's dtype= or a cast (.half(), .to(torch.bfloat16)) names, or None."""
    f = call.func
    if isinstance(f, ast.Attribute) and f.attr in ("half", "bfloat16", "float"):
        return _TORCH_DTYPES[f.attr]
    for value in [*call.args, *(k.value for k in call.keywords if k.arg == "dtype")]:
        if isinstance(value, ast.Attribute) and ast.unparse(value).startswith("torch."):
            try:
                named = _const(value, env)
            except _NotConstant:
                named = None
            if not isinstance(named, _Dtype):
                raise GenerationError(f"line {call.lineno}: get_inputs asks for {ast.unparse(value)}; the offline "
                                      "kernels take torch.float16, torch.bfloat16 or torch.float32")
            return named.name
    return None
