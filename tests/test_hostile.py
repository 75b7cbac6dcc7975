"""The fault-injection corpus: each hostile candidate gets its expected outcome, and a good
candidate evaluated right after it still comes out right (no state leaks between workers)."""

from __future__ import annotations

import os
import time
from pathlib import Path

import pytest

HERE = Path(__file__).parent / "hostile"

# candidate -> (expected outcome, text the detail or error must contain, anti-cheat check or None)
EXPECTED = {
    "syntax_error": ("compile_error", "SyntaxError", None),
    "import_error": ("compile_error", "kernelband_no_such_module", None),
    "wrong_output": ("wrong_output", "max abs error", None),
    "nan_output": ("suspicious", "NAN", "nan"),
    "infinite_loop": ("timeout", "no answer", None),
    # stopped by the worker's stuck watch (Limits.stuck_s, 3 s in the test), not by the load limit (60 s here)
    "import_loop": ("timeout", "stuck: the module's own code ran", None),
    "os_exit": ("crashed", "exited with code 3", None),
    "segfault": ("crashed", "SIGSEGV", None),
    "huge_allocation": ("runtime_error", "memory", None),
    "memory_hog": ("crashed", "memory limit exceeded", None),
    "patch_allclose": ("suspicious", "torch:allclose", "tampering"),
    "patch_do_bench": ("suspicious", "triton.testing:do_bench", "tampering"),
    "patch_perf_counter": ("suspicious", "time:perf_counter", "tampering"),
    "cached_output": ("suspicious", "same output memory", "aliased_output"),
    "cached_copy": ("suspicious", "second call", "cached_output"),
    "torch_only": ("suspicious", "no Triton kernel", "no_triton"),
    "background_thread": ("suspicious", "threads", "threads"),
    "read_api_key": ("ok", "", None),
    "write_outside": ("runtime_error", "not allowed", None),
    "write_outside_subprocess": ("ok", "", None),
    "bad_output_file": ("suspicious", "outputs cannot be read", "output_file"),
    "lazy_output": ("suspicious", "kb_candidate.Lazy, not a torch.Tensor", "plain_output"),
    "lazy_buffer": ("suspicious", "sys.addaudithook", "plain_output"),
    "token_launch": ("suspicious", "torch does most of the work", "torch_work"),
}


def _source(name: str, target: Path) -> str:
    return (HERE / f"{name}.py").read_text().replace("TARGET", str(target))


@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_hostile_candidate_gets_its_outcome_and_the_next_good_one_passes(name, evaluator, vector_add, tmp_path):
    outcome, text, check = EXPECTED[name]
    target = tmp_path / "escaped.txt"
    limit, stuck = evaluator.limits.run_s, evaluator.limits.stuck_s
    # Neither answers: limits shorter than the session's 15 s prove the same in less time.
    if name == "infinite_loop":
        evaluator.limits.run_s = 4.0
    if name == "import_loop":
        evaluator.limits.stuck_s = 3.0
    t0 = time.monotonic()
    try:
        result = evaluator.evaluate(vector_add, _source(name, target))
    finally:
        evaluator.limits.run_s, evaluator.limits.stuck_s = limit, stuck
    took = time.monotonic() - t0
    assert result.outcome.value == outcome, (result.outcome, result.detail, result.error[-2000:])
    assert text in result.detail + result.error
    if name == "import_loop":  # the loop's line, and long before the load limit
        assert "line 5 of the module, while importing it" in result.detail, result.detail
        assert took < 3.0 + 25 < evaluator.limits.load_s, took
    if check:
        assert check in result.checks
    if name.startswith("write_outside"):
        assert not target.exists(), "the candidate wrote outside its directory"
    good = evaluator.evaluate(vector_add, (HERE / "good.py").read_text())
    assert good.ok, (good.outcome, good.detail, good.error[-2000:])
    assert all(s.correct for s in good.shapes)


def test_every_corpus_file_has_an_expected_outcome():
    files = {p.stem for p in HERE.glob("*.py")} - {"good"}
    assert files == set(EXPECTED) | set(GPU_EXPECTED)


# GPU-only faults (pytest -m gpu, on a machine with a GPU).
GPU_EXPECTED = {
    "gpu_illegal_address": ("crashed", "illegal memory access", None),
    "gpu_kernel_hang": ("timeout", "no answer", None),
    # A kernel queued on an unjoined side stream (the CPU has no streams to queue it on): the correctness run's
    # copy of the output taken on the current stream races it, and the kernels' record ends it past the marker
    # where the timing ends; whichever comes first.
    "side_stream": ("suspicious", "another stream", ("async_work", "past_timed_region")),
}
# On a GPU, the compile-only call of the entry (the `precompile` request) reaches infinite_loop.py's `while True`.
GPU_OVERRIDES = {"infinite_loop": ("timeout", "while compiling its kernels", None)}


