"""A pasted PyTorch module -> the plain function bot.request.pasted reads (stage 1).

Kernel engineers paste the module they want faster, often in the layout KernelBench and many model
repos use: module-level size constants, `class Model(nn.Module)` whose `__init__` takes arguments,
a `forward`, and `get_inputs()` / `get_init_inputs()`. The reader evaluates what is constant there
(sizes, the init arguments, `self.` attributes set from them, math constants), writes each
parameter-free submodule call as the function it computes, and hands the parser one plain function
of the tensors forward takes, with the shapes and dtypes get_inputs makes. The reference stage is the
pasted file itself, so the kernel is judged against exactly what was pasted. What cannot be read is
refused naming its line and the one thing missing. The constants are evaluated by
bot.request.pasted_constants, the submodule calls written by bot.request.pasted_layers, and what
get_inputs makes read by bot.request.pasted_inputs.
"""
from __future__ import annotations

import ast
import re
from dataclasses import dataclass, field

from bot.generators.interface import GenerationError
from bot.request.pasted_constants import (NotConstant, Opaque, assigned, const, literal, module_constants,
                                          refuse_constant, returned_constant)
from bot.request.pasted_inputs import INDEX, MASK, made_shape, read_inputs
from bot.request.pasted_layers import Param, Seq, Sub, functional, sequence


@dataclass
class Pasted:
    """A pasted module read as one plain function, with what get_inputs makes."""
    function: str                                   # `def forward(<tensors>): ...`, constants resolved
    entry: str | None                               # the nn.Module class reference.py calls
    name: str | None                                # the spec's name: the class's, unless it is "Model"
    line: int                                       # forward's return statement, for messages
    shapes: dict[str, list[int]] = field(default_factory=dict)   # per forward parameter, from get_inputs
    dtypes: list[str] = field(default_factory=list)  # the float dtype get_inputs gives, if it names one
    masks: list[str] = field(default_factory=list)   # the tensors get_inputs makes bool
    indices: list[str] = field(default_factory=list)  # the tensors get_inputs makes int64 (torch.randint)
    parameters: dict[str, str] = field(default_factory=dict)     # learned tensor input -> its path ("fc.weight")


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
    env = module_constants(tree)
    functions, cls, forward = _layout(tree)
    methods = {m.name: m for m in cls.body if isinstance(m, ast.FunctionDef)} if cls else {}
    if forward is None:
        where = f"class {cls.name}" if cls else "the pasted code"
        raise GenerationError(f"{where} has no forward(self, ...): paste the module's forward with its class")
    attrs = _init_attributes(methods.get("__init__"), functions.get("get_init_inputs"), env, cls)
    tensors = [a.arg for a in forward.args.args[1:]]
    resolver = _Resolver(env, attrs, set(tensors) | _local_names(forward))
    fn = resolver.function(forward)
    name = re.sub(r"(?<=[a-z0-9])(?=[A-Z])", "_", cls.name).lower() if cls and cls.name != "Model" else None
    line = next((s.lineno for s in ast.walk(forward) if isinstance(s, ast.Return)), forward.lineno)
    built = buildable(tree)
    pasted = Pasted(ast.unparse(fn), built[0] if built else None, name, line)
    if "get_inputs" in functions:
        pasted.shapes, dtypes = read_inputs(functions["get_inputs"], env, tensors)
        pasted.masks = [n for n, d in dtypes.items() if d == MASK]
        pasted.indices = [n for n, d in dtypes.items() if d == INDEX]
        pasted.dtypes = sorted({d for d in dtypes.values() if d not in (None, MASK, INDEX)})
        pasted.shapes.update({p.name: p.shape for p in resolver.params})
    pasted.parameters = {p.name: p.path for p in resolver.params}
    return pasted


def _is_nn_module(base: ast.expr) -> bool:
    return ast.unparse(base) in ("nn.Module", "torch.nn.Module", "Module")


def _takes_self(fn: ast.FunctionDef) -> bool:
    return bool(fn.args.args) and fn.args.args[0].arg == "self"


