"""How steady the reference's timings were in a sweep database, and which verdicts they carry.

The reference kernel is the same in every evaluation of a task, so its time on a shape should not move.
Per task: how many reference measurements (shapes measured at least three times, reused evaluations left
out) came out over 1.2x and over 2x the median of the same shape, and how many were measured again
(`retimed`, since the evaluator re-measures a disturbed reference). Then, per finished run, the kernel
handed back with its figures, the report's "faster" verdict (`faster_verdict`), and the worst reference measurement of its
search and re-check evaluations against its shape's median, and the room the starting kernel k0 left: its
fraction of the speed-of-light bound on its largest search shape (where a runtime-weighted speedup gets most
of its weight) and the share of its runtime spent in search shapes under 10 µs (launch-bound: no change to
the kernel's body moves those), as a Markdown table. Last, where an evaluation's time went: the median
seconds per stage over the search evaluations (`gpu_wait`, the wait for the GPU lock, is part of the
stages it happened in; `gpu_wait_alone`, from stop 23 on, is the part of it spent waiting to have the GPU
alone, for the checks in progress to end).

    python tools/reference_drift.py quality.db [--bench 1] [--since "2026-11-23 07:24:01"] [--until ...]

The stage seconds and the rate count new evaluations only (a reused one repeats another's seconds), within
`--since` / `--until` (UTC, as the evaluations' times) when given: one machine's share of a bench.
"""

from __future__ import annotations

import argparse
import json
import sqlite3
import statistics
from collections import defaultdict
from datetime import datetime, timezone

from kernelband.report.metrics import faster_verdict


