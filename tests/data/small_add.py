"""Vector add on a few small shapes: a quick task for tests."""

import torch
import triton
import triton.language as tl


@triton.jit
def add_kernel(x_ptr, y_ptr, out_ptr, n, BLOCK: tl.constexpr):
    offsets = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offsets < n
    tl.store(out_ptr + offsets, tl.load(x_ptr + offsets, mask=mask) + tl.load(y_ptr + offsets, mask=mask), mask=mask)


def add(x, y):
    out = torch.empty_like(x)
    add_kernel[(triton.cdiv(x.numel(), 256),)](x, y, out, x.numel(), BLOCK=256)
    return out


# --------------------------------- kernelband task ---------------------------------
import torch  # noqa: E402

ENTRY = "add"
# A task needs at least 10 search shapes; these stay small so that GPU tests are quick.
SHAPES = [dict(n=4096), dict(n=65537), dict(n=1 << 20)] + [dict(n=1000 * k + 1) for k in range(1, 8)]
HELD_OUT = [dict(n=12345)]
INTERPRETER_SHAPES = [dict(n=4096), dict(n=5000)]
INTERPRETER_HELD_OUT = [dict(n=777)]


def make_inputs(device, n):
    return torch.randn(n, device=device), torch.randn(n, device=device)


def reference(x, y):
    return x + y


def bytes_moved(n):
    return 12 * n


def flops(n):
    return n
