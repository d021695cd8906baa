"""Integrity of a kernel.py, checked statically before it is ever executed.

A kernel from the LLM or from a person's edit must compute in Triton: it defines at least
one @triton.jit function and launches it from the entry function (named after the spec).
Outside the @triton.jit functions the file may allocate and reshape tensors, but must not
compute with torch, catch exceptions (a fallback path), introspect the interpreter, or touch
files, sockets and subprocesses. Nowhere may it change an object's attributes or move work to
another stream, event, graph or device, out of the harness's clock (runner.guard's findings,
which the harness checks again before it imports any generated file). docs/INTEGRITY.md states
the rules for people; this module is their definition. Pure: parses the text with ast, imports
neither torch nor triton.

The check reads names, not types, and errs on the strict side. A tensor is a parameter of
the entry function, a torch allocation, or anything made from a tensor by an allowed method
or by indexing; a helper's parameter is a tensor where the entry path passes it one.
Arithmetic, comparisons and computing methods on a tensor outside @triton.jit are torch math.
"""
from __future__ import annotations

import ast
from dataclasses import dataclass

from runner import guard

# torch.<name> that allocate tensors, and other torch.<name> that describe or place them.
TORCH_ALLOCATORS = frozenset({"empty", "empty_like", "empty_strided", "zeros", "zeros_like", "ones",
                              "ones_like", "full", "full_like"})
TORCH_ALLOWED = TORCH_ALLOCATORS | frozenset({
    "broadcast_shapes", "Size", "device", "dtype", "Tensor", "is_tensor", "is_floating_point", "finfo", "iinfo",
    "promote_types", "result_type", "get_default_dtype", "no_grad", "inference_mode", "cuda",
    "float16", "half", "bfloat16", "float32", "float", "float64", "double", "int8", "int16", "int32", "int64",
    "long", "int", "uint8", "bool",
})
# Tensor methods that describe a tensor (the result is not a tensor) ...
TENSOR_DESCRIBE = frozenset({"size", "stride", "dim", "ndimension", "numel", "nelement", "element_size",
                             "data_ptr", "is_contiguous", "storage_offset", "get_device", "is_floating_point"})
# ... and those that allocate, reshape or cast one. Any other method on a tensor computes.
TENSOR_MAKE = frozenset({
    "contiguous", "view", "view_as", "reshape", "reshape_as", "expand", "expand_as", "broadcast_to", "flatten",
    "unflatten", "unsqueeze", "squeeze", "permute", "transpose", "t", "movedim", "new_empty",
    "new_empty_strided", "new_zeros", "new_ones", "new_full", "to", "float", "half", "bfloat16", "double",
    "type", "cuda", "cpu", "detach", "clone", "zero_", "fill_",
})
# Methods that compute on whatever they are called on, e.g. a helper's parameter of unknown type.
MATH_METHODS = frozenset({
    "add", "add_", "sub", "sub_", "mul", "mul_", "div", "div_", "matmul", "mm", "bmm", "addmm", "baddbmm",
    "dot", "einsum", "sum", "mean", "prod", "exp", "exp_", "log", "log_", "sqrt", "rsqrt", "pow", "pow_",
    "abs", "neg", "relu", "relu_", "sigmoid", "tanh", "softmax", "log_softmax", "clamp", "clamp_", "clip",
    "amax", "amin", "maximum", "minimum", "where", "masked_fill", "masked_fill_", "erf", "gelu", "silu",
    "norm", "var", "std", "cumsum", "sort", "topk", "argmax", "argmin", "sin", "cos", "sign", "reciprocal",
    "square", "lerp", "addcmul", "addcdiv", "copy_", "scatter", "gather", "index_select", "masked_select",
    "logsumexp", "softplus", "hardswish", "leaky_relu",
})
IMPORTS_ALLOWED = frozenset({"__future__", "torch", "triton", "math", "typing", "functools", "itertools",
                             "dataclasses", "enum", "numbers", "collections", "time", "warnings"})
CALLS_FORBIDDEN = {
    "eval": "runs text as code", "exec": "runs text as code", "compile": "compiles text as code",
    "__import__": "imports by name at run time", "globals": "introspects the module",
    "locals": "introspects the frame", "vars": "introspects objects", "getattr": "looks names up at run time",
    "setattr": "changes objects by name", "delattr": "changes objects by name", "open": "touches files",
    "breakpoint": "stops in a debugger", "input": "reads stdin",
}
FRAME_ATTRIBUTES = frozenset({"_getframe", "f_back", "f_globals", "f_locals", "f_builtins", "gi_frame",
                              "tb_frame", "cr_frame"})
