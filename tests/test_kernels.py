"""Real kernels through the whole evaluator, under the Triton interpreter: every built-in example and
a set of TritonBench-G level-1/2 tasks come out `ok` against themselves, and a broken kernel does not."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from kernelband.tasks import example_names, load_task
from kernelband.tasks import tritonbench as tb

ROOT = Path(__file__).resolve().parents[1]
# KERNELBAND_TRITONBENCH, else shared/tritonbench/... next to or above the checkout
TB_JSON = tb.find() or Path("<none>")
TB_MISSING = tb.missing_reason() or f"{TB_JSON} is not TritonBench-G's JSON file"

# On a 2-core CPU each example takes 2-13 s, dropout about 25 s (a random mask per element, held-out
# shape included).
SLOW_EXAMPLES = {"dropout"}

# Every level-1/2 task runs in the interpreter (fixed GPU-sized row counts are reduced there, see
# tritonbench.INTERPRETER_FIXES); a few seconds each on 2 cores, rmsnorm_triton about 25 s.
TB_SLOW = {"rmsnorm_triton"}
TB_SKIP = {"matmul_kernel": "hard-codes M = N = K = 4096: one 4096^3 matmul takes hours in the interpreter"}
TB_TASKS = [
    pytest.param(name, marks=pytest.mark.skip(reason=TB_SKIP[name])) if name in TB_SKIP
    else pytest.param(name, marks=pytest.mark.slow) if name in TB_SLOW else name
    for name in (tb.level12(TB_JSON) if TB_JSON.is_file() else ["add_value"])
]


@pytest.fixture(scope="module")
def patient_evaluator():
    """For tasks whose single runs take 5-15 s here: the shared fixture's 15 s limit is too close."""
    from kernelband.evaluation.evaluator import Evaluator, Limits

    ev = Evaluator(mode="interpreter", warm=1, limits=Limits(load_s=120, run_s=180, time_s=300),
                   memory_limit=4 << 30)
    yield ev
    ev.close()


def assert_ok(result) -> None:
    assert result.ok, (result.outcome, result.detail, result.error[-3000:])
    assert result.interpreter and result.stage == "" and not result.checks
    assert result.shapes and all(s.correct is True for s in result.shapes)
    assert all(s.ref_ms > 0 and s.cand_ms > 0 for s in result.shapes)
    assert result.speedup > 0
    assert result.features.rho["log_time"] is not None


@pytest.mark.parametrize("name", [pytest.param(n, marks=pytest.mark.slow) if n in SLOW_EXAMPLES else n
                                  for n in example_names()])
def test_example_starting_kernel_evaluates_ok_against_itself(name, evaluator):
    task = load_task(f"examples:{name}")
    result = evaluator.evaluate(task, task.module_source, which="all", seed=11)
    assert_ok(result)
    held = [s for s in result.shapes if s.held_out]
    assert len(held) == 1 and result.held_out_speedup > 0


@pytest.mark.parametrize("name", TB_TASKS)
def test_tritonbench_starting_kernel_evaluates_ok_against_itself(name, request):
    if not TB_JSON.is_file():
        pytest.skip(TB_MISSING)
    slow = request.node.get_closest_marker("slow") is not None
    evaluator = request.getfixturevalue("patient_evaluator" if slow else "evaluator")
    task = load_task(f"tritonbench:{name}", str(TB_JSON))
    result = evaluator.evaluate(task, task.module_source, seed=5)
    assert_ok(result)
    assert "the task's own test cases are skipped in interpreter mode" in result.notes


def test_a_mutated_example_kernel_is_a_wrong_output_naming_the_shape(evaluator, vector_add):
    source = vector_add.module_source
    mutated = source.replace("x + y, mask=mask", "x - y, mask=mask")
    assert mutated != source
    result = evaluator.evaluate(vector_add, mutated, seed=3)
    assert result.outcome.value == "wrong_output", (result.outcome, result.detail)
    first = result.shapes[0]
    assert result.detail.startswith(f"shape {first.label}: result: max abs error")
    assert first.correct is False and first.max_abs_err > 0 and first.max_rel_err > 0.1
    assert first.cand_ms is None  # a wrong kernel is never timed
    assert result.speedup is None


