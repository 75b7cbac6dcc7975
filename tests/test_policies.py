"""Policies on synthetic reward models: no GPU, no evaluator, fake EvalResults with speedup and features."""

from __future__ import annotations

import json
from types import SimpleNamespace

import numpy as np
import pytest

from kernelband.errors import UserError
from kernelband.evaluation.records import PHI_KEYS, RHO_KEYS, EvalResult, Features, Outcome
from kernelband.policies.base import POLICIES, make_policy
from kernelband.search.core import Arm, Candidate, Strategy

STRATEGIES = [Strategy("tile", "tile for L2 reuse", "L2"), Strategy("vec", "vectorise memory access", "DRAM"),
              Strategy("pipe", "pipeline to hide latency", "SM")]
NAMES = [s.name for s in STRATEGIES]
# Expected reward of strategy s on a kernel of group g: each group has its own best strategy.
MEANS = np.array([[0.3, -0.2, -0.2],
                  [-0.2, 0.15, -0.2],
                  [-0.2, -0.2, 0.0]])


def always(cand: Candidate, strategy: Strategy) -> bool:
    return True


def make_candidate(cid: int, time: float = 1.0, rho: dict | None = None, phi: dict | None = None,
                   parent: int | None = None, compile_s: float = 0.0, outcome: Outcome = Outcome.OK,
                   detail: str = "", error: str = "") -> Candidate:
    ok = outcome == Outcome.OK
    result = EvalResult(task="synthetic", outcome=outcome, detail=detail, error=error,
                        speedup=1.0 / time if ok else None,
                        features=Features(rho={k: (rho or {}).get(k) for k in RHO_KEYS},
                                          phi={k: (phi or {}).get(k) for k in PHI_KEYS}),
                        seconds={"compile": compile_s})
    return Candidate(cid, f"# kernel {cid}", parent=parent, result=result)


class ClusterBandit:
    """Three groups of kernels with distinct rho (and phi); the reward of (kernel, strategy) is Gaussian
    around MEANS[group, strategy]. The pool is fixed: children are scored but do not join it."""

    def __init__(self, seed: int, per_group: int = 4, noise: float = 0.1):
        self.rng = np.random.default_rng(1000 + seed)
        self.noise = noise
        self.pool: list[Candidate] = []
        self.group: dict[int, int] = {}
        for g in range(3):
            for _ in range(per_group):
                cid = len(self.pool)
                rho = {"log_time": 2.0 * g + self.rng.normal(0, 0.1),
                       "log_memory_footprint": 10 - 3 * g + self.rng.normal(0, 0.1),
                       "arithmetic_intensity": [0.25, 4.0, 16.0][g] * (1 + self.rng.normal(0, 0.05)),
                       "block_dim_x": 128.0, "block_dim_y": 1.0, "achieved_occupancy": 0.5}
                phi = {"dram_bw_pct": [20, 60, 40][g] + self.rng.normal(0, 3), "sm_throughput_pct": [30, 20, 50][g]}
                self.pool.append(make_candidate(cid, 1.0, rho, phi, compile_s=1.0))
                self.group[cid] = g
        self.next_id = 1000

    def mean(self, arm: Arm) -> float:
        return float(MEANS[self.group[arm.candidate], NAMES.index(arm.strategy)])

    def pull(self, arm: Arm) -> tuple[Candidate, Candidate]:
        parent = self.pool[arm.candidate]
        r = self.mean(arm) + self.rng.normal(0, self.noise)
        self.next_id += 1
        return parent, make_candidate(self.next_id, parent.time * (1 - r), parent=parent.id)


def fake_moves(cand: Candidate, strategy: Strategy) -> list[str]:
    """Two fields per strategy, each with its two steps, on every kernel: the moves `coordinate` walks."""
    return [f"{strategy.name}.{field} {step}" for field in ("a", "b") for step in ("x2", "/2")]


