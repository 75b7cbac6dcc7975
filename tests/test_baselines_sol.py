"""The baselines timed beside a candidate (torch eager, torch.compile) and the speed-of-light bound with its
launch floor: records, the bound, the medians, the calibration cache, the store's migration, the displays."""

from __future__ import annotations

import json
import os
import sqlite3
import subprocess
import sys
from pathlib import Path

import pytest

from kernelband.bench import against_torch
from kernelband.evaluation import baselines, sol
from kernelband.evaluation.records import PRESETS, EvalResult, Outcome, ShapeResult
from kernelband.report.metrics import report_data
from kernelband.report.tables import build
from kernelband.search.core import source_hash
from kernelband.store import SCHEMA_VERSION, SUMMARY_ADDED, Store
from kernelband.tasks.model import ShapeInfo
from kernelband.worker.baselines import time_baselines

# 1000 GB/s and 100 TFLOP/s; a launch floor of 3 µs by events and 1 µs by spans
PEAKS = sol.Peaks(device="Fake GPU", bw_gbps=1000.0, tflops=100.0, floor_ms=0.003, floor_span_ms=0.001)


def _shape(index: int, nbytes: float, flops: float | None = None, held_out: bool = False) -> ShapeInfo:
    return ShapeInfo(index, f"s{index}", held_out, "", int(nbytes), bytes=nbytes, flops=flops)


def _timed(shapes, cand_ms: list[float], ref_ms: list[float] | None = None, timer: str = "events"):
    result = EvalResult(task="t", outcome=Outcome.OK)
    by_index = {}
    for s, c, r in zip(shapes, cand_ms, ref_ms or cand_ms):
        sr = ShapeResult(s.index, s.label, s.held_out, correct=True, ref_ms=r, cand_ms=c, timer=timer)
        result.shapes.append(sr)
        by_index[s.index] = sr
    return result, by_index


# -- the bound with the floor ----------------------------------------------------------------------------
def test_the_bound_is_the_largest_of_bytes_flops_and_the_floor():
    assert sol.bound_ms(1e6, None, PEAKS) == pytest.approx(0.001)  # 1 MB at 1000 GB/s
    assert sol.bound_ms(1e6, None, PEAKS, floor_ms=0.003) == pytest.approx(0.003)  # the floor wins
    assert sol.bound_ms(1e9, None, PEAKS, floor_ms=0.003) == pytest.approx(1.0)  # the bandwidth wins
    assert sol.bound_ms(1e6, 1e12, PEAKS, floor_ms=0.003) == pytest.approx(10.0)  # the compute wins
    assert sol.bound_ms(None, None, PEAKS, floor_ms=0.003) is None  # a floor alone bounds nothing
    assert PEAKS.floor("events") == 0.003 and PEAKS.floor("span") == 0.001 and PEAKS.floor("mixed") == 0.003
    assert sol.Peaks("old", 1.0, 1.0).floor("span") == 0.0  # a cache without a floor: none


def test_a_small_shape_can_reach_one_and_the_floor_follows_the_shapes_timer():
    shapes = [_shape(0, 1e5)]  # 100 KB: 0.1 µs of bandwidth
    result, by_index = _timed(shapes, [0.003])
    sol.judge(shapes, result, by_index, {}, PEAKS)
    sr = result.shapes[0]
    assert sr.data_bound_ms == pytest.approx(1e-4) and sr.bound_ms == pytest.approx(0.003)
    assert sr.sol_fraction == pytest.approx(1.0) and result.ok
    spans, by_index = _timed(shapes, [0.002], timer="span")
    sol.judge(shapes, spans, by_index, {}, PEAKS)
    assert spans.shapes[0].bound_ms == pytest.approx(0.001)


def test_the_anti_cheat_check_reads_the_bytes_and_flops_not_the_floor():
    shapes = [_shape(0, 1e5)]
    # faster than the floor (an estimate) but slower than bandwidth allows: fine
    result, by_index = _timed(shapes, [0.0005], ref_ms=[0.01])
    sol.judge(shapes, result, by_index, {}, PEAKS)
    assert result.ok and result.shapes[0].sol_fraction > 1.0
    # faster than bandwidth allows: suspicious, and the detail names the bytes' bound
    result, by_index = _timed(shapes, [0.00005], ref_ms=[0.01])
    sol.judge(shapes, result, by_index, {}, PEAKS)
    assert result.outcome == Outcome.SUSPICIOUS and "speed_of_light" in result.checks
    assert "0.10 us" in result.detail


