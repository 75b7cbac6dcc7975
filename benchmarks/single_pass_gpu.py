"""single_pass on a GPU: every variant of every TritonBench-G task it fires on, evaluated by the project's
evaluator against the task's reference (outcome, runtime-weighted speedup over the starting kernel, speedup per
search shape). On the GPU this covers what the CPU cannot: the block-pointer kernels run there (Triton 3.9's
interpreter and compiler refuse them), and the twin's speed where a row fits one block.

No GPU (`--device cpu`): the interpreter on the tasks given with --tasks (default: two quick ones). On the GPU
machine (about 25 device minutes for the 36 tasks, most of it the autotuned matmuls' tuning):

    python benchmarks/single_pass_gpu.py --device cuda --out $OUT/single_pass_gpu.json
"""

from __future__ import annotations

import argparse
import json
import time

QUICK = ["rmsnorm_triton", "mean_reduction"]


def fired(rewrite: str = "single_pass") -> list[str]:
    """The TritonBench-G tasks the rewrite makes a variant of."""
    from kernelband.proposers.rewriter.proposer import options
    from kernelband.tasks import tritonbench

    names = []
    for name, entry in sorted(tritonbench.entries().items()):
        source, _ = tritonbench.split_instance(entry.instance)
        if options(source, (rewrite,)).variants:
            names.append(name)
    return names


def run(device: str, refs: list[str], rewrite: str = "single_pass") -> list[dict]:
    """Each variant the rewrite makes of each task (`tritonbench:NAME`, `examples:NAME`), through the evaluator:
    is it correct, and how fast on the task's shapes."""
    from kernelband.evaluation.evaluator import Evaluator
    from kernelband.proposers.rewriter.proposer import options
    from kernelband.tasks import load_task

    rows = []
    with Evaluator(mode="gpu" if device == "cuda" else "interpreter", use_ncu=False) as ev:
        for ref in refs:
            task = load_task(ref)
            found = options(task.module_source, (rewrite,))
            for variant in found.variants:
                started = time.time()
                row = {"task": ref, "variant": variant.rationale}
                try:
                    result = ev.evaluate(task, variant.apply(found.module), seed=1)
                    row.update(ok=result.ok, outcome=result.outcome.value, detail=result.detail[:300],
                               speedup=result.speedup,
                               shapes={s.label: s.speedup for s in result.shapes if not s.held_out})
                except Exception as exc:  # the starting kernel cannot run here
                    row["error"] = str(exc)[:300]
                row["seconds"] = round(time.time() - started, 1)
                rows.append(row)
                print(json.dumps(row), flush=True)
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--device", choices=("cuda", "cpu"), default="cuda")
    parser.add_argument("--tasks", default="", help="comma-separated task names (default: every task it fires "
                                                      "on with --device cuda, two quick ones on the CPU)")
    parser.add_argument("--out", required=True)
    args = parser.parse_args()
    names = args.tasks.split(",") if args.tasks else (fired() if args.device == "cuda" else QUICK)
    rows = run(args.device, [f"tritonbench:{name}" for name in names])
    with open(args.out, "w") as f:
        json.dump({"device": args.device, "rows": rows}, f, indent=1)
    wrong = [r for r in rows if r.get("ok") is False]
    print(f"{len(rows)} variants, {len(wrong)} not correct, {sum('error' in r for r in rows)} not run")


if __name__ == "__main__":
    main()