def new_policy(name: str, seed: int):
    """A policy by name; `coordinate` walks fake_moves, since the synthetic kernels have no source to rewrite."""
    return make_policy(name, seed, moves=fake_moves) if name == "coordinate" else make_policy(name, seed)


def play(policy, bandit: ClusterBandit, rounds: int, q: int = 1) -> tuple[list[Arm], np.ndarray]:
    """Runs the policy; returns the arms pulled and the regret of each pull."""
    arms, regret = [], []
    best = MEANS.max()
    for _ in range(rounds):
        picked = policy.select(bandit.pool, STRATEGIES, q, always)
        for arm in picked:
            parent, child = bandit.pull(arm)
            policy.update(arm, parent, child)
            arms.append(arm)
            regret.append(best - bandit.mean(arm))
    return arms, np.array(regret)


# -- make_policy --------------------------------------------------------------------------------------------

def test_make_policy_knows_every_name_and_rejects_others():
    assert set(POLICIES) == {"kernelband", "kernelband-masked", "beam", "bon", "random", "greedy", "coordinate"}
    for name in POLICIES:
        assert make_policy(name, 0).name == name
    with pytest.raises(UserError) as err:
        make_policy("ucb-deluxe", 0)
    message = str(err.value)
    assert "\n" not in message and all(name in message for name in POLICIES)
    with pytest.raises(UserError):
        make_policy("beam", 0, no_such_option=1)
    assert make_policy("beam", 0, width=5).width == 5


# -- kernelband -----------------------------------------------------------------------------------------------

def test_kernelband_clusters_the_groups_and_warms_up_every_pair_once():
    bandit = ClusterBandit(0)
    policy = make_policy("kernelband", 0)
    seen = []
    for _ in range(9):
        (arm,) = policy.select(bandit.pool, STRATEGIES, 1, always)
        clusters = policy.stats()["clusters"]
        seen.append((clusters[str(arm.candidate)], arm.strategy))
        policy.update(arm, *bandit.pull(arm))
    clusters = policy.stats()["clusters"]
    # the three groups are the three clusters
    assert len({clusters[str(c.id)] for c in bandit.pool}) == 3
    for g in range(3):
        assert len({clusters[str(cid)] for cid, grp in bandit.group.items() if grp == g}) == 1
    # 3 clusters x 3 strategies: each pair once before any repeat
    assert len(set(seen)) == 9
    table = policy.stats()["table"]
    assert all(cell["n"] == 1 for row in table.values() for cell in row.values())


@pytest.mark.parametrize("name", ["kernelband", "kernelband-masked"])
def test_clustered_policies_hold_the_thread_pools_to_one_thread(name, monkeypatch):
    """select and update run scikit-learn with one OpenMP/BLAS thread (a thread per core made them 10x slower
    on a busy 64-core host, BENCHMARKS.md run AG), and give the pools their threads back afterwards."""
    from threadpoolctl import ThreadpoolController, threadpool_limits

    from kernelband.policies import kernelband as policies
    controller = ThreadpoolController()
    seen: list[int] = []

    def threads() -> int:
        return max(p["num_threads"] for p in controller.info())

    def spy(original):
        def wrapped(*args, **kwargs):
            seen.append(threads())
            return original(*args, **kwargs)
        return wrapped

    monkeypatch.setattr(policies, "pairwise_distances_argmin", spy(policies.pairwise_distances_argmin))
    monkeypatch.setattr(policies.CompatibilityHead, "learn", spy(policies.CompatibilityHead.learn))
    monkeypatch.setattr(policies.ClusterStats, "add", spy(policies.ClusterStats.add))
    bandit = ClusterBandit(2)
    with threadpool_limits(limits=3):
        policy = make_policy(name, 2)
        for _ in range(12):
            (arm,) = policy.select(bandit.pool, STRATEGIES, 1, always)
            policy.update(arm, *bandit.pull(arm))
            cid = len(bandit.pool)  # a new kernel in the pool: labelled at the next select
            bandit.pool.append(make_candidate(cid, 0.9, bandit.pool[0].rho, bandit.pool[0].phi))
            bandit.group[cid] = bandit.group[0]
        assert threads() == 3  # given back
    assert seen and set(seen) == {1}


