"""PyTorch's type promotion in a pasted module whose get_inputs makes float16 or bfloat16 tensors.

torch builds a module's weights in float32, and torch.ones, torch.full of a float, torch.tensor of
floats and the like make float32 tensors where no dtype= is named. A tensor of another float dtype
beside a float16 input makes PyTorch compute and return float32 (or refuse, in a matmul), while the
kernels compute and return their inputs' dtype: such a paste is refused, never solved in float16
quietly. A 0-d tensor (torch.tensor(2.0)) does not promote, as in torch; a dtype taken from an input
(dtype=x.dtype, x.new_ones) follows the input.
"""
from __future__ import annotations

import ast

from bot.generators.interface import GenerationError

_NAMED = {"float16": "float16", "half": "float16", "bfloat16": "bfloat16", "float32": "float32",
          "float": "float32", "float64": "float64", "double": "float64"}
_FLOAT_MAKERS = {"ones", "zeros", "eye", "linspace", "logspace", "empty", "rand", "randn"}


def refuse_promotion(ret: ast.expr, dtype: str, learned: list[str], from_inputs: bool = True) -> None:
    """GenerationError where forward's returned expression (inlined) mixes a tensor of another float
    dtype with the tested dtype: a learned tensor (float32, as torch builds it, where get_inputs names
    the dtype: from_inputs) or a constant made in another float dtype."""
    if dtype == "float32":
        return
    fix = ("make get_inputs' tensors float32 and name the dtype to test in words ('in fp16': every tensor, "
           "weights included, is then tested in it)") if from_inputs else "test float32 only"
    if learned:
        raise GenerationError(f"get_inputs makes {dtype} tensors, but the module's learned tensors "
                              f"({', '.join(learned[:4])}) are float32 as torch builds them, so PyTorch would "
                              f"promote to float32 (or refuse, in a matmul) while the kernel keeps {dtype}; {fix}")
    for call in ast.walk(ret):
        made = isinstance(call, ast.Call) and made_dtype(call)
        if made and made != dtype:
            promoted = made if made in ("float32", "float64") else "float32"     # float16 with bfloat16: float32
            whose = "get_inputs'" if from_inputs else "the tested"
            raise GenerationError(f"{ast.unparse(call)[:60]} makes a {made} tensor beside {whose} {dtype} ones, so "
                                  f"PyTorch would compute and return {promoted}; name dtype=x.dtype (or torch.{dtype}) "
                                  f"there, or {fix}")


def made_dtype(call: ast.Call) -> str | None:
    """The float dtype torch gives the tensor a torch.<maker>(...) call makes, where it has dims; None
    for other calls, int and bool tensors, 0-d ones and a dtype read off an input."""
    f = call.func
    if not (isinstance(f, ast.Attribute) and isinstance(f.value, ast.Name) and f.value.id == "torch"):
        return None
    given = next((k.value for k in call.keywords if k.arg == "dtype"), None)
    if given is not None:
        return _NAMED.get(ast.unparse(given).removeprefix("torch."))
    if f.attr in _FLOAT_MAKERS:
        return None if _no_dims(call) else "float32"
    if f.attr == "full" and len(call.args) == 2:
        return None if _no_dims(call) else _float_if_any(call.args[1])
    if f.attr == "arange":
        return _float_if_any(ast.Tuple([*call.args, *(k.value for k in call.keywords if k.arg in ("start", "end", "step"))]))
    if f.attr == "tensor" and call.args and isinstance(call.args[0], (ast.List, ast.Tuple)):
        return _float_if_any(call.args[0])
    return None


def _no_dims(call: ast.Call) -> bool:
    # torch.ones(()) and torch.full((), v): 0-d, which promotes nothing
    first = call.args[0] if call.args else None
    return isinstance(first, (ast.Tuple, ast.List)) and not first.elts


def _float_if_any(values: ast.expr) -> str | None:
    # float32 where any value written is a float (1.5, -1e4, float('-inf')); whole numbers make int64
    floats = [v for v in ast.walk(values) if isinstance(v, ast.Constant) and type(v.value) is float
              or isinstance(v, ast.Call) and isinstance(v.func, ast.Name) and v.func.id == "float"]
    return "float32" if floats else None
