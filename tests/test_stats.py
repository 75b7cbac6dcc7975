"""The report's statistics (report/stats.py): known inputs give known intervals and p-values."""

from __future__ import annotations

import math

import numpy as np
import pytest
from scipy import stats as sps
from typer.testing import CliRunner

from kernelband.cli.app import app
from kernelband.report import stats
from kernelband.report.html import write_report
from kernelband.report.metrics import report_data

VALUES = [1.0, 1.2, 1.5, 2.0, 0.9, 1.1, 3.0, 1.3]


def test_geomean_interval_is_a_fixed_seed_percentile_bootstrap_of_mean_log():
    got = stats.geomean_interval(VALUES)
    assert got["value"] == pytest.approx(math.exp(np.mean(np.log(VALUES))))
    assert got["n"] == 8
    # pinned: the fixed seed gives the same interval on every machine
    assert got["low"] == pytest.approx(1.10218, abs=1e-4) and got["high"] == pytest.approx(1.81489, abs=1e-4)
    # and it is the percentile bootstrap: a hand-rolled one with many resamples lands within a percent
    rng = np.random.default_rng(1)
    logs = np.log(VALUES)
    means = [logs[rng.integers(0, len(logs), len(logs))].mean() for _ in range(20000)]
    low, high = np.exp(np.percentile(means, [2.5, 97.5]))
    assert got["low"] == pytest.approx(low, rel=0.01) and got["high"] == pytest.approx(high, rel=0.01)
    assert stats.geomean_interval(VALUES) == got


def test_fast1_interval_and_degenerate_cases():
    got = stats.share_interval([True, False, True, True, False, False, True, False])
    assert got == {"value": 0.5, "low": 0.125, "high": 0.875, "n": 8}
    assert stats.share_interval([True]) == {"value": 1.0, "low": None, "high": None, "n": 1}
    assert stats.geomean_interval([2.0, 2.0, 2.0])["low"] == pytest.approx(2.0)


def test_wilcoxon_p_matches_scipy_on_a_hand_made_case():
    # six pairs, all in favour of one side: the exact two-sided p is 2 / 2**6
    assert stats.wilcoxon_p([0.1, 0.2, 0.3, 0.4, 0.5, 0.6]) == pytest.approx(0.03125)
    mixed = [0.3, -0.1, 0.25, 0.4, -0.05, 0.2, 0.15]
    assert stats.wilcoxon_p(mixed) == pytest.approx(sps.wilcoxon(mixed).pvalue)
    assert stats.wilcoxon_p([0.0, 0.0]) == 1.0 and stats.wilcoxon_p([]) is None


def test_anytime_area_and_evaluations_to_95_percent():
    runs = [stats.Sample("t", "a", 0, 2.0, [1.0, 2.0, 2.0, 2.0]),
            stats.Sample("t", "b", 0, 1.9, [1.5, 1.5, 1.9]),  # stopped after 3: keeps 1.9 to the horizon
            stats.Sample("u", "a", 0, 1.0, [1.0, 1.0]),
            stats.Sample("u", "b", 0, 1.0, [1.0])]
    got = stats.compute(runs, fast=1.1)
    assert got["horizon"] == 4
    a, b = got["policies"]["a"], got["policies"]["b"]
    log = math.log
    assert a["auc"] == pytest.approx(math.exp((3 * log(2.0) / 4 + 0.0) / 2))
    assert b["auc"] == pytest.approx(math.exp(((2 * log(1.5) + 2 * log(1.9)) / 4 + 0.0) / 2))
    # task t's best is 2.0: 95 % is 1.9; a reaches it at evaluation 2, b at 3; task u's best is k0: 0
    assert stats.evaluations_to([1.0, 2.0], 1.9) == 2 and stats.evaluations_to([1.5], 1.9) is None
    assert a["evals_to_95_median"] == 1.0 and b["evals_to_95_median"] == 1.5
    assert a["reached_95"] == b["reached_95"] == 2
    assert a["fast1"]["value"] == 0.5


