"""The passes that take dtypes, dims, scalars (eps, clamp ranges and bounds) and shapes out of a
request's words into a Reading, each blanking out what it took; what is out of scope, refused; a
matmul's shapes as its operands in order; the phrases said of one named input ('b is a vector',
'b 4096'); and the check that an eps written in code is the one the words say.
"""
from __future__ import annotations

import re

from bot.generators.interface import GenerationError
from bot.ops import channel_norm
from bot.ops.pointwise import CLAMP_WORD as _CLAMP_WORD
from bot.ops.text import COUNT_WORDS, DIM as _DIM
from bot.ops.text import blank as _blank
from bot.ops.text import blank_range, blank_span
from bot.ops.text import size as _dim
from bot.request.messages import SUPPORTED
from bot.request.reading import Reading
from bot.request.vocabulary import (ALL_DTYPES, BAD_DTYPE, INDEX_DTYPE, BOUND, BOUND_KEY, CN_DTYPE, COMPUTE_AFTER,
                                    COMPUTE_BEFORE, DIM_N, DIM_WORDS, DIMS_LIST, DTYPE, DTYPE_OWNER, EPS, LABEL, ONLY,
                                    NO_TRAINING, OUT_OF_SCOPE, OUTPUT_BEFORE, OUTPUT_NEAR, OWNER_AFTER,
                                    PARAM_AFTER, PARAM_BEFORE, RANGE, SHAPE, SHAPE_OWNER, TYPE_CONTEXT, WHOLE,
                                    BACKWARD, FOR_TRAINING, LAST_N_DIMS)
from runner import protocol


def take_dtypes(text: str, rd: Reading) -> str:
    """The dtypes to test, into rd.dtypes (a compute dtype into rd.op_notes); the text with them blanked."""
    text = _index_dtypes(text)
    if m := BAD_DTYPE.search(text):
        raise GenerationError(f"unsupported dtype {m.group(0)!r}: kernels are tested in float16 (fp16), "
                              "bfloat16 (bf16) and float32 (fp32). Name one or more of those, or 'all dtypes'.")

    def canonical(m: re.Match) -> str:
        return protocol.canonical_dtype(m.group(1)) if m.group(1) else CN_DTYPE[m.group(0)]

    named = {canonical(m) for m in DTYPE.finditer(text)}

    owners: dict[str, str] = {}

    def take(m: re.Match) -> str:
        dtype = canonical(m)
        role = _dtype_role(text, m)
        if (owner := DTYPE_OWNER.search(text[:m.start()])) and role == "test":
            owners.setdefault(owner.group(1), dtype)
            if len(set(owners.values())) > 1:
                raise GenerationError(f"you gave the inputs different dtypes ({', '.join(f'{n} {d}' for n, d in owners.items())}): "
                                      "the offline generator tests every input in one dtype at a time. Name the dtypes "
                                      "to test, e.g. 'fp16 and fp32'.")
        if role == "output" and named == {dtype}:
            role = "test"                    # "input/output in fp16": one dtype for both
        if role == "word":
            return m.group(0)                # "half of x", "a single kernel": left for the residue check
        if role == "compute":
            if dtype != "float32":
                raise GenerationError(f"computing or accumulating in {dtype} is not supported: the kernels compute "
                                      "and accumulate in float32, for every input dtype")
            rd.op_notes.append("the kernels compute and accumulate in float32 for every dtype, as asked")
        elif role == "output":
            raise GenerationError(f"an output in {dtype} apart from the inputs' dtype is not supported: the output "
                                  "takes the inputs' dtype. Name the dtypes to test, e.g. 'fp16 and fp32'.")
        else:
            rd.dtypes.append(dtype)
        return _blank(m)

    text = ONLY.sub(lambda m: (m.group(1) or "").ljust(len(m.group(0))), DTYPE.sub(take, text))
    if ALL_DTYPES.search(text):
        rd.dtypes += protocol.DTYPES
        text = ALL_DTYPES.sub(_blank, text)
    rd.dtypes = list(dict.fromkeys(rd.dtypes))
    return text