DUNDERS_ALLOWED = frozenset({"__name__", "__doc__", "__init__"})
BUILTIN_MATH = frozenset({"abs", "sum", "max", "min", "pow", "round", "divmod"})
COMPARE_OPS = (ast.Eq, ast.NotEq, ast.Lt, ast.LtE, ast.Gt, ast.GtE)   # `x is None` does not compute


@dataclass(frozen=True)
class Violation:
    line: int
    rule: str            # syntax | jit | launch | import | torch | fallback | introspection | io | patch | clock
    message: str

    def __str__(self) -> str:
        return f"line {self.line}: {self.message}" if self.line else self.message


def check(source: str, entry: str | None = None) -> list[Violation]:
    """Every rule kernel.py breaks, in line order; empty when it passes. entry: the spec's name
    (the launcher); None takes the last module-level function that is not @triton.jit."""
    try:
        tree = ast.parse(source)
    except SyntaxError as e:
        return [Violation(e.lineno or 0, "syntax", f"not valid Python: {e.msg}")]
    module = _Module(tree, entry)
    # The runner refuses these too; its "reach" findings are a subset of the stricter import and
    # introspection rules here, so they would only repeat them.
    guarded = [Violation(*f) for f in guard.scan(tree) if f.rule != "reach"]
    return sorted(set(module.structure() + module.rules() + guarded), key=lambda v: (v.line, v.message))


def report(violations: list[Violation], limit: int = 12) -> str:
    """The violations for people and for the model: one line each, after what the rules want."""
    lines = [f"- {v}" for v in violations[:limit]]
    if len(violations) > limit:
        lines.append(f"- ... and {len(violations) - limit} more")
    return ("kernel.py breaks the integrity rules (docs/INTEGRITY.md): the result must be computed by "
            "@triton.jit code that the entry function launches.\n" + "\n".join(lines))


