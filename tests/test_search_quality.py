"""benchmarks/search_quality.py: the exhaustive launch-parameter grid (issue 3, section 7: what a user
would do by hand, judged by the same rule as a search's result) and the sweep's heartbeat."""

from __future__ import annotations

import importlib.util
import json
import math
import subprocess
import sys
import threading
import time
from pathlib import Path

import numpy as np
import pytest

from kernelband.evaluation.records import EvalResult, Outcome
from kernelband.store import Store
from kernelband.tasks import load_task

pytest.importorskip("libcst")

_spec = importlib.util.spec_from_file_location(
    "search_quality", Path(__file__).resolve().parents[1] / "benchmarks" / "search_quality.py")
search_quality = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(search_quality)


class ScriptedEvaluator:
    """Answers evaluate() from tables keyed by the variant's index in the grid (k0 is -1): the search-shape
    speedup, and the re-check's (search shapes with fresh inputs, held-out shapes). Records every call and
    how many ran at once."""

    def __init__(self, variants: list[str], k0: str, search: dict, recheck: dict, k0_self: float = 1.0,
                 delay: float = 0.05):
        self.index = {source: i for i, source in enumerate(variants)} | {k0: -1}
        self.search, self.recheck, self.k0_self, self.delay = search, recheck, k0_self, delay
        self.calls: list[tuple[int, str, bool]] = []
        self.running = self.most = 0
        self.lock = threading.Lock()

    def fingerprint(self, task) -> dict:
        return {"gpu": "stand-in"}

    def evaluate(self, task, source, which="search", profile=True, **_) -> EvalResult:
        i = self.index[source]
        with self.lock:
            self.calls.append((i, which, profile))
            self.running += 1
            self.most = max(self.most, self.running)
        time.sleep(self.delay)
        with self.lock:
            self.running -= 1
        if i == -1:
            return EvalResult(task=task.ref, outcome=Outcome.OK, speedup=self.k0_self)
        if which == "search":
            value = self.search.get(i, 1.0)
            if value is None:
                return EvalResult(task=task.ref, outcome=Outcome.WRONG_OUTPUT, detail="scripted")
            return EvalResult(task=task.ref, outcome=Outcome.OK, speedup=value)
        confirmed, held_out = self.recheck[i]
        return EvalResult(task=task.ref, outcome=Outcome.OK, speedup=confirmed, held_out_speedup=held_out)


@pytest.fixture
def task_and_variants():
    task = load_task("examples:vector_add")
    variants = search_quality.launch_grid(task.module_source)
    assert len(variants) >= 5  # block sizes and num_warps of the example kernel
    return task, variants


def test_the_grid_rechecks_its_fastest_variants_and_hands_back_the_fastest_on_the_recheck(tmp_path,
                                                                                         task_and_variants):
    task, variants = task_and_variants
    # variant 0 is the fastest searched and not faster again; variant 2 is; variant 1 failed its check
    ev = ScriptedEvaluator(variants, task.module_source, search={0: 1.9, 1: None, 2: 1.5, 3: 1.2, 4: 1.1},
                           recheck={0: (0.97, 0.95), 2: (1.45, 1.3), 3: (1.15, 1.1)})
    row = search_quality.grid_task(Store(tmp_path / "runs.db"), ev, task, None, slots=3, finalists=3)
    assert row["best_speedup"] == 1.9  # the largest searched figure, reported as such
    assert [f["variant"] for f in row["finalists"]] == [0, 2, 3]
    assert (row["handed_back"], row["confirmed"], row["held_out"], row["faster"]) == (2, 1.45, 1.3, True)
    assert row["outcomes"] == {"ok": len(variants) - 1, "wrong_output": 1}
    rechecks = [c for c in ev.calls if c[1] == "all"]
    assert sorted(c[0] for c in rechecks) == [0, 2, 3] and not any(c[2] for c in ev.calls)  # no ncu anywhere
    assert (-1, "search", False) in ev.calls  # k0 timed against itself
    assert row["evaluations_made"] == len(variants) + 1 + 3
    assert 1 < ev.most <= 3  # the variants ran `slots` at a time


def test_a_noisy_k0_raises_the_bar_and_no_faster_recheck_hands_back_k0(tmp_path, task_and_variants):
    task, variants = task_and_variants
    noisy = ScriptedEvaluator(variants, task.module_source, search={0: 1.3}, recheck={0: (1.05, 1.2)},
                              k0_self=1.04)
    row = search_quality.grid_task(Store(tmp_path / "runs.db"), noisy, task, None, slots=2, finalists=1)
    assert (row["handed_back"], row["noise_floor"], row["faster"]) == (0, 1.04, False)  # 1.05 <= 1 + 2 x 0.04
    slower = ScriptedEvaluator(variants, task.module_source, search={0: 1.3}, recheck={0: (0.99, 1.2)})
    row = search_quality.grid_task(Store(tmp_path / "runs.db"), slower, task, None, slots=2, finalists=1)
    assert (row["handed_back"], row["confirmed"], row["faster"]) == (None, 1.0, False)


