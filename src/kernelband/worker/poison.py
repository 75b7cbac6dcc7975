"""Memory poisoning for the reference's self-checks: uninitialized allocations and the allocator's free
blocks filled with NaN, so that outputs which depend on memory a kernel does not own show up as differences."""

from __future__ import annotations

import contextlib
import math


@contextlib.contextmanager
def filled_memory():
    """Uninitialized memory (torch.empty and friends) filled with NaN / the largest integer, through torch's
    deterministic mode. Code whose outputs show what an allocation held before gives different outputs with
    and without it: this is how the reference's own non-reproducible outputs are found."""
    import torch
    import torch.utils.deterministic as det

    before = (torch.are_deterministic_algorithms_enabled(), torch.is_deterministic_algorithms_warn_only_enabled(),
              det.fill_uninitialized_memory)
    torch.use_deterministic_algorithms(True, warn_only=True)
    det.fill_uninitialized_memory = True
    try:
        yield
    finally:
        torch.use_deterministic_algorithms(before[0], warn_only=before[1])
        det.fill_uninitialized_memory = before[2]


def scramble_free_memory(device) -> None:
    """Fill the CUDA caching allocator's free memory with NaN: code that reads memory its tensors do not own
    (past a tensor's end, into freed blocks) then reads other values than before. Small allocations come from
    2 MiB segments, large ones from their own: both pools get NaN-filled free blocks."""
    import torch

    torch.cuda.synchronize()
    torch.cuda.empty_cache()
    junk = [torch.full((1 << 18,), math.nan, device=device) for _ in range(64)]  # 1 MiB each: small pool
    junk += [torch.full((8 << 20,), math.nan, device=device) for _ in range(8)]  # 32 MiB each: large pool
    torch.cuda.synchronize()
    del junk
