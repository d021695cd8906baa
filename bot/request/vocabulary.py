"""The request reader's word tables: patterns over a request's English and Chinese words for dtypes
(and what a dtype word is there for), operations out of scope, dims, eps, clamp ranges and bounds,
shapes and the labels they belong to, the words of a correction, the names that name a tensor, and
the IR op of each step word. The passes of bot.request.words and bot.request.read take what these
match out of the text.
"""
from __future__ import annotations

import re

from bot.ops.text import DIM as _DIM
from bot.ops.text import END as _END
from bot.ops.text import FLAGS as _F
from bot.ops.text import NUM as _NUM

DTYPE = re.compile(r"\b(?:torch\.)?(float16|fp16|f16|half|bfloat16|bf16|float32|fp32|f32|float|single)\b"
                   r"(?:\s+precision)?|半精度|单精度", _F)
CN_DTYPE = {"半精度": "float16", "单精度": "float32"}
ALL_DTYPES = re.compile(r"\b(?:all|each|every|any)\s+(?:of\s+the\s+)?(?:three\s+|3\s+|supported\s+)?"
                        r"(?:dtypes?|types|precisions?|data\s*types?)\b|"
                        r"(?:所有|全部|三种)(?:数据)?(?:类型|精度)", _F)
BAD_DTYPE = re.compile(r"\b(?:u?int(?:4|8|16|32|64)|fp8\w*|float8\w*|fp64|float64|double\s+precision|tf32|fp4|"
                       r"nvfp4|mxfp\d+|complex\d*)\b|双精度", _F)

# An integer dtype said of indices ("int64 token ids", "targets (int64)"): what they are anyway.
INDEX_DTYPE = re.compile(r"\b(u?int(?:8|16|32|64)|long)\s+(?=(?:(?:token|class|target)[\s_-]+)?(?:ids|indices|indexes|"
                         r"index|targets?|labels?|classes)\b)|\b(?:ids|indices|indexes|targets|labels)\s*\(?\s*"
                         r"(u?int(?:8|16|32|64)|long)\b\)?", _F)

OUT_OF_SCOPE: list[tuple[re.Pattern, str]] = [(re.compile(p, _F), what) for p, what in [
    (r"\baddmm\b|\beinsum\b|\bdot[\s-]product\b(?![\s_-]+attention)|\blinear\s+layer\b",
     "this form of matrix multiplication (say 'matmul a @ b with bias' instead)"),
    (r"\bmatrix[\s-]vector\s+(?:product|multipl\w*)\b|\bmat[\s_-]?vec\b|\bgemv\b",
     "a matrix-vector product in words (write it as an expression with each input's shape, e.g. 'A @ v with A "
     "4096x4096 and v 4096')"),
    (r"\bconvolve\b|\b(?:separable|deformable|circular)[\s_-]+conv\w*",
     "this convolution (conv1d/2d/3d, transposed, depthwise and grouped are supported)"),
    (r"\brotary\b|\brope\b", "rotary position embedding (RoPE)"),
    (r"\b(?:quick|fast)[\s_-]?gelu\b", "a fast or quick GELU (an approximation: say 'gelu with tanh approximation', or "
     "write x * sigmoid(1.702 * x))"),
    (r"\ball[\s_-]?gather\b", "collectives across GPUs (all-gather)"),
    (r"\bscatter\w*|\bindex_(?:add|copy|fill|put)\w*", "scatter (writes at indexed positions)"),
    (r"\b(?:lp|l2|power)[\s_-]*pool\w*", "LP pooling in words (as code it is: F.lp_pool2d(x, 2, 3) or nn.LPPool2d)"),
    (r"\b(?:fractional|min|sum|stochastic)[\s_-]*pool\w*|\bfractional_max_pool\w*",
     "this pooling (max and average pooling, also adaptive and global, and LP pooling as code, are supported)"),
    (r"\breshape\b|\bview\s+as\b", "a reshape in words (views that add or remove unit dims are read as code, "
     "e.g. x.unsqueeze(1), x.view(1, -1))"),
    (r"\bdropout\b", "dropout"),
    (r"\bnll\w*(?<!nll)(?<!nll[\s_-]loss)(?<!nllloss)\b",
     "this loss (in words: mse, l1, smooth l1, huber, kl divergence, bce, bce with logits, soft margin, multilabel "
     "soft margin, poisson nll, triplet margin, "
     "hinge, hinge embedding, margin ranking, cosine embedding, cosine similarity, cross entropy and nll; others written "
     "as PyTorch does, e.g. 'F.binary_cross_entropy(torch.sigmoid(x), y)', or paste the module)"),
    (r"\bsin\b|\bcos\b|\bfloor\b|\bceil\b(?![\s_-]*mode)|\bsign\b|\bprelu\b|\bround\b|\btrunc\b",
     "this function in words (typed as code it is read: e.g. 'torch.floor(x * 3.0) for 4096x4096', 'x.sin()')"),
]]

