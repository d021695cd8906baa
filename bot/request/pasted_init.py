"""A pasted module's __init__ evaluated for the arguments it is made with: what it sets on self.

Each self.<name> becomes a constant, a Sub (an nn layer), a Seq (nn.Sequential / nn.ModuleList), a
Nested (an instance of a module class the paste defines, read the same way with its own
arguments), a Learned (an nn.Parameter) or an Opaque (what cannot be evaluated, refused where
forward reads it). __init__ is run statement by statement: loops over constants unrolled and
constant branches taken as it goes (bot.request.pasted_loops), layers kept in local names and lists
(`layers.append(...)`, `nn.Sequential(*layers)`), helper methods that build layers run with the
same self (`self.layer1 = self._make_layer(Block, 64, 2)`), and self.<constant> and class
attributes (`expansion = 4`, `block.expansion`) read where later statements use them.
"""
from __future__ import annotations

import ast
import copy
import dataclasses
import re

from bot import ir
from bot.generators.interface import GenerationError
from bot.request.pasted_constants import NotConstant, Opaque, assigned, const, literal, refuse_constant, returned_constant
from bot.request.pasted_inputs import made_shape, made_tensor
from bot.request.pasted_layers import Learned, Nested, Seq, Sub
from bot.request.pasted_loops import MAX_STATEMENTS, comprehended, expanded
from bot.request.torch_code import Inline, settled

MAX_DEPTH = 32          # nested module classes and helper methods, one inside another
# nn.Module methods that change how a built module runs: its mode (batch norm's statistics, dropout)
# or its dtype. A pasted module is read as torch builds it (training mode, float32 weights), so
# __init__ calling one is refused, not read past; train() and train(True) keep the mode it is in.
_MODE = {"eval", "train"}
_DTYPE = {"half", "double", "bfloat16", "float", "to", "type"}
_LAYER = (Sub, Seq, Nested)


def init_inputs(made: ast.FunctionDef | None, env: dict) -> list | None:
    """What get_init_inputs returns (None: the paste has none)."""
    if made is None:
        return None
    try:
        return list(returned_constant(made, env))
    except (NotConstant, TypeError) as e:
        node = e.node if isinstance(e, NotConstant) else made
        refuse_constant(node if hasattr(node, "lineno") else made, "get_init_inputs returns")


def init_arguments(init: ast.FunctionDef, given: list | None, keywords: dict, env: dict, cls: ast.ClassDef,
                   line: int | None = None, takes_self: bool = True) -> dict:
    """A function's parameters (after self, where it takes one) -> the values given (get_init_inputs',
    or a constructor or function call's on `line`), the defaults for the rest."""
    a = init.args
    params = [p.arg for p in a.args[1 if takes_self else 0:]]
    defaults = dict(zip(params[len(params) - len(a.defaults):], a.defaults))
    defaults.update({p.arg: d for p, d in zip(a.kwonlyargs, a.kw_defaults) if d is not None})
    given = given or []
    who, what = ("get_init_inputs", f"{cls.name}.__init__") if line is None else (f"the call on line {line}",
                                                                                f"{cls.name}.{init.name}")
    if len(given) > len(params) or set(keywords) - set(params) - {k.arg for k in a.kwonlyargs}:
        raise GenerationError(f"{who} gives {len(given)} values{' and ' + ', '.join(keywords) if keywords else ''} "
                              f"but {what} takes {len(params)} ({', '.join(params) or 'none'})")
    values = dict(zip(params, given)) | keywords
    for p in [*params, *(k.arg for k in a.kwonlyargs)]:
        if p in values:
            continue
        if p not in defaults:
            add = ("add get_init_inputs() returning its value (e.g. 'def get_init_inputs(): return "
                   f"[{p}]'), or a default") if line is None else f"give it in the call on line {line}"
            raise GenerationError(f"{what} takes {p}, which nothing gives: {add}")
        try:
            values[p] = const(defaults[p], env)
        except NotConstant:
            refuse_constant(defaults[p], f"the default of {p},")
    return values


