"""Telling a module that is stuck in its own code from one that is slow to compile, while it loads.

Importing a candidate and compiling its kernels may take minutes on a GPU (`Limits.load_s`), so the parent's
limit for them is long. A module whose import does not return (a `while True` or a `sleep` at import, or in
its entry during the compile-only call) would hold its slot for the whole limit. What tells the two apart is
where the worker's main thread is: compiling runs Triton's (and the compiler's) Python code, and an
interpreted kernel runs Triton's interpreter, while a module stuck in its own loop is in its own file, sample
after sample. `StuckWatch` samples the main thread a few times a second and reports the module as stuck once
every sample for `limit_s` seconds was in its own file. A sample's place is its innermost frame outside
Python's standard library: a loop that calls `threading` or `time` helpers is still the module's own loop,
while a compile waiting for `ptxas` in `subprocess` is in Triton's code.

A C call made from the module's own code (a long `torch` operation at import, `time.sleep`) looks the same
as a Python loop; `limit_s` is long enough (`Limits.stuck_s`) that such an import is stuck for any purpose.
The watch lives in the worker, beside the code it watches: a hostile module can defeat it, and then meets the
parent's limit as before.
"""

from __future__ import annotations

import os
import sys
import sysconfig
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass

SAMPLE_S = 0.2  # seconds between two looks at the main thread
_STDLIB = tuple({sysconfig.get_paths()[k] for k in ("stdlib", "platstdlib")})


def _library(filename: str) -> bool:
    """Python's standard library, whose frames say nothing about who is running."""
    return filename.startswith("<frozen") or (filename.startswith(_STDLIB) and "-packages" not in filename)


def place(frame) -> tuple[str, int] | None:
    """(file, line) of the innermost frame outside the standard library."""
    while frame is not None and _library(frame.f_code.co_filename):
        frame = frame.f_back
    return None if frame is None else (frame.f_code.co_filename, frame.f_lineno)


@dataclass
class Stuck:
    """Where a module was stuck: its line, how long every sample was there, and what the worker was doing."""

    line: int
    seconds: float
    doing: str

    def message(self) -> str:
        return (f"stuck: the module's own code ran {self.seconds:.0f} s without returning (line {self.line} of the "
                f"module, while {self.doing}); stopped before the load limit")


class StuckWatch:
    """One thread that watches the thread inside `watch(...)`; `on_stuck` runs in the watching thread, once per
    watch, and only while the watch is still on (under `lock`, which the worker's replies take too: the watch
    and a reply never both answer a request)."""

    def __init__(self, on_stuck: Callable[[Stuck], None], lock: threading.Lock | None = None,
                 sample_s: float = SAMPLE_S):
        self.on_stuck = on_stuck
        self.lock = lock or threading.Lock()
        self.sample_s = sample_s
        self._cond = threading.Condition()
        self._watch: tuple[int, int, str, float, str] | None = None  # (generation, thread, file, limit, doing)
        self._generation = 0
        self.thread = threading.Thread(target=self._loop, name="kernelband-stuck-watch", daemon=True)
        self.thread.start()

    @contextmanager
    def watch(self, path: str, limit_s: float | None, doing: str) -> Iterator[None]:
        """Watch the calling thread while it runs the block; `path`: the module's file; no `limit_s`: no watch."""
        if not limit_s:
            yield
            return
        with self._cond:
            self._generation += 1
            self._watch = (self._generation, threading.get_ident(), path, limit_s, doing)
            self._cond.notify()
        try:
            yield
        finally:
            with self._cond:
                self._watch = None

    def _current(self) -> tuple[int, int, str, float, str] | None:
        with self._cond:
            return self._watch

    def _loop(self) -> None:
        seen: tuple[int, float, int] | None = None  # (generation, since, line) of the samples in own code
        while True:
            with self._cond:
                while self._watch is None:
                    self._cond.wait()
                generation, ident, path, limit, doing = self._watch
            where = place(sys._current_frames().get(ident))
            now = time.monotonic()
            if where is None or where[0] != path:
                seen = None
            elif seen is None or seen[0] != generation:
                seen = (generation, now, where[1])
            elif now - seen[1] >= limit:
                with self.lock:
                    if self._current() is not None and self._current()[0] == generation:
                        self.on_stuck(Stuck(where[1], now - seen[1], doing))
                seen = None
                with self._cond:  # once per watch
                    while self._watch is not None and self._watch[0] == generation:
                        self._cond.wait(self.sample_s)
            time.sleep(self.sample_s)


def for_worker(sock, lock: threading.Lock) -> StuckWatch:
    """The worker's watch: the request of a module found stuck is answered `timeout` in its place, and the
    worker ends (a module that does not return cannot be stopped inside the process)."""
    from kernelband import protocol

    def answer(stuck: Stuck) -> None:
        try:
            protocol.send(sock, {"ok": False, "outcome": "timeout", "error": stuck.message()})
        finally:
            os._exit(4)

    return StuckWatch(answer, lock)
