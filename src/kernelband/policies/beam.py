"""`beam`: GEAK-like beam search with reflection."""

from __future__ import annotations

from kernelband.policies.base import Applicable, Arms, PolicyBase, RoundRobin, by_time
from kernelband.search.core import Arm, Candidate, Strategy


class BeamPolicy(PolicyBase):
    """GEAK-like beam search: the beam is the `width` fastest candidates that still have an open arm
    (default 3); each round expands every beam member in turn, fastest first, each with its own next
    strategy (round-robin per member), and goes round the beam again while fewer than q arms are picked.
    With q >= width every member is expanded each round.

    `reflection(candidate_id)` returns the last failure on that candidate's lineage (the candidate and its
    ancestors): which strategy, the outcome, the detail and the tail of the error, or a correct child that
    was not faster. The loop passes it to the proposer as Context.reflection.
    """

    name = "beam"

    def __init__(self, seed: int, width: int = 3, trim: int = 1500):
        super().__init__(seed)
        self.width, self.trim = width, trim
        self.turns = RoundRobin()
        self.failures: dict[int, tuple[int, str]] = {}  # candidate id -> (pull number, text)

    def select(self, pool: list[Candidate], strategies: list[Strategy], q: int,
               applicable: Applicable) -> list[Arm]:
        self._observe(pool)
        arms = Arms(applicable)
        beam = [c for c in by_time(pool) if any(arms.open(c, s) for s in strategies)][:self.width]
        progress = True
        while progress and len(arms.picked) < q:
            progress = False
            for member in beam:
                if len(arms.picked) >= q:
                    break
                progress = self.turns.next(member, strategies, arms) is not None or progress
        self._last = {"beam": [c.id for c in beam]}
        return arms.picked

    def reflection(self, candidate_id: int) -> str:
        found: tuple[int, str] | None = None
        node: int | None = candidate_id
        while node is not None:
            failure = self.failures.get(node)
            if failure is not None and (found is None or failure[0] > found[0]):
                found = failure
            cand = self.candidates.get(node)
            node = cand.parent if cand is not None else None
        return found[1] if found else ""

    def _learn(self, arm: Arm, parent: Candidate, child: Candidate | None, r: float) -> None:
        text = self._failure(arm, parent, child)
        if text:
            self.failures[parent.id] = (self.pulls, text)

    def _failure(self, arm: Arm, parent: Candidate, child: Candidate | None) -> str:
        head = f"Candidate {parent.id} with strategy {arm.strategy}: "
        if child is None:
            return head + "nothing was proposed."
        if child.result is None:
            return head + "the child was not evaluated."
        if child.valid:
            if parent.time is not None and child.time >= parent.time:
                return head + f"correct but not faster ({parent.time / child.time:.3f}x its parent)."
            return ""
        res = child.result
        text = head + f"{res.outcome.value}: {res.detail}".strip()
        if res.error:
            room = self.trim - len(text) - 1
            if room > 0:
                text += "\n" + res.error.strip()[-room:]
        return text[: self.trim]
