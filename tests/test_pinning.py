"""What a run hands back for an autotuned kernel: the choices its autotuner made, recorded and pinned, and the
pinned module checked before it goes back (search/pinning.py, search/handback.py)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from kernelband.evaluation.records import EvalResult, Outcome, ShapeResult, TunedChoice, TunedConfig
from kernelband.search.handback import Form, NotPinned, hand_back
from kernelband.search.pinning import pin

TUNED_VECTOR_ADD_CONFIGS = 6  # the rewriter's autotune over vector_add: BLOCK_SIZE 64-512, num_warps 1-4


@pytest.fixture(scope="module")
def autotuned(vector_add) -> str:
    """vector_add with the rewriter's @triton.autotune (key: n_elements and the tensors' element count)."""
    from kernelband.proposers.rewriter.proposer import options

    found = options(vector_add.module_source, ("autotune",))
    return found.variants[0].apply(found.module)


@pytest.fixture(scope="module")
def tuned_result(evaluator, vector_add, autotuned) -> EvalResult:
    return evaluator.evaluate(vector_add, autotuned, which="all", seed=3)


def test_an_autotuned_candidates_choices_are_recorded_for_every_shape(tuned_result):
    assert tuned_result.ok, tuned_result.detail
    shapes = {s.label for s in tuned_result.shapes}
    tuned = tuned_result.tuned
    assert {c.shape for c in tuned} == shapes  # each shape's size makes a key of its own, held-out ones too
    assert any(c.held_out for c in tuned) and any(not c.held_out for c in tuned)
    for choice in tuned:
        assert choice.kernel == "add_kernel" and choice.exact
        n, numel, *dtypes = choice.key
        assert numel == 3 * n and dtypes == ["torch.float32"] * 3
        assert set(choice.chosen.kwargs) == {"BLOCK_SIZE"} and choice.chosen.num_warps in (1, 2, 4)
        # the times of every config the autotuner tried, the chosen one the fastest
        assert len(choice.timings) == TUNED_VECTOR_ADD_CONFIGS and all(t.ms is not None for t in choice.timings)
        fastest = min(choice.timings, key=lambda t: t.ms)
        assert (fastest.kwargs, fastest.num_warps) == (choice.chosen.kwargs, choice.chosen.num_warps)
    # stored as JSON and read back, typed
    again = EvalResult.from_dict(json.loads(json.dumps(tuned_result.to_dict())))
    assert again.tuned == tuned


def test_an_evaluation_stored_before_the_choices_were_recorded_loads_with_none():
    old = EvalResult(task="t", outcome=Outcome.OK).to_dict()
    del old["tuned"]
    assert EvalResult.from_dict(old).tuned == []


def test_the_pinned_module_gives_the_autotuned_ones_results_on_every_shape(evaluator, vector_add, autotuned,
                                                                           tuned_result):
    pinned = pin(autotuned, tuned_result.tuned)
    assert pinned.source is not None, pinned.reason
    assert pinned.kernels == ["add_kernel"] and pinned.keys == len(tuned_result.shapes)
    assert "@triton.autotune" not in pinned.source and "ADD_KERNEL_CONFIGS = {" in pinned.source
    result = evaluator.evaluate(vector_add, pinned.source, which="all", seed=4)
    assert result.ok, result.detail
    assert [(s.label, s.correct) for s in result.shapes] == [(s.label, True) for s in tuned_result.shapes]
    assert result.tuned == []  # every key met was in the table: the fallback tuner never ran


def test_a_key_the_search_never_met_falls_back_to_the_winning_configs_and_the_starting_kernels_launch(
        evaluator, vector_add, autotuned, tuned_result):
    """The fallback tuner of a pinned module chooses among the configurations that won somewhere and the one the
    starting kernel launches with (vector_add's: BLOCK_SIZE=128, num_warps=1), so that on a shape the search
    never timed it can always choose what the starting kernel ran."""
    seen = [c for c in tuned_result.tuned if not c.held_out][:2]
    # two winners, neither of them the starting kernel's launch
    won = [TunedConfig({"BLOCK_SIZE": 256}, 1, 3), TunedConfig({"BLOCK_SIZE": 128}, 2, 3)]
    seen = [TunedChoice(c.kernel, c.key, config) for c, config in zip(seen, won)]
    pinned = pin(autotuned, seen, start=vector_add.module_source)
    assert 'triton.Config({"BLOCK_SIZE": 128}, num_warps=1, num_stages=3),\n    ],' in pinned.source
    result = evaluator.evaluate(vector_add, pinned.source, which="all", seed=5)
    assert result.ok, result.detail
    fell_back = result.tuned
    assert [c.shape for c in fell_back] == [s.label for s in result.shapes if s.held_out]
    assert {c.kernel for c in fell_back} == {"add_kernel_tuned"}
    winners = {json.dumps([c.chosen.kwargs, c.chosen.num_warps]) for c in seen}
    tried = {json.dumps([t.kwargs, t.num_warps]) for c in fell_back for t in c.timings}
    assert tried == winners | {json.dumps([{"BLOCK_SIZE": 128}, 1])}
    # without the starting kernel: the winners alone, as before
    assert "num_warps=1, num_stages=3" not in pin(autotuned, seen).source


def test_a_pinned_launch_takes_its_configuration_and_grid_once_per_key_and_no_autotuner(vector_add, autotuned):
    """Triton's autotuner, even for a key it has tuned, builds the key and calls the grid's lambda (and its
    triton.cdiv) on every launch; the pinned launch works both out once per key and launches the kernel itself."""
    from interpreted import interpreted

    choice = TunedChoice("add_kernel", [1000, 3000, "torch.float32", "torch.float32", "torch.float32"],
                         TunedConfig({"BLOCK_SIZE": 128}, num_warps=2, num_stages=3))
    pinned = pin(autotuned, [choice], start=vector_add.module_source).source
    interpreted(pinned, """
import triton
from triton.runtime.autotuner import Autotuner
tuned, cdivs = [], []
run, cdiv = Autotuner.run, triton.cdiv
Autotuner.run = lambda self, *args, **kwargs: tuned.append(args[3]) or run(self, *args, **kwargs)
triton.cdiv = lambda *args: cdivs.append(args) or cdiv(*args)
Autotuner._bench = lambda self, *args, config, **kwargs: [1.0, 1.0, 1.0]  # no GPU to time them on: alike
x, y = torch.randn(1000), torch.randn(1000)
for _ in range(3):
    torch.testing.assert_close(module.add(x, y), x + y)
assert tuned == [] and len(cdivs) == 1, (tuned, cdivs)  # the grid of BLOCK_SIZE 128, worked out once
info = module.add_kernel_launch.cache_info()
assert (info.misses, info.hits) == (1, 2), info
# a key the search never met: the fallback tuner chooses, and the grid's lambda follows its choice
x, y = torch.randn(700), torch.randn(700)
torch.testing.assert_close(module.add(x, y), x + y)
assert tuned == [700], tuned
""")


def test_the_starting_kernels_launch_joins_the_fallback_only_where_it_says_it_in_numbers():
    from kernelband.tasks import load_task

    softmax = load_task("examples:softmax")
    from kernelband.proposers.rewriter.proposer import options

    found = options(softmax.module_source, ("inductor_configs",))
    tuned = found.variants[0].apply(found.module)  # Inductor's reduction configs: none of them the starting one's
    choice = TunedChoice("softmax_kernel", [1000, 4000, "torch.float32", "torch.float32"],
                         TunedConfig({"BLOCK_SIZE": 1024}, num_warps=8, num_stages=1))
    pinned = pin(tuned, [choice], start=softmax.module_source)
    assert 'triton.Config({"BLOCK_SIZE": 128}, num_warps=1, num_stages=3),' in pinned.source
    assert "among the configurations that won somewhere and the starting kernel's launch" in pinned.source
    # a starting kernel that computes the tuned value at its launch: noted, not guessed
    computed = softmax.module_source.replace("BLOCK_SIZE=128", "BLOCK_SIZE=triton.next_power_of_2(cols)")
    pinned = pin(tuned, [choice], start=computed)
    assert "num_warps=1, num_stages=3" not in pinned.source
    assert any("computes BLOCK_SIZE at its launch" in n for n in pinned.notes)


PRUNED = '''
import triton
import triton.language as tl


def prune(configs, named_args, **kwargs):
    return configs[:1]


@triton.autotune(configs=[triton.Config({"BLOCK": 128}), triton.Config({"BLOCK": 256})], key=["n"],
                 prune_configs_by={"early_config_prune": prune})
@triton.jit
def k(x_ptr, n, BLOCK: tl.constexpr):
    pass


def f(x):
    k[lambda meta: (triton.cdiv(x.numel(), meta["BLOCK"]),)](x, x.numel())
    return x
'''

STARRED = '''
import triton
import triton.language as tl


@triton.autotune(configs=[triton.Config({"BLOCK": 128}), triton.Config({"BLOCK": 256})], key=["n"])
@triton.jit
def k(x_ptr, n, BLOCK: tl.constexpr):
    pass


def f(x):
    args = (x, x.numel())
    k[lambda meta: (triton.cdiv(x.numel(), meta["BLOCK"]),)](*args)
    return x
'''


def _choice(kernel: str = "k", key=(1024, "torch.float32"), block: int = 128) -> TunedChoice:
    return TunedChoice(kernel, list(key), TunedConfig({"BLOCK": block}, num_warps=4, num_stages=3))


def _ok(speedup: float, interpreter: bool = False, tuned: list | None = None) -> EvalResult:
    return EvalResult(task="t", outcome=Outcome.OK, speedup=speedup, held_out_speedup=speedup,
                      interpreter=interpreter, tuned=tuned or [], shapes=[ShapeResult(0, "n=1", False, cand_ms=0.5)])


# starred values whose extent the host does not say: which of them is the key's n is not known
UNKNOWN_EXTENT = STARRED.replace("def f(x):\n    args = (x, x.numel())\n", "def f(x, args, more):\n").replace(
    "](*args)", "](*args, *more)")


@pytest.mark.parametrize(("source", "why"), [(PRUNED, "prune_configs_by"),
                                             (UNKNOWN_EXTENT, "the extent of `*args` is not known")])
def test_a_module_the_pinning_cannot_handle_goes_back_autotuned_with_a_note(source, why):
    assert pin(source, [_choice()]).source is None
    chosen = hand_back(source, _ok(1.3, tuned=[_choice()]), _ok(1.2),
                       lambda s: pytest.fail("nothing to evaluate"), noise=1.0)
    assert chosen.source == source and chosen.check.speedup == 1.2
    assert chosen.handback.form is Form.AUTOTUNED and chosen.handback.reason is NotPinned.UNSUPPORTED
    assert why in chosen.handback.detail
    assert chosen.handback.to_dict()["reason"] == "unsupported"


def test_a_launch_with_a_starred_tuple_pins_with_its_elements_as_the_key():
    pinned = pin(STARRED, [_choice()]).source
    assert pinned is not None and "x.numel()" in pinned and "](*args, **" in pinned


SIMPLE = STARRED.replace("    args = (x, x.numel())\n", "").replace("](*args)", "](x, x.numel())")


def test_a_grid_of_more_than_the_key_stays_a_lambda_at_the_launch():
    """The key's function is cached per key: a grid reading another of the function's values (here the rows, not
    in the key), or its meta argument otherwise than by a constexpr's name, is left for Triton to call."""
    rows = SIMPLE.replace("    k[lambda meta: (triton.cdiv(x.numel(),", "    rows = x.shape[0]\n    k[lambda meta: (triton.cdiv(rows,")
    passed_on = SIMPLE.replace('meta["BLOCK"]),)]', 'meta["BLOCK"]) + len(meta) * 0,)]')
    for source in (rows, passed_on):
        pinned = pin(source, [_choice()]).source
        assert "    config = k_launch(n, x.dtype)\n    if config is None:" in pinned
        assert "    return K_CONFIGS.get((n, str(x_dtype)))\n" in pinned
        assert "        k[lambda meta: (triton.cdiv(" in pinned and "x, n, **config)" in pinned


def test_the_pinned_module_goes_back_with_its_own_figures_unless_it_is_slower_fails_or_misses():
    choice = _choice()
    evaluated = []

    def evaluate(result):
        return lambda source: evaluated.append(source) or result

    chosen = hand_back(SIMPLE, _ok(1.3, tuned=[choice]), _ok(1.2), evaluate(_ok(1.21)), noise=1.005)
    assert chosen.handback.form is Form.PINNED and chosen.check.speedup == 1.21
    assert chosen.source == evaluated[0] and chosen.autotuned == SIMPLE
    # the key's argument computed once, and the key looked up once per key, not on every call: with the grid
    # its configuration gives (the lambda's `x.numel()` is the key's n), the lambda left to the fallback tuner
    assert "    n = x.numel()\n    config, grid = k_launch(n, x.dtype)\n" in chosen.source
    assert "@functools.cache\ndef k_launch(n, x_dtype):" in chosen.source and "import functools" in chosen.source
    assert "    config = K_CONFIGS.get((n, str(x_dtype)))\n" in chosen.source
    assert '        return None, lambda meta: (triton.cdiv(n, meta["BLOCK"]),)\n' in chosen.source
    assert '    return config, (triton.cdiv(n, config["BLOCK"]),)\n' in chosen.source
    assert "        k_tuned[grid](x, n)\n    else:\n        k[grid](x, n, **config)\n" in chosen.source
    assert chosen.handback.shapes == [{"label": "n=1", "held_out": False, "ms": 0.5, "call_ms": None,
                                       "timer": "events", "placements": 1}]
    # slower than the autotuned module by more than the noise floor (2 % here)
    slower = hand_back(SIMPLE, _ok(1.3, tuned=[choice]), _ok(1.2), evaluate(_ok(1.15)), noise=0.98)
    assert (slower.handback.form, slower.handback.reason) == (Form.AUTOTUNED, NotPinned.SLOWER)
    assert slower.source == SIMPLE and slower.check.speedup == 1.2 and slower.handback.pinned_speedup == 1.15
    within = hand_back(SIMPLE, _ok(1.3, tuned=[choice]), _ok(1.2), evaluate(_ok(1.18)), noise=0.98)
    assert within.handback.form is Form.PINNED
    failed = hand_back(SIMPLE, _ok(1.3, tuned=[choice]), _ok(1.2),
                       evaluate(EvalResult(task="t", outcome=Outcome.WRONG_OUTPUT, detail="shape n=1 differs")),
                       noise=1.0)
    assert failed.handback.reason is NotPinned.FAILED and "wrong_output" in failed.handback.detail
    missed = hand_back(SIMPLE, _ok(1.3, tuned=[choice]), _ok(1.2),
                       evaluate(_ok(1.2, tuned=[_choice("k_tuned", key=(2048, "torch.float32"))])), noise=1.0)
    assert missed.handback.reason is NotPinned.TABLE_MISSED
    # without a finalist's re-check the pinned module would go back unchecked
    unchecked = hand_back(SIMPLE, _ok(1.3, tuned=[choice]), None, evaluate(_ok(1.2)), noise=1.0)
    assert unchecked.handback.reason is NotPinned.NOT_CHECKED and unchecked.source == SIMPLE
    # interpreter timings say nothing about speed: judged on its checks alone
    slow_cpu = hand_back(SIMPLE, _ok(1.3, tuned=[choice]), _ok(1.2, True), evaluate(_ok(0.5, True)), noise=1.0)
    assert slow_cpu.handback.form is Form.PINNED


def test_a_search_hands_back_the_pinned_module_beside_the_autotuned_one(tmp_path: Path, evaluator, vector_add,
                                                                       autotuned):
    from kernelband.proposers.base import ProposerBase
    from kernelband.search.core import Proposal
    from kernelband.search.loop import RunConfig
    from kernelband.search.session import open_search
    from kernelband.store import Store

    class Autotune(ProposerBase):
        name = "autotune-once"

        def propose(self, parent, strategy, context):
            return Proposal(source=autotuned if parent.id == 0 else None, rationale="autotune")

    store = Store(tmp_path / "runs.db")
    search = open_search(vector_add, evaluator, store, "greedy", Autotune(), 0, RunConfig(iterations=1, finalists=1))
    summary = search.run()
    if summary.best_candidate == 0:
        pytest.skip("the interpreter timed the autotuned add no faster than k0 this time")
    handback = summary.handback
    assert handback["form"] == "pinned", handback
    folder = Path(summary.best_path).parent
    assert "ADD_KERNEL_CONFIGS" in Path(summary.best_path).read_text()
    assert (folder / "best.autotune.py").read_text() == autotuned
    assert "+ADD_KERNEL_CONFIGS = {" in Path(summary.diff_path).read_text()
    final = store.evaluation(summary.run_id, summary.best_candidate, "handed_back")
    assert final is not None and final.ok
    assert summary.confirmed_speedup == final.speedup and summary.held_out_speedup == final.held_out_speedup
    assert [s["ms"] for s in handback["shapes"]] == [s.cand_ms for s in final.shapes]


def test_the_gpu_repeat_script_times_a_handed_back_module_in_fresh_processes(tmp_path: Path, autotuned,
                                                                              tuned_result):
    """scripts/gpu/handback_repeat.py's plumbing, on the interpreter: it finds the run that handed back a pinned
    module, times each shape in fresh processes that compile a torch.compile function meanwhile, and sets their
    median against the summary's time (interpreter times: the verdict itself means nothing here)."""
    import subprocess
    import sys

    from kernelband.store import Store

    best = tmp_path / "run-1" / "best.py"
    best.parent.mkdir()
    best.write_text(pin(autotuned, tuned_result.tuned).source)
    store = Store(tmp_path / "runs.db")
    shapes = [{"label": s.label, "held_out": s.held_out, "ms": s.cand_ms, "timer": "events", "placements": 2}
              for s in tuned_result.shapes]
    for form in ("pinned", "as_is"):  # a module without an autotuner in play is not repeated
        rid = store.create_run("examples:vector_add", "key", "greedy", "rewrite", 0, {"preset": "default"})
        store.finish_run(rid, "done", {"best_path": str(best), "handback": {"form": form, "shapes": shapes}})
    store.close()
    out = tmp_path / "repeat.json"
    script = Path(__file__).parents[1] / "scripts" / "gpu" / "handback_repeat.py"
    proc = subprocess.run([sys.executable, str(script), "--db", str(tmp_path / "runs.db"), "--processes", "2",
                           "--compile-backend", "eager", "--json", str(out)], capture_output=True, text=True,
                          timeout=600)
    assert proc.returncode in (0, 1), proc.stderr[-2000:]
    runs = json.loads(out.read_text())["runs"]
    assert [r["form"] for r in runs] == ["pinned"]
    run = runs[0]
    assert run["processes"] == 2 and run["errors"] == [], run["errors"]
    assert all("error" not in c and c["seconds"] > 0 for c in run["compile"])
    assert [s["label"] for s in run["shapes"]] == [s["label"] for s in shapes]
    for shape in run["shapes"]:
        assert len(shape["times_ms"]) == 2 and shape["median_ms"] > 0
        assert shape["ratio"] == pytest.approx(shape["median_ms"] / shape["summary_ms"])
    assert "worst shape" in proc.stdout
    bad = subprocess.run([sys.executable, str(script), "--db", str(tmp_path / "missing.db")], capture_output=True,
                         text=True, timeout=60)
    assert bad.returncode == 2 and bad.stderr.startswith("error: no run database")


LLM_STYLE = '''
import torch
import triton
import triton.language as tl


def _configs():
    return [triton.Config({"BLOCK_M": m}, num_warps=w) for m in (32, 64) for w in (2, 4)]


@triton.autotune(configs=_configs(), key=["M", "N"], reset_to_zero=["out_ptr"])
@triton.jit
def rows_kernel(x_ptr, out_ptr, M, N, stride, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr):
    pass


def rows(x):
    out = torch.zeros_like(x)
    M, N = x.shape
    for _ in range(1):
        rows_kernel[lambda meta: (triton.cdiv(M, meta["BLOCK_M"]),)](
            x, out,
            M, N, x.stride(0),
            BLOCK_N=triton.next_power_of_2(N),
        )
    return out
'''


def test_an_llm_style_module_is_pinned_at_a_nested_multi_line_launch():
    import ast

    choices = [TunedChoice("rows_kernel", [64, 100, "torch.float16", "torch.float16"],
                           TunedConfig({"BLOCK_M": 32}, num_warps=2, num_stages=3))]
    pinned = pin(LLM_STYLE, choices)
    assert pinned.source is not None, pinned.reason
    ast.parse(pinned.source)
    assert "(64, 100, \"torch.float16\", \"torch.float16\"): {\"BLOCK_M\": 32, \"num_warps\": 2, \"num_stages\": 3}" \
        in pinned.source
    # the key as Triton computes it: the key arguments passed at the launch, then the other arguments' dtypes
    # (constexprs and a tensor's numbers have none)
    assert "        config, grid = rows_kernel_launch(M, N, x.dtype, out.dtype)\n" in pinned.source
    assert "    config = ROWS_KERNEL_CONFIGS.get((M, N, str(x_dtype), str(out_dtype)))\n" in pinned.source
    # configs built by a function: the fallback tunes over all of them, with the decorator's other arguments
    assert "configs=_configs(),\n    key=[\"M\", \"N\"],\n    reset_to_zero=[\"out_ptr\"],\n)(rows_kernel)" \
        in pinned.source
    assert any("not a literal list" in n for n in pinned.notes)
    # kernels no autotuner chose for stay as they were, noted
    untouched = pin(LLM_STYLE, [])
    assert untouched.source is None and "chose nothing" in untouched.reason


@pytest.mark.gpu
def test_on_a_gpu_the_choices_are_recorded_with_times_and_the_pinned_module_meets_every_key(vector_add, autotuned):
    from kernelband.evaluation.evaluator import Evaluator

    with Evaluator(mode="gpu", warm=1, use_ncu=False) as ev:
        tuned = ev.evaluate(vector_add, autotuned, which="all")
        assert tuned.ok, tuned.detail
        assert {c.shape for c in tuned.tuned} == {s.label for s in tuned.shapes}
        assert all(t.ms is not None and t.ms > 0 for c in tuned.tuned for t in c.timings)
        pinned = pin(autotuned, tuned.tuned)
        assert pinned.source is not None, pinned.reason
        result = ev.evaluate(vector_add, pinned.source, which="all")
    assert result.ok, result.detail
    assert result.tuned == []  # Triton 3.6's key, computed at the launch, found in the table every time


def test_the_report_says_how_each_run_handed_its_module_back():
    from kernelband.report.metrics import _handed_back_as

    assert _handed_back_as({"form": "pinned"}) == "pinned"
    assert _handed_back_as({"form": "autotuned", "reason": "slower"}) == "autotuned (slower)"
    assert _handed_back_as({"form": "as_is"}) == "as is"
    assert _handed_back_as(None) == ""  # a run from before the pinning


SCALED = '''
import triton
import triton.language as tl


@triton.autotune(configs=[triton.Config({}, num_warps=2), triton.Config({}, num_warps=4)], key=["n"])
@triton.jit
def k(x_ptr, y_ptr, scale, n, total, BLOCK: tl.constexpr):
    pass


def f(x, y):
    total = y.numel()
    k[(triton.cdiv(x.numel(), 128),)](x, y, 1.0 / 127, x.numel(), total, BLOCK=128)
    return y
'''


def test_numbers_a_launch_computes_are_not_in_the_keys_dtypes():
    """`1.0 / 127` and a local bound to a tensor's numel have no dtype: the key reads the two tensors' dtypes
    directly, as Triton's autotuner keyed them (two dtypes a key), with no getattr for a value that has none."""
    pinned = pin(SCALED, [TunedChoice("k", [1024, "torch.float16", "torch.float16"],
                                      TunedConfig({}, num_warps=2, num_stages=3))])
    assert pinned.source is not None, pinned.reason
    assert "getattr(" not in pinned.source
    assert "    config = k_launch(n, x.dtype, y.dtype)\n" in pinned.source
    assert "    return K_CONFIGS.get((n, str(x_dtype), str(y_dtype)))\n" in pinned.source


def test_sizes_unpacked_from_a_shape_and_number_defaults_have_no_dtype_either():
    """`M, N = x.shape` binds integers, and `scale=1.0 / 127` defaults to a number: passed to the kernel, they
    add no dtype to the key (the user's LayerNorm passed M and eps=1e-5, and read getattr(M, "dtype", None) and
    getattr(eps, "dtype", None) on every call)."""
    source = SCALED.replace("    total = y.numel()\n", "    total, cols = y.shape\n").replace(
        "def f(x, y):", "def f(x, y, scale=0.5):").replace("(x, y, 1.0 / 127, ", "(x, y, scale, ")
    pinned = pin(source, [TunedChoice("k", [1024, "torch.float16", "torch.float16"],
                                      TunedConfig({}, num_warps=2, num_stages=3))])
    assert pinned.source is not None, pinned.reason
    assert "getattr(" not in pinned.source
    assert "    config = k_launch(n, x.dtype, y.dtype)\n" in pinned.source
