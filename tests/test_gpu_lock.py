"""Who may use the GPU at once: correctness runs share it, a timing has it alone."""

from __future__ import annotations

import sys
import threading
import time
from contextlib import contextmanager
from pathlib import Path

import pytest

from kernelband.evaluation.gpulock import GpuLock

GOOD = (Path(__file__).parent / "hostile" / "good.py").read_text()


def _holder(lock: GpuLock, mode: str, inside: threading.Event, leave: threading.Event,
            *args: int) -> threading.Thread:
    def run():
        with getattr(lock, mode)(*args):
            inside.set()
            leave.wait(10)

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    return thread


def test_shared_holders_overlap_and_exclusive_waits_for_them():
    lock = GpuLock()
    in_a, in_b, in_x = threading.Event(), threading.Event(), threading.Event()
    leave_a, leave_b, leave_x = threading.Event(), threading.Event(), threading.Event()
    a = _holder(lock, "shared", in_a, leave_a)
    b = _holder(lock, "shared", in_b, leave_b)
    assert in_a.wait(5) and in_b.wait(5), "two correctness runs may share the GPU"
    x = _holder(lock, "exclusive", in_x, leave_x)
    assert not in_x.wait(0.3), "a timing started while correctness runs were on the GPU"
    # A waiting timing goes first: a new correctness run does not slip in ahead of it.
    in_c, leave_c = threading.Event(), threading.Event()
    c = _holder(lock, "shared", in_c, leave_c)
    assert not in_c.wait(0.3)
    leave_a.set()
    assert not in_x.wait(0.3), "a timing started while one correctness run was still on the GPU"
    leave_b.set()
    assert in_x.wait(5)
    assert not in_c.wait(0.3), "a correctness run started during a timing"
    leave_x.set()
    assert in_c.wait(5)
    leave_c.set()
    for t in (a, b, c, x):
        t.join(5)


def _until(lock: GpuLock, text: str) -> None:
    deadline = time.monotonic() + 5
    while not any(text in h for h in lock.state()) and time.monotonic() < deadline:
        time.sleep(0.01)
    assert any(text in h for h in lock.state()), lock.state()


def test_shared_steps_fit_in_the_memory_budget_and_wait_in_order_of_arrival():
    """Steps share the GPU while the bytes they declare fit in the budget; one that does not fit waits, and so
    do the steps that come after it, even small ones (it is not starved); a step alone always goes."""
    lock = GpuLock()
    lock.budget = 100
    events = {k: (threading.Event(), threading.Event()) for k in "abcd"}
    a = _holder(lock, "shared", *events["a"], 60)
    assert events["a"][0].wait(5)
    b = _holder(lock, "shared", *events["b"], 60)
    assert not events["b"][0].wait(0.3), "two steps of 60 bytes shared a budget of 100"
    c = _holder(lock, "shared", *events["c"], 10)
    assert not events["c"][0].wait(0.3), "a small step went ahead of a larger one waiting before it"
    assert sum(h.startswith(f"{t.name}: waiting to share") for t in (b, c) for h in lock.state()) == 2
    assert lock.memory() == {"declared": 60, "budget": 100, "waiting": 2}  # a sweep's heartbeat shows it
    events["a"][1].set()
    assert events["b"][0].wait(5) and events["c"][0].wait(5), "60 + 10 bytes fit once the first step ended"
    events["b"][1].set()
    events["c"][1].set()
    for t in (a, b, c):
        t.join(5)
    d = _holder(lock, "shared", *events["d"], 500)
    assert events["d"][0].wait(5), "a step larger than the budget waited with the GPU free"
    events["d"][1].set()
    d.join(5)
    assert lock.state() == []


def test_the_lock_says_who_holds_it_and_who_waits():
    """A sweep's heartbeat prints `state()`: a stall shows which thread holds the GPU and which waits."""
    lock = GpuLock()
    inside, leave = threading.Event(), threading.Event()
    holder = _holder(lock, "shared", inside, leave)
    assert inside.wait(5)
    in_x, leave_x = threading.Event(), threading.Event()
    timer = _holder(lock, "exclusive", in_x, leave_x)
    deadline = time.monotonic() + 5
    while not any(h.startswith(f"{timer.name}: ") for h in lock.state()) and time.monotonic() < deadline:
        time.sleep(0.01)
    state = lock.state()
    assert sorted(h.rsplit(" ", 1)[0] for h in state) == sorted([f"{holder.name}: shared", f"{timer.name}: waiting"])
    leave.set()
    assert in_x.wait(5)
    state = lock.state()
    assert [h.rsplit(" ", 1)[0] for h in state] == [f"{timer.name}: exclusive"], state
    leave_x.set()
    timer.join(5)
    assert lock.state() == []


HOLD = """
import sys
from kernelband.evaluation.gpulock import GpuLock
lock = GpuLock(sys.argv[1])
with lock.exclusive():
    print("in", flush=True)
    sys.stdin.readline()
"""


