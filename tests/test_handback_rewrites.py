"""What a hand-back adds to a user's calls: launch values computed once per shape (search/launch_cache.py), the
starting kernel called where the search measured it faster (search/dispatch.py), and the hand-back that tries
them (search/handback.py)."""

from __future__ import annotations

import pytest
from interpreted import interpreted

from kernelband.evaluation.records import EvalResult, Outcome, ShapeResult
from kernelband.search.dispatch import Start, dispatch, to_start
from kernelband.search.handback import Form, hand_back
from kernelband.search.launch_cache import cache_launch_values
from kernelband.tasks import load_task
from kernelband.tasks.model import ShapeInfo

NESTED = "min(4, 1 << max(0, int(32768 // (block)).bit_length() - 1))"


@pytest.fixture(scope="module")
def add_rmsnorm():
    return load_task("examples:add_rmsnorm")


@pytest.fixture(scope="module")
def rows_variant(add_rmsnorm) -> str:
    """add_rmsnorm with the rewriter's rows: a block count computed from the columns' power of two, named once
    before the first launch, whose grid and ROWS read it."""
    from kernelband.proposers.rewriter.proposer import options

    found = options(add_rmsnorm.module_source, ("rows",))
    source = found.variants[0].apply(found.module)
    assert source.count(NESTED) == 1 and "ROWS=ROWS" in source
    return source


SHAPES = (ShapeInfo(0, "rows=8, cols=256", False, "", 0, args=((8, 256), (8, 256), (256,))),
          ShapeInfo(1, "rows=11, cols=700", False, "", 0, args=((11, 700), (11, 700), (700,))),
          ShapeInfo(2, "rows=5, cols=333", True, "", 0, args=((5, 333), (5, 333), (333,))))


def test_shape_only_launch_values_are_named_once_and_computed_once_per_shape(rows_variant):
    cached = cache_launch_values(rows_variant)
    source = cached.source
    assert cached.functions == ["add_rmsnorm_launch(rows, cols) -> block, ROWS, grid"]
    assert source.count("bit_length") == 1  # the nested expression once, named
    assert "    ROWS = min(4, 1 << max(0, int(32768 // block).bit_length() - 1))\n" in source
    assert "    grid = (triton.cdiv(rows, ROWS),)\n" in source
    assert "@functools.cache\ndef add_rmsnorm_launch(rows, cols):" in source and "import functools" in source
    assert "    block, ROWS, grid = add_rmsnorm_launch(rows, cols)\n" in source
    assert "add_kernel[grid](x, y, h, cols, BLOCK_SIZE=block, num_warps=4, n_programs=rows, ROWS=ROWS)" in source
    interpreted(source, """
cached = module
for rows, cols in ((8, 256), (8, 256), (11, 700)):
    x, y = torch.randn(rows, cols).half(), torch.randn(rows, cols).half()
    w = torch.randn(cols).half()
    h = (x + y).float()
    want = (h * torch.rsqrt(h.pow(2).mean(-1, keepdim=True) + 1e-6) * w.float()).half()
    torch.testing.assert_close(cached.add_rmsnorm(x, y, w), want, atol=1e-2, rtol=1e-2)
info = cached.add_rmsnorm_launch.cache_info()
assert (info.misses, info.hits) == (2, 1), info  # once per shape, not on every call
""")


FEW = '''
import triton
import triton.language as tl


@triton.jit
def k(x_ptr, n, BLOCK: tl.constexpr):
    pass


def entry(x):
    n = x.numel()
    k[(max(1, n // 1024),)](x, n, BLOCK=min(n, 1024))
    return x
'''


def test_one_triton_helper_is_worth_caching_and_a_builtin_call_or_two_are_not(add_rmsnorm):
    """A `triton.cdiv` or `triton.next_power_of_2` from the host costs about 1.4 µs in Triton 3.9, several times
    the cached call: the starting kernels' own grids of one or two of them are cached, their names kept; values of
    a builtin call or two cost about what the cached call does, and stay."""
    cached = cache_launch_values(load_task("examples:transpose").module_source)
    assert cached.functions == ["transpose_launch(rows, cols) -> grid"]
    assert "    grid = (triton.cdiv(rows, 16), triton.cdiv(cols, 16))\n    return grid\n" in cached.source
    assert "    grid = transpose_launch(rows, cols)\n    transpose_kernel[grid](" in cached.source
    assert cache_launch_values(load_task("examples:dequantize").module_source).functions == \
        ["dequantize_launch(n) -> grid"]
    assert cache_launch_values(add_rmsnorm.module_source).functions == ["add_rmsnorm_launch(cols) -> block"]
    for name in ("layernorm", "rmsnorm", "softmax"):  # grids of the rows alone: nothing computed
        source = load_task(f"examples:{name}").module_source
        assert cache_launch_values(source).source == source
    assert cache_launch_values(FEW).source == FEW


