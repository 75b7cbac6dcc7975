"""The run-database commands: `kernelband runs` (list), `merge` (copy a bench in) and `quarantine` (set aside a
window's measurements)."""

from __future__ import annotations

import json
from pathlib import Path

import typer
from rich.table import Table

from kernelband.cli.app import Command, app, fail, flag, fmt, out, run_store
from kernelband.errors import UserError
from kernelband.store import DEFAULT_DB


@app.command("runs", cls=Command)
def runs_cmd(
    db: Path = typer.Option(Path(DEFAULT_DB), "--db", help="the run database"),
    as_json: bool = flag("--json"),
) -> None:
    """List the runs in a run database."""
    from kernelband.store import Store

    if not db.exists():
        fail(f"no run database at {db}; `kernelband optimize` creates it (or pass --db)")
    try:
        rows = Store(db, read_only=True).runs()  # a database on read-only media can be listed
    except UserError as exc:
        fail(str(exc))
    if as_json:
        print(json.dumps([r.to_dict() for r in rows], default=str))
        return
    table = Table(title=f"{db}: {len(rows)} runs", title_justify="left")
    for col in ("run", "task", "policy", "proposer", "seed", "status", "best", "evals", "device"):
        table.add_column(col)
    for r in rows:
        s = r.summary or {}
        status = f"{r.status}: {r.reason}" if r.reason else r.status  # why a failed run ended
        table.add_row(str(r.id), r.task, r.policy, r.proposer, str(r.seed), status,
                      fmt(s.get("best_speedup"), ".3f"), fmt(s.get("evaluations"), "d"), r.device)
    out.print(table)


@app.command("merge", cls=Command)
def merge_cmd(
    source: Path = typer.Argument(..., help="the run database to copy from"),
    bench: int = typer.Argument(..., help="the bench in SOURCE to copy"),
    db: Path = typer.Option(Path(DEFAULT_DB), "--db", help="the run database to copy into"),
    into: int | None = typer.Option(None, "--into", help="join this bench of --db (default: a new bench)"),
) -> None:
    """Copy a bench from another run database (a sweep split over machines or sessions) into --db."""
    try:
        with run_store(db) as store:
            target, copied = store.merge_bench(source, bench, into)
        store.close()
    except UserError as exc:
        fail(str(exc))
    out.print(f"bench {bench} of {source}: {copied} runs copied into bench {target} of {db}", highlight=False)


@app.command("quarantine", cls=Command)
def quarantine_cmd(
    bench: int = typer.Option(..., "--bench", help="the bench to keep clean"),
    since: str = typer.Option(..., "--since", help="the window's start, UTC (2026-11-25T11:08:31)"),
    until: str | None = typer.Option(None, "--until", help="the window's end, UTC (default: now)"),
    reason: str = typer.Option(..., "--reason", help="why, kept in the quarantined bench's config"),
    db: Path = typer.Option(Path(DEFAULT_DB), "--db", help="the run database"),
) -> None:
    """Set aside a bench's measurements from a window when the GPU was not the bench's alone (times in UTC).

    Its runs with an evaluation in the window move, whole, to a new bench of status `quarantined`, a bench
    created in the window is quarantined too, and golden baselines measured in it are dropped, so that
    resuming the bench measures all of that again. Nothing is deleted but the cached baselines."""
    from kernelband.store import Store, utc_seconds

    if not db.is_file():
        fail(f"no database at {db} (unpack docs/results/bench.db.xz with `xz -dk`)")
    try:
        window = utc_seconds(since), utc_seconds(until) if until else None
        store = Store(db)
        try:
            done = store.quarantine(bench, *window, reason)
        finally:
            store.close()
    except UserError as exc:
        fail(str(exc))
    out.print(f"bench {done['bench']} (quarantined) holds the {len(done['runs'])} runs of bench {bench} with an "
              f"evaluation in the window: {', '.join(map(str, done['runs'])) or 'none'}", highlight=False)
    out.print(f"benches created in the window, quarantined: {', '.join(map(str, done['benches'])) or 'none'}",
              highlight=False)
    out.print(f"golden baselines measured in the window, dropped: {done['baselines']}", highlight=False)

