"""A pasted PyTorch module -> the plain function bot.request.pasted reads (stage 1).

Kernel engineers paste the module they want faster, often in the layout KernelBench and many model
repos use: module-level size constants, `class Model(nn.Module)` whose `__init__` takes arguments,
a `forward`, and `get_inputs()` / `get_init_inputs()`. The reader evaluates what is constant there
(sizes, the init arguments, `self.` attributes set from them, math constants), writes each
parameter-free submodule call as the function it computes, and hands the parser one plain function
of the tensors forward takes, with the shapes and dtypes get_inputs makes. The reference stage is the
pasted file itself, so the kernel is judged against exactly what was pasted. What cannot be read is
refused naming its line and the one thing missing. The constants are evaluated by
bot.request.pasted_constants, the submodule calls written by bot.request.pasted_layers, and what
get_inputs makes read by bot.request.pasted_inputs.
"""
from __future__ import annotations

import ast
import re
from dataclasses import dataclass, field

from bot.generators.interface import GenerationError
from bot.ops.text import blank_range
from bot.request.pasted_constants import module_constants
from bot.request.pasted_forward import Resolver, assigned_names
from bot.request.pasted_init import init_arguments, init_attributes, init_inputs
from bot.request.pasted_inputs import INDEX, MASK, read_inputs
from bot.request.pasted_layers import Nested


@dataclass
class Pasted:
    """A pasted module read as one plain function, with what get_inputs makes."""
    function: str                                   # `def forward(<tensors>): ...`, constants resolved
    entry: str | None                               # the nn.Module class reference.py calls
    name: str | None                                # the spec's name: the class's, unless it is "Model"
    line: int                                       # forward's return statement, for messages
    shapes: dict[str, list[int]] = field(default_factory=dict)   # per forward parameter, from get_inputs
    dtypes: list[str] = field(default_factory=list)  # the float dtype get_inputs gives, if it names one
    masks: list[str] = field(default_factory=list)   # the tensors get_inputs makes bool
    indices: list[str] = field(default_factory=list)  # the tensors get_inputs makes int64 (torch.randint)
    ranges: dict[str, list[int]] = field(default_factory=dict)   # ... and [low, high) where it says them
    parameters: dict[str, str] = field(default_factory=dict)     # learned tensor input -> its path ("fc.weight")
    learned_shapes: dict[str, list[int]] = field(default_factory=dict)   # learned tensor input -> its shape


# ---------------------------------------------------------------- the pasted layout

def is_module(tree: ast.Module) -> bool:
    """A file holding an nn.Module subclass, a get_inputs(), or a method (a def taking self)."""
    for n in tree.body:
        if isinstance(n, ast.ClassDef) and any(_is_nn_module(b) for b in n.bases):
            return True
        if isinstance(n, ast.FunctionDef) and (n.name == "get_inputs" or _takes_self(n)):
            return True
    return False


def _layout(tree: ast.Module) -> tuple[dict[str, ast.FunctionDef], ast.ClassDef | None, ast.FunctionDef | None]:
    """(module-level functions, the module class: Model or else the last one, its forward)."""
    functions = {n.name: n for n in tree.body if isinstance(n, ast.FunctionDef)}
    classes = [n for n in tree.body if isinstance(n, ast.ClassDef) and any(_is_nn_module(b) for b in n.bases)]
    cls = next((c for c in classes if c.name == "Model"), classes[-1] if classes else None)
    methods = {m.name: m for m in cls.body if isinstance(m, ast.FunctionDef)} if cls else {}
    return functions, cls, methods.get("forward") or next((f for f in functions.values() if _takes_self(f)), None)


def buildable(tree: ast.Module) -> tuple[str, list[str]] | None:
    """(class name, forward's tensor parameters) of a pasted module the runner can build as
    Class(*get_init_inputs()) and use as the reference; None for other code."""
    functions, cls, forward = _layout(tree)
    if cls is None or forward is None or "get_init_inputs" not in functions:
        return None
    left = _defaulted(forward, functions.get("get_inputs"))
    return cls.name, [a.arg for a in forward.args.args[1:] if a.arg not in left]


