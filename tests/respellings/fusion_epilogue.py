"""Two launches that launch_fusion makes one where the second is element-wise over the first's output flattened:
it is computed where the first stores that output (launch_epilogue.py). A GEMM then a bias and a ReLU (the bias
read at the output's column, `offs % N`), a GEMM then a scaled ReLU with a residual read at the same elements,
a row softmax then a scale cast to fp16 whose host returns the probabilities too (their store kept)."""

from __future__ import annotations

from respellings import Spelling

GEMM_INPUTS = """
a = torch.randn(48, 72).half()
b = (torch.randn(72, 40) * 72 ** -0.5).half()
args = [a, b, torch.randn(40)]
"""

RESIDUAL_INPUTS = """
a = torch.randn(48, 72).half()
b = (torch.randn(72, 40) * 72 ** -0.5).half()
args = [a, b, torch.randn(48, 40).half()]
"""

ROW_INPUTS = """
args = [torch.randn(6, 100)]
"""

# A GEMM into a float32 buffer, then bias + ReLU over it flattened into fp16; the element count is `M * N`.
GEMM_BIAS_RELU = '''
import torch
import triton
import triton.language as tl


@triton.jit
def mm_kernel(a_ptr, b_ptr, c_ptr, M, N, K, BM: tl.constexpr, BN: tl.constexpr, BK: tl.constexpr):
    pm = tl.program_id(0)
    pn = tl.program_id(1)
    rm = pm * BM + tl.arange(0, BM)
    rn = pn * BN + tl.arange(0, BN)
    rk = tl.arange(0, BK)
    acc = tl.zeros((BM, BN), dtype=tl.float32)
    for k in range(0, K, BK):
        a = tl.load(a_ptr + rm[:, None] * K + (k + rk)[None, :], mask=(rm[:, None] < M) & ((k + rk)[None, :] < K), other=0.0)
        b = tl.load(b_ptr + (k + rk)[:, None] * N + rn[None, :], mask=((k + rk)[:, None] < K) & (rn[None, :] < N), other=0.0)
        acc += tl.dot(a, b)
    tl.store(c_ptr + rm[:, None] * N + rn[None, :], acc, mask=(rm[:, None] < M) & (rn[None, :] < N))


@triton.jit
def bias_relu_kernel(x_ptr, bias_ptr, out_ptr, N, total, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < total
    x = tl.load(x_ptr + offs, mask=mask)
    bias = tl.load(bias_ptr + offs % N, mask=mask)
    tl.store(out_ptr + offs, tl.maximum(x + bias, 0.0).to(tl.float16), mask=mask)


def linear_relu(a, b, bias):
    M, K = a.shape
    N = b.shape[1]
    c = torch.empty((M, N), device=a.device, dtype=torch.float32)
    mm_kernel[(triton.cdiv(M, 32), triton.cdiv(N, 32))](a, b, c, M, N, K, BM=32, BN=32, BK=32)
    out = torch.empty((M, N), device=a.device, dtype=torch.float16)
    total = M * N
    bias_relu_kernel[(triton.cdiv(total, 1024),)](c, bias, out, N, total, BLOCK=1024)
    return out
'''

# The same GEMM, then ReLU scaled by a scalar plus a residual read at the same elements; `c.numel()` elements.
GEMM_RESIDUAL = '''
import torch
import triton
import triton.language as tl


@triton.jit
def mm_kernel(a_ptr, b_ptr, c_ptr, M, N, K, BM: tl.constexpr, BN: tl.constexpr, BK: tl.constexpr):
    pm = tl.program_id(0)
    pn = tl.program_id(1)
    rm = pm * BM + tl.arange(0, BM)
    rn = pn * BN + tl.arange(0, BN)
    rk = tl.arange(0, BK)
    acc = tl.zeros((BM, BN), dtype=tl.float32)
    for k in range(0, K, BK):
        a = tl.load(a_ptr + rm[:, None] * K + (k + rk)[None, :], mask=(rm[:, None] < M) & ((k + rk)[None, :] < K), other=0.0)
        b = tl.load(b_ptr + (k + rk)[:, None] * N + rn[None, :], mask=((k + rk)[:, None] < K) & (rn[None, :] < N), other=0.0)
        acc += tl.dot(a, b)
    tl.store(c_ptr + rm[:, None] * N + rn[None, :], acc, mask=(rm[:, None] < M) & (rn[None, :] < N))


@triton.jit
def relu_add_kernel(x_ptr, r_ptr, out_ptr, total, alpha, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < total
    x = tl.load(x_ptr + offs, mask=mask)
    r = tl.load(r_ptr + offs, mask=mask).to(tl.float32)
    tl.store(out_ptr + offs, tl.maximum(x, 0.0) * alpha + r, mask=mask)


def linear_relu(a, b, r):
    M, K = a.shape
    N = b.shape[1]
    c = torch.empty((M, N), device=a.device, dtype=torch.float32)
    mm_kernel[(triton.cdiv(M, 32), triton.cdiv(N, 32))](a, b, c, M, N, K, BM=32, BN=32, BK=32)
    out = torch.empty((M, N), device=a.device, dtype=torch.float16)
    total = c.numel()
    relu_add_kernel[(triton.cdiv(total, 1024),)](c, r, out, total, 0.5, BLOCK=1024)
    return out
'''

# A row softmax, then a scale cast over the probabilities flattened (a ceiling division written by hand); the
# host returns the probabilities as well.
ROWS_THEN_SCALE = '''
import torch
import triton
import triton.language as tl


@triton.jit
def row_softmax(x_ptr, y_ptr, n_cols, BLOCK: tl.constexpr):
    row = tl.program_id(0)
    cols = tl.arange(0, BLOCK)
    x = tl.load(x_ptr + row * n_cols + cols, mask=cols < n_cols, other=float("-inf"))
    e = tl.exp(x - tl.max(x, axis=0))
    tl.store(y_ptr + row * n_cols + cols, e / tl.sum(e, axis=0), mask=cols < n_cols)


@triton.jit
def scale_cast(src, dst, n, s, BLOCK: tl.constexpr):
    pid = tl.program_id(0)
    idx = BLOCK * pid + tl.arange(0, BLOCK)
    ok = idx < n
    v = tl.load(src + idx, mask=ok)
    tl.store(dst + idx, (v * s).to(tl.float16), mask=ok)


def softmax_scaled(x, s=2.0):
    rows, cols = x.shape
    probs = torch.empty_like(x)
    row_softmax[(rows,)](x, probs, cols, BLOCK=triton.next_power_of_2(cols))
    out = torch.empty(x.shape, device=x.device, dtype=torch.float16)
    n = probs.numel()
    scale_cast[((n + 255) // 256,)](probs, out, n, s, BLOCK=256)
    return out, probs
'''

SPELLINGS = [
    Spelling("fusion", "epilogue_gemm_bias_relu", GEMM_BIAS_RELU, "linear_relu", GEMM_INPUTS, ("launch_fusion",)),
    Spelling("fusion", "epilogue_gemm_residual", GEMM_RESIDUAL, "linear_relu", RESIDUAL_INPUTS, ("launch_fusion",)),
    Spelling("fusion", "epilogue_rows_then_scale", ROWS_THEN_SCALE, "softmax_scaled", ROW_INPUTS, ("launch_fusion",)),
]
