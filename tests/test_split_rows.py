"""split_rows (rewrites/split_rows.py, split_loops.py): rows whose statistics are sums, split over several programs
a row as a two-stage reduction, on the example RMSNorm's loop kernel, on its single_pass twin's one-block row,
and on re-spellings (other names, a while loop, a scalar accumulator, a helper @triton.jit, pointers walked
block by block, a 2-D grid); the example LayerNorm's chain of sums (its mean, then its variance around the mean)
and a re-spelling of it split into three stages, and so a one-block row's (a user's LayerNorm, a re-spelling);
the variants give the original's outputs in the interpreter where the rows split and where they do not; and a row whose sums cannot be split is refused with the fact."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))

from interpreted import run_modules  # noqa: E402
from respellings.rows import FOR_VECTOR_LITERAL  # noqa: E402

from kernelband.proposers.rewriter.proposer import options  # noqa: E402
from kernelband.tasks import load_task  # noqa: E402

# A row's mean absolute value, one value stored a row: a while loop, a scalar sum of a helper's value, a grid of
# two axes (batches and rows).
WHILE_SCALAR_HELPER = '''
import torch
import triton
import triton.language as tl


@triton.jit
def _mag(v):
    return tl.abs(v)


@triton.jit
def l1_mean(src, dst, length, per_batch, CH: tl.constexpr):
    b = tl.program_id(0)
    m = tl.program_id(1)
    base = src + (b * per_batch + m) * length
    lanes = tl.arange(0, CH)
    s = 0.0
    pos = 0
    while pos < length:
        v = tl.load(base + pos + lanes, mask=pos + lanes < length, other=0.0)
        s += tl.sum(_mag(v), axis=0)
        pos += CH
    tl.store(dst + b * per_batch + m, s / length)


def row_l1_mean(x):
    B, M, N = x.shape
    out = torch.empty((B, M), device=x.device, dtype=torch.float32)
    l1_mean[(B, M)](x, out, N, M, CH=16)
    return out
'''

# L2 normalisation: block indices over tl.cdiv, pointers advanced a block each step, lanes of squares, the grid
# a local tuple.
CDIV_POINTERS = '''
import torch
import triton
import triton.language as tl


@triton.jit
def normalize(X, Y, n, stride, BLK: tl.constexpr):
    r = tl.program_id(0)
    offs = tl.arange(0, BLK)
    px = X + r * stride + offs
    sq = tl.zeros([BLK], dtype=tl.float32)
    for k in range(tl.cdiv(n, BLK)):
        t = tl.load(px, mask=offs < n - k * BLK, other=0.0)
        sq += t * t
        px += BLK
    inv = 1.0 / tl.maximum(tl.sqrt(tl.sum(sq, axis=0)), 1e-12)
    px = X + r * stride + offs
    py = Y + r * stride + offs
    for k in range(tl.cdiv(n, BLK)):
        keep = offs < n - k * BLK
        tl.store(py, tl.load(px, mask=keep, other=0.0) * inv, mask=keep)
        px += BLK
        py += BLK


def l2_normalize(x):
    y = torch.empty_like(x)
    grid = (x.shape[0],)
    normalize[grid](x, y, x.shape[1], x.stride(0), BLK=16)
    return y
'''

# A row held in one block (the launch passes next_power_of_2(n)), its sum of squares through a helper.
ONE_BLOCK_HELPER = '''
import torch
import triton
import triton.language as tl


@triton.jit
def _square(a):
    return a * a


@triton.jit
def unit_rows(inp, out, width, WIDTH: tl.constexpr):
    i = tl.program_id(0)
    j = tl.arange(0, WIDTH)
    a = tl.load(inp + i * width + j, mask=j < width, other=0.0)
    norm = tl.sqrt(tl.sum(_square(a), axis=0))
    tl.store(out + i * width + j, a / (norm + 1e-6), mask=j < width)


def unit(x):
    out = torch.empty_like(x)
    unit_rows[(x.shape[0],)](x, out, x.shape[1], WIDTH=triton.next_power_of_2(x.shape[1]))
    return out
'''


# A row's z-scores: a chain of sums under other names, a while loop of scalar sums, then a loop over block indices
# of lanes through a helper, reading the first's mean, pointers walked a block each step, then a while loop that
# stores.
ZSCORE_CHAIN = '''
import torch
import triton
import triton.language as tl


@triton.jit
def _sq(v):
    return v * v


@triton.jit
def zscore(src, dst, length, CH: tl.constexpr):
    r = tl.program_id(0)
    lanes = tl.arange(0, CH)
    base = src + r * length
    total = 0.0
    pos = 0
    while pos < length:
        total += tl.sum(tl.load(base + pos + lanes, mask=pos + lanes < length, other=0.0), axis=0)
        pos += CH
    centre = total / length
    spread = tl.zeros([CH], dtype=tl.float32)
    p = base + lanes
    for k in range(tl.cdiv(length, CH)):
        keep = lanes < length - k * CH
        v = tl.load(p, mask=keep, other=0.0)
        spread += tl.where(keep, _sq(v - centre), 0.0)
        p += CH
    scale = 1.0 / tl.sqrt(tl.sum(spread, axis=0) / length + 1e-5)
    pos = 0
    while pos < length:
        keep = pos + lanes < length
        v = tl.load(base + pos + lanes, mask=keep, other=0.0)
        tl.store(dst + r * length + pos + lanes, (v - centre) * scale, mask=keep)
        pos += CH


def zscore_rows(x):
    out = torch.empty_like(x)
    zscore[(x.shape[0],)](x, out, x.shape[1], CH=16)
    return out
'''


def made(source: str) -> tuple[list[tuple[str, str]], tuple[str, ...]]:
    found = options(source, ("split_rows",))
    return [(v.rationale, v.apply(found.module)) for v in found.variants], found.reasons


def example() -> str:
    return load_task("examples:rmsnorm").module_source


def single_pass_of_example() -> str:
    found = options(example(), ("single_pass",))
    return found.variants[0].apply(found.module)


def test_the_example_rmsnorms_loop_kernel_is_split_into_partial_sums_and_a_combining_stage():
    [(rationale, new)], reasons = made(example())
    assert reasons == ()
    assert rationale == (
        "rmsnorm_kernel's row sums (sum_sq) split over SPLIT programs a row where the rows are too few for the SMs: "
        "each sums its run of the loop's blocks (rmsnorm_kernel_partials), then each adds its row's SPLIT partials "
        "in one fixed order and runs what follows, its loops over its run (rmsnorm_kernel_combine)")
    # stage 1: the program's run of the sum loop's blocks, its lanes summed into the row's j-th partial
    assert "    start_hi = tl.minimum(start_lo + start_per * BLOCK_SIZE, n_cols)\n" \
           "    for start in range(start_lo, start_hi, BLOCK_SIZE):\n" in new
    assert "    tl.store(sum_sq_part + row_id * SPLIT + split_id, tl.sum(sum_sq, 0))\n" in new
    # stage 2: the row's partials added in one order, read where the lanes were summed; the store loop split too
    assert "    sum_sq_row = tl.sum(tl.load(sum_sq_part + row_id * SPLIT + tl.arange(0, SPLIT)), 0)\n" \
           "    rstd = 1.0 / tl.sqrt(sum_sq_row / n_cols + eps)\n" in new
    assert "    for start in range(start_lo_1, start_hi_1, BLOCK_SIZE):\n" in new
    # the host: 16 programs a SM at the launch's 2 warps, at most as many as leave each 4 of the row's 256-column
    # blocks on a GPU (the launch's own values), the original launch where the rows fill the SMs
    assert '    runs = triton.cdiv(cols, 256) // (4 if out.device.type == "cuda" else 1)\n' in new
    assert ("    split = min(1 << (max(1, min(32, runs)).bit_length() - 1), triton.next_power_of_2(-(-16 * sms // "
            "rows_1))) if rows_1 < 8 * sms else 1\n") in new
    assert "        rmsnorm_kernel_partials[(*grid, split)](out, x, weight" in new
    assert "    else:\n        rmsnorm_kernel[(rows,)](out, x, weight" in new


def test_the_single_pass_twin_of_the_example_splits_its_one_block_row_and_the_loop_kernel_its_loop():
    found, reasons = made(single_pass_of_example())
    assert reasons == ()
    assert [r.split("'s")[0] for r, _ in found] == ["rmsnorm_kernel", "rmsnorm_kernel_single_pass"]
    assert found[1][0].startswith("rmsnorm_kernel_single_pass's row block BLOCK_SIZE (sum) split over SPLIT programs")


@pytest.mark.parametrize("source, kernel, sums", [
    (WHILE_SCALAR_HELPER, "l1_mean", "s"),
    (CDIV_POINTERS, "normalize", "sq"),
])
def test_the_split_fires_on_other_spellings_of_a_loop_that_sums_its_row(source, kernel, sums):
    [(rationale, new)], _ = made(source)
    assert rationale.startswith(f"{kernel}'s row sums ({sums}) split over SPLIT programs a row")
    assert f"def {kernel}_partials(" in new and f"def {kernel}_combine(" in new


def test_the_split_of_a_while_loop_starts_its_variable_at_the_run_and_of_pointers_advances_them():
    [(_, new)], _ = made(WHILE_SCALAR_HELPER)
    assert "    pos = pos_lo\n    while pos < pos_hi:\n" in new
    assert "    split_id = tl.program_id(2)\n    row_id = tl.program_id(0) + tl.program_id(1) * tl.num_programs(0)\n" \
        in new
    assert "    tl.store(dst + b * per_batch + m, s / length)\n" in new  # each program of the row stores it alike
    [(_, new)], _ = made(CDIV_POINTERS)
    assert "    px += k_skipped * (BLK)\n    for k in range(k_lo, k_hi, 1):\n" in new
    assert "    px += k_skipped_1 * (BLK)\n    py += k_skipped_1 * (BLK)\n" in new


def test_a_one_block_row_of_sums_is_split_with_its_chunked_twin_for_long_rows():
    [(rationale, new)], _ = made(ONE_BLOCK_HELPER)
    assert rationale.startswith("unit_rows's row block WIDTH (sum) split over SPLIT programs a row")
    assert "def unit_rows_chunked(" in new and "def unit_rows_partials(" in new


RECORD = '''
    kernel.run = lambda *a, _run=run, _name=name, **k: (launched.append(_name), _run(*a, **k))[1]
'''


def check_outputs(source: str, entry: str, kernels: list[str], cases: str) -> None:
    """Runs the original and the variant on each case, `(args, launched kernel names)`: the same outputs, the
    variant's twice bitwise alike, and the kernels it launched those named (`kernels`: the stages, then the
    kernel split)."""
    [(_, new)] = [v for v in made(source)[0] if v[0].startswith(f"{kernels[-1]}'s")]
    run_modules({"original": source, "variant": new}, f"""
