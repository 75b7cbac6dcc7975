"""Softmax reductions over the rows of a float32 matrix (softmax, log-softmax, logsumexp, cross-entropy),
spelled many ways: two loop passes (for, while, range over cdiv, or one of each; scalar and lane-wise running
max, a max written as tl.maximum or as a select; exp and exp2; a pointer advanced through the row; lanes masked
by the load or by tl.where) and one block per row (1-D and a block of rows, reductions keeping their dimension
or over axis=-1; a helper @triton.jit function; names bound again; the block size set by the launch or by a
heuristic). The inputs have rows longer than the interpreter's threshold for the chunked twin
(online_launch.CPU_LONG) and fewer than its SM count (the split twin's path), some lanes of the last block
masked, and a maximum that comes late in a row."""

from __future__ import annotations

from respellings import Spelling

INPUTS = """
x = torch.randn(3, 100)  # fewer rows than the interpreter's SMs: the split twin's path
x[1, 90] = 30.0  # the row's maximum comes late: the sum so far is rescaled
x[2, :60] = -1e4  # a long run far below the maximum
args = [x]
"""

# Two for loops over the row in blocks, lane-wise running max and sum (a tile of BLOCK), then a third pass that
# writes exp(x - max) / sum.
TWO_LOOPS_LANES = '''
import torch
import triton
import triton.language as tl


@triton.jit
def softmax_kernel(out_ptr, x_ptr, stride, n_cols, BLOCK: tl.constexpr):
    row = tl.program_id(0)
    cols = tl.arange(0, BLOCK)
    acc_max = tl.full([BLOCK], float("-inf"), tl.float32)
    for start in range(0, n_cols, BLOCK):
        x = tl.load(x_ptr + row * stride + start + cols, mask=start + cols < n_cols, other=float("-inf"))
        acc_max = tl.maximum(acc_max, x)
    m = tl.max(acc_max, axis=0)
    acc_sum = tl.zeros([BLOCK], tl.float32)
    for start in range(0, n_cols, BLOCK):
        x = tl.load(x_ptr + row * stride + start + cols, mask=start + cols < n_cols, other=float("-inf"))
        acc_sum += tl.exp(x - m)
    total = tl.sum(acc_sum, axis=0)
    for start in range(0, n_cols, BLOCK):
        mask = start + cols < n_cols
        x = tl.load(x_ptr + row * stride + start + cols, mask=mask, other=float("-inf"))
        tl.store(out_ptr + row * stride + start + cols, tl.exp(x - m) / total, mask=mask)


def softmax(x):
    out = torch.empty_like(x)
    softmax_kernel[(x.shape[0],)](out, x, x.stride(0), x.shape[1], BLOCK=16)
    return out
'''

# Two while loops, a scalar running max of each block's max, exp2 with the log2(e) scale: logsumexp.
WHILE_SCALAR_EXP2 = '''
import torch
import triton
import triton.language as tl


@triton.jit
def lse_kernel(x_ptr, out_ptr, n_cols, stride, BLOCK: tl.constexpr):
    row = tl.program_id(0)
    base = x_ptr + row * stride
    offs = tl.arange(0, BLOCK)
    m = float("-inf")
    start = 0
    while start < n_cols:
        x = tl.load(base + start + offs, mask=start + offs < n_cols, other=float("-inf"))
        m = tl.maximum(m, tl.max(x, 0))
        start += BLOCK
    s = 0.0
    start = 0
    while start < n_cols:
        x = tl.load(base + start + offs, mask=start + offs < n_cols, other=float("-inf"))
        s += tl.sum(tl.exp2((x - m) * 1.4426950408889634), 0)
        start += BLOCK
    tl.store(out_ptr + row, m + tl.log2(s) * 0.6931471805599453)


def softmax(x):
    out = torch.empty(x.shape[0], device=x.device)
    lse_kernel[(x.shape[0],)](x, out, x.shape[1], x.stride(0), BLOCK=32)
    return out
'''

