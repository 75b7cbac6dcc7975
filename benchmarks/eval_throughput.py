"""Evaluator throughput and timing repeatability on the TritonBench-G level-1/2 tasks (GPU).

Parts (run them in one call or split them across calls):

  speed    per task, the set-up (its reference loaded and validated on every shape, once per task
           and GPU), then its starting kernel fully evaluated as a candidate. Seconds per fully
           evaluated candidate: median and p90. Right after a pool part the references are loaded
           already, and the set-up column is only the lookup.
  pool     the same candidates evaluated concurrently through one worker pool (ncu cache emptied
           first): candidates/minute. Each task is set up first, as a bench's run sets its task up
           before its candidates: its reference loaded, checked, and timed once per shape
           (`Evaluator.prime_timing`, which a search pays in its baseline evaluation).
  pool-noncu  the same, with no Nsight Compute profile (φ from the compiler and the timing only): the
           like-for-like figure against the peers, who collect no hardware profile. Right after `pool`
           it reuses its references.
  repeat   5 evaluations of the same kernel per preset (--repeat-presets, default and paper) on the
           --repeat-tasks ('all': the 29): coefficient of variation of the runtime-weighted candidate
           time and of the speedup per task, and their medians over the tasks.
  peers    the way TritonBench, GEAK-eval and the KernelBand release evaluate: one fresh Python
           process per candidate that imports the module, runs the instance tests and times every
           shape with do_bench(warmup=100 ms, rep=1000 ms).

A pool part may name its own number of threads: `pool@4,pool@8` (default --threads). The speed and pool
parts evaluate under --preset (default `default`), which may be a variant: `--preset default+max_ms=25` measures
what a cheaper timing would give the pool, before it is made a rule.

    python benchmarks/eval_throughput.py --parts speed,pool --out results.json
"""

from __future__ import annotations

import argparse
import dataclasses
import functools
import json
import math
import os
import signal
import statistics
import subprocess
import sys
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import psutil

from kernelband import stacks
from kernelband.errors import UserError, run_script
from kernelband.evaluation import zygote
from kernelband.evaluation.context import MEMORY_SHARE
from kernelband.evaluation.evaluator import Evaluator
from kernelband.evaluation.records import PRESETS, Preset
from kernelband.tasks import load_task, tritonbench

HERE = Path(__file__).resolve().parent


def pct(values: list[float], q: float) -> float:
    values = sorted(values)
    k = (len(values) - 1) * q
    lo, hi = int(k), min(int(k) + 1, len(values) - 1)
    return values[lo] + (values[hi] - values[lo]) * (k - lo)


def part_speed(ev: Evaluator, names: list[str], report: dict, save) -> None:
    """Per task: the set-up (the reference loaded and validated on every shape, once per task and GPU), then
    one full evaluation of the starting kernel as a candidate (nothing cached: compile, correctness, timing,
    features with ncu)."""
    from kernelband.evaluation import ncu

    rows = []
    for name in names:
        task = load_task(f"tritonbench:{name}")
        t0 = time.perf_counter()
        try:
            ev.info(task)
            setup_s = time.perf_counter() - t0
            ncu._cache.clear()  # profiled as a new candidate is, also when an earlier part profiled it
            t0 = time.perf_counter()
            result = ev.evaluate(task)
            eval_s = time.perf_counter() - t0
        except Exception as exc:  # noqa: BLE001 - a broken task is a row, not the end of the run
            rows.append({"task": name, "error": str(exc)[:300]})
            print(f"{name:28s} task error: {str(exc)[:200]}", flush=True)
            continue
        rows.append({"task": name, "setup_s": setup_s, "eval_s": eval_s, "outcome": result.outcome.value,
                     "detail": result.detail, "speedup": result.speedup, "n_shapes": len(result.shapes),
                     "stages": result.seconds, "notes": result.notes,
                     "sol": [s.sol_fraction for s in result.shapes],
                     "phi_sources": sorted(set(result.features.sources.values()))})
        print(f"{name:28s} set-up {setup_s:6.1f}s evaluation {eval_s:6.1f}s {result.outcome.value:12s} "
              f"x{result.speedup or 0:.3f} shapes={len(result.shapes)} {result.detail[:80]}", flush=True)
        report["speed"] = {"rows": rows}
        save()
    eval_s = [r["eval_s"] for r in rows if "eval_s" in r]
    setup_s = [r["setup_s"] for r in rows if "setup_s" in r]
    report["speed"]["summary"] = {
        "tasks": len(rows), "ok": sum(r.get("outcome") == "ok" for r in rows),
        "eval_median_s": statistics.median(eval_s), "eval_p90_s": pct(eval_s, 0.9),
        "setup_median_s": statistics.median(setup_s), "setup_p90_s": pct(setup_s, 0.9)}
    save()


