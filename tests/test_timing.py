"""How the rounds of a timing are combined, and that each round's figure is kept for diagnosis."""

from __future__ import annotations

import pytest
import triton
import triton.language as tl

from kernelband.evaluation import context
from kernelband.evaluation.interleave import summarise as _summarise
from kernelband.evaluation.records import PRESETS


def test_rounds_are_combined_and_kept_in_order():
    value, cv, per_round = _summarise([[1.0, 2.0, 9.0], [4.0, 4.0, 4.0]], "median")
    assert value == pytest.approx(3.0)  # mean of the rounds' medians (2 and 4)
    assert per_round == [2.0, 4.0]
    value, _, per_round = _summarise([[1.0, 2.0, 9.0], [], [4.0]], "mean")
    assert per_round == [4.0, 4.0] and value == pytest.approx(4.0)
    assert cv is not None and cv > 0


def test_the_trimmed_mean_sets_the_extremes_aside_and_averages_two_groups():
    """`stat="trimmed"`: a disturbed iteration moves it no more than the median; iterations in two groups
    move it by their shares, not in a jump from one group to the other as the median does."""
    from kernelband.evaluation.interleave import trimmed_mean
    from kernelband.evaluation.records import Preset

    steady = [1.0] * 18 + [1.02, 50.0]  # one disturbed iteration in 20: set aside
    assert _summarise([steady], "trimmed")[0] == pytest.approx(1.0)  # 2 of 20 set aside at each end
    assert _summarise([steady], "mean")[0] > 3.0
    two = [[0.74] * (10 + d) + [0.78] * (10 - d) for d in (-1, 1)]  # the shares move by 1 in 20
    medians = [_summarise([r], "median")[0] for r in two]
    trimmed = [trimmed_mean(r) for r in two]
    assert medians[0] - medians[1] == pytest.approx(0.04)  # the median jumps from one group to the other
    assert 0 < trimmed[0] - trimmed[1] < 0.01
    assert trimmed_mean([2.0, 1.0, 3.0]) == pytest.approx(2.0)  # too few to set any aside: the mean
    # rules 6: `default` measures so (cosine_compute's CV of 5 evaluations 1.16 % by the median, 0.62 % so)
    by_default = [_summarise([r], PRESETS["default"].stat)[0] for r in two]
    assert 0 < by_default[0] - by_default[1] < 0.01
    with pytest.raises(ValueError, match="stat is"):
        Preset("x", warmup=1, rep=1, unit="iters", stat="mode", rounds=1)


def _call(start: float, *kernels: float) -> list:
    """A flushed call as CUPTI lists it: the flush, the GPU-ahead wait's kernel, then kernels of the given
    lengths back to back, 1 µs apart (µs)."""
    acts = [("vectorized_elementwise_kernel<FillFunctor>", start, start + 40.0),
            ("at::cuda::(anonymous namespace)::spin_kernel(long)", start + 41.0, start + 191.0)]
    t = start + 195.0  # the launch's start-up: not in the span
    for k, length in enumerate(kernels):
        acts.append((f"candidate_{k}", t, t + length))
        t += length + 1.0
    return acts


def test_a_calls_span_runs_from_its_first_kernels_start_to_its_last_kernels_end():
    """worker/timing.call_spans on do_bench's sequence: a first call, 5 flushed calls for its estimate, warm-up
    calls without a flush, then the timed calls. Only the last `calls` count, each from its first kernel's
    start to its last one's end less the launch gaps between its kernels, the flush and the wait left out."""
    from kernelband.worker.timing import call_spans

    acts = [("candidate_0", 0.0, 2.0), ("candidate_1", 3.0, 4.0)]
    for i in range(5):
        acts += _call(100.0 + 300 * i, 9.0)
    acts += [("candidate_0", 2000.0, 2002.0), ("candidate_1", 2003.0, 2004.0)]  # warm-up: no flush
    for i, (a, b) in enumerate([(2.0, 1.0), (2.5, 1.0), (2.0, 1.5)]):
        acts += _call(3000.0 + 300 * i, a, b)
    spans, why = call_spans(list(reversed(acts)), calls=3, waits=8)  # in any order
    assert why == "" and spans == pytest.approx([0.003, 0.0035, 0.0035])  # less the 1 µs launch gaps
    # a candidate that queues a wait kernel of its own, or a call with no GPU work, is not read at all
    assert call_spans(acts, calls=3, waits=9)[0] == []
    bare = acts[:-3] + [("at::cuda::(anonymous namespace)::spin_kernel(long)", 3641.0, 3791.0)]  # no kernels
    assert call_spans(bare, calls=3, waits=8) == ([], "a timed call with no GPU activity")


