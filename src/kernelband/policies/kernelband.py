"""The two KernelBand policies: `kernelband` (the paper's Algorithm 1: hierarchical UCB over runtime clusters x
strategies, plus a learned hardware-compatibility prior psi) and `kernelband-masked` (the authors' released
variant: UCB with c = 2, strategies masked when their target resource is saturated, parent sampled by softmax
over headroom), with the parts they share."""

from __future__ import annotations

import contextlib
import functools
import math
import threading
import zlib
from collections import Counter, defaultdict, deque
from collections.abc import Callable, Iterable
from dataclasses import dataclass

import numpy as np
from sklearn.cluster import KMeans
from sklearn.impute import SimpleImputer
from sklearn.linear_model import SGDClassifier
from sklearn.metrics import pairwise_distances_argmin
from sklearn.pipeline import make_pipeline
from sklearn.preprocessing import MinMaxScaler, StandardScaler
from threadpoolctl import ThreadpoolController

from kernelband.evaluation.records import PHI_KEYS, RHO_KEYS
from kernelband.policies.base import Applicable, Arms, PolicyBase, by_time, num
from kernelband.search.core import Arm, Candidate, Strategy, reward

# The phi counter (percent, 0-100) that says how busy the resource a strategy targets is. The release
# uses L2 *throughput* for "L2"; our phi has no such counter, so the L2 hit rate stands in for it (a high
# hit rate means locality is already good: little left for an L2-oriented rewrite to win).
TARGET_COUNTER = {"SM": "sm_throughput_pct", "DRAM": "dram_bw_pct", "L2": "l2_hit_rate"}

# Passes over the carried examples when psi warm-starts: a run's own examples get one pass per pull (about
# 40 passes over a growing buffer in a run of 10 x 4), so one pass would leave the carried ones underweighted.
WARM_EPOCHS = 5


# -- small helpers ----------------------------------------------------------------------------------------

def _matrix(rows: Iterable[dict], keys: tuple[str, ...]) -> np.ndarray:
    """Feature dicts as a float matrix; None (not measured) becomes NaN."""
    return np.array([[np.nan if row.get(k) is None else float(row[k]) for k in keys] for row in rows],
                    dtype=float).reshape(-1, len(keys))


def _stable_seed(*parts) -> int:
    return zlib.crc32(repr(parts).encode()) & 0x7FFFFFFF


_THREADS = threading.RLock()


@functools.cache
def _controller() -> ThreadpoolController:
    return ThreadpoolController()  # finds the OpenMP and BLAS libraries once (about 0.7 ms each time)


@contextlib.contextmanager
def one_thread():
    """scikit-learn's and numpy's OpenMP and BLAS pools held to one thread. On pools this small the work is
    faster in one thread, and its result cannot depend on the thread count. Left to themselves, the pools
    start a thread per core for every call: on a 64-core host busy with a sweep, KernelBand's select + update
    at a pool of 320 took a median 48 ms (BENCHMARKS.md, "The bandit's own overhead per iteration") against 4.3 ms in one thread. The limit is
    process-wide, so the policies of concurrent searches take it in turn (the work holds the GIL anyway)."""
    with _THREADS, _controller().limit(limits=1):
        yield


def _one_thread(method):
    @functools.wraps(method)
    def wrapper(*args, **kwargs):
        with one_thread():
            return method(*args, **kwargs)
    return wrapper



# -- the parts of KernelBand ------------------------------------------------------------------------------

