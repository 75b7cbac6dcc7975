"""A matrix-vector product (y = W x), one program a row of W, each row walked in blocks and its products summed.
Spelled six ways, each with rows of 37 columns in blocks of 16 (three blocks, the last one partly masked), so
that single_pass's twin takes each row in one block of 64, and 5 rows, so that split_rows splits them over
several programs a row (a decode step's gemv: few rows, long ones)."""

from __future__ import annotations

from respellings import Spelling

INPUTS = """
w = torch.randn(5, 37)
x = torch.randn(37)
args = [w, x]
"""
REWRITES = ("split_rows", "single_pass", "divisibility_hints")

# for-range loop, a vector accumulator, the block a literal at the launch, a tuple grid.
FOR_VECTOR_LITERAL = '''
import torch
import triton
import triton.language as tl


@triton.jit
def gemv_kernel(w_ptr, x_ptr, y_ptr, K, stride_w, BLOCK_K: tl.constexpr):
    row = tl.program_id(0)
    offs = tl.arange(0, BLOCK_K)
    acc = tl.zeros([BLOCK_K], dtype=tl.float32)
    for k in range(0, K, BLOCK_K):
        mask = k + offs < K
        w = tl.load(w_ptr + row * stride_w + k + offs, mask=mask, other=0.0)
        x = tl.load(x_ptr + k + offs, mask=mask, other=0.0)
        acc += w * x
    tl.store(y_ptr + row, tl.sum(acc, axis=0))


def gemv(w, x):
    n, k = w.shape
    y = torch.empty(n, device=w.device, dtype=torch.float32)
    gemv_kernel[(n,)](w, x, y, k, w.stride(0), BLOCK_K=16)
    return y
'''

# a while loop, a scalar accumulator summed block by block, the block a variable.
WHILE_SCALAR = '''
import torch
import triton
import triton.language as tl


@triton.jit
def matvec(W, X, Y, n_cols, ldw, BLOCK: tl.constexpr):
    pid = tl.program_id(axis=0)
    lanes = tl.arange(0, BLOCK)
    total = 0.0
    start = 0
    while start < n_cols:
        cols = start + lanes
        a = tl.load(W + pid * ldw + cols, mask=cols < n_cols, other=0.0)
        b = tl.load(X + cols, mask=cols < n_cols, other=0.0)
        total += tl.sum(a * b, axis=0)
        start += BLOCK
    tl.store(Y + pid, total)


def gemv(w, x):
    y = torch.empty(w.shape[0], device=w.device, dtype=torch.float32)
    block = 16
    matvec[(w.shape[0],)](w, x, y, w.shape[1], w.stride(0), BLOCK=block)
    return y
'''

# pointers advanced each pass, a lambda grid.
POINTER_WALK = '''
import torch
import triton
import triton.language as tl


@triton.jit
def gemv_fwd(w_ptr, x_ptr, out_ptr, K, stride_row, BLOCK_K: tl.constexpr):
    r = tl.program_id(0)
    k_offs = tl.arange(0, BLOCK_K)
    w_ptrs = w_ptr + r * stride_row + k_offs
    x_ptrs = x_ptr + k_offs
    acc = tl.zeros((BLOCK_K,), tl.float32)
    for start in range(0, K, BLOCK_K):
        m = start + k_offs < K
        acc += tl.load(w_ptrs, mask=m, other=0.0) * tl.load(x_ptrs, mask=m, other=0.0)
        w_ptrs += BLOCK_K
        x_ptrs += BLOCK_K
    tl.store(out_ptr + r, tl.sum(acc, 0))


def gemv(w, x):
    out = torch.empty(w.shape[0], device=w.device, dtype=torch.float32)
    grid = lambda meta: (w.shape[0],)
    gemv_fwd[grid](w, x, out, w.shape[1], w.stride(0), BLOCK_K=16)
    return out
'''

