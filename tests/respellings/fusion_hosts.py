"""Two launches that launch_fusion makes one, in host programs written as users write them: starred strides
and shapes (`*x.stride()`, `*x.shape`, `*(a, b)`, `*strides`), keyword dicts (`**cfg`), outputs from
torch.empty_like / new_empty / torch.empty(x.shape, ...), tuple, lambda and cdiv grids (analysis/launch_args.py
maps the starred values onto the kernels' parameters)."""

from __future__ import annotations

from respellings import Spelling

# A residual add then a LayerNorm, both launched with `*x.stride()` of a tensor whose rank `M, N = x.shape` fixes
# (each covering two stride parameters), outputs from torch.empty_like; the host returns the sum and the norm.
RESIDUAL_LAYER_NORM_STARRED = '''
import torch
import triton
import triton.language as tl


@triton.jit
def residual_add(x_ptr, r_ptr, h_ptr, stride_row, stride_col, n_cols, BLOCK: tl.constexpr):
    row = tl.program_id(0)
    cols = tl.arange(0, BLOCK)
    mask = cols < n_cols
    offs = row * stride_row + cols * stride_col
    a = tl.load(x_ptr + offs, mask=mask, other=0.0)
    b = tl.load(r_ptr + offs, mask=mask, other=0.0)
    tl.store(h_ptr + offs, a + b, mask=mask)


@triton.jit
def layer_norm(h_ptr, w_ptr, b_ptr, y_ptr, stride_row, stride_col, n_cols, eps, BLOCK: tl.constexpr):
    row = tl.program_id(0)
    cols = tl.arange(0, BLOCK)
    mask = cols < n_cols
    offs = row * stride_row + cols * stride_col
    h = tl.load(h_ptr + offs, mask=mask, other=0.0).to(tl.float32)
    mean = tl.sum(h, axis=0) / n_cols
    d = tl.where(mask, h - mean, 0.0)
    var = tl.sum(d * d, axis=0) / n_cols
    w = tl.load(w_ptr + cols, mask=mask)
    b = tl.load(b_ptr + cols, mask=mask)
    tl.store(y_ptr + offs, d / tl.sqrt(var + eps) * w + b, mask=mask)


def add_layer_norm(x, residual, weight, bias):
    M, N = x.shape
    h = torch.empty_like(x)
    y = torch.empty_like(x)
    BLOCK = triton.next_power_of_2(N)
    residual_add[(M,)](x, residual, h, *x.stride(), N, BLOCK=BLOCK)
    layer_norm[(M,)](h, weight, bias, y, *h.stride(), N, 1e-5, BLOCK=BLOCK)
    return y, h
'''

RESIDUAL_LAYER_NORM_STARRED_INPUTS = """
x = torch.randn(6, 200)
r = torch.randn(6, 200)
w = torch.randn(200)
b = torch.randn(200)
args = [x, r, w, b]
"""

# Bias+GELU then a row softmax on one `lambda meta: (M,)` grid, outputs from x.new_empty, strides passed as a
# starred tuple literal `*(y.stride(0), out.stride(0))`.
BIAS_GELU_SOFTMAX = '''
import torch
import triton
import triton.language as tl


@triton.jit
def bias_gelu(x_ptr, bias_ptr, y_ptr, x_stride, y_stride, n_cols, BLOCK: tl.constexpr):
    row = tl.program_id(0)
    offs = tl.arange(0, BLOCK)
    mask = offs < n_cols
    v = tl.load(x_ptr + row * x_stride + offs, mask=mask, other=0.0) + tl.load(bias_ptr + offs, mask=mask, other=0.0)
    tl.store(y_ptr + row * y_stride + offs, v * tl.sigmoid(1.702 * v), mask=mask)


@triton.jit
def row_softmax(in_ptr, out_ptr, in_stride, out_stride, n_cols, BLOCK: tl.constexpr):
    row = tl.program_id(0)
    offs = tl.arange(0, BLOCK)
    mask = offs < n_cols
    v = tl.load(in_ptr + row * in_stride + offs, mask=mask, other=-float("inf"))
    v = v - tl.max(v, axis=0)
    e = tl.exp(v)
    tl.store(out_ptr + row * out_stride + offs, e / tl.sum(e, axis=0), mask=mask)


def gelu_softmax(x, bias):
    M, N = x.shape
    y = x.new_empty(x.shape)
    out = x.new_empty((M, N))
    grid = lambda meta: (M,)
    bias_gelu[grid](x, bias, y, *(x.stride(0), y.stride(0)), N, BLOCK=triton.next_power_of_2(N))
    row_softmax[grid](y, out, *(y.stride(0), out.stride(0)), N, BLOCK=triton.next_power_of_2(N))
    return out
'''

