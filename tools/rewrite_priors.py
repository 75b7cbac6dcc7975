"""The rewriter's priors, counted from a run database (`kernelband.proposers.rewriter.priors`): per family of variants,
and per family and load of the parent (light, mid or heavy threads), how many children of the built-in
rewriter were evaluated and how many came out more than 5 % faster than their parent on the search shapes.
A child that failed counts as a miss. The tables show the priors these counts give beside the ones the
package has now; `--write` stores the counts as the package's `priors.json`.

    python tools/rewrite_priors.py bench.db [--bench 1 --bench 2] [--win 1.05] [--split train] [--write PATH]

`--split train` counts the train tasks of the fixed split only (kernelband.tasks.split), so that the priors
are not fitted on the test tasks the policies are compared on.

CPU only: it reads the database, nothing runs.
"""

from __future__ import annotations

import argparse
import json
import sqlite3
from collections import Counter
from datetime import datetime, timezone
from pathlib import Path

from kernelband.errors import UserError, run_script
from kernelband.proposers.rewriter.priors import FILE, LOADS, family, load_class, prior
from kernelband.tasks.split import SPLITS, side


def count(db: str, benches: list[int] | None, win: float, split: str | None = None) -> dict:
    """{"families": {family: [children, won]}, "by_load": {"family|load": [children, won]}, "devices": [GPU
    models of the runs counted], "tasks": [the tasks counted]}."""
    if not Path(db).is_file():
        raise UserError(f"no database at {db} (unpack docs/results/bench.db.xz with `xz -dk`)")
    con = sqlite3.connect(f"file:{db}?mode=ro", uri=True)
    query = """
        SELECT c.run_id, c.parent, c.rationale, e.outcome, e.speedup, p.speedup, p.result, r.task, r.device
        FROM candidates c
        JOIN runs r ON r.id = c.run_id
        JOIN evaluations e ON e.run_id = c.run_id AND e.candidate = c.id AND e.which = 'search'
        JOIN evaluations p ON p.run_id = c.run_id AND p.candidate = c.parent AND p.which = 'search'
        WHERE c.id > 0 AND r.proposer = 'rewrite' AND p.outcome = 'ok' AND p.speedup > 0"""
    params: list[int] = []
    if benches:
        query += f" AND r.bench_id IN ({', '.join('?' * len(benches))})"
        params = benches
    try:
        rows = con.execute(query, params).fetchall()
    except sqlite3.DatabaseError as exc:
        raise UserError(f"{db} is not a KernelBand run database ({exc}); a .xz file unpacks with `xz -dk`") from None
    children, won = Counter(), Counter()
    devices, tasks = set(), set()
    loads: dict[tuple[int, int], str | None] = {}  # a parent's load, its result parsed once for all its children
    for run, parent_id, rationale, outcome, speedup, parent, parent_result, task, device in rows:
        if split is not None and side(task) != split:
            continue
        devices.add(device)
        tasks.add(task)
        rewrite, _, rest = rationale.partition(": ")
        kind = family(rewrite, rest)
        if (run, parent_id) not in loads:
            loads[run, parent_id] = load_class(json.loads(parent_result).get("features", {}).get("compile"))
        load = loads[run, parent_id]
        hit = outcome == "ok" and speedup is not None and speedup > win * parent
        for key in (kind, f"{kind}|{load}") if load else (kind,):
            children[key] += 1
            won[key] += hit
    counts: dict = {"families": {}, "by_load": {}}
    for key in sorted(children):
        counts["by_load" if "|" in key else "families"][key] = [children[key], won[key]]
    return {**counts, "devices": sorted(devices), "tasks": sorted(tasks)}


PROVENANCE = ("counted", "date", "split", "devices", "tasks")


def _dump(counts: dict) -> str:
    """JSON with one line per count, so that a diff shows which counts moved; where the counts come from first."""
    def table(name: str) -> str:
        rows = [f"  {json.dumps(k)}: {json.dumps(v)}" for k, v in counts[name].items()]
        return f' "{name}": {{\n' + ",\n".join(rows) + "\n }"
    head = "".join(f' "{key}": {json.dumps(counts[key])},\n' for key in PROVENANCE if key in counts)
    return "{\n" + head + table("families") + ",\n" + table("by_load") + "\n}\n"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("db")
    ap.add_argument("--bench", type=int, action="append", help="only these benches' runs (repeatable)")
    ap.add_argument("--win", type=float, default=1.05, help="a child wins above this times its parent's speedup")
    ap.add_argument("--split", choices=SPLITS, help="only the tasks of this side of the fixed split")
    ap.add_argument("--write", type=Path, help=f"store the counts here (the package's: {FILE})")
    args = ap.parse_args()
    counts = count(args.db, args.bench, args.win, args.split)
    print("| family | children | won | prior | light | mid | heavy | package now (any, light, mid, heavy) |")
    print("| --- | --- | --- | --- | --- | --- | --- | --- |")
    for kind, (n, won) in sorted(counts["families"].items(), key=lambda kv: -prior(kv[0], counts=counts)):
        cells = []
        for load in LOADS:
            n_load, won_load = counts["by_load"].get(f"{kind}|{load}", (0, 0))
            cells.append(f"{won_load}/{n_load}: {prior(kind, load, counts):.2f}" if n_load else "-")
        now = ", ".join(f"{prior(kind, load):.2f}" for load in (None, *LOADS))
        print(f"| {kind} | {n} | {won} | {prior(kind, counts=counts):.3f} | {' | '.join(cells)} | {now} |")
    total = sum(n for n, _ in counts["families"].values())
    print(f"\n{total} children, {sum(w for _, w in counts['families'].values())} won")
    print(f"{len(counts['tasks'])} tasks ({args.split or 'both sides of the split'}) on {', '.join(counts['devices'])}")
    if args.write:
        counts = {"counted": f"tools/rewrite_priors.py {Path(args.db).name}"
                             + "".join(f" --bench {b}" for b in args.bench or []) + f" --win {args.win}"
                             + (f" --split {args.split}" if args.split else ""),
                  "date": datetime.now(timezone.utc).strftime("%Y-%m-%d"), "split": args.split or "all",
                  **counts}
        args.write.write_text(_dump(counts))
        print(f"wrote {args.write}")


if __name__ == "__main__":
    run_script(main)
