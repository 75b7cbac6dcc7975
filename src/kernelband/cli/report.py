"""`kernelband report`: a bench or a run as an HTML page with plots (or as tables in the terminal)."""

from __future__ import annotations

from pathlib import Path

import typer

from kernelband.cli.app import Command, app, fail, out
from kernelband.errors import UserError
from kernelband.store import DEFAULT_DB


@app.command("report", cls=Command)
def report_cmd(
    target: str = typer.Argument(..., metavar="RUN_OR_BENCH", help="bench:N, run:N, or N (a run id)"),
    db: Path = typer.Option(Path(DEFAULT_DB), "--db", help="the run database"),
    out_dir: Path | None = typer.Option(None, "--out", help="folder for index.html, report.json and the plots "
                                        "(needed for html; with text or markdown, report.json goes there too, "
                                        "and report.md with markdown)"),
    fmt: str = typer.Option("html", "--format", help="html, text (the terminal) or markdown (pipe tables)"),
) -> None:
    """Report a bench or a run: speedup and Fast@1 per iteration, per-task results, pool, lineage, diffs."""
    from kernelband.report.metrics import parse_target, report_data
    from kernelband.store import Store

    if fmt not in ("html", "text", "markdown"):
        fail(f"unknown --format {fmt!r}: use html, text or markdown")
    if fmt == "html" and out_dir is None:
        fail("--out DIR is needed for the html report")
    if not db.exists():
        fail(f"no run database at {db}; `kernelband optimize` or `kernelband bench` creates it (or pass --db)")
    try:
        parse_target(target)
        store = Store(db, read_only=True)  # a database on read-only media can be reported
        data = report_data(store, target)
        if fmt in ("text", "markdown"):
            from kernelband.report import markdown
            from kernelband.report.text import print_report

            md = None
            if fmt == "markdown":
                md = markdown.render(data)
                print(md, end="")
            else:
                print_report(data, out)
            if out_dir is not None:
                import json

                out_dir.mkdir(parents=True, exist_ok=True)
                (out_dir / "report.json").write_text(json.dumps(data, indent=1))
                if md is not None:
                    (out_dir / "report.md").write_text(md)
            return
        from kernelband.report.html import write_report

        page = write_report(data, out_dir)
    except UserError as exc:
        fail(str(exc))
    except OSError as exc:
        fail(f"cannot write the report into {out_dir}: {exc.strerror or exc}")
    out.print(f"report: {page}", highlight=False)
