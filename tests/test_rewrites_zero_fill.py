"""zero_fill: a buffer the host allocates zeroed that the first launch after it writes whole before anything reads
it is allocated empty (analysis/zero_fills.py, analysis/coverage.py); the variant gives the original's outputs in
the interpreter, and each missing fact is a refusal that names it."""

from __future__ import annotations

import pytest
from interpreted import run_modules
from respellings.user_rows import SCALE_ROWS_TILE
from test_rewrites_structural import made, made_plain

from kernelband.tasks import tritonbench as tb

# triton_mul2 of TritonBench-G: a zeroed output that a flat, masked block per program overwrites.
MUL2 = '''
import torch
import triton
import triton.language as tl


@triton.jit
def mul2_kernel(in_ptr0, out_ptr, n_elements, BLOCK_SIZE: tl.constexpr):
    pid = tl.program_id(axis=0)
    block_start = pid * BLOCK_SIZE
    offsets = block_start + tl.arange(0, BLOCK_SIZE)
    mask = offsets < n_elements
    x = tl.load(in_ptr0 + offsets, mask=mask)
    output = 2 * x
    tl.store(out_ptr + offsets, output, mask=mask)


def triton_mul2(x, BLOCK_SIZE=16):
    output = torch.zeros_like(x)
    n_elements = x.numel()
    grid = (triton.cdiv(n_elements, BLOCK_SIZE),)
    mul2_kernel[grid](x, output, n_elements, BLOCK_SIZE)
    return output
'''

# One program per row, one block of the row's next power of two, strides passed.
ROWS = '''
import torch
import triton
import triton.language as tl


@triton.jit
def scale_rows(src, dst, stride_src, stride_dst, n_cols, BLOCK: tl.constexpr):
    row = tl.program_id(0)
    cols = tl.arange(0, BLOCK)
    keep = cols < n_cols
    v = tl.load(src + row * stride_src + cols, mask=keep, other=0.0)
    tl.store(dst + row * stride_dst + cols, v * 2.0, mask=keep)


def scale(x):
    M, N = x.shape
    out = torch.zeros((M, N), device=x.device, dtype=x.dtype)
    scale_rows[(M,)](x, out, x.stride(0), out.stride(0), N, BLOCK=triton.next_power_of_2(N))
    return out
'''

# One program per row walking its columns in blocks; the buffer zeroed by a line of its own.
LOOPED = '''
import torch
import triton
import triton.language as tl


@triton.jit
def relu_rows(src, dst, width, B: tl.constexpr):
    r = tl.program_id(0)
    for start in range(0, width, B):
        c = start + tl.arange(0, B)
        v = tl.load(src + r * width + c, mask=c < width, other=0.0)
        tl.store(dst + r * width + c, tl.maximum(v, 0.0), mask=c < width)


def relu(x):
    rows = x.shape[0]
    cols = x.shape[1]
    out = x.new_empty(rows, cols)
    out.zero_()
    relu_rows[(rows,)](x, out, cols, B=16)
    return out
'''


def one(source: str) -> tuple[str, str]:
    variants, reasons = made(source, "zero_fill")
    assert len(variants) == 1, reasons
    return variants[0]


def refusal(source: str) -> str:
    variants, reasons = made(source, "zero_fill")
    assert variants == [] and len(reasons) == 1, (variants, reasons)
    return reasons[0]


def changed(source: str, old: str, new: str) -> str:
    assert old in source
    return source.replace(old, new)


# -- the variants ---------------------------------------------------------------------------------------------
def test_the_mul2_output_is_allocated_empty_like_and_nothing_else_changes():
    rationale, new = one(MUL2)
    assert rationale.startswith("output (allocated by zeros_like) in triton_mul2 allocated empty: mul2_kernel writes")
    assert new == MUL2.replace("torch.zeros_like(x)", "torch.empty_like(x)")


