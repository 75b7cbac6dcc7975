"""The rewriter's priors, counted from a run database: per family of variants (`rewrites.family`), how many
children of the built-in rewriter were evaluated and how many came out more than 5 % faster than their
parent on the search shapes. A child that failed counts as a miss. The prior is (won + 1) / (children + 2),
the rule `rewrites.PRIOR` was filled in by; the table shows it beside the prior the code has now.

    python benchmarks/rewrite_priors.py bench.db [--bench 1 --bench 2] [--win 1.05]

CPU only: it reads the database, nothing runs.
"""

from __future__ import annotations

import argparse
import sqlite3
from collections import Counter
from pathlib import Path

from kernelband.errors import UserError, run_script
from kernelband.search.rewrites import PRIOR, UNKNOWN_PRIOR, family


def count(db: str, benches: list[int] | None, win: float) -> tuple[Counter, Counter]:
    """(children, won) per family."""
    if not Path(db).is_file():
        raise UserError(f"no database at {db} (unpack docs/results/bench.db.xz with `xz -dk`)")
    con = sqlite3.connect(f"file:{db}?mode=ro", uri=True)
    query = """
        SELECT c.rationale, e.outcome, e.speedup, p.speedup FROM candidates c
        JOIN runs r ON r.id = c.run_id
        JOIN evaluations e ON e.run_id = c.run_id AND e.candidate = c.id AND e.which = 'search'
        JOIN evaluations p ON p.run_id = c.run_id AND p.candidate = c.parent AND p.which = 'search'
        WHERE c.id > 0 AND r.proposer = 'rewrite' AND p.outcome = 'ok' AND p.speedup > 0"""
    params: list[int] = []
    if benches:
        query += f" AND r.bench_id IN ({', '.join('?' * len(benches))})"
        params = benches
    children, won = Counter(), Counter()
    for rationale, outcome, speedup, parent in con.execute(query, params):
        rewrite, _, rest = rationale.partition(": ")
        kind = family(rewrite, rest)
        children[kind] += 1
        won[kind] += outcome == "ok" and speedup is not None and speedup > win * parent
    return children, won


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("db")
    ap.add_argument("--bench", type=int, action="append", help="only these benches' runs (repeatable)")
    ap.add_argument("--win", type=float, default=1.05, help="a child wins above this times its parent's speedup")
    args = ap.parse_args()
    children, won = count(args.db, args.bench, args.win)
    print("| family | children | won | (won + 1) / (children + 2) | PRIOR now |")
    print("| --- | --- | --- | --- | --- |")
    for kind in sorted(children, key=lambda k: -(won[k] + 1) / (children[k] + 2)):
        print(f"| {kind} | {children[kind]} | {won[kind]} | {won[kind] + 1}/{children[kind] + 2} = "
              f"{(won[kind] + 1) / (children[kind] + 2):.3f} | {PRIOR.get(kind, UNKNOWN_PRIOR):.3f} |")
    print(f"\n{sum(children.values())} children, {sum(won.values())} won")


if __name__ == "__main__":
    run_script(main)
