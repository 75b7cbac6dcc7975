"""The `kernelband` command line: the typer app (`cli.app`) and one module per command group, each of which
registers its commands on the app when imported here."""

from __future__ import annotations

import sys

import typer

from kernelband.cli import app as app_module  # the module: `app` stays the submodule's name here
from kernelband.errors import UserError

# Importing the command modules registers their commands, in the order --help lists them.
# isort: off
from kernelband.cli import evaluate, tasks, capture, report, optimize, bench, runs, knowledge  # noqa: E402,F401
# isort: on


def _click_exceptions():
    """The click that typer runs on: its own copy in recent typer, the click package before."""
    try:
        from typer._click import exceptions
    except ImportError:
        import click.exceptions as exceptions
    return exceptions


def main() -> None:
    """The `kernelband` command. A mistyped option or argument is one line and exit code 2, like every other
    bad input, instead of click's usage box."""
    errors = _click_exceptions()
    try:
        code = app_module.app(standalone_mode=False)
    except errors.NoArgsIsHelpError as exc:
        exc.show()
        sys.exit(2)
    except errors.UsageError as exc:
        where = exc.ctx.command_path if exc.ctx is not None else "kernelband"
        app_module.err.print(f"[bold red]error:[/] {' '.join(exc.format_message().split())} (`{where} --help` lists the "
                  "options)", highlight=False, soft_wrap=True)
        sys.exit(2)
    except typer.Abort:  # Ctrl-C at a prompt (click's Abort where typer uses click, typer's own where it vendors it)
        code = 130
    except UserError as exc:  # pragma: no cover - commands catch their own
        app_module.err.print(f"error: {exc}")
        sys.exit(2)
    if code == 130:  # Ctrl-C: typer turns the KeyboardInterrupt into exit code 130
        how = {"optimize": "the same command with --resume continues the run",
               "bench": "`kernelband bench ... --resume N` continues the bench (N: its id, `kernelband runs` "
                        "shows it)"}.get(sys.argv[1] if len(sys.argv) > 1 else "")
        app_module.err.print("interrupted" + (f": what was stored is kept in the run database; {how}" if how else ""),
                  highlight=False, soft_wrap=True)
    sys.exit(code if isinstance(code, int) else 0)
