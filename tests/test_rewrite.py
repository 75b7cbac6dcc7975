"""The built-in rewriter and the strategy catalogue: each rewrite on a small kernel, determinism, the
`seen` set, inapplicable strategies, strategy files, real TritonBench-G kernels, and rewritten kernels
that still compute the right answer under the Triton interpreter."""

from __future__ import annotations

import difflib
import json
import subprocess
import sys
import textwrap
from collections import Counter

import pytest
from interpreted import run_modules

from kernelband.errors import UserError
from kernelband.evaluation.records import EvalResult, Features, Outcome
from kernelband.proposers.rewriter.priors import FILE as PRIORS_FILE
from kernelband.proposers.rewriter.priors import family, load_class
from kernelband.proposers.rewriter.proposer import RewriterProposer, options
from kernelband.proposers.rewriter.registry import REWRITES, STRATEGY_FILE_ONLY
from kernelband.search.core import Candidate, Context, source_hash
from kernelband.search.strategies import builtin_strategies, load_strategies

STRATEGIES = {s.name: s for s in builtin_strategies()}

ADD = '''\
import torch
import triton
import triton.language as tl


@triton.jit
def add_kernel(x_ptr, y_ptr, out_ptr, n, BLOCK_SIZE: tl.constexpr):
    pid = tl.program_id(axis=0)
    offs = pid * BLOCK_SIZE + tl.arange(0, BLOCK_SIZE)
    mask = offs < n
    x = tl.load(x_ptr + offs, mask=mask)  # keep this comment
    y = tl.load(y_ptr + offs, mask=mask, eviction_policy="evict_last")
    tl.store(out_ptr + offs, x + y, mask=mask)


def add(x, y):
    out = torch.empty_like(x)
    n = out.numel()
    # the grid follows the block size
    grid = (triton.cdiv(n, 256),)
    add_kernel[grid](x, y, out, n, BLOCK_SIZE=256)
    return out
'''

ROWS = '''\
import triton
import triton.language as tl


@triton.jit
def rms_kernel(x_ptr, out_ptr, n_cols, BLOCK: tl.constexpr):
    row = tl.program_id(0)
    cols = tl.arange(0, BLOCK)
    acc = tl.zeros([BLOCK], tl.float32)
    for start in range(0, n_cols, BLOCK):
        acc += tl.load(x_ptr + row * n_cols + start + cols, mask=start + cols < n_cols, other=0.0)
    tl.store(out_ptr + row, tl.sum(acc, axis=0))


def rms(x, out):
    rms_kernel[(x.shape[0],)](
        x,
        out,
        x.shape[1],
        BLOCK=512,
    )
    return out
'''

MATMUL_2D = '''\
import triton
import triton.language as tl


@triton.jit
def mm_kernel(a_ptr, b_ptr, c_ptr, M, N, K, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr):
    pid_m = tl.program_id(axis=0)
    pid_n = tl.program_id(axis=1)
    offs_m = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
    offs_n = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
    offs_k = tl.arange(0, BLOCK_K)
    acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
    for k in range(0, K, BLOCK_K):
        a = tl.load(a_ptr + offs_m[:, None] * K + (k + offs_k)[None, :])
        b = tl.load(b_ptr + (k + offs_k)[:, None] * N + offs_n[None, :])
        acc = tl.dot(a, b, acc)
    tl.store(c_ptr + offs_m[:, None] * N + offs_n[None, :], acc)


def mm(a, b, c):
    M, K = a.shape
    _, N = b.shape
    mm_kernel[(triton.cdiv(M, 32), triton.cdiv(N, 32))](a, b, c, M, N, K, BLOCK_M=32, BLOCK_N=32, BLOCK_K=32)
    return c
'''


def variants(source: str, rewrite: str) -> list[tuple[str, str]]:
    found = options(source, (rewrite,))
    return [(v.rationale, v.apply(found.module)) for v in found.variants]


def tritonbench_variant(name: str, rewrite: str, starts: str = "") -> tuple:
    """A TritonBench-G task and the source of the first variant of `rewrite` whose rationale starts so."""
    from kernelband.tasks import load_task
    from kernelband.tasks import tritonbench as tb

    path = tb.find()
    if path is None:
        pytest.skip("no TritonBench-G data (set KERNELBAND_TRITONBENCH)")
    task = load_task(f"tritonbench:{name}", str(path))
    found = options(task.module_source, (rewrite,))
    variant = next(v for v in found.variants if v.rationale.startswith(starts))
    return task, variant.apply(found.module)


def changed_lines(old: str, new: str) -> list[str]:
    """The removed lines ("-") then the added ones ("+")."""
    diff = [line for line in difflib.ndiff(old.splitlines(), new.splitlines()) if line[:1] in "+-"]
    return [line for line in diff if line[0] == "-"] + [line for line in diff if line[0] == "+"]


def propose(source: str, strategy: str, seed: int = 0, seen: frozenset[str] = frozenset(), entry: str = "add",
            compiled: dict | None = None):
    """The rewriter's proposal for a parent; `compiled`: the parent's compile features, as its evaluation
    recorded them (the launch's block constexprs, num_warps, spills)."""
    context = Context(task_name="t", entry=entry, seed=seed, seen=seen)
    parent = Candidate(0, source, result=None if compiled is None else
                       EvalResult("t", Outcome.OK, speedup=1.0, features=Features(compile=compiled)))
    return RewriterProposer().propose(parent, STRATEGIES[strategy], context)


# -- coarsening ----------------------------------------------------------------------------------------------
def test_coarsen_loops_over_consecutive_programs_and_divides_the_grid():
    made = variants(ROWS, "coarsen")
    assert [why for why, _ in made] == [f"{c} consecutive programs per program in rms_kernel: the first grid "
                                        f"axis divided by {c} at 1 launch(es)" for c in (2, 4, 8)]
    new = made[1][1]
    compile(new, "coarsened", "exec")
    assert changed_lines(ROWS, new) == [
        "- def rms_kernel(x_ptr, out_ptr, n_cols, BLOCK: tl.constexpr):",
        "-     row = tl.program_id(0)",
        "-     cols = tl.arange(0, BLOCK)",
        "-     acc = tl.zeros([BLOCK], tl.float32)",
        "-     for start in range(0, n_cols, BLOCK):",
        "-         acc += tl.load(x_ptr + row * n_cols + start + cols, mask=start + cols < n_cols, other=0.0)",
        "-     tl.store(out_ptr + row, tl.sum(acc, axis=0))",
        "-     rms_kernel[(x.shape[0],)](",
        "+ def rms_kernel(x_ptr, out_ptr, n_cols, BLOCK: tl.constexpr, n_programs, COARSEN: tl.constexpr):",
        "+     first_program = tl.program_id(0) * COARSEN",
        "+     for coarsen_i in tl.static_range(COARSEN):",
        "+         row = first_program + coarsen_i",
        "+         if row < n_programs:",
        "+             cols = tl.arange(0, BLOCK)",
        "+             acc = tl.zeros([BLOCK], tl.float32)",
        "+             for start in range(0, n_cols, BLOCK):",
        "+                 acc += tl.load(x_ptr + row * n_cols + start + cols, mask=start + cols < n_cols, other=0.0)",
        "+             tl.store(out_ptr + row, tl.sum(acc, axis=0))",
        "+     rms_kernel[(triton.cdiv(x.shape[0], 4),)](",
        "+         n_programs=x.shape[0],",
        "+         COARSEN=4,",
    ]


@pytest.mark.parametrize("old, new, reason", [
    ("    tl.store(out_ptr + row, tl.sum(acc, axis=0))\n",
     "    if row >= 100:\n        return\n    tl.store(out_ptr + row, tl.sum(acc, axis=0))\n",
     "rms_kernel returns before its end"),
    ("    row = tl.program_id(0)\n", "    row = tl.program_id(0) + tl.num_programs(0) * 0\n",
     "rms_kernel reads the number of programs"),
    ("    row = tl.program_id(0)\n", "    row = tl.program_id(0) + tl.program_id(n_cols)\n",
     "rms_kernel reads a program id whose axis is not a number"),
    ("rms_kernel[(x.shape[0],)](", "rms_kernel[lambda meta: (x.shape[0] + 0 * len(meta),)](",
     "the rms_kernel launch in rms passes n_cols as an expression (the grid function would evaluate it a "
     "second time)"),
    ("rms_kernel[(x.shape[0],)](", "rms_kernel[lambda meta: (x.shape[0] * 512 // meta['BLOCK'],)](",
     ""),  # reads only BLOCK, a constant: applies (below)
    ("        BLOCK=512,\n", "        BLOCK=2 * 256,\n", "")  # a literal grid: applies
])
def test_coarsen_says_why_it_does_not_apply(old, new, reason):
    source = ROWS.replace(old, new)
    assert source != ROWS
    found = options(source, ("coarsen",))
    if reason:
        assert not found.variants and found.reasons == (reason,)
    else:
        assert len(found.variants) == 3 and not found.reasons
    both = source.replace("rms_kernel[(x.shape[0],)](", "rms_kernel[lambda meta: (x.shape[0] * 512 // meta['BLOCK'],)](")
    if "BLOCK=2 * 256" in both:  # the grid function reads BLOCK, given as an expression
        assert options(both, ("coarsen",)).reasons == (
            "the rms_kernel launch in rms passes BLOCK as an expression (the grid function would evaluate it a "
            "second time)",)