def test_kernelband_batch_warm_up_and_distinct_arms():
    bandit = ClusterBandit(1)
    policy = make_policy("kernelband", 1)
    arms = policy.select(bandit.pool, STRATEGIES, 9, always)
    clusters = policy.stats()["clusters"]
    assert len(set(arms)) == 9
    assert len({(clusters[str(a.candidate)], a.strategy) for a in arms}) == 9  # one virtual pull per pair
    more = policy.select(bandit.pool, STRATEGIES, 20, always)  # more than the pairs: same pairs, other parents
    assert len(more) == 20 and len(set(more)) == 20


def test_pool_of_k0_alone_and_the_parent_rule():
    k0 = make_candidate(0, 1.0, {"log_time": 0.0}, {"dram_bw_pct": 50.0}, compile_s=2.0)
    policy = make_policy("kernelband", 3)
    arms = policy.select([k0], STRATEGIES, 5, always)
    assert sorted(a.strategy for a in arms) == sorted(NAMES) and all(a.candidate == 0 for a in arms)
    # a faster candidate in the same cluster becomes the parent
    fast = make_candidate(1, 0.5, {"log_time": 0.0}, {"dram_bw_pct": 50.0}, parent=0)
    arms = policy.select([k0, fast], STRATEGIES, 1, always)
    assert arms[0].candidate == 1


def test_failure_reward_is_minus_one_and_speedup_reward_is_relative():
    policy = make_policy("kernelband", 0)
    parent = make_candidate(0, 1.0)
    policy.select([parent], STRATEGIES, 1, always)
    assert policy.update(Arm(0, "tile"), parent, None) == -1.0
    broken = make_candidate(5, outcome=Outcome.COMPILE_ERROR)
    assert policy.update(Arm(0, "tile"), parent, broken) == -1.0
    assert policy.update(Arm(0, "vec"), parent, make_candidate(6, 0.8)) == pytest.approx(0.2)


def test_psi_learns_a_planted_relation():
    """Strategy vec succeeds iff the parent's DRAM bandwidth counter is high."""
    rng = np.random.default_rng(7)
    pool = [make_candidate(i, 1.0, {"log_time": 0.0},
                           {"dram_bw_pct": float(d), "sm_throughput_pct": float(rng.uniform(10, 90)),
                            "l2_hit_rate": float(rng.uniform(10, 90))})
            for i, d in enumerate(np.linspace(5, 95, 10))]
    high, low = pool[-1], pool[0]
    policy = make_policy("kernelband", 0)
    policy.select(pool, STRATEGIES, 1, always)
    before = policy.psi(["vec"], [high, low])["vec"]
    assert before[high.id] == pytest.approx(0.5) and before[low.id] == pytest.approx(0.5)
    next_id = 100
    for step in range(60):
        parent = pool[int(rng.integers(len(pool)))]
        success = parent.phi["dram_bw_pct"] > 50
        next_id += 1
        child = make_candidate(next_id, 0.8 if success else 1.0, outcome=Outcome.OK if success else Outcome.WRONG_OUTPUT)
        policy.update(Arm(parent.id, "vec"), parent, child)
        if step % 10 == 0:
            policy.select(pool, STRATEGIES, 1, always)
    after = policy.psi(["vec", "tile"], [high, low])
    assert after["vec"][high.id] > 0.7 and after["vec"][low.id] < 0.3
    assert after["tile"][high.id] == pytest.approx(0.5)  # an untrained head stays neutral
    assert set(policy.stats()["psi"]) == set(NAMES)


