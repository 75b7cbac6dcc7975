"""C = A @ B in float16 with float32 accumulation, spelled seventeen ways (two of them linear layers, x @ W.T, one batched)."""

from __future__ import annotations

from respellings import Spelling

INPUTS = """
a = torch.randn(48, 72).half()
b = (torch.randn(72, 40) * 72 ** -0.5).half()
args = [a, b]
"""
TILES = ("matmul_configs", "split_k", "persistent_tiles", "grouped_ordering", "divisibility_hints")

# The tile size written as a literal in the grid, beside BM=32 passed as a constexpr; a 1-D grid split in the
# kernel by `pid // n` and `pid % n`.
LITERAL_GRID = '''
import torch
import triton
import triton.language as tl


@triton.jit
def mm(a_ptr, b_ptr, c_ptr, M, N, K, sam, sak, sbk, sbn, scm, scn,
       BM: tl.constexpr, BN: tl.constexpr, BK: tl.constexpr):
    pid = tl.program_id(0)
    n_tiles = tl.cdiv(N, BN)
    row = pid // n_tiles
    col = pid % n_tiles
    rm = row * BM + tl.arange(0, BM)
    rn = col * BN + tl.arange(0, BN)
    rk = tl.arange(0, BK)
    a_ptrs = a_ptr + rm[:, None] * sam + rk[None, :] * sak
    b_ptrs = b_ptr + rk[:, None] * sbk + rn[None, :] * sbn
    acc = tl.zeros((BM, BN), dtype=tl.float32)
    for k in range(0, K, BK):
        a = tl.load(a_ptrs, mask=(rm[:, None] < M) & (k + rk[None, :] < K), other=0.0)
        b = tl.load(b_ptrs, mask=(k + rk[:, None] < K) & (rn[None, :] < N), other=0.0)
        acc = tl.dot(a, b, acc)
        a_ptrs += BK * sak
        b_ptrs += BK * sbk
    c_ptrs = c_ptr + rm[:, None] * scm + rn[None, :] * scn
    tl.store(c_ptrs, acc.to(tl.float16), mask=(rm[:, None] < M) & (rn[None, :] < N))


def matmul(a, b):
    M, K = a.shape
    _, N = b.shape
    c = torch.empty((M, N), device=a.device, dtype=torch.float16)
    mm[(triton.cdiv(M, 32) * triton.cdiv(N, 32),)](a, b, c, M, N, K, a.stride(0), a.stride(1), b.stride(0),
                                                   b.stride(1), c.stride(0), c.stride(1), BM=32, BN=32, BK=32)
    return c
'''

# A 2-D grid of a tuple, the tiles held in local variables; `acc += tl.dot(a, b)`.
TUPLE_GRID_VARIABLES = '''
import torch
import triton
import triton.language as tl


@triton.jit
def gemm_kernel(A, B, C, M, N, K, stride_am, stride_ak, stride_bk, stride_bn, stride_cm, stride_cn,
                TILE_ROWS: tl.constexpr, TILE_COLS: tl.constexpr, TILE_DEPTH: tl.constexpr):
    i = tl.program_id(axis=0)
    j = tl.program_id(axis=1)
    offs_i = i * TILE_ROWS + tl.arange(0, TILE_ROWS)
    offs_j = j * TILE_COLS + tl.arange(0, TILE_COLS)
    offs_d = tl.arange(0, TILE_DEPTH)
    acc = tl.zeros((TILE_ROWS, TILE_COLS), dtype=tl.float32)
    for d in range(0, K, TILE_DEPTH):
        x = tl.load(A + offs_i[:, None] * stride_am + (d + offs_d)[None, :] * stride_ak,
                    mask=(offs_i[:, None] < M) & ((d + offs_d)[None, :] < K), other=0.0)
        y = tl.load(B + (d + offs_d)[:, None] * stride_bk + offs_j[None, :] * stride_bn,
                    mask=((d + offs_d)[:, None] < K) & (offs_j[None, :] < N), other=0.0)
        acc += tl.dot(x, y)
    tl.store(C + offs_i[:, None] * stride_cm + offs_j[None, :] * stride_cn, acc.to(tl.float16),
             mask=(offs_i[:, None] < M) & (offs_j[None, :] < N))


def matmul(a, b):
    M, K = a.shape
    _, N = b.shape
    c = torch.empty((M, N), device=a.device, dtype=torch.float16)
    rows, cols, depth = 32, 32, 16
    grid = (triton.cdiv(M, rows), triton.cdiv(N, cols))
    gemm_kernel[grid](a, b, c, M, N, K, a.stride(0), a.stride(1), b.stride(0), b.stride(1), c.stride(0),
                      c.stride(1), rows, cols, depth)
    return c
'''

