"""How many evaluations, GPU-minutes and GPU sessions a plan of benches costs, before any GPU time is spent.

A plan is the held-out comparison of scripts/gpu/held_out_sweep.sh: a knowledge fill (one policy on the train
tasks), then per suite a test bench (the policies, knowledge carried) and a cold bench (the policies named by
--cold, with --knowledge off). The fill and the test benches share one database (their lane, `held`), the cold
benches another (`cold`):

    python3 tools/bench_plan.py --gpus 4                          # issue 51's plan on four GPUs
    python3 tools/bench_plan.py --suites tritonbench-g-l12,examples --gpus 4
    python3 tools/bench_plan.py --check docs/results/bench.db:3   # the reuse model against a committed bench

The reuse model. A bench evaluates a source once per task and GPU model (bench.py: the store's lookup and the
in-flight sharing), so what costs GPU time is the distinct sources of a task's runs, not the proposals. Over k
runs of one task that make m candidates each, the distinct sources grow as m * k**beta (Heaps' law): beta = 1
is no reuse, beta = 0 every run makes the same candidates. The default beta is fitted on bench 3 of
docs/results/bench.db (six policies, one seed, T = 10, q = 1, 29 tasks): 998 measured search evaluations of
1,728 candidates, k = 6, beta = 0.69 (`--check` prints it). A bench's evaluations are not reused by another
bench, so the fill, the test and the cold benches are counted apart. On top, each run re-measures its
finalists (held-out shapes) and the module it hands back, never reused: 3 + 1 rows a run in every finished
run of docs/results/reach/h200 (the current tree), at most finalists + 2. k0's golden baseline is measured
once per task and database.

The upper bound counts every proposal as a fresh evaluation (beta = 1, finalists + 2 rows a run).
"""

from __future__ import annotations

import argparse
import json
import math
import sqlite3
from dataclasses import asdict, dataclass
from pathlib import Path

from kernelband.errors import UserError, run_script

BETA = 0.69  # bench 3's fit (module docstring)
S_NCU = 8.6  # s an evaluation a GPU, Nsight Compute on, 2 runs in flight a GPU (docs/lab/runs.md, run AR)
NCU_S = 2.56  # s of GPU-alone time ncu's profiled run adds to an evaluation (docs/lab/runs.md, run AF)
HANDED_BACK = 1  # rows a run for the module handed back, as every finished reach run has


@dataclass(frozen=True)
class Part:
    """One `kernelband bench` of the plan."""

    name: str  # fill, test or cold (with the suite where there are several)
    lane: str  # the database it writes: held (fill and test, knowledge carried) or cold (knowledge off)
    suite: str
    split: str
    tasks: tuple[str, ...]
    policies: tuple[str, ...]
    seeds: int


@dataclass(frozen=True)
class Search:
    iterations: int
    q: int
    finalists: int
    beta: float


@dataclass(frozen=True)
class Rates:
    ncu_s: float  # s an evaluation a GPU for runs of a policy that reads phi (Nsight Compute on)
    plain_s: float  # for the others, which the evaluator does not profile (search/loop.py: `profile`)


@dataclass(frozen=True)
class Machine:
    gpus: int
    session_s: float  # device time a session, counted from the machine's start
    start_s: float  # the machine's start
    collect_s: float  # the last call's copy and xz packing of the databases (gpu_collect.sh's COLLECT_PACK_S)
    setup_s: float  # the tree's copy, wheels, calibration, workers and references before the first evaluation
    runs_per_gpu: int

    def usable_gpu_s(self, mean_s: float) -> float:
        """GPU-seconds of evaluations a session gives: its time less the overheads, and less the evaluation in
        flight on each run when the machine goes back (a resumed run does it again)."""
        per_gpu = self.session_s - self.start_s - self.collect_s - self.setup_s - self.runs_per_gpu * mean_s / 2
        if per_gpu <= 0:
            raise UserError(f"a {self.session_s / 60:g}-minute session leaves no time for evaluations after its "
                            "overheads: give a longer --session-min")
        return self.gpus * per_gpu


@dataclass
class Cost:
    part: str
    lane: str
    tasks: int
    runs: int
    upper: float  # evaluations
    expected: float
    gpu_s_upper: float
    gpu_s_expected: float