def test_a_span_leaves_out_launch_gaps_and_keeps_the_host_between_kernels():
    """Rules 11 (worker/timing.busy_us): the GPU starts a queued kernel 1 or 2 µs after the last, by a state that
    flips between measurements; such gaps are left out. A longer one (the host in between: a synchronisation,
    work on the CPU) stays in, and kernels that overlap on two streams count once."""
    from kernelband.worker.timing import LAUNCH_GAP_US, busy_us

    assert busy_us([("a", 0.0, 4.2), ("b", 5.2, 8.2)]) == pytest.approx(7.2)
    assert busy_us([("a", 0.0, 4.2), ("b", 6.2, 9.2)]) == pytest.approx(7.2)  # the other state: the same
    host = 4.2 + LAUNCH_GAP_US + 20.0
    assert busy_us([("a", 0.0, 4.2), ("copy", host, host + 1.0)]) == pytest.approx(host + 1.0)
    assert busy_us([("a", 0.0, 4.0), ("b", 1.0, 5.0), ("c", 5.5, 6.0)]) == pytest.approx(5.5)


def test_the_span_timer_reads_the_profilers_record_and_falls_back_to_events_without_one():
    """worker/timing._timed_spans: do_bench runs under the guard's torch.profiler.profile; the calls' spans
    replace the event times, or the events stay with the reason when the profiler cannot run."""
    import contextlib
    from types import SimpleNamespace

    from torch.autograd import DeviceType

    from kernelband.worker.timing import _timed_spans

    acts = [a for i, k in enumerate((2.0, 3.0)) for a in _call(300.0 * i, k)]
    waits: list = []

    def do_bench(fn, warmup, rep, return_mode):
        waits.extend([1, 1])  # the two flushes' GPU-ahead waits (gpu_ahead)
        return [9.0, 9.0]  # the events' times, launch included

    @contextlib.contextmanager
    def profile(activities):
        yield SimpleNamespace(events=lambda: [
            SimpleNamespace(name=n, device_type=DeviceType.CUDA, time_range=SimpleNamespace(start=a, end=b))
            for n, a, b in acts])

    def failing(activities):
        raise RuntimeError("CUPTI_ERROR_NOT_INITIALIZED")

    class Guard:
        def __init__(self, profiler):
            self.profiler = profiler

        def original(self, name):
            assert name == "torch.profiler:profile"
            return self.profiler

    times, read = _timed_spans(do_bench, lambda: None, 1.0, 10.0, Guard(profile), waits)
    assert times == pytest.approx([0.002, 0.003]) and read == {"timer": "span"}
    times, read = _timed_spans(do_bench, lambda: None, 1.0, 10.0, Guard(failing), waits)
    assert times == [9.0, 9.0] and read["timer"] == "events"
    assert "CUPTI_ERROR_NOT_INITIALIZED" in read["span_error"]


def test_the_span_timer_reads_kinetos_raw_record_to_the_nanosecond():
    """worker/timing._activities reads the profiler's raw record (no event tree), with its epoch timestamps
    (about 1.8e18 ns) subtracted as integers: in float µs they would keep only quarters of a µs."""
    from types import SimpleNamespace

    from torch.autograd import DeviceType

    from kernelband.worker.timing import _activities

    epoch = 1_764_165_000_123_456_789

    def event(name, start, end, device=DeviceType.CUDA):
        return SimpleNamespace(name=lambda: name, device_type=lambda: device,
                               start_ns=lambda: epoch + start, end_ns=lambda: epoch + end)

    record = [event("cudaLaunchKernel", 0, 500, DeviceType.CPU), event("spin_kernel", 100, 150_100),
              event("_l2_norm_fwd_1pass_kernel", 150_137, 151_174)]
    prof = SimpleNamespace(profiler=SimpleNamespace(kineto_results=SimpleNamespace(events=lambda: record)))
    acts = _activities(prof)
    assert [a[0] for a in acts] == ["spin_kernel", "_l2_norm_fwd_1pass_kernel"]
    assert acts[1][2] - acts[1][1] == pytest.approx(1.037, abs=1e-9)  # µs, to the ns
    assert acts[1][1] - acts[0][2] == pytest.approx(0.037, abs=1e-9)