# Training: the forward and its backward as one autograd op (bot.training); or, said, inference only.
# "for training" alone is batch norm's mode where a channel norm is named: its words are read apart.
BACKWARD = re.compile(r"\b(?:forward\s+(?:and|\+|&)\s+)?backward(?:\s+(?:pass|kernel)s?)?\b|\bbackprop\w*|"
                      r"\bwith\s+(?:its\s+|the\s+)?(?:gradients?|grads?|autograd)\b|\bgradients?\s+of\b|"
                      r"\bautograd\b|\bdifferentiable\b|前向和反向|反向传播|反向|梯度", _F)
FOR_TRAINING = re.compile(r"\b(?:for|in)\s+training\b|\btraining\s+kernels?\b|用于训练|训练用", _F)
NO_TRAINING = re.compile(r"\b(?:forward|inference)[\s-]+only\b|\bno\s+backward\b|\bwithout\s+(?:the\s+)?"
                         r"backward\b|只要前向|仅前向|推理", _F)

# Dimension phrases. Reductions run over any one dim, other row ops over the last one only.
DIM_N = re.compile(r"\b(?:dim|axis|dimension)\s*[=:]?\s*(-?\d)\b|第\s*(-?\d)\s*维|维度\s*(-?\d)(?!\d)", _F)  # "dim 4096" is a size
# Several dims: "dims 1 and 2", "axes (2, 3)", "the last two dims", "最后两维"
DIMS_LIST = re.compile(r"\b(?:dims|axes|dimensions)\s*[=:]?\s*[(\[]?\s*(-?\d(?:\s*(?:,|and|&)\s*-?\d)+)\s*[)\]]?", _F)
LAST_N_DIMS = re.compile(r"\b(?:the\s+)?(?:last|trailing)\s+(two|three|four|2|3|4)\s+(?:dims|dimensions|axes)\b|"
                         r"最后([两二三四])(?:个)?维(?:度)?", _F)
_D = r"\s+(?:dim|axis|dimension)\w*"


def _cn_line(line: str) -> str:
    """行方差, 列和: each row's or column's reduction (not 第一行的和, the first row's)."""
    return (rf"(?<![第\d一二三四五六七八九十]){line}(?=\s*(?:的\s*)?(?:和|求和|均值|平均|最大|最小|方差|标准差|乘积|连乘|范数|"
            r"[Ll]\d|对数|[一二]范数|无穷范数|归一化))")


DIM_WORDS: list[tuple[re.Pattern, int]] = [(re.compile(p, _F), d) for p, d in [
    # earlier entries win: "second to last dim" before "last dim"
    # ("across the columns" is left out: it means dim -2 to some and one value per row to others)
    (rf"\b(?:second[\s-]+(?:to[\s-]+)?last|penultimate){_D}|\bcolumn[\s-]?wise\b|\b(?:per|each|every)[\s-]+column\b|"
     rf"按列|每一?列|倒数第二维|{_cn_line('列')}", -2),
    # ("over the batch" is left out: a batch's mean is dim 0, but "softmax over the batch of x" is x's)
    (rf"\b(?:first|1st|0th|leading|batch){_D}|第一维|批(?:次|量)?维", 0),
    # NC... layouts: the channels are dim 1 ("softmax over the channels"; "over 64 channels" is a size)
    (rf"\b(?:second|2nd){_D}|\b(?:over|across|along)\s+(?:the\s+|its\s+|all\s+)?channels\b|\bchannel{_D}|"
     r"第二维|通道维", 1),
    (rf"\b(?:third|3rd){_D}|第三维", 2),
    (rf"\b(?:last|trailing|innermost|final){_D}|\brow[\s-]?wise\b|\b(?:of\s+each|for\s+each|each|every|of\s+every)\s+row\b|"
     rf"\brow\s+by\s+row\b|最后一(?:个)?维(?:度)?|按行|每一?行|{_cn_line('行')}", -1),
]]
WHOLE = re.compile(r"\b(?:all|every)\s+elements?\b|\b(?:whole|entire|full)\s+tensor\b|\bglobal(?:ly)?\b(?![\s_-]+(?:max|avg|average|mean)[\s_-]*pool)|"
                   r"全部元素|所有元素|整个张量", _F)

