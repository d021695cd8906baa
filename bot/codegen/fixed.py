"""Fixed helpers that generated files carry: functions kept as real .py files (imported and
linted by the tests), copied into generated code by name. The file is read as text, never
imported here: a bot-only host has no triton."""
from __future__ import annotations

import ast
import functools
from pathlib import Path


@functools.cache
def functions(path: Path) -> dict[str, tuple[str, frozenset[str]]]:
    """name -> (source from its decorator to its last line, the names it reads: calls, kernels launched
    as f[grid](...) or handed to _launch), in file order."""
    text = path.read_text()
    lines = text.splitlines(keepends=True)
    out = {}
    for node in ast.parse(text).body:
        if isinstance(node, ast.FunctionDef):
            start = (node.decorator_list[0].lineno if node.decorator_list else node.lineno) - 1
            names = {n.id for n in ast.walk(node) if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Load)}
            out[node.name] = ("".join(lines[start:node.end_lineno]), frozenset(names))
    return out


def sources(path: Path, used: set[str]) -> list[str]:
    """The sources of the functions named in `used` and of those they call, in file order."""
    table = functions(path)
    needed, todo = set(), [n for n in used if n in table]
    while todo:
        name = todo.pop()
        if name not in needed:
            needed.add(name)
            todo += [c for c in table[name][1] if c in table]
    return [source for name, (source, _) in table.items() if name in needed]
