"""Evaluate one candidate module against a task's reference.

Stages, in order, each of which can end the evaluation with its outcome:

1. load: import the candidate in a fresh worker (`compile_error`), then
   compile its kernels without launching them, outside the GPU lock, so that
   compiling overlaps with another candidate's timing;
2. correctness, on every selected shape, with fresh random inputs, then the
   anti-cheat checks (checks.py);
3. timing, reference and candidate in turn (ABBA), one timing per GPU
   (timing.py);
4. features: launch configuration, compiled resources, footprint, and Nsight
   Compute counters when `ncu` is there.

The reference's life is in reference.py, the worker processes in pool.py and
workers.py, the GPU lock in gpulock.py; this module orders the stages.
"""

from __future__ import annotations

import secrets
import time
from concurrent.futures import ThreadPoolExecutor, wait
from contextlib import nullcontext
from functools import partial

from kernelband.errors import TaskError, UserError
from kernelband.evaluation import base, context, ncu, sol
from kernelband.evaluation import features as feature_mod
from kernelband.evaluation.baselines import Baselines
from kernelband.evaluation.checks import Checks
from kernelband.evaluation.context import (
    COMPARE_BYTES,
    MEMORY_SHARE,
    RUN_BYTES,
    TESTS_SEED,
    EvalContext,
    Limits,
    Settings,
    Stop,
    first_line,
    release_compare_memory,
)
from kernelband.evaluation.env import detect_mode
from kernelband.evaluation.pool import WorkerPool
from kernelband.evaluation.records import (
    ALONE_NOTE,
    NCU_SKIPPED,
    PRESETS,
    EvalResult,
    Outcome,
    Preset,
    ShapeResult,
    TunedChoice,
    out_of_memory,
)
from kernelband.evaluation.reference import References
from kernelband.evaluation.shapes import derive_seed, select_shapes
from kernelband.evaluation.timing import Timing
from kernelband.evaluation.work import WorkJudge
from kernelband.evaluation.workers import Worker
from kernelband.tasks.model import Task, TaskInfo

# The most evaluations an evaluator serves at once without one queueing for another's helper thread (a bench's
# runs on one GPU, eval_throughput's pool threads): the size of its helper thread pools. Idle threads cost
# nothing; the GPU lock and its memory budget, not these pools, limit what runs on the GPU at once.
IN_FLIGHT = 16


def _free_gpu_memory(device_index: int) -> int:
    import torch

    return torch.cuda.mem_get_info(device_index)[0]


def _setting(name: str) -> property:
    """An evaluator attribute that reads and sets one of its parts' shared `Settings`."""
    return property(lambda self: getattr(self.settings, name), lambda self, value: setattr(self.settings, name, value))


