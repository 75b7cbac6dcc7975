"""Correctness and the anti-cheat checks: the candidate against the reference on every selected shape.

Each shape's inputs are fresh: the reference worker and the candidate worker build the same inputs from a
seed drawn for the evaluation, and the parent compares what comes back (`wrong_output`, `runtime_error`,
`crashed`, `timeout`, `suspicious`). Then the anti-cheat checks: a second call with other inputs, output
aliasing, NaN/Inf/zeros, tampered timers, work left running, no Triton.
"""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor, wait
from contextlib import nullcontext
from functools import partial

from kernelband.errors import TaskError
from kernelband.evaluation import context
from kernelband.evaluation.compare import Mismatch, Outputs, compare
from kernelband.evaluation.context import (
    COMPARE_BYTES,
    RUN_BYTES,
    TESTS_SEED,
    EvalContext,
    Settings,
    Stop,
    load_outputs,
)
from kernelband.evaluation.records import EvalResult, Outcome, ShapeResult, out_of_memory
from kernelband.evaluation.reference import References
from kernelband.evaluation.shapes import alias_shape, derive_seed
from kernelband.tasks.model import ShapeInfo, Task, TaskInfo


class Checks:
    """Runs a candidate's correctness checks; thread-safe, shared by every evaluation of an evaluator."""

    def __init__(self, settings: Settings, references: References, in_flight: int):
        self.settings = settings
        self.references = references
        # Inputs the reference modifies in place, per task and shape: the candidate returns them too.
        self._mutated: dict[tuple[str, int], list[int]] = {}
        # Each evaluation has at most one of each of these in flight (the reference's run of a shape, the
        # parent's check of the previous shape), so each pool is as large as the evaluations an evaluator
        # serves at once: with fewer threads, evaluations queued for a thread, holding their step of the GPU
        # lock meanwhile (and keeping a timing waiting for it).
        self.side = ThreadPoolExecutor(max_workers=in_flight, thread_name_prefix="kernelband-ref")
        # The parent's loads and compares of one shape, overlapping the workers' runs of the next.
        self.judges = ThreadPoolExecutor(max_workers=in_flight, thread_name_prefix="kernelband-check")

    def close(self) -> None:
        self.side.shutdown(wait=False)
        self.judges.shutdown(wait=False)

    def _load(self, reply: dict, what: str, task: Task | None = None, device: str | None = None) -> Outputs:
        return load_outputs(reply, what, device or self.settings.compare_device, task)

    def correctness(self, ctx: EvalContext, gpu) -> dict[int, int]:
        """Every shape, pipelined: while the parent loads and compares one shape's outputs, the workers
        already run the next one. The first failing shape decides the outcome, as if run one by one.
        `gpu()` is held for each GPU step, and never while waiting for another (see GpuLock). Returns each
        shape's bytes in and out."""
        task, ref, cand, info = ctx.task, ctx.ref, ctx.cand, ctx.info
        step = partial(ctx.gpu, gpu)
        io_bytes: dict[int, int] = {}
        alias = alias_shape(ctx.shapes)
        pending = None  # the parent's check of the previous shape
        jobs = []
        # The parent's checks go to threads shared by every evaluation, where each takes its own GPU step. A
        # check that holds the GPU alone throughout (`gpu` is then a no-op) must not queue its own behind
        # other evaluations' checks that wait for it to let go: they would wait for each other for ever. It
        # gets a thread of its own.
        own = ThreadPoolExecutor(max_workers=1, thread_name_prefix="kernelband-check-alone") \
            if gpu is nullcontext else None
        checks = own or self.judges
        try:
            launches = 0
            for shape in ctx.shapes:
                with step(RUN_BYTES * shape.nbytes, "correctness run"):
                    replies = self._run_shape(ctx, shape, shape is alias)
                if replies is None:
                    continue
                r_reply, c_reply = replies
                what = f"shape {shape.label}"
                launches += c_reply.get("launches", 0)
                self._check_run(c_reply, r_reply, what)
                jobs.append(checks.submit(self._judge, task, r_reply, c_reply, shape, info, what,
                                          ctx.by_index[shape.index], gpu, ctx.lock))
                if pending is not None:
                    io_bytes.update(pending.result())
                pending = jobs[-1]
                if shape is alias:
                    io_bytes.update(pending.result())
                    pending = None
                    with step(RUN_BYTES * shape.nbytes, "second call"):
                        self._second_call(task, ref, cand, shape, ctx.seed, r_reply, info, what)
            if pending is not None:
                io_bytes.update(pending.result())
                pending = None
        except Stop as stop:
            earlier = pending.exception() if pending is not None else None
            if isinstance(earlier, Stop) and earlier is not stop:
                raise earlier from None  # an earlier shape failed first
            raise
        finally:
            wait(jobs)  # no check may outlive the evaluation's GPU lock
            if own is not None:
                own.shutdown(wait=False)
        with step(0, "task tests"):
            self._task_tests(task, info, ref, cand, ctx.result, ctx.tuned)
        if launches == 0 and not info.allow_torch_only:
            raise Stop(Outcome.SUSPICIOUS, "correctness", "the candidate launched no Triton kernel (torch only)",
                       check="no_triton")
        return io_bytes

    def _run_shape(self, ctx: EvalContext, shape: ShapeInfo, keep: bool) -> tuple[dict, dict] | None:
        """The reference's and the candidate's replies for one shape (None: a held-out shape the reference
        cannot run). Both run at once when the inputs the reference modifies in place are known."""
        task, ref, refs, limits = ctx.task, ctx.ref, self.references, self.settings.limits
        s = derive_seed(ctx.seed, shape.index)
        what = f"shape {shape.label}"
        ref_msg = {"op": "run", "shape": shape.index, "seed": s, "use_reference": True, "return_mutated": True}
        known = self._mutated.get((task.key, shape.index))
        ref_run = self.side.submit(refs.ask, task, ref, ref_msg, limits.run_s, what)
        if known is None:  # the first evaluation of a task learns them
            r_reply = self._held_out_guard(ref_run, shape, ctx.by_index, ctx.result)
            if r_reply is None:
                return None
            known = r_reply.get("mutated_inputs", [])
        c_msg = {"op": "run", "shape": shape.index, "seed": s, "keep": keep, "return_inputs": known}
        # an autotuner's configurations were timed beforehand (`tune`), never inside this step
        limit, why = refs.limit(task, shape.index, limits.run_s, False)
        try:
            c_reply = context.ask(ctx.cand, c_msg, limit, f"correctness ({what})", why)
        except Stop:
            wait([ref_run])  # the reference worker must be idle before anyone asks it again
            raise
        r_reply = self._held_out_guard(ref_run, shape, ctx.by_index, ctx.result)
        if r_reply is None:
            return None
        refs.took(task, shape.index, r_reply)
        mutated = r_reply.get("mutated_inputs", [])
        if mutated != known:  # data-dependent in-place updates: ask again for the right inputs
            c_reply = context.ask(ctx.cand, {**c_msg, "return_inputs": mutated}, limit, f"correctness ({what})", why)
        self._mutated[(task.key, shape.index)] = mutated
        return r_reply, c_reply

    def _judge(self, task: Task, r_reply: dict, c_reply: dict, shape: ShapeInfo, info: TaskInfo, what: str,
               shape_result: ShapeResult, gpu, lock) -> dict[int, int]:
        """The parent's verdict on one shape (raises Stop); returns the shape's bytes in and out. The parent
        loads and compares on the GPU: a correctness step like the workers' runs. The files are read into host
        memory first, with no lock: the hold is the copy to the GPU and the comparison (without ncu, the
        comparisons were what most kept timings waiting)."""
        r_host = self._load(r_reply, what, task, device="cpu")
        c_host = self._load(c_reply, what, device="cpu")
        device = self.settings.compare_device
        with lock.doing("compare"), gpu(COMPARE_BYTES * shape.nbytes):
            r_out, c_out = r_host.to(device), c_host.to(device)
            self._check_outputs(r_out, c_out, info.atol, info.rtol, what, shape_result)
        shape_result.correct = True
        return {shape.index: shape.nbytes + r_out.nbytes("result")}

    def _second_call(self, task, ref, cand, shape, seed, r_reply, info, what) -> None:
        """The same shape again with other inputs: cached or aliased outputs show up here."""
        refs, run_s = self.references, self.settings.limits.run_s
        s2 = derive_seed(seed, shape.index, 1)
        r2 = self._load(refs.ask(task, ref, {"op": "run", "shape": shape.index, "seed": s2,
                                             "use_reference": True, "return_mutated": True},
                                 run_s, what), what, task)
        limit, why = refs.limit(task, shape.index, run_s, False)
        c2_reply = context.ask(cand, {"op": "run", "shape": shape.index, "seed": s2, "check_alias": True,
                              "return_inputs": r_reply.get("mutated_inputs", [])},
                       limit, f"correctness ({what}, second call)", why)
        if c2_reply.get("aliased"):
            raise Stop(Outcome.SUSPICIOUS, "correctness", f"{what}: the second call returned the same "
                       "output memory as the first (cached output)", check="aliased_output")
        mismatch = compare(r2, self._load(c2_reply, what), info.atol, info.rtol)
        if mismatch is not None:
            raise Stop(Outcome.SUSPICIOUS, "correctness", f"{what}: right on the first call, wrong on a "
                       f"second call with other inputs (cached output?): {mismatch.detail}",
                       check="cached_output")

    def _task_tests(self, task, info, ref, cand, result, tuned: bool = False) -> None:
        """The task's own test cases (TritonBench's instance tests), reference and candidate at once, with the
        seed the set-up checked them with (they are the task's unit tests; the search shapes bring the fresh
        inputs)."""
        if not info.has_tests:
            return
        if not self.settings.task_tests:
            # TritonBench's instance tests are sized for GPUs (32K-row copies take minutes here).
            result.notes.append("the task's own test cases are skipped in interpreter mode")
            return
        refs, run_s = self.references, self.settings.limits.run_s
        message = {"op": "tests", "seed": TESTS_SEED}
        kept = ref.test_outputs
        ref_run = None if kept is not None else self.side.submit(
            refs.ask, task, ref, message, run_s * 2, "its own test cases")
        limit, why = refs.limit(task, "tests", run_s * 2, tuned)
        try:
            c_reply = context.ask(cand, message, limit, "correctness (the task's test cases)", why)
        finally:
            if ref_run is not None:
                wait([ref_run])
        what = "the task's test cases"
        device = self.settings.compare_device
        r_out = (Outputs(kept.entries, {k: t.to(device) for k, t in kept.tensors.items()})
                 if kept is not None else self._load(ref_run.result(), what, task))
        ignore = ref.unreproducible
        if ignore:
            result.notes.append(f"the task's test outputs {', '.join(sorted(ignore))} are left out: the starting "
                                "kernel does not reproduce them (they depend on uninitialized memory or vary)")
        mismatch = compare(r_out, self._load(c_reply, what), info.atol, info.rtol, ignore=ignore)
        if mismatch is not None:
            raise Stop(Outcome(mismatch.outcome), "correctness", f"the task's own test cases: {mismatch.detail}",
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

    @staticmethod
    def _check_run(c_reply: dict, r_reply: dict, what: str) -> None:
        if c_reply.get("lazy_output"):
            raise Stop(Outcome.SUSPICIOUS, "correctness", f"{what}: the output was still changing after the "
                       "entry returned (work left on another stream or thread)", check="async_work")
        if c_reply.get("new_threads"):
            raise Stop(Outcome.SUSPICIOUS, "correctness", f"{what}: the candidate left threads running "
                       f"({', '.join(c_reply['new_threads'][:3])})", check="threads")
        extra = sorted(set(c_reply.get("mutated_inputs", [])) - set(r_reply.get("mutated_inputs", [])))
        if extra:
            raise Stop(Outcome.WRONG_OUTPUT, "correctness", f"{what}: the candidate modifies input "
                       f"{', '.join(f'#{i}' for i in extra)}, which the reference leaves unchanged")

    @staticmethod
    def _check_outputs(r_out: Outputs, c_out: Outputs, atol: float, rtol: float, what: str,
                       shape_result: ShapeResult) -> None:
        mismatch: Mismatch | None = compare(r_out, c_out, atol, rtol)
        if mismatch is None:
            return
        shape_result.correct = False
        shape_result.max_abs_err, shape_result.max_rel_err = mismatch.max_abs, mismatch.max_rel
        raise Stop(Outcome(mismatch.outcome), "correctness", f"{what}: {mismatch.detail}",
                   check=None if mismatch.outcome == "wrong_output" else mismatch.check)
