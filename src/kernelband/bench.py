"""`kernelband bench`: every task x policy x seed of a suite, into one run database.

Placement: one evaluator per visible GPU, each with its own worker pool and its own timing lock, fed from
one queue of runs; a GPU never times two kernels at once. Runs of one task go to the same GPU where
possible (its reference workers stay warm there). Each GPU takes `runs_per_gpu` runs at once (default 2):
while one run's candidate is checked and timed under the GPU's lock, another's is imported and compiled,
so the GPU does not wait for the compiler.

Sharing within a sweep: an evaluation is a property of (task, source, device), so a kernel that several
policies or seeds reach is evaluated once per GPU kind and reused (the reuse is noted in the result).
k0's own evaluation is a golden baseline: cached per GPU name, driver and Triton version, and re-measured
only with `--refresh-baselines` or when any of the three changed. Every candidate's speedup is still
timed against the reference interleaved, in its own evaluation.

Resuming: a finished run is skipped, an unfinished one is resumed through the loop's replay.
"""

from __future__ import annotations

import copy
import itertools
import math
import statistics
import threading
import time
from collections import deque
from collections.abc import Callable
from concurrent.futures import Future
from dataclasses import asdict, dataclass, field
from pathlib import Path

from kernelband.errors import SetupError, UserError
from kernelband.evaluation import sol
from kernelband.evaluation.records import RULES, EvalResult, Outcome, evaluated_again_alone, out_of_memory
from kernelband.search.core import Strategy, source_hash
from kernelband.search.loop import RunConfig
from kernelband.store import Store
from kernelband.tasks import example_names, load_task
from kernelband.tasks import split as splits
from kernelband.tasks import tritonbench as tb

SUITES = ("tritonbench-g-l12", "tritonbench-g", "examples")


def suite_tasks(suite: str, tritonbench_path: str | None = None) -> list[str]:
    if suite == "examples":
        return [f"examples:{n}" for n in example_names()]
    if suite == "tritonbench-g-l12":
        return [f"tritonbench:{n}" for n in tb.level12(tritonbench_path)]
    if suite == "tritonbench-g":
        return [f"tritonbench:{n}" for n in sorted(tb.entries(tritonbench_path))]
    raise UserError(f"unknown suite {suite!r}: use {', '.join(SUITES)}")


def parse_seeds(text: str) -> list[int]:
    """`3` means seeds 0, 1, 2; `0,5,9` means those seeds."""
    try:
        if "," in text:
            return [int(x) for x in text.split(",") if x.strip()]
        n = int(text)
    except ValueError:
        raise UserError(f"--seeds {text!r}: give a count (3) or a list (0,5,9)") from None
    if n < 1:
        raise UserError("--seeds must be at least 1")
    return list(range(n))


@dataclass
class BenchConfig:
    suite: str
    policies: list[str]
    seeds: list[int]
    iterations: int = 10
    q: int = 1
    proposer: str = "rewrite"
    preset: str = "default"
    tasks: list[str] = field(default_factory=list)  # a subset of the suite; empty: all of it
    refresh_baselines: bool = False
    finalists: int = 3  # of each run's fastest kernels re-measured at the end (RunConfig.finalists)
    # the strategies of every run (name, description, target, rewrites), as loaded when the bench began (from
    # --strategies, or the built-in catalogue), so that a resume uses the same ones even after the catalogue
    # changed; None (benches begun before this was stored): today's built-in catalogue
    strategies: list[dict] | None = None
    split: str | None = None  # "train" or "test": one side of the fixed split (tasks/split.py); None: both
    # the knowledge store the policies warm-start from and add to: "" the bench's own database, "off" none,
    # else a path (knowledge.py)
    knowledge: str = ""
    # torch eager and torch.compile timed beside each run's kernels (evaluation/baselines.py); False: not timed,
    # for benches that only need the kernels (a compile with max-autotune per shape costs more than a short run)
    baselines: bool = True

    def to_dict(self) -> dict:
        return dict(self.__dict__)

    @staticmethod
    def strategies_from(path: str | None) -> list[dict]:
        """The `strategies` field for a strategies file, or for the built-in catalogue (None)."""
        from kernelband.search.strategies import load_strategies
        return [asdict(s) for s in load_strategies(path)]

    def strategy_list(self) -> list[Strategy] | None:
        if self.strategies is None:
            return None
        return [Strategy(**{**d, "rewrites": tuple(d["rewrites"])}) for d in self.strategies]