def _index_dtypes(text: str) -> str:
    """text with int64 said of indices blanked (they are int64 anyway); another integer type there refused."""
    for m in INDEX_DTYPE.finditer(text):
        said = (m.group(1) or m.group(2)).lower()
        if said not in ("int64", "long"):
            raise GenerationError(f"indices in {said} are not supported: the kernels take int64 indices, ids and "
                                  "targets (torch.gather and cross entropy need them). Say int64, or leave it out.")
    return INDEX_DTYPE.sub(lambda m: m.group(0).replace(m.group(1) or m.group(2), " " * len(m.group(1) or m.group(2))), text)


def _dtype_role(text: str, m: re.Match) -> str:
    """What a dtype word is there for: 'test' (a dtype to test), 'compute' ('fp32 accumulation'),
    'output' ('fp32 output'), or 'word' where half/single/float are plain English ('half of x')."""
    before, after = text[:m.start()], text[m.end():]
    if COMPUTE_AFTER.match(after) or COMPUTE_BEFORE.search(before):
        return "compute"
    if OUTPUT_NEAR.match(after) or OUTPUT_BEFORE.search(before):
        return "output"
    word = (m.group(1) or "").lower()
    plain = word in ("half", "single", "float")
    if word == "single":                     # "single precision" only: "a single tensor" is one tensor
        return "test" if "precision" in m.group(0).lower() else "word"
    typed = ("precision" in m.group(0).lower() or TYPE_CONTEXT.match(after)
             or (re.search(r"\b(?:in|as|to|for|dtype|type)\s+$", before, re.I)
                 and not re.match(r"\s+(?:the|of|a|an|as)\b", after, re.I)))
    return "word" if plain and not typed else "test"


def take_training(text: str, rd: Reading) -> str:
    """Whether the words ask for training (the backward too) or say forward only; the text with
    those words blanked. Where batch norm is named, "for training" is its mode (bot.ops.channel_norm
    reads it) and only backward words ask for the backward; group and instance norm have no mode, so
    there it asks for the backward as anywhere."""
    if NO_TRAINING.search(text):
        rd.training = False
        return NO_TRAINING.sub(_blank, text)
    batch_norm = any((m.group(1) or "").lower() == "batch" or m.group(2) == "批"
                     for m in channel_norm.CHANNEL_NORM_WORD.finditer(text))
    patterns = [BACKWARD] + ([] if batch_norm else [FOR_TRAINING])
    for pattern in patterns:
        if pattern.search(text):
            rd.training = True
            text = pattern.sub(_blank, text)
    return text


def refuse_out_of_scope(text: str, names: set[str] = frozenset()) -> None:
    """Refuse an operation the offline generator does not write, naming it; but for the names of the
    typed code's tensors ('x * cos + rotate_half(x) * sin for ..., cos 4096x1x128')."""
    for pattern, what in OUT_OF_SCOPE:
        if m := next((m for m in pattern.finditer(text) if m.group(0) not in names), None):
            raise GenerationError(f"{what or repr(m.group(0))} is not supported by the offline generator. {SUPPORTED} "
                                  "A combination of these can be written as an expression, "
                                  "e.g. 'where(x > 0, x, 0.01 * x)'.", unplaced=[m.group(0)])


def take_dims(text: str, rd: Reading) -> str:
    """The dims named into rd.dims ('over all elements' into rd.whole); the text with them blanked."""
    for m in DIM_N.finditer(text):
        if m.group(2) and int(m.group(2)) >= 1:
            raise GenerationError(f"{m.group(0)!r}: dim {m.group(2)} counting from 0, or the {m.group(2)}th dim "
                                  f"counting from 1 (dim {int(m.group(2)) - 1})? Say 'dim {m.group(2)}' or "
                                  f"'第{int(m.group(2)) - 1}维'.")
    found = [(m.start(), int(d)) for m in DIMS_LIST.finditer(text) for d in re.findall(r"-?\d", m.group(1))]
    text = DIMS_LIST.sub(_blank, text)
    for m in LAST_N_DIMS.finditer(text):
        n = (m.group(1) or m.group(2)).lower()
        count = COUNT_WORDS.get(n) or int(n)
        found += [(m.start() + k, d) for k, d in enumerate(range(-count, 0))]
    text = LAST_N_DIMS.sub(_blank, text)
    found += [(m.start(), int(next(g for g in m.groups() if g))) for m in DIM_N.finditer(text)]
    text = DIM_N.sub(_blank, text)
    for pattern, d in DIM_WORDS:
        found += [(m.start(), d) for m in pattern.finditer(text)]
        text = pattern.sub(_blank, text)
    rd.dims = [d for _, d in sorted(found)]
    if m := WHOLE.search(text):
        rd.whole = m.group(0)
    return WHOLE.sub(_blank, text)