# A lambda grid of meta, the tiles passed by keyword.
LAMBDA_META = '''
import torch
import triton
import triton.language as tl


@triton.jit
def matmul_kernel(a_ptr, b_ptr, c_ptr, M, N, K, stride_am, stride_ak, stride_bk, stride_bn, stride_cm,
                  stride_cn, BLOCK_SIZE_M: tl.constexpr, BLOCK_SIZE_N: tl.constexpr, BLOCK_SIZE_K: tl.constexpr):
    pid_m = tl.program_id(0)
    pid_n = tl.program_id(1)
    offs_m = pid_m * BLOCK_SIZE_M + tl.arange(0, BLOCK_SIZE_M)
    offs_n = pid_n * BLOCK_SIZE_N + tl.arange(0, BLOCK_SIZE_N)
    offs_k = tl.arange(0, BLOCK_SIZE_K)
    a_ptrs = a_ptr + (offs_m[:, None] * stride_am + offs_k[None, :] * stride_ak)
    b_ptrs = b_ptr + (offs_k[:, None] * stride_bk + offs_n[None, :] * stride_bn)
    accumulator = tl.zeros((BLOCK_SIZE_M, BLOCK_SIZE_N), dtype=tl.float32)
    for k in range(0, tl.cdiv(K, BLOCK_SIZE_K)):
        a = tl.load(a_ptrs, mask=(offs_m[:, None] < M) & (offs_k[None, :] < K - k * BLOCK_SIZE_K), other=0.0)
        b = tl.load(b_ptrs, mask=(offs_k[:, None] < K - k * BLOCK_SIZE_K) & (offs_n[None, :] < N), other=0.0)
        accumulator = accumulator + tl.dot(a, b)
        a_ptrs += BLOCK_SIZE_K * stride_ak
        b_ptrs += BLOCK_SIZE_K * stride_bk
    c = accumulator.to(tl.float16)
    c_ptrs = c_ptr + stride_cm * offs_m[:, None] + stride_cn * offs_n[None, :]
    tl.store(c_ptrs, c, mask=(offs_m[:, None] < M) & (offs_n[None, :] < N))


def matmul(a, b):
    M, K = a.shape
    _, N = b.shape
    c = torch.empty((M, N), device=a.device, dtype=torch.float16)
    grid = lambda meta: (triton.cdiv(M, meta["BLOCK_SIZE_M"]), triton.cdiv(N, meta["BLOCK_SIZE_N"]))
    matmul_kernel[grid](a, b, c, M, N, K, a.stride(0), a.stride(1), b.stride(0), b.stride(1), c.stride(0),
                        c.stride(1), BLOCK_SIZE_M=32, BLOCK_SIZE_N=32, BLOCK_SIZE_K=32, num_warps=4)
    return c
'''

# A while loop over K.
WHILE_LOOP = '''
import torch
import triton
import triton.language as tl


@triton.jit
def kernel(a_ptr, b_ptr, c_ptr, M, N, K, sam, sak, sbk, sbn, scm, scn,
           BM: tl.constexpr, BN: tl.constexpr, BK: tl.constexpr):
    pm = tl.program_id(0)
    pn = tl.program_id(1)
    rm = pm * BM + tl.arange(0, BM)
    rn = pn * BN + tl.arange(0, BN)
    rk = tl.arange(0, BK)
    acc = tl.zeros((BM, BN), dtype=tl.float32)
    k = 0
    while k < K:
        a = tl.load(a_ptr + rm[:, None] * sam + (k + rk)[None, :] * sak,
                    mask=(rm[:, None] < M) & ((k + rk)[None, :] < K), other=0.0)
        b = tl.load(b_ptr + (k + rk)[:, None] * sbk + rn[None, :] * sbn,
                    mask=((k + rk)[:, None] < K) & (rn[None, :] < N), other=0.0)
        acc += tl.dot(a, b)
        k += BK
    tl.store(c_ptr + rm[:, None] * scm + rn[None, :] * scn, acc.to(tl.float16),
             mask=(rm[:, None] < M) & (rn[None, :] < N))


def matmul(a, b):
    M, K = a.shape
    _, N = b.shape
    c = torch.empty((M, N), device=a.device, dtype=torch.float16)
    kernel[(triton.cdiv(M, 32), triton.cdiv(N, 32))](a, b, c, M, N, K, a.stride(0), a.stride(1), b.stride(0),
                                                     b.stride(1), c.stride(0), c.stride(1), 32, 32, 32)
    return c
'''

