"""Is every variant of one rewrite correct? Each variant of each task's starting kernel, evaluated against that
kernel in the Triton interpreter (CPU; correctness on the interpreter's shapes and the task's own tests).

    python benchmarks/rewrite_correctness.py rows                       # the 29 TritonBench-G level-1/2 tasks
    python benchmarks/rewrite_correctness.py coarsen --tasks dequantize_rowwise,softmax_triton1

One line per variant, then the count. matmul_kernel is skipped: it is too slow for the interpreter.
"""

from __future__ import annotations

import argparse
import time

from kernelband.errors import run_script
from kernelband.evaluation.evaluator import Evaluator, Limits
from kernelband.proposers.rewriter.proposer import options
from kernelband.tasks import load_task
from kernelband.tasks import tritonbench as tb

TOO_SLOW = {"matmul_kernel"}


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("rewrite")
    ap.add_argument("--tasks", default="", help="comma-separated TritonBench-G names (default: level 1-2)")
    ap.add_argument("--seed", type=int, default=3)
    args = ap.parse_args()
    names = args.tasks.split(",") if args.tasks else [n for n in tb.level12(None) if n not in TOO_SLOW]
    results = []
    with Evaluator(mode="interpreter", warm=2, limits=Limits(load_s=120, run_s=300, time_s=300),
                   memory_limit=6 << 30) as evaluator:
        for name in names:
            task = load_task(f"tritonbench:{name}")
            found = options(task.module_source, (args.rewrite,))
            if not found.variants:
                print(f"{name}: does not apply ({'; '.join(found.reasons)[:200]})", flush=True)
                continue
            for variant in found.variants:
                t0 = time.monotonic()
                result = evaluator.evaluate(task, variant.apply(found.module), seed=args.seed)
                results.append(result.ok)
                why = "" if result.ok else f" {result.detail[:200]} {result.error[-300:]!r}"
                print(f"{name}: {variant.rationale[:70]}: {result.outcome.value} ({time.monotonic() - t0:.0f} s){why}",
                      flush=True)
    print(f"{sum(results)} of {len(results)} variants of {args.rewrite} correct, "
          f"over {len(names)} tasks (interpreter, seed {args.seed})")


if __name__ == "__main__":
    run_script(main)