BIAS_GELU_SOFTMAX_INPUTS = """
x = torch.randn(6, 200)
bias = torch.randn(200)
args = [x, bias]
"""

# A flat scale kernel on `(triton.cdiv(n, BLOCK_SIZE),)` into `torch.empty(x.shape, ...)`, then a row sum launched
# with `*dims` (a name bound once to a tuple of the sizes): the scale is computed where the sum reads it.
SCALE_THEN_ROW_SUM = '''
import torch
import triton
import triton.language as tl


@triton.jit
def scale_kernel(x_ptr, out_ptr, n_elements, factor, BLOCK_SIZE: tl.constexpr):
    pid = tl.program_id(axis=0)
    offsets = pid * BLOCK_SIZE + tl.arange(0, BLOCK_SIZE)
    mask = offsets < n_elements
    tl.store(out_ptr + offsets, tl.load(x_ptr + offsets, mask=mask) * factor, mask=mask)


@triton.jit
def row_sum_kernel(x_ptr, out_ptr, n_rows, n_cols, stride, BLOCK_N: tl.constexpr):
    row = tl.program_id(axis=0)
    cols = tl.arange(0, BLOCK_N)
    mask = cols < n_cols
    v = tl.load(x_ptr + row * stride + cols, mask=mask, other=0.0)
    tl.store(out_ptr + row, tl.sum(v, axis=0))


def scaled_row_sums(x, factor):
    scaled = torch.empty(x.shape, device=x.device, dtype=x.dtype)
    n = x.numel()
    BLOCK_SIZE = 128
    scale_kernel[(triton.cdiv(n, BLOCK_SIZE),)](x, scaled, n, factor, BLOCK_SIZE=BLOCK_SIZE)
    sums = torch.empty((x.shape[0],), device=x.device, dtype=x.dtype)
    dims = (x.shape[0], x.shape[1])
    row_sum_kernel[(x.shape[0],)](scaled, sums, *dims, scaled.stride(0), BLOCK_N=triton.next_power_of_2(x.shape[1]))
    return sums
'''

SCALE_THEN_ROW_SUM_INPUTS = """
x = torch.randn(6, 200)
args = [x, 0.5]
"""

# Two row kernels in sequence; the first launched with `*strides` (strides = x.stride(), whose extent the host does
# not fix), the parameters after it passed by keyword: the count they leave gives its extent.
SHIFT_THEN_SQUARE_COUNTED = '''
import torch
import triton
import triton.language as tl


@triton.jit
def shift_rows(src, dst, s_row, s_col, d_row, d_col, n_cols, shift, BLOCK: tl.constexpr):
    pid = tl.program_id(0)
    c = tl.arange(0, BLOCK)
    m = c < n_cols
    v = tl.load(src + pid * s_row + c * s_col, mask=m, other=0.0)
    tl.store(dst + pid * d_row + c, v + shift, mask=m)


@triton.jit
def square_rows(src, dst, s_row, d_row, n_cols, BLOCK: tl.constexpr):
    pid = tl.program_id(0)
    c = tl.arange(0, BLOCK)
    m = c < n_cols
    v = tl.load(src + pid * s_row + c, mask=m, other=0.0)
    tl.store(dst + pid * d_row + c, v * v, mask=m)


def shift_square(x, shift):
    rows, cols = x.shape
    mid = torch.empty_like(x)
    out = torch.empty_like(x)
    strides = x.stride()
    block = triton.next_power_of_2(cols)
    shift_rows[(rows,)](x, mid, *strides, mid.stride(0), mid.stride(1), n_cols=cols, shift=shift, BLOCK=block)
    square_rows[(rows,)](mid, out, mid.stride(0), out.stride(0), cols, BLOCK=block)
    return out
'''

SHIFT_THEN_SQUARE_COUNTED_INPUTS = """
x = torch.randn(6, 200)
args = [x, 0.25]
"""

