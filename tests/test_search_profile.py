"""Nsight Compute runs only for searches that read φ: the KernelBand policies, or the LLM proposer."""

from __future__ import annotations

import pytest

from kernelband.evaluation.records import EvalResult, Outcome
from kernelband.policies.base import make_policy
from kernelband.proposers.base import ProposerBase
from kernelband.search.loop import RunConfig, Search


class _Evaluator:
    """Records how each candidate was asked to be evaluated."""

    use_ncu = True

    def __init__(self):
        self.asked: list[tuple[str, bool]] = []

    def evaluate(self, task, source, preset=None, which="search", seed=None, profile=True):
        self.asked.append((which, profile))
        notes = [] if profile else ["ncu: not run (the search's policy and proposer do not use φ)"]
        return EvalResult(task="t", outcome=Outcome.OK, speedup=1.0, notes=notes, ncu_skipped=not profile)


class _Store:
    def evaluation(self, run_id, cid, which):
        return None

    def add_evaluation(self, run_id, cid, which, result):
        pass


class _Proposer(ProposerBase):
    def __init__(self, uses_profile: bool):
        self.uses_profile = uses_profile


def _search(policy, proposer, lookup=None) -> Search:
    search = Search(task=None, evaluator=_Evaluator(), proposer=proposer, policy=policy, strategies=[],
                    store=_Store(), run_id=1, seed=0, config=RunConfig(), lookup=lookup)
    return search


@pytest.mark.parametrize(("name", "llm", "profiled"), [
    ("kernelband", False, True), ("kernelband-masked", False, True),
    ("greedy", False, False), ("random", False, False), ("bon", False, False), ("beam", False, False),
    ("coordinate", False, False),
    ("greedy", True, True),  # the LLM's prompt carries φ, whatever the policy
])
def test_a_search_profiles_only_where_phi_is_read(name, llm, profiled):
    from kernelband.proposers.llm import LLMProposer
    from kernelband.proposers.rewriter.proposer import RewriterProposer

    assert LLMProposer.uses_profile and not RewriterProposer.uses_profile
    search = _search(make_policy(name, seed=0), _Proposer(llm))
    search._evaluate(1, "src")
    search._evaluate(1, "src", which="held_out", shapes="all")
    assert search.evaluator.asked == [("search", profiled), ("all", False)]  # a re-check never profiles


def test_an_evaluation_made_without_ncu_is_not_reused_by_a_search_that_reads_phi():
    unprofiled = EvalResult(task="t", outcome=Outcome.OK, speedup=2.0,
                            notes=["ncu: not run (the search's policy and proposer do not use φ)"], ncu_skipped=True)
    needs = _search(make_policy("kernelband", seed=0), _Proposer(False), lookup=lambda h: unprofiled)
    needs._evaluate(1, "src")
    assert needs.evaluator.asked == [("search", True)]  # evaluated again, with ncu
    fine = _search(make_policy("greedy", seed=0), _Proposer(False), lookup=lambda h: unprofiled)
    assert fine._evaluate(1, "src") is unprofiled and fine.evaluator.asked == []