def init_attributes(cls: ast.ClassDef | None, arguments: dict, env: dict) -> dict:
    """self.<name> -> what __init__, called with these arguments, sets it to."""
    init = _methods(cls).get("__init__") if cls else None
    if init is None:
        return {}
    attrs: dict = {}
    _Run(cls, attrs, env).body(init.body, {**env, **arguments})
    return attrs


def _constants(made: ast.Call, env: dict) -> tuple[tuple, dict] | None:
    """A call's positional and keyword arguments as constants (a **mapping left out); None where one
    is not a constant."""
    try:
        return tuple(const(a, env) for a in made.args), {k.arg: const(k.value, env) for k in made.keywords if k.arg}
    except NotConstant:
        return None


def _methods(cls: ast.ClassDef) -> dict[str, ast.FunctionDef]:
    return {m.name: m for m in cls.body if isinstance(m, ast.FunctionDef)}


def class_constants(cls: ast.ClassDef, env: dict) -> dict:
    """A class's own constant attributes (`expansion = 4` in its body)."""
    out = {}
    for stmt in cls.body:
        target, value = assigned(stmt)
        if isinstance(target, ast.Name):
            try:
                out[target.id] = const(value, env)
            except NotConstant:
                pass
    return out


class _Run:
    """__init__ (and the helper methods it calls) of one instance, run over constants."""

    def __init__(self, cls: ast.ClassDef, attrs: dict, env: dict, depth: int = 0):
        self.cls, self.attrs, self.env, self.depth = cls, attrs, env, depth
        self.methods = _methods(cls)
        self.own = class_constants(cls, env)

    def body(self, statements: list[ast.stmt], local: dict):
        """Run statements; the value a `return` gives (a helper method's), else None."""
        todo, seen = list(statements), 0
        while todo and seen < MAX_STATEMENTS:
            stmt, seen = todo.pop(0), seen + 1
            if _is_super_init(stmt) or isinstance(stmt, ast.Expr) and isinstance(stmt.value, ast.Constant):
                continue
            try:                       # a loop or branch over the constants bound so far: its statements next
                step = expanded(self.known_head(stmt, local), lambda e: const(e, local), lambda e: None)
            except GenerationError:
                step = None
            if step is not None:
                todo = step + todo
                continue
            if isinstance(stmt, ast.Return):
                return None if stmt.value is None else self.value(stmt.value, local, stmt.lineno)
            if isinstance(stmt, ast.FunctionDef):     # a helper defined in __init__ (def conv_bn(...))
                local[stmt.name] = stmt
                continue
            if self.mode(stmt):
                continue
            _refuse_run_changes(stmt)
            # a helper method called for what it sets (self._make_layers()): its statements read too
            if isinstance(stmt, ast.Expr) and isinstance(stmt.value, ast.Call) \
                    and self.helper(stmt.value, local, stmt.lineno) is not None:
                continue
            if not (_appended(stmt, local, self.attrs, lambda e: self.value(e, local, stmt.lineno), self)
                    or self.buffer(stmt, local) or self.assign(stmt, local) or self.tensor(stmt, local)):
                _unknown(stmt, local, self.attrs)
        for stmt in todo:
            _unknown(stmt, local, self.attrs)
        return None

    def known_head(self, stmt: ast.stmt, local: dict) -> ast.stmt:
        """A for's range or an if's test with what is known now written in (its body is read later,
        when what it reads may have changed)."""
        if isinstance(stmt, ast.For):
            return ast.For(stmt.target, _Known(self, local).visit(copy.deepcopy(stmt.iter)), stmt.body, stmt.orelse,
                           lineno=stmt.lineno)
        if isinstance(stmt, ast.If):
            return ast.If(_Known(self, local).visit(copy.deepcopy(stmt.test)), stmt.body, stmt.orelse,
                          lineno=stmt.lineno)
        return stmt

    def assign(self, stmt: ast.stmt, local: dict) -> bool:
        target, value = assigned(stmt)
        if isinstance(target, ast.Tuple) and isinstance(value, ast.Tuple) and len(target.elts) == len(value.elts) \
                and all(isinstance(t, (ast.Name, ast.Attribute)) for t in target.elts):
            # self.dim, self.base = dim, base: each bound to its value (all read before any is bound)
            values = [self.value(v, local, stmt.lineno) for v in value.elts]
            for t, v in zip(target.elts, values):
                if isinstance(t, ast.Attribute) and ast.unparse(t.value) == "self":
                    self.attrs[t.attr] = v
                elif isinstance(t, ast.Name) and not isinstance(v, Opaque):
                    local[t.id] = v
                else:
                    return False
            return True
        if isinstance(target, ast.Attribute) and ast.unparse(target.value) == "self":
            self.attrs[target.attr] = self.value(value, local, stmt.lineno)
            return True
        if isinstance(target, ast.Name):
            made = self.value(value, local, stmt.lineno)
            if not isinstance(made, Opaque):
                local[target.id] = made
                return True
        return False

    def mode(self, stmt: ast.stmt) -> bool:
        """self.eval(), self.<layer>.eval(), .train(False) or .train(): the layers set so far (or that
        one) in that mode from here on, as torch sets it (a batch norm's running statistics, dropout
        off). False where not such a call, or where it reaches a module class the paste defines (then
        refused, as before)."""
        call = stmt.value if isinstance(stmt, ast.Expr) and isinstance(stmt.value, ast.Call) else None
        if call is None or not isinstance(call.func, ast.Attribute) or call.func.attr not in _MODE:
            return False
        training, receiver = _training(call), ast.unparse(call.func.value)
        names = list(self.attrs) if receiver == "self" else [receiver[5:]] if receiver[:5] == "self." else []
        if training is None or not names or not all(n in self.attrs for n in names):
            return False
        moded = {n: _in_mode(self.attrs[n], training) for n in names}
        if any(m is None for m in moded.values()):
            return False
        self.attrs.update(moded)
        return True

    def buffer(self, stmt: ast.stmt, local: dict) -> bool:
        """self.register_buffer('name', tensor): a tensor the module holds, as a parameter is (the judge
        makes it, drawn like any input); a float tensor get_inputs' way of making tensors sizes (a
        mask, an int64 table or a value read off another tensor is unknown: Opaque)."""
        call = stmt.value if isinstance(stmt, ast.Expr) and isinstance(stmt.value, ast.Call) else None
        if call is None or ast.unparse(call.func) != "self.register_buffer" or len(call.args) < 2 \
                or not isinstance(call.args[0], ast.Constant) or not isinstance(call.args[0].value, str):
            return False
        name, made = call.args[0].value, _Known(self, local).visit(copy.deepcopy(call.args[1]))
        try:
            shape, dtype = made_tensor(made, local, "a buffer")
        except GenerationError:
            shape, dtype = _computed_shape(made, local), None
        float_made = shape is not None and dtype in (None, "float16", "bfloat16", "float32", "float64")
        self.attrs[name] = Learned(shape, stmt.lineno) if float_made else Opaque(stmt.lineno, ast.unparse(stmt)[:60])
        return True

    def tensor(self, stmt: ast.stmt, local: dict) -> bool:
        """name = a tensor computed from numbers alone (RoPE's inv_freq = 1.0 / (base ** (torch.arange(0,
        dim, 2).float() / dim))): kept as its expression, for a buffer made of it."""
        target, value = assigned(stmt)
        if not isinstance(target, ast.Name) or value is None:
            return False
        made = _Known(self, local).visit(copy.deepcopy(value))
        if _computed_shape(made, local) is None:
            return False
        local[target.id] = _Tensor(_numbers_written(made, local))
        return True

    def value(self, e: ast.expr, local: dict, line: int):
        """What an expression evaluates to: a constant, a layer, a helper method's result, or Opaque."""
        return _attribute(_Known(self, local).visit(copy.deepcopy(e)), local, line, self)

    def helper(self, e: ast.Call, local: dict, line: int):
        """A call of a helper method or of a function __init__ defines: the layer it returns; None
        for other calls."""
        if self.depth >= MAX_DEPTH:
            return None
        if isinstance(e.func, ast.Attribute) and ast.unparse(e.func.value) == "self" and e.func.attr in self.methods:
            return self.method(self.methods[e.func.attr], e, local, line, self.env, True)
        if isinstance(e.func, ast.Name) and isinstance(local.get(e.func.id), ast.FunctionDef):
            return self.method(local[e.func.id], e, local, line, local, False)
        return None

    def method(self, fn: ast.FunctionDef, made: ast.Call, local: dict, line: int, scope: dict, takes_self: bool):
        """A helper method of the class (run with the same self: it may set attributes too) or a
        function __init__ defines (run in __init__'s scope): the layer it returns."""
        given = _constants(made, local)
        if given is None:
            return Opaque(line, ast.unparse(made)[:60])
        arguments = init_arguments(fn, list(given[0]), given[1], local, self.cls, line, takes_self)
        returned = _Run(self.cls, self.attrs, self.env, self.depth + 1).body(fn.body, {**scope, **arguments})
        return Opaque(line, ast.unparse(made)[:60]) if returned is None else returned