class RuntimeClusters:
    """Runtime-behaviour clusters of the candidate pool on rho(k) (paper section 4.3).

    When: a refresh happens on the first call, when `every` rounds (select calls) have passed since the
    last one, when the pool has at least doubled since the last one (`on_doubling`), or when the pool
    first reaches `min_pool` candidates. Below `min_pool` everything is one cluster. Between refreshes a
    new candidate joins the cluster of the nearest centroid (Euclidean, in the z-space of the last refresh).

    A refresh, exactly:
      1. X = rho of every pool candidate (RHO_KEYS). A value that is None takes its column's mean over the
         pool, 0 when nobody measured it; each column is then z-normalised over the pool (sklearn
         SimpleImputer + StandardScaler; a constant column becomes 0).
      2. K = min(k, number of distinct rows of X); K = 1 puts every candidate in cluster 0.
      3. Seeding: draw a random subsample of ceil(10 % of the pool) rows, at least K, and keep drawing rows
         (in the same random order) until it holds K distinct rows. KMeans(K, init="k-means++", n_init=1,
         random_state=r) fitted on the subsample gives the K initial centroids.
      4. KMeans(K, init=those centroids, n_init=1) runs Lloyd's iterations on the whole pool: the final
         centroids and every candidate's cluster.
      5. Clusters are renumbered in order of their smallest candidate id (k0's cluster is 0).
    The subsample and r come from the policy's seeded generator, so a replay refits identically.
    """

    def __init__(self, rng: np.random.Generator, k: int = 3, every: int = 10, on_doubling: bool = True,
                 min_pool: int = 1, subsample: float = 0.1):
        self.rng, self.k, self.every, self.on_doubling = rng, k, every, on_doubling
        self.min_pool, self.subsample = min_pool, subsample
        self.labels: dict[int, int] = {}
        self.z: dict[int, np.ndarray] = {}
        self.centroids: np.ndarray | None = None
        self._scaler = None
        self._last_round = 0
        self._last_size = 0
        self.refreshes = 0

    @property
    def count(self) -> int:
        return 0 if self.centroids is None else len(self.centroids)

    def observe(self, pool: list[Candidate], round_: int) -> bool:
        """Refreshes when due, else assigns new candidates; True when the clusters were refit."""
        size = len(pool)
        due = (self.centroids is None or round_ - self._last_round >= self.every
               or (self.on_doubling and size >= 2 * self._last_size)
               or (self._last_size < self.min_pool <= size))
        if due:
            self._fit(pool, self.k if size >= self.min_pool else 1)
            self._last_round, self._last_size = round_, size
            self.refreshes += 1
            return True
        for cand in pool:
            self.label(cand)
        return False

    def label(self, cand: Candidate) -> int:
        """The candidate's cluster, assigning it to the nearest centroid if it is new."""
        if cand.id not in self.labels:
            if self.centroids is None:
                return 0
            z = self._transform([cand])
            self.z[cand.id] = z[0]
            self.labels[cand.id] = int(pairwise_distances_argmin(z, self.centroids)[0])
        return self.labels[cand.id]

    def representative(self, cluster: int, members: list[Candidate]) -> Candidate:
        """The member closest to the cluster's centroid (ties: smallest id)."""
        centroid = self.centroids[cluster]
        return min(members, key=lambda c: (float(np.linalg.norm(self.z[c.id] - centroid)), c.id))

    def _transform(self, cands: list[Candidate]) -> np.ndarray:
        return self._scaler.transform(_matrix([c.rho for c in cands], RHO_KEYS))

    def _fit(self, pool: list[Candidate], k_max: int) -> None:
        pool = sorted(pool, key=lambda c: c.id)
        x = _matrix([c.rho for c in pool], RHO_KEYS)
        self._scaler = make_pipeline(SimpleImputer(strategy="mean", keep_empty_features=True),
                                     StandardScaler()).fit(x)
        z = self._scaler.transform(x)
        k = min(k_max, len(np.unique(z, axis=0)))
        if k <= 1:
            centroids, labels = z.mean(axis=0, keepdims=True), np.zeros(len(pool), dtype=int)
        else:
            state = int(self.rng.integers(2**31 - 1))
            seeds = z[self._subsample(z, k)]
            with one_thread():  # also where _fit is reached other than through select
                init = KMeans(n_clusters=k, init="k-means++", n_init=1, random_state=state).fit(seeds)
                km = KMeans(n_clusters=k, init=init.cluster_centers_, n_init=1, random_state=state).fit(z)
            centroids, labels = km.cluster_centers_, km.labels_
        order = sorted(set(labels.tolist()), key=lambda lab: min(c.id for c, b in zip(pool, labels) if b == lab))
        renumber = {old: new for new, old in enumerate(order)}
        self.centroids = centroids[order]
        self.labels = {c.id: renumber[int(b)] for c, b in zip(pool, labels)}
        self.z = {c.id: z[i] for i, c in enumerate(pool)}

    def _subsample(self, z: np.ndarray, k: int) -> list[int]:
        order = self.rng.permutation(len(z))
        size = max(k, math.ceil(self.subsample * len(z)))
        take = [int(i) for i in order[:size]]
        distinct = {z[i].tobytes() for i in take}
        for i in order[size:]:
            if len(distinct) >= k:
                break
            if z[i].tobytes() not in distinct:
                take.append(int(i))
                distinct.add(z[i].tobytes())
        return take


