"""The baselines a candidate is shown against: the task's torch reference as written (torch eager) and
through `torch.compile(mode="max-autotune-no-cudagraphs")`, timed in the reference's worker.

They are timed once per task, preset, shape and timer, at the task's first timed evaluation in this
evaluator, and reused for every later candidate. That is fair, though the candidate and the reference are
measured in turn (ABBA) and these are not:
* the same rules: the worker's own timing code (`timing.bench`) under the same preset, on the same copies of
  the inputs, with the timer (events or spans) that the shape's reference and candidate got;
* the same kind of process: the reference's worker, kept across evaluations like the reference itself;
* the GPU alone: they run in the hold of the GPU that the candidate's timing has, after it;
* interleaving is there so that drift between two measurements weighs on both sides alike; a baseline does
  not change from one candidate to the next, so measuring it once is what the reference's own history of
  times (interleave.RefHistory) already does for the reference.
On the CPU interpreter they are skipped with a reason: a compiled program's time on the CPU says nothing of
the GPU. A task without a torch reference, and a compilation that fails, are reasons too, never failures.
"""

from __future__ import annotations

import time
from dataclasses import dataclass

from kernelband.errors import TaskError
from kernelband.evaluation.context import EvalContext, Settings
from kernelband.evaluation.interleave import summarise
from kernelband.evaluation.records import EvalResult
from kernelband.evaluation.reference import References
from kernelband.evaluation.shapes import derive_seed

INTERPRETER_SKIP = "the CPU interpreter: torch's times there say nothing about the GPU"
NOT_ASKED = "not asked for (eval --no-baselines; baselines=False in the API)"
NOT_TIMED = "the candidate was not timed on this shape"


@dataclass(frozen=True)
class Baseline:
    eager_ms: float | None
    compiled_ms: float | None
    eager_skipped: str = ""
    compiled_skipped: str = ""


class Baselines:
    """Times the baselines of a task's shapes once, keeps them, and sets them on each result."""

    def __init__(self, settings: Settings, references: References, enabled: bool = True, compile_: bool = True):
        self.settings = settings
        self.references = references
        self.enabled = enabled
        self.compile = compile_
        self._known: dict[tuple, Baseline] = {}  # (task key, preset, shape, timer) -> its baselines

    def measure(self, ctx: EvalContext) -> None:
        """Each timed shape's baselines (timed now where not known: call with the GPU held alone), and the
        result's speedups over them."""
        t0 = time.perf_counter()
        for shape in ctx.shapes:
            sr = ctx.by_index[shape.index]
            if sr.cand_ms is None:
                continue
            key = (ctx.task.key, ctx.preset.name, shape.index, sr.timer)
            known = self._known.get(key)
            if known is None:
                known = self._known[key] = self._time(ctx, shape.index, sr.timer == "span")
            sr.eager_ms, sr.compiled_ms = known.eager_ms, known.compiled_ms
            sr.eager_skipped, sr.compiled_skipped = known.eager_skipped, known.compiled_skipped
        speedups(ctx.result)
        ctx.result.seconds["baselines"] = time.perf_counter() - t0

    def _time(self, ctx: EvalContext, index: int, span: bool) -> Baseline:
        if not self.enabled:
            return Baseline(None, None, NOT_ASKED, NOT_ASKED)
        if self.settings.mode == "interpreter":
            return Baseline(None, None, INTERPRETER_SKIP, INTERPRETER_SKIP)
        msg = {"op": "baselines", "shape": index, "seed": derive_seed(ctx.seed, index, 2),
               "preset": ctx.preset.wire(), "span": span, "compile": self.compile}
        limits = self.settings.limits
        try:
            reply = self.references.ask(ctx.task, ctx.ref, msg, limits.load_s + 2 * limits.time_s, "baselines")
        except TaskError as exc:  # the reference's trouble here is noted; the candidate's verdict stands
            why = f"the reference's worker failed: {str(exc)[:300]}"
            return Baseline(None, None, why, why)
        stat = ctx.preset.stat
        eager = summarise([reply["eager"]], stat)[0] if reply.get("eager") else None
        compiled = summarise([reply["compiled"]], stat)[0] if reply.get("compiled") else None
        return Baseline(eager, compiled, "" if eager else reply.get("eager_error") or "not timed",
                        "" if compiled else reply.get("compiled_error") or "not timed")


def speedups(result: EvalResult) -> None:
    """sum(baseline ms) / sum(candidate ms) over the timed search shapes, as `speedup` is; None with the
    reason where a timed search shape lacks the baseline (a partial sum would weigh other shapes)."""
    timed = [s for s in result.shapes if not s.held_out and s.cand_ms]
    for attr, skipped, out, why in (("eager_ms", "eager_skipped", "speedup_vs_eager", "vs_eager_skipped"),
                                    ("compiled_ms", "compiled_skipped", "speedup_vs_compile", "vs_compile_skipped")):
        missing = [s for s in timed if getattr(s, attr) is None]
        if timed and not missing:
            setattr(result, out, sum(getattr(s, attr) for s in timed) / sum(s.cand_ms for s in timed))
            setattr(result, why, "")
        else:
            setattr(result, out, None)
            setattr(result, why, f"{missing[0].label}: {getattr(missing[0], skipped) or NOT_TIMED}" if missing
                    else "no search shape was timed")
