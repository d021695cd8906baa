"""The matmul family (bot.ops.matmul): generated kernel.py files, imported and run.

Kernels run under Triton's interpreter here (tests/conftest.py), in float32 and float16 (the
interpreter gets bfloat16 wrong), on small odd shapes, and are compared with the generated
reference evaluated on float64 inputs within runner.protocol's tolerance.
"""
from __future__ import annotations

import pytest
import torch
from generated import load

from bot import integrity, ir, lower_torch
from bot.generators.interface import GenerationError
from bot.ops import matmul
from bot.request import parse_request
from bot.spec import parse_expression, validate
from runner import protocol

ODD = {"a": [[33, 70]], "b": [[70, 45]]}                     # K % BLOCK_K != 0, M and N not tiles
BATCHED = {"a": [[2, 33, 70]], "b": [[2, 70, 45]]}
SHARED_B = {"a": [[2, 33, 70]], "b": [[70, 45]]}
MULTI_TILE = {"a": [[2, 150, 70]], "b": [[2, 70, 300]]}       # several tiles even for the big configs


def raw_spec(expression: str, shapes: dict, dtypes=("float32", "float16")) -> dict:
    return {"name": "mm_op", "expression": expression,
            "inputs": [{"name": n, "dtypes": list(dtypes), "shapes": s} for n, s in shapes.items()]}


def source(expression: str, shapes: dict, options: dict | None = None) -> str:
    return matmul.kernel_source(raw_spec(expression, shapes), ir.parse(expression), options)


def generate(tmp_path, spec: dict, options: dict | None = None):
    """(reference, kernel) functions generated for the spec."""
    node = parse_expression(spec)
    reference = load(tmp_path, "reference.py", lower_torch.reference_source(spec, node))
    kernel = load(tmp_path, "kernel.py", matmul.kernel_source(spec, node, options))
    return getattr(reference, spec["name"]), getattr(kernel, spec["name"])


def check(tmp_path, expression: str, shapes: dict, dtypes=("float32", "float16"), configs=(None,),
          options: dict | None = None, device: str = "cpu") -> None:
    """The kernel against the reference on float64 inputs, on every case x dtype, with the
    launcher's own config and with each given one."""
    spec = validate(raw_spec(expression, shapes, dtypes))
    reference, kernel = generate(tmp_path, spec, options)
    mm = ir.matmul_node(parse_expression(spec))
    operand = mm.args[0].name
    for case in range(len(shapes[operand])):
        k = matmul.logical(shapes[operand][case], mm.attr("ta"))[-1]
        gen = torch.Generator().manual_seed(case)
        tensors = {n: torch.randn(s[case], generator=gen) for n, s in shapes.items()}
        for dtype in dtypes:
            inputs = [t.to(device, getattr(torch, dtype)) for t in tensors.values()]
            want = reference(*[t.double() for t in inputs])
            rtol, atol = protocol.tolerance(dtype, k, spec["tf32"], matmul=True)
            for config in configs:
                got = kernel(*inputs, config=config)
                label = f"{expression} {shapes} {dtype} {config}"
                assert got.shape == want.shape and got.dtype == getattr(torch, dtype), label
                err = (got.double() - want).abs()
                ok = err <= atol + rtol * want.abs()
                assert bool(ok.all()), f"{label}: {int((~ok).sum())} bad values, max err {err.max().item():.3g}"


# ---------------------------------------------------------------- shapes and epilogues

@pytest.mark.parametrize("shapes", [ODD, BATCHED, SHARED_B, {"a": [[1, 16], [5, 64]], "b": [[16, 1], [64, 130]]}],
                         ids=["2-D odd", "bmm", "bmm, b shared", "tiny, and K a multiple of BLOCK_K"])
def test_plain_matmul(tmp_path, shapes):
    check(tmp_path, "a @ b", shapes)


EPILOGUES = {
    "bias [N]": ("a @ b + bias", {"bias": [[45]]}),
    "per row [M, 1]": ("(a @ b) * scale", {"scale": [[33, 1]]}),
    "residual [M, N]": ("a @ b + residual", {"residual": [[33, 45]]}),
    "scalar [1]": ("a @ b - s", {"s": [[1]]}),
    "constants only": ("gelu(a @ b) * 0.5", {}),
    "composed": ("relu(a @ b + bias) * 0.5 + residual", {"bias": [[45]], "residual": [[33, 45]]}),
    "where, sigmoid, tanh": ("where(bias > 0.0, tanh(sigmoid(a @ b + bias)), bias)", {"bias": [[1, 45]]}),
}


@pytest.mark.parametrize("epilogue", EPILOGUES)
def test_epilogue(tmp_path, epilogue):
    expression, extra = EPILOGUES[epilogue]
    check(tmp_path, expression, {**ODD, **extra})


BATCHED_EPILOGUES = {
    "bmm: bias, residual [B, M, N]": ("silu(a @ b + bias) + residual", BATCHED,
                                      {"bias": [[45]], "residual": [[2, 33, 45]]}),
    "bmm: residual shared by the batch [M, N]": ("a @ b + residual", BATCHED, {"residual": [[33, 45]]}),
    "bmm: per batch and row [B, M, 1]": ("(a @ b) * s", BATCHED, {"s": [[2, 33, 1]]}),
    "bmm: per batch [B, 1, 1], per column [B, 1, N]": ("(a @ b) * s + t", BATCHED,
                                                       {"s": [[2, 1, 1]], "t": [[2, 1, 45]]}),
    "shared b: bias, per row, residual": ("(a @ b + bias) * r + res", SHARED_B,
                                         {"bias": [[45]], "r": [[33, 1]], "res": [[2, 33, 45]]}),
    # 4-D products (attention scores): an input over some of the leading dims, copied out per batch
    "4-D: a mask over the heads [B, 1, M, N], one for all [1, 1, M, N]": (
        "where(m > 0.0, a @ b.mT, -1000.0) + r", {"a": [[2, 3, 17, 8]], "b": [[2, 3, 19, 8]]},
        {"m": [[2, 1, 17, 19]], "r": [[1, 1, 17, 19]]}),
    "4-D: per head [3, 1, 1], full [B, H, M, N]": ("(a @ b) * h + f", {"a": [[2, 3, 17, 8]], "b": [[2, 3, 8, 19]]},
                                                   {"h": [[3, 1, 1]], "f": [[2, 3, 17, 19]]}),
}


