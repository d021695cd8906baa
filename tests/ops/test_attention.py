"""The attention family (bot.ops.attention): scaled dot-product attention as a generated kernel.py run
under Triton's interpreter against torch's own F.scaled_dot_product_attention on float64 copies:
causal and not, queries and keys of different counts, heads broadcast and grouped (enable_gqa), wide
and odd head dims, wide value heads (the two-kernel path), every config of the space; and what the
kernel does not read refused saying why."""
from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F
from generated import load

from bot import ir, lower_torch
from bot.ops import attention
from bot.spec import parse_expression, validate

SDPA = "F.scaled_dot_product_attention"
CASES = [
    (f"{SDPA}(q, k, v)", {"q": [2, 3, 37, 16], "k": [2, 3, 45, 16], "v": [2, 3, 45, 16]}),
    (f"{SDPA}(q, k, v, is_causal=True)", {"q": [1, 2, 70, 24], "k": [1, 2, 70, 24], "v": [1, 2, 70, 24]}),
    (f"{SDPA}(q, k, v, is_causal=True)", {"q": [1, 2, 50, 16], "k": [1, 2, 19, 16], "v": [1, 2, 19, 16]}),  # L > S
    (f"{SDPA}(q, k, v, scale=0.3)", {"q": [2, 33, 20], "k": [2, 17, 20], "v": [2, 17, 40]}),   # rank 3, Ev != E
    (f"{SDPA}(q, k, v, enable_gqa=True)", {"q": [2, 6, 21, 16], "k": [2, 2, 30, 16], "v": [2, 2, 30, 16]}),
    (f"{SDPA}(q, k, v)", {"q": [3, 4, 9, 16], "k": [1, 4, 30, 16], "v": [1, 4, 30, 16]}),      # a broadcast batch
    (f"{SDPA}(q, k, v)", {"q": [18, 200], "k": [25, 200], "v": [25, 8]}),                       # rank 2, E = 200
    # q or k from an earlier stage (float32) beside float16 inputs: the dots take one dtype
    (f"{SDPA}(q * 0.5, k, v)", {"q": [1, 2, 9, 16], "k": [1, 2, 12, 16], "v": [1, 2, 12, 16]}),
    (f"{SDPA}(q, k * 2.0, v, is_causal=True)", {"q": [1, 2, 9, 16], "k": [1, 2, 9, 16], "v": [1, 2, 9, 16]}),
    # value heads past WIDE_EV: scores into a workspace, then p @ v
    (f"{SDPA}(q, k, v)", {"q": [1, 2, 16, 64], "k": [1, 2, 24, 64], "v": [1, 2, 24, 300]}),
    (f"{SDPA}(q, k, v, is_causal=True, enable_gqa=True)", {"q": [1, 4, 21, 40], "k": [1, 2, 19, 40],
                                                          "v": [1, 2, 19, 260]}),
]
WIDE = CASES[-2:]


def spec_of(expression: str, shapes: dict[str, list[int]]) -> dict:
    node = ir.parse(expression, as_written=True)
    return validate({"name": "op", "expression": ir.to_text(node), "inputs": [
        {"name": n, "dtypes": ["float32", "float16"], "shapes": [shapes[n]]} for n in ir.input_names(node)]})


def torch_call(expression: str):
    return eval(f"lambda q, k, v: {expression}", {"F": F})


@pytest.mark.parametrize("expression, shapes", CASES, ids=[f"{c[0][len(SDPA):]} {c[1]['q']}" for c in CASES])
def test_attention_matches_torch(tmp_path, expression, shapes):
    spec = spec_of(expression, shapes)
    node = parse_expression(spec)
    kernel = load(tmp_path, "kernel.py", ir.kernel_source(spec, node, {})).op
    reference = load(tmp_path, "reference.py", lower_torch.reference_source(spec, node)).op
    g = torch.Generator().manual_seed(0)
    args = [torch.randn(shapes[n], generator=g) for n in ("q", "k", "v")]
    want = torch_call(expression)(*(a.double() for a in args))
    torch.testing.assert_close(reference(*(a.double() for a in args)), want)
    assert list(want.shape) == spec["outputs"][0]["shapes"][0]
    for dtype, tol in ((torch.float32, 1e-5), (torch.float16, 2e-2)):
        got = kernel(*(a.to(dtype) for a in args))
        assert got.dtype == dtype
        torch.testing.assert_close(got.double(), want, rtol=tol, atol=tol)