import torch
import original
import variant
torch.manual_seed(0)
launched = []
for name in {kernels!r}:
    kernel = getattr(variant, name, None)
    if kernel is None:
        continue
    run = kernel.run
{RECORD}
for args, want in {cases}:
    launched.clear()
    expected = original.{entry}(*args)
    got = variant.{entry}(*args)
    assert launched == want, (args[0].shape, launched)
    assert torch.allclose(got.float(), expected.float(), atol=1e-3, rtol=1e-3), (args[0].shape, got, expected)
    assert torch.equal(variant.{entry}(*args), got)
""")


STAGES = ["{k}_partials", "{k}_combine"]


@pytest.mark.slow
def test_the_example_rmsnorm_split_gives_the_originals_outputs_in_the_interpreter():
    """3 and 5 rows of two blocks or more take the two stages (fewer than 8 * 8 interpreter SMs); a row of one
    block (nothing to split) and 70 rows the original kernel."""
    stages = [s.format(k="rmsnorm_kernel") for s in STAGES]
    cases = ("[([torch.randn(r, c, dtype=torch.float16), torch.randn(c, dtype=torch.float16)], w) for r, c, w in "
             f"((3, 1000, {stages}), (5, 300, {stages}), (3, 100, ['rmsnorm_kernel']), (70, 600, ['rmsnorm_kernel']))]")
    check_outputs(example(), "rmsnorm", [*stages, "rmsnorm_kernel"], cases)


@pytest.mark.slow
def test_the_single_pass_twins_split_gives_the_originals_outputs_in_the_interpreter():
    """The twin's rows (up to 16384 columns) split where they are few; 40 rows of 37 (a block of 64, over the
    interpreter's 32) take the chunked twin, 40 rows of 20 the single-pass twin itself."""
    kernel = "rmsnorm_kernel_single_pass"
    stages = [s.format(k=kernel) for s in STAGES]
    cases = ("[([torch.randn(r, c, dtype=torch.float16), torch.randn(c, dtype=torch.float16)], w) for r, c, w in "
             f"((3, 100, {stages}), (5, 300, {stages}), (40, 37, ['{kernel}_chunked']), (40, 20, ['{kernel}']))]")
    check_outputs(single_pass_of_example(), "rmsnorm", [*stages, f"{kernel}_chunked", kernel], cases)


