"""Out-of-place transpose of a float32 matrix, deliberately naive: tiny 16x16 tiles, no care for coalesced writes."""

import torch
import triton
import triton.language as tl


@triton.jit
def transpose_kernel(x_ptr, out_ptr, rows, cols, BLOCK: tl.constexpr):
    pid_r = tl.program_id(axis=0)
    pid_c = tl.program_id(axis=1)
    offs_r = pid_r * BLOCK + tl.arange(0, BLOCK)
    offs_c = pid_c * BLOCK + tl.arange(0, BLOCK)
    mask = (offs_r[:, None] < rows) & (offs_c[None, :] < cols)
    # Reads run along x's rows; the writes of the same tile stride down out's columns.
    tile = tl.load(x_ptr + offs_r[:, None] * cols + offs_c[None, :], mask=mask)
    tl.store(out_ptr + offs_c[None, :] * rows + offs_r[:, None], tile, mask=mask)


def transpose(x: torch.Tensor) -> torch.Tensor:
    rows, cols = x.shape
    x = x.contiguous()
    out = torch.empty((cols, rows), device=x.device, dtype=x.dtype)
    grid = (triton.cdiv(rows, 16), triton.cdiv(cols, 16))
    transpose_kernel[grid](x, out, rows, cols, BLOCK=16, num_warps=4)
    return out


# --------------------------------- kernelband task ---------------------------------
import torch  # noqa: E402  (the task definition runs on its own)

ENTRY = "transpose"
# 16K elements to 64M elements (512 MB moved at the top); square, wide, tall and odd.
SHAPES = [
    dict(rows=128, cols=128),
    dict(rows=512, cols=512),
    dict(rows=1000, cols=3001),
    dict(rows=1024, cols=1024),
    dict(rows=2048, cols=2048),
    dict(rows=64, cols=65536),
    dict(rows=65536, cols=64),
    dict(rows=4096, cols=4096),
    dict(rows=2048, cols=16384),
    dict(rows=16384, cols=2048),
    dict(rows=8192, cols=8192),
]
HELD_OUT = [dict(rows=3001, cols=1537), dict(rows=7777, cols=5003)]
INTERPRETER_SHAPES = [dict(rows=32, cols=48), dict(rows=20, cols=37)]
# Without it the interpreter would run the full-size held-out shapes on the CPU.
INTERPRETER_HELD_OUT = [dict(rows=33, cols=17)]


def make_inputs(device, rows, cols):
    return (torch.randn(rows, cols, device=device),)


def reference(x):
    return x.t().contiguous()


def bytes_moved(rows, cols):
    return 2 * 4 * rows * cols


def flops(rows, cols):
    return 0