@pytest.mark.parametrize("source, old, new", [
    (ROWS, "torch.zeros((M, N), device=x.device, dtype=x.dtype)", "torch.empty((M, N), device=x.device, dtype=x.dtype)"),
    (LOOPED, "    out.zero_()\n", ""),
    (changed(LOOPED, "out.zero_()", "out.fill_(0.0)"), "    out.fill_(0.0)\n", ""),
    (changed(MUL2, "torch.zeros_like(x)", "torch.full_like(x, 0)"), "torch.full_like(x, 0)", "torch.empty_like(x)"),
    (changed(MUL2, "torch.zeros_like(x)", "torch.full(x.shape, 0.0, dtype=x.dtype)"),
     "torch.full(x.shape, 0.0, dtype=x.dtype)", "torch.empty(x.shape, dtype=x.dtype)"),
    (changed(MUL2, "torch.zeros_like(x)", "torch.empty_like(x).zero_()"), "torch.empty_like(x).zero_()",
     "torch.empty_like(x)"),
])
def test_each_zeroing_form_loses_its_zeros_and_keeps_its_arguments(source, old, new):
    assert one(source)[1] == source.replace(old, new)


def test_a_grid_lambda_an_autotuned_block_and_a_numel_read_from_the_buffer_are_proven_too():
    tuned = changed(MUL2, "@triton.jit", '@triton.autotune(configs=[triton.Config({"BLOCK_SIZE": 8})], key=[])\n'
                                         "@triton.jit")
    tuned = changed(tuned, "    n_elements = x.numel()\n    grid = (triton.cdiv(n_elements, BLOCK_SIZE),)\n"
                           "    mul2_kernel[grid](x, output, n_elements, BLOCK_SIZE)",
                    '    mul2_kernel[lambda meta: (triton.cdiv(output.numel(), meta["BLOCK_SIZE"]),)](x, output, '
                    "output.numel())")
    assert "torch.empty_like(x)" in one(tuned)[1]


def test_the_variants_give_the_originals_outputs_in_the_interpreter():
    modules = {"kb_mul2": MUL2, "kb_mul2_new": one(MUL2)[1], "kb_rows": ROWS, "kb_rows_new": one(ROWS)[1],
               "kb_looped": LOOPED, "kb_looped_new": one(LOOPED)[1]}
    assert all("zeros" not in modules[k] and ".zero_()" not in modules[k] for k in modules if k.endswith("_new"))
    run_modules(modules, """
import torch, kb_mul2, kb_mul2_new, kb_rows, kb_rows_new, kb_looped, kb_looped_new
torch.manual_seed(0)
for n in (1, 15, 16, 37, 100):
    x = torch.randn(n)
    assert torch.equal(kb_mul2_new.triton_mul2(x), kb_mul2.triton_mul2(x)), n
for m, n in ((1, 1), (3, 16), (5, 37), (4, 70)):
    x = torch.randn(m, n)
    assert torch.equal(kb_rows_new.scale(x), kb_rows.scale(x)), (m, n)
    assert torch.equal(kb_looped_new.relu(x), kb_looped.relu(x)), (m, n)
""")


# -- the other rewrites drop the fill too ------------------------------------------------------------------------
def test_every_other_rewrites_variants_drop_the_fill_and_say_so():
    for rewrite in ("block_size", "num_warps", "autotune"):
        variants, reasons = made(MUL2, rewrite)
        assert variants, (rewrite, reasons)
        for rationale, new in variants:
            assert "torch.empty_like(x)" in new and "zeros" not in new, (rewrite, new)
            assert rationale.endswith("; and output (allocated by zeros_like) in triton_mul2 allocated empty")
        # the rewrite alone keeps the fill: the drop is the rider's
        assert all("torch.zeros_like(x)" in new for _, new in made_plain(MUL2, rewrite)[0])


def test_a_module_without_a_dead_fill_gets_the_rewrites_own_variants():
    live = changed(MUL2, "    output = 2 * x\n", "    output = 2 * x + tl.load(out_ptr + offsets, mask=mask)\n")
    assert made(live, "block_size") == made_plain(live, "block_size")


def test_a_variant_with_the_fill_dropped_gives_the_originals_outputs_in_the_interpreter():
    variants, _ = made(MUL2, "block_size")
    new = variants[0][1]
    run_modules({"kb_mul2": MUL2, "kb_mul2_new": new}, """
import torch, kb_mul2, kb_mul2_new
torch.manual_seed(0)
for n in (1, 15, 16, 37, 100):
    x = torch.randn(n)
    assert torch.equal(kb_mul2_new.triton_mul2(x), kb_mul2.triton_mul2(x)), n
""")