def test_coarsen_calls_a_grid_function_with_the_launch_arguments():
    """A grid that is a function of meta: the launch passes the old first axis, the function called with the
    arguments by parameter name (as Triton calls it), and its grid divides that axis. A grid function that
    reads meta only as meta["..."] gets only those arguments."""
    source = ROWS.replace("    rms_kernel[(x.shape[0],)](\n        x,\n        out,\n        x.shape[1],",
                          "    n_cols = x.shape[1]\n    rms_kernel[lambda meta: (x.shape[0] + 0 * len(meta),)](\n"
                          "        x,\n        out,\n        n_cols,")
    assert source != ROWS
    made = variants(source, "coarsen")
    assert len(made) == 3
    new = made[0][1]
    compile(new, "coarsened", "exec")
    assert [line for line in changed_lines(source, new) if "rms_kernel[" in line or "n_programs=" in line] == [
        "-     rms_kernel[lambda meta: (x.shape[0] + 0 * len(meta),)](",
        "+     rms_kernel[lambda grid_meta: (triton.cdiv((lambda meta: (x.shape[0] + 0 * len(meta),))"
        "(grid_meta)[0], 2),) + tuple((lambda meta: (x.shape[0] + 0 * len(meta),))(grid_meta)[1:])](",
        "+         n_programs=(lambda meta: (x.shape[0] + 0 * len(meta),))({'x_ptr': x, 'out_ptr': out, "
        "'n_cols': n_cols, 'BLOCK': 512})[0],",
    ]
    keyed = source.replace("(x.shape[0] + 0 * len(meta),)", "(x.shape[0] * 512 // meta['BLOCK'],)")
    assert "n_programs=(lambda meta: (x.shape[0] * 512 // meta['BLOCK'],))({'BLOCK': 512})[0]," in (
        variants(keyed, "coarsen")[0][1])
    # an autotuned kernel's grid function reads configs the launch does not pass: left alone
    tuned = source.replace("@triton.jit\n", "@triton.autotune([triton.Config({})], key=['n_cols'])\n@triton.jit\n")
    assert options(tuned, ("coarsen",)).reasons == (
        "the grid of the rms_kernel launch in rms is a function of meta, which the autotuner's configs add to",)


@pytest.mark.slow
@pytest.mark.parametrize("name", ["add_value", "vector_addition"])
def test_a_coarsened_grid_function_is_correct_in_the_interpreter(evaluator, name):
    """TritonBench tasks whose grid is `lambda meta: (triton.cdiv(n, meta['BLOCK_SIZE']),)`: coarsened by 4,
    the kernel still gives the starting kernel's outputs."""
    task, source = tritonbench_variant(name, "coarsen", "4 consecutive")
    assert "n_programs=grid({" in source or "n_programs=(lambda" in source, source
    result = evaluator.evaluate(task, source, seed=5)
    assert result.ok, (result.outcome, result.detail, result.error[-2000:])


@pytest.mark.slow
@pytest.mark.parametrize("rewrite, example, factor", [
    ("coarsen", "vector_add", 8), ("coarsen", "rmsnorm", 4),
    ("rows", "dequantize", 16), ("rows", "dropout", 4), ("rows", "vector_add", 16)])
def test_an_example_split_over_fewer_programs_is_correct_in_the_interpreter(evaluator, rewrite, example, factor):
    """Shapes whose program count the factor does not divide: coarsen's guard, and rows' mask, keep the
    programs past the end out."""
    from kernelband.tasks import load_task

    task = load_task(f"examples:{example}")
    found = options(task.module_source, (rewrite,))
    variant = next(v for v in found.variants if v.rationale.startswith(f"{factor} consecutive"))
    result = evaluator.evaluate(task, variant.apply(found.module), seed=4)
    assert result.ok, (result.outcome, result.detail, result.error[-2000:])


REBOUND = {  # examples:rmsnorm written the way some TritonBench-G kernels are
    "pointer": ("    x_row = x_ptr + row * x_row_stride\n", "    x_ptr += row * x_row_stride\n    x_row = x_ptr\n"),
    "pid expression": ("    row = tl.program_id(axis=0)\n    x_row = x_ptr + row * x_row_stride\n"
                       "    out_row = out_ptr + row * out_row_stride\n",
                       "    x_row = x_ptr + tl.program_id(axis=0).to(tl.int64) * x_row_stride\n"
                       "    out_row = out_ptr + tl.program_id(axis=0) * out_row_stride\n"),
}


def test_coarsen_resets_what_the_body_rebinds_and_replaces_every_program_id_read():
    from kernelband.tasks import load_task

    base = load_task("examples:rmsnorm").module_source
    source = base.replace(*REBOUND["pointer"])
    new = variants(source, "coarsen")[0][1]
    assert [line.strip() for line in new.splitlines() if "x_ptr_start" in line] == [
        "x_ptr_start = x_ptr", "x_ptr = x_ptr_start"]
    source = base.replace(*REBOUND["pid expression"])
    new = variants(source, "coarsen")[0][1]
    assert "tl.program_id" not in new.split("for coarsen_i")[1]
    assert "x_row = x_ptr + coarsen_pid.to(tl.int64) * x_row_stride" in new
    assert "out_row = out_ptr + coarsen_pid * out_row_stride" in new
    assert "    if coarsen_pid < n_programs:" in new


@pytest.mark.slow
@pytest.mark.parametrize("form", sorted(REBOUND))
def test_a_coarsened_kernel_that_rebinds_its_pointers_is_correct_in_the_interpreter(evaluator, form):
    """Without the reset, the second row of each program reads rows first*2+1, ... (wrong output)."""
    from kernelband.tasks import load_task

    task = load_task("examples:rmsnorm")
    source = task.module_source.replace(*REBOUND[form])
    assert source != task.module_source
    found = options(source, ("coarsen",))
    variant = next(v for v in found.variants if v.rationale.startswith("4 consecutive"))
    result = evaluator.evaluate(task, variant.apply(found.module), seed=6)
    assert result.ok, (result.outcome, result.detail, result.error[-2000:])


# -- rows ------------------------------------------------------------------------------------------------------
SOFTMAX_ROWS = """\
import torch
import triton
import triton.language as tl


@triton.jit
def softmax_kernel(out_ptr, x_ptr, n_cols, BLOCK: tl.constexpr):
    row = tl.program_id(0)
    cols = tl.arange(0, BLOCK)
    x = tl.load(x_ptr + row * n_cols + cols, mask=cols < n_cols, other=-float("inf"))
    scale = tl.load(x_ptr)  # the same for every row: not masked
    z = x - tl.max(x, axis=0)
    num = tl.exp(z * scale)
    tl.store(out_ptr + row * n_cols + cols, num / tl.sum(num), mask=cols < n_cols)


def softmax(x):
    out = torch.empty_like(x)
    softmax_kernel[(x.shape[0],)](out, x, x.shape[1], BLOCK=triton.next_power_of_2(x.shape[1]))
    return out
"""