# Offsets from a helper @triton.jit function; the K loop over block indices, offsets `kk * BK`.
HELPER = '''
import torch
import triton
import triton.language as tl


@triton.jit
def tile(index, SIZE: tl.constexpr):
    return index * SIZE + tl.arange(0, SIZE)


@triton.jit
def matmul_tiles(a_ptr, b_ptr, c_ptr, M, N, K, sam, sak, sbk, sbn, scm, scn,
                 BM: tl.constexpr, BN: tl.constexpr, BK: tl.constexpr):
    pid = tl.program_id(0)
    grid_n = tl.cdiv(N, BN)
    rm = tile(pid // grid_n, BM)
    rn = tile(pid % grid_n, BN)
    acc = tl.zeros((BM, BN), dtype=tl.float32)
    for kk in range(tl.cdiv(K, BK)):
        rk = tile(kk, BK)
        a = tl.load(a_ptr + rm[:, None] * sam + rk[None, :] * sak, mask=(rm[:, None] < M) & (rk[None, :] < K),
                    other=0.0)
        b = tl.load(b_ptr + rk[:, None] * sbk + rn[None, :] * sbn, mask=(rk[:, None] < K) & (rn[None, :] < N),
                    other=0.0)
        acc += tl.dot(a, b)
    tl.store(c_ptr + rm[:, None] * scm + rn[None, :] * scn, acc.to(tl.float16),
             mask=(rm[:, None] < M) & (rn[None, :] < N))


def matmul(a, b):
    M, K = a.shape
    _, N = b.shape
    c = torch.empty((M, N), device=a.device, dtype=torch.float16)
    BLOCK = 32
    matmul_tiles[(triton.cdiv(M, BLOCK) * triton.cdiv(N, BLOCK),)](
        a, b, c, M, N, K, a.stride(0), a.stride(1), b.stride(0), b.stride(1), c.stride(0), c.stride(1),
        BM=BLOCK, BN=BLOCK, BK=BLOCK)
    return c
'''

# A grid function of meta defined in the host function; pointers advanced with `p = p + step`.
GRID_FUNCTION = '''
import torch
import triton
import triton.language as tl


@triton.jit
def linear(x_ptr, w_ptr, y_ptr, rows, cols, inner, sx0, sx1, sw0, sw1, sy0, sy1,
           R: tl.constexpr, C: tl.constexpr, D: tl.constexpr):
    r = tl.program_id(0)
    c = tl.program_id(1)
    ir = r * R + tl.arange(0, R)
    ic = c * C + tl.arange(0, C)
    idd = tl.arange(0, D)
    xp = x_ptr + ir[:, None] * sx0 + idd[None, :] * sx1
    wp = w_ptr + idd[:, None] * sw0 + ic[None, :] * sw1
    total = tl.zeros((R, C), dtype=tl.float32)
    for start in range(0, inner, D):
        xs = tl.load(xp, mask=(ir[:, None] < rows) & (start + idd[None, :] < inner), other=0.0)
        ws = tl.load(wp, mask=(start + idd[:, None] < inner) & (ic[None, :] < cols), other=0.0)
        total = tl.dot(xs, ws, acc=total)
        xp = xp + D * sx1
        wp = wp + D * sw0
    tl.store(y_ptr + ir[:, None] * sy0 + ic[None, :] * sy1, total.to(tl.float16),
             mask=(ir[:, None] < rows) & (ic[None, :] < cols))


def matmul(x, w):
    rows, inner = x.shape
    _, cols = w.shape
    y = torch.empty((rows, cols), device=x.device, dtype=torch.float16)

    def grid(META):
        return (triton.cdiv(rows, META["R"]), triton.cdiv(cols, META["C"]))

    linear[grid](x, w, y, rows, cols, inner, x.stride(0), x.stride(1), w.stride(0), w.stride(1), y.stride(0),
                 y.stride(1), R=32, C=32, D=32)
    return y
'''

