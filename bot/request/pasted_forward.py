"""A pasted module's forward as one plain function (stage 1): self.<constant> and module-level
constants written in, each submodule call written as the function it computes, constant
subexpressions folded, loops unrolled and constant branches taken (bot.request.pasted_loops).

A submodule of a class the paste defines itself (a ResNet block, an Inception branch) is inlined:
its forward's statements are resolved against its own attributes and placed before the statement
that calls it, its locals renamed apart, its parameters bound to the call's arguments, and its
learned tensors named by their path in the whole module ('layer1.0.conv1.weight'), which is where
the judge binds them.
"""
from __future__ import annotations

import ast
import copy

from bot.generators.interface import GenerationError
from bot.request.pasted_constants import NotConstant, Opaque, const, folded, literal
from bot.request.pasted_layers import Learned, Nested, Param, Seq, Sub, functional
from bot.request.pasted_loops import unrolled


class Resolver(ast.NodeTransformer):
    """forward resolved against its module's attributes (attrs: self.<name> -> a constant, a Sub, a
    Seq, a Nested, a Learned or an Opaque); prefix: the module's path in the pasted one ('layer1.0.')."""

    def __init__(self, env: dict, attrs: dict, shadowed: set[str], prefix: str = "", root: Resolver | None = None,
                 methods: dict[str, Nested] | None = None):
        self.env, self.attrs, self.shadowed, self.prefix = env, attrs, shadowed, prefix
        self.methods = methods or {}                # the module's own other methods (self._norm(x)), inlined
        self.root = root or self
        if root is None:
            self.params: list[Param] = []           # learned tensors the submodule calls take, as inputs
            self.names: dict[str, str] = {}         # their paths ('fc.weight') -> input names ('fc_weight')
            self.inlined = 0                        # nested forwards inlined so far: their locals' suffix
        self.hoisted: list[ast.stmt] = []           # a nested forward's statements, before the one calling it

    def _name(self, path: str) -> str:
        names = self.root.names
        if path not in names:
            name = path.replace(".", "_")
            while name in self.root.shadowed or name in names.values():
                name += "_"
            names[path] = name
        return names[path]

    def _take(self, params: list[Param]) -> None:
        self.root.params += [p for p in params if p not in self.root.params]   # a layer called twice: once

    def function(self, forward: ast.FunctionDef, tensors: list[str]) -> ast.FunctionDef:
        """forward as a plain function of its tensors and then the learned tensors it reads."""
        names = list(tensors)
        body = self.statements(forward.body)
        args = ast.arguments(posonlyargs=[], args=[ast.arg(n) for n in names + [p.name for p in self.params]],
                             kwonlyargs=[], kw_defaults=[], defaults=[])
        return ast.fix_missing_locations(ast.FunctionDef("forward", args, body, [], None, type_params=[]))

    def statements(self, body: list[ast.stmt]) -> list[ast.stmt]:
        """body unrolled and resolved, each nested forward's statements before the one calling it."""
        out: list[ast.stmt] = []
        for s in unrolled(copy.deepcopy(body), self._value, self._modules):   # resolved in place: a copy
            if isinstance(s, ast.Expr) and isinstance(s.value, ast.Constant):
                continue
            resolved = self.visit(s)
            out += self.hoisted + [resolved]
            self.hoisted = []
        return out

    def _value(self, e: ast.expr):
        """A loop's range or a branch's test: its value, with self.<layer or parameter> standing for
        a present object (`if self.bias is not None`); NotConstant where it reads anything else."""
        present = {f"self.{k}" for k, v in self.attrs.items() if isinstance(v, (Sub, Seq, Nested, Learned))}
        held = _Present(present, self.attrs).visit(copy.deepcopy(e))
        known = {k: v for k, v in self.env.items() if k not in self.shadowed and v is None}   # mask=None
        return const(self.visit(held), {**known, "__present__": object()})

    def _modules(self, e: ast.expr) -> list[ast.expr] | None:
        """self.<module list>'s layers (or a slice's: self.layers[1:]) as self.<attr>[k], for a loop over it."""
        whole = e.value if isinstance(e, ast.Subscript) and isinstance(e.slice, ast.Slice) else e
        seq = self.attrs.get(whole.attr) if isinstance(whole, ast.Attribute) and ast.unparse(whole.value) == "self" \
            else None
        if not isinstance(seq, Seq):
            return None
        ks = range(len(seq.layers))
        if whole is not e:
            bounds = [None if b is None else self._value(b) for b in (e.slice.lower, e.slice.upper, e.slice.step)]
            ks = ks[slice(*bounds)]
        return [ast.Subscript(copy.deepcopy(whole), ast.Constant(k), ast.Load()) for k in ks]

    def visit_Attribute(self, n: ast.Attribute) -> ast.expr:
        if ast.unparse(n.value) != "self":
            return folded(self.generic_visit(n))
        value = self.attrs.get(n.attr)
        if n.attr == "training" and n.attr not in self.attrs:
            return ast.copy_location(ast.Constant(True), n)     # the judge runs the module as made: training
        if n.attr not in self.attrs:
            raise GenerationError(f"line {n.lineno}: forward reads self.{n.attr}, which __init__ does not set "
                                  "(paste the class with its __init__ and get_init_inputs, or write the value)")
        if isinstance(value, Opaque):
            raise GenerationError(f"line {n.lineno}: self.{n.attr} is set on line {value.line} by {value.text!r}, "
                                  "which is not a constant I can evaluate")
        if isinstance(value, (Sub, Seq, Nested)):
            cls = value.cls if isinstance(value, (Sub, Nested)) else "Sequential"
            raise GenerationError(f"line {n.lineno}: self.{n.attr} is {cls}, used here other than by "
                                  f"calling it; write {n.attr}'s call, self.{n.attr}(x)")
        if isinstance(value, Learned):      # a Parameter of the module itself: an input like a layer's weight
            path = self.prefix + n.attr
            param = Param(self._name(path), path, value.shape)
            self._take([param])
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
            if sub is None and f.attr in self.methods:
                return self._inline(self.methods[f.attr], f.attr, [self.visit(a) for a in n.args],
                                    [self.visit(k) for k in n.keywords], n.lineno, self.prefix)
            if isinstance(sub, Opaque):
                raise GenerationError(f"line {n.lineno}: self.{f.attr} is set on line {sub.line} by {sub.text!r}, "
                                      "which is not a layer I can read")
            if not isinstance(sub, (Sub, Seq, Nested)):
                what = "a method of the class" if sub is None else "not a submodule"
                raise GenerationError(f"line {n.lineno}: self.{f.attr}(...) calls {what}; write what it computes "
                                      "in forward itself")
            return self._apply(sub, f.attr, [self.visit(a) for a in n.args], [self.visit(k) for k in n.keywords],
                               n.lineno)
        if isinstance(f, ast.Subscript) and isinstance(f.value, ast.Attribute) and ast.unparse(f.value.value) == "self" \
                and isinstance(seq := self.attrs.get(f.value.attr), Seq):
            k = self._value(f.slice)
            if not isinstance(k, int) or not -len(seq.layers) <= k < len(seq.layers):
                raise GenerationError(f"line {n.lineno}: {ast.unparse(f)} is not one of the {len(seq.layers)} layers "
                                      f"of self.{f.value.attr} (set on line {seq.line})")
            k %= len(seq.layers)
            return self._apply(seq.layers[k], f"{f.value.attr}.{k}", [self.visit(a) for a in n.args],
                               [self.visit(k) for k in n.keywords], n.lineno)
        return folded(self.generic_visit(n))

    def _apply(self, layer: Sub | Seq | Nested, attr: str, args: list[ast.expr], keywords: list[ast.keyword],
               line: int) -> ast.expr:
        """A submodule's call on args: a layer's function, a Sequential's chain, a nested forward."""
        if isinstance(layer, Nested):
            return self._inline(layer, attr, args, keywords, line)
        if isinstance(layer, Sub):
            call, params = functional(layer, self.prefix + attr, args, keywords, line, self._name)
            self._take(params)
            return call
        if not layer.callable:
            raise GenerationError(f"line {line}: {attr} is an nn.ModuleList (set on line {layer.line}), which is "
                                  f"not called; call its layers (`for layer in self.{attr}: x = layer(x)`)")
        if len(args) != 1 or keywords:
            raise GenerationError(f"line {line}: nn.Sequential (set on line {layer.line}) takes one tensor, got "
                                  f"{len(args) + len(keywords)} arguments")
        x = args[0]
        for k, each in enumerate(layer.layers):
            x = self._apply(each, f"{attr}.{k}", [x], [], line)
        return x

    def _inline(self, nested: Nested, attr: str, args: list[ast.expr], keywords: list[ast.keyword],
                line: int, prefix: str | None = None) -> ast.expr:
        """A nested module's forward (or, prefix given, a method of this module's own): its statements
        hoisted (locals renamed apart), its result returned."""
        fn = nested.forward
        params = [a.arg for a in fn.args.args[1:]]
        bound = _bound(fn, params, args, keywords, nested, line)
        tensors = {p: e for p, e in bound.items() if not isinstance(e, ast.Constant)}
        local = {p: e.value for p, e in bound.items() if isinstance(e, ast.Constant)}
        self.root.inlined += 1
        suffix = f"__{self.root.inlined}"
        mine = set(tensors) | assigned_names(fn)
        own = prefix is not None
        inner = Resolver({**self.env, **local}, nested.attrs, mine, prefix if own else f"{self.prefix}{attr}.",
                         self.root, self.methods if own else None)
        body = inner.statements(fn.body)
        returned = next((s for s in body if isinstance(s, ast.Return)), None)
        if returned is None or returned.value is None or isinstance(returned.value, ast.Tuple):
            raise GenerationError(f"line {fn.lineno}: {nested.cls}.{fn.name} must return one tensor to be inlined "
                                  f"where line {line} calls it")
        rename = _Rename({name: name + suffix for name in mine})
        # the arguments are the caller's expressions: bound to the renamed parameters, not renamed themselves
        self.hoisted += [ast.Assign([ast.Name(p + suffix, ast.Store())], e) for p, e in tensors.items()]
        self.hoisted += [rename.visit(copy.deepcopy(s)) for s in body[:body.index(returned)]]
        return rename.visit(copy.deepcopy(returned.value))

    def visit_IfExp(self, n: ast.IfExp) -> ast.expr:
        """`a if <constant> else b`: the branch taken (the other's layers are not read)."""
        try:
            taken = self._value(n.test)
        except (NotConstant, TypeError, ValueError, GenerationError):
            return self.generic_visit(n)
        return self.visit(n.body if taken else n.orelse)

    def visit_BinOp(self, n: ast.BinOp) -> ast.expr:
        return folded(self.generic_visit(n))



