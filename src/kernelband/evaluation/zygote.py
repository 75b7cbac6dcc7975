"""The parent's end of the zygote (worker/zygote.py): workers forked from a process that has imported torch and
Triton, instead of each importing them anew.

`for_mode(mode)` gives this process's zygote for the mode, started at first use, or None where workers start
as processes of their own: on a GPU unless KERNELBAND_ZYGOTE=1 (forked workers there are not yet checked on a
GPU), anywhere with KERNELBAND_ZYGOTE=0, and once a zygote has failed. A forked worker is handed back as a
`Child`, which answers what the pool asks of a `subprocess.Popen` (pid, poll, wait, send_signal).
"""

from __future__ import annotations

import atexit
import itertools
import json
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import threading

import psutil

from kernelband.evaluation.env import worker_env

START_TIMEOUT_S = 120.0
UNKNOWN_EXIT = 255  # a child whose zygote died before it: its exit code is lost


class ZygoteGone(RuntimeError):
    """The zygote cannot fork a worker now: start the worker as a process of its own."""


class Child:
    """A worker forked by the zygote, as the pool sees a worker process."""

    def __init__(self, pid: int, zygote: Zygote) -> None:
        self.pid = pid
        self.returncode: int | None = None
        self._zygote = zygote
        self._ended = threading.Event()

    def _exited(self, code: int) -> None:
        self.returncode = code
        self._ended.set()

    def poll(self) -> int | None:
        if self.returncode is None and not self._zygote.alive:
            try:  # no one reports its exit now: ask the kernel whether it still runs
                gone = psutil.Process(self.pid).status() == psutil.STATUS_ZOMBIE
            except psutil.Error:
                gone = True
            if gone:
                self._exited(UNKNOWN_EXIT)
        return self.returncode

    def wait(self, timeout: float | None = None) -> int:
        step = 0.5
        waited = 0.0
        while self.poll() is None:
            if timeout is not None and waited >= timeout:
                raise subprocess.TimeoutExpired(f"worker {self.pid}", timeout)
            self._ended.wait(step if timeout is None else min(step, timeout - waited))
            waited += step
        return self.returncode

    def send_signal(self, sig: int) -> None:
        if self.poll() is None:
            try:
                os.kill(self.pid, sig)
            except ProcessLookupError:
                pass


class Zygote:
    """One zygote process for workers of one mode, and the thread that reads its reports."""

    def __init__(self, mode: str) -> None:
        self.mode = mode
        self.dir = tempfile.mkdtemp(prefix="kernelband-zygote-")
        ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        self._ctl = ours
        self._log = open(os.path.join(self.dir, "zygote.log"), "wb")
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "kernelband.worker.zygote", "--fd", str(theirs.fileno())],
            pass_fds=[theirs.fileno()], cwd=self.dir, env=worker_env(self.dir, mode, None),
            stdin=subprocess.DEVNULL, stdout=self._log, stderr=subprocess.STDOUT, start_new_session=True)
        theirs.close()
        self._lock = threading.Lock()
        self._ids = itertools.count()
        self._forks: dict[int, dict] = {}  # request id -> {"event", "pid"}
        self._children: dict[int, Child] = {}
        self._ready = threading.Event()
        self.alive = True
        self.ended_cpu = 0.0  # CPU seconds of the workers it forked that have ended
        threading.Thread(target=self._read, daemon=True, name="kernelband-zygote").start()
        if not self._ready.wait(START_TIMEOUT_S) or not self.alive:
            self.close()
            raise ZygoteGone(f"the zygote did not start: {self._log_tail()}")

    def _read(self) -> None:
        try:
            while True:
                data = self._ctl.recv(1 << 16)
                if not data:
                    break
                msg = json.loads(data)
                with self._lock:
                    if msg["op"] == "ready":
                        self._ready.set()
                    elif msg["op"] == "forked":
                        waiting = self._forks.pop(msg["id"], None)
                        if waiting is not None:
                            # "forked" always comes before the child's "exit": the zygote reaps before it forks
                            waiting["child"] = self._children[msg["pid"]] = Child(msg["pid"], self)
                            waiting["event"].set()
                    elif msg["op"] == "exit":
                        self.ended_cpu += msg.get("cpu", 0.0)
                        child = self._children.pop(msg["pid"], None)
                        if child is not None:  # None: a fork whose caller had stopped waiting
                            child._exited(msg["code"])
        except (OSError, ValueError):
            pass
        with self._lock:
            self.alive = False
            for waiting in self._forks.values():
                waiting["event"].set()
            self._ready.set()

    def fork(self, workdir: str, log_path: str, env: dict[str, str], sock: socket.socket) -> Child:
        """A worker forked in `workdir` with `env`, its output in `log_path`, serving on `sock` (the child's end
        of its socket pair, which the caller closes afterwards)."""
        with self._lock:
            if not self.alive:
                raise ZygoteGone("the zygote has ended")
            rid = next(self._ids)
            waiting = self._forks[rid] = {"event": threading.Event(), "child": None}
        request = {"id": rid, "dir": workdir, "log": log_path, "env": env, "mode": self.mode}
        try:
            socket.send_fds(self._ctl, [json.dumps(request).encode()], [sock.fileno()])
        except OSError as exc:
            raise ZygoteGone(f"the zygote is gone: {exc}") from None
        if not waiting["event"].wait(START_TIMEOUT_S) or waiting["child"] is None:
            raise ZygoteGone(f"the zygote forked no worker: {self._log_tail()}")
        return waiting["child"]

    def _log_tail(self) -> str:
        try:
            with open(os.path.join(self.dir, "zygote.log"), "rb") as f:
                return f.read()[-1000:].decode(errors="replace").strip() or "(no output)"
        except OSError:
            return "(no log)"

    def close(self) -> None:
        self.alive = False
        try:  # shutdown, not close alone: the reading thread's recv would keep the socket open, and the zygote
            self._ctl.shutdown(socket.SHUT_RDWR)  # waiting for an end it never sees
        except OSError:
            pass
        self._ctl.close()
        try:
            self.proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self.proc.kill()
        self._log.close()
        shutil.rmtree(self.dir, ignore_errors=True)


_zygotes: dict[str, Zygote | None] = {}
_registry_lock = threading.Lock()


def enabled(mode: str) -> bool:
    """Whether workers of `mode` are forked from a zygote (KERNELBAND_ZYGOTE: 1 on, 0 off; default: the
    interpreter only)."""
    setting = os.environ.get("KERNELBAND_ZYGOTE", "")
    if setting in ("0", "1"):
        return setting == "1"
    return mode == "interpreter"


def for_mode(mode: str) -> Zygote | None:
    """This process's zygote for workers of `mode`, started at first use; None where workers start as processes
    of their own (see `enabled`), or where the zygote could not start or has ended."""
    if not enabled(mode):
        return None
    with _registry_lock:
        zygote = _zygotes.get(mode)
        if zygote is not None and not zygote.alive:
            return None
        if mode not in _zygotes:
            try:
                zygote = Zygote(mode)
            except (ZygoteGone, OSError):
                zygote = None
            _zygotes[mode] = zygote
        return zygote


def ended_cpu() -> float:
    """CPU seconds of this process's forked workers that have ended: they reach the zygote's accounts of its
    children, not this process's (`os.times().children_user`)."""
    with _registry_lock:
        return sum(z.ended_cpu for z in _zygotes.values() if z is not None)


@atexit.register
def _close_all() -> None:
    for zygote in _zygotes.values():
        if zygote is not None:
            zygote.close()