@pytest.mark.slow
@pytest.mark.parametrize("source, entry, kernel, cases", [
    (WHILE_SCALAR_HELPER, "row_l1_mean", "l1_mean", "(((2, 2, 100), S), ((1, 3, 37), S), ((3, 20, 40), [K]))"),
    (CDIV_POINTERS, "l2_normalize", "normalize", "(((3, 100), S), ((5, 37), S), ((50, 40), [K]))"),
    (ONE_BLOCK_HELPER, "unit", "unit_rows", "(((3, 100), S), ((5, 37), S), ((50, 40), [K + '_chunked']), "
                                            "((50, 20), [K]))"),
])
def test_each_spelling_split_gives_the_originals_outputs_in_the_interpreter(source, entry, kernel, cases):
    """Rows too few for the interpreter's SMs split (S, the stages), more rows do not: the original kernel K,
    or a one-block row's chunked twin where its block is over the interpreter's 32."""
    stages = [s.format(k=kernel) for s in STAGES]
    launched = cases.replace("S", repr(stages)).replace("K", repr(kernel))
    check_outputs(source, entry, [*stages, f"{kernel}_chunked", kernel],
                  f"[([torch.randn(*shape)], want) for shape, want in {launched}]")


@pytest.mark.parametrize("old, new, why", [
    ("        acc += x * x\n",
     "        acc += x * x\n        tl.store(y_ptr + row, tl.sum(acc, axis=0))\n",
     "rmsnorm_kernel reads its sum acc inside the loop that accumulates it (a running value: the part of it "
     "before a program's run of the blocks is another program's)"),
    ("    acc = tl.zeros([BLOCK], dtype=tl.float32)\n", "    acc = tl.full([BLOCK], 1.0, dtype=tl.float32)\n",
     "rmsnorm_kernel's sum acc does not start from 0 (each run of the blocks would add its start)"),
    ("    rstd = 1.0 / tl.sqrt(tl.sum(acc, axis=0) / n_cols + eps)\n",
     "    rstd = 1.0 / tl.sqrt(tl.sum(acc, axis=0) / n_cols + eps) + x * 0.0\n",
     "rmsnorm_kernel reads x after its sum loop, which the loop leaves as its last block set it"),
    ("    rstd = 1.0 / tl.sqrt(tl.sum(acc, axis=0) / n_cols + eps)\n",
     "    rstd = 1.0 / tl.sqrt(tl.sum(acc, axis=0) / n_cols + eps)\n    peak = tl.max(acc, axis=0)\n",
     "rmsnorm_kernel reads its lanes acc after the loop other than summed over them"),
    ("    acc = tl.zeros([BLOCK], dtype=tl.float32)\n",
     "    acc = tl.zeros([BLOCK], dtype=tl.float32)\n    t = 1.0\n    for i in range(4):\n        t = t * 0.5 + i\n",
     "rmsnorm_kernel runs a loop (`for i in range(4)`) before the one that sums its row: each program of a split "
     "would run it again, in each stage"),
])
def test_a_row_whose_sums_cannot_be_split_is_refused_with_the_fact(old, new, why):
    source = FOR_VECTOR_LITERAL.replace(old, new)
    assert source != FOR_VECTOR_LITERAL
    assert made(source) == ([], (why,))




