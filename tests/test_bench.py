"""`kernelband bench` in the interpreter: every task x policy x seed lands in one database, a kernel that
several runs reach is evaluated once, k0 is a stored golden baseline, and a resumed sweep redoes nothing."""

from __future__ import annotations

import dataclasses
import json
import os
import sqlite3
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest
from invoke import invoke, process_env

from kernelband.bench import Bench, BenchConfig, Job, SharedEvaluations, deal
from kernelband.proposers.rewriter.proposer import RewriterProposer
from kernelband.store import Store
from kernelband.tasks import load_task


class Standin:
    """The evaluator of a bench whose jobs are all done already: it is never asked to evaluate."""

    def __init__(self) -> None:
        self.kept: int | None = None

    def keep_references(self, tasks: int) -> None:
        self.kept = tasks


class Fingerprinted:
    """The evaluator of a bench that only looks up stored evaluations: it names its GPU and software."""

    def fingerprint(self, task):
        return {"gpu": "H100", "driver": "1", "triton": "3"}


def _cli(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "kernelband", *args], capture_output=True, text=True,
                          timeout=900, env=process_env())


@pytest.mark.slow
def test_bench_sweep_shares_evaluations_and_resumes(tmp_path: Path):
    db = tmp_path / "bench.db"
    # one run at a time, so that which run reuses which evaluation does not depend on which finishes first
    proc = _cli("bench", "--suite", "examples", "--tasks", "vector_add", "--policies", "greedy,bon",
                "-n", "1", "--seeds", "0,3", "--proposer", "rewrite", "--db", str(db), "--json",
                "--runs-per-gpu", "1")
    assert proc.returncode == 0, proc.stderr[-2000:]
    out = json.loads(proc.stdout)
    runs = out["runs"]
    assert sorted((r["policy"], r["seed"]) for r in runs) == [("bon", 0), ("bon", 3), ("greedy", 0), ("greedy", 3)]
    assert all(r["task"] == "examples:vector_add" and r["status"] == "done" for r in runs)
    assert out["errors"] == []

    store = Store(db)
    assert store.bench(out["bench_id"])["config"]["policies"] == ["greedy", "bon"]
    with sqlite3.connect(db) as con:
        made = con.execute("SELECT COUNT(*) FROM evaluations").fetchone()[0]
        notes = [json.loads(r[0]) for r in con.execute("SELECT result FROM evaluations")]
    # Four runs share one k0: it is measured once and stored as the golden baseline, the others reuse it.
    texts = [" ".join(n.get("notes", [])) for n in notes]
    assert sum("golden baseline reused" in t for t in texts) >= 3
    # greedy and bon both expand k0 with the same rewriter: a child they both reach (seed 3: BLOCK_SIZE
    # 128 -> 32) is evaluated once.
    assert any("evaluation reused" in t for t in texts)

    again = invoke("bench", "--resume", str(out["bench_id"]), "--db", str(db), "--json")
    assert again.returncode == 0, again.stderr[-2000:]
    assert again.stderr.count("finished earlier") == 4  # every run skipped
    with sqlite3.connect(db) as con:
        assert con.execute("SELECT COUNT(*) FROM evaluations").fetchone()[0] == made


def test_a_bench_without_a_strategies_file_keeps_the_catalogue_it_began_with(monkeypatch):
    """The built-in catalogue is stored when the bench begins: a resume after it changed (a new rewrite in
    `tiling`, say) runs the strategies the bench's first runs had."""
    from kernelband.search import strategies

    config = BenchConfig("examples", ["greedy"], [0], strategies=BenchConfig.strategies_from(None))
    began = [(s.name, s.rewrites) for s in strategies.builtin_strategies()]
    changed = tuple(dataclasses.replace(s, rewrites=s.rewrites + ("a_new_rewrite",)) for s in strategies.BUILTIN)
    monkeypatch.setattr(strategies, "BUILTIN", changed)
    resumed = BenchConfig(**json.loads(json.dumps(config.to_dict())))  # as stored and read back
    assert [(s.name, s.rewrites) for s in resumed.strategy_list()] == began