def part_pool(ev: Evaluator, names: list[str], report: dict, save, threads: int, key: str = "pool") -> None:
    """Each task's starting kernel as a candidate, `threads` at a time through the evaluator's one pool."""
    tasks = [load_task(f"tritonbench:{n}") for n in names]
    set_up(ev, tasks, threads)  # references loaded beforehand: this measures candidates, not task set-up
    from kernelband.evaluation import ncu

    ncu._cache.clear()  # every candidate profiled, as a new one would be
    ev.pool.gpu_lock.stats(reset=True)  # the lock's accounting from here: this part's candidates only
    ev.pool.cpu_use()  # the workers' CPU from here
    started = len(ev.pool.start_phases)  # the workers handed out from here: one per candidate
    parent = psutil.Process()
    cpu0, forked0 = parent.cpu_times(), zygote.ended_cpu()
    t0 = time.perf_counter()
    finished: list[float] = []  # seconds from the start at which each candidate's result came back

    def one(t):
        result = _safe_eval(ev, t)
        finished.append(time.perf_counter() - t0)
        return result

    done = threading.Event()
    threading.Thread(target=_watch, args=(ev, key, finished, t0, done), daemon=True).start()
    try:
        with ThreadPoolExecutor(threads) as pool:
            results = list(pool.map(one, tasks))
    finally:
        done.set()
    elapsed = time.perf_counter() - t0
    lock = ev.pool.gpu_lock.stats(reset=True)
    cpu1, forked1 = parent.cpu_times(), zygote.ended_cpu()
    # cores used on average, is a CPU the bottleneck? This process (the parent: loads, comparisons, messages),
    # the workers that ended during the part (their CPU reaches the parent's children's times once reaped:
    # candidates, profilers under ncu; a forked worker's, the zygote's, which reports it), and the live workers
    # by kind (Pool.cpu_use)
    cores = {"parent": round((cpu1.user + cpu1.system - cpu0.user - cpu0.system) / elapsed, 2),
             "ended_workers": round((cpu1.children_user + cpu1.children_system - cpu0.children_user
                                     - cpu0.children_system + forked1 - forked0) / elapsed, 2),
             "live_workers": {k: round((v[1] + v[2]) / elapsed, 2) for k, v in ev.pool.cpu_use().items()},
             "host_cores": os.cpu_count(), "load_per_core": round(os.getloadavg()[0] / (os.cpu_count() or 1), 2)}
    finished.sort()
    evaluated = [(t, r) for t, r in zip(tasks, results) if not isinstance(r, str)]
    done = [r for _, r in evaluated]
    failed = {t.name: r for t, r in zip(tasks, results) if isinstance(r, str)}
    for name, error in failed.items():
        print(f"{key}: {name} gave no result: {error}", flush=True)
    not_ok = {t.name: f"{r.outcome.value} at {r.stage}: {r.detail[:300]} | {_last(r.error)}"
              for t, r in evaluated if not r.ok}
    for name, why in not_ok.items():
        print(f"{key}: {name} {why}", flush=True)
    # Where a candidate's time went while sharing the GPU with the others (median and p90 per stage).
    stages = sorted({k for r in done for k in r.seconds})
    stage_s = {k: {"median": statistics.median(v), "p90": pct(v, 0.9)}
               for k in stages if (v := [r.seconds[k] for r in done if k in r.seconds])}
    report[key] = {"threads": threads, "ncu": ev.use_ncu, "tasks": names, "candidates": len(done),
                   "seconds": elapsed, "candidates_per_minute": 60 * len(done) / elapsed, "stages": stage_s,
                   "finished_s": finished, "steady_per_minute": steady_rate(finished, threads),
                   "memory_budget": ev.pool.gpu_lock.budget,
                   # out of memory beside other checks, so evaluated again alone (Evaluator.evaluate)
                   "evaluated_again": sorted(t.name for t, r in evaluated if "first_attempt" in r.seconds),
                   "outcomes": {t.name: r.outcome.value for t, r in evaluated},
                   # each candidate is the task's starting kernel: its speedup over the reference says what
                   # the others' work beside the timing (and drift) did to it; 1.0 is right
                   "self_speedups": {t.name: r.speedup for t, r in evaluated if r.ok and r.speedup},
                   "presets": sorted({r.preset for r in done}),
                   "phi": {t.name: r.features.phi for t, r in evaluated}, "not_ok": not_ok, "no_result": failed,
                   # φ from Nsight Compute, or from the compiler and the timing only (a profile that failed:
                   # its note says why). A candidate whose profile failed spent no time in the profiled run,
                   # so a part's rate counts as one with ncu only where every `ok` candidate has its φ from it.
                   "phi_from_ncu": sorted(t.name for t, r in evaluated if _phi_from_ncu(r)),
                   "ncu_notes": {t.name: [n[:300] for n in r.notes if n.startswith("ncu")] for t, r in evaluated
                                 if ev.use_ncu and not _phi_from_ncu(r)},
                   # the kernels each profile read (phi weights them by duration): ncu replays each one
                   "ncu_kernels": {t.name: r.features.profile.get("kernels") for t, r in evaluated
                                   if r.features.profile},
                   # Triton launches per call of the representative shape (the worker's launch log): ncu's
                   # kernels beyond these are torch's
                   "triton_launches": {t.name: r.features.compile.get("launches_per_call") for t, r in evaluated},
                   # the candidates' workers: where their start's GPU step went (medians, s; the step shares
                   # the GPU, and an exclusive hold waits for it to end)
                   "worker_start_phases": _medians(ev.pool.start_phases[started:]),
                   "seconds_by_task": {t.name: {k: round(v, 4) for k, v in r.seconds.items()} for t, r in evaluated},
                   # the GPU lock's seconds by state (alone, shared, draining: shared steps finishing while a
                   # holder alone waits; free) and per step (GpuLock.stats)
                   "gpu_lock": lock,
                   "cores": cores,
                   # shapes measured again (a disturbed reference) and shapes whose call synchronises, per task
                   "retimed": {t.name: n for t, r in evaluated if (n := sum(s.retimed for s in r.shapes))},
                   "host_sync": {t.name: [s.label for s in r.shapes if s.host_sync] for t, r in evaluated
                                 if any(s.host_sync for s in r.shapes)}}
    ok = [t.name for t, r in evaluated if r.ok]
    phi_ok = len(set(ok) & set(report[key]["phi_from_ncu"]))
    for name, notes in report[key]["ncu_notes"].items():
        print(f"{key}: {name} φ without ncu: {'; '.join(notes) or 'no note'}", flush=True)
    print(f"{key}: cores used: parent {cores['parent']}, ended workers {cores['ended_workers']}, live workers "
          f"{cores['live_workers']}, load per core "
          f"{cores['load_per_core']} of {cores['host_cores']}", flush=True)
    phases = report[key]["worker_start_phases"]
    print(f"{key}: candidate workers' start on the GPU, medians: "
          + (", ".join(f"{k} {v['median']:.2f} s (n={v['n']})" for k, v in phases.items()) or "none started"),
          flush=True)
    print(f"{key}: GPU lock, seconds: " + ", ".join(f"{k} {v:.1f}" for k, v in sorted(lock["seconds"].items()))
          + "; steps by seconds held (holds, longest, seconds that kept a holder alone waiting): "
          + "; ".join(f"{r['mode']} {r['step']} {r['seconds']:.1f} ({r['holds']}, {r['longest']:.2f}, "
                      f"{r['draining']:.1f})" for r in lock["steps"][:8]), flush=True)
    steady = report[key]["steady_per_minute"]
    steady = f"{steady:.1f}/min" if steady else f"none: fewer than {2 * threads + 2} results"
    again = report[key]["evaluated_again"]
    print(f"{key}: {len(done)} candidates in {elapsed:.1f}s with {threads} threads = "
          f"{60 * len(done) / elapsed:.1f}/min (pool full: {steady}); φ from ncu for {phi_ok} of {len(ok)} `ok`"
          f"{'' if ev.use_ncu else ' (ncu off)'}; {len(again)} evaluated again alone after "
          "running out of memory; "
          "median s per stage: "
          + ", ".join(f"{k} {v['median']:.2f}" for k, v in stage_s.items()), flush=True)
    if selfs := list(report[key]["self_speedups"].values()):
        print(f"{key}: the starting kernels against themselves: {self_spread(selfs)}", flush=True)
    save()