def layernorm() -> str:
    return load_task("examples:layernorm").module_source


CHAIN = ["{k}_partials", "{k}_partials_2", "{k}_combine"]


def test_the_example_layernorms_mean_then_variance_is_split_into_a_chain_of_three_stages():
    [(rationale, new)], reasons = made(layernorm())
    assert reasons == ()
    assert rationale == (
        "layernorm_kernel's chain of row sums (acc; then acc) split over SPLIT programs a row where the rows are too "
        "few for the SMs, one stage a loop of sums: each sums its run of the first loop's blocks "
        "(layernorm_kernel_partials); for each later loop, each adds its row's SPLIT partials of the sums before it "
        "in one fixed order and sums its run of that loop's blocks (layernorm_kernel_partials_2); then each adds "
        "its row's SPLIT partials in one fixed order and runs what follows, its loops over its run "
        "(layernorm_kernel_combine)")
    stage_2 = new[new.index("def layernorm_kernel_partials_2("):new.index("def layernorm_kernel_combine(")]
    # stage 2: the mean from the row's partials of the first sum, then its run of the variance loop, its partial
    assert "    acc_row = tl.sum(tl.load(acc_part + row_id * SPLIT + tl.arange(0, SPLIT)), 0)\n" \
           "    mean = acc_row / n_cols\n" in stage_2
    assert "    for start in range(start_lo_1, start_hi_1, BLOCK_SIZE):\n" in stage_2
    assert "        d = tl.where(mask, x - mean, 0.0)\n        acc += d * d\n" \
           "    tl.store(acc_part_1 + row_id * SPLIT + split_id, tl.sum(acc, 0))\n" in stage_2
    # the last stage: both sums from their partials, the variance as written, the store loop over its run
    assert "    acc_row_1 = tl.sum(tl.load(acc_part_1 + row_id * SPLIT + tl.arange(0, SPLIT)), 0)\n" \
           "    rstd = 1.0 / tl.sqrt(acc_row_1 / n_cols + eps)\n" in new
    # the host: one workspace of both sums' partials, the three stages launched in order on one grid
    assert "        parts = torch.empty((2, rows_1 * split), device=out.device, dtype=torch.float32)\n" in new
    launches = [line.split("[")[0].strip() for line in new.splitlines() if "[(*grid, split)](" in line]
    assert launches == [s.format(k="layernorm_kernel") for s in CHAIN]