def _bound(fn: ast.FunctionDef, params: list[str], args: list[ast.expr], keywords: list[ast.keyword],
           nested: Nested, line: int) -> dict[str, ast.expr]:
    """forward's parameters -> the call's arguments, or the defaults (constants) it leaves."""
    if len(args) > len(params) or any(k.arg not in params for k in keywords):
        raise GenerationError(f"line {line}: {nested.cls}.{fn.name} takes {', '.join(params)}; the call gives "
                              f"{len(args)} arguments and {', '.join(k.arg or '**' for k in keywords) or 'no keywords'}")
    bound = dict(zip(params, args)) | {k.arg: k.value for k in keywords}
    defaults = dict(zip(params[len(params) - len(fn.args.defaults):], fn.args.defaults))
    for p in params:
        if p not in bound:
            if p not in defaults or not isinstance(defaults[p], ast.Constant):
                raise GenerationError(f"line {line}: {nested.cls}.{fn.name}'s {p} is not given by the call")
            bound[p] = defaults[p]
    return bound


def assigned_names(fn: ast.FunctionDef) -> set[str]:
    """The names a function binds: by assignment, augmented assignment or as a loop's variable."""
    return {t.id for n in ast.walk(fn) if isinstance(n, (ast.Assign, ast.AnnAssign, ast.AugAssign, ast.For))
            for t in ast.walk(n.targets[0] if isinstance(n, ast.Assign) else n.target) if isinstance(t, ast.Name)}