@pytest.mark.slow
def test_a_bench_keeps_the_strategies_and_no_baselines_it_began_with(tmp_path: Path):
    db, spec = tmp_path / "bench.db", tmp_path / "s.toml"
    spec.write_text('replace_all = true\n[[strategies]]\nname = "tiling"\ndescription = "Coarsen only."\n'
                    'target = "SM"\nrewrites = ["coarsen"]\n')
    proc = _cli("bench", "--suite", "examples", "--tasks", "vector_add", "--policies", "greedy", "-n", "1",
                "--seeds", "1", "--proposer", "rewrite", "--strategies", str(spec), "--db", str(db), "--json",
                "--no-baselines")
    assert proc.returncode == 0, proc.stderr[-2000:]
    bench_id = json.loads(proc.stdout)["bench_id"]
    config = Store(db).bench(bench_id)["config"]
    assert [(s["name"], s["rewrites"]) for s in config["strategies"]] == [("tiling", ["coarsen"])]
    # --no-baselines reaches the evaluator (its reason, not the interpreter's) and the bench keeps it
    [run] = Store(db).runs(bench_id)
    assert config["baselines"] is False and "not asked for" in run.summary["vs_compile_skipped"]
    kept_off = invoke("bench", "--resume", str(bench_id), "--db", str(db), "--no-baselines")
    assert kept_off.returncode == 2 and "--no-baselines with --resume" in kept_off.stderr
    with sqlite3.connect(db) as con:
        made = con.execute("SELECT strategy, rationale FROM candidates WHERE id > 0").fetchall()
    assert len(made) == 1 and all(st == "tiling" and why.startswith("coarsen:") for st, why in made), made
    # a resume takes the bench's strategies; another file is refused, not mixed in
    again = invoke("bench", "--resume", str(bench_id), "--db", str(db), "--strategies", str(spec))
    assert again.returncode == 2 and "keeps the strategies it began with" in again.stderr
    assert "Traceback" not in again.stderr


@pytest.mark.slow
def test_bench_rejects_a_task_outside_the_suite(tmp_path: Path):
    proc = _cli("bench", "--suite", "examples", "--tasks", "no_such_kernel", "--policies", "random",
                "--db", str(tmp_path / "b.db"))
    assert proc.returncode == 2
    assert proc.stderr.strip().splitlines()[-1].endswith("not in suite examples: no_such_kernel")


def test_a_resume_of_some_policies_leaves_the_bench_unfinished(tmp_path: Path):
    """Resuming a sweep with a subset of its policies (as the GPU sessions do, one policy at a time) must not
    mark the bench done while other planned runs are missing."""
    store = Store(tmp_path / "b.db")
    config = BenchConfig("examples", ["greedy", "bon"], [0], 2, tasks=["examples:vector_add"])
    bench_id = store.create_bench(config.suite, config.to_dict())
    key = load_task("examples:vector_add").key
    run = store.create_run("examples:vector_add", key, "greedy", "rewrite", 0, {}, bench_id=bench_id)
    store.finish_run(run, "done", {})
    subset = BenchConfig("examples", ["greedy"], [0], 2, tasks=["examples:vector_add"])
    events = []
    # Its only job is done already, so the evaluator is never used.
    bench = Bench(store, subset, [Standin()], RewriterProposer, bench_id=bench_id, on_event=events.append)
    assert bench.run() == bench_id
    assert [e["kind"] for e in events] == ["job_skipped"]
    assert store.bench(bench_id)["status"] == "running"

    other = store.create_run("examples:vector_add", key, "bon", "rewrite", 0, {}, bench_id=bench_id)
    store.finish_run(other, "done", {})
    bench.run()
    assert store.bench(bench_id)["status"] == "done"


class OtherGpu(Standin):
    """The evaluator of a machine with another GPU than the one the bench was measured on."""

    def fingerprint(self, task) -> dict:
        return {"gpu": "NVIDIA H100 80GB HBM3", "driver": "580", "triton": "3.6.0"}

    def evaluate(self, *args, **kwargs):
        raise AssertionError("a bench resumed on another GPU model evaluated a kernel")