def test_a_chain_of_sums_in_other_spellings_is_split():
    [(rationale, new)], _ = made(ZSCORE_CHAIN)
    assert rationale.startswith("zscore's chain of row sums (total; then spread) split over SPLIT programs a row")
    assert all(f"def {s.format(k='zscore')}(" in new for s in CHAIN)


def test_a_softmax_in_loop_passes_is_a_chain_whose_running_max_combines_by_its_max():
    """The max pass's partials are combined by tl.max, the exp-sum pass's by tl.sum against that max (the corpus,
    tests/respellings/softmax.py, runs every loop-form spelling's split in the interpreter)."""
    from respellings.softmax import WHILE_SCALAR_EXP2

    [(rationale, new)], _ = made(WHILE_SCALAR_EXP2)
    assert "a running max" in rationale and "combine by their max" in rationale
    stages = new[new.index("_partials("):]
    assert "m = tl.max(tl.load(" in stages and "s = tl.sum(tl.load(" in stages


@pytest.mark.slow
@pytest.mark.parametrize("source, entry, kernel, cases", [
    (layernorm(), "layernorm", "layernorm_kernel",
     "[([3.0 + 2.0 * torch.randn(r, c), torch.randn(c), torch.randn(c)], w) for r, c, w in "
     "((3, 1000, S), (5, 333, S), (8, 256, [K]), (11, 700, S), (2, 100, [K]), (70, 300, [K]))]"),
    (ZSCORE_CHAIN, "zscore_rows", "zscore",
     "[([3.0 + 2.0 * torch.randn(r, c)], w) for r, c, w in ((3, 100, S), (5, 37, S), (50, 40, [K]))]"),
])
def test_a_chain_split_gives_the_originals_outputs_in_the_interpreter(source, entry, kernel, cases):
    """Rows too few for the interpreter's SMs take the three stages (S) where they span two blocks or more; rows
    of one block, and more rows, the original kernel (K)."""
    stages = [s.format(k=kernel) for s in CHAIN]
    check_outputs(source, entry, [*stages, kernel], cases.replace("S", repr(stages)).replace("K", repr(kernel)))


@pytest.mark.parametrize("old, new, why", [
    ("        acc += d * d\n",
     "        acc += d * d\n        peak = peak * 0.5 + tl.abs(d)\n",
     "layernorm_kernel's sum loop carries peak from one block to the next, which is neither a sum, a running max "
     "or min nor a fixed step (a program that starts at a later block does not know its value there)"),
    ("        acc += d * d\n",
     "        peak = peak * 0.5 + tl.abs(d)\n",
     "layernorm_kernel's loop after its row sums carries peak from one block to the next, which is neither a sum "
     "nor a fixed step (a program that starts at a later block does not know its value there)"),
    ("        acc += d * d\n",
     "        acc += d * d\n        tl.store(out_row + start + cols, acc, mask=mask)\n",
     "layernorm_kernel reads its sum acc inside the loop that accumulates it (a running value: the part of it "
     "before a program's run of the blocks is another program's)"),
])
def test_a_chain_whose_later_loop_is_not_a_sum_of_the_row_is_refused_with_the_fact(old, new, why):
    """A decaying running value in the variance loop, with its sum or alone; the variance loop reading its own
    sum."""
    start = "    acc = tl.zeros([BLOCK_SIZE], tl.float32)\n    for start in range(0, n_cols, BLOCK_SIZE):\n        mask"
    source = layernorm().replace(old, new).replace(
        start, "    peak = tl.zeros([BLOCK_SIZE], tl.float32)\n" + start)
    assert made(source) == ([], (why,))


