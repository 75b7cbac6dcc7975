"""launch_fusion: where two launches become one kernel, where it refuses because the meaning is not certain,
and that the fused kernel gives the original's outputs in the interpreter."""

from __future__ import annotations

import pytest
from interpreted import run_modules
from respellings import Spelling
from respellings.check import same_outputs
from respellings.fusion import COLUMN_PARTIALS, SECOND_PASS_ADDS, STRIDED_TOTALS

from kernelband.proposers.rewriter.proposer import options
from kernelband.tasks import load_task

TASK = "examples:add_rmsnorm"
FUSED = "add_kernel_rmsnorm_kernel_fused"


def made(source: str) -> tuple[list[tuple[str, str]], tuple[str, ...]]:
    found = options(source, ("launch_fusion",))
    return [(v.rationale, v.apply(found.module)) for v in found.variants], found.reasons


def side_by_side(source: str) -> tuple[list[tuple[str, str]], tuple[str, ...]]:
    """The variants of the forms whose programs run both kernels' work side by side (not the last-program form,
    which runs the second kernel after the first, wherever the others refuse), and the reasons."""
    variants, reasons = made(source)
    return [(r, new) for r, new in variants if "the last program of" not in r], reasons


def source() -> str:
    return load_task(TASK).module_source


def fused_kernel(new: str) -> str:
    return new.split(f"def {FUSED}(")[1].split("\n\n\n")[0]


def test_an_add_feeding_a_row_norm_becomes_one_kernel_that_keeps_the_sum_in_registers():
    [(rationale, new)] = made(source())[0]
    assert rationale == (f"the launches of add_kernel and rmsnorm_kernel in add_rmsnorm as one kernel ({FUSED}): "
                         "rmsnorm_kernel reads h from registers, h no longer stored")
    body = fused_kernel(new)
    assert "    h_value = x + y\n" in body and "tl.store(h_ptr" not in body and "tl.load(h_ptr" not in body
    assert ("    h = tl.where(mask_1, h_value.to(h_ptr_1.dtype.element_ty), 0.0).to(h_ptr_1.dtype.element_ty)"
            ".to(tl.float32)\n") in body  # the value the load read: cast to h's type as the store cast it
    assert body.count("tl.load(") == 3 and body.count("tl.store(") == 1  # x, y, w in; out out
    assert (f"    {FUSED}[(rows,)](x_ptr=x, y_ptr=y, h_ptr=h, n_cols=cols, BLOCK_SIZE=block, out_ptr=out, "
            "h_ptr_1=h, w_ptr=weight, n_cols_1=cols, eps=1e-6, BLOCK_SIZE_1=block, num_warps=4)\n    return out\n"
            ) in new
    assert "add_kernel[" not in new and "rmsnorm_kernel[" not in new
    assert "    h = torch.empty_like(x)\n" in new  # the allocation stays: the kernel reads its element type
    compile(new, TASK, "exec")


RETURNS_H = ("    return out\n", "    return out, h\n")


def test_the_intermediate_is_still_stored_when_the_function_returns_it():
    [(rationale, new)] = made(source().replace(*RETURNS_H))[0]
    assert rationale.endswith("h still stored (add_rmsnorm returns it)")
    body = fused_kernel(new)
    assert "    h_value = x + y\n    tl.store(h_ptr + row * n_cols + cols, h_value, mask=mask)\n" in body
    assert "tl.load(h_ptr" not in body


def test_the_intermediate_is_still_stored_when_the_function_passes_it_on_later():
    later = source().replace("    return out\n", "    total = out + h\n    return total\n")
    [(rationale, _)] = made(later)[0]
    assert rationale.endswith("h still stored (add_rmsnorm reads it again)")


KEPT_IN = source().replace("    return out\n", "    CACHE['h'] = h\n    return out\n") + "\n\nCACHE = {}\n"


@pytest.mark.parametrize("keeps", ["    CACHE['h'] = h\n", "    add_rmsnorm.h = h\n", "    global KEPT\n    KEPT = h\n",
                                   "    v = h.view(-1)\n    CACHE['v'] = v\n"])
def test_the_intermediate_is_still_stored_when_the_function_keeps_it_in_an_object_or_a_global(keeps):
    kept = source().replace("    return out\n", keeps + "    return out\n")
    [(rationale, _)] = made(kept)[0]
    assert rationale.endswith("h still stored (add_rmsnorm hands it on)")