# Two row kernels launched with `**cfg` (cfg = dict(BLOCK=...), bound once) and `**LAUNCH` (a module-level dict of
# launch options).
KEYWORD_DICTS = '''
import torch
import triton
import triton.language as tl

LAUNCH = {"num_warps": 4}


@triton.jit
def mul_rows(a_ptr, b_ptr, c_ptr, stride, n, BLOCK: tl.constexpr):
    r = tl.program_id(0)
    k = tl.arange(0, BLOCK)
    ok = k < n
    a = tl.load(a_ptr + r * stride + k, mask=ok)
    b = tl.load(b_ptr + r * stride + k, mask=ok)
    tl.store(c_ptr + r * stride + k, a * b, mask=ok)


@triton.jit
def l2_normalize(x_ptr, y_ptr, stride, n, BLOCK: tl.constexpr):
    r = tl.program_id(0)
    k = tl.arange(0, BLOCK)
    ok = k < n
    v = tl.load(x_ptr + r * stride + k, mask=ok, other=0.0).to(tl.float32)
    norm = tl.sqrt(tl.sum(v * v, axis=0) + 1e-12)
    tl.store(y_ptr + r * stride + k, v / norm, mask=ok)


def gated_normalize(a, b):
    prod = torch.empty(a.shape, device=a.device, dtype=a.dtype)
    out = torch.empty_like(a)
    n_rows, n = a.shape
    stride = a.stride(0)
    cfg = dict(BLOCK=triton.next_power_of_2(n))
    mul_rows[(n_rows,)](a, b, prod, stride, n, **cfg, **LAUNCH)
    l2_normalize[(n_rows,)](prod, out, stride, n, **cfg, **LAUNCH)
    return out
'''

KEYWORD_DICTS_INPUTS = """
a = torch.randn(6, 200)
b = torch.randn(6, 200)
args = [a, b]
"""

# A bias add then a row max, both launched with `*x.shape` (rank fixed by `M, N = x.shape`), outputs from
# x.new_empty; the host returns the sum too.
STARRED_SHAPE = '''
import torch
import triton
import triton.language as tl


@triton.jit
def add_bias(x_ptr, b_ptr, y_ptr, M, N, stride, BLOCK_N: tl.constexpr):
    row = tl.program_id(0)
    cols = tl.arange(0, BLOCK_N)
    mask = cols < N
    x = tl.load(x_ptr + row * stride + cols, mask=mask)
    tl.store(y_ptr + row * stride + cols, x + tl.load(b_ptr + cols, mask=mask), mask=mask)


@triton.jit
def row_max(x_ptr, out_ptr, M, N, stride, BLOCK_N: tl.constexpr):
    row = tl.program_id(0)
    cols = tl.arange(0, BLOCK_N)
    mask = cols < N
    x = tl.load(x_ptr + row * stride + cols, mask=mask, other=-float("inf"))
    tl.store(out_ptr + row, tl.max(x, axis=0))


def biased_max(x, bias):
    M, N = x.shape
    y = x.new_empty(x.shape)
    out = x.new_empty((M,))
    BLOCK_N = triton.next_power_of_2(N)
    add_bias[(M,)](x, bias, y, *x.shape, y.stride(0), BLOCK_N=BLOCK_N)
    row_max[(M,)](y, out, *x.shape, y.stride(0), BLOCK_N=BLOCK_N)
    return out, y
'''

STARRED_SHAPE_INPUTS = """
x = torch.randn(6, 200)
bias = torch.randn(200)
args = [x, bias]
"""