def test_pairs_compare_only_the_same_task_and_seed():
    runs = []
    for i in range(6):
        runs.append(stats.Sample(f"t{i}", "kernelband", 0, 1.0 + 0.1 * (i + 1), []))
        runs.append(stats.Sample(f"t{i}", "random", 0, 1.0, []))
    runs.append(stats.Sample("t9", "random", 3, 5.0, []))  # no partner: left out of the pair
    (pair,) = stats.compute(runs, fast=1.1)["pairs"]
    assert (pair["a"], pair["b"], pair["n"], pair["a_wins"], pair["b_wins"]) == ("kernelband", "random", 6, 6, 0)
    assert pair["p"] == pytest.approx(0.03125)
    assert pair["ratio_geomean"] == pytest.approx(math.exp(np.mean(np.log([1.1, 1.2, 1.3, 1.4, 1.5, 1.6]))))


def test_the_bench_report_shows_the_statistics(tmp_path):
    from test_report import build_db

    store, bench, _ = build_db(tmp_path / "runs.db")
    data = report_data(store, f"bench:{bench}")
    assert set(data["stats"]["policies"]) == {"kernelband", "beam"}
    assert data["stats"]["policies"]["kernelband"]["runs"] == 6
    (pair,) = data["stats"]["pairs"]
    assert pair["n"] == 3  # beam ran seed 0 only
    page = write_report(data, tmp_path / "out").read_text()
    assert "Paired comparisons on the same (task, seed)" in page and "Wilcoxon" in page
    res = CliRunner().invoke(app, ["report", f"bench:{bench}", "--db", str(store.path), "--format", "text"])
    assert res.exit_code == 0, res.output
    assert "95 % bootstrap intervals" in res.output and "Paired comparisons" in res.output
    assert report_data(store, "run:1")["stats"] is None


def test_two_benches_compare_on_the_same_task_and_seed(tmp_path):
    import importlib.util
    from pathlib import Path

    from test_report import build_db

    spec = importlib.util.spec_from_file_location(
        "compare_benches", Path(__file__).resolve().parents[1] / "tools" / "compare_benches.py")
    tool = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(tool)
    store, first, _ = build_db(tmp_path / "runs.db")
    _, second, _ = build_db(tmp_path / "runs.db")  # the same runs again: nothing between them
    got = tool.compare(store, [first, second], "kernelband")
    (pair,) = got["pairs"]
    assert pair["n"] == 6 and pair["ratio_geomean"] == pytest.approx(1.0) and pair["p"] == 1.0
    assert got["policies"][f"bench {first}"]["runs"] == got["policies"][f"bench {second}"]["runs"] == 6


def test_the_means_and_pairs_again_over_the_tasks_with_room():
    """A task where no run of any policy reaches ROOM ends at about 1.0 for all and pulls the means over all
    tasks together; the report gives them again over the tasks with room, the same subset for every policy."""
    from kernelband.report.tables import stats_tables

    runs = []
    for seed in range(4):
        runs += [stats.Sample("roomy", "kernelband", seed, 4.0, []), stats.Sample("roomy", "random", seed, 2.0, []),
                 stats.Sample("flat", "kernelband", seed, 1.0, []), stats.Sample("flat", "random", seed, 1.05, [])]
    got = stats.compute(runs, fast=1.1)
    assert got["policies"]["kernelband"]["geomean"]["value"] == pytest.approx(2.0)
    room = got["room"]
    assert room["min"] == stats.ROOM and room["tasks"] == 1
    assert room["geomean"]["kernelband"]["value"] == pytest.approx(4.0) and room["geomean"]["random"]["n"] == 4
    (pair,) = room["pairs"]
    assert (pair["n"], pair["a_wins"], pair["b_wins"]) == (4, 4, 0) and pair["ratio_geomean"] == pytest.approx(2.0)
    keys = [t.id for t in stats_tables(got)]
    assert keys == ["stats", "stats-pairs", "stats-room", "stats-room-pairs"]
    (table,) = [t for t in stats_tables(got) if t.id == "stats-room"]
    assert "the 1 of 2 tasks where the best of all runs reaches 1.1x" in table.title
    # every task with room, or none: the tables over all tasks say it all
    assert [t.id for t in stats_tables(stats.compute([s for s in runs if s.task == "roomy"], 1.1))] == [
        "stats", "stats-pairs"]
    assert [t.id for t in stats_tables(stats.compute([s for s in runs if s.task == "flat"], 1.1))] == [
        "stats", "stats-pairs"]