@pytest.mark.parametrize("epilogue", BATCHED_EPILOGUES)
def test_batched_epilogue(tmp_path, epilogue):
    expression, shapes, extra = BATCHED_EPILOGUES[epilogue]
    check(tmp_path, expression, {**shapes, **extra})


def test_every_config_is_right_on_odd_cases(tmp_path):
    shapes = {"a": [[2, 33, 70], [1, 150, 40]], "b": [[70, 45], [1, 40, 270]], "bias": [[45], [270]]}
    check(tmp_path, "relu(a @ b + bias)", shapes, configs=(None, *matmul.CONFIGS))


def test_persistent_programs_walk_many_tiles_and_a_partial_k_tile(tmp_path):
    # 4 x 3 tiles of 32 per matrix in groups of 2 rows, for 3 matrices: 36 tiles over 8 (float32) or
    # 16 (float16) persistent programs, the interpreter's 4 SMs times what shared memory holds of
    # 6 stages and half an output tile. K = 40 fits a BLOCK_K of 64: TMA reads the part of the tile
    # past K as zeros.
    config = {"BLOCK_M": 32, "BLOCK_N": 32, "BLOCK_K": 64, "GROUP_M": 2, "num_warps": 1, "num_stages": 6}
    assert [matmul._per_sm(32, 32, 64, 6, size) for size in (4, 2)] == [2, 4]
    assert matmul._per_sm(128, 256, 64, 3, 2) == 1 and matmul._per_sm(64, 64, 64, 3, 2) == 4
    # N = 96: float16 rows are 16-byte aligned, so its tiles go out by TMA store (the last row tile
    # partly past M); float32 stores through pointers.
    shapes = {"a": [[3, 100, 40]], "b": [[3, 40, 96]], "bias": [[96]]}
    check(tmp_path, "a @ b + bias", shapes, configs=(config,))
    text = source("a @ b", shapes)
    assert "tl.range(tl.program_id(0), total, tl.num_programs(0), flatten=TMA_STORE)" in text
    assert "grid = (min(tiles * (splits if phase == 1 else 1), sms * per_sm),)" in text


@pytest.mark.parametrize("expression, shapes, splits", [
    # K = 300 in 20 tiles of 16 (padded to 320): 4 slices of 5, and 3 of 7, 7 and 6
    ("relu(a @ b + bias) * 2.0", {"a": [[2, 9, 300]], "b": [[2, 300, 40]], "bias": [[40]]}, 4),
    ("a @ b.T", {"a": [[9, 300]], "b": [[40, 300]]}, 3),
    ("torch.tril(a @ b, diagonal=-1)", {"a": [[40, 300]], "b": [[300, 40]]}, 4),
])
def test_split_k_adds_its_slices_in_order_before_the_epilogue(tmp_path, expression, shapes, splits):
    config = {"BLOCK_M": 16, "BLOCK_N": 32, "BLOCK_K": 16, "GROUP_M": 2, "num_warps": 1, "num_stages": 2,
              "SPLIT_K": splits}
    check(tmp_path, expression, shapes, configs=(config,))


def test_split_k_fills_the_gpu_where_few_tiles_meet_a_long_k():
    # decode, 16 rows by 4096 columns in 64 tiles of 64, K = 4096 in 64 tiles, on 132 SMs
    assert matmul._split_k(64, 64, 132) == 4
    assert matmul._split_k(4, 8192, 132) == 32         # 256 x 256 by K = 524288: capped at 32
    assert matmul._split_k(224, 64, 132) == 1          # a program for every SM already
    assert matmul._split_k(4, 12, 132) == 1            # too short a K to split


def test_empty_dims_give_what_torch_gives(tmp_path):
    # Specs have positive dims, but an exported kernel may meet empty ones: K = 0 is the epilogue
    # of a zero product, M = 0 or a batch of 0 an empty output.
    spec = validate(raw_spec("relu(a @ b + bias)", {"a": [[2, 4, 8]], "b": [[2, 8, 6]], "bias": [[6]]}, ("float32",)))
    reference, kernel = generate(tmp_path, spec)
    bias = torch.randn(6)
    for m, k, batch in ((4, 0, 2), (0, 8, 2), (4, 8, 0)):
        a, b = torch.randn(batch, m, k), torch.randn(batch, k, 6)
        torch.testing.assert_close(kernel(a, b, bias), reference(a, b, bias))


def test_tf32_only_where_the_spec_allows_it(tmp_path):
    assert 'precision = "tf32x3" if a.dtype == torch.float32 else None' in source("a @ b", ODD)
    assert 'precision = "tf32" if a.dtype == torch.float32 else None' in source("matmul(a, b, tf32=True)", ODD)
    check(tmp_path, "matmul(a, b, tf32=True) + 1.0", ODD, dtypes=("float32",))


def test_float32_configs_are_listed_as_they_run(tmp_path):
    # The launcher halves BLOCK_K until a program fits 208 KB of shared memory; a float32 spec lists
    # configs already fitted, so the bench table and TUNED name the tiles that run. fp16 lists them
    # as written.
    spec = validate(raw_spec("matmul(a, b, tf32=True)", {"a": [[4096, 4096]], "b": [[4096, 4096]]}, ("float32",)))
    configs = generate(tmp_path, spec)[1].__globals__["CONFIGS"]
    assert all(matmul._fit_config(c, 1 << 30, 1 << 30, 1 << 30, 4)[2] == c["BLOCK_K"] for c in configs)
    assert {"BLOCK_M": 128, "BLOCK_N": 256, "BLOCK_K": 32}.items() <= configs[0].items()
    spec = validate(raw_spec("a @ b", {"a": [[4096, 4096]], "b": [[4096, 4096]]}, ("float16",)))
    assert generate(tmp_path, spec)[1].__globals__["CONFIGS"][:3] == matmul.CONFIGS[:3]


