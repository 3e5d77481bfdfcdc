"""The APIs nprobe.torch captures, by the name prefix msprobe gives them.

The coverage reference is msprobe's list of wrapped ops
(support_wrap_ops.yaml: functional, tensor, torch); what the installed torch
lacks is skipped. In-place methods (`add_`, `mul_`, `__iadd__`, ...) are
TENSOR_INPLACE (and FUNCTIONAL_INPLACE, TORCH_INPLACE for the functions that
write into their first argument: `F.relu_`, `torch.sigmoid_`): their input is
recorded before the write, their output after. MSPROBE_ONLY_SKIPPED names
what msprobe wraps and nprobe leaves alone on purpose. docs/TORCH.md has the
coverage table (scripts/tools/torch_coverage.py makes it).
"""

FUNCTIONAL = """
adaptive_avg_pool1d adaptive_avg_pool2d adaptive_avg_pool3d adaptive_max_pool1d
adaptive_max_pool2d adaptive_max_pool3d affine_grid alpha_dropout avg_pool1d avg_pool2d
avg_pool3d batch_norm bilinear binary_cross_entropy binary_cross_entropy_with_logits celu
conv1d conv2d conv3d conv_transpose1d conv_transpose2d conv_transpose3d cosine_embedding_loss
cosine_similarity cross_entropy ctc_loss dropout dropout1d dropout2d dropout3d elu embedding
embedding_bag feature_alpha_dropout fold fractional_max_pool2d fractional_max_pool3d gaussian_nll_loss
gelu glu grid_sample group_norm gumbel_softmax hardshrink hardsigmoid hardswish hardtanh
hinge_embedding_loss huber_loss instance_norm interpolate kl_div l1_loss layer_norm leaky_relu
linear local_response_norm log_softmax logsigmoid lp_pool1d lp_pool2d margin_ranking_loss
max_pool1d max_pool2d max_pool3d max_unpool1d max_unpool2d max_unpool3d mish mse_loss
multi_head_attention_forward multi_margin_loss multilabel_margin_loss multilabel_soft_margin_loss
nll_loss normalize one_hot pad pairwise_distance pdist pixel_shuffle pixel_unshuffle poisson_nll_loss
prelu relu relu6 rrelu scaled_dot_product_attention selu sigmoid silu smooth_l1_loss soft_margin_loss
softmax softmin softplus softshrink softsign tanh tanhshrink threshold triplet_margin_loss
triplet_margin_with_distance_loss unfold upsample upsample_bilinear upsample_nearest
adaptive_max_pool1d_with_indices adaptive_max_pool2d_with_indices adaptive_max_pool3d_with_indices
channel_shuffle conv_tbc fractional_max_pool2d_with_indices fractional_max_pool3d_with_indices
lp_pool3d max_pool1d_with_indices max_pool2d_with_indices max_pool3d_with_indices
rms_norm linear_cross_entropy native_channel_shuffle
""".split()

# Functionals that write into their first argument.
FUNCTIONAL_INPLACE = """
celu_ elu_ hardtanh_ leaky_relu_ relu_ rrelu_ selu_ threshold_
""".split()

