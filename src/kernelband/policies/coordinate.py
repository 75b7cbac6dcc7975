"""`coordinate`: Inductor's coordinate-descent tuner (torch/_inductor/runtime/coordinate_descent_tuner.py) over
the built-in rewriter's parameter moves, a baseline for the bandits at the same evaluation budget.

Inductor tunes one field of a config at a time: for each field in turn it tries the neighbours of the
current value (x2 and /2; num_stages +1 and -1) and keeps one that is faster, and it goes round the fields
again until no neighbour is. Here a field is a block size or a launch option where a launch sets it (the
rewriter's `Move`s: block_size and num_warps x2 and /2, num_stages +1 and -1), a config is a kernel, and
faster means a time at least IMPROVEMENT below the current kernel's.

With q arms an iteration, a batch takes the current kernel's next q untried moves in Inductor's order (the
fields in the order the strategies and their rewrites list them, the increase before the decrease); each
child that beats the current kernel becomes the current kernel. Where the current kernel has no untried move
left (Inductor stops there: a local optimum), the next fastest kernels' moves fill the batch, so the policy
spends the budget the others spend. It makes no other kind of change: a kernel without parameter moves (an
autotuned one, say) gives it nothing to pull. The moves are the built-in rewriter's (`--proposer rewrite`); an
LLM proposer is handed the arm's strategy and does not take a move.
"""

from __future__ import annotations

from collections.abc import Callable

from kernelband.policies.base import Applicable, Arms, PolicyBase, by_time
from kernelband.proposers.rewriter.proposer import parameter_moves
from kernelband.search.core import Arm, Candidate, Strategy

# Inductor keeps a change 0.1 % faster; a time here is noisier than that (BENCHMARKS.md, "Noise floor"), so a
# child must be 1 % faster to move the descent.
IMPROVEMENT = 0.01
MoveSource = Callable[[Candidate, Strategy], list[str]]  # the move keys a strategy's rewrites can take on a kernel


def rewriter_moves(cand: Candidate, strategy: Strategy) -> list[str]:
    return parameter_moves(cand.source, tuple(strategy.rewrites)) if strategy.rewrites else []


class CoordinatePolicy(PolicyBase):
    """Coordinate descent: one parameter move at a time from the current kernel, kept where it is faster."""

    name = "coordinate"

    def __init__(self, seed: int, moves: MoveSource | None = None):
        super().__init__(seed)
        self.moves = moves or rewriter_moves
        self.current: Candidate | None = None  # the kernel the descent stands on
        self.tried: set[tuple[int, str]] = set()  # (candidate, move key), marked when selected
        self.kept = 0  # moves that became the current kernel
        self._moves: dict[tuple[int, str], list[str]] = {}

    def _moves_of(self, cand: Candidate, strategy: Strategy) -> list[str]:
        key = (cand.id, strategy.name)
        if key not in self._moves:
            self._moves[key] = self.moves(cand, strategy)
        return self._moves[key]

    def select(self, pool: list[Candidate], strategies: list[Strategy], q: int,
               applicable: Applicable) -> list[Arm]:
        self._observe(pool)
        if not pool or q <= 0:
            return []
        if self.current is None or all(c.id != self.current.id for c in pool):
            self.current = by_time(pool)[0]
        arms = Arms(applicable)
        for cand in [self.current, *(c for c in by_time(pool) if c.id != self.current.id)]:
            for strategy in strategies:
                if len(arms.picked) >= q:
                    break
                moves = [m for m in self._moves_of(cand, strategy) if (cand.id, m) not in self.tried]
                if not moves or not arms.open(cand, strategy):
                    continue
                for move in moves[:q - len(arms.picked)]:
                    arms.take(Arm(cand.id, strategy.name, move))
                    self.tried.add((cand.id, move))
            if len(arms.picked) >= q:
                break
        return arms.picked

    def stats(self) -> dict:
        return {**super().stats(), "current": self.current.id if self.current is not None else None,
                "moves_tried": len(self.tried), "moves_kept": self.kept}

    def _learn(self, arm: Arm, parent: Candidate, child: Candidate | None, r: float) -> None:
        if child is None or child.time is None or self.current is None or self.current.time is None:
            return
        if child.time < self.current.time * (1 - IMPROVEMENT):
            self.current = child
            self.kept += 1