def test_the_lock_accounts_for_its_time_by_state_and_by_step():
    """`stats()`: a check that shares the GPU for 0.6 s, a timing asking for it alone 0.2 s in and holding it
    0.3 s: about 0.2 s shared, 0.4 s draining (the check's, while the timing waits), 0.3 s alone; the check's
    hold is named by `doing`, the timing's by its thread when nothing names it."""
    lock = GpuLock()
    lock.stats(reset=True)
    started = threading.Event()

    def check():
        with lock.doing("correctness run"), lock.shared():
            started.set()
            time.sleep(0.6)

    def timing():
        with lock.exclusive():
            time.sleep(0.3)

    a = threading.Thread(target=check)
    b = threading.Thread(target=timing, name="timer_3")
    a.start()
    started.wait()
    time.sleep(0.2)
    b.start()
    a.join()
    b.join()
    stats = lock.stats(reset=True)
    seconds = stats["seconds"]
    assert 0.1 < seconds["shared"] < 0.35 and 0.3 < seconds["draining"] < 0.55 and 0.25 < seconds["alone"] < 0.5
    steps = {(r["mode"], r["step"]): r for r in stats["steps"]}
    assert set(steps) == {("shared", "correctness run"), ("exclusive", "timer")}
    check_row, timing_row = steps["shared", "correctness run"], steps["exclusive", "timer"]
    assert check_row["holds"] == 1 and 0.55 < check_row["seconds"] < 0.8 and 0.3 < check_row["draining"] < 0.55
    assert timing_row["holds"] == 1 and 0.25 < timing_row["seconds"] < 0.5 and timing_row["draining"] == 0
    assert lock.stats()["steps"] == []  # reset


def test_a_timing_waits_for_another_process_timing_on_the_same_gpu(tmp_path):
    """Two KernelBand processes on one GPU (bench 3's two sweeps on one H200): their exclusive holders take
    the GPU's lock file in turn, so two timings never overlap; a correctness run is not held up by it."""
    import subprocess

    path = str(tmp_path / "kernelband-gpu-0.lock")
    other = subprocess.Popen([sys.executable, "-c", HOLD, path], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                             text=True, env={"PYTHONPATH": str(Path(__file__).resolve().parents[1] / "src"),
                                             "PATH": "/usr/bin:/bin"})
    try:
        assert other.stdout.readline().strip() == "in"
        lock = GpuLock(path)
        in_s, leave_s = threading.Event(), threading.Event()
        _holder(lock, "shared", in_s, leave_s)
        assert in_s.wait(5), "a correctness run waited for another process's timing"
        leave_s.set()
        in_x, leave_x = threading.Event(), threading.Event()
        x = _holder(lock, "exclusive", in_x, leave_x)
        assert not in_x.wait(0.5), "a timing started while another process was timing on the same GPU"
        assert any(h.startswith(f"{x.name}: waiting for another process") for h in lock.state()), lock.state()
        other.stdin.write("go\n")
        other.stdin.flush()
        assert in_x.wait(5)
        leave_x.set()
        x.join(5)
        lock.close()
    finally:
        other.kill()
        other.wait(10)


def test_a_lock_file_that_cannot_be_opened_is_a_one_line_error(tmp_path):
    """Another user's lock file serves (flock needs only read access); a directory where none can be made is
    a user error that says what to do, not a traceback."""
    from kernelband.errors import UserError

    theirs = tmp_path / "kernelband-gpu-0.lock"
    theirs.write_text("")
    theirs.chmod(0o444)  # read-only, as another user's file would be to us
    GpuLock(str(theirs)).close()
    with pytest.raises(UserError, match="cannot open the GPU lock file .*; set TMPDIR"):
        GpuLock(str(tmp_path / "missing" / "kernelband-gpu-0.lock"))


@pytest.mark.parametrize("visible, index, name", [(None, 1, "kernelband-gpu-1.lock"),
                                                  ("2,3", 1, "kernelband-gpu-3.lock"),
                                                  ("GPU-8f1c/a", 0, "kernelband-gpu-GPU-8f1c_a.lock")])
def test_the_lock_file_names_the_physical_gpu(monkeypatch, visible, index, name):
    from kernelband.evaluation.gpulock import gpu_lock_path

    if visible is None:
        monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    else:
        monkeypatch.setenv("CUDA_VISIBLE_DEVICES", visible)
    assert Path(gpu_lock_path(index)).name == name


def test_the_pool_snapshot_names_each_request_in_progress(evaluator, vector_add):
    """`WorkerPool.snapshot()`: a candidate's request in progress, with its worker's pid and how long."""
    pool = evaluator.pool
    worker = pool.acquire()
    slow = "import time\ntime.sleep(3)\n" + GOOD
    asking = threading.Thread(target=worker.request, daemon=True, args=(
        {"op": "load", "role": "cand", "task": vector_add.wire(), "module_source": slow}, 30))
    try:
        asking.start()
        deadline = time.monotonic() + 10
        while not pool.snapshot()["requests"] and time.monotonic() < deadline:
            time.sleep(0.05)
        requests = pool.snapshot()["requests"]
        assert any(r.startswith(f"candidate pid {worker.proc.pid}: load ") for r in requests), requests
        asking.join(30)
        assert not [r for r in pool.snapshot()["requests"] if f"pid {worker.proc.pid}:" in r]
    finally:
        pool.release(worker)


