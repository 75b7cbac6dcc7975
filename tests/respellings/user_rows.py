"""Row kernels written as users write them, each computing something else over rows (a cross-entropy, a
softmax backward, a LayerNorm backward, an RMSNorm with a residual output, a row max walked forwards or backwards,
a softmax over a block of rows): the row rewrites must read what each computes. Rows of 37 columns in blocks of
16 where a loop walks them (three blocks, the last one partly masked), 5 rows (fewer than the interpreter's SMs
take: split_rows splits them)."""

from __future__ import annotations

from respellings import Spelling

# Cross-entropy forward: a pass for the row's max, a pass for the sum of exp(x - max), the loss and the
# logsumexp stored per row, the label's logit read by a scalar load.
CROSS_ENTROPY_LSE = '''
import torch
import triton
import triton.language as tl


@triton.jit
def xent_fwd(logits, labels, losses, lse_out, stride, n_classes, CHUNK: tl.constexpr):
    r = tl.program_id(0)
    base = logits + r * stride
    m = -float("inf")
    for c0 in range(0, n_classes, CHUNK):
        idx = c0 + tl.arange(0, CHUNK)
        v = tl.load(base + idx, mask=idx < n_classes, other=-float("inf")).to(tl.float32)
        m = tl.maximum(m, tl.max(v, axis=0))
    s = 0.0
    for c0 in range(0, n_classes, CHUNK):
        idx = c0 + tl.arange(0, CHUNK)
        v = tl.load(base + idx, mask=idx < n_classes, other=-float("inf")).to(tl.float32)
        s += tl.sum(tl.exp(v - m), axis=0)
    lse = m + tl.log(s)
    y = tl.load(labels + r)
    picked = tl.load(base + y).to(tl.float32)
    tl.store(losses + r, lse - picked)
    tl.store(lse_out + r, lse)


def cross_entropy(x, t):
    rows, n = x.shape
    loss = torch.empty(rows, dtype=torch.float32)
    lse = torch.empty(rows, dtype=torch.float32)
    xent_fwd[(rows,)](x, t, loss, lse, x.stride(0), n, CHUNK=16)
    return loss, lse
'''

# Softmax backward: the row's sum of dy * y, then dx = y * (dy - sum) stored block by block.
SOFTMAX_BACKWARD = '''
import torch
import triton
import triton.language as tl


@triton.jit
def softmax_backward_kernel(dy_ptr, y_ptr, dx_ptr, ncols, stride, BLOCK: tl.constexpr):
    pid = tl.program_id(0)
    dot = tl.zeros([BLOCK], dtype=tl.float32)
    for start in range(0, ncols, BLOCK):
        cols = start + tl.arange(0, BLOCK)
        mask = cols < ncols
        dy = tl.load(dy_ptr + pid * stride + cols, mask=mask, other=0.0)
        y = tl.load(y_ptr + pid * stride + cols, mask=mask, other=0.0)
        dot += dy * y
    total = tl.sum(dot, axis=0)
    for start in range(0, ncols, BLOCK):
        cols = start + tl.arange(0, BLOCK)
        mask = cols < ncols
        dy = tl.load(dy_ptr + pid * stride + cols, mask=mask, other=0.0)
        y = tl.load(y_ptr + pid * stride + cols, mask=mask, other=0.0)
        tl.store(dx_ptr + pid * stride + cols, y * (dy - total), mask=mask)


def softmax_backward(dy, y):
    dx = torch.empty_like(dy)
    softmax_backward_kernel[(dy.shape[0],)](dy, y, dx, dy.shape[1], dy.stride(0), BLOCK=16)
    return dx
'''

