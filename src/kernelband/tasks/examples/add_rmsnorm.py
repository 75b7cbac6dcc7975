"""A residual add feeding an RMSNorm, float16 rows, deliberately naive: two launches, the sum written to global
memory by the first kernel and read back by the second."""

import torch
import triton
import triton.language as tl


@triton.jit
def add_kernel(x_ptr, y_ptr, h_ptr, n_cols, BLOCK_SIZE: tl.constexpr):
    row = tl.program_id(axis=0)
    cols = tl.arange(0, BLOCK_SIZE)
    mask = cols < n_cols
    x = tl.load(x_ptr + row * n_cols + cols, mask=mask)
    y = tl.load(y_ptr + row * n_cols + cols, mask=mask)
    tl.store(h_ptr + row * n_cols + cols, x + y, mask=mask)


@triton.jit
def rmsnorm_kernel(out_ptr, h_ptr, w_ptr, n_cols, eps, BLOCK_SIZE: tl.constexpr):
    row = tl.program_id(axis=0)
    cols = tl.arange(0, BLOCK_SIZE)
    mask = cols < n_cols
    # Squares of float16 values overflow float16: accumulate in float32.
    h = tl.load(h_ptr + row * n_cols + cols, mask=mask, other=0.0).to(tl.float32)
    rstd = 1.0 / tl.sqrt(tl.sum(h * h, axis=0) / n_cols + eps)
    w = tl.load(w_ptr + cols, mask=mask, other=0.0).to(tl.float32)
    tl.store(out_ptr + row * n_cols + cols, (h * rstd * w).to(tl.float16), mask=mask)


def add_rmsnorm(x: torch.Tensor, y: torch.Tensor, weight: torch.Tensor) -> torch.Tensor:
    rows, cols = x.shape
    h = torch.empty_like(x)
    out = torch.empty_like(x)
    block = triton.next_power_of_2(cols)
    add_kernel[(rows,)](x, y, h, cols, BLOCK_SIZE=block, num_warps=4)
    rmsnorm_kernel[(rows,)](out, h, weight, cols, 1e-6, BLOCK_SIZE=block, num_warps=4)
    return out


# --------------------------------- kernelband task ---------------------------------
import torch  # noqa: E402  (the task definition runs on its own)

ENTRY = "add_rmsnorm"
EPS = 1e-6
# 32K elements to 128M elements (768 MB moved at the top); each row is one block, so rows stop at 8,192.
SHAPES = [
    dict(rows=128, cols=256),
    dict(rows=1024, cols=512),
    dict(rows=2048, cols=768),
    dict(rows=1999, cols=1000),
    dict(rows=4096, cols=1024),
    dict(rows=4096, cols=4096),
    dict(rows=8192, cols=2048),
    dict(rows=2048, cols=8192),
    dict(rows=16384, cols=4096),
    dict(rows=8192, cols=8192),
    dict(rows=32768, cols=4096),
]
HELD_OUT = [dict(rows=3001, cols=5120 + 3), dict(rows=12345, cols=1531)]
INTERPRETER_SHAPES = [dict(rows=8, cols=256), dict(rows=11, cols=700)]
# Without it the interpreter would run the full-size held-out shapes on the CPU.
INTERPRETER_HELD_OUT = [dict(rows=5, cols=333)]


def make_inputs(device, rows, cols):
    x = torch.randn(rows, cols, device=device, dtype=torch.float16)
    y = torch.randn(rows, cols, device=device, dtype=torch.float16)
    weight = torch.randn(cols, device=device, dtype=torch.float16)
    return x, y, weight


def reference(x, y, weight):
    h = (x + y).float()
    rstd = torch.rsqrt(h.pow(2).mean(dim=-1, keepdim=True) + EPS)
    return (h * rstd * weight.float()).half()


def bytes_moved(rows, cols):
    # x and y read, the output written, the weight read once: the intermediate sum need not reach memory.
    return 2 * (3 * rows * cols + cols)


def flops(rows, cols):
    # add, square, sum, scale by 1/rms and by the weight per element.
    return 5 * rows * cols
