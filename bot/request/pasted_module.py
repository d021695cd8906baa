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
import copy
import re
from dataclasses import dataclass, field

from bot.generators.interface import GenerationError
from bot.request.pasted_constants import (NotConstant, Opaque, assigned, const, literal, module_constants,
                                          refuse_constant, returned_constant)
from bot.request.pasted_inputs import INDEX, MASK, made_shape, read_inputs
from bot.request.pasted_layers import Param, Seq, Sub, layer_call
from bot.request.pasted_loops import MAX_STATEMENTS, expanded, unrolled


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
    todo, seen = list(init.body), 0
    while todo and seen < MAX_STATEMENTS:
        stmt, seen = todo.pop(0), seen + 1
        if _is_super_init(stmt) or isinstance(stmt, ast.Expr) and isinstance(stmt.value, ast.Constant):
            continue
        try:                       # a loop or branch over the constants bound so far: its statements next
            step = expanded(stmt, lambda e: const(e, local), lambda e: None)
        except GenerationError:
            step = None
        if step is not None:
            todo = step + todo
            continue
        if _appended(stmt, local, attrs):
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
        _unknown(stmt, local, attrs)
    for stmt in todo:
        _unknown(stmt, local, attrs)
    return attrs


def _unknown(stmt: ast.stmt, local: dict, attrs: dict) -> None:
    """A statement not read: what it may set or grow is not known: self.<name> and local names it
    stores, and lists of layers it calls a method of (self.layers.insert(...)). Reading a layer's
    weight (nn.init.zeros_(self.fc.bias)) changes nothing the kernel reads: the judge makes the weights."""
    grown = {ast.unparse(t.func.value) for t in ast.walk(stmt) if isinstance(t, ast.Call)
             and isinstance(t.func, ast.Attribute)}
    for t in ast.walk(stmt):
        if isinstance(t, ast.Attribute) and ast.unparse(t.value) == "self" \
                and (isinstance(t.ctx, ast.Store) or isinstance(attrs.get(t.attr), Seq) and ast.unparse(t) in grown):
            attrs[t.attr] = Opaque(stmt.lineno, ast.unparse(stmt)[:60])
        elif isinstance(t, ast.Name) and (isinstance(t.ctx, ast.Store) or t.id in grown):
            local[t.id] = Opaque(stmt.lineno, ast.unparse(stmt)[:60])


def _appended(stmt: ast.stmt, local: dict, attrs: dict) -> bool:
    """`self.layers.append(layer)` / `.extend([...])` on a module list, or `layers.append(...)` on a
    local list of layers (later nn.Sequential(*layers)): the list grown; False for other statements.
    Growing what is not a list of layers makes it unknown (Opaque)."""
    call = stmt.value if isinstance(stmt, ast.Expr) and isinstance(stmt.value, ast.Call) else None
    if call is None or not isinstance(call.func, ast.Attribute) or call.func.attr not in ("append", "extend"):
        return False
    path = ast.unparse(call.func.value)
    held = attrs if path.startswith("self.") else local
    key = path[5:] if path.startswith("self.") else path
    if not re.fullmatch(r"\w+", key) or key not in held:
        return False
    old = held[key]
    grown = _layers([ast.Starred(call.args[0], ast.Load()) if call.func.attr == "extend" else call.args[0]],
                    local, stmt.lineno) if len(call.args) == 1 and not call.keywords else None
    if isinstance(old, Seq) and grown is not None:
        held[key] = Seq(old.layers + grown, old.line, old.callable)
    elif isinstance(old, list) and grown is not None and all(isinstance(x, (Sub, Seq)) for x in old):
        held[key] = [*old, *grown]
    else:
        held[key] = Opaque(stmt.lineno, ast.unparse(stmt)[:60])
    return True


def _layers(args: list[ast.expr], env: dict, line: int) -> tuple[Sub | Seq, ...] | None:
    """The layers a Sequential or ModuleList is given (each written, a list, `*layers`, or a list
    comprehension over constants); None where one is not a layer I can read."""
    out: list = []
    for a in args:
        if isinstance(a, ast.Starred):
            listed = _listed(a.value, env, line)
            if listed is None:
                return None
            out += listed
        else:
            out.append(_attribute(a, env, line))
    return tuple(out) if all(isinstance(x, (Sub, Seq)) for x in out) else None


