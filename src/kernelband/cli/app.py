"""The `kernelband` typer app and what its commands share: the out/err consoles, the one-line error, number
formatting and the run database a command opens. It imports no command module; `kernelband.cli` imports
them, and each registers its commands on `app`."""

from __future__ import annotations

import os
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import NoReturn

import typer
from rich.console import Console
from rich.markup import escape
from typer.core import TyperCommand, TyperGroup

from kernelband import __version__
from kernelband.errors import UserError


class _UntypedHelp:
    """`--help` listed with no type: it takes no value, like the flags `flag` makes."""

    def get_help_option(self, ctx):
        option = super().get_help_option(ctx)
        if option is not None:
            option.metavar = ""
        return option


class Command(_UntypedHelp, TyperCommand):
    pass


class Group(_UntypedHelp, TyperGroup):
    pass


app = typer.Typer(add_completion=False, no_args_is_help=True, pretty_exceptions_enable=False, cls=Group,
                  help="Make Triton kernels faster, and prove it.")
# Off a terminal (a file, a pipe) a table's width is what its cells need, up to this: rich's default of 80
# columns there cuts task names and figures to "…". COLUMNS, where set, still rules.
PIPE_WIDTH = 250


def _console(stderr: bool = False) -> Console:
    console = Console(stderr=stderr)
    if not console.is_terminal and not os.environ.get("COLUMNS"):
        console.width = PIPE_WIDTH
    return console


out = _console()
err = _console(stderr=True)


def fail(message: str) -> NoReturn:
    """Bad input: one line on stderr, exit code 2. The message is plain text (a `[ray]` in it stays)."""
    err.print(f"[bold red]error:[/] {escape(message)}", highlight=False, soft_wrap=True)
    raise typer.Exit(2)


def fmt(value, spec: str = ".3g", none: str = "-") -> str:
    return none if value is None else format(value, spec)


def versus(name: str, value: float | None, why: str = "") -> str:
    """A speedup over a baseline ("vs eager 1.234x"), or why there is none."""
    return f"{name} {value:.3f}x" if value is not None else f"{name} - ({why or 'not timed'})"


def geo(value: float | None, n: int) -> str:
    """A geometric mean with the number of tasks it covers."""
    return f"{fmt(value, '.3f')}x over {n} task{'' if n == 1 else 's'}"


@contextmanager
def run_store(db: Path) -> Iterator:
    """The run database of one command. One the command created is removed again if the command fails with
    nothing stored in it: bad input leaves no empty database behind (and never touches a used one)."""
    from kernelband.store import Store

    new = not db.exists()
    store = Store(db)
    try:
        yield store
    except UserError:
        if new and not store.runs() and not store.benches():
            store.close()
            db.unlink(missing_ok=True)
        raise


def flag(name: str, help: str = "") -> bool:
    """A boolean option that takes no value (`--json`, not `--json <bool>`); help lists no type for it."""
    return typer.Option(False, name, help=help, metavar="")


def _print_version(value: bool) -> None:
    if value:
        print(f"kernelband {__version__}")
        raise typer.Exit(0)


@app.callback()
def _root(version: bool = typer.Option(False, "--version", callback=_print_version, is_eager=True, metavar="",
                                       help="print the version and exit")) -> None:
    """Make Triton kernels faster, and prove it."""
