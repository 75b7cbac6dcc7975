"""The numbers of a report, computed from the run store: plain, JSON-serialisable data, no plotting.

`report_data(store, "bench:3")` (or `"run:12"`, or a bare run id) gathers everything a report shows:

* per policy and per iteration t = 1..T, for the current iteration and for the best so far, the
  geometric-mean speedup over tasks, Fast@1 (share of tasks above 1.1x) and the largest speedup;
* per policy: correctness (share of evaluated candidates that were correct; share of tasks with a correct
  generated kernel; share of tasks whose kernel improved), the geomean over correct tasks only (the
  authors' release protocol), held-out speedups (reported apart), the median speed-of-light fraction of
  the best kernels, tokens and evaluations per task;
* a per-task table (task, policy, seed -> best speedup, held-out, SOL fraction, evaluations, ...);
* for one run: its candidate pool projected to 2-D (PCA of z-normalised rho) coloured by cluster, its
  lineage tree, per-shape SOL fractions; and the best kernels with their diffs against the starting kernel.

Definitions (also in `DEFINITIONS`, which goes into the report):

* Speedups are over the starting kernel k0 (runtime-weighted over the search shapes, as stored). The best
  so far of a run includes k0, so a task that never beat k0 counts 1.0.
* Current iteration t: the best speedup among the kernels iteration t produced (`iterations.
  iteration_speedup`). The paper (Table 1) does not say how an iteration that produced no correct kernel
  counts. We leave such a task out of that iteration's geomean (a failed kernel has no speedup, and a
  geometric mean cannot hold 0) and report how many tasks the geomean covers (`n_valid`); Fast@1 keeps all
  tasks in its denominator, so a failed iteration counts as "not fast". The geomean with such tasks
  counted as 1.0 (falling back to the parent) is kept too, as `geomean_k0`.
* Best so far: the best kernel up to t, k0 included, so a task that never beat k0 counts 1.0 (what a
  user would deploy). The paper's Table 2 starts equal to Table 1 at the first iteration and below 1.0
  for GEAK, so there "best" seems to exclude k0; that reading is kept too, as `best_generated` (the best
  generated kernel so far; tasks without one are left out of its geomean, as for the current iteration).
* A run that stopped before T (budget spent, nothing left to try) keeps its best so far for the remaining
  iterations and has no current kernel there.
* Seeds: every aggregate is computed per seed over the tasks, then averaged (arithmetic mean) over the
  seeds; the per-seed values are kept under `per_seed`.
"""

from __future__ import annotations

import difflib
import math
import re
import statistics
import time
from collections import Counter
from dataclasses import dataclass, field

from kernelband.errors import UserError
from kernelband.evaluation.records import RHO_KEYS
from kernelband.report import llm, stats
from kernelband.report import run as single
from kernelband.report.definitions import DEFINITIONS, FAST, MARGIN
from kernelband.store import RunRow, Store


def faster_verdict(best_candidate: int | None, best_outcome: str | None, confirmed: float | None,
                   held_out: float | None, k0_self: float | None) -> bool | None:
    """Is the kernel a run handed back faster on evidence (DEFINITIONS['faster_task_pct'])? A generated
    kernel, `ok`, re-measured above 1 + max(MARGIN, 2 |k0_self - 1|) and above 1.0 held out where there
    are held-out shapes; None when it was not re-measured (no verdict)."""
    if best_candidate in (None, 0) or best_outcome != "ok":
        return False
    if confirmed is None:
        return None
    margin = max(MARGIN, 2 * abs(k0_self - 1.0)) if k0_self else MARGIN
    return confirmed > 1.0 + margin and (held_out is None or held_out > 1.0)


# -- small helpers ---------------------------------------------------------------------------------
def geomean(values) -> float | None:
    vals = [v for v in values if v is not None]
    if not vals or any(v <= 0 for v in vals):
        return None
    return math.exp(sum(math.log(v) for v in vals) / len(vals))


