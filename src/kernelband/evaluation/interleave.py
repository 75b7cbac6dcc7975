"""Timing one shape: the reference and the candidate in turn, and a second look when the reference is off.

The reference kernel is the same in every evaluation of a task, so after a few evaluations its time on
each shape is known. Anything else using the GPU or the host's CPU during a measurement (a compile in
another worker, another process, a CPU starved by the host's other work) can only make a measurement
slower. So when the reference comes out more than `threshold` times its usual time, the measurement
window was disturbed: both sides are measured again, up to `retries` more times, and the attempt whose
reference is nearest its usual time is kept (its candidate time with it: the pair shared a window).

What this does not catch: a disturbed candidate measurement beside a clean reference one. That makes a
candidate look slower than it is, never faster, so a reported speedup errs low, not high.
"""

from __future__ import annotations

import math
import statistics
import threading
from collections.abc import Callable
from dataclasses import dataclass


def trimmed_mean(times: list[float], cut: float = 0.1) -> float:
    """The mean of the iterations left after the fastest and the slowest `cut` of them are set aside: as
    steady as the mean where the iterations fall in two groups (the median jumps between them as their
    shares move), and as deaf as the median to a few disturbed ones."""
    ordered = sorted(times)
    k = int(len(ordered) * cut)
    return statistics.fmean(ordered[k:len(ordered) - k])


STATS = {"mean": statistics.fmean, "median": statistics.median, "trimmed": trimmed_mean}


def summarise(rounds: list[list[float]], stat: str) -> tuple[float | None, float | None, list[float]]:
    """The mean over the rounds of each round's `stat` (STATS), the iterations' CV, and each round's `stat`."""
    rounds = [r for r in rounds if r]
    if not rounds:
        return None, None, []
    per_round = [STATS[stat](r) for r in rounds]
    flat = [t for r in rounds for t in r]
    mean = statistics.fmean(flat)
    cv = statistics.pstdev(flat) / mean if len(flat) > 1 and mean > 0 else None
    value = statistics.fmean(per_round)
    return (value if math.isfinite(value) else None), cv, [round(x, 6) for x in per_round]


class RefHistory:
    """The reference's recent times per (task, preset, shape) in one evaluator, and what to expect next:
    the smallest of fewer than three (a disturbed first measurement is only ever too slow), else the
    median."""

    def __init__(self, keep: int = 20):
        self.keep = keep
        self._times: dict[tuple, list[float]] = {}
        self._lock = threading.Lock()

    def expected(self, key: tuple) -> float | None:
        with self._lock:
            times = list(self._times.get(key, ()))
        if not times:
            return None
        return min(times) if len(times) < 3 else statistics.median(times)

    def add(self, key: tuple, ms: float) -> None:
        with self._lock:
            times = self._times.setdefault(key, [])
            times.append(ms)
            del times[:-self.keep]


@dataclass
class Attempt:
    ref: list[list[float]]  # per measurement, its iterations' times (ms)
    cand: list[list[float]]
    ref_ms: float | None


def measure_shape(measure: Callable[[str], list[float]], rounds: int, ref_first: bool, stat: str,
                  expected: float | None, threshold: float, retries: int) -> tuple[Attempt, list[Attempt]]:
    """`measure("ref")` / `measure("cand")` time one side once. Returns the attempt kept and all of them.

    An attempt is `rounds` ABBA rounds (who goes first in round 0: the reference if `ref_first`). A new
    attempt follows while the last one's reference time exceeds `expected * threshold` (`threshold` 0 or
    no `expected`: never), at most `retries` times."""
    attempts: list[Attempt] = []
    for _ in range(1 + max(0, retries)):
        ref_times: list[list[float]] = []
        cand_times: list[list[float]] = []
        for r in range(rounds):
            order = ("ref", "cand") if (r % 2 == 0) == ref_first else ("cand", "ref")
            for who in order:
                (ref_times if who == "ref" else cand_times).append(measure(who))
        ref_ms = summarise(ref_times, stat)[0]
        attempts.append(Attempt(ref_times, cand_times, ref_ms))
        if not (expected and threshold and ref_ms) or ref_ms <= expected * threshold:
            break
    if expected and len(attempts) > 1:
        kept = min(attempts, key=lambda a: abs(math.log(a.ref_ms / expected)) if a.ref_ms else math.inf)
    else:
        kept = attempts[-1]
    return kept, attempts