@dataclasses.dataclass(frozen=True)
class _Tensor:
    """A tensor __init__ computes from numbers alone: its expression, those numbers written in."""
    expr: ast.expr


class _Written(ast.NodeTransformer):
    """Local names bound to numbers or to computed tensors written in as what they hold."""

    def __init__(self, local: dict):
        self.local = local

    def visit_Name(self, n: ast.Name) -> ast.expr:
        value = self.local.get(n.id)
        if isinstance(value, _Tensor):
            return copy.deepcopy(value.expr)
        return literal(value, n) if isinstance(value, (int, float)) and not isinstance(value, bool) else n


def _numbers_written(e: ast.expr, local: dict) -> ast.expr:
    return _Written(local).visit(copy.deepcopy(e))


def _computed_shape(e: ast.expr, local: dict) -> list[int] | None:
    """The shape of a tensor e computes from numbers alone (torch.arange, torch.ones and math on them,
    casts dropped), where the IR reads it; None otherwise."""
    try:
        tree, _ = settled(Inline({}).visit(_numbers_written(e, local)))
        return ir.constant_shape(ast.unparse(tree))
    except (ir.IRError, GenerationError, KeyError, ValueError, TypeError, IndexError, RecursionError):
        return None


class _Known(ast.NodeTransformer):
    """self.<constant> set earlier, the class's constant attributes (self.expansion), and a class's
    constants read through a name bound to it (block.expansion), written in as constants."""

    def __init__(self, run: _Run, local: dict):
        self.run, self.local = run, local

    def visit_Attribute(self, n: ast.Attribute) -> ast.expr:
        self.generic_visit(n)
        if not isinstance(n.value, ast.Name) or not isinstance(n.ctx, ast.Load):
            return n
        if n.value.id == "self":
            value = self.run.attrs.get(n.attr, self.run.own.get(n.attr, Opaque))
        else:
            bound = self.local.get(n.value.id)
            value = class_constants(bound, self.run.env).get(n.attr, Opaque) if isinstance(bound, ast.ClassDef) \
                else Opaque
        if isinstance(value, (int, float, str, tuple, list, bool)) or value is None:
            return literal(value, n)
        if isinstance(value, _LAYER):          # a layer set earlier, passed on (downsample=self.down)
            name = f"__self_{n.attr}"
            self.local[name] = value
            return ast.copy_location(ast.Name(name, ast.Load()), n)
        return n


