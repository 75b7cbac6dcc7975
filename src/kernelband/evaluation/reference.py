"""A task's reference worker: its set-up (load, self-checks, its own tests), its lease, its requests.

The reference is the task's code, not a candidate's: it keeps a worker of its own across evaluations (the
pool keeps a few tasks' references). Its failures are the task's (TaskError), never a candidate's outcome.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from functools import partial

from kernelband.errors import TaskError
from kernelband.evaluation import sol
from kernelband.evaluation.compare import Outputs, mismatched_paths
from kernelband.evaluation.context import (
    SELFCHECK_BYTES,
    TESTS_SEED,
    Settings,
    error_line,
    first_line,
    load_outputs,
)
from kernelband.evaluation.gone import WorkerGone
from kernelband.evaluation.pool import WorkerPool
from kernelband.evaluation.records import out_of_memory
from kernelband.evaluation.shapes import INTERPRETER_SHAPES, selfcheck_order
from kernelband.evaluation.workers import Worker
from kernelband.tasks.model import Task, TaskInfo

# The reference's outputs of its own tests are kept (host memory) when at most this big.
TESTS_CACHE_BYTES = 256 << 20


class References:
    """Sets up, leases and asks the tasks' reference workers; keeps the slowest time each step took them."""

    def __init__(self, settings: Settings, pool: WorkerPool, memory_share: float | None,
                 free_memory: Callable[[], int] | None, calibration_path: str | None = None):
        self.settings = settings
        self.pool = pool
        # The share of the GPU's memory that correctness steps sharing the GPU may declare at once (None: no
        # limit); set on the GPU lock before each lease (`refresh_memory_budget`).
        self.memory_share = memory_share
        # bytes of memory the GPU has free now, from the parent's CUDA context (the parent compares there)
        self.free_memory = free_memory
        self.calibration_path = calibration_path
        self._setup_locks: dict[str, threading.Lock] = {}
        self._request_s: dict[tuple[str, int | str], float] = {}  # (task, shape or "tests"): slowest seen

    @contextmanager
    def lease(self, task: Task) -> Iterator[Worker]:
        """The task's reference worker (set up on first use), leased for the `with` block: a reference in use
        is never closed to make room for another task's."""
        self.refresh_memory_budget()
        with self._setup_locks.setdefault(task.key, threading.Lock()):  # one set-up per task at a time
            worker = self.pool.reference(task.key) or self._set_up(task)
        self.refresh_memory_budget()  # a new reference holds memory now
        try:
            yield worker
        finally:
            self.pool.release_reference(worker)

    def refresh_memory_budget(self) -> None:
        """The memory that the steps sharing the GPU may declare at once: `memory_share` of what the GPU has
        free now plus what the steps in flight declared (see MEMORY_SHARE). No limit without a GPU."""
        if self.memory_share is None or self.free_memory is None:
            return
        lock = self.pool.gpu_lock
        lock.budget = int(self.memory_share * (self.free_memory() + lock.memory()["declared"]))

    # -- set-up -------------------------------------------------------------------------------
    def _set_up(self, task: Task) -> Worker:
        """Load the reference, check it on every shape and its own tests; the worker comes back leased. The
        checks run on the GPU like a correctness run: beside other candidates' checks, never during a timing."""
        worker = self._validate(task, self._load(task))
        try:
            if not any(s.index in worker.valid for s in worker.info.search):
                self.pool.drop_reference(task.key)
                raise TaskError(f"{task.ref}: the starting kernel fails on every search shape "
                                f"({'; '.join(worker.dropped[:2])})")
            self._validate_tests(task, worker)
        except BaseException:
            self.pool.release_reference(worker)
            raise
        return worker

    def _validate_tests(self, task: Task, worker: Worker) -> None:
        """The task's own test outputs that the reference does not reproduce judge nothing: each is left out of
        every comparison, with a note. Found by running the tests twice, the second time with uninitialized
        memory filled and the allocator's free memory set to NaN. TritonBench's geglu_tanh_triton returns a
        torch.empty_like whose columns past its BLOCK_SIZE the kernel never writes; flash_decode2_phi's
        test_case_3 reads past the end of its inputs when a sequence is longer than its blocks."""
        if not worker.info.has_tests or not self.settings.task_tests:
            return
        what = "its own test cases"
        runs = []
        for filled in (False, True):
            with self.pool.gpu_lock.doing("reference set-up"), self.pool.gpu_lock.shared():
                reply = self.ask(task, worker, {"op": "tests", "seed": TESTS_SEED, "filled_memory": filled},
                                 self.settings.limits.run_s * 2, what)
            if filled:  # the first run compiled the tests' kernels
                self.took(task, "tests", reply)
            runs.append(load_outputs(reply, what, self.settings.compare_device, task))
        worker.unreproducible = frozenset(mismatched_paths(*runs, worker.info.atol, worker.info.rtol))
        # With one seed and the unreproducible outputs left out, the reference's answer is the same for every
        # candidate: kept (in host memory, up to a size) instead of run again each time.
        if runs[0].nbytes("") <= TESTS_CACHE_BYTES:
            worker.test_outputs = Outputs(runs[0].entries, {k: t.cpu() for k, t in runs[0].tensors.items()})

    def _validate(self, task: Task, worker: Worker) -> Worker:
        """Shapes on which the reference runs and agrees with itself (twice, same inputs), set as the
        worker's `valid` and `dropped`; returns the (leased) worker, a new one if the first crashed.

        A shape where the starting kernel crashes, raises or gives two different answers cannot
        judge a candidate; it is dropped, with a note. In interpreter mode only as many of the
        smallest shapes as are used are checked.
        """
        info = worker.info
        interpreter = self.settings.mode == "interpreter"
        order = selfcheck_order(info, self.settings.mode)
        valid: set[int] = set()
        dropped: list[str] = []
        wanted = {False: INTERPRETER_SHAPES, True: 1}
        for shape in order:
            if interpreter and not info.interpreter_shapes_given:
                if sum(1 for i in valid if info.shapes[i].held_out == shape.held_out) >= wanted[shape.held_out]:
                    continue
            problem = None
            try:
                lock = self.pool.gpu_lock
                for take in (partial(lock.shared, SELFCHECK_BYTES * shape.nbytes), lock.exclusive):
                    with lock.doing("reference set-up"), take():
                        reply = worker.request({"op": "selfcheck", "shape": shape.index, "seed": 12345},
                                               2 * self.settings.limits.run_s)
                    if reply.get("ok") or not out_of_memory(reply.get("error", "")):
                        break  # out of memory beside other steps: once more with the GPU alone
                self.took(task, shape.index, reply)  # two calls: an estimate on the high side
                if not reply.get("ok"):
                    problem = error_line(reply.get("error", ""))
                elif not reply.get("deterministic"):
                    problem = "the reference gives different outputs on the same inputs"
                gone = reply.get("outcome") == "crashed"  # a CUDA fault: the worker exits after its reply
            except WorkerGone as exc:
                problem = f"the reference {exc.outcome}: {first_line(exc.detail)}"
                gone = True
            if gone:
                self.pool.drop_reference(task.key)
                self.pool.release_reference(worker)
                worker = self._load(task)
            if problem is None:
                valid.add(shape.index)
            else:
                dropped.append(f"{shape.label}: {problem}")
        worker.valid, worker.dropped = valid, dropped
        return worker

    def _load(self, task: Task) -> Worker:
        worker = self.pool.acquire()
        try:
            reply = worker.request({"op": "load", "role": "ref", "task": task.wire(),
                                    "module_source": task.module_source, "tune": self.settings.tune},
                                   self.settings.limits.load_s)
        except WorkerGone as exc:
            self.pool.release(worker)
            raise TaskError(f"{task.ref}: the starting kernel could not be loaded ({exc.outcome}): "
                            f"{first_line(exc.detail)}") from None
        if not reply.get("ok"):
            self.pool.release(worker)
            what = "task definition" if reply.get("outcome") == "task_error" else "starting kernel"
            raise TaskError(f"{task.ref}: the {what} fails to load: {error_line(reply.get('error', ''))}")
        worker.info = TaskInfo.from_wire(reply["info"])
        worker.valid, worker.dropped = {s.index for s in worker.info.shapes}, []
        worker.unreproducible, worker.test_outputs = frozenset(), None
        self.pool.keep_reference(task.key, worker)
        return worker

    # -- requests -----------------------------------------------------------------------------
    def ask(self, task: Task, ref: Worker, message: dict, timeout: float, what: str) -> dict:
        """A request to the reference; its failure is the task's (TaskError), and a crash drops the worker."""
        try:
            reply = ref.request(message, timeout)
        except WorkerGone as exc:
            self.pool.drop_reference(task.key)
            raise TaskError(f"{task.ref}: the reference {exc.outcome} on {what}: {first_line(exc.detail)}") from None
        if not reply.get("ok"):
            if reply.get("outcome") == "crashed":
                self.pool.drop_reference(task.key)
            raise TaskError(f"{task.ref}: the reference fails on {what}: {error_line(reply.get('error', ''))}")
        return reply

    def took(self, task: Task, step: int | str, reply: dict) -> None:
        """Keep the slowest time the reference took for a step (a shape's run, or "tests")."""
        if reply.get("ok") and "request_s" in reply:
            key = (task.key, step)
            self._request_s[key] = max(self._request_s.get(key, 0.0), reply["request_s"])

    def limit(self, task: Task, step: int | str, cap: float, tuned: bool) -> tuple[float, str]:
        """The candidate's limit for a correctness step, and how it was set (for a timeout's message). A
        module with an autotuner that times its configurations inside the step keeps the cap."""
        limits = self.settings.limits
        ref_s = self._request_s.get((task.key, step))
        if not self.settings.relative_limits or tuned or ref_s is None:
            return cap, ""
        limit = min(cap, max(limits.run_floor_s, limits.run_factor * ref_s))
        if limit >= cap:
            return cap, ""
        return limit, (f" (the limit is {limits.run_factor:g}x the reference's {ref_s:.1f} s, at least "
                       f"{limits.run_floor_s:g} s)")

    def peaks(self, ref: Worker) -> sol.Peaks | None:
        """The GPU's peaks and launch floor for the speed-of-light bound: calibrated by the reference on first
        use, then cached. A cache written before the floor was measured gets it now."""
        if self.settings.mode != "gpu":
            return None
        name = ref.ready.device.get("name", "")
        peaks = sol.load(name, self.calibration_path)
        if peaks is None or peaks.floor_ms is None:
            reply = ref.request(sol.calibrate_request(floor_only=peaks is not None), 300)
            if reply.get("ok") or peaks is not None:
                peaks = sol.with_floor(peaks or sol.Peaks(**reply["peaks"]), reply.get("floor"))
                sol.save(peaks, self.calibration_path)
        return peaks
