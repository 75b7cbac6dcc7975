"""Evaluate one candidate module against a task's reference.

Stages, in order, each of which can end the evaluation with its outcome:

1. load: import the candidate in a fresh worker (`compile_error`), then
   compile its kernels without launching them, outside the GPU lock, so that
   compiling overlaps with another candidate's timing;
2. correctness, on every selected shape, with fresh random inputs: the
   reference worker and the candidate worker build the same inputs from a seed
   drawn for this evaluation, and the parent compares what comes back
   (`wrong_output`, `runtime_error`, `crashed`, `timeout`, `suspicious`);
   then the anti-cheat checks: a second call with other inputs, output
   aliasing, NaN/Inf/zeros, tampered timers, work left running, no Triton;
3. timing, reference and candidate in turn (ABBA), one timing per GPU;
4. features: launch configuration, compiled resources, footprint, and Nsight
   Compute counters when `ncu` is there.
"""

from __future__ import annotations

import os
import re
import secrets
import threading
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor, wait
from contextlib import contextmanager, nullcontext
from dataclasses import dataclass
from functools import partial

from kernelband.errors import TaskError, UserError
from kernelband.evaluation import features as feature_mod
from kernelband.evaluation import interleave, sol
from kernelband.evaluation.compare import Mismatch, Outputs, compare, mismatched_paths
from kernelband.evaluation.pool import Worker, WorkerGone, WorkerPool
from kernelband.evaluation.records import (
    ALONE_NOTE,
    NCU_SKIPPED,
    PRESETS,
    EvalResult,
    Outcome,
    Preset,
    ShapeResult,
    out_of_memory,
)
from kernelband.tasks.model import ShapeInfo, Task, TaskInfo
from kernelband.tensorfile import TensorFileError

# In interpreter mode a task keeps its smallest search shapes: at most this many, each at most this big.
INTERPRETER_SHAPES = 2
INTERPRETER_MAX_BYTES = 1 << 20
# The representative shape (features, ncu): the largest search shape with inputs under this size.
REPRESENTATIVE_MAX_BYTES = 64 << 20
# The task's own test cases always run with this seed: the set-up finds the outputs the reference does not
# reproduce with it (flash_decode2_phi's test_case_3 reads past its inputs for some seeds' sequence lengths).
TESTS_SEED = 12345
PROFILE_LOCKS = ("exclusive", "apart", "shared")
# The reference's outputs of its own tests are kept (host memory) when at most this big.
TESTS_CACHE_BYTES = 256 << 20
# GPU memory a shared step may take, in multiples of its shape's input bytes: a shape's run holds the inputs
# and about as much output in the reference's process and in the candidate's (4), the parent's comparison
# both outputs (2), the reference's self-check two outputs beside its inputs (3). The shared steps on the
# GPU at once declare at most MEMORY_SHARE of the memory they can have (GpuLock.budget): what the GPU has free
# plus what the steps in flight declared, read again before each evaluation and each reference's set-up, so
# that memory held by idle workers (kept references, warm workers, their CUDA contexts) or by other programs
# is left out; the other half is for what the estimates miss.
RUN_BYTES, COMPARE_BYTES, SELFCHECK_BYTES = 4, 2, 3
MEMORY_SHARE = 0.5
# The most evaluations an evaluator serves at once without one queueing for another's helper thread (a bench's
# runs on one GPU, eval_throughput's pool threads): the size of its helper thread pools. Idle threads cost
# nothing; the GPU lock and its memory budget, not these pools, limit what runs on the GPU at once.
IN_FLIGHT = 16


def _free_gpu_memory(device_index: int) -> int:
    import torch

    return torch.cuda.mem_get_info(device_index)[0]


def detect_mode() -> str:
    forced = os.environ.get("KERNELBAND_MODE")
    if forced in ("gpu", "interpreter"):
        return forced
    try:
        import torch
        return "gpu" if torch.cuda.is_available() else "interpreter"
    except Exception:  # noqa: BLE001
        return "interpreter"


def select_shapes(info: TaskInfo, mode: str, which: str = "search",
                  valid: set[int] | None = None) -> list[ShapeInfo]:
    search, held = info.search, info.held_out
    if valid is not None:
        search = [s for s in search if s.index in valid]
        held = [s for s in held if s.index in valid]
    if mode == "interpreter" and not info.interpreter_shapes_given:
        search = _smallest(search, INTERPRETER_SHAPES)
        held = _smallest(held, 1)
    if which == "search":
        return search
    if which == "held_out":
        return held
    if which == "all":
        return search + held
    raise UserError(f"unknown shape selection {which!r}: use search, held_out or all")


# Where a timing's seconds go, summed over its measurements into EvalResult.seconds: the worker's making of
# the inputs, its probe of the call's host time (timing.ahead_for), the estimate and do_bench, and the whole
# request as the parent saw it (the rest: the message both ways and the worker's freeing of memory).
TIMING_PHASES = {"inputs": "timing_inputs", "probe": "timing_probe", "bench": "timing_bench"}


def _add_phases(seconds: dict[str, float], reply: dict, request_s: float) -> None:
    for name, key in TIMING_PHASES.items():
        if name in reply.get("phases", {}):
            seconds[key] = seconds.get(key, 0.0) + float(reply["phases"][name])
    seconds["timing_requests"] = seconds.get("timing_requests", 0.0) + request_s


def _smallest(shapes: list[ShapeInfo], k: int) -> list[ShapeInfo]:
    ordered = sorted(shapes, key=lambda s: s.nbytes)
    small = [s for s in ordered if s.nbytes <= INTERPRETER_MAX_BYTES][:k]
    return sorted(small or ordered[:1], key=lambda s: s.index)


def representative(shapes: list[ShapeInfo]) -> ShapeInfo:
    fitting = [s for s in shapes if s.nbytes <= REPRESENTATIVE_MAX_BYTES]
    return max(fitting, key=lambda s: s.nbytes) if fitting else min(shapes, key=lambda s: s.nbytes)


def _seed(seed: int, index: int, salt: int = 0) -> int:
    return (seed * 1_000_003 + index * 7919 + salt * 104_729) % (2**31 - 1)


def _short_so_far(total_ms: float, preset: Preset) -> bool:
    """A task whose reference takes `total_ms` over its search shapes is short enough for spans
    (Preset.span_task_ms; None: any task)."""
    return preset.span_task_ms is None or total_ms < preset.span_task_ms


def _time_message(index: int, seed: int, wire: dict) -> dict:
    """A worker's `time` request for one shape, its timing inputs made from `seed`, timed by events."""
    return {"op": "time", "shape": index, "seed": _seed(seed, index, 2), "preset": wire, "span": False}


class _Stop(Exception):
    def __init__(self, outcome: Outcome, stage: str, detail: str, error: str = "", check: str | None = None):
        super().__init__(detail)
        self.outcome, self.stage, self.detail, self.error, self.check = outcome, stage, detail, error, check


