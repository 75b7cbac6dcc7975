"""One worker process and the parent's end of its socket.

Every worker runs with an allow-listed environment (`env.py`), in its own temporary directory, in its own
process group, and under a memory watchdog (the pool's). A candidate's worker is used once and killed: a
CUDA fault, a hang or a monkey-patch dies with it.
"""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from contextlib import nullcontext
from dataclasses import dataclass, field

import psutil

from kernelband import protocol
from kernelband.evaluation import ncu, zygote
from kernelband.evaluation.env import worker_env
from kernelband.evaluation.gone import WorkerGone


@dataclass
class ReadyInfo:
    pid: int
    startup_s: float
    sandbox: dict
    device: dict
    versions: dict
    phases: dict = field(default_factory=dict)  # seconds of the start's GPU part: context, first_kernel, ...


def process_cpu(pid: int) -> tuple[float, float] | None:
    """(user + system CPU seconds of the process, of its live descendants), or None once it is gone."""
    try:
        proc = psutil.Process(pid)
        own = sum(proc.cpu_times()[:2])
        kids = 0.0
        for child in proc.children(recursive=True):
            try:
                kids += sum(child.cpu_times()[:2])
            except psutil.Error:
                pass
        return own, kids
    except psutil.Error:
        return None


class Worker:
    """One worker process and the parent's end of its socket."""

    def __init__(self, mode: str, base_dir: str, device_index: int | None, memory_limit: int | None,
                 profiler: bool = False):
        self.mode = mode
        self.dir = tempfile.mkdtemp(prefix="w-", dir=base_dir)
        self.memory_limit = memory_limit
        self.profiler = profiler
        self.killed_for: str | None = None
        parent, child = socket.socketpair()
        self.sock = parent
        self.log_path = os.path.join(self.dir, "worker.log")
        self._log = open(self.log_path, "wb")
        self.started = time.monotonic()
        prefix: list[str] = []
        self.ncu_log = os.path.join(self.dir, "ncu.csv")
        if profiler:
            prefix = ncu.command(self.ncu_log)
        env = worker_env(self.dir, mode, device_index)
        self.proc = self._forked(mode, env, child) if not profiler else None
        if self.proc is None:
            self.proc = subprocess.Popen(
                prefix + [sys.executable, "-m", "kernelband.worker", "--fd", str(child.fileno()), "--dir",
                          self.dir, "--mode", mode],
                pass_fds=[child.fileno()], cwd=self.dir, env=env, stdin=subprocess.DEVNULL, stdout=self._log,
                stderr=subprocess.STDOUT, start_new_session=True)
        child.close()
        self.ready: ReadyInfo | None = None
        self.lock = threading.Lock()
        self.asked: tuple[str, float] | None = None  # the request in progress: (op, since), for `snapshot`
        self.users = 0  # evaluations using this worker as their reference (see WorkerPool.reference)
        self._stopped: list[int] = []  # the front end's pids `pause` stopped (WorkerPool parks idle profilers)

    def _forked(self, mode: str, env: dict[str, str], child: socket.socket) -> zygote.Child | None:
        """The worker forked from this process's zygote, where there is one (evaluation/zygote.py); None: start
        it as a process of its own."""
        z = zygote.for_mode(mode)
        if z is None:
            return None
        try:
            return z.fork(self.dir, self.log_path, env, child)
        except zygote.ZygoteGone:
            return None

    def wait_ready(self, timeout: float, gpu=lambda step: nullcontext()) -> ReadyInfo:
        """Wait for the worker to import its libraries, then let it initialise CUDA ("context"), and then run
        its first kernel ("first_kernel"), each in a hold of `gpu(step)` of its own (the pool's GPU lock,
        shared: never during a timing; a timing that asks meanwhile goes between the two, and waits for one
        part of the start, not both)."""
        msg = self._recv(timeout, "start")
        for step, answer, part in (("loaded", "start", "context"), ("context", "go", "first_kernel")):
            if msg.get("op") != step:
                break
            with gpu(part):
                try:
                    protocol.send(self.sock, {"op": answer})
                except OSError:
                    raise self._death() from None
                msg = self._recv(timeout, "start")
        if msg.get("op") != "ready":
            raise WorkerGone("crashed", f"worker failed to start: {msg.get('error', msg)}")
        self.ready = ReadyInfo(msg["pid"], msg["startup_s"], msg["sandbox"], msg.get("device", {}),
                               msg.get("versions", {}), msg.get("phases", {}))
        return self.ready

    def log_tail(self, n: int = 3000) -> str:
        try:
            with open(self.log_path, "rb") as f:
                f.seek(0, os.SEEK_END)
                f.seek(max(0, f.tell() - n))
                return f.read().decode(errors="replace")
        except OSError:
            return ""

    def _death(self) -> WorkerGone:
        try:
            code = self.proc.wait(timeout=5)
        except subprocess.TimeoutExpired:
            self.kill()
            code = self.proc.wait()
        tail = self.log_tail()
        if self.killed_for:
            return WorkerGone("crashed", f"{self.killed_for}\n{tail}")
        if code < 0:
            try:
                name = signal.Signals(-code).name
            except ValueError:
                name = f"signal {-code}"
            return WorkerGone("crashed", f"worker killed by {name}\n{tail}")
        return WorkerGone("crashed", f"worker exited with code {code}\n{tail}")

    def _recv(self, timeout: float, what: str) -> dict:
        try:
            return protocol.recv(self.sock, timeout)
        except TimeoutError:
            self.kill()
            raise WorkerGone("timeout", f"no answer to {what} within {timeout:.0f} s") from None
        except (protocol.ProtocolError, OSError):
            raise self._death() from None

    def _stage_data(self, message: dict) -> dict:
        """A load of a task with files beside it (`Task.data_dir`): the files are copied into the worker's own
        directory, the one place its sandbox lets it read, and the task names the copy."""
        task = message.get("task") or {}
        source = task.get("data_dir")
        if message.get("op") != "load" or not source:
            return message
        copy = os.path.join(self.dir, "task-data")
        if not os.path.isdir(copy):
            shutil.copytree(source, copy)
        return {**message, "task": {**task, "data_dir": copy}}

    def request(self, message: dict, timeout: float) -> dict:
        """Send one request and wait for its answer. Raises WorkerGone."""
        message = self._stage_data(message)
        with self.lock:
            if self.proc.poll() is not None:
                raise self._death()
            try:
                protocol.send(self.sock, message)
            except OSError:
                raise self._death() from None
            self.asked = (message.get("op", "request"), time.monotonic())
            try:
                reply = self._recv(timeout, message.get("op", "request"))
                # the parent's own measure of the request (inputs made, run, outputs written), for limits
                # relative to the reference's (Evaluator: `Limits.run_factor`)
                reply["request_s"] = time.monotonic() - self.asked[1]
                return reply
            finally:
                self.asked = None

    def check_memory(self) -> None:
        if not self.memory_limit or self.proc.poll() is not None:
            return
        try:
            rss = psutil.Process(self.proc.pid).memory_info().rss
        except psutil.Error:
            return
        if rss > self.memory_limit:
            self.killed_for = (f"killed: memory limit exceeded ({rss / 2**30:.1f} GiB > "
                               f"{self.memory_limit / 2**30:.1f} GiB)")
            self.kill()

    def alive(self) -> bool:
        return self.proc.poll() is None

    def pause(self) -> None:
        """Stop ncu's front end (SIGSTOP to each of its processes: the launcher script, ncu itself and its
        subreaper), which spins at about a core while its worker waits, until `resume`. Only for a ready
        worker with no request in flight. The Python worker under it is left running, and idle: with the
        worker stopped as well (SIGSTOP to the whole process group), the real ncu never lets it answer again,
        while with the front end alone stopped it loads, compiles and is profiled as an unparked one."""
        self._stopped = self._front_end()
        self._signal(self._stopped, signal.SIGSTOP)

    def resume(self) -> None:
        self._signal(self._stopped, signal.SIGCONT)
        self._stopped = []

    @property
    def paused(self) -> bool:
        return bool(self._stopped)

    def _front_end(self) -> list[int]:
        """The pids between this process and the Python worker it runs (ncu's front end): the process
        itself and its descendants, less the worker (`ready.pid`) and what runs under it."""
        if self.proc.poll() is not None or self.ready is None:
            return []
        try:
            top = psutil.Process(self.proc.pid)
            procs = [top] + top.children(recursive=True)
            inner = psutil.Process(self.ready.pid)
            skip = {self.ready.pid} | {p.pid for p in inner.children(recursive=True)}
        except psutil.Error:
            return []
        if self.ready.pid not in {p.pid for p in procs}:  # the worker is not where it should be: park nothing
            return []
        return [p.pid for p in procs if p.pid not in skip]

    @staticmethod
    def _signal(pids: list[int], sig: int) -> None:
        for pid in pids:
            try:
                os.kill(pid, sig)
            except (ProcessLookupError, PermissionError):
                pass

    def _signal_group(self, sig: int) -> None:
        """The signal to the worker's process group (started in a session of its own: its group is its pid),
        or to the worker alone where the group cannot be signalled."""
        if self.proc.poll() is None:
            try:
                os.killpg(self.proc.pid, sig)
            except (ProcessLookupError, PermissionError):
                self.proc.send_signal(sig)

    def kill(self) -> None:
        self._signal_group(signal.SIGKILL)

    def close(self) -> None:
        self.kill()
        try:
            self.proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            pass
        self.sock.close()
        self._log.close()
        shutil.rmtree(self.dir, ignore_errors=True)
