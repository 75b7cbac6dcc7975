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


class _Driver:
    """Stands in for Triton's CUDA driver, whose `clear_cache` do_bench calls before each timed call."""

    def __init__(self, log: list):
        self.log = log

    def clear_cache(self, cache):
        self.log.append(("flush", cache))


def test_each_flush_is_followed_by_a_gpu_wait_inside_the_block_only():
    from kernelband.worker.timing import gpu_ahead

    log: list = []
    driver = _Driver(log)
    with gpu_ahead(150.0, driver=driver, sleep=lambda cycles: log.append(("sleep", cycles))) as waits:
        driver.clear_cache("c1")
        driver.clear_cache("c2")
    driver.clear_cache("c3")
    assert len(waits) == 2  # reported with each timing, so a Triton that flushes otherwise is noticed
    assert log == [("flush", "c1"), ("sleep", 300_000), ("flush", "c2"), ("sleep", 300_000), ("flush", "c3")]
    assert "clear_cache" not in vars(driver)  # the class's own method is back


def test_no_wait_when_the_preset_asks_for_none():
    from kernelband.worker.timing import gpu_ahead

    log: list = []
    driver = _Driver(log)
    with gpu_ahead(0.0, driver=driver, sleep=lambda cycles: log.append(("sleep", cycles))) as waits:
        driver.clear_cache("c1")
    assert log == [("flush", "c1")] and waits == []


def test_our_presets_keep_the_gpu_ahead_and_the_peers_protocol_does_not():
    from kernelband.evaluation.records import PRESETS

    assert PRESETS["default"].ahead_us > 0 and PRESETS["paper"].ahead_us > 0
    assert PRESETS["tritonbench"].ahead_us == 0  # TritonBench's do_bench as its scripts call it
    assert PRESETS["default"].wire()["ahead_us"] == PRESETS["default"].ahead_us


def test_a_candidate_that_skips_the_l2_flush_is_caught():
    from kernelband.worker.guards import TamperGuard
    from kernelband.worker.timing import gpu_ahead

    class Driver(_Driver):
        def get_empty_cache_for_benchmark(self):
            return "cache"

    driver = Driver([])
    guard = TamperGuard(driver=driver)
    assert guard.changed() == []
    with gpu_ahead(150.0, driver=driver, sleep=lambda cycles: None):
        assert "triton driver:clear_cache" in guard.changed()  # the wait is ours, and only inside timing
    assert guard.changed() == []
    driver.clear_cache = lambda cache: None  # a module's no-op flush on the driver...
    assert guard.changed() == ["triton driver:clear_cache"]
    del driver.clear_cache
    Driver.get_empty_cache_for_benchmark = lambda self: None  # ...or on its class
    assert guard.changed() == ["triton driver:get_empty_cache_for_benchmark"]