class ClusterStats:
    """Empirical mean reward and pull count per (cluster, strategy), with optional pseudo-observations
    (`prior_n` pulls of reward `prior_mean`). Rebuilt from the per-pull history whenever the clusters
    are refit, each pull counted in its parent's new cluster, so nothing is lost."""

    def __init__(self, prior_mean: float = 0.0, prior_n: float = 0.0):
        self.prior_mean, self.prior_n = prior_mean, prior_n
        self.prior_by_strategy: dict[str, float] = {}  # a strategy's own prior mean (knowledge carried)
        self._sum: dict[tuple[int, str], float] = defaultdict(float)
        self._n: dict[tuple[int, str], int] = defaultdict(int)

    def add(self, cluster: int, strategy: str, r: float) -> None:
        self._sum[cluster, strategy] += r
        self._n[cluster, strategy] += 1

    def n(self, cluster: int, strategy: str) -> float:
        return self.prior_n + self._n.get((cluster, strategy), 0)

    def mean(self, cluster: int, strategy: str) -> float:
        n = self.n(cluster, strategy)
        prior = self.prior_by_strategy.get(strategy, self.prior_mean)
        total = prior * self.prior_n + self._sum.get((cluster, strategy), 0.0)
        return total / n if n > 0 else 0.0

    def rebuild(self, history: list[tuple[int, str, float]], cluster_of: Callable[[int], int]) -> None:
        self._sum.clear()
        self._n.clear()
        for parent, strategy, r in history:
            self.add(cluster_of(parent), strategy, r)

    def table(self, clusters: int, strategies: list[str]) -> dict:
        return {str(c): {s: {"mu": num(self.mean(c, s)), "n": self.n(c, s)} for s in strategies}
                for c in range(clusters)}


class PhiScaler:
    """phi(k) min-max normalised to [0, 1] over the current pool (paper eq. 6); an unmeasured counter
    (None) reads 0.5. Values outside the pool's range are clipped."""

    def __init__(self):
        self._scaler: MinMaxScaler | None = None
        self._empty: np.ndarray | None = None

    def fit(self, cands: list[Candidate], extra: np.ndarray | None = None) -> PhiScaler:
        """Over the pool, and the `extra` phi rows (knowledge carried from other kernels) with it: a pool of one
        kernel has no range of its own, and the carried examples must be read on the scale they span."""
        x = _matrix([c.phi for c in cands], PHI_KEYS)
        if extra is not None and len(extra):
            x = np.vstack([x, extra])
        return self.fit_rows(x)

    def fit_rows(self, x: np.ndarray) -> PhiScaler:
        self._empty = np.isnan(x).all(axis=0)
        self._scaler = MinMaxScaler(clip=True).fit(self._fill_empty(x))
        return self

    @property
    def fitted(self) -> bool:
        return self._scaler is not None

    def raw(self, cand: Candidate) -> np.ndarray:
        return _matrix([cand.phi], PHI_KEYS)[0]

    def transform(self, x: np.ndarray) -> np.ndarray:
        out = self._scaler.transform(self._fill_empty(x))
        out[np.isnan(x)] = 0.5
        return out

    def _fill_empty(self, x: np.ndarray) -> np.ndarray:
        x = x.copy()
        x[:, self._empty] = 0.0  # no data at all for this counter: a constant column
        return x