def _training(call: ast.Call) -> bool | None:
    """The mode eval() or train(mode) sets: False, True, or None where mode is not written as a constant."""
    if call.func.attr == "eval":
        return False if not call.args and not call.keywords else None
    given = call.args[0] if call.args else next((k.value for k in call.keywords if k.arg == "mode"), ast.Constant(True))
    return given.value if isinstance(given, ast.Constant) and isinstance(given.value, bool) else None


def _in_mode(value, training: bool):
    """value with its layers in the mode (a Sub's flag; a Sequential's layers each); None for a module
    class the paste defines (its own layers not reached here); other values as they are."""
    if isinstance(value, Sub):
        return dataclasses.replace(value, training=training)
    if isinstance(value, Seq):
        layers = [_in_mode(layer, training) for layer in value.layers]
        return None if any(layer is None for layer in layers) else dataclasses.replace(value, layers=tuple(layers))
    return None if isinstance(value, Nested) else value


def _refuse_run_changes(stmt: ast.stmt) -> None:
    """Refuse a statement that changes how the module or one of its layers runs (_MODE, _DTYPE):
    x.eval() or x.half() on anything, a dtype move (.to, .float, .type) on self or its layers."""
    for t in ast.walk(stmt):
        if not (isinstance(t, ast.Call) and isinstance(t.func, ast.Attribute)) or t.func.attr not in _MODE | _DTYPE:
            continue
        receiver, method = ast.unparse(t.func.value), t.func.attr
        true = not t.args or isinstance(t.args[0], ast.Constant) and t.args[0].value is True
        kept = method == "train" and not t.keywords and true
        on_self = receiver == "self" or receiver.startswith("self.")
        if kept or not (method in _MODE or method in ("half", "double", "bfloat16") or on_self):
            continue
        what = "its mode (batch norm's statistics, dropout)" if method in _MODE else "its dtype"
        raise GenerationError(f"line {t.lineno}: {ast.unparse(t)[:60]} changes {what} after it is built; the "
                              "offline generator reads a pasted module as torch builds it (training mode, float32), "
                              "so it does not guess how this one runs. Remove the call, or write the layer as the "
                              "function it becomes (e.g. F.batch_norm(x, mean, var, training=False)).")


