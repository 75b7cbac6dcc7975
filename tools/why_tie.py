"""Why a bench's policies come out alike: room to win, arms, ψ and budget, from the bench's own runs.

Issue 51 asks, where the policies tie, whether the arms are too coarse, ψ's signal too weak or the budget too
small. Each is read off the finished runs of one bench:

    room     per task, the best speedup any run of any policy found. A task where the best of all is under
             `--room` (1.1x) cannot tell policies apart: every policy is at about 1.0 on it, and the geometric
             means over all tasks are pulled together by such tasks. The policies' geometric means are given
             over all tasks and over the tasks with room.
    arms     per task, the share of the variance of log(speedup over the parent) over all counted pulls that
             the strategy explains (η², between-strategy over total sum of squares). Near 0, the strategy
             says little about what a pull yields: the variants within one strategy differ more than the
             strategies do, and a policy that learns which strategy pays learns little.
    psi      over every iteration of the policies that record ψ, the spread of ψ across the strategies
             (largest minus smallest). Near 0, ψ ranks nothing.
    budget   per policy, the iteration at which each run first reached its final best, and the share of runs
             still improving in the last two iterations. A policy that stops improving early has budget to
             spare; one that improves to the end is short of it.

    python tools/why_tie.py runs.db --bench 3 [--room 1.1] [--json]
"""

from __future__ import annotations

import argparse
import json
import math
import sqlite3
import statistics
import sys
from collections import defaultdict
from pathlib import Path

from kernelband.errors import UserError, run_script
from kernelband.report.stats import ROOM
from kernelband.store import Store


def _geomean(values: list[float]) -> float | None:
    values = [v for v in values if v and v > 0]
    return math.exp(statistics.fmean(map(math.log, values))) if values else None


def _quantiles(values: list[float]) -> dict[str, float] | None:
    if not values:
        return None
    ordered = sorted(values)
    return {q: ordered[min(len(ordered) - 1, int(len(ordered) * f))]
            for q, f in (("p10", 0.1), ("median", 0.5), ("p90", 0.9))}


def eta_squared(groups: dict[str, list[float]]) -> float | None:
    """The share of the variance of all values that the groups' means explain; None with under two groups or
    five values, or no variance."""
    values = [v for vs in groups.values() for v in vs]
    if len([g for g in groups.values() if g]) < 2 or len(values) < 5:
        return None
    mean = statistics.fmean(values)
    total = sum((v - mean) ** 2 for v in values)
    between = sum(len(vs) * (statistics.fmean(vs) - mean) ** 2 for vs in groups.values() if vs)
    return between / total if total > 0 else None


def read(path: str, bench: int) -> list[dict]:
    """The bench's finished runs: task, policy, seed, best speedup, per iteration its best so far, its counted
    pulls (strategy, log speedup over the parent) and ψ where the policy records it."""
    if not Path(path).is_file():
        raise UserError(f"no database at {path}")
    store = Store(path, read_only=True)
    try:
        runs = [r for r in store.runs(bench) if r.status == "done"]
        out = []
        for run in runs:
            iterations = store.iterations(run.id)
            pulls = [(arm["strategy"], math.log(arm["speedup"])) for it in iterations for arm in it["arms"]
                     if arm.get("outcome") == "ok" and arm.get("speedup") and arm.get("counted", True)]
            out.append({"task": run.task, "policy": run.policy, "seed": run.seed,
                        "best": (run.summary or {}).get("best_speedup"),
                        "curve": [it["best_speedup"] or 0.0 for it in iterations], "pulls": pulls,
                        "psi": [it["stats"]["psi"] for it in iterations if it["stats"].get("psi")]})
    except sqlite3.DatabaseError as exc:
        raise UserError(f"{path} is not a KernelBand run database ({exc})") from None
    finally:
        store.close()
    if not out:
        raise UserError(f"bench {bench} in {path} has no finished run")
    return out


def first_at_best(curve: list[float]) -> int | None:
    """The iteration (from 1) at which the best so far first came within 0.1 % of its final value."""
    if not curve:
        return None
    final = curve[-1]
    return next(i + 1 for i, b in enumerate(curve) if b >= final * 0.999)


