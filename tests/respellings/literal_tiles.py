"""Tiles written as integers in the kernel's body (`tl.arange(0, 1024)`, `pid_m * 64`, `range(0, K, 32)`,
`tl.zeros((64, 64))`), and one constexpr sizing both a GEMM's M and N tiles: an element-wise kernel, a 2-D
tile of rows and columns, and four GEMMs (one integer for all three tiles in one, block pointers in another). The rewrites that set a tile's size read the literals as constexprs
(rewrites/literal_tiles.py); a GEMM whose M and N share one tile takes the square configs."""

from __future__ import annotations

from respellings import Spelling
from respellings.elementwise import INPUTS as AFFINE_INPUTS
from respellings.gemm import INPUTS as GEMM_INPUTS

AFFINE_LITERAL = '''
import torch
import triton
import triton.language as tl


@triton.jit
def scale_shift(x_ptr, y_ptr, n, alpha, beta):
    pid = tl.program_id(0)
    offs = pid * 1024 + tl.arange(0, 1024)
    m = offs < n
    x = tl.load(x_ptr + offs, mask=m)
    tl.store(y_ptr + offs, x * alpha + beta, mask=m)


def affine(x, alpha, beta):
    y = torch.empty_like(x)
    n = x.numel()
    scale_shift[(triton.cdiv(n, 1024),)](x, y, n, alpha, beta)
    return y
'''

ADD_2D_INPUTS = """
x = torch.randn(45, 150)
r = torch.randn(45, 150)
args = [x, r]
"""
ADD_2D_LITERAL = '''
import torch
import triton
import triton.language as tl


@triton.jit
def add_tile(x_ptr, r_ptr, out_ptr, rows, cols, stride):
    pr = tl.program_id(0)
    pc = tl.program_id(1)
    ro = pr * 16 + tl.arange(0, 16)
    co = pc * 64 + tl.arange(0, 64)
    mask = (ro[:, None] < rows) & (co[None, :] < cols)
    at = ro[:, None] * stride + co[None, :]
    x = tl.load(x_ptr + at, mask=mask)
    r = tl.load(r_ptr + at, mask=mask)
    tl.store(out_ptr + at, x + r, mask=mask)


def add(x, r):
    out = torch.empty_like(x)
    rows, cols = x.shape
    add_tile[(triton.cdiv(rows, 16), triton.cdiv(cols, 64))](x, r, out, rows, cols, x.stride(0))
    return out
'''

GEMM_LITERAL = '''
import torch
import triton
import triton.language as tl


@triton.jit
def mm(a, b, c, M, N, K, sam, sak, sbk, sbn, scm, scn):
    pm = tl.program_id(0)
    pn = tl.program_id(1)
    rm = pm * 64 + tl.arange(0, 64)
    rn = pn * 64 + tl.arange(0, 64)
    rk = tl.arange(0, 32)
    acc = tl.zeros((64, 64), dtype=tl.float32)
    for k in range(0, K, 32):
        a_t = tl.load(a + rm[:, None] * sam + (k + rk)[None, :] * sak,
                      mask=(rm[:, None] < M) & ((k + rk)[None, :] < K), other=0.0)
        b_t = tl.load(b + (k + rk)[:, None] * sbk + rn[None, :] * sbn,
                      mask=((k + rk)[:, None] < K) & (rn[None, :] < N), other=0.0)
        acc += tl.dot(a_t, b_t)
    tl.store(c + rm[:, None] * scm + rn[None, :] * scn, acc.to(tl.float16),
             mask=(rm[:, None] < M) & (rn[None, :] < N))


def matmul(a, b):
    M, K = a.shape
    _, N = b.shape
    c = torch.empty((M, N), device=a.device, dtype=torch.float16)
    grid = (triton.cdiv(M, 64), triton.cdiv(N, 64))
    mm[grid](a, b, c, M, N, K, a.stride(0), a.stride(1), b.stride(0), b.stride(1), c.stride(0), c.stride(1))
    return c
'''

