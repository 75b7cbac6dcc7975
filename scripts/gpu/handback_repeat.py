"""Does a handed-back module run as fast in a user's process as the run said? For every run of a sweep that
handed back a module with an autotuner in play (best.py pinned, or autotuned with the reason why not), the
module is imported in ten fresh Python processes, one after another, each compiling a torch.compile function
in a thread meanwhile (as a user's program often does, while an autotuner would time its configurations),
and each shape is timed there as the evaluator times it (the run's preset: its iterations, its statistic, its
copies of the inputs, its timer). Per shape: the median of the processes against the time the run's summary
printed; the check passes when every shape is within `--tolerance` (3 %).

    python scripts/gpu/handback_repeat.py --db kernelband-runs/gpu/quality.db --bench 3 \\
        --tritonbench data/tritonbench_g.json --json handback_repeat.json

Exit code 0: every shape within the tolerance; 1: some shape not; 2: bad input. The worst shape goes to
BENCHMARKS.md.
"""

from __future__ import annotations

import argparse
import itertools
import json
import os
import statistics
import subprocess
import sys
import threading
import time
from pathlib import Path

TOLERANCE = 0.03
PROCESSES = 10


# -- one fresh process --------------------------------------------------------------------------------------
class _Originals:
    """What worker/timing.py asks a guard for: here nothing is guarded, so the functions themselves."""

    @staticmethod
    def original(name: str):
        import importlib

        module, _, attr = name.partition(":")
        return getattr(importlib.import_module(module), attr)


def _compile_meanwhile(backend: str, mode: str | None) -> tuple[threading.Thread | None, dict]:
    """A thread that compiles (and runs once) a small torch.compile function, as a user's program might. The
    parent turns Inductor's caches off, so that each process compiles for real."""
    done: dict = {}
    if backend == "none":
        return None, done

    def work():
        import torch
        t0 = time.perf_counter()
        try:
            device = "cpu" if os.environ.get("TRITON_INTERPRET") == "1" else "cuda"

            def block(x, w):
                return torch.nn.functional.gelu(x @ w).softmax(-1) * x.sum(-1, keepdim=True)

            compiled = torch.compile(block, backend=backend, mode=mode if backend == "inductor" else None)
            x, w = torch.randn(256, 256, device=device), torch.randn(256, 256, device=device)
            compiled(x, w)
        except Exception as exc:  # noqa: BLE001 - the timing goes on; the report says the compile failed
            done["error"] = f"{type(exc).__name__}: {exc}"[:300]
        done["seconds"] = time.perf_counter() - t0

    thread = threading.Thread(target=work, daemon=True)
    thread.start()
    return thread, done