def test_no_grid_task_starts_after_the_deadline(tmp_path, task_and_variants):
    task, variants = task_and_variants
    ev = ScriptedEvaluator(variants, task.module_source, search={}, recheck={})
    report: dict = {}
    search_quality.part_grid(Store(tmp_path / "runs.db"), [ev], [task.ref], report, None,
                             deadline=time.monotonic() - 1)
    assert report["grid"]["deferred"] == [task.ref] and ev.calls == []


def test_a_gpu_that_finishes_its_task_takes_the_next_one_instead_of_waiting_for_its_share(tmp_path,
                                                                                          task_and_variants):
    task, variants = task_and_variants
    same = {i: (1.0, 1.0) for i in range(len(variants))}
    slow = ScriptedEvaluator(variants, task.module_source, search={}, recheck=same, delay=1.0)
    fast = ScriptedEvaluator(variants, task.module_source, search={}, recheck=same, delay=0.0)
    report: dict = {}
    search_quality.part_grid(Store(tmp_path / "runs.db"), [slow, fast], [task.ref] * 4, report, None)
    def tasks_taken(ev):
        return sum(call == (-1, "search", False) for call in ev.calls)  # one k0-against-itself per task
    # dealt out in turn, each would have had 2; the fast one took every task after the slow one's first
    assert (tasks_taken(slow), tasks_taken(fast)) == (1, 3), report["grid"]["errors"]
    assert [r["task"] for r in report["grid"]["rows"]] == [task.ref] * 4 and report["grid"]["errors"] == {}


def test_a_grid_task_that_fails_is_its_row_and_the_others_go_on(tmp_path, task_and_variants):
    task, variants = task_and_variants
    ev = ScriptedEvaluator(variants, task.module_source, search={}, recheck={i: (1.0, 1.0) for i in range(9)})
    report: dict = {}
    search_quality.part_grid(Store(tmp_path / "runs.db"), [ev], ["examples:no_such_task", task.ref], report, None)
    assert list(report["grid"]["errors"]) == ["examples:no_such_task"]
    assert report["grid"]["summary"]["tasks"] == 1


def test_the_heartbeat_says_how_much_cpu_the_driving_process_itself_used(capsys):
    class Pool:
        def snapshot(self) -> dict:
            return {"requests": []}

    class Ev:
        pool = Pool()

    stop = search_quality.heartbeat([Ev()], every_s=0.1)
    end = time.monotonic() + 0.6
    while time.monotonic() < end:  # this process busy on one core
        sum(range(1000))
    stop.set()
    beats = [json.loads(line) for line in capsys.readouterr().out.splitlines() if line.startswith("{")]
    assert beats and all(b["evaluators"] == [{"requests": []}] for b in beats)
    assert max(b["driver"]["cores"] for b in beats) > 0.3 and beats[0]["driver"]["threads"] >= 2


def test_the_pools_steady_rate_leaves_out_its_start_and_its_drain():
    spec = importlib.util.spec_from_file_location(
        "eval_throughput", Path(__file__).resolve().parents[1] / "benchmarks" / "eval_throughput.py")
    eval_throughput = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(eval_throughput)
    # 2 threads: nothing for 20 s (compiles), then one result every 5 s, then a slow last one
    finished = [20.0, 21.0, 26.0, 31.0, 36.0, 41.0, 46.0, 80.0]
    assert eval_throughput.steady_rate(finished, 2) == pytest.approx(60 * 5 / 25.0)  # 21 s to 46 s: 5 results
    assert eval_throughput.steady_rate(finished[:5], 2) is None


