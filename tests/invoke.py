"""The CLI run in the test's own process (typer's CliRunner through the app), as a process would answer: for
what does not test the process boundary (a signal, a kill, the command's own exit), it saves the command's
start (importing torch), a large part of what each call costs here."""

from __future__ import annotations

import os
import subprocess
import traceback

from typer.testing import CliRunner

from kernelband.cli import app as app_module

LLM_SETTINGS = ("KERNELBAND_LLM_BASE_URL", "KERNELBAND_LLM_API_KEY", "OPENAI_API_KEY", "OPENAI_BASE_URL")


def process_env() -> dict[str, str]:
    """The environment of a `kernelband` process a test starts: the interpreter, and no LLM configured (the
    rewriter is chosen without being asked)."""
    env = dict(os.environ, KERNELBAND_MODE="interpreter")
    for key in LLM_SETTINGS:
        env.pop(key, None)
    return env


def invoke(*args: str) -> subprocess.CompletedProcess:
    """`kernelband ARGS` on the interpreter with no LLM configured; an exception that escapes a command is
    written to stderr as a traceback, as the process would."""
    res = CliRunner().invoke(app_module.app, list(args),
                             env={"KERNELBAND_MODE": "interpreter", **dict.fromkeys(LLM_SETTINGS)})
    stderr = res.stderr
    if res.exc_info is not None and not isinstance(res.exception, SystemExit):
        stderr += "Traceback (most recent call last):\n" + "".join(traceback.format_exception(*res.exc_info))
    return subprocess.CompletedProcess(list(args), res.exit_code, res.stdout, stderr)