def _local_names(fn: ast.FunctionDef) -> set[str]:
    return {t.id for n in ast.walk(fn) if isinstance(n, (ast.Assign, ast.AnnAssign, ast.AugAssign))
            for t in ast.walk(n.targets[0] if isinstance(n, ast.Assign) else n.target) if isinstance(t, ast.Name)}


# ---------------------------------------------------------------- __init__ and its arguments

def _init_attributes(init: ast.FunctionDef | None, init_inputs: ast.FunctionDef | None, env: dict,
                     cls: ast.ClassDef | None) -> dict:
    """self.<name> -> its constant value, a Sub (a submodule) or an Opaque."""
    if init is None:
        return {}
    local = dict(env)
    local.update(_init_arguments(init, init_inputs, env, cls))
    attrs: dict = {}
    for stmt in init.body:
        if _is_super_init(stmt) or isinstance(stmt, ast.Expr) and isinstance(stmt.value, ast.Constant):
            continue
        target, value = assigned(stmt)
        if isinstance(target, ast.Attribute) and ast.unparse(target.value) == "self":
            attrs[target.attr] = _attribute(value, local, stmt.lineno)
            continue
        if isinstance(target, ast.Name):
            try:
                local[target.id] = const(value, local)
                continue
            except NotConstant:
                pass
        for t in ast.walk(stmt):          # anything else: what it sets on self is not known
            if isinstance(t, ast.Attribute) and isinstance(t.ctx, ast.Store) and ast.unparse(t.value) == "self":
                attrs[t.attr] = Opaque(stmt.lineno, ast.unparse(stmt)[:60])
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
            given = list(returned_constant(init_inputs, env))
        except (NotConstant, TypeError) as e:
            node = e.node if isinstance(e, NotConstant) else init_inputs
            refuse_constant(node if hasattr(node, "lineno") else init_inputs, "get_init_inputs returns")
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
            values[p] = const(defaults[p], env)
        except NotConstant:
            refuse_constant(defaults[p], f"the default of {p},")
    return values


def _is_super_init(stmt: ast.stmt) -> bool:
    return isinstance(stmt, ast.Expr) and isinstance(stmt.value, ast.Call) and \
        re.fullmatch(r"super\((\w+, self)?\)\.__init__", ast.unparse(stmt.value.func)) is not None


@dataclass(frozen=True)
class Learned:
    """A tensor __init__ makes a Parameter of (self.bias = nn.Parameter(torch.randn(c, 1, 1))): its shape."""
    shape: list[int]
    line: int


def _attribute(value: ast.expr, env: dict, line: int):
    try:
        return const(value, env)
    except NotConstant:
        pass
    if isinstance(value, ast.Call) and ast.unparse(value.func) in ("nn.Parameter", "torch.nn.Parameter") and value.args:
        made = value.args[0]
        if isinstance(made, ast.Call) and ast.unparse(made.func) == "torch.tensor":
            try:                     # a 0-d parameter of a number: one element, broadcast as the 0-d one is
                const(made.args[0], env)
                return Learned([1], line)
            except (NotConstant, IndexError):
                pass
        return Learned(made_shape(made, env, "a parameter"), line)
    if isinstance(value, ast.Call) and ast.unparse(value.func) in ("nn.Sequential", "torch.nn.Sequential") \
            and not value.keywords:
        layers = [_attribute(a, env, line) for a in value.args]
        if all(isinstance(layer, Sub) for layer in layers):
            return Seq(tuple(layers), line)
        return Opaque(line, ast.unparse(value)[:60])
    if isinstance(value, ast.Call) and (path := ast.unparse(value.func)).split(".")[0] in ("nn", "torch") \
            and "." in path:
        try:
            args = tuple(const(a, env) for a in value.args)
            kwargs = {k.arg: const(k.value, env) for k in value.keywords if k.arg}
            return Sub(path.rsplit(".", 1)[1], args, kwargs, line)
        except NotConstant:
            pass
    return Opaque(line, ast.unparse(value)[:60])


# ---------------------------------------------------------------- forward -> a plain function

