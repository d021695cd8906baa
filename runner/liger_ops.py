"""Liger-Kernel's autograd functions as a benchmark version (issue 26): the bench plan names which of
them computes the operator (bot.liger says, from the spec) and which inputs it takes, in the order the
function takes them; the worker builds the callable here and times it like torch's. Liger is a
baseline to compare against, never a judge: its output decides nothing.

Only these functions, by these names: the plan cannot reach anything else of Liger or of Python.
Liger-Kernel is optional (pip install liger-kernel on the runner, for the comparison only)."""
from __future__ import annotations

import importlib
from typing import Callable

import torch

# plan name -> (module, autograd function class)
FUNCTIONS = {
    "rms_norm": ("liger_kernel.ops.rms_norm", "LigerRMSNormFunction"),
    "layer_norm": ("liger_kernel.ops.layer_norm", "LigerLayerNormFunction"),
    "swiglu": ("liger_kernel.ops.swiglu", "LigerSiLUMulFunction"),
    "cross_entropy": ("liger_kernel.ops.cross_entropy", "LigerCrossEntropyFunction"),
}


class LigerUnavailable(RuntimeError):
    """The plan's function cannot be built here; the message says why and what would work."""


def build(plan: dict, input_names: list[str]) -> Callable[..., torch.Tensor]:
    """The callable the bench plan's "liger" entry names, taking the operator's inputs in the spec's
    order (input_names) and passing Liger the ones it takes in its own order."""
    name = plan.get("fn")
    if name not in FUNCTIONS:
        raise LigerUnavailable(f"no Liger-Kernel function {name!r} here; known: {', '.join(FUNCTIONS)}")
    missing = [n for n in plan.get("inputs", []) if n not in input_names]
    if missing or not plan.get("inputs"):
        raise LigerUnavailable(f"the plan's Liger inputs {plan.get('inputs')} are not the operator's {input_names}")
    module, cls = FUNCTIONS[name]
    try:
        function = getattr(importlib.import_module(module), cls)
    except ImportError as e:
        raise LigerUnavailable(f"Liger-Kernel is not installed on this runner ({e}); pip install liger-kernel "
                               "to compare against it") from None
    picks = [input_names.index(n) for n in plan["inputs"]]
    eps = float(plan.get("eps", 1e-6))
    if name == "rms_norm":      # in_place=False: it would overwrite the upstream every timed step reuses
        return lambda *args: function.apply(*(args[i] for i in picks), eps, 0.0, "llama", False)
    if name == "layer_norm":
        return lambda *args: function.apply(*(args[i] for i in picks), eps)
    if name == "cross_entropy":
        reduction = str(plan.get("reduction", "mean"))
        return lambda *args: function.apply(*(args[i] for i in picks), None, -100, 0.0, 0.0, reduction)[0]
    return lambda *args: function.apply(*(args[i] for i in picks))
