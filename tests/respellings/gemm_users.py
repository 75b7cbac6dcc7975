"""GEMMs written as users write them: a batch on grid axis 2, a batch split out of a 1-D grid, an int8 GEMM
with scales, A transposed by its strides, a linear layer counting whole K tiles, tiles the source fixes, block
pointers over a block-index loop, unmasked tiles behind the host's assert that they divide the sizes, grids and
K loops that count whole tiles (floor divisions), tensor descriptors made in the kernel."""


from __future__ import annotations

from respellings import Spelling

TILES = ("matmul_configs", "split_k", "persistent_tiles", "grouped_ordering")

INPUTS = """
a = torch.randn(48, 72).half()
b = (torch.randn(72, 40) * 72 ** -0.5).half()
args = [a, b]
"""

BATCH_INPUTS = """
a = torch.randn(3, 40, 72).half()
b = (torch.randn(3, 72, 48) * 72 ** -0.5).half()
args = [a, b]
"""

INT8_INPUTS = """
a = torch.randint(-100, 100, (40, 200), dtype=torch.int8)
b = torch.randint(-100, 100, (200, 48), dtype=torch.int8)
args = [a, b, torch.rand(40) * 0.01, torch.rand(48) * 0.01]
"""

AT_INPUTS = """
a = torch.randn(72, 48).half()
b = (torch.randn(72, 40) * 72 ** -0.5).half()
args = [a, b]
"""

# A batched product on a 3-D grid, the batch on axis 2 (`tl.program_id(2)`) offsetting each base pointer, the
# output's batch offset in the store's address; strides passed for every axis.
BMM_PROGRAM_ID_2 = '''
import torch
import triton
import triton.language as tl


@triton.jit
def bmm_kernel(x_ptr, y_ptr, out_ptr, M, N, K, sxb, sxm, sxk, syb, syk, syn, sob, som, son,
               BM: tl.constexpr, BN: tl.constexpr, BK: tl.constexpr):
    pm = tl.program_id(0)
    pn = tl.program_id(1)
    pb = tl.program_id(2)
    x_ptr += pb * sxb
    y_ptr += pb * syb
    rm = pm * BM + tl.arange(0, BM)
    rn = pn * BN + tl.arange(0, BN)
    rk = tl.arange(0, BK)
    acc = tl.zeros((BM, BN), dtype=tl.float32)
    for k in range(0, K, BK):
        xa = tl.load(x_ptr + rm[:, None] * sxm + (k + rk)[None, :] * sxk, mask=(rm[:, None] < M) & ((k + rk)[None, :] < K), other=0.0)
        yb = tl.load(y_ptr + (k + rk)[:, None] * syk + rn[None, :] * syn, mask=((k + rk)[:, None] < K) & (rn[None, :] < N), other=0.0)
        acc += tl.dot(xa, yb)
    out = out_ptr + pb * sob + rm[:, None] * som + rn[None, :] * son
    tl.store(out, acc.to(out_ptr.dtype.element_ty), mask=(rm[:, None] < M) & (rn[None, :] < N))


def bmm(x, y):
    B, M, K = x.shape
    N = y.shape[2]
    out = torch.empty((B, M, N), device=x.device, dtype=x.dtype)
    grid = (triton.cdiv(M, 32), triton.cdiv(N, 32), B)
    bmm_kernel[grid](x, y, out, M, N, K, x.stride(0), x.stride(1), x.stride(2), y.stride(0), y.stride(1), y.stride(2),
                     out.stride(0), out.stride(1), out.stride(2), BM=32, BN=32, BK=32)
    return out
'''