def test_a_local_view_of_the_intermediate_is_no_use_of_it():
    [(rationale, _)] = made(source().replace("    return out\n", "    v = h.view(-1)\n    return out\n"))[0]
    assert rationale.endswith("h no longer stored")


@pytest.mark.slow
def test_an_intermediate_kept_in_a_dict_holds_the_originals_values_in_the_interpreter():
    [(_, new)] = made(KEPT_IN)[0]
    same_as(KEPT_IN, new, "torch.equal(a, b) and torch.equal(original.CACHE['h'], module.CACHE['h'])")


LAUNCH_1 = "    add_kernel[(rows,)](x, y, h, cols, BLOCK_SIZE=block, num_warps=4)\n"
LAUNCH_2 = "    rmsnorm_kernel[(rows,)](out, h, weight, cols, 1e-6, BLOCK_SIZE=block, num_warps=4)\n"
ONE_1D = "the add_kernel launch in add_rmsnorm and the rmsnorm_kernel launch in add_rmsnorm"
OTHER_GRID = "rmsnorm_kernel reads h on another grid than add_kernel writes it (a program may read what other programs " \
    "wrote), and "
OTHER_INDEX = "rmsnorm_kernel reads h at other addresses or under another mask than add_kernel writes it"


@pytest.mark.parametrize("old, new, reason", [
    (LAUNCH_1, LAUNCH_1.replace("(rows,)", "(rows + 1,)"),
     f"{OTHER_GRID}add_kernel does not address `P + pid * B + tl.arange(0, B)`"),
    (LAUNCH_2, "    s = h.sum()\n" + LAUNCH_2,
     f"between {ONE_1D} comes `s = h.sum()`"),  # another reader of the intermediate in between
    (LAUNCH_2, "    first = h[0]\n" + LAUNCH_2, "`first = h[0]` between the launches reads what add_kernel writes"),
    (LAUNCH_2, "    x[0] = 5\n" + LAUNCH_2, f"between {ONE_1D}, `x[0] = 5` writes into a buffer or an object: the "
     "first kernel would read it changed"),  # moved past it, add_kernel would add the new x[0]
    (LAUNCH_2, "    y.data = x\n" + LAUNCH_2, f"between {ONE_1D}, `y.data = x` writes into a buffer or an object: "
     "the first kernel would read it changed"),
    (LAUNCH_2, "    k, x[1:] = 1, 0.0\n" + LAUNCH_2, f"between {ONE_1D}, `k, x[1:] = 1, 0.0` writes into a buffer or an "
     "object: the first kernel would read it changed"),
    (LAUNCH_2, "    block = 64\n" + LAUNCH_2, OTHER_INDEX),  # the first launch keeps its block: not the second's
    ("    h = tl.load(h_ptr + row * n_cols + cols, mask", "    h = tl.load(h_ptr + row * n_cols + cols + 1, mask",
     OTHER_INDEX),
    ("    h = tl.load(h_ptr + row * n_cols + cols, mask", "    h = tl.load(h_ptr + (row + 1) * n_cols + cols, mask",
     OTHER_INDEX),  # the next program's row
    ("mask=mask, other=0.0).to(tl.float32)\n    rstd", "mask=cols < n_cols - 1, other=0.0).to(tl.float32)\n    rstd",
     OTHER_INDEX),
    (LAUNCH_2, LAUNCH_2.replace("BLOCK_SIZE=block", "BLOCK_SIZE=1024"), OTHER_INDEX),  # other block sizes
    (LAUNCH_2, LAUNCH_2.replace(", cols, 1e-6", ", cols - 1, 1e-6"), OTHER_INDEX),
    ("    tl.store(h_ptr + row * n_cols + cols, x + y, mask=mask)\n",
     "    for i in range(1):\n        tl.store(h_ptr + row * n_cols + cols, x + y, mask=mask)\n",
     "add_kernel stores to h inside a block or in a compound statement"),
    ("    tl.store(h_ptr + row * n_cols + cols, x + y, mask=mask)\n",
     "    tl.store(h_ptr + row * n_cols + cols, x + y)\n",
     "add_kernel's store to h is unmasked and not one value a program"),
    ("    cols = tl.arange(0, BLOCK_SIZE)\n    mask = cols < n_cols\n    x =",
     "    cols = tl.arange(0, BLOCK_SIZE) // 2\n    mask = cols < n_cols\n    x =",
     "add_kernel's store to h is not one 1-D block `... + tl.arange(0, B)` under a mask over it"),
    ("    tl.store(h_ptr + row * n_cols + cols, x + y, mask=mask)\n",
     "    tl.store(h_ptr + row * n_cols + cols, x + y, mask=row < 1000000)\n",
     "add_kernel's store to h is not one 1-D block `... + tl.arange(0, B)` under a mask over it"),
    ("    out = torch.empty_like(x)\n", "    out = x\n",
     "rmsnorm_kernel writes out, which may be the memory add_kernel reads as x: in one launch the order of their "
     "accesses to it is not certain"),  # the norm would overwrite x
    ("    out = torch.empty_like(x)\n", "    out = h.view(h.shape)\n",  # a view of fresh memory is that memory
     "rmsnorm_kernel writes out, which may be the memory add_kernel writes as h: in one launch the order of their "
     "accesses to it is not certain"),
    (LAUNCH_2, LAUNCH_2.replace("(out, h,", "(out, h[1:],"),
     "the rmsnorm_kernel launch in add_rmsnorm computes an argument from what add_kernel writes"),
    (LAUNCH_1, LAUNCH_1.replace("num_warps=4", "enable_fp_fusion=False"),
     f"{ONE_1D} set different compiler options"),
    ("    row = tl.program_id(axis=0)\n    cols = tl.arange(0, BLOCK_SIZE)\n    mask = cols < n_cols\n    x =",
     "    row = tl.program_id(axis=0)\n    if row > 7:\n        return\n    cols = tl.arange(0, BLOCK_SIZE)\n"
     "    mask = cols < n_cols\n    x =", "add_kernel returns early: the second kernel's part would not run; nor can the last "
     "program of add_kernel to finish run rmsnorm_kernel's programs in turn: add_kernel returns early: a program "
     "that returns would not count itself as done"),
])
def test_launch_fusion_refuses_where_the_meaning_is_not_certain(old, new, reason):
    base = source()
    changed = base.replace(old, new, 1)
    assert changed != base
    variants, reasons = side_by_side(changed)
    assert not variants and reasons == (reason,)