def test_a_mutated_tritonbench_kernel_is_a_wrong_output(evaluator):
    if not TB_JSON.is_file():
        pytest.skip(TB_MISSING)
    task = load_task("tritonbench:add_value", str(TB_JSON))
    mutated = task.module_source.replace("output = x + value", "output = x * value")
    assert mutated != task.module_source
    result = evaluator.evaluate(task, mutated, seed=3)
    assert result.outcome.value == "wrong_output", (result.outcome, result.detail)
    assert result.detail.startswith(f"shape {result.shapes[0].label}: ")


def test_the_first_failing_shape_decides_even_when_checks_overlap_the_next_run(evaluator, tmp_path):
    """The parent compares one shape while the workers run the next: a wrong answer on the second shape
    must still be the outcome when the third shape then raises."""
    task_file = tmp_path / "three_shapes.py"
    text = (Path(__file__).parent / "data" / "small_add.py").read_text()
    text = text.replace("INTERPRETER_SHAPES = [dict(n=4096), dict(n=5000)]",
                        "INTERPRETER_SHAPES = [dict(n=1024), dict(n=2000), dict(n=3000)]")
    task_file.write_text(text)
    task = load_task(str(task_file))
    module = task.module_source.replace(
        "    return out\n",
        "    if x.numel() == 2000:\n        return out * 2\n"
        "    if x.numel() == 3000:\n        raise RuntimeError('third shape')\n    return out\n", 1)
    assert module != task.module_source
    result = evaluator.evaluate(task, module)
    assert result.outcome.value == "wrong_output", (result.outcome, result.detail)
    assert "n=2000" in result.detail
    assert [s.correct for s in result.shapes] == [True, False, None]


def test_gpu_sized_rows_are_reduced_only_under_the_interpreter(evaluator):
    if not TB_JSON.is_file():
        pytest.skip(TB_MISSING)
    task = load_task("tritonbench:softmax_triton1", str(TB_JSON))
    assert task.wire()["interpreter_fixes"] == [["M = 4096", "M = 64"]]
    assert "M = 4096" in task.harness_source  # the GPU keeps the script's own sizes
    labels = [s.label for s in evaluator.info(task).shapes]
    assert labels and all(label.startswith("float32[64x") for label in labels), labels


def test_a_reference_output_that_shows_uninitialized_memory_drops_its_shape(evaluator, tmp_path):
    """The starting kernel writes only the first 4096 elements of a torch.empty_like output: on n=5000 the
    rest is whatever the allocation held, which differs between processes. The set-up's second run fills
    uninitialized memory, so that shape is dropped with a note instead of failing every candidate."""
    task_file = tmp_path / "partial_write.py"
    text = (Path(__file__).parent / "data" / "small_add.py").read_text()
    text = text.replace("add_kernel[(triton.cdiv(x.numel(), 256),)](x, y, out, x.numel(), BLOCK=256)",
                        "add_kernel[(triton.cdiv(min(x.numel(), 4096), 256),)](x, y, out, x.numel(), BLOCK=256)")
    assert "min(x.numel(), 4096)" in text
    task_file.write_text(text)
    task = load_task(str(task_file))
    result = evaluator.evaluate(task, task.module_source, seed=4)
    assert result.ok, (result.outcome, result.detail)
    assert [s.label for s in result.shapes] == ["n=4096"]
    assert any(n.startswith("shape dropped: n=5000: the reference gives different outputs") for n in result.notes), \
        result.notes