# An RMSNorm whose row block the source fixes, as a user writes it: a module constant (no launch passes it).
# LayerNorm with the row in one block, as a user writes it: the variance's sum reads the mean.
ONE_BLOCK_LAYERNORM = '''
import torch
import triton
import triton.language as tl


@triton.jit
def ln_kernel(x_ptr, w_ptr, b_ptr, y_ptr, N, eps, BLOCK: tl.constexpr):
    row = tl.program_id(0)
    cols = tl.arange(0, BLOCK)
    mask = cols < N
    x = tl.load(x_ptr + row * N + cols, mask=mask, other=0.0).to(tl.float32)
    mean = tl.sum(x, axis=0) / N
    xc = tl.where(mask, x - mean, 0.0)
    var = tl.sum(xc * xc, axis=0) / N
    rstd = 1.0 / tl.sqrt(var + eps)
    w = tl.load(w_ptr + cols, mask=mask)
    b = tl.load(b_ptr + cols, mask=mask)
    tl.store(y_ptr + row * N + cols, xc * rstd * w + b, mask=mask)


def layernorm(x, w, b, eps=1e-5):
    M, N = x.shape
    y = torch.empty_like(x)
    ln_kernel[(M,)](x, w, b, y, N, eps, BLOCK=triton.next_power_of_2(N))
    return y
'''

# The same chain under other names: a row stride, the variance as a sum of a helper's square of (v - mu) with the
# mask applied around it, the row's mean stored as one value a row (every program of a row stores it alike).
ONE_BLOCK_STANDARDIZE = '''
import torch
import triton
import triton.language as tl


@triton.jit
def _sq(v):
    return v * v


@triton.jit
def standardize(src, dst, mu_out, gamma, width, stride, COLS: tl.constexpr):
    r = tl.program_id(0)
    offs = tl.arange(0, COLS)
    keep = offs < width
    v = tl.load(src + r * stride + offs, mask=keep, other=0.0)
    mu = tl.sum(v, axis=0) / width
    spread = tl.sum(tl.where(keep, _sq(v - mu), 0.0), axis=0)
    inv = 1.0 / tl.sqrt(spread / width + 1e-5)
    tl.store(mu_out + r, mu)
    tl.store(dst + r * stride + offs, (v - mu) * inv * tl.load(gamma + offs, mask=keep), mask=keep)


def standardize_rows(x, g):
    out = torch.empty_like(x)
    mus = torch.empty(x.shape[0], dtype=torch.float32)
    standardize[(x.shape[0],)](x, out, mus, g, x.shape[1], x.stride(0), COLS=triton.next_power_of_2(x.shape[1]))
    return torch.cat([out.flatten(), mus])
'''


@pytest.mark.parametrize("source, kernel", [(ONE_BLOCK_LAYERNORM, "ln_kernel"), (ONE_BLOCK_STANDARDIZE, "standardize")])
def test_a_one_block_rows_chain_of_sums_takes_a_stage_a_level(source, kernel):
    [(rationale, new)], reasons = made(source)
    assert all(r.startswith("_sq takes no sum") for r in reasons)  # the helper, run by the kernel
    assert rationale.startswith(f"{kernel}'s row block ")
    assert "(a chain of 2 levels of sums, each reading the ones before)" in rationale
    launches = [line.split("[")[0].strip() for line in new.splitlines() if "[(*grid, split)](" in line]
    assert launches == [s.format(k=kernel) for s in CHAIN]
    assert f"def {kernel}_chunked(" in new


def test_a_one_block_chains_second_stage_combines_the_mean_then_sums_around_it():
    [(_, new)], _ = made(ONE_BLOCK_LAYERNORM)
    stage_2 = new[new.index("def ln_kernel_partials_2("):new.index("def ln_kernel_combine(")]
    assert "    sum_run = tl.sum(tl.load(sum_run_part + row_id * SPLIT + tl.arange(0, SPLIT)), 0)\n" \
           "    mean = sum_run / N\n    sum_run_1 = 0.0\n" in stage_2
    assert "        xc = tl.where(mask, x - mean, 0.0)\n" \
           "        sum_run_1 = sum_run_1 + tl.sum(xc * xc, axis=0).to(tl.float32)\n" \
           "    tl.store(sum_run_1_part + row_id * SPLIT + split_id, sum_run_1)\n" in stage_2
    stage_3 = new[new.index("def ln_kernel_combine("):new.index("def layernorm(")]
    # the stores only in the last stage; the mean's scalar store too in the other spelling
    assert "tl.store(y_ptr" not in new[new.index("def ln_kernel_partials("):new.index("def ln_kernel_combine(")]
    assert "tl.store(y_ptr" in stage_3
    [(_, other)], _ = made(ONE_BLOCK_STANDARDIZE)
    assert other.count("tl.store(mu_out + r, mu)") == 3  # the original, its twin and its last stage


