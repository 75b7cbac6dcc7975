"""Which kernel a search hands back: the fastest of its finalists on a fresh re-measurement, or k0."""

from __future__ import annotations

from kernelband.evaluation.records import EvalResult, Outcome
from kernelband.search.core import Candidate
from kernelband.search.loop import RunConfig, Search


def _ok(speedup: float, held: float | None = None) -> EvalResult:
    return EvalResult(task="t", outcome=Outcome.OK, speedup=speedup, held_out_speedup=held)


def _search(search_speedups: dict[int, float], rechecks: dict[int, EvalResult], finalists: int = 3) -> Search:
    """A Search with these candidates (id -> speedup during the search); its re-checks answer from
    `rechecks` and are recorded in `checked`."""
    search = object.__new__(Search)
    search.config = RunConfig(finalists=finalists)
    search.candidates = [Candidate(cid, f"src{cid}", result=_ok(s)) for cid, s in search_speedups.items()]
    search.checked = []

    def evaluate(cid, source, which="search", shapes=None):
        assert (which, shapes) == ("held_out", "all")
        search.checked.append(cid)
        return rechecks[cid]

    search._evaluate = evaluate
    return search


def test_the_fastest_on_the_re_measurement_wins_not_the_largest_noisy_one():
    search = _search({0: 1.0, 1: 1.76, 2: 1.30, 3: 1.20, 4: 1.05},
                     {1: _ok(0.67, 0.40), 2: _ok(1.25, 1.22), 3: _ok(1.10, 1.08)})
    best, check, finalists = search._choose()
    assert best.id == 2 and check.speedup == 1.25
    assert sorted(search.checked) == [1, 2, 3]  # the three fastest, not candidate 4 nor k0
    assert [f["candidate"] for f in finalists] == [1, 2, 3]
    assert finalists[0] == {"candidate": 1, "speedup": 1.76, "outcome": "ok", "confirmed_speedup": 0.67,
                            "held_out_speedup": 0.40, "confirmed_call_speedup": None}  # not measured here


def test_k0_is_handed_back_when_no_finalist_is_faster_or_passes():
    slower = _search({0: 1.0, 1: 1.3, 2: 1.2}, {1: _ok(0.95), 2: _ok(0.99)})
    best, check, _ = slower._choose()
    assert best.id == 0 and check is None
    failing = _search({0: 1.0, 1: 1.3}, {1: EvalResult(task="t", outcome=Outcome.WRONG_OUTPUT)})
    best, check, finalists = failing._choose()
    assert best.id == 0 and finalists[0]["outcome"] == "wrong_output"


def test_one_finalist_and_k0_fastest():
    one = _search({0: 1.0, 1: 1.5, 2: 1.4}, {1: _ok(1.2)}, finalists=1)
    assert one._choose()[0].id == 1 and one.checked == [1]
    k0_best = _search({0: 1.0, 1: 0.9}, {})
    assert k0_best._choose()[0].id == 0 and k0_best.checked == []


def test_a_fastest_kernel_failing_its_final_check_counts_even_when_k0_is_handed_back(tmp_path):
    from kernelband.report.metrics import run_facts
    from kernelband.store import Store

    store = Store(tmp_path / "runs.db")

    def run(finalists: list[dict]) -> bool:
        rid = store.create_run("examples:vector_add", "key", "kernelband", "rewrite", 0, {"iterations": 1})
        store.add_evaluation(rid, 0, "search", _ok(1.0))
        store.finish_run(rid, "done", {"best_candidate": 0, "best_speedup": 1.0, "best_outcome": "ok",
                                       "finalists": finalists})
        return run_facts(store, store.run(rid)).top_failed

    wrong = {"candidate": 1, "speedup": 1.3, "outcome": "wrong_output", "confirmed_speedup": None,
             "held_out_speedup": None}
    slower = {"candidate": 1, "speedup": 1.3, "outcome": "ok", "confirmed_speedup": 0.9, "held_out_speedup": 0.9}
    assert run([wrong]) is True
    assert run([slower, wrong]) is False  # only the fastest kernel's check counts
