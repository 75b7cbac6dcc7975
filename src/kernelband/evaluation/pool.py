"""Pre-warmed worker processes.

Starting Python, importing torch and initialising CUDA costs seconds, so the
pool starts workers ahead of time and hands out ready ones. A candidate gets a
fresh worker and the worker is killed after that one candidate: a CUDA fault,
a hang or a monkey-patch dies with it. The reference of a task keeps a worker
of its own across evaluations (it is the task's code, not a candidate's).
"""

from __future__ import annotations

import os
import shutil
import tempfile
import threading
import time
from collections import Counter, OrderedDict
from collections.abc import Callable
from contextlib import contextmanager

import psutil

from kernelband.evaluation.gone import WorkerGone
from kernelband.evaluation.gpulock import GpuLock, gpu_lock_path
from kernelband.evaluation.workers import Worker, process_cpu


class WorkerPool:
    """Keeps `warm` workers started ahead of need, and one worker per task reference."""

    def __init__(self, mode: str, warm: int = 2, device_index: int | None = 0,
                 memory_limit: int | None = None, start_timeout: float = 180.0, max_references: int = 4,
                 profiler: bool = False, warm_profilers: int | None = None):
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
        self._failed_starts = 0
        self._failure = ""
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
        self._watchdog = threading.Thread(target=self._watch, name="kernelband-memory-watchdog", daemon=True)
        self._watchdog.start()
        self._fill()
        # Each evaluation uses up one profiling worker, and one starts slowly under ncu (10-20 s): by default
        # keep more warm than candidates may be in flight. (Each idle one's ncu front end was seen using most
        # of a CPU core on the GPU machine, until it is parked: see `_spawn_profiler`.)
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
                self._failed_starts += 1
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
        """Both parts of a worker's start on the GPU (CUDA's context, its first kernel) share the GPU lock, so
        that no timing runs beside them; a timing that asks meanwhile goes between the two."""
        return self.gpu_lock.shared()

    def _fill(self) -> None:
        with self._cond:
            need = self.warm - len(self._spares) - self._starting
            self._starting += max(0, need)
        for _ in range(max(0, need)):
            threading.Thread(target=self._spawn, daemon=True, name="kernelband-worker-start").start()

    def acquire(self) -> Worker:
        """A ready worker for one candidate: a warm one, else the next whose start ends. It waits as long as a
        start is under way, with no deadline of its own: each start bounds its own steps (`Worker.wait_ready`)
        but not its waits for the GPU lock, which a busy GPU's timings can hold for minutes. It raises once a
        start that ends while it waits has failed."""
        with self._cond:
            failed = self._failed_starts
            while not self._spares:
                if self._closed:
                    raise WorkerGone("crashed", "the worker pool is closed")
                if self._failed_starts > failed:
                    raise WorkerGone("crashed", f"no worker could be started: {self._failure}")
                if self._starting == 0:
                    self._starting += 1
                    threading.Thread(target=self._spawn, daemon=True, name="kernelband-worker-start").start()
                self._cond.wait(1.0)
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
            # A warm profiling worker's ncu front end keeps a CPU core busy while it waits for work: parked,
            # its front end is stopped (SIGSTOP) until it is handed out; its Python worker, idle, is not
            # (`Worker.pause`). Outcomes and φ are the same parked as not (BENCHMARKS.md, evaluator
            # throughput), and a sweep's idle profilers otherwise take cores its runs need.
            worker.pause()
            self._profilers.append(worker)
            self._cond.notify_all()

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
        context and whatever its module keeps on the GPU: room for an evaluation that ran out of memory
        (fused_activation's 1 GiB inputs found 336 MiB free with 29 references kept, the GPU held alone). A task whose reference was closed sets it up again when next evaluated."""
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
        "parked" for the waiting ones stopped. A profiler's own process is ncu's front end and its child the
        Python worker, so this tells whether idle front ends eat the host's CPU (`ps`'s %CPU is a lifetime
        average)."""
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