def test_a_short_shape_is_timed_by_spans_and_by_events_on_both_sides_when_one_sides_cannot_be_read(monkeypatch):
    """Timing.time under Preset.timer="span" (the worker's replies played by stand-ins): the reference's
    first measurements by events decide the task and the shape are short; both sides are then asked for spans. Where the
    candidate's spans cannot be read, the shape is measured again by events on both sides, so a speedup never
    compares one side's spans with the other's events."""
    import dataclasses
    from types import SimpleNamespace

    from kernelband.evaluation.context import EvalContext
    from kernelband.evaluation.evaluator import Evaluator
    from kernelband.evaluation.records import EvalResult, Outcome, ShapeResult

    asked = []

    def reply(who, message):
        span, index = message["span"], message["shape"]
        asked.append((who, index, span))
        readable = span and (who == "ref" or index == 0)  # shape 1: the candidate's spans are unreadable
        return {"ok": True, "times": [0.002 if readable else 0.005] * 5, "gpu_waits": 5,
                "timer": "span" if readable else "events",
                **({"span_error": "4 wait kernels for 5 waits queued"} if span and not readable else {})}

    shapes = [SimpleNamespace(index=i, label=f"s{i}", held_out=False) for i in (0, 1)]

    def timing(preset):
        """`Timing.time` on a GPU evaluator of stand-ins: the shapes' results, the result and the evaluator."""
        result = EvalResult(task="t", outcome=Outcome.OK)
        result.shapes = [ShapeResult(i, f"s{i}", False, correct=True) for i in (0, 1)]
        with Evaluator(mode="interpreter", warm=0, use_ncu=False) as ev:
            monkeypatch.setattr(ev.settings, "mode", "gpu")
            monkeypatch.setattr(ev, "recheck_timings", True)
            monkeypatch.setattr(ev.references, "ask", lambda task, worker, message, *a: reply("ref", message))
            monkeypatch.setattr(context, "ask", lambda worker, message, *a: reply("cand", message))
            ctx = EvalContext(SimpleNamespace(key="t"), None, None, None, "", shapes, preset, 0, result,
                              ev.pool.gpu_lock)
            ev.timing.time(ctx)
        return ctx.by_index, result, ev

    preset = dataclasses.replace(PRESETS["default"], name="span", timer="span", span_task_ms=0.2, span_rounds=1)
    by_index, result, _ = timing(preset)
    assert asked == [("ref", 0, False), ("ref", 1, False),  # the task's time learnt by events: 0.01 ms
                     ("ref", 0, True), ("cand", 0, True),  # so its short shapes by spans: each side's usual
                     ("ref", 0, True), ("cand", 0, True),  # time by spans learnt alone first, then the pair
                     ("ref", 1, True), ("cand", 1, True),
                     ("cand", 1, True), ("ref", 1, True),  # the candidate's unreadable
                     ("cand", 1, False), ("ref", 1, False)]  # so both again by events
    assert (by_index[0].timer, by_index[0].ref_ms, by_index[0].speedup) == ("span", 0.002, 1.0)
    assert (by_index[1].timer, by_index[1].ref_ms, by_index[1].speedup) == ("mixed", 0.005, 1.0)
    assert any("timed by events" in n and "s1 (cand: 4 wait kernels" in n for n in result.notes), result.notes

    # a task that takes longer in all than `span_task_ms`: its short shapes stay with the events
    asked.clear()
    by_index, _, ev = timing(dataclasses.replace(preset, name="longer", span_task_ms=0.008))
    assert not any(span for _, _, span in asked) and {s.timer for s in by_index.values()} == {"events"}
    assert ev.timing._short_tasks == {("t", "longer"): False}
    # the held-out shapes do not count: without shape 1 the task is short again
    asked.clear()
    shapes[1].held_out = True
    _, _, ev = timing(dataclasses.replace(preset, name="longer", span_task_ms=0.008))
    assert ("cand", 0, True) in asked and ev.timing._short_tasks == {("t", "longer"): True}
    # `default` sets no limit on the task: each shape's reference learnt by events, then its short shapes by
    # spans however long the task is
    asked.clear()
    shapes[1].held_out = False
    by_index, _, _ = timing(dataclasses.replace(PRESETS["default"], name="any"))
    assert asked[:2] == [("ref", 0, False), ("ref", 0, True)], asked
    assert by_index[0].timer == "span" and ("ref", 1, True) in asked
    # and measures a shape timed by spans in two ABBA rounds (rules 10; steady calls: no more), one whose spans
    # fall back to events in the preset's own rounds
    assert asked[2:7] == [("cand", 0, True), ("ref", 0, True), ("cand", 0, True), ("cand", 0, True),
                          ("ref", 0, True)], asked
    assert len(by_index[0].ref_rounds) == len(by_index[0].cand_rounds) == 2
    assert asked[-2:] == [("cand", 1, False), ("ref", 1, False)] and len(by_index[1].ref_rounds) == 1


def test_a_shape_whose_calls_vary_is_measured_in_more_rounds_until_its_speedup_is_precise():
    """interleave.measure_shape past its `rounds`: two more ABBA rounds at a time, up to `max_rounds`, while the
    speedup's standard error from the iterations is over `target_se`; steady calls stop at `rounds`."""
    import random

    from kernelband.evaluation import interleave

    def run(cv: float, max_rounds: int = 4) -> list[str]:
        rng, order = random.Random(0), []

        def measure(who):
            order.append(who)
            return interleave.Sample([0.002 * (1 + rng.gauss(0, cv)) for _ in range(100)])

        interleave.measure_shape(measure, 2, True, "trimmed", None, 1.2, 2, None, max_rounds, 0.005)
        return order

    assert run(0.01) == ["ref", "cand", "cand", "ref"]  # SE about 0.1 %: two rounds
    assert run(0.08) == ["ref", "cand", "cand", "ref", "ref", "cand", "cand", "ref"]  # 0.8 % after two
    assert len(run(0.08, max_rounds=8)) == 12  # 0.46 % after six
    assert len(run(0.3, max_rounds=0)) == 4  # no extension asked for
    assert interleave.speedup_se([[1.0, 1.0]], [[2.0, 2.0]]) == 0.0
    assert interleave.speedup_se([[1.0]], [[1.0, 1.1]]) == float("inf")