# -- refusals, each with its fact ----------------------------------------------------------------------------
def test_a_store_masked_by_data_is_refused_its_zeros_are_seen():
    source = changed(MUL2, "tl.store(out_ptr + offsets, output, mask=mask)",
                     "tl.store(out_ptr + offsets, output, mask=mask & (x > 0))")
    assert refusal(source).endswith(
        "the store `tl.store(out_ptr + offsets, output, mask=mask & (x > 0))` in mul2_kernel is masked by "
        "`mask & (x > 0)`, not by its index against a bound: the elements it leaves keep their zeros")


def test_a_grid_or_a_bound_short_of_the_numel_is_refused():
    short_grid = changed(MUL2, "(triton.cdiv(n_elements, BLOCK_SIZE),)", "(triton.cdiv(n_elements, BLOCK_SIZE) - 1,)")
    assert refusal(short_grid).endswith(
        "the mul2_kernel launch in triton_mul2 has a grid (triton.cdiv(x.numel(), BLOCK_SIZE) - 1) that is not "
        "cdiv(n, BLOCK_SIZE): its programs' blocks may not reach every element")
    short_bound = changed(MUL2, "(x, output, n_elements, BLOCK_SIZE)", "(x, output, n_elements - 1, BLOCK_SIZE)")
    assert refusal(short_bound).endswith(
        "the mul2_kernel launch in triton_mul2 bounds its store by x.numel() - 1, which is not the numel of output "
        "(output.numel() or x.numel()): the elements past it keep their zeros")
    narrow = changed(ROWS, "BLOCK=triton.next_power_of_2(N)", "BLOCK=16")
    assert refusal(narrow).endswith("the scale_rows launch in scale passes a block (16) not known to be at least "
                                    "the row length x.shape[1]: one "
                                    "block may not reach every column")


def test_a_load_or_an_atomic_on_the_output_is_refused():
    loaded = changed(MUL2, "output = 2 * x", "output = 2 * x + tl.load(out_ptr + offsets, mask=mask)")
    assert refusal(loaded).endswith(
        "out_ptr in mul2_kernel is loaded (`tl.load(out_ptr + offsets, mask=mask)`): it is read")
    atomic = changed(MUL2, "tl.store(out_ptr + offsets, output, mask=mask)",
                     "tl.atomic_add(out_ptr + offsets, output, mask=mask)")
    assert refusal(atomic).endswith(
        "out_ptr in mul2_kernel takes an atomic (`tl.atomic_add(out_ptr + offsets, output, mask=mask)`): it is read")


def test_a_buffer_read_or_handed_on_before_the_launch_is_refused():
    read = changed(MUL2, "    n_elements = x.numel()\n", "    n_elements = x.numel()\n    total = output.sum()\n")
    assert refusal(read).endswith("output is read before the mul2_kernel launch in triton_mul2 (`total = "
                                  "output.sum()`): its zeros may be read")
    handed = changed(MUL2, "    n_elements = x.numel()\n", "    n_elements = x.numel()\n    keep(output)\n")
    assert refusal(handed).endswith("output is handed on before the mul2_kernel launch in triton_mul2 "
                                    "(`keep(output)`): its zeros may be read")
    twice = changed(MUL2, "(x, output, n_elements, BLOCK_SIZE)", "(output, output, n_elements, BLOCK_SIZE)")
    assert refusal(twice).endswith("the mul2_kernel launch in triton_mul2 passes output for 2 pointer parameters: "
                                   "one may read what another writes")


def test_a_launch_in_a_branch_is_refused():
    branch = changed(MUL2, "    mul2_kernel[grid](x, output, n_elements, BLOCK_SIZE)",
                     "    if n_elements > 0:\n        mul2_kernel[grid](x, output, n_elements, BLOCK_SIZE)")
    assert refusal(branch).endswith("the mul2_kernel launch in triton_mul2 runs inside `if n_elements > 0`: a run "
                                    "that skips it leaves the zeros to be read")


# The usual optional output: allocated zeroed in a branch that falls through to the launch.
OPTIONAL_OUT = changed(MUL2, "def triton_mul2(x, BLOCK_SIZE=16):\n    output = torch.zeros_like(x)\n",
                       "def triton_mul2(x, BLOCK_SIZE=16, output=None):\n    if output is None:\n"
                       "        output = torch.zeros_like(x)\n")


