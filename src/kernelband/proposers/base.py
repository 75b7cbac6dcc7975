"""The Proposer protocol: what the search loop asks of a proposer, and the defaults of its optional parts.

A proposer turns an arm (a parent kernel and a strategy) into a new source. Implementations inherit
`ProposerBase`, so the loop calls the optional members directly instead of probing for them.
"""

from __future__ import annotations

from typing import Protocol

from kernelband.search.core import Candidate, Context, Proposal, Strategy


class Proposer(Protocol):
    name: str
    uses_profile: bool  # reads φ (Nsight Compute's counters): the evaluator profiles only if some part does

    def applicable(self, parent: Candidate, strategy: Strategy) -> bool:
        """False when the strategy cannot possibly change this parent (the rewriter knows; an LLM: True)."""
        ...

    def propose(self, parent: Candidate, strategy: Strategy, context: Context) -> Proposal: ...

    def budget_spent(self) -> str:
        """Why the proposer can spend no more (a token or cost budget), or "" while it can."""
        ...

    def waiting_s(self) -> float | None:
        """How long a request to a remote model has been out (the live view shows it), or None."""
        ...


class ProposerBase:
    """The defaults of a proposer's optional members: no profile needed, no budget, nothing to wait for."""

    name = ""
    uses_profile = False

    def applicable(self, parent: Candidate, strategy: Strategy) -> bool:
        return True

    def budget_spent(self) -> str:
        return ""

    def waiting_s(self) -> float | None:
        return None