def profiled(policy: str) -> bool:
    """Whether the evaluator profiles the policy's candidates: it reads phi (with the built-in rewriter, which
    reads none)."""
    from kernelband.policies.base import policy_class

    return policy_class(policy).uses_profile


def policies_of(text: str) -> tuple[str, ...]:
    from kernelband.policies.base import POLICIES

    names = tuple(p.strip() for p in text.split(",") if p.strip())
    unknown = [p for p in names if p not in POLICIES]
    if unknown:
        raise UserError(f"unknown policies {', '.join(unknown)}: use {', '.join(POLICIES)}")
    return names


def tasks_of(suite: str, split: str) -> tuple[str, ...]:
    from kernelband.bench import suite_tasks
    from kernelband.tasks import split as splits

    return tuple(splits.select(suite_tasks(suite), split))


def plan(suites: list[str], policies: tuple[str, ...], cold: tuple[str, ...], fill: tuple[str, ...], seeds: int,
         fill_seeds: int) -> list[Part]:
    """The benches in the order held_out_sweep.sh runs them in each lane: the fill on every suite's train tasks
    (the built-in examples have none), then each suite's test bench; the cold benches in their own lane."""
    if not policies:
        raise UserError("--policies is empty: name the policies the test benches compare")
    several = len(suites) > 1
    parts: list[Part] = []
    for suite in suites:
        train = tasks_of(suite, "train")
        if fill and train:
            parts.append(Part(f"fill {suite}" if several else "fill", "held", suite, "train", train, fill, fill_seeds))
    for lane, names in (("held", policies), ("cold", cold)):
        for suite in suites if names else ():
            name = "test" if lane == "held" else "cold"
            parts.append(Part(f"{name} {suite}" if several else name, lane, suite, "test", tasks_of(suite, "test"),
                              names, seeds))
    return parts


def distinct(m: float, k: int, beta: float) -> float:
    """The distinct sources of k runs of one task that make m candidates each (Heaps' law)."""
    return m * k**beta if k else 0.0


def cost(part: Part, search: Search, rates: Rates, baselines: bool) -> Cost:
    """The part's evaluations and GPU-seconds, upper bound and expected. Its distinct sources are shared out to
    the policies by their runs, each at its policy's rate; k0's baseline (`baselines`: its database has none
    yet) is profiled, as the evaluator measures it."""
    m = search.iterations * search.q
    runs_per_task = len(part.policies) * part.seeds
    rate = {p: rates.ncu_s if profiled(p) else rates.plain_s for p in part.policies}
    mean_rate = sum(rate.values()) / len(rate)
    extra_upper, extra_expected = search.finalists + 2, search.finalists + HANDED_BACK
    per_task_upper = runs_per_task * (m + extra_upper)
    per_task_expected = distinct(m, runs_per_task, search.beta) + runs_per_task * extra_expected
    k0 = len(part.tasks) if baselines else 0
    upper = len(part.tasks) * per_task_upper + k0
    expected = len(part.tasks) * per_task_expected + k0
    return Cost(part.name, part.lane, len(part.tasks), len(part.tasks) * runs_per_task, upper, expected,
                (upper - k0) * mean_rate + k0 * rates.ncu_s, (expected - k0) * mean_rate + k0 * rates.ncu_s)


def costs(parts: list[Part], search: Search, rates: Rates) -> list[Cost]:
    seen: set[tuple[str, str]] = set()  # (lane, task): k0's baseline is measured once per database
    out = []
    for part in parts:
        fresh = any((part.lane, t) not in seen for t in part.tasks)
        seen.update((part.lane, t) for t in part.tasks)
        out.append(cost(part, search, rates, fresh))
    return out


def sessions(gpu_s: float, machine: Machine, mean_s: float) -> int:
    return math.ceil(gpu_s / machine.usable_gpu_s(mean_s))


# -- the reuse model against a stored bench --------------------------------------------------------------------

@dataclass
class Observed:
    """A stored bench's search evaluations (k0 aside) and the beta that gives its measured count."""

    runs: int
    tasks: int
    candidates: int  # search evaluations stored, reused or not
    measured: int  # those not noted as reused
    beta: float | None  # None where every task has one run: one run says nothing of reuse between runs


