"""tools/bench_plan.py: the size of a plan of benches, in evaluations, GPU-minutes and sessions."""

from __future__ import annotations

import json
import os
import sqlite3
import subprocess
import sys
from pathlib import Path

import pytest

from kernelband.tasks import tritonbench as tb

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tools"))
try:
    import bench_plan as bp
finally:
    sys.path.pop(0)

# the plans read the TritonBench-G level-1/2 tasks' names from the data (a clean clone has none)
needs_data = pytest.mark.skipif(tb.find() is None, reason="no TritonBench data")
SEARCH = bp.Search(iterations=10, q=1, finalists=3, beta=0.69)
RATES = bp.Rates(ncu_s=8.0, plain_s=5.0)


@needs_data
def test_the_plan_fills_on_train_tasks_and_benches_each_suite_s_test_tasks_in_two_lanes():
    parts = bp.plan(["tritonbench-g-l12", "examples"], ("kernelband", "random"), ("kernelband",), ("kernelband",),
                    5, 3)
    assert [(p.name, p.lane, p.split, len(p.tasks)) for p in parts] == [
        ("fill tritonbench-g-l12", "held", "train", 15),  # the examples have no train task: no fill of their own
        ("test tritonbench-g-l12", "held", "test", 14), ("test examples", "held", "test", 9),
        ("cold tritonbench-g-l12", "cold", "test", 14), ("cold examples", "cold", "test", 9)]
    assert parts[0].seeds == 3 and parts[1].seeds == 5 and parts[1].policies == ("kernelband", "random")
    assert not {t for p in parts if p.split == "test" for t in p.tasks} & set(parts[0].tasks)
    # without a cold policy or a fill, those benches are not in the plan
    assert [p.name for p in bp.plan(["tritonbench-g-l12"], ("beam",), (), (), 5, 5)] == ["test"]


def test_the_upper_bound_is_every_proposal_and_the_expected_count_reuses_across_runs_of_a_task():
    part = bp.Part("test", "held", "tritonbench-g-l12", "test", ("a", "b"), ("random", "beam"), 5)
    no_reuse = bp.cost(part, bp.Search(10, 1, 3, 1.0), RATES, baselines=True)
    # 2 tasks x 10 runs x (10 candidates + 3 finalists + 2 handed back), and k0 once per task
    assert no_reuse.runs == 20 and no_reuse.upper == 2 * 10 * 15 + 2
    # beta 1 reuses nothing: the expected count differs from the bound only by the second handed-back row
    assert no_reuse.expected == no_reuse.upper - no_reuse.runs
    same = bp.cost(part, bp.Search(10, 1, 3, 0.0), RATES, baselines=False)
    assert same.expected == 2 * (10 + 10 * 4)  # beta 0: every run of a task makes the same 10 candidates
    fitted = bp.cost(part, SEARCH, RATES, baselines=False)
    assert same.expected < fitted.expected < no_reuse.expected
    assert fitted.expected == pytest.approx(2 * (10 * 10**0.69 + 10 * 4))


def test_only_policies_that_read_phi_pay_for_nsight_compute():
    plain = bp.Part("t", "held", "s", "test", ("a",), ("random", "beam", "coordinate"), 1)
    ncu = bp.Part("t", "held", "s", "test", ("a",), ("kernelband",), 1)
    for part, rate in ((plain, RATES.plain_s), (ncu, RATES.ncu_s)):
        c = bp.cost(part, SEARCH, RATES, baselines=False)
        assert c.gpu_s_expected == pytest.approx(c.expected * rate)
    # k0's baseline is measured with the profiler, whichever policy asks first
    c = bp.cost(plain, SEARCH, RATES, baselines=True)
    assert c.gpu_s_expected == pytest.approx((c.expected - 1) * RATES.plain_s + RATES.ncu_s)


