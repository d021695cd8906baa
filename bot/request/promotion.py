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
from bot.request.torch_code import CAST_MARKS, cast_dtype

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
    for e in _meeting_inputs(ret):
        made = _kind(e)
        if made in _FLOATS and made != dtype:
            promoted = made if made in ("float32", "float64") else "float32"     # float16 with bfloat16: float32
            whose = "get_inputs'" if from_inputs else "the tested"
            raise GenerationError(f"{ast.unparse(e)[:60]} makes a {made} tensor beside {whose} {dtype} ones, so "
                                  f"PyTorch would compute and return {promoted}; name dtype=x.dtype (or torch.{dtype}) "
                                  f"there, or {fix}")


def _meeting_inputs(e: ast.expr) -> list[ast.expr]:
    """The operands that meet a tensor read off the inputs in an op (a constant inside a constant, cast
    or compared before it meets one, promotes nothing)."""
    if _kind(e) is not None:
        return []
    if isinstance(e, ast.Compare):          # a bool result: the comparison's promotion stays inside it
        operands, direct = [e.left, *e.comparators], False
    elif isinstance(e, ast.Subscript):
        operands, direct = [e.value], True
    elif isinstance(e, ast.Call) and isinstance(e.func, ast.Attribute) and e.func.attr in ("to", "type_as"):
        operands, direct = [*e.args, *(k.value for k in e.keywords)], True      # the receiver takes the input's dtype
    elif isinstance(e, ast.Call) and isinstance(e.func, ast.Name) and e.func.id == CAST_MARKS[1]:
        operands, direct = [e.args[0]], False                                  # cast back to the inputs' dtype
    else:
        operands = [c for c in ast.iter_child_nodes(e) if isinstance(c, ast.expr) and not isinstance(c, ast.Name)]
        operands = [x for c in operands for x in (c.elts if isinstance(c, (ast.List, ast.Tuple)) else [c])]
        direct = True
    met = [c for c in operands if direct and _kind(c) is not None]
    return met + [x for c in operands if _kind(c) is None for x in _meeting_inputs(c)]


_FLOATS = ("float16", "bfloat16", "float32", "float64")
_INT_NUMBER, _FLOAT_NUMBER, _INT = "number", "float number", "int"
# torch functions (and methods) that make a float tensor of an int one, or keep a float one's dtype
_FLOAT_MATH = {"exp", "log", "sin", "cos", "tan", "sqrt", "rsqrt", "tanh", "sigmoid", "exp2", "log2", "log10", "erf",
               "log1p", "expm1", "reciprocal", "atan", "asin", "acos", "sinh", "cosh", "softmax", "log_softmax"}
_CASTS = {"float": "float32", "double": "float64", "half": "float16", "bfloat16": "bfloat16", "bool": "int",
          "long": "int", "int": "int"}


def _kind(e: ast.expr) -> str | None:
    """What an expression that reads no input is: a number (int or float), an int tensor, or a float
    tensor of a dtype, as torch types it; None where it reads an input (it follows the inputs) or is
    not known."""
    if isinstance(e, ast.Constant) and type(e.value) in (int, bool, float):
        return _FLOAT_NUMBER if type(e.value) is float else _INT_NUMBER
    if isinstance(e, ast.UnaryOp):
        return _kind(e.operand)
    if isinstance(e, ast.BinOp):
        return _binary(_kind(e.left), _kind(e.right), e.op)
    if isinstance(e, ast.Call):
        return _called(e)
    return None


def _binary(left: str | None, right: str | None, op: ast.operator) -> str | None:
    if left is None or right is None:
        return None
    kinds = {left, right}
    if kinds <= {_INT_NUMBER, _FLOAT_NUMBER}:
        return _FLOAT_NUMBER if _FLOAT_NUMBER in kinds or isinstance(op, ast.Div) else _INT_NUMBER
    floats = [k for k in kinds if k in _FLOATS]
    if floats:
        return _widest(floats)
    # an int tensor: true division, or a float number in the math, makes torch's default float
    return "float32" if isinstance(op, ast.Div) or _FLOAT_NUMBER in kinds else _INT


def _widest(floats: list[str]) -> str:
    if "float64" in floats:
        return "float64"
    return floats[0] if len(set(floats)) == 1 else "float32"


