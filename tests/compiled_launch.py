"""A program whose launches reach Triton's hooks as a compiled kernel's do, without a GPU: the JIT cache hook
at the first launch (as `JITFunction._do_compile` calls it), then the launch enter and exit hooks around the
launch with the metadata `CompiledKernel.launch_metadata` builds (its function's `launch_metadata` callback
added to a LazyDict). The computation itself is a torch op: what the capture sees of it is what it sees of a
kernel on a GPU."""

from __future__ import annotations

import torch
import triton
import triton.language as tl
from triton.compiler.compiler import LazyDict
from triton.runtime.jit import JITFunction, JitFunctionInfo


def scale_kernel(x_ptr, out_ptr, n, factor, BLOCK: tl.constexpr):
    pass


kernel = JITFunction(scale_kernel)
_compiled: set[int] = set()


class CompiledMetadata:
    num_warps = 4
    num_stages = 3


def scale(x: torch.Tensor, factor: float) -> torch.Tensor:
    out = torch.empty_like(x)
    runtime = triton.knobs.runtime
    if id(kernel) not in _compiled:
        _compiled.add(id(kernel))
        if runtime.jit_cache_hook is not None:
            runtime.jit_cache_hook(key="key", repr="scale_kernel", fn=JitFunctionInfo(__name__, "scale_kernel", kernel),
                                   compile={}, is_manual_warmup=False, already_compiled=False)
    n = x.numel()
    grid = (triton.cdiv(n, 128),)
    metadata = LazyDict({"name": "scale_kernel", "function": None, "stream": 0})
    if kernel.launch_metadata is not None:
        args = dict(x_ptr=x, out_ptr=out, n=n, factor=factor, BLOCK=128)
        metadata.add(kernel.launch_metadata, (grid, CompiledMetadata, args))
    runtime.launch_enter_hook(metadata)
    out.copy_(x * factor)
    runtime.launch_exit_hook(metadata)
    return out