def test_filled_memory_makes_uninitialized_allocations_visible_and_restores_torch():
    import torch

    from kernelband.worker.poison import filled_memory

    before = torch.are_deterministic_algorithms_enabled()
    with filled_memory():
        assert bool(torch.isnan(torch.empty(1000)).all())
        assert bool((torch.empty(100, dtype=torch.int32) == torch.iinfo(torch.int32).max).all())
    assert torch.are_deterministic_algorithms_enabled() == before


@pytest.mark.gpu
@pytest.mark.parametrize("name", ["geglu_tanh_triton", "flash_decode2_phi"])
def test_tritonbench_test_outputs_the_reference_does_not_reproduce_are_left_out(name):
    """geglu_tanh_triton's test_case_3 returns a torch.empty_like of 256 columns whose last 128 its kernel
    (BLOCK_SIZE 128) never writes; flash_decode2_phi's test_case_3 may read past its inputs. The starting
    kernel must come out ok against itself, twice (the reference's memory differs the second time)."""
    from kernelband.evaluation.evaluator import Evaluator

    if not TB_JSON.is_file():
        pytest.skip(TB_MISSING)
    task = load_task(f"tritonbench:{name}", str(TB_JSON))
    with Evaluator(mode="gpu", warm=1) as ev:
        for seed in (8, 9):
            result = ev.evaluate(task, task.module_source, seed=seed)
            assert result.ok, (result.outcome, result.detail)
    if name == "geglu_tanh_triton":
        assert any("test_case_3" in n and "left out" in n for n in result.notes), result.notes


def test_test_outputs_the_reference_does_not_reproduce_are_left_out_in_the_interpreter(tmp_path):
    """geglu_tanh_triton's own tests are small enough for the CPU: with them on, its test_case_3 (a
    torch.empty_like whose last 128 columns the kernel never writes) is found at set-up and left out, the
    starting kernel comes out ok against itself, and a candidate wrong on another test output still fails."""
    from kernelband.evaluation.evaluator import Evaluator, Limits

    if not TB_JSON.is_file():
        pytest.skip(TB_MISSING)
    task = load_task("tritonbench:geglu_tanh_triton", str(TB_JSON))
    with Evaluator(mode="interpreter", warm=1, limits=Limits(load_s=120, run_s=120, time_s=300)) as ev:
        ev.task_tests = True
        asked = []
        ask_ref = ev.references.ask
        ev.references.ask = lambda task, ref, message, *rest: asked.append(message["op"]) or ask_ref(task, ref, message, *rest)
        ok = ev.evaluate(task, task.module_source, seed=6)
        assert ok.ok, (ok.outcome, ok.detail)
        assert any(n.startswith("the task's test outputs tests.test_case_3[2]") and "left out" in n
                   for n in ok.notes), ok.notes
        # Wrong only in the backward kernel, which the search shapes (forward only) never call.
        wrong = task.module_source.replace("db_row = dc_row * geglu_a", "db_row = dc_row * geglu_a * 2")
        assert wrong != task.module_source
        bad = ev.evaluate(task, wrong, seed=6)
        assert bad.outcome.value == "wrong_output", (bad.outcome, bad.detail)
        assert bad.detail.startswith("the task's own test cases: tests.test_case_1"), bad.detail
        # The reference ran its tests twice at set-up, and its kept outputs judged both candidates.
        assert asked.count("tests") == 2, asked


@pytest.mark.gpu
def test_on_a_gpu_every_measurement_keeps_the_gpu_ahead():
    """The timing's GPU wait goes through the Triton driver's clear_cache, which do_bench calls before each
    timed call: if this Triton's do_bench flushed some other way, the evaluation would carry a note."""
    from kernelband.evaluation.evaluator import Evaluator

    task = load_task("examples:vector_add")
    syncing = task.module_source.replace("    return out\n", "    torch.cuda.synchronize()\n    return out\n", 1)
    assert syncing != task.module_source
    with Evaluator(mode="gpu", warm=1, use_ncu=False) as ev:
        result = ev.evaluate(task, preset="default")
        synced = ev.evaluate(task, syncing, preset="default")
    assert result.ok, result.detail
    timed = [s for s in result.shapes if not s.held_out]
    assert all(s.cand_ms and s.ref_ms for s in timed)
    assert not [n for n in result.notes if "GPU-ahead" in n], result.notes
    # the wait is sized per call (at least the preset's 150 µs), and a call that synchronises is named
    assert all(s.ahead_us and s.ahead_us >= 150 for s in timed), [s.ahead_us for s in timed]
    assert not any(s.host_sync for s in result.shapes)
    assert synced.ok, synced.detail
    assert all(s.host_sync == "cand" for s in synced.shapes if s.cand_ms), [s.host_sync for s in synced.shapes]
    assert [n for n in synced.notes if "waits for the GPU" in n], synced.notes