class _Resolver(ast.NodeTransformer):
    """forward with self.<constant> and module-level constants written in, submodule calls written as
    the functions they compute, and constant subexpressions (math.sqrt(2 / math.pi)) folded."""

    def __init__(self, env: dict, attrs: dict, shadowed: set[str]):
        self.env, self.attrs, self.shadowed = env, attrs, shadowed
        self.params: list[Param] = []           # learned tensors the submodule calls take, as inputs
        self.names: dict[str, str] = {}         # their paths ('fc.weight') -> input names ('fc_weight')

    def _name(self, path: str) -> str:
        if path not in self.names:
            name = path.replace(".", "_")
            while name in self.shadowed or name in self.names.values():
                name += "_"
            self.names[path] = name
        return self.names[path]

    def function(self, forward: ast.FunctionDef) -> ast.FunctionDef:
        """forward as a plain function of its tensors and then the learned tensors it reads."""
        body = [self.visit(s) for s in forward.body
                if not (isinstance(s, ast.Expr) and isinstance(s.value, ast.Constant))]
        names = [a.arg for a in forward.args.args[1:]] + [p.name for p in self.params]
        args = ast.arguments(posonlyargs=[], args=[ast.arg(n) for n in names], kwonlyargs=[], kw_defaults=[], defaults=[])
        fn = ast.FunctionDef("forward", args, body, [], None, type_params=[])
        return ast.fix_missing_locations(fn)

    def visit_Attribute(self, n: ast.Attribute) -> ast.expr:
        if ast.unparse(n.value) != "self":
            return self._folded(self.generic_visit(n))
        value = self.attrs.get(n.attr)
        if value is None:
            raise GenerationError(f"line {n.lineno}: forward reads self.{n.attr}, which __init__ does not set "
                                  "(paste the class with its __init__ and get_init_inputs, or write the value)")
        if isinstance(value, Opaque):
            raise GenerationError(f"line {n.lineno}: self.{n.attr} is set on line {value.line} by {value.text!r}, "
                                  "which is not a constant I can evaluate")
        if isinstance(value, (Sub, Seq)):
            cls = value.cls if isinstance(value, Sub) else "Sequential"
            raise GenerationError(f"line {n.lineno}: self.{n.attr} is nn.{cls}, used here other than by "
                                  f"calling it; write {n.attr}'s call, self.{n.attr}(x)")
        if isinstance(value, Learned):      # a Parameter of the module itself: an input like a layer's weight
            param = Param(self._name(n.attr), n.attr, value.shape)
            if param not in self.params:
                self.params.append(param)
            return ast.Name(param.name, ast.Load())
        return literal(value, n)

    def visit_Name(self, n: ast.Name) -> ast.expr:
        if n.id in self.shadowed or n.id not in self.env:
            return n
        value = self.env[n.id]
        if isinstance(value, Opaque):
            raise GenerationError(f"line {n.lineno}: forward reads {n.id}, set on line {value.line} by "
                                  f"{value.text!r}, which is not a constant I can evaluate")
        return literal(value, n) if isinstance(value, (int, float, tuple, list, str)) else n

    def visit_Call(self, n: ast.Call) -> ast.expr:
        f = n.func
        if isinstance(f, ast.Attribute) and ast.unparse(f.value) == "self":
            sub = self.attrs.get(f.attr)
            if not isinstance(sub, (Sub, Seq)):
                what = "a method of the class" if sub is None else "not a submodule"
                raise GenerationError(f"line {n.lineno}: self.{f.attr}(...) calls {what}; write what it computes "
                                      "in forward itself")
            args = [self.visit(a) for a in n.args]
            lower = functional if isinstance(sub, Sub) else sequence
            call, params = lower(sub, f.attr, args, [self.visit(k) for k in n.keywords], n.lineno, self._name)
            self.params += [p for p in params if p not in self.params]      # a layer called twice: its tensors once
            return call
        return self._folded(self.generic_visit(n))

    def visit_BinOp(self, n: ast.BinOp) -> ast.expr:
        return self._folded(self.generic_visit(n))

    def _folded(self, n: ast.expr) -> ast.expr:
        """A number where the expression is a constant (math.sqrt(2.0 / math.pi)), else n."""
        try:
            value = const(n, {})
        except (NotConstant, TypeError, ValueError, IndexError, KeyError):
            return n
        return literal(value, n) if isinstance(value, (int, float)) and not isinstance(value, bool) else n
