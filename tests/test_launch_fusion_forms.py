"""launch_fusion's forms beyond one grid: independent launches as one launch whose programs run one body or the
other (launch_horizontal.py), a two-stage reduction whose last program combines (launch_reduction.py), and a
first launch moved into the branch of the second (launch_sites.py); where each refuses, and that each gives the
original's outputs in the interpreter."""

from __future__ import annotations

import pytest
from interpreted import run_modules

from kernelband.proposers.rewriter.proposer import options

KERNELS = '''
import torch
import triton
import triton.language as tl


@triton.jit
def scale(x_ptr, out_ptr, rows, n_cols, factor, B: tl.constexpr):
    col = tl.program_id(0) * B + tl.arange(0, B)
    row = tl.program_id(1)
    mask = col < n_cols
    x = tl.load(x_ptr + row * n_cols + col, mask=mask)
    tl.store(out_ptr + row * n_cols + col, x * factor, mask=mask)


@triton.jit
def square(y_ptr, out_ptr, n, B: tl.constexpr):
    offs = tl.program_id(0) * B + tl.arange(0, B)
    mask = offs < n
    y = tl.load(y_ptr + offs, mask=mask)
    tl.store(out_ptr + offs, y * y, mask=mask)


@triton.jit
def block_sum(x_ptr, partial_ptr, n, B: tl.constexpr):
    pid = tl.program_id(0)
    offs = pid * B + tl.arange(0, B)
    tl.store(partial_ptr + pid, tl.sum(tl.load(x_ptr + offs, mask=offs < n, other=0.0), axis=0))


@triton.jit
def total(partial_ptr, out_ptr, count, B: tl.constexpr):
    offs = tl.arange(0, B)
    tl.store(out_ptr, tl.sum(tl.load(partial_ptr + offs, mask=offs < count, other=0.0), axis=0))
'''

INDEPENDENT = KERNELS + '''

def both(x, y):
    rows, cols = x.shape
    a = torch.empty_like(x)
    b = torch.empty_like(y)
    grid = (triton.cdiv(cols, 32), rows)
    scale[grid](x, a, rows, cols, 2.0, B=32)
    grid = (triton.cdiv(y.numel(), 64),)
    square[grid](y, b, y.numel(), B=64, num_warps=2)
    return a, b
'''

TWO_STAGE = KERNELS + '''

def sum_all(x, y):
    n = x.numel()
    blocks = triton.cdiv(n, 64)
    partial = torch.empty((blocks,), dtype=torch.float32, device=x.device)
    out = torch.empty((), dtype=torch.float32, device=x.device)
    block_sum[(blocks,)](x, partial, n, B=64)
    total[(1,)](partial, out, blocks, B=triton.next_power_of_2(blocks))
    return out
'''

BRANCHED = KERNELS + '''

def branched(x, y):
    a = torch.empty_like(x)
    b = torch.empty_like(y)
    n = y.numel()
    square[(triton.cdiv(n, 64),)](y, b, n, B=64)
    if x.shape[0] > 3:
        rows, cols = x.shape
        scale[(triton.cdiv(cols, 32), rows)](x, a, rows, cols, 3.0, B=32)
    else:
        a = x * 3.0
    return a, b
'''

NAME = "scale_square_horizontal"


def made(source: str) -> tuple[list[tuple[str, str]], tuple[str, ...]]:
    found = options(source, ("launch_fusion",))
    return [(v.rationale, v.apply(found.module)) for v in found.variants], found.reasons


def test_independent_launches_become_one_launch_whose_programs_run_one_body_or_the_other():
    [(rationale, new)] = made(INDEPENDENT)[0]
    assert rationale == ("the launches of scale and square in both, which touch none of each other's outputs, as one "
                         f"launch of {NAME}: its first programs run scale, the rest square")
    kernel = new.split(f"def {NAME}(")[1].split("\n\n\n")[0]  # `pid` is a name of the module: pid_1
    assert "    pid_1 = tl.program_id(0)\n    if pid_1 < grid_0 * grid_1:\n" in kernel
    assert "col = pid_1 % grid_0 * B + tl.arange(0, B)" in kernel and "row = pid_1 // grid_0\n" in kernel
    assert "        pid_2 = pid_1 - grid_0 * grid_1\n" in kernel and "offs = pid_2 * B_1 + tl.arange(0, B_1)" in kernel
    host = new.split("def both(")[1]
    # the first grid is read where its launch stood, though `grid` is bound again before the fused launch
    assert (f"    {NAME}[(((triton.cdiv(cols, 32)) * (rows)) + ((triton.cdiv(y.numel(), 64))),)](x_ptr=x, out_ptr=a, "
            "rows=rows, n_cols=cols, factor=2.0, B=32, y_ptr=y, out_ptr_1=b, n=y.numel(), B_1=64, "
            "grid_0=triton.cdiv(cols, 32), grid_1=rows, grid_0_1=triton.cdiv(y.numel(), 64), num_warps=2)\n") in host
    assert "scale[" not in host and "square[" not in host