# A flat add on a `meta["BLOCK_SIZE"]` lambda grid into `torch.empty(x.shape, ...)`, then a LayerNorm launched with
# two starred tuple literals `*(M, N), *(h.stride(0), out.stride(0))`; the host returns both.
FLAT_THEN_LAYER_NORM_TWO_STARRED = '''
import torch
import triton
import triton.language as tl


@triton.jit
def add_flat(a_ptr, b_ptr, c_ptr, n_elements, BLOCK_SIZE: tl.constexpr):
    pid = tl.program_id(0)
    offs = pid * BLOCK_SIZE + tl.arange(0, BLOCK_SIZE)
    mask = offs < n_elements
    tl.store(c_ptr + offs, tl.load(a_ptr + offs, mask=mask) + tl.load(b_ptr + offs, mask=mask), mask=mask)


@triton.jit
def layer_norm_rows(x_ptr, y_ptr, w_ptr, n_rows, n_cols, x_stride, y_stride, eps, BLOCK: tl.constexpr):
    row = tl.program_id(0)
    cols = tl.arange(0, BLOCK)
    mask = cols < n_cols
    x = tl.load(x_ptr + row * x_stride + cols, mask=mask, other=0.0).to(tl.float32)
    mean = tl.sum(x, axis=0) / n_cols
    xc = tl.where(mask, x - mean, 0.0)
    rstd = 1.0 / tl.sqrt(tl.sum(xc * xc, axis=0) / n_cols + eps)
    w = tl.load(w_ptr + cols, mask=mask, other=0.0)
    tl.store(y_ptr + row * y_stride + cols, xc * rstd * w, mask=mask)


def add_layer_norm(x, y, w):
    M, N = x.shape
    h = torch.empty(x.shape, dtype=x.dtype, device=x.device)
    n = x.numel()
    grid = lambda meta: (triton.cdiv(n, meta["BLOCK_SIZE"]),)
    add_flat[grid](x, y, h, n, BLOCK_SIZE=1024)
    out = torch.empty_like(h)
    layer_norm_rows[(M,)](h, out, w, *(M, N), *(h.stride(0), out.stride(0)), 1e-5, BLOCK=triton.next_power_of_2(N))
    return out, h
'''

FLAT_THEN_LAYER_NORM_TWO_STARRED_INPUTS = """
x = torch.randn(6, 200)
y = torch.randn(6, 200)
w = torch.randn(200)
args = [x, y, w]
"""

# A clamp then a row cumsum (a kernel with defaults): `*[...]` literal, `*bounds` counted by the parameters the
# others leave, and `*after`, a name bound once to a tuple whose elements the host reads at the launch.
CLAMP_THEN_CUMSUM = '''
import torch
import triton
import triton.language as tl


@triton.jit
def clamp_rows(src, dst, n_cols, src_stride, dst_stride, low, high, BLOCK: tl.constexpr):
    r = tl.program_id(0)
    c = tl.arange(0, BLOCK)
    keep = c < n_cols
    v = tl.load(src + r * src_stride + c, mask=keep, other=0.0)
    tl.store(dst + r * dst_stride + c, tl.minimum(tl.maximum(v, low), high), mask=keep)


@triton.jit
def cumulative_rows(src, dst, n_cols, src_stride, dst_stride, scale=1.0, BLOCK: tl.constexpr = 256):
    r = tl.program_id(0)
    c = tl.arange(0, BLOCK)
    keep = c < n_cols
    v = tl.load(src + r * src_stride + c, mask=keep, other=0.0)
    tl.store(dst + r * dst_stride + c, tl.cumsum(v, axis=0) * scale, mask=keep)


def clamp_cumsum(x):
    rows, cols = x.shape
    clamped = torch.empty_like(x)
    out = torch.empty_like(x)
    bounds = [-1.0] + [1.0]
    block = triton.next_power_of_2(cols)
    clamp_rows[(rows,)](x, clamped, cols, *[x.stride(0), clamped.stride(0)], *bounds, BLOCK=block)
    after = (cols, clamped.stride(0), out.stride(0))
    cumulative_rows[(rows,)](clamped, out, *after, scale=0.5, BLOCK=block)
    return out
'''

CLAMP_THEN_CUMSUM_INPUTS = """
x = torch.randn(6, 200)
args = [x]
"""

# Two independent row kernels on two tensors, each launched with its own `*t.stride()`: one grid of both.
INDEPENDENT_STARRED = '''
import torch
import triton
import triton.language as tl


@triton.jit
def row_scale(x_ptr, y_ptr, stride_m, stride_n, n_cols, alpha, BLOCK: tl.constexpr):
    m = tl.program_id(0)
    n = tl.arange(0, BLOCK)
    ok = n < n_cols
    v = tl.load(x_ptr + m * stride_m + n * stride_n, mask=ok)
    tl.store(y_ptr + m * stride_m + n * stride_n, v * alpha, mask=ok)


@triton.jit
def row_shift(x_ptr, y_ptr, stride_m, stride_n, n_cols, beta, BLOCK: tl.constexpr):
    m = tl.program_id(0)
    n = tl.arange(0, BLOCK)
    ok = n < n_cols
    v = tl.load(x_ptr + m * stride_m + n * stride_n, mask=ok)
    tl.store(y_ptr + m * stride_m + n * stride_n, v + beta, mask=ok)


def scale_and_shift(a, b):
    M, N = a.shape
    P, Q = b.shape
    out_a = torch.empty_like(a)
    out_b = torch.empty_like(b)
    row_scale[(M,)](a, out_a, *a.stride(), N, 2.0, BLOCK=triton.next_power_of_2(N))
    row_shift[(P,)](b, out_b, *b.stride(), Q, -1.0, BLOCK=triton.next_power_of_2(Q))
    return out_a, out_b
'''

