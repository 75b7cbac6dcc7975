"""Pre-warmed worker processes.

Starting Python, importing torch and initialising CUDA costs seconds, so the
pool starts workers ahead of time and hands out ready ones. A candidate gets a
fresh worker and the worker is killed after that one candidate: a CUDA fault,
a hang or a monkey-patch dies with it. The reference of a task keeps a worker
of its own across evaluations (it is the task's code, not a candidate's).

Every worker runs with an allow-listed environment (no API keys, tokens or
secrets), in its own temporary directory, in its own process group, and under a
memory watchdog.
"""

from __future__ import annotations

import fcntl
import itertools
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from collections import Counter, OrderedDict, deque
from collections.abc import Callable
from contextlib import contextmanager, nullcontext
from dataclasses import dataclass, field

import psutil

from kernelband import protocol
from kernelband.errors import UserError

_ENV_KEEP = re.compile(
    r"^(PATH|LANG|LANGUAGE|LC_[A-Z]+|TZ|TERM|USER|LOGNAME|SHELL|PYTHONPATH|PYTHONHASHSEED|VIRTUAL_ENV|"
    r"LD_LIBRARY_PATH|CUDA_[A-Z_]+|NVIDIA_[A-Z_]+|NCCL_[A-Z_]+|NVSHMEM_[A-Z_]+|TORCH_[A-Z_]+|PYTORCH_[A-Z_]+|"
    r"TRITON_[A-Z_]+|OMP_NUM_THREADS|MKL_NUM_THREADS|CC|CXX)$")
_ENV_SECRET = re.compile(r"(_API_KEY$|TOKEN|SECRET|PASSWORD|CREDENTIAL|_KEY$)", re.IGNORECASE)


def worker_env(workdir: str, mode: str, device_index: int | None) -> dict[str, str]:
    """The environment a worker gets: an allow-list, less anything that looks like a secret."""
    env = {k: v for k, v in os.environ.items() if _ENV_KEEP.match(k) and not _ENV_SECRET.search(k)}
    env.update(HOME=workdir, TMPDIR=workdir, TRITON_CACHE_DIR=os.path.join(workdir, "triton-cache"),
               PYTHONDONTWRITEBYTECODE="1", PYTHONUNBUFFERED="1")
    env.pop("TRITON_INTERPRET", None)
    if mode == "interpreter":
        env["TRITON_INTERPRET"] = "1"
        env["CUDA_VISIBLE_DEVICES"] = ""
    elif device_index is not None:
        env["CUDA_VISIBLE_DEVICES"] = str(device_index) if "CUDA_VISIBLE_DEVICES" not in os.environ else \
            os.environ["CUDA_VISIBLE_DEVICES"].split(",")[device_index]
    # Our own package must import in the worker even when run from a source tree.
    src = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    env["PYTHONPATH"] = os.pathsep.join([src] + ([env["PYTHONPATH"]] if env.get("PYTHONPATH") else []))
    return env


