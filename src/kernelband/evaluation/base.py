"""What the search, the bench and the CLI need of an evaluator: the `Evaluator` protocol.

`kernelband.evaluation.evaluator.Evaluator` (worker processes, a GPU lock, Nsight Compute) is the one
implementation; tests stand in for it with small fakes of the same shape.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Protocol, runtime_checkable

if TYPE_CHECKING:
    from kernelband.evaluation.records import EvalResult, Preset
    from kernelband.tasks.model import Task, TaskInfo


@runtime_checkable
class Evaluator(Protocol):
    """Judges candidate modules of a task against its reference; safe to call from several threads."""

    def evaluate(self, task: Task, source: str | None = None, preset: str | Preset | None = None,
                 which: str = "search", seed: int | None = None, profile: bool = True) -> EvalResult:
        """One candidate's verdict: outcome, per-shape times and speedup, features. `source` None: the task's
        own module; `which`: the shapes ("search", "held_out" or "all"); `profile=False`: no Nsight
        Compute for this candidate (EvalResult.ncu_skipped)."""
        ...

    def info(self, task: Task) -> TaskInfo:
        """The task's shapes and settings, as its harness describes them."""
        ...

    def fingerprint(self, task: Task) -> dict:
        """What a stored result must match to be reused: the GPU's name, the driver, Triton's version."""
        ...

    def keep_references(self, tasks: int) -> None:
        """Keep at least `tasks` tasks' references set up (a bench with that many runs in flight)."""
        ...