def test_rounds_that_disagree_ask_for_more_rounds_though_each_is_steady():
    """Rules 11: a state that holds for a whole measurement and flips in the next (add_rmsnorm's launch gap on an
    H200: its span 8.3 or 9.2 µs a measurement, each steady) shows in the rounds' spread, never in the
    iterations': the shape gets its four rounds."""
    from kernelband.evaluation import interleave

    states = iter([0.0083, 0.0083, 0.0083, 0.0092] + [0.0083] * 8)
    order = []

    def measure(who):
        order.append(who)
        return interleave.Sample([next(states)] * 100)

    interleave.measure_shape(measure, 2, True, "trimmed", None, 1.2, 2, None, 4, 0.005)
    assert len(order) == 8
    steady = [[0.0083] * 100, [0.0083] * 100]
    assert interleave.speedup_se(steady, steady) == 0.0
    assert interleave.speedup_se([[0.0083] * 100, [0.0092] * 100], steady) > 0.04


def _record_loads(ev, monkeypatch) -> list:
    """Whether each `load` the evaluator sends asks its worker to start CUPTI ("profiler"), in order."""
    loads, ask = [], context.ask

    def recording(worker, message, *args):
        if message.get("op") == "load":
            loads.append(message["profiler"])
        return ask(worker, message, *args)

    monkeypatch.setattr(context, "ask", recording)
    return loads


def test_every_candidate_starts_cupti_while_it_loads(monkeypatch):
    """Every candidate's `load` asks the worker to start CUPTI before the module runs: the features step profiles
    one call of every GPU evaluation (worker/audit.py) and the span timer uses it too, and neither should pay
    for CUPTI's start while holding the GPU. (The interpreter's worker ignores the request.)"""
    from kernelband.evaluation.evaluator import Evaluator
    from kernelband.tasks import load_task

    task = load_task("examples:vector_add")
    with Evaluator(mode="interpreter", warm=1, use_ncu=False) as ev:
        loads = _record_loads(ev, monkeypatch)
        assert ev.evaluate(task).ok
        ev.timing._short_tasks[task.key, "default"] = True
        assert ev.evaluate(task).ok
    assert loads == [True, True]


def test_a_replaced_profiler_is_tampering():
    """The span timer reads CUPTI through torch.profiler.profile, which the worker takes from its guard."""
    import torch.profiler

    from kernelband.worker.guards import TamperGuard

    guard = TamperGuard()
    real = torch.profiler.profile
    try:
        torch.profiler.profile = lambda *a, **k: None
        assert "torch.profiler:profile" in guard.changed()
    finally:
        torch.profiler.profile = real
    assert guard.original("torch.profiler:profile") is real and "torch.profiler:profile" not in guard.changed()


def test_only_the_default_preset_times_short_shapes_by_spans():
    """`default` times the short shapes of every task by spans, over copies of the inputs; `paper` and
    `tritonbench` keep their protocols' events."""
    assert {n: (p.timer, p.placements, p.span_below_ms, p.span_task_ms, p.span_rounds, p.span_rounds_max, p.span_se)
            for n, p in PRESETS.items()} == {
        "default": ("span", 32, 0.1, None, 2, 4, 0.005), "paper": ("events", 1, 0.1, None, 1, 1, 0.0),
        "tritonbench": ("events", 1, 0.1, None, 1, 1, 0.0)}


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
    ask, ask_ref = context.ask, evaluator.references.ask

    def cand(worker, message, *args):
        if message.get("op") == "time":
            calls.append(("cand", message["shape"]))
        return ask(worker, message, *args)

    def ref(task, worker, message, *args):
        if message.get("op") == "time":
            calls.append(("ref", message["shape"]))
        return ask_ref(task, worker, message, *args)

    monkeypatch.setattr(context, "ask", cand)
    monkeypatch.setattr(evaluator.references, "ask", ref)
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


class _FakeGpu:
    """A GPU queue in simulated time: `sleep` queues a wait, `synchronize` (and a call that syncs) waits it out;
    `launch` costs the host `launch_us`."""

    def __init__(self):
        self.now_us = 0.0
        self.gpu_free_at_us = 0.0

    def clock(self) -> float:
        return self.now_us / 1e6

    def sleep(self, cycles: int) -> None:
        self.gpu_free_at_us = max(self.gpu_free_at_us, self.now_us) + cycles / 2000

    def synchronize(self) -> None:
        self.now_us = max(self.now_us, self.gpu_free_at_us)

    def call(self, launches: int, launch_us: float, syncs: bool = False):
        def fn():
            for _ in range(launches):
                self.now_us += launch_us
            if syncs:
                self.synchronize()
        return fn


def test_the_gpu_ahead_wait_outlasts_a_call_that_enqueues_several_launches():
    from kernelband.worker.timing import MAX_AHEAD_US, ahead_for

    gpu = _FakeGpu()
    one = ahead_for(gpu.call(1, 10.0), 150.0, gpu.sleep, gpu.synchronize, gpu.clock)
    assert one == (150.0, False)  # a single launch: the preset's wait is enough
    five = ahead_for(gpu.call(5, 40.0), 150.0, gpu.sleep, gpu.synchronize, gpu.clock)
    assert five == (pytest.approx(3 * 200.0 + 50.0), False)  # 200 µs of host work: three times that
    slow = ahead_for(gpu.call(50, 40.0), 150.0, gpu.sleep, gpu.synchronize, gpu.clock)
    assert slow == (MAX_AHEAD_US, False)


