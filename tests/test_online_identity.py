"""A value combined once with its reduction's identity is the value, and a row loaded twice alike with no
store between is one row (analysis/identities.py, analysis/reloads.py): one-block softmaxes spelled with
running values started at -inf or 0 and a second load of the row, as single_pass leaves a blocked softmax and
as people write them, get online_softmax's chunked twin and few-rows split; values that are not so stay apart."""

from __future__ import annotations

import ast
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))

from interpreted import run_modules  # noqa: E402

from kernelband.proposers.rewriter.analysis.facts import facts_of  # noqa: E402
from kernelband.proposers.rewriter.analysis.source import ModuleSource  # noqa: E402
from kernelband.proposers.rewriter.proposer import options  # noqa: E402
from kernelband.tasks import load_task  # noqa: E402

HEAD = '''
import torch
import triton
import triton.language as tl


@triton.jit
def softmax_kernel(out_ptr, x_ptr, x_row_stride, out_row_stride, n_cols, BLOCK_SIZE: tl.constexpr):
    row = tl.program_id(0)
    cols = tl.arange(0, BLOCK_SIZE)
    mask = cols < n_cols
    x = tl.load(x_ptr + row * x_row_stride + cols, mask=mask, other=float("-inf"))
'''
TAIL = '''    tl.store(out_ptr + row * out_row_stride + cols, tl.exp(x - m) / s, mask=mask)


def softmax(x):
    rows, cols = x.shape
    out = torch.empty_like(x)
    softmax_kernel[(rows,)](out, x, x.stride(0), out.stride(0), cols, BLOCK_SIZE=triton.next_power_of_2(cols))
    return out
'''
RELOAD = '    y = tl.load(x_ptr + row * x_row_stride + cols, mask=mask, other=float("-inf"))\n'


def kernel(body: str) -> str:
    return HEAD + body + TAIL


SPELLINGS = {
    # the identity first, `+=` on a zeros accumulator, the row loaded again for the sum
    "identity_first_reload": kernel('''    row_max = tl.maximum(tl.full([BLOCK_SIZE], float("-inf"), tl.float32), x)
    m = tl.max(row_max, axis=0)
''' + RELOAD + '''    row_sum = tl.zeros([BLOCK_SIZE], tl.float32)
    row_sum += tl.exp(y - m)
    s = tl.sum(row_sum, axis=0)
'''),
    # the identity second, `acc = acc + e`, one load
    "identity_second_one_load": kernel('''    acc = tl.maximum(x, tl.full([BLOCK_SIZE], float("-inf"), tl.float32))
    m = tl.max(acc, 0)
    total = tl.zeros([BLOCK_SIZE], dtype=tl.float32)
    total = total + tl.exp(x - m)
    s = tl.sum(total, 0)
'''),
    # zeros on the right of `+`, -inf spelled -float("inf"), full with keywords
    "other_spellings": kernel('''    hi = tl.maximum(tl.full((BLOCK_SIZE,), -float("inf"), dtype=tl.float32), x)
    m = tl.max(hi, axis=0)
''' + RELOAD + '''    den = tl.exp(y - m) + tl.full([BLOCK_SIZE], 0.0, tl.float32)
    s = tl.sum(den, axis=0)
'''),
    # the sum started at a full of 0 and combined by `+=`, the max a plain one
    "full_zero_sum": kernel('''    m = tl.max(x, axis=0)
    acc = tl.full([BLOCK_SIZE], 0, tl.float32)
    acc += tl.exp(x - m)
    s = tl.sum(acc, axis=0)
'''),
    # a min started at +inf beside the softmax: the twin carries it too
    "min_with_inf": kernel('''    lo = tl.minimum(tl.full([BLOCK_SIZE], float("inf"), tl.float32), tl.where(mask, x, float("inf")))
    low = tl.min(lo, axis=0)
    row_max = tl.maximum(tl.full([BLOCK_SIZE], float("-inf"), tl.float32), x)
    m = tl.max(row_max, axis=0)
''' + RELOAD + '''    row_sum = tl.zeros([BLOCK_SIZE], tl.float32)
    row_sum += tl.exp(y - m)
    s = tl.sum(row_sum, axis=0) + 0.0 * low
'''),
    # a store before both loads of the row is no write between them
    "store_before_both_loads": HEAD.replace(
        "    x = tl.load(", "    tl.store(out_ptr + row * out_row_stride + cols, 0.0, mask=mask)\n    x = tl.load(") + '''    m = tl.max(x, axis=0)
''' + RELOAD + '''    row_sum = tl.zeros([BLOCK_SIZE], tl.float32)
    row_sum += tl.exp(y - m)
    s = tl.sum(row_sum, axis=0)
''' + TAIL,
}

