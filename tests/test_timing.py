"""How the rounds of a timing are combined, and that each round's figure is kept for diagnosis."""

from __future__ import annotations

import pytest

from kernelband.evaluation.evaluator import _summarise


def test_rounds_are_combined_and_kept_in_order():
    value, cv, per_round = _summarise([[1.0, 2.0, 9.0], [4.0, 4.0, 4.0]], "median")
    assert value == pytest.approx(3.0)  # mean of the rounds' medians (2 and 4)
    assert per_round == [2.0, 4.0]
    value, _, per_round = _summarise([[1.0, 2.0, 9.0], [], [4.0]], "mean")
    assert per_round == [4.0, 4.0] and value == pytest.approx(4.0)
    assert cv is not None and cv > 0


def test_an_evaluation_records_every_measurement(evaluator, vector_add):
    result = evaluator.evaluate(vector_add)
    assert result.ok
    timed = [s for s in result.shapes if s.cand_ms]
    assert timed
    for s in timed:
        assert s.ref_rounds and s.cand_rounds
        assert s.ref_ms == pytest.approx(sum(s.ref_rounds) / len(s.ref_rounds), rel=1e-4)


def test_who_is_timed_first_alternates_from_shape_to_shape(evaluator, vector_add, monkeypatch):
    calls: list[tuple[str, int]] = []
    ask, ask_ref = evaluator._ask, evaluator._ask_ref

    def cand(worker, message, *args):
        if message.get("op") == "time":
            calls.append(("cand", message["shape"]))
        return ask(worker, message, *args)

    def ref(task, worker, message, *args):
        if message.get("op") == "time":
            calls.append(("ref", message["shape"]))
        return ask_ref(task, worker, message, *args)

    monkeypatch.setattr(evaluator, "_ask", cand)
    monkeypatch.setattr(evaluator, "_ask_ref", ref)
    result = evaluator.evaluate(vector_add)
    timed = [s for s in result.shapes if s.cand_ms]
    assert len(timed) >= 2
    assert [s.timed_first for s in timed] == ["ref", "cand"] * (len(timed) // 2) + ["ref"] * (len(timed) % 2)
    for s in timed:
        first = next(who for who, index in calls if index == s.index)
        assert first == s.timed_first
