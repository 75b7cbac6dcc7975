"""Timing one shape: the reference and the candidate in turn, and a second look when either side is off.

The reference kernel is the same in every evaluation of a task, so after a few evaluations its time on
each shape is known; a candidate's time on a shape is known once it has been measured alone. Anything else
using the GPU or the host's CPU during a measurement (a compile in another worker, another process, a CPU
starved by the host's other work) can only make a measurement slower. So when either side comes out more
than `threshold` times its usual time, the measurement window was disturbed: both sides are measured again,
up to `retries` more times, and the attempt whose two sides are nearest their usual times is kept (the pair
shared a window). The same rule holds for both sides: a side with no usual time yet is measured once alone
first (evaluation/timing.py), and its usual time is the smallest of fewer than three measurements, else their
median (`RefHistory`).
"""

from __future__ import annotations

import math
import statistics
import threading
from collections.abc import Callable
from dataclasses import dataclass, field


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
    """A side's recent times per key (the reference's: task, preset, shape; a candidate's: its source's hash
    too) in one evaluator, and what to expect next: the smallest of fewer than three (a disturbed first
    measurement is only ever too slow), else the median."""

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
class Sample:
    """One measurement of one side: its iterations' device times (ms) and, measured beside them, the wall time
    per call of back-to-back calls (ms; None where the worker did not measure it)."""

    times: list[float]
    call_ms: float | None = None


@dataclass
class Attempt:
    ref: list[list[float]]  # per measurement, its iterations' times (ms)
    cand: list[list[float]]
    ref_ms: float | None
    cand_ms: float | None = None
    ref_call: list[float] = field(default_factory=list)  # per measurement, its wall time per call (ms)
    cand_call: list[float] = field(default_factory=list)

    def off(self, expected: float | None, cand_expected: float | None) -> float:
        """How far the attempt's sides are from their usual times: the sum of |log(time / usual)| over the
        sides that have one."""
        pairs = [(self.ref_ms, expected), (self.cand_ms, cand_expected)]
        if any(usual and not ms for ms, usual in pairs):
            return math.inf
        return sum(abs(math.log(ms / usual)) for ms, usual in pairs if usual)


def speedup_se(ref: list[list[float]], cand: list[list[float]]) -> float:
    """The relative standard error of ref / cand from the two sides' rounds of iterations, each side's the
    larger of two: its iterations' CV over the root of their count (an upper bound for the trimmed mean's,
    which sets the outliers aside), and its rounds' spread over the root of their count, which sees a state
    that holds for a whole measurement and not the next (the iterations alone never do). Added in
    quadrature."""
    def rel(rounds: list[list[float]]) -> float:
        times = [t for r in rounds for t in r]
        mean = statistics.fmean(times)
        if mean <= 0:
            return math.inf
        within = statistics.pstdev(times) / mean / math.sqrt(len(times))
        means = [statistics.fmean(r) for r in rounds if r]
        between = statistics.stdev(means) / mean / math.sqrt(len(means)) if len(means) > 1 else 0.0
        return max(within, between)
    if sum(map(len, ref)) < 2 or sum(map(len, cand)) < 2:
        return math.inf
    return math.hypot(rel(ref), rel(cand))


def measure_shape(measure: Callable[[str], Sample], rounds: int, ref_first: bool, stat: str,
                  expected: float | None, threshold: float, retries: int,
                  cand_expected: float | None = None, max_rounds: int = 0,
                  target_se: float = 0.0) -> tuple[Attempt, list[Attempt]]:
    """`measure("ref")` / `measure("cand")` time one side once. Returns the attempt kept and all of them.

    An attempt is `rounds` ABBA rounds (who goes first in round 0: the reference if `ref_first`), then two
    more at a time, up to `max_rounds`, while the speedup's standard error from the iterations and the rounds
    (`speedup_se`) is over `target_se`: a kernel of a few µs whose calls vary by several per cent gets the
    calls it needs, a steady one no more. A new attempt follows while the last one's reference time exceeds
    `expected * threshold` or its candidate time `cand_expected * threshold` (`threshold` 0, or neither side's
    usual time known: never), at most `retries` times."""
    attempts: list[Attempt] = []
    for _ in range(1 + max(0, retries)):
        samples: dict[str, list[Sample]] = {"ref": [], "cand": []}
        r = 0
        while r < rounds or (r < max_rounds and speedup_se(
                [x.times for x in samples["ref"]], [x.times for x in samples["cand"]]) > target_se):
            for _ in range(1 if r < rounds else min(2, max_rounds - r)):  # past `rounds`, ABBA pairs: drift cancels
                order = ("ref", "cand") if (r % 2 == 0) == ref_first else ("cand", "ref")
                for who in order:
                    samples[who].append(measure(who))
                r += 1
        ref, cand = samples["ref"], samples["cand"]
        attempt = Attempt([x.times for x in ref], [x.times for x in cand], summarise([x.times for x in ref], stat)[0],
                          summarise([x.times for x in cand], stat)[0],
                          [x.call_ms for x in ref if x.call_ms is not None],
                          [x.call_ms for x in cand if x.call_ms is not None])
        attempts.append(attempt)
        if not threshold or not any(_over(ms, usual, threshold) for ms, usual in
                                    ((attempt.ref_ms, expected), (attempt.cand_ms, cand_expected))):
            break
    if len(attempts) > 1:
        kept = min(attempts, key=lambda a: a.off(expected, cand_expected))
    else:
        kept = attempts[-1]
    return kept, attempts


def _over(ms: float | None, usual: float | None, threshold: float) -> bool:
    return bool(usual and ms) and ms > usual * threshold