REBOUND = INDEPENDENT.replace("    scale[grid](x, a, rows, cols, 2.0, B=32)\n",
                              "    f = 2.0\n    scale[grid](x, a, rows, cols, f, B=32)\n    f = 5.0\n")


def test_a_value_the_first_launch_reads_and_that_is_bound_again_before_the_second_is_kept_where_it_stood():
    [(_, new)] = made(REBOUND)[0]
    host = new.split("def both(")[1]
    assert "    f = 2.0\n    f_1 = f\n    f = 5.0\n" in host and "factor=f_1," in host


@pytest.mark.parametrize("old, new, reason", [
    ("    b = torch.empty_like(y)\n", "    b = a\n",
     "square writes b, which may be the memory scale writes as a: in one launch the order of their accesses to it "
     "is not certain"),
    ("square[grid](y, b,", "square[grid](a, b,",  # reads what the first writes, on another grid
     "square reads a on another grid than scale writes it (a program may read what other programs wrote), and scale "
     "does not address `P + pid * B + tl.arange(0, B)`; nor can scale compute square where it stores a: y.numel() is "
     "not certain to be a.numel()"),
    ("square[grid](y, b,", "square[grid](y, x,",
     "square writes x, which scale also reads: in one launch the order of their accesses to it is not certain"),
    ("    b = torch.empty_like(y)\n", "    b = y.view(-1)\n",  # a view of an input the first may read
     "square writes b, which may be the memory scale reads as x: in one launch the order of their accesses to it "
     "is not certain"),
    ("    grid = (triton.cdiv(y.numel(), 64),)\n", "    grid = (triton.cdiv(y.numel(), 64),)\n    x.mul_(2)\n",
     "between the scale launch in both and the square launch in both comes `x.mul_(2)`"),
])
def test_independent_launches_are_refused_where_one_may_touch_what_the_other_writes(old, new, reason):
    """No launch of both grids: where the programs cannot run side by side, only the last-program form (the second
    kernel's programs run after all of the first's) may be made, with the reason."""
    changed = INDEPENDENT.replace(old, new, 1)
    assert changed != INDEPENDENT
    variants, reasons = made(changed)
    assert [r for r, _ in variants if "the last program of scale to finish runs square's programs" not in r] == []
    assert reasons == (reason,)


def test_kernels_autotuned_over_launch_options_alone_are_autotuned_together():
    tuned = INDEPENDENT.replace("@triton.jit\ndef scale(", "@triton.autotune(configs=[triton.Config({}, num_warps=2), "
                                "triton.Config({}, num_warps=4)], key=['n_cols'])\n@triton.jit\ndef scale(")
    [(_, new)] = made(tuned)[0]
    assert "key=['n_cols'])\n@triton.jit\ndef scale_square_horizontal(" in new
    assert "num_warps=2)" not in new.split("def both(")[1]  # the autotuner sets it
    blocks = tuned.replace("triton.Config({}, num_warps=2)", "triton.Config({'B': 64}, num_warps=2)")
    assert made(blocks) == ([], ("scale is autotuned over block sizes: the fused kernel would have one config for "
                                 "both",))


TUNED = INDEPENDENT.replace("@triton.jit\ndef scale(", "@triton.autotune(configs=[triton.Config({}, num_warps=2), "
                            "triton.Config({}, num_warps=4)], key=['n_cols'])\n@triton.jit\ndef scale(")
IN_PLACE = TUNED.replace("square[grid](y, b,", "square[grid](b, b,").replace("b = torch.empty_like(y)", "b = y.clone()")


