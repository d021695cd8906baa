"""Static integrity checks of the generated files, by allow-list: kernel.py (check_kernel),
reference.py (check_reference) and the generated pytest files (check_test).

Each check parses the text with ast and walks every node: a statement, an expression, a name, an
attribute chain on a module, a builtin or a method that is not on its file's allow-list is refused,
so a trick nobody thought of fails by default instead of slipping past a list of forbidden names.
docs/INTEGRITY.md states the rules for people; this module is their definition. Pure: it imports
neither torch nor triton, and nothing of the file runs.

kernel.py: the result must be computed by @triton.jit code that the entry function launches. Outside
@triton.jit the launcher may allocate, describe and reshape tensors and launch kernels; names are
followed (a tensor is an entry parameter, an allocation, or made from a tensor by an allowed method,
by indexing or through a list) so arithmetic, comparisons, element writes and computing methods on
a tensor are refused there. reference.py may compute freely with torch but keeps no state between
calls and leaves the device, the clock, files and the interpreter alone. A test file may use pytest,
torch, math and the job's own modules, and reads nothing but its spec.json.
"""
from __future__ import annotations

import ast
import functools
from dataclasses import dataclass, field, replace

from runner import protocol


def _words(text: str) -> frozenset[str]:
    return frozenset(text.split())


# ====================================================================== allow-lists

# --- kernel.py, outside @triton.jit: torch and tensors
TORCH_ALLOCATORS = _words("empty empty_like empty_strided zeros zeros_like ones ones_like full full_like")
TORCH_DTYPES = _words("""float16 half bfloat16 float32 float float64 double int8 int16 int32 int64 long int short
    uint8 uint16 uint32 uint64 bool complex64 complex128 cfloat cdouble float8_e4m3fn float8_e4m3fnuz float8_e5m2
    float8_e5m2fnuz float8_e8m0fnu""")
# Tensor methods that describe a tensor (the result is not a tensor) ...
TENSOR_DESCRIBE = _words("""size stride dim ndimension numel nelement element_size data_ptr is_contiguous
    storage_offset get_device is_floating_point is_complex""")
# ... and those that allocate, reshape or cast one. Any other method on a tensor computes.
TENSOR_MAKE = _words("""contiguous view view_as reshape reshape_as expand expand_as broadcast_to flatten unflatten
    unsqueeze squeeze permute transpose t movedim narrow select chunk split unbind new_empty new_empty_strided
    new_zeros new_ones new_full to
    float half bfloat16 double type cuda cpu detach clone zero_ fill_""")
TENSOR_ATTRIBUTES = _words("shape dtype device ndim is_cuda is_cpu layout requires_grad itemsize nbytes")
TENSOR_VIEWS = _words("T mT H mH")
# Plain-Python methods a launcher may call on lists, dicts, sets, strings and ints ...
STR_METHODS = _words("""join format removeprefix removesuffix startswith endswith split rsplit strip lstrip rstrip
    lower upper replace partition rpartition find rfind count isdigit isalpha isidentifier zfill ljust rjust center
    title capitalize splitlines""")
PLAIN_METHODS = STR_METHODS | _words("""append extend insert pop remove index copy add update discard get items keys
    values setdefault clear sort reverse bit_length is_integer""")
# ... of which these are torch.Tensor methods too (tests/test_integrity.py keeps the list exact): only on
# what is visibly a list, dict, set or str that the file made (`seen = set()`, `{...}`, `[...]`, "text").
CONTAINER_ONLY = _words("add index sort split values")
# Methods that change the container they are called on: never on a module-level name or a parameter.
MUTATING = _words("append extend insert pop remove add update discard setdefault clear sort reverse popitem")
KERNEL_BUILTINS = _words("""len range min max abs round divmod pow int float bool str repr tuple list dict set
    frozenset isinstance enumerate zip map sorted reversed any all print slice ValueError TypeError RuntimeError
    AssertionError NotImplementedError IndexError KeyError Exception""")
EXCEPTIONS = _words("ValueError TypeError RuntimeError AssertionError NotImplementedError IndexError KeyError Exception")
# builtins a launcher may pass a tensor to (they neither compute on it nor read its values)
BUILTINS_TAKING_TENSORS = _words("len isinstance list tuple zip enumerate")
MAP_FUNCTIONS = _words("str int float bool repr len abs")        # map(str, x.shape)
AUTOTUNE_KEYWORDS = _words("configs key prune_configs_by reset_to_zero restore_value warmup rep cache_results")
CONFIG_REFUSED_KEYWORDS = _words("pre_hook")
JIT_KEYWORDS = _words("do_not_specialize do_not_specialize_on_alignment debug noinline")
MODULE_DUNDERS = _words("__all__ __version__")
# A kernel compiled ahead of its launch (`compiled = kernel.warmup(..., grid=(1,))`, the occupancy idiom of
# Triton's fused-softmax tutorial): what a launcher may read of it, besides launching it and _init_handles().
COMPILED_ATTRIBUTES = _words("n_regs n_spills metadata")
COMPILED_METADATA = _words("shared num_warps num_stages num_ctas")
# A torch.autograd.Function's ctx: what forward and backward may call and read on it; the names its object
# already has (tests/test_integrity.py checks them against the installed torch) are never assigned.
CTX_METHODS = _words("save_for_backward mark_non_differentiable set_materialize_grads")
CTX_READS = _words("saved_tensors needs_input_grad")
CTX_RESERVED = CTX_METHODS | CTX_READS | _words("""apply apply_boxed apply_jvp dirty_tensors mark_dirty
    mark_shared_storage materialize_grads maybe_clear_saved_tensors metadata name next_functions non_differentiable
    register_hook register_prehook requires_grad save_for_forward saved_for_forward saved_variables to_save""")
FUNCTION_METHODS = ("forward", "backward")
CLOCK_ESCAPES = _words("""stream Stream set_stream ExternalStream StreamContext current_stream default_stream Event
    graph graphs CUDAGraph make_graphed_callables set_device synchronize _sleep""")

# --- triton (names from Triton 3.x; tests/test_integrity.py checks them against the installed one)
TL_NAMES = _words("""PropagateNan TRITON_MAX_TENSOR_NUMEL abs add aggregate_replace arange argmax argmin associative_scan
    assume atomic_add atomic_and atomic_cas atomic_load atomic_max atomic_min atomic_or atomic_poll atomic_store
    atomic_xchg atomic_xor bfloat16 bitonic_merge block_type broadcast broadcast_to cast cat cdiv ceil clamp
    condition const constexpr constexpr_type cos cumprod cumsum debug_barrier device_assert device_print div_rn dot
    dot_scaled dtype erf exp exp2 expand_dims expect_zero fdiv flip float16 float32 float64 float8e4b15 float8e4b8
    float8e4nv float8e5 float8e5b16 floor fma full gather histogram inline_asm_elementwise int1 int16 int32 int64 int8
    interleave join load load_tensor_descriptor log log2 make_block_ptr make_tensor_descriptor map_elementwise max
    max_constancy max_contiguous maximum min minimum mul multiple_of num_programs pair_uniform_to_normal permute
    philox philox_impl pi32_t pointer_type program_id rand rand4x randint randint4x randn randn4x range ravel reduce
    reduce_or reshape rsqrt sigmoid sin slice softmax sort split sqrt sqrt_rn squeeze static_assert static_print
    static_range store store_tensor_descriptor str_to_ty sub sum swizzle2d tensor tensor_descriptor
    tensor_descriptor_type to_tensor topk trans tuple tuple_type uint16 uint32 uint64 uint8 uint_to_uniform_float
    umulhi unsqueeze view void where xor_sum zeros zeros_like""")
TL_MATH_NAMES = _words("abs ceil cos div_rn erf exp exp2 fdiv floor fma log log2 rsqrt sin sqrt sqrt_rn umulhi")
# Attributes and methods of values inside @triton.jit: Triton tensors, pointers, descriptors, dtypes.
JIT_VALUE_ATTRIBUTES = TL_NAMES | _words("""T advance item logical_and logical_or to block_shape block_type dtype
    shape type element_ty value numel scalar primitive_bitwidth int_bitwidth fp_mantissa_width exponent_bias name
    with_element_ty get_int_max_value get_int_min_value is_bf16 is_block is_bool is_const is_dtype is_floating
    is_fp16 is_fp32 is_fp64 is_fp8 is_fp8e4b15 is_fp8e4b8 is_fp8e4nv is_fp8e5 is_fp8e5b16 is_int is_int1 is_int16
    is_int32 is_int64 is_int8 is_int_signed is_int_unsigned is_ptr is_standard_floating is_uint16 is_uint32
    is_uint64 is_uint8 is_void kind""")
JIT_BUILTINS = _words("range min max len int float bool abs isinstance print tuple zip enumerate")
MATH_FUNCTIONS = _words("""acos acosh asin asinh atan atan2 atanh cbrt ceil comb copysign cos cosh degrees dist erf
    erfc exp exp2 expm1 fabs factorial floor fmod frexp fsum gamma gcd hypot isclose isfinite isinf isnan isqrt lcm
    ldexp lgamma log log10 log1p log2 modf nextafter perm pow prod radians remainder sin sinh sqrt tan tanh trunc
    ulp""")
MATH_CONSTANTS = _words("e inf nan pi tau")
# Names that a wildcard ("any public name of this module") never covers: what those modules import.
WILDCARD_REFUSED = _words("core torch np numpy os sys math warnings importlib builtins record_stream")

# --- reference.py and tests: torch as a computer (names from torch 2.x; checked against the installed one)
TORCH_FUNCTIONS = _words("""abs abs_ absolute acos acos_ acosh acosh_ adaptive_avg_pool1d adaptive_max_pool1d add
    addbmm addcdiv addcmul addmm addmv addmv_ addr adjoint affine_grid_generator alias_copy all allclose alpha_dropout
    alpha_dropout_ amax amin aminmax angle any arange arccos arccos_ arccosh arccosh_ arcsin arcsin_ arcsinh arcsinh_
    arctan arctan2 arctan_ arctanh arctanh_ argmax argmin argsort argwhere as_strided as_strided_ as_strided_copy
    as_strided_scatter as_tensor asarray asin asin_ asinh asinh_ atan atan2 atan_ atanh atanh_ atleast_1d atleast_2d
    atleast_3d avg_pool1d baddbmm bartlett_window batch_norm bernoulli bilinear binary_cross_entropy_with_logits
    bincount binomial bitwise_and bitwise_left_shift bitwise_not bitwise_or bitwise_right_shift bitwise_xor
    blackman_window block_diag bmm broadcast_shapes broadcast_tensors broadcast_to bucketize can_cast cartesian_prod
    cat cdist ceil ceil_ celu celu_ chain_matmul channel_shuffle cholesky cholesky_inverse cholesky_solve chunk clamp
    clamp_ clamp_max clamp_max_ clamp_min clamp_min_ clip clip_ clone column_stack combinations complex concat
    concatenate conj conj_physical conj_physical_ constant_pad_nd conv1d conv2d conv3d conv_tbc conv_transpose1d
    conv_transpose2d conv_transpose3d convolution copysign corrcoef cos cos_ cosh cosh_ cosine_embedding_loss
    cosine_similarity count_nonzero cov cross ctc_loss cummax cummin cumprod cumsum cumulative_trapezoid deg2rad
    deg2rad_ dequantize det detach detach_copy diag diag_embed diagflat diagonal diagonal_copy diagonal_scatter diff
    digamma dist div divide dot dropout dropout_ dsplit dstack einsum embedding embedding_bag empty empty_like
    empty_permuted empty_strided eq equal erf erf_ erfc erfc_ erfinv exp exp2 exp2_ exp_ expand_copy expm1 expm1_ eye
    feature_alpha_dropout feature_dropout fill fill_ fix fix_ flatten flip fliplr flipud float_power floor floor_
    floor_divide fmax fmin fmod frac frac_ frexp frobenius_norm full full_like gather gcd gcd_ ge geqrf ger
    get_default_dtype gradient greater greater_equal grid_sampler grid_sampler_2d grid_sampler_3d group_norm gru
    gru_cell gt hamming_window hann_window hardshrink heaviside hinge_embedding_loss histc histogram histogramdd hsplit
    hspmm hstack hypot i0 i0_ igamma igammac imag index_add index_copy index_fill index_put index_put_ index_reduce
    index_select inner instance_norm int_repr inverse is_complex is_conj is_floating_point is_grad_enabled
    is_inference is_neg is_nonzero is_same_size is_signed is_tensor isclose isfinite isin isinf isnan isneginf
    isposinf isreal istft kaiser_window kl_div kron kthvalue layer_norm lcm lcm_ ldexp ldexp_ le lerp less less_equal
    lgamma linspace log log10 log10_ log1p log1p_ log2 log2_ log_ log_softmax logaddexp logaddexp2 logcumsumexp logdet
    logical_and logical_not logical_or logical_xor logit logit_ logspace logsumexp lstm lstm_cell lu lu_solve
    lu_unpack margin_ranking_loss masked_fill masked_scatter masked_select matmul matrix_exp matrix_power max
    max_pool1d max_pool1d_with_indices max_pool2d max_pool3d maximum mean median meshgrid min minimum mm mode moveaxis
    movedim msort mul multinomial multiply mv mvlgamma nan_to_num nan_to_num_ nanmean nanmedian nanquantile nansum
    narrow narrow_copy native_batch_norm native_channel_shuffle native_dropout native_group_norm native_layer_norm
    native_norm ne neg neg_ negative negative_ nextafter nonzero nonzero_static norm norm_except_dim normal not_equal
    nuclear_norm numel ones ones_like orgqr ormqr outer pairwise_distance pdist permute permute_copy pinverse
    pixel_shuffle pixel_unshuffle poisson poisson_nll_loss polar polygamma positive pow prelu prod promote_types put
    qr quantile rad2deg rad2deg_ rand rand_like randint randint_like randn randn_like randperm range ravel real
    reciprocal reciprocal_ relu relu_ remainder renorm repeat_interleave reshape resolve_conj resolve_neg result_type
    rms_norm rnn_relu rnn_relu_cell rnn_tanh rnn_tanh_cell roll rot90 round round_ row_stack rrelu rrelu_ rsqrt rsqrt_
    rsub scalar_tensor scatter scatter_add scatter_reduce searchsorted segment_reduce select select_copy
    select_scatter selu selu_ sgn sigmoid sigmoid_ sign signbit sin sin_ sinc sinc_ sinh sinh_ slice_copy
    slice_inverse slice_scatter slogdet softmax sort split split_copy split_with_sizes split_with_sizes_copy sqrt
    sqrt_ square square_ squeeze squeeze_copy stack std std_mean stft sub subtract sum svd swapaxes swapdims t t_copy
    take take_along_dim tan tan_ tanh tanh_ tensor tensor_split tensordot threshold threshold_ tile topk trace
    transpose transpose_copy trapezoid trapz triangular_solve tril tril_indices triplet_margin_loss triu triu_indices
    true_divide trunc trunc_ unbind unbind_copy unflatten unfold_copy unique unique_consecutive unravel_index
    unsafe_chunk unsafe_split unsafe_split_with_sizes unsqueeze unsqueeze_copy values_copy vander var var_mean vdot
    view_as_complex view_as_complex_copy view_as_real view_as_real_copy view_copy vsplit vstack where xlogy xlogy_
    zero_ zeros zeros_like""")
TORCH_VALUES = _words("""e pi inf nan newaxis channels_last channels_last_3d contiguous_format preserve_format strided
    sparse_coo""")
TORCH_CLASSES = _words("Size device finfo iinfo")             # callable, compute nothing
F_FUNCTIONS = _words("""adaptive_avg_pool1d adaptive_avg_pool2d adaptive_avg_pool3d adaptive_max_pool1d
    adaptive_max_pool1d_with_indices adaptive_max_pool2d adaptive_max_pool2d_with_indices adaptive_max_pool3d
    adaptive_max_pool3d_with_indices affine_grid alpha_dropout avg_pool1d avg_pool2d avg_pool3d batch_norm bilinear
    binary_cross_entropy binary_cross_entropy_with_logits celu celu_ channel_shuffle conv1d conv2d conv3d conv_tbc
    conv_transpose1d conv_transpose2d conv_transpose3d cosine_embedding_loss cosine_similarity cross_entropy ctc_loss
    dropout dropout1d dropout2d dropout3d elu elu_ embedding embedding_bag feature_alpha_dropout fold
    fractional_max_pool2d fractional_max_pool2d_with_indices fractional_max_pool3d fractional_max_pool3d_with_indices
    gaussian_nll_loss gelu glu grid_sample group_norm grouped_mm gumbel_softmax hardshrink hardsigmoid hardswish
    hardtanh hardtanh_ hinge_embedding_loss huber_loss instance_norm interpolate kl_div l1_loss layer_norm leaky_relu
    leaky_relu_ linear linear_cross_entropy local_response_norm log_softmax logsigmoid lp_pool1d lp_pool2d lp_pool3d
    margin_ranking_loss max_pool1d max_pool1d_with_indices max_pool2d max_pool2d_with_indices max_pool3d
    max_pool3d_with_indices max_unpool1d max_unpool2d max_unpool3d mish mse_loss multi_head_attention_forward
    multi_margin_loss multilabel_margin_loss multilabel_soft_margin_loss native_channel_shuffle nll_loss normalize
    one_hot pad pairwise_distance pdist pixel_shuffle pixel_unshuffle poisson_nll_loss prelu relu relu6 relu_ rms_norm
    rrelu rrelu_ scaled_dot_product_attention scaled_grouped_mm scaled_mm selu selu_ sigmoid silu smooth_l1_loss
    soft_margin_loss softmax softmin softplus softshrink softsign tanh tanhshrink threshold threshold_
    triplet_margin_loss triplet_margin_with_distance_loss unfold upsample upsample_bilinear upsample_nearest""")
