"""The loss family (bot.ops.loss): cross_entropy over the last dim, nll_loss, and torch's other losses as
formulas; generated kernel.py files imported and run on small odd shapes against the generated reference
on float64 inputs, within runner.protocol's tolerance for what the output accumulates over; the formulas
against torch.nn.functional's own in float64."""
from __future__ import annotations

import math
import re

import pytest
import torch

from generated import load, make_spec
from lowering import ALIGNED_CONFIG, MATRIX, ODD_ROWS, aligned_only, check, check_reduction, generate_reduction

from bot import ir, lower_torch, testgen
from bot.generators.interface import GenerationError
from bot.request import parse_request
from bot.ops import loss
from bot.spec import SpecError, parse_expression, validate
from runner import protocol
from runner.inputs import make_inputs

# Masked lanes compute on placeholders (rows past the end reach -inf - -inf in cross entropy).
pytestmark = pytest.mark.filterwarnings("ignore::RuntimeWarning")


@pytest.mark.parametrize("reduction", ["mean", "sum", "none"])
@pytest.mark.parametrize("logits", ["x", "x * 0.5 + y"])
def test_cross_entropy(tmp_path, logits, reduction):
    names = ir.input_names(ir.parse(logits))
    shapes = {n: [MATRIX, [2, 3, 50]] for n in names} | {"t": [[37], [2, 3]]}
    check_reduction(tmp_path, make_spec(f"cross_entropy({logits}, t, reduction='{reduction}')", shapes))


@pytest.mark.parametrize("reduction", ["mean", "none"])
def test_cross_entropy_long_rows_in_chunks(tmp_path, reduction):
    # Logits up to ~100: without the running max's rescaling exp() would overflow float32.
    spec = make_spec(f"cross_entropy(x * 30.0, t, reduction='{reduction}')",
                     {"x": [[5, 1000], MATRIX], "t": [[5], [37]]})
    _, module = generate_reduction(tmp_path, spec)
    chunked = [{"BLOCK_R": 2, "BLOCK_V": 64, "num_warps": 4, "num_stages": 2}]
    check_reduction(tmp_path, spec, configs=(None, *chunked, *module.CONFIGS, *loss.CROSS_ENTROPY_CONFIGS))


def test_cross_entropy_target_out_of_range_picks_zero(tmp_path):
    # The target's logit is one direct load per row: a target outside [0, V) must read nothing
    # (no out-of-bounds access) and count as a logit of 0, as documented in kernel.py.
    spec = make_spec("cross_entropy(x, t, reduction='none')", {"x": [MATRIX], "t": [[37]]}, ("float32",))
    reference, module = generate_reduction(tmp_path, spec)
    x, t = torch.randn(MATRIX), torch.randint(0, 97, (37,))
    t[3], t[10] = 97, -1
    got, want = module.op(x, t), reference(x, t.clamp(0, 96))
    inside = torch.ones(37, dtype=torch.bool)
    inside[[3, 10]] = False
    torch.testing.assert_close(got[inside], want[inside])
    torch.testing.assert_close(got[~inside], torch.logsumexp(x[[3, 10]], dim=-1))


@pytest.mark.parametrize("logits", ["x", "x * 0.5 + y", "x - x_next"])
def test_cross_entropy_persistent_kernel(tmp_path, logits):
    # PER_SM programs per SM (4 SMs on CPU) loop over rows that fit one tile, one or two at a time,
    # the last step partly past R; the one-program-per-row kernel is removed to be sure.
    names = ir.input_names(ir.parse(logits))
    spec = make_spec(f"cross_entropy({logits}, t, reduction='none')", {n: [MATRIX] for n in names} | {"t": [[37]]},
                     ("float32",))
    reference, module = generate_reduction(tmp_path, spec)
    module.op_kernel = None
    inputs = make_inputs(spec, protocol.cases(spec)[0], protocol.dtype_variants(spec)[0], 0, "cpu")
    want = reference(*[i.double() if i.is_floating_point() else i for i in inputs])
    for block_r in (1, 2):
        config = {"BLOCK_R": block_r, "BLOCK_V": 128, "num_warps": 1, "num_stages": 1, "PER_SM": 1}
        torch.testing.assert_close(module.op(*inputs, config=config), want.float())


@pytest.mark.parametrize("reduction", ["mean", "none"])
def test_cross_entropy_ignores_padding_as_torch_does(tmp_path, reduction):
    # Target -100 (torch's default ignore_index): no loss, and 'mean' averages over the other rows;
    # all of them padding makes 'mean' 0 / 0, NaN, in torch and here.
    spec = make_spec(f"cross_entropy(x, t, reduction='{reduction}')", {"x": [[6, 97]], "t": [[6]]}, ("float32",))
    reference, module = generate_reduction(tmp_path, spec)
    x, t = torch.randn(6, 97), torch.randint(0, 97, (6,))
    t[[1, 4]] = protocol.IGNORE_INDEX
    torch.testing.assert_close(module.op(x, t), reference(x, t))
    padding = torch.full_like(t, protocol.IGNORE_INDEX)
    torch.testing.assert_close(module.op(x, padding), reference(x, padding), equal_nan=True)


