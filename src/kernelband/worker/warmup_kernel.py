"""A tiny kernel a fresh worker runs once, so Triton's driver helpers are built
before the worker is handed a candidate (off the critical path)."""

import triton
import triton.language as tl


@triton.jit
def _copy_kernel(src, dst, n, BLOCK: tl.constexpr):
    offsets = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offsets < n
    tl.store(dst + offsets, tl.load(src + offsets, mask=mask), mask=mask)


def run(device: str) -> None:
    import torch

    src = torch.arange(256, dtype=torch.float32, device=device)
    dst = torch.empty_like(src)
    _copy_kernel[(1,)](src, dst, src.numel(), BLOCK=256)
    if device != "cpu":
        torch.cuda.synchronize()