NN_CLASSES = _words("""AdaptiveAvgPool1d AdaptiveAvgPool2d AdaptiveAvgPool3d AdaptiveMaxPool1d AdaptiveMaxPool2d
    AdaptiveMaxPool3d AlphaDropout AvgPool1d AvgPool2d AvgPool3d BCELoss BCEWithLogitsLoss BatchNorm1d BatchNorm2d
    BatchNorm3d Bilinear CELU ChannelShuffle CircularPad1d CircularPad2d CircularPad3d ConstantPad1d ConstantPad2d
    ConstantPad3d Conv1d Conv2d Conv3d ConvTranspose1d ConvTranspose2d ConvTranspose3d CosineEmbeddingLoss
    CosineSimilarity CrossEntropyLoss Dropout Dropout1d Dropout2d Dropout3d ELU Embedding EmbeddingBag
    FeatureAlphaDropout Flatten Fold GELU GLU GRU GRUCell GaussianNLLLoss GroupNorm Hardshrink Hardsigmoid Hardswish
    Hardtanh HingeEmbeddingLoss HuberLoss Identity InstanceNorm1d InstanceNorm2d InstanceNorm3d KLDivLoss L1Loss
    LPPool1d LPPool2d LPPool3d LSTM LSTMCell LayerNorm LeakyReLU Linear LocalResponseNorm LogSigmoid LogSoftmax MSELoss
    MarginRankingLoss MaxPool1d MaxPool2d MaxPool3d Mish ModuleList MultiLabelMarginLoss MultiLabelSoftMarginLoss
    MultiMarginLoss MultiheadAttention NLLLoss PReLU PairwiseDistance Parameter ParameterList PixelShuffle
    PixelUnshuffle PoissonNLLLoss RMSNorm RNN RNNCell RReLU ReLU ReLU6 ReflectionPad1d ReflectionPad2d
    ReflectionPad3d ReplicationPad1d ReplicationPad2d ReplicationPad3d SELU Sequential SiLU Sigmoid SmoothL1Loss
    SoftMarginLoss Softmax Softmax2d Softmin Softplus Softshrink Softsign Tanh Tanhshrink Threshold Transformer
    TransformerDecoder TransformerDecoderLayer TransformerEncoder TransformerEncoderLayer TripletMarginLoss Unflatten
    Unfold Upsample UpsamplingBilinear2d UpsamplingNearest2d ZeroPad1d ZeroPad2d ZeroPad3d""")
LINALG_FUNCTIONS = _words("""cholesky cholesky_ex cond cross det diagonal eig eigh eigvals eigvalsh householder_product
    inv inv_ex ldl_factor ldl_factor_ex ldl_solve lstsq lu lu_factor lu_factor_ex lu_solve matmul matrix_exp
    matrix_norm matrix_power matrix_rank multi_dot norm pinv qr slogdet solve solve_ex solve_triangular svd svdvals
    tensorinv tensorsolve vander vecdot vector_norm""")
FFT_FUNCTIONS = _words("""fft fft2 fftfreq fftn fftshift hfft hfft2 hfftn ifft ifft2 ifftn ifftshift ihfft ihfft2
    ihfftn irfft irfft2 irfftn rfft rfft2 rfftfreq rfftn""")
SPECIAL_FUNCTIONS = _words("""airy_ai bessel_j0 bessel_j1 bessel_y0 bessel_y1 chebyshev_polynomial_t
    chebyshev_polynomial_u chebyshev_polynomial_v chebyshev_polynomial_w digamma entr erf erfc erfcx erfinv exp2 expit
    expm1 gammainc gammaincc gammaln hermite_polynomial_h hermite_polynomial_he i0 i0e i1 i1e laguerre_polynomial_l
    legendre_polynomial_p log1p log_ndtr log_softmax logit logsumexp modified_bessel_i0 modified_bessel_i1
    modified_bessel_k0 modified_bessel_k1 multigammaln ndtr ndtri polygamma psi round scaled_modified_bessel_k0
    scaled_modified_bessel_k1 shifted_chebyshev_polynomial_t shifted_chebyshev_polynomial_u
    shifted_chebyshev_polynomial_v shifted_chebyshev_polynomial_w sinc softmax spherical_bessel_j0 xlog1py xlogy zeta""")
# Tensor methods a reference (and a test) may not call: host copies and syncs (the reference is timed),
# numpy, storages and files, hooks, streams, Python callbacks.
REFERENCE_REFUSED_METHODS = _words("""item tolist cpu numpy tofile storage untyped_storage record_stream share_memory_
    pin_memory register_hook register_post_accumulate_grad_hook retain_grad backward apply_ map_ map2_ synchronize
    register_forward_hook register_forward_pre_hook register_full_backward_hook register_full_backward_pre_hook
    register_backward_hook""")
TEST_REFUSED_METHODS = REFERENCE_REFUSED_METHODS - _words("item tolist cpu")
REFERENCE_BUILTINS = KERNEL_BUILTINS - {"print"} | {"sum"}
TEST_BUILTINS = KERNEL_BUILTINS | _words("sum next iter filter getattr open")
JOB_MODULES = _words("kernel reference module_call")
# Functions of the job's modules whose result a test calls: the runner's own module_call.py, which
# the runner writes into every job directory itself (over any file of that name a job brings).
RUNNER_CALLABLES = _words("module_call.module_call")
HELD_FIXTURES: frozenset[str] = frozenset()     # pytest's own fixtures a test may take (none: tmp_path, monkeypatch ...)


# Why some builtins that are on no list are refused (the message says so; the list decides).
KNOWN_BUILTINS = {
    **{n: ("introspection", "runs text as code") for n in ("eval", "exec", "compile")},
    **{n: ("introspection", "looks names up or changes objects at run time") for n in (
        "getattr", "setattr", "delattr", "hasattr", "vars", "dir", "globals", "locals", "type", "id", "object",
        "super", "callable", "classmethod", "staticmethod", "property", "memoryview", "help", "breakpoint")},
    "__import__": ("introspection", "imports by name at run time"),
    "open": ("io", "touches files"), "input": ("io", "reads stdin"), "exit": ("io", "ends the process"),
    "quit": ("io", "ends the process"),
    "sum": ("torch", "on tensors, torch computes the sum"), "iter": ("construct", "hides what is iterated"),
    "next": ("construct", "hides what is iterated"), "filter": ("construct", "calls a function out of sight"),
    "print": ("io", "the reference is timed: printing slows it and reads tensors back to the host"),
}


def _space(names: frozenset[str], role: str) -> dict:
    return {n: role for n in names}


_TL_SPACE = {**_space(TL_NAMES, "tl"), "math": _space(TL_MATH_NAMES, "tl"),
             "PropagateNan": {"": "tl", "ALL": "tl", "NONE": "tl"},
             "extra": {"cuda": {"libdevice": {"*": "tl"}}, "hip": {"libdevice": {"*": "tl"}}, "libdevice": {"*": "tl"}}}
_MATH_SPACE = {**_space(MATH_FUNCTIONS, "query"), **_space(MATH_CONSTANTS, "value")}
_TORCH_CUDA_QUERIES = _words("is_available current_device device_count get_device_properties get_device_capability "
                             "get_device_name")
# Triton's device queries, as its tutorials make them (triton.runtime.driver.active...): nothing else of
# triton.runtime (launchers, binaries, the cache, streams); imported only as `from triton.runtime import driver`
_DRIVER_SPACE = {"active": {"get_active_torch_device": "query", "get_current_target": "query",
                            "utils": {"get_device_properties": "query"}}}
RUNTIME_IMPORTS = {"triton.runtime": _words("driver")}
# A space maps a name to a role (a leaf) or to another space (a module); "" is the role of a space that is
# also an object (a class with attributes), "*" the role of any public name not in WILDCARD_REFUSED.
KERNEL_SPACE: dict = {
    "torch": {**_space(TORCH_ALLOCATORS, "alloc"), **_space(TORCH_DTYPES, "value"),
              "Size": "query", "device": "query", "finfo": "query", "iinfo": "query", "promote_types": "query",
              "get_default_dtype": "query", "broadcast_shapes": "query", "broadcast_tensors": "views",
              "result_type": "describe", "is_tensor": "describe", "is_floating_point": "describe",
              "Tensor": "class", "dtype": "class", "autograd": {"Function": "fnbase"},
              "cuda": _space(_TORCH_CUDA_QUERIES, "query"), "version": {"cuda": "value", "hip": "value"}},
    "triton": {"cdiv": "query", "next_power_of_2": "query", "Config": "config", "jit": "decorator",
               "autotune": "decorator", "heuristics": "decorator", "language": _TL_SPACE,
               "runtime": {"driver": _DRIVER_SPACE},
               "tools": {"tensor_descriptor": {"TensorDescriptor": {"": "tensordesc", "from_tensor": "tensordesc"}}}},
    "math": _MATH_SPACE,
    "typing": {"*": "typing"},
}
_ATEN_OP = {"": "compute", "*": "compute"}           # torch.ops.aten.add, torch.ops.aten.add.Tensor
_REFERENCE_TORCH = {
    **_space(TORCH_FUNCTIONS, "compute"), **_space(TORCH_DTYPES, "value"), **_space(TORCH_VALUES, "value"),
    **_space(TORCH_CLASSES, "compute"), "Tensor": "class", "dtype": "class",
    "nn": {"functional": _space(F_FUNCTIONS, "compute"), **_space(NN_CLASSES, "compute"), "Module": "nnbase"},
    "linalg": _space(LINALG_FUNCTIONS, "compute"), "fft": _space(FFT_FUNCTIONS, "compute"),
    "special": _space(SPECIAL_FUNCTIONS, "compute"), "ops": {"aten": {"*": _ATEN_OP}},
}
REFERENCE_SPACE: dict = {"torch": {**_REFERENCE_TORCH, "no_grad": "context", "inference_mode": "context"},
                         "math": _MATH_SPACE, "typing": {"*": "typing"}}
TEST_SPACE: dict = {
    "torch": {**_REFERENCE_TORCH, "testing": {"assert_close": "compute", "make_tensor": "compute"},
              "Generator": "compute", "manual_seed": "compute",
              "cuda": _space(_words("is_available synchronize device_count get_device_capability get_device_name"),
                             "compute"),
              "enable_grad": "context", "no_grad": "context", "inference_mode": "context",
              "autograd": {"grad": "compute"}},
    "pytest": {"mark": {"*": "compute"}, "param": "compute", "fail": "compute", "skip": "compute", "xfail": "compute",
               "approx": "compute", "raises": "context", "warns": "context", "fixture": "compute"},
    "math": _MATH_SPACE, "typing": {"*": "typing"},
    "itertools": _space(_words("product chain combinations combinations_with_replacement permutations repeat "
                               "accumulate islice starmap zip_longest"), "compute"),
    "functools": _space(_words("partial reduce"), "compute"),
    "json": _space(_words("load loads dumps"), "compute"),
    # testgen's header: locate the test's own directory, read TRITON_INTERPRET, import the job's modules
    "os": {"path": _space(_words("dirname abspath join"), "compute"), "environ": {"get": "compute"},
           "getenv": "compute"},
    "sys": {"path": {"insert": "syspath"}},
    "importlib": {"import_module": "importjob"},
    **{m: {"*": "jobfn"} for m in JOB_MODULES},
}

_KERNEL_CAN = ("outside @triton.jit, kernel.py may only allocate tensors (torch.empty, empty_like, zeros, full, ...), "
               "describe and reshape them (.shape, .stride(), .numel(), .view(), .contiguous(), .to(), ...) and "
               "launch @triton.jit functions; do the math in the kernel")
_KERNEL_CHAINS = ("kernel.py may use torch's allocators, dtypes, Size, device, broadcast_shapes, broadcast_tensors, "
                  "finfo, iinfo, promote_types, result_type, torch.Tensor in annotations and isinstance, "
                  "torch.cuda's device queries (is_available, current_device, device_count, get_device_properties, "
                  "get_device_capability), triton.cdiv, next_power_of_2, Config, jit, autotune, heuristics, "
                  "Triton's device queries (triton.runtime.driver.active.get_active_torch_device(), "
                  ".get_current_target(), .utils.get_device_properties(index)), torch.autograd.Function as a base "
                  "class, tl.*, libdevice and math")
_DRIVER_CAN = ("of triton.runtime kernel.py may use only the device queries triton.runtime.driver.active"
               ".get_active_torch_device(), .get_current_target() and .utils.get_device_properties(index) "
               "(launchers, binaries, streams and the cache are the runner's), imported as `from triton.runtime "
               "import driver` or reached from `import triton`")
_COMPILED_CAN = ("a kernel compiled with `compiled = kernel.warmup(..., grid=(1,))` may only be launched "
                 "(compiled[grid](...)), have compiled._init_handles() called and its n_regs, n_spills and "
                 "metadata.shared (num_warps, num_stages, num_ctas) read")
_FUNCTION_CAN = ("a torch.autograd.Function in kernel.py holds only `@staticmethod def forward(ctx, ...)` and "
                 "`@staticmethod def backward(ctx, ...)` (no other methods, class attributes, decorators, bases or "
                 "metaclass)")
_CTX_CAN = ("forward and backward may call ctx.save_for_backward(...), read ctx.saved_tensors and "
            "ctx.needs_input_grad, and set and read their own ctx attributes (ctx.BLOCK_SIZE = ...)")
_KERNEL_IMPORTS = ("kernel.py may import only torch, triton, triton.language (as tl), math, typing and __future__; "
                   "from triton: jit, cdiv, next_power_of_2, Config, autotune, heuristics; libdevice from "
                   "triton.language.extra (or .cuda/.hip); TensorDescriptor from triton.tools.tensor_descriptor; "
                   "driver from triton.runtime (for its device queries)")
_REFERENCE_IMPORTS = ("reference.py may import only torch, torch.nn, torch.nn.functional (as F), math, typing and "
                      "__future__")
_TEST_IMPORTS = ("a test may import only pytest, torch, math, itertools, functools, json, typing, the job's "
                 "modules (reference, kernel), and os, sys and importlib for testgen's header lines")
_WITH_CAN = {
    "reference": ("reference.py may use `with` only for torch.no_grad() and torch.inference_mode() (other context "
                  "managers switch streams, devices, precision or clocks out of sight)"),
    "test": ("a test may use `with` only for pytest.raises, pytest.warns, torch.no_grad/enable_grad/inference_mode "
             "and opening its spec.json"),
}
STATEMENTS = {
    "kernel": "the result must be computed by @triton.jit code that the entry function launches.",
    "reference": ("the reference computes with torch alone, keeps no state between calls and leaves the device, "
                  "the clock, files and the interpreter alone."),
    "test": ("a test uses pytest, torch, math and the job's own modules, reads only its spec.json, and changes "
             "nothing outside itself."),
}


@dataclass(frozen=True)
class Violation:
    line: int
    rule: str    # syntax jit launch entry import name torch module builtin method construct fallback
    #              introspection io patch clock state decorator class
    message: str

    def __str__(self) -> str:
        return f"line {self.line}: {self.message}" if self.line else self.message


def check_kernel(source: str, entry: str | None) -> list[Violation]:
    """Every rule kernel.py breaks, in line order; [] when it passes. entry: the spec's name (the
    launcher); None takes the last module-level function that is not @triton.jit."""
    return _run(source, "kernel", entry)


def check_reference(source: str, entry: str | None) -> list[Violation]:
    """Every rule reference.py breaks, in line order; [] when it passes. entry: the spec's name, a
    module-level function the harness calls (None: not checked)."""
    return _run(source, "reference", entry)


def check_test(source: str) -> list[Violation]:
    """Every rule a generated pytest file (test_reference.py, test_kernel.py) breaks; [] when it passes."""
    return _run(source, "test", None)


def summary(violations: list[Violation]) -> str:
    """The first violation, and how many more there are: one line for a job's summary."""
    more = f" (and {len(violations) - 1} more)" if len(violations) > 1 else ""
    return f"{violations[0]}{more}"


def report(violations: list[Violation], file: str, limit: int = 12) -> str:
    """The violations for people and for the model: what the rules want, then one line each."""
    name = file.rsplit("/", 1)[-1]
    mode = "test" if name.startswith("test") else "reference" if name.startswith("reference") else "kernel"
    lines = [f"- {v}" for v in violations[:limit]]
    if len(violations) > limit:
        lines.append(f"- ... and {len(violations) - limit} more")
    return f"{name} breaks the integrity rules (docs/INTEGRITY.md): {STATEMENTS[mode]}\n" + "\n".join(lines)


def _run(source: str, mode: str, entry: str | None) -> list[Violation]:
    try:
        tree = ast.parse(source)
    except SyntaxError as e:
        return [Violation(e.lineno or 0, "syntax", f"not valid Python: {e.msg}; send the whole file as it should be")]
    return _Check(tree, mode, entry).run()


def _plain_super(args: list[ast.expr], classes: dict[str, ast.ClassDef]) -> bool:
    """super() or super(<a class of the file>, self): both reach nn.Module.__init__."""
    return not args or (len(args) == 2 and all(isinstance(a, ast.Name) for a in args)
                        and args[0].id in classes and args[1].id == "self")


# ====================================================================== kinds

@dataclass(frozen=True)
class V:
    """What an expression is, as far as names show: tag module | leaf | tensor | container | str | value |
    builtin | func | jit | lambda | class | instance | self | dtype | file | mixed | lean (the lean launch)."""
    tag: str
    path: str = ""            # module or chain path, function name(s), builtin name
    role: str = ""            # a leaf's role
    tensor: bool = False      # container: holds a tensor
    shared: bool = False      # an object this function did not make (a parameter, a module-level name)
    items: tuple | None = None  # a tuple's or list's elements, where the display shows them
    elem: "V | None" = None   # a container's elements, where they are all alike (a comprehension)

    @property
    def tensorish(self) -> bool:
        return self.tag == "tensor" or (self.tag == "container" and self.tensor)