def pct(count: float, total: float) -> float | None:
    return None if not total else 100.0 * count / total


def mean(values) -> float | None:
    vals = [v for v in values if v is not None]
    return sum(vals) / len(vals) if vals else None


def median(values) -> float | None:
    vals = [v for v in values if v is not None]
    return statistics.median(vals) if vals else None


def parse_target(text) -> tuple[str, int]:
    """`bench:N`, `run:N`, or a bare number (a run id, as `kernelband runs` and `optimize` print them)."""
    if isinstance(text, int):
        return "run", text
    match = re.fullmatch(r"\s*(?:(bench|run)s?\s*[:#]?\s*)?(\d+)\s*", str(text), flags=re.IGNORECASE)
    if not match:
        raise UserError(f"{text!r}: name a run or a bench as run:N, bench:N or N (a run id)")
    return (match.group(1) or "run").lower(), int(match.group(2))


# -- one run ---------------------------------------------------------------------------------------
@dataclass
class RunFacts:
    """What a report needs from one run, read from its rows."""

    row: RunRow
    usable: bool  # k0 was evaluated correctly: the run has a baseline
    current: dict[int, float | None]  # iteration -> best speedup among that iteration's kernels
    best: dict[int, float]  # iteration -> best so far (k0 included)
    tokens_cum: dict[int, int]
    last_iteration: int
    planned: int  # the iterations the run was configured for
    evaluations: int
    evals_ok: int
    best_generated: float | None  # best correct kernel other than k0
    best_speedup: float | None
    best_candidate: int | None
    best_outcome: str | None
    held_out: float | None
    sol_fraction: float | None
    tokens: int
    confirmed: float | None = None  # the best kernel re-measured on the search shapes after the search
    top_failed: bool = False  # the search's fastest kernel failed its final check (held-out or fresh inputs)
    reason: str = ""  # why the run is left out, if it is
    search: dict[int, dict] = field(default_factory=dict)  # candidate -> search evaluation row
    # the best kernel against torch eager and torch.compile, and its SOL median on shapes of >= 16 MB
    vs_eager: float | None = None
    vs_compile: float | None = None
    sol_large: float | None = None
    # the same kernel per call (the wall time of back-to-back calls), and the measure the run made faster
    best_call: float | None = None
    confirmed_call: float | None = None
    objective: str = "device"

    @property
    def correct(self) -> bool:
        return self.best_generated is not None

    @property
    def improved(self) -> bool:
        return (self.best_candidate not in (None, 0) and (self.best_speedup or 0) > 1.0
                and self.best_outcome == "ok")

    @property
    def faster(self) -> bool | None:
        """Faster on evidence (see DEFINITIONS['faster_task_pct']), on the run's objective; None: not re-measured,
        no verdict."""
        summary = self.row.summary or {}
        if self.objective == "call":
            return faster_verdict(self.best_candidate, self.best_outcome, self.confirmed_call,
                                  summary.get("held_out_call_speedup"), summary.get("k0_self_call_speedup"))
        return faster_verdict(self.best_candidate, self.best_outcome, self.confirmed, self.held_out,
                              summary.get("k0_self_speedup"))

    def current_at(self, t: int) -> float | None:
        return self.current.get(t)

    def best_generated_at(self, t: int) -> float | None:
        return max((v for i, v in self.current.items() if i <= t and v is not None), default=None)

    def best_at(self, t: int) -> float:
        known = [i for i in self.best if i <= t]
        return self.best[max(known)] if known else 1.0

    def tokens_at(self, t: int) -> int:
        known = [i for i in self.tokens_cum if i <= t]
        return self.tokens_cum[max(known)] if known else 0