NEGATIVE = {
    # a max started at 0 is no max of the row (a row of negatives has max 0 under it)
    "max_from_zero": (kernel('''    row_max = tl.maximum(tl.full([BLOCK_SIZE], 0.0, tl.float32), x)
    m = tl.max(row_max, axis=0)
    row_sum = tl.zeros([BLOCK_SIZE], tl.float32)
    row_sum += tl.exp(x - m)
    s = tl.sum(row_sum, axis=0)
'''), "softmax_kernel sums no exp(x - max) over the row it takes a max of"),
    # the row read again after a store that may write it
    "reload_after_store": (kernel('''    m = tl.max(x, axis=0)
    tl.store(x_ptr + row * x_row_stride + cols, x * 2.0, mask=mask)
''' + RELOAD + '''    s = tl.sum(tl.exp(y - m), axis=0)
'''), "softmax_kernel reads the row it sums exp(x - max) of again after a store that may write it, so the sum "
          "may not be over the values it takes the max of"),
    # the row read again under another mask: other values
    "reload_other_mask": (kernel('''    m = tl.max(x, axis=0)
    y = tl.load(x_ptr + row * x_row_stride + cols, mask=cols < n_cols - 1, other=float("-inf"))
    s = tl.sum(tl.exp(y - m), axis=0)
'''), "softmax_kernel sums no exp(x - max) over the row it takes a max of"),
}


def made(source: str) -> tuple[list[tuple[str, str]], tuple[str, ...]]:
    found = options(source, ("online_softmax",))
    return [(v.rationale, v.apply(found.module)) for v in found.variants], found.reasons


def single_pass_softmax() -> str:
    """single_pass's child of examples:softmax: its three passes, each run once on a row one block holds."""
    task = load_task("examples:softmax")
    found = options(task.module_source, ("single_pass",))
    return found.variants[0].apply(found.module)


@pytest.mark.parametrize("name", sorted(SPELLINGS))
def test_a_one_block_softmax_through_identities_is_found(name):
    found = facts_of(ModuleSource(SPELLINGS[name]).kernels["softmax_kernel"]).reductions
    assert [entry.form for entry in found.targets] == ["one_block"]
    variants, reasons = made(SPELLINGS[name])
    assert reasons == () and len(variants) == 2
    assert "in chunks of" in variants[0][0] and "split over programs" in variants[1][0]


def test_an_identity_that_widens_the_value_is_kept():
    """`tl.zeros([B]) + s` of a scalar s holds B copies of s: its sum is B * s, not s."""
    source = kernel('''    m = tl.max(x, axis=0)
    s = tl.sum(tl.zeros([BLOCK_SIZE], tl.float32) + m, axis=0)
''')
    found = facts_of(ModuleSource(source).kernels["softmax_kernel"]).reductions
    [total] = [b for b in found.block if b.op == "sum"]
    assert total.dim == "BLOCK_SIZE" and ast.unparse(total.operand).startswith("tl.zeros([BLOCK_SIZE], tl.float32) + ")


