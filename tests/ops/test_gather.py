"""The gather family (bot.ops.gather): index_select, embedding lookup and gather, as generated kernel.py
files run under Triton's interpreter against the generated reference (exact: values are moved, not
computed), the index inputs' spec fields computed from the expression, drawn in range by the runner,
and pasted modules with nn.Embedding read as the lookup they are."""
from __future__ import annotations

import json
import textwrap

import pytest
import torch
from generated import error, load

from bot import ir, lower_torch, testgen
from bot.generators.interface import GenerationError
from bot.request import parse_request
from bot.spec import parse_expression, validate
from runner import inputs, protocol, worker

CASES = [
    ("torch.index_select(x, 1, idx)", {"x": [3, 37, 5], "idx": [11]}),
    ("x.index_select(0, idx)", {"x": [37, 45], "idx": [70]}),         # more indices than rows: repeats
    ("x.index_select(-1, idx)", {"x": [4, 6, 9], "idx": [5]}),        # inner 1: one element a slice
    ("F.embedding(ids, weight)", {"ids": [4, 9], "weight": [50, 33]}),
    ("torch.gather(x, 1, idx)", {"x": [6, 9, 5], "idx": [6, 4, 5]}),
    ("torch.gather(x, 0, idx)", {"x": [9, 7], "idx": [3, 5]}),         # an index smaller in the other dim
    ("x.gather(-1, idx)", {"x": [6, 9], "idx": [6, 20]}),
    ("relu(F.embedding(ids, weight)) * 2", {"ids": [4, 9], "weight": [50, 33]}),   # a chain: lookup, then the body
    ("torch.take_along_dim(x, idx, dim=1)", {"x": [6, 9, 5], "idx": [6, 4, 5]}),
    ("x[idx]", {"x": [37, 45], "idx": [12]}), ("x[:, idx] * 2", {"x": [5, 37, 3], "idx": [12]}),   # index_select's
]


def spec_of(expression: str, shapes: dict[str, list[int]]) -> dict:
    node = ir.parse(expression, as_written=True)
    index = ir.index_inputs(node)
    return validate({"name": "op", "expression": ir.to_text(node), "inputs": [
        {"name": n, "dtypes": ["int64"] * 2 if n in index else ["float32", "float16"], "shapes": [shapes[n]]}
        for n in ir.input_names(node)]})


def generated(tmp_path, spec: dict):
    node = parse_expression(spec)
    reference = getattr(load(tmp_path, "reference.py", lower_torch.reference_source(spec, node)), "op")
    return reference, getattr(load(tmp_path, "kernel.py", ir.kernel_source(spec, node, {})), "op")


@pytest.mark.parametrize("expression, shapes", CASES, ids=[c[0] for c in CASES])
def test_every_lookup_matches_torch(tmp_path, expression, shapes):
    spec = spec_of(expression, shapes)
    reference, kernel = generated(tmp_path, spec)
    case = protocol.cases(spec)[0]
    for variant in protocol.dtype_variants(spec):
        args = inputs.make_inputs(spec, case, variant, 0, "cpu")
        want = reference(*[a.double() if a.is_floating_point() else a for a in args])
        got = kernel(*args)
        assert list(got.shape) == spec["outputs"][0]["shapes"][0]
        torch.testing.assert_close(got.double(), want, rtol=0, atol=2e-3 if "relu" in expression else 0)


def test_index_inputs_are_drawn_in_range_of_the_dim_they_index_without_padding():
    spec = spec_of("torch.index_select(x, 1, idx)", {"x": [3, 5, 40], "idx": [500]})
    idx = spec["inputs"][1]
    assert (idx["domain"], idx["index_of"], idx["index_dim"], idx["padding"]) == ("index", "x", 1, False)
    drawn = inputs.make_inputs(spec, protocol.cases(spec)[0], protocol.dtype_variants(spec)[0], 0, "cpu")[1]
    assert drawn.dtype == torch.int64 and int(drawn.min()) >= 0 and int(drawn.max()) == 4
    # class indices keep their padding value
    ce = validate({"name": "op", "expression": "cross_entropy(z, t)", "inputs": [
        {"name": "z", "dtypes": ["float32"], "shapes": [[64, 7]]}, {"name": "t", "dtypes": ["int64"], "shapes": [[64]]}]})
    assert "padding" not in ce["inputs"][1] and "index_dim" not in ce["inputs"][1]