# A batched product on a 1-D grid whose program id is split into a batch and a tile (`pid // per_batch`), the
# K loop over `tl.cdiv(K, BLOCK_K)` block indices with masks `offs_k < K - k * BLOCK_K`.
BMM_FLAT_GRID = '''
import torch
import triton
import triton.language as tl


@triton.jit
def bmm_flat(a_ptr, b_ptr, c_ptr, M, N, K, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr):
    pid = tl.program_id(axis=0)
    num_m = tl.cdiv(M, BLOCK_M)
    num_n = tl.cdiv(N, BLOCK_N)
    per_batch = num_m * num_n
    bid = pid // per_batch
    t = pid % per_batch
    pid_m = t // num_n
    pid_n = t % num_n
    offs_m = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
    offs_n = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
    offs_k = tl.arange(0, BLOCK_K)
    a_ptrs = a_ptr + bid * M * K + offs_m[:, None] * K + offs_k[None, :]
    b_ptrs = b_ptr + bid * K * N + offs_k[:, None] * N + offs_n[None, :]
    acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
    for k in range(0, tl.cdiv(K, BLOCK_K)):
        a = tl.load(a_ptrs, mask=(offs_m[:, None] < M) & (offs_k[None, :] < K - k * BLOCK_K), other=0.0)
        b = tl.load(b_ptrs, mask=(offs_k[:, None] < K - k * BLOCK_K) & (offs_n[None, :] < N), other=0.0)
        acc = tl.dot(a, b, acc)
        a_ptrs += BLOCK_K
        b_ptrs += BLOCK_K * N
    c_ptrs = c_ptr + bid * M * N + offs_m[:, None] * N + offs_n[None, :]
    tl.store(c_ptrs, acc.to(tl.float16), mask=(offs_m[:, None] < M) & (offs_n[None, :] < N))


def bmm(a, b):
    B, M, K = a.shape
    N = b.shape[2]
    a, b = a.contiguous(), b.contiguous()
    c = torch.empty((B, M, N), device=a.device, dtype=torch.float16)
    bmm_flat[(B * triton.cdiv(M, 32) * triton.cdiv(N, 32),)](a, b, c, M, N, K, BLOCK_M=32, BLOCK_N=32, BLOCK_K=32)
    return c
'''

# An int8 GEMM into an int32 accumulator, dequantized by a row scale and a column scale in its epilogue; the
# K loop over block indices (`kk = k * BK + rk`).
INT8_SCALED = '''
import torch
import triton
import triton.language as tl


@triton.jit
def int8_mm(a_ptr, b_ptr, sa_ptr, sb_ptr, c_ptr, M, N, K, BM: tl.constexpr, BN: tl.constexpr, BK: tl.constexpr):
    pid_m = tl.program_id(0)
    pid_n = tl.program_id(1)
    rm = pid_m * BM + tl.arange(0, BM)
    rn = pid_n * BN + tl.arange(0, BN)
    rk = tl.arange(0, BK)
    acc = tl.zeros((BM, BN), dtype=tl.int32)
    for k in range(0, tl.cdiv(K, BK)):
        kk = k * BK + rk
        a = tl.load(a_ptr + rm[:, None] * K + kk[None, :], mask=(rm[:, None] < M) & (kk[None, :] < K), other=0)
        b = tl.load(b_ptr + kk[:, None] * N + rn[None, :], mask=(kk[:, None] < K) & (rn[None, :] < N), other=0)
        acc += tl.dot(a, b)
    sa = tl.load(sa_ptr + rm, mask=rm < M, other=0.0)
    sb = tl.load(sb_ptr + rn, mask=rn < N, other=0.0)
    c = acc.to(tl.float32) * sa[:, None] * sb[None, :]
    tl.store(c_ptr + rm[:, None] * N + rn[None, :], c.to(tl.float16), mask=(rm[:, None] < M) & (rn[None, :] < N))


def int8_matmul(a, b, sa, sb):
    M, K = a.shape
    N = b.shape[1]
    c = torch.empty((M, N), device=a.device, dtype=torch.float16)
    int8_mm[(triton.cdiv(M, 32), triton.cdiv(N, 32))](a, b, sa, sb, c, M, N, K, BM=32, BN=32, BK=32)
    return c
'''

