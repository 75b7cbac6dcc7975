"""RMSNorm over the rows of a matrix (y = x / sqrt(mean(x^2) + eps) * w), each row walked in blocks: a pass
that sums the squares, then a pass that scales and stores. Spelled ten ways, each with rows of 37 columns
in blocks of 16 (three blocks, the last one partly masked), so that single_pass's twin takes each row in one
block of 64, and 5 rows, so that split_rows splits them (a block of rows, one program's tile, it does not)."""

from __future__ import annotations

from respellings import Spelling

INPUTS = """
x = torch.randn(5, 37)
w = torch.randn(37)
args = [x, w]
"""
REWRITES = ("single_pass", "divisibility_hints")
SPLIT = (*REWRITES, "split_rows")  # 5 rows, fewer than the interpreter's SMs take: split over programs

# for-range loops, a vector accumulator, the block a literal at the launch, a tuple grid.
FOR_VECTOR_LITERAL = '''
import torch
import triton
import triton.language as tl


@triton.jit
def rmsnorm_kernel(x_ptr, w_ptr, y_ptr, n_cols, eps, BLOCK: tl.constexpr):
    row = tl.program_id(0)
    cols = tl.arange(0, BLOCK)
    acc = tl.zeros([BLOCK], dtype=tl.float32)
    for off in range(0, n_cols, BLOCK):
        x = tl.load(x_ptr + row * n_cols + off + cols, mask=off + cols < n_cols, other=0.0)
        acc += x * x
    rstd = 1.0 / tl.sqrt(tl.sum(acc, axis=0) / n_cols + eps)
    for off in range(0, n_cols, BLOCK):
        mask = off + cols < n_cols
        x = tl.load(x_ptr + row * n_cols + off + cols, mask=mask, other=0.0)
        w = tl.load(w_ptr + off + cols, mask=mask, other=0.0)
        tl.store(y_ptr + row * n_cols + off + cols, x * rstd * w, mask=mask)


def rmsnorm(x, w):
    y = torch.empty_like(x)
    rmsnorm_kernel[(x.shape[0],)](x, w, y, x.shape[1], 1e-6, BLOCK=16)
    return y
'''

# while loops advancing `start += B`, a scalar accumulator, the block a variable, a lambda grid.
WHILE_SCALAR_VARIABLE = '''
import torch
import triton
import triton.language as tl


@triton.jit
def norm_rows(inp, weight, out, width, epsilon, TILE: tl.constexpr):
    r = tl.program_id(axis=0)
    lanes = tl.arange(0, TILE)
    total = 0.0
    start = 0
    while start < width:
        v = tl.load(inp + r * width + start + lanes, mask=start + lanes < width, other=0.0)
        total += tl.sum(v * v, axis=0)
        start += TILE
    scale = tl.rsqrt(total / width + epsilon)
    start = 0
    while start < width:
        keep = start + lanes < width
        v = tl.load(inp + r * width + start + lanes, mask=keep, other=0.0)
        g = tl.load(weight + start + lanes, mask=keep, other=0.0)
        tl.store(out + r * width + start + lanes, v * scale * g, mask=keep)
        start += TILE


def rmsnorm(x, w):
    out = torch.empty_like(x)
    rows, width = x.shape
    tile = 16
    norm_rows[lambda meta: (rows,)](x, w, out, width, 1e-6, TILE=tile)
    return out
'''

# block indices `range(tl.cdiv(n, B))` with offsets `i * B`, the block a module constant, a 3-D tuple grid.
CDIV_MODULE_CONSTANT = '''
import torch
import triton
import triton.language as tl

COLUMNS_PER_STEP = 16


@triton.jit
def _rms(X, W, Y, stride, N, eps, BLOCK_N: tl.constexpr):
    pid = tl.program_id(0)
    X += pid * stride
    Y += pid * stride
    offs = tl.arange(0, BLOCK_N)
    sq = tl.zeros([BLOCK_N], dtype=tl.float32)
    for i in range(tl.cdiv(N, BLOCK_N)):
        cur = i * BLOCK_N + offs
        a = tl.load(X + cur, mask=cur < N, other=0.0).to(tl.float32)
        sq += a * a
    inv = 1 / tl.sqrt(tl.sum(sq, axis=0) / N + eps)
    for i in range(tl.cdiv(N, BLOCK_N)):
        cur = i * BLOCK_N + offs
        m = cur < N
        a = tl.load(X + cur, mask=m, other=0.0).to(tl.float32)
        tl.store(Y + cur, a * inv * tl.load(W + cur, mask=m, other=0.0), mask=m)


def rmsnorm(x, w):
    y = torch.empty_like(x)
    M, N = x.shape
    _rms[(M, 1, 1)](x, w, y, x.stride(0), N, 1e-6, BLOCK_N=COLUMNS_PER_STEP)
    return y
'''