def test_a_bench_is_not_resumed_on_another_gpu_model(tmp_path: Path):
    """Bench 3's first policy ran on an H200; its other policies on an H100 would compare GPUs as well as
    policies. The resume stops at the first run it would start, with a one-line error; nothing is stored."""
    from kernelband.errors import SetupError

    store = Store(tmp_path / "b.db")
    config = BenchConfig("examples", ["greedy", "bon"], [0], 2, tasks=["examples:vector_add"])
    bench_id = store.create_bench(config.suite, config.to_dict())
    key = load_task("examples:vector_add").key
    run = store.create_run("examples:vector_add", key, "greedy", "rewrite", 0, {}, bench_id=bench_id)
    store.set_device(run, "NVIDIA H200")
    store.finish_run(run, "done", {})
    bench = Bench(store, config, [OtherGpu()], RewriterProposer, bench_id=bench_id)
    with pytest.raises(SetupError, match=r"^bench \d+ was measured on NVIDIA H200 and this GPU is NVIDIA H100"):
        bench.run()
    assert [r.policy for r in store.runs(bench_id)] == ["greedy"]
    assert store.bench(bench_id)["status"] == "running"


def test_a_bench_in_phases_keeps_its_whole_plan(tmp_path: Path):
    """`policies_now` runs some of a bench's policies (the GPU sessions: every task with kernelband first):
    the bench stays planned for all of them and is done only when all are; a policy outside the plan is
    refused."""
    from kernelband.errors import UserError

    store = Store(tmp_path / "b.db")
    config = BenchConfig("examples", ["greedy", "bon"], [0], 2, tasks=["examples:vector_add"])
    bench_id = store.create_bench(config.suite, config.to_dict())
    key = load_task("examples:vector_add").key
    store.finish_run(store.create_run("examples:vector_add", key, "greedy", "rewrite", 0, {}, bench_id=bench_id),
                     "done", {})
    events = []
    phase = Bench(store, config, [Standin()], RewriterProposer, bench_id=bench_id, on_event=events.append,
                  policies_now=["greedy"])
    phase.run()
    assert [(e["kind"], e["policy"]) for e in events] == [("job_skipped", "greedy")]  # bon not started
    assert store.bench(bench_id)["status"] == "running"
    assert store.bench(bench_id)["config"]["policies"] == ["greedy", "bon"]
    with pytest.raises(UserError, match="not among the bench's policies"):
        Bench(store, config, [Standin()], RewriterProposer, bench_id=bench_id, policies_now=["beam"])


def test_a_bench_can_run_some_of_its_tasks_first_in_a_given_order(tmp_path: Path):
    """`tasks_now` runs only the named tasks of a bench's plan, in the order given, not the suite's (a GPU
    session too short for the plan takes the telling tasks first); the plan keeps every task, and a task
    outside it is refused."""
    from kernelband.errors import UserError

    store = Store(tmp_path / "b.db")
    names = ["examples:vector_add", "examples:softmax", "examples:transpose"]
    config = BenchConfig("examples", ["greedy"], [0], 2, tasks=names)
    bench_id = store.create_bench(config.suite, config.to_dict())
    for name in names:
        key = load_task(name).key
        store.finish_run(store.create_run(name, key, "greedy", "rewrite", 0, {}, bench_id=bench_id), "done", {})
    events = []
    # Every job is done already, so the evaluator is never used; the events give the order.
    Bench(store, config, [Standin()], RewriterProposer, bench_id=bench_id, on_event=events.append,
          runs_per_gpu=1, tasks_now=["transpose", "examples:vector_add"]).run()
    assert [e["task"] for e in events] == ["examples:transpose", "examples:vector_add"]
    assert store.bench(bench_id)["config"]["tasks"] == names
    with pytest.raises(UserError, match="not among the bench's tasks: examples:matmul"):
        Bench(store, config, [Standin()], RewriterProposer, bench_id=bench_id, tasks_now=["examples:matmul"])


def _one_run(tmp_path: Path):
    """A bench of examples:vector_add that only looks up stored evaluations, and one run of it to store them in:
    (store, bench, task, run id)."""
    store = Store(tmp_path / "bench.db")
    bench = Bench(store, BenchConfig("examples", ["greedy"], [0], tasks=["vector_add"]), [Fingerprinted()],
                  RewriterProposer)
    task = load_task("examples:vector_add")
    run = store.create_run("examples:vector_add", task.key, "greedy", "rewrite", 0, {}, device="H100",
                           bench_id=bench.bench_id)
    return store, bench, task, run


