"""The global loads and stores of TritonBench's masked_add kernel and of its data_masks variant, compiled for sm_90
(no GPU needed: Triton compiles to PTX on the CPU):

    PYTHONPATH=src KERNELBAND_TRITONBENCH=... python benchmarks/data_masks_ptx.py

The original's mask reads the loaded p_mask, so every lane is its own predicated 32-bit access; the variant's
loads and stores are masked by the bounds alone and vectorise (ld.global.v4 / st.global.v4)."""

from __future__ import annotations

import importlib.util
import re
import sys
import tempfile
from collections import Counter
from pathlib import Path

from kernelband.proposers.rewriter.proposer import options
from kernelband.tasks import load_task

SIGNATURE = {"grad_ptr": "*fp32", "p_ptr": "*fp32", "p_mask_ptr": "*i1", "n_elements": "i32", "alpha": "fp32",
             "BLOCK_SIZE": "constexpr"}


def ptx(source: str, name: str) -> str:
    import triton
    from triton.backends.compiler import GPUTarget
    from triton.compiler import ASTSource

    path = Path(tempfile.mkdtemp()) / f"{name}.py"
    path.write_text(source)
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    # the pointers 16-byte aligned and n a multiple of 16, as Triton specializes a launch on 134M elements
    attrs = {(i,): [["tt.divisibility", 16]] for i in range(4)}
    compiled = triton.compile(ASTSource(module.masked_add_kernel, SIGNATURE, {"BLOCK_SIZE": 1024}, attrs),
                              target=GPUTarget("cuda", 90, 32))
    return compiled.asm["ptx"]


def accesses(text: str) -> Counter:
    return Counter(re.findall(r"\b((?:ld|st)\.global(?:\.[a-z0-9]+)*)", text))


def main() -> None:
    source = load_task("tritonbench:masked_add_cuda").module_source
    found = options(source, ("data_masks",))
    if not found.variants:
        sys.exit(f"no variant: {found.reasons}")
    variant = found.variants[0].apply(found.module)
    for label, text in (("original", source), ("data_masks", variant)):
        counts = accesses(ptx(text, f"kb_{label}"))
        print(f"{label:12s}", ", ".join(f"{n} {op}" for op, n in sorted(counts.items())))


if __name__ == "__main__":
    main()