@pytest.mark.parametrize("shapes", [ODD, BATCHED, SHARED_B, {"a": [[40, 96]], "b": [[96, 80]]}],
                         ids=["2-D odd", "bmm", "bmm, b shared", "K aligned, not a multiple of BLOCK_K"])
def test_tf32_reads_b_k_major(tmp_path, shapes):
    # float32 B goes to TF32 tensor cores transposed (K-major, by _pad); padded, batched, shared by the
    # batch, and with K a multiple of 16 bytes but not of BLOCK_K (the masked K loop).
    assert "b = _pad(b, K_pad, N, transpose=True)" in source("matmul(a, b, tf32=True)", shapes)
    config = {"BLOCK_M": 32, "BLOCK_N": 32, "BLOCK_K": 64, "GROUP_M": 2, "num_warps": 2, "num_stages": 2}
    check(tmp_path, "matmul(a, b, tf32=True)", shapes, dtypes=("float32", "float16"), configs=(None, config))


def test_inputs_named_like_generated_locals(tmp_path):
    shapes = {"acc": [[33, 70]], "K": [[70, 45]], "mask": [[45]], "offs_m": [[33, 1]]}
    check(tmp_path, "(acc @ K) * mask + offs_m", shapes)


def test_non_contiguous_inputs(tmp_path):
    spec = validate(raw_spec("a @ b + bias", {**ODD, "bias": [[45]]}, dtypes=("float32",)))
    reference, kernel = generate(tmp_path, spec)
    a, b, bias = torch.randn(70, 33).t(), torch.randn(45, 70).t(), torch.randn(90)[::2]
    assert not a.is_contiguous() and not b.is_contiguous() and not bias.is_contiguous()
    torch.testing.assert_close(kernel(a, b, bias), reference(a, b, bias))


def test_review_options_pin_every_config(tmp_path):
    shapes = {**MULTI_TILE, "bias": [[300]]}
    text = source("a @ b + bias", shapes, {"block": 32, "num_warps": 2})
    assert '{**_default_config(batch, M, N), "BLOCK_M": 32, "num_warps": 2, "BLOCK_N": 32}' in text
    check(tmp_path, "a @ b + bias", shapes, options={"block": 32, "num_warps": 2})
    with pytest.raises(ValueError, match="at most 256"):
        source("a @ b + bias", shapes, {"block": 512})


def test_broadcast_inputs_load_one_row_one_column_or_one_value():
    shapes = {**BATCHED, "bias": [[45]], "r": [[33, 1]], "s": [[2, 1, 1]], "x": [[2, 33, 45]]}
    text = source("(a @ b) * r + bias + s + x", shapes)
    for line in ("bias_offs = batch * bias_sb + cols * bias_sn",
                 "bias = tl.load(bias_ptr + bias_offs, mask=cols < N, other=0.0)",
                 "r_offs = batch * r_sb + rows * r_sm", "r = tl.load(r_ptr + r_offs, mask=rows < M, other=0.0)",
                 "s_offs = batch * s_sb\n", "s = tl.load(s_ptr + s_offs).to(tl.float32)",
                 "x_offs = batch * x_sb + rows * x_sm + cols * x_sn", "x = tl.load(x_ptr + x_offs, mask=mask"):
        assert line in text


def test_an_input_read_whole_in_one_case_is_read_whole_in_all(tmp_path):
    check(tmp_path, "a @ b + bias", {"a": [[33, 70], [2, 20, 16]], "b": [[70, 45], [16, 30]],
                                     "bias": [[45], [2, 20, 30]]})


# ---------------------------------------------------------------- operands padded to aligned rows

# Shapes whose rows of a (K long) or b (N long) do not start on 16-byte boundaries, so the
# launcher pads them, with a tiny one and one padded in fp16 only (36 * 2 bytes; 36 * 4 is aligned).
PADDED = {
    "2-D, odd K and N": {"a": [[33, 70]], "b": [[70, 45]]},
    "bmm, odd K and N": {"a": [[5, 37, 29]], "b": [[5, 29, 13]]},
    "bmm, b shared, odd N": {"a": [[3, 20, 32]], "b": [[32, 45]]},
    "bmm, b shared, odd K and N": SHARED_B,
    "odd K, aligned N": {"a": [[33, 70]], "b": [[70, 64]]},
    "K aligned in fp32 only": {"a": [[2, 33, 36]], "b": [[2, 36, 48]]},
    "tiny": {"a": [[3, 5]], "b": [[5, 3]]},
}


def epilogue_shapes(shapes: dict) -> dict:
    """A bias [N], a value per row [M, 1], a residual the output's shape and a scalar for shapes."""
    *batch_m, k = shapes["a"][0]
    n = shapes["b"][0][-1]
    return {"bias": [[n]], "r": [[batch_m[-1], 1]], "res": [[*batch_m, n]], "s": [[1]]}


@pytest.mark.parametrize("shapes", PADDED.values(), ids=PADDED)
def test_padded_operands_are_right_with_every_config(tmp_path, shapes):
    check(tmp_path, "relu(a @ b + bias) * r + res - s", {**shapes, **epilogue_shapes(shapes)},
          configs=(None, *matmul.CONFIGS))


@pytest.mark.parametrize("epilogue", EPILOGUES)
def test_every_epilogue_on_padded_operands_with_every_config(tmp_path, epilogue):
    expression, extra = EPILOGUES[epilogue]
    check(tmp_path, expression, {**ODD, **extra}, configs=(None, *matmul.CONFIGS))


def pad_calls(monkeypatch, kernel) -> list:
    """Each _pad call of the kernel.py `kernel` comes from: (the operand's shape, R_pad, C_pad)."""
    calls, pad = [], kernel.__globals__["_pad"]

    def spy(x, r_pad, c_pad, transpose=False):
        calls.append((list(x.shape), r_pad, c_pad) + ("transposed",) * transpose)
        return pad(x, r_pad, c_pad, transpose=transpose)
    monkeypatch.setitem(kernel.__globals__, "_pad", spy)
    return calls


