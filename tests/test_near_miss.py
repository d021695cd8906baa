"""Near-miss requests: everyday words just beside what the offline generator knows. Each is either
refused, naming the words it could not place (or the family they belong to), or read exactly as
meant: the expression and every case's output shape. Nothing is quietly turned into a nearby
operator. Grow this list with every family that lands.
"""
from __future__ import annotations

import pytest

from bot.generators.interface import GenerationError
from bot.request import parse_request
from tests.generated import canon, expr

# (request, a word the refusal must name)
REFUSED = [
    # scans
    ("exclusive prefix sum of x", "which dim"),
    ("cumsum of x over all elements", "one dim"),
    ("exclusive running max over dim 0", "exclusive"),
    ("exclusive log cumsum exp over dim 0 of 8x8", "logcumsumexp with exclusive=True is not supported"),
    ("沿最后一维累加 64x1024", "累加"),          # a sum or a running sum: not guessed
    # reductions the catalog does not have
    ("sum of squares over the last dim of a 64x512 fp32 tensor", "squares"),
    ("normalize x by its L2 norm", "normalize over which dim"),
    # norms and variances: the order and the correction said, or asked for
    ("norm of each row", "which 'norm'"),
    ("normalize the rows", "L2 normalize"),
    ("L1 and L2 norm of each row", "which one"),
    ("L0 norm over the last dim", "positive order"),
    ("unbiased variance with correction 0 of each row", "which one"),
    ("L2 normalize keeping the dim over the last dim", "keeping"),
    ("mean over all elements keeping the dim", "keeping the dim"),
    ("对每行求范数", "范数"),
    ("sum over all elements and dim 0 of a 64x64 tensor", "every element"),
    ("mean of a 4096x4096 tensor", "which dim"),
    ("argmax of x", "which dim"),
    ("求和 4096x4096", "which dim"),
    ("max values and positions over the last dim", "positions"),
    ("any over the last dim of a bool tensor", "bool"),
    ("count nonzero elements per row", "count"),
    # pooling and windows: the numbers are not shapes
    ("average pool with a 3x3 window, stride 2 on 64x64", "avg_pool2d takes x [N, C, H, W]"),
    ("layernorm over (32, 32) of 8x64x32x32", "could not place"),     # a normalized shape, not a second case
    # the gradient ops bot.autodiff writes, typed with what no literal is: refused, not a crash
    ("pool_grad(x, up, kind=foo) on 8x8", "literal keyword arguments"),
    ("pool_grad(x, up, kernel=[1, 2, 3]) on 8x8x8x8", "literal keyword arguments"),
    ("cumext_grad(x, y, up, scan=f(1), dim=0, reverse=False) on 8x8", "literal keyword arguments"),
    ("max over a 2x2 window of a 16x16 tensor", "window"),
    ("最大池化 on 8x64x56x56", "window"),
    # convolution and attention
    ("conv2d 3x3 of 1x64x56x56", "convolution"),
    ("depthwise convolution", "convolution"),
    ("masked attention for 8x1024x64", "masked"),
    ("fused rotary embedding", "rotary"),
    # losses
    ("nll loss over dim 0 of 64x256", "runs over the last dim"),
    ("max of x and y over the last dim", "elementwise"),
    # matmul variants
    ("matrix-vector product of 4096x4096 and 4096", "product"),
    ("tril of a @ b", "tril"),
    ("matmul plus residual, scaled by 0.5, with relu and bias", "epilogue applies"),
    ("matmul plus residual then relu", "epilogue applies"),
    ("matmul 8x64x32 by 8x32x16", "batched"),
    ("def f(logits, target):\n    return F.cross_entropy(logits, target)\nfor 8x16x32", "dim 1"),
    ("def f(x):\n    return torch.relu(x)\ncumulative", "not read"),
    ("def f(x, y):\n    return torch.add(x, y, alpha=2)", "alpha"),
    ("def f(x):\n    return F.rms_norm(x, x.shape[-2:], eps=1e-6)", "last dim only"),
    ("x * y plus z", "also named add"),
    ("softmax(x * y) scaled by 0.125", "also named scale"),
    ("x times sigmoid of x", "one operand or to the result"),
    ("log of softmax over the last dim", "outermost"),
    ("x minus its mean over the last dim", "outermost"),
    ("add x, y and z", "two operands"),
    ("x where x > 0", "take what"),
    ("sum over the last dim of 64x1024 with output of shape 64", "not an input"),
    ("layernorm with hidden size 4096", "not an input"),
    ("multiply x by half", "operands"),
    ("half the sum of each row", "half"),
    ("softmax over the last dim in a single kernel", "single"),
    ("relu of fp16 input with fp32 output", "output"),
    ("relu for fp16, accumulate in fp16", "accumulat"),
    ("layernorm with bias only", "only"),
    ("rmsnorm with bias", "no bias"),
    ("softmax instead of relu over the last dim", "instead"),
    ("quick gelu", "gelu"),
    ("fast gelu of a 1024x1024 tensor", "approximation"),
    ("def f(x):\n    return torch.sum(x, (0, 2))", "over dim (0, 2), but the input has 2 dims"),
    ("def f(x):\n    return torch.mean(x, keepdim=True)", "keepdim"),
    ("def f(x):\n    return torch.sum(x, -1, keepdim=x)", "keepdim=True or False"),
    ("def f(x, e):\n    return x * e", "constant"),
    ("def f(logits, labels):\n    return F.cross_entropy(logits.float(), labels)", "casts"),
    ("def f(x):\n    return torch.softmax(x.float(), dim=-1)", "casts"),
    ("def f(x, mask):\n    return x - mask\nfor 8x16, mask is bool", "refuses the bool mask"),
    ("def f(x):  # x is [8, 16] bf16\n    return x.sum(-1)", "comments are not read"),
    ("cross entropy over 8x16x32 logits", "dim 1"),
    ("x plus rmsnorm of y", "outermost"),
    ("sum(x, dim=0) for 8x16, over the last dim", "which one"),
    ("softmax over the batch of a 32x1000 tensor", "batch"),
    ("x + y with y broadcast", "broadcast"),
    ("沿第1维求和 8x16x32", "counting from 0"),
    ("clamp to [0, 1)", "bounds"),
    ("relu(a @ b + bias) with a 64x128, b 128x256, bias 64", "do not broadcast"),   # a bias of [M], not [N]
    ("matmul with bias, a 4096x4096, b 4096x4096, bias 4096x4096", "not read"),
    ("layernorm(x, w, b, eps=1e-6) with eps 1e-5", "which one"),
    ("def f(x, w):\n    return F.rms_norm(x, x.shape[-1:], w)", "machine"),

    ("def f(x):\n    return F.softmax(x, dim=None)", "dim"),
    ("relu of a single tensor x, 64x64", "single"),
    ("x + y with x in fp16 and y in fp32", "different dtypes"),
    ("def f(x):\n    return x > 0", "bool"),
    ("def f(x):\n    return torch.sum(x > 0, dim=-1)", "bool"),
    ("def f(x):\n    return torch.where(x > 0, 1, 0)", "constants"),
    ("x.max(-1) * 2 for 8x16", "values, indices"),
    ("x + y, x 128x256, y of shape []", "[]"),
    ("gelu(x, 'tanh')", "1 argument"),
    ("clamp(x, 0, 1, 2)", "arguments"),
    ("compute max(x, 0) elementwise", "over dim 0, or elementwise"),
    ("matmul of a 2x8x128x64 and b 2x8x64x128", "4-D"),
    # activations not in the catalog
    ("prelu with a learned slope", "prelu"),
    ("sin of x", "sin"),
    # norms and cross entropy beside the catalog's
    ("group norm over 32 groups", "group"),
    ("rmsnorm over dim 0", "last dim"),
    ("layernorm over the last two dims", "dims"),
    ("cross entropy with label smoothing of 64x100", "label smoothing with its value"),
    ("def g(x, y):\n    return x * y\n\ndef f(x):\n    return g(x)\nfor 8x16", "does not match g's parameters"),
    # a cast to one dtype that reaches the result, through a local or an operand: PyTorch returns that dtype
    ("def f(x):\n    y = x.float().softmax(-1)\n    return y * 2\nfor 8x16", "casts with 'x.float()'"),
    ("x.float().softmax(-1) for x 64x1000", "'x.float()' makes PyTorch's result that dtype"),
    ("torch.max(x) cumsum over the last dim for 2x2", "of a 0-D value: it has no such dim"),
    ("def f(x):\n    return x[:, :x.size(1) // 2]\nfor 64x64 and 32x128", "a slice's bounds must be numbers"),
    # a size read where it cannot be a number: typed, or cases that disagree on it
    ("x.sum(-1) / x.shape[-1] with x 64x128", "reads a tensor's size"),
    ("def f(x):\n    return x * x.size(1)\nfor 64x128, 32x16", "same size along that dim"),
    ("def f(x, w):\n    y = (x.float() * 2).type_as(x)\n    return y * w.float()\nfor 8x16", "casts with 'w.float()'"),
    ("cross entropy on logits 4096x32000 with targets 1000", "must have the input's shape without the class dim"),
    ("bce loss of x and y with weight w", "weight w"),
    # training: ops without a gradient rule
    ("global max pooling backward on 8x16x40x40", "windows of at most 256"),
    # layout
    ("reshape x to 64x64", "reshape"),
    ("scatter add of x at idx", "scatter"),
    ("embedding lookup of the ids", "needs two shapes"),
    ("permute x on 8x64x32", "new order of the dims"),
    ("transpose x and y on 8x64", "moves one tensor"),
    ("reverse the rows of x", "operation"),
    # qualifiers that would change the op if dropped
    ("causal softmax over the last dim of 8x16x16", "causal"),
    ("relu of x only where mask is set", "mask"),
    ("softmax over the last dim with eps 1e-5", "eps"),
    ("add two tensors and round the result", "round"),
    ("relu but negative slope 0.01", "negative slope"),
    ("x squared plus y", "one operand or to the result"),
    ("multiply x by 2 then add y", "one operand or to the result"),
    ("sum over the last dim then sqrt", "outermost"),
    ("softmax over the last dim, then add y", "outermost"),
    ("relu on half of x", "half"),
    ("add 1 to x", "operands"),
    ("按行求和后开方", "outermost"),
    ("求每行的最大值和位置", "位置"),
    ("带温度的softmax", "温度"),
    ("两个张量的平均绝对误差", "误差"),
    ("def f(x):\n    return torch.cumsum(x)", "needs a dim"),
    ("def f(x):\n    return torch.cummax(x, 1)", "values, indices"),
    ("def f(x):\n    return torch.max(x, dim=1) + 1", "values, indices"),
    ("def f(x):\n    values, idx = torch.max(x, dim=1)\n    return values, idx + 1", "must be the outermost"),
    ("def f(x):\n    return torch.any(x > 0, dim=1) * 2\nfor 8x16", "outermost"),
    ("def f(x):\n    return F.softmax(x)", "dim"),
    ("def f(x):\n    return x.flip(1).cumsum(1)", "flip it back"),
    ("relu with a 3x3 kernel on 64x64", "3x3"),
    ("softmax over the last dim of 64x64, block size 2048", "block"),
]

