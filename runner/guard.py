"""What the harness refuses to import: a generated file (kernel.py, reference.py) that writes any
object's attributes, reaches them by name or through the interpreter, or moves work off the
caller's stream.

Both files run in the harness's own process, where `torch.cuda.Event.elapsed_time = ...`,
`setattr(triton.testing, "do_bench", ...)` or an import of the runner's own modules would fake
the measurement, and a launch on another stream would slip past the events that bracket the call.
The check reads the text (ast), so nothing of the file runs before it; bot.integrity applies the
same findings to kernels before they reach a runner (with stricter rules of its own).
"""
from __future__ import annotations

import ast
from typing import NamedTuple

# torch.cuda's names (on any object, so `from torch import cuda` and aliases are caught too) that
# would run work beside the caller's stream and device, where the harness records its events, or
# time it by events of its own.
CLOCK_ESCAPES = frozenset({"stream", "Stream", "set_stream", "ExternalStream", "StreamContext", "Event", "graph",
                           "graphs", "CUDAGraph", "make_graphed_callables", "set_device"})
# Ways to write objects without naming the attribute, or to run text as code ...
REACH_CALLS = frozenset({"setattr", "delattr", "vars", "globals", "locals", "exec", "eval", "compile", "__import__"})
REACH_ATTRIBUTES = frozenset({"__dict__", "__setattr__", "__delattr__", "__globals__", "__code__", "__builtins__",
                              "__closure__", "__defaults__", "__kwdefaults__"})
# ... and modules that hold the harness's process state (sys.modules, the runner itself).
REACH_MODULES = frozenset({"runner", "sys", "gc", "ctypes", "importlib", "inspect", "builtins"})


class Finding(NamedTuple):
    line: int
    rule: str       # patch | reach | clock
    message: str

    def __str__(self) -> str:
        return f"line {self.line}: {self.message}"


def findings(source: str) -> list[Finding]:
    """Every attribute write, reach or clock escape in source, in line order; [] for text that does
    not parse (the import then reports the syntax error itself)."""
    try:
        tree = ast.parse(source)
    except SyntaxError:
        return []
    return scan(tree)


def scan(tree: ast.AST) -> list[Finding]:
    """findings() of a parsed file (for a caller that has already parsed it)."""
    found = [f for node in ast.walk(tree) for f in _patch(node) + _reach(node) + _clock(node)]
    return sorted(set(found), key=lambda f: (f.line, f.message))     # "assigns" before "uses" on a line


def summary(found: list[Finding]) -> str:
    """The first finding, and how many more there are."""
    more = f" (and {len(found) - 1} more)" if len(found) > 1 else ""
    return f"{found[0]}{more}"


def _patch(node: ast.AST) -> list[Finding]:
    # On any object: a name can hold a module, a class or a function the runner uses.
    if isinstance(node, ast.Attribute) and isinstance(node.ctx, (ast.Store, ast.Del)):
        verb = "deletes" if isinstance(node.ctx, ast.Del) else "assigns"
        return [Finding(node.lineno, "patch", f"{verb} {ast.unparse(node)[:60]}: generated code may not change any "
                                              "object's attributes (torch's clock, Triton's launcher, the "
                                              "harness's checks must stay as the runner loaded them)")]
    return []


def _reach(node: ast.AST) -> list[Finding]:
    if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id in REACH_CALLS:
        what = f"calls {node.func.id}()"
    elif isinstance(node, ast.Attribute) and node.attr in REACH_ATTRIBUTES:
        what = f"uses {node.attr}"
    elif bad := [m for m in _imported(node) if m.startswith(".") or m.split(".")[0] in REACH_MODULES]:
        what = f"imports {bad[0]}"
    else:
        return []
    return [Finding(node.lineno, "reach", f"{what}: generated code may not reach objects by name, through the "
                                          "interpreter or in the runner's own modules")]


def _imported(node: ast.AST) -> list[str]:
    if isinstance(node, ast.Import):
        return [a.name for a in node.names]
    return ["." * node.level + (node.module or "")] if isinstance(node, ast.ImportFrom) else []


def _clock(node: ast.AST) -> list[Finding]:
    if isinstance(node, ast.Attribute) and node.attr in CLOCK_ESCAPES:
        return [Finding(node.lineno, "clock", f"uses {ast.unparse(node)[:60]}: generated code runs on the caller's "
                                              "stream and device, where the harness's clock sees its work (no "
                                              "other stream, event, graph or device)")]
    return []