class CompatibilityHead:
    """psi(s, phi) = sigmoid(w.phi + b) for one strategy s: the probability that applying s to a kernel
    with profile phi gives a positive reward (paper section 4.2).

    An SGDClassifier(loss="log_loss", learning_rate="constant", eta0=0.1, alpha=1e-4) learns online from a
    buffer of the last `capacity` (phi, success) examples (success = reward > 0): after every pull the new
    example joins the buffer and one epoch of partial_fit runs over the whole buffer, re-normalised with
    the current pool's min-max scaling (so old examples follow the pool's scale as it moves).

    Warm start: until its first example the head answers exactly 0.5 = sigmoid(0); the first partial_fit
    declares both classes, so the weights start from w = 0, b = 0 (sklearn's initialisation) and psi is
    about 0.5 on kernels unlike anything seen. (The paper pre-trains on 1000 synthetic pairs to the same
    end; we have no synthetic pairs, and zero weights give the same neutral prior.)
    """

    def __init__(self, random_state: int, capacity: int = 500, eta0: float = 0.1, l2: float = 1e-4):
        self.buffer: deque[tuple[np.ndarray, int]] = deque(maxlen=capacity)
        self.model = SGDClassifier(loss="log_loss", learning_rate="constant", eta0=eta0, alpha=l2,
                                   random_state=random_state)
        self.trained = False

    def learn(self, phi_raw: np.ndarray, success: bool, scaler: PhiScaler) -> None:
        self.buffer.append((phi_raw, int(success)))
        x = scaler.transform(np.array([p for p, _ in self.buffer]))
        y = np.array([label for _, label in self.buffer])
        self.model.partial_fit(x, y, classes=np.array([0, 1]))
        self.trained = True

    def fit_buffer(self, scaler: PhiScaler, epochs: int) -> None:
        """`epochs` passes of partial_fit over the buffer as it is: the warm start from carried examples."""
        if not self.buffer:
            return
        x = scaler.transform(np.array([p for p, _ in self.buffer]))
        y = np.array([label for _, label in self.buffer])
        for _ in range(epochs):
            self.model.partial_fit(x, y, classes=np.array([0, 1]))
        self.trained = True

    def predict(self, x_norm: np.ndarray) -> np.ndarray:
        if not self.trained:
            return np.full(len(x_norm), 0.5)
        return self.model.predict_proba(x_norm)[:, 1]


@dataclass
class _Option:
    """One (cluster, strategy) pair as scored in one pick, with the parent it would expand."""

    cluster: int
    strategy: str
    index: int
    parent: Candidate
    mu: float
    n: float
    bonus: float  # inf when n == 0
    psi: float
    score: float  # the finite part: mu + bonus (if finite) + alpha * psi

    def key(self) -> tuple:
        """Smallest is best: unpulled pairs first (infinite bonus), then the score, fewer pulls, a parent
        that compiles faster, then cluster and strategy order."""
        return (0 if math.isinf(self.bonus) else 1, -round(self.score, 12), self.n,
                self.parent.compile_seconds, self.cluster, self.index)

    def to_dict(self) -> dict:
        return {"cluster": self.cluster, "strategy": self.strategy, "parent": self.parent.id,
                "mu": num(self.mu), "n": self.n, "bonus": num(self.bonus), "psi": num(self.psi),
                "score": None if math.isinf(self.bonus) else num(self.score)}


# -- the policies -----------------------------------------------------------------------------------------

class _ClusteredPolicy(PolicyBase):
    """What both KernelBand variants share: runtime clusters, (cluster, strategy) statistics and the per-pull
    history they are rebuilt from. Both read φ: the ψ heads, the saturation mask, and achieved occupancy
    in ρ."""

    uses_profile = True

    def __init__(self, seed: int, clusters_options: dict, prior_mean: float = 0.0, prior_n: float = 0.0):
        super().__init__(seed)
        self.clusters = RuntimeClusters(self.rng, **clusters_options)
        self.table = ClusterStats(prior_mean, prior_n)
        self.history: list[tuple[int, str, float]] = []  # (parent id, strategy, reward) per pull
        self._strategy_names: list[str] = []

    def _start(self, pool: list[Candidate], strategies: list[Strategy]) -> dict[int, list[Candidate]]:
        """Observes the pool, refits or extends the clusters; the members of each cluster, fastest first."""
        self._observe(pool)
        self._strategy_names = [s.name for s in strategies]
        if self.clusters.observe(pool, self.rounds):
            self.table.rebuild(self.history, self._cluster_of)
        members: dict[int, list[Candidate]] = defaultdict(list)
        for cand in by_time(pool):
            members[self.clusters.label(cand)].append(cand)
        return members

    @_one_thread
    def update(self, arm: Arm, parent: Candidate, child: Candidate | None) -> float:
        return super().update(arm, parent, child)

    def _cluster_of(self, cid: int) -> int:
        cand = self.candidates.get(cid)
        return self.clusters.label(cand) if cand is not None else self.clusters.labels.get(cid, 0)

    def _learn(self, arm: Arm, parent: Candidate, child: Candidate | None, r: float) -> None:
        self.history.append((parent.id, arm.strategy, r))
        self.table.add(self._cluster_of(parent.id), arm.strategy, r)

    def stats(self) -> dict:
        return {**super().stats(),
                "clusters": {str(cid): c for cid, c in sorted(self.clusters.labels.items())},
                "refreshes": self.clusters.refreshes,
                "table": self.table.table(max(self.clusters.count, 1), self._strategy_names)}


