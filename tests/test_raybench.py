"""`kernelband bench --ray` on clusters that Ray's `cluster_utils.Cluster` starts on this machine (CPU nodes, the
interpreter): the same runs as the local bench, a node lost mid-bench, a driver killed and resumed, and a
cluster of two GPU models refused. The cluster tests are skipped where Ray is not installed."""

from __future__ import annotations

import signal
import sqlite3
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest
from invoke import process_env

from kernelband import raybench
from kernelband.bench import Bench, BenchConfig
from kernelband.errors import UserError
from kernelband.proposers.rewriter.proposer import RewriterProposer
from kernelband.search.session import ProposerChoice
from kernelband.store import Store

POLICIES = ["random", "greedy"]
BENCH_ARGS = ("bench", "--suite", "examples", "--tasks", "vector_add", "--policies", ",".join(POLICIES), "-n", "1",
              "--seeds", "1", "--proposer", "rewrite", "--interpreter", "--runs-per-gpu", "1")


def _config() -> BenchConfig:
    return BenchConfig("examples", list(POLICIES), [0], iterations=1, proposer="rewrite", tasks=["vector_add"])


@pytest.fixture
def cluster_of():
    """Starts a Cluster of CPU nodes (`cluster_of({"gpu_model:A": 1}, {})`: one node per resources dict, one CPU
    each) with this process as its driver; shut down after the test."""
    pytest.importorskip("ray", reason='Ray is not installed: pip install "kernelband[ray]"')
    import ray
    from ray.cluster_utils import Cluster

    made = []

    def start(*resources: dict):
        cluster = Cluster(initialize_head=True, head_node_args={"num_cpus": 1, "resources": resources[0]})
        nodes = [cluster.head_node] + [cluster.add_node(num_cpus=1, resources=r) for r in resources[1:]]
        cluster.wait_for_nodes()
        made.append(cluster)
        return cluster, nodes

    yield start
    ray.shutdown()
    for cluster in made:
        cluster.shutdown()


def _connect(cluster) -> None:
    import ray

    ray.init(address=cluster.address, log_to_driver=False)


def _runs(db: Path) -> list[tuple]:
    with sqlite3.connect(db) as con:
        return con.execute("SELECT task, policy, seed, status FROM runs ORDER BY policy, seed").fetchall()


def _assert_each_run_once_and_whole(db: Path) -> None:
    """Every planned run once, done, with its one iteration, and one search evaluation per candidate (none lost;
    the keys make a duplicate impossible, so the counts say none was stored under a second run)."""
    assert _runs(db) == [("examples:vector_add", p, 0, "done") for p in sorted(POLICIES)]
    with sqlite3.connect(db) as con:
        for (run_id,) in con.execute("SELECT id FROM runs").fetchall():
            candidates = {c for (c,) in con.execute("SELECT id FROM candidates WHERE run_id = ?", (run_id,))}
            evaluated = [c for (c,) in con.execute(
                "SELECT candidate FROM evaluations WHERE run_id = ? AND which = 'search'", (run_id,))]
            assert sorted(evaluated) == sorted(candidates) and len(candidates) == 2  # k0 and one child
            assert con.execute("SELECT COUNT(*) FROM iterations WHERE run_id = ?", (run_id,)).fetchone()[0] == 1


def _stored_candidates(db: Path) -> int:
    try:
        with sqlite3.connect(db) as con:
            return con.execute("SELECT COUNT(*) FROM candidates").fetchone()[0]
    except sqlite3.OperationalError:  # not there yet, or its schema is being written
        return 0


def _candidates(db: Path) -> dict[tuple, list[str]]:
    with sqlite3.connect(db) as con:
        return {(task, policy, seed): [h for (h,) in con.execute(
                    "SELECT hash FROM candidates WHERE run_id = ? ORDER BY id", (run_id,))]
                for run_id, task, policy, seed in con.execute("SELECT id, task, policy, seed FROM runs")}


def test_ray_bench_without_ray_is_a_one_line_error(monkeypatch, tmp_path: Path):
    from typer.testing import CliRunner

    from kernelband.cli import main  # noqa: F401  (registers the commands)
    from kernelband.cli.app import app

    monkeypatch.setattr(raybench, "ray", None)
    result = CliRunner().invoke(app, [*BENCH_ARGS, "--db", str(tmp_path / "b.db"), "--ray", "auto"])
    assert result.exit_code == 2
    assert 'pip install "kernelband[ray]"' in result.output
    assert "Traceback" not in result.output