def test_rows_puts_consecutive_programs_side_by_side_on_a_leading_axis():
    made = dict(variants(SOFTMAX_ROWS, "rows"))
    at_run_time = (" consecutive programs side by side in each program of softmax_kernel (fewer where a thread would "
                   "hold over 256 elements, set at the launch from its block sizes): the first grid axis divided by "
                   "as many at 1 launch(es)")
    assert sorted(made) == ["up to 16" + at_run_time, "up to 4" + at_run_time]
    new = made["up to 4" + at_run_time]
    rows = "min(4, 1 << max(0, int(32768 // (triton.next_power_of_2(x.shape[1]))).bit_length() - 1))"
    assert changed_lines(SOFTMAX_ROWS, new) == [
        "- def softmax_kernel(out_ptr, x_ptr, n_cols, BLOCK: tl.constexpr):",
        "-     row = tl.program_id(0)",
        '-     x = tl.load(x_ptr + row * n_cols + cols, mask=cols < n_cols, other=-float("inf"))',
        "-     z = x - tl.max(x, axis=0)",
        "-     tl.store(out_ptr + row * n_cols + cols, num / tl.sum(num), mask=cols < n_cols)",
        "-     softmax_kernel[(x.shape[0],)](out, x, x.shape[1], BLOCK=triton.next_power_of_2(x.shape[1]))",
        "+ def softmax_kernel(out_ptr, x_ptr, n_cols, BLOCK: tl.constexpr, n_programs, ROWS: tl.constexpr):",
        "+     rows_pid = tl.program_id(0) * ROWS + tl.arange(0, ROWS)[:, None]",
        "+     rows_mask = rows_pid < n_programs",
        "+     row = rows_pid",
        '+     x = tl.load(x_ptr + row * n_cols + cols, mask=(cols < n_cols) & rows_mask, other=-float("inf"))',
        "+     z = x - tl.max(x, axis=1, keep_dims=True)",
        "+     tl.store(out_ptr + row * n_cols + cols, num / tl.sum(num, axis=1, keep_dims=True), "
        "mask=(cols < n_cols) & rows_mask)",
        f"+     ROWS = {rows}",  # worked out at run time: once, named, before the launch
        "+     softmax_kernel[(triton.cdiv(x.shape[0], ROWS),)](out, x, x.shape[1], "
        "BLOCK=triton.next_power_of_2(x.shape[1]), n_programs=x.shape[0], ROWS=ROWS)"]


@pytest.mark.parametrize("block, rows", [(16, [4, 16]), (1024, [4, 16]), (2048, [4, 16]), (4096, [4, 8]),
                                         (8192, [4, 4]), (16384, [2, 2]), (65536, [1, 1])])
def test_rows_at_a_run_time_block_keep_a_thread_within_256_elements(block, rows):
    """The launch works R out from the block it is given: the largest power of two up to R that leaves a
    thread (of 32 x num_warps, 4 here) at most 256 elements, and never fewer than one row."""
    import math

    import triton

    made = [new for _, new in sorted(variants(SOFTMAX_ROWS, "rows"), key=lambda v: int(v[0].split()[2]))]
    got = []
    for new in made:
        expression = new.split("    ROWS = ")[1].split("\n")[0]
        got.append(eval(expression, {"triton": triton, "x": type("X", (), {"shape": (8, block)})}))
    assert got == rows and all(r * block <= max(block, 256 * 128) for r in got)
    assert all(math.log2(r).is_integer() for r in got)  # tl.arange(0, ROWS) needs a power of two


def test_rows_with_numbers_at_the_launch_are_capped_where_the_rewrite_runs():
    """dropout_triton's bench-2 candidate that did not compile in 180 s: 16 rows of a 2,048-element block on
    one warp (1,024 elements a thread). Capped at 256, that factor becomes 4, the same as the other variant."""
    source = ADD.replace("BLOCK_SIZE=256", "BLOCK_SIZE=2048, num_warps=1")
    assert "BLOCK_SIZE=2048, num_warps=1" in source
    made = dict(variants(source, "rows"))
    assert sorted(made) == ["4 consecutive programs side by side in each program of add_kernel: the first grid "
                            "axis divided by 4 at 1 launch(es)"]
    assert "ROWS=4)" in made[next(iter(made))]
    assert len(variants(ADD, "rows")) == 2  # 256 elements on 4 warps: 4 and 16 rows both fit
    # a parameter's default is no number a caller must keep: the launch works R out from what it is given
    defaulted = ADD.replace("def add(x, y):", "def add(x, y, block=256):").replace("BLOCK_SIZE=256", "BLOCK_SIZE=block")
    assert all(r.startswith("up to ") and "    ROWS = min(" in new and "ROWS=ROWS)" in new
               for r, new in variants(defaulted, "rows"))
    found = options(ADD.replace("BLOCK_SIZE=256", "BLOCK_SIZE=8192, num_warps=1"), ("rows",))
    assert not found.variants and list(found.reasons) == ["add_kernel: no number of rows fits (a thread would hold over "
                                                    "256 elements)"]


@pytest.mark.parametrize("old, new, reason", [
    ("    z = x - tl.max(x, axis=0)\n", "    z = x - tl.max(x, axis=0)\n    for i in range(2):\n        z += 0\n",
     "softmax_kernel has a loop or a branch"),
    ("    row = tl.program_id(0)\n", "    row = tl.program_id(0)\n    two = cols[:, None]\n", "has a subscript"),
    ("tl.max(x, axis=0)", "tl.max(x, axis=0, keep_dims=False)", "reduces over an axis other than 0"),
    ("tl.exp(z * scale)", "tl.cumsum(z * scale, 0)", "it calls `tl.cumsum`"),
    ("tl.exp(z * scale)", "helper(z * scale)", "it calls `helper`"),
    ("    scale = tl.load(x_ptr)", "    tl.store(x_ptr, 1.0)\n    scale = tl.load(x_ptr)", "every row would write there"),
    ("    cols = tl.arange(0, BLOCK)\n", "    cols = tl.arange(0, BLOCK)\n    acc = tl.zeros((BLOCK, BLOCK), tl.float32)\n",
     "may make a tensor of more than one axis"),
])
def test_rows_says_why_it_does_not_apply(old, new, reason):
    source = SOFTMAX_ROWS.replace(old, new)
    assert source != SOFTMAX_ROWS
    found = options(source, ("rows",))
    assert not found.variants and any(reason in r for r in found.reasons), found.reasons


def test_rows_follows_pointers_moved_in_place():
    """geglu_tanh_triton moves its pointer parameters with `c += program_id * stride`: the store through c
    depends on the program number, so it gets the row mask (and the kernel is not refused)."""
    source = SOFTMAX_ROWS.replace(
        "    x = tl.load(x_ptr + row * n_cols + cols", "    x_ptr += row * n_cols\n    out_ptr += row * n_cols\n"
        "    x = tl.load(x_ptr + cols").replace("tl.store(out_ptr + row * n_cols + cols", "tl.store(out_ptr + cols")
    new = variants(source, "rows")[0][1]
    assert "    x = tl.load(x_ptr + cols, mask=(cols < n_cols) & rows_mask" in new
    assert "    tl.store(out_ptr + cols, num / tl.sum(num, axis=1, keep_dims=True), mask=(cols < n_cols) & rows_mask)" in new


def test_rows_reads_a_tuple_assignment_as_the_values_it_assigns():
    """`cols, other = tl.arange(0, BLOCK), 0` is two assignments: rows follows cols through it, and the rows it
    puts side by side give the original's outputs."""
    source = SOFTMAX_ROWS.replace("    cols = tl.arange(0, BLOCK)\n", "    cols, other = tl.arange(0, BLOCK), 0\n")
    made = variants(source, "rows")
    assert made
    run_modules({"kb_original": source, "kb_variant": made[0][1]},
                "import torch\nimport kb_original as original\nimport kb_variant as variant\nx = torch.randn(6, 40)\n"
                "assert torch.allclose(variant.softmax(x), original.softmax(x), atol=1e-6)")


@pytest.mark.slow
@pytest.mark.parametrize("name", ["softmax_triton1", "dequantize_rowwise", "geglu_tanh_triton"])
def test_a_rows_tritonbench_kernel_is_correct_in_the_interpreter(evaluator, name):
    """A softmax whose reductions keep the row axis, a row-wise dequantize with a per-row scalar load, and a
    kernel that moves its pointers in place and calls libdevice's tanh."""
    task, source = tritonbench_variant(name, "rows", "up to 16 consecutive")
    result = evaluator.evaluate(task, source, seed=8)
    assert result.ok, (result.outcome, result.detail, result.error[-2000:])


# -- block sizes ----------------------------------------------------------------------------------------------
def test_block_size_scales_the_launch_literal_and_the_grid_literal_together():
    made = dict(variants(ADD, "block_size"))
    new = made["BLOCK_SIZE 256 -> 512 at the add_kernel launch in add"]
    assert changed_lines(ADD, new) == [
        "-     grid = (triton.cdiv(n, 256),)", "-     add_kernel[grid](x, y, out, n, BLOCK_SIZE=256)",
        "+     grid = (triton.cdiv(n, 512),)", "+     add_kernel[grid](x, y, out, n, BLOCK_SIZE=512)"]
    assert "# keep this comment" in new and "# the grid follows the block size" in new
    assert sorted(int(r.split("-> ")[1].split()[0]) for r in made) == [64, 128, 512, 1024]


def test_a_tiled_block_whose_grid_ignores_it_is_left_alone():
    fixed = ADD.replace("grid = (triton.cdiv(n, 256),)", "grid = (n // 256,)")  # floor: not a ceil-div
    assert variants(fixed, "block_size") == []
    assert any("counts the whole tiles of BLOCK_SIZE = 256 only" in r for r in options(fixed, ("block_size",)).reasons)


