"""What `kernelband capture` costs a program and what it finds: examples/tiny_lm's steps run plain and under
capture, alternately, `--repeats` times each after one warm-up run of each (Triton's compile cache warm); on a
GPU also with bare launch hooks (Triton's launch path with hooks set, none of the capture's work).

The program's wall time is measured the same way in all: from the start to the end of `runpy.run_path` of the
script (imports included, the interpreter's start-up not), in the capture by its own record (`wall_s`); the
capture's overhead is the median captured time over the median plain time, less one. It is reported in parts:

* hooks: the capture's own hooks by their clock, apart for the launches that brought a new signature (each
  described once) and per launch for the others (what every launch pays);
* outside the hooks: captured less plain less hooks, per repeat (compare it with the plain runs' spread);
* finishing (reading back times and statistics, keeping tensors), after the program;
* the command: the program's process start to end (start-up and imports, the run, finishing), writing the
  tasks, and the rest (KernelBand's own start-up).

Beside them the tasks written; with `--eval`, each task's `kernelband eval` outcome.

    python benchmarks/capture_overhead.py                       # CPU: the interpreter, the program's small sizes
    python benchmarks/capture_overhead.py --steps 30 --batch 8 --scale 32 --dim 1024 --vocab 16384 --eval \\
        --out capture_overhead.json                            # GPU
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from kernelband.errors import UserError, run_script

ROOT = Path(__file__).resolve().parents[1]
STEP = ROOT / "examples" / "tiny_lm" / "step.py"
# The plain run, timed as the capture's child times the program (kernelband/capture/boot.py): the same
# modules imported and the same device query made before the clock starts, the recorder among them (but not
# installed). With KERNELBAND_BENCH_BARE set, launch hooks that do nothing are set (Triton's path with hooks).
PLAIN = """
import os, runpy, sys, time
import torch
from kernelband.evaluation.env import detect_mode
detect_mode()
import triton
import kernelband.capture.record
if os.environ.get("KERNELBAND_BENCH_BARE"):
    triton.knobs.runtime.launch_enter_hook.add(lambda metadata: metadata.get())
    triton.knobs.runtime.launch_exit_hook.add(lambda metadata: None)