def _listed(e: ast.expr, env: dict, line: int) -> list | None:
    if isinstance(e, (ast.List, ast.Tuple)):
        return [_attribute(x, env, line) for x in e.elts]
    if isinstance(e, ast.Name) and isinstance(env.get(e.id), list):
        return list(env[e.id])
    if isinstance(e, ast.ListComp) and len(e.generators) == 1 and not e.generators[0].ifs:
        gen, out = e.generators[0], []
        loop = ast.For(gen.target, gen.iter, [ast.Expr(e.elt)], [], lineno=line)
        try:
            for stmt in unrolled([loop], lambda x: const(x, env), lambda x: None):
                out.append(_attribute(stmt.value, env, line))
        except GenerationError:
            return None
        return out
    return None


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
    kind = ast.unparse(value.func).removeprefix("torch.").removeprefix("nn.") if isinstance(value, ast.Call) else ""
    if kind in ("Sequential", "ModuleList") and not value.keywords and (kind == "Sequential" or len(value.args) <= 1):
        layers = _layers([ast.Starred(a, ast.Load()) if kind == "ModuleList" else a for a in value.args], env, line)
        return Opaque(line, ast.unparse(value)[:60]) if layers is None else Seq(layers, line, kind == "Sequential")
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

class _Present(ast.NodeTransformer):
    """self.<layer or parameter> as a name bound to a present object, for a constant test."""

    def __init__(self, paths: set[str]):
        self.paths = paths

    def visit_Attribute(self, n: ast.Attribute) -> ast.expr:
        return ast.Name("__present__", ast.Load()) if ast.unparse(n) in self.paths else self.generic_visit(n)


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
        """forward as a plain function of its tensors and then the learned tensors it reads, its loops
        unrolled and its branches on constants taken."""
        body = [self.visit(s) for s in unrolled(forward.body, self._value, self._modules)
                if not (isinstance(s, ast.Expr) and isinstance(s.value, ast.Constant))]
        names = [a.arg for a in forward.args.args[1:]] + [p.name for p in self.params]
        args = ast.arguments(posonlyargs=[], args=[ast.arg(n) for n in names], kwonlyargs=[], kw_defaults=[], defaults=[])
        fn = ast.FunctionDef("forward", args, body, [], None, type_params=[])
        return ast.fix_missing_locations(fn)

    def _value(self, e: ast.expr):
        """A loop's range or a branch's test: its value, with self.<layer or parameter> standing for
        a present object (`if self.bias is not None`); NotConstant where it reads anything else."""
        present = {f"self.{k}" for k, v in self.attrs.items() if isinstance(v, (Sub, Seq, Learned))}
        held = _Present(present).visit(copy.deepcopy(e))
        return const(self.visit(held), {"__present__": object()})

    def _modules(self, e: ast.expr) -> list[ast.expr] | None:
        """self.<module list>'s layers as self.<attr>[k], for a loop over it."""
        seq = self.attrs.get(e.attr) if isinstance(e, ast.Attribute) and ast.unparse(e.value) == "self" else None
        if not isinstance(seq, Seq):
            return None
        return [ast.Subscript(copy.deepcopy(e), ast.Constant(k), ast.Load()) for k in range(len(seq.layers))]

    def visit_Attribute(self, n: ast.Attribute) -> ast.expr:
        if ast.unparse(n.value) != "self":
            return self._folded(self.generic_visit(n))
        value = self.attrs.get(n.attr)
        if n.attr not in self.attrs:
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
            return self._layer(sub, f.attr, n)
        if isinstance(f, ast.Subscript) and isinstance(f.value, ast.Attribute) and ast.unparse(f.value.value) == "self" \
                and isinstance(seq := self.attrs.get(f.value.attr), Seq):
            k = self._value(f.slice)
            if not isinstance(k, int) or not -len(seq.layers) <= k < len(seq.layers):
                raise GenerationError(f"line {n.lineno}: {ast.unparse(f)} is not one of the {len(seq.layers)} layers "
                                      f"of self.{f.value.attr} (set on line {seq.line})")
            k %= len(seq.layers)
            return self._layer(seq.layers[k], f"{f.value.attr}.{k}", n)
        return self._folded(self.generic_visit(n))

    def _layer(self, layer: Sub | Seq, path: str, n: ast.Call) -> ast.expr:
        args = [self.visit(a) for a in n.args]
        call, params = layer_call(layer, path, args, [self.visit(k) for k in n.keywords], n.lineno, self._name)
        self.params += [p for p in params if p not in self.params]      # a layer called twice: its tensors once
        return call

    def visit_IfExp(self, n: ast.IfExp) -> ast.expr:
        """`a if <constant> else b`: the branch taken (the other's layers are not read)."""
        try:
            taken = self._value(n.test)
        except (NotConstant, TypeError, ValueError, GenerationError):
            return self.generic_visit(n)
        return self.visit(n.body if taken else n.orelse)

    def visit_BinOp(self, n: ast.BinOp) -> ast.expr:
        return self._folded(self.generic_visit(n))

    def _folded(self, n: ast.expr) -> ast.expr:
        """A number where the expression is a constant (math.sqrt(2.0 / math.pi)), else n."""
        try:
            value = const(n, {})
        except (NotConstant, TypeError, ValueError, IndexError, KeyError):
            return n
        return literal(value, n) if isinstance(value, (int, float)) and not isinstance(value, bool) else n
