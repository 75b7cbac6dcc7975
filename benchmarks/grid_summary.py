"""The exhaustive grid's results (`search_quality.py --parts grid`) as a Markdown table for BENCHMARKS.md.

The grid's rows reach the session's files two ways: `{"kind": "grid", ...}` lines in the sweep's log, one as
each task ends, and the `grid` part of `quality<N>.json`, written when the process ends. A session cut off
mid-grid has only the first, so this reads either, or both (a task's later row replaces an earlier one):

    python3 benchmarks/grid_summary.py sweep.log quality1.json
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from kernelband.errors import UserError, run_script

sys.path.insert(0, str(Path(__file__).resolve().parent))
from search_quality import FAST, grid_rows, summarise  # noqa: E402


def table(rows: list[dict]) -> str:
    def f(x) -> str:
        return "-" if x is None else f"{x:.2f}"

    out = ["| task | variants | evaluated anew | best searched | handed back | re-measured | held-out | noise floor "
           "| faster |", "| --- | --- | --- | --- | --- | --- | --- | --- | --- |"]
    for r in rows:
        name = r["task"].split(":", 1)[-1]
        if r.get("deferred") or r.get("error"):
            out.append(f"| {name} | {'not started (deadline)' if r.get('deferred') else 'error: ' + r['error']} "
                       "| | | | | | | |")
            continue
        back = "k0" if r.get("handed_back") is None else f"variant {r['handed_back']}"
        out.append(f"| {name} | {r['variants']} | {r['evaluations_made']} | {f(r['best_speedup'])} | {back} | "
                   f"{f(r.get('confirmed'))} | {f(r.get('held_out'))} | {f(r.get('noise_floor'))} | "
                   f"{'**yes**' if r.get('faster') else 'no'} |")
    done = [r for r in rows if not r.get("deferred") and not r.get("error")]
    if done:
        s = summarise(done)
        out.append("")
        out.append(f"{s['tasks']} tasks: geomean of the best searched {s['geomean_speedup']:.3f}x, Fast@1 "
                   f"(> {FAST}x) {100 * s['fast1']:.0f} %, best {s['best_speedup']:.2f}x, faster (the report's "
                   f"rule) {sum(bool(r.get('faster')) for r in done)} of {len(done)}; "
                   f"{sum(r['evaluations_made'] for r in done)} evaluations made.")
    return "\n".join(out)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("files", nargs="+", type=Path, help="sweep logs and/or quality<N>.json files")
    args = ap.parse_args()
    by_task: dict[str, dict] = {}
    for path in args.files:
        for row in grid_rows(path):
            by_task[row["task"]] = row
    if not by_task:
        raise UserError("no grid rows in " + ", ".join(map(str, args.files)) + ": give the sweep's log or its "
                        "quality<N>.json")
    print(table([by_task[t] for t in sorted(by_task)]))


if __name__ == "__main__":
    run_script(main)
