"""`kernelband tasks`: the tasks of a suite."""

from __future__ import annotations

import json

import typer
from rich.table import Table

from kernelband.cli.app import Command, app, fail, flag, out
from kernelband.errors import UserError

SUITES = ("examples", "tritonbench-g", "tritonbench-g-l12")

@app.command("tasks", cls=Command)
def tasks_cmd(
    levels: list[str] | None = typer.Argument(None, hidden=True),
    suite: str = typer.Option("examples", "--suite", help=f"one of {', '.join(SUITES)}"),
    difficulty: list[int] | None = typer.Option(None, "--difficulty", help="TritonBench levels, e.g. 1 2"),
    as_json: bool = flag("--json"),
    tritonbench: str | None = typer.Option(None, "--tritonbench"),
    split: str | None = typer.Option(None, "--split", help="train or test: one side of the fixed split "
                                     "(kernelband.tasks.split)"),
) -> None:
    """List tasks."""
    from kernelband.tasks import example_names, load_task
    from kernelband.tasks import split as splits
    from kernelband.tasks import tritonbench as tb

    try:
        splits.check(split)
        wanted = set(difficulty or [])
        for extra in levels or []:  # `--difficulty 1 2`: the values after the first arrive here
            if not extra.isdigit() or not wanted:
                raise UserError(f"unexpected argument {extra!r}")
            wanted.add(int(extra))
        rows = []
        if suite == "examples":
            if wanted:
                raise UserError("--difficulty filters the TritonBench suites; the built-in examples have no level")
            for name in example_names():
                t = load_task(f"examples:{name}")
                rows.append({"ref": t.ref, "name": name, "difficulty": None, "description": t.description,
                             "added_loop_values": []})
        elif suite in ("tritonbench-g", "tritonbench-g-l12"):
            entries = tb.entries(tritonbench)
            names = tb.level12(tritonbench) if suite == "tritonbench-g-l12" else sorted(entries)
            present = {entries[n].difficulty for n in names} - {None}
            if missing := sorted(wanted - present):
                raise UserError(f"no level {', '.join(map(str, missing))} in {suite}: its levels are "
                                f"{', '.join(map(str, sorted(present)))}")
            for name in names:
                e = entries[name]
                if wanted and e.difficulty not in wanted:
                    continue
                rows.append({"ref": f"tritonbench:{name}", "name": name, "difficulty": e.difficulty,
                             "description": f"TritonBench-G level {e.difficulty}",
                             "added_loop_values": list(tb.EXTRA_LOOP_VALUES.get(name, ())),
                             "excluded_by_paper": name in tb.PAPER_EXCLUDED})
        else:
            raise UserError(f"unknown suite {suite!r}: use {', '.join(SUITES)}")
        for r in rows:
            r["split"] = splits.side(r["ref"])
        rows = [r for r in rows if split is None or r["split"] == split]
    except UserError as exc:
        fail(str(exc))
    if as_json:
        print(json.dumps(rows))
        return
    title = f"{suite}: {len(rows)} tasks" + (f" ({split} split)" if split else "")
    table = Table(title=title, title_justify="left")
    for col in ("task", "level", "split", "description"):
        table.add_column(col)
    for r in rows:
        table.add_row(r["ref"], "-" if r["difficulty"] is None else str(r["difficulty"]), r["split"],
                      r["description"])
    out.print(table)