# Block pointers (tl.make_block_ptr / tl.advance), bounded by boundary checks: the interpreter refuses them.
BLOCK_POINTERS = '''
import torch
import triton
import triton.language as tl


@triton.jit
def mm_block_ptr(a_ptr, b_ptr, c_ptr, M, N, K, sam, sak, sbk, sbn, scm, scn,
                 BM: tl.constexpr, BN: tl.constexpr, BK: tl.constexpr):
    pid_m = tl.program_id(0)
    pid_n = tl.program_id(1)
    a_block = tl.make_block_ptr(base=a_ptr, shape=(M, K), strides=(sam, sak), offsets=(pid_m * BM, 0),
                                block_shape=(BM, BK), order=(1, 0))
    b_block = tl.make_block_ptr(base=b_ptr, shape=(K, N), strides=(sbk, sbn), offsets=(0, pid_n * BN),
                                block_shape=(BK, BN), order=(1, 0))
    acc = tl.zeros((BM, BN), dtype=tl.float32)
    for k in range(0, K, BK):
        a = tl.load(a_block, boundary_check=(0, 1), padding_option="zero")
        b = tl.load(b_block, boundary_check=(0, 1), padding_option="zero")
        acc = tl.dot(a, b, acc)
        a_block = tl.advance(a_block, (0, BK))
        b_block = tl.advance(b_block, (BK, 0))
    c_block = tl.make_block_ptr(base=c_ptr, shape=(M, N), strides=(scm, scn), offsets=(pid_m * BM, pid_n * BN),
                                block_shape=(BM, BN), order=(1, 0))
    tl.store(c_block, acc.to(tl.float16), boundary_check=(0, 1))


def matmul(a, b):
    M, K = a.shape
    _, N = b.shape
    c = torch.empty((M, N), device=a.device, dtype=torch.float16)
    mm_block_ptr[(triton.cdiv(M, 64), triton.cdiv(N, 64))](a, b, c, M, N, K, a.stride(0), a.stride(1),
                                                           b.stride(0), b.stride(1), c.stride(0), c.stride(1),
                                                           BM=64, BN=64, BK=32)
    return c
'''


# The K loop counts what is left of K down to 0, its masks `rk < k` (triton.ops.matmul's and Inductor's
# template); the tiles set by an autotuner, the grid a lambda of them.
COUNT_DOWN = '''
import torch
import triton
import triton.language as tl


@triton.autotune(configs=[triton.Config({"BM": 16, "BN": 16, "BK": 16}, num_warps=2)], key=["M", "N", "K"])
@triton.jit
def mm_remaining(a_ptr, b_ptr, c_ptr, M, N, K, sam, sak, sbk, sbn, scm, scn,
                 BM: tl.constexpr, BN: tl.constexpr, BK: tl.constexpr):
    rm = tl.program_id(0) * BM + tl.arange(0, BM)
    rn = tl.program_id(1) * BN + tl.arange(0, BN)
    rk = tl.arange(0, BK)
    A = a_ptr + rm[:, None] * sam + rk[None, :] * sak
    B = b_ptr + rk[:, None] * sbk + rn[None, :] * sbn
    acc = tl.zeros((BM, BN), dtype=tl.float32)
    for k in range(K, 0, -BK):
        a = tl.load(A, mask=(rm[:, None] < M) & (rk[None, :] < k), other=0.0)
        b = tl.load(B, mask=(rk[:, None] < k) & (rn[None, :] < N), other=0.0)
        acc += tl.dot(a, b)
        A += BK * sak
        B += BK * sbk
    C = c_ptr + rm[:, None] * scm + rn[None, :] * scn
    tl.store(C, acc.to(tl.float16), mask=(rm[:, None] < M) & (rn[None, :] < N))


def matmul(a, b):
    M, K = a.shape
    _, N = b.shape
    c = torch.empty((M, N), device=a.device, dtype=torch.float16)
    grid = lambda meta: (triton.cdiv(M, meta["BM"]), triton.cdiv(N, meta["BN"]))
    mm_remaining[grid](a, b, c, M, N, K, a.stride(0), a.stride(1), b.stride(0), b.stride(1), c.stride(0),
                       c.stride(1))
    return c
'''


