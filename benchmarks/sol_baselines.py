"""Speed of light and torch baselines per task (GPU machine): how close the kernels come to what the GPU can
do, and whether they beat torch eager and torch.compile.

For each task (default: the 29 TritonBench-G level-1/2 tasks and the built-in examples):

  k0     the starting kernel, evaluated as a candidate under the default preset: its SOL median over the
         search shapes (the bound with the launch floor) and over those that move at least 16 MB, and its
         runtime-weighted speedup over torch eager and over torch.compile where the task has a torch reference.
  best   with --db and --bench: the best kernel of each finished run of that task in the bench (its run
         summary's `best_candidate`), evaluated again the same way beside k0: the same figures and its speedup
         over k0 (the reference the evaluator times it against).

The summary holds the figures the acceptance targets read: the median SOL fraction on shapes of >= 16 MB,
the share of tasks with a reference on which the best kernel is at least as fast as torch.compile,
examples:matmul against torch eager (cuBLAS), and the geometric-mean best speedup over k0, per policy.

    python benchmarks/sol_baselines.py --out sol.json                          # k0 only
    python benchmarks/sol_baselines.py --db runs.db --bench 1 --out sol.json    # k0 and each run's best
    python benchmarks/sol_baselines.py --interpreter --tasks examples:vector_add --out sol.json  # plumbing
"""

from __future__ import annotations

import argparse
import json
import math
import statistics
import time
from pathlib import Path

from kernelband.errors import UserError, run_script
from kernelband.evaluation.evaluator import Evaluator
from kernelband.evaluation.records import EvalResult
from kernelband.store import Store
from kernelband.tasks import example_names, load_task, tritonbench


def figures(result: EvalResult) -> dict:
    """What the table shows of one evaluation."""
    return {"outcome": result.outcome.value, "speedup": result.speedup, "sol_median": result.sol_median,
            "sol_median_large": result.sol_median_large, "vs_eager": result.speedup_vs_eager,
            "vs_compile": result.speedup_vs_compile, "vs_eager_skipped": result.vs_eager_skipped,
            "vs_compile_skipped": result.vs_compile_skipped,
            "shapes": [{"label": s.label, "cand_ms": s.cand_ms, "eager_ms": s.eager_ms, "compiled_ms": s.compiled_ms,
                        "bound_ms": s.bound_ms, "data_bound_ms": s.data_bound_ms, "moved_bytes": s.moved_bytes,
                        "sol_fraction": s.sol_fraction} for s in result.shapes if not s.held_out]}


def best_kernels(db: str, bench: int, policies: list[str]) -> dict[str, list[dict]]:
    """task ref -> the best kernel of each finished run of the bench: {policy, seed, run_id, candidate, source}."""
    if not Path(db).exists():
        raise UserError(f"no run database at {db}")
    store = Store(db)
    try:
        runs = [r for r in store.runs(bench) if r.summary and (not policies or r.policy in policies)]
        if not runs:
            raise UserError(f"bench {bench} in {db} has no finished run{' of ' + ', '.join(policies) if policies else ''}")
        found: dict[str, list[dict]] = {}
        for run in runs:
            cid = run.summary.get("best_candidate")
            source = next((c["source"] for c in store.candidates(run.id) if c["id"] == cid), None)
            if source is not None:
                found.setdefault(run.task, []).append({"policy": run.policy, "seed": run.seed, "run_id": run.id,
                                                       "candidate": cid, "source": source})
        return found
    finally:
        store.close()


def geomean(values: list[float]) -> float | None:
    values = [v for v in values if v]
    return math.exp(statistics.fmean(math.log(v) for v in values)) if values else None