def test_a_max_among_a_one_block_chain_of_sums_is_refused_with_the_fact():
    source = ONE_BLOCK_LAYERNORM.replace("    rstd = 1.0 / tl.sqrt(var + eps)\n",
                                         "    rstd = 1.0 / tl.sqrt(var + eps) / tl.max(tl.abs(xc), axis=0)\n")
    assert made(source) == ([], ("ln_kernel takes a max over BLOCK among a chain of sums (each stage adds partial "
                                 "sums)",))


@pytest.mark.slow
@pytest.mark.parametrize("source, entry, kernel, cases", [
    (ONE_BLOCK_LAYERNORM, "layernorm", "ln_kernel",
     "[([3.0 + 2.0 * torch.randn(r, c), torch.randn(c), torch.randn(c)], w) for r, c, w in "
     "((3, 100, S), (5, 64, S), (2, 1000, S), (3, 16, [K]), (50, 40, [K + '_chunked']), (50, 20, [K]))]"),
    (ONE_BLOCK_STANDARDIZE, "standardize_rows", "standardize",
     "[([3.0 + 2.0 * torch.randn(r, c), torch.randn(c)], w) for r, c, w in "
     "((3, 100, S), (5, 64, S), (3, 16, [K]), (50, 40, [K + '_chunked']), (50, 20, [K]))]"),
])
def test_a_one_block_chain_split_gives_the_originals_outputs_in_the_interpreter(source, entry, kernel, cases):
    """Rows too few for the interpreter's SMs take the three stages (S): shorter than the block, exactly the
    block, long; a row of one chunk (nothing to split) and more rows the original kernel (K), or the chunked twin
    where the block is over the interpreter's 32."""
    stages = [s.format(k=kernel) for s in CHAIN]
    check_outputs(source, entry, [*stages, f"{kernel}_chunked", kernel],
                  cases.replace("S", repr(stages)).replace("K", repr(kernel)))


FIXED_BLOCK = '''
import torch
import triton
import triton.language as tl

BLOCK = 1024


@triton.jit
def rms_fixed(out, inp, w, n, stride, eps):
    i = tl.program_id(0)
    j = tl.arange(0, BLOCK)
    x = tl.load(inp + i * stride + j, mask=j < n, other=0.0).to(tl.float32)
    r = 1.0 / tl.sqrt(tl.sum(x * x, axis=0) / n + eps)
    g = tl.load(w + j, mask=j < n, other=0.0)
    tl.store(out + i * stride + j, x * r * g, mask=j < n)


def rms(x, w):
    y = torch.empty_like(x)
    rms_fixed[(x.shape[0],)](y, x, w, x.shape[1], x.stride(0), 1e-6)
    return y
'''


@pytest.mark.parametrize("old, new", [
    ("", ""),  # the module constant
    ("    j = tl.arange(0, BLOCK)\n", "    j = tl.arange(0, 1024)\n"),  # a literal
    ("    j = tl.arange(0, BLOCK)\n", "    B: tl.constexpr = 2 * HALF\n    j = tl.arange(0, B)\n"),  # a local of one
])
def test_a_row_block_the_source_fixes_is_split_with_that_integer(old, new):
    """No launch passes the block, so none can change it: the stages and the chunked twin walk the same 1024
    lanes, the host caps SPLIT by 1024 // chunk."""
    source = FIXED_BLOCK.replace(old, new).replace("BLOCK = 1024\n", "BLOCK = 1024\nHALF = 512\n")
    [(rationale, new_source)], reasons = made(source)
    assert reasons == ()
    assert rationale.startswith("rms_fixed's row block ") and "(sum) split over SPLIT programs a row" in rationale
    assert "    for chunk in range(split_id * (1024 // SPLIT), (split_id + 1) * (1024 // SPLIT), CHUNK):\n" \
        in new_source
    assert "    for chunk in range(0, 1024, CHUNK):\n" in new_source
    assert "    split = min(1024 // (chunk * (4 if y.device.type == \"cuda\" else 1)), " in new_source
    assert "    elif 1024 > (32768 if " in new_source


def gpu_split(source: str, rows: int, sms: int = 132) -> int:
    """The SPLIT a variant's host picks on a GPU of `sms` SMs for `rows` rows: its chunk and split lines run
    with a device that says "cuda"."""
    import types

    import triton

    lines = [line.strip() for line in source.splitlines() if line.strip().startswith(("chunk = ", "split = "))]
    device = types.SimpleNamespace(type="cuda")
    scope = {"triton": triton, "rows": rows, "sms": sms, "y": types.SimpleNamespace(device=device)}
    exec("\n".join(lines), scope)
    return scope["split"]


