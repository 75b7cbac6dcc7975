"""Search quality on TritonBench-G level-1/2 with the built-in rewriter (GPU machine).

Parts:

  bench     every policy on every task with the same seeds, T iterations, through `kernelband bench`'s
            machinery (one evaluator per visible GPU, evaluations of the same source shared within the
            sweep); summarised per policy: geometric-mean speedup, Fast@1, best speedup, evaluations
            used, median fraction of speed of light.
  grid      what a user would do by hand: every launch-parameter variant the rewriter can make of the
            starting kernel in one step (block sizes, num_warps, num_stages; at most 12), each evaluated
            without ncu (an evaluation the bench made of the same source is reused), then the 3 fastest
            re-measured on fresh inputs and on the held-out shapes and judged by the report's "faster"
            rule, k0 timed against itself as the noise floor: a search's result and a hand grid's, alike.
            Each GPU takes one task at a time, its variants --runs-per-gpu at a time.
  overhead  the bandit's own time per iteration (select + update) at a pool of 300 candidates.

    python benchmarks/search_quality.py --parts bench,grid,overhead --db runs.db --out quality.json
"""

from __future__ import annotations

import argparse
import json
import math
import signal
import statistics
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import numpy as np

from kernelband import stacks
from kernelband.bench import Bench, BenchConfig, measured_elsewhere, suite_tasks
from kernelband.errors import UserError, run_script
from kernelband.evaluation.records import PHI_KEYS, RHO_KEYS, EvalResult, Features, Outcome, ShapeResult
from kernelband.policies.base import POLICIES, make_policy
from kernelband.report.metrics import faster_verdict
from kernelband.search.core import Candidate, source_hash
from kernelband.store import Store
from kernelband.tasks import load_task

FAST = 1.1


def geomean(values: list[float]) -> float | None:
    values = [v for v in values if v and v > 0]
    return math.exp(sum(math.log(v) for v in values) / len(values)) if values else None


def summarise(rows: list[dict]) -> dict:
    speedups = [r["best_speedup"] or 1.0 for r in rows]
    sol = [r["sol"] for r in rows if r.get("sol") is not None]
    return {"tasks": len(rows), "geomean_speedup": geomean(speedups),
            "fast1": sum(s > FAST for s in speedups) / len(speedups) if speedups else None,
            "best_speedup": max(speedups) if speedups else None,
            "evaluations": sum(r["evaluations"] for r in rows),
            "median_sol_fraction": statistics.median(sol) if sol else None,
            "held_out_geomean": geomean([r["held_out"] for r in rows if r.get("held_out")]),
            "confirmed_geomean": geomean([r["confirmed"] for r in rows if r.get("confirmed")])}


def part_bench(store: Store, evaluators, tasks: list[str], policies: list[str], seeds: list[int], iterations: int,
               report: dict, bench_id: int | None = None, deadline: float | None = None, runs_per_gpu: int = 2,
               strategies: str | None = None, plan: list[str] | None = None,
               tasks_now: list[str] | None = None) -> int:
    """Runs `policies` of a new bench planned for `plan` (default: `policies`), or of bench `bench_id`;
    `tasks_now`: only these of its tasks, in this order."""
    from kernelband.proposers.rewriter.proposer import RewriterProposer

    if bench_id is None:
        config = BenchConfig("tritonbench-g-l12", plan or policies, seeds, iterations, 1, "rewrite", "default",
                             list(tasks), strategies=BenchConfig.strategies_from(strategies))
    else:  # a resumed bench keeps its plan
        config = BenchConfig(**store.bench(bench_id)["config"])
    t0 = time.perf_counter()
    bench = Bench(store, config, evaluators, RewriterProposer, bench_id=bench_id, deadline=deadline,
                  on_event=lambda e: print(json.dumps(e), flush=True), runs_per_gpu=runs_per_gpu,
                  policies_now=policies, tasks_now=tasks_now)
    bench_id = bench.run()
    rows = []
    for run in store.runs(bench_id):
        s = run.summary or {}
        rows.append({"task": run.task, "policy": run.policy, "seed": run.seed, "status": run.status,
                     "best_speedup": s.get("best_speedup"), "held_out": s.get("held_out_speedup"),
                     "sol": s.get("best_sol_fraction"), "evaluations": s.get("evaluations", 0),
                     "best_outcome": s.get("best_outcome"), "confirmed": s.get("confirmed_speedup")})
    report["bench"] = {"bench_id": bench_id, "seconds": time.perf_counter() - t0, "rows": rows,
                       "errors": bench.errors,
                       "per_policy": {p: summarise([r for r in rows if r["policy"] == p and r["status"] == "done"])
                                      for p in policies}}
    return bench_id


