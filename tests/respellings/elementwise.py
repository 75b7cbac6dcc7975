"""y = x * alpha + beta over a tensor, element-wise, spelled seven ways: the program's offset cast to int64 (inline
or by tl.cast), a grid-stride loop over tl.num_programs, a module constant for the block, a meta grid, and a 2-D
tiling whose column offsets are broadcast to a row."""

from __future__ import annotations

from respellings import Spelling

INPUTS = """
x = torch.randn(3000)
args = [x, 2.0, 0.5]
"""
INPUTS_2D = """
x = torch.randn(37, 150)
args = [x, 2.0, 0.5]
"""
HINTS = ("contiguity_hints",)
BOTH = ("contiguity_hints", "inductor_configs")

PLAIN = '''
import torch
import triton
import triton.language as tl


@triton.jit
def affine_kernel(x_ptr, y_ptr, n, alpha, beta, BLOCK: tl.constexpr):
    pid = tl.program_id(0)
    offs = pid * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    x = tl.load(x_ptr + offs, mask=mask)
    tl.store(y_ptr + offs, x * alpha + beta, mask=mask)


def affine(x, alpha, beta):
    y = torch.empty_like(x)
    n = x.numel()
    affine_kernel[(triton.cdiv(n, 256),)](x, y, n, alpha, beta, BLOCK=256)
    return y
'''

# int64 offsets for tensors past 2^31 elements: the cast keeps the offset a multiple of the block
INT64_INLINE = '''
import torch
import triton
import triton.language as tl


@triton.jit
def affine_kernel(x_ptr, y_ptr, n, alpha, beta, BLOCK: tl.constexpr):
    offs = tl.program_id(0).to(tl.int64) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    x = tl.load(x_ptr + offs, mask=mask)
    tl.store(y_ptr + offs, x * alpha + beta, mask=mask)


def affine(x, alpha, beta):
    y = torch.empty_like(x)
    affine_kernel[(triton.cdiv(x.numel(), 512),)](x, y, x.numel(), alpha, beta, BLOCK=512)
    return y
'''

INT64_CAST = '''
import torch
import triton
import triton.language as tl


@triton.jit
def affine_kernel(x_ptr, y_ptr, n, alpha, beta, BLOCK: tl.constexpr):
    pid = tl.cast(tl.program_id(axis=0), tl.int64)
    start = pid * BLOCK
    offs = start + tl.arange(0, BLOCK)
    mask = offs < n
    x = tl.load(x_ptr + offs, mask=mask)
    tl.store(y_ptr + offs, x * alpha + beta, mask=mask)


def affine(x, alpha, beta):
    y = torch.empty_like(x)
    n = x.numel()
    affine_kernel[lambda meta: (triton.cdiv(n, meta["BLOCK"]),)](x, y, n, alpha, beta, BLOCK=1024)
    return y
'''

# a fixed number of programs, each striding over the tensor
GRID_STRIDE = '''
import torch
import triton
import triton.language as tl


@triton.jit
def affine_kernel(x_ptr, y_ptr, n, alpha, beta, BLOCK: tl.constexpr):
    pid = tl.program_id(axis=0)
    nprog = tl.num_programs(axis=0)
    for start in range(pid * BLOCK, n, nprog * BLOCK):
        offs = start + tl.arange(0, BLOCK)
        mask = offs < n
        x = tl.load(x_ptr + offs, mask=mask, other=0.0)
        tl.store(y_ptr + offs, x * alpha + beta, mask=mask)


def affine(x, alpha, beta):
    y = torch.empty_like(x)
    n = x.numel()
    affine_kernel[(min(4, triton.cdiv(n, 256)),)](x, y, n, alpha, beta, BLOCK=256, num_warps=2)
    return y
'''

MODULE_CONSTANT = '''
import torch
import triton
import triton.language as tl

BLOCK_SIZE = 512


@triton.jit
def affine_kernel(x_ptr, y_ptr, n, alpha, beta, BLOCK_SIZE: tl.constexpr):
    block_start = tl.program_id(0).to(tl.int64) * BLOCK_SIZE
    offsets = block_start + tl.arange(0, BLOCK_SIZE)
    in_bounds = offsets < n
    values = tl.load(x_ptr + offsets, mask=in_bounds)
    tl.store(y_ptr + offsets, values * alpha + beta, mask=in_bounds)


def affine(x, alpha, beta):
    y = torch.empty_like(x)
    affine_kernel[(triton.cdiv(x.numel(), BLOCK_SIZE),)](x, y, x.numel(), alpha, beta, BLOCK_SIZE)
    return y
'''

META_GRID = '''
import torch
import triton
import triton.language as tl


@triton.jit
def affine_kernel(x_ptr, y_ptr, n, alpha, beta, XBLOCK: tl.constexpr):
    xoffset = tl.program_id(0) * XBLOCK
    xindex = xoffset + tl.arange(0, XBLOCK)
    xmask = xindex < n
    tmp0 = tl.load(x_ptr + xindex, xmask)
    tl.store(y_ptr + xindex, tmp0 * alpha + beta, xmask)


def affine(x, alpha, beta):
    y = torch.empty_like(x)
    n = x.numel()
    grid = lambda meta: (triton.cdiv(n, meta["XBLOCK"]),)
    affine_kernel[grid](x, y, n, alpha, beta, XBLOCK=128)
    return y
'''

# 2-D tiles: the column offsets a vector broadcast to a row, the row offsets to a column
TILED_2D = '''
import torch
import triton
import triton.language as tl


@triton.jit
def affine_kernel(x_ptr, y_ptr, rows, cols, stride, alpha, beta, BR: tl.constexpr, BC: tl.constexpr):
    r = tl.program_id(0) * BR + tl.arange(0, BR)[:, None]
    c = tl.program_id(1) * BC + tl.arange(0, BC)[None, :]
    mask = (r < rows) & (c < cols)
    x = tl.load(x_ptr + r * stride + c, mask=mask)
    tl.store(y_ptr + r * stride + c, x * alpha + beta, mask=mask)


def affine(x, alpha, beta):
    rows, cols = x.shape
    y = torch.empty_like(x)
    affine_kernel[(triton.cdiv(rows, 16), triton.cdiv(cols, 64))](x, y, rows, cols, x.stride(0), alpha, beta,
                                                                  BR=16, BC=64)
    return y
'''

SPELLINGS = [
    Spelling("elementwise", "plain", PLAIN, "affine", INPUTS, BOTH),
    Spelling("elementwise", "int64_inline", INT64_INLINE, "affine", INPUTS, BOTH),
    Spelling("elementwise", "int64_cast", INT64_CAST, "affine", INPUTS, BOTH),
    Spelling("elementwise", "grid_stride", GRID_STRIDE, "affine", INPUTS, HINTS),
    Spelling("elementwise", "module_constant", MODULE_CONSTANT, "affine", INPUTS, BOTH),
    Spelling("elementwise", "meta_grid", META_GRID, "affine", INPUTS, BOTH),
    Spelling("elementwise", "tiled_2d", TILED_2D, "affine", INPUTS_2D, BOTH),
]