@pytest.mark.parametrize("block, rows, split", [
    (8192, 1, 1),  # two chunks of 4,096: split in two, it took twice the starting kernel's time on an H200
    (16384, 1, 1),  # four chunks: one program's segment at least
    (65536, 1, 4),  # sixteen chunks: four programs of four chunks
    (65536, 64, 4),
    (65536, 600, 1),  # rows enough for the SMs: the original launch
])
def test_a_row_block_split_leaves_each_program_four_chunks_on_a_gpu(block, rows, split):
    [(_, new_source)], _ = made(FIXED_BLOCK.replace("BLOCK = 1024\n", f"BLOCK = {block}\n"))
    assert max(1, gpu_split(new_source, rows)) == split  # under 2: the launch does not split


def takes_twin(source: str, gpu: bool = True) -> bool:
    """Whether a variant's launch, its rows not split, takes the chunked twin: its `elif` line run on a device
    that says "cuda" (or "cpu")."""
    import types

    [line] = [line.strip() for line in source.splitlines() if line.strip().startswith("elif ")]
    device = types.SimpleNamespace(type="cuda" if gpu else "cpu")
    return eval(line.removeprefix("elif ").removesuffix(":"), {"y": types.SimpleNamespace(device=device)})


@pytest.mark.parametrize("block, twin", [
    (16384, False),  # the twin took 1.4-2.8x the original's time here on an H200: the original
    (32768, False),
    (65536, True),
])
def test_rows_of_sums_not_split_take_the_chunked_twin_only_past_32768_on_a_gpu(block, twin):
    [(_, new_source)], _ = made(FIXED_BLOCK.replace("BLOCK = 1024\n", f"BLOCK = {block}\n"))
    assert takes_twin(new_source) is twin
    assert takes_twin(new_source, gpu=False)  # the interpreter's small rows exercise the twin


@pytest.mark.slow
def test_a_row_block_the_source_fixes_split_gives_the_originals_outputs_in_the_interpreter():
    """Few rows take the stages, 40 rows the chunked twin (1024 is over the interpreter's 32), on rows shorter
    than the block and as long as it."""
    stages = [s.format(k="rms_fixed") for s in STAGES]
    cases = ("[([torch.randn(r, c), torch.randn(c)], w) for r, c, w in "
             f"((3, 1000, {stages}), (5, 1024, {stages}), (2, 7, {stages}), (40, 700, ['rms_fixed_chunked']))]")
    check_outputs(FIXED_BLOCK, "rms", [*stages, "rms_fixed_chunked", "rms_fixed"], cases)


def test_sums_inside_a_loop_that_carries_none_are_refused_with_the_fact():
    """Each iteration sums a block of its own and stores it (a loss a block): no row's sum to split."""
    source = FIXED_BLOCK.replace(
        "    x = tl.load(inp + i * stride + j, mask=j < n, other=0.0).to(tl.float32)\n"
        "    r = 1.0 / tl.sqrt(tl.sum(x * x, axis=0) / n + eps)\n"
        "    g = tl.load(w + j, mask=j < n, other=0.0)\n"
        "    tl.store(out + i * stride + j, x * r * g, mask=j < n)\n",
        "    for k in range(0, 4):\n"
        "        x = tl.load(inp + i * stride + k * n + j, mask=j < n, other=0.0)\n"
        "        tl.store(out + i * 4 + k, tl.sum(x * x, axis=0))\n")
    assert made(source) == ([], (
        "rms_fixed takes its sums (over BLOCK) inside a loop that carries no sum from one iteration to the next "
        "(each iteration reduces a block of its own: a split's partials would need the loop's iteration)",))


def test_a_row_block_computed_from_a_constexpr_is_refused_with_the_fact():
    """The host chooses the split from the block's size, which only the kernel computes here."""
    source = FIXED_BLOCK.replace("def rms_fixed(out, inp, w, n, stride, eps):", "def rms_fixed(out, inp, w, n, "
                                 "stride, eps, HALF: tl.constexpr):").replace(
        "tl.arange(0, BLOCK)", "tl.arange(0, 2 * HALF)").replace("1e-6)", "1e-6, HALF=512)")
    assert made(source) == ([], (
        "rms_fixed's row block 2 * HALF is computed in the kernel from its constexpr parameters, which the host "
        "does not compute (the split is chosen at the launch, from the block)",))