def run_facts(store: Store, row: RunRow) -> RunFacts:
    its = store.iterations(row.id)
    evals = store.evaluations(row.id)
    search = {e["candidate"]: e for e in evals if e["which"] == "search"}
    k0 = search.get(0)
    usable = k0 is not None and k0["outcome"] == "ok"
    summary = row.summary or {}
    generated = [e for cid, e in search.items() if cid != 0]
    ok = [e for e in generated if e["outcome"] == "ok" and e["speedup"]]
    best_generated = max((e["speedup"] for e in ok), default=None)

    best_candidate, best_speedup = summary.get("best_candidate"), summary.get("best_speedup")
    if best_speedup is None and usable:  # an unfinished run: what it has so far
        best_candidate, best_speedup = 0, 1.0
        for e in ok:
            if e["speedup"] > best_speedup:
                best_candidate, best_speedup = e["candidate"], e["speedup"]
    best_outcome = summary.get("best_outcome")
    if best_outcome is None and best_candidate is not None:
        best_outcome = "ok"  # no held-out check yet: it is correct on the search shapes
    sol = summary.get("best_sol_fraction")
    if sol is None and best_candidate in search:
        shapes = search[best_candidate]["result"].get("shapes", [])
        sol = median(s.get("sol_fraction") for s in shapes if not s.get("held_out"))
    planned = max(int(row.config.get("iterations") or 0), summary.get("iterations") or 0)
    finalists = summary.get("finalists") or []  # fastest first; runs from before finalists have none
    top_failed = finalists[0]["outcome"] != "ok" if finalists else best_outcome not in (None, "ok")
    reason = "" if usable else "the starting kernel has no correct evaluation"
    return RunFacts(
        row=row, usable=usable,
        current={it["iteration"]: it["iteration_speedup"] for it in its},
        best={it["iteration"]: it["best_speedup"] for it in its if it["best_speedup"] is not None},
        tokens_cum={it["iteration"]: it["tokens"] for it in its},
        last_iteration=max((it["iteration"] for it in its), default=0), planned=planned,
        evaluations=summary.get("evaluations", len(generated)), evals_ok=len(ok),
        best_generated=best_generated, best_speedup=best_speedup, best_candidate=best_candidate,
        best_outcome=best_outcome, held_out=summary.get("held_out_speedup"), sol_fraction=sol,
        tokens=summary.get("tokens", its[-1]["tokens"] if its else 0), reason=reason, search=search,
        confirmed=summary.get("confirmed_speedup"), top_failed=top_failed, vs_eager=summary.get("best_vs_eager"),
        vs_compile=summary.get("best_vs_compile"), sol_large=summary.get("best_sol_large"),
        best_call=summary.get("best_call_speedup"), confirmed_call=summary.get("confirmed_call_speedup"),
        objective=summary.get("objective", "device"))


# -- aggregation -----------------------------------------------------------------------------------
def _point(values: list[float | None], n_tasks: int) -> dict:
    valid = [v for v in values if v is not None]
    return {"geomean": geomean(valid), "geomean_k0": geomean([1.0 if v is None else v for v in values]),
            "fast1": pct(sum(v > FAST for v in valid), n_tasks), "max": max(valid, default=None),
            "n_valid": len(valid), "n_tasks": n_tasks}


def _seed_iterations(runs: list[RunFacts], horizon: int) -> list[dict]:
    rows = []
    for t in range(1, horizon + 1):
        n = len(runs)
        spent = [r.tokens_at(t) - r.tokens_at(t - 1) for r in runs]
        rows.append({"t": t, "current": _point([r.current_at(t) for r in runs], n),
                     "best": _point([r.best_at(t) for r in runs], n),
                     "best_generated": _point([r.best_generated_at(t) for r in runs], n),
                     "tokens": mean(spent), "tokens_cum": mean(r.tokens_at(t) for r in runs)})
    return rows


