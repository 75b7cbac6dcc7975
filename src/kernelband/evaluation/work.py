"""Who does a candidate's work, and whether it ends in the timed region: the parent's judgement of what the
candidate's worker measured of one call on the representative shape (its `features` reply's "work";
worker/audit.py measures it).

* On a GPU, kernels of the call that ran outside the markers where the timing's events start and end were
  queued on another stream and never waited for: `suspicious`.
* The share of the call's GPU kernel time in the module's Triton kernels is recorded in every GPU evaluation
  (EvalResult.triton_share). Under the task's TRITON_SHARE (50 % unless the task sets another), and unless the
  task allows torch only, torch does most of the work: `suspicious`, unless the rest of the work is no more
  than the task's own module leaves to torch (some tasks' modules do part of their work in torch themselves:
  quantize_global's absmax takes three quarters of its kernel time on an H100).
* The Triton interpreter runs no GPU kernels: there the elements Triton's stores and torch's compute ops write
  stand in for kernel time, and a note says so.
"""

from __future__ import annotations

from kernelband.evaluation.context import EvalContext, Stop
from kernelband.evaluation.records import Outcome
from kernelband.evaluation.reference import References
from kernelband.evaluation.shapes import derive_seed

# A candidate under its task's TRITON_SHARE is still fine while the rest of its work is at most this many times
# the task's own module's.
TORCH_WORK_MARGIN = 1.5


class WorkJudge:
    def __init__(self, references: References, run_s: float):
        self.references = references
        self.run_s = run_s
        self._own: dict[tuple[str, int], dict] = {}  # the task's own module's split, by task and shape

    def judge(self, ctx: EvalContext, work: dict) -> None:
        """Raises Stop (`suspicious`) for work outside the timed region or left to torch; records the share."""
        result, info = ctx.result, ctx.info
        if work.get("past_end"):
            raise Stop(Outcome.SUSPICIOUS, "features", "the call's kernels run outside its timed region "
                       f"(queued on another stream, never waited for): {', '.join(work['past_end'])[:200]}",
                       check="past_timed_region")
        share, by = work.get("triton_share"), work.get("by")
        if by == "kernel_time":
            result.triton_share = share
            if work.get("error"):
                result.notes.append(f"triton share: not measured, the profiler failed ({work['error']})")
        elif by == "elements":
            shown = "nothing written" if share is None else f"Triton wrote {100 * share:.0f} % of the elements"
            result.notes.append("triton share: GPU kernel time cannot be measured in the Triton interpreter; "
                                f"judged by the elements Triton's stores and torch's compute ops write ({shown})")
        if share is None or info.allow_torch_only or share >= info.triton_share_min:
            return
        unit = "kernel time" if by == "kernel_time" else "the elements written"
        own = self._own_work(ctx)
        if own.get("by") == by and own.get("other_work") is not None and \
                work.get("other_work", 0.0) <= TORCH_WORK_MARGIN * own["other_work"]:
            own_share = own.get("triton_share")
            result.notes.append(f"triton share: {100 * share:.0f} % of {unit} in Triton, under the task's "
                                f"{100 * info.triton_share_min:.0f} %, but the task's own module leaves as much to "
                                f"torch ({'none' if own_share is None else f'{100 * own_share:.0f} %'} in Triton)")
            return
        raise Stop(Outcome.SUSPICIOUS, "features", f"torch does most of the work: {100 * (1 - share):.0f} % of "
                   f"{unit} outside Triton kernels, {100 * work.get('top_other_share', 0.0):.0f} % in "
                   f"{work.get('top_other') or 'other kernels'} (the task asks for at least "
                   f"{100 * info.triton_share_min:.0f} % in Triton)", check="torch_work")

    def _own_work(self, ctx: EvalContext) -> dict:
        """The task's own module's split of the work on the representative shape (its reference worker's
        `features` reply), asked once per task and shape."""
        rep = ctx.rep
        key = (ctx.task.key, rep.index)
        if key not in self._own:
            reply = self.references.ask(ctx.task, ctx.ref, {"op": "features", "shape": rep.index,
                                                            "seed": derive_seed(ctx.seed, rep.index, 3)},
                                        self.run_s, "its kernels' split (features)")
            self._own[key] = reply.get("work") or {}
        return self._own[key]