def test_a_cluster_of_several_gpu_models_is_refused_unless_one_is_picked():
    def node(i: int, resources: dict) -> dict:
        return {"NodeID": f"{i:06d}ff", "Alive": True, "NodeManagerAddress": "10.0.0.1",
                "Resources": {"CPU": 2.0, **resources}}

    nodes = [node(0, {"GPU": 2.0, "accelerator_type:H100": 1.0}), node(1, {"GPU": 4.0, "accelerator_type:A100": 1.0}),
             node(2, {})]  # a CPU-only node takes no actor on a GPU cluster
    with pytest.raises(UserError, match="several GPU models"):
        raybench.plan_nodes(nodes, None, 1)
    slots, gpus = raybench.plan_nodes(nodes, "A100", 1)
    assert gpus and [(s.node_id, s.actors, s.model) for s in slots] == [("000001ff", 4, "A100")]
    with pytest.raises(UserError, match="no node of the Ray cluster has it"):
        raybench.plan_nodes(nodes, "L4", 1)
    # a `gpu_model:` resource given to `ray start` names the model before Ray's accelerator_type does
    named = [node(0, {"GPU": 1.0, "gpu_model:NVIDIA H100": 1.0, "accelerator_type:H100": 1.0}),
             node(1, {"GPU": 1.0, "gpu_model:NVIDIA H100": 1.0})]
    assert len(raybench.plan_nodes(named, None, 1)[0]) == 2
    cpu = [node(0, {}), node(1, {})]
    assert [s.actors for s in raybench.plan_nodes(cpu, None, 2)[0]] == [1, 1]


class _Lost(Exception):
    """Stands in for RayActorError."""


class _Ref:
    def __init__(self, event: dict, lost: bool) -> None:
        self.event, self.lost = event, lost


class _FakeRay:
    """What `_drive` asks of Ray: the first call in flight answers first."""

    @staticmethod
    def wait(refs: list, num_returns: int, timeout: float):
        return refs[:1], refs[1:]

    @staticmethod
    def get(ref: _Ref) -> dict:
        if ref.lost:
            raise _Lost("actor died")
        return ref.event


class _Actor:
    def __init__(self, index: int, dealt: list, dies: bool = False) -> None:
        self.index, self.dealt, self.dies = index, dealt, dies
        self.run = self  # actor.run.remote(job)

    def remote(self, job: dict) -> _Ref:
        self.dealt.append((self.index, job["task"]))
        lost, self.dies = self.dies, False  # its first call dies with it
        return _Ref({"kind": "job_done", **job}, lost)


def test_ray_bench_ends_every_train_run_before_a_test_run_starts(monkeypatch):
    """As the local bench: the test tasks start from all that the train tasks taught; an actor lost among the
    train runs gets no test run, and its run is done by another."""
    from kernelband.bench import Job
    from kernelband.tasks.split import side

    monkeypatch.setattr(raybench, "ray", _FakeRay)
    monkeypatch.setattr(raybench, "RayActorError", _Lost, raising=False)
    monkeypatch.setattr(raybench, "RayTaskError", RuntimeError, raising=False)
    tasks = ["tritonbench:add_value", "tritonbench:triton_softmax", "examples:softmax", "examples:vector_add"]
    assert [side(t) for t in tasks] == ["train", "train", "test", "test"]
    by_task = {t: [Job(t, "random", seed) for seed in (0, 1)] for t in tasks}
    dealt: list[tuple[int, str]] = []
    events: list[dict] = []
    actors = [_Actor(0, dealt), _Actor(1, dealt, dies=True)]
    result = raybench.RayResult(1)
    raybench._drive_phases(actors, ["a", "b"], by_task, 2, events.append, result)
    done = [(e["task"], e["seed"]) for e in events if e["kind"] == "job_done"]
    assert sorted(done) == sorted((t, s) for t in tasks for s in (0, 1))  # each once, the lost one again
    started = [side(e["task"]) for e in events if e["kind"] in ("job_started", "job_done")]
    assert started == sorted(started, key=lambda s: s != "train")
    assert [i for i, task in dealt if side(task) == "test"] == [0] * 4  # the lost actor gets none
    assert any(e["kind"] == "actor_lost" for e in events)


@pytest.mark.ray
@pytest.mark.xdist_group("ray-cluster")  # one cluster at a time on this machine
@pytest.mark.slow
def test_a_two_node_cluster_runs_the_same_runs_as_the_local_bench(cluster_of, evaluator, tmp_path: Path):
    local_db, ray_db = tmp_path / "local.db", tmp_path / "ray.db"
    Bench(Store(local_db), _config(), [evaluator], RewriterProposer, runs_per_gpu=1).run()

    # both nodes of one named model, picked by name: the actors ask for the model's resource
    cluster, _ = cluster_of({"gpu_model:A": 1}, {"gpu_model:A": 1})
    _connect(cluster)
    events: list[dict] = []
    store = Store(ray_db)
    result = raybench.ray_bench(store, _config(), cluster.address, ProposerChoice("rewrite"),
                                on_event=events.append, runs_per_actor=1, interpreter=True, gpu_model="A")
    assert store.bench(result.bench_id)["status"] == "done"
    assert len(result.nodes) == 2 and sorted(result.done_per_node.values()) == [1, 1]  # a run on each node
    assert {e["node"] for e in events if e["kind"] == "job_done"} == {n.label for n in result.nodes}
    _assert_each_run_once_and_whole(ray_db)
    assert _candidates(ray_db) == _candidates(local_db)  # the same candidates for the same seeds