@pytest.fixture(scope="module")
def gpu_evaluator():
    import torch

    from kernelband.evaluation.evaluator import Evaluator, Limits

    if not torch.cuda.is_available():
        pytest.skip("needs a GPU")
    os.environ["OPENAI_API_KEY"] = "sk-kernelband-test-secret"
    ev = Evaluator(mode="gpu", warm=2, limits=Limits(load_s=120, run_s=20, time_s=60), use_ncu=False)
    yield ev
    ev.close()


@pytest.mark.gpu
@pytest.mark.parametrize("name", sorted(GPU_EXPECTED) + sorted(set(EXPECTED) - {"memory_hog"}))
def test_gpu_hostile_candidate_gets_its_outcome_and_the_next_good_one_passes(name, gpu_evaluator, tmp_path):
    from kernelband.tasks import load_task

    task = load_task(str(Path(__file__).parent / "data" / "small_add.py"))
    outcome, text, check = {**EXPECTED, **GPU_EXPECTED, **GPU_OVERRIDES}[name]
    target = tmp_path / "escaped.txt"
    result = gpu_evaluator.evaluate(task, _source(name, target))
    if name.startswith("cached_") and (result.outcome.value == "wrong_output" or "zeros" in result.checks):
        # On a GPU the kernels are compiled by a call of the entry point that launches nothing; a
        # cache filled by that call returns garbage (or zeros) on the first real call: caught there.
        return
    assert result.outcome.value == outcome, (result.outcome, result.detail, result.error[-2000:])
    assert text in result.detail + result.error
    if check:
        assert set(result.checks) & ({check} if isinstance(check, str) else set(check)), result.checks
    assert not target.exists()
    good = gpu_evaluator.evaluate(task, (HERE / "good.py").read_text())
    assert good.ok, (good.outcome, good.detail, good.error[-2000:])


def test_workers_do_not_see_secrets(evaluator):
    from kernelband.evaluation.env import worker_env

    env = worker_env("/tmp/x", "interpreter", None)
    assert "OPENAI_API_KEY" not in env and "GITHUB_TOKEN" not in env
    assert not any("SECRET" in k or "TOKEN" in k or k.endswith("_API_KEY") for k in env)


def test_a_hung_candidate_is_stopped_relative_to_the_reference(evaluator, vector_add):
    """With `relative_limits` (on by default on a GPU), a correctness run gets `run_factor` times the
    reference's time for the same request, at least `run_floor_s`, at most `run_s`: a hung candidate holds
    the GPU lock, which every timing waits for, for seconds instead of the whole `run_s`."""
    from kernelband.evaluation.evaluator import Limits

    limits, relative = evaluator.limits, evaluator.relative_limits
    evaluator.limits = Limits(load_s=60, run_s=120, time_s=60, run_factor=2.0, run_floor_s=3.0)
    evaluator.relative_limits = True
    try:
        evaluator.info(vector_add)  # the reference's set-up times each shape (its self-check)
        t0 = time.monotonic()
        hung = evaluator.evaluate(vector_add, (HERE / "infinite_loop.py").read_text())
        took = time.monotonic() - t0
        good = evaluator.evaluate(vector_add, (HERE / "good.py").read_text())
    finally:
        evaluator.limits, evaluator.relative_limits = limits, relative
    assert hung.outcome.value == "timeout", (hung.outcome, hung.detail)
    assert "the limit is 2x the reference's" in hung.detail and "at least 3 s" in hung.detail, hung.detail
    assert took < 60, took  # far below run_s
    assert good.ok, (good.outcome, good.detail)  # a kernel as fast as the reference is within its limit


@pytest.mark.gpu
def test_gpu_token_launch_is_caught_by_the_triton_share_and_good_ones_record_theirs(gpu_evaluator):
    """On a GPU the share of kernel time decides (not the interpreter's element count), and every evaluation
    records it."""
    from kernelband.tasks import load_task

    task = load_task(str(Path(__file__).parent / "data" / "small_add.py"))
    token = gpu_evaluator.evaluate(task, (HERE / "token_launch.py").read_text())
    assert token.outcome.value == "suspicious" and "torch_work" in token.checks, (token.outcome, token.detail)
    assert "% of kernel time" in token.detail, token.detail
    good = gpu_evaluator.evaluate(task, (HERE / "good.py").read_text())
    assert good.ok, (good.outcome, good.detail)
    assert good.triton_share is not None and good.triton_share > 0.9, good.triton_share