def test_a_block_that_covers_a_whole_row_is_left_alone():
    whole = ROWS.replace("for start in range(0, n_cols, BLOCK):\n        acc +=", "if True:\n        acc +=")
    assert variants(whole, "block_size") == []
    assert any("neither scales the program id nor steps a loop" in r for r in options(whole, ("block_size",)).reasons)


def test_a_looped_block_changes_without_a_grid():
    made = dict(variants(ROWS, "block_size"))
    assert changed_lines(ROWS, made["BLOCK 512 -> 1024 at the rms_kernel launch in rms"]) == [
        "-         BLOCK=512,", "+         BLOCK=1024,"]


def test_a_local_block_constant_is_changed_where_it_is_defined():
    local = ADD.replace("    grid = (triton.cdiv(n, 256),)\n    add_kernel[grid](x, y, out, n, BLOCK_SIZE=256)",
                        "    BLOCK = 16\n    add_kernel[((n + BLOCK - 1) // BLOCK,)](x, y, out, n, BLOCK)")
    new = dict(variants(local, "block_size"))[
        "BLOCK 16 -> 32 (local in add: BLOCK_SIZE of the add_kernel launch in add)"]
    assert changed_lines(local, new) == ["-     BLOCK = 16", "+     BLOCK = 32"]


def test_a_block_size_known_only_at_run_time_is_scaled_where_it_is_used():
    runtime = ADD.replace("    grid = (triton.cdiv(n, 256),)\n    add_kernel[grid](x, y, out, n, BLOCK_SIZE=256)",
                          "    block = triton.next_power_of_2(n // 64)\n"
                          "    add_kernel[(triton.cdiv(n, block),)](x, y, out, n, BLOCK_SIZE=block)")
    new = dict(variants(runtime, "block_size"))["BLOCK_SIZE block -> block * 2 at the add_kernel launch in add"]
    assert "add_kernel[(triton.cdiv(n, (block * 2)),)](x, y, out, n, BLOCK_SIZE=block * 2)" in new


def test_a_block_size_that_also_sizes_a_buffer_is_not_a_knob():
    shared = ADD.replace("    out = torch.empty_like(x)\n", "    BLOCK = 128\n    out = torch.empty(BLOCK)\n").replace(
        "grid = (triton.cdiv(n, 256),)\n    add_kernel[grid](x, y, out, n, BLOCK_SIZE=256)",
        "grid = (triton.cdiv(n, BLOCK),)\n    add_kernel[grid](x, y, out, n, BLOCK_SIZE=BLOCK)")
    assert variants(shared, "block_size") == []
    assert any("BLOCK is used beyond" in r for r in options(shared, ("block_size",)).reasons)


def test_block_sizes_of_two_tile_dimensions_follow_their_own_cdiv():
    made = dict(variants(MATMUL_2D, "block_size"))
    new = made["BLOCK_N 32 -> 64 at the mm_kernel launch in mm"]
    assert "mm_kernel[(triton.cdiv(M, 32), triton.cdiv(N, 64))](a, b, c, M, N, K, BLOCK_M=32, BLOCK_N=64," in new
    assert "BLOCK_K 32 -> 512 at the mm_kernel launch in mm" not in made  # tl.dot tiles stay within 256


# -- launch options -------------------------------------------------------------------------------------------
def test_num_warps_is_added_when_absent_and_replaced_when_present():
    made = dict(variants(ROWS, "num_warps"))
    assert list(made)[0] == "num_warps 4 -> 8 at the rms_kernel launch in rms"
    assert changed_lines(ROWS, made["num_warps 4 -> 8 at the rms_kernel launch in rms"]) == [
        "+         num_warps=8,"]  # one argument a line, trailing comma: the new one follows suit
    again = made["num_warps 4 -> 2 at the rms_kernel launch in rms"]
    assert "num_warps=8" in dict(variants(again, "num_warps"))["num_warps 2 -> 8 at the rms_kernel launch in rms"]
    assert dict(variants(again, "num_warps"))["num_warps 2 -> 8 at the rms_kernel launch in rms"].count(
        "num_warps") == 1


def test_a_num_warps_computed_at_run_time_is_scaled_not_overwritten():
    """softmax_triton1 picks 4, 8 or 16 warps as its rows grow; a constant 1 put its widest rows on one warp and
    did not compile in 180 s (bench 2). The rewrite doubles, halves or quadruples the computed value instead,
    within 1 to 16."""
    source = ADD.replace("    n = out.numel()\n", "    n = out.numel()\n    warps = 4 if n < 4096 else 8\n").replace(
        "BLOCK_SIZE=256)", "BLOCK_SIZE=256, num_warps=warps)")
    made = dict(variants(source, "num_warps"))
    assert list(made) == [f"num_warps warps -> {e} (the computed value {said}) at the add_kernel launch in add"
                          for e, said in (("min(16, warps * 2)", "doubled"), ("max(1, warps // 2)", "halved"),
                                          ("min(16, warps * 4)", "times 4"))]
    assert changed_lines(source, made["num_warps warps -> max(1, warps // 2) (the computed value halved) at the "
                                      "add_kernel launch in add"]) == [
        "-     add_kernel[grid](x, y, out, n, BLOCK_SIZE=256, num_warps=warps)",
        "+     add_kernel[grid](x, y, out, n, BLOCK_SIZE=256, num_warps=max(1, warps // 2))"]
    # a computed expression again (the child's): kept whole, in parentheses
    child = made["num_warps warps -> min(16, warps * 2) (the computed value doubled) at the add_kernel launch in add"]
    assert "num_warps=min(16, (min(16, warps * 2)) * 2)" in variants(child, "num_warps")[0][1]


@pytest.mark.slow
def test_a_scaled_computed_num_warps_runs_in_the_interpreter(evaluator):
    task, source = tritonbench_variant("softmax_triton1", "num_warps", "num_warps num_warps -> max(1, num_warps // 2)")
    assert "num_warps=max(1, num_warps // 2)" in source
    result = evaluator.evaluate(task, source, seed=3)
    assert result.ok, (result.outcome, result.detail, result.error[-2000:])


def test_num_stages_needs_a_loop_that_loads():
    assert [r for r, _ in variants(ROWS, "num_stages")][:2] == [
        "num_stages 3 -> 4 at the rms_kernel launch in rms", "num_stages 3 -> 2 at the rms_kernel launch in rms"]
    assert variants(ADD, "num_stages") == []
    assert "add_kernel has no loop that loads: nothing to pipeline" in options(ADD, ("num_stages",)).reasons


def test_vector_width_grows_elements_per_thread():
    made = [r for r, _ in variants(ADD, "vector_width")]
    assert made == ["more elements per thread: BLOCK_SIZE 256 -> 512 at the add_kernel launch in add",
                    "more elements per thread: BLOCK_SIZE 256 -> 1024 at the add_kernel launch in add",
                    "more elements per thread: num_warps 4 -> 2 at the add_kernel launch in add"]


# -- autotune -------------------------------------------------------------------------------------------------
def test_autotune_wraps_the_kernel_and_the_grid_reads_meta():
    [(rationale, new)] = variants(ADD, "autotune")
    assert rationale.startswith("@triton.autotune on add_kernel:")
    assert '        triton.Config({"BLOCK_SIZE": 256}, num_warps=4),\n' in new
    assert '        triton.Config({"BLOCK_SIZE": 512}, num_warps=4),\n' in new
    assert '    key=["n", "tune_numel"],\n)\n@triton.jit\ndef add_kernel' in new
    assert "def add_kernel(x_ptr, y_ptr, out_ptr, n, BLOCK_SIZE: tl.constexpr, tune_numel):" in new
    assert ('    grid = lambda meta: (triton.cdiv(n, meta["BLOCK_SIZE"]),)\n'
            '    add_kernel[grid](x, y, out, n, tune_numel=x.numel() + y.numel() + out.numel())\n') in new
    assert "restore_value" not in new
    # The kernel is autotuned now: its launch no longer sets what the configs set, but a config can be added.
    assert variants(new, "block_size") == [] and variants(new, "num_warps") == []
    added = variants(new, "autotune")
    assert added and all(r.startswith("add triton.Config(") for r, _ in added)


TILE_2D = """\
import torch
import triton
import triton.language as tl


@triton.jit
def scale_kernel(x_ptr, out_ptr, L, BLK: tl.constexpr, C: tl.constexpr):
    offs_m = tl.program_id(0) * BLK + tl.arange(0, BLK)
    offs_k = tl.arange(0, C)
    x = tl.load(x_ptr + offs_m[:, None] * C + offs_k[None, :], mask=offs_m[:, None] < L)
    tl.store(out_ptr + offs_m[:, None] * C + offs_k[None, :], x * 2, mask=offs_m[:, None] < L)


def scale(x):
    out = torch.empty_like(x)
    L, C = x.shape
    scale_kernel[(triton.cdiv(L, 128),)](x, out, L, 128, C)
    return out
"""