def test_the_medians_over_all_shapes_and_over_shapes_of_at_least_16_mb():
    # three small shapes at the floor-bound 0.5 of SOL, two large ones at 0.9, one large held-out one at 0.1
    shapes = [_shape(i, 1e5) for i in range(3)] + [_shape(3, 32e6), _shape(4, 64e6), _shape(5, 64e6, held_out=True)]
    cand = [0.006] * 3 + [0.032 / 0.9, 0.064 / 0.9, 0.64]
    result, by_index = _timed(shapes, cand)
    sol.judge(shapes, result, by_index, {}, PEAKS)
    assert [s.moved_bytes for s in result.shapes][3] == 32e6
    assert result.sol_median == pytest.approx(0.5)  # median of 0.5, 0.5, 0.5, 0.9, 0.9; held-out left out
    assert result.sol_median_large == pytest.approx(0.9)
    none, by_index = _timed(shapes, cand)
    sol.judge(shapes, none, by_index, {}, None)  # no calibration (the interpreter): no medians
    assert none.sol_median is None and none.sol_median_large is None


def test_a_shape_whose_bound_even_the_reference_beats_has_no_sol_fraction_and_stays_out_of_the_medians():
    """A fraction over 1 of a bound that the reference beats too says the task's bytes are overcounted, not
    that the kernel is fast: no fraction is shown for it, and the medians are of the shapes with a true bound."""
    shapes = [_shape(0, 32e6), _shape(1, 64e6), _shape(2, 64e6)]
    cand = [0.032 / 0.8, 0.064 / 1.4, 0.064 / 1.5]  # two shapes at 1.4 and 1.5 of their data bound
    ref = [0.032 / 0.7, 0.064 / 1.3, 0.064 / 1.3]  # and the reference over it as well
    result, by_index = _timed(shapes, cand, ref)
    sol.judge(shapes, result, by_index, {}, PEAKS)
    assert [s.sol_fraction for s in result.shapes][1:] == [None, None] and result.ok
    assert "byte count is too high" in result.shapes[1].note
    assert result.sol_median == pytest.approx(0.8) and result.sol_median_large == pytest.approx(0.8)
    told, by_index = _timed(shapes, cand, [0.1] * 3)  # the reference under the bound, the task says why
    sol.judge(shapes, told, by_index, {}, PEAKS, overcounted="reads only the rows within each length")
    assert [s.sol_fraction for s in told.shapes][1:] == [None, None] and told.sol_median == pytest.approx(0.8)


# -- the calibration cache --------------------------------------------------------------------------------
def test_an_old_cache_has_no_floor_and_a_calibration_reply_gives_one(tmp_path):
    path = tmp_path / "calibration.json"
    path.write_text(json.dumps({"Fake GPU": {"device": "Fake GPU", "bw_gbps": 1000.0, "tflops": 100.0}}))
    old = sol.load("Fake GPU", path)
    assert old.floor_ms is None and old.floor("events") == 0.0  # measured on next use (References.peaks)
    request = sol.calibrate_request(floor_only=True)
    assert request["floor_only"] and request["preset"] == PRESETS[sol.FLOOR_PRESET].wire()
    new = sol.with_floor(old, {"events": [0.004] * 10, "span": [0.0015] * 10})
    assert new.floor_ms == pytest.approx(0.004) and new.floor_span_ms == pytest.approx(0.0015)
    sol.save(new, path)
    assert sol.load("Fake GPU", path).floor_span_ms == pytest.approx(0.0015)
    assert sol.with_floor(old, None).floor_ms == 0.0  # not timed: 0, and not asked for again at each use