@dataclass
class Job:
    task: str
    policy: str
    seed: int


def planned_jobs(config: BenchConfig, tritonbench_path: str | None = None) -> list[Job]:
    """Every task x policy x seed of `config`: the train tasks of the fixed split first, then the test tasks,
    each in the suite's task order."""
    names = splits.train_first(splits.select(suite_tasks(config.suite, tritonbench_path), config.split))
    if config.tasks:
        wanted = {_task_ref(n, names) for n in config.tasks}
        unknown = sorted(wanted - set(names))
        if unknown:
            raise UserError(f"not in suite {config.suite}: {', '.join(unknown)}")
        names = [n for n in names if n in wanted]
    return [Job(t, p, s) for t in names for p in config.policies for s in config.seeds]


def _task_ref(name: str, refs: list[str]) -> str:
    """A task is named by its reference (examples:softmax) or by its bare name (softmax)."""
    return name if ":" in name else next((r for r in refs if r.split(":", 1)[1] == name), name)


def measured_elsewhere(store: Store, bench_id: int, gpu: str) -> list[str]:
    """The GPU models other than `gpu` that the bench's runs were measured on: a bench compares policies (and
    its grid) on one GPU model, so work on another is refused."""
    return sorted({r.device for r in store.runs(bench_id) if r.device} - {gpu})


def phases(by_task: dict[str, list[Job]]) -> list[list[list[Job]]]:
    """The runs grouped by task, in two phases: the train tasks' (tasks/split.py), then the others'. Every run of
    the first ends before one of the second starts, so that the test tasks start with all that the train tasks
    taught the knowledge store (knowledge.py)."""
    train = [g for t, g in by_task.items() if splits.side(t) == "train"]
    return [train, [g for t, g in by_task.items() if splits.side(t) != "train"]]


def deal(groups: list[list[Job]], gpus: int, open_: Callable[[Job], bool]) -> list[deque[Job]]:
    """The runs of each GPU, in order. Each task's runs go to one GPU, where its reference worker is set up
    once: the task goes to the GPU with the fewest open runs so far (`open_`: not done yet), in the order
    given. A GPU's queue takes its tasks in turn, one run of each, so its runs in flight belong to different
    tasks. Run one after another on one thread, a task's runs would set the sweep's length: 8 tasks with 5 open
    runs each cannot end sooner than 5 runs in a row."""
    load = [0] * max(1, gpus)
    mine: list[list[list[Job]]] = [[] for _ in load]
    for group in groups:
        gpu = min(range(len(load)), key=lambda i: (load[i], i))
        mine[gpu].append(group)
        load[gpu] += sum(map(open_, group))
    return [deque(job for turn in itertools.zip_longest(*tasks) for job in turn if job is not None)
            for tasks in mine]


class SharedEvaluations:
    """An evaluator as a sweep's runs see it: a search evaluation of a source that another run of the sweep is
    evaluating right now (same task, preset and profiling) waits for that one and takes its result, noted as
    reused, instead of measuring the same kernel twice at once. The store's reuse (`Bench._lookup`) covers
    evaluations already finished; this covers runs of one task in flight together, as `deal` now has them
    (bench 3 reused 502 of its 1,386 search evaluations, most of them between runs of one task). Everything
    else is the evaluator's own."""

    NOTE = "evaluation reused: another run of this sweep evaluated the same source at the same time"

    def __init__(self, evaluator, in_flight: dict, lock: threading.Lock) -> None:
        self._evaluator, self._in_flight, self._lock = evaluator, in_flight, lock

    def __getattr__(self, name: str):
        return getattr(self._evaluator, name)

    def evaluate(self, task, source: str | None = None, preset=None, which: str = "search", seed=None,
                 profile: bool = True) -> EvalResult:
        def own() -> EvalResult:
            return self._evaluator.evaluate(task, source, preset=preset, which=which, seed=seed, profile=profile)

        if which != "search":
            return own()
        key = (task.key, source_hash(task.module_source if source is None else source), repr(preset), profile)
        with self._lock:
            running = self._in_flight.get(key)
            if running is None:
                running = self._in_flight[key] = Future()
                mine = True
            else:
                mine = False
        if not mine:
            result = copy.deepcopy(running.result())  # the evaluating run's exception, if it raised, is ours too
            result.notes.append(self.NOTE)
            return result
        try:
            result = own()
        except BaseException as exc:
            running.set_exception(exc)
            raise
        finally:
            with self._lock:
                self._in_flight.pop(key, None)
        running.set_result(result)
        return result