# Loops over block indices (range of cdiv), lane-wise running max reduced per row in the sum pass: log-softmax,
# the max pass's names reused by the sum pass, a lambda grid.
CDIV_LOG_SOFTMAX = '''
import torch
import triton
import triton.language as tl


@triton.jit
def log_softmax_kernel(y_ptr, x_ptr, n, row_stride, TILE: tl.constexpr):
    r = tl.program_id(axis=0)
    lane = tl.arange(0, TILE)
    best = tl.full((TILE,), -float("inf"), dtype=tl.float32)
    for b in range(tl.cdiv(n, TILE)):
        idx = b * TILE + lane
        v = tl.load(x_ptr + r * row_stride + idx, mask=idx < n, other=-float("inf"))
        best = tl.maximum(best, v)
    acc = 0.0
    for b in range(tl.cdiv(n, TILE)):
        idx = b * TILE + lane
        v = tl.load(x_ptr + r * row_stride + idx, mask=idx < n, other=-float("inf"))
        acc = acc + tl.sum(tl.exp(v - tl.max(best, 0)), 0)
    shift = tl.max(best, 0) + tl.log(acc)
    for b in range(tl.cdiv(n, TILE)):
        idx = b * TILE + lane
        v = tl.load(x_ptr + r * row_stride + idx, mask=idx < n, other=0.0)
        tl.store(y_ptr + r * row_stride + idx, v - shift, mask=idx < n)


def softmax(x):
    y = torch.empty_like(x)
    log_softmax_kernel[lambda meta: (x.shape[0],)](y, x, x.shape[1], x.stride(0), TILE=16)
    return y
'''

# One block per row (BLOCK_SIZE = next_power_of_2(n_cols)), the max subtracted first, as Triton's tutorial.
ONE_BLOCK = '''
import torch
import triton
import triton.language as tl


@triton.jit
def softmax_kernel(output_ptr, input_ptr, input_row_stride, output_row_stride, n_cols, BLOCK_SIZE: tl.constexpr):
    row_idx = tl.program_id(0)
    row_start_ptr = input_ptr + row_idx * input_row_stride
    col_offsets = tl.arange(0, BLOCK_SIZE)
    row = tl.load(row_start_ptr + col_offsets, mask=col_offsets < n_cols, other=-float("inf"))
    row_minus_max = row - tl.max(row, axis=0)
    numerator = tl.exp(row_minus_max)
    denominator = tl.sum(numerator, axis=0)
    tl.store(output_ptr + row_idx * output_row_stride + col_offsets, numerator / denominator,
             mask=col_offsets < n_cols)


def softmax(x):
    n_rows, n_cols = x.shape
    y = torch.empty_like(x)
    softmax_kernel[(n_rows,)](y, x, x.stride(0), y.stride(0), n_cols, BLOCK_SIZE=triton.next_power_of_2(n_cols))
    return y
'''

# A block of rows (BLOCK_M x BLOCK_N, reduced over axis 1) with a meta grid, a helper @triton.jit function for
# the shifted exponent, exp2 with a scale: log-softmax.
BLOCK_OF_ROWS_HELPER = '''
import torch
import triton
import triton.language as tl


@triton.jit
def shifted_exp(v, top):
    return tl.exp2((v - top[:, None]) * 1.4426950408889634)


@triton.jit
def rows_kernel(dst, src, M, N, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr):
    rows = tl.program_id(0) * BLOCK_M + tl.arange(0, BLOCK_M)
    cols = tl.arange(0, BLOCK_N)
    inside = (rows[:, None] < M) & (cols[None, :] < N)
    v = tl.load(src + rows[:, None] * N + cols[None, :], mask=inside, other=float("-inf"))
    top = tl.max(v, 1)
    total = tl.sum(shifted_exp(v, top), 1)
    out = v - top[:, None] - tl.log(total)[:, None]
    tl.store(dst + rows[:, None] * N + cols[None, :], out, mask=inside)


def softmax(x):
    M, N = x.shape
    y = torch.empty_like(x)
    grid = lambda meta: (triton.cdiv(M, meta["BLOCK_M"]),)
    rows_kernel[grid](y, x, M, N, BLOCK_M=2, BLOCK_N=triton.next_power_of_2(N))
    return y
'''

