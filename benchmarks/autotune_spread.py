"""Does keying the rewriter's autotune on `tune_numel` make an autotuned kernel's speedup repeatable? (GPU)

    python3 benchmarks/autotune_spread.py --tasks rmsnorm_triton,flash_decode2_phi,geglu_tanh_triton --n 3

Bench 3's autotuned finalists re-measured with an 18 % spread against the search (1.2 % for plain kernels):
their autotuners keyed on size arguments every shape shares, so each process tuned once, on a shape of a few
µs whose config timing is a draw. Since then the rewriter adds `tune_numel` (the launch's summed element
count) to the kernel and its key. For each task this takes the current rewriter's first autotune variant of
the starting kernel (`tune_numel`) and the same source with `tune_numel` left out of the key (`shared key`,
as before), and evaluates each `--n` times, alternately, each time in a new worker (`default` preset, no
ncu). It prints each version's speedups and their spread (max/min) and CV. One JSON line per task.
"""

from __future__ import annotations

import argparse
import json
import statistics

from kernelband.errors import run_script
from kernelband.evaluation.evaluator import Evaluator
from kernelband.proposers.rewriter.proposer import options
from kernelband.tasks import load_task

KEYED = ', "tune_numel"]'


def versions(source: str) -> dict[str, str] | None:
    """{'tune_numel': the rewriter's first autotune variant, 'shared key': the same without tune_numel in its
    key}, or None when the rewrite does not apply or adds no tune_numel."""
    found = options(source, ("autotune",))
    if not found.variants:
        return None
    keyed = found.variants[0].apply(found.module)
    if KEYED not in keyed:
        return None
    return {"tune_numel": keyed, "shared key": keyed.replace(KEYED, "]")}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--tasks", default="rmsnorm_triton,flash_decode2_phi,geglu_tanh_triton")
    ap.add_argument("--n", type=int, default=3)
    args = ap.parse_args()
    with Evaluator(warm=2) as ev:
        for name in args.tasks.split(","):
            task = load_task(f"tritonbench:{name}")
            both = versions(task.module_source)
            if both is None:
                print(json.dumps({"task": name, "skipped": "no autotune variant with tune_numel"}), flush=True)
                continue
            got: dict[str, list] = {k: [] for k in both}
            for _ in range(args.n):
                for label, source in both.items():
                    r = ev.evaluate(task, source, preset="default", profile=False)
                    got[label].append(round(r.speedup, 4) if r.ok and r.speedup else r.outcome.value)
            row = {"task": name}
            for label, xs in got.items():
                nums = [x for x in xs if isinstance(x, float)]
                row[label] = {"speedups": xs,
                              "max_over_min": round(max(nums) / min(nums), 4) if len(nums) > 1 else None,
                              "cv": round(statistics.stdev(nums) / statistics.fmean(nums), 4) if len(nums) > 1 else None}
            print(json.dumps(row), flush=True)


if __name__ == "__main__":
    run_script(main)