def _called(call: ast.Call) -> str | None:
    f = call.func
    if isinstance(f, ast.Name) and f.id in CAST_MARKS:      # the reader's marks: a cast to one dtype, or back
        inner = _kind(call.args[0])
        return None if f.id == CAST_MARKS[1] or inner is None else cast_dtype(call.args[1].value) or inner
    if not isinstance(f, ast.Attribute):
        return _FLOAT_NUMBER if isinstance(f, ast.Name) and f.id == "float" else None
    on_torch = isinstance(f.value, ast.Name) and f.value.id == "torch"
    given = next((k.value for k in call.keywords if k.arg == "dtype"), None)
    if on_torch and f.attr in _MAKERS or f.attr.startswith("new_"):
        return _made(call, given, on_torch)
    operands = [x for a in (call.args if on_torch else [f.value])
                for x in (a.elts if isinstance(a, (ast.List, ast.Tuple)) else [a])]
    kind = _joined([_kind(a) for a in operands])
    if kind is None:
        return None
    if f.attr in _CASTS and not on_torch:
        return _CASTS[f.attr]
    if f.attr == "to":
        named = [_NAMED.get(ast.unparse(a).removeprefix("torch.")) for a in [*call.args, *(k.value for k in call.keywords)]]
        return next((n for n in named if n), None)
    if f.attr in _FLOAT_MATH and kind in (_INT, _INT_NUMBER):
        return "float32" if kind == _INT else _FLOAT_NUMBER
    return kind


_MAKERS = {"arange", "full", "tensor", "zeros", "ones", "eye", "linspace", "logspace", "empty", "rand", "randn"}


def _made(call: ast.Call, given: ast.expr | None, on_torch: bool) -> str | None:
    """A constructor's tensor: its dtype= (a float's, an int or bool one's, or an input's: None), else
    torch's default for what it is given; x.new_ones(...) follows x unless it names a dtype."""
    if given is not None:
        named = ast.unparse(given).removeprefix("torch.")
        kind = _NAMED.get(named) or (None if named.endswith(".dtype") else _INT)
        return _INT_NUMBER if kind and _zero_dims(call) else kind
    if not on_torch:
        return None
    if _zero_dims(call):
        return _INT_NUMBER
    return made_dtype(call) or _INT


def _joined(kinds: list[str | None]) -> str | None:
    """The kind of an op over operands of these kinds (None where one reads an input)."""
    if not kinds or None in kinds:
        return None
    floats = [k for k in kinds if k in _FLOATS]
    if floats:
        return _widest(floats)
    if _INT in kinds:
        return _INT
    return _FLOAT_NUMBER if _FLOAT_NUMBER in kinds else _INT_NUMBER


def made_dtype(call: ast.Call) -> str | None:
    """The float dtype torch gives the tensor a torch.<maker>(...) call makes, where it has dims; None
    for other calls, int and bool tensors, 0-d ones and a dtype read off an input."""
    f = call.func
    if not (isinstance(f, ast.Attribute) and isinstance(f.value, ast.Name) and f.value.id == "torch"):
        return None
    given = next((k.value for k in call.keywords if k.arg == "dtype"), None)
    if given is not None:
        return None if _zero_dims(call) else _NAMED.get(ast.unparse(given).removeprefix("torch."))
    if f.attr in _FLOAT_MAKERS:
        return None if _zero_dims(call) else "float32"
    value = call.args[1] if f.attr == "full" and len(call.args) > 1 else \
        next((k.value for k in call.keywords if k.arg == "fill_value"), None) if f.attr == "full" else None
    if value is not None:
        return None if _zero_dims(call) else _float_if_any(value)
    if f.attr == "arange":
        return _float_if_any(ast.Tuple([*call.args, *(k.value for k in call.keywords if k.arg in ("start", "end", "step"))]))
    if f.attr == "tensor" and call.args and isinstance(call.args[0], (ast.List, ast.Tuple)):
        return _float_if_any(call.args[0])
    return None


def _zero_dims(call: ast.Call) -> bool:
    # torch.ones(()), torch.full((), v), torch.tensor(2.0): 0-d, which promotes nothing
    f = call.func
    first = call.args[0] if call.args else next((k.value for k in call.keywords if k.arg in ("size", "data")), None)
    if isinstance(f, ast.Attribute) and f.attr == "tensor":
        return not isinstance(first, (ast.List, ast.Tuple))
    return isinstance(first, (ast.Tuple, ast.List)) and not first.elts


def _float_if_any(values: ast.expr) -> str | None:
    # float32 where any value written is a float (1.5, -1e4, float('-inf')); whole numbers make int64
    floats = [v for v in ast.walk(values) if isinstance(v, ast.Constant) and type(v.value) is float
              or isinstance(v, ast.Call) and isinstance(v.func, ast.Name) and v.func.id == "float"]
    return "float32" if floats else None
