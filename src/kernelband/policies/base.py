"""Policies: which arms (parent kernel, strategy) to pull next.

Every policy implements `Policy` (select / update / stats) and is deterministic given its seed and
the sequence of select/update calls: randomness comes only from a `numpy.random.Generator` seeded with
the run's seed, and scikit-learn models get fixed `random_state`s. No wall clock, no global RNG. This is
what lets a killed run resume by replaying its stored history through a fresh policy.

- `kernelband`: the paper's Algorithm 1 (hierarchical UCB over runtime clusters x strategies, plus a
  learned hardware-compatibility prior psi).
- `kernelband-masked`: the authors' released variant (UCB with c = 2, strategies masked when their target
  resource is saturated, parent sampled by softmax over headroom).
- `beam` (GEAK-like beam search with reflection), `bon` (best-of-N from k0), `random`, `greedy`.
- `coordinate`: Inductor's coordinate descent over the built-in rewriter's parameter moves.

`make_policy(name, seed, **options)` builds one; `POLICIES` lists the names.
"""

from __future__ import annotations

import importlib
import inspect
import math
from collections.abc import Callable, Iterable
from typing import Protocol

import numpy as np

from kernelband.errors import UserError
from kernelband.search.core import Arm, Candidate, Strategy, reward

Applicable = Callable[[Candidate, Strategy], bool]


class Policy(Protocol):
    """Chooses arms. Policies are deterministic given their seed and the sequence of updates, which is
    how a killed run resumes: the loop replays the stored history through a fresh policy."""

    name: str
    uses_profile: bool  # reads φ (Nsight Compute's counters): the evaluator profiles only if some part does

    def select(self, pool: list[Candidate], strategies: list[Strategy], q: int,
               applicable: Applicable) -> list[Arm]:
        """Up to q distinct arms over the valid candidates in `pool` (k0 first). `applicable(cand, strat)`
        says whether the proposer can do anything with an arm; never return an inapplicable arm. An empty
        list means the policy has nothing left to try."""
        ...

    def update(self, arm: Arm, parent: Candidate, child: Candidate | None) -> float:
        """Learn from a pull; returns the reward it used. `child` is None when nothing was proposed."""
        ...

    def stats(self) -> dict:
        """JSON-able statistics for the run store (per iteration)."""
        ...

    def reflection(self, candidate_id: int) -> str:
        """What went wrong last on this candidate's lineage, for the proposer to reflect on ("" if nothing)."""
        ...


# -- shared helpers ---------------------------------------------------------------------------------------

def by_time(cands: Iterable[Candidate]) -> list[Candidate]:
    """Fastest first (lowest time relative to k0); ties by id."""
    return sorted(cands, key=lambda c: (c.time if c.time is not None else math.inf, c.id))



def num(x: float | None, digits: int = 6) -> float | None:
    """JSON-safe rounding: infinities and NaN become None."""
    return None if x is None or not math.isfinite(x) else round(float(x), digits)


class Arms:
    """One select() call's view of the arms: asks `applicable` at most once per arm and remembers the arms
    already picked in this batch, which are no longer open."""

    def __init__(self, applicable: Applicable):
        self._applicable = applicable
        self._answers: dict[tuple[int, str], bool] = {}
        self.picked: list[Arm] = []
        self._picked: set[Arm] = set()

    def open(self, cand: Candidate, strategy: Strategy) -> bool:
        if Arm(cand.id, strategy.name) in self._picked:
            return False
        key = (cand.id, strategy.name)
        if key not in self._answers:
            self._answers[key] = bool(self._applicable(cand, strategy))
        return self._answers[key]

    def take(self, arm: Arm) -> None:
        self.picked.append(arm)
        self._picked.add(arm)


class PolicyBase:
    """Bookkeeping shared by all policies: the seeded generator, the candidates seen, pull/round counters."""

    name = ""
    uses_profile = False  # reads φ (Nsight Compute's counters): the evaluator profiles only if some part does

    def __init__(self, seed: int):
        self.seed = seed
        self.rng = np.random.default_rng(seed)
        self.candidates: dict[int, Candidate] = {}
        self.rounds = 0  # select() calls
        self.pulls = 0  # update() calls
        self._last: dict = {}

    def _observe(self, pool: list[Candidate]) -> None:
        self.rounds += 1
        for cand in pool:
            self.candidates[cand.id] = cand

    def reward(self, parent: Candidate, child: Candidate | None) -> float:
        return reward(parent, child)

    def update(self, arm: Arm, parent: Candidate, child: Candidate | None) -> float:
        r = self.reward(parent, child)
        self.candidates.setdefault(parent.id, parent)
        self._learn(arm, parent, child, r)
        self.pulls += 1
        return r

    def _learn(self, arm: Arm, parent: Candidate, child: Candidate | None, r: float) -> None:
        pass

    def reflection(self, candidate_id: int) -> str:
        return ""

    def stats(self) -> dict:
        return {"policy": self.name, "rounds": self.rounds, "pulls": self.pulls, **self._last}



class RoundRobin:
    """A per-candidate pointer into the strategy list: each call hands out the next open strategy."""

    def __init__(self, offset: int = 0):
        self.offset = offset
        self._next: dict[int, int] = {}

    def next(self, cand: Candidate, strategies: list[Strategy], arms: Arms) -> Arm | None:
        start = self._next.get(cand.id, self.offset)
        for j in range(len(strategies)):
            i = (start + j) % len(strategies)
            if arms.open(cand, strategies[i]):
                self._next[cand.id] = i + 1
                arm = Arm(cand.id, strategies[i].name)
                arms.take(arm)
                return arm
        return None



# name -> (module under kernelband.policies, class). The modules are imported on demand, so a run of a
# simple policy never imports scikit-learn, and no policy module imports this registry back.
_CLASSES = {"kernelband": ("kernelband", "KernelBandPolicy"),
            "kernelband-masked": ("kernelband", "MaskedKernelBandPolicy"),
            "beam": ("beam", "BeamPolicy"),
            "bon": ("simple", "BestOfNPolicy"),
            "random": ("simple", "RandomPolicy"),
            "greedy": ("simple", "GreedyPolicy"),
            "coordinate": ("coordinate", "CoordinatePolicy")}
POLICIES = tuple(_CLASSES)

# The policy `optimize` (the command and the API) and `bench` use when none is named. It is the best geomean
# of BENCHMARKS.md, "Search quality: bench 3 and the grid", where one seed does not separate the policies;
# the held-out, multi-seed comparison (tasks/split.py, report/stats.py) decides it once measured.
DEFAULT_POLICY = "kernelband"


def policy_class(name: str) -> type[PolicyBase]:
    """The class of a policy by name."""
    if name not in _CLASSES:
        raise UserError(f"unknown policy {name!r}: use one of {', '.join(POLICIES)}")
    module, cls = _CLASSES[name]
    return getattr(importlib.import_module(f"kernelband.policies.{module}"), cls)


def make_policy(name: str, seed: int, **options) -> PolicyBase:
    """A fresh policy by name; options are the policy class's keyword arguments."""
    cls = policy_class(name)
    accepted = [p for p in inspect.signature(cls.__init__).parameters if p not in ("self", "seed")]
    unknown = sorted(set(options) - set(accepted))
    if unknown:
        raise UserError(f"policy {name} has no option {', '.join(unknown)}"
                        f" (it takes: {', '.join(accepted) or 'none'})")
    return cls(seed, **options)
