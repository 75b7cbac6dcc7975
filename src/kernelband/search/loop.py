"""The optimize loop: a policy picks arms, a proposer writes children, the evaluator judges them.

One iteration pulls `q` distinct arms. Proposals are written concurrently and each is evaluated as soon as
it arrives, so the GPU is busy while an LLM writes; the evaluator itself lets one candidate compile while
another is timed. Results are fed back to the policy in slot order, so a run is deterministic given its
seed and its stored history.

Resuming: everything is stored as it happens. A resumed run starts a fresh policy with the same seed and
walks the iterations again; a proposal or evaluation that is already in the store is read back instead
of being made, so the policy passes through exactly the states it had, and nothing finished is
re-evaluated.
"""

from __future__ import annotations

import hashlib
import statistics
import time
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path

from kernelband.errors import SetupError, UserError
from kernelband.evaluation import sol
from kernelband.evaluation.records import EvalResult, Outcome
from kernelband.policies.base import Policy
from kernelband.proposers.base import Proposer
from kernelband.search.core import (
    Arm,
    Attempt,
    Candidate,
    Context,
    Objective,
    Proposal,
    ProposalOutcome,
    Strategy,
    normalized_hash,
    objective_speedup,
    source_hash,
)
from kernelband.search.dispatch import Start
from kernelband.search.handback import hand_back, held_out_slower, write_files
from kernelband.store import RunStatus, Store
from kernelband.tasks.model import Task

# How many times one iteration may re-select when the proposer has nothing for the chosen arms.
MAX_RESELECT = 8
# Attempts of a lineage shown to the proposer.
HISTORY = 8


@dataclass
class RunConfig:
    iterations: int = 10
    q: int = 1  # arms per iteration
    evaluations: int | None = None  # a budget in evaluations; stops before the iterations run out
    preset: str = "default"
    held_out: bool = True  # re-check the best kernels at the end: search shapes again and the held-out shapes
    finalists: int = 3  # how many of the fastest kernels are re-checked; the fastest on the re-check wins
    objective: str = "device"  # what the reward, the choice and the verdict read (core.Objective)

    def to_dict(self) -> dict:
        return dict(self.__dict__)


@dataclass
class Summary:
    run_id: int
    task: str
    policy: str
    proposer: str
    seed: int
    iterations: int
    evaluations: int
    best_candidate: int
    best_speedup: float  # by device time, whatever the objective (best_call_speedup: per call)
    best_outcome: str
    held_out_speedup: float | None
    best_sol_fraction: float | None
    k0_self_speedup: float | None  # k0 timed against itself: the noise floor of this run
    tokens: int
    pool_size: int
    # The best kernel checked and timed once more after the search, on the search shapes with fresh inputs:
    # best_speedup is the largest of many noisy measurements and leans high; this one does not.
    confirmed_speedup: float | None = None
    best_path: str = ""
    diff_path: str = ""
    stopped: str = ""  # why the run ended before its iterations, if it did
    device: str = ""  # where the timings were taken
    interpreter: bool = False  # timings from the Triton interpreter on a CPU: they say nothing about GPU speed
    # The best kernel's runtime-weighted speedup over the task's torch reference as written and through
    # torch.compile, from its re-check where it had one (fresh inputs, as confirmed_speedup) else from its
    # search evaluation; None with the reason where a baseline was not timed (evaluation/baselines.py)
    best_vs_eager: float | None = None
    best_vs_compile: float | None = None
    vs_eager_skipped: str = ""
    vs_compile_skipped: str = ""
    # the median of the best kernel's SOL fractions over the search shapes that move at least 16 MB
    # (sol.LARGE_BYTES); best_sol_fraction is the median over all of them
    best_sol_large: float | None = None
    per_iteration: list[dict] = field(default_factory=list)
    # proposals by outcome (`ProposalOutcome` values): how many were evaluated, and why the others were not
    proposals: dict[str, int] = field(default_factory=dict)
    # the kernels re-checked at the end: candidate, speedup during the search, outcome, re-measured, held-out
    finalists: list[dict] = field(default_factory=list)
    # how the module was handed back: pinned, autotuned (and why not pinned) or as it is (handback.Handback);
    # the re-measured and held-out figures above are those of the module handed back
    handback: dict = field(default_factory=dict)
    # --resume of a run that had finished: this is its stored summary, and nothing ran
    finished_before: bool = False
    # What the run made faster (core.Objective): the reward, the choice of the kernel handed back and the
    # verdict read the device time ("device") or the wall time per call ("call"); per_iteration's speedups are
    # on it. Every speedup above is by device time; these are the same figures per call.
    objective: str = "device"
    best_call_speedup: float | None = None
    confirmed_call_speedup: float | None = None
    held_out_call_speedup: float | None = None
    k0_self_call_speedup: float | None = None
    # the held-out shapes (labels) on which the final check found the kernel handed back slower than the
    # starting kernel, on the objective, by more than the noise floor (handback.held_out_slower)
    held_out_slower: list[str] = field(default_factory=list)

    def to_dict(self) -> dict:
        return dict(self.__dict__)

    @classmethod
    def from_dict(cls, data: dict) -> Summary:
        return cls(**{k: v for k, v in data.items() if k in cls.__dataclass_fields__})


