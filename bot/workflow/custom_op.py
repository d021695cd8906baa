"""torch_op.py of an export: the approved kernel registered as a PyTorch custom op
(torch.library.custom_op), so torch.compile traces through it as one op and, for a training kernel,
autograd runs its Triton backward (the kernel's own autograd.Function backward, registered with
register_autograd). Its fake (shape and dtype) function is the approved reference itself, which
torch runs on fake tensors. Written for operators from an expression; a pasted module's reference
is a class holding weights, so none is written for it."""
from __future__ import annotations

from bot import training

NAMESPACE = "kernelbot"


def custom_op_source(spec: dict) -> str | None:
    """torch_op.py for the spec, or None where it is not written (a pasted module, no expression)."""
    if spec.get("reference_class") or not (spec.get("expression") and spec.get("name") and spec.get("inputs")):
        return None
    name, params = spec["name"], [i["name"] for i in spec["inputs"]]
    args, typed = ", ".join(params), ", ".join(f"{p}: torch.Tensor" for p in params)
    trains = bool(spec.get("training"))
    forward = f"{name}_forward" if trains else name
    n = len(spec.get("outputs") or [None])
    returns = f"tuple[{', '.join(['torch.Tensor'] * n)}]" if n > 1 else "torch.Tensor"     # torch.max(x, dim): 2
    out = ", ".join(o["name"] for o in spec["outputs"]) if n > 1 else "out"
    text = (f'"""{name} as a PyTorch custom op ({NAMESPACE}::{name}): torch.compile traces through it as one op'
            f"{', and autograd runs its Triton backward' if trains else ''}.\n\n"
            f"    import torch_op\n    {out} = torch_op.{name}({args})        # or torch.ops.{NAMESPACE}.{name}({args})\n"
            '"""\nimport torch\n\nimport kernel\nimport reference\n\n\n'
            f'@torch.library.custom_op("{NAMESPACE}::{name}", mutates_args=())\n'
            f"def {name}({typed}) -> {returns}:\n"
            f"    return kernel.{forward}({args})\n\n\n"
            f"@{name}.register_fake\n"
            f"def _({args}):\n"
            "    # shapes and dtypes: the reference, which torch runs on fake tensors\n"
            f"    return reference.{name}({args})\n")
    if trains:
        grads = ", ".join(training.differentiable(spec))
        text += ("\n\ndef _setup_context(ctx, inputs, output):\n"
                 "    ctx.save_for_backward(*inputs)\n\n\n"
                 f"# The kernel's own backward (gradients for {grads}): Triton kernels, from the saved inputs.\n"
                 f"{name}.register_autograd(kernel.{name}_function.backward, setup_context=_setup_context)\n")
    return text