class Evaluator(base.Evaluator):
    """Evaluates candidates; thread-safe, so several can be in flight (one timing at a time per GPU)."""

    mode = _setting("mode")
    limits = _setting("limits")
    task_tests = _setting("task_tests")
    relative_limits = _setting("relative_limits")
    recheck_timings = _setting("recheck_timings")

    def __init__(self, mode: str | None = None, warm: int = 2, device_index: int = 0, preset: str = "default",
                 limits: Limits | None = None, memory_limit: int | None = None, use_ncu: bool | None = None,
                 calibration_path: str | None = None, max_references: int = 4, warm_profilers: int | None = None,
                 memory_share: float | None = MEMORY_SHARE, baselines: bool = True):
        mode = mode or detect_mode()
        if preset not in PRESETS:
            raise UserError(f"unknown preset {preset!r}: use {', '.join(PRESETS)}")
        self.preset = PRESETS[preset]
        gpu = mode == "gpu"
        self.settings = Settings(mode=mode, limits=limits or Limits(),
                                 # the parent compares on the GPU when there is one (it never runs candidate
                                 # code there)
                                 compare_device=f"cuda:{device_index}" if gpu else "cpu",
                                 tune=self.preset.tune(), task_tests=gpu, relative_limits=gpu, recheck_timings=gpu)
        if memory_share is not None and not 0 < memory_share <= 1:
            raise UserError(f"memory share {memory_share} must be in (0, 1]")
        if use_ncu is None:
            use_ncu = gpu and ncu.available()
        self.use_ncu = use_ncu
        self.pool = WorkerPool(mode, warm=warm, device_index=device_index, memory_limit=memory_limit,
                               profiler=use_ncu, max_references=max_references, warm_profilers=warm_profilers)
        self.references = References(self.settings, self.pool, memory_share,
                                     partial(_free_gpu_memory, device_index) if gpu else None, calibration_path)
        self.checks = Checks(self.settings, self.references, IN_FLIGHT)
        self.timing = Timing(self.settings, self.pool, self.references)
        # `baselines=False`: torch eager and torch.compile are not timed (each shape says so), for measurements of
        # the evaluator itself that a task's first compilations would disturb
        self.baselines = Baselines(self.settings, self.references, enabled=baselines)
        self.work = WorkJudge(self.references, self.settings.limits.run_s)
        # Each evaluation's profiler prepares (imports and compiles the candidate) on one of these threads.
        self._profiling = ThreadPoolExecutor(max_workers=IN_FLIGHT, thread_name_prefix="kernelband-ncu")

    def close(self) -> None:
        self.checks.close()
        self._profiling.shutdown(wait=False)
        self.pool.close()

    def __enter__(self) -> Evaluator:
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    # -- tasks --------------------------------------------------------------------------------
    def keep_references(self, tasks: int) -> None:
        """Keep the set-up references of at least `tasks` tasks: a bench with that many runs in flight on this
        evaluator. With fewer kept than tasks in flight, each evaluation's release closed another task's idle
        reference, which the next evaluation of that task set up again (load, every shape checked twice, its
        own tests): 5 runs against 4 kept set up 3.8 references a minute for 4.9 evaluations."""
        self.pool.keep_at_least(tasks)

    def info(self, task: Task) -> TaskInfo:
        """The task's shapes and settings, as its harness describes them (run in a worker)."""
        with self.references.lease(task) as ref:
            return ref.info

    def fingerprint(self, task: Task) -> dict:
        """What a stored baseline must match: the GPU's name, the driver and Triton's version."""
        with self.references.lease(task) as ref:
            ready = ref.ready
        return {"gpu": ready.device.get("name", "Triton interpreter (CPU)"),
                "driver": ready.device.get("driver", ""), "triton": ready.versions.get("triton", "")}

    def prime_timing(self, task: Task, preset: str | Preset | None = None, which: str = "search") -> int:
        """Measure the reference's usual time on each shape not known yet (Timing.prime)."""
        return self.timing.prime(task, self.preset if preset is None else preset, which)

    # -- evaluation ---------------------------------------------------------------------------
    def evaluate(self, task: Task, source: str | None = None, preset: str | Preset | None = None,
                 which: str = "search", seed: int | None = None, profile: bool = True) -> EvalResult:
        """`profile=False` skips Nsight Compute for this candidate (φ then comes from the compiler and the
        timing, as without ncu): for searches whose policy and proposer never read φ."""
        preset = self.preset if preset is None else (PRESETS[preset] if isinstance(preset, str) else preset)
        seed = secrets.randbits(31) if seed is None else seed
        source = task.module_source if source is None else source
        t_start = time.perf_counter()
        with self.references.lease(task) as ref:
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
                release_compare_memory(self.settings.compare_device)
                need = RUN_BYTES * max((s.nbytes for s in ref.info.shapes), default=0)
                free = self.references.free_memory
                closed = self.pool.close_idle_references(task.key, None if free is None else lambda: free() >= need)
                result = self._evaluate(task, ref, source, preset, which, derive_seed(seed, 0, 9), profile,
                                        alone=True)
                result.notes.append(ALONE_NOTE.format(first=first_line(first)[:200], closed=closed))
                result.retried_alone = True
                result.seconds["first_attempt"] = first_s
        result.seconds["reference"] = got_ref
        result.seconds["total"] = time.perf_counter() - t_start
        return result

    def _evaluate(self, task: Task, ref: Worker, source: str, preset: Preset, which: str, seed: int,
                  profile: bool = True, alone: bool = False) -> EvalResult:
        shapes = select_shapes(ref.info, self.mode, which, ref.valid)
        result = EvalResult(task=task.ref, outcome=Outcome.OK, preset=preset.name,
                            interpreter=self.mode == "interpreter", seed=seed,
                            device=ref.ready.device.get("name", "Triton interpreter (CPU)"),
                            sandbox=ref.ready.sandbox.get("note", ""))
        result.shapes = [ShapeResult(s.index, s.label, s.held_out) for s in shapes]
        result.notes += [f"shape dropped: {d}" for d in ref.dropped]
        t0 = time.perf_counter()
        cand = self.pool.acquire()
        result.seconds["worker"] = time.perf_counter() - t0  # waiting for a started candidate worker
        ctx = EvalContext(task, ref.info, ref, cand, source, shapes, preset, seed, result, self.pool.gpu_lock,
                          alone)
        try:
            self._run_stages(ctx, profile)
        except Stop as stop:
            result.outcome, result.stage, result.detail = stop.outcome, stop.stage, stop.detail
            result.error = stop.error or stop.detail
            if stop.check:
                result.checks.append(stop.check)
        finally:
            self.pool.release(cand)
        return result

    def _run_stages(self, ctx: EvalContext, profiled: bool = True) -> None:
        if self.use_ncu and not profiled:
            ctx.result.notes.append(NCU_SKIPPED)
            ctx.result.ncu_skipped = True
        if self.use_ncu and profiled:
            # The profiling worker imports and compiles the candidate beside its own worker, off the GPU lock.
            rep = ctx.rep
            ctx.profile = ncu.Profile(ctx.task, ctx.source, rep.index, derive_seed(ctx.seed, rep.index, 3),
                                      ctx.ref.ready.device.get("name", ""), self.pool,
                                      self.settings.tune).start(self._profiling)
        try:
            self._stages(ctx)
        finally:
            if ctx.profile is not None:
                ctx.profile.cancel()

    def _stages(self, ctx: EvalContext) -> None:
        task, info, result, limits, profile, rep = ctx.task, ctx.info, ctx.result, self.limits, ctx.profile, ctx.rep
        # 1. load and compile
        t0 = time.perf_counter()
        with self.pool.busy("compile"):
            reply = context.ask(ctx.cand, {"op": "load", "role": "cand", "task": task.wire(), "module_source": ctx.source,
                                   "tune": self.settings.tune, "stuck_s": limits.stuck_s,
                                   "profiler": True},  # CUPTI: the span timer, the kernels' split (features)
                        limits.load_s, "compile")
            if reply.get("profiler_s") is not None:  # CUPTI started for the span timer (worker `load`)
                result.seconds["profiler"] = reply["profiler_s"]
            cand_info = TaskInfo.from_wire(reply["info"])
            if [s.label for s in cand_info.shapes] != [s.label for s in info.shapes]:
                raise Stop(Outcome.SUSPICIOUS, "compile", "the candidate changed the task's shapes",
                           check="harness")
            context.ask(ctx.cand, {"op": "precompile", "shapes": [s.index for s in ctx.shapes], "seed": ctx.seed,
                           "tests": self.task_tests and info.has_tests, "tests_seed": TESTS_SEED,
                           "stuck_s": limits.stuck_s},
                limits.load_s, "compile")
        if profile is not None:
            # compiled under the profiler too, before the GPU is taken
            if wait([profile.prepared], timeout=limits.load_s).not_done:
                profile.note = "ncu: the profiling worker did not compile the candidate in time"
                profile.cancel()
        result.seconds["compile"] = time.perf_counter() - t0
        # 2. correctness: each of its GPU steps (a shape's runs, a comparison) may share the GPU with other
        # candidates' steps, never with a timing, which waits for the steps in progress only. An autotuner
        # times its configs inside the first call of each shape: those calls come first, one per shape, all in
        # one hold of the GPU alone with nothing else of this evaluation running; the check then shares the GPU
        # like any other (3.4 against 2.9 autotuned candidates per minute on an H100 with the whole check
        # alone). `alone`: every GPU step of the evaluation has the GPU alone (a second attempt after running
        # out of memory beside other evaluations' steps).
        lock = ctx.lock
        tuned = ctx.tuned
        whole, per_step = (lock.exclusive, nullcontext) if ctx.alone else (nullcontext, lock.shared)
        result.seconds["gpu_wait"] = result.seconds["gpu_wait_alone"] = 0.0
        if tuned:
            t0 = time.perf_counter()
            with ctx.gpu(lock.exclusive, what="tune"):  # one wait for the checks in progress, not one per shape
                for shape in ctx.shapes:
                    reply = context.ask(ctx.cand, {"op": "tune", "shape": shape.index,
                                                   "seed": derive_seed(ctx.seed, shape.index, 4)},
                                        limits.run_s, f"correctness (autotuning on shape {shape.label})")
                    result.tuned += [TunedChoice.from_dict({**choice, "shape": shape.label,
                                                            "held_out": shape.held_out})
                                     for choice in reply.get("tuned", [])]
            result.seconds["tune"] = time.perf_counter() - t0
        t0 = time.perf_counter()
        with ctx.gpu(whole, what="whole check alone"):
            try:
                io_bytes = self.checks.correctness(ctx, per_step)
            finally:
                release_compare_memory(self.settings.compare_device)
        result.seconds["correctness"] = time.perf_counter() - t0
        # 3. features: the launches and footprint, counted in the candidate's own process (a shared step)
        t0, waited = time.perf_counter(), result.seconds["gpu_wait"]
        with ctx.gpu(lock.exclusive if ctx.alone else lock.shared, COMPARE_BYTES * rep.nbytes, "features"):
            reply = context.ask(ctx.cand, {"op": "features", "shape": rep.index, "seed": derive_seed(ctx.seed, rep.index, 3)},
                        limits.run_s, "features")
            self.work.judge(ctx, reply.get("work") or {})
        gpu_s = time.perf_counter() - t0 - (result.seconds["gpu_wait"] - waited)
        if profile is not None and not tuned and not ctx.alone:
            # the profiler's inputs and first call, a shared step: only the profiled run needs the GPU alone
            # (an autotuner's first call times its configs: it stays in the hold alone)
            t0, waited = time.perf_counter(), result.seconds["gpu_wait"]
            with ctx.gpu(lock.shared, COMPARE_BYTES * rep.nbytes, "profiler warm-up"):
                profile.warm()
            gpu_s += time.perf_counter() - t0 - (result.seconds["gpu_wait"] - waited)
        # 4. timing, then ncu's profiled run in the same hold of the GPU alone: the shared steps in progress
        # are waited for (and new ones held back) once per candidate, not twice
        with ctx.gpu(lock.exclusive, what="timing and profiled run" if profile is not None else "timing"):
            t0 = time.perf_counter()
            self.timing.time(ctx)
            result.seconds["timing"] = time.perf_counter() - t0
            peaks = self.references.peaks(ctx.ref)  # a first use calibrates the GPU: a timing too
            # torch eager and torch.compile on the shapes timed, in the same hold: known ones are reused
            self.baselines.measure(ctx)
            if profile is not None:
                t0 = time.perf_counter()
                profile.measure()
                result.seconds["profile_alone"] = time.perf_counter() - t0
                # the same run as its worker saw it: profiler start, the call (ncu replays each kernel at its
                # launch), profiler stop; the rest of `profile_alone` is messages
                result.seconds.update({f"profile_{k}": v for k, v in profile.seconds.items()})
                gpu_s += result.seconds["profile_alone"]
        t0 = time.perf_counter()
        ncu_metrics = None
        if profile is not None:
            ncu_metrics, note = profile.finish()
            if note:
                result.notes.append(note)
        sol.judge(ctx.shapes, result, ctx.by_index, io_bytes, peaks, task.bytes_overcounted)
        result.features = feature_mod.assemble(result, rep, ctx.by_index[rep.index], reply, peaks, io_bytes,
                                               ctx.ref.ready.device, ncu_metrics)
        result.seconds["features"] = gpu_s + time.perf_counter() - t0
        result.seconds["features_gpu"] = gpu_s