MASKED = [  # (expression, shapes, the mask's dtype)
    (f"{SDPA}(q, k, v, attn_mask=m)", {"q": [2, 3, 37, 16], "k": [2, 3, 45, 16], "v": [2, 3, 45, 24], "m": [37, 45]},
     torch.float32),
    (f"{SDPA}(q, k, v, attn_mask=m, scale=0.3)", {"q": [2, 3, 37, 16], "k": [2, 3, 45, 16], "v": [2, 3, 45, 24],
                                                  "m": [2, 1, 37, 45]}, torch.bool),
    (f"{SDPA}(q, k, v, attn_mask=m, enable_gqa=True)", {"q": [1, 4, 70, 16], "k": [1, 2, 70, 16], "v": [1, 2, 70, 16],
                                                        "m": [1, 4, 70, 70]}, torch.bool),
    (f"{SDPA}(q, k, v, attn_mask=m)", {"q": [4, 33, 16], "k": [4, 70, 16], "v": [4, 70, 16], "m": [4, 1, 70]},
     torch.float16),
]


def masked_args(shapes: dict[str, list[int]], mask_dtype: torch.dtype, device: str = "cpu") -> list[torch.Tensor]:
    """q, k, v and an attn_mask: a bool one True at seven keys in ten, one row of every head masked out
    whole (torch gives it zeros); an additive one normal."""
    g = torch.Generator(device=device).manual_seed(0)
    args = [torch.randn(shapes[n], generator=g, device=device) for n in "qkv"]
    if mask_dtype == torch.bool:
        mask = torch.rand(shapes["m"], generator=g, device=device) < 0.7
        mask[..., 5 % mask.shape[-2], :] = False
    else:
        mask = torch.randn(shapes["m"], generator=g, device=device).to(mask_dtype)
    return args + [mask]


@pytest.mark.parametrize("expression, shapes, mask_dtype", MASKED, ids=[str(c[1]["m"]) for c in MASKED])
def test_an_attn_mask_is_torchs(tmp_path, expression, shapes, mask_dtype):
    # bool (False leaves a key out; a row with none left gives zeros) or added to the scores, broadcast
    # over batch and heads as torch broadcasts it
    node = ir.parse(expression, as_written=True)
    dtypes = {n: ["bool"] * 2 if n == "m" and mask_dtype == torch.bool else ["float32", "float16"] for n in shapes}
    spec = validate({"name": "op", "expression": ir.to_text(node), "inputs": [
        {"name": n, "dtypes": dtypes[n], "shapes": [shapes[n]]} for n in ir.input_names(node)]})
    node = parse_expression(spec)
    kernel = load(tmp_path, "kernel.py", ir.kernel_source(spec, node, {})).op
    reference = load(tmp_path, "reference.py", lower_torch.reference_source(spec, node)).op
    args = masked_args(shapes, mask_dtype)
    wide = [a.double() if a.is_floating_point() else a for a in args]
    want = eval(f"lambda q, k, v, m: {expression}", {"F": F})(*wide)
    torch.testing.assert_close(reference(*wide), want)
    for dtype, tol in ((torch.float32, 1e-5), (torch.float16, 2e-2)):
        got = kernel(*(a.to(dtype) if a.is_floating_point() else a for a in args))
        torch.testing.assert_close(got.double(), want, rtol=tol, atol=tol)


@pytest.mark.parametrize("config", [attention.CONFIGS[k] for k in (0, 2, 3, 4, 6)])
@pytest.mark.parametrize("ev", [33, 257])         # the flash kernel, and the two-kernel path
def test_every_config_walks_keys_and_head_chunks_alike(tmp_path, config, ev):
    shapes = {"q": [1, 2, 40, 150], "k": [1, 2, 70, 150], "v": [1, 2, 70, ev]}
    spec = spec_of(f"{SDPA}(q, k, v, is_causal=True)", shapes)
    kernel = load(tmp_path, "kernel.py", ir.kernel_source(spec, parse_expression(spec), {})).op
    args = [torch.randn(shapes[n]) for n in ("q", "k", "v")]
    want = F.scaled_dot_product_attention(*(a.double() for a in args), is_causal=True)
    torch.testing.assert_close(kernel(*args, config=config).double(), want, rtol=1e-5, atol=1e-5)


def test_wide_heads_without_keys_or_past_the_workspace_take_the_flash_kernel_in_small_tiles(tmp_path):
    assert attention._attention_config(64, 512, wide=False)["BLOCK_M"] == 16     # fits shared memory at E 1024
    assert attention._attention_config(64, 512, wide=True)["BLOCK_M"] == 64
    spec = spec_of(f"{SDPA}(q, k, v)", {"q": [1, 2, 5, 16], "k": [1, 2, 3, 16], "v": [1, 2, 3, 300]})
    kernel = load(tmp_path, "kernel.py", ir.kernel_source(spec, parse_expression(spec), {})).op
    q, k, v = torch.randn(1, 2, 5, 16), torch.randn(1, 2, 0, 16), torch.randn(1, 2, 0, 300)   # no keys
    assert kernel(q, k, v).shape == (1, 2, 5, 300)


