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
    add_kernel[(triton.cdiv(x.numel(), 1024),)](x, y, out, x.numel(), BLOCK=1024)
    return out


# The worker's own writer, replaced from inside the candidate: the layout it reports claims bytes the file
# does not hold. The parent must refuse to read it, not fail itself.
import kernelband.tensorfile as _tensorfile  # noqa: E402

_write = _tensorfile.write


def _lying_write(tensors, path):
    return {name: {**spec, "nbytes": spec["nbytes"] + 4096} for name, spec in _write(tensors, path).items()}


_tensorfile.write = _lying_write