# A linear layer y = relu(x @ W.T + b): W (N, K) read as a (K, N) tile through its strides, a 1-D grid, and an
# epilogue that updates the accumulator in place (`acc = acc + bias`, then `acc = tl.maximum(acc, 0.0)`).
LINEAR_INPUTS = """
x = torch.randn(48, 72).half()
w = (torch.randn(40, 72) * 72 ** -0.5).half()
bias = torch.randn(40).half()
args = [x, w, bias]
"""
LINEAR_BIAS_RELU = '''
import torch
import triton
import triton.language as tl


@triton.jit
def linear_relu_kernel(x_ptr, w_ptr, bias_ptr, y_ptr, M, N, K, stride_xm, stride_xk, stride_wn, stride_wk,
                       stride_ym, stride_yn, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr):
    pid = tl.program_id(0)
    num_pid_n = tl.cdiv(N, BLOCK_N)
    pid_m = pid // num_pid_n
    pid_n = pid % num_pid_n
    offs_m = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
    offs_n = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
    offs_k = tl.arange(0, BLOCK_K)
    x_ptrs = x_ptr + offs_m[:, None] * stride_xm + offs_k[None, :] * stride_xk
    w_ptrs = w_ptr + offs_k[:, None] * stride_wk + offs_n[None, :] * stride_wn
    acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
    for k in range(0, tl.cdiv(K, BLOCK_K)):
        x = tl.load(x_ptrs, mask=(offs_m[:, None] < M) & (offs_k[None, :] < K - k * BLOCK_K), other=0.0)
        w = tl.load(w_ptrs, mask=(offs_k[:, None] < K - k * BLOCK_K) & (offs_n[None, :] < N), other=0.0)
        acc = tl.dot(x, w, acc)
        x_ptrs += BLOCK_K * stride_xk
        w_ptrs += BLOCK_K * stride_wk
    bias = tl.load(bias_ptr + offs_n, mask=offs_n < N, other=0.0)
    acc = acc + bias[None, :].to(tl.float32)
    acc = tl.maximum(acc, 0.0)
    y_ptrs = y_ptr + offs_m[:, None] * stride_ym + offs_n[None, :] * stride_yn
    tl.store(y_ptrs, acc.to(tl.float16), mask=(offs_m[:, None] < M) & (offs_n[None, :] < N))


def linear_relu(x, weight, bias):
    M, K = x.shape
    N, _ = weight.shape
    y = torch.empty((M, N), device=x.device, dtype=torch.float16)
    BLOCK_M, BLOCK_N, BLOCK_K = 32, 32, 32
    grid = (triton.cdiv(M, BLOCK_M) * triton.cdiv(N, BLOCK_N),)
    linear_relu_kernel[grid](x, weight, bias, y, M, N, K, x.stride(0), x.stride(1), weight.stride(0),
                             weight.stride(1), y.stride(0), y.stride(1), BLOCK_M=BLOCK_M, BLOCK_N=BLOCK_N,
                             BLOCK_K=BLOCK_K, num_warps=4)
    return y
'''

# y = x @ W.T with W (N, K) row-major loaded as a (BLOCK_N, BLOCK_K) tile and transposed by tl.trans, the K
# offsets recomputed each step.
TRANSPOSED_INPUTS = """
x = torch.randn(48, 72).half()
w = (torch.randn(40, 72) * 72 ** -0.5).half()
args = [x, w]
"""
TRANSPOSED_WEIGHT = '''
import torch
import triton
import triton.language as tl


@triton.jit
def linear_fwd(x_ptr, w_ptr, y_ptr, M, N, K, stride_xm, stride_wn, stride_ym,
               BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr):
    pid_m = tl.program_id(0)
    pid_n = tl.program_id(1)
    offs_m = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
    offs_n = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
    acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
    for k in range(0, K, BLOCK_K):
        offs_k = k + tl.arange(0, BLOCK_K)
        x = tl.load(x_ptr + offs_m[:, None] * stride_xm + offs_k[None, :],
                    mask=(offs_m[:, None] < M) & (offs_k[None, :] < K), other=0.0)
        w = tl.load(w_ptr + offs_n[:, None] * stride_wn + offs_k[None, :],
                    mask=(offs_n[:, None] < N) & (offs_k[None, :] < K), other=0.0)
        acc += tl.dot(x, tl.trans(w))
    tl.store(y_ptr + offs_m[:, None] * stride_ym + offs_n[None, :], acc.to(tl.float16),
             mask=(offs_m[:, None] < M) & (offs_n[None, :] < N))


def linear(x, w):
    M, K = x.shape
    N = w.shape[0]
    y = torch.empty((M, N), device=x.device, dtype=torch.float16)
    grid = (triton.cdiv(M, 32), triton.cdiv(N, 32))
    linear_fwd[grid](x, w, y, M, N, K, x.stride(0), w.stride(0), y.stride(0), BLOCK_M=32, BLOCK_N=32, BLOCK_K=32)
    return y
'''