INDEPENDENT_STARRED_INPUTS = """
a = torch.randn(6, 200)
b = torch.randn(4, 100)
args = [a, b]
"""

# Row into row on one grid: the first kernel stores one value a program (a row's mean, unmasked), the second
# reads it back at the same address; the host returns the means too.
ROW_MEAN_THEN_CENTER = '''
import torch
import triton
import triton.language as tl


@triton.jit
def row_mean_kernel(x_ptr, mean_ptr, stride_x, n_cols, BLOCK: tl.constexpr):
    row = tl.program_id(0)
    acc = tl.zeros([BLOCK], dtype=tl.float32)
    for off in range(0, n_cols, BLOCK):
        cols = off + tl.arange(0, BLOCK)
        acc += tl.load(x_ptr + row * stride_x + cols, mask=cols < n_cols, other=0.0)
    tl.store(mean_ptr + row, tl.sum(acc, axis=0) / n_cols)


@triton.jit
def center_kernel(x_ptr, mean_ptr, out_ptr, stride_x, n_cols, BLOCK: tl.constexpr):
    row = tl.program_id(0)
    mu = tl.load(mean_ptr + row)
    for off in range(0, n_cols, BLOCK):
        cols = off + tl.arange(0, BLOCK)
        v = tl.load(x_ptr + row * stride_x + cols, mask=cols < n_cols, other=0.0)
        tl.store(out_ptr + row * stride_x + cols, v - mu, mask=cols < n_cols)


def center_rows(x):
    n_rows, n_cols = x.shape
    mean = torch.empty(n_rows, device=x.device, dtype=torch.float32)
    out = torch.empty_like(x)
    row_mean_kernel[(n_rows,)](x, mean, x.stride(0), n_cols, BLOCK=256)
    center_kernel[(n_rows,)](x, mean, out, x.stride(0), n_cols, BLOCK=256)
    return out, mean
'''

ROW_MEAN_THEN_CENTER_INPUTS = """
x = torch.randn(6, 600)
args = [x]
"""

SPELLINGS = [
    Spelling("fusion", name, source, entry, inputs, ("launch_fusion", "divisibility_hints"))
    for name, source, entry, inputs in (
        ("residual_layer_norm_starred_strides", RESIDUAL_LAYER_NORM_STARRED, "add_layer_norm", RESIDUAL_LAYER_NORM_STARRED_INPUTS),
        ("bias_gelu_then_softmax", BIAS_GELU_SOFTMAX, "gelu_softmax", BIAS_GELU_SOFTMAX_INPUTS),
        ("scale_then_row_sum", SCALE_THEN_ROW_SUM, "scaled_row_sums", SCALE_THEN_ROW_SUM_INPUTS),
        ("starred_name_counted", SHIFT_THEN_SQUARE_COUNTED, "shift_square", SHIFT_THEN_SQUARE_COUNTED_INPUTS),
        ("keyword_dicts", KEYWORD_DICTS, "gated_normalize", KEYWORD_DICTS_INPUTS),
        ("starred_shape_new_empty", STARRED_SHAPE, "biased_max", STARRED_SHAPE_INPUTS),
        ("two_starred_literals", FLAT_THEN_LAYER_NORM_TWO_STARRED, "add_layer_norm", FLAT_THEN_LAYER_NORM_TWO_STARRED_INPUTS),
        ("starred_lists_and_defaults", CLAMP_THEN_CUMSUM, "clamp_cumsum", CLAMP_THEN_CUMSUM_INPUTS),
        ("independent_starred_strides", INDEPENDENT_STARRED, "scale_and_shift", INDEPENDENT_STARRED_INPUTS),
        ("row_mean_then_center", ROW_MEAN_THEN_CENTER, "center_rows", ROW_MEAN_THEN_CENTER_INPUTS),
    )
]