# One block whose size a heuristic sets (the launch does not pass it), a compile-time branch around the
# exponent's input: the twin is chosen in the kernel.
HEURISTIC_BLOCK = '''
import torch
import triton
import triton.language as tl


@triton.heuristics({"DEPTH": lambda args: triton.next_power_of_2(args["K"])})
@triton.jit
def sm_kernel(Y, X, K, stride, LOG: tl.constexpr, DEPTH: tl.constexpr):
    i = tl.program_id(0)
    k = tl.arange(0, DEPTH)
    x = tl.load(X + i * stride + k, mask=k < K, other=float("-inf"))
    z = x - tl.max(x, axis=0)
    num = tl.exp(z)
    denom = tl.sum(num, axis=0)
    if LOG:
        y = z - tl.log(denom)
    else:
        y = num / denom
    tl.store(Y + i * stride + k, y, mask=k < K)


def softmax(x):
    y = torch.empty_like(x)
    sm_kernel[(x.shape[0],)](y, x, x.shape[1], x.stride(0), LOG=False)
    return y
'''

# Cross-entropy in one block: the logsumexp, the label's logit (a scalar load) and a plain sum of the row
# (label smoothing) carried through the chunk loop; a scalar result per row, no store along the row.
CROSS_ENTROPY = '''
import torch
import triton
import triton.language as tl


@triton.jit
def ce_kernel(loss_ptr, logits_ptr, labels_ptr, n_cols, stride, smoothing, BLOCK: tl.constexpr):
    row = tl.program_id(0)
    logits_ptr += row * stride
    offs = tl.arange(0, BLOCK)
    label = tl.load(labels_ptr + row)
    logits = tl.load(logits_ptr + offs, mask=offs < n_cols, other=-float("inf"))
    c = tl.max(logits, 0)
    lse = c + tl.log(tl.sum(tl.exp(logits - c), 0))
    mean = tl.sum(tl.where(offs < n_cols, logits, 0.0), 0) / n_cols
    if label >= 0:
        target = tl.load(logits_ptr + label)
        loss = lse - (1.0 - smoothing) * target - smoothing * mean
    else:
        loss = 0.0
    tl.store(loss_ptr + row, loss)


def softmax(x):
    labels = torch.arange(x.shape[0]) * 7 % x.shape[1]
    labels[2] = -100
    loss = torch.empty(x.shape[0], device=x.device)
    block = triton.next_power_of_2(x.shape[1])
    ce_kernel[(x.shape[0],)](loss, x, labels, x.shape[1], x.stride(0), 0.1, BLOCK=block)
    return loss
'''

# Two while loops, the lane-wise running max a select (`tl.where(cur > m, cur, m)`, not tl.maximum) started
# from `-float("inf")`, then a third for loop that stores exp(x - max) times the sum's reciprocal.
WHERE_MAX_WHILE = '''
import torch
import triton
import triton.language as tl


@triton.jit
def softmax_fwd(out, inp, stride_row, n_cols, BLOCK_N: tl.constexpr):
    row = tl.program_id(0)
    base = inp + row * stride_row
    col = tl.arange(0, BLOCK_N)
    row_max = tl.full((BLOCK_N,), -float("inf"), tl.float32)
    start = 0
    while start < n_cols:
        cur = tl.load(base + start + col, mask=(start + col) < n_cols, other=-float("inf"))
        row_max = tl.where(cur > row_max, cur, row_max)
        start += BLOCK_N
    mx = tl.max(row_max, 0)
    total = tl.zeros((BLOCK_N,), tl.float32)
    start = 0
    while start < n_cols:
        cur = tl.load(base + start + col, mask=(start + col) < n_cols, other=-float("inf"))
        total += tl.exp(cur - mx)
        start += BLOCK_N
    inv = 1.0 / tl.sum(total, 0)
    for start in range(0, n_cols, BLOCK_N):
        cur = tl.load(base + start + col, mask=(start + col) < n_cols, other=-float("inf"))
        tl.store(out + row * stride_row + start + col, tl.exp(cur - mx) * inv, mask=(start + col) < n_cols)


def softmax(x):
    y = torch.empty_like(x)
    softmax_fwd[(x.shape[0],)](y, x, x.stride(0), x.shape[1], BLOCK_N=32, num_warps=4)
    return y
'''