def test_the_launch_floor_is_timed_by_the_workers_timing_code_on_the_interpreter():
    code = ("from kernelband.worker.calibrate import floor_times; import json; "
            "print(json.dumps(floor_times({'warmup': 1, 'rep': 1, 'unit': 'iters', 'interpreter_rep': 3}, None, "
            "gpu=False)))")
    env = {**os.environ, "TRITON_INTERPRET": "1", "PYTHONPATH": os.pathsep.join(sys.path)}
    done = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-2000:]
    floor = json.loads(done.stdout.strip().splitlines()[-1])
    assert len(floor["events"]) == 3 and all(t > 0 for t in floor["events"])
    assert floor["span"] == [] and floor["span_error"]


# -- the baselines ----------------------------------------------------------------------------------------
def _result_with(eager, compiled, cand, held_out=(False, False)):
    result = EvalResult(task="t", outcome=Outcome.OK)
    for i, (e, c, m, h) in enumerate(zip(eager, compiled, cand, held_out)):
        result.shapes.append(ShapeResult(i, f"s{i}", h, correct=True, cand_ms=m, eager_ms=e, compiled_ms=c,
                                         compiled_skipped="" if c else "torch.compile failed: boom"))
    baselines.speedups(result)
    return result


def test_the_speedups_over_the_baselines_are_runtime_weighted_over_the_search_shapes():
    result = _result_with([1.0, 3.0, 100.0], [0.5, 1.5, 100.0], [1.0, 1.0, 1.0], held_out=(False, False, True))
    assert result.speedup_vs_eager == pytest.approx(2.0)  # (1 + 3) / (1 + 1): the held-out shape left out
    assert result.speedup_vs_compile == pytest.approx(1.0)
    assert result.vs_eager_skipped == "" and result.vs_compile_skipped == ""


def test_a_shape_without_a_baseline_leaves_the_speedup_none_with_its_reason():
    result = _result_with([1.0, 3.0], [0.5, None], [1.0, 1.0])
    assert result.speedup_vs_eager == pytest.approx(2.0)
    assert result.speedup_vs_compile is None and result.vs_compile_skipped == "s1: torch.compile failed: boom"
    stored = EvalResult.from_dict(json.loads(json.dumps(result.to_dict())))
    assert stored.shapes[1].compiled_skipped == "torch.compile failed: boom" and stored.speedup_vs_eager == 2.0


def test_the_worker_says_why_a_baseline_was_not_timed():
    preset = {"warmup": 1, "rep": 1, "unit": "iters", "interpreter_rep": 2}
    none = time_baselines(None, [(1,)], {"preset": preset}, False, None)
    assert none["eager"] is None and none["eager_error"] == none["compiled_error"] == "the task has no torch reference"

    def broken(inputs):
        raise ValueError("no such op")

    failed = time_baselines(broken, [(1,)], {"preset": preset, "compile": False}, False, None)
    assert failed["eager"] is None and "ValueError: no such op" in failed["eager_error"]
    timed = time_baselines(lambda inputs: inputs[0] + 1, [(1,), (2,)], {"preset": preset, "compile": False},
                           False, None)
    assert len(timed["eager"]) == 2 and timed["eager_error"] == ""
    assert timed["compiled"] is None and timed["compiled_error"]


def test_the_interpreter_gives_every_timed_shape_the_skip_reason(evaluator, vector_add):
    result = evaluator.evaluate(vector_add, seed=3)
    assert result.ok
    for s in result.shapes:
        assert s.eager_ms is None and s.compiled_ms is None
        assert s.eager_skipped == s.compiled_skipped == baselines.INTERPRETER_SKIP
    assert result.speedup_vs_eager is None and baselines.INTERPRETER_SKIP in result.vs_eager_skipped
    assert result.speedup_vs_compile is None and baselines.INTERPRETER_SKIP in result.vs_compile_skipped


# -- the store, the bench and the report --------------------------------------------------------------------
def _finished_run(store: Store, policy: str, task: str, summary: dict) -> int:
    run = store.create_run(task, source_hash(task), policy, "rewrite", 0, {"iterations": 1}, device="Fake GPU")
    store.add_candidate(run, 0, "k0", source_hash("k0"), None, None, 0, 0, "")
    store.add_evaluation(run, 0, "search", EvalResult(task=task, outcome=Outcome.OK, speedup=1.0))
    store.finish_run(run, "done", {"best_candidate": 0, "best_speedup": 1.0, "best_outcome": "ok",
                                   "evaluations": 1, "tokens": 0, **summary})
    return run


