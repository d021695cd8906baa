"""The sort family (bot.ops.sort): sort, argsort and topk over any dim through the sort template
(bot.codegen.sort_kernel), generated kernel.py files imported and run under the interpreter on small
odd shapes, compared exactly with the generated reference (torch's stable sort): values and indices,
ties in their order, NaN and -0.0 as torch sorts them; and the words and code that ask for them."""
from __future__ import annotations

import pytest
import torch

from generated import error, expr, load, make_spec
from lowering import CUBE, MATRIX, configs_for, ties, upcast

from bot import ir, lower_torch
from bot.codegen.sort_kernel import MAX_TILE
from bot.request import parse_request
from bot.spec import parse_expression
from runner import inputs as runner_inputs
from runner import protocol

# Masked lanes compute on placeholders.
pytestmark = pytest.mark.filterwarnings("ignore::RuntimeWarning")


def generate(tmp_path, spec: dict):
    """(reference function, kernel.py module)."""
    node = parse_expression(spec)
    reference = load(tmp_path, "reference.py", lower_torch.reference_source(spec, node))
    return getattr(reference, spec["name"]), load(tmp_path, "kernel.py", ir.kernel_source(spec, node, {}))


def parts(result) -> tuple[torch.Tensor, ...]:
    return tuple(result) if isinstance(result, tuple) else (result,)


def check(tmp_path, spec: dict, configs=(None,), draw=None) -> None:
    """Every output of the kernel equals the reference's on float64 inputs, exactly (the values are
    the inputs' own), on every case x dtype x config."""
    reference, module = generate(tmp_path, spec)
    kernel = getattr(module, spec["name"])
    for case in protocol.cases(spec):
        for v, variant in enumerate(protocol.dtype_variants(spec)):
            inputs = draw(spec, case, variant) if draw else runner_inputs.make_inputs(spec, case, variant, 0, "cpu")
            want = parts(reference(*upcast(inputs)))
            for config in configs_for(configs, v == 0):
                # a chain's entry takes no config: each stage keeps its default
                got = parts(kernel(*inputs) if config is None else kernel(*inputs, config=config))
                label = f"{spec['expression']} {case.label} {protocol.variant_label(variant)} config={config}"
                assert len(got) == len(spec["outputs"]) == len(want), label
                for out, g, w in zip(spec["outputs"], got, want):
                    assert list(g.shape) == out["shapes"][case.index], label
                    assert g.dtype == getattr(torch, out["dtypes"][v]), label
                    assert torch.equal(g.double(), w.double()), f"{label}: {out['name']} differs"


@pytest.mark.parametrize("expression", [
    "sort(x, dim=-1)", "sort(x, dim=0, descending=True)", "argsort(x, dim=1)", "sort_values(x, dim=-2)",
    "topk(x, 3, dim=-1)", "topk_values(x, 4, dim=0, largest=False)", "topk_indices(x, 5, dim=1)",
    "kthvalue(x, 2, dim=-1)", "kthvalue_indices(x, 5, dim=0, keepdim=True)", "median(x, dim=1)",
    "median_values(x, dim=-1, keepdim=True)",
    "kthvalue(relu(x), 2, dim=-1)",         # a chain: the relu, then the k-th value's pair
])
def test_sorts_match_torchs_stable_sort_with_ties(tmp_path, expression):
    # Small integers: every line holds each value several times, so the indices say whether equal
    # values kept their order. float16 (its 16-bit keys) on the sorts; the picks built on the same
    # keys (topk, kthvalue, median) in float32, where the interpreter is quicker.
    dtypes = ("float32", "float16") if expression.startswith(("sort", "argsort")) else ("float32",)
    check(tmp_path, make_spec(expression, {"x": [CUBE] if "dim=1" in expression else [MATRIX]}, dtypes), draw=ties)


@pytest.mark.parametrize("expression", ["sort(x, dim=1)", "topk(x, 6, dim=0, largest=False)"])
def test_sorts_of_random_values_in_every_config(tmp_path, expression):
    spec = make_spec(expression, {"x": [[9, 5, 7]]}, dtypes=("float32",))
    _, module = generate(tmp_path, spec)
    check(tmp_path, spec, configs=(None, *module.CONFIGS))


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16])     # int64 keys; 16-bit values' int32 keys
@pytest.mark.parametrize("descending", [False, True])
def test_nan_inf_and_signed_zeros_sort_as_torch_sorts_them(tmp_path, descending, dtype):
    spec = make_spec(f"sort(x, dim=-1{', descending=True' * descending})", {"x": [[3, 12]]})
    _, module = generate(tmp_path, spec)
    x = torch.tensor([[0.0, -0.0, 1.0, float("nan"), -float("inf"), 0.0, float("inf"), -1.0, -0.0, 2.0, -2.0, 0.5]] * 3,
                     dtype=dtype)
    x[1] = x[1].flip(0)
    values, indices = module.op(x)
    want = torch.sort(x, dim=-1, descending=descending, stable=True)
    assert values.dtype == dtype
    assert torch.equal(values.nan_to_num(), want.values.nan_to_num()) and torch.equal(values.isnan(), want.values.isnan())
    assert torch.equal(indices, want.indices)