def grid_rows(path: Path) -> list[dict]:
    """The grid's rows in a file: `{"kind": "grid", ...}` lines of a sweep's log (one as each task ends; a line
    cut off by the end of a session is skipped), or the `grid` part of a quality<N>.json."""
    try:
        text = path.read_text(errors="replace")
    except OSError as exc:
        raise UserError(f"{path}: cannot read it ({exc.strerror})") from None
    if path.suffix == ".json":
        try:
            return json.loads(text).get("grid", {}).get("rows", [])
        except (json.JSONDecodeError, AttributeError):
            raise UserError(f"{path}: not a quality<N>.json of search_quality.py") from None
    rows = []
    for line in text.splitlines():
        if line.startswith('{"kind": "grid"'):
            try:
                rows.append(json.loads(line))
            except json.JSONDecodeError:
                continue
    return rows


def part_grid(store: Store, evaluators, tasks: list[str], report: dict, bench_id: int | None,
              deadline: float | None = None, slots: int = 2, finalists: int = 3,
              done: list[dict] | None = None) -> None:
    """What a user would do by hand, judged as a search's result is: every one-step launch-parameter variant
    of k0 evaluated (an evaluation the bench already made of the same source is reused), then the
    `finalists` fastest checked and timed once more on fresh inputs and on the held-out shapes, and the
    report's "faster" rule applied, with k0 timed against itself as the noise floor. Each GPU takes the
    next task as soon as it finishes one (a task's variants share its GPU, `slots` at a time, one reference
    per GPU; tasks are not dealt out in advance, so a GPU with short tasks does not sit idle while another
    has a queue); no task starts after the deadline (time.monotonic()). With a bench, each finished task's
    row is stored with it (`Store.save_grid_row`: the report shows the grid beside the policies), and a task
    the bench has a row for already is not evaluated again: the grid resumes in the next session. `done`: rows
    of an earlier session's grid from its log (`grid_rows`), for a database that lost them."""
    stored = store.grid_rows(bench_id) if bench_id is not None else []
    earlier = {r["task"]: r for r in [*(done or ()), *stored] if not r.get("deferred") and not r.get("error")}
    if bench_id is not None:  # rows recovered from a log join the bench's, for its report
        for task in sorted(set(earlier) - {r["task"] for r in stored}):
            store.save_grid_row(bench_id, earlier[task])
    found: dict[int, dict] = {i: {**earlier[ref], "earlier": True} for i, ref in enumerate(tasks) if ref in earlier}
    queue = [(i, ref) for i, ref in enumerate(tasks) if ref not in earlier]
    if bench_id is not None and queue:
        _same_gpu(store, bench_id, evaluators, load_task(queue[0][1]))
    taken = threading.Lock()

    def lane(ev) -> None:
        while True:
            with taken:
                if not queue:
                    return
                i, ref = queue.pop(0)
            if deadline is not None and time.monotonic() > deadline:
                row = {"task": ref, "deferred": True}
            else:
                try:
                    row = grid_task(store, ev, load_task(ref), bench_id, slots, finalists)
                except Exception as exc:  # noqa: BLE001  one task's failure is its row; the other tasks go on
                    row = {"task": ref, "error": f"{type(exc).__name__}: {exc}"}
                else:
                    if bench_id is not None:
                        store.save_grid_row(bench_id, row)
            print(json.dumps({"kind": "grid", **row}), flush=True)
            found[i] = row

    t0 = time.perf_counter()
    with ThreadPoolExecutor(max_workers=len(evaluators)) as pool:
        list(pool.map(lane, evaluators))
    rows = [found[i] for i in sorted(found)]
    done = [r for r in rows if not r.get("deferred") and not r.get("error")]
    report["grid"] = {"seconds": time.perf_counter() - t0, "slots": slots, "finalists": finalists, "rows": rows,
                      "summary": summarise(done) if done else None,
                      "faster": sum(bool(r.get("faster")) for r in done),
                      "deferred": [r["task"] for r in rows if r.get("deferred")],
                      "errors": {r["task"]: r["error"] for r in rows if r.get("error")}}


def _same_gpu(store: Store, bench_id: int, evaluators, task) -> None:
    """A bench's grid is compared with its runs: on another GPU model it would compare GPUs as well as methods.
    Refused before any evaluation, as `kernelband bench --resume` refuses (nothing is stored)."""
    for ev in evaluators:
        gpu = ev.fingerprint(task)["gpu"]
        ran_on = measured_elsewhere(store, bench_id, gpu)
        if ran_on:
            raise UserError(f"bench {bench_id} was measured on {', '.join(ran_on)} and this GPU is {gpu}: "
                            "run its grid on the same GPU model")


