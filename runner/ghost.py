"""Ghost replay's source: the kernel file with every @triton.jit body made a no-op.

The judge runs this ghost on the inputs the kernel was checked on. Its launcher, allocations and
launches are the kernel's own; only the Triton code is gone. An output that still matches the
reference means the answer came from somewhere other than the kernel's Triton code (torch
through a path the static check missed, a cache, the reference's own memory), and the kernel is
rejected. Trusted code: an ast transform of the text, run in the judge; nothing of it executes.
"""
from __future__ import annotations

import ast


def _is_jit(decorator: ast.expr) -> bool:
    target = decorator.func if isinstance(decorator, ast.Call) else decorator
    if isinstance(target, ast.Attribute):
        return target.attr == "jit"
    return isinstance(target, ast.Name) and target.id == "jit"


def ghost_source(source: str) -> tuple[str, int]:
    """(the source with every @triton.jit function's body replaced by `pass`, how many were
    emptied). Raises SyntaxError for text that does not parse."""
    tree = ast.parse(source)
    emptied = 0
    for node in ast.walk(tree):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and any(map(_is_jit, node.decorator_list)):
            node.body = [ast.Pass()]
            emptied += 1
    return ast.unparse(ast.fix_missing_locations(tree)), emptied


def jit_names(source: str) -> frozenset[str]:
    """The names of the source's @triton.jit functions: what its compiled kernels are called."""
    return frozenset(node.name for node in ast.walk(ast.parse(source))
                     if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef))
                     and any(map(_is_jit, node.decorator_list)))


def conclusive(expected) -> bool:
    """Whether a matching ghost proves anything: an output that is one value everywhere (all False,
    all zeros) could be matched by memory that was never written."""
    if isinstance(expected, tuple):                 # several outputs: any one that varies proves it
        return any(conclusive(t) for t in expected)
    flat = expected.reshape(-1)
    return flat.numel() > 1 and not bool((flat == flat[0]).all())