# tl.range loops, a straight-line @triton.jit helper that loads a block, every argument by keyword.
TL_RANGE_HELPER = '''
import torch
import triton
import triton.language as tl


@triton.jit
def load_block(base, start, lanes, length):
    return tl.load(base + start + lanes, mask=start + lanes < length, other=0.0)


@triton.jit
def rms_norm_fwd(src, gamma, dst, length, eps, SIZE: tl.constexpr):
    i = tl.program_id(0)
    lanes = tl.arange(0, SIZE)
    power = tl.zeros([SIZE], dtype=tl.float32)
    for c in tl.range(0, length, SIZE):
        v = load_block(src + i * length, c, lanes, length)
        power += v * v
    factor = tl.rsqrt(tl.sum(power, axis=0) / length + eps)
    for c in tl.range(0, length, SIZE):
        v = load_block(src + i * length, c, lanes, length)
        g = load_block(gamma, c, lanes, length)
        tl.store(dst + i * length + c + lanes, v * factor * g, mask=c + lanes < length)


def rmsnorm(x, w):
    y = torch.empty_like(x)
    rms_norm_fwd[(x.shape[0],)](src=x, gamma=w, dst=y, length=x.shape[1], eps=1e-6, SIZE=16)
    return y
'''

# pointers advanced by a block each step, masked by what is left of the row (`cols < n - k * B`).
POINTER_WALK = '''
import torch
import triton
import triton.language as tl


@triton.jit
def rmsnorm_walk(x_ptr, w_ptr, y_ptr, n, eps, BLOCK: tl.constexpr):
    row = tl.program_id(0)
    cols = tl.arange(0, BLOCK)
    xs = x_ptr + row * n + cols
    acc = tl.zeros([BLOCK], dtype=tl.float32)
    for k in range(0, tl.cdiv(n, BLOCK)):
        v = tl.load(xs, mask=cols < n - k * BLOCK, other=0.0)
        acc += v * v
        xs += BLOCK
    rstd = 1.0 / tl.sqrt(tl.sum(acc, axis=0) / n + eps)
    xs = x_ptr + row * n + cols
    ws = w_ptr + cols
    ys = y_ptr + row * n + cols
    for k in range(0, tl.cdiv(n, BLOCK)):
        left = cols < n - k * BLOCK
        tl.store(ys, tl.load(xs, mask=left, other=0.0) * rstd * tl.load(ws, mask=left, other=0.0), mask=left)
        xs += BLOCK
        ws += BLOCK
        ys += BLOCK


def rmsnorm(x, w):
    y = torch.empty_like(x)
    rmsnorm_walk[(x.shape[0],)](x, w, y, x.shape[1], 1e-6, BLOCK=16)
    return y
'''