def _seed_summary(runs: list[RunFacts]) -> dict:
    n = len(runs)
    evals = sum(r.evaluations for r in runs)
    correct = [r for r in runs if r.correct]
    held = [r.held_out for r in runs if r.held_out is not None]
    best = [r.best_speedup for r in runs]
    return {
        "n_tasks": n,
        "geomean_best": geomean(best),
        "fast1_best": pct(sum(b > FAST for b in best), n),
        "best_speedup": max(best, default=None),
        "correct_eval_pct": pct(sum(r.evals_ok for r in runs), evals),
        "evals_ok": sum(r.evals_ok for r in runs), "evals": evals,
        "correct_task_pct": pct(len(correct), n), "n_correct_tasks": len(correct),
        "improved_task_pct": pct(sum(r.improved for r in runs), n), "n_improved_tasks": sum(r.improved for r in runs),
        "faster_task_pct": pct(sum(r.faster is True for r in runs), n),
        "n_faster_tasks": sum(r.faster is True for r in runs), "n_faster_unknown": sum(r.faster is None for r in runs),
        "geomean_correct": geomean(r.best_generated for r in correct),
        "held_out_geomean": geomean(held), "held_out_fast1": pct(sum(h > FAST for h in held), len(held)),
        "n_held_out": len(held),
        "confirmed_geomean": geomean(r.confirmed for r in runs if r.confirmed is not None),
        "n_confirmed": sum(r.confirmed is not None for r in runs),
        "held_out_failed": sum(r.top_failed for r in runs),
        "sol_median": median(r.sol_fraction for r in runs),
        "sol_median_large": median(r.sol_large for r in runs),
        "vs_eager_geomean": geomean(r.vs_eager for r in runs if r.vs_eager is not None),
        "n_vs_eager": sum(r.vs_eager is not None for r in runs),
        "vs_compile_geomean": geomean(r.vs_compile for r in runs if r.vs_compile is not None),
        "n_vs_compile": sum(r.vs_compile is not None for r in runs),
        "tokens_per_task": mean(r.tokens for r in runs),
        "evaluations_per_task": mean(r.evaluations for r in runs),
    }


def _average(dicts: list[dict]) -> dict:
    """The mean over seeds of every number; nested dicts are averaged key by key."""
    out = {}
    for key in dicts[0]:
        vals = [d.get(key) for d in dicts]
        if isinstance(vals[0], dict):
            out[key] = _average(vals)
        elif all(isinstance(v, (int, float)) or v is None for v in vals):
            out[key] = mean(vals)
        else:
            out[key] = vals[0]
    return out


def _by_policy_seed(facts: list[RunFacts]) -> dict[str, dict[int, list[RunFacts]]]:
    """policy -> seed -> one run per task (the newest, if a task was run twice)."""
    groups: dict[str, dict[int, dict[str, RunFacts]]] = {}
    for f in sorted(facts, key=lambda f: f.row.id):
        groups.setdefault(f.row.policy, {}).setdefault(f.row.seed, {})[f.row.task] = f
    return {p: {s: list(tasks.values()) for s, tasks in sorted(seeds.items())} for p, seeds in sorted(groups.items())}


# -- one run's pool, lineage and shapes --------------------------------------------------------------
def pool_projection(store: Store, facts: RunFacts) -> dict:
    """The run's correct candidates, rho z-normalised over the pool and projected to 2-D by PCA, coloured by
    the clusters of the run's last iteration."""
    from sklearn.decomposition import PCA
    from sklearn.preprocessing import StandardScaler

    its = store.iterations(facts.row.id)
    clusters = {str(k): v for k, v in ((its[-1]["stats"] or {}).get("clusters") or {}).items()} if its else {}
    points = []
    for cid, e in sorted(facts.search.items()):
        if e["outcome"] != "ok":
            continue
        rho = (e["result"].get("features") or {}).get("rho") or {}
        points.append({"candidate": cid, "rho": rho, "cluster": clusters.get(str(cid)),
                       "speedup": 1.0 if cid == 0 else e["speedup"]})
    keys = [k for k in RHO_KEYS if any(p["rho"].get(k) is not None for p in points)]
    keys += sorted({k for p in points for k, v in p["rho"].items() if v is not None} - set(keys))
    base = {"run_id": facts.row.id, "task": facts.row.task, "policy": facts.row.policy, "features": keys,
            "points": [], "explained_variance": [], "note": ""}
    if len(points) < 3 or not keys:
        base["note"] = f"{len(points)} correct candidates with {len(keys)} rho features: too few to project"
        return base
    matrix = []
    for k in keys:
        col = [p["rho"].get(k) for p in points]
        fill = mean(col)
        matrix.append([fill if v is None else float(v) for v in col])
    x = StandardScaler().fit_transform([list(row) for row in zip(*matrix)])
    n_comp = min(2, len(keys), len(points))
    pca = PCA(n_components=n_comp, random_state=0)
    xy = pca.fit_transform(x)
    for p, coords in zip(points, xy):
        base["points"].append({"candidate": p["candidate"], "x": float(coords[0]),
                               "y": float(coords[1]) if n_comp > 1 else 0.0,
                               "cluster": p["cluster"], "speedup": p["speedup"]})
    base["explained_variance"] = [float(v) for v in pca.explained_variance_ratio_]
    if not clusters:
        base["note"] = "the policy reported no clusters"
    return base