def grid_task(store: Store, ev, task, bench_id: int | None, slots: int, finalists: int) -> dict:
    """One task's grid (part_grid). `ev` needs evaluate() and fingerprint() as an Evaluator has them."""
    variants = launch_grid(task.module_source)
    made = 0

    def search(source: str) -> EvalResult:
        nonlocal made
        found = store.find_evaluation(bench_id, task.key, source_hash(source), ev.fingerprint(task)["gpu"]) \
            if bench_id is not None else None
        if found is not None:
            return found
        made += 1
        return ev.evaluate(task, source, profile=False)  # a hand grid reads no hardware counters

    with ThreadPoolExecutor(max_workers=max(1, slots)) as pool:
        noise = pool.submit(ev.evaluate, task, task.module_source, profile=False)  # k0 against itself
        results = list(pool.map(search, variants))
        k0_self = noise.result()
        ranked = sorted((i for i, r in enumerate(results) if r.ok and r.speedup),
                        key=lambda i: (-results[i].speedup, i))[:finalists]
        checks = list(pool.map(lambda i: ev.evaluate(task, variants[i], which="all", profile=False), ranked))
    made += 1 + len(checks)
    outcomes: dict[str, int] = {}
    for r in results:
        outcomes[r.outcome.value] = outcomes.get(r.outcome.value, 0) + 1
    # the fastest on the re-check (the earlier variant on a tie), as a run's finalists are judged
    chosen = max(((i, c) for i, c in zip(ranked, checks) if c.ok and c.speedup),
                 key=lambda ic: (ic[1].speedup, -ic[0]), default=None)
    noise_floor = k0_self.speedup if k0_self.ok else None
    row = {"task": task.ref, "variants": len(variants), "evaluations_made": made, "evaluations": len(variants),
           "best_speedup": max([1.0] + [r.speedup for r in results if r.ok and r.speedup]),
           "noise_floor": noise_floor, "outcomes": outcomes,
           "finalists": [{"variant": i, "speedup": results[i].speedup, "outcome": c.outcome.value,
                          "confirmed": c.speedup if c.ok else None,
                          "held_out": c.held_out_speedup if c.ok else None} for i, c in zip(ranked, checks)]}
    if chosen is None or chosen[1].speedup <= 1.0:  # as a run: k0 is handed back when no variant is faster again
        return {**row, "handed_back": None, "confirmed": 1.0, "held_out": 1.0, "faster": False}
    i, check = chosen
    return {**row, "handed_back": i, "confirmed": check.speedup, "held_out": check.held_out_speedup,
            "faster": faster_verdict(i + 1, check.outcome.value, check.speedup, check.held_out_speedup,
                                     noise_floor)}


GRID_REWRITES = ("block_size", "num_warps", "num_stages")
GRID_MAX = 12


def launch_grid(source: str) -> list[str]:
    """What a user tries by hand: each block size, num_warps and num_stages value the rewriter offers for
    the starting kernel, one parameter at a time, at most GRID_MAX variants (in the rewriter's order)."""
    from kernelband.proposers.rewriter.proposer import options

    found = options(source, GRID_REWRITES)
    sources = []
    for variant in found.variants:
        new = variant.apply(found.module)
        if new != source and new not in sources:
            sources.append(new)
    return sources[:GRID_MAX]


def _fake_candidate(cid: int, rng: np.random.Generator) -> Candidate:
    speedup = float(np.exp(rng.normal(0, 0.3)))
    result = EvalResult(task="synthetic", outcome=Outcome.OK, speedup=speedup,
                        shapes=[ShapeResult(0, "s", False, True)],
                        features=Features(rho={k: float(rng.normal()) for k in RHO_KEYS},
                                          phi={k: float(rng.uniform(0, 100)) for k in PHI_KEYS}),
                        seconds={"compile": float(rng.uniform(0.1, 2))})
    return Candidate(cid, f"# kernel {cid}", parent=0 if cid else None, strategy="tiling" if cid else None,
                     result=result)


def part_overhead(report: dict, pool_size: int = 300, iterations: int = 20) -> None:
    from kernelband.search.strategies import load_strategies

    strategies = load_strategies(None)
    rng = np.random.default_rng(0)
    rows = {}
    for name in POLICIES:
        policy = make_policy(name, 0)
        pool = [_fake_candidate(i, rng) for i in range(pool_size)]
        times = []
        for _ in range(iterations):
            t0 = time.perf_counter()
            arms = policy.select(pool, strategies, 1, lambda c, s: True)
            for arm in arms:
                child = _fake_candidate(len(pool), rng)
                child.parent = arm.candidate
                policy.update(arm, pool[arm.candidate], child)
                pool.append(child)
            times.append(time.perf_counter() - t0)
        rows[name] = {"pool": len(pool), "median_ms": 1e3 * statistics.median(times),
                      "max_ms": 1e3 * max(times), "first_ms": 1e3 * times[0]}
        print(name, rows[name], flush=True)
    report["overhead"] = rows


