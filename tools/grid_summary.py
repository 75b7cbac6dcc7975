"""The exhaustive grid's results (`search_quality.py --parts grid`) as Markdown tables, from a session's files.

A grid run with a bench stores its rows with the bench, and `kernelband report bench:N --format markdown`
shows them beside the policies. This script is for the rows a session's files hold: `{"kind": "grid", ...}`
lines in the sweep's log, one as each task ends (a session cut off mid-grid has only these), or the `grid`
part of `quality<N>.json`, written when the process ends. A task's later row replaces an earlier one:

    python3 tools/grid_summary.py sweep.log quality1.json
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from kernelband.errors import UserError, run_script
from kernelband.report.markdown import table
from kernelband.report.metrics import grid_data
from kernelband.report.tables import grid_tables

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks"))  # search_quality.py reads the log
from search_quality import grid_rows  # noqa: E402


def render(rows: list[dict]) -> str:
    data = grid_data(rows, [])
    done = {r["task"] for r in (data or {}).get("rows", [])}
    lines = [table(t) for t in grid_tables(data)]
    left = [f"{r['task']}: {'not started (deadline)' if r.get('deferred') else 'error: ' + str(r.get('error'))}"
            for r in rows if r["task"] not in done]
    if left:
        lines.append("Not in the grid's figures: " + "; ".join(left) + ".")
    return "\n\n".join(lines)


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
    print(render([by_task[t] for t in sorted(by_task)]))


if __name__ == "__main__":
    run_script(main)