def lineage(store: Store, facts: RunFacts) -> dict:
    """Every candidate of the run with its parent, strategy, outcome and speedup; the best path marked."""
    cands = store.candidates(facts.row.id)
    parents = {c["id"]: c["parent"] for c in cands}
    path, node = set(), facts.best_candidate
    while node is not None and node in parents:
        path.add(node)
        node = parents[node]
    nodes = []
    for c in cands:
        e = facts.search.get(c["id"])
        nodes.append({"id": c["id"], "parent": c["parent"], "strategy": c["strategy"], "iteration": c["iteration"],
                      "outcome": e["outcome"] if e else "not evaluated",
                      "speedup": 1.0 if c["id"] == 0 else (e["speedup"] if e and e["outcome"] == "ok" else None),
                      "detail": (e["result"].get("detail") or "")[:200] if e else "",
                      "best": c["id"] == facts.best_candidate, "on_best_path": c["id"] in path})
    return {"run_id": facts.row.id, "task": facts.row.task, "policy": facts.row.policy, "nodes": nodes}


def shape_sol(facts: RunFacts) -> list[dict]:
    """Per search shape: the speed-of-light fraction of k0 and of the best kernel."""
    k0 = {s["index"]: s for s in facts.search.get(0, {}).get("result", {}).get("shapes", [])}
    best = facts.search.get(facts.best_candidate) if facts.best_candidate is not None else None
    best_shapes = {s["index"]: s for s in (best or {}).get("result", {}).get("shapes", [])}
    rows = []
    for index, s in sorted(k0.items()):
        if s.get("held_out"):
            continue
        b = best_shapes.get(index, s)
        rows.append({"index": index, "label": s.get("label", str(index)), "k0": s.get("sol_fraction"),
                     "best": b.get("sol_fraction")})
    return rows if any(r["k0"] is not None or r["best"] is not None for r in rows) else []


def best_kernel(store: Store, facts: RunFacts) -> dict:
    cands = {c["id"]: c for c in store.candidates(facts.row.id)}
    entry = {"task": facts.row.task, "policy": facts.row.policy, "seed": facts.row.seed, "run_id": facts.row.id,
             "candidate": facts.best_candidate, "speedup": facts.best_speedup, "held_out": facts.held_out,
             "strategy": None, "diff": ""}
    best = cands.get(facts.best_candidate)
    if best is None or facts.best_candidate == 0 or 0 not in cands:
        entry["diff"] = "" if facts.best_candidate == 0 else "(the best kernel's source is not stored)"
        return entry
    entry["strategy"] = best["strategy"]
    entry["diff"] = "".join(difflib.unified_diff(
        cands[0]["source"].splitlines(keepends=True), best["source"].splitlines(keepends=True),
        fromfile=f"{facts.row.task} k0", tofile=f"{facts.row.task} candidate {best['id']}"))
    return entry


