"""What the request reader says: the supported-operations line that refusals end with (SUPPORTED),
the question for a request without an operation (ASK_OP), what a correction may say
(CORRECTION_HELP), and node_text(node), an IR node as a person types it, which refusals quote and
the spec's expression is.
"""
from __future__ import annotations

import ast

from bot import ir

CORRECTION_HELP = ("Name dtypes ('bf16 only'), shapes ('shape 2048x2048', 'also 1x32'), eps ('eps 1e-5'), a dim "
                   "('over dim 0') or an operation ('make it gelu(x + y)').")
ASK_OP = "Which operation do you want? e.g. 'relu(x + y) for fp16 4096x4096'"
SUPPORTED = (f"The offline generator supports {ir.SUPPORTED_TEXT}. In words: matmul or bmm (with bias, "
             "an activation, a scale, a residual), sum/mean/max/min/prod/argmax/argmin/any/all, variance and std (with a "
             "correction), logsumexp and L1/L2/max/Frobenius norms over a dim (or all elements), L1/L2 normalize, "
             "softmax, layernorm, rmsnorm (also fused with an add), cross entropy, flip, roll, pad (zero, reflect, "
             "replicate, circular), nearest upsample, pixel shuffle, a lower or upper triangle, and pointwise operations.")


def node_text(node: ir.Node) -> str:
    """An IR node as a person types it: refusals quote it, and it is the spec's expression."""
    # to_text wraps every infix operation in parentheses; ast.unparse keeps only the needed ones
    return ast.unparse(ast.parse(ir.to_text(node), mode="eval"))
