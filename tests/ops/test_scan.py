"""The scan family (bot.ops.scan): cumsum, cumprod, cummax and cummin over any dim, forward or
reversed, inclusive or exclusive, through the scan template (bot.codegen.scan_kernel: its cols and
rows kernels, chunks carried across, every config), on small odd shapes, against the generated
reference on float64 inputs, which is itself checked against torch's own scans here."""
from __future__ import annotations

import pytest
import torch

from generated import make_spec
from lowering import CUBE, MATRIX, VECTOR, check_reduction, generate_reduction

from bot import ir
from bot.generators.interface import GenerationError
from bot.ops import scan
from bot.request import parse_request
from bot.spec import parse_expression
from bot.spec import validate
from runner import harness, protocol
from runner import inputs as runner_inputs

pytestmark = pytest.mark.filterwarnings("ignore::RuntimeWarning")

DIMS = {0: [MATRIX, CUBE, VECTOR], 1: [MATRIX, CUBE], -1: [MATRIX, CUBE, VECTOR], -2: [MATRIX, CUBE], 2: [CUBE]}
LONG = [[3, 301], [301, 5]]        # D = 301: chunks of 8-64 carry across many steps
# walking D in chunks (cols and rows kernels), and one program a chunk chained by look-back
SMALL_CHUNKS = [{"BLOCK_B": 4, "BLOCK_R": 2, "BLOCK_D": 16, "num_warps": 2, "LOOKBACK": 0},
                {"BLOCK_B": 64, "BLOCK_D": 8, "num_warps": 4, "LOOKBACK": 1}, {"BLOCK_R": 1, "BLOCK_D": 32, "num_warps": 1}]


def _spec(expression: str, shapes: list[list[int]], dtypes=("float32", "float16")) -> dict:
    return make_spec(expression, {n: shapes for n in ir.input_names(ir.parse(expression))}, dtypes)


@pytest.mark.parametrize("op", sorted(scan.SCANS))
@pytest.mark.parametrize("dim", sorted(DIMS))
def test_scan_over_every_dim(tmp_path, op, dim):
    check_reduction(tmp_path, _spec(f"{op}(x, dim={dim})", DIMS[dim]), configs=(None, SMALL_CHUNKS[0]))


@pytest.mark.parametrize("op, flags", [(op, ", reverse=True") for op in sorted(scan.SCANS)] + [
    (op, flags) for op in ("cumsum", "cumprod") for flags in (", exclusive=True", ", reverse=True, exclusive=True")])
def test_reversed_and_exclusive_scans(tmp_path, op, flags):
    # the default (dim 0 of [301, 5]: look-back) and the chunks of every kernel (SMALL_CHUNKS[0] sets
    # BLOCK_B and BLOCK_R); every config of the plain scans is in test_scan_of_a_body
    for dim in (0, -1):
        check_reduction(tmp_path, _spec(f"{op}(x, dim={dim}{flags})", LONG), configs=(None, *SMALL_CHUNKS[:2]))


@pytest.mark.parametrize("expression", ["cumsum(x * y, dim=1)", "cumprod(1.0 + 0.01 * x, dim=0)",
                                        "cummax(relu(x) - y, dim=-1)", "cumsum(exp(x), dim=0, reverse=True)"])
def test_scan_of_a_body(tmp_path, expression):
    check_reduction(tmp_path, _spec(expression, LONG), configs=(None, *SMALL_CHUNKS))


def test_scan_of_a_masked_body(tmp_path):
    # KernelBench's masked cumsum: a bool mask loads as int1, x where True, 0 where False.
    for expression, shape in (("cumsum(x * mask, dim=1)", LONG[0]), ("cumsum(mask * x, dim=0, reverse=True)", LONG[1])):
        spec = make_spec(expression, {"x": [shape], "mask": [shape]}, masks=("mask",))
        check_reduction(tmp_path, spec, configs=(None, SMALL_CHUNKS[0]))


@pytest.mark.parametrize("op, flags", [(op, flags) for op in sorted(scan.SCANS) for flags in ("", ", reverse=True")] + [
    (op, flags) for op in ("cumsum", "cumprod") for flags in (", exclusive=True", ", reverse=True, exclusive=True")])