class _Module:
    def __init__(self, tree: ast.Module, entry: str | None) -> None:
        self.tree = tree
        self.functions = {n.name: n for n in tree.body if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef))}
        imported = [(a, n) for n in ast.walk(tree) if isinstance(n, (ast.Import, ast.ImportFrom)) for a in n.names]
        self.jit_names = {"triton.jit"} | {a.asname or a.name for a, n in imported
                                           if isinstance(n, ast.ImportFrom) and n.module == "triton"
                                           and a.name == "jit"}
        self.torch_names = {a.asname or a.name for a, n in imported if isinstance(n, ast.Import) and a.name == "torch"}
        self.modules = {(a.asname or a.name).split(".")[0] for a, n in imported if isinstance(n, ast.Import)}
        self.jit = {name for name, fn in self.functions.items() if any(map(self._is_jit, fn.decorator_list))}
        self.jit_nodes = {id(n) for name in self.jit for n in ast.walk(self.functions[name])}
        plain = [name for name in self.functions if name not in self.jit]
        self.wanted = entry
        self.entry = entry if entry is not None else (plain[-1] if plain else None)
        if self.entry not in self.functions or self.entry in self.jit:
            self.entry = None

    def _is_jit(self, decorator: ast.expr) -> bool:
        target = decorator.func if isinstance(decorator, ast.Call) else decorator
        return _dotted(target) in self.jit_names

    # ---------------------------------------------------------------- jit, entry and launch

    def structure(self) -> list[Violation]:
        if not self.jit:
            return [Violation(0, "jit", "no @triton.jit function: the kernel must be written in Triton")]
        if self.entry is None:
            wanted = f"`def {self.wanted}(...)`" if self.wanted else "an entry function"
            return [Violation(0, "launch", f"no {wanted} that is a plain Python launcher: the entry must be a "
                                           "module-level function with the reference's name and signature")]
        if not any(self._launches(self.functions[f]) for f in self._entry_path()):
            example = sorted(self.jit)[0]
            return [Violation(self.functions[self.entry].lineno, "launch",
                              f"{self.entry} never launches a @triton.jit function (expected e.g. "
                              f"`{example}[grid](...)` in {self.entry} or in a helper it calls)")]
        return []

    def _entry_path(self) -> list[str]:
        """The entry function and every module-level non-jit function it reaches by name."""
        seen: list[str] = []
        todo = [self.entry]
        while todo:
            name = todo.pop()
            if name in seen:
                continue
            seen.append(name)
            todo += [n.id for n in ast.walk(self.functions[name])
                     if isinstance(n, ast.Name) and n.id in self.functions and n.id not in self.jit]
        return seen

    def _launches(self, fn: ast.AST) -> bool:
        kernels = set(self.jit)
        for _ in range(3):                       # `kernel = a_kernel if small else b_kernel`, aliases of aliases
            for node in ast.walk(fn):
                if isinstance(node, ast.Assign) and _names(node.value) & kernels:
                    kernels |= {t.id for t in node.targets if isinstance(t, ast.Name)}
        return any(isinstance(n, ast.Call) and isinstance(n.func, ast.Subscript) and _names(n.func.value) & kernels
                   for n in ast.walk(fn))

    # ---------------------------------------------------------------- rules outside @triton.jit

    def rules(self) -> list[Violation]:
        found: list[Violation] = []
        tensors = self._tensor_names()
        for node in ast.walk(self.tree):
            found += _import_rule(node) + _introspection_rule(node)
            if id(node) in self.jit_nodes:
                continue
            found += self._torch_rule(node) + _fallback_rule(node)
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                found += self._math_rule(node, tensors.get(node.name, set()))
        return found

    def _tensor_names(self) -> dict[str, set[str]]:
        """Per module-level function on the entry path: the names that hold tensors."""
        if self.entry is None:
            return {}
        positions: dict[str, set[int]] = {self.entry: set(range(len(self.functions[self.entry].args.args)))}
        out: dict[str, set[str]] = {}
        for _ in range(4):                       # helpers calling helpers: a few passes reach the fixpoint
            for name, tensor_args in list(positions.items()):
                fn = self.functions[name]
                out[name] = names = _local_tensors(fn, {a.arg for i, a in enumerate(fn.args.args) if i in tensor_args})
                for call in (n for n in ast.walk(fn) if isinstance(n, ast.Call) and isinstance(n.func, ast.Name)):
                    if call.func.id in self.functions and call.func.id not in self.jit:
                        hit = {i for i, a in enumerate(call.args) if _is_tensor(a, names)}
                        positions.setdefault(call.func.id, set()).update(hit)
        return out

    def _torch_rule(self, node: ast.AST) -> list[Violation]:
        """torch.X outside @triton.jit: only allocation, dtypes, devices (torch.cuda.*) and shape helpers."""
        if not (isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name)
                and node.value.id in self.torch_names) or node.attr in TORCH_ALLOWED:
            return []
        what = {"ops": "calls aten ops directly (torch.ops)", "nn": "uses torch.nn"}.get(node.attr,
                                                                                       f"uses torch.{node.attr}")
        return [Violation(node.lineno, "torch", f"{what}: outside @triton.jit, torch may only allocate and "
                                                "reshape tensors (torch.empty, torch.zeros, .view, .contiguous)")]

    def _math_rule(self, fn: ast.AST, tensors: set[str]) -> list[Violation]:
        found = []
        for n in ast.walk(fn):
            what = _computes(n, tensors, self.modules)
            if what:
                found.append(Violation(n.lineno, "torch", f"{what} outside @triton.jit: torch would compute the "
                                                          "result, not the kernel"))
        return found


def _dotted(node: ast.AST) -> str:
    """'torch.nn.functional.relu' for that attribute chain; '' when it is not a plain chain."""
    parts = []
    while isinstance(node, ast.Attribute):
        parts.append(node.attr)
        node = node.value
    return ".".join([node.id, *reversed(parts)]) if isinstance(node, ast.Name) else ""


def _names(node: ast.AST) -> set[str]:
    return {n.id for n in ast.walk(node) if isinstance(n, ast.Name)}


def _import_rule(node: ast.AST) -> list[Violation]:
    if isinstance(node, ast.ImportFrom) and node.module == "torch" and node.level == 0:
        bad = [a.name for a in node.names if a.name not in TORCH_ALLOWED]
        return [Violation(node.lineno, "torch", f"imports {', '.join(bad)} from torch: only allocation, dtypes "
                                                "and devices may come from torch")] if bad else []
    if isinstance(node, ast.Import):
        modules = [a.name for a in node.names]
    elif isinstance(node, ast.ImportFrom):
        modules = ["." * node.level + (node.module or "")]
    else:
        return []
    return [Violation(node.lineno, "import", f"imports {m}: kernel.py may import only torch, triton, math and "
                                             "a few harmless standard modules (no torch submodules, files, "
                                             "processes or introspection)")
            for m in modules if m.split(".")[0] not in IMPORTS_ALLOWED or m.startswith("torch.")]