def test_a_min_started_at_inf_is_a_min_of_the_row():
    found = facts_of(ModuleSource(SPELLINGS["min_with_inf"]).kernels["softmax_kernel"]).reductions
    [low] = [b for b in found.block if b.op == "min"]
    assert ast.unparse(low.operand).startswith("tl.where(") and low.dim == "BLOCK_SIZE"


@pytest.mark.parametrize("name", sorted(NEGATIVE))
def test_values_that_are_not_the_same_are_not_merged(name):
    source, why = NEGATIVE[name]
    assert facts_of(ModuleSource(source).kernels["softmax_kernel"]).reductions.targets == []
    assert made(source) == ([], (why,))


def test_single_pass_child_of_the_example_softmax_gets_the_twin_and_the_split():
    variants, reasons = made(single_pass_softmax())
    rationales = [r for r, _ in variants]
    assert reasons == ()
    assert any(r.startswith("softmax_kernel_single_pass's row block BLOCK_SIZE in chunks of") and
               "split" not in r for r in rationales)
    assert any(r.startswith("softmax_kernel_single_pass's row block") and "split over programs" in r
               for r in rationales)


# Inside a loop over `module`: the names of the module's kernels each launch runs, in `launched`.
RECORD = """    launched = []
    for name in dir(module):
        kernel = getattr(module, name)
        if hasattr(kernel, "run") and hasattr(kernel, "fn"):
            run = kernel.run
            kernel.run = lambda *a, _run=run, _name=name, **k: (launched.append(_name), _run(*a, **k))[1]
"""

CHECK = """
import torch
import original
torch.manual_seed(0)
for index, module in enumerate(modules):
""" + RECORD + """    for rows, cols in ((3, 100), (12, 100), (3, 16), (2, 5)):
        launched.clear()
        x = torch.randn(rows, cols)
        x[0, cols - 1] = 25.0
        want = original.softmax(x.clone())
        got = module.softmax(x.clone())
        assert torch.allclose(got, want, atol=1e-6, rtol=1e-5), (index, rows, cols)
        assert torch.allclose(got, torch.softmax(x, dim=-1), atol=1e-6, rtol=1e-5), (index, rows, cols)
        taken.setdefault(index, set()).update(launched)
"""


def _run_all(source: str, names: tuple[str, str]) -> None:
    """Each variant against the original in one fresh interpreter process; across the shapes the split's
    stages (3 rows, fewer than the interpreter's 8 SMs, of a 128-lane block) and the chunked twin (12 rows)
    both run."""
    variants, _ = made(source)
    modules = {"original": source, **{f"variant{i}": new for i, (_, new) in enumerate(variants)}}
    script = ("modules = [__import__(n) for n in %r]\ntaken = {}\n" % [f"variant{i}" for i in range(len(variants))]
              + CHECK + f"""
kernels = set().union(*taken.values())
assert any(k.endswith("_partials") for k in kernels) and any(k.endswith("_combine") for k in kernels), kernels
assert any(k == {names[0]!r} for k in kernels) and any(k == {names[1]!r} for k in kernels), kernels
""")
    run_modules(modules, script)


@pytest.mark.slow
@pytest.mark.parametrize("name", sorted(SPELLINGS))
def test_each_spelling_gives_the_original_softmax_in_the_interpreter(name):
    _run_all(SPELLINGS[name], ("softmax_kernel_online", "softmax_kernel"))


@pytest.mark.slow
def test_the_single_pass_child_gives_the_original_softmax_in_the_interpreter():
    _run_all(single_pass_softmax(), ("softmax_kernel_single_pass_online", "softmax_kernel_single_pass"))


def test_two_passes_with_a_store_between_them_are_not_merged():
    """The sum pass reads the row again after the store: it may not be the row the max pass read."""
    source = load_task("examples:softmax").module_source
    written = source.replace("    m = tl.max(row_max, axis=0)\n",
                             "    m = tl.max(row_max, axis=0)\n    tl.store(x_row + cols, m, mask=cols < n_cols)\n")
    assert written != source and len(made(source)[0]) == 1
    assert made(written) == ([], ("softmax_kernel reads the row it sums exp(x - max) of again after a store that may "
                                  "write it, so the sum may not be over the values it takes the max of",))