def test_the_pool_counts_cpu_seconds_by_kind_of_worker_since_the_last_look(evaluator, vector_add):
    """`WorkerPool.cpu_use()` (in the heartbeat): a candidate busy importing its module shows about the CPU
    time it burned, apart from the idle spares, and a second look counts only what came after the first."""
    pool = evaluator.pool
    pool.cpu_use()  # start counting from here: the workers' start-up is behind us
    worker = pool.acquire()
    busy = "import time\nt = time.process_time()\nwhile time.process_time() - t < 1.5:\n    pass\n" + GOOD
    try:
        reply = worker.request({"op": "load", "role": "cand", "task": vector_add.wire(), "module_source": busy}, 60)
        assert reply.get("ok"), reply
        used = pool.cpu_use()
        assert used["candidate"][0] == 1 and used["candidate"][1] >= 1.4, used
        # idle spares burned next to nothing; a replacement that started meanwhile is "candidate starting"
        assert used.get("candidate idle", [0, 0.0])[1] < 1.0, used
        assert pool.cpu_use()["candidate"][1] < 0.5  # nothing new since the last look
    finally:
        pool.release(worker)


def test_a_process_cpu_is_split_into_its_own_and_its_childrens():
    import subprocess
    import sys

    from kernelband.evaluation.workers import process_cpu

    spin = "import time\nt = time.process_time()\nwhile time.process_time() - t < 1.0:\n    pass\ntime.sleep(30)"
    front = subprocess.Popen(["bash", "-c", f"{sys.executable} -c '{spin}'; true"])  # like ncu and its worker
    try:
        deadline = time.monotonic() + 20
        while (process_cpu(front.pid) or (0, 0))[1] < 0.95 and time.monotonic() < deadline:
            time.sleep(0.1)
        own, children = process_cpu(front.pid)
        assert children >= 0.95 and own < 0.5, (own, children)  # 1 s of spinning, in clock ticks
    finally:
        front.kill()
        front.wait()
    assert process_cpu(front.pid) is None


class _Recording(GpuLock):
    """Records the evaluation's holds (`held`) and, apart, the starts of new workers (`starts`)."""

    def __init__(self):
        super().__init__()
        self.held: list[str] = []
        self.starts: list[str] = []
        self.nbytes: list[int] = []  # what each shared step of the evaluation declared

    def _record(self, mode: str) -> None:
        starting = threading.current_thread().name == "kernelband-worker-start"
        (self.starts if starting else self.held).append(mode)

    @contextmanager
    def shared(self, nbytes: int = 0):
        with super().shared(nbytes):
            self._record("shared")
            if threading.current_thread().name != "kernelband-worker-start":
                self.nbytes.append(nbytes)
            yield

    @contextmanager
    def exclusive(self):
        with super().exclusive():
            self._record("exclusive")
            yield


def test_evaluation_checks_under_the_shared_lock_and_times_alone(evaluator, vector_add):
    lock = evaluator.pool.gpu_lock
    evaluator.pool.drop_reference(vector_add.key)
    try:
        evaluator.pool.gpu_lock = rec = _Recording()
        evaluator.info(vector_add)  # the reference's set-up runs it on the GPU: beside checks, never a timing
        assert rec.held and set(rec.held) == {"shared"}
        rec.held.clear()
        assert evaluator.evaluate(vector_add, GOOD).ok
        # each correctness step (a shape's runs, a comparison, the second call) shares, and so does the
        # features run (launches, footprint: counted in the worker); then the timing has the GPU alone
        assert rec.held[-2:] == ["shared", "exclusive"] and rec.held.count("exclusive") == 1
        n_shapes = sum(1 for s in evaluator.info(vector_add).shapes if not s.held_out)
        assert rec.held.count("shared") >= 2 * min(n_shapes, 2)
        assert evaluator.evaluate(vector_add, GOOD).ok
        # each evaluation used up a worker: its replacement initialised CUDA beside checks, never a timing
        deadline = time.monotonic() + 120
        while len(rec.starts) < 2 and time.monotonic() < deadline:
            time.sleep(0.2)
        assert rec.starts[:2] == ["shared", "shared"]
    finally:
        evaluator.pool.gpu_lock = lock


class _Signalling(GpuLock):
    """Says when the GPU is first taken alone, and when that hold ends."""

    def __init__(self):
        super().__init__()
        self.taken, self.freed = threading.Event(), threading.Event()

    @contextmanager
    def exclusive(self):
        with super().exclusive():
            self.taken.set()
            yield
        self.freed.set()


def test_a_check_with_the_gpu_alone_throughout_never_waits_behind_checks_that_wait_for_it(evaluator, vector_add):
    """An evaluation whose whole check holds the GPU alone (a second attempt after running out of memory)
    compares its outputs on a thread of its own: the threads that every evaluation's comparisons share may
    all be busy with comparisons waiting for that very hold to end. Here each shared thread waits (up to
    30 s) for the hold to end: the check must end first (on an H100, 8 evaluations once stalled for good)."""
    from kernelband.evaluation.records import PRESETS

    evaluator.info(vector_add)
    lock = evaluator.pool.gpu_lock
    evaluator.pool.gpu_lock = signalling = _Signalling()
    judges = evaluator.checks.judges
    try:
        def waiting_to_share() -> bool:
            signalling.taken.wait(60)
            return signalling.freed.wait(30)

        waiters = [judges.submit(waiting_to_share) for _ in range(judges._max_workers)]
        t0 = time.monotonic()
        with evaluator.references.lease(vector_add) as ref:
            result = evaluator._evaluate(vector_add, ref, GOOD, PRESETS["default"], "search", 1, alone=True)
        assert result.ok, result.detail
        assert all(w.result(timeout=60) for w in waiters), "the check waited behind the threads waiting for it"
        assert time.monotonic() - t0 < 30
    finally:
        evaluator.pool.gpu_lock = lock