# C = A^T @ B with A stored (K, M): the (M, K) tile read through A's strides, passed in (k, m) order; a grid
# lambda of meta evaluated on the constexprs the launch passes; `tl.dot(a, b, acc=acc)`.
A_TRANSPOSED_BY_STRIDES = '''
import torch
import triton
import triton.language as tl


@triton.jit
def atb_kernel(a_ptr, b_ptr, c_ptr, M, N, K, stride_ak, stride_am, stride_bk, stride_bn, stride_cm, stride_cn,
               BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr):
    # C = A^T @ B where A is (K, M): the M x K tile is read through A's strides
    pid_m = tl.program_id(0)
    pid_n = tl.program_id(1)
    offs_m = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
    offs_n = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
    offs_k = tl.arange(0, BLOCK_K)
    a_ptrs = a_ptr + offs_k[None, :] * stride_ak + offs_m[:, None] * stride_am
    b_ptrs = b_ptr + offs_k[:, None] * stride_bk + offs_n[None, :] * stride_bn
    acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
    for k in range(0, K, BLOCK_K):
        a = tl.load(a_ptrs, mask=(offs_k[None, :] + k < K) & (offs_m[:, None] < M), other=0.0)
        b = tl.load(b_ptrs, mask=(offs_k[:, None] + k < K) & (offs_n[None, :] < N), other=0.0)
        acc = tl.dot(a, b, acc=acc)
        a_ptrs += BLOCK_K * stride_ak
        b_ptrs += BLOCK_K * stride_bk
    tl.store(c_ptr + offs_m[:, None] * stride_cm + offs_n[None, :] * stride_cn, acc.to(tl.float16),
             mask=(offs_m[:, None] < M) & (offs_n[None, :] < N))


def at_matmul(a, b):
    K, M = a.shape
    N = b.shape[1]
    c = torch.empty((M, N), device=a.device, dtype=torch.float16)
    grid = lambda META: (triton.cdiv(M, META["BLOCK_M"]), triton.cdiv(N, META["BLOCK_N"]))
    atb_kernel[grid](a, b, c, M, N, K, a.stride(0), a.stride(1), b.stride(0), b.stride(1), c.stride(0), c.stride(1),
                     BLOCK_M=32, BLOCK_N=32, BLOCK_K=32)
    return c
'''

# Tiles fixed by the source: a module constant `BLOCK = 32` for M and N, a literal 32 for K; the kernel has no
# constexpr parameter (matmul_configs has no tile to set).
MODULE_CONSTANT_TILES = '''
import torch
import triton
import triton.language as tl

BLOCK = 32


@triton.jit
def mm_lit(a_ptr, b_ptr, c_ptr, M, N, K):
    pid_m = tl.program_id(0)
    pid_n = tl.program_id(1)
    om = pid_m * BLOCK + tl.arange(0, BLOCK)
    on = pid_n * BLOCK + tl.arange(0, BLOCK)
    ok = tl.arange(0, 32)
    acc = tl.zeros((BLOCK, BLOCK), dtype=tl.float32)
    for k0 in range(0, K, 32):
        a = tl.load(a_ptr + om[:, None] * K + (k0 + ok)[None, :], mask=(om[:, None] < M) & ((k0 + ok)[None, :] < K), other=0.0)
        b = tl.load(b_ptr + (k0 + ok)[:, None] * N + on[None, :], mask=((k0 + ok)[:, None] < K) & (on[None, :] < N), other=0.0)
        acc += tl.dot(a, b)
    tl.store(c_ptr + om[:, None] * N + on[None, :], acc.to(tl.float16), mask=(om[:, None] < M) & (on[None, :] < N))


def matmul(a, b):
    M, K = a.shape
    N = b.shape[1]
    c = torch.empty((M, N), device=a.device, dtype=torch.float16)
    mm_lit[(triton.cdiv(M, BLOCK), triton.cdiv(N, BLOCK))](a, b, c, M, N, K)
    return c
'''

# Block pointers over a K loop of `tl.cdiv(K, BLOCK_K)` steps with an unused loop variable; the interpreter
# refuses block pointers.
BLOCK_POINTER_CDIV = '''
import torch
import triton
import triton.language as tl


@triton.jit
def bp_kernel(a_ptr, b_ptr, c_ptr, M, N, K, sam, sak, sbk, sbn, scm, scn,
              BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr):
    pid_m = tl.program_id(0)
    pid_n = tl.program_id(1)
    a_blk = tl.make_block_ptr(a_ptr, (M, K), (sam, sak), (pid_m * BLOCK_M, 0), (BLOCK_M, BLOCK_K), (1, 0))
    b_blk = tl.make_block_ptr(b_ptr, (K, N), (sbk, sbn), (0, pid_n * BLOCK_N), (BLOCK_K, BLOCK_N), (1, 0))
    acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
    for _ in range(0, tl.cdiv(K, BLOCK_K)):
        a = tl.load(a_blk, boundary_check=(0, 1), padding_option="zero")
        b = tl.load(b_blk, boundary_check=(0, 1), padding_option="zero")
        acc = tl.dot(a, b, acc)
        a_blk = tl.advance(a_blk, (0, BLOCK_K))
        b_blk = tl.advance(b_blk, (BLOCK_K, 0))
    c_blk = tl.make_block_ptr(c_ptr, (M, N), (scm, scn), (pid_m * BLOCK_M, pid_n * BLOCK_N), (BLOCK_M, BLOCK_N), (1, 0))
    tl.store(c_blk, acc.to(tl.float16), boundary_check=(0, 1))


def matmul(a, b):
    M, K = a.shape
    N = b.shape[1]
    c = torch.empty((M, N), device=a.device, dtype=torch.float16)
    bp_kernel[(triton.cdiv(M, 64), triton.cdiv(N, 64))](a, b, c, M, N, K, a.stride(0), a.stride(1), b.stride(0),
                                                          b.stride(1), c.stride(0), c.stride(1), BLOCK_M=64, BLOCK_N=64, BLOCK_K=32)
    return c
'''

