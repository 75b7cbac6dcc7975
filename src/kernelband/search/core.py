"""The vocabulary of the search: strategies, candidates, arms, proposals and the reward. The two interfaces
that the search loop drives live with their implementations: `proposers.base.Proposer` and
`policies.base.Policy`.

Times are relative to the starting kernel k0. Every evaluation times the candidate against k0 in the
same session (interleaved), so a candidate's `time` is `1 / speedup`: k0 has time 1.0, a kernel twice as
fast has 0.5. Comparing two candidates through k0 cancels the drift between their sessions.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass, field

from kernelband.evaluation.records import EvalResult, Outcome

RESOURCES = ("SM", "DRAM", "L2")


@dataclass(frozen=True)
class Strategy:
    name: str
    description: str  # precise enough to prompt an LLM
    target: str  # the hardware resource it mainly relieves: "SM", "DRAM" or "L2"
    rewrites: tuple[str, ...] = ()  # names of the built-in rewrites that serve it


def source_hash(source: str) -> str:
    return hashlib.sha256(source.encode()).hexdigest()[:16]


@dataclass
class Candidate:
    id: int
    source: str
    parent: int | None = None  # the candidate it was derived from; None for k0
    strategy: str | None = None
    iteration: int = 0  # the iteration that proposed it; 0 for k0
    result: EvalResult | None = None
    rationale: str = ""

    @property
    def hash(self) -> str:
        return source_hash(self.source)

    @property
    def valid(self) -> bool:
        return self.result is not None and self.result.outcome == Outcome.OK and bool(self.result.speedup)

    @property
    def speedup(self) -> float | None:
        """Over k0, runtime-weighted over the search shapes."""
        return self.result.speedup if self.valid else None

    @property
    def time(self) -> float | None:
        """Relative to k0 (k0 = 1.0)."""
        return 1.0 / self.result.speedup if self.valid else None

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


@dataclass
class Context:
    """What a proposer may know besides the parent and the strategy."""

    task_name: str
    entry: str  # the entry function the module must define
    description: str = ""
    phi: dict[str, float | None] = field(default_factory=dict)  # the parent's hardware profile
    history: list[Attempt] = field(default_factory=list)  # this lineage's earlier attempts, oldest first
    seen: frozenset[str] = frozenset()  # source hashes already in the run: do not propose them again
    seed: int = 0  # proposals are deterministic given the seed
    reflection: str = ""  # beam: what went wrong last time, to reflect on
    move: str = ""  # the one parameter step to take (a `Move.key` of the rewriter), or "" for the proposer's choice


@dataclass
class Proposal:
    source: str | None  # None: nothing to propose (error says why); no evaluation is spent on it
    rationale: str = ""
    tokens_in: int = 0
    tokens_out: int = 0
    error: str = ""
    calls: list[dict] = field(default_factory=list)  # LLM calls: tokens in/out, latency_s, outcome, error


def reward(parent: Candidate, child: Candidate | None) -> float:
    """The paper's reward: 1 - T_new / T_parent, and -1 on failure. A correct child slower than half its
    parent's speed would score below -1; it is clipped to -1, so it never counts as worse than a failure."""
    if child is None or not child.valid or parent.time is None:
        return -1.0
    return max(-1.0, 1.0 - child.time / parent.time)