def test_an_autotuner_times_its_configs_alone_and_the_check_shares(evaluator, vector_add):
    """An autotuner: one call per shape, all in one hold of the GPU alone (the autotuner's choice, nothing
    else of the evaluation beside it), then the correctness check shares the GPU like any other module's."""
    lock = evaluator.pool.gpu_lock
    evaluator.info(vector_add)
    try:
        evaluator.pool.gpu_lock = rec = _Recording()
        result = evaluator.evaluate(vector_add, GOOD + "\n# triton.autotune\n")
        assert result.ok, result.detail
        assert len(result.shapes) >= 2
        # every shape's autotuning call in one hold: one wait for the checks in progress, not one per shape
        assert rec.held[0] == "exclusive" and rec.held.count("exclusive") == 2
        check = rec.held[1:-2]
        assert check and set(check) == {"shared"}, rec.held
        assert rec.held[-2:] == ["shared", "exclusive"]  # the features, then the timing
        assert result.seconds["tune"] > 0
        # a module without an autotuner is not called beforehand
        rec.held.clear()
        plain = evaluator.evaluate(vector_add, GOOD)
        assert plain.ok and "tune" not in plain.seconds and rec.held[0] == "shared"
    finally:
        evaluator.pool.gpu_lock = lock


def test_a_reference_in_use_is_not_closed_to_make_room(evaluator, vector_add):
    """With more tasks in flight than the pool keeps references for, an evaluation's reference must stay up
    (closing it killed the reference in the middle of a timing on the GPU); idle ones go instead."""
    from kernelband.tasks import load_task

    softmax = load_task("examples:softmax")
    keep = evaluator.pool._max_references
    evaluator.pool._max_references = 1
    try:
        with evaluator.references.lease(vector_add) as ref:
            evaluator.info(softmax)  # a second task's reference, over the limit of one
            assert ref.alive(), "the reference in use was closed"
            # the idle one (softmax's) went instead
            assert list(evaluator.pool._references.values()) == [ref]
        assert evaluator.evaluate(vector_add, GOOD).ok
        assert len(evaluator.pool._references) == 1
    finally:
        evaluator.pool._max_references = keep


def test_lowering_the_reference_limit_closes_the_oldest_idle_references(evaluator, vector_add):
    from kernelband.tasks import load_task

    softmax = load_task("examples:softmax")
    keep = evaluator.pool._max_references
    try:
        evaluator.info(vector_add)
        evaluator.info(softmax)
        first, second = list(evaluator.pool._references.values())[-2:]
        evaluator.pool.keep_at_most(1)
        assert list(evaluator.pool._references.values()) == [second]
        assert not first.alive() and second.alive()
    finally:
        evaluator.pool.keep_at_most(keep)


class _Checking(GpuLock):
    """Fails the test if a timing ever overlaps a correctness step."""

    def __init__(self):
        super().__init__()
        self.guard = threading.Lock()
        self.shared_now = self.alone_now = self.most_shared = 0
        self.violations: list[str] = []

    def _enter(self, kind: str) -> None:
        with self.guard:
            if kind == "exclusive":
                if self.shared_now or self.alone_now:
                    self.violations.append(f"exclusive while {self.shared_now} shared, {self.alone_now} alone")
                self.alone_now += 1
            else:
                if self.alone_now:
                    self.violations.append("shared during an exclusive hold")
                self.shared_now += 1
                self.most_shared = max(self.most_shared, self.shared_now)

    def _leave(self, kind: str) -> None:
        with self.guard:
            if kind == "exclusive":
                self.alone_now -= 1
            else:
                self.shared_now -= 1

    @contextmanager
    def _held(self, kind: str, *nbytes: int):
        with getattr(super(), kind)(*nbytes):
            self._enter(kind)
            try:
                yield
            finally:
                self._leave(kind)

    def shared(self, nbytes: int = 0):
        return self._held("shared", nbytes)

    def exclusive(self):
        return self._held("exclusive")