# (request, expression, output shape of each case)
SOLVED = [
    ("sum over the last dim of a 64x1024 fp32 tensor", "sum(x, dim=-1)", [[64]]),
    ("mean over dim 0 of 8x16x32", "mean(x, dim=0)", [[16, 32]]),
    ("max of each row of 37x97", "max(x, dim=-1)", [[37]]),
    ("沿第0维求和 8x16", "sum(x, dim=0)", [[16]]),
    ("按行求最大值 4x5", "max(x, dim=-1)", [[4]]),
    ("argmin over dim 1 of a 4x5x6 tensor", "argmin(x, dim=1)", [[4, 6]]),
    ("sum(x ** 2) over the last dim of 8x16", "sum(x ** 2, dim=-1)", [[8]]),
    ("mean(abs(x - y), dim=-1) for 64x256", "mean(abs(x - y), dim=-1)", [[64]]),
    ("softmax over the last dim of 16x1000", "softmax(x)", [[16, 1000]]),
    ("log softmax of 8x32000", "log_softmax(x)", [[8, 32000]]),
    ("layernorm with weight and bias, eps 1e-6, 4x1024", "layernorm(x, weight, bias, eps=1e-6)", [[4, 1024]]),
    ("rmsnorm without weight 8x4096", "rmsnorm(x, eps=1e-6)", [[8, 4096]]),
    ("cross entropy per row of logits 16x1000", "cross_entropy(logits, target, reduction='none')", [[16]]),
    # a 1-D input's length said after its name
    ("cross entropy of logits 128x1000 and labels 128, fp32", "cross_entropy(logits, target)", [[]]),
    ("nll loss of 64x10 log probs with targets 64", "nll_loss(log_probs, target)", [[]]),
    ("relu(x + bias) for x 64x128, bias 128, fp16", "relu(x + bias)", [[64, 128]]),
    ("add two fp16 matrices of shape 4096x4096", "x + y", [[4096, 4096]]),
    ("relu(x + y) for bf16 8192x8192", "relu(x + y)", [[8192, 8192]]),
    ("relu of the sum of x and y, 16x16", "relu(x + y)", [[16, 16]]),
    ("add two tensors then relu, 16x16", "relu(x + y)", [[16, 16]]),
    ("mean square over the last dim of 8x32", "mean(x ** 2, dim=-1)", [[8]]),
    ("gelu with tanh approximation of 128x128", "gelu(x, approximate='tanh')", [[128, 128]]),
    ("clamp x to [-1, 1] on 64x64", "clamp(x, -1.0, 1.0)", [[64, 64]]),
    ("帮我生成一个加法算子 64x64", "x + y", [[64, 64]]),
    ("subtract x from y, 8x8", "y - x", [[8, 8]]),
    ("y divided by x for 8x8", "y / x", [[8, 8]]),
    ("x times x on 8x8", "x * x", [[8, 8]]),
    ("where x < 0 take y else x, 8x8", "where(x < 0, y, x)", [[8, 8]]),
    ("add x of shape 64x128 and b of shape 128", "x + b", [[64, 128]]),
    ("multiply x by -2 on 8x8", "x * -2", [[8, 8]]),
    ("batched matmul 8x64x32 by 8x32x16", "a @ b", [[8, 64, 16]]),
    ("sum over the last dim of 8x16 in fp16 with fp32 accumulation", "sum(x, dim=-1)", [[8]]),
    ("relu for half precision, 8x8", "relu(x)", [[8, 8]]),
    ("x.pow(2).sum(-1) for 8x16", "sum(x ** 2, dim=-1)", [[8]]),
    ("def f(x):\n    return F.softmax(x, 1)\nfor 8x16", "softmax(x)", [[8, 16]]),
    ("elementwise sigmoid of 8x8", "sigmoid(x)", [[8, 8]]),
    ("torch.max(x, 1)[0] for 8x16", "max(x, dim=-1)", [[8]]),
    ("add x (32x64) to y (1x64)", "x + y", [[32, 64]]),
    ("fused bias add and gelu on 8x16", "gelu(x + bias)", [[8, 16]]),
    ("relu of a 3-D tensor 4x8x16", "relu(x)", [[4, 8, 16]]),
    ("layernorm with weight only, 8x64", "layernorm(x, weight, eps=1e-5)", [[8, 64]]),
    ("reciprocal of x for 8x8", "1 / x", [[8, 8]]),
    ("clip x to the range -3 to 3, 8x8", "clamp(x, -3, 3)", [[8, 8]]),
    ("x除以2 64x64", "x / 2", [[64, 64]]),
    ("先做gelu再层归一化 8x64", "layernorm(gelu(x), weight, bias, eps=1e-5)", [[8, 64]]),
    ("matmul a @ b, b: 256x512, a: 512x256", "a @ b", [[512, 512]]),
    ("relu(x), x is 512", "relu(x)", [[512]]),
    ("relu of x where x is 4096x1024 fp16", "relu(x)", [[4096, 1024]]),
    ("relu(x+y) for bf16 4096x4096.", "relu(x + y)", [[4096, 4096]]),
    ("x 除以 y，形状 8x8", "x / y", [[8, 8]]),
    ("RMSNorm (eps=1e-6) with weight for x: [8192, 4096] bf16", "rmsnorm(x, weight, eps=1e-6)", [[8192, 4096]]),
    ("def f(x, b):\n    return F.layer_norm(x, x.shape[-1:], bias=b)\nfor 8x64", "layernorm(x, None, b, eps=1e-5)", [[8, 64]]),
    ("matmul a @ b + bias, 64x32 by 32x16", "a @ b + bias", [[64, 16]]),
    ("x + b, b is 1-d, x 64x128", "x + b", [[64, 128]]),
    ("x * y，x 形状 64x128，y 的形状为 128", "x * y", [[64, 128]]),
    ("import torch.nn.functional as fn\ndef f(x):\n    return fn.relu(x)\nfor 8x8", "relu(x)", [[8, 8]]),
    ("def f(x):\n    return torch.softmax(x.float(), dim=-1).to(x.dtype)\nfor 8x16", "softmax(x)", [[8, 16]]),
    ("计算两个矩阵的差的平方 8x8", "(x - y) ** 2", [[8, 8]]),
    ("x的指数再求和，沿最后一维 8x8", "sum(exp(x), dim=-1)", [[8]]),
    ("两个张量相加后取relu 8x8", "relu(x + y)", [[8, 8]]),
    ("矩阵乘法 64x32 乘 32x16", "a @ b", [[64, 16]]),
    ("matmul with bias and relu, 64x32 by 32x16", "relu(a @ b + bias)", [[64, 16]]),
    ("matmul with tf32, 64x32 by 32x16", "matmul(a, b, tf32=True)", [[64, 16]]),
    ("batched matmul 4x8x16 by 4x16x8", "a @ b", [[4, 8, 8]]),
    ("fused add + rmsnorm with weight on 8x64", "rmsnorm(x + residual, weight, eps=1e-6)", [[8, 64]]),
    ("def f(x):\n    return torch.sum(x, dim=1)\nfor 8x16", "sum(x, dim=-1)", [[8]]),
    ("def f(x):\n    return x.amax(dim=0)\nfor 8x16", "max(x, dim=0)", [[16]]),
    ("def f(x):\n    return torch.max(x, dim=0)[0]\nfor 8x16", "max(x, dim=0)", [[16]]),
    ("def f(x):\n    return torch.min(x, 1).indices\nfor 8x16", "argmin(x, dim=-1)", [[8]]),
    ("def f(x):\n    values, idx = torch.max(x, dim=1)\n    return values\nfor 8x16", "max(x, dim=-1)", [[8]]),
    ("def f(x):\n    _, idx = x.min(0)\n    return idx\nfor 8x16", "argmin(x, dim=0)", [[16]]),
    ("def f(p, t):\n    return torch.mean((p - t) ** 2, dim=-1)\nfor 8x16", "mean((p - t) ** 2, dim=-1)", [[8]]),
    ("def f(x):\n    v, m = torch.var_mean(x, dim=1, correction=0, keepdim=True)\n    return (x - m) / v\nfor 8x16",
     "(x - mean(x, dim=1, keepdim=True)) / var(x, dim=1, correction=0, keepdim=True)", [[8, 16]]),
    ("def f(x):\n    s, m = torch.std_mean(x, 0, True, False)\n    return s * m\nfor 8x16", "std(x, dim=0) * mean(x, dim=0)",
     [[16]]),
    # scans
    ("cumulative sum over the last dim of a 64x1024 fp32 tensor", "cumsum(x, dim=-1)", [[64, 1024]]),
    ("running total along dim 1 of 8x256", "cumsum(x, dim=-1)", [[8, 256]]),
    ("reverse cumsum over dim 0 of 300x45", "cumsum(x, dim=0, reverse=True)", [[300, 45]]),
    ("exclusive prefix sum over dim 1 of 4x8x16", "cumsum(x, dim=1, exclusive=True)", [[4, 8, 16]]),
    ("cumulative product of each row of 16x64", "cumprod(x, dim=-1)", [[16, 64]]),
    ("running min over dim 0 of 32x32", "cummin(x, dim=0)", [[32, 32]]),
    ("log cumsum exp over dim 0 of 64x128, reversed", "logcumsumexp(x, dim=0, reverse=True)", [[64, 128]]),
    ("def f(x):\n    return torch.logcumsumexp(x, dim=1)\nfor 8x16", "logcumsumexp(x, dim=-1)", [[8, 16]]),
    ("沿最后一维求前缀和 64x1024", "cumsum(x, dim=-1)", [[64, 1024]]),
    ("def f(x):\n    return torch.cumsum(x.flip(1), dim=1).flip(1)\nfor 8x16", "cumsum(x, dim=-1, reverse=True)", [[8, 16]]),
    ("def f(x):\n    return torch.cummax(x, dim=0).values\nfor 8x16", "cummax(x, dim=0)", [[8, 16]]),
    ("def f(x, y):\n    return (x * y).cumprod(0)\nfor 8x16", "cumprod(x * y, dim=0)", [[8, 16]]),
    # bool masks: said so, or where's condition
    ("def f(x, mask):\n    return torch.where(mask, x, 0.0)\nfor 8x16", "where(mask, x, 0.0)", [[8, 16]]),
    ("cumsum(x * m, dim=1) for 8x16, m is a bool tensor", "cumsum(x * m, dim=-1)", [[8, 16]]),
    # every element: PyTorch's reduction without a dim, or the words
    ("sum over all elements of a 64x64 tensor", "sum(x, dim=None)", [[]]),
    ("argmax over every element of 100x50", "argmax(x, dim=None)", [[]]),
    ("def f(p, t):\n    return torch.mean((p - t) ** 2)\nfor 8x16", "mean((p - t) ** 2, dim=None)", [[]]),
    ("def f(x):\n    return x.sum()\nfor 8x16", "sum(x, dim=None)", [[]]),
    ("def f(x):\n    return x.argmax()\nfor 8x16", "argmax(x, dim=None)", [[]]),
    ("x.sum() for x 64x64", "sum(x, dim=None)", [[]]),
    ("x.float().softmax(-1).to(x.dtype) for x 64x1000", "softmax(x)", [[64, 1000]]),
    # a pasted function's products take its inputs' shapes by name, as they lie; a mask over the heads
    ("class A(nn.Module):\n    def forward(self, q, k, v, m):\n        s = (q @ k.transpose(-2, -1)).masked_fill(m == 0, -1e9)"
     "\n        return F.softmax(s, dim=-1) @ v\n\nq 2x8x16x4, k 2x8x16x4, v 2x8x16x4, m 2x1x16x16",
     "matmul(softmax(where(m == 0.0, -1000000000.0, matmul(q, k.mT))), v)", [[2, 8, 16, 4]]),
    ("def f(q, k, v):\n    return F.softmax(q @ k.transpose(-2, -1) / 8.0, dim=-1) @ v\n"
     "q 2x4x16x8, k 2x4x16x8, v 2x4x16x8", "matmul(softmax(matmul(q, k.mT) / 8.0), v)", [[2, 4, 16, 8]]),
    # a tuple assignment reads every value before binding any (a name rebound to its own part)
    ("def f(x):\n    x, gate = x.chunk(2, dim=-1)\n    return x * F.gelu(gate)\nfor 16x64",
     "x.chunk(2, dim=-1)[0] * gelu(x.chunk(2, dim=-1)[1])", [[16, 32]]),
    ("def f(a, b):\n    a, b = b, a * 2\n    return a - b\nfor 8x8", "b - a * 2.0", [[8, 8]]),
    # sizes read from the tensors, where every case gives the same one there
    ("def f(x):\n    d = x.shape[-1] // 2\n    return F.silu(x[..., :d]) * x[..., d:]\nfor 16x256 and 8x256",
     "silu(x[..., :128]) * x[..., 128:]", [[16, 128], [8, 128]]),
    ("def f(q):\n    return (q * q.size(-1) ** -0.5).softmax(-1)\nfor 32x64", "softmax(q * 0.125)", [[32, 64]]),
    ("def f(x, w):\n    y = x.float().softmax(-1)\n    return y.to(x.dtype) * w\nfor 8x16", "softmax(x) * w", [[8, 16]]),
    # the paste's helper functions written in where called; inputs named like functions (cos, sin)
    ("def rotate_half(x):\n    x1 = x[..., :4]\n    x2 = x[..., 4:]\n    return torch.cat((-x2, x1), dim=-1)\n\n"
     "def rope(q, cos, sin):\n    return q * cos + rotate_half(q) * sin\n\nfor q 16x2x8, cos 16x1x8, sin 16x1x8",
     "q * cos + rotate_half(q) * sin", [[16, 2, 8]]),
    ("def scaled(x, s=2.0):\n    return x * s\n\ndef f(x, y):\n    return scaled(x) + scaled(y, s=3.0)\nfor 8x16",
     "x * 2.0 + y * 3.0", [[8, 16]]),
    ("torch.max(x) for 8x16", "max(x, dim=None)", [[]]),
    ("torch.amax(x * 2) for 8x16 fp32", "max(x * 2, dim=None)", [[]]),
    # losses in words: each with its inputs, the reduction said or torch's default (mean)
    ("mean absolute error between two 64x256 fp32 tensors", "mean(abs(x - y), dim=None)", [[]]),
    ("mse loss of 64x256", "mean((x - y) ** 2.0, dim=None)", [[]]),
    ("kl divergence between p and q, batchmean, 8x10",
     "mean(sum(where(q > 0.0, q * (log(q) - p), 0.0).flatten(1, -1), dim=1), dim=None)", [[]]),
    ("huber loss with delta 2 per element, 8x16",
     "where(abs(x - y) < 2.0, 0.5 * (x - y) ** 2.0, 2.0 * (abs(x - y) - 0.5 * 2.0))", [[8, 16]]),
    # activations in words, with their parameter where said
    ("leaky relu with slope 0.2 of a 128x128 tensor", "where(x > 0.0, x, x * 0.2)", [[128, 128]]),
    ("softplus with beta 2 of 8x16", "where(x * 2.0 > 20.0, x, log(1.0 + exp(x * 2.0)) / 2.0)", [[8, 16]]),
    ("mish activation of 8x16", "x * tanh(where(x > 20.0, x, log(1.0 + exp(x))))", [[8, 16]]),
    # pooling in words: the window's numbers are not shapes
    ("2x2 max pooling of a 1x8x32x32 fp32 tensor", "max_pool2d(x, kernel_size=2)", [[1, 8, 16, 16]]),
    # reductions torch computes in more than one step, in words
    ("product over the last dim of a 32x16 fp32 tensor", "prod(x, dim=-1)", [[32]]),
    ("product of all elements of a 64x64 tensor", "prod(x, dim=None)", [[]]),
    ("variance over dim 1 of 16x128", "var(x, dim=-1)", [[16]]),
    ("std of each row of 16x128", "std(x, dim=-1)", [[16]]),
    ("logsumexp over the last dim of 8x1000", "logsumexp(x, dim=-1)", [[8]]),
    # typed with string arguments: the inf-norm, and an einsum that is a product
    ("x.norm(p=float('inf'), dim=1) on 8x8", "norm(x, p=float('inf'), dim=1)", [[8]]),
    ("torch.einsum('ij,jk->ik', a, b) with a 8x8 and b 8x16", "matmul(a, b)", [[8, 16]]),
    ("L2 norm of each row of a 64x128 tensor", "norm(x, p=2.0, dim=-1)", [[64]]),
    ("Frobenius norm of a 64x128 tensor", "norm(x, p=2.0, dim=None)", [[]]),
    ("L1 normalize the rows of 8x16", "x / clamp(norm(x, p=1.0, dim=-1, keepdim=True), 1e-12)", [[8, 16]]),
    ("对每行求方差 8x16", "var(x, dim=-1)", [[8]]),
    ("softmax with temperature 2 over the last dim of 8x16", "softmax(x / 2.0)", [[8, 16]]),
    # any and all: bools
    ("def f(x):\n    return torch.any(x > 0, dim=1)\nfor 8x16", "any(x > 0, dim=-1)", [[8]]),
    ("all over dim 0 of 8x16", "all(x, dim=0)", [[16]]),
    # keepdim: the reduced dim kept as size 1
    ("mean of x, keepdim, over the last dim of 8x16", "mean(x, dim=-1, keepdim=True)", [[8, 1]]),
    ("x / x.norm(dim=1, keepdim=True) for 8x16", "x / norm(x, p=2.0, dim=1, keepdim=True)", [[8, 16]]),
    ("def f(x):\n    return torch.sum(x, dim=-1, keepdim=True)\nfor 8x16", "sum(x, dim=-1, keepdim=True)", [[8, 1]]),
    ("def f(x):\n    return torch.mean(x, 1, True)\nfor 4x8x16", "mean(x, dim=1, keepdim=True)", [[4, 1, 16]]),
    ("def f(x):\n    return x.argmax(0, keepdim=True)\nfor 8x16", "argmax(x, dim=0, keepdim=True)", [[1, 16]]),
]