def test_a_cached_grid_calls_no_triton_helper_on_a_shape_met_before():
    source = cache_launch_values(load_task("examples:transpose").module_source).source
    interpreted(source, """
import triton
calls = []
cdiv = triton.cdiv
triton.cdiv = lambda *args: calls.append(args) or cdiv(*args)
x = torch.randn(40, 24)
for _ in range(3):
    torch.testing.assert_close(module.transpose(x), x.t())
assert len(calls) == 2, calls  # the grid's two, on the first call alone
torch.testing.assert_close(module.transpose(x[:33]), x[:33].t())  # a new shape: its own grid
assert len(calls) == 4, calls
""")


def test_a_launchs_strides_are_read_once_per_tensor_and_on_every_call():
    """Six `x.stride(i)` calls cost three times what three `x.stride()` do; the strides are the layout's, not the
    shape's, so they are read on every call (a transposed view gets its own)."""
    cached = cache_launch_values(load_task("examples:matmul").module_source)
    assert cached.functions == ["matmul_launch(M, N) -> grid", "matmul: a.stride(), b.stride(), c.stride() read once"]
    source = cached.source
    assert ("    a_strides = a.stride()\n    b_strides = b.stride()\n    c_strides = c.stride()\n"
            "    matmul_kernel[grid](a, b, c, M, N, K, a_strides[0], a_strides[1], b_strides[0], b_strides[1],\n"
            "                        c_strides[0], c_strides[1], BLOCK_M=32") in source
    assert ".stride(0)" not in source.split("def matmul(")[1]
    interpreted(source, """
a, b = torch.randn(40, 24).half(), torch.randn(36, 24).half()
for b in (b.t(), b.t().contiguous()):  # the one shape, two layouts
    torch.testing.assert_close(module.matmul(a, b), (a.float() @ b.float()).half(), atol=1e-2, rtol=1e-2)
""")


STRIDED = '''
import triton
import triton.language as tl


@triton.jit
def k(x_ptr, y_ptr, sx0, sx1, sy0, sy1):
    pass


def entry(x, y, flag):
    if flag:
        k[(1,)](x, y, x.stride(0), x.stride(1), y.stride(0), y.stride(1))
    if flag:
        k[(1,)](x, y, x.stride(0), x.stride(1), 0, 0)
    else:
        k[(1,)](x, y, 0, 0, y.stride(0), y.stride(1))
    k[(1,)](x, y, x.stride(0), 0, y.stride(0), y.stride(1))
    return x
'''


def test_strides_are_gathered_only_where_every_branch_read_them_before():
    """An `if` without an `else`, or a branch that reads none of a tensor's strides, would read them where the
    module read none (`x.stride()` of something that is no tensor there raises): those stay as they are."""
    from kernelband.search.launch_cache import _launches
    from kernelband.search.stride_reads import gather_strides

    source, gathered = gather_strides(STRIDED, _launches)
    assert gathered == ["entry: y.stride() read once"]  # the last launch's two reads of y
    assert "    y_strides = y.stride()\n    k[(1,)](x, y, x.stride(0), 0, y_strides[0], y_strides[1])\n" in source
    assert source.count("y_strides") == 3 and "x_strides" not in source


BRANCHED = '''
import triton


def entry(x):
    n = x.numel()
    if n > 0:
        k[(triton.cdiv(n, 64 // 8 + max(1, n // 1024)),)](x, n, BLOCK=min(1024, triton.next_power_of_2(n)),
                                                       num_warps=max(1, min(8, triton.next_power_of_2(n) // 256)))
    return x
'''


def test_a_value_moved_out_of_a_branch_is_one_that_cannot_raise():
    """Moved into the cached function, a value runs for shapes its branch would have left out: a division by a
    value of the shape (here `n // 1024` feeds a cdiv) stays in the branch; powers of two, min and max go."""
    source = BRANCHED.replace("\nimport triton\n", "\nimport triton\nimport triton.language as tl\n\n\n"
                              "@triton.jit\ndef k(x_ptr, n, BLOCK: tl.constexpr):\n    pass\n")
    cached = cache_launch_values(source)
    assert cached.functions == ["entry_launch(n) -> BLOCK, num_warps"]
    assert "k[(triton.cdiv(n, 64 // 8 + max(1, n // 1024)),)](x, n, BLOCK=BLOCK," in cached.source