# One block, reductions over `axis=-1`, tl.math.exp, and the exponentials' name bound again to the result
# (`p = p / tl.sum(p, axis=-1)`); a scale applied on load, the host viewing its input as rows.
AXIS_LAST_REBOUND = '''
import torch
import triton
import triton.language as tl


@triton.jit
def attn_probs_kernel(S, P, stride_s, stride_p, seq_len, scale, BLOCK: tl.constexpr):
    r = tl.program_id(0)
    k = tl.arange(0, BLOCK)
    s = tl.load(S + r * stride_s + k, mask=k < seq_len, other=-float("inf")).to(tl.float32) * scale
    s_max = tl.max(s, axis=-1)
    p = tl.math.exp(s - s_max)
    p = p / tl.sum(p, axis=-1)
    tl.store(P + r * stride_p + k, p.to(P.dtype.element_ty), mask=k < seq_len)


def softmax(x):
    rows = x.view(-1, x.shape[-1])
    out = torch.empty_like(rows)
    n_rows, seq_len = rows.shape
    attn_probs_kernel[(n_rows,)](rows, out, rows.stride(0), out.stride(0), seq_len, 0.5,
                                 BLOCK=max(triton.next_power_of_2(seq_len), 16))
    return out.view_as(x)
'''

# A block of rows in one tile, the reductions keeping their reduced dimension (`keep_dims=True`, broadcast
# without `[:, None]`), the row's max subtracted in place.
KEEP_DIMS_ROWS = '''
import torch
import triton
import triton.language as tl


@triton.jit
def softmax_rows_kernel(x_ptr, y_ptr, M, N, stride_m, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr):
    pid = tl.program_id(0)
    rows = pid * BLOCK_M + tl.arange(0, BLOCK_M)
    cols = tl.arange(0, BLOCK_N)
    mask = (rows[:, None] < M) & (cols[None, :] < N)
    offs = rows[:, None] * stride_m + cols[None, :]
    x = tl.load(x_ptr + offs, mask=mask, other=float("-inf"))
    x = x - tl.max(x, axis=1, keep_dims=True)
    e = tl.exp(x)
    y = e / tl.sum(e, axis=1, keep_dims=True)
    tl.store(y_ptr + offs, y, mask=mask)


def softmax(x):
    M, N = x.shape
    y = torch.empty_like(x)
    BLOCK_N = triton.next_power_of_2(N)
    BLOCK_M = 2
    softmax_rows_kernel[(triton.cdiv(M, BLOCK_M),)](x, y, M, N, x.stride(0), BLOCK_M=BLOCK_M, BLOCK_N=BLOCK_N)
    return y
'''

# Two tl.range passes through one pointer tile advanced at the end of each (`ptrs += BLOCK`) and set back to the
# row's start between them; a third pass that computes its addresses afresh.
POINTER_ADVANCE = '''
import torch
import triton
import triton.language as tl


@triton.jit
def softmax_looped(Y, X, stride, N, BLOCK: tl.constexpr):
    row = tl.program_id(0)
    offs = tl.arange(0, BLOCK)
    ptrs = X + row * stride + offs
    m_vec = tl.full([BLOCK], float("-inf"), dtype=tl.float32)
    for start in tl.range(0, N, BLOCK):
        v = tl.load(ptrs, mask=start + offs < N, other=float("-inf"))
        m_vec = tl.maximum(m_vec, v)
        ptrs += BLOCK
    m = tl.max(m_vec, axis=0)
    ptrs = X + row * stride + offs
    d_vec = tl.zeros([BLOCK], dtype=tl.float32)
    for start in tl.range(0, N, BLOCK):
        v = tl.load(ptrs, mask=start + offs < N, other=float("-inf"))
        d_vec += tl.exp(v - m)
        ptrs += BLOCK
    d = tl.sum(d_vec, axis=0)
    for start in tl.range(0, N, BLOCK):
        v = tl.load(X + row * stride + start + offs, mask=start + offs < N, other=float("-inf"))
        tl.store(Y + row * stride + start + offs, tl.exp(v - m) / d, mask=start + offs < N)


def softmax(x):
    y = torch.empty_like(x)
    M, N = x.shape
    softmax_looped[(M,)](y, x, x.stride(0), N, BLOCK=32)
    return y
'''