def test_concurrent_evaluations_never_time_during_a_check(evaluator, vector_add):
    """Three tasks, four evaluations in flight (one task twice), more tasks than references kept: every
    evaluation comes out right, and no timing overlaps a correctness step."""
    from concurrent.futures import ThreadPoolExecutor

    from kernelband.tasks import load_task

    tasks = [vector_add, vector_add, load_task("examples:transpose"), load_task("examples:dequantize")]
    lock, keep = evaluator.pool.gpu_lock, evaluator.pool._max_references
    evaluator.pool.gpu_lock = checking = _Checking()
    evaluator.pool._max_references = 1
    try:
        with ThreadPoolExecutor(4) as pool:
            results = list(pool.map(lambda t: evaluator.evaluate(t), tasks))
    finally:
        evaluator.pool.gpu_lock, evaluator.pool._max_references = lock, keep
    assert [r.outcome.value for r in results] == ["ok"] * 4, [(r.outcome, r.detail) for r in results]
    assert not checking.violations, checking.violations[:3]
    # A warm worker started to replace a used one holds the GPU shared while it starts, and may still be
    # starting when the evaluations return: every hold must end, not necessarily before they do.
    deadline = time.monotonic() + 60
    while (checking.alone_now or checking.shared_now) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert checking.alone_now == 0 and checking.shared_now == 0


def test_the_number_of_workers_kept_started_under_ncu_is_a_setting(monkeypatch):
    from kernelband.evaluation import pool as pool_mod

    started = []
    monkeypatch.setattr(pool_mod.WorkerPool, "_spawn_profiler", lambda self: started.append(self))
    for setting, expected in ((None, 0 + 2), (3, 3), (0, 1)):  # default: warm + 2; at least one
        started.clear()
        pool = pool_mod.WorkerPool("gpu", warm=0, profiler=True, warm_profilers=setting)
        try:
            deadline = time.monotonic() + 5
            while len(started) < expected and time.monotonic() < deadline:
                time.sleep(0.01)
            time.sleep(0.05)
            assert len(started) == expected
        finally:
            pool.close()


# Stands in for Nsight Compute's front end: runs the worker command after ncu's options and, like the real
# one on the GPU machine (0.99 of a core per idle profiling worker), spins meanwhile. Like the real one, it
# loses its worker once the worker is stopped: the real ncu's worker never answers again; this one kills it.
STAND_IN_NCU = """
import os, signal, subprocess, sys, threading
args = sys.argv[1:]
child = subprocess.Popen(args[args.index("--log-file") + 2:], close_fds=False)  # the worker's socket
def spin():
    while True:
        pass
if SPIN:
    threading.Thread(target=spin, daemon=True).start()
while True:
    _, status = os.waitpid(child.pid, os.WUNTRACED)
    if os.WIFSTOPPED(status):
        os.kill(child.pid, signal.SIGKILL)
    else:
        sys.exit(os.waitstatus_to_exitcode(status))
"""


def _stand_in(tmp_path, monkeypatch, spin: bool):
    ncu = tmp_path / "ncu"
    ncu.write_text(f"#!{sys.executable}\nSPIN = {spin}\n{STAND_IN_NCU}")
    ncu.chmod(0o755)
    monkeypatch.setenv("KERNELBAND_NCU", str(ncu))
    return ncu


@pytest.fixture
def stand_in_ncu(tmp_path, monkeypatch):
    """KERNELBAND_NCU pointing at STAND_IN_NCU, as an executable file: its front end spins, as the real one's."""
    return _stand_in(tmp_path, monkeypatch, spin=True)


@pytest.fixture
def quiet_ncu(tmp_path, monkeypatch):
    """STAND_IN_NCU without the spinning front end, for tests that do not look at its CPU: on a machine of two
    cores, a core spun per profiling worker slows every other process of the test."""
    return _stand_in(tmp_path, monkeypatch, spin=False)


def _parked(worker, stopped: bool, wait: float = 10.0) -> bool:
    """Whether the worker's front end (its process and every descendant but the Python worker) reaches the
    state, stopped or all not stopped, within `wait` seconds (a signal's delivery is asynchronous), while
    the Python worker itself is never stopped."""
    import psutil

    deadline = time.monotonic() + wait
    while True:
        front = psutil.Process(worker.proc.pid)
        procs = [front] + front.children(recursive=True)
        inner = {p.status() == psutil.STATUS_STOPPED for p in procs if p.pid == worker.ready.pid}
        outer = {p.status() == psutil.STATUS_STOPPED for p in procs if p.pid != worker.ready.pid}
        if inner == {False} and outer == {stopped}:
            return True
        if time.monotonic() > deadline:
            return False
        time.sleep(0.02)


def _cpu_over(pid: int, seconds: float) -> float:
    from kernelband.evaluation.workers import process_cpu

    before = process_cpu(pid)
    time.sleep(seconds)
    after = process_cpu(pid)
    return sum(after) - sum(before)


def test_a_parked_profiling_worker_uses_no_cpu_until_it_is_handed_out(stand_in_ncu, vector_add):
    """Parking: a ready profiling worker's front end is stopped while it waits, its Python worker
    left running (the stand-in, like the real ncu, loses a stopped worker), shows as "profiler parked", and
    runs and answers again once handed out."""

    from kernelband.evaluation.pool import WorkerPool

    pool = WorkerPool("interpreter", warm=0)
    try:
        pool._spawn_profiler()  # one worker started under the stand-in, ready, then parked
        (worker,) = pool._profilers
        assert worker.paused and _parked(worker, True)
        pool.cpu_use()  # the first look counts the start-up
        assert _cpu_over(worker.proc.pid, 1.0) < 0.05
        assert "profiler parked" in pool.cpu_use()

        assert pool.acquire_profiler(timeout=5) is worker and not worker.paused
        assert _parked(worker, False)
        assert _cpu_over(worker.proc.pid, 1.0) > 0.2  # the stand-in spins again: parking kept it quiet
        reply = worker.request({"op": "load", "role": "cand", "task": vector_add.wire(), "module_source": GOOD},
                               60)
        assert reply.get("ok"), reply
    finally:
        pool.close()