# every part --parts takes, in the docstring's order (a part missing here is refused, however well handled)
PARTS = ("speed", "pool", "pool-noncu", "repeat", "peers")


def self_spread(speedups: list[float]) -> str:
    """The geometric mean of the speedups of kernels timed against themselves, their median distance from
    1.0, the largest, and how many are off by more than 2 %."""
    logs = [math.log(x) for x in speedups]
    off = sorted(abs(v) for v in logs)

    def pct(v: float) -> str:
        return f"{100 * (math.exp(v) - 1):.2f} %"

    return (f"geomean {math.exp(statistics.fmean(logs)):.4f}, median |off| {pct(statistics.median(off))}, "
            f"largest {pct(off[-1])}, {sum(v > math.log(1.02) for v in off)} of {len(off)} off by more than 2 %")


def _medians(rows: list[dict]) -> dict:
    """Per key, the median and the count of the rows that have it."""
    keys = sorted({k for r in rows for k in r})
    return {k: {"median": round(statistics.median(r[k] for r in rows if k in r), 4),
                "n": sum(k in r for r in rows)} for k in keys}


def _phi_from_ncu(result) -> bool:
    """The candidate's φ holds values read by Nsight Compute (features.assemble marks each value's source)."""
    return any(k.startswith("phi.") and v == "ncu" for k, v in result.features.sources.items())