def test_the_list_covers_at_least_fifty_requests_in_english_and_chinese():
    requests = [r for r, _ in REFUSED] + [r for r, _, _ in SOLVED]
    assert len(requests) >= 50
    assert sum(any("\u4e00" <= ch <= "\u9fff" for ch in r) for r in requests) >= 8


@pytest.mark.parametrize("request_text, word", REFUSED)
def test_refused_naming_what_it_could_not_place(request_text, word):
    with pytest.raises(GenerationError) as e:
        spec, _ = parse_request(request_text)
        pytest.fail(f"read as {spec['expression']!r} with outputs {spec['outputs'][0]['shapes']}")
    assert word.lower() in str(e.value).lower(), str(e.value)[:300]


@pytest.mark.parametrize("request_text, expression, outputs", SOLVED)
def test_solved_exactly_as_asked(request_text, expression, outputs):
    spec, _ = parse_request(request_text)
    assert expr(spec) == canon(expression)
    assert spec["outputs"][0]["shapes"][:len(outputs)] == outputs


@pytest.mark.parametrize("request_text, corrections, word", [
    ("x * y", ["scale by 0.5"], "drops y"),
    ("matmul 64x32 by 32x16", ["with relu"], "drops"),
    ("relu", ["use eps 1e-5"], "no eps"),
    ("relu", ["please be careful"], "careful"),
    ("relu", ["softmax instead of relu"], "instead"),
    ("softmax over the last dim", ["log"], "in place of"),
    ("sum over the last dim", ["of exp(x)"], "in place of"),
])
def test_a_correction_that_names_only_a_part_is_refused(request_text, corrections, word):
    with pytest.raises(GenerationError, match=word):
        parse_request(request_text, corrections)


@pytest.mark.parametrize("request_text, corrections, expression", [
    ("relu", ["gelu instead"], "gelu(x)"),
    ("sum over dim 0 of 8x16", ["mean instead"], "mean(x, dim=0)"),
    ("relu for 64x64", ["only 32x32"], "relu(x)"),
    ("relu for bf16 8x8", ["and fp16"], "relu(x)"),
])
def test_a_correction_is_read_as_a_person_means_it(request_text, corrections, expression):
    spec, _ = parse_request(request_text, corrections)
    assert expr(spec) == canon(expression)


def test_the_spec_card_says_what_is_computed_and_every_output_shape():
    from bot import spec as specmod
    spec, notes = parse_request("mean over dim 0 of 8x16x32 and 4x5x6")
    card = specmod.summary(spec)
    assert card["computes"] == "mean of x over dim 0"
    assert card["output"] == "8x16x32 -> 16x32, 4x5x6 -> 5x6"
    assert any("dtype" in n for n in notes)