# a 2-D tile: two rows a program, the column loop inside it; the block the kernel's default.
TILE_OF_ROWS_DEFAULT = '''
import torch
import triton
import triton.language as tl


@triton.jit
def rms_rows(X, W, Y, M, N, eps, ROWS: tl.constexpr, COLS: tl.constexpr = 16):
    rows = tl.program_id(0) * ROWS + tl.arange(0, ROWS)
    row_ok = rows < M
    acc = tl.zeros([ROWS, COLS], dtype=tl.float32)
    for start in range(0, N, COLS):
        cols = start + tl.arange(0, COLS)
        mask = row_ok[:, None] & (cols[None, :] < N)
        x = tl.load(X + rows[:, None] * N + cols[None, :], mask=mask, other=0.0)
        acc += x * x
    rstd = tl.rsqrt(tl.sum(acc, axis=1) / N + eps)
    for start in range(0, N, COLS):
        cols = start + tl.arange(0, COLS)
        mask = row_ok[:, None] & (cols[None, :] < N)
        x = tl.load(X + rows[:, None] * N + cols[None, :], mask=mask, other=0.0)
        w = tl.load(W + cols, mask=cols < N, other=0.0)
        tl.store(Y + rows[:, None] * N + cols[None, :], x * rstd[:, None] * w[None, :], mask=mask)


def rmsnorm(x, w):
    y = torch.empty_like(x)
    M, N = x.shape
    rms_rows[(triton.cdiv(M, 2),)](x, w, y, M, N, 1e-6, ROWS=2)
    return y
'''

# a lane vector advanced by a block each step (`offs += B`), compared with the row's length.
LANE_VECTOR = '''
import torch
import triton
import triton.language as tl


@triton.jit
def rms_lanes(a, b, c, count, eps, B: tl.constexpr):
    p = tl.program_id(0)
    offs = tl.arange(0, B)
    sums = tl.zeros([B], dtype=tl.float32)
    for _ in range(0, count, B):
        t = tl.load(a + p * count + offs, mask=offs < count, other=0.0)
        sums += t * t
        offs += B
    r = 1.0 / tl.sqrt(tl.sum(sums) / count + eps)
    offs = tl.arange(0, B)
    for _ in range(0, count, B):
        t = tl.load(a + p * count + offs, mask=offs < count, other=0.0)
        g = tl.load(b + offs, mask=offs < count, other=0.0)
        tl.store(c + p * count + offs, t * r * g, mask=offs < count)
        offs += B


def rmsnorm(x, w):
    y = torch.empty_like(x)
    rms_lanes[(x.shape[0],)](x, w, y, x.shape[1], 1e-6, B=16)
    return y
'''

# the block set by an autotune config: the twin's configs leave the block out and its launch passes it. (One
# config: the interpreter's autotuner would time several with a GPU driver it does not have.)
AUTOTUNED = '''
import torch
import triton
import triton.language as tl


@triton.autotune(configs=[triton.Config({"BLOCK_SIZE": 16}, num_warps=2)], key=["N"])
@triton.jit
def rmsnorm_tuned(X, W, Y, N, eps, BLOCK_SIZE: tl.constexpr):
    row = tl.program_id(0)
    acc = tl.zeros([BLOCK_SIZE], dtype=tl.float32)
    for off in range(0, N, BLOCK_SIZE):
        cols = off + tl.arange(0, BLOCK_SIZE)
        x = tl.load(X + row * N + cols, mask=cols < N, other=0.0)
        acc += x * x
    rstd = 1 / tl.sqrt(tl.sum(acc, axis=0) / N + eps)
    for off in range(0, N, BLOCK_SIZE):
        cols = off + tl.arange(0, BLOCK_SIZE)
        mask = cols < N
        x = tl.load(X + row * N + cols, mask=mask, other=0.0)
        w = tl.load(W + cols, mask=mask, other=0.0)
        tl.store(Y + row * N + cols, x * rstd * w, mask=mask)


def rmsnorm(x, w):
    y = torch.empty_like(x)
    rmsnorm_tuned[(x.shape[0],)](x, w, y, x.shape[1], 1e-6)
    return y
'''