def _unknown(stmt: ast.stmt, local: dict, attrs: dict) -> None:
    """A statement not read: what it may set or grow is not known: self.<name> and local names it
    stores, and lists of layers it calls a method of (self.layers.insert(...)). Reading a layer's
    weight (nn.init.zeros_(self.fc.bias)) changes nothing the kernel reads: the judge makes the weights."""
    _refuse_run_changes(stmt)
    grown = {ast.unparse(t.func.value) for t in ast.walk(stmt) if isinstance(t, ast.Call)
             and isinstance(t.func, ast.Attribute)}
    for t in ast.walk(stmt):
        if isinstance(t, ast.Attribute) and ast.unparse(t.value) == "self" \
                and (isinstance(t.ctx, ast.Store) or isinstance(attrs.get(t.attr), Seq) and ast.unparse(t) in grown):
            attrs[t.attr] = Opaque(stmt.lineno, ast.unparse(stmt)[:60])
        elif isinstance(t, ast.Name) and (isinstance(t.ctx, ast.Store) or t.id in grown):
            local[t.id] = Opaque(stmt.lineno, ast.unparse(stmt)[:60])


def _appended(stmt: ast.stmt, local: dict, attrs: dict, value, run: _Run) -> bool:
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
    old, grown = held[key], None
    if len(call.args) == 1 and not call.keywords:
        made = value(call.args[0]) if call.func.attr == "append" else None
        grown = (made,) if isinstance(made, _LAYER) else \
            _layers([ast.Starred(call.args[0], ast.Load())], local, stmt.lineno, run) if call.func.attr == "extend" \
            else None
    if isinstance(old, Seq) and grown is not None:
        held[key] = Seq(old.layers + grown, old.line, old.callable)
    elif isinstance(old, list) and grown is not None and all(isinstance(x, _LAYER) for x in old):
        held[key] = [*old, *grown]
    else:
        held[key] = Opaque(stmt.lineno, ast.unparse(stmt)[:60])
    return True