def observe(db: Path, bench: int) -> Observed:
    """Reads bench `bench`'s finished runs in `db` (read-only)."""
    if not db.is_file():
        raise UserError(f"no run database at {db}")
    con = sqlite3.connect(f"file:{db}?mode=ro", uri=True)
    rows = con.execute("SELECT r.task, r.id, e.result FROM runs r JOIN evaluations e ON e.run_id = r.id WHERE "
                       "r.bench_id = ? AND r.status = 'done' AND e.which = 'search' AND e.candidate > 0",
                       (bench,)).fetchall()
    if not rows:
        raise UserError(f"{db}: bench {bench} has no finished run with search evaluations")
    by_task: dict[str, dict[int, list[bool]]] = {}
    for task, run, result in rows:
        reused = any("evaluation reused" in n for n in json.loads(result).get("notes", []))
        by_task.setdefault(task, {}).setdefault(run, []).append(reused)
    measured = sum(not r for runs in by_task.values() for flags in runs.values() for r in flags)
    shapes = [(sum(map(len, runs.values())) / len(runs), len(runs)) for runs in by_task.values()]
    beta = fit_beta(shapes, measured) if any(k > 1 for _, k in shapes) else None
    return Observed(sum(len(runs) for runs in by_task.values()), len(by_task), len(rows), measured, beta)


def fit_beta(shapes: list[tuple[float, int]], measured: int) -> float:
    """The beta with sum of distinct(m, k, beta) over the tasks' (m, k) equal to `measured` (bisection: the sum
    grows with beta)."""
    lo, hi = 0.0, 1.0
    for _ in range(60):
        mid = (lo + hi) / 2
        lo, hi = (mid, hi) if sum(distinct(m, k, mid) for m, k in shapes) < measured else (lo, mid)
    return round((lo + hi) / 2, 3)


# -- the command ----------------------------------------------------------------------------------------------

