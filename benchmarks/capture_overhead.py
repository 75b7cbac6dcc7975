"""What `kernelband capture` costs a program and what it finds: examples/tiny_lm's steps run plain and under
capture, alternately, `--repeats` times each after one warm-up run of each (Triton's compile cache warm).

The program's wall time is measured the same way in both: from the start to the end of `runpy.run_path` of
the script (imports included, the interpreter's start-up not), in the capture by its own record (`wall_s`);
the capture's overhead is the median captured time over the median plain time, less one. Beside it: the time
the hooks took per launch (their own clock), the capture's finishing time (reading back and keeping tensors),
its whole command's time, and the tasks it wrote; with `--eval`, each task's `kernelband eval` outcome.

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
# modules imported before the clock starts, the recorder among them (but not installed).
PLAIN = """
import os, runpy, sys, time
import torch, triton
import kernelband.capture.record
script = sys.argv[1]
sys.path[0] = os.path.dirname(os.path.abspath(script))
sys.argv = sys.argv[1:]
t0 = time.perf_counter()
runpy.run_path(script, run_name="__main__")
open(os.environ["KERNELBAND_BENCH_WALL"], "w").write(str(time.perf_counter() - t0))
"""


def _env() -> dict[str, str]:
    from kernelband.evaluation.evaluator import detect_mode

    env = dict(os.environ)
    if detect_mode() == "interpreter":
        env.setdefault("TRITON_INTERPRET", "1")
    return env


def plain(program: list[str]) -> float:
    with tempfile.NamedTemporaryFile(suffix=".wall") as wall:
        env = {**_env(), "KERNELBAND_BENCH_WALL": wall.name}
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


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeats", type=int, default=3)
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
    captured(program, tasks_dir)  # warm-up of both: compile caches, file caches
    plain_s, captured_s, command_s, reports = [], [], [], []
    for i in range(args.repeats):
        plain_s.append(plain(program))
        report, seconds = captured(program, tasks_dir)
        captured_s.append(report["wall_s"])
        command_s.append(seconds)
        reports.append(report)
        print(f"repeat {i}: plain {plain_s[-1]:.3f} s, captured {captured_s[-1]:.3f} s "
              f"(hooks {report['hooks_s'] * 1e3:.1f} ms, {report['us_per_launch']:.1f} us/launch), "
              f"capture command {seconds:.1f} s", flush=True)
    last = reports[-1]
    row = {
        "program": ["python", *program], "device": last["device"], "mode": last["mode"],
        "repeats": args.repeats, "launches": last["launches"],
        "plain_s": plain_s, "captured_s": captured_s, "capture_command_s": command_s,
        "plain_median_s": statistics.median(plain_s), "captured_median_s": statistics.median(captured_s),
        "overhead": statistics.median(captured_s) / statistics.median(plain_s) - 1,
        "hooks_s": [r["hooks_s"] for r in reports], "us_per_launch": [r["us_per_launch"] for r in reports],
        "finish_s": [r["finish_s"] for r in reports],
        "tasks": [{k: t[k] for k in ("path", "entry", "kernel", "share", "seen", "added", "held_out")}
                  for t in last["tasks"]],
        "kernels": [{k: r[k] for k in ("kernel", "entry", "launches", "time_ms", "share")} for r in last["kernels"]],
    }
    if args.eval:
        row["evals"] = [evaluate(str(tasks_dir / Path(t["path"]).name)) for t in last["tasks"]]
        for e in row["evals"]:
            print(f"eval {Path(e['task']).name}: {e['outcome']}", flush=True)
    print(f"{row['device']}: plain {row['plain_median_s']:.3f} s, captured {row['captured_median_s']:.3f} s "
          f"(median of {args.repeats}): overhead {100 * row['overhead']:+.1f}%, "
          f"{statistics.median(row['us_per_launch']):.1f} us per launch in the hooks over {row['launches']} launches")
    for t in row["tasks"]:
        print(f"  {100 * t['share']:5.1f}%  {t['path']}  ({t['entry']}{', wraps ' + t['kernel'] if t['kernel'] else ''}; "
              f"{t['seen']} seen + {t['added']} added shapes, {t['held_out']} held out)")
    Path(args.out).write_text(json.dumps(row, indent=1))
    print(f"written to {args.out}; tasks in {tasks_dir}")


if __name__ == "__main__":
    run_script(main)
