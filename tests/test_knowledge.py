"""Knowledge carried across kernels (knowledge.py): written per pull, read back by the next runs on the same GPU
model and rules, never from another GPU, other rules or the run's own task."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import pytest
from typer.testing import CliRunner

from kernelband import knowledge
from kernelband.cli import app as app_module
from kernelband.evaluation.records import PHI_KEYS, RULES, EvalResult, Features, Outcome
from kernelband.policies.base import make_policy
from kernelband.search.core import Arm, Candidate, Strategy
from kernelband.store import Store

GPU = "NVIDIA H100 80GB HBM3"
STRATEGIES = [Strategy("tile", "tile for L2 reuse", "L2"), Strategy("vec", "vectorise memory access", "DRAM")]


def cand(cid: int, time: float = 1.0, dram: float = 50.0, ok: bool = True, gpu: str = GPU, rules: int = RULES,
         rationale: str = "", compile_info: dict | None = None) -> Candidate:
    features = Features(phi={k: None for k in PHI_KEYS} | {"dram_bw_pct": dram, "sm_throughput_pct": 40.0})
    features.compile = compile_info or {}
    result = EvalResult(task="synthetic", outcome=Outcome.OK if ok else Outcome.WRONG_OUTPUT,
                        speedup=1.0 / time if ok else None, features=features, device=gpu, rules=rules)
    return Candidate(cid, f"# kernel {cid}", result=result, rationale=rationale)


def teach(store: Store, task_key: str = "other-task", gpu: str = GPU, rules: int = RULES, n: int = 60,
          run_id: int = 1, split: str = "train") -> None:
    """`n` pulls of strategy vec on another kernel: faster exactly when the parent's DRAM counter is high."""
    carry = knowledge.Carry(store, "elsewhere.db", run_id, task_key, split, 0, False)
    rng = np.random.default_rng(3)
    for pull in range(n):
        dram = float(rng.uniform(5, 95))
        parent = cand(0, 1.0, dram, gpu=gpu, rules=rules)
        child = cand(pull + 1, 0.8 if dram > 50 else 1.25, gpu=gpu, rules=rules)
        carry.record(pull + 1, "vec", parent, child)


def psi_of_new_run(store: Store, task_key: str = "this-task", train_only: bool = False,
                   upto: int | None = None) -> tuple[dict, knowledge.Carry]:
    policy = make_policy("kernelband", 0)
    carry = knowledge.Carry(store, str(store.path), 7, task_key, "test",
                            knowledge.cut(store) if upto is None else upto, train_only)
    carry.begin(policy, cand(0))
    high, low = cand(1, dram=90.0), cand(2, dram=10.0)
    pool = [high, low]
    policy.select(pool, STRATEGIES, 1, lambda c, s: True)
    return policy.psi(["vec", "tile"], pool), carry


def test_kernelband_warm_starts_psi_from_other_kernels(tmp_path: Path):
    store = Store(tmp_path / "k.db")
    cold, _ = psi_of_new_run(store)
    assert cold["vec"][1] == pytest.approx(0.5) and cold["vec"][2] == pytest.approx(0.5)
    teach(store)
    warm, carry = psi_of_new_run(store)
    assert carry.carried == 60 and not carry.notes
    assert warm["vec"][1] > 0.7 and warm["vec"][2] < 0.3  # learned before its first pull
    assert warm["tile"][1] == pytest.approx(0.5)  # nothing carried for tile


def test_foreign_gpu_or_rules_and_malformed_rows_are_ignored_with_a_note(tmp_path: Path):
    store = Store(tmp_path / "k.db")
    teach(store, gpu="NVIDIA H200", run_id=1)
    teach(store, rules=RULES - 1, run_id=2)
    store.write("INSERT INTO knowledge_pulls (gpu, rules, origin, run_id, pull, task_key, split, strategy, phi, "
                "profiled, reward, faster, created) "
                "VALUES (?, ?, 'x', 3, 1, 'k', 'train', 'vec', 'not json', 1, 0.5, 1, 0)",
                (GPU, RULES))
    psi, carry = psi_of_new_run(store)
    assert carry.carried == 0
    assert psi["vec"][1] == pytest.approx(0.5)
    assert any("120 examples measured on another GPU model or under other rules" in n and "NVIDIA H200" in n
               for n in carry.notes), carry.notes
    assert any("1 malformed examples ignored" in n for n in carry.notes), carry.notes


