"""Specs and generated files in tests: a validated spec from an expression and shapes, and
generated files imported the way the runner's harness does, each a module of its own named
after the test's temp dir so modules of different tests never collide."""
from __future__ import annotations

import importlib.util

from bot import ir
from bot.spec import validate


def make_spec(expression: str, shapes: dict[str, list[list[int]]], dtypes=("float32", "float16"),
              name: str = "op") -> dict:
    """A validated spec; class-index inputs are int64 (validate names what they index)."""
    domains = ir.domains(ir.parse(expression))
    inputs = [{"name": n, "dtypes": ["int64"] * len(dtypes) if domains[n] == "index" else list(dtypes),
               "shapes": s, "domain": domains[n]} for n, s in shapes.items()]
    return validate({"name": name, "expression": expression, "inputs": inputs})


def load(tmp_path, filename: str, source: str):
    """Write source to tmp_path/filename and import it."""
    path = tmp_path / filename
    path.write_text(source)
    module_spec = importlib.util.spec_from_file_location(f"{tmp_path.name}_{path.stem}", path)
    module = importlib.util.module_from_spec(module_spec)
    module_spec.loader.exec_module(module)
    return module
