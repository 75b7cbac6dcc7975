"""`kernelband bench --ray`: a sweep over every GPU of a Ray cluster, into one run database.

Placement: one Ray actor per GPU of the cluster (`num_gpus=1`), or on a CPU-only cluster (the Triton
interpreter) one per `cpus_per_actor` CPUs of each node. Each actor owns one evaluator (warm workers, kept
references, the GPU lock) and runs the runs that the driver deals it, `runs_per_actor` at a time, through the
same `Bench.run_job` as the local bench. The runs of one task go to one actor where possible (`deal`); an
actor that has finished its share takes the last run of the longest queue left.

The driver is the only writer to the run database. Each actor runs a normal search against `StoreProxy`,
which forwards every store call (writes and the reads that resume and reuse need) to `_StoreServer`, an actor
that the driver owns, placed on the driver's node, holding the one SQLite connection. This route, rather than
part databases joined by `kernelband merge`, keeps resume and reuse exactly as in the local bench: a run
dealt again reads what is stored so far, evaluations are reused across actors at once, and a killed driver
loses at most the records in flight (its actors die with it; `--resume` goes on from the database).

A lost actor or node: the actor's calls fail with RayActorError; its unfinished runs go back to its queue, from
which the living actors take them, and each resumes from what is stored (the loop's replay). An actor is
never given a run that another one is running: the driver deals each run to one actor at a time, and a run is
dealt again only once its actor is dead. The store's keys (run, candidate, which) make a record written twice
one row.

One bench stays on one GPU model: a cluster whose nodes name several models (a `gpu_model:NAME` resource
given to `ray start --resources`, or else Ray's own `accelerator_type:NAME`) is refused before anything is
stored, unless `gpu_model` picks one; the actors then ask for that resource, so Ray places them on its nodes.
"""

from __future__ import annotations

import logging
import os
import tempfile
import threading
from collections import Counter, deque
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path

from kernelband.bench import Bench, BenchConfig, Job, SharedEvaluations, deal, phases
from kernelband.errors import SetupError, UserError
from kernelband.store import Store

try:
    import ray
    from ray.exceptions import RayActorError, RayTaskError
    from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy
except ImportError:  # the optional extra
    ray = None

INSTALL = '--ray needs Ray: pip install "kernelband[ray]"'
MODEL_PREFIXES = ("gpu_model:", "accelerator_type:")  # a resource naming a node's GPU model, in preference order
MODEL_SHARE = 0.001  # of a node's model resource that one actor asks for: any number of actors fit


def require_ray() -> None:
    if ray is None:
        raise UserError(INSTALL)


def connect(address: str) -> None:
    """`auto`: the cluster that `ray start` made (or RAY_ADDRESS); `local`: a Ray runtime in this process;
    else the address of a cluster's head."""
    require_ray()
    if ray.is_initialized():
        return
    kwargs = {"logging_level": logging.WARNING, "log_to_driver": False}
    try:
        if address == "local":
            ray.init(include_dashboard=False, **kwargs)
        else:
            ray.init(address=address, **kwargs)
    except (ConnectionError, ValueError, RuntimeError) as exc:
        raise UserError(f"--ray {address}: cannot join a Ray cluster ({str(exc).splitlines()[0]}); start one "
                        "with `ray start --head`, or use --ray local") from None


@dataclass
class NodeSlots:
    """A node of the cluster and the actors it takes."""
    node_id: str
    address: str
    model: str | None
    actors: int
    model_resource: str | None = None  # the resource that names its model (`gpu_model:NAME`, ...)

    @property
    def label(self) -> str:
        return f"{self.address} ({self.node_id[:6]})"


def node_model(resources: dict) -> str | None:
    key = model_resource(resources)
    return None if key is None else key.split(":", 1)[1]


def model_resource(resources: dict) -> str | None:
    for prefix in MODEL_PREFIXES:
        keys = sorted(k for k in resources if k.startswith(prefix))
        if keys:
            return keys[0]
    return None


