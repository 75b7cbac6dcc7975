"""Timing: reference and candidate in turn on each shape, with both sides' histories, retiming and spans.

Who goes first alternates from shape to shape, ABBA over the rounds, so that drift cancels. A shape whose
reference or candidate comes out off its usual time in this evaluator is measured again
(evaluation/interleave.py). Short shapes are timed by the calls' spans on the GPU (Preset.timer), in
Preset.span_rounds rounds. Beside each measurement's device times the worker measures the wall time per call of
back-to-back calls (`call_ms`): what an eager program pays, host cost included.
"""

from __future__ import annotations

import hashlib
import statistics
import time
from contextlib import nullcontext

from kernelband.evaluation import context, interleave
from kernelband.evaluation.context import EvalContext, Settings
from kernelband.evaluation.pool import WorkerPool
from kernelband.evaluation.records import PRESETS, Preset
from kernelband.evaluation.reference import References
from kernelband.evaluation.shapes import derive_seed, select_shapes
from kernelband.tasks.model import Task

# Where a timing's seconds go, summed over its measurements into EvalResult.seconds: the worker's making of
# the inputs, its probe of the call's host time (timing.ahead_for), the estimate and do_bench, and the whole
# request as the parent saw it (the rest: the message both ways and the worker's freeing of memory).
TIMING_PHASES = {"inputs": "timing_inputs", "probe": "timing_probe", "bench": "timing_bench", "call": "timing_call"}


def _add_phases(seconds: dict[str, float], reply: dict, request_s: float) -> None:
    for name, key in TIMING_PHASES.items():
        if name in reply.get("phases", {}):
            seconds[key] = seconds.get(key, 0.0) + float(reply["phases"][name])
    seconds["timing_requests"] = seconds.get("timing_requests", 0.0) + request_s


def _short_so_far(total_ms: float, preset: Preset) -> bool:
    """A task whose reference takes `total_ms` over its search shapes is short enough for spans
    (Preset.span_task_ms; None: any task)."""
    return preset.span_task_ms is None or total_ms < preset.span_task_ms


def _time_message(index: int, seed: int, wire: dict, call: bool = True) -> dict:
    """A worker's `time` request for one shape, its timing inputs made from `seed`, timed by events; with `call`,
    the wall time per call measured beside (not for a measurement that only learns a usual time)."""
    return {"op": "time", "shape": index, "seed": derive_seed(seed, index, 2), "preset": wire, "span": False,
            "call": call}


