"""Where an evaluation's time goes: stage seconds and the parent's profile (GPU machine).

    python benchmarks/profile_eval.py add_value softmax_triton1
"""

from __future__ import annotations

import cProfile
import pstats
import sys
import time

from kernelband.errors import run_script
from kernelband.evaluation.evaluator import Evaluator
from kernelband.tasks import load_task


def main(names: list[str]) -> None:
    with Evaluator(warm=2) as ev:
        for name in names:
            task = load_task(f"tritonbench:{name}")
            t0 = time.perf_counter()
            r = ev.evaluate(task)
            print(f"{name}: cold {time.perf_counter() - t0:.1f}s {r.outcome.value} {r.seconds}", flush=True)
            prof = cProfile.Profile()
            t0 = time.perf_counter()
            prof.enable()
            r = ev.evaluate(task)
            prof.disable()
            print(f"{name}: warm {time.perf_counter() - t0:.1f}s {r.outcome.value} {r.seconds} "
                  f"shapes={len(r.shapes)} notes={r.notes}", flush=True)
            stats = pstats.Stats(prof)
            stats.sort_stats("cumulative").print_stats(25)


if __name__ == "__main__":
    run_script(main, sys.argv[1:])
