"""Gradients of an operator for training kernels (issue 26): reverse mode over the IR tree, written as
IR expressions over the forward's inputs and the upstream gradient, so each gradient is lowered to
Triton by the families like any expression (one kernel where a family takes it whole, a chain
where not). The forward's inputs are what the backward reads: it recomputes what it needs (a norm's
rstd, a softmax) in the same pass instead of storing it.

Each rule is PyTorch's own derivative (tools/autograd/derivatives.yaml): relu's at 0 is 0, abs's
sign(x) with 0 at 0, maximum and minimum split an equal pair's gradient in halves, clamp passes it
where min <= x <= max. Pointwise ops, softmax and log_softmax over a dim, layernorm and rmsnorm
over the last dim (with weight and bias, of a pointwise body), group norm, instance norm,
training-mode batch norm and layer norm over several dims (each as layer norm's over a view whose
rows hold one statistic's elements), eval-mode batch norm (an affine map per channel), sum, mean,
max, min (amax, amin), prod (zeros as torch treats them), logsumexp, var, std and p-norms over
one dim, several or all, anywhere in an expression, matmul (transposed operands, a
pointwise epilogue, a triangle of the product), cross entropy (its logits') and nll_loss, cumsum (any direction, exclusive too), cumprod
(either direction, exclusive too, zeros as torch treats them), slices (any step) and selects, index_select, embedding
and gather (the gather family's index_grad kernel), cummax and cummin (the scan family's gradient
kernel: each output's gradient to the element its value came from), transposes and permutations, views that keep every
element, cat and stack (each piece's slice of the upstream, where its place is the same in every
case), max and average pooling, with a window or adaptive (the pool family's gradient kernels),
convolutions and transposed ones (stride, padding, dilation, groups, bias; each gradient itself a
convolution), and scaled dot-product attention (the attention family's gradient kernels) have
rules; any other op is refused, naming it.
"""
from __future__ import annotations

import math

from bot import ir
from bot.ops import attention, channel_norm, conv, loss
from bot.ops.node import Node, to_text

_SQRT_2_OVER_PI = math.sqrt(2.0 / math.pi)


REDUCTIONS = ("sum", "mean", "max", "min", "logsumexp", "var", "std", "norm", "prod")   # _reduced's


class NoGradient(ValueError):
    """The operator holds an op without a gradient rule here; the message names it."""


def gradients(node: Node, upstream: str, cases: list[dict[str, list[int]]]) -> dict[str, str]:
    """Each input's gradient as an expression text at the shape its contributions broadcast to
    (bot.ops.training sums it down to the input's own shape): d(sum(upstream * node)) / d(input).
    cases: each case's input shapes and the upstream's, for the rules whose text depends on them
    (a strided convolution's output padding)."""
    acc: dict[str, list[str]] = {}
    _back(node, upstream, acc, cases, root=True)
    return {name: " + ".join(f"({p})" for p in parts) for name, parts in acc.items()}


def _back(node: Node, up: str, acc: dict[str, list[str]], cases: list[dict], root: bool = False) -> None:
    if node.op == "input":
        acc.setdefault(node.name, []).append(up)
        return
    if node.op == "const" or node.op in ir.COMPARE or not ir.input_names(node):
        return                  # no gradient flows into a constant (a number, a constant tensor) or through a comparison
    rule = _RULES.get(node.op)
    if node.op in REDUCTIONS:
        rule = lambda n, a, u: _reduced(n, a, u, root, cases)     # noqa: E731 (its upstream's shape matters)
    if node.op in _SIZED:
        rule = lambda n, a, u: _SIZED[n.op](n, a, u, cases)     # noqa: E731 (its sizes matter)
    if rule is None:
        raise NoGradient(f"{node.op} has no gradient rule in the offline generator's training kernels; supported: "
                         f"{', '.join(sorted([*_RULES, *REDUCTIONS, *_SIZED]))}")
    for child, grad in rule(node, [to_text(a) for a in node.args], up):
        _back(child, grad, acc, cases)


def _unary(formula: str):
    """A rule for f(a): up * f'(a), formula in terms of {a}."""
    return lambda node, a, up: [(node.args[0], f"({up}) * ({formula.format(a=a[0])})")]


def _pow(node: Node, a: list[str], up: str):
    e = node.attr("exponent")
    return [(node.args[0], f"({up}) * {e!r} * ({a[0]}) ** {e - 1.0!r}")]


def _gelu(node: Node, a: list[str], up: str):
    x = a[0]
    if node.attr("approximate") == "tanh":
        t = f"tanh({_SQRT_2_OVER_PI!r} * (({x}) + 0.044715 * ({x}) ** 3.0))"
        d = (f"0.5 * (1.0 + {t}) + 0.5 * ({x}) * (1.0 - {t} ** 2.0) * {_SQRT_2_OVER_PI!r} * "
             f"(1.0 + 0.134145 * ({x}) ** 2.0)")
    else:
        d = f"0.5 * (1.0 + erf(({x}) * {1 / math.sqrt(2.0)!r})) + ({x}) * exp(-0.5 * ({x}) ** 2.0) * {1 / math.sqrt(2 * math.pi)!r}"
    return [(node.args[0], f"({up}) * ({d})")]


def _clamp(node: Node, a: list[str], up: str):
    low, high = node.attr("min"), node.attr("max")
    kept = f"({up})"
    if high is not None:
        kept = f"where(({a[0]}) <= {high!r}, {kept}, 0.0)"
    if low is not None:
        kept = f"where(({a[0]}) >= {low!r}, {kept}, 0.0)"
    return [(node.args[0], kept)]