def test_an_output_allocated_in_a_branch_the_launch_follows_is_allocated_empty():
    rationale, new = one(OPTIONAL_OUT)
    assert rationale.startswith("output (allocated by zeros_like) in triton_mul2 allocated empty")
    assert new == OPTIONAL_OUT.replace("torch.zeros_like(x)", "torch.empty_like(x)")
    run_modules({"kb_optional": OPTIONAL_OUT, "kb_optional_new": new}, """
import torch
import kb_optional
import kb_optional_new
x = torch.randn(37)
assert torch.equal(kb_optional.triton_mul2(x), kb_optional_new.triton_mul2(x))
""")


@pytest.mark.parametrize("old, new, why", [
    ("        output = torch.zeros_like(x)\n", "        output = torch.zeros_like(x)\n        return output\n",
     "`return output` after the allocation leaves before the mul2_kernel launch in triton_mul2"),
    ("        output = torch.zeros_like(x)\n", "        output = torch.zeros_like(x)\n    output = x.clone()\n",
     "output is assigned again before the mul2_kernel launch in triton_mul2"),
    ("    if output is None:\n", "    for _ in range(1):\n",
     "the allocation runs inside a loop, which the mul2_kernel launch in triton_mul2 is not in"),
])
def test_an_allocation_in_a_branch_that_leaves_or_is_replaced_is_refused(old, new, why):
    assert refusal(changed(OPTIONAL_OUT, old, new)).endswith(why)


def test_a_store_under_a_data_branch_or_a_rows_buffer_of_unknown_layout_is_refused():
    under = changed(MUL2, "    tl.store(out_ptr + offsets, output, mask=mask)",
                    "    if n_elements > 0:\n        tl.store(out_ptr + offsets, output, mask=mask)")
    assert refusal(under).endswith("in mul2_kernel is under `n_elements > 0`: not every program reaches it")
    like = changed(ROWS, "torch.zeros((M, N), device=x.device, dtype=x.dtype)", "torch.zeros_like(x)")
    assert refusal(like).endswith("out is not allocated with two stated dimensions, row-major: the rows of the "
                                  "scale_rows launch in scale may not be its rows")


# -- TritonBench-G ----------------------------------------------------------------------------------------------
def test_the_tritonbench_mul2_output_is_allocated_empty_and_gives_the_same_outputs():
    if tb.find() is None:
        pytest.skip("no TritonBench-G data")
    source = tb.load("triton_mul2").module_source
    rationale, new = one(source)
    assert "output = torch.empty_like(x)" in new and "torch.zeros_like" not in new
    assert rationale.startswith("output (allocated by zeros_like) in triton_mul2 allocated empty")
    # This Triton's interpreter does not read the task's string annotation `"tl.constexpr"`: both run unquoted.
    plain = {"kb_original": source, "kb_variant": new}
    plain = {k: v.replace('"tl.constexpr"', "tl.constexpr") for k, v in plain.items()}
    assert plain["kb_original"] != source
    run_modules(plain, """
import torch, kb_original, kb_variant
for n in (1, 16, 33, 1000):
    x = torch.randn(n)
    assert torch.equal(kb_variant.triton_mul2(x), kb_original.triton_mul2(x)), n
""")


# -- a 2-D tile of lanes a program (analysis/tile_index.py) ---------------------------------------------------------
# Each program stores a BM x BN tile through a pointer tile built earlier, both dimensions masked by the tensor's.
TILE = SCALE_ROWS_TILE  # the corpus's spelling (tests/respellings/user_rows.py)

# One program, the whole tile transposed: the lanes of the output's rows scaled by its row length, written
# before those of its columns; each dimension one block of its extent.
TRANSPOSE = '''
import torch
import triton
import triton.language as tl


@triton.jit
def transpose_kernel(src, dst, s0, s1, d0, d1, ROWS: tl.constexpr, COLS: tl.constexpr):
    r = tl.arange(0, ROWS)
    c = tl.arange(0, COLS)
    tile = tl.load(src + c[None, :] * s1 + r[:, None] * s0)
    tl.store(dst + c[None, :] * d0 + r[:, None] * d1, tile)


def transpose(x):
    rows, cols = x.shape
    out = torch.zeros(cols, rows, dtype=x.dtype)
    transpose_kernel[(1,)](x, out, x.stride(0), x.stride(1), out.stride(0), out.stride(1), rows, cols)
    return out
'''