def test_a_profiled_candidate_is_timed_and_profiled_in_one_hold_of_the_gpu(quiet_ncu, vector_add, monkeypatch):
    """ncu's profiled run comes right after the timing, inside the same exclusive hold: the checks in
    progress are waited for once per candidate, not twice."""
    from kernelband.evaluation import ncu
    from kernelband.evaluation.evaluator import Evaluator, Limits

    ev = Evaluator(mode="interpreter", warm=1, use_ncu=True, limits=Limits(load_s=120, run_s=30, time_s=60))
    try:
        ev.pool._spawn_profiler()  # the interpreter's pool starts none of its own; each use starts the next
        ev.info(vector_add)
        ev.pool.gpu_lock = rec = _Recording()
        measure = ncu.Profile.measure

        def recorded(self):
            rec.held.append("profile alone" if rec._alone else "profile not alone")
            return measure(self)

        warm = ncu.Profile.warm

        def recorded_warm(self):
            rec.held.append("warm alone" if rec._alone else "warm shared")
            return warm(self)

        monkeypatch.setattr(ncu.Profile, "measure", recorded)
        monkeypatch.setattr(ncu.Profile, "warm", recorded_warm)
        result = ev.evaluate(vector_add, GOOD)
        assert result.ok, result.detail
        # the profiler's inputs and warm-up call share the GPU (a step of their own, after the features run);
        # the profiled run alone, in the timing's hold
        assert rec.held[-5:] == ["shared", "shared", "warm shared", "exclusive", "profile alone"], rec.held
        assert rec.held.count("exclusive") == 1
        assert not any("warm-up" in n for n in result.notes), result.notes  # the warm-up ran (on the CPU here)
        assert any(n.startswith("ncu: profiling run failed") for n in result.notes), result.notes  # no CUDA here
        assert result.seconds["profile_alone"] > 0
        rec.held.clear()
        # an autotuner's first call times its configs: no shared warm-up
        assert ev.evaluate(vector_add, GOOD + "\n# triton.autotune\n").ok
        assert "warm shared" not in rec.held and rec.held[-2:] == ["exclusive", "profile alone"], rec.held
    finally:
        ev.close()


class _SlowToHold(_Recording):
    """Every exclusive hold is granted 0.3 s late, as if checks in progress had to end first; every shared
    hold 0.05 s late."""

    @contextmanager
    def exclusive(self):
        time.sleep(0.3)
        with super().exclusive():
            yield

    @contextmanager
    def shared(self, nbytes: int = 0):
        time.sleep(0.05)
        with super().shared(nbytes):
            yield


def test_the_wait_to_have_the_gpu_alone_is_counted_apart(evaluator, vector_add):
    """`seconds["gpu_wait_alone"]`: the part of `gpu_wait` spent waiting for an exclusive hold (the checks in
    progress ending), which is what the single hold per candidate saves; shared waits are not in it."""
    lock = evaluator.pool.gpu_lock
    evaluator.info(vector_add)
    try:
        evaluator.pool.gpu_lock = rec = _SlowToHold()
        result = evaluator.evaluate(vector_add, GOOD)
        assert result.ok, result.detail
        alone = rec.held.count("exclusive")
        assert alone == 1
        assert result.seconds["gpu_wait_alone"] >= 0.3 * alone
        # the evaluation's own shared steps (at least a check and the features run; the reference's runs on a
        # side thread are waited for there)
        assert result.seconds["gpu_wait"] - result.seconds["gpu_wait_alone"] >= 0.05 * 2
    finally:
        evaluator.pool.gpu_lock = lock


OUT_OF_MEMORY = GOOD.replace("    out = torch.empty_like(x)\n",
                             "    raise torch.OutOfMemoryError('CUDA out of memory. Tried to allocate 1.00 GiB')\n")


