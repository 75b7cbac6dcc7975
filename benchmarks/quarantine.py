"""Set aside a bench's measurements from a window when the GPU was not the bench's alone (`Store.quarantine`):
its runs with an evaluation in the window move, whole, to a new bench of status `quarantined`, a bench
created in the window is quarantined too, and golden baselines measured in it are dropped, so that resuming
the bench measures all of that again. Nothing is deleted but the cached baselines.

    python benchmarks/quarantine.py bench.db --bench 3 --since 2026-11-25T11:08:31 [--until ...] --reason TEXT

CPU only: it edits the database, nothing runs. Times are UTC.
"""

from __future__ import annotations

import argparse
from pathlib import Path

from reference_drift import utc_seconds  # benchmarks/, this script's folder

from kernelband.errors import UserError, run_script
from kernelband.store import Store


def utc(text: str) -> float:
    try:
        return utc_seconds(text)
    except ValueError as exc:
        raise UserError(str(exc)) from None


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("db")
    ap.add_argument("--bench", type=int, required=True, help="the bench to keep clean")
    ap.add_argument("--since", required=True, help="the window's start, UTC (2026-11-25T11:08:31)")
    ap.add_argument("--until", default=None, help="the window's end, UTC (default: now)")
    ap.add_argument("--reason", required=True, help="why, kept in the quarantined bench's config")
    args = ap.parse_args()
    if not Path(args.db).is_file():
        raise UserError(f"no database at {args.db} (unpack docs/results/bench.db.xz with `xz -dk`)")
    since, until = utc(args.since), utc(args.until) if args.until else None
    store = Store(args.db)
    try:
        done = store.quarantine(args.bench, since, until, args.reason)
    finally:
        store.close()
    print(f"bench {done['bench']} (quarantined) holds the {len(done['runs'])} runs of bench {args.bench} with an "
          f"evaluation in the window: {', '.join(map(str, done['runs'])) or 'none'}")
    print(f"benches created in the window, quarantined: {', '.join(map(str, done['benches'])) or 'none'}")
    print(f"golden baselines measured in the window, dropped: {done['baselines']}")


if __name__ == "__main__":
    run_script(main)