def test_the_probe_of_a_call_that_enqueues_costs_the_gpu_little_and_decides_as_a_longer_one_would():
    """The probe's GPU waits are what it costs the timing's hold: a call that only enqueues is decided by the
    first, short one; a call whose host time outlasts it is probed again with a longer wait and gets the
    same answer, three times its host time (plus 50 µs)."""
    from kernelband.worker.timing import PROBES_US, ahead_for

    gpu = _FakeGpu()
    assert ahead_for(gpu.call(1, 10.0), 150.0, gpu.sleep, gpu.synchronize, gpu.clock) == (150.0, False)
    assert gpu.now_us <= 3 * PROBES_US[0] + 100 and PROBES_US[0] <= 500.0
    gpu = _FakeGpu()
    slow = ahead_for(gpu.call(3, 150.0), 150.0, gpu.sleep, gpu.synchronize, gpu.clock)  # 450 µs: past the first
    assert slow == (pytest.approx(3 * 450.0 + 50.0), False) and gpu.now_us > 3 * PROBES_US[1]


def test_a_call_that_waits_for_the_gpu_is_reported_not_waited_for():
    from kernelband.worker.timing import ahead_for

    gpu = _FakeGpu()
    assert ahead_for(gpu.call(2, 10.0, syncs=True), 150.0, gpu.sleep, gpu.synchronize, gpu.clock) == (150.0, True)


def _scripted(times: dict[str, list[float]]):
    """measure(who) returning the next scripted time of that side, as a one-iteration measurement, its wall time
    per call ten times its device time."""
    from kernelband.evaluation.interleave import Sample

    calls: list[str] = []

    def measure(who: str) -> Sample:
        calls.append(who)
        ms = times[who].pop(0)
        return Sample([ms], 10 * ms)
    return measure, calls


def test_a_disturbed_reference_is_measured_again_and_the_nearest_attempt_kept():
    from kernelband.evaluation.interleave import measure_shape

    measure, calls = _scripted({"ref": [0.300, 0.0101, 0.0099], "cand": [0.009, 0.0052, 0.005]})
    kept, attempts = measure_shape(measure, rounds=1, ref_first=True, stat="median", expected=0.010,
                                   threshold=1.2, retries=2)
    assert [a.ref_ms for a in attempts] == [0.300, 0.0101]  # the second attempt was within 1.2x: no third
    assert calls == ["ref", "cand", "ref", "cand"]
    assert (kept.ref_ms, kept.cand) == (0.0101, [[0.0052]])  # the pair from the undisturbed window


def test_a_disturbed_candidate_is_measured_again_under_the_same_rule_as_the_reference():
    """A one-shot eval's single candidate measurement 1.1-25x slow beside a clean reference: the candidate's
    usual time (its measurement alone, first) tells it, and the pair is measured again, both sides; the attempt
    nearest both usual times is kept, its per-call times with it."""
    from kernelband.evaluation.interleave import measure_shape

    measure, calls = _scripted({"ref": [0.0100, 0.0101], "cand": [0.250, 0.0051]})
    kept, attempts = measure_shape(measure, rounds=1, ref_first=True, stat="median", expected=0.010,
                                   threshold=1.2, retries=2, cand_expected=0.005)
    assert [a.cand_ms for a in attempts] == [0.250, 0.0051] and calls == ["ref", "cand"] * 2
    assert (kept.ref_ms, kept.cand_ms) == (0.0101, 0.0051)
    assert (kept.cand_call, kept.ref_call) == (pytest.approx([0.051]), pytest.approx([0.101]))
    # without the candidate's usual time, as before: only the reference is compared
    measure, calls = _scripted({"ref": [0.0100], "cand": [0.250]})
    kept, attempts = measure_shape(measure, 1, True, "median", expected=0.010, threshold=1.2, retries=2)
    assert len(attempts) == 1 and kept.cand_ms == 0.250