def plan_nodes(nodes: list[dict], gpu_model: str | None, cpus_per_actor: int) -> tuple[list[NodeSlots], bool]:
    """The actors of each alive node (`ray.nodes()`), and whether they are GPU actors. A cluster with GPUs gets
    one actor per GPU; one without, one per `cpus_per_actor` CPUs. Several GPU models: refused unless
    `gpu_model` picks one."""
    if cpus_per_actor < 1:
        raise UserError("--cpus-per-actor must be at least 1")
    alive = [n for n in nodes if n.get("Alive")]
    gpus = any(n["Resources"].get("GPU", 0) >= 1 for n in alive)
    if gpus:
        alive = [n for n in alive if n["Resources"].get("GPU", 0) >= 1]
    models = {node_model(n["Resources"]) for n in alive}
    if gpu_model is None and len(models) > 1:
        named = ", ".join(sorted(m or "unnamed" for m in models))
        raise UserError(f"the Ray cluster has several GPU models ({named}): a bench stays on one, so pick it "
                        "with --gpu-model NAME")
    if gpu_model is not None:
        if gpu_model not in models:
            named = ", ".join(sorted(m for m in models if m)) or "none named"
            raise UserError(f"--gpu-model {gpu_model!r}: no node of the Ray cluster has it (models: {named})")
        alive = [n for n in alive if node_model(n["Resources"]) == gpu_model]
    slots = [NodeSlots(n["NodeID"], n.get("NodeManagerAddress", "?"), node_model(n["Resources"]),
                       int(n["Resources"].get("GPU", 0)) if gpus
                       else int(n["Resources"].get("CPU", 0)) // cpus_per_actor, model_resource(n["Resources"]))
             for n in alive]
    slots = [s for s in slots if s.actors > 0]
    if not slots:
        raise UserError(f"the Ray cluster has no GPU and no node with {cpus_per_actor} CPU(s) for an actor "
                        "(--cpus-per-actor)")
    return slots, gpus


def _unwrap(ref):
    """ray.get, raising the remote exception itself (a UserError stays a UserError)."""
    try:
        return ray.get(ref)
    except RayTaskError as exc:
        raise exc.as_instanceof_cause() from None


class _StoreServer:
    """The run database's one connection, in an actor of the driver on the driver's node."""

    def __init__(self, path: str) -> None:
        self.store = Store(path)

    def call(self, name: str, args: tuple, kwargs: dict):
        return getattr(self.store, name)(*args, **kwargs)


class StoreProxy:
    """A Store as an actor's search sees it: every call goes to the driver's `_StoreServer`. `path` is the
    database's path on the driver's node (a search keeps its files beside it)."""

    def __init__(self, server, path: str) -> None:
        self._server, self.path = server, Path(path)

    def __getattr__(self, name: str):
        if name.startswith("_"):
            raise AttributeError(name)

        def call(*args, **kwargs):
            return _unwrap(self._server.call.remote(name, args, kwargs))

        return call


@dataclass
class ActorSetup:
    """What every actor needs to build its evaluator and its side of the bench (picklable)."""
    db_path: str
    config: dict
    bench_id: int
    proposer: object  # a ProposerChoice
    interpreter: bool
    use_ncu: bool | None
    runs: int
    tritonbench_path: str | None


class _Runner:
    """One GPU's (or CPU slot's) evaluator and the runs dealt to it, `setup.runs` at a time (a threaded
    actor)."""

    def __init__(self, server, setup: ActorSetup) -> None:
        from kernelband.evaluation.evaluator import Evaluator, detect_mode
        from kernelband.search.session import make_proposer

        config = BenchConfig(**setup.config)
        mode = "interpreter" if setup.interpreter else detect_mode()
        self.evaluator = Evaluator(mode=mode, warm=2, device_index=0, preset=config.preset,
                                   use_ncu=setup.use_ncu, baselines=config.baselines).__enter__()
        self.evaluator.keep_references(setup.runs + 1)
        self.bench = Bench(StoreProxy(server, setup.db_path), config, [self.evaluator],
                           lambda: make_proposer(setup.proposer), setup.tritonbench_path, bench_id=setup.bench_id,
                           runs_per_gpu=setup.runs)
        self.bench.out_dir = _files_folder(Path(setup.db_path).parent)
        self.shared = SharedEvaluations(self.evaluator, {}, threading.Lock())

    def close(self) -> None:
        self.evaluator.close()

    def run(self, job: dict) -> dict:
        try:
            return self.bench.run_job(Job(**job), self.shared)
        except SetupError as exc:  # every run would fail the same way: the sweep stops, resumable
            return {**job, "kind": "fatal", "error": str(exc)}
        except UserError as exc:  # a broken task is a row in the report, not the end of the sweep
            return {**job, "kind": "job_error", "error": str(exc)}


def _files_folder(beside_db: Path) -> Path:
    """Where this actor writes its runs' best.py and best.diff: beside the run database where this node sees
    that folder (one node, or a shared file system), else in this node's temporary folder (the kernels
    themselves are in the database either way)."""
    if beside_db.is_dir() and os.access(beside_db, os.W_OK):
        return beside_db
    return Path(tempfile.gettempdir()) / "kernelband-ray-runs"


@dataclass
class RayResult:
    bench_id: int
    errors: list[str] = field(default_factory=list)
    nodes: list[NodeSlots] = field(default_factory=list)
    done_per_node: Counter = field(default_factory=Counter)


def ray_bench(store: Store, config: BenchConfig, address: str, proposer, *, tritonbench_path: str | None = None,
              bench_id: int | None = None, on_event: Callable[[dict], None] | None = None,
              runs_per_actor: int = 2, cpus_per_actor: int = 1, gpu_model: str | None = None,
              interpreter: bool = False, use_ncu: bool | None = None,
              tasks_now: list[str] | None = None) -> RayResult:
    """Runs the bench (new, or `bench_id` resumed) on the Ray cluster at `address`. Events as the local bench's,
    each with the `node` that ran it, plus `node` (a node's actors at the start) and `actor_lost`."""
    on_event = on_event or (lambda event: None)
    if runs_per_actor < 1:
        raise UserError("--runs-per-gpu must be at least 1")
    connect(address)
    nodes, gpus = plan_nodes(ray.nodes(), gpu_model, cpus_per_actor)  # refused before anything is stored
    bench = Bench(store, config, [], lambda: None, tritonbench_path, bench_id=bench_id, tasks_now=tasks_now)
    result = RayResult(bench.bench_id, nodes=nodes)
    here = ray.get_runtime_context().get_node_id()
    server = ray.remote(_StoreServer).options(
        num_cpus=0, scheduling_strategy=NodeAffinitySchedulingStrategy(here, soft=False)).remote(str(store.path))
    setup = ActorSetup(str(store.path), config.to_dict(), bench.bench_id, proposer, interpreter or not gpus, use_ncu,
                       runs_per_actor, tritonbench_path)
    actors, labels = [], []
    for node in nodes:
        for _ in range(node.actors):
            options = {"num_gpus": 1} if gpus else {"num_cpus": cpus_per_actor}
            if node.model_resource is not None and gpu_model is not None:
                options["resources"] = {node.model_resource: MODEL_SHARE}
            actors.append(ray.remote(_Runner).options(
                max_concurrency=runs_per_actor, max_restarts=0,
                scheduling_strategy=NodeAffinitySchedulingStrategy(node.node_id, soft=False), **options,
            ).remote(server, setup))
            labels.append(node.label)
        on_event({"kind": "node", "node": node.label, "actors": node.actors, "model": node.model,
                  "gpus": gpus})

    jobs = bench.jobs()
    if bench.tasks_now is not None:
        order = {t: i for i, t in enumerate(bench.tasks_now)}
        jobs = sorted((j for j in jobs if j.task in order), key=lambda j: order[j.task])
    done = {(r.task, r.policy, r.seed) for r in store.runs(bench.bench_id) if r.status == "done"}
    open_jobs = []
    for job in jobs:
        if (job.task, job.policy, job.seed) in done:
            on_event({"kind": "job_skipped", **asdict(job)})
        else:
            open_jobs.append(job)
    by_task: dict[str, list[Job]] = {}
    for job in open_jobs:
        by_task.setdefault(job.task, []).append(job)
    try:
        _drive_phases(actors, labels, by_task, runs_per_actor, on_event, result)
    finally:
        _close(actors)
    if bench._complete():
        store.finish_bench(bench.bench_id)
    return result


def _close(actors: list) -> None:
    """Stops the living actors' evaluator workers (a lost actor's went with it)."""
    refs = [a.close.remote() for a in actors]
    ready, _ = ray.wait(refs, num_returns=len(refs), timeout=60)
    for ref in ready:
        try:
            ray.get(ref)
        except (RayActorError, RayTaskError):
            pass
    for actor in actors:
        try:
            ray.kill(actor)
        except (RayActorError, ValueError):  # gone already
            pass


def _drive_phases(actors: list, labels: list[str], by_task: dict[str, list[Job]], per_actor: int,
                  on_event: Callable[[dict], None], result: RayResult) -> None:
    """The train tasks' runs, then the others', as the local bench runs them (bench.phases); an actor lost in
    the first phase is not dealt runs in the second."""
    alive = set(range(len(actors)))
    for phase in phases(by_task):
        _drive(actors, labels, deal(phase, len(actors), lambda job: True), per_actor, on_event, result, alive)


def _drive(actors: list, labels: list[str], queues: list[deque[Job]], per_actor: int,
           on_event: Callable[[dict], None], result: RayResult, alive: set[int]) -> None:
    """Deals the runs to the actors, `per_actor` at a time each, until every queue is empty and no run is in
    flight; a dead actor's runs go back to its queue, for the living ones (`alive`, updated) to take."""
    in_flight: dict = {}  # ObjectRef -> (actor index, Job)
    busy = Counter()

    def next_job(i: int) -> Job | None:
        if queues[i]:
            return queues[i].popleft()
        fullest = max(queues, key=len)
        return fullest.pop() if fullest else None

    def fill() -> None:
        for i in sorted(alive):
            while busy[i] < per_actor and (job := next_job(i)) is not None:
                ref = actors[i].run.remote(asdict(job))
                in_flight[ref] = (i, job)
                busy[i] += 1
                on_event({"kind": "job_started", "node": labels[i], "actor": i, **asdict(job)})

    fatal: str | None = None
    fill()
    while in_flight:
        ready, _ = ray.wait(list(in_flight), num_returns=1, timeout=1.0)
        for ref in ready:
            i, job = in_flight.pop(ref)
            busy[i] -= 1
            try:
                event = ray.get(ref)
            except RayActorError as exc:
                queues[i].appendleft(job)  # resumed from what is stored, by a living actor
                if i in alive:
                    alive.discard(i)
                    on_event({"kind": "actor_lost", "node": labels[i], "actor": i,
                              "error": str(exc).splitlines()[0]})
                continue
            except RayTaskError as exc:
                event = {**asdict(job), "kind": "job_error", "error": str(exc).splitlines()[0]}
            event["node"] = labels[i]
            if event["kind"] == "fatal":
                fatal = fatal or event["error"]
                continue
            if event["kind"] == "job_error":
                result.errors.append(f"{job.task} {job.policy} seed {job.seed}: {event['error']}")
            if event["kind"] == "job_done":
                result.done_per_node[labels[i]] += 1
            on_event(event)
        if fatal is None:  # after a set-up mistake no new run starts; the ones in flight finish
            fill()
    if fatal is not None:
        raise SetupError(fatal)
    if any(queues):
        raise SetupError(f"every Ray actor was lost: resume the bench with --resume {result.bench_id} once the "
                         "cluster is back")