VALUE, TENSOR, STR = V("value"), V("tensor"), V("str")
# reference.py: what the module's __init__ stored on self, or an item of it (a layer of an nn.ModuleList).
# Calling one adds nothing to what `self.<name>(...)` may already call: __init__'s values pass the same rules.
HELD = V("value", "self")
_CALLABLE = {"jit", "func", "lambda"}


def _join(a: V | None, b: V | None) -> V:
    if a is None or a == b:
        return b if b is not None else VALUE
    if b is None:
        return a
    if "tensor" in (a.tag, b.tag):
        return TENSOR
    if a.tag == b.tag and a.tag in ("jit", "func", "compiled"):
        return V(a.tag, "|".join(sorted(set(a.path.split("|")) | set(b.path.split("|")))))
    for x, y in ((a, b), (b, a)):       # `kernel = None` then `kernel = _k`: still a launchable name
        if x.tag in _CALLABLE | {"mixed"} and y.tag == "value" and not y.tensor:
            return x
    shared = a.shared or b.shared
    if a.tag == b.tag == "container":
        items = (tuple(map(_join, a.items, b.items))
                 if a.items is not None and b.items is not None and len(a.items) == len(b.items) else None)
        elem = _join(a.elem, b.elem) if a.elem is not None and b.elem is not None else None
        return V("container", tensor=a.tensor or b.tensor, shared=shared, items=items, elem=elem)
    if a.tag == b.tag and a.tag in ("str", "dtype", "file"):
        return V(a.tag, a.path if a.path == b.path else "", shared=shared)
    plain = {"value", "str", "container", "dtype"}
    if a.tag in plain and b.tag in plain:
        return V("value", tensor=a.tensor or b.tensor, shared=shared)
    return V("mixed")


def _construction(cls: ast.ClassDef) -> set[str]:
    """The methods that build a module: __init__ and the helpers it calls (self._make_layer(...)),
    less any forward reaches; only these may set self's attributes, so forward keeps no state."""
    calls = {m.name: {c.func.attr for c in ast.walk(m) if isinstance(c, ast.Call) and isinstance(c.func, ast.Attribute)
                      and isinstance(c.func.value, ast.Name) and c.func.value.id == "self"}
             for m in cls.body if isinstance(m, ast.FunctionDef)}

    def reached(start: str) -> set[str]:
        seen, todo = set(), [start]
        while todo:
            m = todo.pop()
            if m in calls and m not in seen:
                seen.add(m)
                todo += calls[m]
        return seen
    return (reached("__init__") - reached("forward")) | {"__init__"}


def _class_constant(stmt: ast.stmt) -> bool:
    """`expansion = 4` in a module class's body: a name bound to a literal (numbers, strings, tuples)."""
    if not (isinstance(stmt, ast.Assign) and len(stmt.targets) == 1 and isinstance(stmt.targets[0], ast.Name)):
        return False
    return all(isinstance(n, (ast.Constant, ast.Tuple, ast.Load, ast.UnaryOp, ast.USub)) for n in ast.walk(stmt.value))


def _of_self(kind: V) -> bool:
    """reference.py: self, or what was read from it (a layer, a weight, a view of one)."""
    return kind.tag == "self" or kind == HELD


def _element(v: V) -> V:
    """What iterating over v gives."""
    if v.tag == "tensor":
        return TENSOR
    if v.tag == "container":
        if v.items:
            out = None
            for item in v.items:
                out = _join(out, item)
            return replace(out, shared=v.shared) if out.tag == "container" else out
        if v.elem is not None:
            return replace(v.elem, shared=v.shared or v.elem.shared)
        return TENSOR if v.tensor else V("value", shared=v.shared)
    if v.tag == "str":
        return STR
    return HELD if v == HELD else V("value", tensor=v.tensor)


def _container(items: list[V], shared: bool = False, keep: bool = True) -> V:
    elem = None
    for item in items:
        elem = _join(elem, item)
    return V("container", tensor=any(i.tensorish for i in items), shared=shared,
             items=tuple(items) if keep else None, elem=elem)


def _gated(module: str, name: str | None) -> bool:
    """Whether importing name from module (or module itself) enters a RUNTIME_IMPORTS module otherwise than by
    one of the names it allows: `import triton.runtime` and `from triton.runtime.driver import active` are."""
    full = f"{module}.{name}" if name else module
    for gate, names in RUNTIME_IMPORTS.items():
        if full == gate or full.startswith(gate + "."):
            return not (module == gate and name in names)
    return False


def _public(name: str) -> bool:
    return not name.startswith("_")


def _dunder(name: str) -> bool:
    return len(name) > 4 and name.startswith("__") and name.endswith("__")


def _node_at(space: dict, path: str):
    node = space
    for part in path.split("."):
        node = _child(node, part) if isinstance(node, dict) else None
        if node is None:
            return None
    return node


def _child(node: dict, name: str):
    if name in node and name not in ("", "*"):
        return node[name]
    if "*" in node and _public(name) and name not in WILDCARD_REFUSED:
        return node["*"]
    return None


def _kind_of(node, path: str) -> V:
    if isinstance(node, dict):
        return V("leaf", path, role=node[""]) if "" in node else V("module", path)
    return V("leaf", path, role=node)


def _src(node: ast.AST, limit: int = 60) -> str:
    text = ast.unparse(node)
    return text if len(text) <= limit else text[:limit - 3] + "..."


def _root(node: ast.AST) -> ast.AST:
    """The name an attribute chain, index or method call starts from: x in x.view(-1)[0].add_."""
    while True:
        if isinstance(node, (ast.Attribute, ast.Subscript)):
            node = node.value
        elif isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute):
            node = node.func.value
        else:
            return node


_SCOPES = (ast.Lambda, ast.ListComp, ast.SetComp, ast.DictComp, ast.GeneratorExp, ast.FunctionDef,
           ast.AsyncFunctionDef, ast.ClassDef)


def _stored_names(body: list[ast.stmt]) -> set[str]:
    """Names a function body binds (its locals), not looking into nested scopes."""
    found: set[str] = set()
    todo: list[ast.AST] = list(body)
    while todo:
        node = todo.pop()
        if isinstance(node, ast.Name) and isinstance(node.ctx, (ast.Store, ast.Del)):
            found.add(node.id)
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            found.add(node.name)
            continue
        if isinstance(node, _SCOPES):
            continue
        todo.extend(ast.iter_child_nodes(node))
    return found


def _bound_at_module(node: ast.stmt) -> set[str]:
    """Every name a module-level statement binds: defs, classes, assignments, import aliases (a try's
    imports included)."""
    names = _stored_names([node])
    for sub in ast.walk(node) if isinstance(node, (ast.Try, ast.Import, ast.ImportFrom)) else ():
        if isinstance(sub, (ast.Import, ast.ImportFrom)):
            names |= {(a.asname or a.name).split(".")[0] for a in sub.names}
    return names


@dataclass(frozen=True)
class _LeanBlock:
    statements: tuple[str, ...]     # each statement's syntax tree, without positions
    binds: frozenset[str]           # the names the block binds
    reads: frozenset[str]           # module-level and builtin names it reads, its own included


@functools.cache
def _lean_block() -> _LeanBlock:
    """runner/lean_launch.py's block as kernel.py carries it. The names it reads (its own, torch, id,
    type, len, getattr, ...) the rest of the file may not rebind: the block's text is fixed, but what
    those names mean is the module's."""
    body = ast.parse(protocol.lean_launch_source()).body
    bound = frozenset().union(*map(_bound_at_module, body))
    local = set()
    for fn in (n for n in body if isinstance(n, ast.FunctionDef)):
        local |= {a.arg for a in _arg_names(fn.args)} | {n.id for n in ast.walk(fn) if isinstance(n, ast.Name)
                                                           and isinstance(n.ctx, ast.Store)}   # comprehensions too
    read = {n.id for n in ast.walk(ast.Module(body=body, type_ignores=[]))
            if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Load)}
    return _LeanBlock(tuple(ast.dump(n) for n in body), bound, frozenset(read - local) | bound)


def _lean_statement(node: ast.stmt) -> bool:
    return bool(_bound_at_module(node) & _lean_block().binds) and not isinstance(node, (ast.Import, ast.ImportFrom))


# The module-level bindings of names the lean block reads that a kernel.py may make: the same
# modules the block means by them.
_LEAN_IMPORTS = ("Import(names=[alias(name='torch')])",
                 "ImportFrom(module='triton.runtime', names=[alias(name='driver')], level=0)",
                 "ImportFrom(module='triton.tools.tensor_descriptor', names=[alias(name='TensorDescriptor')], level=0)")


def _arg_names(args: ast.arguments) -> list[ast.arg]:
    return [*args.posonlyargs, *args.args, *([args.vararg] if args.vararg else []), *args.kwonlyargs,
            *([args.kwarg] if args.kwarg else [])]


@dataclass
class _Fn:
    """One scope being walked: a function, a lambda, a comprehension or the module."""
    name: str
    locals: dict[str, V]
    names: set[str]
    params: set[str] = field(default_factory=set)
    parent: "_Fn | None" = None
    module: bool = False
    decorator: bool = False        # inside triton.autotune(...)/heuristics(...) arguments: lambdas and hooks
    method: str = ""               # reference: a method of a torch.nn.Module subclass
    launched: bool = False
    calls: set[str] = field(default_factory=set)
    returns: V | None = None


# ====================================================================== the walk

