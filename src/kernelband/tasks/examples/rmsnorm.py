"""RMSNorm of float16 rows with a float16 weight, deliberately naive: two warps, two passes over 256-column chunks."""

import torch
import triton
import triton.language as tl


@triton.jit
def rmsnorm_kernel(out_ptr, x_ptr, w_ptr, x_row_stride, out_row_stride, n_cols, eps,
                   BLOCK_SIZE: tl.constexpr):
    row = tl.program_id(axis=0)
    x_row = x_ptr + row * x_row_stride
    out_row = out_ptr + row * out_row_stride
    cols = tl.arange(0, BLOCK_SIZE)
    # Squares of float16 values overflow float16: accumulate in float32.
    sum_sq = tl.zeros([BLOCK_SIZE], tl.float32)
    for start in range(0, n_cols, BLOCK_SIZE):
        x = tl.load(x_row + start + cols, mask=start + cols < n_cols, other=0.0).to(tl.float32)
        sum_sq += x * x
    rstd = 1.0 / tl.sqrt(tl.sum(sum_sq, axis=0) / n_cols + eps)
    # Second pass: the row is read again from global memory.
    for start in range(0, n_cols, BLOCK_SIZE):
        mask = start + cols < n_cols
        x = tl.load(x_row + start + cols, mask=mask, other=0.0).to(tl.float32)
        w = tl.load(w_ptr + start + cols, mask=mask, other=0.0).to(tl.float32)
        tl.store(out_row + start + cols, (x * rstd * w).to(tl.float16), mask=mask)


def rmsnorm(x: torch.Tensor, weight: torch.Tensor) -> torch.Tensor:
    rows, cols = x.shape
    out = torch.empty_like(x)
    rmsnorm_kernel[(rows,)](out, x, weight, x.stride(0), out.stride(0), cols, 1e-6,
                            BLOCK_SIZE=256, num_warps=2)
    return out


# --------------------------------- kernelband task ---------------------------------
import torch  # noqa: E402  (the task definition runs on its own)

ENTRY = "rmsnorm"
EPS = 1e-6
# 32K elements to 128M elements (512 MB moved at the top), hidden sizes of common models.
SHAPES = [
    dict(rows=128, cols=256),
    dict(rows=1024, cols=512),
    dict(rows=2048, cols=768),
    dict(rows=1999, cols=1000),
    dict(rows=4096, cols=1024),
    dict(rows=4096, cols=4096),
    dict(rows=8192, cols=2048),
    dict(rows=2048, cols=8192),
    dict(rows=512, cols=32768),
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
    weight = torch.randn(cols, device=device, dtype=torch.float16)
    return x, weight


def reference(x, weight):
    xf = x.float()
    rstd = torch.rsqrt(xf.pow(2).mean(dim=-1, keepdim=True) + EPS)
    return (xf * rstd * weight.float()).half()


def bytes_moved(rows, cols):
    return 2 * (2 * rows * cols + cols)


def flops(rows, cols):
    # square, sum, scale by 1/rms and by the weight per element.
    return 4 * rows * cols