@pytest.mark.parametrize("source", [
    IN_PLACE,  # square's out_ptr is the memory it reads as y_ptr
    TUNED.replace("tl.store(out_ptr + offs, y * y, mask=mask)", "tl.atomic_add(out_ptr + offs, y * y, mask=mask)"),
], ids=["in_place", "atomic"])
def test_an_autotuned_fused_kernel_restores_what_either_kernel_changes_between_its_tuning_runs(source):
    [(_, new)] = made(source)[0]
    assert "key=['n_cols'], restore_value=['out_ptr_1'])\n@triton.jit\ndef scale_square_horizontal(" in new


@pytest.mark.slow
def test_the_tuning_runs_of_a_fused_kernel_leave_an_in_place_update_as_one_run_left_it_in_the_interpreter():
    """The interpreter has no benchmarker: each autotuner here runs every config twice and takes the first."""
    [(_, new)] = made(IN_PLACE)[0]
    run_modules({"kb_original": IN_PLACE, "kb_variant": new}, """
import torch
import kb_original as original
import kb_variant as variant
for module in (original, variant):
    for kernel in vars(module).values():
        if type(kernel).__name__ == "Autotuner":
            kernel.do_bench = lambda fn, quantiles=None: (fn(), fn(), [1.0, 1.0, 1.0])[-1]
x, y = torch.randn(3, 50), torch.randn(70)
want, got = original.both(x, y.clone()), variant.both(x, y.clone())
assert all(torch.equal(w, g) for w, g in zip(want, got)), (want[1][:4], got[1][:4])
""")


def test_a_first_launch_before_an_if_moves_into_the_branch_of_the_second_and_a_copy_starts_the_other():
    [(_, new)] = made(BRANCHED)[0]
    host = new.split("def branched(")[1]
    assert "    n = y.numel()\n    if x.shape[0] > 3:\n        rows, cols = x.shape\n        square_scale_horizontal[" \
           in host
    assert "    else:\n        square[(triton.cdiv(n, 64),)](y, b, n, B=64)\n        a = x * 3.0\n" in host


def test_a_two_stage_reduction_becomes_one_launch_whose_last_program_combines():
    [(rationale, new)] = made(TWO_STAGE)[0]
    assert rationale == ("the launches of block_sum and total in sum_all (partials in partial, combined by one program) "
                         "as one launch of block_sum_total_last: the last program of block_sum to finish combines")
    kernel = new.split("def block_sum_total_last(")[1].split("\n\n\n")[0]
    assert ("    tl.debug_barrier()\n    if tl.atomic_add(done, 1, sem=\"acq_rel\") == tl.num_programs(0) * "
            "tl.num_programs(1) * tl.num_programs(2) - 1:\n        tl.atomic_xchg(done, 0)\n") in kernel
    assert "tl.load(partial_ptr_1 + offs_1, mask=offs_1 < count, other=0.0, volatile=True)" in kernel
    assert "    if 0 < (blocks):\n        block_sum_total_last[(blocks,)](" in new  # else the two launches
    assert ("block_sum_total_last[(blocks,)](x_ptr=x, partial_ptr=partial, n=n, B=64, partial_ptr_1=partial, "
            "out_ptr=out, count=blocks, B_1=triton.next_power_of_2(blocks), done=_programs_done(partial.device))") in new
    assert "def _programs_done(device):" in new


@pytest.mark.slow
def test_a_two_stage_reduction_over_nothing_still_runs_its_second_stage_in_the_interpreter():
    """No program of the first launch: none is last, so the two launches as they were run (the total is 0)."""
    empty = TWO_STAGE.replace("B=triton.next_power_of_2(blocks)", "B=triton.next_power_of_2(max(blocks, 1))").replace(
        "out = torch.empty((),", "out = torch.full((), 7.0,")  # a total not written shows
    [(_, new)] = made(empty)[0]
    run_modules({"kb_original": empty, "kb_variant": new}, """
import torch
import kb_original as original
import kb_variant as variant
for rows in (0, 3):
    x = torch.randn(rows, 50)
    want, got = original.sum_all(x, x), variant.sum_all(x, x)
    assert torch.allclose(want, got, atol=1e-5), (rows, want, got)
""")