def _extreme(node: Node, a: list[str], up: str):
    """maximum/minimum: the gradient to the winner, halved between an equal pair."""
    wins = ">" if node.op == "maximum" else "<"
    first = f"where(({a[0]}) {wins} ({a[1]}), ({up}), where(({a[0]}) == ({a[1]}), 0.5 * ({up}), 0.0))"
    second = f"where(({a[1]}) {wins} ({a[0]}), ({up}), where(({a[0]}) == ({a[1]}), 0.5 * ({up}), 0.0))"
    return [(node.args[0], first), (node.args[1], second)]


def _softmax(node: Node, a: list[str], up: str):
    d = node.attr("dim", -1)
    y = f"softmax({a[0]}, dim={d})"
    if node.op == "log_softmax":
        return [(node.args[0], f"({up}) - {y} * sum({up}, dim={d}, keepdim=True)")]
    return [(node.args[0], f"{y} * (({up}) - sum(({up}) * {y}, dim={d}, keepdim=True))")]


def _normalized(x: str, g: str, eps: float, centred: bool = True) -> tuple[str, str]:
    """(x_hat, dx) over the last dim: x_hat = (x - mean) * rstd (no mean where not centred, as
    rmsnorm), and the gradient of x_hat . g: rstd * (g - mean(g) - x_hat * mean(g * x_hat)) (the
    mean(g) term where centred)."""
    c = f"(({x}) - mean({x}, dim=-1, keepdim=True))" if centred else f"({x})"
    rstd = f"rsqrt(mean({c} * {c}, dim=-1, keepdim=True) + {eps!r})"
    x_hat = f"({c} * {rstd})"
    shift = f" - mean({g}, dim=-1, keepdim=True)" if centred else ""
    return x_hat, f"{rstd} * ({g}{shift} - {x_hat} * mean({g} * {x_hat}, dim=-1, keepdim=True))"


def _norm(node: Node, a: list[str], up: str):
    """rmsnorm and layernorm over the last dim, y = x_hat * w + b: dx from gw = up * w (_normalized);
    dw and db per element, summed over the rows later."""
    has_w, has_b = node.attr("has_weight"), node.attr("has_bias")
    gw = f"(({up}) * ({a[1]}))" if has_w else f"({up})"
    x_hat, dx = _normalized(a[0], gw, node.attr("eps"), centred=node.op == "layernorm")
    out = [(node.args[1], f"({up}) * {x_hat}")] if has_w else []
    out += [(node.args[2 if has_w else 1], up)] if has_b else []
    return out + [(node.args[0], dx)]


def _channel_norm(node: Node, a: list[str], up: str):
    """group_norm, instance_norm, batch_norm and layer norm over trailing dims: x flat ([N, C, S], S = 1
    for [N, C]; layer norm [rows, the normalized elements]) viewed as rows of one statistic each
    ([N, G, C/G * S] group norm, [N, C, S] instance norm, [C, N * S] batch norm), _normalized over
    them and viewed back. The weight scales the upstream per channel (layer norm's per element);
    the weight's and bias's gradients are summed over the rest here (layer norm's later)."""
    x, op = a[0], node.op
    flat, up_flat = (f"flatten({t}, -{node.attr('dims')})" if op == "layer_norm_nd" else _channels_flat(t)
                     for t in (x, up))
    tensors = {role: (n, to_text(n)) for role, n in channel_norm.roles(node).items()}
    if op == "batch_norm" and not node.attr("training"):
        return _eval_batch_norm(node, flat, up_flat, tensors)
    rows, back = _statistic_rows(node, flat)
    per_channel = op != "layer_norm_nd"
    g = up_flat
    if "weight" in tensors:         # over the flat view: [C, 1] a channel, else the weight's elements flat
        w = tensors["weight"][1]
        g = f"({up_flat}) * " + (f"unsqueeze({w}, -1)" if per_channel else f"flatten({w}, 0)")
    x_hat, dx = _normalized(rows(flat), rows(g), node.attr("eps"))
    out = [(node.args[0], f"reshape_as({back(dx)}, {x})")]
    if "weight" in tensors:
        out.append((tensors["weight"][0], _per_channel(f"({up_flat}) * {back(x_hat)}") if per_channel
                    else f"({up}) * reshape_as({back(x_hat)}, {x})"))
    if "bias" in tensors:
        out.append((tensors["bias"][0], _per_channel(up_flat) if per_channel else up))
    return out


def _channels_flat(t: str) -> str:
    """t [N, C, ...] as [N, C, S]: its dims past the channels flattened (S = 1 for [N, C])."""
    return f"flatten(unsqueeze({t}, -1), 2)"


def _eval_batch_norm(node: Node, flat: str, up_flat: str, tensors: dict[str, tuple[Node, str]]):
    """Batch norm by running statistics, y = (x - m) * r * w + b with r = rsqrt(v + eps) per channel:
    an affine map of x, so dx = up * r * w. The other gradients are per-channel products of the
    sums s0 = sum(up) and s1 = sum(up * (x - m)) = sum(up * x) - m * s0 (no per-channel tensor
    inside a reduction: the row kernels read none)."""
    t = {role: text for role, (_, text) in tensors.items()}
    r = f"rsqrt({t['running_var']} + {node.attr('eps')!r})"
    scale = f"{r} * {t['weight']}" if "weight" in tensors else r
    s0 = _per_channel(up_flat)
    s1 = f"({_per_channel(f'({up_flat}) * {flat}')} - {t['running_mean']} * {s0})"
    out = [(node.args[0], f"reshape_as(({up_flat}) * unsqueeze({scale}, -1), {to_text(node.args[0])})"),
           (tensors["running_mean"][0], f"-{s0} * {scale}"),
           (tensors["running_var"][0], f"-0.5 * {s1} * {scale} / ({t['running_var']} + {node.attr('eps')!r})")]
    if "weight" in tensors:
        out.append((tensors["weight"][0], f"{s1} * {r}"))
    if "bias" in tensors:
        out.append((tensors["bias"][0], s0))
    return out