class _Check:
    PASSES = 4        # passes over the module until names' kinds settle; the last one records

    def __init__(self, tree: ast.Module, mode: str, entry: str | None) -> None:
        self.tree, self.mode, self.wanted = tree, mode, entry
        self.kernel, self.reference, self.test = mode == "kernel", mode == "reference", mode == "test"
        self.space = {"kernel": KERNEL_SPACE, "reference": REFERENCE_SPACE, "test": TEST_SPACE}[mode]
        self.builtins = {"kernel": KERNEL_BUILTINS, "reference": REFERENCE_BUILTINS, "test": TEST_BUILTINS}[mode]
        self.file = {"kernel": "kernel.py", "reference": "reference.py", "test": "a test file"}[mode]
        self.found: list[Violation] = []
        self.own_methods: set[str] = set()       # reference.py: the methods of the class being walked
        self.construction = {"__init__"}         # ... and those that build it (may set self.x)
        self.class_constants = {c.name: {s.targets[0].id for s in c.body if _class_constant(s)}
                                for c in tree.body if isinstance(c, ast.ClassDef)}
        self.record = False
        self.globals: dict[str, V] = {}
        self.lean = self.kernel and self.take_lean_block()
        self.bound: dict[str, list[int]] = {}
        self.functions: dict[str, ast.FunctionDef] = {}
        self.classes: dict[str, ast.ClassDef] = {}
        self.jit: set[str] = set()
        self.fixtures: set[str] = set()
        self.param_kinds: dict[str, dict[str, V]] = {}
        self.local_kinds: dict[str, dict[str, V]] = {}
        self.returns: dict[str, V] = {}
        self.calls: dict[str, set[str]] = {}
        self.launchers: set[str] = set()
        self.hooks: set[str] = set()           # plain functions Triton calls (prune_configs_by, heuristics)
        self.function_classes: set[str] = set()   # kernel.py: module-level torch.autograd.Function subclasses
        self.ctx_attrs: dict[str, dict[str, V]] = {}   # what a Function's methods store on their ctx
        self.applies: dict[str, ast.Assign] = {}  # kernel.py: module-level `name = SomeFunction.apply`
        self.methods: set[str] = set()            # "LayerNorm.forward": the Function methods walked

    # ------------------------------------------------------------------ driver

    def run(self) -> list[Violation]:
        self.prescan()
        self.entry = self.find_entry()
        if self.entry in self.functions:
            fn = self.functions[self.entry]
            kinds = self.param_kinds.setdefault(self.entry, {})
            for a in [*fn.args.posonlyargs, *fn.args.args]:
                kinds[a.arg] = TENSOR if self.kernel else VALUE
            if fn.args.vararg:
                kinds[fn.args.vararg.arg] = V("container", tensor=self.kernel)
        for i in range(self.PASSES):
            self.record = i == self.PASSES - 1
            self.launchers, self.calls = set(), {}
            self.module_pass()
        self.structure()
        return sorted(set(self.found), key=lambda v: (v.line, v.rule, v.message))

    def flag(self, node: ast.AST | None, rule: str, message: str) -> None:
        if self.record:
            self.found.append(Violation(getattr(node, "lineno", 0) or 0, rule, message))

    def take_lean_block(self) -> bool:
        """kernel.py: the lean launch block (runner/lean_launch.py), when every statement binding its
        names is exactly the block, leaves the walk: it is the runner's own code. The file may then call
        _launch(kernel, grid, ...), checked as kernel[grid](...), and use no other name of the block."""
        at = [i for i, node in enumerate(self.tree.body) if _lean_statement(node)]
        if not at:
            return False
        if tuple(ast.dump(self.tree.body[i]) for i in at) != _lean_block().statements or at[-1] - at[0] != len(at) - 1:
            self.found.append(Violation(self.tree.body[at[0]].lineno, "lean", (
                f"binds {', '.join(sorted(set().union(*(_bound_at_module(self.tree.body[i]) for i in at))))}, names "
                "of the lean launch block, but not as runner/lean_launch.py writes them (it keeps state between "
                "calls, so only its own text may): keep the block exactly as generated, or launch with "
                "kernel[grid](...)")))
            return False
        del self.tree.body[at[0]:at[-1] + 1]
        for node in self.tree.body:
            rebound = _bound_at_module(node) & _lean_block().reads
            if rebound and ast.dump(node) not in _LEAN_IMPORTS:
                self.found.append(Violation(node.lineno, "lean", (
                    f"binds {', '.join(sorted(rebound))}, which the lean launch block reads: its text is "
                    "fixed, and so is what its names mean (the builtins, torch, its own names); name yours "
                    "otherwise")))
        return True

    def prescan(self) -> None:
        """Module-level names: imports, defs and classes (constants get their kinds in the passes)."""
        if self.lean:
            self.globals["_launch"] = V("lean", "_launch")
        for node in self.tree.body:
            if isinstance(node, (ast.Import, ast.ImportFrom)):
                for alias, kind in self.imported(node, flag=False):
                    self.bind_global(alias, kind, node)
            elif isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                self.functions[node.name] = node
                self.bind_global(node.name, V("func", node.name), node)
            elif isinstance(node, ast.ClassDef):
                self.classes[node.name] = node
                self.bind_global(node.name, V("class", node.name), node)
            else:
                for name in sorted(_stored_names([node])):
                    self.bound.setdefault(name, []).append(node.lineno)
                    self.globals.setdefault(name, V("value", shared=True))
        if self.kernel:
            self.prescan_functions()
        for name, fn in self.functions.items():
            if self.kernel and fn.decorator_list and self.is_jit_decorator(fn.decorator_list[-1]):
                self.jit.add(name)
                self.globals[name] = V("jit", name)
            if self.test and any(self.decorator_path(d).startswith("pytest.fixture") for d in fn.decorator_list):
                self.fixtures.add(name)

    def prescan_functions(self) -> None:
        """kernel.py: the module-level `class X(torch.autograd.Function)`s and the `name = X.apply` bindings."""
        for name, node in self.classes.items():
            if len(node.bases) == 1 and self.decorator_path(node.bases[0]) == "torch.autograd.Function":
                self.function_classes.add(name)
        for node in self.tree.body:
            if isinstance(node, ast.Assign) and len(node.targets) == 1 and isinstance(node.targets[0], ast.Name) \
                    and self.apply_of(node.value):
                self.applies[node.targets[0].id] = node

    def apply_of(self, node: ast.expr) -> str:
        """The Function class X of the expression `X.apply`, or ''."""
        if isinstance(node, ast.Attribute) and node.attr == "apply" and isinstance(node.value, ast.Name) \
                and node.value.id in self.function_classes:
            return node.value.id
        return ""

    def bind_global(self, name: str, kind: V, node: ast.AST) -> None:
        self.bound.setdefault(name, []).append(node.lineno)
        self.globals[name] = kind

    def find_entry(self) -> str | None:
        if self.test:
            return None
        if self.wanted is not None:
            if self.reference and self.wanted in self.classes and self.wanted not in self.functions:
                return self.wanted                        # a pasted nn.Module: the worker builds it
            fn = self.functions.get(self.wanted)
            if fn is None and self.wanted in self.applies:
                return self.wanted                        # layer_norm = LayerNorm.apply
            return self.wanted if fn is not None and self.wanted not in self.jit else None
        plain = [n for n in self.functions if n not in self.jit] or list(self.applies)
        return plain[-1] if plain else None

    def entry_node(self) -> ast.stmt:
        if self.entry in self.functions:
            return self.functions[self.entry]
        return self.classes[self.entry] if self.reference else self.applies[self.entry]

    def entry_start(self) -> str:
        """The launcher the harness's call runs first: the entry def, or the forward of the Function it applies."""
        if self.entry in self.functions:
            return self.entry
        return f"{self.apply_of(self.applies[self.entry].value)}.forward"

    def module_pass(self) -> None:
        ctx = _Fn("", self.globals, set(), module=True)
        for index, node in enumerate(self.tree.body):
            self.module_statement(node, ctx, index)

    # ------------------------------------------------------------------ structure (kernel and reference)

    def structure(self) -> None:
        self.record = True
        if not self.has_entry():
            return
        lines = self.bound.get(self.entry, [])
        if len(lines) > 1:
            self.flag(self.entry_node(), "entry",
                      f"binds {self.entry} {len(lines)} times (lines {', '.join(map(str, lines))}): the entry must be "
                      "one module-level def (or `name = SomeFunction.apply`) that nothing rebinds, so the function "
                      "the harness calls is the one reviewed")
        if self.kernel and not self.reaches_launch(self.entry_start()):
            example = sorted(self.jit)[0]
            self.flag(self.entry_node(), "launch",
                      f"{self.entry} never launches a @triton.jit function (expected e.g. `{example}[grid](...)` "
                      f"in {self.entry} or in a helper it calls)")
        for cls in sorted(self.function_classes):
            self.function_structure(cls)

    def has_entry(self) -> bool:
        """Whether the file has its entry (and, kernel.py, a @triton.jit function); flags what is missing."""
        if self.kernel:
            if not self.jit:
                self.flag(None, "jit", "no @triton.jit function: the kernel must be written in Triton (define a "
                                       "@triton.jit function and launch it from the entry function)")
                return False
            if self.entry is None:
                wanted = f"`def {self.wanted}(...)`" if self.wanted else "an entry function"
                self.flag(None, "launch", f"no {wanted} that is a plain Python launcher: the entry must be a "
                                          "module-level function with the reference's name and signature (or, for "
                                          "a torch.autograd.Function, `name = SomeFunction.apply`)")
                return False
        elif self.reference and self.wanted and self.entry is None:
            hint = (f"; a {', '.join(self.classes)} class alone is not called: add `def {self.wanted}(*inputs): "
                    f"return {next(iter(self.classes))}()(*inputs)`" if self.classes else "")
            self.flag(None, "entry", f"no module-level `def {self.wanted}(...)`: the harness calls the reference by "
                                     f"the spec's name{hint}")
            return False
        return self.entry is not None

    def function_structure(self, cls: str) -> None:
        """kernel.py: a torch.autograd.Function is bound once and its forward launches a @triton.jit function."""
        node = self.classes[cls]
        lines = self.bound.get(cls, [])
        if len(lines) > 1:
            self.flag(node, "entry", f"binds {cls} {len(lines)} times (lines {', '.join(map(str, lines))}): a "
                                     "torch.autograd.Function is bound once, so its apply runs the code reviewed")
        if f"{cls}.forward" in self.methods and not self.reaches_launch(f"{cls}.forward"):
            self.flag(node, "launch", f"defines class {cls}, a torch.autograd.Function whose forward launches no "
                                      "@triton.jit function: forward must launch the kernel (name[grid](...)), "
                                      "itself or through a helper it calls")

    def reaches_launch(self, start: str) -> bool:
        seen, todo = set(), [start]
        while todo:
            name = todo.pop()
            if name in seen:
                continue
            seen.add(name)
            if name in self.launchers:
                return True
            todo += [n for n in self.calls.get(name, ()) if (n in self.functions or n in self.methods)
                     and n not in self.jit]
        return False

    # ------------------------------------------------------------------ imports

    def imported(self, node: ast.Import | ast.ImportFrom, flag: bool = True) -> list[tuple[str, V]]:
        """(bound name, kind) of each allowed name an import binds; flags the others."""
        allowed_text = {"kernel": _KERNEL_IMPORTS, "reference": _REFERENCE_IMPORTS, "test": _TEST_IMPORTS}[self.mode]
        out: list[tuple[str, V]] = []

        def refuse(what: str) -> None:
            if flag:
                self.flag(node, "import", f"imports {what}: {allowed_text}")

        if isinstance(node, ast.Import):
            for a in node.names:
                target = _node_at(self.space, a.name)
                if not isinstance(target, dict) or "" in target or (self.test and a.name in ("os.path", "sys.path")) \
                        or _gated(a.name, None):
                    refuse(a.name)
                elif a.asname:
                    out.append((a.asname, V("module", a.name)))
                else:
                    out.append((a.name.split(".")[0], V("module", a.name.split(".")[0])))
            return out
        return self.import_from(node, refuse)

    def import_from(self, node: ast.ImportFrom, refuse) -> list[tuple[str, V]]:
        out: list[tuple[str, V]] = []
        module = "." * node.level + (node.module or "")
        if module == "__future__":
            return [] if all(a.name == "annotations" for a in node.names) else (refuse("from __future__ import "
                                                                                        "what Python 3 lacks") or [])
        target = None if node.level else _node_at(self.space, module)
        if node.level:
            refuse(f"{module}{'.' if node.module else ''}{', '.join(a.name for a in node.names)} (a relative import)")
            return out
        if not isinstance(target, dict) or "" in target:
            refuse(module)
            return out
        for a in node.names:
            child = _child(target, a.name) if a.name != "*" else None
            if child is None or _gated(module, a.name):
                refuse(f"{a.name} from {module}")
            else:
                out.append((a.asname or a.name, _kind_of(child, f"{module}.{a.name}")))
        return out

    def is_jit_decorator(self, node: ast.expr) -> bool:
        target = node.func if isinstance(node, ast.Call) else node
        return self.decorator_path(target) == "triton.jit"

    def decorator_path(self, node: ast.expr) -> str:
        """The canonical chain of a decorator (or its call): 'triton.jit', 'pytest.mark.parametrize'."""
        if isinstance(node, ast.Call):
            node = node.func
        parts = []
        while isinstance(node, ast.Attribute):
            parts.append(node.attr)
            node = node.value
        if not isinstance(node, ast.Name):
            return ""
        kind = self.globals.get(node.id)
        if kind is None or kind.tag not in ("module", "leaf"):
            return ""
        return ".".join([kind.path, *reversed(parts)])

    # ------------------------------------------------------------------ module level

    def module_statement(self, node: ast.stmt, ctx: _Fn, index: int) -> None:
        if isinstance(node, ast.Expr) and isinstance(node.value, ast.Constant) and isinstance(node.value.value, str):
            return                                                       # a docstring or a bare string
        if isinstance(node, (ast.Import, ast.ImportFrom)):
            if self.record:
                self.imported(node)
            return
        if isinstance(node, ast.FunctionDef):
            return self.define(node)
        if isinstance(node, ast.ClassDef):
            return self.define_class(node)
        if isinstance(node, (ast.Assign, ast.AnnAssign)):
            return self.module_assign(node, ctx)
        if self.test and isinstance(node, ast.Expr) and isinstance(node.value, ast.Call):
            self.ev(node.value, ctx)
            return
        if self.test and isinstance(node, ast.With):
            return self.with_(node, ctx)
        if isinstance(node, ast.If) and _main_guard(node.test):
            what = {"kernel": "the kernel", "reference": "the reference", "test": "the test"}[self.mode]
            self.flag(node, "construct", f"has an `if __name__ == \"__main__\":` block (lines {node.lineno}-"
                                         f"{node.end_lineno}): drop the block; {self.file} is imported, not run as "
                                         "a script, the harness checks and times " + what + " itself, and a runner "
                                         "that did run the file would run the block's self-test or benchmark too")
            return
        self.refuse_statement(node, module=True)

    def module_assign(self, node: ast.Assign | ast.AnnAssign, ctx: _Fn) -> None:
        targets = node.targets if isinstance(node, ast.Assign) else [node.target]
        if isinstance(node, ast.AnnAssign):
            self.annotation(node.annotation, ctx)
        if node.value is None:
            return
        if self.kernel and isinstance(node, ast.Assign) and self.applies.get(getattr(targets[0], "id", "")) is node:
            self.globals[targets[0].id] = V("apply", self.apply_of(node.value), shared=True)
            return                                                       # layer_norm = LayerNorm.apply
        kind = self.value(node.value, ctx)
        for target in targets:
            if isinstance(target, ast.Name):
                if _dunder(target.id) and target.id not in MODULE_DUNDERS:
                    self.flag(target, "introspection", f"assigns {target.id}: the only dunder names a module may "
                                                       "set are __all__ and __version__")
                self.globals[target.id] = replace(kind, shared=True)
            elif isinstance(target, (ast.Tuple, ast.List)) and all(isinstance(e, ast.Name) for e in target.elts):
                items = kind.items if kind.items is not None and len(kind.items) == len(target.elts) else None
                for i, e in enumerate(target.elts):
                    self.globals[e.id] = replace(items[i] if items else _element(kind), shared=True)
            else:
                self.store_target(target, ctx)

    def define(self, fn: ast.FunctionDef) -> None:
        if fn.name in self.jit:
            return self.define_jit(fn)
        self.decorators(fn)
        ctx = self.function_ctx(fn)
        self.signature(fn, ctx)
        self.stmts(fn.body, ctx)
        self.finish(fn.name, ctx)

    def function_ctx(self, fn: ast.FunctionDef, method: str = "") -> _Fn:
        params = {a.arg for a in _arg_names(fn.args)}
        key = f"{method}.{fn.name}" if method else fn.name
        kinds = self.local_kinds.setdefault(key, {})
        given = self.param_kinds.get(fn.name, {}) if not method else {}
        for a in _arg_names(fn.args):
            if a is fn.args.vararg:
                start = V("container", tensor=given.get(a.arg, VALUE).tensorish, shared=True)
            elif a is fn.args.kwarg:
                start = V("container", shared=True)
            elif method and a is _arg_names(fn.args)[0]:
                start = V("self", method)
            elif fn.name in self.hooks:
                start = V("value", tensor=True, shared=True)      # Triton passes its dict of launch arguments
            else:
                start = replace(given.get(a.arg, VALUE), shared=True)
            kinds[a.arg] = _join(kinds.get(a.arg), start)
        return _Fn(fn.name, kinds, _stored_names(fn.body) | params, params, method=method)

    def finish(self, name: str, ctx: _Fn) -> None:
        if ctx.launched:
            self.launchers.add(name)
        self.calls.setdefault(name, set()).update(ctx.calls)
        self.returns[name] = _join(self.returns.get(name), ctx.returns or VALUE)

    def signature(self, fn: ast.FunctionDef, ctx: _Fn) -> None:
        outer = _Fn("", self.globals, set(), module=True)
        for a in _arg_names(fn.args):
            if _dunder(a.arg):
                self.flag(fn, "introspection", f"names a parameter {a.arg}: dunder names reach into the interpreter")
            if a.annotation is not None:
                self.annotation(a.annotation, outer)
        if fn.returns is not None:
            self.annotation(fn.returns, outer)
        for default in [*fn.args.defaults, *(d for d in fn.args.kw_defaults if d is not None)]:
            if not self.constant(default):
                self.flag(default, "state", f"has the default `{_src(default)}`: defaults must be constants "
                                            "(numbers, strings, None, tuples of them, dtypes); a mutable or computed "
                                            "default keeps state between calls")
            else:
                self.value(default, outer)
        if self.test and (fn.name.startswith("test") or fn.name in self.fixtures):
            given = self.parametrized(fn) | self.fixtures | HELD_FIXTURES
            for a in _arg_names(fn.args):
                if a.arg not in given:
                    self.flag(fn, "io", f"takes the fixture `{a.arg}`: a test's parameters must come from its "
                                        "@pytest.mark.parametrize or from fixtures this file defines (pytest's own "
                                        "fixtures such as monkeypatch and tmp_path reach outside the test)")

    def constant(self, node: ast.expr) -> bool:
        if isinstance(node, ast.Constant):
            return True
        if isinstance(node, ast.Tuple):
            return all(map(self.constant, node.elts))
        if isinstance(node, ast.UnaryOp):
            return self.constant(node.operand)
        if isinstance(node, (ast.Name, ast.Attribute)):       # a module constant or a dtype
            kind = self.ev(node, _Fn("", self.globals, set(), module=True), quiet=True)
            return kind.tag in ("value", "str", "dtype") or (kind.tag == "leaf" and kind.role == "value")
        return False

    def parametrized(self, fn: ast.FunctionDef) -> set[str]:
        names: set[str] = set()
        for d in fn.decorator_list:
            if isinstance(d, ast.Call) and self.decorator_path(d) == "pytest.mark.parametrize" and d.args:
                first = d.args[0]
                if isinstance(first, ast.Constant) and isinstance(first.value, str):
                    names |= {n.strip() for n in first.value.split(",") if n.strip()}
                elif isinstance(first, (ast.Tuple, ast.List)):
                    names |= {e.value for e in first.elts if isinstance(e, ast.Constant) and isinstance(e.value, str)}
        return names

    def decorators(self, fn: ast.FunctionDef) -> None:
        if not fn.decorator_list:
            return
        if self.test:
            ctx = _Fn("", self.globals, set(), module=True)
            for d in fn.decorator_list:
                path = self.decorator_path(d)
                if not (path.startswith("pytest.mark.") or path == "pytest.fixture"):
                    self.flag(d, "decorator", f"decorates {fn.name} with {_src(d)}: a test may use only "
                                              "@pytest.mark.* and @pytest.fixture")
                elif isinstance(d, ast.Call):
                    self.call_args(d, ctx)
            return
        what = "plain functions in kernel.py" if self.kernel else "functions in reference.py"
        jit = " (@triton.jit goes innermost, under @triton.autotune/@triton.heuristics)" if self.kernel and any(
            self.is_jit_decorator(d) for d in fn.decorator_list) else ""
        self.flag(fn.decorator_list[0], "decorator",
                  f"decorates {fn.name} with @{_src(fn.decorator_list[0])}: {what} take no decorators{jit} (a "
                  "decorator can swap or wrap the function the harness calls, or cache its results)")

    # ------------------------------------------------------------------ @triton.jit functions

    def define_jit(self, fn: ast.FunctionDef) -> None:
        *outer, jit = fn.decorator_list
        if isinstance(jit, ast.Call):
            self.keywords(jit, JIT_KEYWORDS, "triton.jit")
            for a in jit.args:
                self.flag(a, "decorator", "passes a positional argument to triton.jit: use its keywords "
                                          f"({', '.join(sorted(JIT_KEYWORDS))})")
        for d in outer:
            path = self.decorator_path(d)
            if path not in ("triton.autotune", "triton.heuristics") or not isinstance(d, ast.Call):
                self.flag(d, "decorator", f"decorates the @triton.jit function {fn.name} with @{_src(d)}: only "
                                          "@triton.autotune(...) and @triton.heuristics(...) may sit on @triton.jit")
                continue
            ctx = _Fn("", self.globals, set(), module=True, decorator=True)
            if path == "triton.autotune":
                self.keywords(d, AUTOTUNE_KEYWORDS, "triton.autotune")
            for a in [*d.args, *(k.value for k in d.keywords)]:
                self.value(a, ctx)
            self.calls.setdefault("", set()).update(ctx.calls)
        names = _stored_names(fn.body) | {a.arg for a in _arg_names(fn.args)}
        outer_ctx = _Fn("", self.globals, set(), module=True)
        for a in _arg_names(fn.args):
            if a.annotation is not None:
                self.annotation(a.annotation, outer_ctx)
        for default in [*fn.args.defaults, *(d for d in fn.args.kw_defaults if d is not None)]:
            self.value(default, outer_ctx)
        for stmt in fn.body:
            self.jit_stmt(stmt, names)

    def keywords(self, call: ast.Call, allowed: frozenset[str], who: str) -> None:
        for k in call.keywords:
            if k.arg is None or k.arg not in allowed:
                self.flag(k.value, "decorator", f"passes {k.arg or '**'}= to {who}: it takes here only "
                                                f"{', '.join(sorted(allowed))} (hooks and timers run code out of "
                                                "sight of the rules)")

    def jit_stmt(self, node: ast.stmt, names: set[str]) -> None:
        if isinstance(node, ast.Expr):
            self.jit_ev(node.value, names)
        elif isinstance(node, (ast.Assign, ast.AugAssign, ast.AnnAssign)):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            if isinstance(node, ast.AnnAssign):
                self.annotation(node.annotation, _Fn("", self.globals, set(), module=True))
            for target in targets:
                for t in ast.walk(target):
                    if isinstance(t, ast.Attribute):
                        self.patch(t)
                    elif isinstance(t, ast.Subscript):
                        self.flag(t, "construct", f"assigns {_src(t)} in @triton.jit: device code writes memory "
                                                  "with tl.store")
                    elif isinstance(t, ast.Name) and _dunder(t.id):
                        self.flag(t, "introspection", f"assigns {t.id}: dunder names reach into the interpreter")
            if node.value is not None:
                self.jit_ev(node.value, names)
        elif isinstance(node, (ast.If, ast.While)):
            self.jit_ev(node.test, names)
            for s in [*node.body, *node.orelse]:
                self.jit_stmt(s, names)
        elif isinstance(node, ast.For):
            self.jit_ev(node.iter, names)
            for s in [*node.body, *node.orelse]:
                self.jit_stmt(s, names)
        elif isinstance(node, ast.Return):
            if node.value is not None:
                self.jit_ev(node.value, names)
        elif isinstance(node, ast.Assert):
            self.jit_ev(node.test, names)
            if node.msg is not None:
                self.jit_ev(node.msg, names)
        elif not isinstance(node, (ast.Pass, ast.Break, ast.Continue)):
            self.refuse_statement(node, jit=True)

    def jit_ev(self, node: ast.expr, names: set[str], base: bool = False) -> V:
        """A @triton.jit body's expression: Triton's business, but nothing that reaches the interpreter,
        torch, or the file's Python launchers. base: node is the start of an attribute chain or a callee."""
        kind = self.jit_kind(node, names)
        if not base and kind.tag in ("module", "func", "class"):
            self.flag(node, "module", f"uses {_src(node)} as a value inside @triton.jit: modules and launcher "
                                      "functions are not device values")
            return VALUE
        return kind

    def jit_kind(self, node: ast.expr, names: set[str]) -> V:
        if isinstance(node, ast.Constant):
            return VALUE
        if isinstance(node, ast.Name):
            if _dunder(node.id):
                self.flag(node, "introspection", f"uses {node.id}, which reaches into the interpreter")
                return VALUE
            if node.id in names:
                return VALUE
            kind = self.globals.get(node.id)
            if kind is not None:
                if kind.tag == "func":
                    self.flag(node, "jit", f"uses {node.id} inside @triton.jit: device code may call only "
                                           "@triton.jit functions, tl.* and libdevice (make it a @triton.jit helper)")
                elif kind.tag == "class":
                    self.flag(node, "class", f"uses the class {node.id} inside @triton.jit")
                return kind
            if node.id in JIT_BUILTINS:
                return V("builtin", node.id)
            self.flag(node, "name", f"uses {node.id} inside @triton.jit, which is not a parameter, a local, a name "
                                    f"this file defines or one of {', '.join(sorted(JIT_BUILTINS))}")
            return VALUE
        if isinstance(node, ast.Attribute):
            if not _public(node.attr):
                self.flag(node, "introspection", f"uses .{node.attr}: names that start with _ are private (they "
                                                 "reach Triton's, torch's or Python's internals)")
                return VALUE
            base = self.jit_ev(node.value, names, base=True)
            if base.tag == "module" and base.path.split(".")[0] == "torch":
                self.flag(node, "torch", f"uses {base.path}.{node.attr} inside @triton.jit: device code uses tl.* "
                                         "(tl.load, tl.store, tl.dot, tl.exp, ...), not torch")
                return VALUE
            if base.tag == "leaf" and base.role == "tl" and node.attr in JIT_VALUE_ATTRIBUTES:
                return VALUE                                        # tl.float32.primitive_bitwidth
            if base.tag in ("module", "leaf"):
                return self.chain(node, base)
            if base.tag == "value" and node.attr in JIT_VALUE_ATTRIBUTES:
                return VALUE
            self.flag(node, "jit", f"uses {_src(node)} inside @triton.jit: device code may use the attributes "
                                   "and methods of Triton tensors, pointers, descriptors and dtypes (.to, .dtype, "
                                   ".element_ty, .load, .store, .reshape, ...)")
            return VALUE
        if isinstance(node, ast.Call):
            func = self.jit_ev(node.func, names, base=True)
            ok = func.tag in ("jit", "builtin", "value") or (func.tag == "leaf" and func.role in ("tl", "query"))
            if not ok:
                self.flag(node, "jit", f"calls {_src(node.func)} inside @triton.jit: device code may call only "
                                       "@triton.jit functions, tl.*, libdevice, math and "
                                       f"{', '.join(sorted(JIT_BUILTINS))}")
            for a in [*node.args, *(k.value for k in node.keywords)]:
                self.jit_ev(a.value if isinstance(a, ast.Starred) else a, names)
            return VALUE
        if isinstance(node, ast.Subscript):
            base = self.jit_ev(node.value, names, base=True)
            if base.tag in ("module", "leaf", "jit", "builtin", "func"):
                self.flag(node, "module", f"indexes {_src(node.value)} inside @triton.jit")
            self.jit_ev(node.slice, names)
            return VALUE
        parts = {ast.BinOp: ("left", "right"), ast.UnaryOp: ("operand",), ast.BoolOp: ("values",),
                 ast.Compare: ("left", "comparators"), ast.IfExp: ("test", "body", "orelse"),
                 ast.Tuple: ("elts",), ast.List: ("elts",), ast.Slice: ("lower", "upper", "step"),
                 ast.JoinedStr: ("values",), ast.FormattedValue: ("value",)}.get(type(node))
        if parts is None:
            self.flag(node, "construct", f"uses {_construct(node)} inside @triton.jit: Triton compiles plain "
                                         "expressions, tl.* calls and @triton.jit calls")
            return VALUE
        for part in parts:
            sub = getattr(node, part)
            for s in (sub if isinstance(sub, list) else [sub]):
                if s is not None:
                    self.jit_ev(s, names)
        return VALUE

    # ------------------------------------------------------------------ classes

    def define_class(self, node: ast.ClassDef) -> None:
        if self.kernel and node.name in self.function_classes and self.classes.get(node.name) is node:
            return self.define_function(node)
        if self.kernel and node.name in self.function_classes and node in self.tree.body:
            return                                       # a second `class X`: function_structure names it
        if not self.reference:
            why = ("kernel.py holds only imports, constants, @triton.jit functions and plain launcher functions, "
                   "and of classes only a module-level `class X(torch.autograd.Function)` holding @staticmethod "
                   "forward and backward (any other class can run code out of sight: __init_subclass__, "
                   "metaclasses, properties, operator methods)" if self.kernel else
                   "a test file holds test functions, helpers and fixtures (a class can run code out of sight: "
                   "__init_subclass__, metaclasses, properties, operator methods)")
            self.flag(node, "class", f"defines class {node.name}: {why}; write functions instead")
            return
        bases = [self.ev(b, _Fn("", self.globals, set(), module=True)) for b in node.bases]
        if len(bases) != 1 or bases[0].role != "nnbase" or node.keywords or node.decorator_list:
            self.flag(node, "class", f"defines class {node.name}: reference.py may define only a `class "
                                     "Model(torch.nn.Module)` with methods (no other bases, metaclasses or "
                                     "decorators)")
            return
        self.own_methods = {s.name for s in node.body if isinstance(s, ast.FunctionDef) and not _dunder(s.name)}
        self.construction = _construction(node)
        for stmt in node.body:
            if isinstance(stmt, ast.Expr) and isinstance(stmt.value, ast.Constant) or _class_constant(stmt):
                continue
            if not isinstance(stmt, ast.FunctionDef) or stmt.decorator_list or (
                    _dunder(stmt.name) and stmt.name != "__init__") or not stmt.args.args:
                self.flag(stmt, "class", f"{_construct(stmt)} in class {node.name}: a Model holds only plain "
                                         "methods (__init__, forward and helpers taking self)")
                continue
            ctx = self.function_ctx(stmt, method=f"{node.name}.{stmt.name}")
            ctx.method = stmt.name
            self.signature(stmt, ctx)
            self.stmts(stmt.body, ctx)

    def define_function(self, node: ast.ClassDef) -> None:
        """kernel.py: `class X(torch.autograd.Function)` with @staticmethod forward(ctx, ...) and backward(ctx, ...),
        walked as launchers; ctx is the one object whose attributes they may set."""
        if node.keywords or node.decorator_list:
            self.flag(node, "class", f"defines class {node.name} with a metaclass, keywords or decorators: "
                                     f"{_FUNCTION_CAN}")
            return
        seen: set[str] = set()
        for stmt in node.body:
            if isinstance(stmt, ast.Expr) and isinstance(stmt.value, ast.Constant) and isinstance(stmt.value.value,
                                                                                                  str):
                continue                                                 # the docstring
            if not self.function_method_ok(stmt) or stmt.name in seen:
                what = (f"method {stmt.name}" + (" (twice)" if stmt.name in seen else "")
                        if isinstance(stmt, (ast.FunctionDef, ast.AsyncFunctionDef)) else
                        "a class attribute" if isinstance(stmt, (ast.Assign, ast.AnnAssign, ast.AugAssign))
                        else _construct(stmt))
                self.flag(stmt, "class", f"defines {what} in class {node.name}: {_FUNCTION_CAN}")
                continue
            seen.add(stmt.name)
            self.function_method(node.name, stmt)
        if "forward" not in seen:
            self.flag(node, "class", f"defines class {node.name} without a forward: {_FUNCTION_CAN}")

    def function_method_ok(self, stmt: ast.stmt) -> bool:
        return (isinstance(stmt, ast.FunctionDef) and stmt.name in FUNCTION_METHODS
                and len(stmt.decorator_list) == 1 and isinstance(stmt.decorator_list[0], ast.Name)
                and stmt.decorator_list[0].id == "staticmethod" and "staticmethod" not in self.globals
                and len([*stmt.args.posonlyargs, *stmt.args.args]) >= 1)

    def function_method(self, cls: str, fn: ast.FunctionDef) -> None:
        """forward(ctx, *inputs) or backward(ctx, *grads): ctx, then tensors (apply passes only positionals)."""
        key = f"{cls}.{fn.name}"
        self.methods.add(key)
        kinds = self.local_kinds.setdefault(key, {})
        first = [*fn.args.posonlyargs, *fn.args.args][0]
        for a in _arg_names(fn.args):
            if a is first:
                start = V("ctx", cls)
            elif a is fn.args.vararg:
                start = V("container", tensor=True, shared=True)
            elif a is fn.args.kwarg or a in fn.args.kwonlyargs:
                start = V("container" if a is fn.args.kwarg else "value", shared=True)
            else:
                start = V("tensor", shared=True)
            kinds[a.arg] = _join(kinds.get(a.arg), start)
        params = {a.arg for a in _arg_names(fn.args)}
        ctx = _Fn(key, kinds, _stored_names(fn.body) | params, params, method=fn.name)
        self.signature(fn, ctx)
        self.stmts(fn.body, ctx)
        self.finish(key, ctx)

    # ------------------------------------------------------------------ statements in functions

    def stmts(self, body: list[ast.stmt], ctx: _Fn) -> None:
        for s in body:
            self.stmt(s, ctx)

    def stmt(self, node: ast.stmt, ctx: _Fn) -> None:
        if isinstance(node, ast.Expr):
            if not (isinstance(node.value, ast.Constant) and isinstance(node.value.value, str)):
                self.ev(node.value, ctx)
        elif isinstance(node, ast.Assign):
            kind = self.bindable(node.value, ctx)
            for target in node.targets:
                self.assign(target, kind, ctx)
        elif isinstance(node, ast.AnnAssign):
            self.annotation(node.annotation, _Fn("", self.globals, set(), module=True))
            if node.value is not None:
                self.assign(node.target, self.bindable(node.value, ctx), ctx)
        elif isinstance(node, ast.AugAssign):
            self.aug_assign(node, ctx)
        elif isinstance(node, (ast.If, ast.While)):
            self.truth(node.test, ctx)
            self.stmts(node.body, ctx)
            self.stmts(node.orelse, ctx)
        elif isinstance(node, ast.For):
            self.assign(node.target, self.iterate(node.iter, ctx), ctx)
            self.stmts(node.body, ctx)
            self.stmts(node.orelse, ctx)
        elif isinstance(node, ast.Return):
            if node.value is not None:
                ctx.returns = _join(ctx.returns, self.value(node.value, ctx))
        elif isinstance(node, ast.Raise):
            self.raise_(node, ctx)
        elif isinstance(node, ast.Assert):
            self.truth(node.test, ctx)
            if node.msg is not None:
                self.value(node.msg, ctx)
        elif (self.test or self.reference) and isinstance(node, ast.With):
            self.with_(node, ctx)
        elif self.test and isinstance(node, ast.FunctionDef) and not node.decorator_list:
            self.nested(node, ctx)                      # testgen's `def r(t)` inside a helper
        elif not isinstance(node, (ast.Pass, ast.Break, ast.Continue)):
            self.refuse_statement(node)

    def nested(self, fn: ast.FunctionDef, ctx: _Fn) -> None:
        params = {a.arg for a in _arg_names(fn.args)}
        inner = _Fn(ctx.name, {p: V("value", shared=True) for p in params}, _stored_names(fn.body) | params, params,
                    parent=ctx)
        inner.calls = ctx.calls
        self.signature(fn, inner)
        self.stmts(fn.body, inner)
        self.bind(fn.name, V("lambda"), ctx)

    def refuse_statement(self, node: ast.stmt, module: bool = False, jit: bool = False) -> None:
        where = " inside @triton.jit" if jit else ""
        if isinstance(node, (ast.Try, getattr(ast, "TryStar", ast.Try))):
            what = "catches exceptions (try/except)" if node.handlers else "uses try/finally"
            self.flag(node, "fallback", f"{what}: code that fails must fail where the reviewers and the harness "
                                        "see it, not fall back to another path; no try blocks")
        elif isinstance(node, (ast.Global, ast.Nonlocal)):
            self.flag(node, "state", f"declares {type(node).__name__.lower()} {', '.join(node.names)}: functions "
                                     "may not rebind names outside themselves (no state kept between calls); "
                                     "return values instead")
        elif isinstance(node, (ast.Import, ast.ImportFrom)):
            self.flag(node, "import", "imports inside a function: imports go at the top of the file, where the "
                                      "rules check them")
        elif isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            self.flag(node, "construct", f"defines {node.name} inside a function: define helpers at module level")
        elif isinstance(node, ast.ClassDef):
            self.define_class(node) if not self.reference else self.flag(
                node, "class", f"defines class {node.name} inside a function: define it at module level")
        elif isinstance(node, (ast.With, ast.AsyncWith)):
            self.flag(node, "construct", f"uses a with block{where}{' at module level' if module else ''}: " +
                      ("reference.py may use `with` only inside its functions, for torch.no_grad() and "
                       "torch.inference_mode()" if self.reference and not jit else
                       f"{self.file} may not enter context managers (they switch streams, devices, grad modes or "
                       "clocks out of sight)"))
            if not jit:
                ctx = _Fn("", self.globals, set(), module=True)
                for item in node.items:
                    self.ev(item.context_expr, ctx)
        elif isinstance(node, ast.Delete):
            self.flag(node, "patch", f"deletes {', '.join(map(_src, node.targets))}: {self.file} may not delete "
                                     "names, items or attributes")
        elif module:
            self.flag(node, "construct", f"{_construct(node)} at module level: {self.file} holds only the "
                                         "docstring, imports, constants and definitions" +
                      (" (and its setup calls)" if self.test else ""))
        else:
            self.flag(node, "construct", f"uses {_construct(node)}{where}: not one of the statements "
                                         f"{self.file} may use (assignments, if, for, while, return, raise, assert)")

    def aug_assign(self, node: ast.AugAssign, ctx: _Fn) -> None:
        value = self.value(node.value, ctx)
        target = node.target
        if isinstance(target, ast.Name):
            current = self.lookup(target, ctx)
            if self.kernel and (current.tensorish or value.tensorish):
                self.flag(node, "torch", f"in-place tensor arithmetic `{_src(node)}` outside @triton.jit: torch "
                                         "would compute the result, not the kernel; " + _KERNEL_CAN)
            elif self.reference and target.id in ctx.params:
                self.flag(node, "state", f"`{_src(node)}` changes the input {target.id} in place (for a tensor, "
                                         f"+= writes into it): write `{target.id} = {target.id} "
                                         f"{_OPS.get(type(node.op), '+')} ...`")
            self.bind(target.id, _join(current, value) if not current.tensorish else current, ctx)
        elif isinstance(target, ast.Subscript):
            self.item_write(target, ctx)
        else:
            self.store_target(target, ctx, value)

    def raise_(self, node: ast.Raise, ctx: _Fn) -> None:
        exc = node.exc
        if exc is None:
            self.flag(node, "fallback", "re-raises with a bare `raise`: raise a new exception with a message")
            return
        func = exc.func if isinstance(exc, ast.Call) else exc
        if not (isinstance(func, ast.Name) and func.id in EXCEPTIONS and self.lookup(func, ctx).tag == "builtin"):
            self.flag(node, "construct", f"raises {_src(exc)}: raise one of {', '.join(sorted(EXCEPTIONS))}")
        if isinstance(exc, ast.Call):
            self.call_args(exc, ctx, tensors=False, who=func.id if isinstance(func, ast.Name) else "raise")
        if node.cause is not None and not (isinstance(node.cause, ast.Constant) and node.cause.value is None):
            self.flag(node, "construct", "raises from another exception: only `from None` is allowed")

    def with_(self, node: ast.With, ctx: _Fn) -> None:
        """Tests: `with pytest.raises(...)`/`pytest.warns(...)`, grad modes, and testgen's `with open(spec.json) as
        f`; reference.py: `with torch.no_grad():` and `with torch.inference_mode():`."""
        for item in node.items:
            expr = item.context_expr
            kind = self.ev(expr, ctx)
            if kind.tag not in (("file", "context") if self.test else ("context",)):
                self.flag(expr, "construct", f"enters {_src(expr)}: " + _WITH_CAN[self.mode])
            if item.optional_vars is not None:
                self.assign(item.optional_vars, kind if kind.tag == "file" else VALUE, ctx)
        self.stmts(node.body, ctx)

    # ------------------------------------------------------------------ binding and writing

    def bind(self, name: str, kind: V, ctx: _Fn) -> None:
        scope = ctx
        while scope is not None and name not in scope.names and not scope.module:
            scope = scope.parent
        if scope is None:
            return
        if scope.module:
            if ctx.module:                      # a module-level statement (a test's `with open(...) as f`)
                self.globals[name] = replace(kind, shared=True)
            return
        scope.locals[name] = _join(scope.locals.get(name), kind)

    def assign(self, target: ast.expr, kind: V, ctx: _Fn) -> None:
        if isinstance(target, ast.Name):
            if _dunder(target.id):
                self.flag(target, "introspection", f"assigns {target.id}: dunder names reach into the interpreter")
            self.bind(target.id, kind, ctx)
        elif isinstance(target, (ast.Tuple, ast.List)):
            items = kind.items if kind.items is not None and len(kind.items) == len(target.elts) else None
            for i, e in enumerate(target.elts):
                if isinstance(e, ast.Starred):
                    self.assign(e.value, V("container", tensor=kind.tensorish), ctx)
                else:
                    self.assign(e, items[i] if items else _element(kind), ctx)
        elif isinstance(target, ast.Subscript):
            self.item_write(target, ctx)
        elif isinstance(target, ast.Starred):
            self.assign(target.value, kind, ctx)
        else:
            self.store_target(target, ctx, kind)

    def store_target(self, target: ast.expr, ctx: _Fn, kind: V = VALUE) -> None:
        if isinstance(target, ast.Attribute):
            if (self.reference and ctx.method in self.construction and isinstance(target.value, ast.Name)
                    and self.lookup(target.value, ctx).tag == "self" and _public(target.attr)):
                return                                                   # self.linear = nn.Linear(...)
            if self.kernel and isinstance(target.value, ast.Name):
                owner = self.lookup(target.value, ctx, quiet=True)
                if owner.tag == "ctx":
                    return self.ctx_store(target, owner.path, kind)
            self.patch(target)
            self.ev(target.value, ctx)
        elif isinstance(target, ast.Subscript):
            self.item_write(target, ctx)
        else:
            self.flag(target, "construct", f"assigns to {_src(target)}")

    def ctx_store(self, target: ast.Attribute, cls: str, kind: V) -> None:
        """kernel.py: `ctx.NAME = value` in a Function's forward or backward, for the other to read."""
        attr = target.attr
        if not _public(attr) or attr in CTX_RESERVED:
            self.flag(target, "patch", f"assigns {_src(target)}: ctx's own attributes (save_for_backward, "
                                       "saved_tensors, needs_input_grad, ... and names starting with _) stay as "
                                       "torch made them; store values under names of your own (ctx.BLOCK_SIZE = ...)")
        elif kind.tag not in ("value", "str", "container", "tensor", "dtype"):
            self.flag(target, "construct", f"stores {_src(target)}, which is not a value or a tensor: {_CTX_CAN}")
        else:
            attrs = self.ctx_attrs.setdefault(cls, {})
            attrs[attr] = _join(attrs.get(attr), replace(kind, shared=True))

    def patch(self, target: ast.Attribute) -> None:
        verb = "deletes" if isinstance(target.ctx, ast.Del) else "assigns"
        self.flag(target, "patch", f"{verb} {_src(target)}: generated code may not change any object's attributes "
                                   "(torch's clock, Triton's launcher, the harness's checks must stay as the "
                                   "runner loaded them); keep values in local names")

    def item_write(self, target: ast.Subscript, ctx: _Fn) -> None:
        self.value(target.slice, ctx)
        base = self.ev(target.value, ctx)
        root = _root(target)
        root_kind = self.lookup(root, ctx, quiet=True) if isinstance(root, ast.Name) else VALUE
        if self.kernel:
            if base.tensorish:
                self.flag(target, "torch", f"writing tensor elements by indexing (`{_src(target)} = ...`) outside "
                                           "@triton.jit: " + _KERNEL_CAN)
            elif base.tag != "container" or base.shared or not isinstance(target.value, ast.Name):
                self.flag(target, "state", f"writes items of {_src(target.value)}, which this function did not "
                                           "visibly make: a launcher may change only a list, dict or set it built "
                                           "itself (module-level names and parameters keep state between calls)")
        elif self.reference:
            if isinstance(root, ast.Name) and root.id in ctx.params and root_kind.tag != "self":
                self.flag(target, "state", f"writes into its input {root.id}: work on a copy (x = x.clone())")
            elif not isinstance(root, ast.Name) or root_kind.shared or root.id not in ctx.names or (
                    _of_self(root_kind) and ctx.method not in self.construction):
                self.flag(target, "state", f"writes items of {_src(target.value)}: reference.py may change only "
                                           "what the function made (out = x.clone(); out[m] = 0), never its inputs, "
                                           "self or module-level names")
        else:
            if isinstance(root, ast.Name) and root_kind.shared and root.id not in ctx.names:
                self.flag(target, "state", f"writes items of the module-level {root.id}: tests share it; copy it "
                                           "first")
            elif base.tag in ("module", "leaf", "dtype", "file"):
                self.flag(target, "patch", f"writes items of {_src(target.value)}")

    # ------------------------------------------------------------------ names and annotations

    def lookup(self, node: ast.Name, ctx: _Fn, quiet: bool = False) -> V:
        name = node.id
        scope = ctx
        while scope is not None:
            if name in scope.names and not scope.module:
                return scope.locals.get(name) or VALUE
            scope = scope.parent
        if name in self.globals:
            return self.globals[name]
        if name in self.builtins:
            return V("builtin", name)
        if not quiet:
            if _dunder(name):
                self.flag(node, "introspection", f"uses {name}, which reaches into the interpreter")
            elif name in KNOWN_BUILTINS:
                rule, why = KNOWN_BUILTINS[name]
                self.flag(node, rule, f"uses {name}() ({why}): it is not one of {self.file}'s builtins "
                                      f"({', '.join(sorted(self.builtins - EXCEPTIONS))})" +
                          ("; allocate with torch.empty and launch a @triton.jit function" if self.kernel else ""))
            elif self.lean and name in _lean_block().binds:
                self.flag(node, "name", f"uses {name}, which belongs to the lean launch block: kernel.py calls "
                                        "_launch(kernel, grid, ...) and uses nothing else of it")
            else:
                self.flag(node, "name", f"uses {name}, which {self.file} does not define: it may use only "
                                        "parameters, locals, names it defines or imports, and the builtins "
                                        f"{', '.join(sorted(self.builtins - EXCEPTIONS))} (and exceptions to raise)")
        return V("refused")

    def annotation(self, node: ast.expr, ctx: _Fn) -> None:
        """A type: names, chains, X[...], X | Y, strings; nothing that runs."""
        for sub in ast.walk(node):
            if isinstance(sub, (ast.Call, ast.Lambda, ast.NamedExpr, ast.comprehension, ast.Await, ast.Yield)):
                self.flag(sub, "construct", f"annotates with {_src(node)}: an annotation must be a type")
                return
        if isinstance(node, ast.Constant):
            return
        if isinstance(node, ast.Subscript):
            self.annotation(node.value, ctx)
            for e in (node.slice.elts if isinstance(node.slice, ast.Tuple) else [node.slice]):
                self.annotation(e, ctx)
        elif isinstance(node, ast.BinOp) and isinstance(node.op, ast.BitOr):
            self.annotation(node.left, ctx)
            self.annotation(node.right, ctx)
        elif isinstance(node, (ast.Tuple, ast.List)):
            for e in node.elts:
                self.annotation(e, ctx)
        elif isinstance(node, (ast.Name, ast.Attribute)):
            self.ev(node, ctx)
        else:
            self.flag(node, "construct", f"annotates with {_src(node)}: an annotation must be a type")

    # ------------------------------------------------------------------ expressions

    def value(self, node: ast.expr, ctx: _Fn) -> V:
        """An expression whose result is kept, passed, returned or put in a container."""
        kind = self.ev(node, ctx)
        return self.storable(node, kind, ctx)

    def storable(self, node: ast.expr, kind: V, ctx: _Fn | None = None) -> V:
        if kind.tag == "refused":
            return VALUE
        if ctx is not None and ctx.decorator and kind.tag in ("lambda", "func"):
            if kind.tag == "func":
                self.hooks.update(kind.path.split("|"))      # Triton calls it with its dict of launch arguments
            return kind
        if kind.tag == "module":
            example = ("driver.active.get_current_target() or driver.active.utils.get_device_properties(i), named "
                       "whole where it is called" if kind.path.startswith("triton.runtime")
                       else f"{kind.path.split('.')[0]}.X(...)")
            self.flag(node, "module", f"uses the module {kind.path} as a value (`{_src(node)}`): a module may only "
                                      f"be the start of an allowed chain such as {example}, never stored, passed, "
                                      "put in a container or returned")
            return VALUE
        if kind.tag == "leaf" and kind.role == "typing":
            self.flag(node, "name", f"uses {kind.path} outside an annotation: typing is for annotations only")
            return VALUE
        if self.test:
            return kind
        if kind.tag == "leaf" and kind.role in ("value", "tl"):
            return VALUE                         # torch.float16, tl.float32, tl.constexpr(...) as an argument
        if kind.tag in ("compiled", "compiledmeta", "ctx", "apply"):
            self.flag(node, "construct", f"uses {_src(node)} as a value: " + {
                "ctx": _CTX_CAN, "apply": f"call {kind.path}.apply(...) or bind it once at module level as the "
                                          f"entry (`op = {kind.path}.apply`)"}.get(kind.tag, _COMPILED_CAN))
            return VALUE
        if kind.tag in ("leaf", "builtin", "func", "jit", "lambda", "class", "mixed"):
            what = {"jit": "the @triton.jit function", "func": "the function", "builtin": "the builtin",
                    "lambda": "the lambda", "class": "the class"}.get(kind.tag, "")
            self.flag(node, "construct", f"uses {what} {_src(node)} as a value: call it (functions passed around "
                                         "hide what is called; a @triton.jit function may be bound to a local name "
                                         "and launched, a lambda may be a launch grid)".replace("  ", " "))
            return VALUE
        return kind

    def bindable(self, node: ast.expr, ctx: _Fn) -> V:
        """The right side of `name = ...` inside a function: a value, or (kernel.py) a @triton.jit function,
        a conditional between them, or a lambda as a launch grid."""
        if isinstance(node, ast.Lambda) and (self.kernel or self.test):
            return self.lambda_(node, ctx)
        if isinstance(node, ast.IfExp):
            self.truth(node.test, ctx)
            a, b = self.bindable(node.body, ctx), self.bindable(node.orelse, ctx)
            return _join(a, b)
        kind = self.ev(node, ctx)
        if kind.tag in ("jit", "compiled", "compiledmeta") and self.kernel or kind.tag == "lambda":
            return kind
        if kind.tag == "func" and not self.test:
            return kind
        return self.storable(node, kind, ctx)

    def ev(self, node: ast.expr, ctx: _Fn, quiet: bool = False) -> V:
        if quiet:
            record, self.record = self.record, False
            try:
                return self.ev(node, ctx)
            finally:
                self.record = record
        method = getattr(self, "e_" + type(node).__name__, None)
        if method is None:
            self.flag(node, "construct", f"uses {_construct(node)}: not one of the expressions {self.file} may use")
            return VALUE
        return method(node, ctx)

    def e_Constant(self, node: ast.Constant, ctx: _Fn) -> V:
        return STR if isinstance(node.value, str) else VALUE

    def e_JoinedStr(self, node: ast.JoinedStr, ctx: _Fn) -> V:
        for part in node.values:
            if isinstance(part, ast.FormattedValue):
                kind = self.value(part.value, ctx)
                if self.kernel and kind.tensorish:
                    self.flag(part, "torch", f"formats the tensor {_src(part.value)} into text, which reads its "
                                             "values outside @triton.jit: format its .shape or .dtype")
                if part.format_spec is not None:
                    self.ev(part.format_spec, ctx)
        return STR

    def e_Name(self, node: ast.Name, ctx: _Fn) -> V:
        kind = self.lookup(node, ctx)
        if kind.tag == "lean":
            self.flag(node, "launch", f"uses {node.id} as a value: the lean launch is only called, "
                                      f"{node.id}(kernel, grid, *args), so the launch it makes is the one checked")
            return V("refused")
        return kind

    def e_Attribute(self, node: ast.Attribute, ctx: _Fn) -> V:
        if not _public(node.attr):
            return self.private(node)
        base = self.ev(node.value, ctx)
        if base.tag == "refused":
            return base
        if base.tag in ("module", "leaf"):
            return self.chain(node, base)
        if base.tag == "tensor":
            if node.attr in TENSOR_ATTRIBUTES:
                return VALUE
            if node.attr in TENSOR_VIEWS or (not self.kernel):
                return TENSOR
            self.flag(node, "torch", f"uses .{node.attr} of the tensor {_src(node.value)}: a launcher may read "
                                     f"only {', '.join(sorted(TENSOR_ATTRIBUTES | TENSOR_VIEWS))} of a tensor and "
                                     f"call its describe/reshape methods; {_KERNEL_CAN}")
            return VALUE
        if base.tag in ("compiled", "compiledmeta", "ctx", "class") and self.kernel:
            return self.kernel_object_attribute(node, base)
        if self.reference and base.tag == "class" and node.attr in self.class_constants.get(base.path, ()):
            return VALUE                          # Block.expansion: a literal in the class's body
        if base.tag in ("func", "jit", "builtin", "lambda", "class", "dtype", "mixed") or (
                base.tag == "file" and node.attr != "read"):
            what = {"jit": "a @triton.jit function may only be launched (name[grid](...))",
                    "dtype": "getattr(torch, name) gives a dtype, to compare or pass"}.get(
                base.tag, "functions and classes carry no attributes a generated file may use")
            self.flag(node, "introspection", f"uses {_src(node)}: {what}")
            return VALUE
        if base.tag == "self" or base == HELD:      # what self holds, and what that holds (a layer's weight)
            return HELD if self.reference else VALUE
        if base.tag == "instance":
            return V("instance", base.path) if node.attr == "forward" else VALUE
        if self.kernel and base.tensor and base.tag == "value" and node.attr not in TENSOR_ATTRIBUTES:
            return TENSOR                        # what may be a tensor's (a descriptor's .base) is one
        return V("value", tensor=base.tensor)

    def kernel_object_attribute(self, node: ast.Attribute, base: V) -> V:
        """An attribute of a compiled kernel, of its metadata, of a Function's ctx, or of a class (Function.apply)."""
        attr = node.attr
        if base.tag == "compiled" and attr in COMPILED_ATTRIBUTES:
            return V("compiledmeta") if attr == "metadata" else VALUE
        if base.tag == "compiledmeta" and attr in COMPILED_METADATA:
            return VALUE
        if base.tag == "ctx":
            if attr in CTX_READS:
                return V("container", tensor=attr == "saved_tensors")
            if attr in self.ctx_attrs.get(base.path, {}):
                return self.ctx_attrs[base.path][attr]
            never = " without calling it" if attr in CTX_METHODS else ", which this Function's methods never set"
            self.flag(node, "introspection", f"reads {_src(node)}{never}: {_CTX_CAN}")
            return VALUE
        if base.tag == "class":
            why = (f"a torch.autograd.Function is used through {base.path}.apply(...) alone, called or bound once "
                   f"at module level as the entry (`op = {base.path}.apply`)" if base.path in self.function_classes
                   else "functions and classes carry no attributes a generated file may use")
            self.flag(node, "introspection", f"uses {_src(node)}: {why}")
            return VALUE
        self.flag(node, "introspection", f"uses {_src(node)}: {_COMPILED_CAN}")
        return VALUE

    def private(self, node: ast.Attribute) -> V:
        rule = "clock" if node.attr == "_sleep" else "introspection"
        self.flag(node, rule, f"uses .{node.attr} (`{_src(node)}`): names that start with _ are private; they reach "
                              "torch's, Triton's or Python's internals" +
                  (" (a dunder such as __class__, __dict__ or __globals__ reaches the interpreter)"
                   if _dunder(node.attr) else ""))
        return VALUE

    def chain(self, node: ast.Attribute, base: V) -> V:
        """base.attr where base is a module or an allowed object of one: on the file's allow-list, or refused."""
        path = f"{base.path}.{node.attr}"
        parent = _node_at(self.space, base.path)
        child = _child(parent, node.attr) if isinstance(parent, dict) else None
        if child is None:
            self.refuse_chain(node, path)
            return V("refused")
        return _kind_of(child, path)

    def refuse_chain(self, node: ast.AST, path: str) -> None:
        root = path.split(".")[0]
        if self.kernel:
            self.refuse_kernel_chain(node, path)
        elif self.reference:
            self.refuse_reference_chain(node, path)
        else:
            self.flag(node, "io" if root in ("os", "sys", "importlib") else "torch",
                      f"uses {path}: a test may use torch's tensor functions, torch.testing, torch.nn.functional, "
                      "pytest, math, itertools, functools, json, the job's modules, and only testgen's "
                      "os.path.dirname/abspath/join, os.environ.get and sys.path.insert(0, HERE)")

    def refuse_kernel_chain(self, node: ast.AST, path: str) -> None:
        root, *rest = path.split(".")
        last = rest[-1] if rest else ""
        if path.startswith("triton.runtime"):
            self.flag(node, "torch", f"uses {path}: {_DRIVER_CAN}")
        elif path.startswith("torch.cuda.") or last in CLOCK_ESCAPES:
            self.flag(node, "clock", f"uses {path}: kernel.py runs on the caller's stream and device, where "
                                     "the harness's clock sees its work (no streams, events, graphs, "
                                     "synchronize or set_device); torch.cuda offers it only "
                                     f"{', '.join(sorted(_TORCH_CUDA_QUERIES))}")
        elif path.startswith("torch.ops"):
            self.flag(node, "torch", f"uses {path} (aten ops called directly): {_KERNEL_CAN}")
        elif path.startswith("torch.Tensor."):
            self.flag(node, "torch", f"uses {path}: torch.Tensor may appear only in annotations and "
                                     f"isinstance(); {_KERNEL_CAN}")
        elif root == "torch":
            self.flag(node, "torch", f"uses {path}: {_KERNEL_CAN}")
        else:
            self.flag(node, "torch" if root == "triton" else "name", f"uses {path}: {_KERNEL_CHAINS}")

    def refuse_reference_chain(self, node: ast.AST, path: str) -> None:
        last = path.split(".")[-1]
        if path.startswith("torch.cuda") or last in CLOCK_ESCAPES or path.startswith(("torch.accelerator",
                                                                                       "torch.cpu")):
            rule, why = "clock", ("the reference is timed as torch eager and must leave the device and the "
                                  "clock alone (no sync, streams, events or sleeps)")
        elif path.startswith(("torch.compile", "torch.jit", "torch.utils", "torch.library", "torch.backends",
                              "torch.hub", "torch.overrides", "torch.fx", "torch.export", "torch.func")):
            rule, why = "torch", "the reference is plain eager PyTorch (no compilers, extensions, op overrides)"
        elif path.startswith(("torch.save", "torch.load", "torch.from_file", "torch.set_", "torch.manual_seed",
                              "torch.seed", "torch.random", "torch.use_deterministic")):
            rule, why = "state", "the reference may not read files or change torch's global settings or RNG"
        else:
            rule, why = "torch", ("reference.py may use torch's tensor functions, dtypes, torch.nn (Module, "
                                  "layers), torch.nn.functional, torch.linalg, torch.fft, torch.special, "
                                  "torch.ops.aten and math")
        self.flag(node, rule, f"uses {path}: {why}")

    def e_Subscript(self, node: ast.Subscript, ctx: _Fn) -> V:
        base = self.ev(node.value, ctx)
        if base.tag == "leaf" and base.role == "typing":
            self.flag(node, "name", f"uses {base.path} outside an annotation: typing is for annotations only")
            return VALUE
        if base.tag == "refused":
            self.value(node.slice, ctx)
            return base
        if self.test and base.tag == "module" and base.path == "os.environ":
            self.value(node.slice, ctx)
            return STR                                   # os.environ["TRITON_INTERPRET"], read only
        base = self.storable(node.value, base, ctx) if base.tag not in ("tensor", "container", "str", "value") \
            else base
        index = self.value(node.slice, ctx)
        if self.kernel and index.tag == "tensor" and not base.tensorish:
            self.flag(node, "torch", f"indexes {_src(node.value)} with a tensor: {_KERNEL_CAN}")
        if base.tag == "tensor":
            return TENSOR
        if base.tag == "container":
            if base.items is not None and isinstance(node.slice, ast.Constant) and isinstance(node.slice.value, int) \
                    and -len(base.items) <= node.slice.value < len(base.items):
                return base.items[node.slice.value]
            if isinstance(node.slice, ast.Slice):
                return V("container", tensor=base.tensor, shared=base.shared)
            return replace(_element(base), shared=base.shared) if not base.tensor else TENSOR
        if base.tag == "str":
            return STR
        return HELD if base == HELD else V("value", tensor=base.tensor, shared=base.shared)

    def e_Slice(self, node: ast.Slice, ctx: _Fn) -> V:
        for part in (node.lower, node.upper, node.step):
            if part is not None:
                self.value(part, ctx)
        return VALUE

    def e_BinOp(self, node: ast.BinOp, ctx: _Fn) -> V:
        left, right = self.value(node.left, ctx), self.value(node.right, ctx)
        if self.kernel and (left.tag == "tensor" or right.tag == "tensor"):
            self.flag(node, "torch", f"tensor arithmetic `{_src(node)}` outside @triton.jit: torch would compute "
                                     f"the result, not the kernel; {_KERNEL_CAN}")
            return TENSOR
        if left.tag == "container" or right.tag == "container":
            return V("container", tensor=left.tensor or right.tensor)
        if "str" in (left.tag, right.tag) and isinstance(node.op, (ast.Add, ast.Mod, ast.Mult)):
            return STR
        return VALUE

    def e_UnaryOp(self, node: ast.UnaryOp, ctx: _Fn) -> V:
        operand = self.value(node.operand, ctx)
        if self.kernel and operand.tensorish:
            self.flag(node, "torch", f"tensor arithmetic `{_src(node)}` outside @triton.jit: {_KERNEL_CAN}")
            return TENSOR
        return VALUE

    def truth(self, node: ast.expr, ctx: _Fn) -> V:
        kind = self.value(node, ctx)
        if self.kernel and kind.tag == "tensor":
            self.flag(node, "torch", f"uses the tensor {_src(node)} as a truth value, which reads its values "
                                     f"outside @triton.jit: test its shape, dtype or `is None`")
        return kind

    def e_BoolOp(self, node: ast.BoolOp, ctx: _Fn) -> V:
        out = None
        for i, v in enumerate(node.values):
            out = _join(out, self.truth(v, ctx) if i < len(node.values) - 1 else self.value(v, ctx))
        return out or VALUE

    def e_Compare(self, node: ast.Compare, ctx: _Fn) -> V:
        kinds = [self.value(e, ctx) for e in [node.left, *node.comparators]]
        if self.kernel:
            for i, op in enumerate(node.ops):
                pair = kinds[i:i + 2]
                if not isinstance(op, (ast.Is, ast.IsNot)) and any(k.tag == "tensor" for k in pair):
                    self.flag(node, "torch", f"a tensor comparison `{_src(node)}` outside @triton.jit: "
                                             f"{_KERNEL_CAN}")
                    break
        return VALUE

    def e_IfExp(self, node: ast.IfExp, ctx: _Fn) -> V:
        return self.bindable(node, ctx)

    def display(self, elts: list[ast.expr], ctx: _Fn) -> V:
        items, starred = [], False
        for e in elts:
            if isinstance(e, ast.Starred):
                starred = True
                items.append(_element(self.value(e.value, ctx)))
            else:
                items.append(self.value(e, ctx))
        return _container(items, keep=not starred)

    def e_Tuple(self, node: ast.Tuple, ctx: _Fn) -> V:
        return self.display(node.elts, ctx)

    def e_List(self, node: ast.List, ctx: _Fn) -> V:
        return self.display(node.elts, ctx)

    def e_Set(self, node: ast.Set, ctx: _Fn) -> V:
        return replace(self.display(node.elts, ctx), items=None)

    def e_Dict(self, node: ast.Dict, ctx: _Fn) -> V:
        kinds = []
        for k, v in zip(node.keys, node.values):
            if k is not None:
                self.value(k, ctx)
            kind = self.value(v, ctx)
            kinds.append(_element(kind) if k is None else kind)
        return _container(kinds, keep=False)

    def comprehension(self, node, ctx: _Fn, parts: list[ast.expr]) -> V:
        names = set()
        for gen in node.generators:
            names |= {n.id for n in ast.walk(gen.target) if isinstance(n, ast.Name)}
        inner = _Fn(ctx.name, {}, names, parent=ctx, decorator=ctx.decorator, method=ctx.method)
        inner.calls = ctx.calls
        for gen in node.generators:
            if gen.is_async:
                self.flag(node, "construct", "uses an async comprehension")
            self.assign(gen.target, self.iterate(gen.iter, inner), inner)
            for cond in gen.ifs:
                self.truth(cond, inner)
        kinds = [self.value(p, inner) for p in parts]
        ctx.launched |= inner.launched
        return _container(kinds[-1:], keep=False)           # a dict comprehension's items are its values

    def e_ListComp(self, node: ast.ListComp, ctx: _Fn) -> V:
        return self.comprehension(node, ctx, [node.elt])

    e_SetComp = e_GeneratorExp = e_ListComp

    def e_DictComp(self, node: ast.DictComp, ctx: _Fn) -> V:
        return self.comprehension(node, ctx, [node.key, node.value])

    def iterate(self, node: ast.expr, ctx: _Fn) -> V:
        """What a for loop over node binds its target to."""
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and self.lookup(
                node.func, ctx, quiet=True).tag == "builtin" and not node.keywords:
            name = node.func.id
            args = [self.value(a.value if isinstance(a, ast.Starred) else a, ctx) for a in node.args]
            if name == "enumerate" and args:
                return V("container", items=(VALUE, _element(args[0])), tensor=args[0].tensorish)
            if name == "zip" and not any(isinstance(a, ast.Starred) for a in node.args):
                return _container([_element(a) for a in args])
            if name == "range":
                self.call_args(node, ctx, tensors=False, who="range")
                return VALUE
            self.ev(node, ctx)
            return _element(_container(args, keep=False)) if name in ("reversed", "sorted", "list", "tuple") \
                else VALUE
        kind = self.value(node, ctx)
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr == "items":
            base = self.ev(node.func.value, ctx, quiet=True)
            return V("container", items=(VALUE, _element(base)), tensor=base.tensorish)
        return _element(kind)

    def e_Lambda(self, node: ast.Lambda, ctx: _Fn) -> V:
        if self.test or ctx.decorator:
            return self.lambda_(node, ctx)
        self.flag(node, "construct", f"uses a lambda (`{_src(node)}`): {self.file} may use a lambda only as a "
                                     "launch grid (kernel[lambda meta: ...](...) or grid = lambda meta: ...) or "
                                     "inside triton.heuristics(...)/triton.autotune(...)" if self.kernel else
                  f"uses a lambda (`{_src(node)}`): {self.file} uses plain functions")
        return VALUE

    def lambda_(self, node: ast.Lambda, ctx: _Fn) -> V:
        params = {a.arg for a in _arg_names(node.args)}
        inner = _Fn(ctx.name, {p: V("value", tensor=True, shared=True) for p in params}, params, params,
                    parent=ctx, decorator=ctx.decorator, method=ctx.method)
        inner.calls = ctx.calls
        for default in [*node.args.defaults, *(d for d in node.args.kw_defaults if d is not None)]:
            self.value(default, ctx)
        self.value(node.body, inner)
        return V("lambda")

    def e_Starred(self, node: ast.Starred, ctx: _Fn) -> V:
        return _element(self.value(node.value, ctx))

    # ------------------------------------------------------------------ calls

    def call_args(self, node: ast.Call, ctx: _Fn, tensors: bool = True, who: str = "") -> list[V]:
        kinds = []
        for a in node.args:
            kind = self.value(a.value if isinstance(a, ast.Starred) else a, ctx)
            kinds.append(kind)
        for k in node.keywords:
            kinds.append(self.value(k.value, ctx))
        if self.kernel and not tensors and any(k.tensorish for k in kinds):
            self.flag(node, "torch", f"passes a tensor to {who}(), which reads or computes on its values outside "
                                     f"@triton.jit: {_KERNEL_CAN}")
        return kinds

    def e_Call(self, node: ast.Call, ctx: _Fn) -> V:
        func = node.func
        if isinstance(func, ast.Subscript):
            return self.launch(node, ctx)
        if isinstance(func, ast.Name) and self.lookup(func, ctx, quiet=True).tag == "lean":
            return self.lean_launch(node, ctx)
        if isinstance(func, ast.Attribute):
            if self.init_handles(node, ctx):
                return VALUE
            if self.super_init(node, ctx):
                self.call_args(node, ctx)
                return VALUE
            if not _public(func.attr) and not self.own_method(func, ctx):
                self.private(func)
                self.call_args(node, ctx)
                return VALUE
            base = self.ev(func.value, ctx)
            if base.tag not in ("module", "leaf"):
                return self.method(node, func, base, ctx)
            callee = self.chain(func, base)
        else:
            callee = self.ev(func, ctx)
        return self.call(node, callee, ctx)

    def own_method(self, func: ast.Attribute, ctx: _Fn) -> bool:
        """reference.py: self._helper(...), a method its own class defines (its body passes these rules)."""
        return self.reference and isinstance(func.value, ast.Name) and func.attr in self.own_methods \
            and self.lookup(func.value, ctx, quiet=True).tag == "self"

    def call(self, node: ast.Call, callee: V, ctx: _Fn) -> V:
        """A call of a name or chain, by what the callee is (a builtin, a function, an allowed chain, ...)."""
        func, tag = node.func, callee.tag
        if tag == "refused":
            self.call_args(node, ctx)
            return callee
        if tag == "builtin":
            return self.call_builtin(node, callee.path, ctx)
        if tag == "func":
            return self.call_function(node, callee, ctx)
        if tag == "apply":
            self.call_args(node, ctx)
            return self.call_apply(node, callee.path, ctx)
        if tag == "leaf":
            return self.call_leaf(node, callee, ctx)
        if tag == "jit":
            self.flag(node, "launch", f"calls the @triton.jit function {_src(func)} directly: launch it with a "
                                      f"grid, {_src(func)}[grid](...)")
        elif tag == "class" and self.reference:
            self.call_args(node, ctx)
            return V("instance", callee.path)
        elif tag == "instance" or callee == HELD:
            self.call_args(node, ctx)
            return VALUE
        elif tag == "lambda" and self.test:
            self.call_args(node, ctx)
            return VALUE
        else:
            self.flag(node, "construct", f"calls {_src(func)}, which is not a function {self.file} may call: it may "
                                         "call the builtins on its list, the allowed chains of its imports and "
                                         "functions it defines" + (" (a lambda only as a launch grid)"
                                                                   if tag == "lambda" else ""))
        self.call_args(node, ctx)
        return VALUE

    def init_handles(self, node: ast.Call, ctx: _Fn) -> bool:
        """kernel.py: `compiled._init_handles()` on a kernel .warmup(...) compiled (it loads the binary, so that
        n_regs and n_spills are known): the one private name a launcher may call."""
        func = node.func
        return (self.kernel and func.attr == "_init_handles" and not node.args and not node.keywords
                and self.ev(func.value, ctx, quiet=True).tag == "compiled")

    def call_apply(self, node: ast.Call, cls: str, ctx: _Fn) -> V:
        """Function.apply(...): runs the Function's forward, which the walk follows like a helper."""
        if ctx.module and not ctx.decorator:
            self.flag(node, "construct", f"calls {cls}.apply at import time: module-level names may hold only "
                                         "constants")
        ctx.calls.add(f"{cls}.forward")
        return self.returns.get(f"{cls}.forward", TENSOR)

    def super_init(self, node: ast.Call, ctx: _Fn) -> bool:
        func = node.func
        return (self.reference and ctx.method == "__init__" and isinstance(func, ast.Attribute)
                and func.attr == "__init__" and isinstance(func.value, ast.Call)
                and isinstance(func.value.func, ast.Name) and func.value.func.id == "super"
                and _plain_super(func.value.args, self.classes) and "super" not in self.globals)

    def lean_launch(self, node: ast.Call, ctx: _Fn) -> V:
        """_launch(kernel, grid, *args, **kwargs): checked as the launch kernel[grid](*args, **kwargs)."""
        if len(node.args) < 2 or any(isinstance(a, ast.Starred) for a in node.args[:2]):
            self.flag(node, "launch", f"calls {_src(node.func)} without a kernel and a grid first: "
                                      f"{_src(node.func)}(kernel, grid, *args, **kwargs)")
            self.call_args(node, ctx)
            return VALUE
        sub = ast.copy_location(ast.Subscript(value=node.args[0], slice=node.args[1], ctx=ast.Load()), node)
        return self.launch(ast.copy_location(ast.Call(func=sub, args=node.args[2:], keywords=node.keywords), node),
                           ctx)

    def launch(self, node: ast.Call, ctx: _Fn) -> V:
        sub = node.func
        kernel = self.ev(sub.value, ctx)
        if kernel.tag == "refused":
            self.value(sub.slice, ctx)
        elif kernel == HELD:                      # self.layers[k](x): a layer of a module list
            self.value(sub.slice, ctx)
            return self.call(node, kernel, ctx)
        elif kernel.tag not in ("jit", "compiled"):
            self.flag(node, "launch", f"calls {_src(sub)}(...): only a @triton.jit function this file defines (or "
                                      "what its .warmup(...) compiled) is launched with [grid]" if self.kernel else
                      f"calls {_src(sub)}(...): {self.file} may not call items of containers")
            self.value(sub.slice, ctx)
        else:
            ctx.launched = True
            if kernel.tag == "compiled" and node.keywords:
                names = ", ".join(f"{k.arg or '**'}=" for k in node.keywords)
                self.flag(node, "clock", f"passes {names} to the compiled kernel {_src(sub.value)}: its launch takes "
                                         "the kernel's arguments positionally and nothing else (stream= would move "
                                         "the work off the caller's stream, where the harness's clock sees it)")
            grid = sub.slice
            if isinstance(grid, ast.Lambda):
                self.lambda_(grid, ctx)
            else:
                kind = self.ev(grid, ctx)
                if kind.tag != "lambda":
                    self.storable(grid, kind)
        self.call_args(node, ctx)
        return VALUE

    def call_function(self, node: ast.Call, callee: V, ctx: _Fn) -> V:
        kinds_pos = [self.value(a.value if isinstance(a, ast.Starred) else a, ctx) for a in node.args]
        kinds_kw = {k.arg: self.value(k.value, ctx) for k in node.keywords}
        if ctx.module and not ctx.decorator and not self.test:
            self.flag(node, "construct", f"calls {_src(node.func)} at import time: module-level names may hold only "
                                         "constants (numbers, strings, tuples, lists and dicts of them, "
                                         "triton.Config(...), tl.constexpr(...))")
        out = None
        for name in callee.path.split("|"):
            fn = self.functions.get(name)
            if fn is None:
                continue
            ctx.calls.add(name)
            params = [a.arg for a in [*fn.args.posonlyargs, *fn.args.args]]
            kinds = self.param_kinds.setdefault(name, {})
            starred = False
            for i, (a, kind) in enumerate(zip(node.args, kinds_pos)):
                starred |= isinstance(a, ast.Starred)
                targets = params[i:] if starred else params[i:i + 1]
                if starred and fn.args.vararg:
                    targets = [*targets, fn.args.vararg.arg]
                elif i >= len(params) and fn.args.vararg:
                    targets = [fn.args.vararg.arg]
                for p in targets:
                    kinds[p] = _join(kinds.get(p), V("container", tensor=kind.tensorish)
                                     if fn.args.vararg and p == fn.args.vararg.arg else kind)
            for key, kind in kinds_kw.items():
                names = [key] if key is not None else params + [a.arg for a in fn.args.kwonlyargs]
                for p in names:
                    kinds[p] = _join(kinds.get(p), kind if key is not None else _element(kind))
            out = _join(out, self.returns.get(name, VALUE))
        return out or VALUE

    def call_builtin(self, node: ast.Call, name: str, ctx: _Fn) -> V:
        if self.test and name == "getattr":
            return self.test_getattr(node, ctx)
        if self.test and name == "open":
            return self.test_open(node, ctx)
        if name == "isinstance":
            if len(node.args) == 2:
                self.value(node.args[0], ctx)
                types = node.args[1].elts if isinstance(node.args[1], ast.Tuple) else [node.args[1]]
                for t in types:
                    kind = self.ev(t, ctx)
                    if not (kind.tag == "builtin" or (kind.tag == "leaf" and kind.role in ("class", "compute",
                                                                                           "nnbase"))):
                        self.storable(t, kind)
            else:
                self.call_args(node, ctx)
            return VALUE
        if name == "map" and node.args:
            first = node.args[0]
            ok = isinstance(first, ast.Name) and first.id in MAP_FUNCTIONS and \
                self.lookup(first, ctx, quiet=True).tag == "builtin"
            if not ok and not self.test:
                self.flag(first, "construct", f"maps {_src(first)} over values: map() may apply only "
                                              f"{', '.join(sorted(MAP_FUNCTIONS))}; write a comprehension")
            iterables = [self.value(a, ctx) for a in node.args[1:]]
            if self.kernel and ok and first.id != "len" and any(k.tensorish for k in iterables):
                self.flag(node, "torch", f"maps {first.id} over a tensor, which reads its values outside "
                                         f"@triton.jit: {_KERNEL_CAN}")
            return V("container")
        if name in EXCEPTIONS:
            self.call_args(node, ctx, tensors=False, who=name)
            return VALUE
        kinds = self.call_args(node, ctx, tensors=name in BUILTINS_TAKING_TENSORS, who=name)
        if name in ("str", "repr", "format"):
            return STR
        if name in ("list", "tuple", "reversed") and kinds == [HELD]:
            return HELD                       # reversed(self.layers): still what __init__ stored
        if name in ("list", "tuple", "set", "frozenset", "dict", "sorted", "reversed"):
            return V("container", tensor=any(k.tensorish for k in kinds))
        if name in ("zip", "enumerate"):
            return V("container", tensor=any(k.tensorish for k in kinds))
        return VALUE

    def call_leaf(self, node: ast.Call, leaf: V, ctx: _Fn) -> V:
        role, path = leaf.role, leaf.path
        if self.test and path == "os.path.abspath" and len(node.args) == 1 and not node.keywords and \
                isinstance(node.args[0], ast.Name) and node.args[0].id == "__file__":
            return V("str", "file")                                      # testgen's HERE
        if self.test and path == "os.path.dirname":
            if len(node.args) == 1 and isinstance(node.args[0], ast.Name) and node.args[0].id == "__file__":
                return V("str", "here")                                  # os.path.dirname(__file__)
            kinds = self.call_args(node, ctx)
            return V("str", "here") if kinds and kinds[0].path == "file" else STR
        if ctx.module and not ctx.decorator and not self.test and role not in ("config", "tl", "query"):
            self.flag(node, "construct", f"calls {path} at import time: module-level names may hold only constants "
                                         "(numbers, strings, tuples, lists and dicts of them" +
                      (", triton.Config(...), tl.constexpr(...))" if self.kernel else ")"))
            self.call_args(node, ctx)
            return VALUE
        if role == "alloc":
            self.fill_value(node, path.rsplit(".", 1)[-1], ctx)
            self.call_args(node, ctx)
            return TENSOR
        if role == "views":
            self.call_args(node, ctx)
            return V("container", tensor=True)
        if role == "describe":
            self.call_args(node, ctx)
            return VALUE
        if role == "tensordesc":                 # a TMA descriptor holds its tensor (desc.base)
            self.call_args(node, ctx)
            return V("value", tensor=True)
        if role in ("query", "tl"):
            self.call_args(node, ctx, tensors=False, who=path)
            return VALUE
        if role == "config":
            for k in node.keywords:
                if k.arg in CONFIG_REFUSED_KEYWORDS or k.arg is None:
                    self.flag(k.value, "decorator", f"passes {k.arg or '**'}= to triton.Config: hooks run code out "
                                                    "of sight of the rules")
            self.call_args(node, ctx, tensors=False, who=path)
            return VALUE
        if role == "compute":
            if self.reference:
                self.in_place(node, path, ctx)
            self.call_args(node, ctx)
            return VALUE
        if role == "jobfn":
            self.call_args(node, ctx)
            last = path.rsplit(".", 1)[-1]
            # reference.Model(...): a module; module_call.module_call(...): the runner's caller of one
            built = self.test and last.isidentifier() and (last[:1].isupper() or path in RUNNER_CALLABLES)
            return V("leaf", f"{path}()", role="jobfn") if built else VALUE
        if role == "syspath":
            return self.test_syspath(node, ctx)
        if role == "importjob":
            if len(node.args) == 1 and not node.keywords and isinstance(node.args[0], ast.Constant) and \
                    node.args[0].value in JOB_MODULES:
                return V("module", node.args[0].value)
            self.flag(node, "io", f"calls {path}({', '.join(map(_src, node.args))}): a test may import by name only "
                                  f"the job's modules ({', '.join(sorted(JOB_MODULES))})")
            return VALUE
        if role == "context":
            self.call_args(node, ctx)
            return V("context")
        what = {"decorator": f"{path} is used only as a decorator (@{path})",
                "class": f"{path} may appear only in annotations and isinstance()",
                "value": f"{path} is not a function",
                "typing": "typing is for annotations only",
                "nnbase": f"{path} is only a base class"}.get(role, f"{path} is not callable here")
        self.flag(node, "torch" if path.startswith("torch") else "construct", f"calls {path}: {what}")
        self.call_args(node, ctx)
        return VALUE

    def fill_value(self, node: ast.Call, name: str, ctx: _Fn) -> None:
        """torch.full(shape, t), full_like(x, t), x.new_full(shape, t), x.fill_(t): a tensor as the fill
        value broadcasts its values into the new tensor, which is compute."""
        position = {"full": 1, "full_like": 1, "new_full": 1, "fill_": 0}.get(name)
        if position is None:
            return
        fill = [k.value for k in node.keywords if k.arg in ("fill_value", "value")]
        fill += node.args[position:position + 1]
        for f in fill:
            if self.ev(f, ctx, quiet=True).tensorish:
                self.flag(node, "torch", f"fills with the tensor {_src(f)}, which copies its values outside "
                                         f"@triton.jit: {_KERNEL_CAN}")

    def in_place(self, node: ast.Call, path: str, ctx: _Fn) -> None:
        """Reference: torch.relu_(x) or out=x on an input, self or a module-level name keeps state."""
        targets = []
        if path.endswith("_") and not path.endswith("__") and node.args:
            targets.append(node.args[0])
        targets += [k.value for k in node.keywords if k.arg == "out"]
        for t in targets:
            root = _root(t)
            if isinstance(root, ast.Name) and (root.id in ctx.params or self.lookup(root, ctx, quiet=True).shared):
                self.flag(node, "state", f"{path}(...) writes into {root.id}, which the function did not make (an "
                                         "input, self or a module-level name): the reference may change only what "
                                         "it made; use the out-of-place form")

    def method(self, node: ast.Call, func: ast.Attribute, base: V, ctx: _Fn) -> V:
        kinds = self.call_args(node, ctx)
        if base.tag == "refused":
            return VALUE
        if not self.kernel:
            return self.torch_method(node, func, base, ctx)
        if base.tag in ("jit", "compiled", "compiledmeta", "ctx", "class"):
            return self.kernel_object_method(node, func, base, ctx)
        name = func.attr
        if base.tag == "tensor":
            if name in TENSOR_DESCRIBE:
                return VALUE
            if name in TENSOR_MAKE:
                self.fill_value(node, name, ctx)
                return TENSOR
            self.flag(node, "torch", f"the tensor method .{name}() on {_src(func.value)} outside @triton.jit: "
                                     f"{_KERNEL_CAN}")
            return TENSOR
        if name in TENSOR_DESCRIBE:
            return VALUE
        if name in TENSOR_MAKE and base.tag in ("value", "container"):
            self.fill_value(node, name, ctx)
            return V("value", tensor=base.tensor)
        if base.tag not in ("value", "container", "str"):
            why = (".warmup(..., grid=(1,)) compiles only a @triton.jit function this file defines" if name == "warmup"
                   else "kernel.py calls methods only on tensors (those that describe, reshape or allocate) and on "
                        "the lists, dicts, sets and strings it makes")
            self.flag(node, "construct", f"calls .{name}() on {_src(func.value)}, which is not a tensor or a plain "
                                         f"value: {why}")
            return VALUE
        return self.plain_method(node, func, base, kinds, ctx)

    def kernel_object_method(self, node: ast.Call, func: ast.Attribute, base: V, ctx: _Fn) -> V:
        """kernel.py: jit.warmup(...), Function.apply(...), ctx.save_for_backward(...); nothing else on these."""
        name, what = func.attr, _src(func.value)
        if base.tag == "jit" and name == "warmup":
            if ctx.module:
                self.flag(node, "construct", f"compiles {what} at import time: call .warmup(...) in the launcher, "
                                             "on the launch's own arguments")
            return V("compiled", base.path)
        if base.tag == "class" and name == "apply" and base.path in self.function_classes:
            return self.call_apply(node, base.path, ctx)
        if base.tag == "ctx" and name in CTX_METHODS:
            return VALUE
        why = {"jit": f"a @triton.jit function is launched ({what}[grid](...)) or compiled ahead of its launch "
                      f"({what}.warmup(..., grid=(1,)))",
               "ctx": _CTX_CAN,
               "class": f"a torch.autograd.Function is used through {what}.apply(...) alone"
               if base.path in self.function_classes else "classes have no methods kernel.py may call"
               }.get(base.tag, _COMPILED_CAN)
        self.flag(node, "construct", f"calls .{name}() on {what}: {why}")
        return VALUE

    def plain_method(self, node: ast.Call, func: ast.Attribute, base: V, kinds: list[V], ctx: _Fn) -> V:
        """kernel.py: a method of a list, dict, set, str or number."""
        name = func.attr
        if name not in (STR_METHODS if base.tag == "str" else PLAIN_METHODS):
            self.flag(node, "method", f"calls .{name}() on {_src(func.value)}: outside @triton.jit kernel.py may "
                                      "call only the tensor methods that describe, reshape or allocate (.size, "
                                      ".stride, .numel, .view, .contiguous, .to, .new_empty, ...) and plain "
                                      "list, dict, set and str methods (.append, .get, .items, .join, .format, "
                                      "...; docs/INTEGRITY.md lists them)")
            return VALUE
        if name in STR_METHODS and any(k.tensorish for k in kinds):
            self.flag(node, "torch", f"passes a tensor to .{name}(), which reads its values into text outside "
                                     "@triton.jit: format its .shape or .dtype")
            return STR
        if name in CONTAINER_ONLY and base.tag not in ("container", "str"):
            self.flag(node, "method", f"calls .{name}() on {_src(func.value)}, which is not visibly a list, "
                                      f"dict, set or str (.{name}() computes on a tensor): call it on a "
                                      "container this function made (`seen = set()`, `[...]`, `{...}`)")
            return VALUE
        if name in MUTATING:
            if base.shared or base.tag != "container":
                self.flag(node, "state", f"calls .{name}() on {_src(func.value)}, which this function did not "
                                         "visibly make: a launcher keeps no state between calls (module-level "
                                         "names and parameters stay as they are); build a new local container")
            elif isinstance(func.value, ast.Name) and any(k.tensorish for k in kinds):
                self.bind(func.value.id, V("container", tensor=True), ctx)
        if base.tag == "str" and name in STR_METHODS - _words("split rsplit partition rpartition splitlines "
                                                              "find rfind count isdigit isalpha isidentifier "
                                                              "startswith endswith"):
            return STR
        if name in ("items", "keys", "values", "copy"):
            return V("container", tensor=base.tensor, elem=base.elem if name != "items" else None)
        if name in ("get", "pop", "setdefault") and base.tag == "container":
            return _element(base)
        return V("value", tensor=base.tensor)

    def torch_method(self, node: ast.Call, func: ast.Attribute, base: V, ctx: _Fn) -> V:
        """reference and tests: torch computes freely; some methods leave the rules' sight."""
        name = func.attr
        refused = REFERENCE_REFUSED_METHODS if self.reference else TEST_REFUSED_METHODS
        if base.tag in ("dtype", "class", "func", "jit", "builtin", "mixed") or (base.tag == "file" and
                                                                               name != "read"):
            self.flag(node, "introspection", f"calls {_src(func)}: it is not an object with methods to call here")
            return VALUE
        if name in refused:
            why = ("copies to the host and waits for the device (the reference is timed as torch eager)"
                   if name in ("item", "tolist", "cpu") else "leaves the rules' sight (numpy, storages, files, "
                                                            "hooks, streams or Python callbacks)")
            self.flag(node, "clock" if name in ("item", "tolist", "cpu", "synchronize", "record_stream") else "io",
                      f"calls .{name}() on {_src(func.value)}: it {why}")
            return VALUE
        if self.reference:
            root = _root(func.value)
            kind = self.lookup(root, ctx, quiet=True) if isinstance(root, ast.Name) else VALUE
            owned = _of_self(kind)
            outside = (owned and ctx.method not in self.construction) or (not owned and kind.shared)
            if outside and ((name.endswith("_") and not name.endswith("__")) or
                            (name in MUTATING and base.tag in ("value", "container"))):
                self.flag(node, "state", f".{name}() changes {root.id}, which the function did not make (an input, "
                                         "self or a module-level name): the reference keeps no state between calls "
                                         "and leaves its inputs as they are; use the out-of-place form")
            if base == HELD and name != "clone":     # a view of a layer's weight is still the module's
                return HELD
        return VALUE

    # ------------------------------------------------------------------ tests: testgen's header idioms

    def test_getattr(self, node: ast.Call, ctx: _Fn) -> V:
        if len(node.args) == 2 and not node.keywords:
            obj = self.ev(node.args[0], ctx)
            name = node.args[1]
            if obj.tag == "module" and obj.path in JOB_MODULES and isinstance(name, ast.Constant) \
                    and isinstance(name.value, str) and _public(name.value):
                return V("leaf", f"{obj.path}.{name.value}", role="jobfn")
            if obj.tag == "module" and obj.path == "torch":
                self.value(name, ctx)
                return V("dtype")
        self.flag(node, "introspection", "uses getattr: a test may call it only as getattr(importlib.import_module("
                                         "\"kernel\"), \"<name>\") or getattr(torch, <dtype name>), the dtype then "
                                         "compared or passed; name attributes directly")
        return VALUE

    def test_open(self, node: ast.Call, ctx: _Fn) -> V:
        ok = 1 <= len(node.args) <= 2 and all(k.arg == "encoding" for k in node.keywords)
        if ok and len(node.args) == 2:
            ok = isinstance(node.args[1], ast.Constant) and node.args[1].value in ("r", "rt")
        if ok:
            path = node.args[0]
            ok = (isinstance(path, ast.Call) and len(path.args) == 2 and not path.keywords
                  and self.ev(path.func, ctx, quiet=True).path == "os.path.join"
                  and self.ev(path.args[0], ctx, quiet=True).path == "here"
                  and isinstance(path.args[1], ast.Constant) and path.args[1].value == "spec.json")
        if not ok:
            self.flag(node, "io", f"opens {_src(node)}: a test may open only its spec.json, for reading: "
                                  "open(os.path.join(HERE, \"spec.json\")) with HERE = "
                                  "os.path.dirname(os.path.abspath(__file__))")
            return VALUE
        return V("file")

    def test_syspath(self, node: ast.Call, ctx: _Fn) -> V:
        args = node.args
        ok = (len(args) == 2 and not node.keywords and isinstance(args[0], ast.Constant) and args[0].value == 0
              and self.ev(args[1], ctx, quiet=True).path == "here")
        if not ok:
            self.flag(node, "io", f"calls {_src(node)}: a test may change sys.path only by sys.path.insert(0, HERE), "
                                  "HERE being its own directory")
        return VALUE