class _Present(ast.NodeTransformer):
    """For a constant test: self.<layer or parameter> as a name bound to a present object,
    len(self.<module list>) and hasattr(self, '<name>') as the numbers and truths they are."""

    def __init__(self, paths: set[str], attrs: dict):
        self.paths, self.attrs = paths, attrs

    def visit_Attribute(self, n: ast.Attribute) -> ast.expr:
        return ast.Name("__present__", ast.Load()) if ast.unparse(n) in self.paths else self.generic_visit(n)

    def visit_Call(self, n: ast.Call) -> ast.expr:
        f, args = ast.unparse(n.func), n.args
        if f == "len" and len(args) == 1 and isinstance(args[0], ast.Attribute) and ast.unparse(args[0].value) == "self" \
                and isinstance(seq := self.attrs.get(args[0].attr), Seq):
            return ast.copy_location(ast.Constant(len(seq.layers)), n)
        if f == "hasattr" and len(args) == 2 and ast.unparse(args[0]) == "self" and isinstance(args[1], ast.Constant):
            return ast.copy_location(ast.Constant(args[1].value in self.attrs), n)
        return self.generic_visit(n)


class _Rename(ast.NodeTransformer):
    def __init__(self, names: dict[str, str]):
        self.names = names

    def visit_Name(self, n: ast.Name) -> ast.expr:
        return ast.copy_location(ast.Name(self.names[n.id], n.ctx), n) if n.id in self.names else n