def test_a_long_top_k_is_merged_from_chunks(tmp_path):
    # Chunks of 16 (a config a long line takes on its own): each keeps its first k keys, and the
    # merge kernel sorts them together; ties across chunks keep their order.
    spec = make_spec("topk(x, 7, dim=-1)", {"x": [[5, 301]]})
    chunked = {"CHUNK": 16, "BLOCK_R": 2, "num_warps": 4}
    check(tmp_path, spec, configs=(None, chunked), draw=ties)
    check(tmp_path, make_spec("topk_indices(x, 3, dim=0, largest=False)", {"x": [[301, 5]]}), configs=(chunked,))
    check(tmp_path, make_spec("kthvalue(x, 9, dim=-1)", {"x": [[5, 301]]}, dtypes=("float32",)), configs=(chunked,))


@pytest.mark.parametrize("request_text, expression", [
    ("sort x descending over the last dim for 64x300", "sort_values(x, dim=-1, descending=True)"),
    ("sort with indices over dim 0 for 300x64", "sort(x, dim=0)"),
    ("argsort each column for 64x300", "argsort(x, dim=-2)"),
    ("top-8 values and indices over the last dim for 4096x32000 bf16", "topk(x, 8, dim=-1)"),
    ("top 8 values over the last dim for 4096x1000", "topk_values(x, 8, dim=-1)"),
    ("the 5 smallest of each row for 100x300", "topk(x, 5, dim=-1, largest=False)"),
    ("topk with k=20, the indices, for 100x300", "topk_indices(x, 20, dim=-1)"),
    ("对每行降序排序 64x300", "sort_values(x, dim=-1, descending=True)"),
    ("torch.sort(x, dim=0, descending=True)[0] for 128x1000 fp16", "sort_values(x, dim=0, descending=True)"),
    ("x.topk(5, 0, False) for 333x40", "topk(x, 5, dim=0, largest=False)"),
    ("torch.topk(torch.softmax(x, dim=-1), 10).indices for 16x20000", "topk_indices(softmax(x), 10, dim=-1)"),
    ("torch.kthvalue(x, 3, dim=0, keepdim=True) for 64x301", "kthvalue(x, 3, dim=0, keepdim=True)"),
    ("x.median(-1).values for 64x301", "median_values(x, dim=-1)"),
    ("median over dim 0 for 301x64", "median_values(x, dim=0)"),
    ("the 3rd smallest over the last dim for 64x300", "kthvalue(x, 3, dim=-1)"),
    ("the k-th smallest with k=5, its indices, over dim 0 for 64x300", "kthvalue_indices(x, 5, dim=0)"),
    ("每行的中位数 64x301", "median_values(x, dim=-1)"),
    ("topk 5 of x over the last dim for 64x1000", "topk(x, 5, dim=-1)"),
    ("top-k(k=40) over the last dim for 8x32000", "topk(x, 40, dim=-1)"),
    ("sort x in descending order for 64x1000", "sort_values(x, dim=-1, descending=True)"),
    ("find the top-10 logits for 32x50257 bf16", "topk(x, 10, dim=-1)"),
    ("取前10个最大值 64x1000", "topk_values(x, 10, dim=-1)"),
    ("bottom-3 over dim 0 for 100x300", "topk(x, 3, dim=0, largest=False)"),
    ("torch.msort(x) for 64x100", "sort_values(x, dim=0)"),
])
def test_sorts_in_words_and_code(request_text, expression):
    assert expr(parse_request(request_text)[0]) == expression


def test_values_and_indices_unpacked_and_returned_are_one_sort():
    for call, expression in (("torch.sort(x, dim=1, descending=True)", "sort(x, dim=1, descending=True)"),
                             ("x.median(dim=1)", "median(x, dim=1)")):
        code = (f"```python\nimport torch\ndef f(x):\n    values, idx = {call}\n    return values, idx\n```\n"
                "for 8x300x17")
        spec, _ = parse_request(code)
        assert expr(spec) == expression
        assert [o["name"] for o in spec["outputs"]] == ["values", "indices"]


@pytest.mark.parametrize("request_text, said", [
    ("top-k over the last dim for 100x300", "with which k"),
    ("torch.sort(x) * 2 for 64x100", "cannot be an operand"),
    ("torch.median(x, dim=1) * 2 for 64x100", "cannot be an operand"),
    (f"torch.sort(x, dim=-1) for 4x{MAX_TILE + 1}", f"at most {MAX_TILE}"),
    ("torch.topk(x, 50, dim=0) for 40x7", "at most that"),
    ("torch.median(x) for 64x100", "give it a dim"),
    ("torch.kthvalue(x, 20000, dim=-1) for 2x40000", "smaller k"),
    ("torch.topk(x, 4000) for 4x152064", "smaller k"),
    ("torch.sort(x, dim=x.dim() - 1) for 4x100", "one integer dim"),
    ("sort x ascending and descending for 4x100", "ascending or descending"),
])
def test_what_cannot_be_sorted_is_refused_naming_why(request_text, said):
    assert said in error(request_text)