def test_a_run_never_carries_its_own_task_nor_rows_after_its_cut(tmp_path: Path):
    store = Store(tmp_path / "k.db")
    teach(store, task_key="this-task")
    psi, carry = psi_of_new_run(store, task_key="this-task")
    assert carry.carried == 0 and psi["vec"][1] == pytest.approx(0.5)
    cut = knowledge.cut(store)
    teach(store, task_key="other", run_id=9)
    _, carry = psi_of_new_run(store, upto=cut)
    assert carry.carried == 0  # written after the run began: a resume replays from the same knowledge
    _, carry = psi_of_new_run(store)
    assert carry.carried == 60


def test_test_tasks_of_a_bench_read_only_what_train_tasks_taught(tmp_path: Path):
    store = Store(tmp_path / "k.db")
    teach(store, split="test")
    _, carry = psi_of_new_run(store, train_only=True)
    assert carry.carried == 0
    teach(store, split="train", run_id=2)
    _, carry = psi_of_new_run(store, train_only=True)
    assert carry.carried == 60


def test_a_replayed_pull_is_written_once(tmp_path: Path):
    store = Store(tmp_path / "k.db")
    carry = knowledge.Carry(store, "runs.db", 1, "t", "train", 0, False)
    for _ in range(2):
        carry.record(1, "vec", cand(0), cand(1, 0.5))
    carry.record(2, "vec", cand(0), None)
    rows = store.query("SELECT pull, reward, faster FROM knowledge_pulls ORDER BY pull")
    assert [(r["pull"], r["faster"]) for r in rows] == [(1, 1), (2, 0)]
    assert rows[0]["reward"] == pytest.approx(0.5) and rows[1]["reward"] == -1.0


def test_each_example_is_committed_as_it_is_written(tmp_path: Path):
    """A process killed with SIGKILL keeps every example it wrote before."""
    db = tmp_path / "k.db"
    script = textwrap.dedent(f"""
        import os, signal, sys
        sys.path.insert(0, {str(Path(__file__).parent)!r})
        from test_knowledge import cand
        from kernelband import knowledge
        from kernelband.store import Store
        carry = knowledge.Carry(Store({str(db)!r}), "runs.db", 1, "t", "train", 0, False)
        for pull in range(1, 4):
            carry.record(pull, "vec", cand(0), cand(pull, 0.9))
        os.kill(os.getpid(), signal.SIGKILL)
    """)
    proc = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120,
                          env=dict(os.environ))
    assert proc.returncode == -signal.SIGKILL, proc.stderr
    assert len(Store(db).query("SELECT * FROM knowledge_pulls")) == 3


def test_masked_policy_takes_each_strategy_s_carried_mean_as_its_prior(tmp_path: Path):
    policy = make_policy("kernelband-masked", 0)
    policy.warm_start([("vec", {}, 0.4), ("vec", {}, 0.2), ("tile", {}, -1.0)])
    assert policy.table.mean(0, "vec") == pytest.approx(0.3)
    assert policy.table.mean(0, "tile") == 0.0  # a failure is reward 0 for the masked variant
    assert policy.table.mean(0, "pipe") == pytest.approx(0.5)  # the release's prior where nothing is known
    policy.update(Arm(0, "vec"), cand(0), cand(1, 0.5))
    assert policy.table.mean(0, "vec") == pytest.approx((0.3 + 0.5) / 2)


