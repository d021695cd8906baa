"""Every catalog operator (bot/catalog.py): its request parses to the intended expression, and
the offline generator's kernel passes the trusted harness, under the interpreter at small sizes
here and on a GPU (all dtypes, bf16 included) where one is present."""
from __future__ import annotations

import json

import pytest

from bot import catalog, integrity, ir, lower_torch
from bot.ops import registry
from bot.ops.entry import ALL_DTYPES
from bot.request import parse_request
from bot.spec import parse_expression
from runner.verify import verify

IDS = [e.name for e in catalog.ENTRIES]
# Under the interpreter the harness runs one entry of each family (its generated tests and the judge
# are the family's; the other entries' kernels are checked in tests/ops); on a GPU, every entry.
ONE_PER_FAMILY = list({ir.kind(ir.parse(e.expression)): e for e in reversed(catalog.ENTRIES)}.values())[::-1]


def same_expression(a: str, b: str) -> bool:
    return ir.to_text(ir.parse(a)) == ir.to_text(ir.parse(b))


def generate(tmp_path, request: str) -> dict:
    spec, _ = parse_request(request)
    node = parse_expression(spec)
    (tmp_path / "spec.json").write_text(json.dumps(spec))
    (tmp_path / "reference.py").write_text(lower_torch.reference_source(spec, node))
    kernel = registry.kernel_source(spec, node, {})
    assert not integrity.check(kernel, spec["name"]), integrity.report(integrity.check(kernel, spec["name"]))
    (tmp_path / "kernel.py").write_text(kernel)
    return spec


def harness(tmp_path, backend: str) -> dict:
    return verify(tmp_path / "spec.json", tmp_path / "reference.py", tmp_path / "kernel.py", backend=backend)


@pytest.mark.parametrize("entry", catalog.ENTRIES, ids=IDS)
def test_catalog_requests_parse_to_their_expressions(entry):
    for size in ("big", "small"):
        spec, _ = parse_request(entry.request(size))
        assert same_expression(spec["expression"], entry.expression), (entry.request(size), spec["expression"])


@pytest.mark.parametrize("entry", ONE_PER_FAMILY, ids=[e.name for e in ONE_PER_FAMILY])
def test_catalog_kernels_pass_the_harness_under_the_interpreter(entry, tmp_path):
    generate(tmp_path, entry.request("small"))
    result = harness(tmp_path, "cpu")
    assert result["status"] == "pass", (result["summary"], result.get("correctness"))


@pytest.mark.gpu
@pytest.mark.parametrize("entry", catalog.ENTRIES, ids=IDS)
def test_catalog_kernels_pass_the_harness_on_the_gpu(entry, tmp_path):
    generate(tmp_path, entry.request("small", dtypes="fp32" if entry.dtypes == "fp32" else ALL_DTYPES))
    result = harness(tmp_path, "cuda")
    assert result["status"] == "pass", (result["summary"], result.get("correctness"))