def test_the_entry_sends_the_shapes_where_the_starting_kernel_won_to_it(add_rmsnorm, rows_variant):
    sent = dispatch(rows_variant, Start(add_rmsnorm.module_source, "add_rmsnorm", SHAPES), ["rows=8, cols=256"])
    assert sent.source is not None, sent.reason
    source = sent.source
    # one test of the first argument's shape tells the shapes apart
    assert "STARTING_KERNEL_SHAPES = {(8, 256)}" in source
    assert ("    if x.shape in STARTING_KERNEL_SHAPES:  # the starting kernel was faster on these shapes in the "
            "search\n        return add_rmsnorm_start(x, y, weight)\n") in source
    # the starting kernel beside the module's own, its names given a suffix
    assert "def add_kernel_start(x_ptr, y_ptr, h_ptr, n_cols, BLOCK_SIZE: tl.constexpr):" in source
    assert "    add_kernel_start[(rows,)](x, y, h, cols, BLOCK_SIZE=block, num_warps=4)\n" in source
    interpreted(source, """
started = []
start = module.add_rmsnorm_start
module.add_rmsnorm_start = lambda *args: started.append(args[0].shape) or start(*args)
for rows, cols in ((8, 256), (11, 700), (8, 256)):
    x, y = torch.randn(rows, cols).half(), torch.randn(rows, cols).half()
    w = torch.randn(cols).half()
    h = (x + y).float()
    want = (h * torch.rsqrt(h.pow(2).mean(-1, keepdim=True) + 1e-6) * w.float()).half()
    torch.testing.assert_close(module.add_rmsnorm(x, y, w), want, atol=1e-2, rtol=1e-2)
assert started == [(8, 256), (8, 256)], started
""")


def test_shapes_the_arguments_cannot_tell_apart_are_not_sent():
    alike = (ShapeInfo(0, "a", False, "", 0, args=((4,), None)), ShapeInfo(1, "b", False, "", 0, args=((4,), None)))
    source = "def f(x, p):\n    return x\n"
    sent = dispatch(source, Start(source, "f", alike), ["a"])
    assert sent.source is None and "same argument shapes" in sent.reason
    script = (ShapeInfo(0, "a", False, "", 0), ShapeInfo(1, "b", False, "", 0))
    assert "does not say the entry's arguments' shapes" in dispatch(source, Start(source, "f", script), ["a"]).reason


def _result(*speedups: float, interpreter: bool = False, held: float = 1.0) -> EvalResult:
    shapes = [ShapeResult(i, s.label, False, correct=True, ref_ms=1.0, cand_ms=1.0 / v, speedup=v)
              for i, (s, v) in enumerate(zip(SHAPES, speedups))]
    shapes.append(ShapeResult(2, SHAPES[2].label, True, correct=True, ref_ms=1.0, cand_ms=1.0 / held, speedup=held))
    weighted = len(speedups) / sum(1.0 / v for v in speedups)
    return EvalResult(task="t", outcome=Outcome.OK, speedup=weighted, held_out_speedup=held, shapes=shapes,
                      interpreter=interpreter)


def test_a_shape_goes_to_the_starting_kernel_only_where_both_measurements_found_it_faster():
    assert to_start(_result(0.7, 1.5), _result(0.8, 1.4), 0.01, "device") == ["rows=8, cols=256"]
    assert to_start(_result(0.7, 1.5), _result(0.995, 1.4), 0.01, "device") == []  # the re-check: within noise
    assert to_start(_result(1.2, 1.5), _result(0.8, 1.4), 0.01, "device") == []  # the search: faster there
    assert to_start(_result(0.7, 1.5, interpreter=True), _result(0.8, 1.4, interpreter=True), 0.01, "device") == []


def test_the_hand_back_dispatches_caches_and_reports_the_rewritten_modules_own_figures(add_rmsnorm, rows_variant):
    evaluated = []
    final = _result(1.0, 1.45)

    def evaluate(source):
        evaluated.append(source)
        return final

    chosen = hand_back(rows_variant, _result(0.7, 1.5), _result(0.8, 1.4), evaluate, noise=1.0,
                       start=Start(add_rmsnorm.module_source, "add_rmsnorm", SHAPES))
    assert len(evaluated) == 1 and chosen.source == evaluated[0] and chosen.check is final
    record = chosen.handback
    assert record.form is Form.AS_IS and record.dispatched == ["rows=8, cols=256"]
    assert record.cached == ["add_rmsnorm_launch(rows, cols) -> block, ROWS, grid",
                             "add_rmsnorm_start_launch(cols) -> block"]  # the starting kernel's, beside it
    assert "STARTING_KERNEL_SHAPES" in chosen.source and "add_rmsnorm_launch" in chosen.source
    # the rewritten module fails: the module as searched goes back, with a note
    failed = hand_back(rows_variant, _result(0.7, 1.5), _result(0.8, 1.4),
                       lambda s: EvalResult(task="t", outcome=Outcome.WRONG_OUTPUT, detail="shape differs"), noise=1.0,
                       start=Start(add_rmsnorm.module_source, "add_rmsnorm", SHAPES))
    assert failed.source == rows_variant and failed.check.speedup == _result(0.8, 1.4).speedup
    assert any("wrong_output" in n for n in failed.handback.notes)
    # the starting kernel handed back is the user's own code: nothing to rewrite or evaluate
    start = hand_back(add_rmsnorm.module_source, None, None, lambda s: pytest.fail("evaluated"), noise=1.0,
                      starting=True)
    assert start.source == add_rmsnorm.module_source