@pytest.mark.gpu
def test_on_a_gpu_the_span_timer_times_short_shapes_by_their_kernels():
    """Preset.timer="span": a shape whose reference takes under 0.1 ms by events is timed, on both sides, by
    the calls' spans as CUPTI records them (shorter: the launch's start-up is left out); longer shapes by
    events. worker/timing.py"""
    import dataclasses

    from kernelband.evaluation.evaluator import Evaluator
    from kernelband.evaluation.records import PRESETS

    task = load_task("examples:vector_add")
    # vector_add's large shapes make it a long task: `default` times its short shapes by spans all the same
    events = dataclasses.replace(PRESETS["default"], name="events", timer="events")
    span = PRESETS["default"]
    with Evaluator(mode="gpu", warm=1, use_ncu=False) as ev:
        events, spans = ev.evaluate(task, preset=events), ev.evaluate(task, preset=span)
    assert events.ok and spans.ok, (events.detail, spans.detail)
    assert not [n for n in spans.notes if "spans could not be read" in n], spans.notes
    by_events = {s.index: s for s in events.shapes if s.ref_ms}
    timed = [s for s in spans.shapes if s.cand_ms and s.index in by_events]
    short = [s for s in timed if by_events[s.index].ref_ms < 0.08]
    long = [s for s in timed if by_events[s.index].ref_ms > 0.15]
    assert short and long, [(s.ref_ms, s.timer) for s in timed]
    assert {s.timer for s in short} == {"span"} and {s.timer for s in long} == {"events"}
    assert all(s.ref_ms < by_events[s.index].ref_ms for s in short)
    assert {s.timer for s in events.shapes if s.cand_ms} == {"events"}


@pytest.mark.gpu
def test_on_a_gpu_an_autotuned_module_chooses_its_config_in_the_tune_calls():
    """On a GPU, the rewriter's autotuned vector_add is called once per shape with the GPU alone
    (where its autotuner times its configs), then checked and timed, and comes out `ok`."""
    from kernelband.evaluation.evaluator import Evaluator
    from kernelband.proposers.rewriter.proposer import options

    task = load_task("examples:vector_add")
    found = options(task.module_source, ("autotune",))
    assert found.variants, found.reasons
    source = found.variants[0].apply(found.module)
    with Evaluator(mode="gpu", warm=1, use_ncu=False) as ev:
        result = ev.evaluate(task, source, preset="default")
    assert result.ok, result.detail
    assert result.seconds["tune"] > 0


