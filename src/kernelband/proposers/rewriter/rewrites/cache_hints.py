"""The cache-hints rewrite: eviction_policy / cache_modifier on tl.load and tl.store."""


from __future__ import annotations

import libcst as cst

from kernelband.proposers.rewriter.analysis.source import Kernel, ModuleSource
from kernelband.proposers.rewriter.edits import (
    Found,
    Variant,
    set_kwarg,
)


# -- cache hints ---------------------------------------------------------------------------------------------
def _lacks(call: cst.Call, keyword: str, positional_max: int) -> bool:
    positional = sum(1 for a in call.args if a.keyword is None)
    return positional <= positional_max and all(a.keyword is None or a.keyword.value != keyword for a in call.args)


def _reread(kernel: Kernel) -> set[int]:
    """Loads of a pointer that the kernel loads more than once (several passes over the same data)."""
    bases = {id(c): kernel.bases(a) if (a := kernel.address(c)) is not None else set() for c in kernel.loads}
    counts: dict[str, int] = {}
    for found in bases.values():
        for base in found:
            counts[base] = counts.get(base, 0) + 1
    return {i for i, found in bases.items() if any(counts[b] > 1 for b in found)}


# A load or store takes a cache modifier or an eviction policy, never both: PTX writes them in two different
# forms of ld/st, and Triton 3.6's ptxas stops at the pair ("Internal Triton PTX codegen error"). On a GPU
# sweep all 7 candidates with both on one tl.load failed so, and none of the other 335 (BENCHMARKS.md).
HINTS = ("cache_modifier", "eviction_policy")


def cache_hints(ms: ModuleSource) -> Found:
    variants, reasons = [], []
    for kernel in ms.kernels.values():
        again = _reread(kernel)
        plans = (
            ("eviction_policy", '"evict_first"', [c for c in kernel.loads if id(c) not in again], "load",
             "of data read once"),
            ("eviction_policy", '"evict_last"', [c for c in kernel.loads if id(c) in again], "load",
             "of data read again"),
            ("cache_modifier", '".cg"', kernel.loads, "load", "(cached in L2 only)"),
            ("cache_modifier", '".cs"', kernel.stores, "store", "(streaming, evict first)"),
        )
        for keyword, value, calls, noun, what in plans:
            todo = [c for c in calls if all(_lacks(c, k, 3) for k in HINTS)]  # tl.load(pointer, mask, other, ...)
            if todo:
                count = f"{len(todo)} {noun}{'s' if len(todo) > 1 else ''}"
                variants.append(Variant("cache_hints", f"{keyword}={value} on {count} {what} in {kernel.name}",
                                        frozenset({kernel.name}), tuple((c, set_kwarg(keyword, value)) for c in todo)))
        if not kernel.loads and not kernel.stores:
            reasons.append(f"{kernel.name} has no tl.load or tl.store")
    if not variants and not reasons:
        reasons.append("every tl.load and tl.store has a cache hint already")
    return Found(variants, reasons)
