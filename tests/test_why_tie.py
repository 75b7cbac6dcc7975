"""tools/why_tie.py: from a bench's runs, the tasks with room to win, how much the strategy tells about a pull's
reward, ψ's spread, and where each policy's runs stop improving."""

from __future__ import annotations

import json
import math
import subprocess
import sys
from pathlib import Path

import pytest

from kernelband.store import Store

ROOT = Path(__file__).resolve().parents[1]


def _run(store: Store, bench: int, task: str, policy: str, seed: int, curve: list[float],
         pulls: list[tuple[str, float]], psi: dict | None = None, status: str = "done") -> None:
    """A run whose iteration i pulls pulls[i] (strategy, speedup over the parent) and has best so far curve[i]."""
    run = store.create_run(task, task, policy, "rewrite", seed, {}, bench_id=bench)
    for i, (best, (strategy, speedup)) in enumerate(zip(curve, pulls), start=1):
        arms = [{"candidate": 0, "strategy": strategy, "outcome": "ok", "speedup": speedup, "counted": True},
                {"candidate": 0, "strategy": strategy, "outcome": "failed", "speedup": None}]
        store.add_iteration(run, i, arms, best, speedup, 1, 0, {"psi": psi} if psi else {}, 0.1)
    if status == "done":
        store.finish_run(run, "done", {"best_speedup": curve[-1]})


def _tool(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, str(ROOT / "tools" / "why_tie.py"), *args], capture_output=True,
                          text=True, timeout=60)


def test_room_arms_psi_and_budget_from_a_bench(tmp_path):
    path = tmp_path / "runs.db"
    store = Store(path)
    bench = store.create_bench("s", {})
    other = store.create_bench("s", {})
    # task a has room: kernelband finds 4x by iteration 2, random 2x only at its last iteration; the strategy
    # says everything about a pull there (tiling always 2x, fusion always 0.5x)
    _run(store, bench, "a", "kernelband", 0, [2.0, 4.0, 4.0, 4.0],
         [("tiling", 2.0), ("tiling", 2.0), ("fusion", 0.5), ("fusion", 0.5)], psi={"tiling": 0.7, "fusion": 0.3})
    _run(store, bench, "a", "random", 0, [1.0, 1.0, 1.0, 2.0],
         [("fusion", 0.5), ("fusion", 0.5), ("tiling", 2.0), ("tiling", 2.0)])
    # task b has none: both policies stay at 1.0, and the strategy tells nothing (both see 0.9 and 1.1)
    _run(store, bench, "b", "kernelband", 0, [1.0, 1.0, 1.0, 1.0],
         [("tiling", 0.9), ("tiling", 1.1), ("fusion", 0.9), ("fusion", 1.1)], psi={"tiling": 0.5, "fusion": 0.5})
    _run(store, bench, "b", "random", 0, [1.0, 1.0, 1.0, 1.0],
         [("tiling", 1.1), ("fusion", 0.9), ("tiling", 0.9), ("fusion", 1.1)])
    _run(store, bench, "b", "random", 1, [1.0], [("tiling", 9.0)], status="running")  # unfinished: left out
    _run(store, other, "b", "random", 0, [50.0], [("tiling", 50.0)])  # another bench: left out
    store.close()

    proc = _tool(str(path), "--bench", str(bench), "--json")
    assert proc.returncode == 0, proc.stderr
    got = json.loads(proc.stdout)
    rows = {r["task"]: r for r in got["tasks"]}
    assert rows["a"]["room"] and rows["a"]["best"] == 4.0 and not rows["b"]["room"] and rows["b"]["best"] == 1.0
    assert rows["a"]["eta2"] == pytest.approx(1.0) and rows["b"]["eta2"] == pytest.approx(0.0, abs=1e-12)
    assert rows["a"]["pulls"] == 8  # failed pulls do not count
    # over all tasks the policies sit closer together than over the task with room
    assert got["geomean_all"]["kernelband"] == pytest.approx(2.0) and got["geomean_all"]["random"] == pytest.approx(
        math.sqrt(2.0))
    assert got["geomean_with_room"] == {"kernelband": pytest.approx(4.0), "random": pytest.approx(2.0)}
    assert got["with_room"] == 1
    assert got["psi_spread"]["median"] == pytest.approx(0.4) and got["psi_spread"]["p10"] == pytest.approx(0.0)
    assert got["budget"]["kernelband"]["first_at_best_median"] == 1.5  # iteration 2 on a, 1 on b
    assert got["budget"]["random"]["first_at_best_median"] == 2.5  # iteration 4 on a, 1 on b
    assert got["budget"]["random"]["improving_in_last_two"] == 0.5 and got["budget"]["kernelband"][
        "improving_in_last_two"] == 0.0

    proc = _tool(str(path), "--bench", str(bench))
    assert proc.returncode == 0
    assert "| a | 4.00 | yes | 1.00 | 8 | 4.00 | 2.00 |" in proc.stdout, proc.stdout
    assert "| geometric mean, 1 tasks with room | | | | | 4.000 | 2.000 |" in proc.stdout
    assert "budget, random: 2 runs of 4 iterations" in proc.stdout


def test_bad_input_is_one_line_with_exit_code_2(tmp_path):
    proc = _tool(str(tmp_path / "none.db"), "--bench", "1")
    assert proc.returncode == 2 and proc.stderr.strip() == f"error: no database at {tmp_path / 'none.db'}"
    Store(tmp_path / "empty.db").close()
    proc = _tool(str(tmp_path / "empty.db"), "--bench", "1")
    assert proc.returncode == 2 and "has no finished run" in proc.stderr
    proc = _tool(str(tmp_path / "empty.db"), "--bench", "1", "--room", "0.9")
    assert proc.returncode == 2 and "--room" in proc.stderr and len(proc.stderr.strip().splitlines()) == 1