script = sys.argv[1]
sys.path[0] = os.path.dirname(os.path.abspath(script))
sys.argv = sys.argv[1:]
t0 = time.perf_counter()
runpy.run_path(script, run_name="__main__")
open(os.environ["KERNELBAND_BENCH_WALL"], "w").write(str(time.perf_counter() - t0))
"""


def _env() -> dict[str, str]:
    from kernelband.evaluation.env import detect_mode

    env = dict(os.environ)
    if detect_mode() == "interpreter":
        env.setdefault("TRITON_INTERPRET", "1")
    return env


def plain(program: list[str], bare: bool = False) -> float:
    with tempfile.NamedTemporaryFile(suffix=".wall") as wall:
        env = {**_env(), "KERNELBAND_BENCH_WALL": wall.name}
        if bare:
            env["KERNELBAND_BENCH_BARE"] = "1"
        proc = subprocess.run([sys.executable, "-c", PLAIN, *program], env=env, capture_output=True, text=True)
        if proc.returncode != 0:
            raise UserError(f"the plain run failed: {proc.stderr.strip().splitlines()[-1:]}")
        return float(Path(wall.name).read_text())


def captured(program: list[str], out: Path) -> tuple[dict, float]:
    t0 = time.perf_counter()
    proc = subprocess.run([sys.executable, "-m", "kernelband", "capture", "--out", str(out), "--json", "--",
                           "python", *program], env=_env(), capture_output=True, text=True)
    if proc.returncode != 0:
        raise UserError(f"the capture failed: {proc.stderr.strip().splitlines()[-1:]}")
    return json.loads(proc.stdout), time.perf_counter() - t0


def evaluate(task: str) -> dict:
    proc = subprocess.run([sys.executable, "-m", "kernelband", "eval", task, "--no-baselines", "--no-ncu",
                           "--json"], env=_env(), capture_output=True, text=True)
    try:
        result = json.loads(proc.stdout)
    except json.JSONDecodeError:
        return {"task": task, "outcome": "error", "detail": proc.stderr.strip().splitlines()[-1:]}
    return {"task": task, "outcome": result["outcome"], "shapes": len(result["shapes"]),
            "speedup": result.get("speedup"), "detail": result.get("detail", "")}


def _median(values: list) -> float | None:
    return statistics.median(values) if values else None


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--steps", type=int, default=3)
    ap.add_argument("--batch", type=int, default=2)
    ap.add_argument("--scale", type=int, default=1)
    ap.add_argument("--dim", type=int, default=64)
    ap.add_argument("--vocab", type=int, default=128)
    ap.add_argument("--eval", action="store_true", help="evaluate each task written (kernelband eval)")
    ap.add_argument("--out", default="capture_overhead.json")
    args = ap.parse_args()
    program = [str(STEP), "--steps", str(args.steps), "--batch", str(args.batch), "--scale", str(args.scale),
               "--dim", str(args.dim), "--vocab", str(args.vocab)]
    tasks_dir = Path(tempfile.mkdtemp(prefix="capture-tasks-"))
    plain(program)
    first, _ = captured(program, tasks_dir)  # warm-up of both: compile caches, file caches
    bare = first["mode"] == "gpu"  # the interpreter has no launch hooks
    plain_s, bare_s, captured_s, command_s, reports = [], [], [], [], []
    for i in range(args.repeats):
        plain_s.append(plain(program))
        if bare:
            bare_s.append(plain(program, bare=True))
        report, seconds = captured(program, tasks_dir)
        captured_s.append(report["wall_s"])
        command_s.append(seconds)
        reports.append(report)
        print(f"repeat {i}: plain {plain_s[-1]:.3f} s" + (f", bare hooks {bare_s[-1]:.3f} s" if bare else "")
              + f", captured {captured_s[-1]:.3f} s (hooks {report['hooks_s'] * 1e3:.1f} ms: "
              f"{report['hooks_new_s'] * 1e3:.1f} ms on {report['new_launches']} new, "
              f"{report['us_per_seen_launch']:.1f} us per other launch; outside the hooks "
              f"{captured_s[-1] - plain_s[-1] - report['hooks_s']:+.3f} s), finish {report['finish_s']:.3f} s, "
              f"command {seconds:.1f} s (program's process {report['child_s']:.1f} s, writing "
              f"{report['write_s']:.2f} s)", flush=True)
    last = reports[-1]
    outside = [c - p - r["hooks_s"] for c, p, r in zip(captured_s, plain_s, reports)]
    row = {
        "program": ["python", *program], "device": last["device"], "mode": last["mode"],
        "repeats": args.repeats, "launches": last["launches"],
        "plain_s": plain_s, "bare_hooks_s": bare_s, "captured_s": captured_s, "capture_command_s": command_s,
        "plain_median_s": statistics.median(plain_s), "bare_hooks_median_s": _median(bare_s),
        "captured_median_s": statistics.median(captured_s),
        "overhead": statistics.median(captured_s) / statistics.median(plain_s) - 1,
        "plain_spread_s": max(plain_s) - min(plain_s),
        "hooks_s": [r["hooks_s"] for r in reports], "us_per_launch": [r["us_per_launch"] for r in reports],
        "new_launches": [r["new_launches"] for r in reports], "hooks_new_s": [r["hooks_new_s"] for r in reports],
        "us_per_seen_launch": [r["us_per_seen_launch"] for r in reports],
        "outside_hooks_s": outside,
        "finish_s": [r["finish_s"] for r in reports],
        "child_s": [r["child_s"] for r in reports], "write_s": [r["write_s"] for r in reports],
        "tasks": [{k: t[k] for k in ("path", "entry", "kernel", "share", "seen", "added", "held_out")}
                  for t in last["tasks"]],
        "kernels": [{k: r[k] for k in ("kernel", "entry", "launches", "time_ms", "share")} for r in last["kernels"]],
    }
    if args.eval:
        row["evals"] = [evaluate(str(tasks_dir / Path(t["path"]).name)) for t in last["tasks"]]
        for e in row["evals"]:
            print(f"eval {Path(e['task']).name}: {e['outcome']}", flush=True)
    n = args.repeats
    print(f"{row['device']}: plain {row['plain_median_s']:.3f} s (spread {row['plain_spread_s']:.3f} s), "
          + (f"bare hooks {row['bare_hooks_median_s']:.3f} s, " if bare else "")
          + f"captured {row['captured_median_s']:.3f} s (medians of {n}): overhead {100 * row['overhead']:+.1f}% "
          f"over {row['launches']} launches")
    print(f"  hooks {1e3 * statistics.median(row['hooks_s']):.1f} ms: "
          f"{1e3 * statistics.median(row['hooks_new_s']):.1f} ms on {statistics.median(row['new_launches']):.0f} "
          f"launches with a new signature, {statistics.median(row['us_per_seen_launch']):.1f} us per other launch; "
          f"outside the hooks {statistics.median(outside):+.3f} s; finishing {statistics.median(row['finish_s']):.3f} s")
    print(f"  command {statistics.median(command_s):.1f} s: the program's process "
          f"{statistics.median(row['child_s']):.1f} s, writing the tasks {statistics.median(row['write_s']):.2f} s, "
          f"the rest (KernelBand's start-up) "
          f"{statistics.median(c - r['child_s'] - r['write_s'] for c, r in zip(command_s, reports)):.1f} s")
    for t in row["tasks"]:
        print(f"  {100 * t['share']:5.1f}%  {t['path']}  ({t['entry']}{', wraps ' + t['kernel'] if t['kernel'] else ''}; "
              f"{t['seen']} seen + {t['added']} added shapes, {t['held_out']} held out)")
    Path(args.out).write_text(json.dumps(row, indent=1))
    print(f"written to {args.out}; tasks in {tasks_dir}")


if __name__ == "__main__":
    run_script(main)