class Timing:
    """Times candidates against their task's reference; keeps each reference's usual times per shape."""

    def __init__(self, settings: Settings, pool: WorkerPool, references: References):
        self.settings = settings
        self.pool = pool
        self.references = references
        # The reference's recent times per task, preset and shape, and each candidate's (the source's hash
        # added to the key): a time far off them is measured again.
        self.history = interleave.RefHistory()
        self.cand_history = interleave.RefHistory()
        # (task key, preset name) -> whether its short shapes were last timed by spans (`_short_task`)
        self._short_tasks: dict[tuple[str, str], bool] = {}

    def _ask_ref(self, task: Task, ref, msg: dict, what: str) -> dict:
        return self.references.ask(task, ref, msg, self.settings.limits.time_s, what)

    def time(self, ctx: EvalContext) -> None:
        """Reference and candidate in turn on each shape that passed its checks, ABBA over the rounds. Who
        goes first alternates from shape to shape: a first measurement that is slow (a GPU not yet at its
        clocks, a first allocation) then weighs on both sides alike instead of on the reference every time."""
        task, ref, cand, preset, seed, result, by_index = (ctx.task, ctx.ref, ctx.cand, ctx.preset, ctx.seed,
                                                            ctx.result, ctx.by_index)
        shapes, mode = ctx.shapes, self.settings.mode
        wire = preset.wire()
        mine = hashlib.sha256(ctx.source.encode()).hexdigest()[:16]  # the candidate's part of its history's key
        timed = 0
        unwaited = 0  # measurements that asked for the GPU-ahead wait and got none
        retimed, synced = [], {"ref": 0, "cand": 0}
        span_errors: list[str] = []
        checked = preset.recheck and self.settings.recheck_timings
        spans = checked and preset.timer == "span" and mode != "interpreter" \
            and self._short_task(ctx, wire)
        for shape in shapes:
            sr = by_index[shape.index]
            if sr.correct is not True:
                continue
            rounds = 1 if mode == "interpreter" else max(1, preset.rounds)
            more = (0, 0.0)  # rounds past `rounds` while the speedup is imprecise: only for spans
            sr.timed_first = "ref" if timed % 2 == 0 else "cand"
            timed += 1
            msg = _time_message(shape.index, seed, wire)
            syncs: set[str] = set()
            timers: set[str] = set()  # the timer each measurement used (worker/timing.py, `span`)
            during: list[dict] = []  # the off-lock work in flight at each measurement
            placed: list[int] = []  # copies of the inputs each measurement cycled through

            def measure(who: str, msg=msg, sr=sr, syncs=syncs, during=during, placed=placed,
                        timers=timers) -> interleave.Sample:
                nonlocal unwaited
                during.append(self.pool.activity_now())
                asked = time.perf_counter()
                if who == "ref":
                    reply = self._ask_ref(task, ref, msg, f"timing {sr.label}")
                else:
                    reply = context.ask(cand, msg, self.settings.limits.time_s, f"timing ({sr.label})")
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
                return interleave.Sample(reply["times"], reply.get("call_ms"))

            key = (task.key, preset.name, shape.index)
            cand_key = (*key, mine)

            def learn(history: interleave.RefHistory, key: tuple, who: str, msg=msg, during=during,
                      timers=timers, measure=measure) -> float | None:
                """One more measurement of one side alone, its usual time on this shape and timer: what the
                pair's measurement of that side is compared with (None where the worker timed it otherwise). Its
                wall time per call is not wanted: the pair's is the one kept."""
                timers.clear()
                msg["call"] = False
                sample = measure(who)
                msg["call"] = True
                during.clear()
                asked = "span" if msg["span"] else "events"
                return self._learn(history, key, sample.times, preset) if timers == {asked} else None

            expected = self.history.expected(key) if checked else None
            if checked and expected is None:
                # a task's first timing in this evaluator (unless `prime` ran): one more measurement
                # of the reference alone, so that its pair's reference has something to be compared with
                expected = learn(self.history, key, "ref")
            by_events = key, cand_key
            if spans and expected is not None and expected < preset.span_below_ms:
                # short by events: both sides timed by their spans, with histories of their own
                msg["span"] = True
                rounds, more = max(rounds, preset.span_rounds), (preset.span_rounds_max, preset.span_se)
                key, cand_key = (*key, "span"), (*cand_key, "span")
                expected = self.history.expected(key)
                if expected is None:
                    expected = learn(self.history, key, "ref")
            # the same rule for the candidate: its first timing on this shape in this evaluator measures it
            # alone once more first
            cand_expected = self.cand_history.expected(cand_key) if checked else None
            if checked and cand_expected is None:
                cand_expected = learn(self.cand_history, cand_key, "cand")
            timers.clear()
            kept, attempts = interleave.measure_shape(measure, rounds, sr.timed_first == "ref", preset.stat,
                                                      expected, preset.recheck, preset.retries, cand_expected,
                                                      *more)
            mixed = len(timers) > 1
            if mixed:  # one side's spans unreadable: both sides again by events, never one of each
                msg["span"] = False
                rounds = max(1, preset.rounds)
                key, cand_key = by_events
                expected, cand_expected = self.history.expected(key), self.cand_history.expected(cand_key)
                kept, attempts = interleave.measure_shape(measure, rounds, sr.timed_first == "ref", preset.stat,
                                                          expected, preset.recheck, preset.retries, cand_expected)
            sr.ref_ms, sr.ref_cv, sr.ref_rounds = interleave.summarise(kept.ref, preset.stat)
            sr.cand_ms, sr.cand_cv, sr.cand_rounds = interleave.summarise(kept.cand, preset.stat)
            sr.speedup = sr.ref_ms / sr.cand_ms if sr.cand_ms else None
            sr.ref_call_ms = statistics.fmean(kept.ref_call) if kept.ref_call else None
            sr.call_ms = statistics.fmean(kept.cand_call) if kept.cand_call else None
            if checked and sr.ref_ms:
                self.history.add(key, sr.ref_ms)
            if checked and sr.cand_ms:
                self.cand_history.add(cand_key, sr.cand_ms)
            if len(attempts) > 1:
                sr.retimed = len(attempts) - 1
                window = during[:2 * rounds]  # the first attempt's measurements
                first = {k: max(d.get(k, 0) for d in window) for k in sorted({k for d in window for k in d})}
                retimed.append(f"{sr.label} ({', '.join(_off(a, expected, cand_expected) for a in attempts)}; "
                               f"meanwhile {first})")
            sr.host_sync = ",".join(sorted(syncs))
            sr.placements = min(placed, default=1)
            sr.timer = "mixed" if mixed else timers.pop() if timers else "events"
            for who in syncs:
                synced[who] += 1
        if retimed:
            result.notes.append("timing: measured again where the reference or the candidate came out over "
                                f"{preset.recheck:g}x its usual time (another process or the host's CPU "
                                "disturbed the GPU), keeping the attempt nearest the usual times; per shape, "
                                "each side's time over its usual in each attempt (ref/cand), and the work off "
                                "the GPU lock during the first: " + "; ".join(retimed))
        if span_errors:
            result.notes.append("timing: the calls' spans could not be read from CUPTI's record, so both sides "
                                "of the shape were timed by events: " + "; ".join(span_errors[:5]))
        for who, n in synced.items():
            if n:
                result.notes.append(f"timing: the {'reference' if who == 'ref' else 'candidate'}'s call waits "
                                    f"for the GPU on {n} shape(s) (a host synchronisation, such as .item()), so "
                                    "its time includes the CPU's and varies with the host's load")
        if unwaited and preset.ahead_us > 0 and mode != "interpreter":
            result.notes.append(f"timing: {unwaited} measurements without the GPU-ahead wait (this Triton's "
                                "do_bench does not flush the L2 through its driver's clear_cache): kernels of a "
                                "few µs may have been timed on the CPU")
        search = [by_index[s.index] for s in shapes if not s.held_out and by_index[s.index].cand_ms]
        held = [by_index[s.index] for s in shapes if s.held_out and by_index[s.index].cand_ms]
        if search:
            result.speedup = sum(x.ref_ms for x in search) / sum(x.cand_ms for x in search)
        if held:
            result.held_out_speedup = sum(x.ref_ms for x in held) / sum(x.cand_ms for x in held)
        result.call_speedup = _call_speedup(search)
        result.held_out_call_speedup = _call_speedup(held)

    def _short_task(self, ctx: EvalContext, wire: dict) -> bool:
        """Whether the reference takes under `preset.span_task_ms` over the search shapes to time, by events
        (its usual times in this evaluator; a shape's first measured now, as the timing would; the held-out
        shapes left out, so that an evaluation with them decides as one without): only then are the
        short shapes timed by spans (Preset.timer). Remembered per task and preset.
        """
        short = self._task_under(ctx, wire)
        self._short_tasks[ctx.task.key, ctx.preset.name] = short
        return short

    def _task_under(self, ctx: EvalContext, wire: dict) -> bool:
        preset, result = ctx.preset, ctx.result
        if preset.span_task_ms is None:
            return True
        total = 0.0
        for shape in ctx.shapes:
            if shape.held_out or ctx.by_index[shape.index].correct is not True:
                continue
            key = (ctx.task.key, preset.name, shape.index)
            expected = self.history.expected(key)
            if expected is None:
                msg = _time_message(shape.index, ctx.seed, wire, call=False)
                asked = time.perf_counter()
                reply = self._ask_ref(ctx.task, ctx.ref, msg, f"timing {shape.label}")
                _add_phases(result.seconds, reply, time.perf_counter() - asked)
                expected = self._learn(self.history, key, reply["times"], preset)
            total += expected or 0.0
            if not _short_so_far(total, preset):
                return False
        return True

    @staticmethod
    def _learn(history: interleave.RefHistory, key: tuple, times: list[float], preset: Preset) -> float | None:
        """A side's usual time on a shape, from its first measurement in this evaluator."""
        expected = interleave.summarise([times], preset.stat)[0]
        if expected:
            history.add(key, expected)
        return expected

    def prime(self, task: Task, preset: str | Preset, which: str = "search") -> int:
        """Measure the reference once on each shape whose usual time this evaluator does not know yet, with
        the GPU alone: what a task's first timing otherwise does inside its first candidate's timing (the
        re-measure rule needs it, evaluation/interleave.py). Part of a task's set-up, as a search's baseline
        evaluation pays it once per task; returns how many shapes were measured (0 without a GPU)."""
        preset = PRESETS[preset] if isinstance(preset, str) else preset
        if not (preset.recheck and self.settings.recheck_timings):
            return 0
        measured, wire = 0, preset.wire()
        with self.references.lease(task) as ref:
            shapes = select_shapes(ref.info, self.settings.mode, which, ref.valid)
            todo = [s for s in shapes if self.history.expected((task.key, preset.name, s.index)) is None]
            # Every shape in one hold of the GPU alone, as a candidate's timing: each hold first waits for the
            # steps sharing the GPU to end, and a hold per shape made as many waits (the set-up of 29 tasks,
            # 8 at a time, took about 7 minutes)
            with self.pool.gpu_lock.doing("reference timing"), \
                    (self.pool.gpu_lock.exclusive() if todo else nullcontext()):
                for shape in todo:
                    msg = _time_message(shape.index, 0, wire, call=False)
                    reply = self._ask_ref(task, ref, msg, f"timing {shape.label}")
                    if reply.get("ok"):
                        self._learn(self.history, (task.key, preset.name, shape.index), reply["times"], preset)
                        measured += 1
        if preset.timer == "span":
            # the task's length known from these times, for reports of how its short shapes are timed; the
            # timing decides again with the shapes the candidate passed (`_short_task`)
            usual = [self.history.expected((task.key, preset.name, s.index)) for s in shapes
                     if not s.held_out]
            if usual and None not in usual:
                self._short_tasks[task.key, preset.name] = _short_so_far(sum(usual), preset)
        return measured


def _call_speedup(shapes: list) -> float | None:
    """Runtime-weighted over `shapes` like the speedup, on the wall time per call: sum(reference call ms) /
    sum(candidate call ms); None where a shape lacks either."""
    if not shapes or any(x.call_ms is None or x.ref_call_ms is None for x in shapes):
        return None
    total = sum(x.call_ms for x in shapes)
    return sum(x.ref_call_ms for x in shapes) / total if total > 0 else None


def _off(attempt: interleave.Attempt, expected: float | None, cand_expected: float | None) -> str:
    """`1.31/0.99`: an attempt's reference and candidate time over their usual ones (- where not known)."""
    return "/".join(f"{ms / usual:.2f}" if ms and usual else "-"
                    for ms, usual in ((attempt.ref_ms, expected), (attempt.cand_ms, cand_expected)))