class Bench:
    def __init__(self, store: Store, config: BenchConfig, evaluators: list, make_proposer: Callable[[], object],
                 tritonbench_path: str | None = None, bench_id: int | None = None,
                 on_event: Callable[[dict], None] | None = None, deadline: float | None = None,
                 runs_per_gpu: int = 2, policies_now: list[str] | None = None,
                 tasks_now: list[str] | None = None):
        """`policies_now`: run only these of the bench's policies this time (a sweep in phases, e.g. every
        task with one policy first); `tasks_now`: only these of its tasks, in this order (a GPU session too
        short for the whole plan takes the most telling tasks first). The bench is done when every run of its
        whole plan is."""
        if runs_per_gpu < 1:
            raise UserError("--runs-per-gpu must be at least 1")
        self.store, self.config, self.evaluators = store, config, evaluators
        self.runs_per_gpu = runs_per_gpu
        extra = sorted(set(policies_now or ()) - set(config.policies))
        if extra:
            raise UserError(f"not among the bench's policies ({', '.join(config.policies)}): {', '.join(extra)}")
        self.policies_now = policies_now
        self.tasks_now = None
        if tasks_now:
            planned = list(dict.fromkeys(j.task for j in planned_jobs(config, tritonbench_path)))
            named = [_task_ref(n, planned) for n in tasks_now]
            outside = [n for n, ref in zip(tasks_now, named) if ref not in planned]
            if outside:
                raise UserError(f"not among the bench's tasks: {', '.join(outside)}")
            self.tasks_now = list(dict.fromkeys(named))
        self.deadline = deadline  # time.monotonic() after which no new run starts (the sweep can resume)
        self.make_proposer = make_proposer
        self.tritonbench_path = tritonbench_path
        self.on_event = on_event or (lambda event: None)
        if bench_id is None:
            self.jobs()  # an unknown suite or task is refused before a bench is stored
            bench_id = store.create_bench(config.suite, config.to_dict())
        elif store.bench(bench_id)["status"] == "quarantined":
            raise UserError(f"bench {bench_id} is quarantined (measured while the GPU was not ours alone): "
                            "resume the bench it was set aside from, or start a new one")
        self.bench_id = bench_id
        self.tasks = {}
        self._lock = threading.Lock()
        self._fresh: set[tuple] = set()  # baselines measured in this sweep
        self._baseline_locks: dict[tuple, threading.Lock] = {}  # one measurement of a baseline at a time
        self._queues: list[deque[Job]] = []  # each GPU's runs not started yet (`run`, `deal`)
        self._gpus_checked: set[str] = set()  # GPU models found to match the bench's runs (_same_gpu)
        self.errors: list[str] = []
        # where each run's best.py and best.diff go (None: beside the run database)
        self.out_dir: Path | None = None
        self.fatal: SetupError | None = None  # the first set-up mistake a run hit: the sweep stops

    def jobs(self) -> list[Job]:
        return planned_jobs(self.config, self.tritonbench_path)

    def _task(self, ref: str):
        with self._lock:
            if ref not in self.tasks:
                self.tasks[ref] = load_task(ref, self.tritonbench_path)
            return self.tasks[ref]

    def run(self) -> int:
        jobs = [j for j in self.jobs() if self.policies_now is None or j.policy in self.policies_now]
        by_task: dict[str, list[Job]] = {}
        for job in jobs:
            by_task.setdefault(job.task, []).append(job)
        if self.tasks_now is not None:
            by_task = {t: by_task[t] for t in self.tasks_now if t in by_task}
        done = {(r.task, r.policy, r.seed) for r in self.store.runs(self.bench_id) if r.status == "done"}
        for ev in self.evaluators:  # one task per run in flight, and the one a finished run leaves behind
            ev.keep_references(self.runs_per_gpu + 1)
        in_flight: dict = {}
        shared = [SharedEvaluations(ev, in_flight, self._lock) for ev in self.evaluators]
        for phase in phases(by_task):
            self._queues = deal(phase, len(self.evaluators),
                                lambda job: (job.task, job.policy, job.seed) not in done)
            threads = [threading.Thread(target=self._drain, args=(i, ev), daemon=True)
                       for i, ev in enumerate(shared) for _ in range(self.runs_per_gpu)]
            for t in threads:
                t.start()
            for t in threads:
                t.join()
            if self.fatal is not None:
                raise self.fatal
        if not any(self._queues) and self._complete():
            self.store.finish_bench(self.bench_id)
        return self.bench_id

    def _next(self, gpu: int) -> Job | None:
        """The next run for a thread of GPU `gpu`: from its own queue, else the last one of the queue with the
        most runs left (a GPU that has finished its share helps with the longest one's, as a sweep ends)."""
        with self._lock:
            if self._queues[gpu]:
                return self._queues[gpu].popleft()
            fullest = max(self._queues, key=len)
            return fullest.pop() if fullest else None

    def _complete(self) -> bool:
        """Every run the bench was created for is done, not only those of this invocation (a resume may run a
        subset of the policies or tasks)."""
        planned = planned_jobs(BenchConfig(**self.store.bench(self.bench_id)["config"]), self.tritonbench_path)
        done = {(r.task, r.policy, r.seed) for r in self.store.runs(self.bench_id) if r.status == "done"}
        return all((j.task, j.policy, j.seed) in done for j in planned)

    def _drain(self, gpu: int, evaluator) -> None:
        while (job := self._next(gpu)) is not None:
            if self.fatal is not None:
                return
            if self.deadline is not None and time.monotonic() > self.deadline:
                self.on_event({"kind": "job_deferred", "task": job.task, "policy": job.policy, "seed": job.seed})
                continue
            try:
                self.on_event(self.run_job(job, evaluator))
            except SetupError as exc:  # every run would fail the same way: the sweep stops, resumable
                with self._lock:
                    self.fatal = self.fatal or exc
                return
            except Exception as exc:  # noqa: BLE001 - a broken task or run is a row in the report, not the end of
                # this GPU's queue: the run is stored as failed with its reason (resumable), the queue goes on
                error = str(exc) if isinstance(exc, UserError) else f"{type(exc).__name__}: {exc}"
                with self._lock:
                    self.errors.append(f"{job.task} {job.policy} seed {job.seed}: {error}")
                self.on_event({"kind": "job_error", "task": job.task, "policy": job.policy, "seed": job.seed,
                               "error": error})

    def run_job(self, job: Job, evaluator) -> dict:
        """Runs (or resumes, or skips as finished) one run of the bench on `evaluator`; returns its event."""
        from kernelband.search.session import open_search

        task = self._task(job.task)
        proposer = self.make_proposer()
        existing = self.store.find_run(task.key, job.policy, proposer.name, job.seed, self.bench_id)
        if existing is not None and existing.status == "done":
            return {"kind": "job_skipped", "task": job.task, "policy": job.policy, "seed": job.seed}
        lookup = self._lookup(task, evaluator)
        config = RunConfig(self.config.iterations, self.config.q, None, self.config.preset,
                           finalists=self.config.finalists)
        search = open_search(task, evaluator, self.store, job.policy, proposer, job.seed, config,
                             resume=existing is not None, bench_id=self.bench_id, lookup=lookup,
                             strategies=self.config.strategy_list(), knowledge=self.config.knowledge,
                             out_dir=self.out_dir)
        summary = search.run()
        for note in search.knowledge.notes if search.knowledge is not None else ():
            self.on_event({"kind": "job_note", "task": job.task, "policy": job.policy, "seed": job.seed,
                           "note": note})
        return {"kind": "job_done", "task": job.task, "policy": job.policy, "seed": job.seed,
                "best_speedup": summary.best_speedup, "evaluations": summary.evaluations,
                "best_vs_eager": summary.best_vs_eager, "best_vs_compile": summary.best_vs_compile}

    def _lookup(self, task, evaluator) -> Callable[[str], EvalResult | None]:
        """Reuses evaluations of the same source on the same task and GPU kind within this sweep, and k0's
        golden baseline across sweeps."""
        fingerprint = evaluator.fingerprint(task)
        self._same_gpu(fingerprint["gpu"])
        k0_hash = source_hash(task.module_source)

        def lookup(h: str) -> EvalResult | None:
            if h == k0_hash:
                return self._baseline(task, evaluator, fingerprint)
            found = self.store.find_evaluation(self.bench_id, task.key, h, fingerprint["gpu"])
            if found is None or found.rules != RULES or _stale_verdict(found, task):
                return None  # evaluated (again, under today's rules)
            found.notes.append("evaluation reused: the same source on the same task and GPU in this sweep")
            return found

        return lookup

    def _same_gpu(self, gpu: str) -> None:
        """A bench compares policies on one GPU model: resumed on another, its runs would differ by GPU as well
        as by policy. Refused (a SetupError: the sweep stops, nothing stored is touched). Read from the store
        once per GPU model: this sweep's own runs add none other."""
        if gpu in self._gpus_checked:
            return
        ran_on = measured_elsewhere(self.store, self.bench_id, gpu)
        if not ran_on:
            self._gpus_checked.add(gpu)
        else:
            raise SetupError(f"bench {self.bench_id} was measured on {', '.join(ran_on)} and this GPU is "
                             f"{gpu}: resume it on the same GPU model, or start a new bench")

    def _baseline(self, task, evaluator, fp: dict) -> EvalResult:
        key = (task.key, fp["gpu"], fp["driver"], fp["triton"])
        with self._lock:
            once = self._baseline_locks.setdefault(key, threading.Lock())
        with once:  # runs of one task that start together measure its baseline once, and the others reuse it
            with self._lock:
                usable = key in self._fresh or not self.config.refresh_baselines
                cached = self.store.baseline(*key[1:], task.key, self.config.preset) if usable else None
            if cached is not None and cached.rules == RULES:
                cached.notes.append(f"golden baseline reused ({fp['gpu']}, driver {fp['driver']}, "
                                    f"triton {fp['triton']})")
                return cached
            result = evaluator.evaluate(task, task.module_source, preset=self.config.preset)
            if result.ok:
                with self._lock:
                    self.store.save_baseline(*key[1:], task.key, self.config.preset, result)
                    self._fresh.add(key)
            return result