def test_an_older_database_gets_the_new_summary_fields(tmp_path):
    path = tmp_path / "old.db"
    store = Store(path)
    run = _finished_run(store, "random", "examples:a", {})
    store.close()
    with sqlite3.connect(path) as db:  # as an older KernelBand left it
        db.execute("PRAGMA user_version = 0")
        db.execute("UPDATE runs SET summary = ? WHERE id = ?", (json.dumps({"best_speedup": 1.5}), run))
    store = Store(path)
    summary = store.run(run).summary
    assert {k: summary[k] for k in SUMMARY_ADDED} == SUMMARY_ADDED and summary["best_speedup"] == 1.5
    assert summary["vs_eager_skipped"] == "stored before the baselines were timed"
    assert store._db.execute("PRAGMA user_version").fetchone()[0] == SCHEMA_VERSION


def test_bench_and_report_show_the_geometric_means_per_policy(tmp_path):
    store = Store(tmp_path / "runs.db")
    bench = store.create_bench("examples", {"policies": ["random"], "seeds": [0]})
    for task, eager, compiled, large in (("examples:a", 2.0, 1.0, 0.8), ("examples:b", 0.5, None, None)):
        run = _finished_run(store, "random", task, {"best_vs_eager": eager, "best_vs_compile": compiled,
                                                    "best_sol_fraction": 0.5, "best_sol_large": large})
        store._db.execute("UPDATE runs SET bench_id = ? WHERE id = ?", (bench, run))
    got = against_torch(store.runs(bench))["random"]
    assert got["vs_eager_geomean"] == pytest.approx(1.0) and got["n_vs_eager"] == 2
    assert got["vs_compile_geomean"] == pytest.approx(1.0) and got["n_vs_compile"] == 1
    assert got["sol_median_large"] == pytest.approx(0.8)
    data = report_data(store, f"bench:{bench}")
    s = data["summary"]["random"]
    assert s["vs_eager_geomean"] == pytest.approx(1.0) and s["n_vs_compile"] == 1
    assert {r["task"]: r["vs_eager"] for r in data["tasks"]} == {"examples:a": 2.0, "examples:b": 0.5}
    table = next(t for t in build(data) if t.id == "baselines")
    assert [c[0] for c in table.rows[0][:5]] == ["random", "1.000", "2", "1.000", "1"]


@pytest.mark.slow
def test_the_sol_baselines_script_evaluates_k0_and_each_runs_best_kernel(tmp_path):
    """The plumbing of benchmarks/sol_baselines.py on the interpreter: k0 and a run's best kernel, each row with
    its figures (None where the interpreter measures nothing) and the summary per policy."""
    from kernelband.tasks import load_task

    task = load_task("examples:vector_add")
    store = Store(tmp_path / "runs.db")
    bench = store.create_bench("examples", {"policies": ["random"], "seeds": [0]})
    run = _finished_run(store, "random", task.ref, {"best_candidate": 1})
    best = task.module_source + "\n# the best kernel\n"
    store.add_candidate(run, 1, best, source_hash(best), 0, "block_size", 1, 0, "")
    store._db.execute("UPDATE runs SET bench_id = ? WHERE id = ?", (bench, run))
    store.close()
    script = Path(__file__).resolve().parents[1] / "benchmarks" / "sol_baselines.py"
    done = subprocess.run([sys.executable, str(script), "--interpreter", "--tasks", task.ref, "--db",
                           str(tmp_path / "runs.db"), "--bench", str(bench), "--out", str(tmp_path / "sol.json")],
                          capture_output=True, text=True, timeout=300, cwd=tmp_path)
    assert done.returncode == 0, done.stderr[-3000:]
    out = json.loads((tmp_path / "sol.json").read_text())
    row = out["rows"][0]
    assert row["task"] == task.ref and row["k0"]["outcome"] == "ok"
    assert row["k0"]["vs_eager"] is None and "interpreter" in row["k0"]["vs_eager_skipped"]
    assert [(b["policy"], b["candidate"], b["outcome"]) for b in row["best"]] == [("random", 1, "ok")]
    assert row["best"][0]["speedup"] > 0 and row["best"][0]["shapes"]
    assert out["summary"]["random"]["tasks"] == 1 and out["summary"]["random"]["speedup_over_k0_geomean"] > 0
    assert out["summary"]["k0"]["sol_median_large"] is None


