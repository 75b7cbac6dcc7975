"""Who may use the GPU at once: timings alone, correctness steps side by side within a memory budget."""

from __future__ import annotations

import fcntl
import itertools
import os
import re
import tempfile
import threading
import time
from collections import Counter, deque
from contextlib import contextmanager

from kernelband.errors import UserError


class GpuLock:
    """Who may use the GPU at once. Timing and ncu's profiled run take it alone (`exclusive`), so nothing
    else of ours runs on the GPU while a kernel is timed; correctness runs of several candidates may share
    it with each other (`shared`). A waiting exclusive holder goes first: timings are not starved.
    `state()` says who holds it and who waits, for a sweep's heartbeat.

    With a `path`, an exclusive holder also takes an exclusive `flock` on that file, one per physical GPU
    (`gpu_lock_path`): two KernelBand processes on one GPU (two sweeps, or `optimize` beside a bench) never
    time at once. Another process's correctness runs may still overlap a timing, as compiling and checking
    may.

    Memory: a shared step says how many bytes of GPU memory it may take (`shared(nbytes)`, an estimate from
    its shape's inputs), and steps share the GPU while their sum stays within `budget` (None: no limit). A
    step alone on the GPU always goes, however large; a step that must wait waits its turn, and the steps
    that come after it wait behind it (first come, first served). Without it, 8 candidates' checks of the
    largest shapes beside 29 kept references ran an 80 GB H100 out of memory.

    Accounting (`stats()`): the seconds the GPU was held alone, shared, shared while a holder alone waited for
    the steps in progress to end (`draining`), or free; and per step (named with `doing(what)` around the
    hold, else by its thread), how many holds, their seconds, the longest, and the seconds that kept a holder
    alone waiting. That says what a pool's candidates wait for."""

    def __init__(self, path: str | None = None) -> None:
        self._cond = threading.Condition()
        self._label = threading.local()
        self._since = time.monotonic()  # of the last change of state, for the accounting
        self._spent: Counter = Counter()  # state -> seconds
        self._steps: dict[tuple[str, str], list[float]] = {}  # (mode, step) -> [holds, seconds, longest, draining]
        self._sharing = 0
        self._alone = False
        self._waiting = 0  # exclusive holders waiting
        self._holders: dict[int, tuple[str, str, float]] = {}  # thread id: (its name, mode, since)
        self.budget: int | None = None  # bytes of GPU memory that shared steps may declare at once
        self._bytes = 0  # declared by the shared steps on the GPU now
        self._queue: deque[int] = deque()  # tickets of the shared steps waiting, in order of arrival
        self._tickets = itertools.count()
        self.path = path
        self._file = None
        if path:
            try:  # read-only: flock needs no write access, so another user's lock file serves as well
                self._file = os.open(path, os.O_RDONLY | os.O_CREAT, 0o644)
            except OSError as exc:
                raise UserError(f"cannot open the GPU lock file {path}: {exc.strerror}; set TMPDIR to a "
                                "directory every KernelBand process on this GPU can read") from None

    # -- accounting ---------------------------------------------------------------------------------
    @contextmanager
    def doing(self, what: str):
        """Name the holds this thread takes within the block (`stats()`)."""
        before = getattr(self._label, "what", None)
        self._label.what = what
        try:
            yield
        finally:
            self._label.what = before

    def _step(self) -> str:
        what = getattr(self._label, "what", None)
        return what or re.sub(r"[-_ ]?\d+", "", threading.current_thread().name.split(" (")[0]) or "unnamed"

    def _state(self) -> str:
        if self._alone:
            return "alone"
        if self._sharing:
            return "draining" if self._waiting else "shared"
        return "free"

    def _tick(self) -> None:
        """Account the time since the last change of state (call with the condition held, before a change)."""
        now = time.monotonic()
        spent, self._since = now - self._since, now
        state = self._state()
        self._spent[state] += spent
        if state == "draining":
            for _name, mode, _since, step in self._holders.values():
                if mode == "shared":
                    self._steps.setdefault(("shared", step), [0, 0.0, 0.0, 0.0])[3] += spent

    def _held(self, mode: str, step: str, since: float) -> None:
        took = time.monotonic() - since
        row = self._steps.setdefault((mode, step), [0, 0.0, 0.0, 0.0])
        row[0] += 1
        row[1] += took
        row[2] = max(row[2], took)

    def stats(self, reset: bool = False) -> dict:
        """{"seconds": state -> seconds, "steps": [{mode, step, holds, seconds, longest, draining}], by seconds}.
        `reset`: start counting afresh after this."""
        with self._cond:
            self._tick()
            out = {"seconds": {k: round(v, 3) for k, v in self._spent.items()},
                   "steps": sorted(({"mode": m, "step": st, "holds": r[0], "seconds": round(r[1], 3),
                                     "longest": round(r[2], 3), "draining": round(r[3], 3)}
                                    for (m, st), r in self._steps.items()), key=lambda x: -x["seconds"])}
            if reset:
                self._spent, self._steps = Counter(), {}
        return out

    @contextmanager
    def shared(self, nbytes: int = 0):
        me, name = threading.get_ident(), threading.current_thread().name
        step = self._step()
        with self._cond:
            ticket = None

            def may_go() -> bool:
                if self._alone or self._waiting or (self._queue and self._queue[0] != ticket):
                    return False
                return not self._sharing or self.budget is None or self._bytes + nbytes <= self.budget

            if not may_go():
                ticket = next(self._tickets)
                self._queue.append(ticket)
                self._holders[me] = (name, "waiting to share", time.monotonic(), step)
                self._cond.wait_for(may_go)
                self._queue.popleft()
                self._cond.notify_all()  # the next in line may fit as well
            self._tick()
            self._sharing += 1
            self._bytes += nbytes
            self._holders[me] = (name, "shared", since := time.monotonic(), step)
        try:
            yield
        finally:
            with self._cond:
                self._tick()
                self._held("shared", step, since)
                self._sharing -= 1
                self._bytes -= nbytes
                self._holders.pop(me, None)
                self._cond.notify_all()

    @contextmanager
    def exclusive(self):
        me, name = threading.get_ident(), threading.current_thread().name
        step = self._step()
        with self._cond:
            self._tick()
            self._waiting += 1
            self._holders[me] = (name, "waiting", time.monotonic(), step)
            self._cond.wait_for(lambda: not self._alone and not self._sharing)
            self._tick()
            self._waiting -= 1
            self._alone = True
            if self._file is not None:
                self._holders[me] = (name, "waiting for another process", time.monotonic(), step)
        since = time.monotonic()
        try:
            if self._file is not None:
                fcntl.flock(self._file, fcntl.LOCK_EX)  # outside the condition: `state()` still answers
            with self._cond:
                self._holders[me] = (name, "exclusive", time.monotonic(), step)
            yield
        finally:
            if self._file is not None:
                fcntl.flock(self._file, fcntl.LOCK_UN)
            with self._cond:
                self._tick()
                self._held("exclusive", step, since)
                self._alone = False
                self._holders.pop(me, None)
                self._cond.notify_all()

    def state(self) -> list[str]:
        """Per thread: its name, `shared`, `exclusive` or `waiting` (for exclusive), and for how long."""
        now = time.monotonic()
        with self._cond:
            return [f"{name}: {mode} {now - since:.0f}s" for name, mode, since, _ in self._holders.values()]

    def memory(self) -> dict[str, int | None]:
        """The bytes the shared steps on the GPU declare now, and the budget (for a sweep's heartbeat)."""
        with self._cond:
            return {"declared": self._bytes, "budget": self.budget, "waiting": len(self._queue)}

    def close(self) -> None:
        if self._file is not None:
            os.close(self._file)
            self._file = None


def gpu_lock_path(device_index: int) -> str:
    """The lock file of the physical GPU that `device_index` names (through CUDA_VISIBLE_DEVICES, which may
    hold indices or UUIDs), in the temporary directory that every process of the host shares."""
    visible = os.environ.get("CUDA_VISIBLE_DEVICES")
    names = [v.strip() for v in visible.split(",")] if visible else []
    ident = names[device_index] if device_index < len(names) else str(device_index)
    return os.path.join(tempfile.gettempdir(), f"kernelband-gpu-{re.sub(r'[^A-Za-z0-9-]', '_', ident)}.lock")
