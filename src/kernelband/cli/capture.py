"""`kernelband capture`: run a program unchanged, record its Triton launches and write the tasks of the entry
functions that took the most device time."""

from __future__ import annotations

import json
import re
import sys
from pathlib import Path

import typer
from rich.table import Table

from kernelband.cli.app import Command, app, fail, flag, fmt, out
from kernelband.errors import UserError

_SIZE = re.compile(r"^(\d+)\s*([kmg]i?b?)?$", re.IGNORECASE)


def parse_bytes(text: str) -> int:
    """`16777216`, `16M`, `16MiB`, `512k`: a number of bytes."""
    match = _SIZE.match(text.strip())
    if match is None:
        raise UserError(f"--max-bytes {text!r} is not a size: give bytes, or a number with K, M or G (16M)")
    unit = (match.group(2) or "").lower()[:1]
    return int(match.group(1)) * {"": 1, "k": 1 << 10, "m": 1 << 20, "g": 1 << 30}[unit]


@app.command("capture", cls=Command, context_settings={"allow_extra_args": True, "ignore_unknown_options": True})
def capture_cmd(
    command: list[str] | None = typer.Argument(None, help="the program, after --: python SCRIPT ARGS or "
                                               "python -m MODULE ARGS"),
    out_dir: Path = typer.Option(Path("kernelband-tasks"), "--out", help="where the task files go"),
    top: int = typer.Option(5, "--top", help="tasks for this many entry functions, by device time"),
    max_bytes: str = typer.Option("16M", "--max-bytes", help="float tensor bytes kept per task beside its file; "
                                  "past that they are drawn with the captured mean and spread"),
    as_json: bool = flag("--json", "print one JSON object"),
) -> None:
    """Run a program unchanged, record its Triton launches, and write one task per entry function."""
    from kernelband.capture import run

    try:
        report = run.capture(list(command or []), out_dir, top=top, max_bytes=parse_bytes(max_bytes),
                             echo=_echo)
    except UserError as exc:
        fail(str(exc))
    if as_json:
        print(json.dumps(report.to_dict()))
        return
    _print(report)


def _echo(line: str) -> None:
    """The program's own output, as it comes: on stderr, so that stdout holds the table or the JSON alone."""
    sys.stderr.write(line)
    sys.stderr.flush()


def _print(report) -> None:
    unit = "interpreter ms" if report.mode == "interpreter" else "device ms"
    table = Table(title=f"Triton kernels of `{' '.join(report.command)}` by share of {unit} ({report.device})",
                  title_justify="left")
    for col in ("share", unit, "launches", "kernel", "entry", "task", "optimize it with"):
        table.add_column(col, justify="right" if col in ("share", unit, "launches") else "left")
    for r in report.kernels:
        table.add_row(f"{100 * r.share:.1f}%", fmt(r.time_ms, ".4g"), str(r.launches), r.kernel,
                      f"{r.entry} ({r.where})", r.task or "-", r.command)
    out.print(table)
    for t in report.tasks:
        shapes = f"{t.seen} seen + {t.added} added shapes, {t.held_out} held out"
        out.print(f"wrote {t.path}: {t.entry}" + (f" (wraps {t.kernel})" if t.kernel else "")
                  + f", {shapes}" + (f"; {t.note}" if t.note else ""), highlight=False, soft_wrap=True)
    out.print(f"capture cost: {report.hooks_s * 1e3:.1f} ms in the hooks over {report.launches} launches "
              f"({100 * report.overhead:.1f}% of the program's {report.wall_s:.2f} s): "
              f"{report.hooks_new_s * 1e3:.1f} ms on the {report.new_launches} launches that brought a new signature, "
              f"{report.us_per_seen_launch:.1f} µs on each other launch; then {report.finish_s:.2f} s to read back "
              f"and keep tensors ({report.child_s:.1f} s for the program's process in all, start-up included), "
              f"{report.write_s:.2f} s to write the tasks", highlight=False, soft_wrap=True)
    if report.benchmark_launches:
        out.print(f"note: {report.benchmark_launches} launches by autotuners' benchmarks are not counted",
                  highlight=False, soft_wrap=True)
    for note in report.notes:
        out.print(f"note: {note}", highlight=False, soft_wrap=True)
    if report.mode == "interpreter":
        out.print("[yellow]Times are Triton-interpreter times on the CPU: they rank kernels by interpretation "
                  "cost, not GPU time.[/]")