def test_a_stored_speed_of_light_verdict_that_the_task_now_waives_is_measured_again(tmp_path: Path):
    """Within a bench a source's evaluation is reused by every run that reaches it, except a `suspicious` one
    whose only check was a speed-of-light bound the task now calls overcounted (flash_decode2_phi in bench 1
    kept such verdicts from before its waiver): that source is evaluated again, and its newest verdict is the
    one reused afterwards."""
    from kernelband.evaluation.records import EvalResult, Outcome
    from kernelband.search.core import source_hash

    store, bench, task, run = _one_run(tmp_path)
    child = task.module_source + "\n# a child\n"
    h = source_hash(child)
    store.add_candidate(run, 1, child, h, 0, "tiling", 1, 0)
    beat = EvalResult(task=task.key, outcome=Outcome.SUSPICIOUS, speedup=1.4, checks=["speed_of_light"])
    store.add_evaluation(run, 1, "search", beat)

    assert bench._lookup(task, Fingerprinted())(h).outcome == Outcome.SUSPICIOUS  # no waiver: reused
    task = dataclasses.replace(task, bytes_overcounted="the script counts bytes the kernel need not read")
    assert bench._lookup(task, Fingerprinted())(h) is None  # waived: measured again

    again = store.create_run("examples:vector_add", task.key, "bon", "rewrite", 0, {}, device="H100",
                             bench_id=bench.bench_id)
    store.add_candidate(again, 1, child, h, 0, "tiling", 1, 0)
    store.add_evaluation(again, 1, "search", EvalResult(task=task.key, outcome=Outcome.OK, speedup=1.4))
    reused = bench._lookup(task, Fingerprinted())(h)
    assert reused.outcome == Outcome.OK and any("evaluation reused" in n for n in reused.notes)


def test_a_stored_sol_fraction_of_a_bound_that_bounds_nothing_is_measured_again(tmp_path: Path):
    """An evaluation stored with a SOL fraction on a shape whose data bound even the reference beats (1.37 of
    it: flash_decode2_phi, run AP) is evaluated again, so that the medians never take it; one whose fraction is
    a true one is reused."""
    from kernelband.evaluation.records import EvalResult, Outcome, ShapeResult
    from kernelband.search.core import source_hash

    store, bench, task, run = _one_run(tmp_path)
    hashes = []
    for i, (cand_ms, ref_ms) in enumerate([(0.073, 0.077), (0.2, 0.21)], start=1):  # bound 0.1 ms
        child = task.module_source + f"\n# child {i}\n"
        hashes.append(source_hash(child))
        shape = ShapeResult(0, "n=1", False, correct=True, ref_ms=ref_ms, cand_ms=cand_ms, data_bound_ms=0.1,
                            bound_ms=0.1, sol_fraction=0.1 / cand_ms)
        store.add_candidate(run, i, child, hashes[-1], 0, "tiling", 1, 0)
        store.add_evaluation(run, i, "search", EvalResult(task=task.key, outcome=Outcome.OK, speedup=1.05,
                                                          shapes=[shape]))
    lookup = bench._lookup(task, Fingerprinted())
    assert lookup(hashes[0]) is None  # 1.37 of a bound the reference beats too: measured again
    kept = lookup(hashes[1])  # a true fraction: reused
    assert kept is not None and kept.shapes[0].sol_fraction == pytest.approx(0.5)


def test_a_stored_out_of_memory_error_is_reused_only_if_it_came_with_the_gpu_alone(tmp_path: Path):
    """Before the evaluator tried a candidate that ran out of GPU memory again with the GPU alone, such an
    error may have been the other evaluations' doing: that source is evaluated again. One that ran out of
    memory alone too (`retried_alone`) is the candidate's own verdict and is reused."""
    from kernelband.evaluation.records import ALONE_NOTE, EvalResult, Outcome
    from kernelband.search.core import source_hash

    store, bench, task, run = _one_run(tmp_path)
    error = "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 1.00 GiB"
    sources = {}
    for i, notes in enumerate(([], [ALONE_NOTE.format(first=error, closed=0)]), 1):
        child = task.module_source + f"\n# child {i}\n"
        sources[i] = source_hash(child)
        store.add_candidate(run, i, child, sources[i], 0, "tiling", 1, 0)
        store.add_evaluation(run, i, "search", EvalResult(task=task.key, outcome=Outcome.RUNTIME_ERROR,
                                                          error=error, detail=error, notes=notes,
                                                          retried_alone=bool(notes)))
    lookup = bench._lookup(task, Fingerprinted())
    assert lookup(sources[1]) is None
    assert lookup(sources[2]).outcome == Outcome.RUNTIME_ERROR


