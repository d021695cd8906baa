"""nn.RNNCell, nn.GRUCell and nn.LSTMCell as pasted modules call them, one step of a recurrence:
written in the functions the request reader knows (F.linear, chunks of the gates, sigmoid and tanh),
as torch's documentation defines each cell. An LSTM cell gives (h', c'), read as several results.
The whole-sequence layers (nn.LSTM, nn.GRU, nn.RNN) loop over time and stay refused.

Gates are the last dim's chunks of x W_ih^T + b_ih and h W_hh^T + b_hh, in torch's order (GRU: r, z,
n; LSTM: i, f, g, o). A missing hx is zeros: its product drops out (weight_hh is not read), its
bias stays.
"""
from __future__ import annotations

import ast
from typing import TYPE_CHECKING, Callable

from bot.generators.interface import GenerationError

if TYPE_CHECKING:
    from bot.request.pasted_layers import Param

GATES = {"RNNCell": 1, "GRUCell": 3, "LSTMCell": 4}


def cell(cls: str, options: dict, args: list[ast.expr], keywords: list[ast.keyword], line: int,
         param: Callable[[str, list[int]], Param]) -> tuple[ast.expr, list[Param]]:
    """(the cell's call as an expression, the learned tensors it reads), param(leaf, shape) giving
    each (weight_ih, weight_hh, bias_ih, bias_hh)."""
    n, size, hidden = GATES[cls], options.get("input_size"), options.get("hidden_size")
    given = dict(zip(("input", "hx"), args)) | {k.arg: k.value for k in keywords if k.arg}
    act = options.get("nonlinearity", "tanh")
    if type(size) is not int or type(hidden) is not int or "input" not in given or set(given) - {"input", "hx"} \
            or act not in ("tanh", "relu") or (cls != "RNNCell" and "nonlinearity" in options):
        raise GenerationError(f"line {line}: nn.{cls} is read with whole input_size and hidden_size, its input and "
                              "an optional hx (nn.RNNCell also nonlinearity 'tanh' or 'relu')")
    h, c = _state(cls, given.get("hx"), line)
    shapes = {"weight_ih": [n * hidden, size], "weight_hh": [n * hidden, hidden], "bias_ih": [n * hidden],
              "bias_hh": [n * hidden]}
    read = {"weight_ih", *["weight_hh"] * bool(h), *["bias_ih", "bias_hh"] * bool(options.get("bias", True))}
    params = {leaf: param(leaf, shape) for leaf, shape in shapes.items() if leaf in read}
    w_ih, w_hh, b_ih, b_hh = (params[leaf].name if leaf in params else None for leaf in shapes)
    x = ast.unparse(given["input"])
    gi = f"F.linear({x}, {w_ih}, {b_ih})"
    gh = f"F.linear({h}, {w_hh}, {b_hh})" if h else b_hh      # no state: its bias alone (or nothing)

    def gate(k: int, *parts: str | None) -> str:
        return " + ".join(f"({p}).chunk({n}, -1)[{k}]" for p in parts if p)

    if cls == "RNNCell":
        text = f"torch.{act}({gate(0, gi, gh)})"
    elif cls == "GRUCell":
        r, z = (f"torch.sigmoid({gate(k, gi, gh)})" for k in (0, 1))
        new = f"torch.tanh({gate(2, gi)}{f' + {r} * {gate(2, gh)}' if gh else ''})"
        text = f"(1.0 - {z}) * {new}" + (f" + {z} * ({h})" if h else "")
    else:
        i, f, o = (f"torch.sigmoid({gate(k, gi, gh)})" for k in (0, 1, 3))
        c2 = f"({f} * ({c}) + {i} * torch.tanh({gate(2, gi, gh)}))" if c else f"({i} * torch.tanh({gate(2, gi, gh)}))"
        text = f"({o} * torch.tanh({c2}), {c2})"
    return ast.parse(text, mode="eval").body, list(params.values())


def _state(cls: str, hx: ast.expr | None, line: int) -> tuple[str | None, str | None]:
    """(h, c) as text, None where not given: an LSTM's hx is the pair (h, c) written out."""
    if hx is None or (isinstance(hx, ast.Constant) and hx.value is None):
        return None, None
    if cls != "LSTMCell":
        return ast.unparse(hx), None
    if not (isinstance(hx, ast.Tuple) and len(hx.elts) == 2):
        raise GenerationError(f"line {line}: nn.LSTMCell's hx is read as the pair (h, c) written out, "
                              f"e.g. self.cell(x, (h, c)); got {ast.unparse(hx)!r}")
    return ast.unparse(hx.elts[0]), ast.unparse(hx.elts[1])