def test_kernelband_regret_is_sublinear_and_beats_random():
    seeds, rounds = range(4), 200
    half = rounds // 2
    curves = {name: [] for name in ("kernelband", "random")}
    for name in curves:
        for seed in seeds:
            _, regret = play(make_policy(name, seed), ClusterBandit(seed), rounds)
            curves[name].append((regret[:half].sum(), regret[half:].sum()))
    kb = np.mean(curves["kernelband"], axis=0)
    rnd = np.mean(curves["random"], axis=0)
    assert kb[1] < 0.8 * kb[0], kb  # the second half costs clearly less than the first: sublinear
    assert rnd[1] > 0.85 * rnd[0], rnd  # random keeps paying the same: linear
    assert kb.sum() < 0.7 * rnd.sum(), (kb, rnd)


def test_kernelband_statistics_survive_reclustering():
    bandit = ClusterBandit(2)
    policy = make_policy("kernelband", 2, refresh_every=3)
    play(policy, bandit, 25)
    stats = policy.stats()
    assert stats["refreshes"] >= 8
    assert sum(cell["n"] for row in stats["table"].values() for cell in row.values()) == 25
    json.dumps(stats, allow_nan=False)
    assert {"clusters", "table", "psi", "scores", "picks"} <= set(stats)


# -- all policies ---------------------------------------------------------------------------------------------

@pytest.mark.parametrize("name", POLICIES)
def test_batch_select_returns_distinct_arms(name):
    bandit = ClusterBandit(3)
    policy = new_policy(name, 3)
    for _ in range(4):
        arms = policy.select(bandit.pool, STRATEGIES, 5, always)
        expected = 3 if name == "bon" else 5  # bon expands k0 only: one arm per strategy
        assert len(arms) == expected and len(set(arms)) == expected
        for arm in arms:
            policy.update(arm, *bandit.pull(arm))
        json.dumps(policy.stats(), allow_nan=False)


@pytest.mark.parametrize("name", POLICIES)
def test_same_seed_and_updates_give_the_same_arms(name):
    first, _ = play(new_policy(name, 11), ClusterBandit(4), 15, q=2)
    again, _ = play(new_policy(name, 11), ClusterBandit(4), 15, q=2)
    assert first == again


@pytest.mark.parametrize("name", POLICIES)
def test_inapplicable_arms_are_never_chosen(name):
    bandit = ClusterBandit(5)
    forbidden = {(c.id, s) for c in bandit.pool for s in NAMES if (c.id + NAMES.index(s)) % 2 == 0}
    forbidden.add((0, "tile"))

    def applicable(cand: Candidate, strategy: Strategy) -> bool:
        return (cand.id, strategy.name) not in forbidden

    policy = new_policy(name, 5)
    for _ in range(12):
        arms = policy.select(bandit.pool, STRATEGIES, 3, applicable)
        assert arms and not {(a.candidate, a.strategy) for a in arms} & forbidden
        for arm in arms:
            policy.update(arm, *bandit.pull(arm))
    assert policy.select(bandit.pool, STRATEGIES, 3, lambda c, s: False) == []


# -- kernelband-masked ------------------------------------------------------------------------------------

def test_masked_policy_masks_a_saturated_target():
    k0 = make_candidate(0, 1.0, {"log_time": 0.0}, {"dram_bw_pct": 90.0, "sm_throughput_pct": 30.0})
    policy = make_policy("kernelband-masked", 0)
    chosen = set()
    for i in range(12):
        (arm,) = policy.select([k0], STRATEGIES, 1, always)
        chosen.add(arm.strategy)
        policy.update(arm, k0, make_candidate(100 + i, 0.9))
    assert "vec" not in chosen and {"tile", "pipe"} <= chosen
    assert policy.stats()["masked"] == {"0": ["vec"]}
    # a counter that was not measured masks nothing
    unmeasured = make_candidate(0, 1.0, {"log_time": 0.0}, {})
    assert len(make_policy("kernelband-masked", 0).select([unmeasured], STRATEGIES, 3, always)) == 3
    # everything saturated: the least-saturated target stays available
    hot = make_candidate(0, 1.0, {}, {"dram_bw_pct": 95.0, "sm_throughput_pct": 80.0, "l2_hit_rate": 99.0})
    arms = make_policy("kernelband-masked", 0).select([hot], STRATEGIES, 3, always)
    assert [a.strategy for a in arms] == ["pipe"]