def _representative(store: Store, facts: list[RunFacts]) -> RunFacts | None:
    """For a bench: the run whose pool is the largest among those whose policy reported clusters."""
    def key(f: RunFacts):
        its = store.iterations(f.row.id)
        has_clusters = bool(its and (its[-1]["stats"] or {}).get("clusters"))
        pool = sum(e["outcome"] == "ok" for e in f.search.values())
        return (has_clusters, pool, -f.row.id)

    usable = [f for f in facts if f.usable]
    return max(usable, key=key) if usable else None


# -- the whole report --------------------------------------------------------------------------------
def report_data(store: Store, bench_or_run) -> dict:
    kind, ident = parse_target(bench_or_run)
    bench = None
    if kind == "bench":
        bench = store.bench(ident)
        rows = store.runs(ident)
        if not rows:
            raise UserError(f"bench {ident} in {store.path} has no runs yet")
    else:
        rows = [store.run(ident)]
    facts = [run_facts(store, r) for r in rows]
    good = [f for f in facts if f.usable]
    groups = _by_policy_seed(good)

    iterations, summary = {}, {}
    for policy, seeds in groups.items():
        horizon = max(max(f.planned, f.last_iteration) for runs in seeds.values() for f in runs)
        per_seed_its = {s: _seed_iterations(runs, horizon) for s, runs in seeds.items()}
        per_seed_sum = {s: _seed_summary(runs) for s, runs in seeds.items()}
        iterations[policy] = [_average([per_seed_its[s][i] for s in seeds]) | {"t": i + 1} for i in range(horizon)]
        summary[policy] = _average(list(per_seed_sum.values())) | {
            "seeds": list(seeds), "n_seeds": len(seeds),
            "tasks": sorted({f.row.task for runs in seeds.values() for f in runs}),
            "per_seed": {str(s): v for s, v in per_seed_sum.items()}}

    common = _common(groups)
    tasks = [_task_row(f) for f in sorted(facts, key=lambda f: (f.row.task, f.row.policy, f.row.seed, f.row.id))]
    task_means = []
    for policy, seeds in groups.items():
        by_task: dict[str, list[RunFacts]] = {}
        for runs in seeds.values():
            for f in runs:
                by_task.setdefault(f.row.task, []).append(f)
        for task, fs in sorted(by_task.items()):
            best = [f.best_speedup for f in fs]
            task_means.append({"task": task, "policy": policy, "n_seeds": len(fs), "best_speedup": mean(best),
                               "min": min(best), "max": max(best), "held_out": mean(f.held_out for f in fs),
                               "sol_fraction": mean(f.sol_fraction for f in fs),
                               "evaluations": mean(f.evaluations for f in fs)})

    focus = good[0] if kind == "run" and good else (_representative(store, good) if kind == "bench" else None)
    best_per_task: dict[str, RunFacts] = {}
    for f in good:
        cur = best_per_task.get(f.row.task)
        if cur is None or (f.best_speedup or 0) > (cur.best_speedup or 0):
            best_per_task[f.row.task] = f

    grid = grid_data(store.grid_rows(ident), tasks) if kind == "bench" else None
    return _clean({
        "kind": kind, "id": ident, "db": str(store.path), "grid": grid,
        "generated": time.strftime("%Y-%m-%d %H:%M:%S"),
        "bench": ({"suite": bench["suite"], "status": bench["status"], "config": bench["config"]}
                  if bench else None),
        "run": facts[0].row.to_dict() if kind == "run" else None,
        "devices": sorted({f.row.device for f in facts if f.row.device}),
        "fast_threshold": FAST, "definitions": DEFINITIONS,
        "policies": list(groups), "iterations": iterations, "summary": summary, "common": common,
        "tasks": tasks, "task_means": task_means,
        "excluded": [{"run_id": f.row.id, "task": f.row.task, "policy": f.row.policy, "seed": f.row.seed,
                      "reason": f.reason} for f in facts if not f.usable],
        "warnings": ([single.INTERPRETER_WARNING] if any(single.interpreter_run(f.row) for f in facts) else [])
                    + _warnings(bench, summary, facts, common),
        "trajectory": single.trajectory(store, ident) if kind == "run" else [],
        "shapes": single.shape_table(store, ident, facts[0].best_candidate,
                                     ((facts[0].row.summary or {}).get("handback") or {}).get("evaluation"))
        if kind == "run" and good else [],
        "focus_run": focus.row.id if focus else None,
        "pool": pool_projection(store, focus) if focus else None,
        "lineage": lineage(store, focus) if focus else None,
        "shape_sol": shape_sol(focus) if focus else [],
        "best_kernels": [best_kernel(store, f) for _, f in sorted(best_per_task.items())],
        "llm_calls": llm.run_calls(store, ident) if kind == "run" else [],
        "llm_outcomes": llm.run_outcomes(store, rows) if kind == "bench" else [],
        "stats": stats.compute(stats.samples(good), FAST) if kind == "bench" else None,
    })