def test_index_fields_come_from_the_expression_not_an_edit():
    edited = spec_of("torch.gather(x, 1, idx)", {"x": [6, 9], "idx": [6, 4]})
    edited["inputs"][1].update(index_dim=0, padding=True)
    again = validate(edited)["inputs"][1]
    assert (again["index_dim"], again["padding"]) == (1, False)


def test_an_index_outside_the_dim_reads_zero_never_outside_the_table(tmp_path):
    spec = spec_of("x.index_select(0, idx)", {"x": [4, 8], "idx": [3]})
    _, kernel = generated(tmp_path, spec)
    got = kernel(torch.ones(4, 8), torch.tensor([1, 7, -2]))
    assert got[0].eq(1).all() and got[1:].eq(0).all()


@pytest.mark.parametrize("expression, shapes, message", [
    ("x.index_select(0, idx)", {"x": [4, 8], "idx": [2, 3]}, "1-d index"),
    ("torch.gather(x, 1, idx)", {"x": [4, 8], "idx": [4]}, "the tensor's rank"),
    ("torch.gather(x, 1, idx)", {"x": [4, 8], "idx": [5, 8]}, "no larger a size"),
    ("F.embedding(ids, w)", {"ids": [4], "w": [2, 3, 4]}, "num_embeddings, embedding_dim"),
    ("F.embedding(ids, w, max_norm=1.0)", None, "max_norm renormalises"),
    ("torch.gather(x, d, idx)", None, "an integer dim"),
    ("torch.take_along_dim(x, idx, 1)", {"x": [4, 8], "idx": [1, 3]}, "must have the tensor's sizes"),
    ("torch.take_along_dim(x, idx)", None, "one integer dim"),
])
def test_bad_lookups_are_refused_naming_the_problem(expression, shapes, message):
    with pytest.raises(ir.IRError, match=message):
        ir.output_shape(ir.parse(expression, as_written=True), shapes)


EMBEDDING_MODULE = """
    import torch
    import torch.nn as nn

    class Model(nn.Module):
        def __init__(self, vocab, dim):
            super().__init__()
            self.emb = nn.Embedding(vocab, dim, padding_idx=0)

        def forward(self, ids):
            return torch.relu(self.emb(ids)) * 2.0

    def get_inputs():
        return [torch.randint(0, 1000, (8, 128))]

    def get_init_inputs():
        return [1000, 256]
"""


def test_a_pasted_embedding_layer_is_the_lookup_of_its_weight():
    spec, _ = parse_request(f"```python\n{textwrap.dedent(EMBEDDING_MODULE).strip()}\n```")
    assert ir.to_text(ir.parse(spec["expression"])).startswith("(relu(embedding(ids, emb_weight, padding_idx=0))")
    shapes = {i["name"]: (i["shapes"][0], i["dtypes"][0], i["domain"]) for i in spec["inputs"]}
    assert shapes == {"ids": ([8, 128], "int64", "index"), "emb_weight": ([1000, 256], "float32", "normal")}


def test_a_pasted_embedding_with_max_norm_is_refused():
    module = textwrap.dedent(EMBEDDING_MODULE).replace("padding_idx=0", "max_norm=1.0").strip()
    with pytest.raises(GenerationError, match="max_norm"):
        parse_request(f"```python\n{module}\n```")



@pytest.mark.parametrize("text, expression, index", [
    ("F.embedding(ids, weight) with ids 8x512 and weight 32000x4096 fp16", "embedding(ids, weight)", "ids"),
    ("torch.gather(x, 1, idx) with x 64x1000 and idx 64x10, bf16", "gather(x, 1, idx)", "idx"),
    ("x.index_select(0, idx), x 1000x64, idx 300, fp32", "index_select(x, 0, idx)", "idx"),
    ("x[idx] with x 1000x64 and idx 300", "index_select(x, 0, idx)", "idx"),
])
def test_typed_lookups_make_their_index_int64_in_every_variant(text, expression, index):
    spec, _ = parse_request(text)
    assert spec["expression"] == expression
    idx = next(i for i in spec["inputs"] if i["name"] == index)
    assert set(idx["dtypes"]) == {"int64"} and idx["domain"] == "index" and idx["padding"] is False


