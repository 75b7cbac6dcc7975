"""`kernelband knowledge`: what the knowledge store carries across kernels (knowledge.py)."""

from __future__ import annotations

import json
from pathlib import Path

import typer
from rich.table import Table

from kernelband.cli.app import Command, app, fail, fmt, out
from kernelband.errors import UserError
from kernelband.store import DEFAULT_DB


@app.command("knowledge", cls=Command)
def knowledge_cmd(
    db: Path = typer.Option(Path(DEFAULT_DB), "--db", help="the run database that holds the knowledge"),
    as_json: bool = typer.Option(False, "--json"),
) -> None:
    """Show what is known: examples per strategy, per GPU model and rules, and psi's accuracy on held-back
    examples."""
    from kernelband.knowledge import HELD_BACK, summary
    from kernelband.store import Store

    if not db.exists():
        fail(f"no run database at {db}; `kernelband optimize` creates it (or pass --db)")
    try:
        known = summary(Store(db))
    except UserError as exc:
        fail(str(exc))
    if as_json:
        print(json.dumps(known))
        return
    if not known["groups"]:
        out.print(f"{db}: no knowledge yet (runs add it as they learn)", highlight=False)
    for group in known["groups"]:
        used = "" if group["current_rules"] else " (other rules: not used)"
        table = Table(title=f"{group['gpu']}, rules {group['rules']}{used}: {group['examples']} examples; psi "
                            f"trained on the others, scored on a fixed {HELD_BACK:.0%} held back",
                      title_justify="left")
        for col in ("strategy", "examples", "faster", "held back", "psi accuracy", "majority accuracy"):
            table.add_column(col, justify="left" if col == "strategy" else "right")
        for name, row in group["strategies"].items():
            table.add_row(name, str(row["examples"]), str(row["faster"]), str(row["held_back"]),
                          fmt(row["psi_accuracy"], ".2f"), fmt(row["majority_accuracy"], ".2f"))
        out.print(table)
        for note in group["notes"]:
            out.print(note, highlight=False)
