"""The vocabulary of the search: strategies, candidates, arms, proposals and the reward. The two interfaces
that the search loop drives live with their implementations: `proposers.base.Proposer` and
`policies.base.Policy`.

Times are relative to the starting kernel k0. Every evaluation times the candidate against k0 in the
same session (interleaved), so a candidate's `time` is `1 / speedup`: k0 has time 1.0, a kernel twice as
fast has 0.5. Comparing two candidates through k0 cancels the drift between their sessions. Which speedup
counts is the run's `Objective`: the device time (the default) or the wall time per call.
"""

from __future__ import annotations

import ast
import hashlib
from dataclasses import dataclass, field
from enum import Enum

from kernelband import pyast
from kernelband.evaluation.records import EvalResult, Outcome, ShapeResult
from kernelband.tasks.model import ShapeInfo

RESOURCES = ("SM", "DRAM", "L2")


class Objective(str, Enum):
    """What a run makes faster: the reward, the choice of the kernel handed back and the verdict read it."""

    DEVICE = "device"  # the device time, the GPU kept ahead of the CPU: the field's convention, and what a
    # program that replays CUDA graphs sees
    CALL = "call"  # the wall time per call of back-to-back calls: what an eager program pays, host cost included


def objective_speedup(result: EvalResult | None, objective: Objective | str) -> float | None:
    """The runtime-weighted speedup over the search shapes on the objective's measure."""
    if result is None:
        return None
    return result.call_speedup if objective == Objective.CALL else result.speedup


def shape_speedup(shape: ShapeResult, objective: Objective | str) -> float | None:
    """One shape's speedup on the objective's measure."""
    if objective == Objective.CALL:
        return shape.ref_call_ms / shape.call_ms if shape.ref_call_ms and shape.call_ms else None
    return shape.speedup


@dataclass(frozen=True)
class Strategy:
    name: str
    description: str  # precise enough to prompt an LLM
    target: str  # the hardware resource it mainly relieves: "SM", "DRAM" or "L2"
    rewrites: tuple[str, ...] = ()  # names of the built-in rewrites that serve it
    proposer: str = "llm"  # who writes its proposals under `--proposer hybrid`: "rewriter" or "llm"


def source_hash(source: str) -> str:
    return hashlib.sha256(source.encode()).hexdigest()[:16]


def normalized_hash(source: str) -> str:
    """The hash of the code as Python reads it: comments, blank lines, quoting and spacing do not count, so a
    reply that only reformats an earlier candidate is known as the same code. A source that does not parse is
    hashed as written."""
    try:
        return source_hash(ast.unparse(pyast.parse(source)))
    except (SyntaxError, ValueError, RecursionError):
        return source_hash(source)


class ProposalOutcome(str, Enum):
    """What became of one proposal (for an LLM: of its one call). Counted per run: the live view, the summary
    and the report show how many proposals failed, and why."""

    OK = "ok"  # a new source, handed to the evaluator
    NO_CODE = "no_code"
    SYNTAX_ERROR = "syntax_error"
    MISSING_ENTRY = "missing_entry"
    TRUNCATED = "truncated"
    DUPLICATE = "duplicate"  # the same code as a candidate the run has already
    HTTP_ERROR = "http_error"  # after the retries
    RATE_LIMITED = "rate_limited"  # HTTP 429 after the retries
    TIMEOUT = "timeout"  # no reply within the per-request limit, after the retries
    FAILED = "failed"  # the proposer itself raised
    NOTHING = "nothing"  # no source and no call: nothing (more) to propose for the arm; never counted

    @property
    def label(self) -> str:
        return OUTCOME_LABELS[self]


OUTCOME_LABELS = {
    ProposalOutcome.OK: "ok", ProposalOutcome.NO_CODE: "no code block", ProposalOutcome.SYNTAX_ERROR: "broken Python",
    ProposalOutcome.MISSING_ENTRY: "missing entry function", ProposalOutcome.TRUNCATED: "cut off at max tokens",
    ProposalOutcome.DUPLICATE: "duplicate", ProposalOutcome.HTTP_ERROR: "HTTP error",
    ProposalOutcome.RATE_LIMITED: "rate limited (429)", ProposalOutcome.TIMEOUT: "timeout",
    ProposalOutcome.FAILED: "proposer failed", ProposalOutcome.NOTHING: "nothing to propose",
}