@pytest.mark.parametrize("loss, ignore", [("cross_entropy", 3), ("cross_entropy", -1), ("nll_loss", 0),
                                          ("cross_entropy_grad", 5)])
@pytest.mark.parametrize("reduction", ["mean", "none"])
def test_any_ignore_index_is_torchs_and_drawn_as_padding(tmp_path, loss, ignore, reduction):
    # A row whose target is the loss's own ignore_index adds no loss, no count to 'mean' and no
    # gradient (one inside [0, V) too); -100 is then an ordinary, out-of-range target torch refuses,
    # so the generated tests draw the ignored index as padding instead.
    up = ", u" if loss == "cross_entropy_grad" else ""
    spec = make_spec(f"{loss}(x, t{up}, reduction='{reduction}', ignore_index={ignore})",
                     {"x": [[6, 17]], "t": [[6]]} | ({"u": [[6] if reduction == "none" else []]} if up else {}),
                     ("float32",))
    assert next(i for i in spec["inputs"] if i["name"] == "t")["padding"] == ignore
    reference, module = generate_reduction(tmp_path, spec)
    inputs = make_inputs(spec, protocol.cases(spec)[0], protocol.dtype_variants(spec)[0], 0, "cpu")
    x, t = inputs[:2]
    t[[1, 4]] = ignore
    assert protocol.IGNORE_INDEX not in t.tolist()
    torch.testing.assert_close(module.op(*inputs), reference(*inputs))
    if loss == "cross_entropy_grad":
        logits = x.double().requires_grad_()
        lost = torch.nn.functional.cross_entropy(logits, t, reduction=reduction, ignore_index=ignore)
        lost.backward(inputs[2].double())
        torch.testing.assert_close(module.op(*inputs).double(), logits.grad)
        assert not module.op(*inputs)[[1, 4]].any()
    else:
        f = getattr(torch.nn.functional, loss)
        torch.testing.assert_close(module.op(*inputs).double(), f(x.double(), t, reduction=reduction, ignore_index=ignore))


