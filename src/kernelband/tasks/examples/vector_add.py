"""Element-wise add of two vectors, deliberately naive: 128-element blocks, one warp."""

import torch
import triton
import triton.language as tl


@triton.jit
def add_kernel(x_ptr, y_ptr, out_ptr, n_elements, BLOCK_SIZE: tl.constexpr):
    pid = tl.program_id(axis=0)
    offsets = pid * BLOCK_SIZE + tl.arange(0, BLOCK_SIZE)
    mask = offsets < n_elements
    x = tl.load(x_ptr + offsets, mask=mask)
    y = tl.load(y_ptr + offsets, mask=mask)
    tl.store(out_ptr + offsets, x + y, mask=mask)


def add(x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    out = torch.empty_like(x)
    n = out.numel()
    grid = (triton.cdiv(n, 128),)
    add_kernel[grid](x, y, out, n, BLOCK_SIZE=128, num_warps=1)
    return out


# --------------------------------- kernelband task ---------------------------------
import torch  # noqa: E402  (the task definition runs on its own)

ENTRY = "add"
# 4K elements to 128M elements (1.5 GB moved at the top).
SHAPES = [dict(n=2**k) for k in range(12, 28, 2)] + [dict(n=3 * 2**20 + 1), dict(n=2**27)]
HELD_OUT = [dict(n=999_983), dict(n=5 * 2**22 + 7)]
INTERPRETER_SHAPES = [dict(n=4096), dict(n=10_007)]
INTERPRETER_HELD_OUT = [dict(n=1001)]


def make_inputs(device, n):
    return torch.randn(n, device=device), torch.randn(n, device=device)


def reference(x, y):
    return x + y


def bytes_moved(n):
    return 3 * 4 * n


def flops(n):
    return n