def analyse(runs: list[dict], room: float) -> dict:
    tasks: dict[str, dict] = defaultdict(lambda: {"best": 0.0, "pulls": defaultdict(list), "policies": {}})
    by_policy: dict[str, dict[str, list[float]]] = defaultdict(lambda: defaultdict(list))
    for run in runs:
        t = tasks[run["task"]]
        t["best"] = max(t["best"], run["best"] or 0.0, *run["curve"])
        for strategy, value in run["pulls"]:
            t["pulls"][strategy].append(value)
        if run["best"]:
            by_policy[run["policy"]][run["task"]].append(run["best"])
    policies = sorted(by_policy)
    rows = []
    for task, t in sorted(tasks.items()):
        eta = eta_squared(t["pulls"])
        rows.append({"task": task, "best": t["best"], "room": t["best"] >= room,
                     "eta2": eta, "pulls": sum(map(len, t["pulls"].values())),
                     "policies": {p: _geomean(by_policy[p].get(task, [])) for p in policies}})
    roomy = [r for r in rows if r["room"]]

    def geomeans(selected: list[dict]) -> dict[str, float | None]:
        return {p: _geomean([r["policies"][p] for r in selected if r["policies"][p]]) for p in policies}

    spreads = [max(psi.values()) - min(psi.values()) for run in runs for psi in run["psi"] if len(psi) > 1]
    budget = {}
    for p in policies:
        mine = [r for r in runs if r["policy"] == p and r["curve"]]
        firsts = [first_at_best(r["curve"]) for r in mine]
        late = [r for r in mine if len(r["curve"]) >= 3 and r["curve"][-1] > r["curve"][-3] * 1.001]
        budget[p] = {"runs": len(mine), "iterations": max((len(r["curve"]) for r in mine), default=0),
                     "first_at_best_median": statistics.median(firsts) if firsts else None,
                     "improving_in_last_two": len(late) / len(mine) if mine else None}
    etas = [r["eta2"] for r in rows if r["eta2"] is not None]
    return {"room": room, "tasks": rows, "with_room": len(roomy),
            "geomean_all": geomeans(rows), "geomean_with_room": geomeans(roomy),
            "eta2": _quantiles(etas), "psi_spread": _quantiles(spreads), "budget": budget}


def _fmt(value: float | None, digits: int = 2) -> str:
    return "-" if value is None else f"{value:.{digits}f}"


def text(result: dict) -> str:
    policies = list(result["geomean_all"])
    lines = [f"| task | best of all | room (>= {result['room']:g}x) | eta² | pulls | "
             + " | ".join(policies) + " |", "| --- | ---: | --- | ---: | ---: | " + " | ".join("---:" for _ in policies)
             + " |"]
    for r in result["tasks"]:
        lines.append(f"| {r['task']} | {r['best']:.2f} | {'yes' if r['room'] else 'no'} | {_fmt(r['eta2'])} | "
                     f"{r['pulls']} | " + " | ".join(_fmt(r["policies"][p]) for p in policies) + " |")
    lines.append(f"| geometric mean, {len(result['tasks'])} tasks | | | | | "
                 + " | ".join(_fmt(result["geomean_all"][p], 3) for p in policies) + " |")
    lines.append(f"| geometric mean, {result['with_room']} tasks with room | | | | | "
                 + " | ".join(_fmt(result["geomean_with_room"][p], 3) for p in policies) + " |")
    lines.append("")
    q = result["eta2"]
    lines.append("arms: the strategy explains " + ("-" if q is None else
                 f"a median {q['median']:.2f} of the variance of log(speedup over the parent) within a task "
                 f"(p10 {q['p10']:.2f}, p90 {q['p90']:.2f})"))
    q = result["psi_spread"]
    lines.append("psi: its spread across the strategies in an iteration is " + ("- (no policy records psi)"
                 if q is None else f"a median {q['median']:.3f} (p10 {q['p10']:.3f}, p90 {q['p90']:.3f})"))
    for p, b in result["budget"].items():
        lines.append(f"budget, {p}: {b['runs']} runs of {b['iterations']} iterations; the final best first "
                     f"reached at iteration {_fmt(b['first_at_best_median'], 1)} (median); "
                     f"{_fmt(100 * b['improving_in_last_two'] if b['improving_in_last_two'] is not None else None, 0)}"
                     " % still improving in the last two")
    return "\n".join(lines)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("database", help="a run database (.db)")
    ap.add_argument("--bench", type=int, required=True, help="the bench to read")
    ap.add_argument("--room", type=float, default=ROOM,
                    help="a task has room when the best of all runs reaches this (the report's threshold)")
    ap.add_argument("--json", action="store_true", help="print the result as JSON")
    args = ap.parse_args()
    if args.room <= 1:
        raise UserError("--room is a speedup above 1 (for example 1.1)")
    result = analyse(read(args.database, args.bench), args.room)
    print(json.dumps(result, indent=1) if args.json else text(result))
    return 0


if __name__ == "__main__":
    sys.exit(run_script(main))