def test_a_two_stage_reduction_is_refused_where_the_last_program_is_not_certain_to_see_every_partial():
    changed = TWO_STAGE.replace("    pid = tl.program_id(0)\n    offs = pid * B",
                                "    pid = tl.program_id(0)\n    if pid > 100:\n        return\n    offs = pid * B", 1)
    assert changed != TWO_STAGE
    assert made(changed) == ([], ("block_sum returns early: a program that returns would not count itself as done",))


@pytest.mark.parametrize("old, new, rationale, why", [
    ("total[(1,)]", "total[(2,)]", "runs total's programs in turn (total reads partial), where they are at most 16",
     ("total reads partial on another grid than block_sum writes it (a program may read what other programs "
      "wrote), and block_sum does not address `P + pid * B + tl.arange(0, B)`",)),
    ("total[(1,)](partial, out,", "total[(1,)](partial, x,", "combines", ()),  # x is read before it is written
])
def test_a_second_stage_the_programs_cannot_run_beside_is_run_by_the_last_program(old, new, rationale, why):
    changed = TWO_STAGE.replace(old, new, 1)
    assert changed != TWO_STAGE
    [(made_rationale, _)], reasons = made(changed)
    assert made_rationale.endswith(f"the last program of block_sum to finish {rationale}") and reasons == why


SAME = """
import torch
import kb_original as original
import kb_variant as variant
torch.manual_seed(0)
for rows, cols, n in [(4, 100, 333), (7, 33, 64), (3, 64, 1)]:
    x, y = torch.randn(rows, cols), torch.randn(n)
    for name in {names!r}:
        want, got = getattr(original, name)(x, y), getattr(variant, name)(x, y)
        want, got = (want if isinstance(want, tuple) else (want,)), (got if isinstance(got, tuple) else (got,))
        assert all(torch.allclose(w, g, atol=1e-5, rtol=1e-5) for w, g in zip(want, got)), (name, rows, cols, n)
"""


@pytest.mark.slow
@pytest.mark.parametrize("source, names", [(INDEPENDENT, ["both"]), (REBOUND, ["both"]),
                                           (TWO_STAGE, ["sum_all", "sum_all"]), (BRANCHED, ["branched"])],
                         ids=["independent", "rebound", "two_stage", "branched"])
def test_each_form_gives_the_originals_outputs_in_the_interpreter(source, names):
    [(_, new)] = made(source)[0]
    run_modules({"kb_original": source, "kb_variant": new}, SAME.format(names=names))


@pytest.mark.slow
def test_every_variant_of_the_fusion_spellings_compiles_for_sm90():
    """The interpreter runs no type checks: each fused kernel of the corpus (tests/respellings/fusion.py), and its
    original, compiled as an H100 would (Triton's own type rules, an `if` whose branches set names)."""
    pytest.importorskip("triton.backends.nvidia")
    import sys
    from pathlib import Path

    sys.path.insert(0, str(Path(__file__).resolve().parent))
    from respellings.check import compiles_for_sm90
    from respellings.fusion import SPELLINGS

    for spelling in SPELLINGS:
        compiles_for_sm90(spelling, [spelling.source, *[new for _, new in made(spelling.source)[0]]])


def test_a_launch_whose_arguments_come_from_a_sequence_reads_them_where_they_are_known():
    # a tuple bound once: its elements are the parameters' values, as if written out
    unpacked = INDEPENDENT.replace("scale[grid](x, a, rows, cols, 2.0, B=32)",
                                   "args = (x, a, rows, cols)\n    scale[grid](*args, 2.0, B=32)")
    variants, reasons = made(unpacked)
    assert len(variants) == len(made(INDEPENDENT)[0]) and "x_ptr=x" in variants[0][1].replace(" ", ""), reasons
    # a sequence built at run time: its extent is the count the others leave; its elements are read from it, and
    # what memory they are is not known, so the launches are not taken to be independent
    built = INDEPENDENT.replace("scale[grid](x, a, rows, cols, 2.0, B=32)",
                                "args = [x, a] + [rows, cols]\n    scale[grid](*args, 2.0, B=32)")
    variants, reasons = made(built)
    assert reasons == ("square reads y, which may be the memory scale writes as args",)
    assert all("x_ptr=args[0], out_ptr=args[1], rows=args[2], n_cols=args[3]" in v for _, v in variants)
