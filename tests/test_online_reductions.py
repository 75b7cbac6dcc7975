"""The row reductions fact (analysis/reductions.py) and the online_softmax twins built on it: the chunked twin
of a one-block row, chosen at the launch or in the kernel, and the split of rows too few for the SMs."""

from __future__ import annotations

import ast
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))

from interpreted import interpreted  # noqa: E402
from respellings import softmax as spellings  # noqa: E402

from kernelband.proposers.rewriter.analysis.facts import facts_of  # noqa: E402
from kernelband.proposers.rewriter.analysis.reductions import exponent_of  # noqa: E402
from kernelband.proposers.rewriter.analysis.source import ModuleSource  # noqa: E402
from kernelband.proposers.rewriter.proposer import options  # noqa: E402


def reductions(source: str, kernel: str):
    return facts_of(ModuleSource(source).kernels[kernel]).reductions


def made(source: str) -> tuple[list[tuple[str, str]], tuple[str, ...]]:
    found = options(source, ("online_softmax",))
    return [(v.rationale, v.apply(found.module)) for v in found.variants], found.reasons


@pytest.mark.parametrize("source, kernel, form", [
    (spellings.TWO_LOOPS_LANES, "softmax_kernel", "two_pass"),
    (spellings.WHILE_SCALAR_EXP2, "lse_kernel", "two_pass"),
    (spellings.CDIV_LOG_SOFTMAX, "log_softmax_kernel", "two_pass"),
    (spellings.ONE_BLOCK, "softmax_kernel", "one_block"),
    (spellings.BLOCK_OF_ROWS_HELPER, "rows_kernel", "one_block"),
    (spellings.HEURISTIC_BLOCK, "sm_kernel", "one_block"),
    (spellings.CROSS_ENTROPY, "ce_kernel", "one_block"),
])
def test_the_analysis_finds_the_softmax_reduction_in_each_form(source, kernel, form):
    found = reductions(source, kernel)
    assert [entry.form for entry in found.targets] == [form]


def test_the_analysis_reads_each_branch_of_a_compile_time_test():
    """`z` is set in a branch (`if IS_FP16: z = z.to(...)`): merged, it is unknown; each specialization sees it."""
    source = spellings.HEURISTIC_BLOCK.replace(
        "    num = tl.exp(z)\n", "    if LOG:\n        z = z.to(tl.float32)\n    num = tl.exp(z)\n")
    found = reductions(source, "sm_kernel")
    assert len(found.each) > 1 and [entry.form for entry in found.targets] == ["one_block"]


def test_a_loop_that_is_online_already_is_found_and_is_no_target():
    source = spellings.TWO_LOOPS_LANES.replace(
        "        acc_max = tl.maximum(acc_max, x)\n",
        "        top = tl.maximum(acc_max, x)\n        acc_sum = acc_sum * tl.exp(acc_max - top) + tl.exp(x - top)\n"
        "        acc_max = top\n").replace("    acc_sum = tl.zeros([BLOCK], tl.float32)\n", "")
    source = source.replace("    acc_max = tl.full(", "    acc_sum = tl.zeros([BLOCK], tl.float32)\n    acc_max = tl.full(")
    found = reductions(source, "softmax_kernel")
    assert [(entry.max, entry.sums) for entry in found.online] == [("acc_max", ("acc_sum",))]
    assert found.targets == []
    assert found.why_none() == "softmax_kernel already keeps a running max with a rescaled sum (online form) in a loop"


@pytest.mark.parametrize("value, base, scale", [
    ("tl.exp(x - m)", "exp", "1"),
    ("tl.exp2((x - m) * 1.4426950408889634)", "exp2", "1.4426950408889634"),
    ("tl.exp2(x * c - m * c)", "exp2", "c"),
    ("tl.exp(x + mask - m).to(tl.float32)", "exp", "1"),
    ("tl.exp(x - m[:, None])", "exp", "1"),
    ("tl.exp(m - x)", None, None),  # grows with the max
    ("tl.exp(x - m * m)", None, None),  # not affine in it
    ("tl.exp(tl.load(p) * (x - m))", None, None),  # a scale that a row value sets
    ("tl.exp(x - m) * x", None, None),  # not an exponential alone
])
def test_an_exponent_is_affine_in_the_max_falling_as_it_grows(value, base, scale):
    found = exponent_of(ast.parse(value, mode="eval").body, ast.parse("m", mode="eval").body)
    assert (found.base, ast.unparse(found.scale)) == (base, scale) if base else found is None