def test_masked_reward_and_headroom_sampling():
    policy = make_policy("kernelband-masked", 0)
    parent = make_candidate(0, 1.0)
    assert policy.reward(parent, None) == 0.0
    assert policy.reward(parent, make_candidate(1, 1.25)) == 0.0
    assert policy.reward(parent, make_candidate(2, 0.75)) == pytest.approx(0.25)
    # within one cluster (pool < 2K: a single cluster) the parent with DRAM headroom is preferred for vec
    busy = make_candidate(0, 1.0, {"log_time": 0.0}, {"dram_bw_pct": 70.0})
    idle = make_candidate(1, 1.0, {"log_time": 0.1}, {"dram_bw_pct": 10.0}, parent=0)
    only_vec = [STRATEGIES[1]]
    parents = [make_policy("kernelband-masked", seed).select([busy, idle], only_vec, 1, always)[0].candidate
               for seed in range(10)]
    assert parents.count(1) >= 9


# -- beam, bon, greedy ------------------------------------------------------------------------------------

def ladder() -> list[Candidate]:
    """k0 and five children with distinct times: ids 3, 5, 1 are the three fastest."""
    times = {0: 1.0, 1: 0.7, 2: 0.9, 3: 0.5, 4: 0.95, 5: 0.6}
    return [make_candidate(i, t, parent=None if i == 0 else 0) for i, t in times.items()]


def test_beam_keeps_the_best_and_reflects_on_failures():
    pool = ladder()
    policy = make_policy("beam", 0)
    arms = policy.select(pool, STRATEGIES, 3, always)
    assert [a.candidate for a in arms] == [3, 5, 1]
    assert policy.stats()["beam"] == [3, 5, 1]
    arms = policy.select(pool, STRATEGIES, 6, always)  # each member twice, strategies round-robin per member
    assert sorted(a.candidate for a in arms) == [1, 1, 3, 3, 5, 5]
    assert {a.strategy for a in arms if a.candidate == 3} == {"vec", "pipe"}
    assert policy.reflection(3) == ""
    failed = make_candidate(50, outcome=Outcome.COMPILE_ERROR, detail="the kernel did not compile",
                            error="Traceback ...\nCompilationError: BLOCK must be a power of two", parent=3)
    policy.update(Arm(3, "tile"), pool[3], failed)
    text = policy.reflection(3)
    assert "compile_error" in text and "power of two" in text and "tile" in text
    # the failure belongs to the lineage: a child of 3 sees it too; others do not
    grandchild = make_candidate(6, 0.4, parent=3)
    policy.select(pool + [grandchild], STRATEGIES, 1, always)
    assert "power of two" in policy.reflection(6)
    assert policy.reflection(5) == ""
    policy.update(Arm(5, "vec"), pool[5], make_candidate(51, 0.8, parent=5))
    assert "not faster" in policy.reflection(5)
    long = make_candidate(52, outcome=Outcome.RUNTIME_ERROR, error="x" * 10_000, parent=1)
    policy.update(Arm(1, "pipe"), pool[1], long)
    assert len(policy.reflection(1)) <= 1500


def test_bon_always_expands_k0():
    pool = ladder()
    policy = make_policy("bon", 4)
    strategies_seen = []
    for _ in range(6):
        arms = policy.select(pool, STRATEGIES, 2, always)
        assert all(a.candidate == 0 for a in arms)
        strategies_seen += [a.strategy for a in arms]
    assert set(strategies_seen) == set(NAMES)