# A linear layer y = gelu(x @ W.T + b) whose K loop counts whole tiles, `range(0, K // BLOCK_K)`, its loads
# unmasked along K (the host asserts that the K tile divides K); the epilogue adds the bias and applies erf-GELU
# in place.
LINEAR_GELU = '''
import torch
import triton
import triton.language as tl


@triton.jit
def linear_fwd(x_ptr, w_ptr, bias_ptr, y_ptr, M, N, K, stride_xm, stride_wn, stride_ym,
               BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr):
    pid_m = tl.program_id(0)
    pid_n = tl.program_id(1)
    rows = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
    cols = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
    ks = tl.arange(0, BLOCK_K)
    acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
    for k in range(0, K // BLOCK_K):
        kk = k * BLOCK_K + ks
        x = tl.load(x_ptr + rows[:, None] * stride_xm + kk[None, :], mask=rows[:, None] < M, other=0.0)
        w = tl.load(w_ptr + cols[None, :] * stride_wn + kk[:, None], mask=cols[None, :] < N, other=0.0)
        acc += tl.dot(x, w)
    bias = tl.load(bias_ptr + cols, mask=cols < N, other=0.0).to(tl.float32)
    acc += bias[None, :]
    acc = acc * 0.5 * (1.0 + tl.erf(acc * 0.7071067811865476))
    tl.store(y_ptr + rows[:, None] * stride_ym + cols[None, :], acc.to(tl.float16), mask=(rows[:, None] < M) & (cols[None, :] < N))


def linear_gelu(x, w, bias):
    M, K = x.shape
    N = w.shape[0]
    assert K % 32 == 0
    y = torch.empty((M, N), device=x.device, dtype=torch.float16)
    grid = (triton.cdiv(M, 32), triton.cdiv(N, 32))
    linear_fwd[grid](x, w, bias, y, M, N, K, x.stride(0), w.stride(0), y.stride(0), BLOCK_M=32, BLOCK_N=32, BLOCK_K=32)
    return y
'''

LINEAR_INPUTS = """
x = torch.randn(40, 128).half()
w = (torch.randn(48, 128) * 128 ** -0.5).half()
args = [x, w, torch.randn(48).half()]
"""

# Unmasked loads and store, the sizes' divisibility asserted on the host; a meta grid bound to a name (`grid =
# lambda META: ...`), the K loop a `while`, the accumulator passed as `acc=`.
UNMASKED_ASSERTED = '''
import torch
import triton
import triton.language as tl


@triton.jit
def matmul_kernel(a_ptr, b_ptr, c_ptr, M, N, K, BLOCK_SIZE_M: tl.constexpr, BLOCK_SIZE_N: tl.constexpr,
                  BLOCK_SIZE_K: tl.constexpr):
    pid_m = tl.program_id(0)
    pid_n = tl.program_id(1)
    offs_am = pid_m * BLOCK_SIZE_M + tl.arange(0, BLOCK_SIZE_M)
    offs_bn = pid_n * BLOCK_SIZE_N + tl.arange(0, BLOCK_SIZE_N)
    offs_k = tl.arange(0, BLOCK_SIZE_K)
    a_ptrs = a_ptr + offs_am[:, None] * K + offs_k[None, :]
    b_ptrs = b_ptr + offs_k[:, None] * N + offs_bn[None, :]
    accumulator = tl.zeros((BLOCK_SIZE_M, BLOCK_SIZE_N), dtype=tl.float32)
    k = 0
    while k < K:
        a = tl.load(a_ptrs)
        b = tl.load(b_ptrs)
        accumulator = tl.dot(a, b, acc=accumulator)
        a_ptrs += BLOCK_SIZE_K
        b_ptrs += BLOCK_SIZE_K * N
        k += BLOCK_SIZE_K
    tl.store(c_ptr + offs_am[:, None] * N + offs_bn[None, :], accumulator.to(tl.float16))


def matmul(a, b):
    M, K = a.shape
    _, N = b.shape
    assert M % 128 == 0 and N % 128 == 0 and K % 64 == 0, "sizes must be multiples of the tiles"
    c = torch.empty((M, N), device=a.device, dtype=torch.float16)
    grid = lambda META: (triton.cdiv(M, META["BLOCK_SIZE_M"]), triton.cdiv(N, META["BLOCK_SIZE_N"]))
    matmul_kernel[grid](a, b, c, M, N, K, BLOCK_SIZE_M=128, BLOCK_SIZE_N=128, BLOCK_SIZE_K=64)
    return c
'''