# While loops stepping by assignment (`off = off + BLOCK`, not `+=`), the bound written `cols < n - off`, the
# square added on the left of the accumulator (`acc = x * x + acc`).
WHILE_ASSIGNED_STEP = '''
import torch
import triton
import triton.language as tl


@triton.jit
def rmsnorm_kernel(x_ptr, w_ptr, out_ptr, n_cols, eps, BLOCK_SIZE: tl.constexpr):
    row = tl.program_id(0)
    x_row = x_ptr + row * n_cols
    o_row = out_ptr + row * n_cols
    cols = tl.arange(0, BLOCK_SIZE)
    acc = tl.zeros([BLOCK_SIZE], dtype=tl.float32)
    off = 0
    while off < n_cols:
        x = tl.load(x_row + off + cols, mask=cols < n_cols - off, other=0.0).to(tl.float32)
        acc = x * x + acc
        off = off + BLOCK_SIZE
    inv = tl.rsqrt(tl.sum(acc) / n_cols + eps)
    off = 0
    while off < n_cols:
        m = cols < n_cols - off
        x = tl.load(x_row + off + cols, mask=m, other=0.0).to(tl.float32)
        w = tl.load(w_ptr + off + cols, mask=m, other=0.0)
        tl.store(o_row + off + cols, x * inv * w, mask=m)
        off = off + BLOCK_SIZE


def rmsnorm(x, w):
    out = torch.empty_like(x)
    rmsnorm_kernel[(x.shape[0],)](x, w, out, x.shape[1], 1e-6, BLOCK_SIZE=16)
    return out
'''

# The grid written in the launch's subscript with a trailing comma (`kernel[M,]`, a tuple of one axis, not a
# name bound to a grid); strides of both axes passed, the block positionally.
SUBSCRIPT_TUPLE_GRID = '''
import math

import torch
import triton
import triton.language as tl


@triton.jit
def rms_norm_kernel(Y, X, W, x_stride_r, x_stride_c, N, eps, BLOCK: tl.constexpr):
    pid = tl.program_id(0)
    X += pid * x_stride_r
    Y += pid * x_stride_r
    acc = tl.zeros([BLOCK], dtype=tl.float32)
    for off in range(0, N, BLOCK):
        cols = off + tl.arange(0, BLOCK)
        x = tl.load(X + cols * x_stride_c, cols < N, other=0.0).to(tl.float32)
        acc += x * x
    rrms = 1 / tl.sqrt(tl.sum(acc, axis=0) / N + eps)
    for off in range(0, N, BLOCK):
        cols = off + tl.arange(0, BLOCK)
        x = tl.load(X + cols * x_stride_c, cols < N, other=0.0).to(tl.float32)
        w = tl.load(W + cols, mask=cols < N, other=0.0)
        tl.store(Y + cols * x_stride_c, x * rrms * w, mask=cols < N)


def rmsnorm(x, w, eps=1e-6):
    M = math.prod(x.shape[:-1])
    N = x.shape[-1]
    y = torch.empty_like(x)
    rms_norm_kernel[M,](y, x, w, N, 1, N, eps, 16)
    return y
'''

SPELLINGS = [
    Spelling("rows", "for_vector_literal", FOR_VECTOR_LITERAL, "rmsnorm", INPUTS, SPLIT, atol=1e-4, rtol=1e-4),
    Spelling("rows", "while_scalar_variable", WHILE_SCALAR_VARIABLE, "rmsnorm", INPUTS, SPLIT, atol=1e-4,
             rtol=1e-4),
    Spelling("rows", "cdiv_module_constant", CDIV_MODULE_CONSTANT, "rmsnorm", INPUTS, SPLIT, atol=1e-4,
             rtol=1e-4),
    Spelling("rows", "tl_range_helper", TL_RANGE_HELPER, "rmsnorm", INPUTS, SPLIT, atol=1e-4, rtol=1e-4),
    Spelling("rows", "pointer_walk", POINTER_WALK, "rmsnorm", INPUTS, SPLIT, atol=1e-4, rtol=1e-4),
    Spelling("rows", "tile_of_rows_default", TILE_OF_ROWS_DEFAULT, "rmsnorm", INPUTS, REWRITES, atol=1e-4,
             rtol=1e-4),
    Spelling("rows", "lane_vector", LANE_VECTOR, "rmsnorm", INPUTS, SPLIT, atol=1e-4, rtol=1e-4),
    Spelling("rows", "autotuned", AUTOTUNED, "rmsnorm", INPUTS, SPLIT, atol=1e-4, rtol=1e-4),
    Spelling("rows", "while_assigned_step", WHILE_ASSIGNED_STEP, "rmsnorm", INPUTS, SPLIT, atol=1e-4, rtol=1e-4),
    Spelling("rows", "subscript_tuple_grid", SUBSCRIPT_TUPLE_GRID, "rmsnorm", INPUTS, SPLIT, atol=1e-4, rtol=1e-4),
]
