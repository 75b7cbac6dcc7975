"""tools/compile_ceiling.py: a bench's speedup over torch.compile now, at the speed-of-light bound and at a
fraction of it, per task and in geometric mean."""

from __future__ import annotations

import json
import math
import subprocess
import sys
from pathlib import Path

from kernelband.evaluation.records import EvalResult, Outcome, ShapeResult
from kernelband.store import Store

ROOT = Path(__file__).resolve().parents[1]


def _result(shapes: list[tuple[float, float, float | None]], held_out: tuple[float, float, float] | None = None):
    """An evaluation whose shapes have (candidate ms, torch.compile ms, bound ms)."""
    result = EvalResult(task="t", outcome=Outcome.OK)
    result.shapes = [ShapeResult(i, f"s{i}", False, correct=True, cand_ms=c, ref_ms=c, compiled_ms=t, bound_ms=b)
                     for i, (c, t, b) in enumerate(shapes)]
    if held_out:
        c, t, b = held_out
        result.shapes.append(ShapeResult(len(shapes), "h", True, correct=True, cand_ms=c, compiled_ms=t, bound_ms=b))
    return result


def _run(store: Store, task: str, which: str, result: EvalResult, status: str = "done") -> None:
    run = store.create_run(task, task, "kernelband", "rewrite", 0, {})
    store.add_evaluation(run, 3, which, result)
    if status == "done":
        store.finish_run(run, "done", {"best_candidate": 3})


def _ceiling(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, str(ROOT / "tools" / "compile_ceiling.py"), *args], capture_output=True,
                          text=True, timeout=60)


def test_now_ceiling_and_a_fraction_of_the_bound_per_task_and_in_geometric_mean(tmp_path):
    one, two = tmp_path / "one.db", tmp_path / "two.db"
    store = Store(one)
    # a: compile 3 ms over 2 shapes, the kernel 4 ms, the bound 2 ms; the shape without a bound and the
    # held-out shape do not count
    _run(store, "a", "handed_back", _result([(1.0, 1.0, 0.5), (3.0, 2.0, 1.5), (9.0, 9.0, None)],
                                            held_out=(1.0, 100.0, 0.1)))
    _run(store, "b", "search", _result([(2.0, 4.0, 1.0)]))  # no hand-back stored: its best candidate's search
    _run(store, "c", "handed_back", _result([(1.0, 1.0, 0.5)]), status="running")  # not finished: left out
    store.close()
    store = Store(two)
    _run(store, "b", "handed_back", _result([(1.0, 4.0, 2.0)]))  # a later database's run of b replaces it
    store.close()

    proc = _ceiling(str(one), str(two), "--at", "0.5", "--json")
    assert proc.returncode == 0, proc.stderr
    got = json.loads(proc.stdout)
    rows = {r["task"]: r for r in got["rows"]}
    assert set(rows) == {"a", "b"} and rows["a"]["shapes"] == 2
    assert math.isclose(rows["a"]["now"], 3 / 4) and math.isclose(rows["a"]["ceiling"], 3 / 2)
    assert math.isclose(rows["a"]["at 0.5"], 3 * 0.5 / 2)
    assert math.isclose(rows["b"]["now"], 4.0) and math.isclose(rows["b"]["ceiling"], 2.0)
    assert math.isclose(got["geomean"]["now"], math.sqrt(3 / 4 * 4.0))
    assert math.isclose(got["geomean"]["ceiling"], math.sqrt(3 / 2 * 2.0))

    proc = _ceiling(str(one))
    assert proc.returncode == 0 and "| a | 2 | 0.75 | 1.50 | 1.35 |" in proc.stdout, proc.stdout


def test_bad_input_is_one_line_with_exit_code_2(tmp_path):
    proc = _ceiling(str(tmp_path / "none.db"))
    assert proc.returncode == 2 and proc.stderr.strip() == f"error: no database at {tmp_path / 'none.db'}"
    (tmp_path / "x.db").write_text("not a database")
    proc = _ceiling(str(tmp_path / "x.db"))
    assert proc.returncode == 2 and proc.stderr.startswith("error: ") and len(proc.stderr.strip().splitlines()) == 1
    proc = _ceiling(str(tmp_path / "x.db"), "--at", "1.5")
    assert proc.returncode == 2 and "--at" in proc.stderr