@pytest.mark.parametrize("a, b, dtype, padded", [
    ([32, 64], [64, 48], torch.float16, []),                                  # aligned: no copy
    ([2, 16, 8], [8, 24], torch.float16, []),                                 # 16 bytes exactly
    ([33, 36], [36, 48], torch.float32, [([36, 48], 36, 48, "transposed")]),    # float32 b: K-major
    ([33, 36], [36, 48], torch.float16, [([33, 36], 33, 64), ([36, 48], 64, 48)]),
    ([3, 20, 32], [32, 45], torch.float16, [([32, 45], 32, 64)]),             # N only: a as it is
    ([5, 37, 29], [5, 29, 13], torch.float32, [([5, 37, 29], 37, 32), ([5, 29, 13], 32, 13, "transposed")]),
    ([33, 70], [70, 130], torch.float16, [([33, 70], 33, 128), ([70, 130], 128, 192)]),
])
def test_only_unaligned_operands_are_padded(tmp_path, monkeypatch, a, b, dtype, padded):
    _, kernel = generate(tmp_path, validate(raw_spec("a @ b", {"a": [a], "b": [b]})))
    calls = pad_calls(monkeypatch, kernel)
    x, y = torch.randn(a, dtype=dtype), torch.randn(b, dtype=dtype)
    torch.testing.assert_close(kernel(x, y).float(), (x.double() @ y.double()).float(), rtol=1e-2, atol=1e-2)
    assert calls == padded


def test_pad_copies_and_zero_fills(tmp_path, monkeypatch):
    _, kernel = generate(tmp_path, validate(raw_spec("a @ b", ODD)))
    x = torch.randn(3, 37, 29, dtype=torch.float16)
    empty = torch.empty         # fresh buffers hold NaNs, so only what _pad writes is zero
    monkeypatch.setattr(torch, "empty", lambda *args, **kwargs: empty(*args, **kwargs).fill_(float("nan")))
    padded = kernel.__globals__["_pad"](x, 40, 300)
    assert padded.shape == (3, 40, 300) and padded.is_contiguous()
    assert torch.equal(padded, torch.nn.functional.pad(x, (0, 300 - 29, 0, 40 - 37)))


def test_padded_lengths_keep_the_tiles_and_make_k_whole_tiles():
    for itemsize in (2, 4):
        for n in range(1, 600):
            padded = matmul._padded_length(n, itemsize)
            assert padded * itemsize % 16 == 0 and padded >= n
            if n * itemsize % 16 == 0:
                assert padded == n
            for config in matmul.CONFIGS:     # configs() dedups configs on the unpadded K
                fitted = matmul._fit_config(config, 100, 100, padded, itemsize)
                assert fitted == matmul._fit_config(config, 100, 100, n, itemsize)
                assert padded == n or padded % fitted[2] == 0        # whole BLOCK_K tiles
    assert [matmul._padded_length(n, 2) for n in (5, 13, 29, 37, 70, 2999, 3007)] == [16, 16, 32, 64, 128,
                                                                                            3008, 3008]


@pytest.mark.parametrize("expression, shapes", [("a @ b", ODD), ("(a @ b + bias) * r + res - s",
                                                                 {**BATCHED, **epilogue_shapes(BATCHED)})])
def test_kernels_pass_the_integrity_check(expression, shapes):
    text = source(expression, shapes)
    assert "_launch(_pad_kernel, grid," in text and "TensorDescriptor.from_tensor(" in text
    assert not integrity.check(text, "mm_op"), integrity.report(integrity.check(text, "mm_op"))


# ---------------------------------------------------------------- config choice

def test_default_config_and_fitting():
    assert matmul._default_config(1, 4096, 4096) == matmul.CONFIGS[0]     # 128 x 256
    assert matmul._default_config(1, 33, 45) == matmul.CONFIGS[-1]
    smaller = matmul._default_config(1, 2048, 2048)        # 128 x 256 tiles: 128 programs, < 132 SMs
    assert smaller["BLOCK_M"] * smaller["BLOCK_N"] < 128 * 256
    for config in matmul.CONFIGS:   # fp16 at 4096: every config runs as written
        assert matmul._fit_config(config, 4096, 4096, 4096, 2) == (
            config["BLOCK_M"], config["BLOCK_N"], config["BLOCK_K"], config["num_stages"])
        bm, bn, bk, stages = matmul._fit_config(config, 4096, 4096, 4096, 4)
        assert matmul._shared_bytes(bm, bn, bk, stages, 4) <= 208 * 1024
    wide = {"BLOCK_M": 128, "BLOCK_N": 256, "BLOCK_K": 64, "GROUP_M": 8, "num_warps": 8, "num_stages": 3}
    assert wide in matmul.CONFIGS
    assert matmul._fit_config(wide, 33, 45, 20, 2) == (64, 64, 32, 3)
    assert matmul._fit_config(wide, 4096, 4096, 4096, 4) == (128, 256, 32, 3)     # fp32: half BLOCK_K


def test_configs_that_fit_every_case_alike_are_swept_once():
    big = source("a @ b", {"a": [[4096, 4096]], "b": [[4096, 4096]]})
    small = source("a @ b", {"a": [[20, 30]], "b": [[30, 40]]})
    assert big.count('"GROUP_M": ') == len(matmul.CONFIGS)
    assert 1 < small.count('"GROUP_M": ') < len(matmul.CONFIGS)


# ---------------------------------------------------------------- refusals

def test_unsupported_epilogue_shapes_are_refused_with_what_works():
    for bias, shown in (([33], r"\[33\]"), ([3, 33, 45], r"\[3, 33, 45\]"), ([33, 2], r"\[33, 2\]")):
        what_works = r"vector \[45\], one value per row \[33, 1\]"
        with pytest.raises(ValueError, match=rf"input bias has shape {shown}.*{what_works}"):
            source("a @ b + bias", {**ODD, "bias": [bias]})