# The max pass counts element offsets (`range(0, N, BLOCK)`), the sum pass and the store pass block indices
# (`range(tl.cdiv(N, BLOCK))`, offsets `i * BLOCK`); scalar running values.
MIXED_LOOP_FORMS = '''
import torch
import triton
import triton.language as tl


@triton.jit
def softmax_mixed(X, Y, stride, N, BLOCK: tl.constexpr):
    row = tl.program_id(0)
    m = float("-inf")
    for off in range(0, N, BLOCK):
        cols = off + tl.arange(0, BLOCK)
        m = tl.maximum(m, tl.max(tl.load(X + row * stride + cols, mask=cols < N, other=float("-inf")), 0))
    s = 0.0
    for i in range(tl.cdiv(N, BLOCK)):
        cols = i * BLOCK + tl.arange(0, BLOCK)
        s += tl.sum(tl.exp(tl.load(X + row * stride + cols, mask=cols < N, other=float("-inf")) - m), 0)
    for i in range(tl.cdiv(N, BLOCK)):
        cols = i * BLOCK + tl.arange(0, BLOCK)
        x = tl.load(X + row * stride + cols, mask=cols < N, other=float("-inf"))
        tl.store(Y + row * stride + cols, tl.exp(x - m) / s, mask=cols < N)


def softmax(x):
    y = torch.empty_like(x)
    softmax_mixed[(x.shape[0],)](x, y, x.stride(0), x.shape[1], BLOCK=32)
    return y
'''

# Loads with `other=0.0` and the masked lanes set to each reduction's identity by tl.where: the max over
# `tl.where(mask, x, -inf)`, the sum over `tl.where(mask, tl.exp(x - m), 0.0)`.
WHERE_MASKED = '''
import torch
import triton
import triton.language as tl


@triton.jit
def softmax_kernel(X, Y, stride, N, BLOCK: tl.constexpr):
    row = tl.program_id(0)
    offs = tl.arange(0, BLOCK)
    mx = tl.full([BLOCK], float("-inf"), tl.float32)
    for start in range(0, N, BLOCK):
        mask = start + offs < N
        x = tl.load(X + row * stride + start + offs, mask=mask, other=0.0)
        mx = tl.maximum(mx, tl.where(mask, x, float("-inf")))
    row_max = tl.max(mx, axis=0)
    den = tl.zeros([BLOCK], tl.float32)
    for start in range(0, N, BLOCK):
        mask = start + offs < N
        x = tl.load(X + row * stride + start + offs, mask=mask, other=0.0)
        den += tl.where(mask, tl.exp(x - row_max), 0.0)
    total = tl.sum(den, axis=0)
    for start in range(0, N, BLOCK):
        mask = start + offs < N
        x = tl.load(X + row * stride + start + offs, mask=mask, other=0.0)
        tl.store(Y + row * stride + start + offs, tl.exp(x - row_max) / total, mask=mask)


def softmax(x):
    y = torch.empty_like(x)
    softmax_kernel[(x.shape[0],)](x, y, x.stride(0), x.shape[1], BLOCK=32)
    return y
'''