# A batched product on a 2-D grid (tiles on axis 0, the batch on axis 1), each operand's and the output's batch
# base pointer computed before the K loop; the contiguous layout's strides read from the sizes.
BATCHED_INPUTS = """
a = torch.randn(2, 48, 72).half()
b = (torch.randn(2, 72, 40) * 72 ** -0.5).half()
args = [a, b]
"""
BATCHED_BASES = '''
import torch
import triton
import triton.language as tl


@triton.jit
def batched_matmul_kernel(a_ptr, b_ptr, c_ptr, M, N, K, batch_stride_a, batch_stride_b, batch_stride_c,
                          BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr):
    pid = tl.program_id(0)
    batch = tl.program_id(1)
    grid_n = tl.cdiv(N, BLOCK_N)
    pid_m = pid // grid_n
    pid_n = pid % grid_n
    a_base = a_ptr + batch * batch_stride_a
    b_base = b_ptr + batch * batch_stride_b
    c_base = c_ptr + batch * batch_stride_c
    offs_m = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
    offs_n = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
    offs_k = tl.arange(0, BLOCK_K)
    acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
    for k in range(0, K, BLOCK_K):
        a = tl.load(a_base + offs_m[:, None] * K + (k + offs_k)[None, :],
                    mask=(offs_m[:, None] < M) & ((k + offs_k)[None, :] < K), other=0.0)
        b = tl.load(b_base + (k + offs_k)[:, None] * N + offs_n[None, :],
                    mask=((k + offs_k)[:, None] < K) & (offs_n[None, :] < N), other=0.0)
        acc += tl.dot(a, b)
    tl.store(c_base + offs_m[:, None] * N + offs_n[None, :], acc.to(tl.float16),
             mask=(offs_m[:, None] < M) & (offs_n[None, :] < N))


def bmm(a, b):
    B, M, K = a.shape
    N = b.shape[2]
    a, b = a.contiguous(), b.contiguous()
    c = torch.empty((B, M, N), device=a.device, dtype=torch.float16)
    grid = (triton.cdiv(M, 32) * triton.cdiv(N, 32), B)
    batched_matmul_kernel[grid](a, b, c, M, N, K, M * K, K * N, M * N, BLOCK_M=32, BLOCK_N=32, BLOCK_K=32)
    return c
'''


# K a constexpr (a kernel specialised on the inner size), the loads along it unmasked (the host asserts that the
# K tile divides it), each step's offsets added to fixed pointers (`a_ptrs + k * BLOCK_K`). K = 128 here: every
# config of matmul_configs divides it (each config is run alone, past the prune that keeps those that do).
K_CONSTEXPR_INPUTS = """
a = torch.randn(48, 128).half()
b = (torch.randn(128, 40) * 128 ** -0.5).half()
args = [a, b]
"""
K_CONSTEXPR = '''
import torch
import triton
import triton.language as tl


@triton.jit
def matmul_k_const(a_ptr, b_ptr, c_ptr, M, N, K: tl.constexpr, stride_am, stride_bk, stride_cm,
                   BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr):
    pid_m = tl.program_id(0)
    pid_n = tl.program_id(1)
    offs_m = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
    offs_n = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
    offs_k = tl.arange(0, BLOCK_K)
    a_ptrs = a_ptr + offs_m[:, None] * stride_am + offs_k[None, :]
    b_ptrs = b_ptr + offs_k[:, None] * stride_bk + offs_n[None, :]
    acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
    for k in range(0, tl.cdiv(K, BLOCK_K)):
        a = tl.load(a_ptrs + k * BLOCK_K, mask=offs_m[:, None] < M, other=0.0)
        b = tl.load(b_ptrs + k * BLOCK_K * stride_bk, mask=offs_n[None, :] < N, other=0.0)
        acc += tl.dot(a, b)
    tl.store(c_ptr + offs_m[:, None] * stride_cm + offs_n[None, :], acc.to(tl.float16),
             mask=(offs_m[:, None] < M) & (offs_n[None, :] < N))


def matmul(a, b):
    M, K = a.shape
    _, N = b.shape
    assert K % 32 == 0, "K must be a multiple of BLOCK_K"
    c = torch.empty((M, N), device=a.device, dtype=torch.float16)
    grid = (triton.cdiv(M, 32), triton.cdiv(N, 32))
    matmul_k_const[grid](a, b, c, M, N, K, a.stride(0), b.stride(0), c.stride(0), BLOCK_M=32, BLOCK_N=32,
                         BLOCK_K=32)
    return c
'''