# tl.range over the row, the block a module constant passed at the launch.
TL_RANGE_MODULE_CONSTANT = '''
import torch
import triton
import triton.language as tl

BLOCK = 16


@triton.jit
def gemv_kernel(w_ptr, x_ptr, y_ptr, K, stride_w, BLOCK_K: tl.constexpr):
    row = tl.program_id(0)
    cols = tl.arange(0, BLOCK_K)
    acc = tl.zeros([BLOCK_K], dtype=tl.float32)
    for k in tl.range(0, K, BLOCK_K):
        idx = k + cols
        acc += tl.load(w_ptr + row * stride_w + idx, mask=idx < K, other=0.0) * tl.load(x_ptr + idx, mask=idx < K,
                                                                                        other=0.0)
    tl.store(y_ptr + row, tl.sum(acc, axis=0))


def gemv(w, x):
    y = torch.empty(w.shape[0], device=w.device, dtype=torch.float32)
    gemv_kernel[(w.shape[0],)](w, x, y, w.shape[1], w.stride(0), BLOCK_K=BLOCK)
    return y
'''

# a loop over block indices (tl.cdiv), the row's offset a separate name.
CDIV_BLOCK_INDEX = '''
import torch
import triton
import triton.language as tl


@triton.jit
def gemv_kernel(w_ptr, x_ptr, y_ptr, K, stride_w, BLOCK_K: tl.constexpr):
    row = tl.program_id(0)
    w_row = w_ptr + row * stride_w
    acc = tl.zeros([BLOCK_K], dtype=tl.float32)
    for i in range(0, tl.cdiv(K, BLOCK_K)):
        offs = i * BLOCK_K + tl.arange(0, BLOCK_K)
        mask = offs < K
        acc += tl.load(w_row + offs, mask=mask, other=0.0) * tl.load(x_ptr + offs, mask=mask, other=0.0)
    y = tl.sum(acc, axis=0)
    tl.store(y_ptr + row, y)


def gemv(w, x):
    n, k = w.shape
    y = torch.empty(n, device=w.device, dtype=torch.float32)
    gemv_kernel[(n,)](w, x, y, k, w.stride(0), BLOCK_K=16)
    return y
'''

# a @triton.jit helper gives each block's products, the launch in a grid name.
HELPER = '''
import torch
import triton
import triton.language as tl


@triton.jit
def _products(w_row, x_ptr, start, K, lanes):
    idx = start + lanes
    ok = idx < K
    return tl.load(w_row + idx, mask=ok, other=0.0) * tl.load(x_ptr + idx, mask=ok, other=0.0)


@triton.jit
def gemv_kernel(w_ptr, x_ptr, y_ptr, K, stride_w, BLOCK_K: tl.constexpr):
    row = tl.program_id(0)
    lanes = tl.arange(0, BLOCK_K)
    acc = tl.zeros([BLOCK_K], dtype=tl.float32)
    for start in range(0, K, BLOCK_K):
        acc += _products(w_ptr + row * stride_w, x_ptr, start, K, lanes)
    tl.store(y_ptr + row, tl.sum(acc, axis=0))


def gemv(w, x):
    y = torch.empty(w.shape[0], device=w.device, dtype=torch.float32)
    grid = (w.shape[0],)
    gemv_kernel[grid](w, x, y, w.shape[1], w.stride(0), BLOCK_K=16)
    return y
'''

SPELLINGS = [
    Spelling("gemv", "for_vector_literal", FOR_VECTOR_LITERAL, "gemv", INPUTS, REWRITES, atol=1e-4, rtol=1e-4),
    Spelling("gemv", "while_scalar", WHILE_SCALAR, "gemv", INPUTS, REWRITES, atol=1e-4, rtol=1e-4),
    Spelling("gemv", "pointer_walk", POINTER_WALK, "gemv", INPUTS, REWRITES, atol=1e-4, rtol=1e-4),
    Spelling("gemv", "tl_range_module_constant", TL_RANGE_MODULE_CONSTANT, "gemv", INPUTS, REWRITES, atol=1e-4,
             rtol=1e-4),
    Spelling("gemv", "cdiv_block_index", CDIV_BLOCK_INDEX, "gemv", INPUTS, REWRITES, atol=1e-4, rtol=1e-4),
    Spelling("gemv", "helper", HELPER, "gemv", INPUTS, REWRITES, atol=1e-4, rtol=1e-4),
]