def test_launcher_refuses_shapes_it_was_not_generated_for(tmp_path):
    _, kernel = generate(tmp_path, validate(raw_spec("a @ b + bias", {**ODD, "bias": [[45]]}, dtypes=("float32",))))
    with pytest.raises(ValueError, match=r"input bias has shape \[44\]"):
        kernel(torch.randn(33, 70), torch.randn(70, 45), torch.randn(44))
    with pytest.raises(ValueError, match=r"input bias has shape \[33, 45\], but this kernel was generated for a "
                                         r"vector \[45\] there; regenerate it"):
        kernel(torch.randn(33, 70), torch.randn(70, 45), torch.randn(33, 45))
    with pytest.raises(ValueError, match=r"cannot multiply a \[33, 70\] by b \[71, 45\]"):
        kernel(torch.randn(33, 70), torch.randn(71, 45), torch.randn(45))


@pytest.mark.parametrize("shapes", [{"a": [[33, 70]], "b": [[71, 45]]}, {"a": [[33, 70]], "b": [[2, 70, 45]]},
                                    {"a": [[2, 33, 70]], "b": [[3, 70, 45]]}, {"a": [[70]], "b": [[70, 45]]}])
def test_operand_shapes_are_refused(shapes):
    with pytest.raises(ValueError, match="cannot multiply a"):
        source("a @ b", shapes)


def test_trees_that_are_not_one_matmul_with_a_pointwise_epilogue():
    mm = ir.call("matmul", ir.inp("a"), ir.inp("b"), tf32=False)
    spec = raw_spec("a @ b", {**ODD, "c": [[45, 45]]})
    for node, message in ((ir.call("matmul", ir.call("relu", ir.inp("a")), ir.inp("b"), tf32=False), "must be inputs"),
                          (ir.call("add", mm, ir.call("matmul", ir.inp("c"), ir.inp("c"), tf32=False)), "one matmul"),
                          (ir.call("add", ir.inp("a"), ir.inp("b")), "has no matmul")):
        with pytest.raises(ValueError, match=message):
            matmul.kernel_source(spec, node)
    # sum(a @ b) is no one family's tree: the IR driver refuses it as one kernel and splits it into a chain.
    with pytest.raises(ValueError, match="matmul inside sum"):
        ir.check_single(ir.call("sum", mm, dim=-1))
    assert [s.node.op for s in ir.stages(ir.call("sum", mm, dim=-1))] == ["matmul", "sum"]


# ---------------------------------------------------------------- transposed operands

TRANSPOSED = {
    "a.T": ("a.T @ b", {"a": [[70, 33]], "b": [[70, 45]]}),
    "b.T": ("a @ b.T", {"a": [[33, 70]], "b": [[45, 70]]}),
    "both, bias": ("relu(a.T @ b.T + bias)", {"a": [[70, 33]], "b": [[45, 70]], "bias": [[45]]}),
    "batched a.mT": ("a.mT @ b", {"a": [[2, 70, 33]], "b": [[2, 70, 45]]}),
    "shared b.mT": ("a @ b.mT", {"a": [[2, 33, 70]], "b": [[45, 70]]}),
    "transpose(-2, -1), t()": ("a.t() @ b.transpose(-2, -1) * 0.5", {"a": [[70, 33]], "b": [[45, 70]]}),
    "aligned": ("a.T @ b.T", {"a": [[64, 32]], "b": [[48, 64]]}),
}


@pytest.mark.parametrize("expression, shapes", TRANSPOSED.values(), ids=TRANSPOSED)
def test_transposed_operands_are_read_as_they_lie(tmp_path, expression, shapes):
    check(tmp_path, expression, shapes, configs=(None, matmul.CONFIGS[-1]))


def test_transposes_print_parse_and_elsewhere_are_permutes():
    node = ir.parse("torch.matmul(A.T, B.mT) + bias")
    assert ir.to_text(node) == "(matmul(A.T, B.mT) + bias)" and ir.parse(ir.to_text(node)) == node
    assert ir.reduced(ir.parse("a.T @ b")) == (["a"], -2)          # K is a's first dim
    # not a matmul operand, or not a transpose of its matrices: a permute, a kernel of its own
    assert [ir.to_text(s.node) for s in ir.stages(ir.parse("relu(x.T)"))] == ["permute(x, (1, 0))", "relu(stage0)"]
    assert [ir.to_text(s.node) for s in ir.stages(ir.parse("a @ b.transpose(0, 2)"))] == [
        "transpose(b, 0, 2)", "matmul(a, stage0)"]
    with pytest.raises(ir.IRError, match="a.T of a 3-D tensor reverses all its dims; write a.mT"):
        ir.output_shape(ir.parse("a.T @ b"), {"a": [2, 70, 33], "b": [70, 45]})


# ---------------------------------------------------------------- triu / tril of the product

TRI_ODD = {"a": [[37, 45]], "b": [[45, 29]]}
# 16 x 16 tiles: 3 x 2 per matrix, of which each triangle below but tril 1 zeroes some whole, skipping their K loop.
TRI_TILES = {"BLOCK_M": 16, "BLOCK_N": 16, "BLOCK_K": 16, "GROUP_M": 2, "num_warps": 1, "num_stages": 2}
TRIANGLES = {
    "triu": ("torch.triu(a @ b)", TRI_ODD),
    "tril, diagonal=1": ("torch.tril(torch.matmul(a, b), diagonal=1)", TRI_ODD),
    "bmm, .triu(-2), a.T": ("a.mT.matmul(b).triu(-2)", {"a": [[2, 45, 37]], "b": [[2, 45, 29]]}),
    "bmm, b shared, tril -2 in an epilogue": ("relu(torch.tril(a @ b, -2) + bias)",
                                             {"a": [[2, 37, 45]], "b": [[45, 29]], "bias": [[29]]}),
}


@pytest.mark.parametrize("expression, shapes", TRIANGLES.values(), ids=TRIANGLES)
def test_triangles_of_the_product(tmp_path, expression, shapes):
    check(tmp_path, expression, shapes, configs=(None, TRI_TILES))


