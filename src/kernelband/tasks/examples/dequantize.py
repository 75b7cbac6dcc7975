"""Row-wise int8 dequantisation to float16, deliberately naive: a 1-D launch of 64-element blocks that divides to find each row."""

import torch
import triton
import triton.language as tl


@triton.jit
def dequantize_kernel(q_ptr, scale_ptr, out_ptr, n_elements, n_cols, BLOCK_SIZE: tl.constexpr):
    pid = tl.program_id(axis=0)
    offsets = pid * BLOCK_SIZE + tl.arange(0, BLOCK_SIZE)
    mask = offsets < n_elements
    # An integer division per element; a block may straddle two rows.
    row = offsets // n_cols
    q = tl.load(q_ptr + offsets, mask=mask, other=0)
    scale = tl.load(scale_ptr + row, mask=mask, other=0.0)
    tl.store(out_ptr + offsets, (q.to(tl.float32) * scale).to(tl.float16), mask=mask)


def dequantize(q: torch.Tensor, scale: torch.Tensor) -> torch.Tensor:
    rows, cols = q.shape
    q = q.contiguous()
    out = torch.empty((rows, cols), device=q.device, dtype=torch.float16)
    n = q.numel()
    grid = (triton.cdiv(n, 64),)
    dequantize_kernel[grid](q, scale, out, n, cols, BLOCK_SIZE=64)
    return out


# --------------------------------- kernelband task ---------------------------------
import torch  # noqa: E402  (the task definition runs on its own)

ENTRY = "dequantize"
# 32K elements to 128M elements (384 MB moved at the top); model-weight-like and odd sizes.
SHAPES = [
    dict(rows=128, cols=256),
    dict(rows=1024, cols=1024),
    dict(rows=777, cols=3001),
    dict(rows=4096, cols=1024),
    dict(rows=4096, cols=4096),
    dict(rows=11008, cols=4096),
    dict(rows=65536, cols=512),
    dict(rows=1024, cols=32768),
    dict(rows=8192, cols=8192),
    dict(rows=28672, cols=4096),
    dict(rows=16384, cols=8192),
]
HELD_OUT = [dict(rows=3001, cols=1537), dict(rows=12289, cols=5003)]
INTERPRETER_SHAPES = [dict(rows=16, cols=64), dict(rows=13, cols=100)]
# Without it the interpreter would run the full-size held-out shapes on the CPU.
INTERPRETER_HELD_OUT = [dict(rows=7, cols=33)]


def make_inputs(device, rows, cols):
    q = torch.randint(-128, 128, (rows, cols), device=device, dtype=torch.int8)
    # Per-row scales like absmax / 127 of weights of magnitude about 0.1 to 3.
    scale = torch.rand(rows, device=device) * 0.02 + 1e-3
    return q, scale


def reference(q, scale):
    return (q.float() * scale[:, None]).half()


def bytes_moved(rows, cols):
    return rows * cols + 4 * rows + 2 * rows * cols


def flops(rows, cols):
    return rows * cols
