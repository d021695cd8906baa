"""The registry of operator families (bot.ops.registry): every family has the whole interface, owns
its ops alone, and the IR driver, both lowerings and the catalog reach each family through it."""
from __future__ import annotations

import inspect

import pytest

from bot import ir, lower_torch
from bot.ops import registry
from bot.spec import parse_expression, validate

INTERFACE = ("NAME", "OPS", "ROOT", "SUPPORTED", "ALIASES", "KEYWORDS", "WORDS", "OUTPUT_DTYPES", "ENTRIES",
             "convert", "check", "output_shape", "kernel_source", "reference_property")


@pytest.mark.parametrize("family", registry.FAMILIES, ids=lambda f: f.NAME)
def test_every_family_has_the_whole_interface(family):
    missing = [n for n in INTERFACE if not hasattr(family, n)]
    assert not missing, f"{family.__name__} lacks {missing}"
    if family.ROOT:         # its ops written over their body, or like any op over their operands
        assert hasattr(family, "torch_result") or family.OPS <= set(getattr(family, "TORCH_OPS", {}))
    assert family.__name__ == f"bot.ops.{family.NAME}"
    assert list(inspect.signature(family.kernel_source).parameters) == ["spec", "node", "options"]
    assert all(kind and op for _, kind, op in family.WORDS)
    assert set(family.OUTPUT_DTYPES) <= family.OPS


def test_each_op_has_one_owner():
    owners: dict[str, str] = {}
    for family in registry.FAMILIES:
        for op in family.OPS:
            assert op not in owners, f"{op} is owned by {owners[op]} and {family.NAME}"
            owners[op] = family.NAME
    assert set(registry.ALIASES.values()) <= registry.FUNCTIONS


@pytest.mark.parametrize("entry", registry.ENTRIES, ids=lambda e: e.name)
def test_each_catalog_entry_is_lowered_by_the_family_that_lists_it(entry):
    family = next(f for f in registry.FAMILIES if entry in f.ENTRIES)
    assert registry.family(ir.parse(entry.expression)) is family


@pytest.mark.parametrize("expression, kind, shapes", [
    ("relu(x) + y", "pointwise", {"x": [4, 8], "y": [8]}),
    ("sum(x, dim=0)", "reduce", {"x": [4, 8]}),
    ("argmin(x, dim=1)", "argreduce", {"x": [4, 8]}),
    ("log_softmax(x * 2.0)", "softmax", {"x": [4, 8]}),
    ("layernorm(x, w, b, eps=1e-5)", "norm", {"x": [4, 8], "w": [8], "b": [8]}),
    ("cross_entropy(z, t)", "loss", {"z": [4, 8], "t": [4]}),
    ("gelu(a @ b + bias)", "matmul", {"a": [4, 16], "b": [16, 8], "bias": [8]}),
    ("x.transpose(0, 1)", "layout", {"x": [4, 8]}),
    ("embedding(t, x)", "gather", {"x": [4, 8], "t": [4]}),
])
def test_both_lowerings_reach_the_family(expression, kind, shapes):
    inputs = [{"name": n, "dtypes": ["int64" if n == "t" else "float16"], "shapes": [s],
               **({"domain": "index"} if n == "t" else {})} for n, s in shapes.items()]
    spec = validate({"name": "op", "expression": expression, "inputs": inputs})
    node = parse_expression(spec)
    assert ir.kind(node) == kind
    assert "def op(" in registry.kernel_source(spec, node, {})
    assert "def op(" in lower_torch.reference_source(spec, node)


def test_the_supported_line_is_assembled_from_the_families():
    text = registry.supported_text()
    assert all(family.SUPPORTED[1] in text for family in registry.FAMILIES)
    assert text.startswith("pointwise: ") and "over any one dim: sum, mean, max, min, any, all, argmax, argmin" in text