def take_scalars(text: str, rd: Reading) -> str:
    """eps, and a clamp's range or bounds, into rd; the text with them blanked."""
    if m := EPS.search(text):
        rd.eps = float(m.group(1))
        text = blank_span(text, m)
    if _CLAMP_WORD.search(text):
        if m := RANGE.search(text):
            lo, hi = (float(g) for g in m.groups() if g is not None)
            rd.scalars.update(min=min(lo, hi), max=max(lo, hi))
            text = blank_span(text, m)
        for m in BOUND.finditer(text):
            key, value = (m.group(1), m.group(2)) if m.group(1) else (m.group(3), m.group(4))
            rd.scalars[BOUND_KEY[re.sub(r"\s+", " ", key.lower())]] = float(value)
        text = BOUND.sub(_blank, text)
    return text


_COUNT_NOUN = re.compile(r"\b(?:groups?|heads?|chunks?|steps?)\b", re.I)


def take_shapes(text: str, rd: Reading) -> str:
    """The shapes named, each with the label it is said of, into rd.shapes; the text with them blanked."""
    taken = []
    for m in SHAPE.finditer(text):
        if _is_parameter(text, m):
            continue                 # "3x3 kernel", "window size 7": left for the residue check to name
        if m.group("tuple") is not None and re.search(r"\bover\s*$", text[:m.start()], re.I):
            continue                 # "layer norm over (32, 32)": a normalized shape, no input's: named as unread
        taken.append(m)
        if m.group("length"):
            rd.shapes.append((m.group("owner"), [_dim(m.group("length"))]))
            rd.shapes_at.append((m.start("length"), m.end()))
            continue
        if m.group("multi"):
            shape = [_dim(d) for d in re.split(r"\s*[x×*]\s*|\s+by\s+", m.group("multi").strip(), flags=re.I)]
        elif m.group("tuple") is not None:
            shape = [_dim(d) for d in re.findall(_DIM, m.group("tuple"), re.I)]
        else:
            shape = [_dim(m.group("one") or m.group("vector") or m.group("count"))]
        before = text[:m.start()]
        lab = LABEL.search(before)
        ahead = before[:lab.start(1)] if lab else ""         # what comes before the label
        # "rmsnorm without weight 8x4096" is not about a weight
        label = lab.group(1) if lab and not re.search(r"\b(?:without|no|w/o)\s+$", ahead) else None
        if not (label and SHAPE_OWNER.fullmatch(label)) and (after := OWNER_AFTER.match(text, m.end())):
            label = after.group(1)           # "16x1000 logits", "a 128 bias"
        # "x and y of shape 4096x4096", "k, v 2x8x1024x128": each name listed before the label has it too
        for name in _listed_before(ahead) if lab and label == lab.group(1) else ():
            rd.shapes.append((name, shape))
            rd.shapes_at.append((m.start(), m.end()))
        rd.shapes.append((label, shape))
        rd.shapes_at.append((m.start(), m.end()))
        if re.search(r"\dk\b", m.group(0), re.I):
            rd.op_notes.append(f"read {m.group(0).strip()!r} with k = 1024 (4k = 4096)")
    for m in reversed(taken):
        text = blank_range(text, m.start("length"), m.end()) if m.group("length") else blank_span(text, m)
    return text


_LISTED = re.compile(r"(?:(?<![-\w.])[A-Za-z_]\w*\s*(?:,\s*(?:and\s+)?|\s+and\s+))+$")


def _listed_before(before: str) -> list[str]:
    """The tensor names a list ends with just before a label ('q, k and ' of 'q, k and v 8x64'), where
    every item is a name a shape is said of (one letter, bias, weight ...)."""
    m = _LISTED.search(before)
    names = re.findall(r"[A-Za-z_]\w*", m.group(0)) if m else []
    names = [n for n in names if n.lower() != "and"]
    return names if names and all(SHAPE_OWNER.fullmatch(n) for n in names) else []


