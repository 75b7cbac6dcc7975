"""The hybrid proposer: the built-in rewriter for the strategies it covers well, an LLM for the rest.

Launch parameters and autotuning (the built-in tiling, vectorization and pipeline strategies) are cheap and
certain edits for the rewriter; fusion, reordering and memory-access changes need a model. Each strategy
says which side writes its proposals (`Strategy.proposer`, "rewriter" or "llm"; a `--strategies` file can
change it), so tokens are spent only where a model is needed.

Once the LLM's budget is spent, its strategies become inapplicable and the search goes on with the
rewriter's, instead of stopping.
"""

from __future__ import annotations

from kernelband.proposers.base import Proposer, ProposerBase
from kernelband.search.core import Candidate, Context, Proposal, Strategy


class HybridProposer(ProposerBase):
    name = "hybrid"

    def __init__(self, rewriter: Proposer, llm: Proposer):
        self.rewriter, self.llm = rewriter, llm
        self.uses_profile = rewriter.uses_profile or llm.uses_profile

    def _side(self, strategy: Strategy) -> Proposer:
        return self.rewriter if strategy.proposer == "rewriter" else self.llm

    def applicable(self, parent: Candidate, strategy: Strategy) -> bool:
        side = self._side(strategy)
        if side is self.llm and self.llm.budget_spent():
            return False
        return side.applicable(parent, strategy)

    def propose(self, parent: Candidate, strategy: Strategy, context: Context) -> Proposal:
        return self._side(strategy).propose(parent, strategy, context)

    def waiting_s(self) -> float | None:
        return self.llm.waiting_s()