# A 1-D grid split into a row by `pid // n` and a column by subtraction (`pid - row * n`, the remainder spelled
# out), the K loop over block indices with the pointers advanced each step.
REMAINDER_BY_SUBTRACTION = '''
import torch
import triton
import triton.language as tl


@triton.jit
def mm_flat(a_ptr, b_ptr, c_ptr, M, N, K, sam, sak, sbk, sbn, scm, scn,
            BM: tl.constexpr, BN: tl.constexpr, BK: tl.constexpr):
    pid = tl.program_id(0)
    tiles_n = tl.cdiv(N, BN)
    tile_m = pid // tiles_n
    tile_n = pid - tile_m * tiles_n
    rm = tile_m * BM + tl.arange(0, BM)
    rn = tile_n * BN + tl.arange(0, BN)
    rk = tl.arange(0, BK)
    a_ptrs = a_ptr + rm[:, None] * sam + rk[None, :] * sak
    b_ptrs = b_ptr + rk[:, None] * sbk + rn[None, :] * sbn
    acc = tl.zeros((BM, BN), dtype=tl.float32)
    for kb in range(0, tl.cdiv(K, BK)):
        a = tl.load(a_ptrs, mask=(rm[:, None] < M) & (rk[None, :] < K - kb * BK), other=0.0)
        b = tl.load(b_ptrs, mask=(rk[:, None] < K - kb * BK) & (rn[None, :] < N), other=0.0)
        acc += tl.dot(a, b)
        a_ptrs += BK * sak
        b_ptrs += BK * sbk
    tl.store(c_ptr + rm[:, None] * scm + rn[None, :] * scn, acc.to(tl.float16),
             mask=(rm[:, None] < M) & (rn[None, :] < N))


def matmul(a, b):
    M, K = a.shape
    _, N = b.shape
    c = torch.empty((M, N), device=a.device, dtype=torch.float16)
    grid = (triton.cdiv(M, 32) * triton.cdiv(N, 32),)
    mm_flat[grid](a, b, c, M, N, K, a.stride(0), a.stride(1), b.stride(0), b.stride(1), c.stride(0), c.stride(1),
                  BM=32, BN=32, BK=32)
    return c
'''


# Guards: a program whose tile starts past the matrix returns at once (`if pid_m * BM >= M: return`), one guard
# per axis, before anything else.
GUARDS = '''
import torch
import triton
import triton.language as tl


@triton.jit
def guarded_mm(a_ptr, b_ptr, c_ptr, M, N, K, sam, sak, sbk, sbn, scm, scn,
               BM: tl.constexpr, BN: tl.constexpr, BK: tl.constexpr):
    pid_m = tl.program_id(0)
    pid_n = tl.program_id(1)
    if pid_m * BM >= M:
        return
    if pid_n * BN >= N:
        return
    rm = pid_m * BM + tl.arange(0, BM)
    rn = pid_n * BN + tl.arange(0, BN)
    rk = tl.arange(0, BK)
    acc = tl.zeros((BM, BN), dtype=tl.float32)
    for k in range(0, K, BK):
        a = tl.load(a_ptr + rm[:, None] * sam + (k + rk)[None, :] * sak,
                    mask=(rm[:, None] < M) & (k + rk[None, :] < K), other=0.0)
        b = tl.load(b_ptr + (k + rk)[:, None] * sbk + rn[None, :] * sbn,
                    mask=(k + rk[:, None] < K) & (rn[None, :] < N), other=0.0)
        acc += tl.dot(a, b)
    tl.store(c_ptr + rm[:, None] * scm + rn[None, :] * scn, acc.to(tl.float16),
             mask=(rm[:, None] < M) & (rn[None, :] < N))


def matmul(a, b):
    M, K = a.shape
    _, N = b.shape
    c = torch.empty((M, N), device=a.device, dtype=torch.float16)
    guarded_mm[(triton.cdiv(M, 32), triton.cdiv(N, 32))](a, b, c, M, N, K, a.stride(0), a.stride(1), b.stride(0),
                                                          b.stride(1), c.stride(0), c.stride(1), 32, 32, 32)
    return c
'''