def test_variant_families_are_counted_per_parent_load(tmp_path: Path):
    store = Store(tmp_path / "k.db")
    carry = knowledge.Carry(store, "runs.db", 1, "t", "train", 0, False)
    light = {"constexprs": {"BLOCK_SIZE": 64}, "num_warps": 4, "n_spills": 0}
    parent = cand(0, compile_info=light)
    carry.record(1, "vec", parent, cand(1, 0.5, rationale="block_size: BLOCK_SIZE 64 -> 256"))
    carry.record(2, "vec", parent, cand(2, 1.0, rationale="block_size: BLOCK_SIZE 64 -> 128"))
    carry.record(3, "vec", parent, cand(3, 0.5, rationale="an LLM's free text: rewritten"))
    counts = knowledge.variant_counts(store, GPU)
    assert counts == {"families": {"block_size grow": [2, 1]}, "by_load": {"block_size grow|light": [2, 1]}}
    from kernelband.proposers.rewriter.priors import prior
    assert prior("block_size grow", "light", counts) == pytest.approx((1 + 4 * 0.5) / (2 + 4))


def test_psi_accuracy_on_held_back_examples_beats_the_majority_on_a_planted_relation(tmp_path: Path):
    store = Store(tmp_path / "k.db")
    teach(store, n=200)
    loaded = knowledge.load(store, GPU)
    held = [e for e in loaded.examples if knowledge.held_back(e)]
    assert 20 <= len(held) <= 60  # about a fifth, fixed by hash
    row = knowledge.accuracy(loaded.examples)["vec"]
    assert row["examples"] == 200 and row["held_back"] == len(held)
    assert row["psi_accuracy"] > 0.85 and row["psi_accuracy"] > row["majority_accuracy"]


def test_knowledge_command_shows_examples_per_strategy(tmp_path: Path):
    db = tmp_path / "k.db"
    store = Store(db)
    teach(store)
    teach(store, gpu="NVIDIA H200", n=10, run_id=2)
    result = CliRunner().invoke(app_module.app, ["knowledge", "--db", str(db), "--json"])
    assert result.exit_code == 0, result.output
    groups = {g["gpu"]: g for g in json.loads(result.output)["groups"]}
    assert groups[GPU]["strategies"]["vec"]["examples"] == 60
    assert groups["NVIDIA H200"]["examples"] == 10
    text = CliRunner().invoke(app_module.app, ["knowledge", "--db", str(db)])
    assert text.exit_code == 0 and "psi accuracy" in text.output
    missing = CliRunner().invoke(app_module.app, ["knowledge", "--db", str(tmp_path / "none.db")])
    assert missing.exit_code == 2


def test_knowledge_option_refuses_a_missing_database(tmp_path: Path):
    from kernelband.errors import UserError

    assert knowledge.knowledge_option(None) == "" and knowledge.knowledge_option("OFF") == "off"
    with pytest.raises(UserError, match="no such database"):
        knowledge.knowledge_option(str(tmp_path / "nope.db"))


# -- through a whole search ----------------------------------------------------------------------------------
class ScriptedEvaluator:
    """Every kernel is correct; each added line `V_... = 1` makes it 10 % faster than k0."""

    def evaluate(self, task, source, preset=None, which="search", seed=None, profile=True) -> EvalResult:
        return EvalResult(task=task.ref, outcome=Outcome.OK, speedup=1.0 + 0.1 * source.count("V_"), device=GPU,
                          features=Features(phi={k: 50.0 for k in PHI_KEYS}))

    def info(self, task):
        from types import SimpleNamespace
        return SimpleNamespace(entry="entry", shapes=[])


def _search(store: Store, ref: str, knowledge_choice: str = "", bench_id: int | None = None):
    from kernelband.proposers.base import ProposerBase
    from kernelband.search.core import Proposal
    from kernelband.search.loop import RunConfig
    from kernelband.search.session import open_search
    from kernelband.tasks import load_task

    class Appender(ProposerBase):
        name = "scripted"

        def propose(self, parent, strategy, context):
            return Proposal(source=parent.source + f"\nV_{strategy.name}_{parent.id} = 1\n", rationale="scripted")

    return open_search(load_task(ref), ScriptedEvaluator(), store, "kernelband", Appender(), 0,
                       RunConfig(iterations=3, q=2, finalists=1), strategies=STRATEGIES, knowledge=knowledge_choice,
                       bench_id=bench_id)