TORCH = """
abs acos acosh add addbmm addcdiv addcmul addmm addmv addr all allclose amax amin any arange
argmax argmin argsort asin asinh atan atan2 atanh baddbmm bernoulli bincount bitwise_and
bitwise_not bitwise_or bitwise_xor bmm broadcast_tensors broadcast_to cartesian_prod cat cdist
ceil chunk clamp clamp_max clamp_min clip clone conv1d conv2d conv3d conv_transpose1d
conv_transpose2d conv_transpose3d cos cosh cosine_similarity count_nonzero cross cummax cummin
cumprod cumsum diag diag_embed diagonal diff dist div divide dot dropout dsplit dstack einsum
embedding eq equal erf erfc erfinv exp exp2 expm1 flatten flip fliplr flipud floor floor_divide
fmax fmin fmod frac full_like gather ge gelu ger group_norm gt hardshrink hsplit hstack
index_add index_copy index_fill index_select inner instance_norm inverse isclose isfinite isinf
isnan isneginf isposinf kron kthvalue layer_norm le lerp lgamma log log10 log1p log2
log_softmax logaddexp logaddexp2 logical_and logical_not logical_or logical_xor logit logsumexp
lt masked_fill masked_scatter masked_select matmul max maximum mean median min minimum mm
moveaxis movedim msort mul multinomial multiply mv nan_to_num nanmean nanmedian nansum
narrow ne neg negative nonzero norm normal ones_like outer permute pinverse pow prod
rand_like randint_like randn_like ravel reciprocal relu remainder renorm repeat_interleave
reshape roll rot90 round rsqrt scatter scatter_add select selu sigmoid sign sin sinh slice_scatter
softmax sort split sqrt square squeeze stack std std_mean sub subtract sum svd swapaxes swapdims
t take take_along_dim tan tanh tensor_split tensordot tile topk trace transpose trapz tril triu
true_divide trunc unbind unique unique_consecutive unsqueeze var var_mean vsplit vstack where
xlogy zeros_like
absolute adaptive_avg_pool1d adaptive_max_pool1d affine_grid_generator alpha_dropout aminmax
angle arccos arccosh arcsin arcsinh arctan arctan2 arctanh argwhere atleast_1d atleast_2d
atleast_3d avg_pool1d bartlett_window batch_norm_backward_elemt batch_norm_backward_reduce
batch_norm_elemt batch_norm_gather_stats batch_norm_gather_stats_with_counts batch_norm_stats
batch_norm_update_stats bilinear binary_cross_entropy_with_logits binomial blackman_window
block_diag bucketize celu chain_matmul channel_shuffle cholesky cholesky_inverse cholesky_solve
column_stack combinations concat concatenate constant_pad_nd conv_tbc convolution copysign cov
cosine_embedding_loss ctc_loss cumulative_trapezoid deg2rad det diagflat diagonal_scatter
digamma embedding_bag eye feature_alpha_dropout feature_dropout fix float_power frexp
frobenius_norm full gcd geqrf greater greater_equal grid_sampler grid_sampler_2d
grid_sampler_3d gru gru_cell hamming_window hann_window heaviside hinge_embedding_loss histc
histogram histogramdd hypot i0 igamma igammac index_put isin istft kaiser_window kl_div lcm
ldexp less less_equal linspace logcumsumexp logdet logspace lstm lstm_cell lu_solve lu_unpack
margin_ranking_loss matrix_exp matrix_power max_pool1d max_pool1d_with_indices max_pool2d
max_pool3d mode mvlgamma nanquantile narrow_copy native_batch_norm native_group_norm
native_layer_norm native_norm nextafter norm_except_dim not_equal nuclear_norm
pairwise_distance pdist pixel_shuffle pixel_unshuffle poisson poisson_nll_loss polar polygamma
prelu qr quantile rad2deg range real resolve_neg row_stack rrelu rsub scalar_tensor
searchsorted sgn signbit sinc slogdet split_with_sizes stft threshold tril_indices
triplet_margin_loss triu_indices unflatten unsafe_chunk unsafe_split unsafe_split_with_sizes
vander vdot
batch_norm bitwise_left_shift bitwise_right_shift conj_physical corrcoef gradient index_reduce
isreal lu meshgrid native_dropout nonzero_static orgqr ormqr positive put triangular_solve
""".split()

# torch functions that write into their first argument.
TORCH_INPLACE = """
abs_ acos_ acosh_ addmv_ alpha_dropout_ arccos_ arccosh_ arcsin_ arcsinh_ arctan_ arctanh_
asin_ asinh_ atan_ atanh_ ceil_ celu_ clamp_ clamp_max_ clamp_min_ clip_ cos_ cosh_ deg2rad_
dropout_ embedding_renorm_ erf_ erfc_ exp2_ exp_ expm1_ feature_alpha_dropout_
feature_dropout_ fill_ fix_ floor_ frac_ gcd_ i0_ index_put_ lcm_ ldexp_ log10_ log1p_ log2_
log_ logit_ nan_to_num_ neg_ negative_ rad2deg_ reciprocal_ relu_ round_ rrelu_ rsqrt_ selu_
sigmoid_ sin_ sinc_ sinh_ sqrt_ square_ tan_ tanh_ threshold_ trunc_ xlogy_
""".split()

