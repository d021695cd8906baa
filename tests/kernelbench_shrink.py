"""Shrunk copies of KernelBench-layout problem files, for checking them on Triton's interpreter (CPU):
the module-level size constants (ints above 16, alone or in tuples: batch_size, in_features, height,
input_shape = (32768,)) are halved, the largest first and equal ones together (extents down to 4,
channels down to 16), until every tensor get_inputs gives and every
learned tensor of Model(*get_init_inputs()) has at most --max-elements elements, and forward still runs. Small ints (dims,
kernel sizes, strides, groups) and everything else in the file stay as written; shapes are read on
torch's meta device, so no full-size tensor is ever made.

    python tests/kernelbench_shrink.py PATH/level1 OUT/level1 [--max-elements 65536]

Then: TRITON_INTERPRET=1 python tests/kernelbench_check.py OUT/level1 --device cpu
"""
from __future__ import annotations

import argparse
import ast
import math
import re
import sys
from pathlib import Path

import torch

SMALLEST = 16           # ints up to this are dims, kernel sizes, strides: never changed
# constants named for a tensor's extent may go down to FLOOR; others (channels, groups, pooling sizes) to SMALLEST
EXTENT = re.compile(r"batch|height|width|depth|length|seq|^[nmkldhw]$|^dim\d|_dim$|shape|size$", re.I)
FLOOR = 4


def _sizes(tree: ast.Module) -> dict[ast.Constant, int]:
    """The size constants of the module's top-level assignments (nodes to rewrite in place), each
    with the least value it may take."""
    found = {}
    for stmt in tree.body:
        if not isinstance(stmt, ast.Assign):
            continue
        for target in stmt.targets:         # height = width = 512: either name's
            value = stmt.value
            pairs = zip(target.elts, value.elts) if isinstance(target, ast.Tuple) and isinstance(value, ast.Tuple) \
                else [(target, value)]
            for name, expr in pairs:
                least = FLOOR if isinstance(name, ast.Name) and EXTENT.search(name.id) and "kernel" not in name.id \
                    else SMALLEST
                for n in ast.walk(expr):
                    if isinstance(n, ast.Constant) and type(n.value) is int and n.value > SMALLEST:
                        found[n] = min(least, found.get(n, least))
    return found


def _largest_tensor(source: str, forward: bool = True) -> int:
    """The most elements any input or learned tensor of the problem has, made on the meta device;
    with forward, after running the module on them there (a size that no longer fits raises)."""
    scope: dict = {"__name__": "kernelbench_problem"}
    with torch.device("meta"):
        exec(compile(source, "<problem>", "exec"), scope)
        tensors = [t for t in scope["get_inputs"]() if isinstance(t, torch.Tensor)]
        model = scope["Model"](*scope["get_init_inputs"]())
        if forward:
            model(*scope["get_inputs"]())
    return max(t.numel() for t in [*tensors, *model.parameters(), *model.buffers()])


def shrunk(source: str, max_elements: int) -> str:
    """source with its size constants halved until _largest_tensor is at most max_elements (or none
    can shrink further: a constant whose halving breaks the module, groups no longer dividing its
    channels, keeps its value)."""
    tree = ast.parse(source)
    least = _sizes(tree)
    try:                        # a forward the meta device cannot run is not checked
        forward = bool(_largest_tensor(source))
    except Exception:
        forward = False
    while _largest_tensor(ast.unparse(tree), forward) > max_elements:
        movable = [c for c in least if c.value > least[c]]
        if not movable:
            break
        top = max(c.value for c in movable)     # every constant of that value together: equal sizes stay equal
        group = [c for c in movable if c.value == top]
        for c in group:
            c.value = max(least[c], math.ceil(top / 2))
        try:
            _largest_tensor(ast.unparse(tree), forward)
        except Exception:
            for c in group:
                c.value, least[c] = top, top
    return ast.unparse(tree)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("folder", type=Path)
    ap.add_argument("out", type=Path)
    ap.add_argument("--max-elements", type=int, default=65536)
    args = ap.parse_args(argv)
    args.out.mkdir(parents=True, exist_ok=True)
    for path in sorted(args.folder.glob("*.py")):
        try:
            (args.out / path.name).write_text(shrunk(path.read_text(), args.max_elements))
        except Exception as e:          # a file that does not build is copied as it is: the check names it
            print(f"{path.name}: not shrunk ({type(e).__name__}: {e})", file=sys.stderr)
            (args.out / path.name).write_text(path.read_text())
    return 0


if __name__ == "__main__":
    sys.exit(main())