@pytest.mark.gpu
def test_on_a_gpu_compiling_covers_the_tasks_own_test_cases():
    """vector_addition_custom's tests add vectors of 8 and 16 elements: other specialisations than its search
    shapes (2^12 to 2^27). With `tests` in the precompile request they compile there, off the GPU lock, and
    running the tests afterwards compiles no kernel (a new .cubin in the worker's Triton cache would show it;
    the launcher that Triton builds at a kernel's first real launch is not a kernel)."""
    from kernelband.evaluation.context import TESTS_SEED
    from kernelband.evaluation.pool import WorkerPool

    if not TB_JSON.is_file():
        pytest.skip(TB_MISSING)
    task = load_task("tritonbench:vector_addition_custom", str(TB_JSON))

    def cached(worker) -> int:
        return sum(f.endswith(".cubin") for _, _, files in os.walk(os.path.join(worker.dir, "triton-cache"))
                   for f in files)

    compiled_by_tests = {}
    with WorkerPool("gpu", warm=0) as pool:
        for tests in (False, True):
            worker = pool.acquire()
            try:
                assert worker.request({"op": "load", "role": "cand", "task": task.wire(),
                                       "module_source": task.module_source}, 180)["ok"]
                assert worker.request({"op": "precompile", "shapes": [0, 1], "seed": 1, "tests": tests,
                                       "tests_seed": TESTS_SEED}, 180)["ok"]
                before = cached(worker)
                assert worker.request({"op": "tests", "seed": TESTS_SEED}, 180)["ok"]
                compiled_by_tests[tests] = cached(worker) - before
            finally:
                pool.release(worker)
    assert compiled_by_tests[False] > 0 and compiled_by_tests[True] == 0, compiled_by_tests


@pytest.mark.gpu
def test_on_a_gpu_ncu_reads_phi_after_a_warm_up_that_shared_the_gpu():
    """The profiler's inputs and warm-up call run as a shared step, and the profiled run with the GPU alone
    uses those inputs: on a GPU with Nsight Compute, φ comes back with its counters (the candidate's kernel
    only) and no ncu note."""
    from kernelband.evaluation import ncu
    from kernelband.evaluation.evaluator import Evaluator

    if not ncu.available():
        pytest.skip("no ncu on this machine")
    task = load_task("examples:vector_add")
    ncu._cache.clear()
    with Evaluator(mode="gpu", warm=1, use_ncu=True) as ev:
        result = ev.evaluate(task, task.module_source + "\n# profiled\n", preset="default")
    assert result.ok, result.detail
    assert not [n for n in result.notes if n.startswith("ncu")], result.notes
    phi = result.features.phi
    assert sum(v is not None for v in phi.values()) >= 7, phi
    assert result.seconds["profile_alone"] > 0
    # the profiled run as its worker saw it: the profiler's start and stop calls, the call between them
    seen = [result.seconds[f"profile_{k}"] for k in ("start", "run", "stop")]
    assert result.seconds["profile_run"] > 0 and sum(seen) <= result.seconds["profile_alone"]
    # the warm-up call is outside the profiled range: the vector_add candidate launches one kernel
    assert [v["kernels"] for v in ncu._cache.values()] == [1.0]
    assert result.features.profile["kernels"] == 1.0 and result.features.profile["duration_ns"] > 0


def test_past_the_interpreters_size_only_the_smallest_shape_is_self_checked(evaluator, tmp_path):
    """A task whose reference disagrees with itself on its small held-out shape must not walk on into its
    GPU-sized ones under the interpreter: each would run in Python for minutes, to be dropped as well."""
    text = (Path(__file__).parent / "data" / "small_add.py").read_text()
    text = text.replace("    return out\n", "    if x.numel() > 1 << 18:  # a different answer on every call\n"
                        "        _calls.append(1)\n        out[0] += len(_calls)\n    return out\n\n\n_calls = []\n", 1)
    text = text.replace("HELD_OUT = [dict(n=12345)]", "HELD_OUT = [dict(n=(1 << 19) + 1), dict(n=(1 << 22) + 1)]")
    text = text.replace("INTERPRETER_SHAPES = [dict(n=4096), dict(n=5000)]\nINTERPRETER_HELD_OUT = [dict(n=777)]\n",
                        "")
    task_file = tmp_path / "unsteady_held_out.py"
    task_file.write_text(text)
    task = load_task(str(task_file))
    result = evaluator.evaluate(task, task.module_source, which="search", seed=3)
    assert result.ok, (result.outcome, result.detail)
    dropped = [n for n in result.notes if n.startswith("shape dropped")]
    assert len(dropped) == 1 and "524289" in dropped[0], result.notes
