"""Seeded dropout of a float32 vector, deliberately naive: 128-element blocks, one warp."""

import torch
import triton
import triton.language as tl


@triton.jit
def dropout_kernel(x_ptr, out_ptr, n_elements, p, seed, BLOCK_SIZE: tl.constexpr):
    pid = tl.program_id(axis=0)
    offsets = pid * BLOCK_SIZE + tl.arange(0, BLOCK_SIZE)
    mask = offsets < n_elements
    x = tl.load(x_ptr + offsets, mask=mask)
    # The mask is a pure function of (seed, element index): no random state is kept in memory.
    keep = tl.rand(seed, offsets) > p
    tl.store(out_ptr + offsets, tl.where(keep, x / (1 - p), 0.0), mask=mask)


def dropout(x: torch.Tensor, p: float, seed: int) -> torch.Tensor:
    out = torch.empty_like(x)
    n = x.numel()
    grid = (triton.cdiv(n, 128),)
    dropout_kernel[grid](x, out, n, p, seed, BLOCK_SIZE=128, num_warps=1)
    return out


# --------------------------------- kernelband task ---------------------------------
import torch  # noqa: E402  (the task definition runs on its own)

ENTRY = "dropout"
# 4K elements to 64M elements (512 MB moved at the top).
SHAPES = [dict(n=2**k) for k in range(12, 26, 2)] + [dict(n=3 * 2**20 + 1), dict(n=2**25), dict(n=2**26)]
HELD_OUT = [dict(n=999_983), dict(n=5 * 2**22 + 7)]
INTERPRETER_SHAPES = [dict(n=4096), dict(n=10_007)]
# Without it the interpreter would run the full-size held-out shapes on the CPU.
INTERPRETER_HELD_OUT = [dict(n=1001)]

# No `reference`: torch cannot reproduce the Philox stream behind tl.rand, so the starting kernel is
# the ground truth. A candidate must keep the mask `tl.rand(seed, offsets) > p`, element for element,
# with `offsets` the element's flat index: a different stream, or a different index per element, fails.


def make_inputs(device, n):
    x = torch.randn(n, device=device)
    # Drawn on the CPU (also when `device` is "meta") under the evaluator's seed, so every run differs.
    seed = int(torch.randint(0, 2**31 - 1, (), device="cpu"))
    return x, 0.5, seed


def bytes_moved(n):
    return 2 * 4 * n


def flops(n):
    return 2 * n