GUARDED = kernel('''    m = tl.max(x, axis=0)
    s = tl.sum(tl.exp(x - m), axis=0)
''').replace('''    softmax_kernel[(rows,)](out, x, x.stride(0), out.stride(0), cols, BLOCK_SIZE=triton.next_power_of_2(cols))
''', '''    if cols <= 64 and 0 < cols:  # one block holds no longer row; a loop kernel takes those
        softmax_kernel[(rows,)](out, x, x.stride(0), out.stride(0), cols, BLOCK_SIZE=triton.next_power_of_2(cols))
    else:
        softmax_kernel[(rows,)](out, x, x.stride(0), out.stride(0), cols, BLOCK_SIZE=65536, num_warps=8)
''')


@pytest.mark.parametrize("test, want", [
    ("0 < cols <= 64", "0 < cols"), ("64 >= cols > 0", "cols > 0"), ("cols <= 64", None),
    ("cols < 65 and x.is_cuda", "x.is_cuda"), ("x.is_cuda and cols <= 64 and 0 < cols", "x.is_cuda and 0 < cols"),
    ("0 < rows <= 64", "0 < rows <= 64"), ("cols >= 64", "cols >= 64"), ("0 < cols <= 64 <= rows", "0 < cols <= 64 <= rows"),
])
def test_only_the_bounds_above_on_the_rows_length_go(test, want):
    import libcst as cst

    from kernelband.proposers.rewriter.rewrites.online_launch import _unbounded
    node = cst.parse_expression(test)
    got = _unbounded(node, "cols")
    assert (None if got is None else cst.Module([]).code_for_node(got)) == want


def test_the_launchs_bound_on_the_rows_length_is_lifted_where_the_twin_takes_long_rows():
    """A one-block softmax launched only for rows of at most 64 (else another kernel): online_softmax's twin and
    split take rows of any length, so the bound goes and longer rows take them."""
    variants, reasons = made(GUARDED)
    assert reasons == () and len(variants) == 2, reasons
    for rationale, source in variants:
        assert rationale.endswith("lifted") or "lifted;" in rationale
        assert "    if 0 < cols:\n" in source and "cols <= 64" not in source and "no longer row" not in source
    script = """
import torch
import original, variant0, variant1
torch.manual_seed(0)
for module in (variant0, variant1):
""" + RECORD + """    for rows in (3, 12):  # the split (fewer rows than the interpreter's SMs), then the chunked twin
        x = torch.randn(rows, 100)
        assert torch.allclose(module.softmax(x.clone()), original.softmax(x.clone()), atol=1e-6, rtol=1e-5)
    assert launched and "softmax_kernel" not in launched, launched
"""
    run_modules({"original": GUARDED, **{f"variant{i}": s for i, (_, s) in enumerate(variants)}}, script)


@pytest.mark.parametrize("other", ["        out = torch.softmax(x, dim=-1)\n", "        raise ValueError(cols)\n",
                                   "        softmax_kernel[(rows,)](out, x, 0, 0, cols, BLOCK_SIZE=65536)\n"])
def test_a_bound_whose_else_is_no_launch_over_the_same_arguments_stays(other):
    """An else that computes otherwise, raises, or launches over other arguments keeps the longer rows."""
    source = GUARDED.replace(
        "        softmax_kernel[(rows,)](out, x, x.stride(0), out.stride(0), cols, BLOCK_SIZE=65536, num_warps=8)\n",
        other)
    assert source != GUARDED
    variants, _ = made(source)
    assert variants and all("lifted" not in r and "cols <= 64 and 0 < cols" in s for r, s in variants)