def test_out_of_memory_beside_other_steps_is_evaluated_again_with_the_gpu_alone(evaluator, vector_add):
    """An out-of-memory error in a check that shared the GPU may be the other evaluations' doing: the
    candidate is evaluated again (other inputs) with its checks alone on the GPU, and only that verdict
    counts; before it, other tasks' idle references are closed, since the memory they hold stays taken with
    the GPU alone (run AM). A candidate that runs out of memory alone too is a runtime error, with both
    attempts said."""
    from kernelband.evaluation.context import COMPARE_BYTES, RUN_BYTES
    from kernelband.tasks import load_task

    assert OUT_OF_MEMORY != GOOD
    lock = evaluator.pool.gpu_lock
    other = load_task("examples:dropout")
    evaluator.info(other)  # set up, then idle: kept
    evaluator.info(vector_add)
    kept = evaluator.pool.reference(other.key)
    assert kept is not None
    evaluator.pool.release_reference(kept)
    try:
        evaluator.pool.gpu_lock = rec = _Recording()
        result = evaluator.evaluate(vector_add, OUT_OF_MEMORY, seed=7)
        assert result.outcome.value == "runtime_error" and "out of memory" in result.detail, result.detail
        assert any(n.startswith("out of GPU memory beside other evaluations' steps") and
                   "idle references of other tasks closed first" in n for n in result.notes), result.notes
        assert evaluator.pool.reference(other.key) is None and not kept.alive()
        mine = evaluator.pool.reference(vector_add.key)  # its own reference is kept
        assert mine is not None
        evaluator.pool.release_reference(mine)
        assert result.seed != 7 and result.seconds["first_attempt"] > 0
        # the first attempt's check shared the GPU; the second one's had it alone
        assert rec.held[:2] == ["shared", "exclusive"], rec.held
        # a candidate that passes is evaluated once; each shared step declared its memory
        rec.held.clear()
        rec.nbytes.clear()
        good = evaluator.evaluate(vector_add, GOOD)
        assert good.ok and "first_attempt" not in good.seconds
        assert not any("out of GPU memory" in n for n in good.notes)
        assert rec.held.count("exclusive") == 1
        info = evaluator.info(vector_add)
        checked = [s for s in info.shapes if by_label(good, s.label)]
        assert checked
        for shape in checked:
            assert RUN_BYTES * shape.nbytes in rec.nbytes and COMPARE_BYTES * shape.nbytes in rec.nbytes
    finally:
        evaluator.pool.gpu_lock = lock


def by_label(result, label: str) -> bool:
    return any(s.label == label and s.correct for s in result.shapes)


def test_the_memory_budget_is_a_share_of_the_memory_the_gpu_has_free(evaluator, vector_add):
    """Memory that idle workers hold (kept references, warm workers, their contexts) or other programs use is
    not the shared steps' to take: before each evaluation the budget becomes `memory_share` of what the GPU
    has free plus what the steps in flight declared (29 kept references and 16 workers once filled 73 of an
    H100's 80 GB while the budget said 42 GB)."""
    free = [8 << 30]
    lock, share = evaluator.pool.gpu_lock, evaluator.references.memory_share
    evaluator.references.free_memory = lambda: free[0]
    try:
        assert evaluator.evaluate(vector_add, GOOD).ok
        assert lock.budget == int(share * (8 << 30))
        free[0] = 2 << 30  # references and warm workers took memory meanwhile
        seen, holding = [], threading.Event()

        def step_in_flight():  # another evaluation's step, 1 GiB declared, until the budget is read again
            with lock.shared(1 << 30):
                holding.set()
                deadline = time.monotonic() + 60
                while lock.budget == int(share * (8 << 30)) and time.monotonic() < deadline:
                    time.sleep(0.001)
                seen.append(lock.budget)

        other = threading.Thread(target=step_in_flight)
        other.start()
        assert holding.wait(10)
        assert evaluator.evaluate(vector_add, GOOD).ok  # its timing waits for that step to end
        other.join(60)
        assert seen == [int(share * (3 << 30))]
    finally:
        evaluator.references.free_memory = None
        lock.budget = None


def test_a_memory_share_outside_zero_to_one_is_refused():
    from kernelband.errors import UserError
    from kernelband.evaluation.evaluator import Evaluator

    with pytest.raises(UserError, match="memory share"):
        Evaluator(mode="interpreter", warm=0, memory_share=1.5)


def test_a_reference_self_check_out_of_memory_beside_other_steps_is_tried_again_alone(evaluator, tmp_path):
    """A shape the starting kernel cannot run is dropped for the rest of the session, so an out-of-memory
    error at its self-check, which other steps on the GPU may have caused, is tried once more with the GPU
    alone before the shape is dropped."""
    from kernelband.tasks import load_task

    source = (Path(__file__).parents[1] / "src" / "kernelband" / "tasks" / "examples" / "vector_add.py").read_text()
    failing = "    out = torch.empty_like(x)\n"
    assert failing in source
    task_file = tmp_path / "oom_add.py"
    task_file.write_text(source.replace(failing, "    if x.numel() == 10_007:\n        raise torch.OutOfMemoryError("
                                                 "'CUDA out of memory. Tried to allocate 2.00 GiB')\n" + failing, 1))
    task = load_task(str(task_file))
    lock = evaluator.pool.gpu_lock
    try:
        evaluator.pool.gpu_lock = rec = _Recording()
        evaluator.info(task)
        # three shapes checked (two search, one held out): one of them twice, the second time alone
        assert sorted(rec.held) == ["exclusive", "shared", "shared", "shared"], rec.held
        result = evaluator.evaluate(task)
        assert any("shape dropped: " in n and "OutOfMemoryError" in n for n in result.notes), result.notes
    finally:
        evaluator.pool.gpu_lock = lock
        evaluator.pool.drop_reference(task.key)


def test_eight_evaluations_at_once_never_queue_for_each_others_helper_threads():
    """Each evaluation has one reference run, one profiler preparation and one parent's check in flight at
    most: with 8 at once (a pool of 8 threads), all 8 of each run together, none queued behind another while
    it holds its step of the GPU lock (with 4 helper threads a pool, half of them would queue)."""
    from kernelband.evaluation.evaluator import Evaluator

    with Evaluator(mode="interpreter", warm=0, use_ncu=False) as ev:
        for pool in (ev.checks.side, ev._profiling, ev.checks.judges):
            together = threading.Barrier(8, timeout=10)
            jobs = [pool.submit(together.wait) for _ in range(8)]
            assert sorted(j.result(timeout=20) for j in jobs) == list(range(8))  # every one reached the barrier