def test_a_candidates_first_timing_measures_it_alone_first_and_retimes_it_when_off():
    """Timing.time with the worker's replies played by stand-ins (a GPU evaluator): the reference's and the
    candidate's usual times are learnt from one measurement alone each; the pair's candidate side came out 20x
    slow, so the shape is measured again; the note says which side was off, and the shape keeps the clean pair
    with its per-call times."""
    from types import SimpleNamespace

    from kernelband.evaluation.context import EvalContext
    from kernelband.evaluation.evaluator import Evaluator
    from kernelband.evaluation.records import EvalResult, Outcome, ShapeResult

    script = {"ref": [0.010, 0.010, 0.010], "cand": [0.005, 0.100, 0.005]}  # learn, pair, pair again
    asked, per_call = [], []

    def reply(who, message):
        asked.append(who)
        per_call.append(message["call"])
        ms = script[who].pop(0)
        return {"ok": True, "times": [ms] * 5, "gpu_waits": 5, "call_ms": 3 * ms}

    result = EvalResult(task="t", outcome=Outcome.OK)
    result.shapes = [ShapeResult(0, "s0", False, correct=True)]
    with Evaluator(mode="interpreter", warm=0, use_ncu=False) as ev:
        with pytest.MonkeyPatch.context() as mp:
            mp.setattr(ev.settings, "mode", "gpu")
            mp.setattr(ev, "recheck_timings", True)
            mp.setattr(ev.references, "ask", lambda task, worker, message, *a: reply("ref", message))
            mp.setattr(context, "ask", lambda worker, message, *a: reply("cand", message))
            shapes = [SimpleNamespace(index=0, label="s0", held_out=False)]
            ctx = EvalContext(SimpleNamespace(key="t"), None, None, None, "src", shapes, PRESETS["paper"], 0, result,
                              ev.pool.gpu_lock)
            ev.timing.time(ctx)
    shape = result.shapes[0]
    assert asked == ["ref", "cand", "ref", "cand", "ref", "cand"]
    assert per_call == [False, False, True, True, True, True]  # a measurement that only learns: no per-call time
    assert (shape.retimed, shape.cand_ms, shape.speedup) == (1, 0.005, 2.0)
    assert (shape.call_ms, shape.ref_call_ms) == (pytest.approx(0.015), pytest.approx(0.030))
    assert result.call_speedup == pytest.approx(2.0)
    note = next(n for n in result.notes if "measured again" in n)
    assert "s0 (1.00/20.00, 1.00/1.00;" in note


def test_retries_are_bounded_and_off_without_history_or_threshold():
    from kernelband.evaluation.interleave import measure_shape

    measure, calls = _scripted({"ref": [0.3, 0.2, 0.5, 0.1], "cand": [1.0, 1.0, 1.0, 1.0]})
    kept, attempts = measure_shape(measure, 1, False, "median", expected=0.01, threshold=1.2, retries=2)
    assert len(attempts) == 3 and kept.ref_ms == 0.2  # three attempts at most; the nearest kept
    assert calls[:2] == ["cand", "ref"]  # the candidate first when asked
    for expected, threshold in ((None, 1.2), (0.01, 0.0)):
        measure, calls = _scripted({"ref": [0.3], "cand": [1.0]})
        kept, attempts = measure_shape(measure, 1, True, "median", expected, threshold, retries=2)
        assert len(attempts) == 1 and kept.ref_ms == 0.3


def test_the_reference_history_expects_its_smallest_time_until_it_has_three():
    from kernelband.evaluation.interleave import RefHistory

    h = RefHistory(keep=4)
    assert h.expected("k") is None
    h.add("k", 5.0)  # a disturbed first measurement...
    h.add("k", 1.0)
    assert h.expected("k") == 1.0  # ...does not set what is expected
    for ms in (1.1, 0.9, 1.0):
        h.add("k", ms)
    assert h.expected("k") == 1.0  # the median of the last four: 1.0, 1.1, 0.9, 1.0


def test_both_presets_recheck_a_disturbed_reference_and_the_peers_protocol_does_not():
    from kernelband.evaluation.records import PRESETS

    assert PRESETS["default"].recheck > 1 and PRESETS["default"].retries >= 1
    assert PRESETS["paper"].recheck > 1
    assert PRESETS["tritonbench"].recheck == 0


def test_the_evaluator_measures_a_shape_again_when_its_reference_is_off_its_history():
    """Wired through a real evaluation (interpreter): with a threshold no time can meet, every shape is
    measured again, in the first evaluation too (a task's first timing measures the reference once more
    first, to have something to compare with)."""
    import dataclasses

    from kernelband.evaluation.evaluator import Evaluator
    from kernelband.evaluation.records import PRESETS
    from kernelband.tasks import load_task

    strict = dataclasses.replace(PRESETS["default"], name="strict", recheck=1e-9, retries=1)
    task = load_task("examples:vector_add")
    with Evaluator(mode="interpreter", warm=1) as ev:
        ev.recheck_timings = True
        first = ev.evaluate(task, preset=strict)
        second = ev.evaluate(task, preset=strict)
    timed = [s for s in second.shapes if s.cand_ms]
    assert first.ok and second.ok and timed
    assert all(s.retimed == 1 for s in timed + [s for s in first.shapes if s.cand_ms])
    note = next(n for n in second.notes if "measured again" in n)
    assert "load_per_core" in note  # what ran off the GPU lock meanwhile is on record


def test_a_timing_cycles_through_copies_of_the_inputs_up_to_the_presets_memory():
    """Preset.placements: the worker makes that many copies of a shape's inputs (capped by placement_mib) and
    the shape records how many the timing cycled through."""
    import dataclasses

    from kernelband.evaluation.evaluator import Evaluator
    from kernelband.tasks import load_task

    three = dataclasses.replace(PRESETS["default"], name="three", placements=3)
    capped = dataclasses.replace(three, name="capped", placement_mib=1e-6)
    # each copy's tensors take allocations of over 2 MiB of their own (other physical pages), and count so
    paged = dataclasses.replace(three, name="paged", placement_mib=3.0)
    task = load_task("examples:vector_add")
    one = dataclasses.replace(three, name="one", placements=1)
    with Evaluator(mode="interpreter", warm=1) as ev:
        spread, held = ev.evaluate(task, preset=three), ev.evaluate(task, preset=capped)
        pages, plain, default = ev.evaluate(task, preset=paged), ev.evaluate(task, preset=one), ev.evaluate(task)
    # `default` asks for 32 copies; vector_add's two inputs take just over 4 MiB a copy, so 64 MiB hold 15
    for result, copies in ((spread, 3), (held, 1), (pages, 1), (plain, 1), (default, 15)):
        timed = [s for s in result.shapes if s.cand_ms]
        assert result.ok and timed
        assert {s.placements for s in timed} == {copies}