TENSOR = """
__add__ __and__ __bool__ __div__ __eq__ __ge__ __getitem__ __gt__ __invert__ __le__ __lshift__ __lt__ __matmul__ __mod__ __mul__ __ne__ __neg__ __or__ __pow__
__radd__ __rdiv__ __rmatmul__ __rmul__ __rpow__ __rshift__ __rsub__ __rtruediv__ __setitem__
__sub__ __truediv__ __xor__
abs acos add addbmm addcdiv addcmul addmm addmv addr all amax amin any argmax argmin argsort
asin atan atan2 baddbmm bernoulli bfloat16 bmm broadcast_to ceil chunk clamp clamp_max clamp_min
clip clone contiguous cos cosh count_nonzero cpu cuda cumprod cumsum diag diagonal diff div
divide dot double eq erf exp expand expand_as expm1 flatten flip float floor fmod frac gather
ge gt half index_add index_fill index_select int isnan le lerp log log10 log1p log2 logical_and
logical_not logical_or logsumexp long lt masked_fill masked_scatter masked_select matmul max
maximum mean median min minimum mm mul multiply mv nan_to_num narrow ne neg nonzero norm permute
pow prod reciprocal relu remainder repeat repeat_interleave reshape reshape_as roll round rsqrt
scatter scatter_add select sigmoid sign sin sinh softmax sort split sqrt square squeeze std sub
subtract sum t tan tanh tile to topk transpose tril triu true_divide trunc type type_as unbind
unflatten unfold unsqueeze var view view_as where
__floordiv__ __rmod__ __ror__ __rxor__ absolute acosh adjoint allclose aminmax angle arccos
arccosh arcsin arcsinh arctan arctan2 arctanh argwhere asinh atanh bincount bitwise_and
bitwise_left_shift bitwise_not bitwise_or bitwise_right_shift bitwise_xor bool byte cfloat char
cholesky cholesky_inverse cholesky_solve conj_physical copysign corrcoef cov cummax cummin
deg2rad det diag_embed diagflat diagonal_scatter digamma dist dsplit equal erfc erfinv exp2 fix
fliplr flipud float_power floor_divide fmax fmin frexp gcd geqrf ger greater greater_equal
hardshrink heaviside histc histogram hsplit hypot i0 igamma igammac index_copy index_put inner
inverse isclose isfinite isinf isneginf isposinf isreal kron kthvalue lcm ldexp less less_equal
lgamma log_softmax logaddexp logaddexp2 logcumsumexp logdet logical_xor logit lu lu_solve
matrix_exp matrix_power mode moveaxis movedim msort multinomial mvlgamma nanmean nanmedian
nanquantile nansum narrow_copy negative nextafter not_equal orgqr ormqr outer pinverse
polygamma prelu qr quantile rad2deg ravel renorm resolve_neg rot90 sgn short signbit sinc
slice_scatter slogdet split_with_sizes stft sum_to_size svd swapaxes swapdims take
take_along_dim tensor_split triangular_solve unique unique_consecutive unsafe_chunk unsafe_split
unsafe_split_with_sizes vdot vsplit xlogy
""".split()