def _stale_verdict(found: EvalResult, task) -> bool:
    """A stored verdict that today's rules would not give: `suspicious` only for beating a speed-of-light bound
    that the task now says is no check (its byte count is too high), a SOL fraction of such a bound, or an
    out-of-memory error from before the evaluator tried such a candidate again with the GPU alone. Such a
    source is evaluated again rather than reused, so that two policies reaching it are not judged by two rule
    sets."""
    if found.outcome in (Outcome.RUNTIME_ERROR, Outcome.CRASHED) and out_of_memory(found.error):
        # out of memory with other evaluations' steps on the GPU: today's evaluator tries again alone
        return not evaluated_again_alone(found)
    if any(s.sol_fraction is not None and sol.void_reason(s, task.bytes_overcounted) for s in found.shapes):
        return True  # a fraction of a bound that bounds nothing, which today's evaluator no longer gives
    return (found.outcome == Outcome.SUSPICIOUS and set(found.checks) == {"speed_of_light"}
            and bool(task.bytes_overcounted))


def against_torch(runs: list) -> dict[str, dict]:
    """Per policy, over its finished runs (stored summaries): the geometric mean of the best kernels' speedups
    over torch eager and over torch.compile (over the runs that have them; `n_*` says how many), and the
    median over runs of the SOL medians, all shapes and shapes of >= 16 MB."""
    def geomean(values: list[float]) -> float | None:
        return math.exp(statistics.fmean(math.log(v) for v in values)) if values else None

    def median(values: list[float]) -> float | None:
        return statistics.median(values) if values else None

    out: dict[str, dict] = {}
    for policy in sorted({r.policy for r in runs}):
        summaries = [r.summary for r in runs if r.policy == policy and r.summary]
        got = {key: [s[key] for s in summaries if s.get(key) is not None]
               for key in ("best_vs_eager", "best_vs_compile", "best_sol_fraction", "best_sol_large")}
        out[policy] = {"vs_eager_geomean": geomean(got["best_vs_eager"]), "n_vs_eager": len(got["best_vs_eager"]),
                       "vs_compile_geomean": geomean(got["best_vs_compile"]),
                       "n_vs_compile": len(got["best_vs_compile"]), "sol_median": median(got["best_sol_fraction"]),
                       "sol_median_large": median(got["best_sol_large"]), "runs": len(summaries)}
    return out
