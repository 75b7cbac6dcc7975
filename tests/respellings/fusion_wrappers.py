"""Two launches that launch_fusion makes one, each in a function of its own that a third calls one after the
other, as users split their host code (rewrites/inline_wrappers.py writes the calls out first)."""

from __future__ import annotations

from respellings import Spelling

_KERNELS = '''
import torch
import triton
import triton.language as tl


@triton.jit
def add_kernel(a_ptr, b_ptr, out_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    tl.store(out_ptr + offs, tl.load(a_ptr + offs, mask=mask) + tl.load(b_ptr + offs, mask=mask), mask=mask)


@triton.jit
def rms_kernel(x_ptr, w_ptr, y_ptr, stride, N, eps, BLOCK_N: tl.constexpr):
    row = tl.program_id(0)
    cols = tl.arange(0, BLOCK_N)
    mask = cols < N
    v = tl.load(x_ptr + row * stride + cols, mask=mask, other=0.0).to(tl.float32)
    r = 1.0 / tl.sqrt(tl.sum(v * v, axis=0) / N + eps)
    w = tl.load(w_ptr + cols, mask=mask)
    tl.store(y_ptr + row * stride + cols, (v * r * w).to(y_ptr.dtype.element_ty), mask=mask)
'''

# The norm's wrapper, the same in the spellings below.
_RMSNORM = '''

def rmsnorm(x, w, eps=1e-6):
    y = torch.empty_like(x)
    M, N = x.shape
    rms_kernel[(M,)](x, w, y, x.stride(0), N, eps, BLOCK_N=triton.next_power_of_2(N))
    return y
'''

# Each launch in a wrapper of its own; the caller returns the norm and the sum, the call in a tuple.
TUPLE_RETURN = _KERNELS + '''

def add(a, b):
    out = torch.empty_like(a)
    n = a.numel()
    add_kernel[(triton.cdiv(n, 1024),)](a, b, out, n, BLOCK=1024)
    return out
''' + _RMSNORM + '''

def fused_add_rmsnorm(x, residual, weight):
    h = add(x, residual)
    return rmsnorm(h, weight), h
'''

# The caller rebinds its argument to the sum (`x = add(x, r)`); a docstring, a meta grid, a default argument.
REBOUND = _KERNELS + '''

def add(a, b):
    """The sum, in a new tensor."""
    out = torch.empty_like(a)
    n = a.numel()
    grid = lambda meta: (triton.cdiv(n, meta["BLOCK"]),)
    add_kernel[grid](a, b, out, n, BLOCK=512)
    return out
''' + _RMSNORM + '''

def block(x, residual, weight):
    x = add(x, residual)
    return rmsnorm(x, weight, eps=1e-5)
'''

# One wrapper's call the other's argument, the value never named.
NESTED_CALL = TUPLE_RETURN.replace("""    h = add(x, residual)
    return rmsnorm(h, weight), h""", """    return rmsnorm(add(x, residual), weight)""")

# Element-wise into element-wise: keyword arguments, each result under another name than the wrapper's.
SCALE_THEN_GELU = '''
import torch
import triton
import triton.language as tl


@triton.jit
def scale_kernel(x_ptr, y_ptr, s, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    tl.store(y_ptr + offs, tl.load(x_ptr + offs, mask=mask) * s, mask=mask)


@triton.jit
def gelu_kernel(x_ptr, y_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    x = tl.load(x_ptr + offs, mask=mask)
    tl.store(y_ptr + offs, 0.5 * x * (1 + tl.erf(x * 0.7071067811865476)), mask=mask)


def scale(x, s):
    y = torch.empty_like(x)
    n = x.numel()
    scale_kernel[(triton.cdiv(n, 1024),)](x, y, s, n, BLOCK=1024)
    return y


def gelu(x):
    y = torch.empty_like(x)
    n = x.numel()
    gelu_kernel[(triton.cdiv(n, 1024),)](x, y, n, BLOCK=1024)
    return y


def scaled_gelu(x, s=0.5):
    t = scale(x, s=s)
    out = gelu(x=t)
    return out
'''

ROWS_INPUTS = """
args = [torch.randn(6, 100), torch.randn(6, 100), torch.randn(100)]
"""

FLAT_INPUTS = """
args = [torch.randn(3, 700)]
"""

SPELLINGS = [
    Spelling("fusion", "wrappers_tuple_return", TUPLE_RETURN, "fused_add_rmsnorm", ROWS_INPUTS, ("launch_fusion",)),
    Spelling("fusion", "wrappers_rebound", REBOUND, "block", ROWS_INPUTS, ("launch_fusion",)),
    Spelling("fusion", "wrappers_nested_call", NESTED_CALL, "fused_add_rmsnorm", ROWS_INPUTS, ("launch_fusion",)),
    Spelling("fusion", "wrappers_keywords", SCALE_THEN_GELU, "scaled_gelu", FLAT_INPUTS, ("launch_fusion",)),
]