def test_evaluations_stored_under_other_evaluator_rules_are_not_reused(tmp_path: Path):
    """A sweep reuses a source's stored evaluation, and k0's golden baseline, only when the evaluator's rules
    (`records.RULES`) are the ones it was judged by; evaluations stored before the stamp load as rules 1."""
    from kernelband.evaluation.records import RULES, EvalResult, Outcome
    from kernelband.search.core import source_hash

    class Evaluator:
        measured = 0

        def fingerprint(self, task):
            return {"gpu": "H100", "driver": "1", "triton": "3"}

        def evaluate(self, task, source, preset="default"):
            Evaluator.measured += 1
            return EvalResult(task=task.key, outcome=Outcome.OK, speedup=1.0)

    store = Store(tmp_path / "bench.db")
    bench = Bench(store, BenchConfig("examples", ["greedy"], [0], tasks=["vector_add"]), [Evaluator()],
                  RewriterProposer)
    task = load_task("examples:vector_add")
    child = task.module_source + "\n# a child\n"
    run = store.create_run("examples:vector_add", task.key, "greedy", "rewrite", 0, {}, device="H100",
                           bench_id=bench.bench_id)
    store.add_candidate(run, 1, child, source_hash(child), 0, "tiling", 1, 0)
    store.add_evaluation(run, 1, "search", EvalResult(task=task.key, outcome=Outcome.OK, speedup=1.3,
                                                      rules=RULES + 1))
    store.save_baseline("H100", "1", "3", task.key, "default",
                        EvalResult(task=task.key, outcome=Outcome.OK, speedup=1.0, rules=RULES + 1))
    lookup = bench._lookup(task, Evaluator())

    assert lookup(source_hash(child)) is None  # judged by other rules: evaluated again
    assert lookup(source_hash(task.module_source)).rules == RULES and Evaluator.measured == 1  # baseline again
    assert lookup(source_hash(task.module_source)).notes[-1].startswith("golden baseline reused")
    assert Evaluator.measured == 1  # the fresh baseline replaced the stale one

    with sqlite3.connect(tmp_path / "bench.db") as con:  # a result stored before the stamp existed
        raw = json.loads(con.execute("SELECT result FROM evaluations").fetchone()[0])
        del raw["rules"]
        con.execute("UPDATE evaluations SET result = ?", (json.dumps(raw),))
    assert (lookup(source_hash(child)) is not None) == (RULES == 1)