# One block, loaded with `other=0.0`: the max over `tl.where(mask, x, -inf)`, the exponentials masked to 0 by
# tl.where before the sum.
ONE_BLOCK_WHERE = '''
import torch
import triton
import triton.language as tl


@triton.jit
def softmax_one(X, Y, stride, N, BLOCK: tl.constexpr):
    row = tl.program_id(0)
    offs = tl.arange(0, BLOCK)
    mask = offs < N
    x = tl.load(X + row * stride + offs, mask=mask, other=0.0)
    m = tl.max(tl.where(mask, x, float("-inf")), axis=0)
    e = tl.where(mask, tl.exp(x - m), 0.0)
    tl.store(Y + row * stride + offs, e / tl.sum(e, axis=0), mask=mask)


def softmax(x):
    y = torch.empty_like(x)
    softmax_one[(x.shape[0],)](x, y, x.stride(0), x.shape[1], BLOCK=triton.next_power_of_2(x.shape[1]))
    return y
'''

# One block: a temperature and an additive mask applied to the loaded row, whose padding lanes are then set to
# -inf by tl.where in place (`x = tl.where(valid, x, -inf)`), the exponentials summed unmasked.
TEMPERATURE_BIAS = '''
import torch
import triton
import triton.language as tl


@triton.jit
def masked_softmax_kernel(output_ptr, input_ptr, bias_ptr, input_row_stride, n_cols, inv_temperature,
                          BLOCK_SIZE: tl.constexpr):
    row = tl.program_id(axis=0)
    col_offsets = tl.arange(0, BLOCK_SIZE)
    valid = col_offsets < n_cols
    x = tl.load(input_ptr + row * input_row_stride + col_offsets, mask=valid, other=0.0)
    bias = tl.load(bias_ptr + col_offsets, mask=valid, other=0.0)
    x = x * inv_temperature + bias
    x = tl.where(valid, x, float("-inf"))
    x_max = tl.max(x, axis=0)
    num = tl.exp(x - x_max)
    den = tl.sum(num, axis=0)
    tl.store(output_ptr + row * input_row_stride + col_offsets, num / den, mask=valid)


def softmax(x):
    y = torch.empty_like(x)
    bias = torch.linspace(-1.0, 1.0, x.shape[1], device=x.device)
    masked_softmax_kernel[(x.shape[0],)](y, x, bias, x.stride(0), x.shape[1], 1.0 / 0.7,
                                         BLOCK_SIZE=triton.next_power_of_2(x.shape[1]), num_warps=4)
    return y
'''

# Cross-entropy and the probabilities in one block, the loaded row's name bound again twice after the max
# (`x = tl.exp(x - mx)`, then `x = x / s`), the label's logit picked by a sum over `tl.where(cols == t, x, 0.0)`.
REBOUND_ROW = '''
import torch
import triton
import triton.language as tl


@triton.jit
def xent_kernel(x_ptr, t_ptr, loss_ptr, probs_ptr, stride, V, BLOCK: tl.constexpr):
    row = tl.program_id(0)
    cols = tl.arange(0, BLOCK)
    x = tl.load(x_ptr + row * stride + cols, mask=cols < V, other=float("-inf")).to(tl.float32)
    t = tl.load(t_ptr + row)
    x_t = tl.sum(tl.where(cols == t, x, 0.0), axis=0)
    mx = tl.max(x, axis=0)
    x = tl.exp(x - mx)
    s = tl.sum(x, axis=0)
    x = x / s
    tl.store(probs_ptr + row * stride + cols, x, mask=cols < V)
    tl.store(loss_ptr + row, tl.log(s) + mx - x_t)


def softmax(x):
    M, V = x.shape
    t = (torch.arange(M) * 7 % V).to(x.device)
    loss = torch.empty(M, device=x.device)
    probs = torch.empty_like(x)
    xent_kernel[(M,)](x, t, loss, probs, x.stride(0), V, BLOCK=triton.next_power_of_2(V))
    return loss, probs
'''