def test_copies_of_small_inputs_get_allocations_of_their_own():
    """harness.in_own_pages, behind Preset.placements: PyTorch packs small tensors into shared 2 MiB segments,
    so a fresh copy of a small input lies in the same physical page; each copy gets an allocation of over
    2 MiB instead, with the values, strides and requires_grad kept."""
    import collections

    import torch

    from kernelband.worker.harness import OWN_PAGES, in_own_pages, own_pages_bytes

    Pair = collections.namedtuple("Pair", "x y")
    x = torch.arange(12.0).view(3, 4).t()  # not contiguous
    w = torch.ones(3, requires_grad=True)
    wide = torch.ones(1, 4).expand(5, 4)  # overlapping: cannot be copied so
    inputs = {"a": (x, 7), "b": [w], "c": wide, "p": Pair(x, "s")}
    out = in_own_pages(inputs)
    a, b, c, p = out["a"][0], out["b"][0], out["c"], out["p"]
    assert out["a"][1] == 7 and isinstance(p, Pair) and p.y == "s"
    for new, old in ((a, x), (b, w), (p.x, x)):
        assert torch.equal(new, old) and new.stride() == old.stride()
        assert new.untyped_storage().data_ptr() != old.untyped_storage().data_ptr()
        assert new.untyped_storage().nbytes() >= OWN_PAGES
    assert b.requires_grad and not a.requires_grad
    assert c is wide
    assert own_pages_bytes(inputs) == 4 * OWN_PAGES


# -- the autotuners' budget -----------------------------------------------------------------------------------
@triton.jit
def _tuned_kernel(x_ptr, n, BLOCK: tl.constexpr):
    pass


def test_an_autotuner_times_its_configs_with_the_presets_budget(monkeypatch):
    from kernelband.worker.guards import TamperGuard
    from kernelband.worker.timing import tune_with

    log: list = []

    class Driver(_Driver):  # Triton's CUDA driver: its benchmarker is do_bench with Triton's 25 / 100 ms
        def get_benchmarker(self):
            return "do_bench(warmup=25, rep=100)"

    calls = []

    def do_bench(fn, warmup=25, rep=100, quantiles=None, **kwargs):
        calls.append((warmup, rep))
        driver.clear_cache("cache")  # do_bench's L2 flush before a timed call
        return [1.0, 1.0, 1.0]

    driver = Driver(log)
    guard = TamperGuard(driver=driver)
    tune_with(driver, do_bench, **PRESETS["default"].tune(), sleep=lambda cycles: log.append(("sleep", cycles)))
    monkeypatch.setattr(triton.runtime.driver, "_active", driver)
    tuner = triton.autotune(configs=[triton.Config({"BLOCK": 64}), triton.Config({"BLOCK": 128})],
                            key=["n"])(_tuned_kernel)
    tuner.do_bench(lambda: None, quantiles=(0.5, 0.2, 0.8))  # what Autotuner._bench calls for each config
    assert calls == [(5.0, 20.0)]
    # each flush is followed by the GPU-ahead wait, as in the timing: a config of a few µs is timed on the GPU
    assert log == [("flush", "cache"), ("sleep", 300_000)]
    assert "clear_cache" not in vars(driver)  # the wait only while a config is timed
    assert Driver.get_benchmarker(driver) == "do_bench(warmup=25, rep=100)"  # the class is left alone
    assert guard.changed() == []  # the worker's own budget is no tampering


def test_the_presets_set_the_autotuners_budget():
    assert PRESETS["default"].tune() == {"warmup": 5.0, "rep": 20.0, "ahead_us": PRESETS["default"].ahead_us}
    assert PRESETS["paper"].tune() is None and PRESETS["tritonbench"].tune() is None  # Triton's own


def test_the_candidate_is_loaded_with_the_autotuners_budget(evaluator, vector_add, monkeypatch):
    loads = []
    ask = context.ask

    def spy(worker, message, *args):
        if message.get("op") == "load":
            loads.append(message)
        return ask(worker, message, *args)

    monkeypatch.setattr(context, "ask", spy)
    assert evaluator.evaluate(vector_add).ok
    assert [m["tune"] for m in loads] == [evaluator.preset.tune()] and loads[0]["tune"] is not None


