"""A one-shot `kernelband eval` knows the reference's usual times before it times, and the script that
measures one-shot evals of each example against itself (benchmarks/eval_self.py: its figure comes from a GPU)."""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
SCRIPT = ROOT / "benchmarks" / "eval_self.py"


def _script():
    spec = importlib.util.spec_from_file_location("eval_self", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_a_one_shot_eval_learns_the_references_usual_times_before_timing(monkeypatch):
    """A disturbed reference measurement is told by its usual time: in a fresh process there is none unless
    the eval measures it first (the GPU's re-measure rule is switched on here, on the interpreter)."""
    from kernelband import api
    from kernelband.evaluation import evaluator as evaluator_module
    from kernelband.evaluation.evaluator import Evaluator

    known: list = []

    class Checked(Evaluator):
        def __init__(self, *args, **kwargs):
            super().__init__(*args, **kwargs)
            self.recheck_timings = True  # as on a GPU

        def evaluate(self, task, source=None, preset=None, which="search", seed=None, profile=True):
            shapes = [s.index for s in self.info(task).shapes if not s.held_out]
            known.extend(self.timing.history.expected((task.key, self.preset.name, i)) for i in shapes)
            return super().evaluate(task, source, preset, which, seed, profile)

    monkeypatch.setattr(evaluator_module, "Evaluator", Checked)  # api.evaluate imports it when called
    result = api.evaluate("examples:vector_add", interpreter=True, seed=1)
    assert result.ok, (result.outcome, result.detail)
    assert known and None not in known


def test_the_self_eval_script_runs_fresh_evals_and_judges_each_shape(tmp_path):
    rows_file = tmp_path / "rows.json"
    env = {**os.environ, "KERNELBAND_MODE": "interpreter"}
    proc = subprocess.run([sys.executable, str(SCRIPT), "--runs", "1", "--examples", "vector_add", "--tolerance",
                           "100", "--out", str(rows_file)], capture_output=True, text=True, timeout=600, env=env)
    assert proc.returncode == 0, proc.stderr[-2000:]
    data = json.loads(rows_file.read_text())
    assert data["devices"] == ["Triton interpreter (CPU)"] and data["runs"] == 1
    rows = data["rows"]
    assert rows and {r["example"] for r in rows} == {"vector_add"}
    assert all(len(r["speedups"]) == 1 and r["worst"] == round(abs(r["speedups"][0] - 1), 4) < 100 for r in rows)
    [record] = data["records"]["vector_add"]  # the eval's whole record, each shape's two times in it
    assert [s["speedup"] for s in record["shapes"] if s.get("speedup") is not None] == [
        pytest.approx(s, abs=1e-4) for r in rows for s in r["speedups"]]
    assert all(s["ref_ms"] > 0 and s["cand_ms"] > 0 for s in record["shapes"])
    assert "| vector_add | n=4096 |" in proc.stdout and "within 10000 %" in proc.stdout
    # the verdict: a shape outside the tolerance, or an evaluation that is not ok, fails
    script = _script()
    assert script.verdict(rows, 100) is True
    assert script.verdict([{**rows[0], "worst": 0.03}], 0.02) is False
    assert script.verdict([{**rows[0], "failed": ["timeout"]}], 100) is False
    table = script.rows({"softmax": [{"outcome": "ok", "shapes": [{"label": "a", "speedup": 0.72}]},
                                     {"outcome": "ok", "shapes": [{"label": "a", "speedup": 1.01}]}]})
    assert table == [{"example": "softmax", "shape": "a", "speedups": [0.72, 1.01], "worst": 0.28, "failed": []}]
    # the count the target is stated in: shapes within the tolerance in every run
    assert script.within(table + [{**table[0], "shape": "b", "worst": 0.01}], 0.02) == 1
    assert f"{len(rows)} of {len(rows)} shapes within 10000 % in all 1 runs" in proc.stdout


def test_the_self_eval_script_refuses_an_unknown_example():
    proc = subprocess.run([sys.executable, str(SCRIPT), "--examples", "nope"], capture_output=True, text=True,
                          timeout=120)
    assert proc.returncode == 2 and proc.stderr.startswith("error: no built-in example nope")


def test_the_self_eval_spreads_examples_over_gpus_one_process_at_a_time_on_each(monkeypatch):
    """With --gpus, each example's fresh processes run one after another on one GPU, and the examples share
    the GPUs: each eval has its GPU to itself, and ten processes of nine examples fit a session."""
    import threading
    import time

    script = _script()
    calls: list[tuple[str, str]] = []
    busy: dict[str, int] = {}
    overlap = []
    lock = threading.Lock()

    def eval_once(example, ncu, timeout, baselines=False, gpu=None):
        with lock:
            calls.append((example, gpu))
            busy[gpu] = busy.get(gpu, 0) + 1
            overlap.append(busy[gpu])
        time.sleep(0.2)
        with lock:
            busy[gpu] -= 1
        return {"outcome": "ok", "device": "d", "shapes": [{"label": "n=1", "speedup": 1.0}]}

    monkeypatch.setattr(script, "eval_once", eval_once)
    assert script.main(["--runs", "2", "--gpus", "0,1", "--examples", "vector_add,softmax"]) == 0
    by_example = {e: {g for x, g in calls if x == e} for e in ("vector_add", "softmax")}
    assert all(len(gpus) == 1 for gpus in by_example.values())
    assert by_example["vector_add"] | by_example["softmax"] == {"0", "1"}
    assert len(calls) == 4 and max(overlap) == 1


def test_the_self_eval_resumes_an_earlier_part_and_runs_only_the_rest(monkeypatch, tmp_path):
    """Ten processes of nine examples outlast one GPU's session: a part's --out file, given to --resume,
    counts its processes, and only the missing ones run (the partial figure says so)."""
    import lzma

    script = _script()
    calls: list[str] = []

    def eval_once(example, ncu, timeout, baselines=False, gpu=None):
        calls.append(example)
        return {"outcome": "ok", "device": "d", "shapes": [{"label": "n=1", "speedup": 1.0 + len(calls) / 1000}]}

    part = tmp_path / "part.json"
    # a first part cut short: vector_add whole, softmax one process of three
    part.write_text(json.dumps({"devices": ["d"], "runs": 3, "rows": [], "records": {
        "vector_add": [{"outcome": "ok", "device": "d", "shapes": [{"label": "n=1", "speedup": 1.0}]}] * 3,
        "softmax": [{"outcome": "ok", "device": "d", "shapes": [{"label": "n=1", "speedup": 1.015}]}]}}))
    packed = tmp_path / "part.json.xz"
    packed.write_bytes(lzma.compress(part.read_bytes()))
    monkeypatch.setattr(script, "eval_once", eval_once)
    out = tmp_path / "whole.json"
    assert script.main(["--runs", "3", "--examples", "vector_add,softmax", "--resume", str(packed),
                        "--out", str(out)]) == 0
    assert calls == ["softmax", "softmax"]
    whole = json.loads(out.read_text())
    assert {r["example"]: r["speedups"] for r in whole["rows"]} == {
        "vector_add": [1.0, 1.0, 1.0], "softmax": [1.015, 1.001, 1.002]}
    # an unreadable part is bad input, not a traceback
    (tmp_path / "bad.json").write_text("{}")
    assert script.main(["--examples", "vector_add", "--resume", str(tmp_path / "bad.json")]) == 2


def test_a_cut_short_self_eval_says_its_figure_is_partial(monkeypatch, capsys):
    script = _script()
    calls: list[str] = []

    def eval_once(example, *args, **kwargs):  # the second process never returns (its lane ends)
        calls.append(example)
        if len(calls) > 1:
            raise RuntimeError("cut short")
        return {"outcome": "ok", "device": "d", "shapes": [{"label": "n=1", "speedup": 1.0}]}

    monkeypatch.setattr(script, "eval_once", eval_once)
    monkeypatch.setattr(script.threading, "excepthook", lambda args: None)
    script.main(["--runs", "2", "--examples", "vector_add"])
    assert "1 of 2 processes run: the figure is partial" in capsys.readouterr().out