# In-place methods: they write into their first argument (self).
TENSOR_INPLACE = """
__iadd__ __iand__ __idiv__ __ilshift__ __imod__ __imul__ __ior__ __irshift__ __isub__
__itruediv__ __ixor__ __setitem__
abs_ acos_ add_ addbmm_ addcdiv_ addcmul_ addmm_ addmv_ addr_ asin_ atan2_ atan_ baddbmm_
bernoulli_ ceil_ clamp_ clamp_max_ clamp_min_ clip_ copy_ cos_ cosh_ cumsum_ div_ divide_ eq_
erf_ exp_ expm1_ fill_ fill_diagonal_ floor_ fmod_ frac_ ge_ gt_ index_add_ index_copy_
index_fill_ le_ lerp_ log10_ log1p_ log2_ log_ lt_ masked_fill_ masked_scatter_ mul_ multiply_
nan_to_num_ ne_ neg_ normal_ pow_ reciprocal_ relu_ remainder_ renorm_ round_ rsqrt_ scatter_
scatter_add_ sigmoid_ sign_ sin_ sinh_ sqrt_ square_ sub_ subtract_ tan_ tanh_ tril_ triu_
true_divide_ trunc_ uniform_ zero_
__ifloordiv__ __ipow__ absolute_ acosh_ arccos_ arccosh_ arcsin_ arcsinh_ arctan2_ arctan_
arctanh_ asinh_ atanh_ bitwise_and_ bitwise_left_shift_ bitwise_not_ bitwise_or_
bitwise_right_shift_ bitwise_xor_ cauchy_ copysign_ cumprod_ deg2rad_ digamma_ erfc_ erfinv_
exp2_ exponential_ fix_ float_power_ floor_divide_ gcd_ geometric_ greater_ greater_equal_
heaviside_ hypot_ i0_ igamma_ igammac_ index_put_ lcm_ ldexp_ less_ less_equal_ lgamma_
log_normal_ logical_and_ logical_not_ logical_or_ logical_xor_ logit_ mvlgamma_ negative_
nextafter_ not_equal_ polygamma_ put_ rad2deg_ sgn_ sinc_ squeeze_ swapdims_ t_ transpose_
unsqueeze_ xlogy_
""".split()

# Methods whose result is not a tensor to follow (Python protocol hooks).
TENSOR_SKIP = {"__bool__"}

# Ops whose outputs alias their input (views) or may be the input itself
# (`contiguous`, `to`, `float`, ... when there is nothing to do): their
# inputs and outputs are not routed through the package's identity
# functions (an alias of an alias would hide a later in-place write from
# autograd); their backward comes from a hook on the node that made the
# output. An op found at run time to return a view of its input joins them.
ALIAS = set("""
view view_as reshape reshape_as __getitem__ split chunk unbind transpose t permute expand
expand_as squeeze unsqueeze flatten unflatten narrow select diagonal unfold contiguous to
float double half bfloat16 int long type type_as cpu cuda broadcast_to broadcast_tensors
tensor_split hsplit vsplit dsplit movedim moveaxis swapaxes swapdims ravel detach
adjoint bool byte char short split_with_sizes unsafe_chunk unsafe_split unsafe_split_with_sizes
atleast_1d atleast_2d atleast_3d real resolve_neg
""".split())

# What msprobe 26 wraps and nprobe does not, on purpose (reported by
# scripts/tools/torch_coverage.py): not tensor-valued or not a computation
# (`numpy`, `stride`, `__nonzero__`, `q_zero_point`), a Python callable as
# argument (`map_`, `map2_`), storage resizing (`resize_`, `resize_as_`),
# removed ops that only raise in torch 2.x (`eig`, `lstsq`, `solve`,
# `symeig`, `matrix_rank`), sparse operands (`smm`, `spmm`, `hspmm`,
# `sspaddmm`, `saddmm`, `dsmm`, `hsmm`, `sparse_coo_tensor`), quantization
# (`choose_qparams_optimized`),
# autograd internals and fused optimizer kernels whose in-place targets are
# lists (`_softmax_backward_data`, `_fused_adamw_`, `_foreach_norm`, the
# other private names), and the collectives of torch.distributed (async
# handles and in-place writes that land after the call; DDP's own reducer
# does not call them).
MSPROBE_ONLY_SKIPPED = set("""
numpy stride __nonzero__ q_zero_point map_ map2_ resize_ resize_as_ smm spmm hspmm sspaddmm
saddmm dsmm hsmm sparse_coo_tensor choose_qparams_optimized eig lstsq solve symeig matrix_rank
""".split())