def test_the_reference_is_torch_s_own_scan(tmp_path, op, flags):
    # The reference's exclusive and reversed forms, against the definition step by step.
    spec = _spec(f"{op}(x, dim=1{flags})", [[4, 9, 3]], ("float32",))
    reference, _ = generate_reduction(tmp_path, spec)
    x = torch.randn(4, 9, 3, dtype=torch.float64)
    combine = {"cumsum": torch.add, "cumprod": torch.mul, "cummax": torch.maximum, "cummin": torch.minimum,
               "logcumsumexp": torch.logaddexp}[op]
    identity = {"cumsum": 0.0, "cumprod": 1.0, "cummax": float("-inf"), "cummin": float("inf"),
                "logcumsumexp": float("-inf")}[op]
    steps = range(8, -1, -1) if "reverse" in flags else range(9)
    running, want = torch.full((4, 3), identity, dtype=torch.float64), torch.empty_like(x)
    for d in steps:
        if "exclusive" in flags:
            want[:, d], running = running, combine(running, x[:, d])
        else:
            running = combine(running, x[:, d])
            want[:, d] = running
    torch.testing.assert_close(reference(x), want)


def test_nan_propagates_as_in_torch(tmp_path):
    for op in ("cummax", "cummin", "cumsum", "logcumsumexp"):
        spec = _spec(f"{op}(x, dim=-1)", [[3, 50]], ("float32",))
        reference, module = generate_reduction(tmp_path, spec)
        x = torch.randn(3, 50)
        x[1, 7] = float("nan")
        x[2, 3], x[2, 9], x[0, :5] = float("inf"), -float("inf"), -float("inf")     # logcumsumexp keeps +-inf
        for config in (None, *SMALL_CHUNKS):
            torch.testing.assert_close(module.op(x, config=config), reference(x), equal_nan=True)


def test_a_flip_pair_reads_as_a_reversed_scan_and_prints_back():
    node = ir.parse("torch.cumsum(x.flip(1), dim=1).flip(1)", as_written=True)
    assert (node.op, node.attr("dim"), node.attr("reverse")) == ("cumsum", 1, True)
    assert ir.to_text(node) == "cumsum(x, dim=1, reverse=True)"
    assert ir.parse(ir.to_text(node)) == node
    assert ir.parse("torch.flip(torch.cummax(torch.flip(x, dims=[0]), 0), [0])", as_written=True).attr("reverse")


@pytest.mark.parametrize("text, says", [
    ("cumsum(x.flip(1), dim=1)", "flipped order"),
    ("cumsum(x.flip(0), dim=1).flip(0)", "same dim"),
    ("torch.cumsum(x, dim=d)", "integer dim"),
    ("torch.cumsum(x, dim=1, dtype=torch.float64)", "dtype"),
    ("cummax(x, dim=1, exclusive=True)", "exclusive scans are cumsum's"),
])
def test_what_is_not_a_scan_is_refused_naming_it(text, says):
    with pytest.raises(ir.IRError, match=says):
        ir.parse(text, as_written=True)


def test_a_flip_of_a_scan_over_another_dim_is_a_flip_after_it():
    assert [s.node.op for s in ir.stages(ir.parse("cumsum(x, dim=1).flip(0)", as_written=True))] == ["cumsum", "flip"]


def test_the_spec_says_what_each_output_accumulates_over():
    spec = _spec("cumsum(x, dim=0)", [[7, 3]])
    assert spec["reduce"] == {"inputs": ["x"], "dim": 0} and spec["scan"] is True
    assert "scan" not in validate({**_spec("sum(x, dim=0)", [[7, 3]]), "scan": True})     # derived, never taken
    assert spec["outputs"][0]["shapes"] == [[7, 3]]
    assert parse_expression(spec).attr("reverse") is False


def test_the_judge_allows_a_float32_scan_its_walk_and_no_more():
    # Every partial sum is an output: float32's atol grows with the scanned length, as for a matmul's K.
    x = torch.randn(4, 8192, dtype=torch.float64)
    want = x.cumsum(-1)
    honest = x.float().cumsum(-1)                    # torch's own float32 scan
    assert harness.compare(honest, want, torch.float32, 8192, scan=True).problem == ""
    wrong = honest.clone()
    wrong[2, 5000] += 0.05
    assert harness.compare(wrong, want, torch.float32, 8192, scan=True).problem != ""
    assert protocol.tolerance("float32", 8192, scan=True)[1] == pytest.approx(8192 * protocol.ATOL["float32"])
    assert protocol.tolerance("float16", 8192, scan=True) == protocol.tolerance("float16", 8192)


