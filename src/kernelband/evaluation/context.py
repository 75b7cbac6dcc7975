"""What one evaluation carries from stage to stage, and the helpers every stage uses."""

from __future__ import annotations

import re
import time
from collections.abc import Iterator
from contextlib import contextmanager, nullcontext
from dataclasses import dataclass, field
from functools import cached_property
from typing import TYPE_CHECKING

from kernelband.errors import TaskError
from kernelband.evaluation.compare import Outputs
from kernelband.evaluation.gone import WorkerGone
from kernelband.evaluation.gpulock import GpuLock
from kernelband.evaluation.records import EvalResult, Outcome, Preset, ShapeResult
from kernelband.evaluation.shapes import representative
from kernelband.evaluation.workers import Worker
from kernelband.tasks.model import ShapeInfo, Task, TaskInfo
from kernelband.tensorfile import TensorFileError

if TYPE_CHECKING:
    from kernelband.evaluation.ncu import Profile

# The task's own test cases always run with this seed: the set-up finds the outputs the reference does not
# reproduce with it (flash_decode2_phi's test_case_3 reads past its inputs for some seeds' sequence lengths).
TESTS_SEED = 12345
# GPU memory a shared step may take, in multiples of its shape's input bytes: a shape's run holds the inputs
# and about as much output in the reference's process and in the candidate's (4), the parent's comparison
# both outputs (2), the reference's self-check two outputs beside its inputs (3). The shared steps on the
# GPU at once declare at most MEMORY_SHARE of the memory they can have (GpuLock.budget): what the GPU has free
# plus what the steps in flight declared, read again before each evaluation and each reference's set-up, so
# that memory held by idle workers (kept references, warm workers, their CUDA contexts) or by other programs
# is left out; the other half is for what the estimates miss.
RUN_BYTES, COMPARE_BYTES, SELFCHECK_BYTES = 4, 2, 3
MEMORY_SHARE = 0.5


@dataclass
class Limits:
    load_s: float = 180.0  # import + compile of a module
    run_s: float = 120.0  # one correctness run of one shape (the task's own tests: twice that)
    time_s: float = 300.0  # one timing measurement of one shape
    # On a GPU, a candidate's correctness run (compiled beforehand) gets `run_factor` times the reference's
    # time for the same request, at least `run_floor_s` and at most `run_s`: a hung kernel holds the GPU
    # lock, which every timing waits for, for seconds rather than minutes (Settings.relative_limits).
    run_factor: float = 10.0
    run_floor_s: float = 20.0
    # A candidate whose own code runs this long without returning while it is imported or its kernels are
    # compiled is stopped as stuck, long before `load_s` (worker/stuck.py tells that from compiling).
    stuck_s: float = 15.0


@dataclass
class Settings:
    """An evaluator's settings, shared by its parts (reference, checks, timing)."""

    mode: str  # "gpu" | "interpreter"
    limits: Limits
    compare_device: str  # where the parent loads and compares outputs
    tune: dict  # how autotuners time their configs (the evaluator's preset)
    # A task's own test cases (TritonBench's) run on a GPU only: they are sized for one.
    task_tests: bool
    # Correctness limits relative to the reference's own time (Limits.run_factor); not in the interpreter,
    # whose times follow Python's work per program, not the kernel's (a smaller block is far slower there).
    relative_limits: bool
    # A shape whose reference is far off its usual time is measured again; not in the interpreter, whose
    # timings measure Python: noisy by nature.
    recheck_timings: bool


class Stop(Exception):
    """Ends an evaluation with `outcome`, decided in `stage`; `check` names the anti-cheat check that fired."""

    def __init__(self, outcome: Outcome, stage: str, detail: str, error: str = "", check: str | None = None):
        super().__init__(detail)
        self.outcome, self.stage, self.detail, self.error, self.check = outcome, stage, detail, error, check