# The host's ceiling divisions spelled with their divisor less one written out, `(M + 31) // 32`, in a 1-D grid.
CEIL_BY_HAND = '''
import torch
import triton
import triton.language as tl


@triton.jit
def matmul_kernel(a_ptr, b_ptr, c_ptr, M, N, K, stride_am, stride_ak, stride_bk, stride_bn, stride_cm, stride_cn,
                  BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr):
    pid = tl.program_id(0)
    num_pid_n = (N + BLOCK_N - 1) // BLOCK_N
    pid_m = pid // num_pid_n
    pid_n = pid % num_pid_n
    offs_m = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
    offs_n = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
    offs_k = tl.arange(0, BLOCK_K)
    acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
    for k in range(0, K, BLOCK_K):
        a = tl.load(a_ptr + offs_m[:, None] * stride_am + (k + offs_k)[None, :] * stride_ak,
                    mask=(offs_m[:, None] < M) & ((k + offs_k)[None, :] < K), other=0.0)
        b = tl.load(b_ptr + (k + offs_k)[:, None] * stride_bk + offs_n[None, :] * stride_bn,
                    mask=((k + offs_k)[:, None] < K) & (offs_n[None, :] < N), other=0.0)
        acc = tl.dot(a, b, acc)
    tl.store(c_ptr + offs_m[:, None] * stride_cm + offs_n[None, :] * stride_cn, acc.to(tl.float16),
             mask=(offs_m[:, None] < M) & (offs_n[None, :] < N))


def matmul(a, b):
    M, K = a.shape
    _, N = b.shape
    c = torch.empty((M, N), device=a.device, dtype=torch.float16)
    grid = (((M + 31) // 32) * ((N + 31) // 32),)
    matmul_kernel[grid](a, b, c, M, N, K, a.stride(0), a.stride(1), b.stride(0), b.stride(1), c.stride(0),
                        c.stride(1), BLOCK_M=32, BLOCK_N=32, BLOCK_K=32)
    return c
'''


SPELLINGS = [
    Spelling("gemm", name, source, "matmul", INPUTS, TILES, interpretable=name != "block_pointers")
    for name, source in (("literal_grid", LITERAL_GRID), ("tuple_grid_variables", TUPLE_GRID_VARIABLES),
                         ("lambda_meta", LAMBDA_META), ("while_loop", WHILE_LOOP), ("helper_jit", HELPER),
                         ("grid_function", GRID_FUNCTION), ("block_pointers", BLOCK_POINTERS),
                         ("count_down", COUNT_DOWN))
]
SPELLINGS += [Spelling("gemm", "linear_bias_relu", LINEAR_BIAS_RELU, "linear_relu", LINEAR_INPUTS, TILES),
              Spelling("gemm", "transposed_weight", TRANSPOSED_WEIGHT, "linear", TRANSPOSED_INPUTS, TILES)]
SPELLINGS += [Spelling("gemm", "batched_bases", BATCHED_BASES, "bmm", BATCHED_INPUTS, TILES)]
SPELLINGS += [Spelling("gemm", "k_constexpr", K_CONSTEXPR, "matmul", K_CONSTEXPR_INPUTS, TILES)]
SPELLINGS += [Spelling("gemm", "remainder_by_subtraction", REMAINDER_BY_SUBTRACTION, "matmul", INPUTS, TILES)]
SPELLINGS += [Spelling("gemm", "guards", GUARDS, "matmul", INPUTS, TILES)]
# The same linear layer with the weight's tile transposed by its `.T` attribute.
TRANSPOSED_ATTRIBUTE = TRANSPOSED_WEIGHT.replace("tl.dot(x, tl.trans(w))", "tl.dot(x, w.T)")
assert "w.T" in TRANSPOSED_ATTRIBUTE
SPELLINGS += [Spelling("gemm", "transposed_attribute", TRANSPOSED_ATTRIBUTE, "linear", TRANSPOSED_INPUTS, TILES)]
# The 2-D grid's ceiling divisions as math.ceil of a true division.
MATH_CEIL = CEIL_BY_HAND.replace("import torch\n", "import math\n\nimport torch\n", 1).replace(
    "    pid = tl.program_id(0)\n    num_pid_n = (N + BLOCK_N - 1) // BLOCK_N\n    pid_m = pid // num_pid_n\n"
    "    pid_n = pid % num_pid_n\n", "    pid_m = tl.program_id(0)\n    pid_n = tl.program_id(1)\n").replace(
    "grid = (((M + 31) // 32) * ((N + 31) // 32),)", "grid = (math.ceil(M / 32), math.ceil(N / 32))")
assert "math.ceil(M / 32)" in MATH_CEIL and "pid_n = tl.program_id(1)" in MATH_CEIL
SPELLINGS += [Spelling("gemm", "ceil_by_hand", CEIL_BY_HAND, "matmul", INPUTS, TILES),
              Spelling("gemm", "math_ceil", MATH_CEIL, "matmul", INPUTS, TILES)]