# The max pass set in both arms of a compile-time branch (`if IS_FP16:` casting first), the launch choosing the
# arm from the input's dtype; a lane-wise running max and exp-sum, then a third pass that writes.
CONSTEXPR_BRANCH_MAX = '''
import torch
import triton
import triton.language as tl


@triton.jit
def softmax_k(x_ptr, y_ptr, n, BLOCK: tl.constexpr, IS_FP16: tl.constexpr):
    row = tl.program_id(0)
    m = tl.full([BLOCK], float("-inf"), tl.float32)
    for s in range(0, n, BLOCK):
        c = s + tl.arange(0, BLOCK)
        x = tl.load(x_ptr + row * n + c, mask=c < n, other=float("-inf"))
        if IS_FP16:
            m = tl.maximum(m, x.to(tl.float32))
        else:
            m = tl.maximum(m, x)
    mx = tl.max(m, 0)
    d = tl.zeros([BLOCK], tl.float32)
    for s in range(0, n, BLOCK):
        c = s + tl.arange(0, BLOCK)
        x = tl.load(x_ptr + row * n + c, mask=c < n, other=float("-inf")).to(tl.float32)
        d += tl.exp(x - mx)
    den = tl.sum(d, 0)
    for s in range(0, n, BLOCK):
        c = s + tl.arange(0, BLOCK)
        x = tl.load(x_ptr + row * n + c, mask=c < n, other=float("-inf")).to(tl.float32)
        tl.store(y_ptr + row * n + c, tl.exp(x - mx) / den, mask=c < n)


def softmax(x):
    R, N = x.shape
    y = torch.empty_like(x)
    softmax_k[(R,)](x, y, N, BLOCK=256, IS_FP16=x.dtype == torch.float16)
    return y
'''

HALF_INPUTS = """
x = torch.randn(3, 100).half()
x[1, 90] = 30.0
args = [x]
"""

SPELLINGS = [
    Spelling("softmax", "two_loops_lanes", TWO_LOOPS_LANES, "softmax", INPUTS, ("online_softmax", "divisibility_hints", "split_rows")),
    Spelling("softmax", "while_scalar_exp2", WHILE_SCALAR_EXP2, "softmax", INPUTS, ("online_softmax", "divisibility_hints", "split_rows")),
    Spelling("softmax", "cdiv_log_softmax", CDIV_LOG_SOFTMAX, "softmax", INPUTS, ("online_softmax", "divisibility_hints", "split_rows")),
    Spelling("softmax", "one_block", ONE_BLOCK, "softmax", INPUTS, ("online_softmax", "divisibility_hints")),
    Spelling("softmax", "block_of_rows_helper", BLOCK_OF_ROWS_HELPER, "softmax", INPUTS, ("online_softmax", "divisibility_hints")),
    Spelling("softmax", "heuristic_block", HEURISTIC_BLOCK, "softmax", INPUTS, ("online_softmax", "divisibility_hints")),
    Spelling("softmax", "cross_entropy", CROSS_ENTROPY, "softmax", INPUTS, ("online_softmax", "divisibility_hints")),
    Spelling("softmax", "where_max_while", WHERE_MAX_WHILE, "softmax", INPUTS, ("online_softmax", "single_pass", "split_rows")),
    Spelling("softmax", "axis_last_rebound", AXIS_LAST_REBOUND, "softmax", INPUTS, ("online_softmax",)),
    Spelling("softmax", "keep_dims_rows", KEEP_DIMS_ROWS, "softmax", INPUTS, ("online_softmax",)),
    Spelling("softmax", "pointer_advance", POINTER_ADVANCE, "softmax", INPUTS, ("online_softmax", "single_pass", "split_rows")),
    Spelling("softmax", "mixed_loop_forms", MIXED_LOOP_FORMS, "softmax", INPUTS, ("online_softmax", "single_pass", "split_rows")),
    Spelling("softmax", "where_masked", WHERE_MASKED, "softmax", INPUTS, ("online_softmax", "single_pass", "split_rows")),
    Spelling("softmax", "one_block_where", ONE_BLOCK_WHERE, "softmax", INPUTS, ("online_softmax",)),
    Spelling("softmax", "temperature_bias", TEMPERATURE_BIAS, "softmax", INPUTS, ("online_softmax",)),
    Spelling("softmax", "rebound_row", REBOUND_ROW, "softmax", INPUTS, ("online_softmax",)),
    Spelling("softmax", "constexpr_branch_max", CONSTEXPR_BRANCH_MAX, "softmax", HALF_INPUTS, ("online_softmax",)),
]