def test_a_one_block_row_gets_a_chunked_twin_that_the_launch_chooses_for_long_rows():
    [(rationale, new), (split_rationale, _)] = made(spellings.ONE_BLOCK)[0]
    assert rationale == ("softmax_kernel's row block BLOCK_SIZE in chunks of 4096 where it is over 8192: one pass "
                         "for its statistics (max, sum of exp(x - max), online), one for its stores "
                         "(softmax_kernel_online, chosen at the launch)")
    assert split_rationale.startswith(rationale) and "split over programs" in split_rationale
    assert "def softmax_kernel_online(" in new and new.count("for chunk in range(0, BLOCK_SIZE, CHUNK):") == 2
    assert '    if row_block > (8192 if y.device.type == "cuda" else 32):\n' in new
    assert "softmax_kernel_online[(n_rows,)](y, x, x.stride(0), y.stride(0), n_cols, BLOCK_SIZE=row_block, " \
           'CHUNK=(4096 if y.device.type == "cuda" else 16))' in new


def test_a_block_a_heuristic_sets_is_chunked_at_compile_time_in_the_kernel():
    [(rationale, new)] = made(spellings.HEURISTIC_BLOCK)[0]
    assert rationale.endswith("(chosen in the kernel at compile time)")
    assert "    if DEPTH > LONG_ROW:\n" in new and "LONG_ROW: tl.constexpr = 8192, CHUNK: tl.constexpr = 4096" in new
    assert 'LOG=False, LONG_ROW=(8192 if y.device.type == "cuda" else 32)' in new


def test_the_twin_carries_every_reduction_of_the_row_through_its_chunks():
    [(rationale, new), _] = made(spellings.CROSS_ENTROPY)[0]
    assert "(max, sum of exp(x - max), sum, online)" in rationale
    assert new.count("for chunk in range(") == 1  # no store along the row: one pass


@pytest.mark.parametrize("old, new, why", [
    ("    mean = tl.sum(tl.where(offs < n_cols, logits, 0.0), 0) / n_cols\n",
     "    mean = tl.sum(tl.where(offs < n_cols, logits - c, 0.0), 0) / n_cols\n",
     "ce_kernel's sum over BLOCK depends on another reduction over the row other than as exp(x - max)"),
    ("    mean = tl.sum(tl.where(offs < n_cols, logits, 0.0), 0) / n_cols\n",
     "    mean = tl.sum(tl.where(offs < n_cols, logits, 0.0), 0) / n_cols\n    top = tl.argmax(logits, 0)\n",
     "ce_kernel reduces a value along BLOCK by tl.argmax (not a max, min or sum)"),
    ("    label = tl.load(labels_ptr + row)\n", "    label = tl.load(labels_ptr + row)\n    smoothing = smoothing * 1.0\n",
     None),
    ("    tl.store(loss_ptr + row, loss)\n", "    tl.store(loss_ptr + row, loss)\n    n_cols = n_cols + 1\n",
     "ce_kernel sets n_cols after a statement along the row reads it"),
])
def test_the_twin_refuses_with_the_fact_that_is_missing(old, new, why):
    source = spellings.CROSS_ENTROPY.replace(old, new)
    assert source != spellings.CROSS_ENTROPY
    found, reasons = made(source)
    assert (found, reasons) == ([], (why,)) if why else len(found) == 2


@pytest.mark.slow
def test_few_rows_take_the_split_and_more_rows_the_chunked_twin_in_the_interpreter():
    """With 3 rows (fewer than the interpreter's 8 "SMs") the two stages run, with 12 the chunked twin, with
    16 columns the original kernel; each gives the original's softmax."""
    [_, (_, new)] = made(spellings.ONE_BLOCK)[0]
    interpreted(new, """
launched = []
for name in ("softmax_kernel", "softmax_kernel_online", "softmax_kernel_partials", "softmax_kernel_combine"):
    kernel = getattr(module, name)
    run = kernel.run
    kernel.run = lambda *a, _run=run, _name=name, **k: (launched.append(_name), _run(*a, **k))[1]
for rows, cols, want in ((3, 100, ["softmax_kernel_partials", "softmax_kernel_combine"]),
                         (12, 100, ["softmax_kernel_online"]), (3, 16, ["softmax_kernel"])):
    launched.clear()
    x = torch.randn(rows, cols)
    x[0, cols - 1] = 25.0
    assert torch.allclose(module.softmax(x), torch.softmax(x, dim=-1), atol=1e-6, rtol=1e-5), (rows, cols)
    assert launched == want, (rows, cols, launched)
""")