def _per_channel(flat: str) -> str:
    """A [N, C, S] view summed to its C channels (a per-channel weight's or bias's gradient)."""
    return f"sum(sum({flat}, dim=-1), dim=0)"


def _statistic_rows(node: Node, flat: str):
    """(rows, back): a channel norm's flat view to rows of one statistic each, and back."""
    if node.op == "group_norm":
        return (lambda t: f"flatten(unflatten({t}, 1, ({node.attr('groups')}, -1)), 2)",
                lambda t: f"reshape_as({t}, {flat})")
    if node.op == "batch_norm":
        return (lambda t: f"flatten(transpose({t}, 0, 1), 1)",
                lambda t: f"transpose(reshape_as({t}, transpose({flat}, 0, 1)), 0, 1)")
    return (lambda t: t), (lambda t: f"reshape_as({t}, {flat})")


def _conv(node: Node, a: list[str], up: str, cases: list[dict[str, list[int]]]):
    """A convolution (stride s, padding p, dilation d, groups g) of input x by weight w: dx is the
    transposed convolution of up by w, its output padding what gives x's size back (a transposed
    convolution's dx: the convolution of up by w); dw is the convolution of x by up (a transposed
    one's: of up by x) with batch and channels swapped, stride d and dilation s (_weight_gradient);
    the bias's, up summed over all but the channels."""
    nd, s, p, d, g = (node.attr(k) for k in ("nd", "stride", "padding", "dilation", "groups"))
    x, w = (n.name for n in node.args[:2])
    tf32 = ", tf32=True" if node.attr("tf32") else ""
    sizes = [_conv_sizes(node, c[x], c[w]) for c in cases]       # (input, output, kernel) a case
    if node.attr("transposed"):
        d_x = f"conv{nd}d({up}, {w}, stride={s}, padding={p}, dilation={d}, groups={g}{tf32})"
        d_w = _weight_gradient(node, up, x, [(o, i, k) for i, o, k in sizes], tf32)
    elif node.attr("padding_end"):
        d_x, d_w = _uneven_input_gradient(node, up, w, sizes, tf32), _weight_gradient(node, x, up, sizes, tf32)
    else:
        d_x = (f"conv_transpose{nd}d({up}, {w}, stride={s}, padding={p}, output_padding="
               f"{_stride_remainder(node, sizes)}, groups={g}, dilation={d}{tf32})")
        d_w = _weight_gradient(node, x, up, sizes, tf32)
    out = [(node.args[0], d_x), (node.args[1], d_w)]
    if len(node.args) > 2:
        out.append((node.args[2], _per_channel(f"flatten({up}, 2)")))
    return out


def _uneven_input_gradient(node: Node, up: str, w: str, sizes: list[tuple], tf32: str) -> str:
    """dx of a convolution padded p before and e after each dim: the transposed convolution of up by w
    over the whole padded input (no padding cropped), then the input's own span of it, [p, -e) (a
    stride's remainder made up by output padding; it must be the same in every case, as the slice is)."""
    nd, s, p, d, g = (node.attr(k) for k in ("nd", "stride", "padding", "dilation", "groups"))
    e, rem = node.attr("padding_end"), _stride_remainder(node, sizes)
    extra = [max(0, r - e[j]) for j, r in enumerate(rem)]           # output padding, below the stride
    full = (f"conv_transpose{nd}d({up}, {w}, stride={s}, padding={(0,) * nd}, output_padding={tuple(extra)}, "
            f"groups={g}, dilation={d}{tf32})")
    ends = [e[j] - rem[j] + extra[j] for j in range(nd)]             # past the input's span, at each dim's end
    span = ", ".join(f"{p[j]}:{-ends[j] if ends[j] else ''}" for j in range(nd))
    return f"({full})[:, :, {span}]"


def _stride_remainder(node: Node, sizes: list[tuple]) -> tuple[int, ...]:
    """What the padded input has past the convolution's last window, a dim (its length less the
    dilated kernel, modulo the stride): dx's output padding. It must be the same in every case."""
    nd, s, p, d = (node.attr(k) for k in ("nd", "stride", "padding", "dilation"))
    e = node.attr("padding_end") or p
    rems = {tuple((i[j] + p[j] + e[j] - d[j] * (k[j] - 1) - 1) % s[j] for j in range(nd)) for i, _, k in sizes}
    if len(rems) > 1:
        raise NoGradient(f"conv{nd}d with stride {list(s)}: the input's sizes leave different remainders in "
                         "different cases, so its gradient's output padding differs; give every case the same "
                         "sizes modulo the stride")
    return rems.pop() if rems else (0,) * nd


def _conv_sizes(node: Node, x: list[int], w: list[int]) -> tuple[list[int], list[int], list[int]]:
    """(input, output, kernel) spatial sizes of a convolution (or a transposed one) of x by w."""
    nd = node.attr("nd")
    out = conv.conv_shape(x, w, None, nd, bool(node.attr("transposed")), node.attr("stride"), node.attr("padding"),
                          node.attr("dilation"), node.attr("groups"), node.attr("output_padding") or (0,) * nd,
                          node.attr("padding_end") or node.attr("padding"))
    return x[2:], out[2:], w[2:]