def test_a_quarantine_sets_aside_what_was_measured_in_the_window_and_the_bench_measures_it_again(tmp_path: Path):
    """When the GPU was not a bench's alone for a while (a second sweep on the same GPU), `Store.quarantine`
    moves the bench's runs with an evaluation in that window, whole, to a quarantined bench, quarantines a
    bench created in the window, and drops the baselines measured in it; the bench's other runs stay, its
    resume plans the moved tasks again, and a quarantined bench cannot be resumed."""
    import time

    from kernelband.errors import UserError
    from kernelband.evaluation.records import EvalResult, Outcome

    store = Store(tmp_path / "b.db")
    names = ["examples:vector_add", "examples:softmax"]
    config = BenchConfig("examples", ["greedy"], [0], 2, tasks=names)
    bench_id = store.create_bench(config.suite, config.to_dict())
    keys = {n: load_task(n).key for n in names}
    before = store.create_run(names[0], keys[names[0]], "greedy", "rewrite", 0, {}, bench_id=bench_id)
    store.add_evaluation(before, 0, "search", EvalResult(task=keys[names[0]], outcome=Outcome.OK, speedup=1.0))
    store.finish_run(before, "done", {})
    store.save_baseline("H200", "1", "3", keys[names[0]], "default", EvalResult(task="k", outcome=Outcome.OK))
    time.sleep(0.05)
    since = time.time()
    inside = store.create_run(names[1], keys[names[1]], "greedy", "rewrite", 0, {}, bench_id=bench_id)
    store.add_evaluation(inside, 0, "search", EvalResult(task=keys[names[1]], outcome=Outcome.OK, speedup=1.3))
    store.save_baseline("H200", "1", "3", keys[names[1]], "default", EvalResult(task="k", outcome=Outcome.OK))
    intruder = store.create_bench(config.suite, config.to_dict())

    done = store.quarantine(bench_id, since, None, "a second sweep on the GPU")
    assert done["runs"] == [inside] and done["benches"] == [intruder] and done["baselines"] == 1
    assert [r.id for r in store.runs(bench_id)] == [before]
    assert [r.id for r in store.runs(done["bench"])] == [inside]
    aside = store.bench(done["bench"])
    assert aside["status"] == "quarantined" and aside["config"]["quarantined_from"] == bench_id
    assert aside["config"]["window"]["reason"] == "a second sweep on the GPU"
    assert store.bench(intruder)["status"] == "quarantined"
    assert store.baseline("H200", "1", "3", keys[names[0]], "default") is not None
    assert store.baseline("H200", "1", "3", keys[names[1]], "default") is None
    assert store.evaluation(inside, 0).speedup == 1.3  # set aside, not deleted

    # Resuming the bench finds no run of the moved task in it, so that task starts anew.
    assert store.find_run(keys[names[1]], "greedy", "rewrite", 0, bench_id) is None
    assert store.find_run(keys[names[0]], "greedy", "rewrite", 0, bench_id).id == before
    for quarantined in (done["bench"], intruder):
        with pytest.raises(UserError, match="is quarantined"):
            Bench(store, config, [Standin()], RewriterProposer, bench_id=quarantined)
    with pytest.raises(UserError, match="is quarantined already"):
        store.quarantine(done["bench"], since, None, "again")


def test_a_bench_keeps_one_reference_per_run_in_flight_and_one_more(tmp_path: Path):
    """With fewer task references kept than runs in flight, each evaluation closed another task's idle
    reference and the next evaluation of that task set it up again (run Y: 5 runs, 4 kept, 3.8 set-ups a
    minute): a bench asks each evaluator to keep runs_per_gpu + 1."""
    store = Store(tmp_path / "b.db")
    config = BenchConfig("examples", ["greedy"], [0], 2, tasks=["examples:vector_add"])
    bench_id = store.create_bench(config.suite, config.to_dict())
    key = load_task("examples:vector_add").key
    store.finish_run(store.create_run("examples:vector_add", key, "greedy", "rewrite", 0, {}, bench_id=bench_id),
                     "done", {})
    evaluators = [Standin(), Standin()]
    Bench(store, config, evaluators, RewriterProposer, bench_id=bench_id, runs_per_gpu=5).run()
    assert [ev.kept for ev in evaluators] == [6, 6]


def test_the_pool_keeps_at_least_what_it_is_asked_to(tmp_path: Path):
    """`Evaluator.keep_references` raises the pool's number of idle references kept, never lowers it."""
    from kernelband.evaluation.evaluator import Evaluator

    with Evaluator(mode="interpreter", warm=0) as ev:
        before = ev.pool._max_references
        ev.keep_references(before + 3)
        assert ev.pool._max_references == before + 3
        ev.keep_references(1)
        assert ev.pool._max_references == before + 3


def test_bench_resume_runs_the_tasks_named_now_and_refuses_one_outside_the_plan(tmp_path: Path):
    """`kernelband bench --resume N --tasks-now ...`: the named tasks only, in that order; a task outside the
    bench's plan is a one-line error, exit 2."""
    db = tmp_path / "b.db"
    store = Store(db)
    names = ["examples:vector_add", "examples:transpose"]
    config = BenchConfig("examples", ["greedy"], [0], 2, tasks=names)
    bench_id = store.create_bench(config.suite, config.to_dict())
    for name in names:
        run = store.create_run(name, load_task(name).key, "greedy", "rewrite", 0, {}, bench_id=bench_id)
        store.finish_run(run, "done", {})
    store.close()
    now = _cli("bench", "--resume", str(bench_id), "--tasks-now", "transpose", "--db", str(db), "--interpreter")
    assert now.returncode == 0, now.stderr[-2000:]
    assert now.stderr.count("finished earlier") == 1 and "transpose" in now.stderr and "vector_add" not in now.stderr
    bad = invoke("bench", "--resume", str(bench_id), "--tasks-now", "matmul", "--db", str(db), "--interpreter")
    assert bad.returncode == 2 and "Traceback" not in bad.stderr
    assert bad.stderr.strip().splitlines()[-1].endswith("not among the bench's tasks: matmul")


