"""The simple baselines: `bon` (best-of-N from k0), `random` and `greedy`."""

from __future__ import annotations

from kernelband.policies.base import Applicable, Arms, PolicyBase, RoundRobin, by_time
from kernelband.search.core import Arm, Candidate, Strategy


class BestOfNPolicy(PolicyBase):
    """Best-of-N: every proposal is an independent expansion of k0 (the candidate with the smallest id);
    strategies go round-robin from a seeded random starting point."""

    name = "bon"

    def __init__(self, seed: int):
        super().__init__(seed)
        self.turns: RoundRobin | None = None

    def select(self, pool: list[Candidate], strategies: list[Strategy], q: int,
               applicable: Applicable) -> list[Arm]:
        self._observe(pool)
        if not pool or not strategies:
            return []
        if self.turns is None:
            self.turns = RoundRobin(int(self.rng.integers(len(strategies))))
        k0, arms = min(pool, key=lambda c: c.id), Arms(applicable)
        while len(arms.picked) < q and self.turns.next(k0, strategies, arms) is not None:
            pass
        return arms.picked


class RandomPolicy(PolicyBase):
    """Uniformly random distinct (valid candidate, applicable strategy) pairs."""

    name = "random"

    def select(self, pool: list[Candidate], strategies: list[Strategy], q: int,
               applicable: Applicable) -> list[Arm]:
        self._observe(pool)
        arms = Arms(applicable)
        pairs = [Arm(c.id, s.name) for c in sorted(pool, key=lambda c: c.id) for s in strategies if arms.open(c, s)]
        if not pairs or q <= 0:
            return []
        chosen = self.rng.choice(len(pairs), size=min(q, len(pairs)), replace=False)
        return [pairs[int(i)] for i in chosen]


class GreedyPolicy(PolicyBase):
    """Always the current best (fastest) kernel, strategies round-robin, inapplicable ones skipped; when
    the best has fewer than q open arms the next-best kernels fill the batch."""

    name = "greedy"

    def __init__(self, seed: int):
        super().__init__(seed)
        self.turns = RoundRobin()

    def select(self, pool: list[Candidate], strategies: list[Strategy], q: int,
               applicable: Applicable) -> list[Arm]:
        self._observe(pool)
        arms = Arms(applicable)
        for cand in by_time(pool):
            while len(arms.picked) < q and self.turns.next(cand, strategies, arms) is not None:
                pass
            if len(arms.picked) >= q:
                break
        return arms.picked