def grid_data(rows: list[dict], task_rows: list[dict]) -> dict | None:
    """The exhaustive launch-parameter grid beside a bench (benchmarks/search_quality.py: every one-step block
    size, num_warps and num_stages variant of k0, its 3 fastest re-measured and judged by the same "faster"
    rule as a run's result): its summary, and each policy's over the same tasks, from the runs that finished
    (`task_rows`: the report's per-run rows; seeds averaged per task). A policy that has not finished every
    grid task is left out of the comparison. None without grid rows."""
    done = sorted((r for r in rows if not r.get("deferred") and not r.get("error")), key=lambda r: r["task"])
    if not done:
        return None
    tasks = [r["task"] for r in done]

    def summary(best, held_out, confirmed, faster, evaluations) -> dict:
        return {"tasks": len(best), "geomean_best": geomean(best), "fast1": pct(sum(b > FAST for b in best), len(best)),
                "best_speedup": max(best), "held_out_geomean": geomean(held_out),
                "confirmed_geomean": geomean(confirmed), "faster_pct": pct(sum(faster), len(faster)),
                "evaluations_per_task": mean(evaluations)}

    grid = summary([r.get("best_speedup") or 1.0 for r in done], [r.get("held_out") for r in done],
                   [r.get("confirmed") for r in done], [bool(r.get("faster")) for r in done],
                   [r.get("evaluations_made") for r in done])
    policies = {}
    for policy in sorted({r["policy"] for r in task_rows}):
        runs = {t: [r for r in task_rows if r["policy"] == policy and r["task"] == t and r["status"] == "done"]
                for t in tasks}
        if not all(runs.values()):
            continue
        per_task = [(mean(r["best_speedup"] or 1.0 for r in rs), mean(r["held_out"] for r in rs),
                     mean(r["confirmed"] for r in rs), mean(bool(r["faster"]) for r in rs),
                     mean(r["evaluations"] for r in rs)) for rs in runs.values()]
        policies[policy] = summary(*map(list, zip(*per_task, strict=True)))
    return {"tasks": tasks, "rows": done, "summary": grid, "policies": policies}


def n_tasks(n: int) -> str:
    """"1 task", "8 tasks"."""
    return f"{n} task" if n == 1 else f"{n} tasks"


def _common(groups: dict[str, dict[int, list[RunFacts]]]) -> dict | None:
    """When the policies cover different tasks (a bench still running): the tasks that every policy has
    finished under every seed, and each policy's summary over those runs alone, the like-for-like
    comparison. None when the policies cover the same tasks, or share no finished one."""
    finished = [{f.row.task for f in runs if f.row.status == "done"} for seeds in groups.values()
                for runs in seeds.values()]
    covered = {frozenset(f.row.task for f in runs) for seeds in groups.values() for runs in seeds.values()}
    tasks = set.intersection(*finished) if finished else set()
    if len(groups) < 2 or len(covered) == 1 or not tasks:
        return None
    summary = {}
    for policy, seeds in groups.items():
        per_seed = [_seed_summary([f for f in runs if f.row.task in tasks and f.row.status == "done"])
                    for runs in seeds.values()]
        summary[policy] = _average(per_seed) | {"seeds": list(seeds), "n_seeds": len(seeds), "tasks": sorted(tasks)}
    return {"tasks": sorted(tasks), "summary": summary}


