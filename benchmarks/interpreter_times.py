"""How long a TritonBench-G level-1/2 task takes to evaluate on a CPU, in the Triton interpreter.

Each task's starting kernel is evaluated as a candidate (the task's set-up included: its reference loaded
and validated), with the shapes KernelBand uses in interpreter mode. Runs anywhere; no GPU needed.

    python benchmarks/interpreter_times.py [--tasks a,b] [--out interpreter_times.json]
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

from kernelband.errors import run_script
from kernelband.evaluation.evaluator import Evaluator
from kernelband.tasks import load_task, tritonbench


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--tasks", default="", help="comma-separated; default: the 29 level-1/2 tasks")
    ap.add_argument("--out", default="interpreter_times.json")
    args = ap.parse_args()
    names = [n for n in args.tasks.split(",") if n] or tritonbench.level12()
    rows = []
    with Evaluator(mode="interpreter", warm=2) as ev:
        for name in names:
            t0 = time.perf_counter()
            try:
                result = ev.evaluate(load_task(f"tritonbench:{name}"))
                row = {"task": name, "seconds": time.perf_counter() - t0, "outcome": result.outcome.value,
                       "shapes": [s.label for s in result.shapes], "detail": result.detail}
            except Exception as exc:  # noqa: BLE001 - a task that cannot run here is a row
                row = {"task": name, "seconds": time.perf_counter() - t0, "outcome": "error", "detail": str(exc)}
            rows.append(row)
            print(f"{name:28s} {row['seconds']:6.1f}s {row['outcome']:10s} {', '.join(row.get('shapes', []))[:70]}",
                  flush=True)
            Path(args.out).write_text(json.dumps(rows, indent=1))


if __name__ == "__main__":
    run_script(main)