ROW_MEAN = """
import torch
import triton
import triton.language as tl


@triton.jit
def mean_kernel(x_ptr, mean_ptr, n, BLOCK: tl.constexpr):
    row = tl.program_id(0)
    cols = tl.arange(0, BLOCK)
    x = tl.load(x_ptr + row * n + cols, mask=cols < n, other=0.0)
    tl.store(mean_ptr + row, tl.sum(x, axis=0) / n)


@triton.jit
def center_kernel(x_ptr, mean_ptr, out_ptr, n, BLOCK: tl.constexpr):
    row = tl.program_id(0)
    cols = tl.arange(0, BLOCK)
    mu = tl.load(mean_ptr + row)
    tl.store(out_ptr + row * n + cols, tl.load(x_ptr + row * n + cols, mask=cols < n) - mu, mask=cols < n)


def center(x):
    rows, n = x.shape
    mean = torch.empty(rows, device=x.device)
    out = torch.empty_like(x)
    mean_kernel[(rows,)](x, mean, n, BLOCK=triton.next_power_of_2(n))
    center_kernel[(rows,)](x, mean, out, n, BLOCK=triton.next_power_of_2(n))
    return out
"""


def test_one_value_a_program_is_kept_in_registers_where_the_same_program_reads_it_back():
    [(rationale, new)] = side_by_side(ROW_MEAN)[0]
    assert "center_kernel reads mean from registers, mean no longer stored" in rationale
    fused = new.split("def mean_kernel_center_kernel_fused(")[1].split("\n\n\n")[0]
    assert "    mu = mean_value.to(mean_ptr_1.dtype.element_ty)\n" in fused and "tl.store(mean_ptr" not in fused
    same_outputs(Spelling("fusion", "row_mean", ROW_MEAN, "center", "args = [torch.randn(5, 37)]", ()), [new])