def utc_seconds(text: str) -> float:
    """UTC seconds of "2026-11-23 07:24:01" or "2026-11-23T07:24:01" (a date alone: its midnight); a ValueError
    that names the text otherwise."""
    try:
        return datetime.fromisoformat(text).replace(tzinfo=timezone.utc).timestamp()
    except ValueError:
        raise ValueError(f"not a UTC time: {text!r} (e.g. \"2026-11-23 07:24:01\")") from None


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("db")
    ap.add_argument("--bench", type=int, default=None, help="only this bench's runs")
    ap.add_argument("--since", default=None, help="stage seconds and rate: evaluations from this UTC time on")
    ap.add_argument("--until", default=None, help="stage seconds and rate: evaluations up to this UTC time")
    args = ap.parse_args()

    def utc(text: str | None, default: float) -> float:
        """UTC seconds of "2026-11-23 07:24:01" or "2026-11-23T07:24:01" (a date alone: its midnight)."""
        if not text:
            return default
        try:
            return utc_seconds(text)
        except ValueError as exc:
            ap.error(str(exc))

    since, until = utc(args.since, float("-inf")), utc(args.until, float("inf"))
    new_times: list[float] = []  # when each new evaluation in the window was stored
    con = sqlite3.connect(args.db)
    where, params = ("WHERE r.bench_id = ?", (args.bench,)) if args.bench is not None else ("", ())
    times: dict[tuple[str, str], list[float]] = defaultdict(list)
    stages: dict[str, list[float]] = defaultdict(list)
    evals: dict[tuple[int, int, str], tuple[str, dict]] = {}
    retimed: dict[str, int] = defaultdict(int)
    tuned: list[float] = []  # the correctness checks of modules with an autotuner (search evaluations)
    for run, cand, task, which, text, autotuned, created in con.execute(
            "SELECT e.run_id, e.candidate, r.task, e.which, e.result, c.source LIKE '%autotune%', e.created "
            "FROM evaluations e JOIN runs r ON r.id = e.run_id "
            f"LEFT JOIN candidates c ON c.run_id = e.run_id AND c.id = e.candidate {where}", params):
        result = json.loads(text)
        evals[(run, cand, which)] = (task, result)
        if any("reused" in n for n in result.get("notes", [])):
            continue
        if since <= created <= until:
            new_times.append(created)
            seconds = result.get("seconds") or {}
            if which == "search":
                for stage, value in seconds.items():
                    stages[stage].append(value)
                if autotuned:  # its time with the GPU alone: the tune calls, or (tune_alone off) the whole check
                    tuned.append(seconds["tune"] if "tune" in seconds else seconds.get("correctness", 0.0))
        for shape in result.get("shapes", []):
            if shape.get("ref_ms"):
                times[(task, shape["label"])].append(shape["ref_ms"])
                retimed[task] += bool(shape.get("retimed"))
    median = {k: statistics.median(v) for k, v in times.items() if len(v) >= 3}

    counts: dict[str, list[int]] = defaultdict(lambda: [0, 0, 0])
    for (task, label), values in times.items():
        if (task, label) in median:
            for ms in values:
                ratio = ms / median[(task, label)]
                counts[task][0] += 1
                counts[task][1] += ratio > 1.2
                counts[task][2] += ratio > 2
    total = [sum(c[i] for c in counts.values()) for i in range(3)]
    print(f"reference measurements {total[0]}: over 1.2x their shape's median {total[1]}, over 2x {total[2]}; "
          f"shapes measured again {sum(retimed.values())}")
    print("| task | measurements | over 1.2x | over 2x | shapes measured again |")
    print("| --- | --- | --- | --- | --- |")
    for task in sorted(counts):
        n, over, far = counts[task]
        print(f"| {task.split(':')[-1]} | {n} | {over} | {far} | {retimed[task]} |")

    def worst(run: int, cand: int, which: str) -> float | None:
        if (run, cand, which) not in evals:
            return None
        task, result = evals[(run, cand, which)]
        ratios = [s["ref_ms"] / median[(task, s["label"])] for s in result.get("shapes", [])
                  if s.get("ref_ms") and (task, s["label"]) in median]
        return max(ratios) if ratios else None

    def fmt(x: float | None) -> str:
        return f"{x:.2f}" if x is not None else "-"

    def room(run: int) -> str:
        """k0's SOL fraction on its largest search shape, and its runtime share in shapes under 10 µs."""
        _, result = evals.get((run, 0, "search"), (None, {}))
        shapes = [s for s in result.get("shapes", []) if not s.get("held_out") and s.get("ref_ms")]
        if not shapes:
            return "- | -"
        largest = max(shapes, key=lambda s: s["ref_ms"])
        total = sum(s["ref_ms"] for s in shapes)
        tiny = sum(s["ref_ms"] for s in shapes if s["ref_ms"] < 0.010)
        return f"{fmt(largest.get('sol_fraction'))} | {tiny / total:.0%}"

    print()
    print("| task | policy | handed back | search | re-measured | held-out | k0 vs itself | faster | "
          "worst reference off its median (search / re-check) | k0's SOL, largest shape | k0's time in shapes < 10 µs |")
    print("| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |")
    for run, task, policy, status, text in con.execute(
            f"SELECT r.id, r.task, r.policy, r.status, r.summary FROM runs r {where} ORDER BY r.task, r.policy",
            params):
        name = task.split(":")[-1]
        if status != "done" or not text:
            print(f"| {name} | {policy} | {status} | | | | | | | {room(run)} |")
            continue
        s = json.loads(text)
        best, k0 = s["best_candidate"], s.get("k0_self_speedup")
        confirmed, held = s.get("confirmed_speedup"), s.get("held_out_speedup")
        faster = faster_verdict(best, s.get("best_outcome"), confirmed, held, k0)
        print(f"| {name} | {policy} | k{best} | {fmt(s['best_speedup'])} | {fmt(confirmed)} | {fmt(held)} | "
              f"{fmt(k0)} | {({True: 'yes', False: 'no'}).get(faster, '-')} | {fmt(worst(run, best, 'search'))} / "
              f"{fmt(worst(run, best, 'held_out'))} | {room(run)} |")

    print()
    span = (max(new_times) - min(new_times)) / 60 if len(new_times) > 1 else 0.0
    print(f"new evaluations (search and re-checks, none reused): {len(new_times)}"
          + (f" in {span:.1f} min from the first to the last, {len(new_times) / span:.1f} per minute" if span else ""))
    print(f"seconds per new search evaluation, median over {len(stages.get('total', []))}: " + ", ".join(
        f"{stage} {statistics.median(v):.2f}" for stage, v in stages.items()))
    # A module with an autotuner has the GPU alone while its configs are timed: in its tune calls, or without
    # tune_alone for its whole correctness check. No other candidate's step runs meanwhile.
    if tuned:
        print(f"search evaluations of a module with an autotuner: {len(tuned)}, time with the GPU alone (the tune "
              f"calls, or the whole check without tune_alone; waits included) median {statistics.median(tuned):.2f} s, "
              f"{sum(tuned):.0f} s in all")


if __name__ == "__main__":
    main()