def test_the_rewritten_module_passes_the_evaluators_checks(evaluator, add_rmsnorm, rows_variant):
    start = Start(add_rmsnorm.module_source, "add_rmsnorm", evaluator.info(add_rmsnorm).shapes)
    labels = [s.label for s in start.shapes if not s.held_out][:1]
    assert all(s.args is not None for s in start.shapes)  # the worker says each shape's argument shapes
    sent = dispatch(rows_variant, start, labels)
    source = cache_launch_values(sent.source).source
    result = evaluator.evaluate(add_rmsnorm, source, which="all", seed=11)
    assert result.ok, result.detail
    assert all(s.correct for s in result.shapes)


def test_the_report_says_what_else_was_done_to_the_module_handed_back():
    from kernelband.report.metrics import _handed_back_as

    assert _handed_back_as({"form": "as_is", "dispatched": ["a", "b"], "cached": ["f_launch(n) -> grid"]}) \
        == "as is, the starting kernel on 2 shapes, launch values cached"


TUNED_ROWS = '''
import triton
import triton.language as tl


@triton.autotune(configs=[triton.Config({"BLOCK": 128}), triton.Config({"BLOCK": 256})], key=["n"])
@triton.jit
def k(x_ptr, n, ROWS: tl.constexpr, BLOCK: tl.constexpr):
    pass


def f(x):
    n = x.numel()
    k[(triton.cdiv(n, min(4, max(1, triton.next_power_of_2(n) // 1024))),)](
        x, n, ROWS=min(4, max(1, triton.next_power_of_2(n) // 1024)))
    return x
'''


def test_a_pinned_module_whose_rewrites_fail_goes_back_pinned_alone():
    """Every rewrite first (pinned, launch values cached: the pinned launch and its fallback compute the same
    values, so they move out of the `if`); that failing, the pinned module alone."""
    from kernelband.evaluation.records import TunedChoice, TunedConfig

    choice = TunedChoice("k", [4096, "torch.float32"], TunedConfig({"BLOCK": 128}, num_warps=4, num_stages=3))
    tried = []

    def evaluate(source):
        tried.append(source)
        ok = "f_launch" not in source  # the module with cached launch values fails here
        return _result(1.2, 1.3) if ok else EvalResult(task="t", outcome=Outcome.RUNTIME_ERROR, detail="boom")

    search = _result(1.2, 1.3)
    search.tuned = [choice]
    chosen = hand_back(TUNED_ROWS, search, _result(1.2, 1.3), evaluate, noise=1.0)
    assert len(tried) == 2
    # both branches' values, moved; the grid is no lambda, so the key's function gives the configuration alone
    assert "    config = k_launch(n, x.dtype)\n    ROWS, grid = f_launch(n)\n    if config is None:" in tried[0]
    assert "k_tuned[grid](\n            x, n, ROWS=ROWS)" in tried[0] and "x, n, ROWS=ROWS, **config)" in tried[0]
    assert chosen.source == tried[1] and chosen.handback.form is Form.PINNED and chosen.handback.cached == []
    assert "f_launch" not in chosen.source and "k_launch" in chosen.source
    assert any("its launch values cached: the pinned module is runtime_error: boom" in n
               for n in chosen.handback.notes)


def test_a_name_the_function_declares_global_stays_where_it_is():
    source = BRANCHED.replace("\nimport triton\n", "\nimport triton\nimport triton.language as tl\n\n\n"
                              "@triton.jit\ndef k(x_ptr, n, BLOCK: tl.constexpr):\n    pass\n")
    source = source.replace("    n = x.numel()\n", "    global LAST\n    n = x.numel()\n"
                            "    LAST = min(4, max(1, triton.next_power_of_2(n) // 64))\n")
    source = source.replace("BLOCK=min(1024, triton.next_power_of_2(n))", "BLOCK=min(1024, triton.next_power_of_2(n)) // LAST")
    cached = cache_launch_values(source)
    assert cached.functions == ["entry_launch(n) -> num_warps"]  # LAST is the module's: it stays in entry
    assert "    LAST = min(4, max(1, triton.next_power_of_2(n) // 64))\n" in cached.source.split("def entry(x):")[1]
