"""Requests of the families' newer operators (issue 24's breadth: a loss of probabilities, label
smoothing, ignore_index and class weights, pos_weight, a per-channel PReLU, logcumsumexp, 'same' and causal padding, 4-D attention scores, take_along_dim,
rounding, inverse trigonometry and remainders, the remaps, F.pad's modes, expand, pixel shuffles, LP pooling, sorts and top-k) through the offline generator's own stages and the trusted harness on a GPU, in every dtype
(bfloat16 included, which the interpreter computes wrongly); training where the request asks for it.
Under the interpreter each family's kernels are checked in tests/ops."""
from __future__ import annotations

import pytest

from bot.generators.interface import GenRequest
from bot.generators.offline import OfflineGenerator
from runner.verify import verify

DTYPES = "in fp16, bf16 and fp32"
REQUESTS = [
    f"torch.round(x * 4.0) / 4.0 + torch.trunc(y) for 1024x1000 {DTYPES}",
    f"torch.atan2(x, y) + torch.remainder(x, y) * torch.asinh(y) with x 1024x1000 and y 1024x1000 {DTYPES}",
    f"torch.roll(torch.flip(x, dims=[0]), 3, 1) + x.repeat_interleave(2, dim=1)[:, :1000] with x 1024x1000 {DTYPES}",
    f"F.conv2d(F.pad(x, (1, 1, 1, 1), mode='reflect'), w) with x 8x64x56x56, w 64x64x3x3 {DTYPES}",
    f"torch.tril(x, diagonal=-1) + x[:, :1].expand(-1, 1000) with x 1000x1000 {DTYPES}",
    f"torch.logcumsumexp(x, dim=1) for 512x3000 {DTYPES}",
    f"torch.logcumsumexp(x.flip(0), dim=0).flip(0) for 3000x512 {DTYPES}",
    f"F.binary_cross_entropy(torch.sigmoid(x), y) for 1024x1000 {DTYPES}",
    f"F.poisson_nll_loss(x, y, reduction='sum') for 1024x1000 {DTYPES}",
    f"F.multilabel_soft_margin_loss(x, y, reduction='none') for 1024x1000 {DTYPES}",
    f"F.cross_entropy(x, t, label_smoothing=0.1) with x 4096x32000 and t 4096 {DTYPES}",
    f"F.prelu(x, w) with x 8x64x56x56 and w 64 {DTYPES}",
    f"F.conv2d(x, w, b, padding='same') with x 8x64x56x56, w 128x64x3x3, b 128 {DTYPES}",
    f"causal depthwise conv1d kernel 4 on 4x1536x2048 {DTYPES}",
    f"F.conv2d(x, w, padding='same') with x 8x32x28x28, w 64x32x4x4 {DTYPES}",
    f"F.conv2d(x, w, stride=2, padding=1, groups=2) with x 8x64x28x30, w 128x32x3x3 {DTYPES}",
    f"F.conv3d(x, w, b, padding=1) with x 2x32x8x14x14, w 48x32x3x3x3, b 48 {DTYPES}",
    f"torch.softmax(s + torch.triu(torch.full((512, 512), -1e4), 1), -1) @ torch.eye(512) with s 8x512x512 {DTYPES}",
    f"(q @ k.transpose(-2, -1)) * 0.125 with q 4x16x512x64 and k 4x16x512x64 {DTYPES}",
    f"torch.take_along_dim(x, idx, dim=1) with x 4096x1000 and idx 4096x16 {DTYPES}",
    f"logcumsumexp(x, dim=-1) for training on 256x2000 {DTYPES}",
    f"causal depthwise conv1d kernel 4 for training on 4x512x1024 {DTYPES}",
    f"cross entropy with label smoothing 0.1 for training on 4096x32000 logits {DTYPES}",
    f"cross entropy with class weights, ignore_index 0, for training on 4096x32000 logits {DTYPES}",
    f"F.nll_loss(x, t, weight=w, ignore_index=-1, reduction='sum') with x 4096x1000, t 4096, w 1000 {DTYPES}",
    f"F.binary_cross_entropy_with_logits(x, y, weight=w, pos_weight=p) with x 1024x1000, y 1024x1000, w 1024x1, p 1000 {DTYPES}",
    f"torch.tanh(F.pixel_shuffle(x, 2)) + F.pixel_unshuffle(y, 2) with x 8x64x56x56, y 8x4x224x224 {DTYPES}",
    f"F.lp_pool2d(x, 2, 3, stride=2) for 8x64x56x56 {DTYPES}",
    f"torch.sort(x, dim=-1, descending=True) for 4096x1000 {DTYPES}",
    f"argsort over dim 0 for 3000x512 {DTYPES}",
    f"torch.topk(x, 8, dim=-1) with x 64x151936 {DTYPES}",
    f"top-50 indices over the last dim for 1024x4096 {DTYPES}",
    # 2026-12-07: linear upsampling, einsum as a summed product, floor division and signs, cross, diff
    f"F.interpolate(x, scale_factor=2, mode='bilinear') for 8x64x56x56 {DTYPES}",
    f"torch.einsum('bhd,hd->bh', a, b) with a 64x16x128 and b 16x128 {DTYPES}",
    f"x // y + torch.copysign(x, y) with x 1024x1000 and y 1024x1000 {DTYPES}",
    f"torch.cross(a, b, dim=1) + torch.diff(c, dim=1)[:, :3] with a 4096x3, b 4096x3 and c 4096x8 {DTYPES}",
]


def stages(tmp_path, request: str) -> None:
    """The spec, reference and kernel the offline generator writes for request, into tmp_path."""
    gen, approved = OfflineGenerator(), {}
    for stage, name in (("spec", "spec.json"), ("reference", "reference.py"), ("kernel", "kernel.py")):
        artifact = gen.generate(GenRequest(stage=stage, request=request, approved=dict(approved)))
        approved[stage] = artifact.content
        (tmp_path / name).write_text(artifact.content)


@pytest.mark.gpu
@pytest.mark.parametrize("request_text", REQUESTS, ids=[r.split(" for ")[0].split(" with ")[0][:50] for r in REQUESTS])
def test_newer_operators_pass_the_harness_on_the_gpu(tmp_path, request_text):
    stages(tmp_path, request_text)
    result = verify(tmp_path / "spec.json", tmp_path / "reference.py", tmp_path / "kernel.py", backend="cuda")
    assert result["status"] == "pass", (result["summary"], result.get("correctness"))