ASSERTED_INPUTS = """
a = torch.randn(256, 128).half()
b = (torch.randn(128, 256) * 128 ** -0.5).half()
args = [a, b]
"""

# Unmasked tiles behind the host's assert, the grid a floor division with the tile written as a literal
# (`(M // 64, N // 64)`) and the K loop over whole blocks (`range(0, K // BLOCK_K)`): each counts whole tiles only.
FLOOR_GRID = '''import torch
import triton
import triton.language as tl


@triton.jit
def matmul_kernel(a_ptr, b_ptr, c_ptr, M, N, K, stride_am, stride_ak, stride_bk, stride_bn, stride_cm, stride_cn,
                  BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr):
    pid_m = tl.program_id(0)
    pid_n = tl.program_id(1)
    offs_m = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
    offs_n = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
    offs_k = tl.arange(0, BLOCK_K)
    a_ptrs = a_ptr + offs_m[:, None] * stride_am + offs_k[None, :] * stride_ak
    b_ptrs = b_ptr + offs_k[:, None] * stride_bk + offs_n[None, :] * stride_bn
    acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
    for k in range(0, K // BLOCK_K):
        a = tl.load(a_ptrs)
        b = tl.load(b_ptrs)
        acc += tl.dot(a, b)
        a_ptrs += BLOCK_K * stride_ak
        b_ptrs += BLOCK_K * stride_bk
    c_ptrs = c_ptr + offs_m[:, None] * stride_cm + offs_n[None, :] * stride_cn
    tl.store(c_ptrs, acc.to(tl.float16))


def matmul(a, b):
    M, K = a.shape
    K2, N = b.shape
    assert K == K2
    assert M % 64 == 0 and N % 64 == 0 and K % 32 == 0
    c = torch.empty((M, N), device=a.device, dtype=torch.float16)
    grid = (M // 64, N // 64)
    matmul_kernel[grid](a, b, c, M, N, K, a.stride(0), a.stride(1), b.stride(0), b.stride(1), c.stride(0), c.stride(1),
                        BLOCK_M=64, BLOCK_N=64, BLOCK_K=32)
    return c
'''

# Masked rows and columns, but a meta grid that counts whole tiles (`M // META["BLOCK_M"]`) and a K loop over whole
# blocks: a tile that does not divide the size would leave part of it undone, so the configs keep to those that do.
FLOOR_META_MASKED = '''import torch
import triton
import triton.language as tl


@triton.jit
def matmul_kernel(a_ptr, b_ptr, c_ptr, M, N, K, stride_am, stride_ak, stride_bk, stride_bn, stride_cm, stride_cn,
                  BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr):
    pid_m = tl.program_id(0)
    pid_n = tl.program_id(1)
    offs_m = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
    offs_n = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
    offs_k = tl.arange(0, BLOCK_K)
    a_ptrs = a_ptr + offs_m[:, None] * stride_am + offs_k[None, :] * stride_ak
    b_ptrs = b_ptr + offs_k[:, None] * stride_bk + offs_n[None, :] * stride_bn
    acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
    for k in range(0, K // BLOCK_K):
        a = tl.load(a_ptrs, mask=offs_m[:, None] < M, other=0.0)
        b = tl.load(b_ptrs, mask=offs_n[None, :] < N, other=0.0)
        acc += tl.dot(a, b)
        a_ptrs += BLOCK_K * stride_ak
        b_ptrs += BLOCK_K * stride_bk
    c_ptrs = c_ptr + offs_m[:, None] * stride_cm + offs_n[None, :] * stride_cn
    tl.store(c_ptrs, acc.to(tl.float16), mask=(offs_m[:, None] < M) & (offs_n[None, :] < N))


def matmul(a, b):
    M, K = a.shape
    K2, N = b.shape
    assert K == K2
    c = torch.empty((M, N), device=a.device, dtype=torch.float16)
    grid = lambda META: (M // META["BLOCK_M"], N // META["BLOCK_N"])
    matmul_kernel[grid](a, b, c, M, N, K, a.stride(0), a.stride(1), b.stride(0), b.stride(1), c.stride(0), c.stride(1),
                        BLOCK_M=128, BLOCK_N=64, BLOCK_K=32)
    return c
'''