def test_a_started_worker_says_where_the_gpu_part_of_its_start_went():
    """The part of a worker's start that holds the GPU (shared: an exclusive hold waits for it) is timed by
    phase in the worker (`ReadyInfo.phases`), and the pool keeps those of the workers it hands out, in order."""
    from kernelband.evaluation.pool import WorkerPool

    pool = WorkerPool("interpreter", warm=0)
    try:
        first = pool.acquire()
        second = pool.acquire()
        assert set(first.ready.phases) == {"context", "first_kernel", "guards_sandbox"}
        assert all(v >= 0 for v in first.ready.phases.values())
        assert first.ready.phases["first_kernel"] > 0  # the warm-up kernel ran (interpreted here)
        assert pool.start_phases == [first.ready.phases, second.ready.phases]
        # CUDA's context and the first kernel each in a hold of their own: a timing waits for one, not both
        starts = [st for st in pool.gpu_lock.stats()["steps"] if st["step"] == "worker start"]
        assert [(st["mode"], st["holds"]) for st in starts] == [("shared", 4)]
        for worker in (first, second):
            pool.release(worker)
    finally:
        pool.close()


def test_the_parent_reads_the_outputs_before_it_takes_the_gpu_to_compare_them(monkeypatch):
    """The comparison's hold of the GPU (shared, and so waited for by a timing) covers the copy to the GPU and
    the comparison, not reading the workers' files into memory (run AF: without ncu, the comparisons were
    what most kept timings waiting)."""
    from kernelband.evaluation import compare
    from kernelband.evaluation.evaluator import Evaluator
    from kernelband.tasks import load_task

    original = compare.Outputs.load.__func__
    steps = []
    with Evaluator(mode="interpreter", warm=1, use_ncu=False) as ev:
        lock = ev.pool.gpu_lock

        def load(cls, reply, remove=True, device="cpu"):
            with lock._cond:  # the step this thread holds the GPU for, if any
                held = lock._holders.get(threading.get_ident())
            steps.append(held[3] if held and held[1] == "shared" else None)
            return original(cls, reply, remove, device)

        monkeypatch.setattr(compare.Outputs, "load", classmethod(load))
        result = ev.evaluate(load_task("examples:vector_add"))
    assert result.ok, result.detail
    assert steps and "compare" not in steps
    compares = [st for st in lock.stats()["steps"] if st["step"] == "compare"]
    assert compares and compares[0]["holds"] >= 2  # the comparisons still hold the GPU, one per shape


def test_room_for_a_second_attempt_closes_idle_references_oldest_first_until_enough():
    """`close_idle_references`: only references no evaluation is using, never the task's own, the least
    recently used first, and no more than it takes for `enough()` to hold."""
    from kernelband.evaluation.pool import WorkerPool

    free = [0]

    class Kept:  # a kept reference: closing it gives its 1 GiB back
        def __init__(self, users: int = 0):
            self.users, self.closed = users, False

        def alive(self) -> bool:
            return not self.closed

        def close(self) -> None:
            self.closed = True
            free[0] += 1 << 30

    pool = WorkerPool("interpreter", warm=0, max_references=10)
    try:
        kept = {k: Kept(users=1 if k == "busy" else 0) for k in ("a", "busy", "b", "mine", "c")}
        pool._references.update(kept)  # oldest first
        assert pool.close_idle_references("mine", lambda: free[0] >= 2 << 30) == 2
        assert [k for k, w in kept.items() if w.closed] == ["a", "b"]  # oldest idle first; "busy" is in use
        assert pool.close_idle_references("mine") == 1 and kept["c"].closed
        assert sorted(pool._references) == ["busy", "mine"] and not kept["busy"].closed
    finally:
        pool._references.clear()
        pool.close()


def test_a_worker_start_that_waits_for_the_gpu_longer_than_the_start_timeout_is_waited_for():
    """A busy GPU's timings can hold it for minutes: a worker's start waiting that long for its shared hold has
    not failed, so `acquire` waits for it rather than giving up at the start timeout (which bounds each step
    of the start, not its waits for the GPU)."""
    from kernelband.evaluation.pool import WorkerPool

    pool = WorkerPool("interpreter", warm=0, start_timeout=4.0)
    inside, leave = threading.Event(), threading.Event()
    try:
        def timing():
            with pool.gpu_lock.exclusive():
                inside.set()
                leave.wait(120)

        threading.Thread(target=timing, daemon=True).start()
        assert inside.wait(5)
        got: dict = {}
        waiter = threading.Thread(target=lambda: got.update(worker=pool.acquire()), daemon=True)
        waiter.start()
        waiter.join(6)  # past the start timeout, the start still waiting for the GPU
        assert waiter.is_alive() and not got
        leave.set()
        waiter.join(60)
        assert got["worker"].ready is not None
        pool.release(got["worker"])
    finally:
        leave.set()
        pool.close()