@pytest.mark.ray
@pytest.mark.xdist_group("ray-cluster")  # one cluster at a time on this machine
@pytest.mark.slow
def test_a_node_lost_mid_bench_has_its_run_dealt_again_and_done_once(cluster_of, tmp_path: Path):
    cluster, nodes = cluster_of({}, {})
    _connect(cluster)
    db = tmp_path / "ray.db"
    head = cluster.head_node.node_id
    worker = nodes[1]
    events: list[dict] = []
    removed = threading.Event()

    def remove_when_its_run_is_stored(policy: str) -> None:
        # the run has begun on the worker (its row is stored) and has not finished: the node goes
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline:
            with sqlite3.connect(db) as con:
                if con.execute("SELECT 1 FROM runs WHERE policy = ?", (policy,)).fetchone():
                    break
            time.sleep(0.05)
        cluster.remove_node(worker)
        removed.set()

    def on_event(event: dict) -> None:
        events.append(event)
        if event["kind"] == "job_started" and head[:6] not in event["node"] and not removed.is_set():
            threading.Thread(target=remove_when_its_run_is_stored, args=(event["policy"],), daemon=True).start()

    store = Store(db)
    result = raybench.ray_bench(store, _config(), cluster.address, ProposerChoice("rewrite"), on_event=on_event,
                                runs_per_actor=1, interpreter=True)
    assert store.bench(result.bench_id)["status"] == "done"
    assert removed.is_set()
    lost = [e for e in events if e["kind"] == "actor_lost"]
    assert len(lost) == 1 and head[:6] not in lost[0]["node"]
    assert all(head[:6] in e["node"] for e in events if e["kind"] == "job_done")  # the survivor did both
    _assert_each_run_once_and_whole(db)


@pytest.mark.ray
@pytest.mark.xdist_group("ray-cluster")  # one cluster at a time on this machine
@pytest.mark.slow
def test_a_driver_killed_mid_bench_is_resumed_to_the_end(cluster_of, tmp_path: Path):
    cluster, _ = cluster_of({}, {})
    db = tmp_path / "ray.db"
    args = [sys.executable, "-m", "kernelband", *BENCH_ARGS, "--db", str(db), "--ray", cluster.address]
    driver = subprocess.Popen(args, env=process_env(), stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + 300
        while time.monotonic() < deadline and driver.poll() is None:
            if _stored_candidates(db):
                break  # a run has stored some of its work
            time.sleep(0.05)
        assert driver.poll() is None, "the bench ended before the driver could be killed"
    finally:
        driver.send_signal(signal.SIGKILL)
        driver.wait()
    assert [s for *_, s in _runs(db)].count("done") < 2
    again = subprocess.run([sys.executable, "-m", "kernelband", "bench", "--resume", "1", "--db", str(db),
                            "--interpreter", "--runs-per-gpu", "1", "--ray", cluster.address],
                           env=process_env(), capture_output=True, text=True, timeout=600)
    assert again.returncode == 0, again.stderr[-2000:]
    _assert_each_run_once_and_whole(db)
    assert Store(db).bench(1)["status"] == "done"


@pytest.mark.ray
@pytest.mark.xdist_group("ray-cluster")  # one cluster at a time on this machine
def test_a_cluster_of_two_gpu_models_is_refused_before_anything_runs(cluster_of, tmp_path: Path):
    from typer.testing import CliRunner

    from kernelband.cli import main  # noqa: F401  (registers the commands)
    from kernelband.cli.app import app

    cluster, _ = cluster_of({"gpu_model:A": 1}, {"gpu_model:B": 1})
    _connect(cluster)
    db = tmp_path / "ray.db"
    result = CliRunner().invoke(app, [*BENCH_ARGS, "--db", str(db), "--ray", cluster.address])
    assert result.exit_code == 2
    assert "several GPU models (A, B)" in result.output and "--gpu-model" in result.output
    assert not db.exists() or Store(db).benches() == []  # refused before a bench was stored
    import ray

    slots, _ = raybench.plan_nodes(ray.nodes(), "B", 1)
    assert [s.model for s in slots] == ["B"]