# LayerNorm backward dx: two sums per row (of xhat * w * dy and of w * dy, each a vector of lanes), then dx.
LAYERNORM_BACKWARD_DX = '''
import torch
import triton
import triton.language as tl


@triton.jit
def layer_norm_dx(DX, DY, X, W, Mean, Rstd, N, stride, BLOCK_N: tl.constexpr):
    row = tl.program_id(0)
    mean = tl.load(Mean + row)
    rstd = tl.load(Rstd + row)
    c1 = tl.zeros([BLOCK_N], dtype=tl.float32)
    c2 = tl.zeros([BLOCK_N], dtype=tl.float32)
    for off in range(0, N, BLOCK_N):
        cols = off + tl.arange(0, BLOCK_N)
        m = cols < N
        x = tl.load(X + row * stride + cols, mask=m, other=0.0)
        dy = tl.load(DY + row * stride + cols, mask=m, other=0.0)
        w = tl.load(W + cols, mask=m, other=0.0)
        xhat = tl.where(m, (x - mean) * rstd, 0.0)
        wdy = w * dy
        c1 += xhat * wdy
        c2 += wdy
    a = tl.sum(c1, axis=0) / N
    b = tl.sum(c2, axis=0) / N
    for off in range(0, N, BLOCK_N):
        cols = off + tl.arange(0, BLOCK_N)
        m = cols < N
        x = tl.load(X + row * stride + cols, mask=m, other=0.0)
        dy = tl.load(DY + row * stride + cols, mask=m, other=0.0)
        w = tl.load(W + cols, mask=m, other=0.0)
        xhat = (x - mean) * rstd
        tl.store(DX + row * stride + cols, (w * dy - (xhat * a + b)) * rstd, mask=m)


def layer_norm_backward(dy, x, w, mean, rstd):
    dx = torch.empty_like(x)
    layer_norm_dx[(x.shape[0],)](dx, dy, x, w, mean, rstd, x.shape[1], x.stride(0), BLOCK_N=16)
    return dx
'''

# RMSNorm of x + residual: the first pass stores the sum (the residual output) and sums its squares, the second
# reads the stored sum back and scales it.
RMSNORM_RESIDUAL_OUT = '''
import torch
import triton
import triton.language as tl


@triton.jit
def add_rmsnorm(x_ptr, res_ptr, w_ptr, out_ptr, res_out_ptr, D, eps, BLOCK_D: tl.constexpr):
    i = tl.program_id(0)
    sq = tl.zeros([BLOCK_D], dtype=tl.float32)
    for d in range(0, D, BLOCK_D):
        o = d + tl.arange(0, BLOCK_D)
        msk = o < D
        h = tl.load(x_ptr + i * D + o, mask=msk, other=0.0) + tl.load(res_ptr + i * D + o, mask=msk, other=0.0)
        tl.store(res_out_ptr + i * D + o, h, mask=msk)
        sq += h * h
    inv = tl.rsqrt(tl.sum(sq) / D + eps)
    for d in range(0, D, BLOCK_D):
        o = d + tl.arange(0, BLOCK_D)
        msk = o < D
        h = tl.load(res_out_ptr + i * D + o, mask=msk, other=0.0)
        g = tl.load(w_ptr + o, mask=msk, other=0.0)
        tl.store(out_ptr + i * D + o, h * inv * g, mask=msk)


def fused_add_rmsnorm(x, res, w):
    out = torch.empty_like(x)
    res_out = torch.empty_like(x)
    add_rmsnorm[(x.shape[0],)](x, res, w, out, res_out, x.shape[1], 1e-6, BLOCK_D=16)
    return out, res_out
'''

# A row's max: a while loop over blocks, a vector of lanes' running maxima reduced after the loop.
ROW_MAX_WHILE = '''
import torch
import triton
import triton.language as tl


@triton.jit
def row_max_kernel(src, vals, n_cols, BLOCK: tl.constexpr):
    row = tl.program_id(0)
    best = tl.full([BLOCK], float("-inf"), tl.float32)
    k = 0
    while k < n_cols:
        cols = k + tl.arange(0, BLOCK)
        v = tl.load(src + row * n_cols + cols, mask=cols < n_cols, other=float("-inf"))
        best = tl.maximum(best, v)
        k += BLOCK
    tl.store(vals + row, tl.max(best, axis=0))


def row_max(x):
    out = torch.empty(x.shape[0], dtype=torch.float32)
    row_max_kernel[(x.shape[0],)](x, out, x.shape[1], BLOCK=16)
    return out
'''

# A row's sum walked backwards over block indices: range(tl.cdiv(n, B) - 1, -1, -1), the last block first.
ROW_SUM_BACKWARDS = '''
import torch
import triton
import triton.language as tl


@triton.jit
def row_sum_backwards(x_ptr, out_ptr, n, BLOCK: tl.constexpr):
    row = tl.program_id(0)
    acc = tl.zeros([BLOCK], dtype=tl.float32)
    for b in range(tl.cdiv(n, BLOCK) - 1, -1, -1):
        offs = b * BLOCK + tl.arange(0, BLOCK)
        acc += tl.load(x_ptr + row * n + offs, mask=offs < n, other=0.0)
    tl.store(out_ptr + row, tl.sum(acc, axis=0))


def row_sum(x):
    out = torch.empty(x.shape[0], dtype=torch.float32)
    row_sum_backwards[(x.shape[0],)](x, out, x.shape[1], BLOCK=16)
    return out
'''

