"""LayerNorm of float32 rows with weight and bias, deliberately naive: three passes over global memory, 256-column chunks."""

import torch
import triton
import triton.language as tl


@triton.jit
def layernorm_kernel(out_ptr, x_ptr, w_ptr, b_ptr, x_row_stride, out_row_stride, n_cols, eps,
                     BLOCK_SIZE: tl.constexpr):
    row = tl.program_id(axis=0)
    x_row = x_ptr + row * x_row_stride
    out_row = out_ptr + row * out_row_stride
    cols = tl.arange(0, BLOCK_SIZE)
    # Pass 1: the mean.
    acc = tl.zeros([BLOCK_SIZE], tl.float32)
    for start in range(0, n_cols, BLOCK_SIZE):
        acc += tl.load(x_row + start + cols, mask=start + cols < n_cols, other=0.0)
    mean = tl.sum(acc, axis=0) / n_cols
    # Pass 2: the variance around that mean (more accurate than E[x^2] - mean^2).
    acc = tl.zeros([BLOCK_SIZE], tl.float32)
    for start in range(0, n_cols, BLOCK_SIZE):
        mask = start + cols < n_cols
        x = tl.load(x_row + start + cols, mask=mask, other=0.0)
        d = tl.where(mask, x - mean, 0.0)
        acc += d * d
    rstd = 1.0 / tl.sqrt(tl.sum(acc, axis=0) / n_cols + eps)
    # Pass 3: normalise, scale, shift.
    for start in range(0, n_cols, BLOCK_SIZE):
        mask = start + cols < n_cols
        x = tl.load(x_row + start + cols, mask=mask, other=0.0)
        w = tl.load(w_ptr + start + cols, mask=mask, other=0.0)
        b = tl.load(b_ptr + start + cols, mask=mask, other=0.0)
        tl.store(out_row + start + cols, (x - mean) * rstd * w + b, mask=mask)


def layernorm(x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor) -> torch.Tensor:
    rows, cols = x.shape
    out = torch.empty_like(x)
    layernorm_kernel[(rows,)](out, x, weight, bias, x.stride(0), out.stride(0), cols, 1e-5,
                              BLOCK_SIZE=256, num_warps=4)
    return out


# --------------------------------- kernelband task ---------------------------------
import torch  # noqa: E402  (the task definition runs on its own)

ENTRY = "layernorm"
EPS = 1e-5
# 32K elements to 64M elements (512 MB moved at the top).
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
]
HELD_OUT = [dict(rows=3001, cols=5120 + 3), dict(rows=12345, cols=1531)]
INTERPRETER_SHAPES = [dict(rows=8, cols=256), dict(rows=11, cols=700)]
# Without it the interpreter would run the full-size held-out shapes on the CPU.
INTERPRETER_HELD_OUT = [dict(rows=5, cols=333)]


def make_inputs(device, rows, cols):
    # An offset and a scale, so that a kernel that forgets to subtract the mean is caught.
    x = 3.0 + 2.0 * torch.randn(rows, cols, device=device)
    weight = torch.randn(cols, device=device)
    bias = torch.randn(cols, device=device)
    return x, weight, bias


def reference(x, weight, bias):
    return torch.nn.functional.layer_norm(x, (x.shape[-1],), weight, bias, eps=EPS)


def bytes_moved(rows, cols):
    return 4 * (2 * rows * cols + 2 * cols)


def flops(rows, cols):
    # sum, subtract, square, sum, normalise, scale and shift per element.
    return 8 * rows * cols