@pytest.mark.parametrize("old, new, reason", [
    ("mu = tl.load(mean_ptr + row)", "mu = tl.load(mean_ptr + row - 1)",  # the program before's mean
     "center_kernel reads mean at other addresses or under another mask than mean_kernel writes it"),
    ("mu = tl.load(mean_ptr + row)", "mu = tl.load(mean_ptr + row, mask=row < 3, other=0.0)",
     "center_kernel reads mean at other addresses or under another mask than mean_kernel writes it"),
    ("tl.store(mean_ptr + row, tl.sum(x, axis=0) / n)", "tl.store(mean_ptr + row + cols, x / n)",  # a row's lanes
     "mean_kernel's store to mean is unmasked and not one value a program"),
])
def test_one_value_a_program_is_refused_where_another_program_or_lane_reads_it(old, new, reason):
    changed = ROW_MEAN.replace(old, new)
    assert changed != ROW_MEAN
    variants, reasons = side_by_side(changed)
    assert not variants and reasons == (reason,)


def test_launch_fusion_refuses_a_read_of_the_intermediate_it_cannot_follow():
    """A pointer picked by tl.where hides which tensor a load reads: it might be the intermediate."""
    hidden = source().replace("    w = tl.load(w_ptr + cols,", "    w = tl.load(tl.where(row >= 0, w_ptr, h_ptr) + cols,")
    assert made(hidden) == ([], ("rmsnorm_kernel has an access whose pointer reaches no parameter here "
                                 "(`tl.where(row >= 0, w_ptr, h_ptr) + cols`): which tensor it touches is not known",))


def test_launch_fusion_needs_two_launches_in_a_row():
    assert made(load_task("examples:rmsnorm").module_source) == (
        [], ("no function launches two kernels one after the other",))
    assert made(load_task("examples:vector_add").module_source)[0] == []


def test_a_size_computed_between_the_launches_is_fine():
    between = source().replace(LAUNCH_2, "    eps_rows = rows\n" + LAUNCH_2)
    [(_, new)] = made(between)[0]
    assert f"    eps_rows = rows\n    {FUSED}[(rows,)](" in new


# -- the second form: an element-wise kernel over the flattened tensor, inlined into the row kernel ----------
FLAT = load_task("examples:rmsnorm").module_source.split("\n\ndef rmsnorm(")[0].replace("import triton.language as tl\n", """\
import triton.language as tl


@triton.jit
def add_kernel(x_ptr, y_ptr, out_ptr, n_elements, alpha, BLOCK_SIZE: tl.constexpr):
    pid = tl.program_id(axis=0)
    offsets = pid * BLOCK_SIZE + tl.arange(0, BLOCK_SIZE)
    mask = offsets < n_elements
    x = tl.load(x_ptr + offsets, mask=mask)
    y = tl.load(y_ptr + offsets, mask=mask)
    tl.store(out_ptr + offsets, x + y * alpha, mask=mask)
""") + """

def add_rmsnorm(x, y, weight):
    rows, cols = x.shape
    h = torch.empty_like(x)
    n = h.numel()
    add_kernel[(triton.cdiv(n, 1024),)](x, y, h, n, 0.5, BLOCK_SIZE=1024)
    out = torch.empty_like(x)
    rmsnorm_kernel[(rows,)](out, h, weight, h.stride(0), out.stride(0), cols, 1e-6, BLOCK_SIZE=256, num_warps=2)
    return out
"""
INLINED = "rmsnorm_kernel_add_kernel_inlined"


def test_an_element_wise_kernel_over_the_flat_tensor_is_computed_where_the_row_kernel_reads_its_output():
    [(rationale, new)] = made(FLAT)[0]
    assert rationale == (f"add_kernel (element-wise over h flattened) computed where rmsnorm_kernel reads h, in "
                         f"{INLINED}: one launch, h no longer stored")
    body = new.split(f"def {INLINED}(")[1].split("\n\n\n")[0]
    assert body.count("tl.load(x_ptr_1 + row * x_row_stride + start + cols, mask=") == 2  # both passes
    assert body.count("tl.load(y_ptr_1 + row * x_row_stride + start + cols, mask=") == 2
    assert "* alpha_1" in body and "tl.load(x_row" not in body
    assert (f"    {INLINED}[(rows,)](out_ptr=out, x_ptr=h, w_ptr=weight, x_row_stride=h.stride(0), "
            "out_row_stride=out.stride(0), n_cols=cols, eps=1e-6, BLOCK_SIZE=256, num_warps=2, alpha_1=0.5, "
            "x_ptr_1=x, y_ptr_1=y)\n") in new
    assert "add_kernel[" not in new
    compile(new, "flat", "exec")