class GpuLock:
    """Who may use the GPU at once. Timing and ncu's profiled run take it alone (`exclusive`), so nothing
    else of ours runs on the GPU while a kernel is timed; correctness runs of several candidates may share
    it with each other (`shared`). A waiting exclusive holder goes first: timings are not starved.
    `state()` says who holds it and who waits, for a sweep's heartbeat.

    With a `path`, an exclusive holder also takes an exclusive `flock` on that file, one per physical GPU
    (`gpu_lock_path`): two KernelBand processes on one GPU (two sweeps, or `optimize` beside a bench) never
    time at once. Another process's correctness runs may still overlap a timing, as compiling and checking
    may (issue 2); in bench 3 two sweeps on one H200 had no such lock between them (BENCHMARKS.md).

    Memory: a shared step says how many bytes of GPU memory it may take (`shared(nbytes)`, an estimate from
    its shape's inputs), and steps share the GPU while their sum stays within `budget` (None: no limit). A
    step alone on the GPU always goes, however large; a step that must wait waits its turn, and the steps
    that come after it wait behind it (first come, first served). Without it, 8 candidates' checks of the
    largest shapes beside 29 kept references ran an 80 GB H100 out of memory (BENCHMARKS.md, stop 24).

    Accounting (`stats()`): the seconds the GPU was held alone, shared, shared while a holder alone waited for
    the steps in progress to end (`draining`), or free; and per step (named with `doing(what)` around the
    hold, else by its thread), how many holds, their seconds, the longest, and the seconds that kept a holder
    alone waiting. That says what a pool's candidates wait for.

    Gathering (`gather_s`, 0 by default: off): a holder alone that comes while shared steps run first lets them
    go on, for up to `gather_s` seconds, until a second holder alone comes or the GPU falls free; then both wait
    for the steps in progress to end and go one after the other. Two timings then share one wait for the GPU
    to drain instead of one each (run AN: draining was 36 s of a pool part's 123 s, 29 timings); a lone
    timing waits at most `gather_s` longer. `stats()["gathered"]` counts how each gathering ended."""

    def __init__(self, path: str | None = None) -> None:
        self._cond = threading.Condition()
        self._label = threading.local()
        self._since = time.monotonic()  # of the last change of state, for the accounting
        self._spent: Counter = Counter()  # state -> seconds
        self._steps: dict[tuple[str, str], list[float]] = {}  # (mode, step) -> [holds, seconds, longest, draining]
        self._sharing = 0
        self._alone = False
        self._waiting = 0  # exclusive holders waiting
        self.gather_s = 0.0  # how long a holder alone lets shared steps go on, waiting for a second one
        self._gathering = 0  # holders alone doing so now
        self._gathered: Counter = Counter()  # how each gathering ended: "paired", "free", "waited out"
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
            if self._gathered:
                out["gathered"] = dict(self._gathered)
            if reset:
                self._spent, self._steps, self._gathered = Counter(), {}, Counter()
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
            if self.gather_s > 0 and self._sharing and not (self._waiting or self._alone):
                self._gather(me, name, step)
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

    def _gather(self, me: int, name: str, step: str) -> None:
        """Let the shared steps go on until a second holder alone comes, the GPU falls free, or `gather_s`
        has passed (see the class; call with the condition held)."""
        self._gathering += 1
        self._holders[me] = (name, "gathering", time.monotonic(), step)
        self._cond.notify_all()  # a holder already gathering: this is its second
        paired = self._cond.wait_for(lambda: self._gathering > 1 or self._waiting or self._alone or not self._sharing,
                                     timeout=self.gather_s)
        self._gathering -= 1
        self._gathered["free" if not self._sharing else "paired" if paired else "waited out"] += 1

    def state(self) -> list[str]:
        """Per thread: its name, `shared`, `exclusive`, `gathering` or `waiting` (for exclusive), and for how long."""
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