def _last(text: str, n: int = 400) -> str:
    return " / ".join(text.strip().splitlines()[-3:])[-n:] if text else ""


def steady_rate(finished: list[float], threads: int) -> float | None:
    """Candidates a minute with the pool full: from the `threads`-th result to the `threads`-th from last,
    so that neither the start (no result yet while the first candidates compile) nor the drain (fewer
    candidates left than threads) counts. None with too few candidates for a middle. Reported beside the
    whole batch's rate, never instead of it."""
    if len(finished) < 2 * threads + 2:
        return None
    first, last = threads - 1, len(finished) - threads
    span = finished[last] - finished[first]
    return 60 * (last - first) / span if span > 0 else None


def set_up(ev: Evaluator, tasks: list, threads: int) -> None:
    """Every task's reference set up (loaded, checked on every shape, its usual time on each measured:
    `Evaluator.prime_timing`), `threads` at a time, as a bench's runs set theirs up and then pay that
    measurement in their baseline evaluation; a task that cannot be set up is left to its evaluation to
    report."""
    def one(task) -> None:
        try:
            ev.info(task)
            ev.prime_timing(task)
        except Exception:  # noqa: BLE001
            pass

    with ThreadPoolExecutor(threads) as pool:
        list(pool.map(one, tasks))


def lock_state(ev: Evaluator) -> list[str]:
    """Who holds and waits for the GPU lock, the memory declared, the off-lock work in flight."""
    return [f"gpu lock: {ev.pool.gpu_lock.state()}", f"gpu memory: {ev.pool.gpu_lock.memory()}",
            f"activity: {ev.pool.activity_now()}"]


# A pool part with no result for this long writes the GPU lock's state and every thread's stack to stderr
# (run AB: 8 evaluations stalled for good, and the log said nothing)
STALL_S = 240


