"""Statistics that say whether one policy beats another, or whether the difference is seed noise.

The unit is a run: one (task, seed) of a policy. Per policy:
  - the geometric mean of the runs' best speedups, with a 95 % bootstrap interval: the (task, seed) runs are
    resampled with replacement (scipy.stats.bootstrap, percentile method, BOOTSTRAP resamples, a fixed seed
    so that a report is reproducible) and the mean of log speedup is taken on each resample;
  - Fast@1 (the share of runs whose best beats the Fast@1 threshold) with its interval, the same way;
  - anytime performance: the area under the best-so-far curve, in log space as the geometric means are (the
    mean of log best-so-far over evaluations 1..H, H the most evaluations any run of the report made, a run
    that stopped earlier keeping its last best; averaged over the runs and given back as a speedup, so that
    one task's 37x does not outweigh the rest), and the evaluations a run needed to reach 95 % of the best kernel any run found for its task.
Between two policies, on the (task, seed) runs both have: the geometric mean of the ratio of best speedups,
wins each way, and the Wilcoxon signed-rank test's two-sided p-value on the log ratios (scipy.stats.wilcoxon).
The geometric means and the pairs again over the tasks with room: those where the best of all runs of all
policies reaches ROOM. On a task where nothing reaches it every policy ends at about 1.0, and such tasks pull
the means over all tasks together (docs/lab/why_policies_tie.md); the subset is chosen alike for every policy.

Inputs are plain `Sample`s, so that this module reads no store and the tests can give known numbers.
"""

from __future__ import annotations

import itertools
import math
import statistics
from dataclasses import dataclass

import numpy as np
from scipy import stats as sps

BOOTSTRAP = 2000  # resamples: the interval's ends move by well under 1 % between seeds at this count
SEED = 0
CONFIDENCE = 0.95
REACH = 0.95  # "evaluations to 95 %": a run's best so far reaches this share of the task's best speedup
ROOM = 1.1  # a task has room when the best of all its runs reaches this speedup


@dataclass
class Sample:
    """One run as the statistics see it."""

    task: str
    policy: str
    seed: int
    best: float  # its best speedup over the starting kernel (k0 counts 1.0)
    curve: list[float]  # best speedup so far after each evaluation (k0 = 1.0 before the first)


def samples(facts) -> list[Sample]:
    """Samples of the report's usable runs (metrics.RunFacts: read through their attributes)."""
    out = []
    for f in facts:
        if f.best_speedup is None:
            continue
        best, curve = 1.0, []
        for cid in sorted(c for c in f.search if c != 0):
            e = f.search[cid]
            if e["outcome"] == "ok" and e["speedup"]:
                best = max(best, float(e["speedup"]))
            curve.append(best)
        out.append(Sample(f.row.task, f.row.policy, f.row.seed, float(f.best_speedup), curve))
    return out


def interval(values: list[float], statistic=np.mean) -> tuple[float | None, float | None]:
    """The 95 % percentile bootstrap interval of `statistic` over `values` (None, None below 2 values; the value
    itself twice when every value is the same)."""
    if len(values) < 2:
        return None, None
    data = np.asarray(values, dtype=float)
    if np.all(data == data[0]):
        return float(data[0]), float(data[0])
    res = sps.bootstrap((data,), statistic, confidence_level=CONFIDENCE, n_resamples=BOOTSTRAP,
                        method="percentile", random_state=np.random.default_rng(SEED))
    return float(res.confidence_interval.low), float(res.confidence_interval.high)


def geomean_interval(values: list[float]) -> dict:
    logs = [math.log(v) for v in values]
    low, high = interval(logs)
    return {"value": math.exp(statistics.fmean(logs)) if logs else None,
            "low": None if low is None else math.exp(low), "high": None if high is None else math.exp(high),
            "n": len(values)}


def share_interval(flags: list[bool]) -> dict:
    low, high = interval([float(x) for x in flags])
    return {"value": statistics.fmean(flags) if flags else None, "low": low, "high": high, "n": len(flags)}


def wilcoxon_p(differences: list[float]) -> float | None:
    """Two-sided Wilcoxon signed-rank p-value of paired differences; 1.0 when every difference is zero (no
    evidence either way), None without any pair."""
    if not differences:
        return None
    if all(d == 0 for d in differences):
        return 1.0
    return float(sps.wilcoxon(differences).pvalue)


def evaluations_to(curve: list[float], target: float) -> int | None:
    """The evaluations a run needed for its best so far to reach `target` (0: the starting kernel did)."""
    if target <= 1.0:
        return 0
    return next((i + 1 for i, v in enumerate(curve) if v >= target), None)


def compute(runs: list[Sample], fast: float) -> dict:
    """Per policy and per pair of policies (module doc). `fast`: the Fast@1 threshold."""
    if not runs:
        return {"policies": {}, "pairs": [], "horizon": 0}
    horizon = max(len(s.curve) for s in runs)
    task_best = {}
    for s in runs:
        task_best[s.task] = max(task_best.get(s.task, 1.0), s.best, *s.curve)
    per_policy = {}
    for policy in sorted({s.policy for s in runs}):
        mine = [s for s in runs if s.policy == policy]
        auc = [statistics.fmean(math.log(v) for v in _extended(s.curve, horizon)) if horizon else 0.0
               for s in mine]
        reach = [evaluations_to(s.curve, REACH * task_best[s.task]) for s in mine]
        median_reach = statistics.median([math.inf if r is None else r for r in reach])
        per_policy[policy] = {
            "runs": len(mine), "tasks": len({s.task for s in mine}), "seeds": len({s.seed for s in mine}),
            "geomean": geomean_interval([s.best for s in mine]),
            "fast1": share_interval([s.best > fast for s in mine]),
            "auc": math.exp(statistics.fmean(auc)),
            # a run that never reached the mark counts as infinitely many: None when half the runs never did
            "evals_to_95_median": None if math.isinf(median_reach) else median_reach,
            "reached_95": sum(r is not None for r in reach),
        }
    roomy = [s for s in runs if task_best[s.task] >= ROOM]
    room = {"min": ROOM, "tasks": len({s.task for s in roomy}),
            "geomean": {p: geomean_interval([s.best for s in roomy if s.policy == p]) for p in per_policy
                        if any(s.policy == p for s in roomy)},
            "pairs": _pairs(roomy, sorted(per_policy))}
    return {"policies": per_policy, "pairs": _pairs(runs, sorted(per_policy)), "horizon": horizon, "room": room}


def _pairs(runs: list[Sample], policies: list[str]) -> list[dict]:
    """Each pair of policies on the (task, seed) runs both have."""
    pairs = []
    for a, b in itertools.combinations(policies, 2):
        best_a = {(s.task, s.seed): s.best for s in runs if s.policy == a}
        best_b = {(s.task, s.seed): s.best for s in runs if s.policy == b}
        common = sorted(set(best_a) & set(best_b))
        logs = [math.log(best_a[k]) - math.log(best_b[k]) for k in common]
        pairs.append({"a": a, "b": b, "n": len(common),
                      "ratio_geomean": math.exp(statistics.fmean(logs)) if logs else None,
                      "a_wins": sum(d > 0 for d in logs), "b_wins": sum(d < 0 for d in logs),
                      "p": wilcoxon_p(logs)})
    return pairs


def _extended(curve: list[float], horizon: int) -> list[float]:
    return curve + [curve[-1] if curve else 1.0] * (horizon - len(curve))