def test_a_search_writes_its_pulls_and_the_next_kernel_starts_from_them(tmp_path: Path):
    store = Store(tmp_path / "runs.db")
    first = _search(store, "examples:vector_add")
    first.run()
    assert first.knowledge.carried == 0
    rows = store.query("SELECT run_id, pull, split FROM knowledge_pulls ORDER BY pull")
    assert [r["pull"] for r in rows] == [1, 2, 3, 4, 5, 6] and {r["split"] for r in rows} == {"test"}
    second = _search(store, "examples:softmax")
    assert store.run(second.run_id).config["knowledge"]["upto"] == 6
    second.run()
    assert second.knowledge.carried == 6
    again = _search(store, "examples:vector_add")  # its own task's pulls are not carried
    again.run()
    assert again.knowledge.carried == 6  # softmax's only


def test_knowledge_off_writes_and_reads_nothing(tmp_path: Path):
    store = Store(tmp_path / "runs.db")
    search = _search(store, "examples:vector_add", "off")
    search.run()
    assert search.knowledge is None and "knowledge" not in store.run(search.run_id).config
    assert store.query("SELECT COUNT(*) AS n FROM knowledge_pulls")[0]["n"] == 0


def test_knowledge_can_live_in_another_database(tmp_path: Path):
    shared = Store(tmp_path / "shared.db")
    teach(shared)
    store = Store(tmp_path / "runs.db")
    search = _search(store, "examples:vector_add", str(tmp_path / "shared.db"))
    search.run()
    assert search.knowledge.carried == 60
    assert shared.query("SELECT COUNT(*) AS n FROM knowledge_pulls")[0]["n"] == 66
    assert store.query("SELECT COUNT(*) AS n FROM knowledge_pulls")[0]["n"] == 0


def test_pulls_measured_without_the_profiler_teach_rewards_but_not_psi(tmp_path: Path):
    store = Store(tmp_path / "k.db")
    carry = knowledge.Carry(store, "runs.db", 1, "other", "train", 0, False)
    for pull in range(1, 41):
        parent = cand(0, dram=90.0)
        parent.result.ncu_skipped = True  # a greedy or beam run: phi holds the compiler's counters only
        carry.record(pull, "vec", parent, cand(pull, 0.8))
    psi, carried = psi_of_new_run(store)
    assert carried.carried == 40 and psi["vec"][1] == pytest.approx(0.5)
    masked = make_policy("kernelband-masked", 0)
    knowledge.Carry(store, "runs.db", 2, "this", "test", knowledge.cut(store), False).begin(masked, cand(0))
    assert masked.table.mean(0, "vec") == pytest.approx(0.2)


def test_open_carry_reads_train_tasks_only_for_a_bench_s_test_tasks_and_keeps_its_cut(tmp_path: Path):
    store = Store(tmp_path / "runs.db")
    teach(store)
    test_task = knowledge.open_carry(store, "", 5, "examples:softmax", "k", in_bench=True)
    assert test_task.train_only and test_task.split == "test" and test_task.upto == 60
    assert not knowledge.open_carry(store, "", 5, "tritonbench:add_value", "k", in_bench=True).train_only
    assert not knowledge.open_carry(store, "", 5, "examples:softmax", "k", in_bench=False).train_only
    teach(store, run_id=2)
    resumed = knowledge.open_carry(store, "", 5, "examples:softmax", "k", True, saved=test_task.config())
    assert resumed.upto == 60 and resumed.train_only  # as it began, whatever was written since
    assert knowledge.open_carry(store, "", 5, "examples:softmax", "k", True, saved={}) is None  # began without
    assert knowledge.open_carry(store, "off", 5, "examples:softmax", "k", True) is None