def test_an_evaluation_says_how_long_it_waited_for_its_reference_and_its_worker(evaluator, vector_add):
    """`seconds["reference"]`: getting the task's reference worker, its set-up included when it was not kept
    (run Y: sweeps where most evaluations set one up, in no stage, were 14 s a candidate short of their total);
    `seconds["worker"]`: waiting for a started candidate worker."""
    evaluator.pool.drop_reference(vector_add.key)
    fresh = evaluator.evaluate(vector_add, seed=1)
    kept = evaluator.evaluate(vector_add, seed=2)
    assert fresh.ok and kept.ok, (fresh.detail, kept.detail)
    assert fresh.seconds["reference"] > 10 * kept.seconds["reference"], (fresh.seconds, kept.seconds)
    assert kept.seconds["reference"] < 0.5
    assert 0 <= kept.seconds["worker"] < kept.seconds["total"]


def _exclusive_holds(ev) -> int:
    return sum(r["holds"] for r in ev.pool.gpu_lock.stats()["steps"] if r["mode"] == "exclusive")


def test_priming_measures_the_reference_once_per_shape_and_spares_the_first_candidate_that_measurement():
    """`prime_timing`: the task's set-up measures the reference's usual time on each search shape, all in one
    hold of the GPU alone, so the first evaluation's timing asks the reference once per shape, as every later
    one does; priming again measures nothing."""
    from kernelband.evaluation.evaluator import Evaluator
    from kernelband.tasks import load_task

    task = load_task("examples:vector_add")

    def reference_timings(ev) -> list[int]:
        asked: list[int] = []
        ask_ref = ev.references.ask

        def counting(task, ref, message, timeout, what):
            if message.get("op") == "time":
                asked.append(message["shape"])
            return ask_ref(task, ref, message, timeout, what)

        ev.references.ask = counting
        return asked

    with Evaluator(mode="interpreter", warm=1) as ev:
        ev.recheck_timings = True  # off in the interpreter by default: its timings measure Python
        asked = reference_timings(ev)
        ev.info(task)  # set up first: its checks' holds are not the priming's
        before = _exclusive_holds(ev)
        primed = ev.prime_timing(task)
        shapes = list(asked)
        assert primed == len(shapes) > 1 and len(set(shapes)) == len(shapes)
        assert _exclusive_holds(ev) - before == 1  # every shape in one hold of the GPU alone
        assert ev.prime_timing(task) == 0 and len(asked) == primed
        assert _exclusive_holds(ev) - before == 1  # nothing to measure: no hold
        del asked[:]
        result = ev.evaluate(task)
        assert result.ok
        # once per shape, and once more each time the reference came out off its usual time (a loaded CPU
        # disturbs the interpreter's timings: the shape is then measured again, `retimed`)
        assert sorted(asked) == sorted(i for s in result.shapes if s.cand_ms for i in [s.index] * (1 + s.retimed))
    with Evaluator(mode="interpreter", warm=1) as ev:  # unprimed: the first timing measures it twice
        ev.recheck_timings = True
        asked = reference_timings(ev)
        result = ev.evaluate(task)
        assert result.ok and len(asked) == sum(2 + s.retimed for s in result.shapes if s.cand_ms)


def test_an_evaluation_says_where_its_timing_went(evaluator, vector_add):
    """The worker's phases of each measurement, summed: making the inputs, the timed calls, the requests."""
    result = evaluator.evaluate(vector_add)
    s = result.seconds
    assert result.ok and s["timing_inputs"] > 0 and s["timing_bench"] > 0
    assert s["timing_inputs"] + s["timing_bench"] <= s["timing_requests"] <= s["timing"]


def test_priming_a_short_task_lets_its_first_candidate_start_cupti_while_it_loads(monkeypatch):
    """`prime_timing` (a task's set-up: the reference's usual time on each shape) also tells whether the task is
    short enough for spans, so that even its first candidate starts CUPTI while it loads instead of in the GPU's
    exclusive hold; a task longer in all than `span_task_ms` is remembered as not short, and an events preset
    decides nothing."""
    import dataclasses

    from kernelband.evaluation.evaluator import Evaluator
    from kernelband.tasks import load_task

    task = load_task("examples:vector_add")
    span = dataclasses.replace(PRESETS["default"], name="span", timer="span", span_task_ms=0.2)
    with Evaluator(mode="interpreter", warm=1, use_ncu=False) as ev:
        monkeypatch.setattr(ev, "recheck_timings", True)
        per_shape = {"ms": 0.01}
        ask_ref = ev.references.ask

        def ref_times(t, worker, message, *args):
            if message.get("op") != "time":
                return ask_ref(t, worker, message, *args)
            return {"ok": True, "times": [per_shape["ms"]] * 5}

        monkeypatch.setattr(ev.references, "ask", ref_times)
        assert ev.prime_timing(task, span) > 0
        assert ev.timing._short_tasks == {(task.key, "span"): True}
        per_shape["ms"] = 1.0
        longer = dataclasses.replace(span, name="longer")
        assert ev.prime_timing(task, longer) > 0 and ev.timing._short_tasks[task.key, "longer"] is False
        assert ev.prime_timing(task, "paper") > 0 and (task.key, "paper") not in ev.timing._short_tasks
        monkeypatch.undo()
        loads = _record_loads(ev, monkeypatch)
        assert ev.evaluate(task, preset=span).ok
    assert loads == [True]