def _is_parameter(text: str, m: re.Match) -> bool:
    """Whether numbers read like a shape size a window, a kernel or a stride instead. Windows have
    at most 3 dims, and counts (groups, heads) one: 'group norm 8 groups 32x64x56x56' has a shape."""
    before = PARAM_BEFORE.search(text[:m.start()])
    if before and (dims := len(re.split(r"\s*[x×*]\s*|\s+by\s+|,", m.group(0).strip(" ()[]")))) > 1:
        if dims > 3 or _COUNT_NOUN.search(before.group(0)):
            before = None
    return bool(PARAM_AFTER.match(text, m.end()) or before)


def operand_order(shapes: list[tuple[str | None, list[int]]]) -> list[list[int]]:
    """A matmul's shapes as operands a, b in order ('b: 256x512, a: 512x256' is a, then b); a shape
    labelled for anything else (an epilogue input's) is refused, since those follow from M and N."""
    labels = [label for label, _ in shapes if label and SHAPE_OWNER.fullmatch(label)]
    if other := [label for label in labels if label.lower() not in ("a", "b", "x", "w")]:
        raise GenerationError(f"the shape given for {other[0]} is not read: a matmul's epilogue inputs take [N] (a bias) "
                              "or the output's shape. Give the operands' shapes ('64x128 by 128x256') or M, N and K.")
    if len(labels) == 2 and [label.lower() for label in labels] in (["b", "a"], ["w", "x"]):
        return [s for _, s in shapes][::-1]
    return [s for _, s in shapes]


def vector_phrase(n: str) -> str:
    """'b is a vector', 'bias vector', 'b is 1-d', 'b 是向量'."""
    return (rf"\b{n}\b(?:\s+is)?(?:\s+an?)?\s+(?:1-?d\s+|row\s+)?vector\b|\bvector\s+{n}\b|"
            rf"\b{n}\s+is\s+1-?d\b|\b{n}\s*(?:是)?(?:一个)?向量")


def said_vector(n: str, text: str) -> bool:
    """Whether text says input n is a vector."""
    return bool(re.search(vector_phrase(n), text, re.I))


def mask_phrase(n: str) -> str:
    """'m is a bool tensor', 'mask: bool', 'boolean mask m', 'm 64x64 bool' (its shape read apart: here
    the shape or the ';' the shape reader leaves), 'm 是布尔掩码'."""
    return (rf"\b{n}\b\s*(?:[:=(]|\b(?:is|as)\b)?\s*(?:an?\s+)?(?:torch\.)?bool(?:ean)?\b(?:\s+(?:mask|tensor))?\)?|"
            rf"(?<=\b{n}\b)(\s*(?:;|\d+(?:\s*[x×]\s*\d+)*)\s*,?\s*)(?:torch\.)?bool(?:ean)?\b(?:\s+(?:mask|tensor))?|"
            rf"\b(?:an?\s+)?(?:torch\.)?bool(?:ean)?\s+(?:(?:mask|tensor)\s+)?{n}\b|"
            rf"\b{n}\s*(?:是)?(?:一个)?布尔(?:掩码|张量)?|布尔(?:掩码|张量)\s*{n}\b")


def said_mask(n: str, text: str) -> bool:
    """Whether text says input n is a bool mask."""
    return bool(re.search(mask_phrase(n), text, re.I))


def bare_shape_phrase(n: str) -> str:
    """'b 4096', 'bias is 4096', 'b of size 4096': a 1-D shape for a named input."""
    return rf"\b{n}\b(?:\s*(?:[:=]|\b(?:is|of|with|has|shape|size|length)\b))*\s*({_DIM})(?![\w.-])"


def bare_shape(n: str, text: str) -> list[int] | None:
    """The 1-D shape text gives input n ('b 4096'), or None."""
    m = re.search(bare_shape_phrase(n), text, re.I)
    return [_dim(m.group(1))] if m else None


def one_eps(said: float | None, written: float) -> float:
    """The eps written in code, refused where the words say another."""
    if said is not None and said != written:
        raise GenerationError(f"the code says eps={written!r} but the words say eps {said!r}; which one?")
    return written