def test_cases_of_both_layouts_share_one_space(tmp_path):
    spec = _spec("cumsum(x, dim=0)", [[37, 97], [97]])          # B > 1 then B == 1
    _, module = generate_reduction(tmp_path, spec)
    keys = {k for config in module.CONFIGS for k in config}
    assert {"BLOCK_B", "BLOCK_R"} <= keys
    check_reduction(tmp_path, spec, configs=tuple(module.CONFIGS))


def test_empty_inputs_give_an_empty_output(tmp_path):
    spec = _spec("cumsum(x, dim=0)", [[2, 5]], ("float32",))
    _, module = generate_reduction(tmp_path, spec)
    assert module.op(torch.empty(0, 5)).shape == (0, 5)


def test_inputs_from_the_runner_s_own_draw(tmp_path):
    # The runner's inputs (its seeds and domains), as the harness runs the kernel.
    spec = _spec("cumsum(x, dim=-1, reverse=True)", [[5, 300]])
    reference, module = generate_reduction(tmp_path, spec)
    for case in protocol.cases(spec):
        for variant in protocol.dtype_variants(spec):
            (x,) = runner_inputs.make_inputs(spec, case, variant, 3, "cpu")
            want = reference(x.double())
            rtol, atol = protocol.tolerance(variant["x"], x.shape[-1])
            assert bool(((module.op(x).double() - want).abs() <= atol + rtol * want.abs()).all())


def test_a_scan_with_an_epilogue_is_a_chain_of_two_kernels():
    assert [s.node.op for s in ir.stages(ir.parse("cumsum(x, dim=1) * 2.0"))] == ["cumsum", "mul"]


@pytest.mark.gpu
@pytest.mark.parametrize("expression", ["cumsum(x, dim=0)", "cummax(x, dim=0, reverse=True)",
                                        "cumprod(1.0 + 0.001 * x, dim=1, exclusive=True)"])
def test_on_the_gpu_chunks_chained_by_look_back_match_torch(tmp_path, expression):
    # On the GPU a look-back kernel's chunks of D run at once, so a chunk reads the totals of chunks
    # still running (the interpreter runs them in order): every config, each run three times.
    spec = _spec(expression, [[4099, 1000], [3, 2000, 37]], ("float32",))
    reference, module = generate_reduction(tmp_path, spec)
    assert any(c.get("LOOKBACK") for c in module.CONFIGS)
    for case in protocol.cases(spec):
        x = runner_inputs.make_inputs(spec, case, {"x": "float32"}, 0, "cuda")[0]
        want = reference(x.double())
        rtol, atol = protocol.tolerance("float32", x.shape[spec["reduce"]["dim"]], scan=True)
        for config in (None, *module.CONFIGS):
            for _ in range(3):
                err = (module.op(x, config=config).double() - want).abs()
                assert bool((err <= atol + rtol * want.abs()).all()), f"{case.label} {config}: max err {err.max():.3g}"


@pytest.mark.parametrize("words, typed", [
    ("cumsum over the last dim of 64x1000", "cumsum(x, dim=-1)"),
    ("running product over dim 0 of 100x37 in bf16", "cumprod(x, dim=0)"),
    ("累加和 沿最后一维 64x1000", "cumsum(x, dim=-1)"),
    ("累积最大值 沿 dim 0 64x100", "cummax(x, dim=0)"),
])
def test_scans_in_words_in_english_and_chinese(words, typed):
    spec, _ = parse_request(words)
    assert ir.parse(spec["expression"]) == ir.parse(typed)


@pytest.mark.parametrize("words, dim", [("masked cumsum over the last dim of 128x4000 fp16", -1),
                                        ("masked cumsum over dim 0 of 64x64", 0),
                                        ("掩码前缀和 over the last dim of 8x8", -1)])
def test_a_masked_cumsum_in_words_sums_what_a_bool_mask_keeps(words, dim):
    spec, _ = parse_request(words)
    assert spec["expression"] == f"cumsum(where(mask, x, 0.0), dim={dim})"
    assert {i["name"]: i["dtypes"][0] for i in spec["inputs"]}["mask"] == "bool"


def test_cummax_indices_are_refused_naming_them():
    with pytest.raises(GenerationError, match="cummax's indices .* are not supported"):
        parse_request("torch.cummax(x, dim=1).indices for 8x20")