def test_k0_is_measured_once_per_task_and_database():
    a = bp.Part("one", "held", "s", "test", ("x", "y"), ("random",), 1)
    b = bp.Part("two", "held", "s", "test", ("x", "y"), ("beam",), 1)
    c = bp.Part("cold", "cold", "s", "test", ("x", "y"), ("kernelband",), 1)
    found = bp.costs([a, b, c], SEARCH, RATES)
    m = 10 + 4  # one run a task: its 10 candidates, 3 finalists, 1 handed back
    assert [f.expected for f in found] == [2 * m + 2, 2 * m, 2 * m + 2]


def test_a_session_s_evaluations_are_its_time_less_the_overheads_on_every_gpu():
    machine = bp.Machine(gpus=4, session_s=1800, start_s=120, collect_s=75, setup_s=60, runs_per_gpu=2)
    assert machine.usable_gpu_s(10.0) == 4 * (1800 - 255 - 10)
    assert bp.sessions(4 * 1535, machine, 10.0) == 1 and bp.sessions(4 * 1535 + 1, machine, 10.0) == 2
    with pytest.raises(bp.UserError, match="no time for evaluations"):
        bp.Machine(1, 240, 120, 75, 60, 2).usable_gpu_s(10.0)


def _bench_db(path: Path, runs: dict[str, list[int]]) -> None:
    """A run database with bench 1's finished runs: per task, per run, how many of its 10 search evaluations
    were reused; plus a k0 row and a held-out row a run, which the fit ignores."""
    con = sqlite3.connect(path)
    con.execute("CREATE TABLE runs (id INTEGER PRIMARY KEY, bench_id INTEGER, task TEXT, status TEXT)")
    con.execute("CREATE TABLE evaluations (run_id INTEGER, candidate INTEGER, which TEXT, result TEXT)")
    run = 0
    for task, reused in runs.items():
        for n in reused:
            run += 1
            con.execute("INSERT INTO runs VALUES (?, 1, ?, 'done')", (run, task))
            rows = [(run, 0, "search", "{}"), (run, 1, "held_out", "{}")]
            note = json.dumps({"notes": ["evaluation reused: the same source on the same task and GPU"]})
            rows += [(run, c, "search", note if c <= n else "{}") for c in range(1, 11)]
            con.executemany("INSERT INTO evaluations VALUES (?, ?, ?, ?)", rows)
    con.commit()
    con.close()


def test_the_check_fits_beta_to_a_stored_bench_s_measured_evaluations(tmp_path):
    db = tmp_path / "runs.db"
    _bench_db(db, {"a": [0, 4, 6], "b": [0, 5, 5]})  # 60 search evaluations, 20 reused
    o = bp.observe(db, 1)
    assert (o.runs, o.tasks, o.candidates, o.measured) == (6, 2, 60, 40)
    assert 2 * 10 * 3**o.beta == pytest.approx(40, rel=1e-3)
    one = tmp_path / "one.db"
    _bench_db(one, {"a": [0], "b": [0]})
    assert bp.observe(one, 1).beta is None  # one run a task says nothing of reuse between runs
    with pytest.raises(bp.UserError, match="no finished run"):
        bp.observe(db, 2)


def _script(*args: str) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": str(ROOT / "src")}
    return subprocess.run([sys.executable, str(ROOT / "tools" / "bench_plan.py"), *args], capture_output=True,
                          text=True, timeout=120, env=env)


@needs_data
def test_the_script_prints_each_bench_and_the_sessions_and_refuses_bad_input_in_one_line():
    done = _script("--gpus", "4", "--s-per-eval", "8.6")
    assert done.returncode == 0, done.stderr
    rows = [line.split(" | ")[0] for line in done.stdout.splitlines() if line.startswith("| ")]
    assert rows[2:] == ["| fill", "| test", "| cold", "| all"]
    assert "Sessions of 30 minutes on 4 GPU(s)" in done.stdout and "expected" in done.stdout
    bad = _script("--policies", "kernelband,bandit")
    assert bad.returncode == 2 and bad.stderr.strip().splitlines() == [
        "error: unknown policies bandit: use kernelband, kernelband-masked, beam, bon, random, greedy, coordinate"]
    assert _script("--check", "nowhere.db").returncode == 2