def _eval_throughput():
    spec = importlib.util.spec_from_file_location(
        "eval_throughput", Path(__file__).resolve().parents[1] / "benchmarks" / "eval_throughput.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_the_repeat_part_takes_preset_variants_extra_pairs_and_a_shard():
    from kernelband.errors import UserError
    from kernelband.evaluation.records import PRESETS

    et = _eval_throughput()
    variant = et.preset_of("default+placements=8+max_ms=160")
    assert (variant.name, variant.placements, variant.max_ms) == ("default+placements=8+max_ms=160", 8, 160.0)
    assert variant.warmup == PRESETS["default"].warmup and et.preset_of("paper") is PRESETS["paper"]
    assert et.preset_of("default+timer=span").timer == "span"
    for bad in ("fast", "default+nope=1", "default+placements", "default+placements=many", "default+timer=cupti"):
        with pytest.raises(UserError):
            et.preset_of(bad)
    jobs = et.repeat_jobs(["a", "b"], ["default"], "c,d:paper,default+rounds=2;e:paper", "0/1")
    assert jobs == [("a", "default"), ("b", "default"), ("c", "paper"), ("c", "default+rounds=2"),
                    ("d", "paper"), ("d", "default+rounds=2"), ("e", "paper")]
    shards = [et.repeat_jobs(["a", "b"], ["default"], "c,d:paper,default+rounds=2;e:paper", f"{i}/3")
              for i in range(3)]
    assert sorted(sum(shards, [])) == sorted(jobs) and all(len(s) in (2, 3) for s in shards)
    for extra, shard in (("c", "0/1"), ("", "3/3"), ("", "x")):
        with pytest.raises(UserError):
            et.repeat_jobs(["a"], ["default"], extra, shard)


def test_a_benchs_grid_on_another_gpu_model_is_refused_before_any_evaluation(tmp_path, task_and_variants):
    from kernelband.errors import UserError

    task, variants = task_and_variants
    store = Store(tmp_path / "runs.db")
    bench = store.create_bench("examples", {"policies": ["greedy"]})
    store.create_run(task.ref, task.key, "greedy", "rewrite", 0, {}, device="NVIDIA H200", bench_id=bench)
    ev = ScriptedEvaluator(variants, task.module_source, search={}, recheck={i: (1.0, 1.0) for i in range(9)})
    with pytest.raises(UserError, match="measured on NVIDIA H200 and this GPU is stand-in"):
        search_quality.part_grid(store, [ev], [task.ref], {}, bench)
    assert ev.calls == [] and store.grid_rows(bench) == []
    here = store.create_bench("examples", {"policies": ["greedy"]})  # a bench measured on this GPU model
    store.create_run(task.ref, task.key, "greedy", "rewrite", 0, {}, device="stand-in", bench_id=here)
    search_quality.part_grid(store, [ev], [task.ref], {}, here)
    assert ev.calls and [r["task"] for r in store.grid_rows(here)] == [task.ref]


def test_the_noise_split_tells_noise_per_evaluation_from_noise_per_shape(tmp_path):
    spec = importlib.util.spec_from_file_location(
        "noise_split", Path(__file__).resolve().parents[1] / "tools" / "noise_split.py")
    noise_split = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(noise_split)
    rng = np.random.default_rng(0)
    ref = [0.005 * (1 + i) for i in range(10)]
    # every shape of an evaluation moved together (a process's level): between >> expected, within ~ 0
    levels = [[ref, [t * f for t in ref]] for f in (1.02, 0.98, 1.01, 0.99, 1.0)]
    whole = noise_split.split(levels)
    assert whole["between"] > 0.01 and whole["within"] < 1e-9 and whole["expected"] < 1e-9
    # each shape on its own (2 % a shape): between ~ expected = within / sqrt(10)
    apart = noise_split.split([[ref, [t * math.exp(rng.normal(0, 0.02)) for t in ref]] for _ in range(200)])
    assert apart["within"] == pytest.approx(0.02, rel=0.1)
    assert apart["between"] == pytest.approx(apart["expected"], rel=0.2)
    assert noise_split.split(levels[:1]) is None
    (tmp_path / "e.json").write_text(json.dumps({"repeat": [{"task": "t", "preset": "default", "cv_speedup": 0.01,
                                                             "seconds_each": 3.0, "shapes_ms": levels}]}))
    done = subprocess.run([sys.executable, spec.origin, str(tmp_path / "e.json")], capture_output=True, text=True)
    assert done.returncode == 0 and "| t | `default` | 1.00 % | 1.58 % |" in done.stdout, done.stdout + done.stderr
    missing = subprocess.run([sys.executable, spec.origin, str(tmp_path / "none.json")], capture_output=True,
                             text=True)
    assert missing.returncode == 2 and missing.stderr.count("\n") == 1


def test_a_pool_part_with_no_result_for_a_while_writes_who_holds_the_gpu_lock_and_every_stack(monkeypatch, capsys):
    """Run AB's 8 evaluations stalled for good and the log said nothing: a pool part now writes the GPU lock's
    holders and every thread's stack once per quiet stretch, and nothing while results come."""
    import threading
    import time
    from types import SimpleNamespace

    from kernelband.evaluation.gpulock import GpuLock

    spec = importlib.util.spec_from_file_location(
        "eval_throughput", Path(__file__).resolve().parents[1] / "benchmarks" / "eval_throughput.py")
    eval_throughput = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(eval_throughput)
    monkeypatch.setattr(eval_throughput, "STALL_S", 0.3)
    lock = GpuLock()
    ev = SimpleNamespace(pool=SimpleNamespace(gpu_lock=lock, activity_now=lambda: {"compile": 1}))
    finished, done = [], threading.Event()
    t0 = time.perf_counter()
    watcher = threading.Thread(target=eval_throughput._watch, args=(ev, "pool@8", finished, t0, done, 0.02))
    with lock.exclusive():
        watcher.start()
        time.sleep(0.8)
    err = capsys.readouterr().err
    assert err.count("pool@8: no result for 0.3 s") == 1  # once per quiet stretch
    assert "gpu lock: ['MainThread: exclusive" in err and "activity: {'compile': 1}" in err
    assert "Thread MainThread (most recent call last)" in err and "time.sleep(0.8)" in err
    finished.append(time.perf_counter() - t0)  # a result: quiet again only after STALL_S more
    time.sleep(0.1)
    done.set()
    watcher.join(5)
    assert "no result" not in capsys.readouterr().err


def test_the_grid_summary_reads_rows_from_a_cut_off_log_and_the_report_json(tmp_path, task_and_variants):
    spec = importlib.util.spec_from_file_location(
        "grid_summary", Path(__file__).resolve().parents[1] / "tools" / "grid_summary.py")
    grid_summary = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(grid_summary)
    task, variants = task_and_variants
    ev = ScriptedEvaluator(variants, task.module_source, search={0: 1.9, 2: 1.5}, recheck={0: (1.4, 1.3), 2: (1.2, 1.1),
                                                                                           1: (1.0, 1.0)})
    row = search_quality.grid_task(Store(tmp_path / "runs.db"), ev, task, None, slots=2, finalists=3)
    log = tmp_path / "sweep.log"
    # the session ended mid-line: the cut line is skipped, the whole one read
    log.write_text("heartbeat\n" + json.dumps({"kind": "grid", **row}) + "\n" + '{"kind": "grid", "task": "exa')
    text = grid_summary.render(search_quality.grid_rows(log))
    assert "| examples:vector_add | " in text and "| variant 0 | 1.400 | 1.300 |" in text
    assert "| grid (by hand) | 1 | 1.900 | 100% | 1.900 | 100% | 1.300 | 1.400 |" in text
    report = tmp_path / "quality1.json"
    report.write_text(json.dumps({"grid": {"rows": [row, {"task": "examples:softmax", "deferred": True}]}}))
    assert "examples:softmax: not started (deadline)" in grid_summary.render(search_quality.grid_rows(report))


def test_a_grid_resumed_from_an_earlier_sessions_rows_runs_only_the_tasks_it_lacks(tmp_path, task_and_variants):
    task, variants = task_and_variants
    earlier = tmp_path / "grid.jsonl"  # an earlier session's rows: a finished task, and one the deadline stopped
    earlier.write_text(json.dumps({"kind": "grid", "task": "examples:softmax", "variants": 4, "evaluations_made": 8,
                                   "evaluations": 4, "best_speedup": 1.3, "confirmed": 1.2, "held_out": 1.1,
                                   "faster": True}) + "\n"
                       + json.dumps({"kind": "grid", "task": task.ref, "deferred": True}) + "\n")
    ev = ScriptedEvaluator(variants, task.module_source, search={}, recheck={i: (1.0, 1.0) for i in range(9)})
    report: dict = {}
    search_quality.part_grid(Store(tmp_path / "runs.db"), [ev], ["examples:softmax", task.ref], report, None,
                             done=search_quality.grid_rows(earlier))
    assert {c[0] for c in ev.calls} >= {-1} and len(ev.calls) > 0  # vector_add ran now
    rows = report["grid"]["rows"]
    assert [r["task"] for r in rows] == ["examples:softmax", task.ref]
    assert rows[0]["earlier"] and not rows[1].get("deferred")
    assert report["grid"]["summary"]["tasks"] == 2 and report["grid"]["faster"] == 1


def test_a_grid_beside_a_bench_stores_its_rows_and_a_second_session_does_not_run_them_again(tmp_path,
                                                                                          task_and_variants):
    task, variants = task_and_variants
    store = Store(tmp_path / "runs.db")
    bench = store.create_bench("examples", {"policies": ["greedy"]})
    first = ScriptedEvaluator(variants, task.module_source, search={}, recheck={i: (1.0, 1.0) for i in range(9)})
    search_quality.part_grid(store, [first], [task.ref], {}, bench)
    assert first.calls and [r["task"] for r in store.grid_rows(bench)] == [task.ref]
    again = ScriptedEvaluator(variants, task.module_source, search={}, recheck={})
    report: dict = {}
    search_quality.part_grid(store, [again], [task.ref], report, bench)
    assert again.calls == [] and report["grid"]["rows"][0]["earlier"]
