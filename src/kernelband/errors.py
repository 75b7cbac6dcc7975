"""Errors a user can cause. The CLI prints them as one line and exits with code 2."""

from __future__ import annotations

import sys
from collections.abc import Callable


class UserError(Exception):
    """Bad input: a task that does not exist, a file that cannot be read, a bad option."""


class TaskError(UserError):
    """The task itself is broken: its harness fails, or its reference kernel does."""


class SetupError(UserError):
    """A set-up mistake that every run would repeat (an LLM endpoint that cannot be reached, a refused key):
    it ends a search, and a whole bench, where a broken task ends only its own runs."""


def read_text(path, what: str) -> str:
    """A user's text file (`what`: "task file", "candidate", ...), or a UserError that says why not."""
    try:
        return path.read_text(encoding="utf-8")
    except OSError as exc:
        raise UserError(f"cannot read {what} {path}: {exc.strerror}") from exc
    except UnicodeDecodeError as exc:
        raise UserError(f"{what} {path} is not a UTF-8 text file (byte {exc.start}); pass the source file") from exc


def run_script(main: Callable[..., object], *args) -> None:
    """A script's entry point (those in benchmarks/ and tools/): `main(*args)`, with a UserError printed as one line,
    `error: ...`, on stderr and exit code 2, as the CLI does."""
    try:
        main(*args)
    except UserError as exc:
        print(f"error: {exc}", file=sys.stderr)
        raise SystemExit(2) from None
