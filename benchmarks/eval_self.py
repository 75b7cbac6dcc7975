"""How far a one-shot `kernelband eval` of a task's own kernel against itself is from 1.0, per shape.

The starting kernel timed against itself should come out at 1.0 on every shape. Each evaluation here runs in
a fresh process (`kernelband eval examples:X --json`), as a user's one-shot eval does: no reference history
from earlier evaluations to tell a disturbed measurement by, only what the eval measures for itself. Per
built-in example and per shape, the worst deviation of the self-speedup from 1.0 over `--runs` processes;
passes when every shape of every example stays within `--tolerance` (2 %) and every evaluation is `ok`.

    python benchmarks/eval_self.py [--runs 10] [--tolerance 0.02] [--examples softmax,matmul] [--out rows.json]
    python benchmarks/eval_self.py --gpus 0,1,2,3 ...     # examples spread over four GPUs, each eval alone on one
    python benchmarks/eval_self.py --resume part.json.xz ...  # only the processes an earlier part did not run

A part is what `--out` wrote (xz-compressed or not): each process is self-contained, so parts run in separate
sessions, on machines of one GPU model, add up to the same figure.

Exit status: 0 within the tolerance, 1 outside it (or an evaluation not ok), 2 for bad input. Run it on the
GPU machine; in the interpreter (KERNELBAND_MODE=interpreter) the figures say nothing about a GPU.
"""

from __future__ import annotations

import argparse
import json
import lzma
import os
import queue
import subprocess
import sys
import threading
from collections import defaultdict
from pathlib import Path


def eval_once(example: str, ncu: bool, timeout: float, baselines: bool = False, gpu: str | None = None) -> dict:
    """One `kernelband eval` of the example's own kernel, in a fresh process (on GPU `gpu` alone where given);
    its JSON record."""
    command = [sys.executable, "-c", "from kernelband.cli import main; main()", "eval", f"examples:{example}",
               "--json"] + ([] if ncu else ["--no-ncu"]) + ([] if baselines else ["--no-baselines"])
    env = dict(os.environ, **({"CUDA_VISIBLE_DEVICES": gpu} if gpu is not None else {}))
    proc = subprocess.run(command, capture_output=True, text=True, timeout=timeout, env=env)
    if proc.returncode not in (0, 1) or not proc.stdout.strip():
        tail = (proc.stderr.strip().splitlines() or ["(nothing on stderr)"])[-1]
        return {"outcome": f"failed (exit {proc.returncode}): {tail}", "shapes": [], "device": ""}
    return json.loads(proc.stdout)


def rows(results: dict[str, list[dict]]) -> list[dict]:
    """Per example and shape: the self-speedups over the processes and the worst deviation from 1.0."""
    out = []
    for example, records in results.items():
        per_shape: dict[str, list[float]] = defaultdict(list)
        failed = [r["outcome"] for r in records if r["outcome"] != "ok"]
        for record in records:
            for shape in record["shapes"]:
                if shape.get("speedup") is not None:
                    per_shape[shape["label"]].append(shape["speedup"])
        for label, speedups in per_shape.items():
            shown = [round(s, 4) for s in speedups]
            out.append({"example": example, "shape": label, "speedups": shown,
                        "worst": round(max(abs(s - 1.0) for s in shown), 4), "failed": failed})
        if not per_shape:
            out.append({"example": example, "shape": "-", "speedups": [], "worst": None, "failed": failed})
    return out


def load_part(path: Path) -> tuple[dict[str, list[dict]], set[str]]:
    """An earlier part's records per example and its devices (what `--out` wrote; `.xz` read as such)."""
    raw = lzma.open(path).read() if path.suffix == ".xz" else path.read_bytes()
    data = json.loads(raw)
    return {e: list(r) for e, r in data["records"].items()}, set(data["devices"])


def verdict(table: list[dict], tolerance: float) -> bool:
    """Every shape within the tolerance, every evaluation ok."""
    return all(r["worst"] is not None and r["worst"] <= tolerance and not r["failed"] for r in table)


def within(table: list[dict], tolerance: float) -> int:
    """How many shapes stayed within the tolerance in every run (issue 50's figure: at least 95 of the 99)."""
    return sum(r["worst"] is not None and r["worst"] <= tolerance and not r["failed"] for r in table)