class KernelBandPolicy(_ClusteredPolicy):
    """The paper's Algorithm 1: hierarchical UCB over (runtime cluster, strategy) with a hardware prior.

    Each select():
      1. the pool (k0 first, then every valid child) is clustered on rho (see RuntimeClusters); when the
         clusters are refit, the (cluster, strategy) statistics are rebuilt from the pull history;
      2. phi is min-max normalised over the pool and every strategy's logistic head gives psi;
      3. every (cluster c, strategy s) pair gets a parent: the fastest candidate of c whose arm (candidate,
         s) is applicable and not already picked in this batch (pairs without one are skipped), and the
         score  mu_hat(c, s) + sqrt(2 ln t / n(c, s)) + alpha * psi(s, phi(parent)),  alpha = 0.5, t = pulls
         so far + 1. psi is taken at that parent, the kernel the arm would actually expand (the paper's
         argmax over kernels uses psi(s, phi(k)) of the kernel k it picks);
      4. warm-up: a pair with n = 0 scores +infinity, so every pair with an applicable arm is pulled once
         before any pair is pulled twice; among such pairs the finite part mu_hat + alpha*psi decides
         (mu_hat = 0). Ties: fewer pulls, then the parent's shorter compile time, then cluster and strategy
         order;
      5. batch rule: the q arms are picked greedily, one at a time, by score. After each pick the chosen
         pair gets a virtual pull: n(c, s) += 1 and t += 1 with mu_hat unchanged (the hallucinated
         observation equals the current mean: "kriging believer" / UCB with a hallucinated observation).
         Its exploration bonus shrinks, so the next pick goes to another pair unless this one still
         leads, in which case it expands the next-fastest parent of the same cluster. Arms are distinct.

    update(): r = 1 - T_child/T_parent, -1 on failure (core.reward), added to the parent's cluster and
    strategy; (phi(parent), r > 0) trains the strategy's head. Valid children join the pool through the
    loop and are seen at the next select().
    """

    name = "kernelband"

    def __init__(self, seed: int, k: int = 3, alpha: float = 0.5, refresh_every: int = 10,
                 subsample: float = 0.1, buffer: int = 500, eta0: float = 0.1, l2: float = 1e-4):
        super().__init__(seed, {"k": k, "every": refresh_every, "subsample": subsample})
        self.alpha = alpha
        self.phi = PhiScaler()
        self.heads: dict[str, CompatibilityHead] = {}
        self._head_options = {"capacity": buffer, "eta0": eta0, "l2": l2}
        self._carried: np.ndarray | None = None  # phi rows carried from other kernels (warm_start)
        self._to_warm: set[str] = set()  # heads with carried examples, trained at the first select

    def warm_start(self, examples: list[tuple[str, dict | None, float]], epochs: int = WARM_EPOCHS) -> None:
        """Knowledge carried from other kernels (knowledge.py): each (strategy, phi of the parent, reward)
        joins its strategy's head's buffer, and the heads are trained on them (`epochs` passes) at the first
        select, once phi's scale over the pool and the carried rows is known. psi then starts from what the
        earlier kernels taught instead of 0.5."""
        rows = []
        for strategy, phi, r in examples:
            if phi is None:  # measured without the profiler: no phi to learn psi from
                continue
            raw = _matrix([phi], PHI_KEYS)[0]
            self.head(strategy).buffer.append((raw, int(r > 0)))
            rows.append(raw)
            self._to_warm.add(strategy)
        self._carried = np.array(rows).reshape(-1, len(PHI_KEYS)) if rows else None
        self._warm_epochs = epochs

    def head(self, strategy: str) -> CompatibilityHead:
        if strategy not in self.heads:
            self.heads[strategy] = CompatibilityHead(_stable_seed(self.seed, strategy), **self._head_options)
        return self.heads[strategy]

    def psi(self, strategies: list[str], cands: list[Candidate]) -> dict[str, dict[int, float]]:
        """psi(s, phi(k)) per strategy and candidate id, phi normalised over the last pool seen."""
        x = self.phi.transform(np.array([self.phi.raw(c) for c in cands]).reshape(-1, len(PHI_KEYS)))
        ids = [c.id for c in cands]
        return {s: dict(zip(ids, self.head(s).predict(x).tolist())) for s in strategies}

    @_one_thread
    def select(self, pool: list[Candidate], strategies: list[Strategy], q: int,
               applicable: Applicable) -> list[Arm]:
        if not pool or not strategies or q <= 0:
            self._observe(pool)
            return []
        members = self._start(pool, strategies)
        self.phi.fit(pool, self._carried)
        for strategy in sorted(self._to_warm):
            self.head(strategy).fit_buffer(self.phi, self._warm_epochs)
        self._to_warm.clear()
        psi = self.psi(self._strategy_names, pool)

        arms, virtual = Arms(applicable), Counter()
        picks: list[_Option] = []
        first: list[_Option] = []
        for pick in range(q):
            t = self.pulls + pick + 1
            options = [opt for c in sorted(members) for i, s in enumerate(strategies)
                       if (opt := self._option(c, s, i, members[c], arms, virtual, psi, t)) is not None]
            if not options:
                break
            best = min(options, key=_Option.key)
            arms.take(Arm(best.parent.id, best.strategy))
            virtual[best.cluster, best.strategy] += 1
            picks.append(best)
            first = first or options
        self._last = self._snapshot(picks, first, psi)
        return arms.picked

    def _option(self, cluster: int, strategy: Strategy, index: int, members: list[Candidate], arms: Arms,
                virtual: Counter, psi: dict, t: int) -> _Option | None:
        parent = next((m for m in members if arms.open(m, strategy)), None)
        if parent is None:
            return None
        n = self.table.n(cluster, strategy.name) + virtual[cluster, strategy.name]
        mu = self.table.mean(cluster, strategy.name)
        bonus = math.sqrt(2 * math.log(t) / n) if n > 0 else math.inf
        p = psi[strategy.name][parent.id]
        score = mu + (0.0 if math.isinf(bonus) else bonus) + self.alpha * p
        return _Option(cluster, strategy.name, index, parent, mu, n, bonus, p, score)

    def _learn(self, arm: Arm, parent: Candidate, child: Candidate | None, r: float) -> None:
        super()._learn(arm, parent, child, r)
        if not self.phi.fitted:
            self.phi.fit([parent], self._carried)
        self.head(arm.strategy).learn(self.phi.raw(parent), r > 0, self.phi)

    def _snapshot(self, picks: list[_Option], first: list[_Option], psi: dict) -> dict:
        last_parent = picks[-1].parent.id if picks else None
        return {
            "last_parent": last_parent,
            "psi": ({s: num(v[last_parent]) for s, v in psi.items()} if last_parent is not None else {}),
            "picks": [p.to_dict() for p in picks],
            "scores": [o.to_dict() for o in first],
        }