class Search:
    def __init__(self, task: Task, evaluator, proposer: Proposer, policy: Policy, strategies: list[Strategy],
                 store: Store, run_id: int, seed: int, config: RunConfig, out_dir: Path | None = None,
                 on_event: Callable[[dict], None] | None = None,
                 lookup: Callable[[str], EvalResult | None] | None = None):
        self.task, self.evaluator, self.proposer, self.policy = task, evaluator, proposer, policy
        self.strategies = {s.name: s for s in strategies}
        self.store, self.run_id, self.seed, self.config = store, run_id, seed, config
        self.out_dir = out_dir
        self.on_event = on_event or (lambda event: None)
        self.lookup = lookup
        self.candidates: list[Candidate] = []
        self.exhausted: set[tuple[int, str]] = set()
        self.attempts: dict[int, list[Attempt]] = {}  # parent id -> what was tried on it
        self.known: dict[str, int] = {}  # normalized_hash -> candidate id: a reformatted copy is no new kernel
        self.proposals: dict[str, int] = {}  # proposals by outcome
        self.evaluations = 0
        self.tokens = 0
        # Nsight Compute only where φ is read: by the policy (kernelband's ψ heads, the masked variant's
        # saturation mask) or by the proposer (the LLM's prompt). greedy, random, bon and beam with the
        # rewriter do without it, at about half the time per candidate (BENCHMARKS.md, pool-noncu).
        self.profile = policy.uses_profile or proposer.uses_profile
        self.knowledge = None  # knowledge carried across kernels (knowledge.Carry), set by open_search

    @property
    def objective(self) -> Objective:
        """What the run makes faster (its config's)."""
        return Objective(self.config.objective)

    # -- the pieces ---------------------------------------------------------------------------
    def _evaluate(self, cid: int, source: str, which: str = "search", shapes: str | None = None) -> EvalResult:
        """`which` names the stored evaluation, `shapes` the evaluator's shape set (default: the same)."""
        stored = self.store.evaluation(self.run_id, cid, which)
        if stored is not None:
            return stored
        cached = self.lookup(source_hash(source)) if (self.lookup and which == "search") else None
        if cached is not None and self.profile and not profiled(cached):
            cached = None  # evaluated for a search that skipped ncu: this one needs φ
        if cached is not None:
            result = cached
        else:
            # φ steers the search only: a finalist's re-check needs none
            result = self.evaluator.evaluate(self.task, source, preset=self.config.preset, which=shapes or which,
                                             seed=self._seed("eval", cid, which),
                                             profile=self.profile and which == "search")
        self.store.add_evaluation(self.run_id, cid, which, result)
        return result

    def _seed(self, *parts) -> int:
        digest = hashlib.sha256(repr((self.seed, *parts)).encode()).digest()
        return int.from_bytes(digest[:4], "little") & 0x7FFFFFFF

    def _propose(self, iteration: int, slot: int, arm: Arm) -> tuple[Proposal, int | None] | Callable:
        """A stored proposal with the id of the candidate it made, or a function that writes a new one.

        The context is built here, in the loop's thread, so that what a proposer sees does not depend on
        how concurrent proposals interleave."""
        stored = self.store.proposal(self.run_id, iteration, slot)
        if stored is not None:
            source = None
            if stored["candidate"] is not None:
                rows = [c for c in self.store.candidates(self.run_id) if c["id"] == stored["candidate"]]
                source = rows[0]["source"] if rows else None
            return (Proposal(source=source, rationale=stored["rationale"], tokens_in=stored["tokens_in"],
                             tokens_out=stored["tokens_out"], error=stored["error"],
                             outcome=ProposalOutcome(stored["outcome"] or "ok")), stored["candidate"])
        parent = self.candidates[arm.candidate]
        context = Context(task_name=self.task.name, entry=self.entry, description=self.task.description,
                          phi=dict(parent.phi), history=self._history(parent),
                          seen=frozenset(c.hash for c in self.candidates), known=dict(self.known),
                          tried=list(self.attempts.get(parent.id, [])), shapes=self.evaluator.info(self.task).shapes,
                          seed=self._seed("propose", iteration, slot), reflection=self._reflection(parent),
                          move=arm.move)
        strategy = self.strategies[arm.strategy]

        def write() -> tuple[Proposal, None]:
            try:
                return self.proposer.propose(parent, strategy, context), None
            except SetupError:  # every proposal would fail the same way: the run stops, resumable
                raise
            except Exception as exc:  # noqa: BLE001 - a proposer bug must not end the run
                return Proposal(source=None, error=f"the proposer failed: {type(exc).__name__}: {exc}",
                                outcome=ProposalOutcome.FAILED), None

        return write

    def _history(self, parent: Candidate) -> list[Attempt]:
        """What was tried on the parent's ancestors (the parent's own attempts go to `Context.tried`)."""
        lineage = []
        node = self.candidates[parent.parent] if parent.parent is not None else None
        while node is not None:
            lineage.append(node.id)
            node = self.candidates[node.parent] if node.parent is not None else None
        tried = [a for cid in reversed(lineage) for a in self.attempts.get(cid, [])]
        return tried[-HISTORY:]

    def _reflection(self, parent: Candidate) -> str:
        return self.policy.reflection(parent.id)

    @property
    def entry(self) -> str:
        info = self.evaluator.info(self.task)
        return info.entry

    def _applicable(self, cand: Candidate, strategy: Strategy) -> bool:
        return (cand.id, strategy.name) not in self.exhausted and self.proposer.applicable(cand, strategy)

    # -- the run ------------------------------------------------------------------------------
    def start(self) -> Candidate:
        source = self.task.module_source
        self.store.add_candidate(self.run_id, 0, source, source_hash(source), None, None, 0, 0, "the starting kernel")
        result = self._evaluate(0, source)
        if result.outcome != Outcome.OK:
            raise UserError(f"{self.task.ref}: the starting kernel itself is {result.outcome.value}: {result.detail}")
        k0 = Candidate(0, source, result=result, rationale="the starting kernel", objective=self.objective)
        self.k0_self_speedup, self.k0_self_call_speedup = result.speedup, result.call_speedup
        # k0 is the reference: its time is 1.0 by definition; the measured self-speedup is the noise floor.
        result.speedup = result.call_speedup = 1.0
        self.candidates.append(k0)
        self.known[normalized_hash(source)] = 0
        self.store.set_device(self.run_id, result.device)
        if self.knowledge is not None:
            self.knowledge.begin(self.policy, k0)
        return k0

    def run(self) -> Summary:
        """The search, to its end. A run that had finished gives its stored summary; one that ends with an
        error is stored as `failed` with the reason, one stopped by Ctrl-C as `interrupted` (both resumable)."""
        row = self.store.run(self.run_id)
        if row.status == RunStatus.DONE and row.summary:
            return Summary.from_dict({**row.summary, "finished_before": True})
        try:
            return self._run()
        except KeyboardInterrupt:
            self.store.end_run(self.run_id, RunStatus.INTERRUPTED, "interrupted (Ctrl-C)")
            raise
        except UserError as exc:  # SetupError too: an LLM endpoint that cannot be reached, for instance
            self.store.end_run(self.run_id, RunStatus.FAILED, str(exc))
            raise
        except Exception as exc:
            self.store.end_run(self.run_id, RunStatus.FAILED, f"{type(exc).__name__}: {exc}")
            raise

    def _run(self) -> Summary:
        started = time.perf_counter()
        self.start()
        per_iteration: list[dict] = []
        stopped = ""
        iteration = 0
        for iteration in range(1, self.config.iterations + 1):
            if self.config.evaluations is not None and self.evaluations >= self.config.evaluations:
                stopped = f"the evaluation budget ({self.config.evaluations}) is spent"
                iteration -= 1
                break
            reason = self.proposer.budget_spent()
            if reason:
                stopped = f"the LLM budget is spent ({reason})"
                iteration -= 1
                break
            t0 = time.perf_counter()
            arms = self._iteration(iteration)
            if not arms:
                stopped = "the policy has no applicable arm left"
                iteration -= 1
                break
            row = self._record_iteration(iteration, arms, time.perf_counter() - t0)
            per_iteration.append(row)
            self.on_event({"kind": "iteration", **row, "clusters": self._clusters()})
        best = self._finish(iteration, per_iteration, stopped, time.perf_counter() - started)
        return best

    def _iteration(self, iteration: int) -> list[dict]:
        """Pulls up to q arms; returns what happened to each."""
        q = self.config.q
        if self.config.evaluations is not None:
            q = max(1, min(q, self.config.evaluations - self.evaluations))
        done: list[dict] = []
        slot = 0
        for _ in range(MAX_RESELECT):
            want = q - len(done)
            if want <= 0:
                break
            valid = [c for c in self.candidates if c.valid]
            arms = self.policy.select(valid, list(self.strategies.values()), want, self._applicable)
            if not arms:
                break
            pulled = self._pull(iteration, slot, arms)
            slot += len(arms)
            done += [p for p in pulled if p["counted"]]
        return done

    def _pull(self, iteration: int, first_slot: int, arms: list[Arm]) -> list[dict]:
        """Proposes for every arm at once and evaluates each proposal as soon as it is written."""
        name = f"{self.task.name}-{self.policy.name}"  # thread names, as a sweep's heartbeat shows them
        with ThreadPoolExecutor(max_workers=len(arms), thread_name_prefix=f"propose-{name}") as writers, \
                ThreadPoolExecutor(max_workers=2, thread_name_prefix=f"evaluate-{name}") as judges:
            jobs = [self._propose(iteration, first_slot + i, arm) for i, arm in enumerate(arms)]
            proposals = [writers.submit(job) if callable(job) else _done(job) for job in jobs]
            evals: list[Future | None] = []
            made: list[tuple[Proposal, int | None, int | None]] = []
            for i, future in enumerate(proposals):
                proposal, stored_cid = future.result()
                cid = self._admit(iteration, first_slot + i, arms[i], proposal, stored_cid)
                made.append((proposal, cid, stored_cid))
                evals.append(judges.submit(self._evaluate, cid, proposal.source) if cid is not None else None)
            results = [e.result() if e is not None else None for e in evals]
        return [self._learn(arm, proposal, cid, result)
                for arm, (proposal, cid, _), result in zip(arms, made, results, strict=True)]

    def _admit(self, iteration: int, slot: int, arm: Arm, proposal: Proposal, stored_cid: int | None) -> int | None:
        """Gives a proposal a candidate id (or none: nothing proposed, or a source the run already has)."""
        cid = stored_cid
        if proposal.source is None and not proposal.calls and proposal.outcome == ProposalOutcome.OK:
            proposal.outcome = ProposalOutcome.NOTHING
        if cid is None and proposal.source is not None:
            h = source_hash(proposal.source)
            same = self.known.get(normalized_hash(proposal.source))
            if same is not None:  # written concurrently with the same code, or by a proposer that did not check
                proposal.error = f"the same code as candidate {same}"
                # A duplicate that cost tokens is a pull that failed; one that cost nothing (the rewriter's)
                # is no proposal at all, as if the proposer had skipped it.
                spent = bool(proposal.calls or proposal.tokens_in or proposal.tokens_out)
                proposal.source = None
                proposal.outcome = ProposalOutcome.DUPLICATE if spent else ProposalOutcome.NOTHING
                for call in proposal.calls[-1:]:
                    call.outcome, call.error = ProposalOutcome.DUPLICATE, proposal.error
            else:
                cid = len(self.candidates)
                self.store.add_candidate(self.run_id, cid, proposal.source, h, arm.candidate, arm.strategy,
                                         iteration, slot, proposal.rationale)
        if self.store.proposal(self.run_id, iteration, slot) is None:
            self.store.add_proposal(self.run_id, iteration, slot, arm.candidate, arm.strategy, cid, proposal.error,
                                    proposal.rationale, proposal.tokens_in, proposal.tokens_out, proposal.calls,
                                    proposal.outcome.value)
        if cid is not None:
            self.known.setdefault(normalized_hash(proposal.source), cid)
            self.candidates.append(Candidate(cid, proposal.source, parent=arm.candidate, strategy=arm.strategy,
                                             iteration=iteration, rationale=proposal.rationale,
                                             objective=self.objective))
        return cid

    def _learn(self, arm: Arm, proposal: Proposal, cid: int | None, result: EvalResult | None) -> dict:
        parent = self.candidates[arm.candidate]
        self.tokens += proposal.tokens_in + proposal.tokens_out
        if proposal.outcome == ProposalOutcome.FAILED:
            self.proposals[proposal.outcome.value] = self.proposals.get(proposal.outcome.value, 0) + 1
        if cid is None and proposal.outcome in (ProposalOutcome.NOTHING, ProposalOutcome.FAILED):
            # Nothing (more) for this arm, or a proposer bug: no evaluation, no pull; never offer it again.
            # The stored outcome decides, so that a resumed run takes the same branch as the first one did.
            # An arm with a move asked for one variant only: the policy that names moves keeps track of them.
            if not arm.move:
                self.exhausted.add((arm.candidate, arm.strategy))
            return {"candidate": arm.candidate, "strategy": arm.strategy, "child": None, "outcome": "no_proposal",
                    "detail": proposal.error, "reward": None, "counted": False}
        child = None
        if cid is not None:
            child = self.candidates[cid]
            child.result = result
            self.evaluations += 1
        gained = self.policy.update(arm, parent, child)
        if self.knowledge is not None:
            self.knowledge.record(self.policy.pulls, arm.strategy, parent, child)
        self.proposals[proposal.outcome.value] = self.proposals.get(proposal.outcome.value, 0) + 1
        outcome = result.outcome.value if result is not None else proposal.outcome.value
        detail = result.detail if result is not None else proposal.error
        self.attempts.setdefault(parent.id, []).append(
            Attempt(arm.strategy, outcome, detail, (result.error if result is not None else proposal.error)[-2000:],
                    child.speedup if child is not None else None, proposal.rationale))
        event = {"candidate": arm.candidate, "strategy": arm.strategy, "child": cid, "outcome": outcome,
                 "detail": detail, "speedup": child.speedup if child is not None else None, "reward": gained,
                 "rationale": proposal.rationale, "proposal": proposal.outcome.value, "counted": True}
        self.on_event({"kind": "pull", **event, "best_speedup": self.best.speedup, "tokens": self.tokens,
                       "proposals": dict(self.proposals)})
        return event

    @property
    def best(self) -> Candidate:
        return max((c for c in self.candidates if c.valid), key=lambda c: (c.speedup, -c.id))

    def _clusters(self) -> dict:
        stats = self.policy.stats() or {}
        return stats.get("clusters", {})

    def _record_iteration(self, iteration: int, arms: list[dict], seconds: float) -> dict:
        speedups = [a["speedup"] for a in arms if a.get("speedup")]
        row = {"iteration": iteration, "arms": arms, "best_speedup": self.best.speedup,
               "iteration_speedup": max(speedups) if speedups else None,
               "pool_size": sum(c.valid for c in self.candidates), "tokens": self.tokens, "seconds": seconds}
        self.store.add_iteration(self.run_id, iteration, arms, row["best_speedup"], row["iteration_speedup"],
                                 row["pool_size"], self.tokens, self.policy.stats() or {}, seconds)
        return row

    def _choose(self) -> tuple[Candidate, EvalResult | None, list[dict]]:
        """The kernel handed back, its final check, and the finalists. The `finalists` fastest kernels of the
        search are checked and timed once more, on the search shapes with fresh inputs and on the held-out
        shapes; the fastest on that re-measurement wins, and k0 (1.0 by definition) if none is faster or none
        passes. The largest of many noisy measurements leans high; a fresh one does not, and the held-out
        shapes play no part in the choice, so their figure stays unbiased."""
        ranked = sorted((c for c in self.candidates if c.valid), key=lambda c: (-c.speedup, c.id))
        if not self.config.held_out or ranked[0].id == 0:
            return ranked[0], None, []
        k0 = self.candidates[0]  # candidates are kept in id order
        checks = [(c, self._evaluate(c.id, c.source, which="held_out", shapes="all"))
                  for c in ranked[:max(1, self.config.finalists)] if c.id != 0]
        finalists = [{"candidate": c.id, "speedup": c.speedup, "outcome": r.outcome.value,
                      "confirmed_speedup": r.speedup if r.ok else None,
                      "held_out_speedup": r.held_out_speedup if r.ok else None,
                      "confirmed_call_speedup": r.call_speedup if r.ok else None} for c, r in checks]
        passed = [(objective_speedup(r, self.objective), -c.id, c, r) for c, r in checks
                  if r.ok and objective_speedup(r, self.objective)]
        if not passed:
            return k0, None, finalists
        speedup, _, chosen, check = max(passed, key=lambda x: x[:2])
        return (chosen, check, finalists) if speedup > 1.0 else (k0, None, finalists)

    def _finish(self, iterations: int, per_iteration: list[dict], stopped: str, seconds: float) -> Summary:
        best, held, finalists = self._choose()
        noise = self.k0_self_call_speedup if self.objective == Objective.CALL else self.k0_self_speedup
        info = self.evaluator.info(self.task)
        start = Start(self.task.module_source, info.entry, info.shapes)
        evaluate, stored = self._evaluate_handed_back(best)
        chosen = hand_back(best.source, best.result, held, evaluate, noise, starting=best.id == 0, start=start,
                           objective=self.objective)
        chosen.handback.evaluation = stored.get(chosen.source, "held_out" if chosen.check is not None else "")
        held = chosen.check
        checked = held is not None and held.ok
        unchecked = 1.0 if best.id == 0 else None  # k0 as the best is 1.0 by definition
        fractions = [s.sol_fraction for s in best.result.shapes if s.sol_fraction is not None and not s.held_out]
        large = [s.sol_fraction for s in best.result.shapes if s.sol_fraction is not None and not s.held_out
                 and (s.moved_bytes or 0) >= sol.LARGE_BYTES]
        against = held if checked else best.result
        summary = Summary(run_id=self.run_id, task=self.task.ref, policy=self.policy.name,
                          proposer=self.proposer.name, seed=self.seed, iterations=iterations,
                          evaluations=self.evaluations, best_candidate=best.id, best_speedup=best.result.speedup,
                          best_outcome=(held.outcome.value if held is not None else best.result.outcome.value),
                          held_out_speedup=held.held_out_speedup if checked else unchecked,
                          best_sol_fraction=statistics.median(fractions) if fractions else None,
                          k0_self_speedup=self.k0_self_speedup, tokens=self.tokens,
                          confirmed_speedup=held.speedup if checked else unchecked,
                          pool_size=sum(c.valid for c in self.candidates), stopped=stopped,
                          device=best.result.device, interpreter=best.result.interpreter,
                          per_iteration=[{k: v for k, v in row.items() if k != "arms"} for row in per_iteration],
                          finalists=finalists, best_vs_eager=against.speedup_vs_eager,
                          best_vs_compile=against.speedup_vs_compile, vs_eager_skipped=against.vs_eager_skipped,
                          vs_compile_skipped=against.vs_compile_skipped,
                          best_sol_large=statistics.median(large) if large else None,
                          handback=chosen.handback.to_dict(), proposals=dict(self.proposals),
                          objective=self.objective.value, best_call_speedup=best.result.call_speedup,
                          confirmed_call_speedup=held.call_speedup if checked else unchecked,
                          held_out_call_speedup=held.held_out_call_speedup if checked else unchecked,
                          k0_self_call_speedup=self.k0_self_call_speedup,
                          held_out_slower=held_out_slower(held if checked else None, noise, self.objective))
        if self.out_dir is not None:
            summary.best_path, summary.diff_path = write_files(self.out_dir / f"run-{self.run_id}", chosen,
                                                               self.task.module_source, self.task.name)
        self.store.finish_run(self.run_id, "done", summary.to_dict(), handed_back=chosen.source)
        self.on_event({"kind": "done", "seconds": seconds, **summary.to_dict()})
        return summary

    def _evaluate_handed_back(self, best: Candidate) -> tuple[Callable[[str], EvalResult], dict[str, str]]:
        """Evaluates a module that may be handed back for `best` (its rewritten forms, handback.py) on the search
        and held-out shapes, in a fresh worker like any candidate; stored beside the candidate's own evaluations,
        the first as "handed_back", a second as "handed_back_2". With it, where each source's evaluation is
        stored."""
        stored: dict[str, str] = {}

        def evaluate(source: str) -> EvalResult:
            stored[source] = "handed_back" if not stored else f"handed_back_{len(stored) + 1}"
            return self._evaluate(best.id, source, which=stored[source], shapes="all")

        return evaluate, stored


def profiled(result: EvalResult) -> bool:
    """False for an evaluation that skipped Nsight Compute by choice (`Evaluator.evaluate(profile=False)`)."""
    return not result.ncu_skipped


def _done(value) -> Future:
    future: Future = Future()
    future.set_result(value)
    return future