def _warnings(bench: dict | None, summary: dict, facts: list[RunFacts], common: dict | None = None) -> list[str]:
    """What a reader must know before comparing the figures: a quarantined bench, an unfinished sweep,
    policies on different tasks, runs measured on different GPU models."""
    out = []
    if bench is not None:
        cfg = bench["config"]
        if bench["status"] == "quarantined":
            window = cfg.get("window") or {}
            out.append("quarantined: measured while the GPU was not the bench's alone"
                       + (f" ({window['reason']})" if window.get("reason") else "")
                       + "; its figures are kept for inspection, not as results")
        planned = (len(cfg.get("policies") or []) * len(cfg.get("seeds") or [])
                   * len(cfg.get("tasks") or []))
        done = sum(f.row.status == "done" for f in facts)
        if bench["status"] != "done" or (planned and done < planned):
            out.append(f"unfinished sweep: {done} of {planned or '?'} planned runs are done")
    covered = {p: len(v["tasks"]) for p, v in summary.items()}
    if len({tuple(v["tasks"]) for v in summary.values()}) > 1:
        counts = ", ".join(f"{p} {n}" for p, n in covered.items())
        out.append(f"the policies cover different tasks ({counts}): their figures average over different "
                   "tasks and do not compare the policies"
                   + (f"; the summary on the {n_tasks(len(common['tasks']))} that every policy finished does"
                      if common else ""))
    devices = Counter(f.row.device for f in facts if f.row.device)
    if len(devices) > 1:
        counts = ", ".join(f"{d} {n}" for d, n in devices.most_common())
        out.append(f"runs measured on different GPU models ({counts} runs): their speedups differ by GPU as "
                   "well as by policy")
    return out


def _clean(value):
    """Strict JSON: NaN and infinities become None, tuples lists, keys strings."""
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if isinstance(value, dict):
        return {str(k): _clean(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_clean(v) for v in value]
    return value


def _task_row(f: RunFacts) -> dict:
    return {"task": f.row.task, "policy": f.row.policy, "seed": f.row.seed, "run_id": f.row.id,
            "status": f.row.status if f.usable else f"{f.row.status} (left out: {f.reason})",
            "best_speedup": f.best_speedup, "best_candidate": f.best_candidate, "best_outcome": f.best_outcome,
            "held_out": f.held_out, "confirmed": f.confirmed, "sol_fraction": f.sol_fraction,
            "sol_large": f.sol_large, "vs_eager": f.vs_eager, "vs_compile": f.vs_compile, "evaluations": f.evaluations,
            "evals_ok": f.evals_ok, "best_generated": f.best_generated, "tokens": f.tokens,
            "k0_self_speedup": (f.row.summary or {}).get("k0_self_speedup"), "faster": f.faster,
            "iterations": f.last_iteration, "handed_back_as": _handed_back_as((f.row.summary or {}).get("handback")),
            "best_call_speedup": f.best_call, "confirmed_call": f.confirmed_call, "objective": f.objective}


def _handed_back_as(handback: dict | None) -> str:
    """"pinned", "autotuned (<why not pinned>)", "as is", each with what else was done to it (the starting kernel
    called on some shapes, launch values cached); "" for runs from before the pinning."""
    if not handback:
        return ""
    form = handback.get("form", "")
    said = f"autotuned ({handback.get('reason')})" if form == "autotuned" else form.replace("_", " ")
    if handback.get("dispatched"):
        said += f", the starting kernel on {len(handback['dispatched'])} shapes"
    return said + (", launch values cached" if handback.get("cached") else "")