class MaskedKernelBandPolicy(_ClusteredPolicy):
    """The authors' released variant (ICML 2026 code), mirrored:

    - UCB over (cluster, strategy): mu_hat + c * sqrt(ln t / n), c = 2, t = max(pulls so far, 1); every pair
      starts with one pseudo-pull of reward 0.5 (the release initialises mu_hat = 0.5, N = 1), so there is
      no separate warm-up;
    - masking: for each cluster, the representative member (closest to the centroid) is read; a strategy
      whose target resource (SM -> sm_throughput_pct, DRAM -> dram_bw_pct, L2 -> l2_hit_rate) is at or above
      `threshold` (0.75, i.e. 75 %) is masked in that cluster; a missing counter masks nothing; if every
      strategy is masked, the first one aimed at the least-utilised resource is unmasked again;
    - the parent inside the chosen cluster is sampled among the members that have the arm open, with
      probability proportional to exp(headroom / temperature), headroom = 1 - utilisation/100 of the
      strategy's target (missing: 1 - threshold, the release's neutral score); temperature 0.01 on this
      0-1 scale equals the release's 1.0 on its percent scale;
    - reward max(0, (T_parent - T_child) / T_parent), 0 on failure;
    - clusters as in KernelBandPolicy but only once the pool holds 2K kernels, refit every 10 rounds
      (no doubling rule), and statistics rebuilt from the pull history on refit;
    - batch mode: the same virtual-pull rule as `kernelband` (n += 1 with mu_hat unchanged after each pick).
    """

    name = "kernelband-masked"

    def __init__(self, seed: int, k: int = 3, c: float = 2.0, threshold: float = 0.75,
                 temperature: float = 0.01, refresh_every: int = 10, subsample: float = 0.1):
        super().__init__(seed, {"k": k, "every": refresh_every, "on_doubling": False, "min_pool": 2 * k,
                                "subsample": subsample}, prior_mean=0.5, prior_n=1.0)
        self.c, self.threshold, self.temperature = c, threshold, temperature

    def warm_start(self, examples: list[tuple[str, dict | None, float]]) -> None:
        """Knowledge carried from other kernels (knowledge.py): a strategy's pseudo-pull, which the release
        sets to 0.5 everywhere, takes the strategy's mean reward over the carried examples instead."""
        rewards: dict[str, list[float]] = defaultdict(list)
        for strategy, _, r in examples:
            rewards[strategy].append(max(0.0, r))
        self.table.prior_by_strategy = {s: float(np.mean(v)) for s, v in rewards.items()}

    def reward(self, parent: Candidate, child: Candidate | None) -> float:
        return max(0.0, reward(parent, child))

    def utilisation(self, cand: Candidate, strategy: Strategy) -> float | None:
        counter = TARGET_COUNTER.get(strategy.target.upper())
        value = cand.phi.get(counter) if counter else None
        return None if value is None else float(value)

    def masked(self, representative: Candidate, strategies: list[Strategy]) -> set[str]:
        limit = 100.0 * self.threshold
        util = {s.name: self.utilisation(representative, s) for s in strategies}
        out = {name for name, u in util.items() if u is not None and u >= limit}
        if strategies and len(out) == len(strategies):
            least = min(strategies, key=lambda s: util[s.name])
            out.discard(least.name)
        return out

    @_one_thread
    def select(self, pool: list[Candidate], strategies: list[Strategy], q: int,
               applicable: Applicable) -> list[Arm]:
        if not pool or not strategies or q <= 0:
            self._observe(pool)
            return []
        members = self._start(pool, strategies)
        masks = {c: self.masked(self.clusters.representative(c, m), strategies) for c, m in members.items()}

        arms, virtual, picks = Arms(applicable), Counter(), []
        for pick in range(q):
            t = max(self.pulls + pick, 1)
            best = None
            for c in sorted(members):
                for i, s in enumerate(strategies):
                    if s.name in masks[c] or not any(arms.open(m, s) for m in members[c]):
                        continue
                    n = self.table.n(c, s.name) + virtual[c, s.name]
                    score = self.table.mean(c, s.name) + self.c * math.sqrt(math.log(t) / n)
                    key = (-round(score, 12), c, i)
                    if best is None or key < best[0]:
                        best = (key, c, s, score)
            if best is None:
                break
            _, c, s, score = best
            parent = self._sample([m for m in members[c] if arms.open(m, s)], s)
            arms.take(Arm(parent.id, s.name))
            virtual[c, s.name] += 1
            picks.append({"cluster": c, "strategy": s.name, "parent": parent.id, "score": num(score)})
        self._last = {
            "masked": {str(c): sorted(m) for c, m in masks.items()},
            "picks": picks,
        }
        return arms.picked

    def _sample(self, members: list[Candidate], strategy: Strategy) -> Candidate:
        """Softmax over the headroom of the strategy's target resource, with the seeded generator."""
        headroom = np.array([1.0 - u / 100.0 if (u := self.utilisation(m, strategy)) is not None
                             else 1.0 - self.threshold for m in members])
        logits = headroom / max(self.temperature, 1e-9)
        p = np.exp(logits - logits.max())
        return members[int(self.rng.choice(len(members), p=p / p.sum()))]
