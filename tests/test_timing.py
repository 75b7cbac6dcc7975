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
