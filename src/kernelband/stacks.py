"""Every thread's stack on a signal, for a long sweep that seems stuck: `kill -USR1 PID`.

Not `faulthandler.register(..., all_threads=True)`: that walks the other threads' frames from inside
the C signal handler, without the GIL, while they run. With worker threads starting and ending all
the time, it can read a freed frame: it killed an H200 sweep with SIGSEGV (BENCHMARKS.md). This
handler is a Python one: it runs in the main thread between bytecodes, holding the GIL, so every
frame it reads is alive.
"""

from __future__ import annotations

import signal
import sys
import threading
import traceback


def dump(file=None, state=None) -> None:
    """Write every thread's name and stack to `file` (default stderr); first the lines `state()` returns, if
    given (e.g. who holds the GPU lock)."""
    file = file or sys.stderr
    for line in state() if state is not None else ():
        print(line, file=file)
    names = {t.ident: t.name for t in threading.enumerate()}
    for ident, frame in sys._current_frames().items():
        print(f"Thread {names.get(ident, ident)} (most recent call last):", file=file)
        traceback.print_stack(frame, file=file)
        print(file=file)
    file.flush()


def dump_on(signum: int = signal.SIGUSR1, state=None) -> None:
    """From now on, `signum` makes the process write every thread's stack to stderr and carry on; `state`
    (a callable returning lines, e.g. who holds the GPU lock) is written first."""

    def handler(_signum, _frame) -> None:
        try:
            dump(state=state)
        except Exception as exc:  # noqa: BLE001  (an exception here would surface in whatever the main thread runs)
            print(f"stacks: could not dump ({exc!r})", file=sys.stderr)

    signal.signal(signum, handler)