@pytest.mark.parametrize("block, before", [
    ("1024", ""),  # a literal
    ("ROW", "ROW = 1024\n"),  # a module constant
    ("ROW", "ROW: tl.constexpr = 1024\n"),
    ("2 * HALF", "HALF = 512\n"),  # a module constant's product
])
def test_a_row_block_the_source_fixes_gets_the_twin_and_the_split_with_that_integer(block, before):
    """No launch passes the block, so none can change it: the twin walks the same 1024 lanes, the host
    compares 1024 with LONG."""
    [(rationale, new), (split_rationale, split)], reasons = made(fixed_block(block, before))
    assert reasons == ()
    assert rationale.startswith(f"softmax_kernel's row block {block} in chunks of 4096")
    assert rationale.endswith("(softmax_kernel_online, chosen at the launch)") and "split over programs" in split_rationale
    assert new.count("    for chunk in range(0, 1024, CHUNK):\n") == 2
    assert '    if 1024 > (8192 if y.device.type == "cuda" else 32):\n' in new
    assert "(1024 // SPLIT)" in split


def fixed_block(block: str, before: str = "") -> str:
    """spellings.ONE_BLOCK with its row block fixed by the source instead of passed by the launch."""
    source = spellings.ONE_BLOCK.replace(", BLOCK_SIZE: tl.constexpr):", "):").replace(
        "tl.arange(0, BLOCK_SIZE)", f"tl.arange(0, {block})").replace(
        ", BLOCK_SIZE=triton.next_power_of_2(n_cols))", ")").replace("\n\n@triton.jit", f"\n{before}\n@triton.jit")
    assert "BLOCK_SIZE" not in source
    return source


@pytest.mark.slow
def test_a_row_block_the_source_fixes_gives_the_softmax_in_the_interpreter():
    """Both variants of a literal block of 1024: 3 rows take the split's stages, 12 the chunked twin (1024 is
    over the interpreter's 32), on rows shorter than the block and as long as it."""
    variants, _ = made(fixed_block("1024"))
    assert len(variants) == 2
    for _, new in variants:
        interpreted(new, """
launched = []
for name in ("softmax_kernel", "softmax_kernel_online", "softmax_kernel_partials", "softmax_kernel_combine"):
    kernel = getattr(module, name, None)
    if kernel is None:
        continue
    run = kernel.run
    kernel.run = lambda *a, _run=run, _name=name, **k: (launched.append(_name), _run(*a, **k))[1]
split = hasattr(module, "softmax_kernel_partials")
for rows, cols in ((3, 1000), (3, 1024), (12, 100), (2, 5)):
    launched.clear()
    x = torch.randn(rows, cols)
    x[0, cols - 1] = 25.0
    assert torch.allclose(module.softmax(x), torch.softmax(x, dim=-1), atol=1e-6, rtol=1e-5), (rows, cols)
    want = ["softmax_kernel_partials", "softmax_kernel_combine"] if split and rows < 8 else ["softmax_kernel_online"]
    assert launched == want, (rows, cols, launched)
""")


DERIVED = spellings.ONE_BLOCK.replace("tl.arange(0, BLOCK_SIZE)", "tl.arange(0, 2 * BLOCK_SIZE)").replace(
    "BLOCK_SIZE=triton.next_power_of_2(n_cols))", "BLOCK_SIZE=triton.next_power_of_2(n_cols) // 2)")


def test_a_row_block_computed_from_a_constexpr_is_chunked_at_compile_time_in_the_kernel():
    """The block is 2 * BLOCK_SIZE: the kernel knows it at compile time, the host does not compute it."""
    [(rationale, new)], reasons = made(DERIVED)
    assert reasons == ()
    assert rationale.startswith("softmax_kernel's row block 2 * BLOCK_SIZE in chunks of 4096")
    assert rationale.endswith("(chosen in the kernel at compile time)")
    assert "    if (2 * BLOCK_SIZE) > LONG_ROW:\n" in new
    assert new.count("    for chunk in range(0, (2 * BLOCK_SIZE), CHUNK):\n") == 2


@pytest.mark.slow
def test_a_row_block_computed_from_a_constexpr_gives_the_softmax_in_the_interpreter():
    """Rows of 1000 and 64 columns (blocks of 1024 and 64, over the interpreter's 32) take the twin's path, 20
    columns the kernel's own."""
    [(_, new)], _ = made(DERIVED)
    interpreted(new, """
for rows, cols in ((3, 1000), (4, 64), (5, 20)):
    x = torch.randn(rows, cols)
    assert torch.allclose(module.softmax(x), torch.softmax(x, dim=-1), atol=1e-6, rtol=1e-5), (rows, cols)
""")