def heartbeat(evaluators, every_s: float = 60.0) -> threading.Event:
    """Every `every_s` seconds, one line of what each evaluator's pool is doing (requests in progress, the GPU
    lock's holders and waiters): a sweep that stalls says where. Set the returned event to stop."""
    stop = threading.Event()
    t0 = time.monotonic()

    def beat() -> None:
        cpu, wall = time.process_time(), time.monotonic()
        while not stop.wait(every_s):
            now_cpu, now = time.process_time(), time.monotonic()
            # this process's own CPU (its threads drive every run and compare every output): a sweep over
            # many GPUs that keeps it near one core is held by the interpreter lock, not by the GPUs
            driver = {"cores": round((now_cpu - cpu) / max(now - wall, 1e-9), 2), "threads": threading.active_count()}
            cpu, wall = now_cpu, now
            print(json.dumps({"kind": "heartbeat", "elapsed_s": round(now - t0), "driver": driver,
                              "evaluators": [ev.pool.snapshot() for ev in evaluators]}), flush=True)

    threading.Thread(target=beat, name="heartbeat", daemon=True).start()
    return stop


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--parts", default="bench,grid,overhead")
    ap.add_argument("--policies", default=",".join(POLICIES), help="the policies to run now")
    ap.add_argument("--plan-policies", default=None,
                    help="a new bench's policies, if more than --policies (a sweep in phases)")
    ap.add_argument("--seeds", default="0")
    ap.add_argument("--iterations", type=int, default=10)
    ap.add_argument("--tasks", default="", help="comma-separated task names (default: all 29)")
    ap.add_argument("--tasks-now", default="",
                    help="comma-separated: run only these of the bench's tasks now, in this order (the plan "
                         "keeps --tasks)")
    ap.add_argument("--db", default="kernelband-runs/quality.db")
    ap.add_argument("--bench-id", type=int, default=None, help="resume this bench")
    ap.add_argument("--out", default="quality.json")
    ap.add_argument("--budget-s", type=float, default=None, help="start no new run after this many seconds")
    ap.add_argument("--grid-budget-s", type=float, default=None,
                    help="start no grid task after this many seconds from the grid's start")
    ap.add_argument("--grid-done", type=Path, action="append", default=[],
                    help="a sweep log or quality<N>.json of an earlier session's grid: its finished tasks are "
                         "not evaluated again (repeatable)")
    ap.add_argument("--runs-per-gpu", type=int, default=2, help="runs in flight per GPU (compiles overlap timing)")
    ap.add_argument("--strategies", default=None,
                    help="a strategies file for a new bench (e.g. adding coarsen to tiling)")
    ap.add_argument("--warm-profilers", type=int, default=None,
                    help="workers kept started under ncu per GPU (default runs-per-gpu + 3); each idle one's "
                         "ncu front end takes CPU")
    args = ap.parse_args()
    parts = set(args.parts.split(","))
    report: dict = json.loads(Path(args.out).read_text()) if Path(args.out).exists() else {}
    tasks = suite_tasks("tritonbench-g-l12")
    if args.tasks:
        tasks = [f"tritonbench:{t}" for t in args.tasks.split(",")]
    if "overhead" in parts:
        part_overhead(report)
    if parts & {"bench", "grid"}:
        import torch

        from kernelband.evaluation.evaluator import Evaluator

        store = Store(args.db)
        evaluators = [Evaluator(device_index=i, warm=args.runs_per_gpu + 1, warm_profilers=args.warm_profilers)
                      for i in range(max(1, torch.cuda.device_count()))]
        # `kill -USR1` prints every thread's stack to stderr (scripts/gpu/gpu_collect.sh does, each call)
        stacks.dump_on(signal.SIGUSR1)
        beating = heartbeat(evaluators)
        try:
            bench_id = args.bench_id
            if "bench" in parts:
                bench_id = part_bench(store, evaluators, tasks, args.policies.split(","),
                                      [int(s) for s in args.seeds.split(",")], args.iterations, report, bench_id,
                                      time.monotonic() + args.budget_s if args.budget_s else None,
                                      args.runs_per_gpu, args.strategies,
                                      args.plan_policies.split(",") if args.plan_policies else None,
                                      [t for t in args.tasks_now.split(",") if t] or None)
            if "grid" in parts:
                done = [row for path in args.grid_done for row in grid_rows(path)]
                part_grid(store, evaluators, tasks, report, bench_id,
                          time.monotonic() + args.grid_budget_s if args.grid_budget_s else None,
                          slots=args.runs_per_gpu, done=done)
        finally:
            beating.set()
            for ev in evaluators:
                ev.close()
    Path(args.out).write_text(json.dumps(report, indent=1, default=str))


if __name__ == "__main__":
    run_script(main)