def test_merging_a_bench_brings_its_runs_knowledge_once(tmp_path: Path, monkeypatch):
    """A sweep split over two databases (named relative to where each ran, as a GPU machine names them): the
    merge copies each run's pulls with their GPU model and rules, as rows of the merged database's runs; rows
    another database's run wrote here are not this bench's; merging again, into the same bench or a new one,
    counts no pull twice; and the merged database passes them on in a later merge."""
    monkeypatch.chdir(tmp_path)
    parts = {}
    for name, ref in (("a.db", "examples:vector_add"), ("b.db", "examples:softmax")):
        store = Store(name)
        bench = store.create_bench("examples", {"policies": ["kernelband"], "seeds": [0], "iterations": 3})
        search = _search(store, ref, bench_id=bench)
        search.run()
        assert store.run(search.run_id).config["knowledge"]["db"] == name  # relative; the rows' origin is not
        parts[name] = (bench, search.run_id, store.run(search.run_id).task_key)
        store.close()
    bench_a, run_a, key_a = parts["a.db"]
    store = Store("a.db")  # a run of another database used a.db as its --knowledge: its rows stay behind
    knowledge.Carry(store, str(tmp_path / "y.db"), run_a, key_a, "test", 0, False).record(1, "vec", cand(0), cand(1))
    store.close()

    def pulls(db: str) -> list[dict]:
        merged = Store(db)
        try:
            return merged.query("SELECT k.*, r.task FROM knowledge_pulls k JOIN runs r ON r.id = k.run_id")
        finally:
            merged.close()

    runner = CliRunner()
    res = runner.invoke(app_module.app, ["merge", "a.db", str(bench_a), "--db", "merged.db"])
    assert res.exit_code == 0, res.output
    target = int(" ".join(res.output.split()).split("into bench ")[1].split()[0])
    res = runner.invoke(app_module.app, ["merge", "b.db", str(parts["b.db"][0]), "--db", "merged.db", "--into",
                                         str(target)])
    assert res.exit_code == 0, res.output
    rows = pulls("merged.db")
    assert len(rows) == 12 and {r["origin"] for r in rows} == {str(tmp_path / "merged.db")}
    assert {(r["gpu"], r["rules"]) for r in rows} == {(GPU, RULES)}
    assert sorted((r["task"], r["pull"]) for r in rows) == sorted(
        (task, pull) for task in ("examples:softmax", "examples:vector_add") for pull in range(1, 7))
    merged = Store("merged.db")
    assert len(knowledge.load(merged, GPU).examples) == 12
    merged.close()

    again = runner.invoke(app_module.app, ["merge", "a.db", str(bench_a), "--db", "merged.db"])  # a new bench
    assert again.exit_code == 0 and "1 runs copied" in " ".join(again.output.split())
    runner.invoke(app_module.app, ["merge", "b.db", str(parts["b.db"][0]), "--db", "merged.db", "--into",
                                   str(target)])
    assert len(pulls("merged.db")) == 12

    res = runner.invoke(app_module.app, ["merge", "merged.db", str(target), "--db", "final.db"])
    assert res.exit_code == 0, res.output
    assert len(pulls("final.db")) == 12

    # a bench merged before its knowledge was copied gets it from a merge again; a run of its own does not
    final = Store("final.db")
    final.write("DELETE FROM knowledge_pulls")
    (vector_add,) = [r for r in final.runs() if r.task == "examples:vector_add"]
    final.write("UPDATE runs SET created = created + 1 WHERE id = ?", (vector_add.id,))
    final.close()
    res = runner.invoke(app_module.app, ["merge", "merged.db", str(target), "--db", "final.db", "--into", "1"])
    assert res.exit_code == 0 and "0 runs copied" in " ".join(res.output.split())
    assert sorted({r["task"] for r in pulls("final.db")}) == ["examples:softmax"] and len(pulls("final.db")) == 6
