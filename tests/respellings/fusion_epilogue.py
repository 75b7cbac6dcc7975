"""Two launches that launch_fusion makes one where the second is element-wise over the first's output flattened:
it is computed where the first stores that output (launch_epilogue.py). A GEMM then a bias and a ReLU (the bias
read at the output's column, `offs % N`), a GEMM then a scaled ReLU with a residual read at the same elements,
a row softmax then a scale cast to fp16 whose host returns the probabilities too (their store kept), Triton's
autotuned tutorial matmul then a bias and GELU."""

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

# The GEMM both GEMM spellings begin with: a float32 output.
GEMM = '''
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
    tl.store(c_ptr + rm[:, None] * N + rn[None, :], acc, mask=(rm[:, None] < M) & (rn[None, :] < N))'''

# A GEMM into a float32 buffer, then bias + ReLU over it flattened into fp16; the element count is `M * N`.
GEMM_BIAS_RELU = GEMM + '''


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
GEMM_RESIDUAL = GEMM + '''


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

# Triton's tutorial matmul (autotuned, over one config so that the interpreter runs it; grouped order, a `lambda META` grid, the store through `c_ptrs`), then a
# bias and an exact GELU over its output flattened.
TUTORIAL_BIAS_GELU = '''
import torch
import triton
import triton.language as tl


@triton.autotune(
    configs=[
        triton.Config({"BLOCK_SIZE_M": 32, "BLOCK_SIZE_N": 32, "BLOCK_SIZE_K": 32, "GROUP_SIZE_M": 8}, num_stages=3, num_warps=4),
    ],
    key=["M", "N", "K"],
)
@triton.jit
def matmul_kernel(a_ptr, b_ptr, c_ptr, M, N, K, stride_am, stride_ak, stride_bk, stride_bn, stride_cm, stride_cn,
                  BLOCK_SIZE_M: tl.constexpr, BLOCK_SIZE_N: tl.constexpr, BLOCK_SIZE_K: tl.constexpr,
                  GROUP_SIZE_M: tl.constexpr):
    pid = tl.program_id(axis=0)
    num_pid_m = tl.cdiv(M, BLOCK_SIZE_M)
    num_pid_n = tl.cdiv(N, BLOCK_SIZE_N)
    num_pid_in_group = GROUP_SIZE_M * num_pid_n
    group_id = pid // num_pid_in_group
    first_pid_m = group_id * GROUP_SIZE_M
    group_size_m = min(num_pid_m - first_pid_m, GROUP_SIZE_M)
    pid_m = first_pid_m + ((pid % num_pid_in_group) % group_size_m)
    pid_n = (pid % num_pid_in_group) // group_size_m
    offs_am = (pid_m * BLOCK_SIZE_M + tl.arange(0, BLOCK_SIZE_M)) % M
    offs_bn = (pid_n * BLOCK_SIZE_N + tl.arange(0, BLOCK_SIZE_N)) % N
    offs_k = tl.arange(0, BLOCK_SIZE_K)
    a_ptrs = a_ptr + (offs_am[:, None] * stride_am + offs_k[None, :] * stride_ak)
    b_ptrs = b_ptr + (offs_k[:, None] * stride_bk + offs_bn[None, :] * stride_bn)
    accumulator = tl.zeros((BLOCK_SIZE_M, BLOCK_SIZE_N), dtype=tl.float32)
    for k in range(0, tl.cdiv(K, BLOCK_SIZE_K)):
        a = tl.load(a_ptrs, mask=offs_k[None, :] < K - k * BLOCK_SIZE_K, other=0.0)
        b = tl.load(b_ptrs, mask=offs_k[:, None] < K - k * BLOCK_SIZE_K, other=0.0)
        accumulator = tl.dot(a, b, accumulator)
        a_ptrs += BLOCK_SIZE_K * stride_ak
        b_ptrs += BLOCK_SIZE_K * stride_bk
    c = accumulator.to(tl.float16)
    offs_cm = pid_m * BLOCK_SIZE_M + tl.arange(0, BLOCK_SIZE_M)
    offs_cn = pid_n * BLOCK_SIZE_N + tl.arange(0, BLOCK_SIZE_N)
    c_ptrs = c_ptr + stride_cm * offs_cm[:, None] + stride_cn * offs_cn[None, :]
    c_mask = (offs_cm[:, None] < M) & (offs_cn[None, :] < N)
    tl.store(c_ptrs, c, mask=c_mask)


@triton.jit
def bias_gelu(x_ptr, b_ptr, y_ptr, n_elements, n_cols, BLOCK_SIZE: tl.constexpr):
    pid = tl.program_id(axis=0)
    offsets = pid * BLOCK_SIZE + tl.arange(0, BLOCK_SIZE)
    mask = offsets < n_elements
    x = tl.load(x_ptr + offsets, mask=mask).to(tl.float32)
    b = tl.load(b_ptr + offsets % n_cols, mask=mask).to(tl.float32)
    v = x + b
    y = 0.5 * v * (1 + tl.erf(v * 0.7071067811865476))
    tl.store(y_ptr + offsets, y, mask=mask)


def linear_gelu(a, w, bias):
    M, K = a.shape
    K, N = w.shape
    c = torch.empty((M, N), device=a.device, dtype=torch.float16)
    grid = lambda META: (triton.cdiv(M, META["BLOCK_SIZE_M"]) * triton.cdiv(N, META["BLOCK_SIZE_N"]),)
    matmul_kernel[grid](a, w, c, M, N, K, a.stride(0), a.stride(1), w.stride(0), w.stride(1), c.stride(0), c.stride(1))
    y = torch.empty_like(c)
    n = c.numel()
    bias_gelu[(triton.cdiv(n, 1024),)](c, bias, y, n, N, BLOCK_SIZE=1024)
    return y
'''

SPELLINGS = [
    Spelling("fusion", "epilogue_gemm_bias_relu", GEMM_BIAS_RELU, "linear_relu", GEMM_INPUTS, ("launch_fusion",)),
    Spelling("fusion", "epilogue_gemm_residual", GEMM_RESIDUAL, "linear_relu", RESIDUAL_INPUTS, ("launch_fusion",)),
    Spelling("fusion", "epilogue_tutorial_gelu", TUTORIAL_BIAS_GELU, "linear_gelu", GEMM_INPUTS, ("launch_fusion",)),
    Spelling("fusion", "epilogue_rows_then_scale", ROWS_THEN_SCALE, "softmax_scaled", ROW_INPUTS, ("launch_fusion",)),
]
