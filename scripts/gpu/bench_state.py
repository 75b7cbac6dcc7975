"""Prints "ID STATUS" of the bench in a run database that matches a suite, split and knowledge option, or nothing:
how scripts/gpu/held_out_sweep.sh finds, in the part a session restored, which bench to resume and whether it
is done, with several benches in one database.

    python3 scripts/gpu/bench_state.py kernelband-runs/held_out/held.db tritonbench-g-l12 test ''

KNOWLEDGE is the bench's --knowledge as stored ('' for the run database, off). The latest matching bench
counts; a quarantined one is set aside, so it never matches.
"""

from __future__ import annotations

import json
import sqlite3
import sys
from pathlib import Path


def state(db: Path, suite: str, split: str, knowledge: str) -> str:
    if not db.is_file():
        return ""
    con = sqlite3.connect(f"file:{db}?mode=ro", uri=True)
    found = ""
    for bench, status, config in con.execute("SELECT id, status, config FROM benches ORDER BY id"):
        c = json.loads(config)
        if (status != "quarantined" and c.get("suite") == suite and c.get("split") == split
                and c.get("knowledge", "") == knowledge):
            found = f"{bench} {status}"
    return found


if __name__ == "__main__":
    if len(sys.argv) != 5:
        sys.exit(f"usage: {Path(sys.argv[0]).name} DB SUITE SPLIT KNOWLEDGE")
    print(state(Path(sys.argv[1]), *sys.argv[2:]))
