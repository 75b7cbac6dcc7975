"""tools/regret_curves.py, which draws the guide's regret figure from the policies' synthetic bandit."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tools"))
try:
    import regret_curves
finally:
    sys.path.pop(0)


def test_regret_is_counted_per_pull_and_a_run_that_runs_out_stops():
    env = regret_curves.environment()
    # bon knows one parent here: 3 arms an iteration at q = 4, and still 40 pulls
    bon = regret_curves.curves(env, "bon", 2, 40, 4, "test")
    assert bon.shape == (2, 40) and not np.isnan(bon).any() and np.all(np.diff(bon, axis=1) >= 0)
    # coordinate's moves run out after 12 kernels x 12 moves: the rest of its curve is missing, not zero
    coordinate = regret_curves.curves(env, "coordinate", 2, 200, 4, "test")
    assert np.isnan(coordinate[:, 144:]).all() and not np.isnan(coordinate[:, :144]).any()
    assert regret_curves.cell(coordinate[:, -1]).startswith("stopped (2 of 2")
    # with the best arm last, the tie-break's kernel 0 costs the time-ranking policies 0.3 or more a pull
    greedy = regret_curves.curves(env, "greedy", 2, 40, 1, "last")
    assert greedy[0, -1] >= 0.3 * 40 and regret_curves.curves(env, "greedy", 2, 40, 1, "test")[0, -1] < greedy[0, -1]


def test_the_script_prints_a_table_per_panel_and_writes_the_figure(tmp_path):
    png = tmp_path / "regret.png"
    done = subprocess.run([sys.executable, str(ROOT / "tools" / "regret_curves.py"), "--seeds", "2", "--horizon", "40",
                           "--q", "4", "--layout", "last", "--png", str(png)], capture_output=True, text=True,
                          timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    rows = [line for line in done.stdout.splitlines() if line.startswith("| `")]
    assert len(rows) == 7 and rows[0].startswith("| `kernelband")
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