def summarise(rows: list[dict]) -> dict:
    """Per policy (and k0 alone): the targets' figures over the tasks."""
    out: dict[str, dict] = {}
    groups: dict[str, list[tuple[dict, dict]]] = {"k0": [(r, r["k0"]) for r in rows if r.get("k0")]}
    for r in rows:
        for b in r.get("best", []):
            groups.setdefault(b["policy"], []).append((r, b))
    for name, pairs in groups.items():
        large = [f["sol_median_large"] for _, f in pairs if f.get("sol_median_large") is not None]
        every = [f["sol_median"] for _, f in pairs if f.get("sol_median") is not None]
        compiled = [f["vs_compile"] for _, f in pairs if f.get("vs_compile") is not None]
        matmul = [f.get("vs_eager") for r, f in pairs if r["task"] == "examples:matmul"]
        out[name] = {
            "tasks": len(pairs),
            "sol_median_all": statistics.median(every) if every else None,
            "sol_median_large": statistics.median(large) if large else None,
            "at_least_compile_pct": 100 * sum(c >= 1.0 for c in compiled) / len(compiled) if compiled else None,
            "n_with_compile": len(compiled),
            "vs_eager_geomean": geomean([f.get("vs_eager") for _, f in pairs]),
            "vs_compile_geomean": geomean(compiled),
            "matmul_vs_eager": matmul[0] if matmul else None,
            "speedup_over_k0_geomean": None if name == "k0" else geomean([f.get("speedup") for _, f in pairs]),
        }
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--tasks", default="", help="comma-separated task refs (default: tritonbench-g-l12 and the "
                                                "built-in examples)")
    ap.add_argument("--db", default=None, help="a run database: also evaluate each run's best kernel")
    ap.add_argument("--bench", type=int, default=None, help="the bench in --db whose runs' best kernels to take")
    ap.add_argument("--policies", default="", help="comma-separated: only these policies' runs")
    ap.add_argument("--seed", type=int, default=0, help="the evaluations' input seed")
    ap.add_argument("--interpreter", action="store_true", help="the CPU interpreter (plumbing only: no baselines, "
                                                                "no speed of light)")
    ap.add_argument("--out", default="sol_baselines.json")
    args = ap.parse_args()
    if (args.db is None) != (args.bench is None):
        raise UserError("--db and --bench go together")
    refs = [t.strip() for t in args.tasks.split(",") if t.strip()]
    if not refs:
        refs = [f"tritonbench:{n}" for n in tritonbench.level12()] + [f"examples:{n}" for n in example_names()]
    tasks = [load_task(ref) for ref in refs]  # an unknown task: refused before any worker starts
    best = best_kernels(args.db, args.bench, [p for p in args.policies.split(",") if p]) if args.db else {}
    rows = []
    with Evaluator(mode="interpreter" if args.interpreter else None, warm=2, use_ncu=False) as ev:
        for task in tasks:
            t0 = time.perf_counter()
            row: dict = {"task": task.ref, "best": []}
            try:
                row["k0"] = figures(ev.evaluate(task, seed=args.seed, profile=False))
                for b in best.get(task.ref, []):
                    result = ev.evaluate(task, b["source"], seed=args.seed, profile=False)
                    row["best"].append({k: v for k, v in b.items() if k != "source"} | figures(result))
            except Exception as exc:  # noqa: BLE001 - a task that cannot run here is a row
                row["error"] = f"{type(exc).__name__}: {exc}"
            row["seconds"] = time.perf_counter() - t0
            rows.append(row)
            k0 = row.get("k0") or {}
            print(f"{task.ref:40s} k0 SOL {k0.get('sol_median')} (>=16 MB {k0.get('sol_median_large')}) "
                  f"vs eager {k0.get('vs_eager')} vs compile {k0.get('vs_compile')}; best of {len(row['best'])} "
                  f"runs {row.get('error', '')}", flush=True)
            Path(args.out).write_text(json.dumps({"rows": rows, "summary": summarise(rows)}, indent=1, default=str))
    print(json.dumps(summarise(rows), indent=1, default=str))


if __name__ == "__main__":
    run_script(main)