# A row's max walked backwards over block offsets: range(tl.cdiv(n, B) * B - B, -B, -B), a scalar running max.
ROW_MAX_BACKWARDS = '''
import torch
import triton
import triton.language as tl


@triton.jit
def tail_first_max(inp, outp, length, stride, BS: tl.constexpr):
    r = tl.program_id(0)
    best = float("-inf")
    for start in range(tl.cdiv(length, BS) * BS - BS, -BS, -BS):
        idx = start + tl.arange(0, BS)
        v = tl.load(inp + r * stride + idx, mask=idx < length, other=float("-inf"))
        best = tl.maximum(best, tl.max(v, axis=0))
    tl.store(outp + r, best)


def row_max(x):
    out = torch.empty(x.shape[0], dtype=torch.float32)
    tail_first_max[(x.shape[0],)](x, out, x.shape[1], x.stride(0), BS=16)
    return out
'''

# Softmax over a block of BLOCK_M rows a program, each row one block of BLOCK_N columns (axis=1 reductions).
SOFTMAX_BLOCK_OF_ROWS = '''
import torch
import triton
import triton.language as tl


@triton.jit
def softmax_rows_block(x_ptr, y_ptr, M, N, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr):
    rows = tl.program_id(0) * BLOCK_M + tl.arange(0, BLOCK_M)
    cols = tl.arange(0, BLOCK_N)
    mask = (rows[:, None] < M) & (cols[None, :] < N)
    x = tl.load(x_ptr + rows[:, None] * N + cols[None, :], mask=mask, other=-float("inf"))
    mx = tl.max(x, axis=1)
    e = tl.exp(x - mx[:, None])
    s = tl.sum(e, axis=1)
    tl.store(y_ptr + rows[:, None] * N + cols[None, :], e / s[:, None], mask=mask)


def softmax(x):
    M, N = x.shape
    y = torch.empty_like(x)
    BM = 4
    softmax_rows_block[(triton.cdiv(M, BM),)](x, y, M, N, BLOCK_M=BM, BLOCK_N=triton.next_power_of_2(N))
    return y
'''

# Log-softmax, one block a row: the sum of exp(x - max) masked to the row's lanes by tl.where, the max over
# every lane (the lanes past the row loaded as -inf).
LOG_SOFTMAX_WHERE = '''
import torch
import triton
import triton.language as tl


@triton.jit
def log_softmax_rows(X, Y, n, row_stride, BLOCK_SIZE: tl.constexpr):
    row = tl.program_id(0).to(tl.int64)
    offs = tl.arange(0, BLOCK_SIZE)
    valid = offs < n
    x = tl.load(X + row * row_stride + offs, mask=valid, other=float("-inf"))
    x_max = tl.max(x, 0)
    shifted = x - x_max
    denom = tl.sum(tl.where(valid, tl.exp(shifted), 0.0), 0)
    tl.store(Y + row * row_stride + offs, shifted - tl.log(denom), mask=valid)


def log_softmax(x):
    y = torch.empty_like(x)
    log_softmax_rows[(x.shape[0],)](x, y, x.shape[1], x.stride(0), BLOCK_SIZE=triton.next_power_of_2(x.shape[1]))
    return y
'''

# A zeroed output each program overwrites a BM x BN tile of, through a pointer tile built before the store.
SCALE_ROWS_TILE = '''
import torch
import triton
import triton.language as tl


@triton.jit
def scale_rows_2d(x_ptr, s_ptr, out_ptr, M, N, BM: tl.constexpr, BN: tl.constexpr):
    pm = tl.program_id(0)
    pn = tl.program_id(1)
    rm = pm * BM + tl.arange(0, BM)
    rn = pn * BN + tl.arange(0, BN)
    ptrs = out_ptr + rm[:, None] * N + rn[None, :]
    mask = (rm[:, None] < M) & (rn[None, :] < N)
    x = tl.load(x_ptr + rm[:, None] * N + rn[None, :], mask=mask, other=0.0)
    s = tl.load(s_ptr + rm, mask=rm < M, other=0.0)
    tl.store(ptrs, x * s[:, None], mask=mask)


def scale_rows(x, s):
    M, N = x.shape
    out = torch.zeros(M, N, dtype=torch.float32)
    scale_rows_2d[(triton.cdiv(M, 4), triton.cdiv(N, 16))](x, s, out, M, N, BM=4, BN=16)
    return out
'''