FLAT_GRIDS = OTHER_GRID


@pytest.mark.parametrize("old, new, reason", [
    ("(triton.cdiv(n, 1024),)", "(triton.cdiv(n, 512),)",
     "the grid of the add_kernel launch in add_rmsnorm is not n / B rounded up for its mask's n and block"),
    ("    n = h.numel()\n", "    n = rows * cols\n", "n is not certain to be h.numel()"),
    ("    h = torch.empty_like(x)\n", "    h = torch.empty_strided(x.shape, (1, rows), dtype=x.dtype)\n",
     "h is not certain to be dense"),
    ("    y = tl.load(y_ptr + offsets, mask=mask)\n", "    y = tl.load(y_ptr + offsets + 1, mask=mask)\n",
     "add_kernel does not address `P + pid * B + tl.arange(0, B)`"),
    ("x + y * alpha, mask=mask", "x + tl.sum(y, axis=0), mask=mask",
     "add_kernel calls tl.sum, not known to be element-wise"),
    ("        x = tl.load(x_row + start + cols, mask=mask, other=0.0)",
     "        p = x_row + start\n        x = tl.load(p + cols, mask=mask, other=0.0)",
     "rmsnorm_kernel reads the intermediate at an address whose pointer is not one plain sum here"),
    ("x + y * alpha, mask=mask", "x + y * pid, mask=mask",
     "add_kernel calls tl.program_id, not known to be element-wise"),
])
def test_the_inlined_form_refuses_where_the_meaning_is_not_certain(old, new, reason):
    changed = FLAT.replace(old, new, 1)
    assert changed != FLAT
    variants, reasons = side_by_side(changed)
    assert not variants and reasons == (FLAT_GRIDS + reason,)


RETURNED = FLAT.replace("    return out\n", "    return out, h\n")
GUARD = "(h.stride(0)) == (cols) and (rows) * (cols) == h.numel()"


def test_the_inlined_kernel_stores_the_sum_where_it_computes_it_when_the_host_returns_it():
    [(rationale, new)] = made(RETURNED)[0]
    assert rationale == (f"add_kernel (element-wise over h flattened) computed where rmsnorm_kernel reads h, in {INLINED}: "
                         f"one launch, h stored where it is computed, where {GUARD}")
    body = new.split(f"def {INLINED}(")[1].split("\n\n\n")[0]
    first, second = body.split("    # Second pass")
    # the first pass covers each row: it stores what it computes there, once; the second only reads
    assert first.count("tl.store(x_row + start + cols, h_value, mask=start + cols < n_cols)") == 1
    assert "h_value = tl.load(x_ptr_1 + row * x_row_stride + start + cols" in first and "tl.store(x_row" not in second
    host = new.split("def add_rmsnorm(")[1]
    assert f"    if {GUARD}:\n        {INLINED}[(rows,)](" in host
    assert ("    else:\n        add_kernel[(triton.cdiv(n, 1024),)](x, y, h, n, 0.5, BLOCK_SIZE=1024)\n"
            "        rmsnorm_kernel[(rows,)](out, h, weight") in host
    compile(new, "flat", "exec")


def test_the_inlined_kernel_keeps_the_store_only_where_its_programs_cover_the_sum():
    two_d = RETURNED.replace("rmsnorm_kernel[(rows,)]", "rmsnorm_kernel[(rows, 1)]")
    assert side_by_side(two_d) == ([], (FLAT_GRIDS + "the grid of the rmsnorm_kernel launch in add_rmsnorm is not one "
                                             "dimension of rows",))
    assert made(FLAT)[0] and "h no longer stored" in made(FLAT)[0][0][0]  # not returned: not stored