@dataclass
class EvalContext:
    """One candidate's evaluation: what every stage reads, and the result they fill in."""

    task: Task
    info: TaskInfo  # the task as its reference describes it
    ref: Worker  # the task's reference worker, leased
    cand: Worker  # the candidate's fresh worker
    source: str  # the candidate module
    shapes: list[ShapeInfo]
    preset: Preset
    seed: int
    result: EvalResult
    lock: GpuLock
    alone: bool = False  # every GPU step with the GPU alone (a second attempt after running out of memory)
    profile: Profile | None = None  # ncu's profile of the representative shape, None without ncu
    by_index: dict[int, ShapeResult] = field(init=False)  # each shape's result, by the shape's index

    def __post_init__(self) -> None:
        self.by_index = {s.index: r for s, r in zip(self.shapes, self.result.shapes)}

    @cached_property
    def rep(self) -> ShapeInfo:
        """The representative shape (features, ncu)."""
        return representative([s for s in self.shapes if not s.held_out] or self.shapes)

    @property
    def tuned(self) -> bool:
        """The module has an autotuner: its first call of a shape may time configurations."""
        return "autotune" in self.source

    @contextmanager
    def gpu(self, take, nbytes: int = 0, what: str = "") -> Iterator[None]:
        """Hold `take` (a GpuLock mode, or nullcontext) for one step that may take `nbytes` of GPU memory; the
        wait goes into result.seconds['gpu_wait'], and a wait to have the GPU alone (for the checks in
        progress to end) into 'gpu_wait_alone' as well. `what` names the step in the lock's accounting."""
        t = time.perf_counter()
        alone = take == self.lock.exclusive
        seconds = self.result.seconds
        with self.lock.doing(what) if what else nullcontext(), take() if alone else take(nbytes):
            waited = time.perf_counter() - t
            seconds["gpu_wait"] = seconds.get("gpu_wait", 0.0) + waited
            if alone:
                seconds["gpu_wait_alone"] = seconds.get("gpu_wait_alone", 0.0) + waited
            yield


def ask(worker: Worker, message: dict, timeout: float, stage: str, why_limit: str = "") -> dict:
    """A request to the candidate: its failures are the candidate's outcome (raises Stop). `why_limit` says
    how `timeout` was set, in a timeout's detail. The stages call it as `context.ask`, one place to watch
    every request to a candidate."""
    try:
        reply = worker.request(message, timeout)
    except WorkerGone as exc:
        detail = f"{stage}: {first_line(exc.detail)}" + (why_limit if exc.outcome == "timeout" else "")
        raise Stop(Outcome(exc.outcome), stage, detail, exc.detail) from None
    if not reply.get("ok"):
        outcome = reply.get("outcome", "runtime_error")
        if outcome not in Outcome._value2member_map_:
            outcome = "runtime_error"
        error = reply.get("error", "")
        check = reply.get("check") if outcome == Outcome.SUSPICIOUS.value else None  # worker/audit.py's checks
        raise Stop(Outcome(outcome), stage, f"{stage}: {error_line(error)}", error, check=check)
    tampered = reply.get("tampered") or []
    if tampered:
        raise Stop(Outcome.SUSPICIOUS, stage, f"{stage}: the candidate replaced {', '.join(tampered)}",
                   check="tampering")
    return reply


def load_outputs(reply: dict, what: str, device: str, task: Task | None = None) -> Outputs:
    """The outputs a worker sent: the candidate's (`task` None) or the reference's, on `device`. A file or
    layout the parent cannot read is the sender's fault: `suspicious` for a candidate, a task error for the
    reference."""
    try:
        return Outputs.load(reply, device=device)
    except (TensorFileError, OSError, RuntimeError) as exc:
        if task is not None:
            raise TaskError(f"{task.ref}: the reference's outputs on {what} cannot be read: {exc}") from None
        raise Stop(Outcome.SUSPICIOUS, "correctness", f"{what}: the candidate's outputs cannot be read "
                   f"({exc})", check="output_file") from None


def release_compare_memory(device: str) -> None:
    """The parent's GPU memory for outputs goes back to the driver after every evaluation, so that the
    workers (and the next task's large shapes) have it."""
    if device != "cpu":
        import torch

        torch.cuda.empty_cache()


def first_line(text: str) -> str:
    for line in (text or "").strip().splitlines():
        if line.strip():
            return line.strip()[:300]
    return "(no message)"


_EXCEPTION_LINE = re.compile(r"^[A-Za-z_][\w.]*(Error|Exception|Exit|Interrupt)\b")
_FILE_LINE = re.compile(r'^File "[^"]*", line (\d+)')
# Errors whose traceback ends in the offending source line rather than in a frame that raised: without the
# line number, "SyntaxError: unmatched ')'" leaves the user to search the whole module.
_PARSE_ERRORS = ("SyntaxError", "IndentationError", "TabError")


def error_line(text: str) -> str:
    """The line of a traceback that says what went wrong: the last `SomeError: ...` line, else the last line.
    torch's CUDA errors end in advice ("Compile with `TORCH_USE_CUDA_DSA` ..."), not in the error itself. A
    syntax error says at which line of its file it is."""
    lines = [ln.strip() for ln in (text or "").strip().splitlines() if ln.strip()]
    if not lines:
        return "(no message)"
    named = [i for i, ln in enumerate(lines) if _EXCEPTION_LINE.match(ln)]
    at = named[-1] if named else len(lines) - 1
    line = lines[at]
    if line.startswith(_PARSE_ERRORS):
        where = [m.group(1) for m in map(_FILE_LINE.match, lines[:at]) if m]
        if where:
            line = f"{line} (line {where[-1]})"
    return line[:300]
