"""Which of Liger-Kernel's functions computes a spec's operator, for the benchmark's Liger version
(issue 26): the operator exactly as Liger computes it, on the spec's own inputs, or none. The
runner's runner/liger_ops.py builds the function the plan names; this only matches the IR."""
from __future__ import annotations

from bot import ir


def counterpart(spec: dict) -> dict | None:
    """The bench plan's "liger" entry for the spec: Liger's function name, the inputs it takes in its
    order, and its settings; None where Liger has no such op (or computes a different one)."""
    node = ir.parse(spec["expression"])
    shapes = {i["name"]: i["shapes"] for i in spec["inputs"]}
    swiglu = node.op == "mul" and node.args[0].op == "silu"
    args = node.args[0].args + node.args[1:] if swiglu else node.args
    if not args or any(a.op != "input" for a in args):
        return None
    names = [a.name for a in args]
    if node.op == "rmsnorm" and node.attr("has_weight") and not node.attr("has_bias"):
        return {"fn": "rms_norm", "inputs": names, "eps": node.attr("eps")}
    if node.op == "layernorm" and node.attr("has_weight") and node.attr("has_bias"):
        return {"fn": "layer_norm", "inputs": names, "eps": node.attr("eps")}
    if node.op == "cross_entropy" and set(dict(node.attrs)) == {"reduction"} and len(names) == 2 and \
            all(len(s) == 2 for s in shapes[names[0]]):
        return {"fn": "cross_entropy", "inputs": names, "reduction": node.attr("reduction")}
    if swiglu and shapes[names[0]] == shapes[names[1]]:     # silu(a) * b
        return {"fn": "swiglu", "inputs": names}
    return None