def _weight_gradient(node: Node, source: str, by: str, sizes: list[tuple], tf32: str) -> str:
    """dw[., ., t] = sum over samples and positions of by at a position times source where tap t
    reaches from it: a convolution of source, its channels of each group as the batch and (group,
    sample) as channels, by `by` with batch and channels swapped, stride d and dilation s, cut to the
    kernel's size (the positions past it, which no tap reaches). sizes: (source, by, kernel) a case."""
    nd, s, p, d, g = (node.attr(k) for k in ("nd", "stride", "padding", "dilation", "groups"))
    e = node.attr("padding_end") or p
    lhs = f"transpose({source}, 0, 1)" if g == 1 else \
        f"flatten(permute(unflatten({source}, 1, ({g}, -1)), {(2, 1, 0, *range(3, 3 + nd))}), 1, 2)"
    uneven = f", padding_end={e}" if e != p else ""
    d_w = (f"transpose(conv{nd}d({lhs}, transpose({by}, 0, 1), stride={d}, padding={p}{uneven}, dilation={s}, "
           f"groups={g}{tf32}), 0, 1)")
    for j in range(nd):
        if any((a[j] + p[j] + e[j] - s[j] * (b[j] - 1) - 1) // d[j] + 1 > k[j] for a, b, k in sizes):
            d_w = f"narrow({d_w}, {2 + j}, 0, {sizes[0][2][j]})"
    return d_w


def _cat(node: Node, a: list[str], up: str, cases: list[dict[str, list[int]]]):
    """Each piece's gradient is its slice of up along the joined dim: from a fixed offset, or to a
    fixed distance from the end, so every case's slice is written the same (sizes that differ
    between cases are only allowed where the slice needs them not)."""
    d = node.attr("dim")
    sizes = [[ir.output_shape(part, c)[d] for part in node.args] for c in cases]
    out = []
    for k, part in enumerate(node.args):
        start = {sum(s[:k]) for s in sizes}
        length = {s[k] for s in sizes}
        tail = {sum(s[k + 1:]) for s in sizes}
        if len(start) == 1 and len(length) == 1:
            lo = start.pop()
            hi = lo + length.pop()
        elif len(start) == 1 and len(tail) == 1:
            lo, hi = start.pop(), -tail.pop() or None
        elif len(tail) == 1 and len(length) == 1:
            t = tail.pop()
            lo, hi = -(t + length.pop()), -t or None
        else:
            raise NoGradient(f"cat along dim {d}: piece {k + 1}'s place differs between cases (its size and the "
                             "sizes beside it all vary); give the pieces before or after it the same size in every case")
        lead = ":, " * d if d >= 0 else "..., "
        trail = ", :" * (-d - 1) if d < 0 else ""
        out.append((part, f"({up})[{lead}{lo}:{'' if hi is None else hi}{trail}]"))
    return out


def _sliced(node: Node, a: list[str], up: str, cases: list[dict[str, list[int]]]):
    """A slice (step 1; narrow) or a select of x along a dim: up, summed down to the view's shape,
    put back in its place, zeros on either side (each zeros_like a slice of x, so its size follows
    x's in every case; a side empty in every case is left out, one empty in some cases only is
    refused)."""
    d = node.attr("dim")
    up = _at_result(node, up, cases)
    lead = ":, " * d if d >= 0 else "..., "
    trail = ", :" * (-d - 1) if d < 0 else ""
    if node.op == "slice" and node.attr("step") != 1:
        return _strided(node, a, up, cases, (lead, trail))
    if node.op == "slice":
        start, stop = _piece_bounds(node, cases) if node.attr("chunks") else (node.attr("start") or 0, node.attr("stop"))
        middle = f"({up})"
    else:
        start, middle = node.attr("index"), f"unsqueeze({up}, {d})"
        stop = start + 1 if start != -1 else None
    sizes = {ir.output_shape(node.args[0], c)[d] for c in cases}
    parts = []
    for side, span in (("before", slice(None, start)), ("after", slice(stop, None) if stop is not None else None)):
        lengths = {len(range(n)[span]) for n in sizes} if span else {0}
        if 0 in lengths and len(lengths) > 1:
            raise NoGradient(f"{node.op} along dim {d}: what lies {side} it is empty in some cases only; give every "
                             "case the same layout")
        if lengths != {0}:
            bounds = f"{'' if span.start is None else span.start}:{'' if span.stop is None else span.stop}"
            parts.append(f"zeros_like(({a[0]})[{lead}{bounds}{trail}])")
        if side == "before":
            parts.append(middle)
    return [(node.args[0], f"cat(({', '.join(parts)}), dim={d})" if len(parts) > 1 else middle)]


def _piece_bounds(node: Node, cases: list[dict[str, list[int]]]) -> tuple[int, int | None]:
    """(start, stop) of x.chunk(n, d)[i] or x.split(size, d)[i] along d, the same in every case (stop
    None: to the end)."""
    n, i = node.attr("chunks")
    bounds = set()
    for c in cases:
        size = ir.output_shape(node.args[0], c)[node.attr("dim")]
        piece = -(-size // n) if n > 0 else -n          # chunk(n): ceil(size / n) each; split(size): size
        start = i % -(-size // piece) * piece if i < 0 else i * piece
        bounds.add((start, None if start + piece >= size else start + piece))
    if len(bounds) > 1:
        raise NoGradient(f"{node.op} along dim {node.attr('dim')}: the piece's place differs between cases; give every "
                         "case the same size along it")
    return bounds.pop()


def _strided(node: Node, a: list[str], up: str, cases: list[dict[str, list[int]]], around: tuple[str, str]):
    """A slice with step s > 1 along dim d (x[:, 1::2]): up's elements s apart, each followed by s - 1
    zeros (up stacked with s - 1 zeros along a new dim beside d, flattened into d), cut to x's size,
    and zeros before the first element picked and after the span; the same layout in every case."""
    d, step = node.attr("dim"), node.attr("step")
    layouts = set()
    for c in cases:
        size = ir.output_shape(node.args[0], c)[d]
        picked = range(size)[slice(node.attr("start"), node.attr("stop"), step)]
        if not picked:
            raise NoGradient(f"a slice with step {step} along dim {d} picks nothing in some case")
        end = picked[0] + len(picked) * step          # one past the span the picked elements head
        layouts.add((picked[0], size - end if end > size else None, end if end < size else None))
    if len(layouts) > 1:
        raise NoGradient(f"a slice with step {step} along dim {d}: where it starts or ends differs between cases; "
                         "give every case the same layout")
    (first, cut, after), (lead, trail) = layouts.pop(), around
    new = d + 1 if d >= 0 else d                      # the new dim, just after d
    spread = f"flatten(stack(({up}, {', '.join([f'zeros_like({up})'] * (step - 1))}), dim={new}), {new - 1}, {new})"
    parts = [f"zeros_like(({a[0]})[{lead}:{first}{trail}])"] if first else []
    parts.append(f"({spread})[{lead}:{cut}{trail}]" if cut else spread)
    parts += [f"zeros_like(({a[0]})[{lead}{after}:{trail}])"] if after is not None else []
    return [(node.args[0], f"cat(({', '.join(parts)}), dim={d})" if len(parts) > 1 else spread)]


def _lookup(node: Node, a: list[str], up: str, cases: list[dict[str, list[int]]]):
    """index_select, embedding and gather: the table's gradient is up, summed down to the lookup's
    shape, added back where the lookup read (the gather family's index_grad kernel; an embedding's
    padding_idx row gets none); the indices get none."""
    if node.attr("scale_grad_by_freq"):
        raise NoGradient("embedding with scale_grad_by_freq=True has no gradient rule here yet")
    up = _at_result(node, up, cases)
    table, index = (node.args[1], node.args[0]) if node.op == "embedding" else node.args
    t, i = (to_text(table), to_text(index))
    return [(table, f"index_grad({t}, {i}, {up}, kind={node.op!r}, dim={node.attr('dim') or 0!r}, "
                    f"padding_idx={node.attr('padding_idx')!r})")]


def _pool(node: Node, a: list[str], up: str):
    """Max and average pooling, with a window or adaptive: the pool family's gradient kernel
    (pool_grad), which sends each output's gradient back to the input its max came from, or spreads
    it over the window as the average divided it."""
    attrs = ", ".join(f"{k}={v!r}" for k, v in node.attrs)
    return [(node.args[0], f"pool_grad({a[0]}, {up}, {attrs})")]


def _attention(node: Node, a: list[str], up: str, cases: list[dict[str, list[int]]]):
    """Scaled dot-product attention: q's, k's and v's gradients by the attention family's kernels
    (sdpa_grad: FlashAttention-2's backward, the scores recomputed, never stored); k's and v's come per
    query head, summed here over each group of query heads that shares one (enable_gqa)."""
    if attention.attn_mask(node) is not None:
        raise NoGradient("attention with attn_mask: its gradient kernels do not read a mask yet (is_causal=True's "
                         "mask they do)")
    out = []
    for arg, wrt in zip(node.args, "qkv"):
        grad = f"sdpa_grad({', '.join(a)}, {up}, wrt={wrt!r}{attention._keywords(node)})"
        out.append((arg, grad if wrt == "q" else _query_groups(node, grad, cases)))
    return out


def _query_groups(node: Node, grad: str, cases: list[dict[str, list[int]]]) -> str:
    """A key's or value's gradient per query head, summed over the query heads sharing each of its
    heads (enable_gqa with fewer key heads than query heads; a broadcast one is summed later)."""
    shapes = [(ir.output_shape(node.args[0], c), ir.output_shape(node.args[1], c)) for c in cases]
    heads = {(q[-3], k[-3]) for q, k in shapes} if len(shapes[0][0]) >= 3 else {(1, 1)}
    if not node.attr("gqa") or all(hk in (1, hq) for hq, hk in heads):
        return grad
    if len(heads) > 1:
        raise NoGradient("attention with enable_gqa: the query and key heads differ between cases, so the sum of each "
                         "group's gradients differs; give every case the same heads")
    (hq, hk), = heads
    return f"sum(unflatten({grad}, -3, ({hk}, {hq // hk})), dim=-3)"


def _reduced(node: Node, a: list[str], up: str, root: bool, cases: list[dict[str, list[int]]]):
    """Reductions over dims or all: the upstream gradient broadcast back over what was reduced
    (zeros_like gives the input's shape without reading its values), times each element's share:
    1 for sum, 1/count for mean (count is itself a sum of ones, so the rule needs no shapes); for
    max and min (torch.amax/amin) the elements equal to the result, split evenly between ties;
    softmax for logsumexp; 2 (x - mean) / (count - correction) for var, that over 2 std for std
    (0 where std is 0, as torch's). A whole reduction's upstream is first summed to its one value
    (what broadcast it further gave it more); a reduction over dims, inside an expression too
    (x / sum(x, dim=-1, keepdim=True), sum(x * w, dim=-1) + b), first sums its upstream down to the
    result's shape (what broadcast the result gave it more), then puts dropped dims back."""
    d, keep = node.attr("dim"), node.attr("keepdim")
    whole = d is None or d == ir.ALL
    if whole:
        g, dims = (f"({up})" if root else f"sum({up}, dim=None)"), "dim=None"
    else:
        ranks = {len(ir.output_shape(node.args[0], c)) for c in cases}
        if len(ranks) > 1:
            raise NoGradient(f"{node.op} over dims of bodies of ranks {sorted(ranks)}: give every case one rank")
        rank = ranks.pop()
        ds = sorted(i % rank for i in (d if isinstance(d, (tuple, list)) else (d,)))
        g = _at_result(node, up, cases)
        for i in ds if not keep else []:
            g = f"unsqueeze({g}, {i})"
        dims = f"dim={_dims(ds)}, keepdim=True"
    x = a[0]
    spread = f"({g} + zeros_like({x}))"
    count = f"sum(ones_like({x}), {dims})"
    if node.op == "sum":
        share = "1.0"
    elif node.op == "mean":
        share = f"1.0 / {count}"
    elif node.op in ("max", "min"):
        hit = f"where(({x}) == {node.op}({x}, {dims}), 1.0, 0.0)"
        share = f"{hit} / sum({hit}, {dims})"
    elif node.op == "logsumexp":
        share = f"exp(({x}) - logsumexp({x}, {dims}))"
    elif node.op == "norm":
        share = _norm_share(x, node.attr("p"), dims)
    elif node.op == "prod":         # torch's prod_backward: the product of the others, zeros apart
        zeros = f"sum(where(({x}) == 0.0, 1.0, 0.0), {dims})"
        others = f"prod(where(({x}) == 0.0, 1.0, {x}), {dims})"
        share = (f"where({zeros} == 0.0, prod({x}, {dims}) / ({x}), "
                 f"where(({x}) == 0.0, where({zeros} == 1.0, {others}, 0.0), 0.0))")
    else:                                   # var, std
        c = node.attr("correction")
        share = f"2.0 * (({x}) - mean({x}, {dims})) / ({count} - {c!r})"
        if node.op == "std":        # 0 where the std is 0, as torch's std_backward masks it
            sd = f"std({x}, {dims}, correction={c!r})"
            share = f"where({sd} == 0.0, 0.0, {share} / (2.0 * {sd}))"
    return [(node.args[0], spread if share == "1.0" else f"{spread} * {share}")]


def _norm_share(x: str, p, dims: str) -> str:
    """d norm_p(x) / dx, torch's norm_backward: 0 for p = 0; sign(x) for 1; for +-inf, sign(x) where
    |x| is the norm, split evenly between ties; else sign(x) |x|^(p-1) / norm^(p-1) (0 where the
    norm is 0; below p = 1, 0 where x is 0 and norm^(1-p) multiplying)."""
    if p in ("inf", "-inf"):
        hit = f"where(abs({x}) == norm({x}, p=float({p!r}), {dims}), 1.0, 0.0)"
        return f"sign({x}) * {hit} / sum({hit}, {dims})"
    p = float(p)
    if p in (0.0, 1.0):
        return "0.0" if p == 0.0 else f"sign({x})"
    norm = f"norm({x}, p={p!r}, {dims})"
    if p < 1.0:
        return f"sign({x}) * where(({x}) == 0.0, 0.0, abs({x}) ** {p - 1.0!r}) * {norm} ** {1.0 - p!r}"
    return f"where({norm} == 0.0, 0.0, sign({x}) * abs({x}) ** {p - 1.0!r} / {norm} ** {p - 1.0!r})"


def summed_to(text: str, own: list[list[int]], cases: list[dict[str, list[int]]], what: str) -> str:
    """text summed over the dims it was broadcast along past `own` (each case's shape of `what`):
    leading dims it lacks (dropped) and dims where own has 1 (kept), the same in every case."""
    node = ir.parse(text, as_written=True)
    plans = set()
    for shapes, target in zip(cases, own):
        full = ir.output_shape(node, shapes)
        lead = len(full) - len(target)
        kept = tuple(lead + d for d, s in enumerate(target) if s == 1 and full[lead + d] != 1)
        plans.add((lead, kept))
    if len(plans) > 1:
        raise NoGradient(f"{what} is broadcast along different dims in different cases; give every case the same "
                         "layout of broadcast dims")
    lead, kept = plans.pop()
    if kept:
        text = f"sum({text}, dim={list(kept) if len(kept) > 1 else kept[0]}, keepdim=True)"
    if lead:
        text = f"sum({text}, dim={list(range(lead)) if lead > 1 else 0})"
    return text


def _at_result(node: Node, up: str, cases: list[dict[str, list[int]]]) -> str:
    """up summed down to node's own result's shape (what broadcast the result gave it more)."""
    return summed_to(up, [ir.output_shape(node, c) for c in cases], cases, f"{node.op}'s result")


def _dims(ds: list[int]) -> str:
    """One dim as an integer, several as a tuple, as the IR writes them."""
    return str(ds[0]) if len(ds) == 1 else str(tuple(ds))


def _matmul(node: Node, a: list[str], up: str):
    """A @ B (A = a, or a's transpose where the product reads it so; B likewise): dA = up @ B^T,
    dB = A^T @ up, each transposed back to how its operand lies. A shared operand's gradient is
    summed over the batch later. A triangle of the product (tril, triu) passes up inside it only:
    column less row, from running counts of ones along each (exact to 2**24), against the diagonal."""
    if node.attr("tri"):
        ones = f"ones_like({up})"
        offset = f"(cumsum({ones}, dim=-1) - cumsum({ones}, dim=-2))"
        inside = f"{offset} {'<=' if node.attr('tri') == 'tril' else '>='} {float(node.attr('diagonal'))!r}"
        up = f"where({inside}, {up}, 0.0)"
    ta, tb = node.attr("ta"), node.attr("tb")
    a_t = a[0] if ta else f"({a[0]}).mT"          # A^T
    b_t = a[1] if tb else f"({a[1]}).mT"          # B^T
    d_a, d_b = f"({up}) @ {b_t}", f"{a_t} @ ({up})"
    return [(node.args[0], f"({d_a}).mT" if ta else d_a), (node.args[1], f"({d_b}).mT" if tb else d_b)]


def _cumsum(node: Node, a: list[str], up: str):
    """Each element reaches every output the scan sums it into: the scan of up the other way (an
    exclusive scan stays exclusive)."""
    d, exclusive, reverse = node.attr("dim"), node.attr("exclusive"), node.attr("reverse")
    return [(node.args[0], f"cumsum({up}, dim={d}, exclusive={exclusive}, reverse={not reverse})")]


def _cumprod(node: Node, a: list[str], up: str):
    """y = cumprod(x): before the scan's first zero, dx_i = (the scan the other way of up * y)_i / x_i;
    at the first zero, that sum over y' (the cumprod with that zero read as 1); past it, 0 (every
    product there holds the zero): torch's cumprod_backward, written as scans. An exclusive cumprod
    (y_i the product of the x before i) takes the same rule with every product and sum exclusive:
    x_i reaches only the outputs past it."""
    x, d, rev = a[0], node.attr("dim"), node.attr("reverse")
    excl = ", exclusive=True" if node.attr("exclusive") else ""

    def scan(op: str, t: str, back: bool = False, exclusive: str = excl) -> str:
        return f"{op}({t}, dim={d}, reverse={rev != back}{exclusive})"
    zeros = scan("cumsum", f"where(({x}) == 0.0, 1.0, 0.0)", exclusive="")      # zeros so far, x_i's included
    first = f"where(({x}) == 0.0, where({zeros} == 1.0, 1.0, 0.0), 0.0)"
    product = scan("cumprod", x)
    before = f"{scan('cumsum', f'({up}) * {product}', back=True)} / ({x})"
    product_past = scan("cumprod", f"where({first} > 0.5, 1.0, {x})")
    at_first = scan("cumsum", f"({up}) * {product_past}", back=True)
    return [(node.args[0], f"where({zeros} == 0.0, {before}, where({first} > 0.5, {at_first}, 0.0))")]


def _logcumsumexp(node: Node, a: list[str], up: str):
    """y = logcumsumexp(x): dx_j = the sum over the outputs i that x_j reaches of up_i * exp(x_j - y_i), in
    log space as torch computes it (no exp of -y overflows): up's positive and negative parts apart, each
    exp(x + logcumsumexp(log(part) - y) the other way)."""
    d, rev, y = node.attr("dim"), bool(node.attr("reverse")), to_text(node)

    def part(sign: str) -> str:
        return f"exp(({a[0]}) + logcumsumexp(log(relu({sign}({up}))) - {y}, dim={d}, reverse={not rev}))"
    return [(node.args[0], f"{part('')} - {part('-')}")]


def _cumext(node: Node, a: list[str], up: str):
    """y = cummax (cummin): each output's gradient goes to the element its value came from, the
    latest equal one, or NaN (torch's indices): the scan family's gradient kernel (cumext_grad), given
    x and y to find those elements."""
    d, rev = node.attr("dim"), bool(node.attr("reverse"))
    return [(node.args[0], f"cumext_grad({a[0]}, {to_text(node)}, {up}, scan={node.op!r}, dim={d!r}, reverse={rev!r})")]


def _permute(node: Node, a: list[str], up: str):
    """A permutation's gradient is up permuted back (a swap undoes itself)."""
    swap = node.attr("swap")
    if swap:
        return [(node.args[0], f"transpose({up}, {swap[0]}, {swap[1]})")]
    dims = node.attr("dims")
    back = tuple(sorted(range(len(dims)), key=lambda i: dims[i] % len(dims)))
    return [(node.args[0], f"permute({up}, {back})")]


def _roll(node: Node, a: list[str], up: str):
    """A roll's gradient is up rolled back."""
    dims = node.attr("dims")
    back = tuple(-s for s in node.attr("amounts"))
    return [(node.args[0], f"roll({up}, shifts={back}" + ("" if dims is None else f", dims={dims}") + ")")]


def _shuffle(node: Node, a: list[str], up: str):
    """A pixel shuffle's gradient is up unshuffled by the same factor, and the other way round."""
    back = "pixel_unshuffle" if node.op == "pixel_shuffle" else "pixel_shuffle"
    return [(node.args[0], f"{back}({up}, {node.attr('amounts')[0]})")]


def _pad(node: Node, a: list[str], up: str):
    """A constant F.pad's gradient is up with the padding cut off again (a crop's: zeros put back); the
    other modes add the gradients of the copies they made, which no rule here writes yet."""
    if node.attr("mode") != "constant":
        raise NoGradient(f"F.pad in mode {node.attr('mode')!r} has no gradient rule in the offline generator's "
                         "training kernels yet (mode 'constant' has)")
    back = tuple(-v for v in node.attr("amounts"))
    return [(node.args[0], f"pad({up}, {back}, mode='constant', value=0.0)")]


def _upsampled(node: Node, up: str, cases: list[dict[str, list[int]]]):
    """Nearest upsampling by factors f: each input element's gradient is the sum of the f-blocks of up it
    was copied to, an average pooling by f times the block's size."""
    if node.attr("mode") != "scale_factor":
        raise NoGradient("F.interpolate to a size has no gradient rule here yet; give scale_factor (its factors)")
    nd = {len(ir.output_shape(node.args[0], c)) - 2 for c in cases}
    f = node.attr("amounts")
    if len(nd) != 1 or len(f) not in (1, *nd):
        raise NoGradient("F.interpolate's gradient takes one rank of input in every case")
    f = f * nd.pop() if len(f) == 1 else f
    return [(node.args[0], f"avg_pool{len(f)}d({up}, kernel_size={f}, stride={f}) * {float(math.prod(f))!r}")]


def _reshaped(node: Node, a: list[str], up: str, cases: list[dict[str, list[int]]]):
    """A view that keeps every element (unsqueeze, squeeze, flatten, unflatten, reshape): up, summed
    down to the view's own shape (x.reshape(-1, 1) * y broadcast it), in the input's shape."""
    return [(node.args[0], f"reshape_as({_at_result(node, up, cases)}, {a[0]})")]


def _cross_entropy(node: Node, a: list[str], up: str):
    """The logits' gradient, softmax less the target's one-hot, times the loss's gradient (a kernel of the
    loss family, bot.ops.loss); the class indices and the class weights get none."""
    smoothing = f", label_smoothing={node.attr('smoothing')!r}" if node.attr("smoothing") else ""
    weight = f", weight={a[2]}" if len(a) > 2 else ""
    return [(node.args[0], f"cross_entropy_grad({a[0]}, {a[1]}, {up}, reduction={node.attr('reduction')!r}{smoothing}"
                           f"{loss.ignore_keyword(node)}{weight})")]


def _nll(node: Node, a: list[str], up: str):
    """nll_loss(x [rows, classes], target): -1 at each row's target class (a column index from a
    running count of ones, compared with the target), times the row's share of the upstream: its own
    ('none'), all of it ('sum'), over the rows ('mean'); a row whose target is ignore_index gets none, and
    class weights scale each row by its target's (and 'mean''s divisor); the class indices and the
    weights get none."""
    ignore = node.attr("ignore_index")
    kept = "" if ignore is None else f" & (unsqueeze({a[1]}, 1) != {ignore})"
    hit = f"where((cumsum(ones_like({a[0]}), dim=1) - 1.0 == unsqueeze({a[1]}, 1)){kept}, 1.0, 0.0)"
    if len(a) > 2:
        hit = f"{hit} * {a[2]}"
    share = {"none": f"unsqueeze({up}, 1)", "sum": f"({up})", "mean": f"({up}) / sum({hit}, dim=None)"}
    return [(node.args[0], f"-({share[node.attr('reduction')]}) * {hit}")]


_SIZED = {"conv": _conv, "cat": _cat, attention.SDPA: _attention, "slice": _sliced, "select": _sliced,
          **dict.fromkeys(("index_select", "embedding", "gather"), _lookup),
          **dict.fromkeys(("unsqueeze", "squeeze", "flatten", "unflatten", "reshape_as", "reshape"), _reshaped),
          "interpolate": lambda node, a, up, cases: _upsampled(node, up, cases),
          **dict.fromkeys(("expand", "expand_as"), lambda node, a, up, cases: [(node.args[0], summed_to(
              up, [ir.output_shape(node.args[0], c) for c in cases], cases, f"{node.op}'s input"))])}
_RULES = {
    "add": lambda node, a, up: [(node.args[0], up), (node.args[1], up)],
    "sub": lambda node, a, up: [(node.args[0], up), (node.args[1], f"-({up})")],
    "mul": lambda node, a, up: [(node.args[0], f"({up}) * ({a[1]})"), (node.args[1], f"({up}) * ({a[0]})")],
    "div": lambda node, a, up: [(node.args[0], f"({up}) / ({a[1]})"),
                                (node.args[1], f"-({up}) * ({a[0]}) / (({a[1]}) * ({a[1]}))")],
    "neg": lambda node, a, up: [(node.args[0], f"-({up})")],
    "abs": _unary("where({a} > 0.0, 1.0, where({a} < 0.0, -1.0, 0.0))"),
    "exp": _unary("exp({a})"),
    "log": _unary("1.0 / ({a})"),
    "sqrt": _unary("0.5 / sqrt({a})"),
    "rsqrt": _unary("-0.5 * rsqrt({a}) / ({a})"),
    "relu": _unary("where({a} > 0.0, 1.0, 0.0)"),
    "sigmoid": _unary("sigmoid({a}) * (1.0 - sigmoid({a}))"),
    "tanh": _unary("1.0 - tanh({a}) ** 2.0"),
    "silu": _unary("sigmoid({a}) * (1.0 + ({a}) * (1.0 - sigmoid({a})))"),
    "erf": _unary(f"{2 / math.sqrt(math.pi)!r} * exp(-({{a}}) ** 2.0)"),
    "sin": _unary("cos({a})"),
    "cos": _unary("-sin({a})"),
    "atan": _unary("1.0 / (1.0 + ({a}) * ({a}))"),
    "fmod": lambda node, a, up: [(node.args[0], up), (node.args[1], f"-({up}) * where(({a[0]}) / ({a[1]}) < 0.0, "
                                                     f"ceil(({a[0]}) / ({a[1]})), floor(({a[0]}) / ({a[1]})))")],
    **dict.fromkeys(("floor", "ceil"), _unary("0.0")),        # torch: zero everywhere, as for a step
    "pow": _pow,
    "gelu": _gelu,
    "clamp": _clamp,
    "maximum": _extreme,
    "minimum": _extreme,
    "where": lambda node, a, up: [(node.args[1], f"where({a[0]}, {up}, 0.0)"),
                                  (node.args[2], f"where({a[0]}, 0.0, {up})")],
    "softmax": _softmax,
    "log_softmax": _softmax,
    "rmsnorm": _norm,
    "layernorm": _norm,
    **{op: _channel_norm for op in ("group_norm", "instance_norm", "batch_norm", "layer_norm_nd")},
    "matmul": _matmul,
    "cross_entropy": _cross_entropy,
    "cumsum": _cumsum,
    "nll_loss": _nll,
    "cumprod": _cumprod,
    "cummax": _cumext,
    "logcumsumexp": _logcumsumexp,
    "cummin": _cumext,
    "pool": _pool,
    "adaptive_pool": _pool,
    "permute": _permute,
    "flip": lambda node, a, up: [(node.args[0], f"flip({up}, dims={list(node.attr('dims'))})")],
    "roll": _roll,
    **dict.fromkeys(("pixel_shuffle", "pixel_unshuffle"), _shuffle),
    "pad": _pad,
    **dict.fromkeys(("tril", "triu"), lambda node, a, up: [(node.args[0], f"{node.op}({up}, diagonal={node.attr('amounts')[0]})")]),
}
