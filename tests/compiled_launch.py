"""A program whose launches reach Triton's hooks as a compiled kernel's do, without a GPU: the JIT cache hook
at the first launch (as `JITFunction._do_compile` calls it), then the launch enter and exit hooks around the
launch with the metadata `CompiledKernel.launch_metadata` builds (its function's `launch_metadata` callback
added to a LazyDict). The computation itself is a torch op: what the capture sees of it is what it sees of a
kernel on a GPU.

`scale` and `lookup` are entries whose file can be a task's module; `Scaler.apply`, a method, is launched in
launch mode (the capture wraps its kernel).
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl
from triton.compiler.compiler import LazyDict
from triton.runtime.jit import JITFunction, JitFunctionInfo


def scale_kernel(x_ptr, out_ptr, n, factor, BLOCK: tl.constexpr):
    pass


def lookup_kernel(ids_ptr, table_ptr, mask_ptr, out_ptr, n, dim, BLOCK: tl.constexpr):
    pass


kernel = JITFunction(scale_kernel)
lookup_jit = JITFunction(lookup_kernel)
# the JIT cache hooks each kernel has been compiled under (held, so that their ids stay their own): a recorder
# installed later sees the kernel compiled again, as a new process would
_compiled: set[tuple[int, object]] = set()


class CompiledMetadata:
    num_warps = 4
    num_stages = 3


def launch(jit: JITFunction, grid: tuple, args: dict, run) -> None:
    """Triton's side of a launch of `jit` with `args`; `run()` is the kernel's work."""
    runtime = triton.knobs.runtime
    if runtime.jit_cache_hook is not None and (id(jit), runtime.jit_cache_hook) not in _compiled:
        _compiled.add((id(jit), runtime.jit_cache_hook))
        runtime.jit_cache_hook(key="key", repr=jit.fn.__name__, fn=JitFunctionInfo(__name__, jit.fn.__name__, jit),
                               compile={}, is_manual_warmup=False, already_compiled=False)
    metadata = LazyDict({"name": jit.fn.__name__, "function": None, "stream": 0})
    if jit.launch_metadata is not None:
        metadata.add(jit.launch_metadata, (grid, CompiledMetadata, args))
    runtime.launch_enter_hook(metadata)
    run()
    runtime.launch_exit_hook(metadata)


# A frame of Triton's to the recorder, as JITFunction.run is on a GPU: the entry is the function that calls it.
launch.__code__ = launch.__code__.replace(co_filename=triton.runtime.jit.__file__)


def scale(x: torch.Tensor, factor: float) -> torch.Tensor:
    out = torch.empty_like(x)
    n = x.numel()
    launch(kernel, (triton.cdiv(n, 128),), dict(x_ptr=x, out_ptr=out, n=n, factor=factor, BLOCK=128),
           lambda: out.copy_(x * factor))
    return out


def lookup(ids: torch.Tensor, table: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """Rows `ids` of `table`, zero where `mask` is False."""
    out = torch.empty((ids.numel(), table.shape[1]), dtype=table.dtype, device=table.device)
    launch(lookup_jit, (ids.numel(),), dict(ids_ptr=ids, table_ptr=table, mask_ptr=mask, out_ptr=out, n=ids.numel(),
                                            dim=table.shape[1], BLOCK=64),
           lambda: out.copy_(table[ids.reshape(-1)] * mask.reshape(-1, 1)))
    return out


class Scaler:
    def __init__(self, factor: float):
        self.factor = factor

    def apply(self, x: torch.Tensor) -> torch.Tensor:
        out = torch.empty_like(x)
        n = x.numel()
        launch(kernel, (triton.cdiv(n, 128),), dict(x_ptr=x, out_ptr=out, n=n, factor=self.factor, BLOCK=128),
               lambda: out.copy_(x * self.factor))
        return out