# RMSNorm whose row length is a constexpr: both passes tl.static_range loops over its blocks.
RMSNORM_CONSTEXPR_WIDTH = '''
import torch
import triton
import triton.language as tl


@triton.jit
def rms_fixed_width(X, W, Y, eps, D: tl.constexpr, BLOCK: tl.constexpr):
    row = tl.program_id(0)
    acc = tl.zeros([BLOCK], dtype=tl.float32)
    for off in tl.static_range(0, D, BLOCK):
        c = off + tl.arange(0, BLOCK)
        x = tl.load(X + row * D + c, mask=c < D, other=0.0)
        acc += x * x
    r = tl.rsqrt(tl.sum(acc, axis=0) / D + eps)
    for off in tl.static_range(0, D, BLOCK):
        c = off + tl.arange(0, BLOCK)
        x = tl.load(X + row * D + c, mask=c < D, other=0.0)
        w = tl.load(W + c, mask=c < D, other=0.0)
        tl.store(Y + row * D + c, x * r * w, mask=c < D)


def rmsnorm(x, w):
    y = torch.empty_like(x)
    rms_fixed_width[(x.shape[0],)](x, w, y, 1e-6, D=x.shape[1], BLOCK=16)
    return y
'''

SPELLINGS = [
    Spelling("user_rows", "cross_entropy_logsumexp", CROSS_ENTROPY_LSE, "cross_entropy", """
x = torch.randn(5, 37)
t = torch.randint(0, 37, (5,))
args = [x, t]
""", ('single_pass', 'online_softmax'), atol=1e-4, rtol=1e-4),
    Spelling("user_rows", "softmax_backward", SOFTMAX_BACKWARD, "softmax_backward", """
dy = torch.randn(5, 37)
y = torch.softmax(torch.randn(5, 37), dim=1)
args = [dy, y]
""", ('single_pass', 'split_rows'), atol=1e-4, rtol=1e-4),
    Spelling("user_rows", "layernorm_backward_dx", LAYERNORM_BACKWARD_DX, "layer_norm_backward", """
x = torch.randn(5, 37)
dy = torch.randn(5, 37)
w = torch.randn(37)
mean = x.mean(1)
rstd = 1 / (x.var(1, unbiased=False) + 1e-5).sqrt()
args = [dy, x, w, mean, rstd]
""", ('single_pass', 'split_rows'), atol=1e-4, rtol=1e-4),
    Spelling("user_rows", "rmsnorm_residual_out", RMSNORM_RESIDUAL_OUT, "fused_add_rmsnorm", """
x = torch.randn(5, 37)
res = torch.randn(5, 37)
w = torch.randn(37)
args = [x, res, w]
""", ('single_pass', 'split_rows'), atol=1e-4, rtol=1e-4),
    Spelling("user_rows", "row_max_while", ROW_MAX_WHILE, "row_max", """
x = torch.randn(5, 37)
args = [x]
""", ('single_pass',), atol=1e-4, rtol=1e-4),
    Spelling("user_rows", "row_sum_backwards", ROW_SUM_BACKWARDS, "row_sum", """
x = torch.randn(5, 37)
args = [x]
""", ('single_pass',), atol=1e-4, rtol=1e-4),
    Spelling("user_rows", "row_max_backwards_offsets", ROW_MAX_BACKWARDS, "row_max", """
x = torch.randn(5, 37)
args = [x]
""", ('single_pass',), atol=1e-4, rtol=1e-4),
    Spelling("user_rows", "softmax_block_of_rows", SOFTMAX_BLOCK_OF_ROWS, "softmax", """
x = torch.randn(7, 37)
args = [x]
""", ('online_softmax',), atol=1e-4, rtol=1e-4),
    Spelling("user_rows", "log_softmax_where", LOG_SOFTMAX_WHERE, "log_softmax", """
x = torch.randn(5, 37)
args = [x]
""", ('online_softmax',), atol=1e-4, rtol=1e-4),
    Spelling("user_rows", "zeroed_output_2d_tile", SCALE_ROWS_TILE, "scale_rows", """
x = torch.randn(5, 37)
s = torch.randn(5)
args = [x, s]
""", ('zero_fill',)),
    Spelling("user_rows", "rmsnorm_constexpr_width", RMSNORM_CONSTEXPR_WIDTH, "rmsnorm", """
x = torch.randn(5, 37)
w = torch.randn(37)
args = [x, w]
""", ('single_pass', 'split_rows'), atol=1e-4, rtol=1e-4),
]