@pytest.mark.parametrize("loss", ["cross_entropy", "nll_loss", "cross_entropy_grad"])
@pytest.mark.parametrize("reduction", ["mean", "sum", "none"])
def test_class_weights_are_torchs(tmp_path, loss, reduction):
    # Each row's loss (and gradient) times its target's weight; 'mean' divides by the weights of the rows
    # not ignored (ignore_index 2 here, inside [0, V): its weight must not count). Weights drawn positive.
    up = ", u" if loss == "cross_entropy_grad" else ""
    spec = make_spec(f"{loss}(x, t{up}, weight=w, reduction='{reduction}', ignore_index=2)",
                     {"x": [[7, 13]], "t": [[7]], "w": [[13]]} | ({"u": [[7] if reduction == "none" else []]} if up else {}),
                     ("float32",))
    assert next(i for i in spec["inputs"] if i["name"] == "w")["domain"] == "positive"
    reference, module = generate_reduction(tmp_path, spec)
    inputs = make_inputs(spec, protocol.cases(spec)[0], protocol.dtype_variants(spec)[0], 0, "cpu")
    by_name = dict(zip((i["name"] for i in spec["inputs"]), inputs))
    x, t, w = by_name["x"], by_name["t"], by_name["w"]
    t[[0, 5]] = 2
    logits = x.double().requires_grad_()
    f = torch.nn.functional.nll_loss if loss == "nll_loss" else torch.nn.functional.cross_entropy
    want = f(logits, t, weight=w.double(), reduction=reduction, ignore_index=2)
    if up:
        want.backward(by_name["u"].double())
        want = logits.grad
    torch.testing.assert_close(reference(*inputs).double(), want.detach(), rtol=1e-5, atol=1e-6)
    torch.testing.assert_close(module.op(*inputs).double(), want.detach(), rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("reduction", ["mean", "sum", "none"])
def test_label_smoothing_in_every_kernel_is_torchs(tmp_path, reduction):
    # (1 - e) * nll + e * (logsumexp - mean of the row), ignored rows out of both, in the chunked, the
    # persistent and the aligned kernels (rows of 1031 with an unaligned start: head and tail edges)
    spec = make_spec(f"cross_entropy(x * 3.0, t, reduction='{reduction}', label_smoothing=0.15)",
                     {"x": [ODD_ROWS], "t": [[5]]}, ("float32",))
    reference, module = generate_reduction(tmp_path, spec)
    x, t = torch.randn(ODD_ROWS), torch.tensor([3, 1030, 0, protocol.IGNORE_INDEX, 1029])
    want = torch.nn.functional.cross_entropy(x.double() * 3.0, t, reduction=reduction, label_smoothing=0.15)
    torch.testing.assert_close(reference(x.double(), t), want)
    configs = [{"BLOCK_R": 2, "BLOCK_V": 64, "num_warps": 4, "num_stages": 2},
               {"BLOCK_R": 2, "BLOCK_V": 2048, "num_warps": 1, "num_stages": 1, "PER_SM": 1}]
    for config in configs:
        torch.testing.assert_close(module.op(x, t, config=config).double(), want, rtol=1e-5, atol=1e-5)
    aligned_only(module)
    torch.testing.assert_close(module.op(x[:, 1:], t.clamp(max=1029), config=ALIGNED_CONFIG).double(),
                               torch.nn.functional.cross_entropy(x[:, 1:].double() * 3.0, t.clamp(max=1029),
                                                                 reduction=reduction, label_smoothing=0.15),
                               rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("request_text", [
    "F.cross_entropy(x.flatten(0, 1), t.flatten()) with x 2x6x50 and t 2x6 fp32",
    "F.cross_entropy((x @ w).flatten(0, 1), t.flatten(), label_smoothing=0.1) with x 2x6x16, w 16x50 and t 2x6 fp32",
])
def test_a_loss_over_flattened_tokens_has_its_reference_and_tests(tmp_path, request_text):
    # the target a view of an input (targets.view(-1)): its reference, generated tests and kernels
    spec, _ = parse_request(request_text)
    node = parse_expression(spec)
    reference = getattr(load(tmp_path, "reference.py", lower_torch.reference_source(spec, node)), spec["name"])
    assert testgen.reference_test_source(spec) and testgen.kernel_test_source(spec)
    args = {i["name"]: (torch.randint(0, 50, i["shapes"][0]) if i["dtypes"][0] == "int64"
                        else torch.randn(i["shapes"][0], dtype=torch.float64)) for i in spec["inputs"]}
    logits = args["x"] @ args["w"] if "w" in args else args["x"]
    want = torch.nn.functional.cross_entropy(logits.flatten(0, 1), args["t"].flatten(),
                                             label_smoothing=0.1 if "smoothing" in request_text else 0.0)
    torch.testing.assert_close(reference(*args.values()), want)
    check_kernel(tmp_path, spec)


def test_label_smoothing_is_read_and_refused_outside_0_to_1():
    assert ir.to_text(ir.parse("F.cross_entropy(x, t, label_smoothing=0.1)", as_written=True)) == \
        "cross_entropy(x, t, label_smoothing=0.1)"
    with pytest.raises(ir.IRError, match="label_smoothing must be in"):
        ir.parse("F.cross_entropy(x, t, label_smoothing=-0.1)", as_written=True)


@pytest.mark.parametrize("reduction", ["mean", "none"])
def test_cross_entropy_aligned_rows(tmp_path, reduction):
    spec = make_spec(f"cross_entropy(x * 30.0, t, reduction='{reduction}')", {"x": [ODD_ROWS], "t": [[5]]})
    reference, module = generate_reduction(tmp_path, spec)
    aligned_only(module)
    x, t = torch.randn(ODD_ROWS), torch.tensor([3, 1030, 0, protocol.IGNORE_INDEX, 1029])  # targets in head, tail
    x[1, 1030] = x[2, 0] = 5.0                            # the running max set by the edge
    for config in (None, ALIGNED_CONFIG):
        torch.testing.assert_close(module.op(x, t, config=config), reference(x.double(), t).float())


# ---------------------------------------------------------------- elementwise losses

ELEMENTWISE = [("mse_loss", {}), ("l1_loss", {}), ("smooth_l1_loss", {"beta": 0.5}), ("smooth_l1_loss", {"beta": 0.0}),
               ("huber_loss", {"delta": 2.0}), ("binary_cross_entropy_with_logits", {}), ("soft_margin_loss", {}),
               ("kl_div", {}), ("kl_div", {"log_target": True})]


@pytest.mark.parametrize("reduction", ["mean", "sum", "none"])
@pytest.mark.parametrize("name, params", ELEMENTWISE + [("kl_div", {"3-D": True})], ids=[f"{n}{p}" for n, p in ELEMENTWISE]
                         + ["kl_div 3-D"])
def test_elementwise_losses_are_pytorchs(name, params, reduction):
    # The formula the family writes against torch.nn.functional's own, in float64, on inputs
    # where every branch is taken (|x - y| on both sides of beta and delta, positive targets for KL);
    # KL's batchmean (the sum over the batch) on a 3-D input too.
    shape = (6, 7, 5) if params.get("3-D") else (64, 33)
    params = {k: v for k, v in params.items() if k != "3-D"}
    reduction = "batchmean" if len(shape) == 3 and reduction == "sum" else reduction
    keywords = "".join(f", {k}={v!r}" for k, v in params.items())
    node = ir.parse(f"{name}(x, y{keywords}, reduction='{reduction}')", as_written=True)
    gen = torch.Generator().manual_seed(0)
    x, y = torch.randn(shape, generator=gen, dtype=torch.float64) * 3, torch.rand(shape, generator=gen, dtype=torch.float64)
    names = {"x": "x", "y": "y"}
    spec = {"inputs": [{"name": "x", "dtypes": ["float64"]}, {"name": "y", "dtypes": ["float64"]}]}
    lines, result = lower_torch.torch_lines(spec, node, names)
    scope = {"torch": torch, "x": x, "y": y}
    for line in lines:
        exec(line, scope)
    got = eval(result, scope)
    want = getattr(torch.nn.functional, name)(x, y, reduction=reduction, **params)
    torch.testing.assert_close(got, want, rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("call", [
    "binary_cross_entropy_with_logits(x, y, pos_weight=p, reduction='REDUCTION')",
    "binary_cross_entropy_with_logits(x, y, w, pos_weight=p, reduction='REDUCTION')",
    "binary_cross_entropy_with_logits(x, y, weight=w, reduction='REDUCTION')",
    "binary_cross_entropy(sigmoid(x), y, weight=w, reduction='REDUCTION')",
    "multilabel_soft_margin_loss(x, y, weight=p, reduction='REDUCTION')"])
@pytest.mark.parametrize("reduction", ["mean", "none"])
def test_binary_losses_weights_are_torchs(tmp_path, call, reduction):
    # weight scales each element (inside multilabel's mean over classes), pos_weight the positive
    # term, each broadcast as torch broadcasts it: the kernel and the reference against torch's own
    expression = call.replace("REDUCTION", reduction)
    names = ir.input_names(ir.parse(expression))
    shapes = {"x": [9, 13], "y": [9, 13], "w": [9, 1], "p": [13]}
    spec = make_spec(expression, {n: [shapes[n]] for n in names}, ("float32",))
    node = parse_expression(spec)            # the nested means of multilabel's: a chain of two kernels
    reference = getattr(load(tmp_path, "reference.py", lower_torch.reference_source(spec, node)), spec["name"])
    kernel = getattr(load(tmp_path, "kernel.py", ir.kernel_source(spec, node, {})), spec["name"])
    gen = torch.Generator().manual_seed(1)
    values = {"x": torch.randn(9, 13, generator=gen) * 3, "y": torch.rand(9, 13, generator=gen),
              "w": torch.rand(9, 1, generator=gen) * 2, "p": torch.rand(13, generator=gen) * 3}
    args = [values[n] for n in names]
    torch_call = eval("torch.nn.functional." + expression.replace("sigmoid(x)", "torch.sigmoid(x)"),
                      {"torch": torch, **{n: v.double() for n, v in values.items()}})
    torch.testing.assert_close(reference(*[a.double() for a in args]), torch_call)
    # float32 rounding of log(1 - sigmoid(x)) near 1 (torch's own float32 shares it), not the weights
    torch.testing.assert_close(kernel(*args).double(), torch_call, rtol=1e-4, atol=1e-4)


# losses whose input has a domain of its own: a probability (x in (0, 1), 0 and 1 included, where torch
# clamps each log at -100), a Poisson rate or its log, logits of several labels a row
DOMAIN_LOSSES = [("binary_cross_entropy", {}, lambda x: torch.sigmoid(x)), ("binary_cross_entropy", {}, "edges"),
                 ("poisson_nll_loss", {}, None), ("poisson_nll_loss", {"log_input": False, "full": True}, torch.abs),
                 ("poisson_nll_loss", {"full": True, "eps": 0.5}, None), ("multilabel_soft_margin_loss", {}, None)]


@pytest.mark.parametrize("reduction", ["mean", "sum", "none"])
@pytest.mark.parametrize("name, params, to_domain", DOMAIN_LOSSES, ids=[f"{n}{p}{'' if d != 'edges' else ' 0 and 1'}"
                                                                        for n, p, d in DOMAIN_LOSSES])
def test_losses_with_input_domains_are_pytorchs(name, params, to_domain, reduction):
    gen = torch.Generator().manual_seed(1)
    x, y = torch.randn(64, 33, generator=gen, dtype=torch.float64) * 3, torch.rand(64, 33, generator=gen, dtype=torch.float64) * 3
    if to_domain == "edges":
        x, y = torch.sigmoid(x), y / 3
        x[0, :3] = torch.tensor([0.0, 1.0, 1e-60], dtype=torch.float64)
    elif to_domain is not None:
        x = to_domain(x)
    if name != "poisson_nll_loss":
        y = y / 3
    keywords = "".join(f", {k}={v!r}" for k, v in params.items())
    node = ir.parse(f"{name}(x, y{keywords}, reduction='{reduction}')", as_written=True)
    spec = {"inputs": [{"name": "x", "dtypes": ["float64"]}, {"name": "y", "dtypes": ["float64"]}]}
    lines, result = lower_torch.torch_lines(spec, node, {"x": "x", "y": "y"})
    scope = {"torch": torch, "x": x, "y": y}
    for line in lines:
        exec(line, scope)
    want = getattr(torch.nn.functional, name)(x, y, reduction=reduction, **params)
    torch.testing.assert_close(eval(result, scope), want, rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("reduction", ["mean", "none"])
@pytest.mark.parametrize("call, domain", [("binary_cross_entropy(p, y", "unit"), ("poisson_nll_loss(p, y", "normal"),
                                          ("multilabel_soft_margin_loss(p, y", "normal"),
                                          ("binary_cross_entropy(torch.sigmoid(p), y", "normal")])
def test_losses_with_input_domains_lower_and_draw_their_inputs_there(tmp_path, call, domain, reduction):
    # a probability under log(p) and log(1 - p) is drawn inside (0, 1); a sigmoid's input anywhere
    spec = make_spec(f"{call}, reduction='{reduction}')", {"p": [[7, 13]], "y": [[7, 13]]})
    assert {i["name"]: i["domain"] for i in spec["inputs"]}["p"] == domain
    check_kernel(tmp_path, spec)


@pytest.mark.parametrize("request_text", ["F.kl_div(x, y, reduction='sum', log_target=True) for 8x16 fp32",
                                          "kl divergence between x and y, summed, 8x16 fp32",
                                          "soft margin loss of x and y on 8x16 fp32"])
def test_the_kernel_takes_its_inputs_in_the_order_written(tmp_path, request_text):
    # the formulas read the target first (y * (log(y) - x)); the signature is torch's: (input, target)
    spec, _ = parse_request(request_text)
    assert [i["name"] for i in spec["inputs"]] == ["x", "y"]
    kernel = getattr(load(tmp_path, "kernel.py", ir.kernel_source(spec, parse_expression(spec), {})), spec["name"])
    x, y = torch.randn(8, 16), torch.rand(8, 16) + 0.1
    fn, kw = (("kl_div", {"reduction": "sum", "log_target": "log_target" in request_text}) if "kl" in request_text
              else ("soft_margin_loss", {}))
    torch.testing.assert_close(kernel(x, y), getattr(torch.nn.functional, fn)(x, y, **kw), rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("expression", ["mse_loss(x, y)", "smooth_l1_loss(x, y, beta=0.5, reduction='sum')",
                                        "binary_cross_entropy_with_logits(x, y, reduction='none')"])
def test_elementwise_losses_lower_to_one_kernel_and_pass(tmp_path, expression):
    spec = make_spec(expression, {"x": [MATRIX, [3, 1031]], "y": [MATRIX, [3, 1031]]})
    if "none" in expression:            # one loss per element: the pointwise kernel
        assert ir.kind(ir.parse(spec["expression"])) == "pointwise"
        check(tmp_path, spec)
    else:                               # every element reduced: the dim template, [1, numel, 1]
        assert ir.kind(ir.parse(spec["expression"])) == "reduce"
        check_reduction(tmp_path, spec)


def test_elementwise_loss_refusals_name_what_works():
    with pytest.raises(ir.IRError, match="mse_loss reduction must be 'mean', 'sum' or 'none', got \"'batchmean'\""):
        ir.parse("mse_loss(x, y, reduction='batchmean')")
    with pytest.raises(ir.IRError, match="size_average=True is not supported"):
        ir.parse("mse_loss(x, y, size_average=True)")
    with pytest.raises(ir.IRError, match="mse_loss takes input and target; target missing"):
        ir.parse("mse_loss(x)")


@pytest.mark.parametrize("call", ["triplet_margin_loss(a, b, c)", "triplet_margin_loss(a, b, c, margin=0.3, p=1, eps=0.01)",
                                  "triplet_margin_loss(a, b, c, reduction='sum')",
                                  "triplet_margin_loss(a, b, c, 2.0, reduction='none')"])
def test_triplet_margin_loss_is_pytorchs(tmp_path, call):
    shapes = {n: [7, 13] for n in "abc"}
    spec = make_spec(call, {n: [s] for n, s in shapes.items()})
    node = ir.parse(spec["expression"], as_written=True)
    gen = torch.Generator().manual_seed(1)
    t = {n: torch.randn(s, generator=gen) for n, s in shapes.items()}
    reference = getattr(load(tmp_path, "reference.py", lower_torch.reference_source(spec, node)), spec["name"])
    want = eval("torch.nn.functional." + call, {"torch": torch, **{n: v.double() for n, v in t.items()}})
    torch.testing.assert_close(reference(*[v.double() for v in t.values()]), want, rtol=1e-12, atol=1e-12)
    kernel = getattr(load(tmp_path, "kernel.py", ir.kernel_source(spec, node, {})), spec["name"])
    torch.testing.assert_close(kernel(*t.values()).double(), want, rtol=1e-4, atol=1e-5)


def test_triplet_margin_loss_refusals_name_what_works():
    with pytest.raises(ir.IRError, match="swap=True is not supported"):
        ir.parse("triplet_margin_loss(a, b, c, swap=True)")
    with pytest.raises(ir.IRError, match="negative missing"):
        ir.parse("triplet_margin_loss(a, b)")


@pytest.mark.parametrize("words, call", [
    ("mse loss between x and y of 64x256 fp32", "F.mse_loss(x, y)"),
    ("smooth l1 loss beta 0.5 per element on 8x16", "F.smooth_l1_loss(x, y, beta=0.5, reduction='none')"),
    ("huber loss with delta 2, summed, 64x256", "F.huber_loss(x, y, delta=2.0, reduction='sum')"),
    ("binary cross entropy with logits 64x128", "F.binary_cross_entropy_with_logits(logits, target)"),
    ("triplet margin loss margin 0.5 on 128x256", "F.triplet_margin_loss(anchor, positive, negative, margin=0.5)"),
    ("均方误差 64x256", "F.mse_loss(x, y)"),
    ("p 与 q 之间的 kl 散度 8x16", "F.kl_div(p, q)"),
    ("cross entropy, reduction sum, 64x1000", "F.cross_entropy(logits, target, reduction='sum')"),
    # torch's other formulas, and losses as people name them that torch has no function for
    ("hinge embedding loss on 128x10", "F.hinge_embedding_loss(x, y)"),
    ("margin ranking loss with margin 0.2 on 128x1", "F.margin_ranking_loss(x1, x2, y, margin=0.2)"),
    ("hinge loss of 8x16", "mean(relu(1.0 - x * y), dim=None)"),      # every element, as a loss reduces
    ("hinge loss between p and t, summed, over the last dim of 8x16", "torch.sum(torch.relu(1.0 - p * t), dim=-1)"),
    ("cosine similarity between x and y over the last dim of 8x16", "F.cosine_similarity(x, y, dim=-1)"),
    ("cosine similarity loss on 128x512", "torch.mean(1 - F.cosine_similarity(x, y, dim=1))"),
    ("mse loss between 4096x1024 tensors", "F.mse_loss(x, y)"),
    # the operands named beside their shapes, or counted
    ("smooth L1 loss between 64x32 predictions and targets", "F.smooth_l1_loss(predictions, targets)"),
    ("hinge loss on scores 64 and labels 64", "mean(relu(1.0 - scores * labels), dim=None)"),
    ("cosine similarity of a and b 16x32 along dim 1", "F.cosine_similarity(a, b, dim=1)"),
    ("cosine similarity along dim 1 of two 16x32 tensors", "F.cosine_similarity(x, y, dim=1)"),
    ("mse loss on the two 32x32 inputs", "F.mse_loss(x, y)"),
    ("kl divergence loss on 128x1000 with batchmean reduction", "F.kl_div(x, y, reduction='batchmean')"),
    ("nll loss of 512x1000 fp16 log-probabilities, summed", "F.nll_loss(log_probs, target, reduction='sum')"),
    ("cross entropy with label smoothing 0.1 on 4096x32000 logits", "F.cross_entropy(logits, target, label_smoothing=0.1)"),
    ("交叉熵 标签平滑 0.2 4096x1000", "F.cross_entropy(logits, target, label_smoothing=0.2)"),
    ("negative log likelihood loss per row of 64x10", "F.nll_loss(log_probs, target, reduction='none')"),
    ("负对数似然损失 64x10", "F.nll_loss(log_probs, target)"),
    ("binary cross entropy between 64x128 probabilities p and targets y", "F.binary_cross_entropy(p, y)"),
    ("bce loss, summed, 64x128", "F.binary_cross_entropy(x, y, reduction='sum')"),
    ("二元交叉熵 64x64", "F.binary_cross_entropy(x, y)"),
    ("poisson nll loss 64x128", "F.poisson_nll_loss(x, y)"),
    ("multilabel soft margin loss per element of 8x16", "F.multilabel_soft_margin_loss(x, y, reduction='none')"),
])
def test_losses_in_words(words, call):
    spec, _ = parse_request(words)
    assert ir.parse(spec["expression"], as_written=True) == ir.parse(call, as_written=True)


@pytest.mark.parametrize("words, says", [
    ("mse loss and huber loss of 8x16", "which loss"),
    ("mse loss with margin 2 of 8x16", "mse_loss takes no margin"),
    ("l1 loss with batchmean of 8x16", "'batchmean' is kl_div's"),
    ("nll loss and cross entropy of 8x16", "which one"),
    ("nll loss with label smoothing of 8x16", "nll_loss with 'label smoothing' is not supported"),
    ("cross entropy of 4096x32000 logits with int32 targets", "int64"),
    ("cosine similarity summed on 8x8", "not a loss to reduce"),
])
def test_loss_words_refused_say_what_works(words, says):
    with pytest.raises(GenerationError, match=says):
        parse_request(words)


# ---------------------------------------------------------------- targets of ±1, NLL

def check_kernel(tmp_path, spec: dict) -> None:
    """The generated kernel (one family's, or a chain's stages) against the generated reference on float64
    copies of the runner's inputs, drawn from their domains (±1 targets, class indices with padding), on
    every case x dtype, within runner.protocol's tolerance for what the output accumulates over."""
    node = parse_expression(spec)
    reference = getattr(load(tmp_path, "reference.py", lower_torch.reference_source(spec, node)), spec["name"])
    kernel = getattr(load(tmp_path, "kernel.py", ir.kernel_source(spec, node, {})), spec["name"])
    for case in protocol.cases(spec):
        for v, variant in enumerate(protocol.dtype_variants(spec)):
            inputs = make_inputs(spec, case, variant, 0, "cpu")
            want = reference(*[t.double() if t.is_floating_point() else t for t in inputs])
            got = kernel(*inputs)
            dtype = spec["outputs"][0]["dtypes"][v]
            assert list(got.shape) == list(want.shape) and got.dtype == getattr(torch, dtype), (dtype, got.shape)
            length = protocol.accumulated_length(spec["reduce"], case.shapes) if spec.get("reduce") else 1
            rtol, atol = protocol.tolerance(dtype, length)
            err = (got.double() - want).abs()
            assert bool((err <= atol + rtol * want.abs()).all()), f"{dtype}: max err {err.max():.3g}"


def with_values(values: list[float], shape: list[int]) -> torch.Tensor:
    """values repeated over shape, in float64."""
    n = math.prod(shape)
    return torch.tensor([values[i % len(values)] for i in range(n)], dtype=torch.float64).reshape(shape)


# torch compares these targets with 1 and -1; any other value (0, 2, -0.5) gives what torch gives too.
TARGETED = [("hinge_embedding_loss(x, y, margin=0.5", {"x": [6, 5], "y": [6, 5]}),
            ("hinge_embedding_loss(x, y", {"x": [6, 5], "y": [5]}),
            ("margin_ranking_loss(x1, x2, y, margin=0.3", {"x1": [6, 5], "x2": [6, 5], "y": [6, 5]}),
            ("cosine_embedding_loss(x1, x2, y, margin=0.2", {"x1": [6, 5], "x2": [6, 5], "y": [6]}),
            ("cosine_embedding_loss(x1, x2, y", {"x1": [5], "x2": [5], "y": []})]


@pytest.mark.parametrize("reduction", ["mean", "sum", "none"])
@pytest.mark.parametrize("call, shapes", TARGETED, ids=[f"{c.split('(')[0]} {s['x1' if 'x1' in s else 'x']}"
                                                       for c, s in TARGETED])
def test_losses_of_sign_targets_are_pytorchs_for_any_target(tmp_path, call, shapes, reduction):
    expression = f"{call}, reduction='{reduction}')"
    spec = make_spec(expression, {n: [s] for n, s in shapes.items()})
    assert {i["name"]: i["domain"] for i in spec["inputs"]}["y"] == ("normal" if "ranking" in call else "sign")
    reference = getattr(load(tmp_path, "reference.py", lower_torch.reference_source(spec, parse_expression(spec))), "op")
    gen = torch.Generator().manual_seed(2)
    t = {n: torch.randn(s, generator=gen, dtype=torch.float64) for n, s in shapes.items()}
    t["y"] = with_values([1.0, -1.0, 0.0, 2.0, -0.5, -1.0, 1.0], shapes["y"])
    if "x1" in t and t["x1"].dim() == 2:
        t["x1"][1] *= 1e-8              # a squared norm below cosine_embedding_loss's 1e-12
    want = eval("torch.nn.functional." + expression, {"torch": torch, **t})
    got = reference(*[t[i["name"]] for i in spec["inputs"]])
    torch.testing.assert_close(got, want, rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("reduction", ["mean", "sum", "none"])
@pytest.mark.parametrize("call, shapes", [
    ("hinge_embedding_loss(x, y, margin=0.5", {"x": [[7, 13]], "y": [[7, 13]]}),
    ("margin_ranking_loss(x1, x2, y, margin=0.1", {"x1": [[37]], "x2": [[37]], "y": [[37]]}),
    ("cosine_embedding_loss(x1, x2, y, margin=0.1", {"x1": [[7, 13]], "x2": [[7, 13]], "y": [[7]]}),
    ("nll_loss(x, t", {"x": [[7, 13]], "t": [[7]]}),
], ids=["hinge", "margin_ranking", "cosine_embedding", "nll"])
def test_loss_kernels_match_the_reference_in_every_reduction(tmp_path, call, shapes, reduction):
    check_kernel(tmp_path, make_spec(f"{call}, reduction='{reduction}')", shapes))


@pytest.mark.parametrize("expression, shapes", [
    ("nll_loss(x - b, t, reduction='sum')", {"x": [[7, 13]], "b": [[13]], "t": [[7]]}),
    ("nll_loss(log_softmax(x, dim=1), t)", {"x": [[7, 13]], "t": [[7]]}),
])
def test_nll_loss_of_a_broadcast_input_and_of_log_softmax(tmp_path, expression, shapes):
    # b is read through its strides (never copied out to [7, 13]); log_softmax is a stage of its own,
    # whose classes the target indexes (drawn over x's last dim).
    spec = make_spec(expression, shapes)
    assert {i["name"]: i.get("index_of") for i in spec["inputs"]}["t"] == "x"
    check_kernel(tmp_path, spec)


@pytest.mark.parametrize("reduction", ["mean", "sum", "none"])
def test_nll_loss_reads_only_each_rows_target_element(tmp_path, reduction):
    # Every element but the targets' is NaN: none is read. Padding (-100) adds nothing and no count;
    # all of it makes 'mean' 0 / 0, NaN, as in torch; a target outside [0, V) otherwise adds 0.
    spec = make_spec(f"nll_loss(x, t, reduction='{reduction}')", {"x": [[6, 11]], "t": [[6]]}, ("float32",))
    reference, module = generate_reduction(tmp_path, spec)
    t = torch.tensor([3, protocol.IGNORE_INDEX, 0, 10, protocol.IGNORE_INDEX, 7])
    x = torch.full((6, 11), float("nan"))
    x[torch.arange(6), t.clamp(0, 10)] = torch.randn(6)
    torch.testing.assert_close(module.op(x, t), reference(x, t))
    padding = torch.full_like(t, protocol.IGNORE_INDEX)
    torch.testing.assert_close(module.op(x, padding), reference(x, padding), equal_nan=True)
    wild = t.clone()
    wild[2] = 11
    assert module.op(x, wild).isfinite().all()


def test_cosine_similarity_loss_is_two_kernels(tmp_path):
    # KernelBench's cosine similarity loss: the similarity (one fused kernel), then its mean.
    spec = make_spec("mean(1 - cosine_similarity(x1, x2, dim=1))", {"x1": [[5, 37]], "x2": [[5, 37]]})
    assert ir.kind(parse_expression(spec)) == "chain" and spec["chain"] == 2
    check_kernel(tmp_path, spec)


def test_sign_domain_is_the_expressions_never_an_edits():
    shapes = {"x": [[4, 8]], "y": [[4, 8]]}
    spec = make_spec("hinge_embedding_loss(x, y)", shapes)
    edited = {**spec, "inputs": [{**i, "domain": "normal"} for i in spec["inputs"]]}
    assert {i["name"]: i["domain"] for i in validate(edited)["inputs"]} == {"x": "normal", "y": "sign"}
    edited = {**spec, "inputs": [{**i, "domain": "sign"} for i in spec["inputs"]]}
    with pytest.raises(SpecError, match="input x: domain sign"):
        validate(edited)
    values = make_inputs(spec, protocol.cases(spec)[0], protocol.dtype_variants(spec)[0], 0, "cpu")[1]
    assert set(values.flatten().tolist()) == {-1.0, 1.0}


@pytest.mark.parametrize("expression, says", [
    ("nll_loss(x, t, ignore_index=0.5)", "nll_loss's ignore_index must be a whole number written out"),
    ("cross_entropy(x, t, ignore_index=k)", "cross_entropy's ignore_index must be a whole number written out"),
    ("cross_entropy(x, t, weight=w, label_smoothing=0.1)", "both class weights and label smoothing is not supported"),
    ("hinge_embedding_loss(x, y, size_average=False)", "size_average=False is not supported"),
    ("margin_ranking_loss(x1, x2)", "margin_ranking_loss takes input1, input2 and target; target missing"),
])
def test_loss_refusals_name_what_works(expression, says):
    with pytest.raises(ir.IRError, match=re.escape(says)):
        ir.parse(expression, as_written=True)


def test_nll_loss_takes_a_2d_input():
    with pytest.raises(SpecError, match=r"nll_loss takes a 2-D input \[rows, classes\] \(classes in dim 1\)"):
        make_spec("nll_loss(x, t)", {"x": [[2, 5, 3]], "t": [[2, 3]]})