def test_a_bench_stops_at_an_llm_endpoint_that_cannot_be_reached(tmp_path: Path):
    """Every run would fail the same way, so the sweep stops at the first (exit 2, one line) instead of
    setting up every task to fail it; the bench stays unfinished, to resume once the endpoint is right."""
    import socket

    with socket.socket() as sock:  # a port on this host where nothing listens
        sock.bind(("127.0.0.1", 0))
        url = f"http://127.0.0.1:{sock.getsockname()[1]}/v1"
    # no retries: the client's backoff between them would only delay the same verdict
    env = dict(os.environ, KERNELBAND_MODE="interpreter", KERNELBAND_LLM_BASE_URL=url, KERNELBAND_LLM_MODEL="m",
               KERNELBAND_LLM_RETRIES="0")
    db = tmp_path / "b.db"
    proc = subprocess.run([sys.executable, "-m", "kernelband", "bench", "--suite", "examples", "--policies",
                           "greedy,random", "--iterations", "1", "--seeds", "1", "--tasks", "vector_add,softmax",
                           "--runs-per-gpu", "1", "--db", str(db)], capture_output=True, text=True, timeout=600,
                          env=env)
    assert proc.returncode == 2, proc.stderr[-2000:]
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: cannot reach the LLM endpoint at "), proc.stderr
    store = Store(db)
    [bench] = store.benches()
    assert bench["status"] == "running"
    assert len(store.runs(bench["id"])) == 1  # the first run met it; no other was started


def _jobs(task: str, policies: str) -> list[Job]:
    return [Job(task, p, 0) for p in policies]


def test_a_sweep_deals_each_task_to_the_gpu_with_the_fewest_open_runs_and_takes_its_tasks_in_turn():
    """A task's runs stay on one GPU, but they no longer run one after another on one thread: a GPU's runs in
    flight take its tasks in turn (run AF: 8 tasks with 5 runs left each would have taken 5 runs in a row)."""
    done = {("b", "1", 0), ("b", "2", 0), ("b", "3", 0)}  # b has 2 runs open
    queues = deal([_jobs("a", "12345"), _jobs("b", "12345"), _jobs("c", "1")], 2,
                  lambda j: (j.task, j.policy, j.seed) not in done)
    # a (5 open) to GPU 0; b (2 open) to GPU 1; c to GPU 1, which has fewer open runs (2 against 5)
    assert [j.task + j.policy for j in queues[0]] == ["a1", "a2", "a3", "a4", "a5"]
    assert [j.task + j.policy for j in queues[1]] == ["b1", "c1", "b2", "b3", "b4", "b5"]


def test_a_gpu_that_has_run_its_share_takes_runs_from_the_end_of_the_longest_queue(tmp_path: Path):
    store = Store(tmp_path / "b.db")
    bench = Bench(store, BenchConfig("examples", ["greedy"], [0], tasks=["vector_add"]), [Standin(), Standin()],
                  RewriterProposer)
    bench._queues = deal([_jobs("a", "1234"), _jobs("c", "1")], 2, lambda j: True)
    taken = [bench._next(1) for _ in range(3)]
    assert [j.task + j.policy for j in taken] == ["c1", "a4", "a3"]
    assert [j.task + j.policy for j in iter(lambda: bench._next(0), None)] == ["a1", "a2"]