@pytest.mark.slow
def test_a_sum_stored_by_the_inlined_kernel_holds_the_originals_values_in_the_interpreter():
    """On rows the fused kernel covers (contiguous) and on a transposed x, whose sum the guard leaves to the two
    launches of the original (whose output is then not every element of `out`: only the sums are compared)."""
    [(_, new)] = made(RETURNED)[0]
    same_as(RETURNED, new, "all(torch.equal(p, q) for p, q in zip(a, b))", """
x, y = (torch.randn(300, 7, dtype=torch.float16).t() for _ in range(2))
w = torch.randn(300, dtype=torch.float16)
a, b = original.add_rmsnorm(x, y, w), module.add_rmsnorm(x, y, w)
assert torch.equal(a[1], b[1])
""")


@pytest.mark.slow
def test_the_inlined_kernel_gives_the_originals_outputs_bit_for_bit_in_the_interpreter():
    [(_, new)] = made(FLAT)[0]
    same_as(FLAT, new, "torch.equal(a, b)")


SAME_AS = """
for rows, cols in [(8, 256), (11, 700), (5, 333), (3, 1), (1, 2048)]:
    x, y, w = (torch.randn(rows, cols, dtype=torch.float16) for _ in range(3))
    w = w[0]
    a, b = original.add_rmsnorm(x, y, w), module.add_rmsnorm(x, y, w)
    assert {same}, (rows, cols)
"""


def same_as(original: str, new: str, same: str, more: str = "") -> None:
    """Runs the original and the new module on the same inputs in a fresh interpreter process, checking `same` of
    their outputs a and b (then `more`)."""
    run_modules({"kb_original": original, "kb_module": new}, "import torch\nimport kb_module as module\n"
                "import kb_original as original\ntorch.manual_seed(0)\n" + SAME_AS.format(same=same) + more)


@pytest.mark.slow
def test_the_fused_example_gives_the_originals_outputs_bit_for_bit_in_the_interpreter(evaluator):
    task = load_task(TASK)
    [(_, new)] = made(task.module_source)[0]
    result = evaluator.evaluate(task, new, seed=4)  # against the reference, on every interpreter shape
    assert result.ok, (result.outcome, result.detail, result.error[-2000:])
    same_as(task.module_source, new, "torch.equal(a, b)")


@pytest.mark.slow
def test_a_kept_intermediate_holds_the_originals_values_in_the_interpreter():
    base = source().replace(*RETURNS_H)
    [(_, new)] = made(base)[0]
    same_as(base, new, "all(torch.equal(p, q) for p, q in zip(a, b))")


@pytest.mark.gpu
def test_the_fused_example_beats_its_two_launches_on_a_gpu():
    """The sum no longer goes through memory: x and y in and the output out, 3 passes over a tensor of the
    shape, where the two launches made 5 (h out and in again). On shapes of at least 16 MB moved the fused
    kernel should take about 3/5 of the time; 1.2x is asked, to leave room for the timing's noise."""
    from kernelband.evaluation.evaluator import Evaluator

    task = load_task(TASK)
    [(_, new)] = made(task.module_source)[0]
    with Evaluator(mode="gpu", use_ncu=False) as ev:
        result = ev.evaluate(task, new, seed=1)
    assert result.ok, (result.outcome, result.detail)
    large = [s for s in result.shapes if not s.held_out and s.moved_bytes and s.moved_bytes >= 16e6]
    assert large and all(s.speedup and s.speedup > 1.2 for s in large), [(s.label, s.speedup) for s in large]


# -- a second kernel of several programs, run in turn by the last program of the first ------------------------
def last_form(source: str) -> tuple[str, str, tuple[str, ...]]:
    [(rationale, new)], reasons = made(source)
    return rationale, new, reasons


def test_a_second_stage_of_several_programs_is_run_in_turn_by_the_last_program_of_the_first():
    rationale, new, reasons = last_form(COLUMN_PARTIALS)
    fused = "partial_col_sums_combine_cols_last"
    assert rationale == (f"the launches of partial_col_sums and combine_cols in col_dot as one launch of {fused}: "
                         "the last program of partial_col_sums to finish runs combine_cols's programs in turn "
                         "(combine_cols reads part), where they are at most 16")
    assert reasons == ("combine_cols reads part on another grid than partial_col_sums writes it (a program may read "
                       "what other programs wrote), and partial_col_sums does not address "
                       "`P + pid * B + tl.arange(0, B)`",)
    body = new.split(f"def {fused}(")[1].split("\n\n\n")[0]
    assert ("        for pid_2 in range(0, grid_0):\n            pid_1 = pid_2\n"
            "            cols_1 = pid_1 * BLOCK_N + tl.arange(0, BLOCK_N)\n") in body  # each program's id in turn
    assert "mask=mask_1, other=0.0, volatile=True)" in body  # the partials other programs wrote, past the caches
    assert ("    if 0 < (n_parts) and (triton.cdiv(n_cols, (64))) <= 16:\n"
            f"        {fused}[(n_parts,)](") in new  # the fused launch only where the second grid is small
    assert "    else:\n        partial_col_sums[(n_parts,)](x, y, part," in new  # else the two launches as they were
    assert "grid_0=triton.cdiv(n_cols, (64)))" in new