@pytest.mark.parametrize("expression", ["torch.triu(a @ b)", "torch.triu(a @ b, 1)", "torch.tril(a @ b, -2)",
                                        "torch.tril(a @ b, 40)"])
def test_tiles_wholly_outside_the_triangle_and_only_they_skip_their_k_loop(expression):
    text = source(expression, {"a": [[96, 8]], "b": [[8, 96]]})
    assert "for k in range(k_lo, tl.where(kept, k_hi, k_lo)):" in text
    kept = text.split("kept = ")[1].split("\n")[0]
    tri, diagonal = matmul.triangle(ir.parse(expression))
    keep = getattr(torch, tri)(torch.ones(96, 96), diagonal) != 0
    for bm, bn in ((16, 16), (32, 16), (16, 32)):
        for pid_m in range(96 // bm):
            for pid_n in range(96 // bn):
                tile = keep[pid_m * bm:(pid_m + 1) * bm, pid_n * bn:(pid_n + 1) * bn]
                assert eval(kept, {"pid_m": pid_m, "pid_n": pid_n, "BLOCK_M": bm, "BLOCK_N": bn}) == bool(tile.any())


def test_triangles_print_parse_and_reach_the_reference():
    node = ir.parse("(a @ b).tril(-2) * 0.5")
    assert ir.to_text(node) == "(tril(matmul(a, b), diagonal=-2) * 0.5)" and ir.parse(ir.to_text(node)) == node
    spec = validate(raw_spec("triu(a @ b, diagonal=1)", ODD))
    assert "torch.triu(torch.matmul(a, b), diagonal=1)" in lower_torch.reference_source(spec, parse_expression(spec))


@pytest.mark.parametrize("expression, stages", [
    ("torch.triu(x)", ["triu"]),
    ("torch.tril(relu(a @ b) + bias)", ["add", "tril"]),         # the epilogue's product, then its triangle
    ("torch.triu(torch.tril(a @ b))", ["matmul", "triu"]),
])
def test_triangles_of_anything_but_the_product_are_the_remap_familys(expression, stages):
    assert [s.node.op for s in ir.stages(ir.parse(expression))] == stages


def test_a_triangle_takes_an_integer_diagonal():
    with pytest.raises(ir.IRError, match="triu takes a tensor and an integer diagonal"):
        ir.parse("torch.triu(a @ b, k)")


def test_triangle_words_in_english_and_chinese_and_their_order():
    for words, expression in (("upper triangular matmul", "triu(matmul(a, b, tf32=False))"),
                              ("lower-triangular matmul with bias", "tril(matmul(a, b, tf32=False)) + bias"),
                              ("上三角矩阵乘法", "triu(matmul(a, b, tf32=False))")):
        assert matmul.matmul_expression(matmul.take_epilogue(words)[1], []) == expression
    with pytest.raises(GenerationError, match=r"applies the triangle first: it is activation\(triu\(a @ b\) \+ bias"):
        matmul.check_epilogue_order("matmul with bias, upper triangular", [])
    with pytest.raises(GenerationError, match="both the upper and the lower triangle"):
        matmul.take_epilogue("upper triangular matmul, lower triangular")


def test_a_pasted_triangular_product_gives_a_spec():
    code = ("import torch\nimport torch.nn as nn\n\nclass Model(nn.Module):\n    def forward(self, A, B):\n"
            "        return torch.tril(torch.matmul(A, B))\n\nN = 64\n\ndef get_inputs():\n"
            "    return [torch.tril(torch.rand(N, N)), torch.tril(torch.rand(N, N))]\n\n"
            "def get_init_inputs():\n    return []\n")
    spec, _ = parse_request(code)
    assert spec["expression"] == "tril(matmul(A, B))" and spec["name"] == "matmul_tril"


@pytest.mark.parametrize("request_text, expression, product", [
    ("torch.diag(d) @ b for fp32 d 33, b 33x45", "d.reshape(-1, 1) * b", lambda d, b: torch.diag(d) @ b),
    ("b @ torch.diag(d) for fp32 b 33x45, d 45", "b * d.reshape(1, -1)", lambda b, d: b @ torch.diag(d)),
    ("relu(torch.mm(torch.diag(d), b) + 1.0) for fp32 d 33, b 33x45", "relu(d.reshape(-1, 1) * b + 1.0)",
     lambda d, b: torch.relu(torch.diag(d) @ b + 1.0)),
])
def test_a_diagonal_operand_scales_rows_or_columns_as_the_product_does(tmp_path, request_text, expression, product):
    spec, _ = parse_request(request_text)
    assert spec["expression"] == expression
    kernel = getattr(load(tmp_path, "kernel.py", ir.kernel_source(spec, parse_expression(spec), {})), spec["name"])
    gen = torch.Generator().manual_seed(0)
    args = [torch.randn(i["shapes"][0], generator=gen) for i in spec["inputs"]]
    torch.testing.assert_close(kernel(*args), product(*args), rtol=1e-6, atol=1e-6)


@pytest.mark.parametrize("request_text, message", [
    ("torch.diag(x) * 2 for x 64", "read as an operand of a product"),
    ("torch.diag(d, 1) @ b", "on the main diagonal"),
    ("torch.diag(d) @ torch.diag(e)", "builds no diagonal matrices"),
    ("torch.diag(d) @ b for d 64x64 and b 64x32", "do not broadcast"),     # the diagonal of a matrix: not a scaling
])
def test_diagonals_that_are_not_a_scaling_are_refused(request_text, message):
    with pytest.raises(GenerationError, match=message):
        parse_request(request_text)


# ---------------------------------------------------------------- on a GPU

@pytest.mark.gpu
@pytest.mark.parametrize("dtype, tf32", [("float16", False), ("bfloat16", False), ("float32", False),
                                         ("float32", True)])
def test_every_config_compiles_and_is_right_on_a_gpu(tmp_path, dtype, tf32):
    shapes = {"a": [[2, 1000, 520]], "b": [[520, 1030]], "bias": [[1030]], "residual": [[2, 1000, 1030]]}
    check(tmp_path, f"relu(matmul(a, b, tf32={tf32}) + bias) + residual", shapes, dtypes=(dtype,),
          configs=(None, *matmul.CONFIGS), device="cuda")


@pytest.mark.gpu
@pytest.mark.parametrize("dtype, tf32", [("float16", False), ("float32", True)])
def test_tma_store_with_an_epilogue_is_right_on_a_gpu(tmp_path, dtype, tf32):
    # N aligned, full-size tiles, an epilogue that reads inputs: float16 takes the flattened loop and
    # the TMA store, float32 (TF32) the nested loop and the pointer store.
    shapes = {"a": [[2, 1000, 512]], "b": [[512, 1024]], "bias": [[1024]], "residual": [[2, 1000, 1024]]}
    check(tmp_path, f"relu(matmul(a, b, tf32={tf32}) + bias) + residual", shapes, dtypes=(dtype,),
          configs=(None, *matmul.CONFIGS), device="cuda")


@pytest.mark.gpu
@pytest.mark.parametrize("dtype, tf32", [("float16", False), ("bfloat16", False), ("float32", False),
                                         ("float32", True)])
def test_padded_operands_are_right_on_a_gpu(tmp_path, dtype, tf32):
    # K and N odd: both operands go through _pad before the TMA kernel reads them.
    shapes = {"a": [[2, 1001, 999]], "b": [[999, 1007]], "bias": [[1007]], "residual": [[2, 1001, 1007]]}
    check(tmp_path, f"relu(matmul(a, b, tf32={tf32}) + bias) + residual", shapes, dtypes=(dtype,),
          configs=(None, *matmul.CONFIGS), device="cuda")


@pytest.mark.gpu
@pytest.mark.parametrize("dtype, tf32", [("float16", False), ("bfloat16", False), ("float32", False),
                                         ("float32", True)])
@pytest.mark.parametrize("expression", ["relu(matmul(a.T, b, tf32={tf32}) + bias)",
                                        "relu(matmul(a, b.T, tf32={tf32}) + bias)",
                                        "relu(matmul(a.T, b.T, tf32={tf32}) + bias)"])
def test_transposed_operands_are_right_on_a_gpu(tmp_path, expression, dtype, tf32):
    # odd K and N: a transposed a is copied transposed, a transposed b read K-major (padded on K), or
    # in float32 copied transposed too
    a, b = [[999, 1001]] if "a.T" in expression else [[1001, 999]], [[1007, 999]] if "b.T" in expression else [[999, 1007]]
    check(tmp_path, expression.format(tf32=tf32), {"a": a, "b": b, "bias": [[1007]]}, dtypes=(dtype,),
          configs=(None, *matmul.CONFIGS), device="cuda")


@pytest.mark.gpu
@pytest.mark.parametrize("dtype, tf32", [("float16", False), ("float32", False), ("float32", True)])
@pytest.mark.parametrize("expression", ["torch.triu(matmul(a, b, tf32={tf32}))",
                                        "relu(torch.tril(matmul(a, b, tf32={tf32}), -3) + bias)"])
def test_triangles_are_right_on_a_gpu(tmp_path, expression, dtype, tf32):
    # N aligned (float16 takes the TMA store), 3-D, and tiles wholly outside the triangle for every config.
    shapes = {"a": [[2, 1000, 520]], "b": [[520, 1024]], "bias": [[1024]]}
    node = ir.parse(expression.format(tf32=tf32))
    check(tmp_path, expression.format(tf32=tf32), {n: shapes[n] for n in ir.input_names(node)}, dtypes=(dtype,),
          configs=(None, *matmul.CONFIGS), device="cuda")


@pytest.mark.gpu
@pytest.mark.parametrize("dtype, tf32", [("float16", False), ("bfloat16", False), ("float32", False),
                                         ("float32", True)])
def test_split_k_is_right_on_a_gpu(tmp_path, dtype, tf32):
    # decode-shaped (16 rows, 4 tiles by BLOCK_N 256) with K = 4100 padded: the launcher's own split,
    # and 3 and 7 forced, with an epilogue that reads inputs, transposed b and a triangle
    shapes = {"a": [[16, 4100]], "b": [[4100, 1000]], "bias": [[1000]], "residual": [[16, 1000]]}
    forced = tuple({**matmul.CONFIGS[0], "SPLIT_K": n} for n in (3, 7))
    check(tmp_path, f"relu(matmul(a, b, tf32={tf32}) + bias) + residual", shapes, dtypes=(dtype,),
          configs=(None, *forced), device="cuda")
    check(tmp_path, f"torch.tril(matmul(a, b.T, tf32={tf32}))", {"a": [[40, 4100]], "b": [[40, 4100]]},
          dtypes=(dtype,), configs=(None, *forced), device="cuda")


# ---------------------------------------------------------------- einsum, and a [..., M, K] @ b [K, N]

def test_a_4d_tensor_times_a_matrix_folds_its_leading_dims_into_the_batch(tmp_path):
    check(tmp_path, "relu(a @ b + bias)", {"a": [[2, 3, 5, 7]], "b": [[7, 9]], "bias": [[9]]})
    check(tmp_path, "a @ b + c", {"a": [[2, 3, 5, 7]], "b": [[7, 9]], "c": [[2, 1, 5, 9]]})     # c folded per batch


def test_4d_batches_of_matrices_multiply_pairwise(tmp_path):
    # [B, H, M, K] @ [B, H, K, N], b transposed too (q @ k^T), with a per-row epilogue
    check(tmp_path, "relu(a @ b) * 0.5", {"a": [[2, 3, 20, 16]], "b": [[2, 3, 16, 24]]})
    check(tmp_path, "a @ b.transpose(-2, -1) + c", {"a": [[2, 3, 20, 16]], "b": [[2, 3, 24, 16]], "c": [[20, 1]]})
    with pytest.raises(ir.IRError, match="different batch dims"):
        ir.output_shape(ir.parse("a @ b"), {"a": [2, 3, 5, 7], "b": [1, 3, 7, 9]})


@pytest.mark.parametrize("request_text, expression", [
    ("(q @ k.transpose(-2, -1)) * 0.125 with q 2x3x8x16 and k 2x3x8x16", "matmul(q, k.mT) * 0.125"),
    ("torch.einsum('bhqd,bhkd->bhqk', q, k) with q 2x3x8x16 and k 2x3x8x16", "matmul(q, k.mT)"),
    ("relu(a @ b) with a 4x3x5x6 and b 4x3x6x7", "relu(matmul(a, b))"),
])
def test_attention_scores_and_other_4d_products_are_read_from_requests(request_text, expression):
    spec, _ = parse_request(request_text)
    assert ir.parse(spec["expression"]) == ir.parse(expression)
    with pytest.raises(GenerationError, match="different batch dims"):
        parse_request("a @ b with a 2x3x8x16 and b 3x2x16x4")


@pytest.mark.parametrize("equation, text", [
    ("bijl,lk->bijk", "matmul(a, b)"), ("ik,jk->ij", "matmul(a, b.T)"), ("ki,kj->ij", "matmul(a.T, b)"),
    ("bij,bjk->bik", "matmul(a, b)"), ("bij,bkj->bik", "matmul(a, b.mT)"), ("ij,jk", "matmul(a, b)"),
])
def test_einsum_of_a_matrix_product_is_the_matmul(equation, text):
    assert ir.to_text(ir.parse(f"torch.einsum('{equation}', a, b)", as_written=True)) == text


def test_einsum_that_is_no_matrix_product_is_a_summed_product():
    assert ir.to_text(ir.parse("torch.einsum('ij,ij->ij', a, b)", as_written=True)) == "(a * b)"
    assert ir.to_text(ir.parse("torch.einsum('ij,jk->ik', a, b)", as_written=True)) == "matmul(a, b)"


@pytest.mark.parametrize("call, says", [
    ("einsum('...ij,jk->...ik', a, b)", "without '...'"),
    ("einsum('ii->i', a)", "an index repeated within one operand"),
    ("einsum('ij,jk->il', a, b)", "every output index must come from an operand"),
])
def test_einsum_the_reader_cannot_take_is_refused(call, says):
    with pytest.raises(ir.IRError, match=says):
        ir.parse(call, as_written=True)


@pytest.mark.parametrize("code, text", [
    ("torch.addmm(bias, a, b)", "(bias + matmul(a, b))"),
    ("torch.addmm(bias, a, b, beta=0.5, alpha=2.0)", "((bias * 0.5) + (matmul(a, b) * 2.0))"),
    ("torch.baddbmm(bias, a, b, beta=0.0)", "matmul(a, b)"),       # beta 0: input left out, as torch does
])
def test_addmm_and_baddbmm_are_the_product_with_its_epilogue(tmp_path, code, text):
    node = ir.parse(code, as_written=True)
    assert ir.to_text(node) == text
    shapes = {"a": [[3, 9, 20]], "b": [[3, 20, 12]], "bias": [[12]]}
    check(tmp_path, text, {n: shapes[n] for n in ir.input_names(node)}, dtypes=("float32",))


# ---------------------------------------------------------------- a 1-D operand: matrix-vector products

MATVEC_MODULE = '''
import torch
import torch.nn as nn

class Model(nn.Module):
    def forward(self, A, B):
        return torch.matmul(A, B)

def get_inputs():
    return [torch.randn(37, 70), torch.randn(70)]

def get_init_inputs():
    return []
'''


@pytest.mark.parametrize("request_text, expression, out, torch_code", [
    (MATVEC_MODULE, "sum(A * B, dim=-1)", [37], "A @ B"),
    ("A @ x with A 37x70 and x 70", "sum(A * x, dim=-1)", [37], "A @ x"),
    ("x @ B with x 70 and B 70x45", "sum(x.reshape(-1, 1) * B, dim=-2)", [45], "x @ B"),
    ("A.T @ v with A 70x37 and v 70", "sum(v.reshape(-1, 1) * A, dim=-2)", [37], "A.T @ v"),
    ("relu(A @ v + b) with A 37x70, v 70, b 37", "relu(sum(A * v, dim=-1) + b)", [37], "torch.relu(A @ v + b)"),
    ("a @ b with a 3x37x70 and b 70", "sum(a * b, dim=-1)", [3, 37], "a @ b"),
    ("a @ b with a 70 and b 70", "sum(a * b, dim=None)", [], "a @ b"),
])
def test_a_1d_operand_is_the_reduction_torch_makes_of_it(tmp_path, request_text, expression, out, torch_code):
    """torch.matmul with a vector: [.., M, K] @ [K] is [.., M], [K] @ [K, N] is [N], [K] @ [K] one
    value; each a reduction kernel that reads the matrix once, checked against torch's own product."""
    spec, _ = parse_request(request_text + ("" if "class Model" in request_text else " fp32"))
    assert ir.parse(spec["expression"]) == ir.parse(expression)
    assert spec["outputs"][0]["shapes"] == [out]
    kernel = getattr(load(tmp_path, "kernel.py", ir.kernel_source(spec, parse_expression(spec), {})), spec["name"])
    gen = torch.Generator().manual_seed(0)
    inputs = {i["name"]: torch.randn(i["shapes"][0], generator=gen) for i in spec["inputs"]}
    want = eval(torch_code, {"torch": torch}, inputs)
    torch.testing.assert_close(kernel(*inputs.values()), want, rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("expression, shape", [
    ("x @ x", [2, 24, 24]),          # float32: b copied K-major while a stays as it is
    ("x.T @ x", [40, 24]),           # a transposed copy of x for a, x itself for b
    ("relu(x @ x.mT) * 0.5", [24, 40]),
])
def test_one_tensor_on_both_sides_of_the_product(tmp_path, expression, shape):
    # each operand's copy (padded, transposed) is its own: b's never replaces a's
    check(tmp_path, expression, {"x": [shape]})