def child(args) -> None:
    """Import the module, call each shape once with the compile running, then time each shape; print JSON.
    On the interpreter (the plumbing's test) the workers' CPU shim stays off: it tells torch.compile that the
    CPU's tensors are CUDA's, and the module must then run on the CPU as it is."""
    interpreter = os.environ.get("KERNELBAND_MODE") == "interpreter"
    if interpreter:
        os.environ["TRITON_INTERPRET"] = "1"
    import torch  # noqa: F401

    from kernelband.evaluation.interleave import STATS
    from kernelband.evaluation.records import PRESETS
    from kernelband.tasks import load_task
    from kernelband.worker import harness as harness_mod
    from kernelband.worker import tuners
    from kernelband.worker.timing import bench, warm_profiler

    mode = "interpreter" if interpreter else "gpu"
    device = "cpu" if interpreter else "cuda"
    task = load_task(args.task, args.tritonbench)
    shapes = json.loads(args.shapes)
    preset = PRESETS[args.preset].wire()
    if not interpreter and any(s.get("timer") == "span" for s in shapes):
        warm_profiler()
    thread, compiled = _compile_meanwhile(args.compile_backend, args.compile_mode)
    if interpreter and thread is not None:
        # The interpreter patches triton.language module-wide while a kernel runs, so a trace in another
        # thread can meet it half-patched; on the interpreter the times mean nothing, and the compile goes first.
        thread.join()
    module = harness_mod.import_file("handed_back", args.file)
    harness = harness_mod.for_task(task.wire(), module, Path(args.file).read_text(), mode)
    index = {s["label"]: s["index"] for s in harness.describe(mode)["shapes"]}
    before = tuners.snapshot(module)
    for shape in shapes:  # first calls: where an autotuner left in the module would time its configs
        harness.call(harness.make_inputs(index[shape["label"]], device))
    tuned = tuners.choices_since(module, before)
    if thread is not None:
        thread.join()
    times = {}
    for shape in shapes:
        first = harness.make_inputs(index[shape["label"]], device)
        copies = [first] + [harness_mod.in_own_pages(first) for _ in range(int(shape.get("placements") or 1) - 1)]
        turn = itertools.cycle(copies)

        def fn(turn=turn):
            return harness.call(next(turn))

        got, _, _ = bench(fn, preset, not interpreter, _Originals, shape.get("timer") == "span")
        times[shape["label"]] = STATS[preset["stat"]](got)
    print(json.dumps({"times": times, "compile": compiled, "fallback_tuned": [
        {"kernel": c["kernel"], "key": c["key"]} for c in tuned]}))


# -- the sweep ----------------------------------------------------------------------------------------------
def handed_back(db: str, bench: int | None) -> list[dict]:
    """The runs whose handed-back module had an autotuner in play, with what their summaries printed."""
    from kernelband.store import Store

    store = Store(db)
    found = []
    for run in store.runs(bench):
        summary = run.summary or {}
        handback = summary.get("handback") or {}
        if run.status != "done" or handback.get("form") not in ("pinned", "autotuned"):
            continue
        found.append({"run": run.id, "task": run.task, "preset": run.config.get("preset", "default"),
                      "file": summary.get("best_path", ""), "form": handback["form"],
                      "reason": handback.get("reason"), "shapes": [s for s in handback.get("shapes", [])
                                                                   if s.get("ms")]})
    return found


def _last_frame(stderr: str) -> str:
    """A child's traceback cut to its innermost frame and the exception: where it failed, and what."""
    lines = stderr.strip().splitlines()
    frames = [i for i, line in enumerate(lines) if line.lstrip().startswith('File "')]
    return " | ".join(line.strip() for line in lines[frames[-1]:]) if frames else (lines[-1] if lines else "")


