"""Passes over a row written as @triton.jit helpers that the kernel calls: a softmax whose max pass and exp-sum
pass are each a helper, and an RMSNorm whose sum of squares is one. The rewrites that merge or split loops read
them with the helper calls written out in the kernel (rewrites/inline_helpers.py)."""

from __future__ import annotations

from respellings import Spelling
from respellings.rows import INPUTS as ROWS_INPUTS
from respellings.softmax import INPUTS as SOFTMAX_INPUTS

SOFTMAX_PASS_HELPERS = '''
import torch
import triton
import triton.language as tl


@triton.jit
def _row_max(p, n, BLOCK: tl.constexpr):
    m = tl.full((BLOCK,), float("-inf"), tl.float32)
    for i in range(0, n, BLOCK):
        c = i + tl.arange(0, BLOCK)
        m = tl.maximum(m, tl.load(p + c, mask=c < n, other=float("-inf")))
    return tl.max(m, 0)

@triton.jit
def _row_expsum(p, n, mx, BLOCK: tl.constexpr):
    s = tl.zeros((BLOCK,), tl.float32)
    for i in range(0, n, BLOCK):
        c = i + tl.arange(0, BLOCK)
        s += tl.exp(tl.load(p + c, mask=c < n, other=float("-inf")) - mx)
    return tl.sum(s, 0)

@triton.jit
def softmax_k(x, y, sx, sy, n, BLOCK: tl.constexpr):
    r = tl.program_id(0)
    px = x + r * sx
    mx = _row_max(px, n, BLOCK)
    den = _row_expsum(px, n, mx, BLOCK)
    for i in range(0, n, BLOCK):
        c = i + tl.arange(0, BLOCK)
        v = tl.load(px + c, mask=c < n, other=float("-inf"))
        tl.store(y + r * sy + c, tl.exp(v - mx) / den, mask=c < n)

def run(x):
    y = torch.empty_like(x)
    softmax_k[(x.shape[0],)](x, y, x.stride(0), y.stride(0), x.shape[1], BLOCK=512)
    return y
'''.replace("def run(", "def softmax(")

RMSNORM_SUM_HELPER = '''
import torch
import triton
import triton.language as tl


@triton.jit
def _sum_squares(row_ptr, n, BLOCK: tl.constexpr):
    acc = tl.zeros((BLOCK,), dtype=tl.float32)
    for start in range(0, n, BLOCK):
        cols = start + tl.arange(0, BLOCK)
        v = tl.load(row_ptr + cols, mask=cols < n, other=0.0).to(tl.float32)
        acc += v * v
    return tl.sum(acc, axis=0)


@triton.jit
def rmsnorm_kernel(x_ptr, w_ptr, y_ptr, stride, n, eps, BLOCK: tl.constexpr):
    row = tl.program_id(0)
    row_ptr = x_ptr + row * stride
    ss = _sum_squares(row_ptr, n, BLOCK)
    rstd = 1.0 / tl.sqrt(ss / n + eps)
    for start in range(0, n, BLOCK):
        cols = start + tl.arange(0, BLOCK)
        mask = cols < n
        v = tl.load(row_ptr + cols, mask=mask, other=0.0).to(tl.float32)
        w = tl.load(w_ptr + cols, mask=mask, other=0.0)
        tl.store(y_ptr + row * stride + cols, v * rstd * w, mask=mask)


def rmsnorm(x, w, eps=1e-6):
    y = torch.empty_like(x)
    rows, n = x.shape
    rmsnorm_kernel[(rows,)](x, w, y, x.stride(0), n, eps, BLOCK=128)
    return y
'''

SPELLINGS = [
    Spelling("softmax", "pass_helpers", SOFTMAX_PASS_HELPERS, "softmax", SOFTMAX_INPUTS, ("online_softmax", "single_pass")),
    Spelling("rows", "sum_helper", RMSNORM_SUM_HELPER, "rmsnorm", ROWS_INPUTS, ("split_rows", "single_pass"),
             atol=1e-4, rtol=1e-4),
]