def test_an_index_viewed_before_its_lookup_stays_int64_and_its_reference_test_passes():
    """A hand-written cross entropy: gather's index is target.unsqueeze(1), a view of the input."""
    code = ("def ce(logits, target):\n    logp = torch.log_softmax(logits, dim=-1)\n"
            "    return -logp.gather(1, target.unsqueeze(1)).squeeze(1).mean()\n")
    spec, _ = parse_request(f"```python\n{code}```\nlogits 16x50 fp32, target 16")
    target = next(i for i in spec["inputs"] if i["name"] == "target")
    assert target["dtypes"] == ["int64"] and target["index_of"] == "logits"
    files = {"spec.json": json.dumps(spec), "reference.py": lower_torch.reference_source(spec, parse_expression(spec)),
             "test_reference.py": testgen.reference_test_source(spec)}
    result = worker.execute_job({"job_id": "t-ce", "kind": "reference_test", "backend": "cpu", "attempt": 1,
                                 "timeout_s": 120, "files": files}, lambda line: None)
    assert result["status"] == "pass", result["summary"]


def test_one_kernel_serves_cases_of_different_ranks(tmp_path):
    spec = validate({"name": "op", "expression": "gather(x, 1, idx)", "inputs": [
        {"name": "x", "dtypes": ["float32"], "shapes": [[6, 9], [2, 7, 5]]},
        {"name": "idx", "dtypes": ["int64"], "shapes": [[6, 4], [2, 3, 5]]}]})
    reference, kernel = generated(tmp_path, spec)
    for case in protocol.cases(spec):
        args = inputs.make_inputs(spec, case, protocol.dtype_variants(spec)[0], 0, "cpu")
        torch.testing.assert_close(kernel(*args), reference(*args), rtol=0, atol=0)


@pytest.mark.parametrize("words, expression, given", [
    ("embedding lookup with a 32000x4096 table and 16x512 token ids fp16", "embedding(ids, weight)",
     {"ids": [16, 512], "weight": [32000, 4096]}),
    ("embedding lookup with 16x512 ids and a 32000x4096 table", "embedding(ids, weight)",
     {"ids": [16, 512], "weight": [32000, 4096]}),
    ("嵌入查表 词表 32000x4096 索引 16x512", "embedding(ids, weight)", {"ids": [16, 512], "weight": [32000, 4096]}),
    ("index_select rows of 10000x128 with 512 indices", "index_select(x, 0, idx)", {"x": [10000, 128], "idx": [512]}),
    ("index select along dim 1 of 64x1000 with 100 indices", "index_select(x, 1, idx)", {"x": [64, 1000], "idx": [100]}),
    ("embedding lookup: 16x512 int64 ids into a 32000x4096 bf16 table", "embedding(ids, weight)",
     {"ids": [16, 512], "weight": [32000, 4096]}),
    ("gather along dim 1 of a 1024x512 fp16 tensor with int64 indices 1024x16", "gather(x, 1, idx)",
     {"x": [1024, 512], "idx": [1024, 16]}),
    ("gather with 1024x16 indices from a 1024x512 tensor", "gather(x, -1, idx)", {"x": [1024, 512], "idx": [1024, 16]}),
    ("gather along dim 0 of 1024x512 with 2048x512 indices", "gather(x, 0, idx)", {"x": [1024, 512], "idx": [2048, 512]}),
    ("torch.gather over the last dim, x 64x128x512 and index 64x128x8", "gather(x, -1, idx)",
     {"x": [64, 128, 512], "idx": [64, 128, 8]}),
    ("沿维度1 gather，输入 1024x512，索引 1024x16", "gather(x, 1, idx)", {"x": [1024, 512], "idx": [1024, 16]}),
])
def test_lookups_in_words_take_the_table_and_the_indices_apart(words, expression, given):
    spec, _ = parse_request(words)
    assert spec["expression"] == expression
    assert {i["name"]: i["shapes"][0] for i in spec["inputs"]} == given
    index = next(i for i in spec["inputs"] if i.get("domain") == "index")
    assert set(index["dtypes"]) == {"int64"}


@pytest.mark.parametrize("words, says", [
    ("embedding lookup 16x512, 32000x4096", "which shape is the tensor read"),
    ("embedding lookup of 16x512", "needs two shapes"),
    ("gather along dim 1 of 8x16", "needs the tensor's and the indices' shapes"),
    ("gather 1024x512 and 1024x16", "which shape is the tensor read"),
    ("gather along dim 1 of a 1024x512 tensor with 16 indices", "of one rank"),
    ("gather along dim 1 of a 1024x512 tensor with 1024 by 16 by 2 indices", "the indices to have the tensor's rank"),
    ("gather along dim 0 of a 1024x512 tensor with 8x600 indices", "at most the tensor's"),
    ("cross entropy of 4096x32000 logits with int32 targets", "int64"),
    ("all-gather of a 1024x1024 tensor", "all-gather"),
])
def test_lookups_in_words_refused_say_what_works(words, says):
    assert says in error(words)