@pytest.mark.parametrize("c, one_warp", [("C", False), ("64", True), ("512", False)])
def test_autotune_tries_a_quarter_of_the_warps_only_where_a_thread_keeps_256_elements(c, one_warp):
    """int8_quantization's q kernel (a 128 x C tile, C known at run time) did not compile with num_warps=1 in
    180 s in either bench: the grid offers num_warps / 4 only where the tile is known and small enough."""
    source = TILE_2D.replace("L, 128, C)", f"L, 128, {c})")
    (new,) = [n for _, n in variants(source, "autotune")]
    warps = {int(line.split("num_warps=")[1].split(")")[0]) for line in new.splitlines() if "triton.Config" in line}
    assert {4, 8, 2, 16} <= warps  # the launch's 4, then x2, /2, x4
    assert (1 in warps) is one_warp  # 128 x 64 on one warp: 256 a thread; 128 x 512: 2,048


def test_autotune_keys_on_the_element_count_of_the_tensors_the_kernel_reads():
    """flash_decode2_phi's shapes differ only in the batch, which no argument carries: the element count of
    the tensors passed for pointers joins the key, as a new last parameter (BENCHMARKS.md, run AG)."""
    [(rationale, new)] = variants(ROWS, "autotune")
    assert "def rms_kernel(x_ptr, out_ptr, n_cols, BLOCK: tl.constexpr, tune_numel):" in new
    assert "        x.shape[1],\n        tune_numel=x.numel() + out.numel(),\n    )\n" in new  # laid out as the others
    assert '    key=["n_cols", "tune_numel"],\n' in new and "key ['n_cols', 'tune_numel']" in rationale
    # a parameter with a default stays last: the new one goes before it
    [(_, defaulted)] = variants(ROWS.replace("BLOCK: tl.constexpr)", "BLOCK: tl.constexpr = 512)"), "autotune")
    assert "def rms_kernel(x_ptr, out_ptr, n_cols, tune_numel, BLOCK: tl.constexpr = 512):" in defaulted
    # expressions passed for every pointer (they would be evaluated twice): no new parameter, the key as before
    [(_, kept)] = variants(ROWS.replace("        x,\n        out,\n", "        x + 0,\n        out[:],\n"), "autotune")
    assert "tune_numel" not in kept and '    key=["n_cols"],\n' in kept


def test_autotune_keys_on_no_element_count_of_what_triton_wrapped():
    # rms_rbe_matmul passes `out_ptr = triton.reinterpret(out, ...)`: a TensorWrapper, which has no numel()
    wrapped = ROWS.replace("def rms(x, out):\n", "def rms(x, out):\n    view = triton.reinterpret(out, tl.float16)\n") \
        .replace("        out,\n        x.shape[1]", "        view,\n        x.shape[1]")
    assert wrapped.count("view") == 2
    [(_, new)] = variants(wrapped, "autotune")
    assert "tune_numel=x.numel()," in new and "view.numel()" not in new


def test_autotune_restores_a_buffer_the_kernel_reads_and_writes():
    inplace = ADD.replace("tl.store(out_ptr + offs", "tl.store(x_ptr + offs")
    [(_, new)] = variants(inplace, "autotune")
    assert '    restore_value=["x_ptr"],\n' in new


def test_autotune_restores_an_output_the_launch_passes_as_an_input_too():
    # x += y as add_kernel[grid](x, y, x, n): each tuning run would add y to x once more
    aliased = ADD.replace("    out = torch.empty_like(x)\n", "").replace("(x, y, out, n,", "(x, y, x, n,") \
        .replace("n = out.numel()", "n = x.numel()").replace("return out", "return x")
    [(_, new)] = variants(aliased, "autotune")
    assert '    restore_value=["out_ptr"],\n' in new
    [(_, fresh)] = variants(ADD, "autotune")  # out is a new tensor: no run reads what another wrote
    assert "restore_value" not in fresh


def test_autotune_keeps_a_grid_local_that_other_code_reads():
    # `blocks` also sizes the output: a tuned block size would no longer match it.
    shared = ADD.replace("    grid = (triton.cdiv(n, 256),)\n",
                         "    blocks = triton.cdiv(n, 256)\n    out = torch.empty(blocks)\n    grid = (blocks,)\n")
    [(rationale, new)] = variants(shared, "autotune")
    assert "over num_warps" in rationale and "BLOCK_SIZE=256" in new and '"BLOCK_SIZE"' not in new


AUTOTUNED_RUN = '''
import os, sys, time
os.environ["TRITON_INTERPRET"] = "1"
import torch
from triton.runtime import autotuner

def bench(self):  # no GPU driver to time configs with: wall clock
    def run(fn, quantiles=None):
        t = time.perf_counter(); fn(); t = time.perf_counter() - t
        return [t, t, t]
    return run

autotuner.Autotuner.do_bench = property(bench)
namespace = {}
exec(compile(sys.stdin.read(), "<rewritten>", "exec"), namespace)
x, y = torch.randn(3000), torch.randn(3000)
assert torch.equal(namespace["add"](x, y), x + y)
print(namespace["add_kernel"].best_config)
'''


@pytest.mark.slow
def test_an_autotuned_kernel_computes_the_same_in_the_interpreter():
    [(_, new)] = variants(ADD, "autotune")
    run = subprocess.run([sys.executable, "-c", AUTOTUNED_RUN], input=new, capture_output=True, text=True,
                         timeout=120)
    assert run.returncode == 0, run.stderr[-2000:]
    assert "BLOCK_SIZE" in run.stdout


# -- cache hints ----------------------------------------------------------------------------------------------
def test_cache_hints_never_repeat_a_keyword():
    made = dict(variants(ADD, "cache_hints"))
    first = made['eviction_policy="evict_first" on 1 load of data read once in add_kernel']
    assert 'tl.load(x_ptr + offs, mask=mask, eviction_policy="evict_first")  # keep this comment' in first
    assert 'tl.load(y_ptr + offs, mask=mask, eviction_policy="evict_last")\n' in first  # had one already
    assert 'tl.store(out_ptr + offs, x + y, mask=mask, cache_modifier=".cs")' in made[
        'cache_modifier=".cs" on 1 store (streaming, evict first) in add_kernel']
    assert 'eviction_policy="evict_last" on' not in " ".join(made)  # y is read once: no re-read loads
    cg = made['cache_modifier=".cg" on 1 load (cached in L2 only) in add_kernel']
    assert variants(cg, "cache_hints") and not any("cache_modifier=\".cg\"" in r for r, _ in variants(cg, "cache_hints"))


def test_a_load_gets_a_cache_modifier_or_an_eviction_policy_never_both():
    # ptxas rejects the pair (run V: 7 of 7 such candidates failed); ADD's y load has evict_last already
    made = dict(variants(ADD, "cache_hints"))
    cg = made['cache_modifier=".cg" on 1 load (cached in L2 only) in add_kernel']
    assert 'tl.load(x_ptr + offs, mask=mask, cache_modifier=".cg")' in cg
    assert 'tl.load(y_ptr + offs, mask=mask, eviction_policy="evict_last")\n' in cg
    evict = made['eviction_policy="evict_first" on 1 load of data read once in add_kernel']
    for _, child in variants(cg, "cache_hints") + variants(evict, "cache_hints"):
        for line in child.splitlines():
            assert not ("tl.load" in line and "cache_modifier" in line and "eviction_policy" in line), line


# -- fusion (host side) ---------------------------------------------------------------------------------------
ABSMAX = """\
import torch
import triton
import triton.language as tl


@triton.jit
def scale_kernel(x_ptr, s_ptr, out_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    x = tl.load(x_ptr + offs, mask=offs < n)
    tl.store(out_ptr + offs, x / tl.load(s_ptr), mask=offs < n)


def scale(x):
    absmax = x.abs().max().unsqueeze(0)
    per_row = torch.abs(x).max(dim=-1)  # one dimension: another reduction, left alone
    out = torch.empty_like(x)
    scale_kernel[(triton.cdiv(x.numel(), 1024),)](x, absmax, out, x.numel(), BLOCK=1024)
    return out, per_row
"""


@pytest.mark.parametrize("form", ["x.abs().max()", "torch.abs(x).max()", "torch.max(x.abs())", "torch.amax(torch.abs(x))"])
def test_fused_absmax_makes_the_hosts_abs_max_one_pass(form):
    source = ABSMAX.replace("x.abs().max()", form)
    made = variants(source, "fused_absmax")
    assert len(made) == 1
    rationale, new = made[0]
    assert rationale == f'{form} in one pass: torch.linalg.vector_norm(x, float("inf")) in scale'
    assert changed_lines(source, new) == [
        f"-     absmax = {form}.unsqueeze(0)",
        '+     absmax = torch.linalg.vector_norm(x, float("inf")).unsqueeze(0)']