EPS = re.compile(rf"(?:\beps(?:ilon)?\b|ε)\s*(?:=|:|of|is|为|是|设为)?\s*({_NUM}){_END}", _F)
# A closed range only: "[0, 1)" is half open, which clamp cannot be, so it stays for the residue check.
RANGE = re.compile(rf"\[\s*({_NUM})\s*,\s*({_NUM})\s*\]|\(\s*({_NUM})\s*,\s*({_NUM})\s*\)|"
                   rf"\bbetween\s+({_NUM})\s+and\s+({_NUM}){_END}|"
                   rf"\b(?:from|range(?:\s+of)?)\s+({_NUM})\s+to\s+({_NUM}){_END}|({_NUM})\s*(?:到|至)\s*({_NUM})", _F)
BOUND = re.compile(rf"\b(min|max)(?:imum)?\s*(?:=|:|of|is)?\s*({_NUM}){_END}|"
                   rf"\b(?:at|no)\s+(most|least|more\s+than|less\s+than)\s+({_NUM}){_END}", _F)
BOUND_KEY = {"min": "min", "max": "max", "least": "min", "most": "max", "more than": "max", "less than": "min"}

SHAPE = re.compile(
    rf"(?<![\w.-])(?P<multi>{_DIM}(?:(?:\s*[x×]\s*|\*|\s+by\s+){_DIM})+)(?![\w]|\.\w)"
    rf"|(?<![\w)\]])[\(\[](?P<tuple>\s*{_DIM}(?:\s*,\s*{_DIM})*\s*,?\s*)[\)\]]"
    rf"|(?:\bshape[ds]?|\bsize|\blength|形状|长度)\s*(?:of|is|=|:|为|是)?\s*"
    rf"(?P<one>{_DIM})(?![\w.]|\s*[x×,*]|\s+by\s)"
    # a 1-D shape said as a count: "a 4096 tensor", "an 8192-element vector", "on 1000000 elements"
    rf"|\ban?\s+(?P<vector>{_DIM})(?:[\s-]+(?:elements?|long))?[\s-]+(?:tensor|vector|array)\b"
    rf"|(?<![\w.])(?<!top[-\s_])(?P<count>{_DIM})\s+(?:elements|values|entries)\b"   # not "top-8 values"
    # a 1-D input's length after its name: "targets 4096", "bias 64"
    rf"|\b(?P<owner>bias|targets?|labels?|indices|ids)\s+(?:of\s+)?(?P<length>{_DIM})(?![\w.]|\s*[x×*]|\s*,\s*\d|\s+by\s)",
    _F)
# Numbers that size something other than a tensor: "3x3 kernel", "2x2 max pool", "kernel size 3".
_PARAM_NOUN = (r"(?:kernels?|windows?|filters?|patch(?:es)?|strides?|pool\w*|tiles?|blocks?|grids?|stencils?|"
               r"conv\w*(?:[\s_-]+transposed?)?|neighbou?rhoods?|dilations?|paddings?|groups?|chunks?|steps?|heads?|窗口|卷积核|卷积|核|池化|步长)")
PARAM_AFTER = re.compile(rf"[\s-]*(?:(?:max|min|avg|average|mean|sum|depthwise|pointwise|transposed?|grouped|深度|逐点|转置|"
                         rf"最大|平均)"
                         rf"\s*)?{_PARAM_NOUN}(?![a-z])", _F)
PARAM_BEFORE = re.compile(rf"{_PARAM_NOUN}(?:[\s_-]*[123][\s_-]?d)?(?:[\s_]*(?:size|shape|is|=|:|为|大小))*\s*$|"
                          r"\badaptive\s+(?:max|avg|average|mean)[\s_-]*pool\w*(?:[\s_-]*[123][\s_-]?d)?\s+to\s*$|"
                          r"\boutput[\s_-]?size\s*(?:of|=|:|is)?\s*$|"
                          r"\bout(?:put)?[\s_-]?channels\s*(?:of|=|:|is)?\s*$|输出通道(?:数)?\s*(?:为|是|=|:)?\s*$", _F)
# The word a shape belongs to: "b: [4096]", "bias of shape 4096", "x 1024x4096".
LABEL = re.compile(r"(?<![-\w])([A-Za-z_]\w*)\s*(?:(?:\b(?:is|has|with|of|shape[ds]?|size|length|a|an|the|1-?d|vector|"
                   r"tensor|matrix|array|bool(?:ean)?|fp(?:16|32)|bf16|b?float(?:16|32)?|half|int(?:32|64)|long)\b|"
                   r"[:=]|的|形状|为|是|大小)\s*)*[(\[]?\s*$", _F)