def test_greedy_expands_the_best_round_robin():
    pool = ladder()
    policy = make_policy("greedy", 0)
    picked = [policy.select(pool, STRATEGIES, 1, always)[0] for _ in range(3)]
    assert all(a.candidate == 3 for a in picked) and [a.strategy for a in picked] == NAMES
    # a new best takes over; when it has fewer open arms than q, the next best fills in
    best = make_candidate(9, 0.2, parent=3)
    arms = policy.select(pool + [best], STRATEGIES, 2, lambda c, s: c.id != 9 or s.name == "vec")
    assert arms[0] == Arm(9, "vec") and arms[1].candidate == 3


# -- coordinate -------------------------------------------------------------------------------------------

FIELDS = {"BLOCK": (16, 4096), "num_warps": (1, 16)}  # range of each fake field


def descent_time(config: dict[str, int]) -> float:
    """A bowl with its floor at BLOCK = 512, num_warps = 4: the time each config of the fake kernel takes."""
    return 1.0 + sum(abs(np.log2(config[k]) - np.log2(best)) * 0.1 for k, best in (("BLOCK", 512), ("num_warps", 4)))


class Descent:
    """Fake kernels that are configs; each move is a field doubled or halved, its child timed by descent_time."""

    def __init__(self):
        self.configs = {0: {"BLOCK": 64, "num_warps": 1}}
        self.pool = [make_candidate(0, descent_time(self.configs[0]))]

    def moves(self, cand: Candidate, strategy: Strategy) -> list[str]:
        if strategy.name != "pipe":
            return []
        config = self.configs[cand.id]
        out = []
        for field, (low, high) in FIELDS.items():
            out += [f"{field} {step}" for step, value in (("x2", config[field] * 2), ("/2", config[field] // 2))
                    if low <= value <= high]
        return out

    def pull(self, arm: Arm) -> tuple[Candidate, Candidate]:
        field, step = arm.move.split()
        config = dict(self.configs[arm.candidate])
        config[field] = config[field] * 2 if step == "x2" else config[field] // 2
        cid = len(self.pool)
        self.configs[cid] = config
        child = make_candidate(cid, descent_time(config), parent=arm.candidate)
        self.pool.append(child)
        return self.pool[arm.candidate], child


def test_coordinate_descends_one_field_at_a_time_to_the_floor():
    world = Descent()
    policy = make_policy("coordinate", 0, moves=world.moves)
    pulled = []
    for _ in range(12):
        arms = policy.select(world.pool, STRATEGIES, 2, always)
        if not arms:
            break
        for arm in arms:
            assert arm.strategy == "pipe" and arm.move  # every arm names one move of a strategy that has moves
            pulled.append((arm.candidate, arm.move))
            policy.update(arm, *world.pull(arm))
    assert len(pulled) == len(set(pulled))  # a move is never tried twice on the same kernel
    assert world.configs[policy.current.id] == {"BLOCK": 512, "num_warps": 4}
    assert policy.current.time == min(c.time for c in world.pool)
    # The first batch is the first kernel's first two moves in order, the increase first.
    assert pulled[:2] == [(0, "BLOCK x2"), (0, "BLOCK /2")]


def test_coordinate_keeps_a_move_only_when_it_is_faster_by_the_threshold():
    from kernelband.policies.coordinate import IMPROVEMENT

    k0 = make_candidate(0, 1.0)
    policy = make_policy("coordinate", 0, moves=fake_moves)
    [arm] = policy.select([k0], STRATEGIES, 1, always)
    policy.update(arm, k0, make_candidate(1, 1.0 - IMPROVEMENT / 2, parent=0))  # within the noise: not kept
    assert policy.current.id == 0
    policy.update(arm, k0, make_candidate(2, 1.0, outcome=Outcome.WRONG_OUTPUT, parent=0))
    assert policy.current.id == 0
    faster = make_candidate(3, 0.9, parent=0)
    policy.update(arm, k0, faster)
    assert policy.current is faster and policy.stats()["moves_kept"] == 1


def test_coordinate_moves_to_the_next_fastest_kernel_when_the_current_one_has_no_move_left():
    pool = [make_candidate(0, 1.0), make_candidate(1, 0.8, parent=0), make_candidate(2, 0.9, parent=0)]
    policy = make_policy("coordinate", 0, moves=lambda c, s: [f"{s.name}.f x2"] if s.name == "tile" else [])
    assert policy.select(pool, STRATEGIES, 1, always) == [Arm(1, "tile", "tile.f x2")]
    assert policy.select(pool, STRATEGIES, 2, always) == [Arm(2, "tile", "tile.f x2"), Arm(0, "tile", "tile.f x2")]
    assert policy.select(pool, STRATEGIES, 2, always) == []  # every move tried: nothing left to pull


def test_coordinate_walks_the_rewriters_parameter_moves_of_a_real_kernel():
    from kernelband.proposers.rewriter.proposer import RewriterProposer
    from kernelband.search.core import Context
    from kernelband.search.strategies import builtin_strategies
    from kernelband.tasks import load_task

    task = load_task("examples:vector_add")
    k0 = make_candidate(0)
    k0.source = task.module_source
    strategies = builtin_strategies()
    proposer = RewriterProposer()
    policy = make_policy("coordinate", 0)
    arms = policy.select([k0], strategies, 4, proposer.applicable)
    assert [(arm.strategy, arm.move) for arm in arms] == [  # num_warps=1 at the launch: no /2
        ("tiling", "BLOCK_SIZE at the add_kernel launch in add x2"),
        ("tiling", "BLOCK_SIZE at the add_kernel launch in add /2"),
        ("pipeline", "num_warps at the add_kernel launch in add x2")]
    for arm in arms:
        strategy = next(s for s in strategies if s.name == arm.strategy)
        proposal = proposer.propose(k0, strategy, Context("vector_add", "add", seed=1, move=arm.move))
        assert proposal.source is not None and proposal.source != k0.source, proposal.error
        changed = [line for line in proposal.source.splitlines() if line not in k0.source.splitlines()]
        assert changed and len(changed) <= 2  # one field (the block size and the grid literal that follows it)


def test_the_loop_hands_the_move_to_the_proposer_and_retires_only_arms_without_one():
    from kernelband.proposers.base import ProposerBase
    from kernelband.search.core import Proposal
    from kernelband.search.loop import RunConfig, Search

    class Proposer(ProposerBase):
        def __init__(self):
            self.moves: list[str] = []

        def propose(self, parent, strategy, context):
            self.moves.append(context.move)
            return Proposal(source=None, error="nothing")

    class Store:
        def proposal(self, run_id, iteration, slot):
            return None

        def add_proposal(self, *args):
            pass

    class Evaluator:
        def info(self, task):
            return SimpleNamespace(entry="f", shapes=[])

    proposer = Proposer()
    search = Search(task=SimpleNamespace(name="t", description=""), evaluator=Evaluator(), proposer=proposer,
                    policy=make_policy("coordinate", 0), strategies=STRATEGIES, store=Store(), run_id=1, seed=0,
                    config=RunConfig())
    search.candidates = [make_candidate(0)]
    for arm in (Arm(0, "pipe", "num_warps at the k launch in f x2"), Arm(0, "tile")):
        write = search._propose(1, 0, arm)
        proposal, _ = write()
        search._learn(arm, proposal, search._admit(1, 0, arm, proposal, None), None)
    assert proposer.moves == ["num_warps at the k launch in f x2", ""]
    assert search.exhausted == {(0, "tile")}  # the arm with a move stays open for the policy's other moves