def report(parts: list[Part], found: list[Cost], search: Search, rates: Rates, machine: Machine) -> str:
    lines = [f"T = {search.iterations}, q = {search.q}, finalists {search.finalists}, beta {search.beta}; "
             f"{rates.ncu_s:g} s an evaluation a GPU with Nsight Compute, {rates.plain_s:g} s without",
             "",
             "| bench | lane | tasks | policies x seeds | runs | evaluations, upper | expected "
             "| GPU-min, upper | expected |",
             "| --- | --- | ---: | --- | ---: | ---: | ---: | ---: | ---: |"]
    for part, c in zip(parts, found):
        lines.append(f"| {c.part} | {c.lane} | {c.tasks} {part.split} | {', '.join(part.policies)} x {part.seeds} "
                     f"| {c.runs} | {c.upper:,.0f} | {c.expected:,.0f} | {c.gpu_s_upper / 60:,.0f} "
                     f"| {c.gpu_s_expected / 60:,.0f} |")
    total = {k: sum(getattr(c, k) for c in found) for k in ("runs", "upper", "expected", "gpu_s_upper",
                                                            "gpu_s_expected")}
    lines.append(f"| all | | | | {total['runs']} | {total['upper']:,.0f} | {total['expected']:,.0f} "
                 f"| {total['gpu_s_upper'] / 60:,.0f} | {total['gpu_s_expected'] / 60:,.0f} |")
    mean_s = total["gpu_s_expected"] / max(total["expected"], 1)
    usable = machine.usable_gpu_s(mean_s)
    lanes = {lane: sum(c.gpu_s_expected for c in found if c.lane == lane) for lane in dict.fromkeys(c.lane for c in found)}
    share = ", ".join(f"{lane} {s / total['gpu_s_expected']:.0%}" for lane, s in lanes.items())
    lines += ["",
              f"Sessions of {machine.session_s / 60:g} minutes on {machine.gpus} GPU(s), "
              f"{usable / 60:,.0f} GPU-minutes of evaluations each (start {machine.start_s:g} s, collection "
              f"{machine.collect_s:g} s, set-up {machine.setup_s:g} s, the evaluation in flight on each of "
              f"{machine.runs_per_gpu} runs a GPU): expected {sessions(total['gpu_s_expected'], machine, mean_s)}, "
              f"at most {sessions(total['gpu_s_upper'], machine, mean_s)}. Expected GPU time by lane: {share}."]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--suites", default="tritonbench-g-l12", help="comma-separated suites, each benched apart")
    ap.add_argument("--policies", default="kernelband,random,beam,coordinate",
                    help="the test benches' policies (knowledge carried)")
    ap.add_argument("--cold", default="kernelband", help="policies benched again with --knowledge off ('' none)")
    ap.add_argument("--fill", default="kernelband", help="the policy that fills the knowledge on the train tasks "
                    "('' none)")
    ap.add_argument("--seeds", type=int, default=5)
    ap.add_argument("--fill-seeds", type=int, default=None, help="the fill's seeds (default: --seeds)")
    ap.add_argument("-n", "--iterations", type=int, default=10)
    ap.add_argument("-q", type=int, default=1)
    ap.add_argument("--finalists", type=int, default=3)
    ap.add_argument("--beta", type=float, default=BETA, help="the reuse exponent (module docstring)")
    ap.add_argument("--s-per-eval", type=float, default=S_NCU, help="s an evaluation a GPU, Nsight Compute on")
    ap.add_argument("--s-per-eval-noncu", type=float, default=None,
                    help=f"s an evaluation a GPU without it (default: --s-per-eval less {NCU_S})")
    ap.add_argument("--gpus", type=int, default=4)
    ap.add_argument("--session-min", type=float, default=30)
    ap.add_argument("--start-s", type=float, default=120)
    # the last call's copy and packing: gpu_collect.sh packs 41 MB in about 27 s, and the plan's parts reach
    # some 200 MB (25-40 KB a stored evaluation row, reused rows included), so 150 s rather than its 75
    ap.add_argument("--collect-s", type=float, default=150)
    ap.add_argument("--setup-s", type=float, default=60)
    ap.add_argument("--runs-per-gpu", type=int, default=2)
    ap.add_argument("--check", action="append", default=[], metavar="DB:BENCH",
                    help="print the reuse a stored bench shows, and the beta that fits it")
    ap.add_argument("--json", action="store_true", help="the costs as JSON")
    args = ap.parse_args(argv)
    for spec in args.check:
        db, sep, bench = spec.rpartition(":")
        if not sep or not bench.isdigit():
            raise UserError(f"--check {spec}: give DB:BENCH, e.g. docs/results/bench.db:3")
        o = observe(Path(db), int(bench))
        fit = f"beta {o.beta}" if o.beta is not None else "one run a task, no beta"
        print(f"{db} bench {bench}: {o.runs} runs on {o.tasks} tasks, {o.candidates} search evaluations "
              f"({o.candidates / o.runs:.1f} a run), {o.measured} measured ({o.candidates - o.measured} "
              f"reused): {fit}")
    if args.check:
        return
    if min(args.seeds, args.iterations, args.q, args.gpus, args.runs_per_gpu) < 1 or args.finalists < 0:
        raise UserError("--seeds, -n, -q, --gpus and --runs-per-gpu must be at least 1, --finalists at least 0")
    if not 0 <= args.beta <= 1:
        raise UserError(f"--beta {args.beta}: give a number from 0 (every run the same) to 1 (no reuse)")
    from kernelband.bench import SUITES

    suites = [s.strip() for s in args.suites.split(",") if s.strip()]
    unknown = [s for s in suites if s not in SUITES]
    if unknown or not suites:
        raise UserError(f"--suites {args.suites}: use {', '.join(SUITES)}")
    parts = plan(suites, policies_of(args.policies), policies_of(args.cold), policies_of(args.fill), args.seeds,
                 args.fill_seeds or args.seeds)
    search = Search(args.iterations, args.q, args.finalists, args.beta)
    noncu = args.s_per_eval_noncu if args.s_per_eval_noncu is not None else max(args.s_per_eval - NCU_S, 0.1)
    rates = Rates(args.s_per_eval, noncu)
    machine = Machine(args.gpus, args.session_min * 60, args.start_s, args.collect_s, args.setup_s, args.runs_per_gpu)
    found = costs(parts, search, rates)
    if args.json:
        print(json.dumps([asdict(c) for c in found]))
        return
    print(report(parts, found, search, rates, machine))


if __name__ == "__main__":
    run_script(main)