CORRECTION_WORDS = re.compile(r"\binstead\b(?!\s+of)|\bonly\b|\brather\b(?!\s+than)|改成|改为|换成", _F)
# Words that say a correction replaces the operation.
REPLACE = re.compile(r"\b(?:make|change|replace|switch|use|instead|rather|actually|turn|want)\b|改成|改为|换成|改用", _F)
# "gelu(x + b) where b is a vector": a clause about an input, not where(cond, a, b).
WHERE_CLAUSE = re.compile(r"\bwhere\b(?=\s+[A-Za-z]\w*\s+(?:is|are|has)\b)", _F)
APPEND = re.compile(r"\b(?:also|add|plus|additionally|extra|too)\b|^\s*and\b|\bas\s+well\b|还要|再加|增加|加上|另外", _F)

STEP_IR_OP = {"gelu_tanh": "gelu", "squared_relu": "relu", "scale": "mul", "divide": "div", "square": "pow", "cube": "pow"}
SCALAR_STEPS = {"scale", "divide"}

# "max"/"sum"/"product" of two tensors is elementwise; of one tensor it is a reduction.
PAIRED = {"max": "maximum", "min": "minimum", "sum": "add", "prod": "mul"}
PAIRWISE = re.compile(r"\btwo\b|\b2\s+(?:tensors|matrices|inputs|arrays)\b|\bpair(?:s|wise)?\b|两个|"
                      r"element[\s_-]?wise|逐元素|\bbetween\b|\b[a-z]\w?\s+and\s+[a-z]\w?\b", _F)
# Words that say there are two tensors (not "elementwise", which a one-input op is too).
TWO_TENSORS = re.compile(r"\btwo\b|\b2\s+(?:tensors|matrices|inputs|arrays)\b|\bpair(?:s|wise)?\b|两个|\bbetween\b|"
                         r"\b[a-z]\w?\s+and\s+[a-z]\w?\b", _F)
MATRIX = re.compile(r"\bmatri(?:x|ces)\b|矩阵", _F)
# A reduction that keeps its reduced dim as size 1: "keeping the dim", "keepdim=True", "保持维度".
KEEPDIM = re.compile(r"\bkeep(?:s|ing)?[\s_-]?(?:the\s+)?(?:reduced\s+)?dim(?:ension)?s?\b(?!\s*=\s*false)"
                     r"(?:\s*=\s*true\b)?|保持维度|保留维度", _F)
# Normalising "the rows" (or columns) is each row's own (summing them might be across them).
LINES = re.compile(r"\b(?:the\s+|its\s+|all\s+)?(rows|columns)\b", _F)
# "norm" or "normalize" with no order or kind left once the families' words are taken: which one?
VAGUE_NORM = re.compile(r"\bnorms?\b|\bnormali[sz]\w*|范数|归一化", _F)


# A label that names a tensor: a shape given to one that is no input is refused, not taken as a case.
SHAPE_OWNER = re.compile(r"[A-Za-z]\d*|bias|weights?|gamma|beta|scale|shift|residual|mask|gate|other|"
                         r"out(?:put)?s?|results?|hidden|targets?|labels?|logits|predictions?", re.I)
OWNER_AFTER = re.compile(rf"\s+({SHAPE_OWNER.pattern})\b(?!\s*[:=(\[])", re.I)
# Inputs named like this are broadcast vectors of the last dim when no shape is given.
VECTOR_NAME = re.compile(r"(?:bias|b|weight|w|gamma|beta|scale|shift)\d*")
# An expression without a function call is only taken when its names look like tensors, so
# prose like "input/output" or "sum/mean" is not read as a division.
TENSOR_NAME = re.compile(r"[A-Za-z]\w?\d*|bias|weight|gamma|beta|scale|shift|residual|mask|gate|other", re.A)


COMPUTE_AFTER = re.compile(r"\s*(?:accumulat\w*|compute|computation|math|internal\w*|acc)\b", _F)
COMPUTE_BEFORE = re.compile(r"\b(?:accumulat\w*|comput\w*|math|internally)\s+(?:in\s+|with\s+)?$", _F)
OUTPUT_NEAR = re.compile(r"\s*(?:outputs?|results?)\b", _F)
OUTPUT_BEFORE = re.compile(r"\b(?:outputs?|results?|returns?)\s+(?:is\s+|in\s+|as\s+)*$", _F)
TYPE_CONTEXT = re.compile(r"\s+(?:precision|floats?|tensors?|inputs?|matri\w*|arrays?|dtypes?|values?|data)\b", _F)
# "x in fp16 and y in fp32", "bias fp32": a dtype said of one input.
DTYPE_OWNER = re.compile(r"(?<![-\w])([A-Za-z]\d*|bias|weight|residual)\s+(?:is\s+|in\s+|as\s+)?$")
# "bf16 only", "only fp16": the dtype list said, not a qualifier of the operation.
ONLY = re.compile(r"(;\s*)\bonly\b|\bonly\b(?=\s*;)", _F)