# Tensor descriptors made in the kernel (`tl.make_tensor_descriptor`, TMA on Hopper), loaded and stored by tile
# offsets; the host sets Triton's allocator for their workspace. The interpreter runs no descriptor: the variants
# are compiled for sm_90 here and run by the GPU test.
TENSOR_DESCRIPTORS = '''import torch
import triton
import triton.language as tl


@triton.jit
def matmul_tma(a_ptr, b_ptr, c_ptr, M, N, K, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr):
    a_desc = tl.make_tensor_descriptor(a_ptr, shape=[M, K], strides=[K, 1], block_shape=[BLOCK_M, BLOCK_K])
    b_desc = tl.make_tensor_descriptor(b_ptr, shape=[K, N], strides=[N, 1], block_shape=[BLOCK_K, BLOCK_N])
    c_desc = tl.make_tensor_descriptor(c_ptr, shape=[M, N], strides=[N, 1], block_shape=[BLOCK_M, BLOCK_N])
    pid_m = tl.program_id(0)
    pid_n = tl.program_id(1)
    acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
    for k in range(0, tl.cdiv(K, BLOCK_K)):
        a = a_desc.load([pid_m * BLOCK_M, k * BLOCK_K])
        b = b_desc.load([k * BLOCK_K, pid_n * BLOCK_N])
        acc = tl.dot(a, b, acc)
    c_desc.store([pid_m * BLOCK_M, pid_n * BLOCK_N], acc.to(tl.float16))


def matmul(a, b):
    M, K = a.shape
    _, N = b.shape
    c = torch.empty((M, N), device=a.device, dtype=torch.float16)

    def alloc_fn(size, alignment, stream):
        return torch.empty(size, device="cuda", dtype=torch.int8)

    triton.set_allocator(alloc_fn)
    grid = (triton.cdiv(M, 128), triton.cdiv(N, 128))
    matmul_tma[grid](a, b, c, M, N, K, BLOCK_M=128, BLOCK_N=128, BLOCK_K=64)
    return c
'''

SPELLINGS = [
    Spelling("gemm", "bmm_pid2", BMM_PROGRAM_ID_2, "bmm", BATCH_INPUTS, TILES),
    Spelling("gemm", "bmm_flat", BMM_FLAT_GRID, "bmm", BATCH_INPUTS, TILES[:3]),
    Spelling("gemm", "int8_scaled", INT8_SCALED, "int8_matmul", INT8_INPUTS, TILES),
    Spelling("gemm", "at_strides", A_TRANSPOSED_BY_STRIDES, "at_matmul", AT_INPUTS, TILES),
    Spelling("gemm", "literal_tiles", MODULE_CONSTANT_TILES, "matmul", INPUTS, ("split_k", "persistent_tiles", "grouped_ordering")),
    Spelling("gemm", "linear_gelu", LINEAR_GELU, "linear_gelu", LINEAR_INPUTS, TILES[1:]),
    Spelling("gemm", "block_ptr", BLOCK_POINTER_CDIV, "matmul", INPUTS, TILES, interpretable=False),
    Spelling("gemm", "unmasked_asserted", UNMASKED_ASSERTED, "matmul", ASSERTED_INPUTS, TILES),
    Spelling("gemm", "floor_grid", FLOOR_GRID, "matmul", ASSERTED_INPUTS, TILES),
    Spelling("gemm", "floor_meta_masked", FLOOR_META_MASKED, "matmul", ASSERTED_INPUTS, TILES),
    Spelling("gemm", "tensor_descriptors", TENSOR_DESCRIPTORS, "matmul", ASSERTED_INPUTS,
             ("matmul_configs", "persistent_tiles", "grouped_ordering"), interpretable=False),
]