@dataclass
class Limits:
    load_s: float = 180.0  # import + compile of a module
    run_s: float = 120.0  # one correctness run of one shape (the task's own tests: twice that)
    time_s: float = 300.0  # one timing measurement of one shape
    # On a GPU, a candidate's correctness run (compiled beforehand) gets `run_factor` times the reference's
    # time for the same request, at least `run_floor_s` and at most `run_s`: a hung kernel holds the GPU
    # lock, which every timing waits for, for seconds rather than minutes (Evaluator.relative_limits).
    run_factor: float = 10.0
    run_floor_s: float = 20.0


class Evaluator:
    """Evaluates candidates; thread-safe, so several can be in flight (one timing at a time per GPU)."""

    def __init__(self, mode: str | None = None, warm: int = 2, device_index: int = 0, preset: str = "default",
                 limits: Limits | None = None, memory_limit: int | None = None, use_ncu: bool | None = None,
                 calibration_path: str | None = None, max_references: int = 4, warm_profilers: int | None = None,
                 profile_lock: str = "exclusive", tune_alone: bool = True, park_profilers: bool = False,
                 memory_share: float | None = MEMORY_SHARE, profile_warm: bool = True):
        self.mode = mode or detect_mode()
        if preset not in PRESETS:
            raise UserError(f"unknown preset {preset!r}: use {', '.join(PRESETS)}")
        self.preset = PRESETS[preset]
        # ncu's profiled run: alone on the GPU in the timing's hold ("exclusive", the default), alone in a hold
        # of its own after the features run ("apart", the order before stop 23), or beside other candidates'
        # checks ("shared": never beside a timing; their kernels may then show in its counters)
        if profile_lock not in PROFILE_LOCKS:
            raise UserError(f"unknown profile lock {profile_lock!r}: use {', '.join(PROFILE_LOCKS)}")
        self.profile_lock = profile_lock
        # The profiler's inputs and first call as a step that shares the GPU (True), or in the hold of the GPU
        # alone with its profiled run (False, the order before stop 24)
        self.profile_warm = profile_warm
        # A module with an autotuner: its configs are timed in one call per shape with the GPU alone, and its
        # correctness check then shares the GPU like any other (True, the default: 3.4 against 2.9 autotuned
        # candidates per minute on an H100, BENCHMARKS.md run P); or the whole check has the GPU alone (False)
        self.tune_alone = tune_alone
        # The share of the GPU's memory that correctness steps sharing the GPU may declare at once (None: no
        # limit); set on the GPU lock when the first reference worker says how much memory the GPU has.
        if memory_share is not None and not 0 < memory_share <= 1:
            raise UserError(f"memory share {memory_share} must be in (0, 1]")
        self.memory_share = memory_share
        # bytes of memory the GPU has free now, from the parent's CUDA context (the parent compares there)
        self._free_memory = partial(_free_gpu_memory, device_index) if self.mode == "gpu" else None
        self.limits = limits or Limits()
        if use_ncu is None:
            from kernelband.evaluation import ncu
            use_ncu = self.mode == "gpu" and ncu.available()
        self.pool = WorkerPool(self.mode, warm=warm, device_index=device_index, memory_limit=memory_limit,
                               profiler=use_ncu, max_references=max_references, warm_profilers=warm_profilers,
                               park_profilers=park_profilers)
        self.calibration_path = calibration_path
        self.use_ncu = use_ncu
        # The parent compares on the GPU when there is one (it never runs candidate code there).
        self.compare_device = f"cuda:{device_index}" if self.mode == "gpu" else "cpu"
        # A task's own test cases (TritonBench's) run on a GPU only: they are sized for one. Tests of small
        # ones turn them on in the interpreter.
        self.task_tests = self.mode == "gpu"
        # Inputs the reference modifies in place, per task and shape: the candidate returns them too.
        self._mutated: dict[tuple[str, int], list[int]] = {}
        self._setup_locks: dict[str, threading.Lock] = {}
        # The reference's recent times per task, preset and shape: a time far off them is measured again.
        self._ref_history = interleave.RefHistory()
        # (task key, preset name) -> whether its short shapes are timed by spans (`_short_task`)
        self._short_tasks: dict[tuple[str, str], bool] = {}
        self.recheck_timings = self.mode == "gpu"  # interpreter timings measure Python: noisy by nature
        # Correctness limits relative to the reference's own time (Limits.run_factor); not in the interpreter,
        # whose times follow Python's work per program, not the kernel's (a smaller block is far slower there).
        self.relative_limits = self.mode == "gpu"
        self._ref_request_s: dict[tuple[str, int | str], float] = {}  # (task, shape or "tests"): slowest seen
        # Several candidates' correctness runs may be in flight at once (they share the GPU). Each evaluation
        # has at most one of each of these in flight (the reference's run of a shape, its profiler's
        # preparation, the parent's check of the previous shape), so each pool is as large as the evaluations
        # an evaluator serves at once: with 4 threads, 8 evaluations queued for a thread, holding their step
        # of the GPU lock meanwhile (and keeping a timing waiting for it).
        self._side = ThreadPoolExecutor(max_workers=IN_FLIGHT, thread_name_prefix="kernelband-ref")
        self._profiling = ThreadPoolExecutor(max_workers=IN_FLIGHT, thread_name_prefix="kernelband-ncu")
        # The parent's loads and compares of one shape, overlapping the workers' runs of the next.
        self._checks = ThreadPoolExecutor(max_workers=IN_FLIGHT, thread_name_prefix="kernelband-check")

    def close(self) -> None:
        self._side.shutdown(wait=False)
        self._profiling.shutdown(wait=False)
        self._checks.shutdown(wait=False)
        self.pool.close()

    def _release_compare_memory(self) -> None:
        """The parent's GPU memory for outputs goes back to the driver after every evaluation, so that
        the workers (and the next task's large shapes) have it."""
        if self.compare_device != "cpu":
            import torch

            torch.cuda.empty_cache()

    def _load(self, reply: dict, what: str, task: Task | None = None, device: str | None = None) -> Outputs:
        """The outputs a worker sent: the candidate's (`task` None) or the reference's, on `device` (default:
        where the parent compares). A file or layout the parent cannot read is the sender's fault:
        `suspicious` for a candidate, a task error for the reference."""
        try:
            return Outputs.load(reply, device=device or self.compare_device)
        except (TensorFileError, OSError, RuntimeError) as exc:
            if task is not None:
                raise TaskError(f"{task.ref}: the reference's outputs on {what} cannot be read: {exc}") from None
            raise _Stop(Outcome.SUSPICIOUS, "correctness", f"{what}: the candidate's outputs cannot be read "
                        f"({exc})", check="output_file") from None

    def __enter__(self) -> Evaluator:
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    # -- reference ----------------------------------------------------------------------------
    @contextmanager
    def _reference(self, task: Task) -> Iterator[Worker]:
        """The task's reference worker (set up on first use), leased for the `with` block: a reference in use
        is never closed to make room for another task's."""
        self._refresh_memory_budget()
        with self._setup_locks.setdefault(task.key, threading.Lock()):  # one set-up per task at a time
            worker = self.pool.reference(task.key) or self._set_up_reference(task)
        self._refresh_memory_budget()  # a new reference holds memory now
        try:
            yield worker
        finally:
            self.pool.release_reference(worker)

    def _refresh_memory_budget(self) -> None:
        """The memory that the steps sharing the GPU may declare at once: `memory_share` of what the GPU has
        free now plus what the steps in flight declared (see MEMORY_SHARE). No limit without a GPU."""
        if self.memory_share is None or self._free_memory is None:
            return
        lock = self.pool.gpu_lock
        lock.budget = int(self.memory_share * (self._free_memory() + lock.memory()["declared"]))

    def _set_up_reference(self, task: Task) -> Worker:
        """Load the reference, check it on every shape and its own tests; the worker comes back leased. The
        checks run on the GPU like a correctness run: beside other candidates' checks, never during a timing."""
        worker = self._validate(task, self._load_reference(task))
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
        if not worker.info.has_tests or not self.task_tests:
            return
        what = "its own test cases"
        runs = []
        for filled in (False, True):
            with self.pool.gpu_lock.doing("reference set-up"), self.pool.gpu_lock.shared():
                reply = self._ask_ref(task, worker, {"op": "tests", "seed": TESTS_SEED, "filled_memory": filled},
                                      self.limits.run_s * 2, what)
            if filled:  # the first run compiled the tests' kernels
                self._ref_took(task, "tests", reply)
            runs.append(self._load(reply, what, task))
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
        order = sorted(info.shapes, key=lambda s: s.nbytes) if self.mode == "interpreter" else list(info.shapes)
        valid: set[int] = set()
        dropped: list[str] = []
        wanted = {False: INTERPRETER_SHAPES, True: 1}
        for shape in order:
            if self.mode == "interpreter" and not info.interpreter_shapes_given:
                if sum(1 for i in valid if info.shapes[i].held_out == shape.held_out) >= wanted[shape.held_out]:
                    continue
            problem = None
            try:
                lock = self.pool.gpu_lock
                for take in (partial(lock.shared, SELFCHECK_BYTES * shape.nbytes), lock.exclusive):
                    with lock.doing("reference set-up"), take():
                        reply = worker.request({"op": "selfcheck", "shape": shape.index, "seed": 12345},
                                               2 * self.limits.run_s)
                    if reply.get("ok") or not out_of_memory(reply.get("error", "")):
                        break  # out of memory beside other steps: once more with the GPU alone
                self._ref_took(task, shape.index, reply)  # two calls: an estimate on the high side
                if not reply.get("ok"):
                    problem = error_line(reply.get("error", ""))
                elif not reply.get("deterministic"):
                    problem = "the reference gives different outputs on the same inputs"
                gone = reply.get("outcome") == "crashed"  # a CUDA fault: the worker exits after its reply
            except WorkerGone as exc:
                problem = f"the reference {exc.outcome}: {_first_line(exc.detail)}"
                gone = True
            if gone:
                self.pool.drop_reference(task.key)
                self.pool.release_reference(worker)
                worker = self._load_reference(task)
            if problem is None:
                valid.add(shape.index)
            else:
                dropped.append(f"{shape.label}: {problem}")
        worker.valid, worker.dropped = valid, dropped
        return worker

    def _load_reference(self, task: Task) -> Worker:
        worker = self.pool.acquire()
        try:
            reply = worker.request({"op": "load", "role": "ref", "task": task.wire(),
                                    "module_source": task.module_source, "tune": self.preset.tune()},
                                   self.limits.load_s)
        except WorkerGone as exc:
            self.pool.release(worker)
            raise TaskError(f"{task.ref}: the starting kernel could not be loaded ({exc.outcome}): "
                            f"{_first_line(exc.detail)}") from None
        if not reply.get("ok"):
            self.pool.release(worker)
            what = "task definition" if reply.get("outcome") == "task_error" else "starting kernel"
            raise TaskError(f"{task.ref}: the {what} fails to load: {error_line(reply.get('error', ''))}")
        worker.info = TaskInfo.from_wire(reply["info"])
        worker.valid, worker.dropped = {s.index for s in worker.info.shapes}, []
        worker.unreproducible, worker.test_outputs = frozenset(), None
        self.pool.keep_reference(task.key, worker)
        return worker

    def keep_references(self, tasks: int) -> None:
        """Keep the set-up references of at least `tasks` tasks: a bench with that many runs in flight on this
        evaluator. With fewer kept than tasks in flight, each evaluation's release closed another task's idle
        reference, which the next evaluation of that task set up again (load, every shape checked twice, its
        own tests): run Y, 5 runs against 4 kept, 3.8 references set up a minute for 4.9 evaluations."""
        self.pool.keep_at_least(tasks)

    def info(self, task: Task) -> TaskInfo:
        """The task's shapes and settings, as its harness describes them (run in a worker)."""
        with self._reference(task) as ref:
            return ref.info

    def fingerprint(self, task: Task) -> dict:
        """What a stored baseline must match: the GPU's name, the driver and Triton's version."""
        with self._reference(task) as ref:
            ready = ref.ready
        return {"gpu": ready.device.get("name", "Triton interpreter (CPU)"),
                "driver": ready.device.get("driver", ""), "triton": ready.versions.get("triton", "")}

    def _peaks(self, ref: Worker) -> sol.Peaks | None:
        if self.mode != "gpu":
            return None
        name = ref.ready.device.get("name", "")
        peaks = sol.load(name, self.calibration_path)
        if peaks is None:
            reply = ref.request({"op": "calibrate"}, 300)
            if reply.get("ok"):
                peaks = sol.Peaks(**reply["peaks"])
                sol.save(peaks, self.calibration_path)
        return peaks

    # -- evaluation ---------------------------------------------------------------------------
    def evaluate(self, task: Task, source: str | None = None, preset: str | Preset | None = None,
                 which: str = "search", seed: int | None = None, profile: bool = True) -> EvalResult:
        """`profile=False` skips Nsight Compute for this candidate (φ then comes from the compiler and the
        timing, as without ncu): for searches whose policy and proposer never read φ."""
        preset = self.preset if preset is None else (PRESETS[preset] if isinstance(preset, str) else preset)
        seed = secrets.randbits(31) if seed is None else seed
        source = task.module_source if source is None else source
        t_start = time.perf_counter()
        with self._reference(task) as ref:
            got_ref = time.perf_counter() - t_start  # the reference's set-up, when it was not kept
            try:
                result = self._evaluate(task, ref, source, preset, which, seed, profile)
                first = (result.outcome in (Outcome.RUNTIME_ERROR, Outcome.CRASHED) and out_of_memory(result.error)
                         and (result.detail or result.error))
            except TaskError as exc:  # the reference failed: out of memory, or the task's own fault
                if not out_of_memory(str(exc)):
                    raise
                first = str(exc)
            if first:
                # Memory the other evaluations' steps held, or the candidate's own need? Its checks again with
                # the GPU alone say which (fresh inputs: another seed); a second failure is the candidate's.
                first_s = time.perf_counter() - t_start
                # With the GPU alone, the memory that idle processes hold is still taken: the parent's cache
                # gives its free blocks back, and other tasks' kept references theirs, until the largest
                # shape's run fits (without a GPU's count of free memory: all of them).
                self._release_compare_memory()
                need = RUN_BYTES * max((s.nbytes for s in ref.info.shapes), default=0)
                free = self._free_memory
                closed = self.pool.close_idle_references(task.key, None if free is None else lambda: free() >= need)
                result = self._evaluate(task, ref, source, preset, which, _seed(seed, 0, 9), profile, alone=True)
                result.notes.append(ALONE_NOTE.format(first=_first_line(first)[:200], closed=closed))
                result.seconds["first_attempt"] = first_s
        result.seconds["reference"] = got_ref
        result.seconds["total"] = time.perf_counter() - t_start
        return result

    def _evaluate(self, task: Task, ref: Worker, source: str, preset: Preset, which: str, seed: int,
                  profile: bool = True, alone: bool = False) -> EvalResult:
        info: TaskInfo = ref.info
        shapes = select_shapes(info, self.mode, which, ref.valid)
        result = EvalResult(task=task.ref, outcome=Outcome.OK, preset=preset.name,
                            interpreter=self.mode == "interpreter", seed=seed,
                            device=ref.ready.device.get("name", "Triton interpreter (CPU)"),
                            sandbox=ref.ready.sandbox.get("note", ""))
        result.shapes = [ShapeResult(s.index, s.label, s.held_out) for s in shapes]
        result.notes += [f"shape dropped: {d}" for d in ref.dropped]
        t0 = time.perf_counter()
        cand = self.pool.acquire()
        result.seconds["worker"] = time.perf_counter() - t0  # waiting for a started candidate worker
        try:
            self._run_stages(task, info, ref, cand, source, shapes, preset, seed, result, profile, alone)
        except _Stop as stop:
            result.outcome, result.stage, result.detail = stop.outcome, stop.stage, stop.detail
            result.error = stop.error or stop.detail
            if stop.check:
                result.checks.append(stop.check)
        finally:
            self.pool.release(cand)
        return result

    def _ask(self, worker: Worker, message: dict, timeout: float, stage: str, why_limit: str = "") -> dict:
        """A request to the candidate: its failures are the candidate's outcome. `why_limit` (from `_limit`)
        says how `timeout` was set, in a timeout's detail."""
        try:
            reply = worker.request(message, timeout)
        except WorkerGone as exc:
            detail = f"{stage}: {_first_line(exc.detail)}" + (why_limit if exc.outcome == "timeout" else "")
            raise _Stop(Outcome(exc.outcome), stage, detail, exc.detail) from None
        if not reply.get("ok"):
            outcome = reply.get("outcome", "runtime_error")
            if outcome not in Outcome._value2member_map_:
                outcome = "runtime_error"
            error = reply.get("error", "")
            raise _Stop(Outcome(outcome), stage, f"{stage}: {error_line(error)}", error)
        tampered = reply.get("tampered") or []
        if tampered:
            raise _Stop(Outcome.SUSPICIOUS, stage, f"{stage}: the candidate replaced {', '.join(tampered)}",
                        check="tampering")
        return reply

    def _ask_ref(self, task: Task, ref: Worker, message: dict, timeout: float, what: str) -> dict:
        try:
            reply = ref.request(message, timeout)
        except WorkerGone as exc:
            self.pool.drop_reference(task.key)
            raise TaskError(f"{task.ref}: the reference {exc.outcome} on {what}: {_first_line(exc.detail)}") from None
        if not reply.get("ok"):
            if reply.get("outcome") == "crashed":
                self.pool.drop_reference(task.key)
            raise TaskError(f"{task.ref}: the reference fails on {what}: {error_line(reply.get('error', ''))}")
        return reply

    def _ref_took(self, task: Task, step: int | str, reply: dict) -> None:
        """Keep the slowest time the reference took for a step (a shape's run, or "tests")."""
        if reply.get("ok") and "request_s" in reply:
            key = (task.key, step)
            self._ref_request_s[key] = max(self._ref_request_s.get(key, 0.0), reply["request_s"])

    def _limit(self, task: Task, step: int | str, cap: float, tuned: bool) -> tuple[float, str]:
        """The candidate's limit for a correctness step, and how it was set (for a timeout's message). A
        module with an autotuner that times its configurations inside the step keeps the cap."""
        ref_s = self._ref_request_s.get((task.key, step))
        if not self.relative_limits or tuned or ref_s is None:
            return cap, ""
        limit = min(cap, max(self.limits.run_floor_s, self.limits.run_factor * ref_s))
        if limit >= cap:
            return cap, ""
        return limit, (f" (the limit is {self.limits.run_factor:g}x the reference's {ref_s:.1f} s, at least "
                       f"{self.limits.run_floor_s:g} s)")

    def _run_stages(self, task: Task, info: TaskInfo, ref: Worker, cand: Worker, source: str,
                    shapes: list[ShapeInfo], preset: Preset, seed: int, result: EvalResult,
                    profiled: bool = True, alone: bool = False) -> None:
        by_index = {s.index: r for s, r in zip(shapes, result.shapes)}
        rep = representative([s for s in shapes if not s.held_out] or shapes)
        profile = None
        if self.use_ncu and not profiled:
            result.notes.append(NCU_SKIPPED)
        if self.use_ncu and profiled:
            # The profiling worker imports and compiles the candidate beside its own worker, off the GPU lock.
            from kernelband.evaluation import ncu
            profile = ncu.Profile(task, source, rep.index, _seed(seed, rep.index, 3), ref.ready.device.get("name", ""),
                                  self.pool, self.preset.tune()).start(self._profiling)
        try:
            self._stages(task, info, ref, cand, source, shapes, preset, seed, result, by_index, rep, profile, alone)
        finally:
            if profile is not None:
                profile.cancel()

    def _stages(self, task, info, ref, cand, source, shapes, preset, seed, result, by_index, rep, profile,
                alone: bool = False) -> None:
        # 1. load and compile
        t0 = time.perf_counter()
        with self.pool.busy("compile"):
            reply = self._ask(cand, {"op": "load", "role": "cand", "task": task.wire(), "module_source": source,
                                     "tune": self.preset.tune(),
                                     "profiler": self._short_tasks.get((task.key, preset.name), False)},
                              self.limits.load_s, "compile")
            if reply.get("profiler_s") is not None:  # CUPTI started for the span timer (worker `load`)
                result.seconds["profiler"] = reply["profiler_s"]
            cand_info = TaskInfo.from_wire(reply["info"])
            if [s.label for s in cand_info.shapes] != [s.label for s in info.shapes]:
                raise _Stop(Outcome.SUSPICIOUS, "compile", "the candidate changed the task's shapes",
                            check="harness")
            self._ask(cand, {"op": "precompile", "shapes": [s.index for s in shapes], "seed": seed,
                             "tests": self.task_tests and info.has_tests, "tests_seed": TESTS_SEED},
                      self.limits.load_s, "compile")
        if profile is not None:
            # compiled under the profiler too, before the GPU is taken
            if wait([profile.prepared], timeout=self.limits.load_s).not_done:
                profile.note = "ncu: the profiling worker did not compile the candidate in time"
                profile.cancel()
        result.seconds["compile"] = time.perf_counter() - t0
        # 2. correctness: each of its GPU steps (a shape's runs, a comparison) may share the GPU with other
        # candidates' steps, never with a timing, which waits for the steps in progress only. An autotuner
        # times its configs inside the first call of each shape: either those calls come first, one per shape,
        # all in one hold of the GPU alone with nothing else of this evaluation running (tune_alone), or the
        # whole check has the GPU alone. `alone`: every GPU step of the evaluation has the GPU alone (a second
        # attempt after running out of memory beside other evaluations' steps).
        lock = self.pool.gpu_lock
        tuned = "autotune" in source
        whole, per_step = ((lock.exclusive, nullcontext) if alone or (tuned and not self.tune_alone)
                           else (nullcontext, lock.shared))
        result.seconds["gpu_wait"] = result.seconds["gpu_wait_alone"] = 0.0
        if tuned and self.tune_alone:
            t0 = time.perf_counter()
            with self._gpu(result, lock.exclusive, what="tune"):  # one wait for the checks in progress, not one per shape
                for shape in shapes:
                    self._ask(cand, {"op": "tune", "shape": shape.index, "seed": _seed(seed, shape.index, 4)},
                              self.limits.run_s, f"correctness (autotuning on shape {shape.label})")
            result.seconds["tune"] = time.perf_counter() - t0
        t0 = time.perf_counter()
        with self._gpu(result, whole, what="whole check alone"):
            try:
                io_bytes = self._correctness(task, info, ref, cand, shapes, seed, result, by_index, per_step, tuned)
            finally:
                self._release_compare_memory()
        result.seconds["correctness"] = time.perf_counter() - t0
        # 3. features: the launches and footprint, counted in the candidate's own process (a shared step)
        t0, waited = time.perf_counter(), result.seconds["gpu_wait"]
        with self._gpu(result, lock.exclusive if alone else lock.shared, COMPARE_BYTES * rep.nbytes, "features"):
            reply = self._ask(cand, {"op": "features", "shape": rep.index, "seed": _seed(seed, rep.index, 3)},
                              self.limits.run_s, "features")
        gpu_s = time.perf_counter() - t0 - (result.seconds["gpu_wait"] - waited)
        if profile is not None and self.profile_warm and not tuned and not alone:
            # the profiler's inputs and first call, a shared step: only the profiled run needs the GPU alone
            # (an autotuner's first call times its configs: it stays in the hold alone)
            t0, waited = time.perf_counter(), result.seconds["gpu_wait"]
            with self._gpu(result, lock.shared, COMPARE_BYTES * rep.nbytes, "profiler warm-up"):
                profile.warm()
            gpu_s += time.perf_counter() - t0 - (result.seconds["gpu_wait"] - waited)
        # 4. timing, then ncu's profiled run in the same hold of the GPU alone: the shared steps in progress
        # are waited for (and new ones held back) once per candidate, not twice
        profiled_alone = profile is not None and self.profile_lock == "exclusive"
        with self._gpu(result, lock.exclusive, what="timing and profiled run" if profiled_alone else "timing"):
            t0 = time.perf_counter()
            self._timing(task, ref, cand, shapes, preset, seed, result, by_index)
            result.seconds["timing"] = time.perf_counter() - t0
            peaks = self._peaks(ref)  # a first use calibrates the GPU: a timing too
            if profiled_alone:
                t0 = time.perf_counter()
                profile.measure()
                result.seconds["profile_alone"] = time.perf_counter() - t0
                # the same run as its worker saw it: profiler start, the call (ncu replays each kernel at its
                # launch), profiler stop; the rest of `profile_alone` is messages
                result.seconds.update({f"profile_{k}": v for k, v in profile.seconds.items()})
                gpu_s += result.seconds["profile_alone"]
        if profile is not None and not profiled_alone:  # "shared": beside others' checks; "apart": alone
            t0, waited = time.perf_counter(), result.seconds["gpu_wait"]
            with self._gpu(result, lock.shared if self.profile_lock == "shared" else lock.exclusive,
                           what="profiled run"):
                profile.measure()
            gpu_s += time.perf_counter() - t0 - (result.seconds["gpu_wait"] - waited)
        t0 = time.perf_counter()
        ncu_metrics = None
        if profile is not None:
            ncu_metrics, note = profile.finish()
            if note:
                result.notes.append(note)
        self._speed_of_light(shapes, result, by_index, io_bytes, peaks, task.bytes_overcounted)
        result.features = feature_mod.assemble(result, rep, by_index[rep.index], reply, peaks, io_bytes,
                                               ref.ready.device, ncu_metrics)
        result.seconds["features"] = gpu_s + time.perf_counter() - t0
        result.seconds["features_gpu"] = gpu_s

    @contextmanager
    def _gpu(self, result: EvalResult, take, nbytes: int = 0, what: str = "") -> Iterator[None]:
        """Hold `take` (a GpuLock mode, or nullcontext) for one step that may take `nbytes` of GPU memory; the
        wait goes into result.seconds['gpu_wait'], and a wait to have the GPU alone (for the checks in
        progress to end) into 'gpu_wait_alone' as well. `what` names the step in the lock's accounting."""
        t = time.perf_counter()
        alone = take == self.pool.gpu_lock.exclusive
        with self.pool.gpu_lock.doing(what) if what else nullcontext(), take() if alone else take(nbytes):
            waited = time.perf_counter() - t
            result.seconds["gpu_wait"] += waited
            if alone:
                result.seconds["gpu_wait_alone"] += waited
            yield

    def _correctness(self, task, info, ref, cand, shapes, seed, result, by_index, gpu, tuned) -> dict[int, int]:
        """Every shape, pipelined: while the parent loads and compares one shape's outputs, the workers
        already run the next one. The first failing shape decides the outcome, as if run one by one.
        `gpu()` is held for each GPU step, and never while waiting for another (see GpuLock). `tuned`: the
        module has an autotuner (its first call of a shape may time configurations, unless tune_alone did)."""
        step = partial(self._gpu, result, gpu)
        io_bytes: dict[int, int] = {}
        alias = self._alias_shape(shapes)
        pending = None  # the parent's check of the previous shape
        jobs = []
        # The parent's checks go to threads shared by every evaluation, where each takes its own GPU step. A
        # check that holds the GPU alone throughout (`gpu` is then a no-op) must not queue its own behind
        # other evaluations' checks that wait for it to let go: they would wait for each other for ever (run
        # AB: 8 evaluations stalled on an H100 once out-of-memory retries ran alone). It gets a thread of its own.
        own = ThreadPoolExecutor(max_workers=1, thread_name_prefix="kernelband-check-alone") \
            if gpu is nullcontext else None
        checks = own or self._checks
        try:
            launches = 0
            for shape in shapes:
                with step(RUN_BYTES * shape.nbytes, "correctness run"):
                    replies = self._run_shape(task, ref, cand, shape, seed, shape is alias, by_index, result,
                                              tuned and not self.tune_alone)
                if replies is None:
                    continue
                r_reply, c_reply = replies
                what = f"shape {shape.label}"
                launches += c_reply.get("launches", 0)
                self._check_run(c_reply, r_reply, what)
                jobs.append(checks.submit(self._judge, task, r_reply, c_reply, shape, info, what,
                                                by_index[shape.index], gpu))
                if pending is not None:
                    io_bytes.update(pending.result())
                pending = jobs[-1]
                if shape is alias:
                    io_bytes.update(pending.result())
                    pending = None
                    with step(RUN_BYTES * shape.nbytes, "second call"):
                        self._second_call(task, ref, cand, shape, seed, r_reply, info, what)
            if pending is not None:
                io_bytes.update(pending.result())
                pending = None
        except _Stop as stop:
            earlier = pending.exception() if pending is not None else None
            if isinstance(earlier, _Stop) and earlier is not stop:
                raise earlier from None  # an earlier shape failed first
            raise
        finally:
            wait(jobs)  # no check may outlive the evaluation's GPU lock
            if own is not None:
                own.shutdown(wait=False)
        with step(0, "task tests"):
            self._task_tests(task, info, ref, cand, result, tuned)
        if launches == 0 and not info.allow_torch_only:
            raise _Stop(Outcome.SUSPICIOUS, "correctness", "the candidate launched no Triton kernel (torch only)",
                        check="no_triton")
        return io_bytes

    @staticmethod
    def _alias_shape(shapes: list[ShapeInfo]) -> ShapeInfo:
        """The shape run twice (other inputs the second time): the smallest search shape."""
        search = [s for s in shapes if not s.held_out]
        return min(search or shapes, key=lambda s: s.nbytes)

    def _run_shape(self, task, ref, cand, shape, seed, keep, by_index, result,
                   tuning: bool = False) -> tuple[dict, dict] | None:
        """The reference's and the candidate's replies for one shape (None: a held-out shape the reference
        cannot run). Both run at once when the inputs the reference modifies in place are known."""
        s = _seed(seed, shape.index)
        what = f"shape {shape.label}"
        ref_msg = {"op": "run", "shape": shape.index, "seed": s, "use_reference": True, "return_mutated": True}
        known = self._mutated.get((task.key, shape.index))
        ref_run = self._side.submit(self._ask_ref, task, ref, ref_msg, self.limits.run_s, what)
        if known is None:  # the first evaluation of a task learns them
            r_reply = self._held_out_guard(ref_run, shape, by_index, result)
            if r_reply is None:
                return None
            known = r_reply.get("mutated_inputs", [])
        c_msg = {"op": "run", "shape": shape.index, "seed": s, "keep": keep, "return_inputs": known}
        limit, why = self._limit(task, shape.index, self.limits.run_s, tuning)
        try:
            c_reply = self._ask(cand, c_msg, limit, f"correctness ({what})", why)
        except _Stop:
            wait([ref_run])  # the reference worker must be idle before anyone asks it again
            raise
        r_reply = self._held_out_guard(ref_run, shape, by_index, result)
        if r_reply is None:
            return None
        self._ref_took(task, shape.index, r_reply)
        mutated = r_reply.get("mutated_inputs", [])
        if mutated != known:  # data-dependent in-place updates: ask again for the right inputs
            c_reply = self._ask(cand, {**c_msg, "return_inputs": mutated}, limit, f"correctness ({what})", why)
        self._mutated[(task.key, shape.index)] = mutated
        return r_reply, c_reply

    def _judge(self, task: Task, r_reply: dict, c_reply: dict, shape: ShapeInfo, info: TaskInfo, what: str,
               shape_result: ShapeResult, gpu) -> dict[int, int]:
        """The parent's verdict on one shape (raises _Stop); returns the shape's bytes in and out. The parent
        loads and compares on the GPU: a correctness step like the workers' runs. The files are read into host
        memory first, with no lock: the hold is the copy to the GPU and the comparison (in run AF's pool
        without ncu, the comparisons were what most kept timings waiting)."""
        r_host = self._load(r_reply, what, task, device="cpu")
        c_host = self._load(c_reply, what, device="cpu")
        with self.pool.gpu_lock.doing("compare"), gpu(COMPARE_BYTES * shape.nbytes):
            r_out, c_out = r_host.to(self.compare_device), c_host.to(self.compare_device)
            self._check_outputs(r_out, c_out, info.atol, info.rtol, what, shape_result)
        shape_result.correct = True
        return {shape.index: shape.nbytes + r_out.nbytes("result")}

    def _second_call(self, task, ref, cand, shape, seed, r_reply, info, what) -> None:
        """The same shape again with other inputs: cached or aliased outputs show up here."""
        s2 = _seed(seed, shape.index, 1)
        r2 = self._load(self._ask_ref(task, ref, {"op": "run", "shape": shape.index, "seed": s2,
                                                    "use_reference": True, "return_mutated": True},
                                        self.limits.run_s, what), what, task)
        limit, why = self._limit(task, shape.index, self.limits.run_s, False)
        c2_reply = self._ask(cand, {"op": "run", "shape": shape.index, "seed": s2, "check_alias": True,
                                    "return_inputs": r_reply.get("mutated_inputs", [])},
                             limit, f"correctness ({what}, second call)", why)
        if c2_reply.get("aliased"):
            raise _Stop(Outcome.SUSPICIOUS, "correctness", f"{what}: the second call returned the same "
                        "output memory as the first (cached output)", check="aliased_output")
        mismatch = compare(r2, self._load(c2_reply, what), info.atol, info.rtol)
        if mismatch is not None:
            raise _Stop(Outcome.SUSPICIOUS, "correctness", f"{what}: right on the first call, wrong on a "
                        f"second call with other inputs (cached output?): {mismatch.detail}",
                        check="cached_output")

    def _task_tests(self, task, info, ref, cand, result, tuned: bool = False) -> None:
        """The task's own test cases (TritonBench's instance tests), reference and candidate at once, with the
        seed the set-up checked them with (they are the task's unit tests; the search shapes bring the fresh
        inputs)."""
        if not info.has_tests:
            return
        if not self.task_tests:
            # TritonBench's instance tests are sized for GPUs (32K-row copies take minutes here).
            result.notes.append("the task's own test cases are skipped in interpreter mode")
            return
        message = {"op": "tests", "seed": TESTS_SEED}
        kept = ref.test_outputs
        ref_run = None if kept is not None else self._side.submit(
            self._ask_ref, task, ref, message, self.limits.run_s * 2, "its own test cases")
        limit, why = self._limit(task, "tests", self.limits.run_s * 2, tuned)
        try:
            c_reply = self._ask(cand, message, limit, "correctness (the task's test cases)", why)
        finally:
            if ref_run is not None:
                wait([ref_run])
        what = "the task's test cases"
        r_out = (Outputs(kept.entries, {k: t.to(self.compare_device) for k, t in kept.tensors.items()})
                 if kept is not None else self._load(ref_run.result(), what, task))
        ignore = ref.unreproducible
        if ignore:
            result.notes.append(f"the task's test outputs {', '.join(sorted(ignore))} are left out: the starting "
                                "kernel does not reproduce them (they depend on uninitialized memory or vary)")
        mismatch = compare(r_out, self._load(c_reply, what), info.atol, info.rtol, ignore=ignore)
        if mismatch is not None:
            raise _Stop(Outcome(mismatch.outcome), "correctness", f"the task's own test cases: {mismatch.detail}",
                        check=None if mismatch.outcome == "wrong_output" else mismatch.check)

    @staticmethod
    def _held_out_guard(ref_run, shape: ShapeInfo, by_index, result: EvalResult) -> dict | None:
        """The reference's reply; None for a held-out shape the reference itself cannot run (it tells
        nothing about the candidate, so it is dropped with a note)."""
        try:
            return ref_run.result()
        except TaskError as exc:
            if not shape.held_out or out_of_memory(str(exc)):  # out of memory: evaluate() tries again alone
                raise
            by_index[shape.index].note = "dropped: the reference fails on this shape"
            result.notes.append(f"held-out shape {shape.label} dropped: the reference fails on it")
            return None

    def _check_run(self, c_reply: dict, r_reply: dict, what: str) -> None:
        if c_reply.get("lazy_output"):
            raise _Stop(Outcome.SUSPICIOUS, "correctness", f"{what}: the output was still changing after the "
                        "entry returned (work left on another stream or thread)", check="async_work")
        if c_reply.get("new_threads"):
            raise _Stop(Outcome.SUSPICIOUS, "correctness", f"{what}: the candidate left threads running "
                        f"({', '.join(c_reply['new_threads'][:3])})", check="threads")
        extra = sorted(set(c_reply.get("mutated_inputs", [])) - set(r_reply.get("mutated_inputs", [])))
        if extra:
            raise _Stop(Outcome.WRONG_OUTPUT, "correctness", f"{what}: the candidate modifies input "
                        f"{', '.join(f'#{i}' for i in extra)}, which the reference leaves unchanged")

    def _check_outputs(self, r_out: Outputs, c_out: Outputs, atol: float, rtol: float, what: str,
                       shape_result: ShapeResult) -> None:
        mismatch: Mismatch | None = compare(r_out, c_out, atol, rtol)
        if mismatch is None:
            return
        shape_result.correct = False
        shape_result.max_abs_err, shape_result.max_rel_err = mismatch.max_abs, mismatch.max_rel
        raise _Stop(Outcome(mismatch.outcome), "correctness", f"{what}: {mismatch.detail}",
                    check=None if mismatch.outcome == "wrong_output" else mismatch.check)

    def _timing(self, task, ref, cand, shapes, preset, seed, result, by_index) -> None:
        """Reference and candidate in turn on each shape, ABBA over the rounds so that drift cancels. Who goes
        first alternates from shape to shape: a first measurement that is slow (a GPU not yet at its clocks,
        a first allocation) then weighs on both sides alike instead of on the reference every time. A shape
        whose reference comes out off its usual time is measured again (evaluation/interleave.py)."""
        wire = preset.wire()
        timed = 0
        unwaited = 0  # measurements that asked for the GPU-ahead wait and got none
        retimed, synced = [], {"ref": 0, "cand": 0}
        span_errors: list[str] = []
        checked = preset.recheck and self.recheck_timings
        spans = checked and preset.timer == "span" and self.mode != "interpreter" \
            and self._short_task(task, ref, shapes, preset, wire, seed, result, by_index)
        for shape in shapes:
            sr = by_index[shape.index]
            if sr.correct is not True:
                continue
            rounds = 1 if self.mode == "interpreter" else max(1, preset.rounds)
            sr.timed_first = "ref" if timed % 2 == 0 else "cand"
            timed += 1
            msg = _time_message(shape.index, seed, wire)
            syncs: set[str] = set()
            timers: set[str] = set()  # the timer each measurement used (worker/timing.py, `span`)
            during: list[dict] = []  # the off-lock work in flight at each measurement
            placed: list[int] = []  # copies of the inputs each measurement cycled through

            def measure(who: str, msg=msg, sr=sr, syncs=syncs, during=during, placed=placed,
                        timers=timers) -> list[float]:
                nonlocal unwaited
                during.append(self.pool.activity_now())
                asked = time.perf_counter()
                if who == "ref":
                    reply = self._ask_ref(task, ref, msg, self.limits.time_s, f"timing {sr.label}")
                else:
                    reply = self._ask(cand, msg, self.limits.time_s, f"timing ({sr.label})")
                unwaited += reply.get("gpu_waits", 0) == 0
                _add_phases(result.seconds, reply, time.perf_counter() - asked)
                if reply.get("ahead_us") is not None:
                    sr.ahead_us = max(sr.ahead_us or 0.0, float(reply["ahead_us"]))
                if reply.get("host_sync"):
                    syncs.add(who)
                placed.append(int(reply.get("placements", 1)))
                timers.add(reply.get("timer", "events"))
                if reply.get("span_error"):
                    span_errors.append(f"{sr.label} ({who}: {reply['span_error']})")
                return reply["times"]

            key = (task.key, preset.name, shape.index)
            expected = self._ref_history.expected(key) if checked else None
            if checked and expected is None:
                # a task's first timing in this evaluator (unless `prime_timing` ran): one more measurement
                # of the reference alone, so that its pair's reference has something to be compared with
                expected = self._learn_ref_time(key, measure("ref"), preset)
                during.clear()
            by_events = key, expected
            if spans and expected is not None and expected < preset.span_below_ms:
                # short by events: both sides timed by their spans, with a history of their own
                msg["span"] = True
                key = (*key, "span")
                expected = self._ref_history.expected(key)
            timers.clear()
            kept, attempts = interleave.measure_shape(measure, rounds, sr.timed_first == "ref", preset.stat,
                                                      expected, preset.recheck, preset.retries)
            mixed = len(timers) > 1
            if mixed:  # one side's spans unreadable: both sides again by events, never one of each
                msg["span"] = False
                key, expected = by_events
                kept, attempts = interleave.measure_shape(measure, rounds, sr.timed_first == "ref", preset.stat,
                                                          expected, preset.recheck, preset.retries)
            sr.ref_ms, sr.ref_cv, sr.ref_rounds = interleave.summarise(kept.ref, preset.stat)
            sr.cand_ms, sr.cand_cv, sr.cand_rounds = interleave.summarise(kept.cand, preset.stat)
            sr.speedup = sr.ref_ms / sr.cand_ms if sr.cand_ms else None
            if checked and sr.ref_ms:
                self._ref_history.add(key, sr.ref_ms)
            if len(attempts) > 1:
                sr.retimed = len(attempts) - 1
                window = during[:2 * rounds]  # the first attempt's measurements
                first = {k: max(d.get(k, 0) for d in window) for k in sorted({k for d in window for k in d})}
                retimed.append(f"{sr.label} ({', '.join(f'{a.ref_ms / expected:.2f}' for a in attempts)}; "
                               f"meanwhile {first})")
            sr.host_sync = ",".join(sorted(syncs))
            sr.placements = min(placed, default=1)
            sr.timer = "mixed" if mixed else timers.pop() if timers else "events"
            for who in syncs:
                synced[who] += 1
        if retimed:
            result.notes.append("timing: measured again where the reference came out over "
                                f"{preset.recheck:g}x its usual time (another process or the host's CPU "
                                "disturbed the GPU), keeping the attempt nearest its usual time; per shape, the "
                                "reference's time over its usual in each attempt, and the work off the GPU "
                                "lock during the first: " + "; ".join(retimed))
        if span_errors:
            result.notes.append("timing: the calls' spans could not be read from CUPTI's record, so both sides "
                                "of the shape were timed by events: " + "; ".join(span_errors[:5]))
        for who, n in synced.items():
            if n:
                result.notes.append(f"timing: the {'reference' if who == 'ref' else 'candidate'}'s call waits "
                                    f"for the GPU on {n} shape(s) (a host synchronisation, such as .item()), so "
                                    "its time includes the CPU's and varies with the host's load")
        if unwaited and preset.ahead_us > 0 and self.mode != "interpreter":
            result.notes.append(f"timing: {unwaited} measurements without the GPU-ahead wait (this Triton's "
                                "do_bench does not flush the L2 through its driver's clear_cache): kernels of a "
                                "few µs may have been timed on the CPU")
        search = [by_index[s.index] for s in shapes if not s.held_out and by_index[s.index].cand_ms]
        held = [by_index[s.index] for s in shapes if s.held_out and by_index[s.index].cand_ms]
        if search:
            result.speedup = sum(x.ref_ms for x in search) / sum(x.cand_ms for x in search)
        if held:
            result.held_out_speedup = sum(x.ref_ms for x in held) / sum(x.cand_ms for x in held)

    def _short_task(self, task, ref, shapes, preset, wire, seed, result, by_index) -> bool:
        """Whether the reference takes under `preset.span_task_ms` over the search shapes to time, by events
        (its usual times in this evaluator; a shape's first measured now, as the timing would; the held-out
        shapes left out, so that an evaluation with them decides as one without): only then are the
        short shapes timed by spans (Preset.timer). Remembered, so that the task's next candidates start
        CUPTI while they load, not in their first timing (worker `load`, "profiler")."""
        short = self._task_under(task, ref, shapes, preset, wire, seed, result, by_index)
        self._short_tasks[task.key, preset.name] = short
        return short

    def _task_under(self, task, ref, shapes, preset, wire, seed, result, by_index) -> bool:
        if preset.span_task_ms is None:
            return True
        total = 0.0
        for shape in shapes:
            if shape.held_out or by_index[shape.index].correct is not True:
                continue
            key = (task.key, preset.name, shape.index)
            expected = self._ref_history.expected(key)
            if expected is None:
                msg = _time_message(shape.index, seed, wire)
                asked = time.perf_counter()
                reply = self._ask_ref(task, ref, msg, self.limits.time_s, f"timing {shape.label}")
                _add_phases(result.seconds, reply, time.perf_counter() - asked)
                expected = self._learn_ref_time(key, reply["times"], preset)
            total += expected or 0.0
            if not _short_so_far(total, preset):
                return False
        return True

    def _learn_ref_time(self, key: tuple, times: list[float], preset: Preset) -> float | None:
        """The reference's usual time on a shape, from its first measurement in this evaluator."""
        expected = interleave.summarise([times], preset.stat)[0]
        if expected:
            self._ref_history.add(key, expected)
        return expected

    def prime_timing(self, task: Task, preset: str | Preset | None = None, which: str = "search") -> int:
        """Measure the reference once on each shape whose usual time this evaluator does not know yet, with
        the GPU alone: what a task's first timing otherwise does inside its first candidate's timing (the
        re-measure rule needs it, evaluation/interleave.py). Part of a task's set-up, as a search's baseline
        evaluation pays it once per task; returns how many shapes were measured (0 without a GPU)."""
        preset = self.preset if preset is None else (PRESETS[preset] if isinstance(preset, str) else preset)
        if not (preset.recheck and self.recheck_timings):
            return 0
        measured, wire = 0, preset.wire()
        with self._reference(task) as ref:
            shapes = select_shapes(ref.info, self.mode, which, ref.valid)
            todo = [s for s in shapes if self._ref_history.expected((task.key, preset.name, s.index)) is None]
            # Every shape in one hold of the GPU alone, as a candidate's timing: each hold first waits for the
            # steps sharing the GPU to end, and a hold per shape made as many waits (run AM: the 29 tasks'
            # set-up, 8 at a time, took about 7 minutes)
            with self.pool.gpu_lock.doing("reference timing"), \
                    (self.pool.gpu_lock.exclusive() if todo else nullcontext()):
                for shape in todo:
                    msg = _time_message(shape.index, 0, wire)
                    reply = self._ask_ref(task, ref, msg, self.limits.time_s, f"timing {shape.label}")
                    if reply.get("ok"):
                        self._learn_ref_time((task.key, preset.name, shape.index), reply["times"], preset)
                        measured += 1
        if preset.timer == "span":
            # the task's length known from these times: its first candidate starts CUPTI while it loads, not
            # in the GPU's exclusive hold (run AL: 4-6 s more in the hold for each tiny task's first candidate).
            # A hint only: the timing decides again with the shapes the candidate passed (`_short_task`).
            usual = [self._ref_history.expected((task.key, preset.name, s.index)) for s in shapes
                     if not s.held_out]
            if usual and None not in usual:
                self._short_tasks[task.key, preset.name] = _short_so_far(sum(usual), preset)
        return measured

    def _speed_of_light(self, shapes, result, by_index, io_bytes, peaks, overcounted: str = "") -> None:
        """Each shape's GB/s, TFLOP/s and fraction of the bound; a candidate faster than the bound is
        suspicious, unless the reference is too, or the task says its bytes are overcounted."""
        for shape in shapes:
            sr = by_index[shape.index]
            if not sr.cand_ms:
                continue
            nbytes = sol.bound_bytes(shape.bytes, io_bytes.get(shape.index))
            if shape.bytes or nbytes:
                sr.gbps = (shape.bytes or nbytes) / (sr.cand_ms * 1e-3) / 1e9
            if shape.flops:
                sr.tflops = shape.flops / (sr.cand_ms * 1e-3) / 1e12
            if peaks is None:
                continue
            sr.bound_ms = sol.bound_ms(nbytes, shape.flops, peaks)
            if sr.bound_ms:
                sr.sol_fraction = sr.bound_ms / sr.cand_ms
                ref_fraction = sr.bound_ms / sr.ref_ms if sr.ref_ms else 0.0
                margin = sol.tolerance(nbytes, shape.flops, peaks)
                if sr.sol_fraction > margin:
                    if ref_fraction > margin:
                        sr.note = "bound below even the reference's time: the task's byte count is too high"
                        continue
                    if overcounted:
                        sr.note = f"faster than the bound, which is no check here: {overcounted}"
                        continue
                    result.outcome, result.stage = Outcome.SUSPICIOUS, "timing"
                    result.detail = (f"shape {shape.label}: {sr.cand_ms * 1e3:.2f} us is faster than the "
                                     f"speed-of-light bound {sr.bound_ms * 1e3:.2f} us")
                    result.checks.append("speed_of_light")


def _first_line(text: str) -> str:
    for line in (text or "").strip().splitlines():
        if line.strip():
            return line.strip()[:300]
    return "(no message)"


_EXCEPTION_LINE = re.compile(r"^[A-Za-z_][\w.]*(Error|Exception|Exit|Interrupt)\b")


def error_line(text: str) -> str:
    """The line of a traceback that says what went wrong: the last `SomeError: ...` line, else the last line.
    torch's CUDA errors end in advice ("Compile with `TORCH_USE_CUDA_DSA` ..."), not in the error itself."""
    lines = [ln.strip() for ln in (text or "").strip().splitlines() if ln.strip()]
    if not lines:
        return "(no message)"
    named = [ln for ln in lines if _EXCEPTION_LINE.match(ln)]
    return (named or lines)[-1][:300]