def test_the_programs_run_in_turn_see_their_grid_as_they_did():
    _, new, _ = last_form(STRIDED_TOTALS)
    assert "            j = pid_1\n            total = 0.0\n            for i in range(j, n_parts, grid_0):\n" in new


def test_a_second_pass_writing_the_first_kernels_output_runs_after_all_of_it():
    rationale, new, reasons = last_form(SECOND_PASS_ADDS)
    assert "the last program of scale_rows to finish runs add_rows's programs in turn (add_rows reads out)" in rationale
    assert reasons == ("add_rows writes out, which scale_rows also writes: in one launch the order of their accesses "
                       "to it is not certain",)
    assert ("    if 0 < (rows) * (triton.cdiv(cols, 64)) and (rows) <= 16:\n"
            "        scale_rows_add_rows_last[(rows, triton.cdiv(cols, 64))](") in new


ADD_ROWS_LOOP = "    while start < n_cols:\n"


@pytest.mark.parametrize("old, new, reason", [
    (ADD_ROWS_LOOP, "    if row > 100:\n        return\n" + ADD_ROWS_LOOP,
     "add_rows returns early: in one program running its programs in turn, a return would end the rest"),
    (ADD_ROWS_LOOP, "    tl.atomic_add(y_ptr, 0.0)\n" + ADD_ROWS_LOOP,
     "add_rows uses atomics: its programs may wait on each other, which one program running them in turn cannot"),
    ("    row = tl.program_id(0)\n    cols = tl.program_id(1)", "    row = tl.program_id(0)\n    if row > 100:\n"
     "        return\n    cols = tl.program_id(1)",
     "scale_rows returns early: a program that returns would not count itself as done"),
    ("@triton.jit\ndef add_rows", "@triton.autotune(configs=[triton.Config({}, num_warps=4)], key=['n_cols'])\n"
     "@triton.jit\ndef add_rows", "add_rows is autotuned or has heuristics: its timing runs would count as programs done"),
])
def test_the_last_program_form_refuses_where_the_meaning_is_not_certain(old, new, reason):
    changed = SECOND_PASS_ADDS.replace(old, new, 1)
    assert changed != SECOND_PASS_ADDS
    variants, reasons = made(changed)
    assert not variants and reasons[-1].endswith(f"nor can the last program of scale_rows to finish run add_rows's "
                                                 f"programs in turn: {reason}")


@pytest.mark.slow
@pytest.mark.parametrize("spelled", [COLUMN_PARTIALS, STRIDED_TOTALS, SECOND_PASS_ADDS])
def test_the_last_program_form_gives_the_originals_outputs_in_the_interpreter_on_small_and_large_grids(spelled):
    """Rows and columns that take the fused launch (a few programs in the second grid) and the two launches."""
    _, new, _ = last_form(spelled)
    entry = new.rsplit("\ndef ", 1)[1].split("(")[0]
    run_modules({"kb_original": spelled, "kb_module": new}, f"""
import torch
import kb_module as module
import kb_original as original
for rows, cols in ((6, 200), (9, 64), (3, 2000)):
    torch.manual_seed(rows)
    x, y, w = torch.randn(rows, cols), torch.randn(rows, cols), torch.randn(cols)
    a, b = original.{entry}(x, y, w), module.{entry}(x, y, w)
    assert torch.allclose(a, b, atol=1e-5, rtol=1e-5), (rows, cols, (a - b).abs().max())
    again = module.{entry}(x, y, w)  # the counter is back at zero: a second call is the same
    assert torch.equal(again, b)
""")