def _nested(cls: ast.ClassDef, made: ast.Call, env: dict, line: int, run: _Run) -> Nested | Opaque:
    """An instance of a module class the paste defines: its attributes for the constructor's arguments
    (evaluated where it is made, env), its __init__ run in the module's scope (run.env)."""
    methods, given = _methods(cls), _constants(made, env)
    if given is None or "forward" not in methods or len(given[1]) != len(made.keywords) or run.depth >= MAX_DEPTH:
        return Opaque(line, ast.unparse(made)[:60])
    init = methods.get("__init__")
    arguments = init_arguments(init, list(given[0]), given[1], env, cls, line) if init else {}
    attrs: dict = {}
    if init is not None:
        _Run(cls, attrs, run.env, run.depth + 1).body(init.body, {**run.env, **arguments})
    return Nested(cls.name, methods["forward"], attrs, line)


def _layers(args: list[ast.expr], env: dict, line: int, run: _Run) -> tuple[Sub | Seq | Nested, ...] | None:
    """The layers a Sequential or ModuleList is given (each written, a list, `*layers`, or a list
    comprehension over constants); None where one is not a layer I can read."""
    out: list = []
    for a in args:
        if isinstance(a, ast.Starred):
            listed = _listed(a.value, env, line, run)
            if listed is None:
                return None
            out += listed
        else:
            out.append(_attribute(a, env, line, run))
    return tuple(out) if all(isinstance(x, _LAYER) for x in out) else None


def _listed(e: ast.expr, env: dict, line: int, run: _Run) -> list | None:
    if isinstance(e, (ast.List, ast.Tuple)):
        return [_attribute(x, env, line, run) for x in e.elts]
    if isinstance(e, ast.Name) and isinstance(env.get(e.id), list):
        return list(env[e.id])
    try:
        made = comprehended(e, lambda x: const(x, env), lambda x: None)
        return None if made is None else [_attribute(x, env, line, run) for x in made]
    except GenerationError:
        return None


def _is_super_init(stmt: ast.stmt) -> bool:
    return isinstance(stmt, ast.Expr) and isinstance(stmt.value, ast.Call) and \
        re.fullmatch(r"super\((\w+, self)?\)\.__init__", ast.unparse(stmt.value.func)) is not None


def _attribute(value: ast.expr, env: dict, line: int, run: _Run):
    """What value evaluates to in env: a constant, a layer (run: the instance whose helpers it may
    call), or Opaque."""
    try:
        return const(value, env)
    except NotConstant:
        pass
    made = run.helper(value, env, line) if isinstance(value, ast.Call) else None
    if made is not None:
        return made
    if isinstance(value, ast.Call) and ast.unparse(value.func) in ("nn.Parameter", "torch.nn.Parameter") and value.args:
        made = value.args[0]
        if isinstance(made, ast.Call) and ast.unparse(made.func) == "torch.tensor":
            try:                     # a 0-d parameter of a number: one element, broadcast as the 0-d one is
                const(made.args[0], env)
                return Learned([1], line)
            except (NotConstant, IndexError):
                pass
        return Learned(made_shape(made, env, "a parameter"), line)
    if isinstance(value, ast.Call) and isinstance(value.func, ast.Name) and isinstance(env.get(value.func.id), ast.ClassDef):
        return _nested(env[value.func.id], value, env, line, run)
    kind = ast.unparse(value.func).removeprefix("torch.").removeprefix("nn.") if isinstance(value, ast.Call) else ""
    if kind in ("Sequential", "ModuleList") and not value.keywords and (kind == "Sequential" or len(value.args) <= 1):
        layers = _layers([ast.Starred(a, ast.Load()) if kind == "ModuleList" else a for a in value.args], env, line,
                         run)
        return Opaque(line, ast.unparse(value)[:60]) if layers is None else Seq(layers, line, kind == "Sequential")
    if isinstance(value, (ast.List, ast.Tuple)):              # [block(...), block(...)]: a list of layers
        items = _listed(value, env, line, run)
        if items and all(isinstance(x, _LAYER) for x in items):
            return items
    if isinstance(value, ast.Call) and (path := ast.unparse(value.func)).split(".")[0] in ("nn", "torch") \
            and "." in path:
        given = _constants(value, env)
        if given is not None:
            return Sub(path.rsplit(".", 1)[1], *given, line)
    return Opaque(line, ast.unparse(value)[:60])