def _watch(ev: Evaluator, key: str, finished: list[float], t0: float, done: threading.Event,
           every: float = 10.0) -> None:
    """Until `done`: once per quiet stretch of STALL_S with no new entry in `finished` (seconds from t0)."""
    quiet_since = None
    while not done.wait(every):
        last = finished[-1] if finished else 0.0
        if time.perf_counter() - t0 - last > STALL_S and quiet_since != last:
            quiet_since = last
            print(f"{key}: no result for {STALL_S} s; the GPU lock and every thread's stack:", file=sys.stderr)
            stacks.dump(state=functools.partial(lock_state, ev))


def _safe_eval(ev, task, **kwargs):
    """The result, or the error's text (a task the evaluator cannot set up is reported, not fatal)."""
    try:
        return ev.evaluate(task, **kwargs)
    except Exception as exc:  # noqa: BLE001
        return f"{type(exc).__name__}: {exc}"


def preset_of(spec: str) -> Preset:
    """A preset by name, or a variant of one: 'default+placements=8+max_ms=160' (fields of records.Preset)."""
    name, *changes = spec.split("+")
    if name not in PRESETS:
        raise UserError(f"unknown preset {name!r} in {spec!r}: use {', '.join(PRESETS)}")
    base, fields = PRESETS[name], {f.name for f in dataclasses.fields(Preset)} - {"name"}
    changed = {}
    for change in changes:
        key, eq, value = change.partition("=")
        if not eq or key not in fields:
            raise UserError(f"bad preset change {change!r} in {spec!r}: write FIELD=VALUE, FIELD one of "
                            f"{', '.join(sorted(fields))}")
        now = getattr(base, key)
        try:
            changed[key] = float(value) if now is None else type(now)(value)
        except ValueError:
            raise UserError(f"bad value in {change!r}: {key} is a {type(now).__name__}") from None
    try:
        return dataclasses.replace(base, name=spec, **changed) if changed else base
    except ValueError as exc:
        raise UserError(f"bad preset {spec!r}: {exc}") from None


def repeat_jobs(tasks: list[str], presets: list[str], extra: str, shard: str) -> list[tuple[str, str]]:
    """(task, preset) pairs: every task with every preset, then `extra` ('T1,T2:P1,P2;T3:P3'), then this
    shard's share ('i/n': every n-th pair from the i-th, so that n processes on n GPUs split the work)."""
    jobs = [(t, p) for t in tasks for p in presets]
    for group in filter(None, extra.split(";")):
        names, colon, specs = group.partition(":")
        if not colon:
            raise UserError(f"bad --repeat-extra group {group!r}: write TASKS:PRESETS")
        jobs += [(t, p) for t in names.split(",") for p in specs.split(",")]
    index, _, count = shard.partition("/")
    if not (index.isdigit() and count.isdigit() and int(index) < int(count)):
        raise UserError(f"bad --shard {shard!r}: write I/N with 0 <= I < N")
    for _, spec in jobs:
        preset_of(spec)  # a bad one stops the run before any GPU work
    return jobs[int(index)::int(count)]


