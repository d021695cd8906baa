"""The name allocator: which variable name generated code gives each input.

A generated file uses names of its own (`offs`, `mask`, `out`, helper functions) and names derived
from each input's (`x_ptr`, `x_rs`). Rather than keep lists of the former by hand, the file is
first rendered with a probe name per input and for the operator, and the names it then uses are
read back from its syntax tree: an input keeps its own name unless that name, or one derived from
it, would meet a name bound at module level or used in a function where the input appears, or
another input's. The file is then rendered with the names allocated here."""
from __future__ import annotations

import ast
import re
from typing import Callable

_PROBE = re.compile(r"kb(\d+|OP)Q(\w*)")


def probe(k: int | str) -> str:
    """The probe name of input k (or of the operator, k='OP')."""
    return f"kb{k}Q"


def scopes(source: str) -> tuple[set[str], list[set[str]]]:
    """(the names bound at module level, the names each top-level function uses or binds)."""
    tree = ast.parse(source)
    module, functions = set(), []
    for node in tree.body:
        if isinstance(node, ast.FunctionDef):
            module.add(node.name)
            functions.append({n.id for n in ast.walk(node) if isinstance(n, ast.Name)}
                             | {a.arg for n in ast.walk(node) if isinstance(n, ast.arguments)
                                for a in [*n.posonlyargs, *n.args, *n.kwonlyargs, n.vararg, n.kwarg] if a})
        elif isinstance(node, (ast.Import, ast.ImportFrom)):
            module |= {(a.asname or a.name).split(".")[0] for a in node.names}
        elif isinstance(node, (ast.Assign, ast.AnnAssign)):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            module |= {n.id for t in targets for n in ast.walk(t) if isinstance(n, ast.Name)}
    return module, functions


def allocate(names: list[str], operator: str | None, render: Callable[[dict[str, str], str], str]) -> dict[str, str]:
    """Input name -> the name the file renders it as. render(locals, operator name) writes the file
    (operator None: the file defines no function of the operator's name). Raises ValueError when
    the operator's own name is one the file needs."""
    module, functions = scopes(render({n: probe(k) for k, n in enumerate(names)}, probe("OP")))
    everything = module.union(*functions)
    own = {w for w in everything if not _PROBE.fullmatch(w)}
    derived = {k: {m.group(2) for w in everything if (m := _PROBE.fullmatch(w)) and m.group(1) == k}
               for k in [str(i) for i in range(len(names))] + ["OP"]}
    if operator and (operator in own or any(operator + s in own for s in derived["OP"])):
        raise ValueError(f"operator name {operator!r} clashes with a name the generated code uses; rename the operator")
    taken = {operator + s for s in derived["OP"]} if operator else set()
    out: dict[str, str] = {}
    for k, name in enumerate(names):
        forms = derived[str(k)] | {""}
        mine = re.compile(rf"{probe(k)}\w*")
        near = module.union(*(f for f in functions if any(mine.fullmatch(w) for w in f))) - set(everything - own)
        local = name
        while any(local + s in taken or local + s in near for s in forms) or (local != name and local in names):
            local += "_in"
        taken |= {local + s for s in forms}
        out[name] = local
    return out