@pytest.mark.parametrize("expression, shapes, says", [
    (f"{SDPA}(q, k, v, attn_mask=m, is_causal=True)", None, "both attn_mask and is_causal=True"),
    (f"{SDPA}(q, k, v, attn_mask=m)", {"q": [2, 8, 16], "k": [2, 9, 16], "v": [2, 9, 16], "m": [8, 8]},
     "attn_mask [8, 8] does not broadcast over the scores [2, 8, 9]"),
    (f"{SDPA}(q, k, v, attn_mask=m)", {"q": [2, 8, 16], "k": [2, 9, 16], "v": [2, 9, 300], "m": [8, 9]},
     "with attn_mask takes value heads up to 256"),
    (f"{SDPA}(q, k, v, dropout_p=0.1)", None, "dropout_p > 0 is random"),
    (f"{SDPA}(q, k, v)", {"q": [2, 4, 8, 16], "k": [2, 3, 8, 16], "v": [2, 3, 8, 16]}, "dim 1 of q"),
    (f"{SDPA}(q, k, v)", {"q": [2, 8, 16], "k": [2, 8, 12], "v": [2, 8, 16]}, "need one head dim E"),
    (f"{SDPA}(q * 2.0, k, v)", None, "each is an input or a kernel's output"),
])
def test_what_the_kernel_does_not_read_is_refused(expression, shapes, says):
    with pytest.raises(ir.IRError, match=None) as e:
        node = ir.parse(expression, as_written=True)
        attention.check(node)
        ir.output_shape(node, shapes or {})
    assert says in str(e.value)


@pytest.mark.parametrize("request_, expression, shapes", [
    ("causal self-attention over 4x16x2048x64 in fp16", f"{attention.SDPA}(q, k, v, is_causal=True)", None),
    ("scaled dot product attention on 2x8x128x64, bf16, scale 0.125", f"{attention.SDPA}(q, k, v, scale=0.125)", None),
    ("grouped-query attention with q 2x8x128x64, k 2x2x128x64, v 2x2x128x64, causal",
     f"{attention.SDPA}(q, k, v, is_causal=True, enable_gqa=True)", [[2, 8, 128, 64], [2, 2, 128, 64], [2, 2, 128, 64]]),
    ("因果注意力 4x16x1024x64 fp16", f"{attention.SDPA}(q, k, v, is_causal=True)", None),
    ("bidirectional attention", f"{attention.SDPA}(q, k, v)", [attention.DEFAULT_SHAPES[0]] * 3),
])
def test_attention_in_words(request_, expression, shapes):
    from bot.request import parse_request
    spec, _ = parse_request(request_)
    assert spec["expression"] == expression
    if shapes:
        assert [i["shapes"][0] for i in spec["inputs"]] == shapes


@pytest.mark.gpu
@pytest.mark.parametrize("dtype", ["float16", "bfloat16", "float32"])
@pytest.mark.parametrize("expression, shapes, mask_dtype", MASKED, ids=[str(c[1]["m"]) for c in MASKED])
def test_on_the_gpu_an_attn_mask_is_torchs(tmp_path, dtype, expression, shapes, mask_dtype):
    node = ir.parse(expression, as_written=True)
    dtypes = {n: ["bool"] if n == "m" and mask_dtype == torch.bool else [dtype] for n in shapes}
    spec = validate({"name": "op", "expression": ir.to_text(node), "inputs": [
        {"name": n, "dtypes": dtypes[n], "shapes": [shapes[n]]} for n in ir.input_names(node)]})
    kernel = load(tmp_path, "kernel.py", ir.kernel_source(spec, parse_expression(spec), {})).op
    args = masked_args(shapes, mask_dtype, "cuda")
    want = eval(f"lambda q, k, v, m: {expression}", {"F": F})(*(a.double() if a.is_floating_point() else a for a in args))
    got = kernel(*(a.to(getattr(torch, dtype)) if a.is_floating_point() else a for a in args))
    tol = {"float16": 2e-2, "bfloat16": 6e-2, "float32": 1e-5}[dtype]
    torch.testing.assert_close(got.double(), want, rtol=tol, atol=tol)


@pytest.mark.gpu
@pytest.mark.parametrize("dtype", ["float16", "bfloat16", "float32"])
@pytest.mark.parametrize("expression, shapes", CASES[:5] + WIDE + [
    (f"{SDPA}(q, k, v)", {"q": [1, 5, 4096, 96], "k": [1, 5, 4096, 96], "v": [1, 5, 4096, 264]}),  # 2 head groups
], ids=lambda c: str(c)[:60])
def test_on_the_gpu_every_dtype_matches_torch(tmp_path, dtype, expression, shapes):
    spec = spec_of(expression, shapes)
    kernel = load(tmp_path, "kernel.py", ir.kernel_source(spec, parse_expression(spec), {})).op
    args = [torch.randn(shapes[n], device="cuda") for n in ("q", "k", "v")]
    want = torch_call(expression)(*(a.double() for a in args))
    got = kernel(*(a.to(getattr(torch, dtype)) for a in args))
    tol = {"float16": 2e-2, "bfloat16": 6e-2, "float32": 1e-5}[dtype]
    torch.testing.assert_close(got.double(), want, rtol=tol, atol=tol)