def part_repeat(ev: Evaluator, jobs: list[tuple[str, str]], report: dict, save, n: int) -> None:
    """Each (task, preset) evaluated `n` times, the starting kernel against itself: the CV over the evaluations
    of the candidate's runtime-weighted time and of the speedup. Each evaluation's per-shape times are kept
    (`shapes_ms`: [[ref ms...], [cand ms...]]), so that the noise can be split afterwards into what varies
    shape by shape and what moves every shape of an evaluation together; and the CV of each measurement's
    iterations (`shapes_iter_cv`, alike), which tells a shape whose iterations spread, so that their median
    moves from one measurement to the next, from one whose measurements are tight and still disagree."""
    rows = []
    for name, spec in jobs:
        task, preset = load_task(f"tritonbench:{name}"), preset_of(spec)
        totals, ref_totals, speedups, secs, failed, shapes_ms, iter_cv = [], [], [], [], [], [], []
        drift = {"ref": [], "cand": [], "first": [], "second": []}
        for _ in range(n):
            t0 = time.perf_counter()
            r = _safe_eval(ev, task, preset=preset)
            secs.append(time.perf_counter() - t0)
            if isinstance(r, str) or not r.ok or not r.speedup:
                failed.append(r if isinstance(r, str) else f"{r.outcome.value}: {r.detail}")
                continue
            timed = [s for s in r.shapes if s.cand_ms and s.ref_ms and not s.held_out]
            totals.append(sum(s.cand_ms for s in timed))
            ref_totals.append(sum(s.ref_ms for s in timed))
            shapes_ms.append([[round(s.ref_ms, 6) for s in timed], [round(s.cand_ms, 6) for s in timed]])
            iter_cv.append([[None if s.ref_cv is None else round(s.ref_cv, 5) for s in timed],
                            [None if s.cand_cv is None else round(s.cand_cv, 5) for s in timed]])
            speedups.append(r.speedup)
            # a side's first round over its last, summed over the shapes (> 1: its first measurement is
            # slow), by side and by who measured first on the shape
            pairs: dict[str, list[tuple[float, float]]] = {k: [] for k in drift}
            for sh in r.shapes:
                for who in ("ref", "cand"):
                    x = getattr(sh, f"{who}_rounds")
                    if len(x) > 1:
                        pairs[who].append((x[0], x[-1]))
                        pairs["first" if sh.timed_first == who else "second"].append((x[0], x[-1]))
            for k, v in pairs.items():
                if v:
                    drift[k].append(sum(a for a, _ in v) / sum(b for _, b in v))
        row = {"task": name, "preset": spec, "n": len(speedups), "seconds_each": statistics.median(secs),
               "cv_time": _cv(totals), "cv_ref_time": _cv(ref_totals), "cv_speedup": _cv(speedups),
               "speedups": speedups, "failed": failed, "shapes_ms": shapes_ms, "shapes_iter_cv": iter_cv,
               **{f"{k}_first_over_last": statistics.median(v) if v else None for k, v in drift.items()}}
        rows.append(row)
        cv = " ".join(f"{k}={100 * row[k]:.2f}%" for k in ("cv_time", "cv_speedup") if row[k] is not None)
        print(f"{name:28s} {spec:8s} {cv} {row['seconds_each']:.1f}s each"
              + (f" ({len(failed)} not ok: {failed[0][:80]})" if failed else ""), flush=True)
        report["repeat"] = rows
        report["repeat_summary"] = {
            p: {k: statistics.median(v) for k in ("cv_time", "cv_speedup", "seconds_each")
                if (v := [r[k] for r in rows if r["preset"] == p and r[k] is not None])}
            for p in dict.fromkeys(spec for _, spec in jobs)}
        save()


def _cv(xs: list[float]) -> float | None:
    return statistics.pstdev(xs) / statistics.fmean(xs) if len(xs) > 1 and statistics.fmean(xs) > 0 else None


def part_peers(names: list[str], report: dict, save) -> None:
    rows = []
    for name in names:
        t0 = time.perf_counter()
        proc = subprocess.run([sys.executable, str(HERE / "_peer_eval.py"), name], capture_output=True, text=True,
                              timeout=600)
        wall = time.perf_counter() - t0
        tail = (proc.stdout + proc.stderr).strip().splitlines()[-1:] or [""]
        rows.append({"task": name, "seconds": wall, "rc": proc.returncode, "last": tail[0][:200]})
        print(f"{name:28s} peer protocol {wall:6.1f}s rc={proc.returncode} {tail[0][:100]}", flush=True)
        report["peers"] = {"rows": rows}
        save()
    secs = [r["seconds"] for r in rows if r["rc"] == 0]
    if secs:
        report["peers"]["summary"] = {"median_s": statistics.median(secs), "p90_s": pct(secs, 0.9),
                                      "tasks": len(secs)}
        save()