def outcome_counts_text(counts: dict[str, int]) -> str:
    """"3 ok, 1 broken Python, 2 timeout": counts keyed by `ProposalOutcome` value, in the enum's order."""
    parts = [f"{counts[o.value]} {o.label}" for o in ProposalOutcome if counts.get(o.value)]
    return ", ".join(parts) or "none"


@dataclass
class Candidate:
    id: int
    source: str
    parent: int | None = None  # the candidate it was derived from; None for k0
    strategy: str | None = None
    iteration: int = 0  # the iteration that proposed it; 0 for k0
    result: EvalResult | None = None
    rationale: str = ""
    objective: Objective = Objective.DEVICE  # the run's: which of the result's speedups counts

    @property
    def hash(self) -> str:
        return source_hash(self.source)

    @property
    def valid(self) -> bool:
        return (self.result is not None and self.result.outcome == Outcome.OK
                and bool(objective_speedup(self.result, self.objective)))

    @property
    def speedup(self) -> float | None:
        """Over k0, runtime-weighted over the search shapes, on the run's objective."""
        return objective_speedup(self.result, self.objective) if self.valid else None

    @property
    def time(self) -> float | None:
        """Relative to k0 (k0 = 1.0)."""
        return 1.0 / self.speedup if self.valid else None

    @property
    def rho(self) -> dict[str, float | None]:
        return self.result.features.rho if self.result else {}

    @property
    def phi(self) -> dict[str, float | None]:
        return self.result.features.phi if self.result else {}

    @property
    def compile_seconds(self) -> float:
        return (self.result.seconds.get("compile", 0.0) if self.result else 0.0)


@dataclass(frozen=True)
class Arm:
    candidate: int  # candidate id (the parent to expand)
    strategy: str
    move: str = ""  # one named parameter step for the proposer to take (coordinate descent); "" lets it choose


@dataclass
class Attempt:
    """What one lineage tried before, for the LLM prompt and for reflection."""

    strategy: str
    outcome: str
    detail: str = ""
    error: str = ""
    speedup: float | None = None
    rationale: str = ""  # the proposer's one line on what it changed


@dataclass
class Context:
    """What a proposer may know besides the parent and the strategy."""

    task_name: str
    entry: str  # the entry function the module must define
    description: str = ""  # the task's, from the starting kernel's docstring: it describes k0, not the parent
    phi: dict[str, float | None] = field(default_factory=dict)  # the parent's hardware profile
    history: list[Attempt] = field(default_factory=list)  # this lineage's earlier attempts, oldest first
    seen: frozenset[str] = frozenset()  # source hashes already in the run: do not propose them again
    known: dict[str, int] = field(default_factory=dict)  # normalized_hash -> candidate id, for every candidate
    tried: list[Attempt] = field(default_factory=list)  # what was proposed from this very parent, oldest first
    shapes: tuple[ShapeInfo, ...] = ()  # the search shapes the kernel must handle
    seed: int = 0  # proposals are deterministic given the seed
    reflection: str = ""  # beam: what went wrong last time, to reflect on
    move: str = ""  # the one parameter step to take (a `Move.key` of the rewriter), or "" for the proposer's choice


@dataclass
class LLMCall:
    """One chat completion, its retries included."""

    model: str
    outcome: ProposalOutcome = ProposalOutcome.OK
    tokens_in: int = 0
    tokens_out: int = 0
    latency_s: float = 0.0
    attempts: int = 0  # HTTP requests made: 1 + the retries
    error: str = ""


@dataclass
class Proposal:
    source: str | None  # None: nothing to propose (error says why); no evaluation is spent on it
    rationale: str = ""
    tokens_in: int = 0
    tokens_out: int = 0
    error: str = ""
    calls: list[LLMCall] = field(default_factory=list)
    outcome: ProposalOutcome = ProposalOutcome.OK  # with no source and no call: the proposer had nothing


def reward(parent: Candidate, child: Candidate | None) -> float:
    """The paper's reward: 1 - T_new / T_parent, and -1 on failure. A correct child slower than half its
    parent's speed would score below -1; it is clipped to -1, so it never counts as worse than a failure."""
    if child is None or not child.valid or parent.time is None:
        return -1.0
    return max(-1.0, 1.0 - child.time / parent.time)
