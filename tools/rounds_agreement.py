"""Do a timing's rounds agree? From a run database (no GPU needed):

    python3 tools/rounds_agreement.py sweep.db

For every `ok` search evaluation timed with two or more rounds, the runtime-weighted speedup from the
first round alone against the one from the second round alone. Prints each evaluation and the median
and p90 of |round 1 / round 2 - 1| (BENCHMARKS.md, run J: why `default` measures once per side).
"""

from __future__ import annotations

import json
import sqlite3
import statistics
import sys


def main() -> None:
    if len(sys.argv) != 2:
        raise SystemExit("usage: rounds_agreement.py RUN_DATABASE")
    db = sqlite3.connect(f"file:{sys.argv[1]}?mode=ro", uri=True)
    diffs = []
    rows = db.execute("SELECT run_id, candidate, result FROM evaluations WHERE outcome = 'ok' AND which = 'search' "
                      "ORDER BY created")
    for run_id, candidate, text in rows:
        result = json.loads(text)
        shapes = [s for s in result["shapes"] if len(s.get("ref_rounds") or []) >= 2 and len(s.get("cand_rounds") or []) >= 2]
        if not shapes:
            continue
        by_round = [sum(s["ref_rounds"][i] for s in shapes) / sum(s["cand_rounds"][i] for s in shapes) for i in (0, 1)]
        diffs.append(abs(by_round[0] / by_round[1] - 1))
        print(f"run {run_id} candidate {candidate} {result['task']}: {result['speedup']:.3f} "
              f"(round 1 {by_round[0]:.3f}, round 2 {by_round[1]:.3f})")
    if not diffs:
        raise SystemExit("no evaluation in this database was timed with two rounds")
    diffs.sort()
    print(f"{len(diffs)} evaluations: rounds differ by a median {100 * statistics.median(diffs):.2f} %, "
          f"p90 {100 * diffs[int(0.9 * len(diffs))]:.2f} %")


if __name__ == "__main__":
    main()