# -- on a GPU ---------------------------------------------------------------------------------------------
@pytest.mark.gpu
def test_the_baselines_are_timed_once_per_shape_and_reused():
    from kernelband.evaluation.evaluator import Evaluator
    from kernelband.tasks import load_task

    task = load_task("examples:softmax")
    with Evaluator(mode="gpu", use_ncu=False) as ev:
        first = ev.evaluate(task, seed=1)
        second = ev.evaluate(task, seed=2)
    assert first.ok and second.ok
    for s in first.shapes:
        assert s.eager_ms and s.eager_ms > 0 and s.eager_skipped == ""
        assert (s.compiled_ms and s.compiled_ms > 0) or s.compiled_skipped.startswith("torch.compile failed")
    assert first.speedup_vs_eager and first.speedup_vs_eager > 0
    assert [s.eager_ms for s in first.shapes] == [s.eager_ms for s in second.shapes]  # reused
    assert second.seconds["baselines"] < 0.5 * first.seconds["baselines"]
    assert first.sol_median is not None
    bounded = [s for s in first.shapes if s.bound_ms]
    assert bounded and all(s.bound_ms >= s.data_bound_ms for s in bounded)


@pytest.mark.gpu
def test_the_calibration_measures_a_launch_floor(tmp_path):
    from kernelband.evaluation.evaluator import Evaluator
    from kernelband.tasks import load_task

    path = tmp_path / "calibration.json"
    with Evaluator(mode="gpu", use_ncu=False, calibration_path=str(path)) as ev:
        ev.evaluate(load_task("examples:vector_add"), seed=1)
    peaks = next(iter(json.loads(path.read_text()).values()))
    assert 0.0005 < peaks["floor_ms"] < 0.05  # between 0.5 and 50 µs
    assert peaks["floor_span_ms"] is None or 0 < peaks["floor_span_ms"] <= peaks["floor_ms"]


def test_an_evaluator_asked_for_no_baselines_says_so():
    from kernelband.evaluation.baselines import NOT_ASKED, Baselines
    from kernelband.evaluation.context import Limits, Settings

    settings = Settings(mode="gpu", limits=Limits(), compare_device="cpu", tune={}, task_tests=False,
                        relative_limits=False, recheck_timings=False)
    off = Baselines(settings, references=None, enabled=False)
    assert off._time(None, 0, False) == baselines.Baseline(None, None, NOT_ASKED, NOT_ASKED)


def test_a_tasks_baseline_is_what_the_baselines_time_where_it_has_one():
    """examples:matmul's reference multiplies in float32, for accuracy; torch eager and torch.compile time its
    `baseline()`, the half-precision `a @ b` a user runs (cuBLAS), which still agrees with the reference. A task
    without one has its reference timed."""
    import torch

    from kernelband.tasks import load_task
    from kernelband.worker.harness import PyFileHarness

    def harness(name):
        task = load_task(f"examples:{name}")
        h = PyFileHarness(task.harness_source, task.harness_file, module=None)
        h.describe("interpreter")
        return h

    matmul = harness("matmul")
    inputs = matmul.make_inputs(0, "cpu")
    timed = matmul.torch_reference(inputs)
    assert timed.dtype == torch.float16 and timed.dtype == inputs[0].dtype
    assert matmul.ns["baseline"].__code__ is not matmul.ns["reference"].__code__
    assert torch.allclose(timed.float(), matmul.reference(inputs).float(), atol=matmul.atol, rtol=matmul.rtol)
    calls = []
    matmul.ns["baseline"] = lambda a, b: calls.append((a, b)) or a @ b
    matmul.torch_reference(inputs)
    assert calls and calls[0][0] is inputs[0]
    softmax = harness("softmax")
    assert softmax.torch_reference == softmax.reference