def _defaulted(forward: ast.FunctionDef, made: ast.FunctionDef | None) -> dict:
    """forward's trailing parameters get_inputs does not give, each with its constant default
    (`mask=None`, `scale=1.0`): constants of the function, not inputs. Empty where any left out has no
    constant default or is assigned in forward (get_inputs' count is then refused as it is)."""
    returned = next((s.value for s in made.body if isinstance(s, ast.Return)), None) if made else None
    if not isinstance(returned, (ast.List, ast.Tuple)) or any(isinstance(e, ast.Starred) for e in returned.elts):
        return {}
    params, defaults = forward.args.args[1:], forward.args.defaults
    left = params[len(returned.elts):]
    if not left or len(left) > len(defaults) or not all(isinstance(d, ast.Constant) for d in defaults[-len(left):]) \
            or {p.arg for p in left} & assigned_names(forward):        # one forward assigns is not a constant
        return {}
    return {p.arg: d.value for p, d in zip(left, defaults[-len(left):])}


def init_words(tree: ast.Module, prose: str) -> tuple[dict[str, int | float], str]:
    """The values the words give the module's __init__ parameters ('dim 4096', 'eps=1e-5'), and the
    words without them; none where the code is no module."""
    cls = _layout(tree)[1] if is_module(tree) else None
    init = next((m for m in cls.body if isinstance(m, ast.FunctionDef) and m.name == "__init__"), None) if cls else None
    values: dict[str, int | float] = {}
    for p in [a.arg for a in init.args.args[1:] + init.args.kwonlyargs] if init else []:
        m = re.search(rf"(?<![\w.]){re.escape(p)}\s*(?:=|:|is|of)?\s*(-?\d+(?:\.\d*)?(?:e-?\d+)?)(?![\w.]|\s*[x×*])",
                      prose, re.I)
        if m:
            number = m.group(1)
            values[p] = float(number) if re.search(r"[.e]", number, re.I) else int(number)
            prose = blank_range(prose, m.start(), m.end())
    return values, prose


def read(tree: ast.Module, said: dict[str, int | float] | None = None) -> Pasted:
    """The pasted module as one plain function; GenerationError naming what cannot be read. said: values
    the words give __init__'s parameters (get_init_inputs' come first)."""
    env = module_constants(tree)
    env.update({n.name: n for n in tree.body if isinstance(n, ast.ClassDef) and any(map(_is_nn_module, n.bases))})
    functions, cls, forward = _layout(tree)
    methods = {m.name: m for m in cls.body if isinstance(m, ast.FunctionDef)} if cls else {}
    if forward is None:
        where = f"class {cls.name}" if cls else "the pasted code"
        raise GenerationError(f"{where} has no forward(self, ...): paste the module's forward with its class")
    init = methods.get("__init__")
    given = init_inputs(functions.get("get_init_inputs"), env)
    positional = [a.arg for a in init.args.args[1:1 + len(given or [])]] if init else []
    said = {k: v for k, v in (said or {}).items() if k not in positional}
    attrs = init_attributes(cls, init_arguments(init, given, said, env, cls) if init else {}, env)
    left = _defaulted(forward, functions.get("get_inputs"))
    env.update(left)
    tensors = [a.arg for a in forward.args.args[1:] if a.arg not in left]
    own = {k: Nested(cls.name, m, attrs, m.lineno) for k, m in methods.items() if k not in ("__init__", "forward")
           and m.args.args and m.args.args[0].arg == "self"} if cls else {}
    resolver = Resolver(env, attrs, set(tensors) | assigned_names(forward), methods=own)
    fn = resolver.function(forward, tensors)
    name = re.sub(r"(?<=[a-z0-9])(?=[A-Z])", "_", cls.name).lower() if cls and cls.name != "Model" else None
    line = next((s.lineno for s in ast.walk(forward) if isinstance(s, ast.Return)), forward.lineno)
    built = buildable(tree)
    pasted = Pasted(ast.unparse(fn), built[0] if built else None, name, line)
    if "get_inputs" in functions:
        pasted.shapes, dtypes, pasted.ranges = read_inputs(functions["get_inputs"], env, tensors)
        pasted.masks = [n for n, d in dtypes.items() if d == MASK]
        pasted.indices = [n for n, d in dtypes.items() if d == INDEX]
        pasted.dtypes = sorted({d for d in dtypes.values() if d not in (None, MASK, INDEX)})
    pasted.learned_shapes = {p.name: p.shape for p in resolver.params}
    if "get_inputs" in functions:
        pasted.shapes.update(pasted.learned_shapes)
    pasted.parameters = {p.name: p.path for p in resolver.params}
    return pasted


def _is_nn_module(base: ast.expr) -> bool:
    return ast.unparse(base) in ("nn.Module", "torch.nn.Module", "Module")


def _takes_self(fn: ast.FunctionDef) -> bool:
    return bool(fn.args.args) and fn.args.args[0].arg == "self"