def test_runs_of_one_task_that_start_together_measure_its_baseline_once(tmp_path: Path):
    from kernelband.evaluation.records import EvalResult, Outcome

    class Slow:
        def __init__(self) -> None:
            self.calls = 0

        def fingerprint(self, task):
            return {"gpu": "H100", "driver": "1", "triton": "3"}

        def evaluate(self, task, source, preset=None, **_):
            self.calls += 1
            time.sleep(0.3)
            return EvalResult(task=task.key, outcome=Outcome.OK, speedup=1.0)

    store = Store(tmp_path / "b.db")
    bench = Bench(store, BenchConfig("examples", ["greedy"], [0], tasks=["vector_add"]), [Slow()], RewriterProposer)
    task, ev = load_task("examples:vector_add"), Slow()
    results = []
    runs = [threading.Thread(target=lambda: results.append(bench._baseline(task, ev, ev.fingerprint(task))))
            for _ in range(2)]
    for t in runs:
        t.start()
    for t in runs:
        t.join()
    assert ev.calls == 1
    assert sum(any("golden baseline reused" in n for n in r.notes) for r in results) == 1


def test_runs_in_flight_together_evaluate_a_source_they_both_reach_once():
    """Runs of one task now run side by side (`deal`): a source that two of them evaluate at the same time is
    measured once, and the second takes the first's result, noted as reused. Another source, a re-check
    (`which` other than search) or a different profiling need is evaluated on its own."""
    from kernelband.evaluation.records import EvalResult, Outcome

    class Slow:
        def __init__(self) -> None:
            self.calls: list[tuple] = []

        def evaluate(self, task, source, preset=None, which="search", seed=None, profile=True):
            self.calls.append((source, which, profile))
            time.sleep(0.3)
            return EvalResult(task=task.key, outcome=Outcome.OK, speedup=2.0, notes=[f"seed {seed}"])

        def fingerprint(self, task):
            return {"gpu": "H100"}

    task = load_task("examples:vector_add")
    child = task.module_source + "\n# a child\n"
    ev, in_flight, lock = Slow(), {}, threading.Lock()
    gpus = [SharedEvaluations(ev, in_flight, lock), SharedEvaluations(ev, in_flight, lock)]
    asked = [(gpus[0], child, "search", True), (gpus[1], child, "search", True), (gpus[0], child, "all", True),
             (gpus[1], child, "search", False), (gpus[0], task.module_source, "search", True)]
    results: list = [None] * len(asked)

    def one(i: int) -> None:
        shared, source, which, profile = asked[i]
        results[i] = shared.evaluate(task, source, preset="default", which=which, seed=i, profile=profile)

    runs = [threading.Thread(target=one, args=(i,)) for i in range(len(asked))]
    for t in runs:
        t.start()
    for t in runs:
        t.join()
    assert sorted(ev.calls, key=repr) == sorted([(child, "search", True), (child, "all", True),
                                                 (child, "search", False), (task.module_source, "search", True)],
                                                key=repr)
    firsts = [r for r in results[:2] if SharedEvaluations.NOTE not in r.notes]
    seconds = [r for r in results[:2] if SharedEvaluations.NOTE in r.notes]
    assert len(firsts) == len(seconds) == 1 and seconds[0].speedup == 2.0
    assert firsts[0].notes == seconds[0].notes[:-1]  # the same evaluation; the first run's result untouched
    assert gpus[1].fingerprint(task) == {"gpu": "H100"} and in_flight == {}


def test_a_run_that_breaks_is_a_row_of_errors_and_its_gpu_goes_on_with_the_next(tmp_path: Path, monkeypatch):
    """An exception out of one run (a worker that could not be started, say) is that run's error: the thread
    that ran it takes the GPU's next run, and the sweep ends with every other run done and the error listed."""
    store = Store(tmp_path / "b.db")
    bench = Bench(store, BenchConfig("examples", ["greedy"], [0], tasks=["vector_add"]), [Standin()],
                  RewriterProposer, on_event=lambda event: None)
    ran = []

    def run_job(job, evaluator):
        if job.policy == "1":
            raise RuntimeError("no worker could be started")
        ran.append(job.policy)
        return {"kind": "job_done"}

    monkeypatch.setattr(bench, "run_job", run_job)
    bench._queues = deal([_jobs("a", "123")], 1, lambda j: True)
    bench._drain(0, Standin())
    assert ran == ["2", "3"]
    assert bench.errors == ["a 1 seed 0: RuntimeError: no worker could be started"]