# one BLOCK for both output axes, the K tile apart; the pointers advance by BK strides
GEMM_SHARED_TILE = '''
import torch
import triton
import triton.language as tl


@triton.jit
def square_tiles(a_ptr, b_ptr, c_ptr, M, N, K, sam, sak, sbk, sbn, scm, scn,
                 BLOCK: tl.constexpr, BK: tl.constexpr):
    pid_m = tl.program_id(0)
    pid_n = tl.program_id(1)
    offs_m = pid_m * BLOCK + tl.arange(0, BLOCK)
    offs_n = pid_n * BLOCK + tl.arange(0, BLOCK)
    offs_k = tl.arange(0, BK)
    a_ptrs = a_ptr + offs_m[:, None] * sam + offs_k[None, :] * sak
    b_ptrs = b_ptr + offs_k[:, None] * sbk + offs_n[None, :] * sbn
    acc = tl.zeros((BLOCK, BLOCK), dtype=tl.float32)
    for k in range(0, tl.cdiv(K, BK)):
        a = tl.load(a_ptrs, mask=(offs_m[:, None] < M) & (offs_k[None, :] < K - k * BK), other=0.0)
        b = tl.load(b_ptrs, mask=(offs_k[:, None] < K - k * BK) & (offs_n[None, :] < N), other=0.0)
        acc = tl.dot(a, b, acc)
        a_ptrs += BK * sak
        b_ptrs += BK * sbk
    c_ptrs = c_ptr + offs_m[:, None] * scm + offs_n[None, :] * scn
    tl.store(c_ptrs, acc.to(tl.float16), mask=(offs_m[:, None] < M) & (offs_n[None, :] < N))


def matmul(a, b):
    M, K = a.shape
    _, N = b.shape
    c = torch.empty((M, N), device=a.device, dtype=torch.float16)
    BLOCK = 32
    grid = (triton.cdiv(M, BLOCK), triton.cdiv(N, BLOCK))
    square_tiles[grid](a, b, c, M, N, K, a.stride(0), a.stride(1), b.stride(0), b.stride(1), c.stride(0),
                       c.stride(1), BLOCK=BLOCK, BK=32)
    return c
'''

# one integer for every tile, K's too: the configs and block sizes set all three alike
GEMM_ONE_SIZE = GEMM_LITERAL.replace("tl.arange(0, 32)", "tl.arange(0, 64)").replace("range(0, K, 32)", "range(0, K, 64)")
assert "arange(0, 32)" not in GEMM_ONE_SIZE and "K, 32)" not in GEMM_ONE_SIZE

# block pointers with literal block shapes and advances (the interpreter refuses block pointers: compiled
# for sm_90 instead)
GEMM_BLOCK_POINTER_LITERALS = '''
import torch
import triton
import triton.language as tl


@triton.jit
def mm_bp(a_ptr, b_ptr, c_ptr, M, N, K, sam, sak, sbk, sbn, scm, scn):
    pid_m = tl.program_id(0)
    pid_n = tl.program_id(1)
    a_blk = tl.make_block_ptr(a_ptr, (M, K), (sam, sak), (pid_m * 64, 0), (64, 32), (1, 0))
    b_blk = tl.make_block_ptr(b_ptr, (K, N), (sbk, sbn), (0, pid_n * 64), (32, 64), (1, 0))
    acc = tl.zeros((64, 64), dtype=tl.float32)
    for _ in range(0, K, 32):
        a = tl.load(a_blk, boundary_check=(0, 1), padding_option="zero")
        b = tl.load(b_blk, boundary_check=(0, 1), padding_option="zero")
        acc += tl.dot(a, b)
        a_blk = tl.advance(a_blk, (0, 32))
        b_blk = tl.advance(b_blk, (32, 0))
    c_blk = tl.make_block_ptr(c_ptr, (M, N), (scm, scn), (pid_m * 64, pid_n * 64), (64, 64), (1, 0))
    tl.store(c_blk, acc.to(tl.float16), boundary_check=(0, 1))


def matmul(a, b):
    M, K = a.shape
    _, N = b.shape
    c = torch.empty((M, N), device=a.device, dtype=torch.float16)
    mm_bp[(triton.cdiv(M, 64), triton.cdiv(N, 64))](a, b, c, M, N, K, a.stride(0), a.stride(1), b.stride(0),
                                                    b.stride(1), c.stride(0), c.stride(1))
    return c
'''

SIZES = ("block_size", "inductor_configs", "autotune")
SQUARE = ("matmul_configs", "split_k", "persistent_tiles", "grouped_ordering")
SPELLINGS = [
    Spelling("elementwise", "literal_in_kernel", AFFINE_LITERAL, "affine", AFFINE_INPUTS, (*SIZES, "vector_width")),
    Spelling("elementwise", "literal_2d_tile", ADD_2D_LITERAL, "add", ADD_2D_INPUTS, ("block_size", "autotune")),
    Spelling("gemm", "literal_in_kernel", GEMM_LITERAL, "matmul", GEMM_INPUTS, SQUARE),
    Spelling("gemm", "shared_mn_tile", GEMM_SHARED_TILE, "matmul", GEMM_INPUTS, SQUARE),
    Spelling("gemm", "block_pointer_literals", GEMM_BLOCK_POINTER_LITERALS, "matmul", GEMM_INPUTS,
             ("matmul_configs", "split_k", "persistent_tiles"), interpretable=False),
    Spelling("gemm", "literal_one_size", GEMM_ONE_SIZE, "matmul", GEMM_INPUTS, ("matmul_configs", "split_k", "block_size")),
]