class WorkerGone(Exception):
    """The worker died, timed out or broke the protocol; `outcome` says which."""

    def __init__(self, outcome: str, detail: str):
        super().__init__(detail)
        self.outcome = outcome
        self.detail = detail


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
            from kernelband.evaluation import ncu
            prefix = ncu.command(self.ncu_log)
        self.proc = subprocess.Popen(
            prefix + [sys.executable, "-m", "kernelband.worker", "--fd", str(child.fileno()), "--dir", self.dir,
                      "--mode", mode],
            pass_fds=[child.fileno()], cwd=self.dir, env=worker_env(self.dir, mode, device_index),
            stdin=subprocess.DEVNULL, stdout=self._log, stderr=subprocess.STDOUT, start_new_session=True)
        child.close()
        self.ready: ReadyInfo | None = None
        self.lock = threading.Lock()
        self.asked: tuple[str, float] | None = None  # the request in progress: (op, since), for `snapshot`
        self.users = 0  # evaluations using this worker as their reference (see WorkerPool.reference)
        self._stopped: list[int] = []  # the front end's pids `pause` stopped (WorkerPool.park_profilers)

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

    def request(self, message: dict, timeout: float) -> dict:
        """Send one request and wait for its answer. Raises WorkerGone."""
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
        worker stopped as well (SIGSTOP to the whole process group), the real ncu never let it answer again
        (`benchmarks/park_probe.py` on an H200, run X), while with the front end alone stopped it loaded,
        compiled and was profiled as an unparked one."""
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


class WorkerPool:
    """Keeps `warm` workers started ahead of need, and one worker per task reference."""

    def __init__(self, mode: str, warm: int = 2, device_index: int | None = 0,
                 memory_limit: int | None = None, start_timeout: float = 180.0, max_references: int = 4,
                 profiler: bool = False, warm_profilers: int | None = None, park_profilers: bool = False):
        self.mode = mode
        self.warm = max(0, warm)
        self.device_index = device_index if mode == "gpu" else None
        total = psutil.virtual_memory().total
        self.memory_limit = memory_limit if memory_limit is not None else int(total * 0.6)
        self.start_timeout = start_timeout
        # Outputs travel through files: a memory-backed file system makes that cheap.
        shm = "/dev/shm" if os.path.isdir("/dev/shm") and os.access("/dev/shm", os.W_OK) else None
        self.base_dir = tempfile.mkdtemp(prefix="kernelband-", dir=shm)
        self._spares: list[Worker] = []
        self._starting = 0
        self._cond = threading.Condition()
        self._references: OrderedDict[str, Worker] = OrderedDict()
        self._max_references = max_references
        self._all: list[Worker] = []
        self._closed = False
        self.gpu_lock = GpuLock(gpu_lock_path(device_index or 0) if mode == "gpu" else None)
        # What runs off the GPU lock right now (compiles, profiling workers starting or compiling), by kind:
        # shown beside a timing found disturbed, to tell what disturbed it (see `busy`).
        self.activity: Counter[str] = Counter()
        self._activity_lock = threading.Lock()
        self.startup_times: list[float] = []
        self.start_phases: list[dict] = []  # `ReadyInfo.phases` of each worker handed out, in that order
        self._cpu_seen: dict[int, tuple[float, float]] = {}  # pid -> CPU seconds at the last `cpu_use`
        self.profiler = profiler and mode == "gpu"
        self._profilers: list[Worker] = []
        # A warm profiling worker's ncu front end kept a CPU core busy while it waited for work (0.99 of a core
        # each, BENCHMARKS.md run W). Parked, a ready one's front end is stopped (SIGSTOP) until it is handed
        # out; its Python worker, which is idle, is not (`Worker.pause`).
        self.park_profilers = park_profilers
        # The parts of a worker's start ("context": CUDA's; "first_kernel") that share the GPU lock, so that no
        # timing runs beside them. Fewer: eval_throughput's pool-freestart (none) and pool-freecontext (the
        # first kernel only) parts, the A/B of what the holds cost the pool and the timings (run AN, H200:
        # 4.38 and 4.10 s a candidate against 4.25 with both held, within the parts' spread; both kept).
        self.start_holds = frozenset({"context", "first_kernel"})
        self._watchdog = threading.Thread(target=self._watch, name="kernelband-memory-watchdog", daemon=True)
        self._watchdog.start()
        self._fill()
        # Each evaluation uses up one profiling worker, and one starts slowly under ncu (10-20 s): by default
        # keep more warm than candidates may be in flight. (Each idle one's ncu front end was seen using most
        # of a CPU core on the GPU machine: `warm_profilers` trades that against waiting for one.)
        if self.profiler:
            for _ in range(self.warm + 2 if warm_profilers is None else max(1, warm_profilers)):
                threading.Thread(target=self._spawn_profiler, daemon=True).start()

    @contextmanager
    def busy(self, kind: str):
        """Counts one `kind` of off-lock work in `activity` for the block."""
        with self._activity_lock:
            self.activity[kind] += 1
        try:
            yield
        finally:
            with self._activity_lock:
                self.activity[kind] -= 1

    def activity_now(self) -> dict:
        """The off-lock work in flight, and the host's 1-minute load average (per CPU core)."""
        with self._activity_lock:
            now = {k: v for k, v in self.activity.items() if v}
        now["load_per_core"] = round(os.getloadavg()[0] / (os.cpu_count() or 1), 2)
        return now

    # -- spares -------------------------------------------------------------------------------
    def _spawn(self) -> None:
        try:
            worker = Worker(self.mode, self.base_dir, self.device_index, self.memory_limit)
            with self._cond:
                self._all.append(worker)
            with self.gpu_lock.doing("worker start"):
                worker.wait_ready(self.start_timeout, self._start_hold)
            self.startup_times.append(worker.ready.startup_s)
        except (WorkerGone, OSError) as exc:
            with self._cond:
                self._starting -= 1
                self._failure = str(exc)
                self._cond.notify_all()
            return
        with self._cond:
            self._starting -= 1
            if self._closed:
                worker.close()
                return
            self._spares.append(worker)
            self._cond.notify_all()

    def _start_hold(self, part: str):
        return self.gpu_lock.shared() if part in self.start_holds else nullcontext()

    def _fill(self) -> None:
        with self._cond:
            need = self.warm - len(self._spares) - self._starting
            self._starting += max(0, need)
        for _ in range(max(0, need)):
            threading.Thread(target=self._spawn, daemon=True, name="kernelband-worker-start").start()

    def acquire(self, timeout: float | None = None) -> Worker:
        """A ready worker for one candidate. Starts one now if none is warm."""
        timeout = timeout or self.start_timeout
        deadline = time.monotonic() + timeout
        with self._cond:
            if not self._spares and self._starting == 0:
                self._starting += 1
                threading.Thread(target=self._spawn, daemon=True, name="kernelband-worker-start").start()
            while not self._spares:
                left = deadline - time.monotonic()
                if left <= 0 or (self._starting == 0 and not self._spares):
                    raise WorkerGone("crashed", f"no worker could be started: {getattr(self, '_failure', 'timeout')}")
                self._cond.wait(min(left, 1.0))
            worker = self._spares.pop(0)
            self.start_phases.append(worker.ready.phases)
        self._fill()
        return worker

    def _spawn_profiler(self) -> None:
        try:
            worker = Worker(self.mode, self.base_dir, self.device_index, self.memory_limit, profiler=True)
            with self._cond:
                self._all.append(worker)
            # Not under the GPU lock: under ncu the start takes 10-20 s, and a timing would wait for it.
            with self.busy("profiler_start"):
                worker.wait_ready(self.start_timeout * 2)
        except (WorkerGone, OSError) as exc:
            with self._cond:
                self._profiler_failure = str(exc)
                self._cond.notify_all()
            return
        with self._cond:
            if self._closed:
                worker.close()
                return
            if self.park_profilers:
                worker.pause()
            self._profilers.append(worker)
            self._cond.notify_all()

    def set_park_profilers(self, on: bool) -> None:
        """Park (or wake) the warm profiling workers from now on, those waiting now included."""
        with self._cond:
            self.park_profilers = on
            for worker in self._profilers:
                worker.pause() if on else worker.resume()

    def acquire_profiler(self, timeout: float = 300.0) -> Worker:
        """A warm worker running under Nsight Compute; used once, like a candidate's."""
        deadline = time.monotonic() + timeout
        with self._cond:
            while not self._profilers:
                if getattr(self, "_profiler_failure", None):
                    failure, self._profiler_failure = self._profiler_failure, None
                    threading.Thread(target=self._spawn_profiler, daemon=True).start()
                    raise WorkerGone("crashed", failure)
                left = deadline - time.monotonic()
                if left <= 0:
                    raise WorkerGone("timeout", "no profiling worker started in time")
                self._cond.wait(min(left, 1.0))
            worker = self._profilers.pop(0)
            if worker.paused:
                worker.resume()
        threading.Thread(target=self._spawn_profiler, daemon=True).start()
        return worker

    def release(self, worker: Worker) -> None:
        """A candidate's worker is never reused."""
        worker.close()
        with self._cond:
            if worker in self._all:
                self._all.remove(worker)

    # -- references ---------------------------------------------------------------------------
    # A reference worker is leased while an evaluation uses it, and only idle ones are closed to keep the
    # number of references down: with more tasks in flight than `max_references`, there are more for a while.
    def reference(self, key: str) -> Worker | None:
        """The task's reference worker, leased to the caller (give it back with `release_reference`)."""
        with self._cond:
            worker = self._references.get(key)
            if worker is not None and worker.alive():
                self._references.move_to_end(key)
                worker.users += 1
                return worker
            if worker is not None:
                del self._references[key]
        return None

    def keep_reference(self, key: str, worker: Worker) -> None:
        """Keep a newly loaded reference worker, leased to the caller."""
        with self._cond:
            worker.users += 1
            self._references[key] = worker
        self._trim_references()

    def release_reference(self, worker: Worker) -> None:
        with self._cond:
            worker.users = max(0, worker.users - 1)
        self._trim_references()

    def _trim_references(self) -> None:
        with self._cond:
            idle = [k for k, w in self._references.items() if w.users == 0]  # oldest first
            extra = len(self._references) - self._max_references
            closing = [self._references.pop(k) for k in idle[:max(0, extra)]]
        for old in closing:
            old.close()

    def keep_at_most(self, n: int) -> None:
        """From now on keep at most `n` idle task references; closes the oldest idle ones beyond that."""
        with self._cond:
            self._max_references = max(1, n)
        self._trim_references()

    def keep_at_least(self, n: int) -> None:
        """Keep at least `n` idle task references from now on (raises the limit, never lowers it)."""
        with self._cond:
            self._max_references = max(self._max_references, n)

    def close_idle_references(self, keep: str, enough: Callable[[], bool] | None = None) -> int:
        """Close kept references that no evaluation is using, except task `keep`'s, the least recently used
        first, until `enough()` says the GPU has room (None: all of them); returns how many. Each holds a CUDA
        context and whatever its module keeps on the GPU: room for an evaluation that ran out of memory (run
        AM: fused_activation's 1 GiB inputs found 336 MiB free, with 29 references kept and the GPU held
        alone). A task whose reference was closed sets it up again when next evaluated."""
        closed = 0
        while enough is None or not enough():
            with self._cond:
                idle = [k for k, w in self._references.items() if w.users == 0 and k != keep]  # oldest first
                old = self._references.pop(idle[0]) if idle else None
            if old is None:
                break
            old.close()
            closed += 1
        return closed

    def drop_reference(self, key: str) -> None:
        with self._cond:
            worker = self._references.pop(key, None)
        if worker is not None:
            worker.close()

    # -- housekeeping -------------------------------------------------------------------------
    def snapshot(self) -> dict:
        """What the pool is doing now: each worker's request in progress (role, pid, op, seconds), the GPU
        lock's holders and waiters and its accounting so far, the off-lock work, and the CPU each kind of worker used since the last
        snapshot (`cpu_use`). A sweep prints it as its heartbeat, so that a stall can be told from slow work
        afterwards."""
        now = time.monotonic()
        with self._cond:
            refs = {id(w): k for k, w in self._references.items()}
            workers = list(dict.fromkeys(list(self._all) + list(self._references.values())))
        asked = []
        for w in workers:
            current = w.asked
            if current is not None:
                role = f"reference {refs[id(w)]}" if id(w) in refs else "profiler" if w.profiler else "candidate"
                asked.append(f"{role} pid {w.proc.pid}: {current[0]} {now - current[1]:.0f}s")
        return {"requests": asked, "gpu_lock": self.gpu_lock.state(), "gpu_memory": self.gpu_lock.memory(),
                "gpu_lock_stats": self.gpu_lock.stats(),  # since the pool began (no part resets a sweep's)
                "activity": self.activity_now(),
                "spares": len(self._spares), "profilers": len(self._profilers), "cpu": self.cpu_use()}

    def cpu_use(self) -> dict[str, list]:
        """CPU seconds each kind of live worker used since the last call, as {kind: [workers, own, children]}.
        Kinds are candidate, reference and profiler, with "starting" added for those not yet ready (and for
        what a worker used before the first look at it), "idle" for the warm ones waiting for work and
        "parked" for the waiting ones stopped (`park_profilers`). A
        profiler's own process is ncu's front end and its child the Python worker, so this tells whether
        idle front ends eat the host's CPU (a lead from `ps` in run J, where %CPU is a lifetime average)."""
        with self._cond:
            idle = {id(w) for w in self._spares + self._profilers}
            refs = {id(w) for w in self._references.values()}
            workers = list(dict.fromkeys(list(self._all) + list(self._references.values())))
        before, seen, out = self._cpu_seen, {}, {}
        for w in workers:
            used = process_cpu(w.proc.pid)
            if used is None:
                continue
            seen[w.proc.pid] = used
            kind = "reference" if id(w) in refs else "profiler" if w.profiler else "candidate"
            # what a worker used before its first look is its start-up, whatever it does now
            fresh = w.proc.pid not in before
            kind += (" starting" if fresh or w.ready is None else " parked" if w.paused
                     else " idle" if id(w) in idle else "")
            last = before.get(w.proc.pid, (0.0, 0.0))
            row = out.setdefault(kind, [0, 0.0, 0.0])
            row[0] += 1
            row[1] += used[0] - last[0]
            row[2] += used[1] - last[1]
        self._cpu_seen = seen
        return {k: [n, round(own, 1), round(kids, 1)] for k, (n, own, kids) in sorted(out.items())}

    def _watch(self) -> None:
        while not self._closed:
            with self._cond:
                workers = list(self._all) + list(self._references.values())
            for w in workers:
                w.check_memory()
            time.sleep(0.2)

    def close(self) -> None:
        with self._cond:
            self._closed = True
            workers = list(self._spares) + list(self._references.values()) + list(self._all) + self._profilers
            self._spares.clear()
            self._profilers.clear()
            self._references.clear()
        for w in dict.fromkeys(workers):
            w.close()
        self.gpu_lock.close()
        shutil.rmtree(self.base_dir, ignore_errors=True)

    def __enter__(self) -> WorkerPool:
        return self

    def __exit__(self, *exc) -> None:
        self.close()