def _introspection_rule(node: ast.AST) -> list[Violation]:
    if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id in CALLS_FORBIDDEN:
        rule = "io" if node.func.id in ("open", "input") else "introspection"
        return [Violation(node.lineno, rule, f"calls {node.func.id}(), which {CALLS_FORBIDDEN[node.func.id]}")]
    name = node.attr if isinstance(node, ast.Attribute) else node.id if isinstance(node, ast.Name) else ""
    if name in FRAME_ATTRIBUTES or (name.startswith("__") and name.endswith("__") and name not in DUNDERS_ALLOWED):
        return [Violation(node.lineno, "introspection", f"uses {name}, which reaches into the interpreter")]
    return []


def _fallback_rule(node: ast.AST) -> list[Violation]:
    if isinstance(node, ast.Try) and node.handlers:
        return [Violation(node.lineno, "fallback", "catches exceptions: a kernel that fails must fail, not fall "
                                                   "back to another path")]
    return []


def _computes(n: ast.AST, tensors: set[str], modules: set[str]) -> str | None:
    """What n computes on a tensor, if it does: arithmetic, comparison, element writes, math calls."""
    def t(e: ast.AST) -> bool:
        return _is_tensor(e, tensors)

    if isinstance(n, ast.BinOp) and (t(n.left) or t(n.right)) or isinstance(n, ast.UnaryOp) and t(n.operand):
        return f"tensor arithmetic `{ast.unparse(n)[:60]}`"
    if isinstance(n, ast.AugAssign) and (t(n.target) or t(n.value)):
        return f"in-place tensor arithmetic `{ast.unparse(n)[:60]}`"
    if isinstance(n, ast.Compare) and any(isinstance(op, COMPARE_OPS) for op in n.ops) \
            and any(map(t, [n.left, *n.comparators])):
        return f"a tensor comparison `{ast.unparse(n)[:60]}`"
    if isinstance(n, ast.Assign) and any(isinstance(e, ast.Subscript) and t(e.value) for e in n.targets):
        return "writing tensor elements by indexing"
    if isinstance(n, ast.Call) and isinstance(n.func, ast.Name) and n.func.id in BUILTIN_MATH and any(map(t, n.args)):
        return f"{n.func.id}() on a tensor"
    if isinstance(n, ast.Call) and isinstance(n.func, ast.Attribute):
        method, target = n.func.attr, n.func.value
        if t(target) and method not in TENSOR_DESCRIBE | TENSOR_MAKE:
            return f"the tensor method .{method}()"
        if method in MATH_METHODS and _dotted(target).split(".")[0] not in modules:
            return f"the method .{method}()"
    return None


def _local_tensors(fn: ast.AST, params: set[str]) -> set[str]:
    """params plus the names fn assigns a tensor to (two passes, for assignments in loops)."""
    names = set(params)
    for _ in range(2):
        for node in ast.walk(fn):
            for target, value in _assignments(node):
                if isinstance(target, ast.Name) and _is_tensor(value, names):
                    names.add(target.id)
    return names


def _assignments(node: ast.AST) -> list[tuple[ast.AST, ast.AST]]:
    """(target, value) pairs, with `a, b = x.f(), y.f()` paired element by element."""
    if isinstance(node, ast.AnnAssign) and node.value is not None:
        return [(node.target, node.value)]
    if not isinstance(node, ast.Assign):
        return []
    pairs = []
    for target in node.targets:
        if isinstance(target, ast.Tuple) and isinstance(node.value, ast.Tuple) \
                and len(target.elts) == len(node.value.elts):
            pairs += list(zip(target.elts, node.value.elts))
        else:
            pairs.append((target, node.value))
    return pairs


def _is_tensor(node: ast.AST, tensors: set[str]) -> bool:
    if isinstance(node, ast.Name):
        return node.id in tensors
    if isinstance(node, ast.Subscript):
        return _is_tensor(node.value, tensors)
    if isinstance(node, ast.Attribute):
        return node.attr in ("T", "mT", "H") and _is_tensor(node.value, tensors)
    if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute):
        if isinstance(node.func.value, ast.Name) and node.func.value.id == "torch":
            return node.func.attr in TORCH_ALLOCATORS
        return node.func.attr in TENSOR_MAKE and _is_tensor(node.func.value, tensors)
    return False