def _threads_ok(part: str) -> bool:
    """`pool@N`: N threads, a whole number from 1 on; only pool parts take it."""
    name, at, n = part.partition("@")
    return not at or (name.startswith("pool") and n.isdigit() and int(n) >= 1)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--parts", default="speed,pool,repeat,peers")
    ap.add_argument("--tasks", default="", help="comma-separated; default: the 29 level-1/2 tasks")
    ap.add_argument("--preset", default="default",
                    help="the speed and pool parts' preset, or a variant of one: default+max_ms=25 (the repeat part "
                         "takes --repeat-presets)")
    ap.add_argument("--repeat-tasks", default="add_value,softmax_triton1,matmul_kernel",
                    help="comma-separated, or 'all' for the 29 level-1/2 tasks")
    ap.add_argument("--repeat-presets", default="default,paper",
                    help="comma-separated presets, or variants of one: default+placements=8+max_ms=160")
    ap.add_argument("--repeat-extra", default="",
                    help="more (task, preset) pairs for the repeat part: 'T1,T2:P1,P2;T3:P3'")
    ap.add_argument("--shard", default="0/1",
                    help="I/N: this process takes every N-th of the repeat part's pairs from the I-th (N GPUs)")
    ap.add_argument("--peer-tasks", default="add_value,softmax_triton1,rmsnorm_triton,dropout_triton,"
                                            "matmul_kernel,kldiv_compute")
    ap.add_argument("--threads", type=int, default=3)
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--warm-profilers", type=int, default=None,
                    help="workers kept started under ncu (default: threads + 3)")
    ap.add_argument("--memory-share", default=str(MEMORY_SHARE),
                    help="share of the GPU's memory that the checks sharing it may declare at once, or 'none'")
    ap.add_argument("--out", default=os.environ.get("OUT", ".") + "/eval_throughput.json")
    args = ap.parse_args()
    parts = args.parts.split(",")
    unknown = [p for p in parts if p.split("@")[0] not in PARTS or not _threads_ok(p)]
    if unknown:
        raise UserError(f"unknown part {unknown[0]!r}: use {', '.join(PARTS)}")
    preset = preset_of(args.preset)  # a bad one stops the run before any GPU work
    names = [n for n in args.tasks.split(",") if n] or tritonbench.level12()
    jobs = repeat_jobs(names if args.repeat_tasks == "all" else args.repeat_tasks.split(","),
                       args.repeat_presets.split(","), args.repeat_extra, args.shard) if "repeat" in parts else []
    report: dict = {"date": time.strftime("%Y-%m-%d"), "tasks": names, "warm_profilers": args.warm_profilers,
                    "preset": preset.name}

    def save() -> None:
        Path(args.out).write_text(json.dumps(report, indent=1, default=str))

    ev = None  # started when a part needs it: the peers' part alone needs no workers on the GPU
    try:
        for i, part in enumerate(parts):  # in the order given
            if part == "peers":
                part_peers(args.peer_tasks.split(","), report, save)
                continue
            if ev is None:
                # every task's reference kept: the pool part measures candidates, not set-ups
                most = max([args.threads] + [int(p.partition("@")[2]) for p in parts if "@" in p])
                ev = Evaluator(warm=most + 1, max_references=max(4, len(names)),
                               warm_profilers=args.warm_profilers,
                               memory_share=None if args.memory_share == "none" else float(args.memory_share))
                report["device"] = ev.pool.mode
                ev.preset = preset  # the speed and pool parts' evaluations, and the references' priming
                # `kill -USR1` writes who holds and waits for the GPU lock, then every thread's stack, to stderr
                stacks.dump_on(signal.SIGUSR1, functools.partial(lock_state, ev))
            if part == "speed":
                part_speed(ev, names, report, save)
            elif part.startswith("pool"):
                part, _, n = part.partition("@")
                threads = int(n) if n else args.threads
                profiles = ev.use_ncu
                ev.use_ncu = profiles and part != "pool-noncu"
                try:  # a part run twice keeps both results: pool, pool#2, ...
                    key = parts[i] + (f"#{parts[:i].count(parts[i]) + 1}" if parts[i] in parts[:i] else "")
                    part_pool(ev, names, report, save, threads, key=key)
                finally:
                    ev.use_ncu = profiles
                if not (parts[i + 1:i + 2] and (parts[i + 1].startswith("pool") or parts[i + 1] == "speed")):
                    ev.pool.keep_at_most(4)  # as an evaluator does by default: 29 references fill an 80 GB GPU
            else:
                part_repeat(ev, jobs, report, save, args.repeats)
    finally:
        if ev is not None:
            ev.close()
    print(json.dumps({k: v.get("summary", v) if isinstance(v, dict) else v for k, v in report.items()
                      if k not in ("tasks", "repeat")}, default=str)[:3000])


if __name__ == "__main__":
    run_script(main)