def test_a_tile_of_lanes_covering_each_dimension_is_allocated_empty_and_gives_the_same_outputs():
    tile, transposed = one(TILE)[1], one(TRANSPOSE)[1]
    assert "torch.empty(M, N, dtype=torch.float32)" in tile and "zeros" not in tile
    assert "torch.empty(cols, rows, dtype=x.dtype)" in transposed
    run_modules({"kb_tile": TILE, "kb_tile_new": tile, "kb_t": TRANSPOSE, "kb_t_new": transposed}, """
import torch, kb_tile, kb_tile_new, kb_t, kb_t_new
torch.manual_seed(0)
for m, n in ((1, 1), (4, 16), (5, 37), (9, 70)):
    x, s = torch.randn(m, n), torch.randn(m)
    assert torch.equal(kb_tile_new.scale_rows(x, s), kb_tile.scale_rows(x, s)), (m, n)
x = torch.randn(8, 16)
assert torch.equal(kb_t_new.transpose(x), kb_t.transpose(x))
""")


def test_a_tile_short_of_a_dimension_is_refused_with_what_it_misses():
    unmasked = changed(TILE, "tl.store(ptrs, x * s[:, None], mask=mask)", "tl.store(ptrs, x * s[:, None])")
    assert refusal(unmasked).endswith(
        "the scale_rows_2d launch in scale_rows stores dimension 0 of out unmasked over triton.cdiv(x.shape[0], 4) "
        "programs of 4: they write every element only where 4 divides x.shape[0]")
    short = changed(TILE, "triton.cdiv(N, 16))", "triton.cdiv(N, 32))")
    assert refusal(short).endswith(
        "the scale_rows_2d launch in scale_rows has triton.cdiv(x.shape[1], 32) programs of 16 along dimension 1 of "
        "out, bounded by x.shape[1]: not cdiv(x.shape[1], 16)")
    swapped = changed(TILE, "ptrs = out_ptr + rm[:, None] * N + rn[None, :]",
                      "ptrs = out_ptr + rm[:, None] + rn[None, :] * M")
    assert refusal(swapped).endswith(
        "the scale_rows_2d launch in scale_rows scales a dimension of its stored tile by x.shape[0], which is not a "
        "stride of out")
    narrow = changed(TRANSPOSE, "rows, cols)\n", "rows, 8)\n")
    assert refusal(narrow).endswith(
        "the transpose_kernel launch in transpose stores one block of 8 lanes along dimension 0 of out, not known to "
        "span its x.shape[1] elements")


# One element a program: each row's mean stored through a pointer to it.
MEANS = '''
import torch
import triton
import triton.language as tl


@triton.jit
def row_means(x_ptr, out_ptr, n_cols, BLOCK: tl.constexpr):
    row = tl.program_id(0)
    dst = out_ptr + row
    c = tl.arange(0, BLOCK)
    x = tl.load(x_ptr + row * n_cols + c, mask=c < n_cols, other=0.0)
    tl.store(dst, tl.sum(x, axis=0) / n_cols)


def means(x):
    out = torch.zeros(x.shape[0], dtype=torch.float32)
    row_means[(x.shape[0],)](x, out, x.shape[1], BLOCK=triton.next_power_of_2(x.shape[1]))
    return out
'''


def test_one_element_a_program_over_a_grid_of_the_elements_is_allocated_empty():
    new = one(MEANS)[1]
    assert "torch.empty(x.shape[0], dtype=torch.float32)" in new
    run_modules({"kb_means": MEANS, "kb_means_new": new}, """
import torch, kb_means, kb_means_new
x = torch.randn(6, 37)
assert torch.equal(kb_means_new.means(x), kb_means.means(x))
""")
    short = changed(MEANS, "row_means[(x.shape[0],)]", "row_means[(x.shape[0] - 1,)]")
    assert refusal(short).endswith("has a grid of cdiv(x.shape[0] - 1, 1) programs, which does not reach the numel "
                                   "of out (out.numel() or x.shape[0])")
