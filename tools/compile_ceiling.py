"""How far above torch.compile a task's best kernel could go at most: the speed-of-light ceiling of a bench.

For each finished run with a torch.compile baseline, the module it handed back (else its best candidate's search
evaluation), over the search shapes that have the candidate's time, torch.compile's time and the speed-of-light
bound (evaluation/sol.py: max(bytes / bandwidth, FLOPs / peak, launch floor)):

    now      sum(compile ms) / sum(candidate ms): the run's runtime-weighted speedup over torch.compile
    ceiling  sum(compile ms) / sum(bound ms): the same speedup for a kernel at the bound on every shape
    at F     sum(compile ms) / sum(bound ms / F): for a kernel at a fraction F of the bound on every shape

The geometric means over the tasks are what a goal such as "1.1x torch.compile in geometric mean" can be held
against: a task whose compiled kernel already runs near the bound has nothing left to win, however good the
rewrite.

    python tools/compile_ceiling.py docs/results/reach/h200/ex.db docs/results/reach/h200/l12.db [--at 0.9] [--json]

Several databases are read as one table; a task met in more than one keeps its last run (the order given).
"""

from __future__ import annotations

import argparse
import json
import math
import sqlite3
import sys
from pathlib import Path

from kernelband.errors import UserError, run_script
from kernelband.evaluation.records import EvalResult
from kernelband.store import Store


def _geomean(values: list[float]) -> float | None:
    return math.exp(sum(map(math.log, values)) / len(values)) if values else None


def _shapes(result: EvalResult) -> list:
    """The search shapes with the candidate's time, torch.compile's and the bound."""
    return [s for s in result.shapes if not s.held_out and s.cand_ms and s.compiled_ms and s.bound_ms]


def tasks(paths: list[str]) -> dict[str, dict]:
    """Per task: the compile, candidate and bound times summed over its shapes (ms), and how many shapes."""
    out: dict[str, dict] = {}
    for path in paths:
        if not Path(path).is_file():
            raise UserError(f"no database at {path}")
        store = Store(path, read_only=True)
        try:
            runs = store.runs()
        except sqlite3.DatabaseError as exc:
            raise UserError(f"{path} is not a KernelBand run database ({exc})") from None
        for run in runs:
            best = (run.summary or {}).get("best_candidate") if run.status == "done" else None
            if best is None:
                continue
            # the module the run handed back, else its best candidate as the search measured it
            result = store.evaluation(run.id, best, "handed_back") or store.evaluation(run.id, best, "search")
            shapes = _shapes(result) if result is not None else []
            if shapes:
                out[run.task] = {"compile_ms": sum(s.compiled_ms for s in shapes),
                                 "cand_ms": sum(s.cand_ms for s in shapes),
                                 "bound_ms": sum(s.bound_ms for s in shapes), "shapes": len(shapes)}
        store.close()
    return out


def table(found: dict[str, dict], at: list[float]) -> dict:
    """Each task's speedup over torch.compile now, at the bound, and at each fraction in `at`; their geomeans."""
    rows = []
    for task, t in sorted(found.items(), key=lambda kv: kv[1]["compile_ms"] / kv[1]["bound_ms"]):
        rows.append({"task": task, "shapes": t["shapes"], "now": t["compile_ms"] / t["cand_ms"],
                     "ceiling": t["compile_ms"] / t["bound_ms"],
                     **{f"at {f:g}": t["compile_ms"] * f / t["bound_ms"] for f in at}})
    columns = ["now", "ceiling", *(f"at {f:g}" for f in at)]
    return {"rows": rows, "geomean": {c: _geomean([r[c] for r in rows]) for c in columns}, "tasks": len(rows)}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("databases", nargs="+", help="run databases (.db), read in order")
    ap.add_argument("--at", type=float, action="append", default=[],
                    help="also the speedup at this fraction of the bound on every shape (repeatable)")
    ap.add_argument("--json", action="store_true", help="print the table as JSON")
    args = ap.parse_args()
    if any(not 0 < f <= 1 for f in args.at):
        raise UserError("--at takes fractions of the bound above 0 and at most 1")
    result = table(tasks(args.databases), args.at or [0.9])
    if args.json:
        print(json.dumps(result, indent=1))
        return 0
    if not result["rows"]:
        print("no finished run with a torch.compile baseline and speed-of-light bounds")
        return 0
    columns = list(result["geomean"])
    print("| task | shapes | " + " | ".join(f"{c} (x torch.compile)" for c in columns) + " |")
    print("| --- | ---: | " + " | ".join("---:" for _ in columns) + " |")
    for r in result["rows"]:
        print(f"| {r['task']} | {r['shapes']} | " + " | ".join(f"{r[c]:.2f}" for c in columns) + " |")
    print(f"| geometric mean, {result['tasks']} tasks | | "
          + " | ".join(f"**{result['geomean'][c]:.3f}**" for c in columns) + " |")
    return 0


if __name__ == "__main__":
    sys.exit(run_script(main))