def repeat(run: dict, processes: int, tritonbench: str | None, backend: str, mode: str | None,
           timeout: float) -> dict:
    command = [sys.executable, __file__, "--child", "--task", run["task"], "--file", run["file"],
               "--preset", run["preset"], "--shapes", json.dumps(run["shapes"]), "--compile-backend", backend]
    command += ["--tritonbench", tritonbench] if tritonbench else []
    command += ["--compile-mode", mode] if mode else []
    env = {**os.environ, "TORCHINDUCTOR_FORCE_DISABLE_CACHES": "1"}
    per_process, errors, compiles = [], [], []
    for _ in range(processes):
        proc = subprocess.run(command, capture_output=True, text=True, timeout=timeout, env=env)
        lines = [line for line in proc.stdout.splitlines() if line.startswith("{")]
        if proc.returncode != 0 or not lines:
            errors.append(_last_frame(proc.stderr) or f"exit {proc.returncode}")
            continue
        reply = json.loads(lines[-1])
        per_process.append(reply["times"])
        compiles.append(reply["compile"])
    shapes = []
    for shape in run["shapes"]:
        got = [p[shape["label"]] for p in per_process if shape["label"] in p]
        median = statistics.median(got) if got else None
        ratio = median / shape["ms"] if median is not None else None
        shapes.append({"label": shape["label"], "held_out": shape.get("held_out", False), "summary_ms": shape["ms"],
                       "median_ms": median, "ratio": ratio, "times_ms": got})
    worst = max((s for s in shapes if s["ratio"] is not None), key=lambda s: abs(s["ratio"] - 1), default=None)
    return {**{k: run[k] for k in ("run", "task", "form", "reason", "file")}, "processes": len(per_process),
            "errors": errors, "compile": compiles, "shapes": shapes, "worst": worst}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--db", help="the sweep's run database")
    parser.add_argument("--bench", type=int, help="only this bench's runs")
    parser.add_argument("--tritonbench", help="the TritonBench-G JSON, for tritonbench: tasks")
    parser.add_argument("--processes", type=int, default=PROCESSES)
    parser.add_argument("--tolerance", type=float, default=TOLERANCE)
    parser.add_argument("--compile-backend", default="inductor", help="torch.compile's backend (none: no compile)")
    parser.add_argument("--compile-mode", help="torch.compile's mode (Inductor's: default, max-autotune, ...)")
    parser.add_argument("--runs", help="only these runs (ids, comma-separated): a sweep's runs over several calls")
    parser.add_argument("--timeout", type=float, default=600.0, help="seconds one process may take")
    parser.add_argument("--json", help="write the results here")
    parser.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--task", help=argparse.SUPPRESS)
    parser.add_argument("--file", help=argparse.SUPPRESS)
    parser.add_argument("--preset", default="default", help=argparse.SUPPRESS)
    parser.add_argument("--shapes", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        child(args)
        return 0
    if not args.db or not Path(args.db).is_file():
        print(f"error: no run database at {args.db!r}: pass --db PATH", file=sys.stderr)
        return 2
    runs = handed_back(args.db, args.bench)
    if args.runs:
        wanted = {int(x) for x in args.runs.split(",") if x.strip()}
        runs = [r for r in runs if r["run"] in wanted]
    results = []
    for run in runs:
        if not Path(run["file"]).is_file():
            results.append({**run, "errors": [f"no file at {run['file']}"], "shapes": [], "worst": None})
            continue
        result = repeat(run, args.processes, args.tritonbench, args.compile_backend, args.compile_mode, args.timeout)
        results.append(result)
        if args.json:  # as it goes: a call cut short keeps the runs done
            Path(args.json).write_text(json.dumps({"tolerance": args.tolerance, "runs": results}, indent=1))
        for s in result["shapes"]:
            mark = "ok" if s["ratio"] is not None and abs(s["ratio"] - 1) <= args.tolerance else "OFF"
            median = f"{s['median_ms']:.4f}" if s["median_ms"] is not None else "-"
            print(f"run {result['run']} {result['task']} ({result['form']}) {s['label']}: summary "
                  f"{s['summary_ms']:.4f} ms, median of {result['processes']} processes {median} ms  {mark}",
                  flush=True)
        for error in result["errors"]:
            print(f"run {result['run']} {result['task']}: a process failed: {error}")
    ratios = [(r, s) for r in results for s in r["shapes"] if s["ratio"] is not None]
    failed = [x for x in ratios if abs(x[1]["ratio"] - 1) > args.tolerance] or [r for r in results if r["errors"]]
    worst = max(ratios, key=lambda x: abs(x[1]["ratio"] - 1), default=None)
    if worst is not None:
        r, s = worst
        print(f"worst shape: run {r['run']} {r['task']} {s['label']}: {s['median_ms']:.4f} ms against the "
              f"summary's {s['summary_ms']:.4f} ms ({s['ratio'] - 1:+.1%})")
    print(f"{len(results)} handed-back modules with an autotuner in play; {len(ratios)} shapes; "
          f"{'all within' if not failed else 'NOT all within'} {args.tolerance:.0%}")
    if args.json:
        Path(args.json).write_text(json.dumps({"tolerance": args.tolerance, "runs": results}, indent=1))
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