def _main_guard(test: ast.expr) -> bool:
    """`__name__ == "__main__"`, either way round."""
    if not (isinstance(test, ast.Compare) and len(test.ops) == 1 and isinstance(test.ops[0], ast.Eq)):
        return False
    sides = [test.left, test.comparators[0]]
    return any(isinstance(a, ast.Name) and a.id == "__name__" for a in sides) and any(
        isinstance(a, ast.Constant) and a.value == "__main__" for a in sides)


def _construct(node: ast.AST) -> str:
    names = {"Try": "try/except", "With": "a with block", "Lambda": "a lambda", "NamedExpr": "an assignment "
             "expression (:=)", "Yield": "yield", "YieldFrom": "yield from", "Await": "await", "Match": "match",
             "ClassDef": "a class", "FunctionDef": "a nested def", "AsyncFunctionDef": "async def",
             "Global": "global", "Nonlocal": "nonlocal", "Delete": "del", "If": "an if statement", "For": "a for loop",
             "While": "a while loop", "Expr": "an expression statement", "AugAssign": "an augmented assignment",
             "ListComp": "a list comprehension", "SetComp": "a set comprehension", "DictComp": "a dict "
             "comprehension", "GeneratorExp": "a generator expression", "Dict": "a dict", "Set": "a set",
             "Starred": "a starred expression", "Raise": "raise", "Assert": "assert", "Import": "import",
             "ImportFrom": "import"}
    return names.get(type(node).__name__, type(node).__name__)


_OPS = {ast.Add: "+", ast.Sub: "-", ast.Mult: "*", ast.Div: "/", ast.FloorDiv: "//", ast.Mod: "%", ast.Pow: "**"}
