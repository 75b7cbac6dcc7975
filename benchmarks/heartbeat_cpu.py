"""Where a sweep's CPU went, by kind of worker, and what its GPU locks were doing, from the heartbeat lines
of its log (no GPU needed).

Each heartbeat carries `WorkerPool.cpu_use()` per evaluator: CPU seconds each kind of worker used since the
last beat, its own process apart from its children (for a profiler, ncu's front end apart from the Python
worker it runs). This sums them over the log:

    python3 benchmarks/heartbeat_cpu.py kernelband-runs/gpu/sweep.log

A sweep log holds one process's beats per phase; each phase starts counting afresh, as the pool does.

Then, per GPU, the share of beats in which its lock was held alone (a timing, ncu's run, an autotuner's
tuning), held shared (correctness steps) or free: a GPU whose lock is almost never free is the bound on
the sweep's rate, and more runs at a time cannot raise it. A beat is a sample, not a measured duration.
"""

from __future__ import annotations

import argparse
import json
from collections import defaultdict


def summarise(lines) -> tuple[dict[str, list[float]], float, int]:
    """({kind: [worker-beats, own CPU s, children's CPU s]}, seconds covered by the beats, beats)."""
    totals: dict[str, list[float]] = defaultdict(lambda: [0, 0.0, 0.0])
    covered, last, beats = 0.0, None, 0
    for line in lines:
        if not line.startswith('{"kind": "heartbeat"'):
            continue
        beat = json.loads(line)
        beats += 1
        elapsed = beat.get("elapsed_s", 0)
        # the first beat covers the pool's start; a smaller elapsed time is a new phase's first beat
        covered += elapsed - last if last is not None and elapsed >= last else elapsed
        last = elapsed
        for ev in beat.get("evaluators", []):
            for kind, (workers, own, children) in (ev.get("cpu") or {}).items():
                row = totals[kind]
                row[0] += workers
                row[1] += own
                row[2] += children
    return dict(totals), covered, beats


def lock_states(lines) -> tuple[list[dict[str, int]], list[float]]:
    """Per evaluator (GPU), beats with its lock held `exclusive`, held `shared`, `free`, and `waiting` (beats
    with a waiter, whatever the holder), `memory_waiting` (beats with a shared step waiting its turn, from
    `gpu_memory`) and `declared_max` (the most bytes its shared steps declared at one beat); and the driving
    process's cores per beat, where the beat has them."""
    states: list[dict[str, int]] = []
    driver: list[float] = []
    for line in lines:
        if not line.startswith('{"kind": "heartbeat"'):
            continue
        beat = json.loads(line)
        if "driver" in beat:
            driver.append(beat["driver"]["cores"])
        for i, ev in enumerate(beat.get("evaluators", [])):
            while len(states) <= i:
                states.append({"exclusive": 0, "shared": 0, "free": 0, "waiting": 0, "memory_waiting": 0,
                               "declared_max": 0})
            held = [entry.rsplit(": ", 1)[-1].split()[0] for entry in ev.get("gpu_lock", [])]
            state = "exclusive" if "exclusive" in held else "shared" if "shared" in held else "free"
            states[i][state] += 1
            states[i]["waiting"] += "waiting" in held
            memory = ev.get("gpu_memory") or {}
            states[i]["memory_waiting"] += memory.get("waiting", 0) > 0
            states[i]["declared_max"] = max(states[i]["declared_max"], memory.get("declared", 0))
    return states, driver


def lock_accounting(lines) -> list[dict]:
    """Per evaluator (GPU), the GPU lock's accounting at the last beat that has it (`GpuLock.stats`, counted
    from the pool's start): seconds by state and per step."""
    last: list[dict] = []
    for line in lines:
        if not line.startswith('{"kind": "heartbeat"'):
            continue
        for i, ev in enumerate(json.loads(line).get("evaluators", [])):
            if "gpu_lock_stats" in ev:
                while len(last) <= i:
                    last.append({})
                last[i] = ev["gpu_lock_stats"]
    return last


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("log")
    args = ap.parse_args()
    with open(args.log) as f:
        lines = f.readlines()
    totals, covered, beats = summarise(lines)
    if not totals:
        print("no heartbeat with CPU figures in", args.log)
        return
    print(f"CPU by kind of worker over {covered:.0f} s of heartbeats ({beats} beats; own process / children)")
    print("| kind | workers, mean | own CPU s | children's CPU s | cores, own + children | per worker, cores |")
    print("| --- | --- | --- | --- | --- | --- |")
    for kind, (worker_beats, own, children) in sorted(totals.items(), key=lambda kv: -(kv[1][1] + kv[1][2])):
        mean_workers = worker_beats / beats if beats else 0.0
        cores = (own + children) / covered if covered else 0.0
        each = cores / mean_workers if mean_workers else 0.0
        print(f"| {kind} | {mean_workers:.1f} | {own:.0f} | {children:.0f} | {cores:.2f} | {each:.2f} |")
    states, driver = lock_states(lines)
    print("GPU lock per GPU, share of beats: held alone / held shared / free (beats with a waiter)")
    for gpu, st in enumerate(states):
        n = st["exclusive"] + st["shared"] + st["free"]
        print(f"GPU {gpu}: {st['exclusive'] / n:.0%} / {st['shared'] / n:.0%} / {st['free'] / n:.0%} "
              f"({st['waiting']} of {n}; a step waiting its turn to share in {st['memory_waiting']}, at most "
              f"{st['declared_max'] / 2**30:.1f} GiB declared at once)")
    if driver:
        print(f"the driving process: {sum(driver) / len(driver):.2f} cores on average, {max(driver):.2f} at most")
    for gpu, stats in enumerate(lock_accounting(lines)):
        if not stats:
            continue
        total = sum(stats["seconds"].values()) or 1.0
        print(f"GPU {gpu} lock, share of {total:.0f} s: " + ", ".join(
            f"{k} {v / total:.0%}" for k, v in sorted(stats["seconds"].items(), key=lambda kv: -kv[1])))
        print("  steps by seconds held (holds, longest s, s that kept a timing waiting): " + "; ".join(
            f"{r['mode']} {r['step']} {r['seconds']:.0f} ({r['holds']}, {r['longest']:.1f}, {r['draining']:.0f})"
            for r in stats["steps"][:8]))


if __name__ == "__main__":
    main()