def main(argv: list[str] | None = None) -> int:
    from kernelband.tasks import example_names

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--runs", type=int, default=10, help="fresh processes per example")
    ap.add_argument("--tolerance", type=float, default=0.02, help="largest |self-speedup - 1| allowed per shape")
    ap.add_argument("--examples", default="", help="comma-separated built-in examples (default: all)")
    ap.add_argument("--ncu", action="store_true", help="profile with Nsight Compute as eval does by default")
    # torch.compile's baselines are timed after the candidate and do not enter its self-speedup; off, each fresh
    # process skips their compile
    ap.add_argument("--baselines", action="store_true", help="time torch eager and torch.compile as eval does")
    ap.add_argument("--timeout", type=float, default=900, help="seconds one eval may take")
    ap.add_argument("--gpus", default="", help="comma-separated GPU indices: one example at a time on each, its "
                    "processes one after another (default: the visible GPU)")
    ap.add_argument("--out", type=Path, default=None, help="write the per-shape rows here as JSON")
    ap.add_argument("--resume", type=Path, default=None,
                    help="an earlier part's --out file: its processes count, and only the rest run")
    args = ap.parse_args(argv)
    known = list(example_names())
    chosen = [e for e in args.examples.split(",") if e] or known
    unknown = [e for e in chosen if e not in known]
    if unknown:
        print(f"error: no built-in example {', '.join(unknown)}: use {', '.join(known)}", file=sys.stderr)
        return 2
    if args.runs < 1 or args.tolerance < 0:
        print("error: --runs must be at least 1 and --tolerance at least 0", file=sys.stderr)
        return 2
    results: dict[str, list[dict]] = {e: [] for e in chosen}
    devices: set[str] = set()
    if args.resume is not None:
        try:
            earlier, devices = load_part(args.resume)
        except (OSError, ValueError, KeyError, lzma.LZMAError) as exc:
            print(f"error: --resume {args.resume} is not a file --out wrote ({exc})", file=sys.stderr)
            return 2
        for example in chosen:
            results[example] = earlier.get(example, [])[:args.runs]
    todo = queue.SimpleQueue()
    for example in chosen:
        if len(results[example]) < args.runs:
            todo.put(example)
    lock = threading.Lock()

    def save() -> None:
        if args.out is not None:  # after each process, so that a run cut short keeps what it measured
            # each eval's whole record too: what a shape far off 1 was measured beside
            args.out.write_text(json.dumps({"devices": sorted(devices), "runs": args.runs,
                                            "rows": rows(results), "records": results}, indent=1))

    def lane(gpu: str | None) -> None:  # one GPU's examples, each one's processes one after another
        while True:
            try:
                example = todo.get_nowait()
            except queue.Empty:
                return
            for i in range(len(results[example]), args.runs):
                record = eval_once(example, args.ncu, args.timeout, args.baselines, gpu)
                with lock:
                    results[example].append(record)
                    devices.add(record.get("device") or "?")
                    print(f"{example} {i + 1}/{args.runs}{'' if gpu is None else f' (GPU {gpu})'}: "
                          f"{record['outcome']} {record.get('speedup') if record.get('speedup') is not None else '-'}",
                          file=sys.stderr)
                    save()

    lanes = [threading.Thread(target=lane, args=(g,)) for g in ([g for g in args.gpus.split(",") if g] or [None])]
    for t in lanes:
        t.start()
    for t in lanes:
        t.join()
    save()
    table = rows(results)
    print(f"| example | shape | worst abs(self-speedup - 1) | self-speedups ({', '.join(sorted(devices))}) |")
    print("|---|---|---|---|")
    for r in table:
        worst = "-" if r["worst"] is None else f"{100 * r['worst']:.1f} %"
        note = f" (not ok: {'; '.join(r['failed'])})" if r["failed"] else ""
        print(f"| {r['example']} | {r['shape']} | {worst}{note} | {', '.join(f'{s:.3f}' for s in r['speedups'])} |")
    worst = max((r["worst"] for r in table if r["worst"] is not None), default=None)
    ok = verdict(table, args.tolerance)
    done = sum(len(r) for r in results.values())
    if done < args.runs * len(chosen):
        print(f"{done} of {args.runs * len(chosen)} processes run: the figure is partial (--resume the --out file)")
    print(f"{within(table, args.tolerance)} of {len(table)} shapes within {100 * args.tolerance:g} % in all "
          f"{args.runs} runs; worst per-shape deviation: {'-' if worst is None else f'{100 * worst:.1f} %'} "
          f"({'within' if ok else 'outside'} {100 * args.tolerance:g} %)")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