def test_fused_absmax_needs_the_pattern_and_torch():
    assert options(ABSMAX.replace("x.abs().max()", "x.abs().max(0)"), ("fused_absmax",)).reasons == (
        "no `x.abs().max()` on the host to do in one pass",)
    assert options(ABSMAX.replace("import torch\n", ""), ("fused_absmax",)).reasons == (
        "the module does not `import torch`",)


@pytest.mark.slow
def test_a_fused_absmax_tritonbench_kernel_is_correct_in_the_interpreter(evaluator):
    task, source = tritonbench_variant("quantize_global", "fused_absmax")
    result = evaluator.evaluate(task, source, seed=9)
    assert result.ok, (result.outcome, result.detail, result.error[-2000:])


# -- grouped ordering -----------------------------------------------------------------------------------------
class _FakeTl:
    """Enough of triton.language to run the generated index arithmetic on plain ints."""

    def __init__(self, grid, pid):
        self.grid, self.pid = grid, pid

    def num_programs(self, axis):
        return self.grid[axis]

    def program_id(self, axis):
        return self.pid[axis]

    minimum = staticmethod(min)
    maximum = staticmethod(max)

    @staticmethod
    def where(condition, a, b):
        return a if condition else b

    def cdiv(self, a, b):
        return -(-a // b)


def _tiles(kernel_source: str, grid: tuple[int, int], pids, n_tiles: int) -> list[tuple[int, int]]:
    """(pid_m, pid_n) of each program, running the kernel's lines up to the first offsets line."""
    body = textwrap.dedent(kernel_source.split("):\n", 1)[1].split("    offs_m")[0])
    seen = []
    for pid in pids:
        namespace = {"tl": _FakeTl(grid, pid), "N": n_tiles * 32, "BLOCK_N": 32}
        exec(body, namespace)
        seen.append((namespace["pid_m"], namespace["pid_n"]))
    return seen


def test_grouped_ordering_is_a_permutation_of_the_tiles_of_a_2d_launch():
    made = dict(variants(MATMUL_2D, "grouped_ordering"))
    new = made["grouped program order in mm_kernel: GROUP_M = 8 row tiles per column sweep"]
    assert "    GROUP_M = 8\n" in new and "pid_n = tl.program_id(axis=1)" not in new
    kernel = new.split("@triton.jit\n")[1].split("\n\n\n")[0]
    grid = (13, 5)
    tiles = _tiles(kernel, grid, [(i, j) for j in range(grid[1]) for i in range(grid[0])], grid[1])
    assert sorted(tiles) == [(m, n) for m in range(grid[0]) for n in range(grid[1])]
    assert tiles[:3] == [(0, 0), (1, 0), (2, 0)]  # consecutive programs walk down a column of row tiles
    assert variants(new, "grouped_ordering") == []  # grouped already


def test_grouped_ordering_of_a_1d_launch_split_by_division():
    one_d = MATMUL_2D.replace("    pid_m = tl.program_id(axis=0)\n    pid_n = tl.program_id(axis=1)\n",
                              "    pid = tl.program_id(axis=0)\n    num_pid_n = tl.cdiv(N, BLOCK_N)\n"
                              "    pid_m = pid // num_pid_n\n    pid_n = pid % num_pid_n\n")
    new = dict(variants(one_d, "grouped_ordering"))[
        "grouped program order in mm_kernel: GROUP_M = 4 row tiles per column sweep"]
    kernel = new.split("@triton.jit\n")[1].split("\n\n\n")[0]
    grid = (7 * 3, 1)  # 7 row tiles x 3 column tiles, launched in one dimension
    tiles = _tiles(kernel, grid, [(i, 0) for i in range(21)], 3)
    assert sorted(tiles) == [(m, n) for m in range(7) for n in range(3)]
    assert tiles[:3] == [(0, 0), (1, 0), (2, 0)]  # consecutive programs walk down a column of row tiles
    grid = (7 * 3 + 2, 1)  # more programs than tiles: the two past them keep their own ids
    tiles = _tiles(kernel, grid, [(i, 0) for i in range(23)], 3)
    assert sorted(tiles) == sorted([(m, n) for m in range(7) for n in range(3)] + [(7, 0), (7, 1)])


def test_grouped_ordering_needs_a_2d_tile_split():
    assert variants(ADD, "grouped_ordering") == []
    assert any("tiles are not a 2-D tiling of its program ids" in r
               for r in options(ADD, ("grouped_ordering",)).reasons)


# -- the proposer ---------------------------------------------------------------------------------------------
def test_proposals_are_deterministic_given_the_seed():
    first = [propose(MATMUL_2D, "tiling", seed=s, entry="mm").source for s in range(8)]
    assert first == [propose(MATMUL_2D, "tiling", seed=s, entry="mm").source for s in range(8)]
    assert len(set(first)) >= 4  # other seeds, other variants


def test_the_seed_draws_a_rewrite_by_its_prior():
    # access_layout offers rows (prior 0.25) and cache_hints (prior 0.008) on a one-row-per-program kernel
    drawn = Counter(propose(SOFTMAX_ROWS, "access_layout", seed=s, entry="softmax").rationale.split(":")[0]
                    for s in range(200))
    assert set(drawn) == {"rows", "cache_hints"}
    assert drawn["rows"] > 150 and drawn["cache_hints"] >= 1  # about 97 % against 3 %
    # with the rewrite drawn, its variants still come in turn: every one is reached before any repeats
    seen: set[str] = set()
    while (proposal := propose(SOFTMAX_ROWS, "access_layout", seed=3, seen=frozenset(seen), entry="softmax")).source:
        seen.add(source_hash(proposal.source))
    assert len(seen) == len(variants(SOFTMAX_ROWS, "rows")) + len(variants(SOFTMAX_ROWS, "cache_hints"))


def test_each_variant_has_the_family_its_change_makes():
    found = options(ADD, ("block_size", "vector_width", "autotune"))
    families = {v.rationale: family(v.rewrite, v.rationale) for v in found.variants}
    assert families == {
        "BLOCK_SIZE 256 -> 512 at the add_kernel launch in add": "block_size grow",
        "BLOCK_SIZE 256 -> 128 at the add_kernel launch in add": "block_size shrink",
        "BLOCK_SIZE 256 -> 1024 at the add_kernel launch in add": "block_size grow",
        "BLOCK_SIZE 256 -> 64 at the add_kernel launch in add": "block_size shrink",
        "more elements per thread: BLOCK_SIZE 256 -> 512 at the add_kernel launch in add": "vector_width block",
        "more elements per thread: BLOCK_SIZE 256 -> 1024 at the add_kernel launch in add": "vector_width block",
        "more elements per thread: num_warps 4 -> 2 at the add_kernel launch in add": "vector_width warps",
        "@triton.autotune on add_kernel: 8 configs over BLOCK_SIZE, num_warps, key ['n', 'tune_numel']":
            "autotune wrap",
    }
    tuned = dict(variants(ADD, "autotune"))["@triton.autotune on add_kernel: 8 configs over BLOCK_SIZE, "
                                           "num_warps, key ['n', 'tune_numel']"]
    added = options(tuned, ("autotune",)).variants
    assert added and {family(v.rewrite, v.rationale) for v in added} == {"autotune add"}
    # a block set at run time: scaled by code, and the stored rationale ("rewrite: ...") reads the same
    assert family("block_size", "block_size: BLOCK_SIZE block_size -> block_size * 2 at the cos_func launch") \
        == "block_size grow"
    assert family("block_size", "BLOCK_SIZE block_size -> block_size // 2 at the cos_func launch") \
        == "block_size shrink"
    assert family("coarsen", "2 consecutive programs per program in k") == "coarsen"
    warps = {family(v.rewrite, v.rationale) for v in options(ADD, ("num_warps",)).variants}
    assert warps == {"num_warps grow", "num_warps shrink"}
    assert family("num_warps", "num_warps w -> max(1, w // 2) (the computed value halved) at the k launch") \
        == "num_warps shrink"
    assert set(families.values()) <= set(json.loads(PRIORS_FILE.read_text())["families"])  # counted on a GPU


def test_the_seed_draws_a_family_by_its_prior():
    # priors.json (train tasks): a grown block beat its parent 8 times in 102, a shrunk one 0 in 21; wrapping a
    # kernel in @triton.autotune 30 in 141; Inductor's configs, counted nowhere, 0.5. Drawn by rewrite with its
    # variants in turn, half the block_size draws would shrink the block.
    first = Counter(family(*propose(ADD, "tiling", seed=s).rationale.split(": ", 1)) for s in range(200))
    assert first["block_size shrink"] <= 16  # about 3 %
    assert first["block_size grow"] >= 10 and first["autotune wrap"] >= 30 and first["inductor_configs"] >= 70
    assert first["block_size grow"] >= 2 * first["block_size shrink"]


def test_a_family_no_run_has_counted_is_drawn_as_likely_to_win_as_to_lose():
    # matmul_configs is counted on no train task: (0 + 1) / (0 + 2) = 0.5, against autotune wrap's 31 / 143,
    # so on a tl.dot kernel the tile configs come first about as often as all of tiling's counted families
    counts = json.loads(PRIORS_FILE.read_text())
    assert "matmul_configs" not in counts["families"]
    from kernelband.proposers.rewriter.priors import prior
    assert prior("matmul_configs") == pytest.approx(0.5) and prior("matmul_configs", "heavy") == pytest.approx(0.5)
    first = Counter(family(*propose(MATMUL_2D, "tiling", seed=s, entry="mm").rationale.split(": ", 1))
                    for s in range(200))
    assert first["matmul_configs"] >= 80 and first["matmul_configs"] > 2 * first["autotune wrap"]


def test_how_much_work_a_thread_holds_sorts_a_parent():
    assert load_class({"constexprs": {"BLOCK_SIZE": 8192}, "num_warps": 4, "n_spills": 0}) == "heavy"  # 64 each
    assert load_class({"constexprs": {"BLOCK_SIZE": 256}, "num_warps": 8, "n_spills": 3}) == "heavy"  # spills
    assert load_class({"constexprs": {"BLOCK_SIZE": 1024}, "num_warps": 4}) == "mid"  # 8 each
    assert load_class({"constexprs": {"BLOCK_M": 16, "BLOCK_N": 16}, "num_warps": 4}) == "light"  # 2 each
    assert load_class({"constexprs": {"BLOCK_SIZE": 128}, "num_warps": None}) == "light"  # Triton's 4 warps
    assert load_class({"constexprs": {}, "num_warps": 4}) is None and load_class({}) is None


def test_the_priors_are_counted_per_family_and_parent_load(tmp_path):
    """tools/rewrite_priors.py, which wrote priors.json, on a run store with known children."""
    from pathlib import Path

    from kernelband.store import Store

    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tools"))
    try:
        from rewrite_priors import count
    finally:
        sys.path.pop(0)
    light = {"constexprs": {"BLOCK_SIZE": 64}, "num_warps": 4}
    heavy = {"constexprs": {"BLOCK_SIZE": 8192}, "num_warps": 4}
    store = Store(tmp_path / "runs.db")
    run = store.create_run("t", "k", "kernelband", "rewrite", 0, {})
    children = [  # (id, parent, rationale, outcome, speedup)
        (1, 0, "block_size: BLOCK_SIZE 64 -> 128 at the k launch", "ok", 1.5),  # won (parent light)
        (2, 0, "block_size: BLOCK_SIZE 64 -> 32 at the k launch", "ok", 0.7),
        (3, 1, "num_warps: num_warps 4 -> 8 at the k launch", "ok", 1.52),  # not 5 % over its parent's 1.5
        (4, 2, "autotune: @triton.autotune on k: 5 configs over num_warps, key ['n']", "timeout", None),
        (5, 4, "cache_hints: eviction_policy on 1 load in k", "ok", 2.0),  # its parent failed: not counted
    ]
    store.add_candidate(run, 0, "k0", "h0", None, None, 0, 0)
    store.add_evaluation(run, 0, "search", EvalResult("t", Outcome.OK, speedup=1.0, features=Features(compile=light)))
    for cid, parent, rationale, outcome, speedup in children:
        store.add_candidate(run, cid, f"k{cid}", f"h{cid}", parent, "s", cid, 0, rationale)
        store.add_evaluation(run, cid, "search", EvalResult("t", Outcome(outcome), speedup=speedup,
                                                            features=Features(compile=heavy if cid == 1 else light)))
    store.close()
    counts = count(str(tmp_path / "runs.db"), None, 1.05)
    assert counts["families"] == {"block_size grow": [1, 1], "block_size shrink": [1, 0],
                                  "num_warps grow": [1, 0], "autotune wrap": [1, 0]}
    assert counts["by_load"] == {"block_size grow|light": [1, 1], "block_size shrink|light": [1, 0],
                                 "num_warps grow|heavy": [1, 0], "autotune wrap|light": [1, 0]}


def test_the_priors_count_one_side_of_the_split_and_say_where_they_come_from(tmp_path):
    """`--split train` counts only the train tasks' children, and --write heads priors.json with the command,
    the date, the side, the GPU models and the tasks counted, a file the rewriter reads as it reads its own."""
    from pathlib import Path

    from kernelband.proposers.rewriter.priors import prior
    from kernelband.store import Store
    from kernelband.tasks.split import side

    root = Path(__file__).resolve().parents[1]
    sys.path.insert(0, str(root / "tools"))
    try:
        from rewrite_priors import count
    finally:
        sys.path.pop(0)
    store = Store(tmp_path / "runs.db")
    light = Features(compile={"constexprs": {"BLOCK_SIZE": 64}, "num_warps": 4})
    tasks = {"tritonbench:add_value": ("NVIDIA H200", 1.5), "examples:softmax": ("NVIDIA H100 80GB HBM3", 1.0)}
    assert [side(t) for t in tasks] == ["train", "test"]
    for task, (device, speedup) in tasks.items():
        run = store.create_run(task, "k", "random", "rewrite", 0, {}, device=device)
        store.add_candidate(run, 0, "k0", "h0", None, None, 0, 0)
        store.add_evaluation(run, 0, "search", EvalResult(task, Outcome.OK, speedup=1.0, features=light))
        store.add_candidate(run, 1, "k1", "h1", 0, "s", 1, 0, "block_size: BLOCK_SIZE 64 -> 128 at the k launch")
        store.add_evaluation(run, 1, "search", EvalResult(task, Outcome.OK, speedup=speedup, features=light))
    store.close()
    db = str(tmp_path / "runs.db")
    train, test, both = count(db, None, 1.05, "train"), count(db, None, 1.05, "test"), count(db, None, 1.05)
    assert train["families"] == {"block_size grow": [1, 1]} and train["tasks"] == ["tritonbench:add_value"]
    assert test["families"] == {"block_size grow": [1, 0]} and test["devices"] == ["NVIDIA H100 80GB HBM3"]
    assert both["families"] == {"block_size grow": [2, 1]}

    out = tmp_path / "priors.json"
    done = subprocess.run([sys.executable, str(root / "tools" / "rewrite_priors.py"), db, "--split", "train",
                           "--write", str(out)], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-2000:]
    written = json.loads(out.read_text())
    assert written["counted"].endswith("--split train") and written["split"] == "train"
    assert written["devices"] == ["NVIDIA H200"] and written["tasks"] == ["tritonbench:add_value"]
    assert len(written["date"]) == 10 and written["by_load"] == {"block_size grow|light": [1, 1]}
    assert prior("block_size grow", "light", written) == pytest.approx(prior("block_size grow", "light", train))


def test_the_parents_load_steers_the_draw():
    # priors.json (train tasks): raising num_warps beat a heavy parent 23 times in 48 and a light one 0 in 8;
    # lowering it beat a light parent 3 in 28 and a heavy one 0 in 16. Without the load, each is drawn about
    # half the time (raising 24 in 133, lowering 17 in 142).
    def raised(compiled):
        drawn = [family(*propose(ADD, "pipeline", seed=s, compiled=compiled).rationale.split(": ", 1))
                 for s in range(100)]
        return drawn.count("num_warps grow")

    heavy = {"kernel": "add_kernel", "constexprs": {"BLOCK_SIZE": 8192}, "num_warps": 4, "n_spills": 8}
    light = {"kernel": "add_kernel", "constexprs": {"BLOCK_SIZE": 128}, "num_warps": 4, "n_spills": 0}
    assert raised(heavy) >= 80
    assert raised(light) <= 40
    assert 25 <= raised(None) <= 75 and raised(heavy) - raised(light) >= 40


def test_seen_sources_are_skipped_until_the_variants_are_exhausted():
    seen: set[str] = set()
    rationales = []
    for _ in range(10):  # ignoring `seen` would propose forever
        proposal = propose(ADD, "pipeline", seed=7, seen=frozenset(seen))
        if proposal.source is None:
            break
        seen.add(source_hash(proposal.source))
        rationales.append(proposal.rationale)
    assert len(rationales) == len(variants(ADD, "num_warps")) == 4  # no loop: num_stages has nothing
    assert rationales[0].startswith("num_warps: num_warps 4 ->")
    assert proposal.error == "all 4 pipeline variants of this kernel were tried already"


def test_an_inapplicable_strategy_proposes_nothing_and_says_why():
    proposer = RewriterProposer()
    assert not proposer.applicable(Candidate(0, ADD), STRATEGIES["reordering"])
    proposal = propose(ADD, "reordering")
    assert proposal.source is None and proposal.error.startswith("no reordering rewrite applies to this kernel: ")
    assert "add_kernel's tiles are not a 2-D tiling of its program ids" in proposal.error
    fusion = propose(ADD, "fusion")
    assert fusion.source is None and "no `x.abs().max()` on the host" in fusion.error
    assert not proposer.applicable(Candidate(0, ADD), STRATEGIES["fusion"])
    assert proposer.applicable(Candidate(0, ADD), STRATEGIES["tiling"])


def test_only_code_the_entry_reaches_is_rewritten():
    two = ADD + "\n\ndef unused(x):\n    rms_kernel[(1,)](x, x, 4, BLOCK=64)\n" + ROWS.split("\n\n\n", 1)[1]
    made = {propose(two, "pipeline", seed=s).rationale for s in range(20)}
    assert made and all("add_kernel launch in add" in r for r in made)
    proposal = propose(two, "pipeline", entry="rms")
    assert proposal.source is not None and "rms_kernel launch in rms" in proposal.rationale


def test_a_proposal_keeps_formatting_and_the_entry():
    for seed in range(12):
        proposal = propose(ADD, "tiling", seed=seed)
        assert proposal.source is not None
        compile(proposal.source, "<p>", "exec")
        assert "\ndef add(x, y):\n" in proposal.source and "# keep this comment" in proposal.source


# -- strategy files -------------------------------------------------------------------------------------------
def test_the_builtin_strategies():
    names = [s.name for s in builtin_strategies()]
    assert names == ["tiling", "vectorization", "fusion", "pipeline", "reordering", "access_layout"]
    assert all(s.target in ("SM", "DRAM", "L2") and set(s.rewrites) <= set(REWRITES) for s in builtin_strategies())
    assert {r for s in builtin_strategies() for r in s.rewrites} == set(REWRITES) - STRATEGY_FILE_ONLY
    assert load_strategies(None) == builtin_strategies()


def test_a_toml_file_adds_and_replaces_strategies(tmp_path):
    path = tmp_path / "s.toml"
    path.write_text('[[strategies]]\nname = "tiling"\ndescription = "Only bigger tiles."\n\n'
                    '[[strategies]]\nname = "split_k"\ndescription = "Split K."\ntarget = "SM"\n')
    loaded = {s.name: s for s in load_strategies(path)}
    assert list(loaded)[:1] == ["tiling"] and len(loaded) == 7
    assert loaded["tiling"].description == "Only bigger tiles."
    assert loaded["tiling"].rewrites == STRATEGIES["tiling"].rewrites  # fields left out keep the built-in's
    assert loaded["split_k"].rewrites == () and loaded["split_k"].target == "SM"


def test_the_hybrid_routing_and_how_a_file_changes_it(tmp_path):
    """Launch parameters and autotuning go to the rewriter, the rest to the LLM; `proposer` in a file wins."""
    assert {s.name: s.proposer for s in builtin_strategies()} == {
        "tiling": "rewriter", "vectorization": "rewriter", "pipeline": "rewriter",
        "fusion": "llm", "reordering": "llm", "access_layout": "llm"}
    path = tmp_path / "s.toml"
    path.write_text('[[strategies]]\nname = "tiling"\nproposer = "llm"\n\n[[strategies]]\nname = "pipeline"\n'
                    'rewrites = []\n\n[[strategies]]\nname = "warps"\ndescription = "d"\ntarget = "SM"\n'
                    'rewrites = ["num_warps"]\n\n[[strategies]]\nname = "split_k"\ndescription = "d"\n'
                    'target = "SM"\n')
    routed = {s.name: s.proposer for s in load_strategies(path)}
    assert (routed["tiling"], routed["pipeline"], routed["vectorization"]) == ("llm", "llm", "rewriter")
    assert (routed["warps"], routed["split_k"]) == ("rewriter", "llm")  # new: the rewriter when it has rewrites


def test_a_json_file_can_replace_all(tmp_path):
    path = tmp_path / "s.json"
    path.write_text(json.dumps({"replace_all": True, "strategies": [
        {"name": "warps", "description": "Retune num_warps.", "target": "SM", "rewrites": ["num_warps"]}]}))
    [only] = load_strategies(path)
    assert (only.name, only.rewrites) == ("warps", ("num_warps",))
    assert RewriterProposer().applicable(Candidate(0, ADD), only)


@pytest.mark.parametrize("name, text, says", [
    ("s.toml", '[[strategies]]\nname = "x"\ndescription = "d"\ntarget = "GPU"\n', "'target' must be one of SM"),
    ("s.toml", '[[strategies]]\nname = "tiling"\nrewrites = ["unroll"]\n', "unknown rewrite 'unroll'"),
    ("s.toml", '[[strategies]]\nname = "x"\ntarget = "SM"\n', "needs a 'description'"),
    ("s.toml", '[[strategies]]\nname = "x"\ndescription = "d"\ntarget = "SM"\ncolour = 1\n', "unknown field 'colour'"),
    ("s.toml", '[[strategies]\nname = "x"\n', "is not valid TOML"),
    ("s.json", '{"strategies": [{"name": "tiling"}, {"name": "tiling"}]}', "defined twice"),
    ("s.json", '{"replace_all": true}', "leaves nothing to search with"),
    ("s.json", '{"strategy": []}', "unknown top-level key 'strategy'"),
    ("s.yaml", "strategies: []\n", "must end in .toml or .json"),
    ("s.toml", '[[strategies]]\nname = "tiling"\nproposer = "gpt"\n', "'proposer' must be \"rewriter\" or \"llm\""),
    ("s.toml", '[[strategies]]\nname = "x"\ndescription = "d"\ntarget = "SM"\nproposer = "rewriter"\n',
     "needs built-in 'rewrites'"),
])
def test_a_bad_strategy_file_is_a_one_line_user_error(tmp_path, name, text, says):
    path = tmp_path / name
    path.write_text(text)
    with pytest.raises(UserError) as raised:
        load_strategies(path)
    assert says in str(raised.value) and "\n" not in str(raised.value)


def test_a_missing_strategy_file_is_a_user_error(tmp_path):
    with pytest.raises(UserError, match="cannot read strategy file"):
        load_strategies(tmp_path / "none.toml")


# -- real kernels ---------------------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def tritonbench():
    from kernelband.tasks import tritonbench as tb

    try:
        names = tb.level12()
    except UserError as exc:
        pytest.skip(f"TritonBench-G data not available: {exc}")
    return {name: tb.load(name).module_source for name in names}


def applicable(source: str) -> set[str]:
    return {s.name for s in builtin_strategies() if RewriterProposer().applicable(Candidate(0, source), s)}


def test_several_strategies_apply_to_most_tritonbench_kernels(tritonbench):
    counts = {name: len(applicable(source)) for name, source in tritonbench.items()}
    assert len(counts) == 29
    assert min(counts.values()) >= 2, counts
    assert sum(n >= 3 for n in counts.values()) >= 25, counts


@pytest.mark.parametrize("name, expected", [
    ("add_value", {"tiling", "vectorization", "pipeline", "access_layout"}),
    ("matmul_kernel", {"tiling", "vectorization", "pipeline", "reordering", "access_layout"}),  # contiguity_hints
    ("rmsnorm_triton", {"tiling", "vectorization", "fusion", "pipeline", "access_layout"}),  # fusion: single_pass
    ("quantize_global", {"tiling", "vectorization", "fusion", "access_layout"}),  # autotuned already: configs
    # can be added; vectorization: contiguity_hints
    # whole-row block: warps and hints, and the online softmax's chunked twin for long rows (fusion); its row
    # strides and length stated multiples of 8 where they are (vectorization: divisibility_hints)
    ("softmax_triton1", {"tiling", "vectorization", "fusion", "pipeline", "access_layout"}),
])
def test_what_applies_to_real_tritonbench_kernels(tritonbench, name, expected):
    source = tritonbench[name]
    assert applicable(source) == expected
    for strategy in expected:
        for _, new in variants(source, STRATEGIES[strategy].rewrites[0]):
            compile(new, name, "exec")


@pytest.mark.slow
@pytest.mark.parametrize("example, entry, strategy", [("vector_add", "add", "tiling"),
                                                      ("matmul", "matmul", "reordering")])
def test_a_rewritten_example_is_correct_in_the_interpreter(evaluator, example, entry, strategy):
    from kernelband.tasks import load_task

    task = load_task(f"examples:{example}")
    proposal = propose(task.module_source, strategy, seed=0, entry=entry)
    assert proposal.source is not None, proposal.error
    result = evaluator.evaluate(task, proposal.source, seed=4)
    assert result.ok, (proposal.rationale, result.outcome, result.detail, result.error[-2000:])
