"""Specs and generated files in tests: a validated spec from an expression and shapes, what a
parsed request's spec holds, and generated files imported the way the runner's harness does,
each a module of its own named after the test's temp dir so modules of different tests never
collide."""
from __future__ import annotations

import importlib.util

import pytest

from bot import ir
from bot.generators.interface import GenerationError
from bot.request import parse_request
from bot.spec import validate


def canon(expression: str) -> str:
    """An expression in ir's canonical spelling, so equal expressions compare equal."""
    return ir.to_text(ir.parse(expression))


def expr(spec: dict) -> str:
    return canon(spec["expression"])


def shapes(spec: dict) -> dict[str, list[list[int]]]:
    return {i["name"]: i["shapes"] for i in spec["inputs"]}


def error(text: str, feedback=()) -> str:
    """The message parse_request refuses the request with."""
    with pytest.raises(GenerationError) as e:
        parse_request(text, feedback)
    return str(e.value)


def make_spec(expression: str, shapes: dict[str, list[list[int]]], dtypes=("float32", "float16"),
              name: str = "op", masks: tuple[str, ...] = ()) -> dict:
    """A validated spec; class-index inputs are int64 (validate names what they index), inputs named
    in masks bool masks."""
    domains = ir.domains(ir.parse(expression))

    def held(n: str) -> list[str]:
        return ["int64" if domains[n] == "index" else "bool" if n in masks else d for d in dtypes]

    inputs = [{"name": n, "dtypes": held(n), "shapes": s, "domain": domains[n]} for n, s in shapes.items()]
    return validate({"name": name, "expression": expression, "inputs": inputs})


def load(tmp_path, filename: str, source: str):
    """Write source to tmp_path/filename and import it."""
    path = tmp_path / filename
    path.write_text(source)
    module_spec = importlib.util.spec_from_file_location(f"{tmp_path.name}_{path.stem}", path)
    module = importlib.util.module_from_spec(module_spec)
    module_spec.loader.exec_module(module)
    return module
