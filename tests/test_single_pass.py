"""single_pass read from the analysis's facts (analysis/blocked.py, padding.py, block_reads.py): where one block
of B >= n computes what a kernel's blocked loops compute, it fires, with a branch at the launch; where one
block may not, the refusal names the fact that is missing. The forms users write (while, cdiv and tl.range
loops, pointer walks, 2-D tiles, autotuned blocks, helpers, other names) are tests/respellings/rows.py's."""

from __future__ import annotations

import ast

import pytest
from interpreted import interpreted, run_modules
from test_rewrites_structural import MM as STRUCTURAL_MM
from test_rewrites_structural import ROW_SUM as STRUCTURAL_ROW_SUM

from kernelband.proposers.rewriter.analysis.facts import facts_of
from kernelband.proposers.rewriter.analysis.source import ModuleSource
from kernelband.proposers.rewriter.proposer import options

# the row sum of test_rewrites_structural.py, its row length in a local and a block of 16
ROW_SUM = STRUCTURAL_ROW_SUM.replace("    row_sum_kernel[(x.shape[0],)](x, out, x.shape[1], BLOCK=64)\n",
                                     "    n = x.shape[1]\n    row_sum_kernel[(x.shape[0],)](x, out, n, BLOCK=16)\n")

# the GEMM of test_rewrites_structural.py on tiles of 16
MM = STRUCTURAL_MM.replace("(triton.cdiv(M, 32), triton.cdiv(N, 32))](a, b, c, M, N, K, BLOCK_M=32, BLOCK_N=32, BLOCK_K=32)",
                           "(triton.cdiv(M, 16), triton.cdiv(N, 16))](a, b, c, M, N, K, BLOCK_M=16, BLOCK_N=16, BLOCK_K=16)")


def made(source: str) -> tuple[list[tuple[str, str]], tuple[str, ...]]:
    found = options(source, ("single_pass",))
    return [(v.rationale, v.apply(found.module)) for v in found.variants], found.reasons


def one(source: str) -> tuple[str, str]:
    """The rationale and source of the one variant single_pass makes."""
    [(rationale, new)] = made(source)[0]
    return rationale, new


def changed(old: str, new: str, source: str = ROW_SUM) -> str:
    assert old in source
    source = source.replace(old, new)
    return source.replace("    for start", "    scale = 1.0\n    for start") if "scale" in new else source


@pytest.mark.parametrize("old, new, reason", [
    ("row_sum_kernel[(x.shape[0],)](x, out, n, BLOCK=16)", "row_sum_kernel[(x.shape[0],)](x, out, cols(x), BLOCK=16)",
     "the row's length (n_cols) reads n_cols, which the row_sum_kernel launch in row_sum does not pass as a value it "
     "can read again"),
    ("range(0, n_cols, BLOCK)", "range(BLOCK, n_cols, BLOCK)",
     "a loop of row_sum_kernel over blocks of BLOCK walks from BLOCK, not from the row's start: one block of "
     "the whole row covers other lanes than it does"),
    ("range(0, n_cols, BLOCK)", "range(0, tl.load(x_ptr).to(tl.int32), BLOCK)",
     "the extent of row_sum_kernel's loop over blocks of BLOCK (tl.load(x_ptr).to(tl.int32)) is not a value the "
     "launch can read (a kernel parameter or a value of them)"),
    # backward walks: read as the forward walk over their blocks where they cover the row, else what they walk
    ("range(0, n_cols, BLOCK)", "range(n_cols, 0, -BLOCK)",
     "a loop of row_sum_kernel counts down from n_cols by BLOCK: its variable is what is left of the row, not a "
     "block's offset"),
    ("range(0, n_cols, BLOCK)", "range(tl.cdiv(n_cols, BLOCK) * BLOCK - BLOCK, BLOCK, -BLOCK)",
     "a loop of row_sum_kernel over blocks of BLOCK walks backwards down to 2 * BLOCK, not to 0 (part of a row)"),
    ("range(0, n_cols, BLOCK)", "range(n_cols - BLOCK, -BLOCK, -BLOCK)",
     "a loop of row_sum_kernel walks blocks of BLOCK backwards from n_cols - BLOCK, not from a multiple of BLOCK "
     "less one block"),
    ("    for start in range(0, n_cols, BLOCK):\n        acc += tl.load(",
     "    for start in range(tl.cdiv(n_cols, BLOCK) * BLOCK - BLOCK, -BLOCK, -BLOCK):\n        scale *= 0.5\n"
     "        acc += scale * tl.load(",
     "row_sum_kernel's acc combines in scale, which its loop also carries from block to block: one block "
     "computes something else"),
    ("range(0, n_cols, BLOCK)", "range(0, n_cols, 2 * BLOCK)",
     "a loop of row_sum_kernel steps by 2 * BLOCK over n_cols, not by BLOCK: it does not walk a row in blocks of BLOCK"),
    # a loop over block indices whose count does not follow the block: one block for the row walks another row
    ("    for start in range(0, n_cols, BLOCK):\n        acc += tl.load(x_ptr + row * n_cols + start + cols, "
     "mask=start + cols < n_cols",
     "    for i in range(n_cols // BLOCK):\n        acc += tl.load(x_ptr + row * n_cols + i * BLOCK + cols, "
     "mask=i * BLOCK + cols < n_cols",
     "a loop of row_sum_kernel walks the n_cols // BLOCK whole blocks of BLOCK in n_cols, rounded down: a block "
     "wider than n_cols would walk none of it"),
    ("    for start in range(0, n_cols, BLOCK):\n        acc += tl.load(x_ptr + row * n_cols + start + cols, "
     "mask=start + cols < n_cols",
     "    for i in range(n_cols):\n        acc += tl.load(x_ptr + row * n_cols + i * BLOCK + cols, "
     "mask=i * BLOCK + cols < n_cols",
     "a loop of row_sum_kernel walks n_cols blocks, a count the kernel is given apart from BLOCK: one block as "
     "wide as the row would need that count changed with it"),
    ("        acc += tl.load(", "        if start > 100:\n            break\n        acc += tl.load(",
     "a loop of row_sum_kernel over blocks of BLOCK leaves early (break, continue or return)"),
    ("    cols = tl.arange(0, BLOCK)\n", "    cols = tl.arange(0, BLOCK) + tl.program_id(1) * BLOCK\n",
     "row_sum_kernel's BLOCK also tiles program coordinates (a program id scales it)"),
    ("tl.sum(acc, axis=0))", "tl.sum(tl.cumsum(acc, axis=0), axis=0))",
     "tl.cumsum's result depends on the extent of BLOCK"),
    ("tl.sum(acc, axis=0))", "tl.sum(acc, axis=0) * BLOCK)",
     "row_sum_kernel's BLOCK enters its arithmetic (tl.sum(acc, axis=0) * BLOCK), not only a block's extent"),
    ("        acc += tl.load(", "        acc += (start // BLOCK) * tl.load(",
     "row_sum_kernel reads the offset of a block of BLOCK other than as its lanes' offset (start // BLOCK)"),
    ("        acc += tl.load(", "        acc += (start == 0) * tl.load(",
     "row_sum_kernel reads the offset of a block of BLOCK other than as its lanes' offset (start == 0)"),
    ("tl.sum(acc, axis=0))", "tl.sum(acc, axis=0) + start)",
     "start after row_sum_kernel's loop over blocks of BLOCK holds its last block's value"),
    ("other=0.0)\n", "other=0.0)\n        tl.store(out_ptr + row, tl.sum(acc, axis=0))\n",
     "a store inside row_sum_kernel's loop over blocks of BLOCK reads acc, which the loop carries from block to block"),
    ("tl.store(out_ptr + row, tl.sum(acc, axis=0))",
     "tl.store(out_ptr + row, tl.sum(tl.load(x_ptr + cols, mask=cols < n_cols, other=0.0), axis=0))",
     "a load along BLOCK lies outside row_sum_kernel's loops over its blocks"),
    ("    for start in range(0, n_cols, BLOCK):\n        acc +=",
     "    for start in range(0, n_cols, BLOCK):\n        for again in range(0, n_cols, BLOCK):\n            acc +=",
     "a loop of row_sum_kernel over blocks of BLOCK runs inside another"),
    # values carried from block to block that are no reduction over the row: their value after the loop depends
    # on how many blocks ran
    ("other=0.0)\n    tl.store(out_ptr + row, tl.sum(acc, axis=0))",
     "other=0.0)\n        scale = scale * 0.5\n    tl.store(out_ptr + row, tl.sum(acc, axis=0) * scale)",
     "row_sum_kernel's scale carries a value from one block to the next that is not a sum, max or min over the "
     "row: one block computes something else"),
    ("        acc += tl.load(x_ptr + row * n_cols + start + cols, mask=start + cols < n_cols, other=0.0)",
     "        acc = acc * 0.5 + tl.load(x_ptr + row * n_cols + start + cols, mask=start + cols < n_cols, other=0.0)",
     "row_sum_kernel's acc carries a value from one block to the next that is not a sum, max or min over the "
     "row: one block computes something else"),
    ("    for start in range(0, n_cols, BLOCK):\n        acc += tl.load(",
     "    for start in range(0, n_cols, BLOCK):\n        scale *= 0.5\n        acc += scale * tl.load(",
     "row_sum_kernel's acc combines in scale, which its loop also carries from block to block: one block "
     "computes something else"),
    ("    acc = tl.zeros([BLOCK], tl.float32)", "    acc = tl.full([BLOCK], 1.0, tl.float32)",
     "row_sum_kernel's acc starts its lanes along BLOCK from values other than 0: one block of another extent has "
     "another number of them"),
    ("tl.sum(acc, axis=0))", "tl.max(acc, axis=0))",
     "row_sum_kernel's acc holds a sum per lane along BLOCK that is read after its loop other than as a tl.sum "
     "over BLOCK: one block of another extent holds other lanes"),
    ("    row_sum_kernel[(x.shape[0],)](x, out, n, BLOCK=16)\n",
     "    handle = row_sum_kernel[(x.shape[0],)](x, out, n, BLOCK=16)\n",
     "the row_sum_kernel launch in row_sum is part of a larger expression: the launch cannot branch on the row's "
     "length"),
])
def test_single_pass_refuses_with_the_fact_that_one_block_may_not_compute_the_same(old, new, reason):
    variants, reasons = made(changed(old, new))
    assert not variants and reasons == (reason,)


def test_a_helper_the_analysis_does_not_read_into_its_caller_is_not_given_values_along_the_block():
    helper = ("@triton.jit\ndef load_row(p, m):\n    x = tl.load(p, mask=m, other=0.0)\n    if x.dtype == tl.float16:\n"
              "        x = x.to(tl.float32)\n    return x\n\n\n@triton.jit\ndef row_sum_kernel(")
    source = changed("@triton.jit\ndef row_sum_kernel(", helper).replace(
        "acc += tl.load(x_ptr + row * n_cols + start + cols, mask=start + cols < n_cols, other=0.0)",
        "acc += load_row(x_ptr + row * n_cols + start + cols, start + cols < n_cols)")
    assert made(source) == ([], ("load_row has no loop that walks a row in blocks of a constexpr",
                                 "row_sum_kernel passes values along BLOCK to load_row, whose loads and stores the "
                                 "analysis does not read"))


def test_the_twin_runs_each_loop_once_at_offset_zero_and_the_launch_branches_on_the_row_length():
    rationale, new = one(ROW_SUM)
    assert rationale == ("row_sum_kernel's 1 loop(s) over n_cols as one block of triton.next_power_of_2(n_cols) "
                         "where 0 < n_cols <= 16384 (row_sum_kernel_single_pass), the loops otherwise")
    assert ("    start = 0\n    acc += tl.load(x_ptr + row * n_cols + start + cols, mask=start + cols < n_cols, "
            "other=0.0)\n    tl.store(out_ptr + row, tl.sum(acc, axis=0))\n") in new
    assert ("    if 0 < n <= 16384:\n        row_sum_kernel_single_pass[(x.shape[0],)](x, out, n, "
            "BLOCK=triton.next_power_of_2(n), num_warps=min(16, max(4, triton.next_power_of_2(n) // 256)))\n"
            "    else:\n        row_sum_kernel[(x.shape[0],)](x, out, n, BLOCK=16)\n") in new


def test_lanes_past_the_end_that_a_sum_would_count_keep_the_twin_to_rows_of_a_power_of_two():
    """other=1.0 adds one per lane past the row's end: one block of B == n (a power of two) has none."""
    rationale, new = one(changed("other=0.0", "other=1.0"))
    assert rationale.endswith("where 0 < n_cols <= 16384 and n_cols is a power of two and a multiple of the launch's "
                              "BLOCK, so that no lane lies past it (row_sum_kernel: the lanes past the end add 1.0 to "
                              "a tl.sum) (row_sum_kernel_single_pass), the loops otherwise")
    assert "    if 0 < n <= 16384 and n & (n - 1) == 0 and n % 16 == 0:\n" in new
    rationale, _ = one(changed("mask=start + cols < n_cols, other=0.0", "other=0.0"))
    assert ("is a power of two and a multiple of the launch's BLOCK, so that no lane lies past it (a load along BLOCK "
            "is not bounded by a mask)") in rationale
    _, new = one(changed("other=0.0", "other=1.0").replace("BLOCK=16)", "BLOCK=block)").replace(
        "    n = x.shape[1]\n", "    n = x.shape[1]\n    block = 16 if n < 1024 else 64\n"))
    assert "    if 0 < n <= 16384 and n & (n - 1) == 0 and n % block == 0:\n" in new  # the launch's block, read again
    tuned = changed("other=0.0", "other=1.0").replace("@triton.jit\n", '@triton.autotune(configs=[triton.Config('
                                                      '{"BLOCK": 16}), triton.Config({"BLOCK": 32})], key=["n_cols"])'
                                                      '\n@triton.jit\n').replace(", BLOCK=16)", ")")
    assert "    if 0 < n <= 16384 and n & (n - 1) == 0 and n % 32 == 0:\n" in one(tuned)[1]  # each config's divides n
    unread = changed("other=0.0", "other=1.0").replace("BLOCK=16)", "BLOCK=pick(n))")
    assert made(unread) == ([], (
        "the lanes past the row's end change row_sum_kernel's result (row_sum_kernel: the lanes past the end add 1.0 "
        "to a tl.sum), and the row_sum_kernel launch in row_sum does not say BLOCK as a value it can read again: no "
        "guard can see that its blocks leave no such lane",))


def test_a_tl_dot_k_loop_takes_one_block_of_16_to_64_and_keeps_its_num_warps():
    rationale, new = one(MM)
    assert rationale == ("mm_kernel's 1 loop(s) over K as one block of max(16, triton.next_power_of_2(K)) where "
                         "0 < K <= 64 (mm_kernel_single_pass), the loops otherwise")
    assert ("    if 0 < K <= 64:\n        mm_kernel_single_pass[(triton.cdiv(M, 16), triton.cdiv(N, 16))](a, b, c, M, "
            "N, K, BLOCK_M=16, BLOCK_N=16, BLOCK_K=max(16, triton.next_power_of_2(K)))\n") in new
    unmasked = MM.replace("mask=(offs_m[:, None] < M) & ((k + offs_k)[None, :] < K), other=0.0", "")
    rationale, new = one(unmasked)
    assert "where 16 <= K <= 64 and K is a power of two and a multiple of the launch's BLOCK_K" in rationale
    assert "    if 16 <= K <= 64 and K & (K - 1) == 0 and K % 16 == 0:\n" in new
    always_long = MM.replace("range(0, K, BLOCK_K)", "range(0, 4096, BLOCK_K)").replace("(k + offs_k)", "(k + offs_k)")
    assert made(always_long) == ([], ("mm_kernel's rows (4096) never fit one block of BLOCK_K",))


def test_an_autotuned_or_heuristic_block_is_left_out_of_the_twins_configs_and_passed_at_the_launch():
    tuned = changed("@triton.jit\n", '@triton.autotune(configs=[triton.Config({"BLOCK": 16}, num_warps=2), '
                    'triton.Config({"BLOCK": 32}, num_warps=4)], key=["n_cols"])\n@triton.jit\n').replace(
        ", BLOCK=16)", ")")
    _, new = one(tuned)
    twin = new[new.index("def _configs_without("):]
    assert "@triton.autotune(configs=_configs_without([triton.Config(" in twin and "'BLOCK'), key=" in twin
    assert ("row_sum_kernel_single_pass[(x.shape[0],)](x, out, n, BLOCK=triton.next_power_of_2(n))\n"
            "    else:\n        row_sum_kernel[(x.shape[0],)](x, out, n)\n") in new  # the configs set num_warps
    namespace: dict = {}
    exec(twin[:twin.index("\n\n\n")], namespace)  # the helper: each config once, without the block

    class Config:
        def __init__(self, kwargs, num_warps):
            self.kwargs, self.num_warps = kwargs, num_warps

        def all_kwargs(self):
            return {**self.kwargs, "num_warps": self.num_warps}

    kept = namespace["_configs_without"]([Config({"BLOCK": 16, "R": 1}, 2), Config({"BLOCK": 32, "R": 1}, 2),
                                          Config({"BLOCK": 16, "R": 2}, 2)], "BLOCK")
    assert [(c.kwargs, c.num_warps) for c in kept] == [({"R": 1}, 2), ({"R": 2}, 2)]
    pruned = tuned.replace('key=["n_cols"])', 'key=["n_cols"], prune_configs_by={"early_config_prune": prune})')
    _, new = one(pruned)  # a pruner may guard correctness: the twin's keeps it, given the block from the launch
    assert ("'BLOCK'), key=[\"n_cols\"], prune_configs_by=_pruning_with({\"early_config_prune\": prune}, 'BLOCK'))\n"
            "@triton.jit\ndef row_sum_kernel_single") in new
    exec(new[new.index("def _pruning_with("):new.index("@triton.autotune(configs=_configs_without")], namespace)
    seen = []

    def prune(configs, named_args, **kwargs):  # reads the block from each config, as matmul_configs' pruners do
        seen.append(sorted(c.kwargs["BLOCK"] for c in configs))
        return [c for c in configs if c.kwargs["R"] == 2] + [Config({"BLOCK": 64, "R": 3}, 8)]

    configs = [Config({"R": 1}, 2), Config({"R": 2}, 4)]
    wrapped = namespace["_pruning_with"]({"early_config_prune": prune, "top_k": 2}, "BLOCK")
    assert wrapped["top_k"] == 2
    kept = wrapped["early_config_prune"](configs, {"n_cols": 100}, BLOCK=128)
    assert seen == [[128, 128]] and kept[0] is configs[1] and kept[1].kwargs == {"R": 3}
    kept = wrapped["early_config_prune"](configs, {"n_cols": 100, "BLOCK": 64})  # passed in place
    assert seen[-1] == [64, 64] and kept[0] is configs[1]
    heuristic = changed("@triton.jit\n", '@triton.heuristics({"BLOCK": lambda args: 16})\n@triton.jit\n').replace(
        ", BLOCK=16)", ")")
    _, new = one(heuristic)
    assert "@triton.heuristics({})\n@triton.jit\ndef row_sum_kernel_single_pass(" in new
    assert "row_sum_kernel_single_pass[(x.shape[0],)](x, out, n, BLOCK=triton.next_power_of_2(n), num_warps" in new


def test_a_row_length_computed_from_parameters_is_computed_at_the_launch_from_what_it_passes():
    split = changed("def row_sum_kernel(x_ptr, out_ptr, n_cols, BLOCK", "def row_sum_kernel(x_ptr, out_ptr, n_cols, "
                    "parts, BLOCK").replace("range(0, n_cols, BLOCK)", "range(0, tl.cdiv(n_cols, parts), BLOCK)").replace(
        "< n_cols, other", "< tl.cdiv(n_cols, parts), other").replace("(x, out, n, BLOCK=16)", "(x, out, n, 2, BLOCK=16)")
    _, new = one(split)
    assert ("    if 0 < triton.cdiv(n, 2) <= 16384:\n        row_sum_kernel_single_pass[(x.shape[0],)](x, out, n, 2, "
            "BLOCK=triton.next_power_of_2(triton.cdiv(n, 2))") in new


def test_a_returned_launch_returns_on_both_sides_of_the_branch():
    _, new = one(changed("    row_sum_kernel[(x.shape[0],)](x, out, n, BLOCK=16)\n    return out\n",
                              "    return row_sum_kernel[(x.shape[0],)](x, out, n, BLOCK=16)\n"))
    assert "    if 0 < n <= 16384:\n        return row_sum_kernel_single_pass[" in new
    assert "    else:\n        return row_sum_kernel[(x.shape[0],)](x, out, n, BLOCK=16)\n" in new


def test_a_name_that_every_branch_assigns_before_reading_is_not_carried_and_a_branch_sum_is_a_sum():
    """loops.py: `loss` is assigned on both sides of an if before the store reads it; `total` is added to in one
    branch only: a sum all the same."""
    source = changed("        acc += tl.load(x_ptr + row * n_cols + start + cols, mask=start + cols < n_cols, "
                     "other=0.0)\n",
                     "        x = tl.load(x_ptr + row * n_cols + start + cols, mask=start + cols < n_cols, other=0.0)\n"
                     "        if BLOCK > 8:\n            loss = x * 2.0\n        else:\n            loss = x\n"
                     "        if BLOCK > 4:\n            total += tl.sum(loss, axis=0)\n").replace(
        "    acc = tl.zeros([BLOCK], tl.float32)\n", "    total = 0.0\n").replace("tl.sum(acc, axis=0)", "total")
    ms = ModuleSource(source)
    [loop] = facts_of(ms.kernels["row_sum_kernel"]).loops.all
    assert set(loop.carried) == {"total"} and loop.carried["total"].kind == "sum"
    assert ast.unparse(loop.carried["total"].term) == "tl.sum(__var('loss'), axis=0)"


@pytest.mark.slow
def test_rows_of_a_power_of_two_take_the_twin_and_other_rows_the_loops_where_lanes_past_the_end_count():
    """With other=1.0 each lane past the end adds one: at 64 columns the twin (one block of 64, none past the
    end) gives the loops' sums, and at 100 the launch keeps the loops (blocks of 16 leave 12 lanes past the end,
    one block of 128 would leave 28)."""
    source = changed("other=0.0", "other=1.0")
    _, variant = one(source)
    forced = variant.replace("if 0 < n <= 16384 and n & (n - 1) == 0 and n % 16 == 0:", "if 0 < n <= 16384:")
    interpreted(source, f"""
import importlib, sys, types
def load(name, text):
    module = types.ModuleType(name)
    module.__file__ = f"/tmp/{{name}}.py"
    open(module.__file__, "w").write(text)
    sys.path.insert(0, "/tmp")
    return importlib.import_module(name)
variant, forced = load("kb_padded_variant", {variant!r}), load("kb_padded_forced", {forced!r})
for cols in (64, 100):
    x = torch.randn(3, cols)
    assert torch.allclose(variant.row_sum(x), module.row_sum(x), atol=1e-4, rtol=1e-5), cols
x = torch.randn(3, 100)
assert torch.allclose(forced.row_sum(x) - module.row_sum(x), torch.full((3,), 16.0))  # unguarded: 28 lanes past, not 12
""")


@pytest.mark.slow
def test_a_tl_dot_k_loop_in_one_block_gives_the_loops_product_in_the_interpreter():
    _, variant = one(MM)
    interpreted(variant, """
for m, n, k in ((20, 24, 40), (20, 24, 300)):  # K = 40: one block of 64; K = 300: the loops
    a, b = torch.randn(m, k), torch.randn(k, n)
    assert torch.allclose(module.mm(a, b), a @ b, atol=1e-3, rtol=1e-3), k
""")


ROW_MAX = ROW_SUM.replace("acc = tl.zeros([BLOCK], tl.float32)", "acc = tl.full([BLOCK], float('-inf'), tl.float32)").replace(
    "acc += tl.load(", "acc = tl.maximum(acc, tl.load(").replace("other=0.0)", "other=0.0))").replace(
    "tl.sum(acc, axis=0)", "tl.max(acc, axis=0)").replace("BLOCK=16)", "BLOCK=64)")


@pytest.mark.slow
def test_where_lanes_past_the_end_count_the_twin_takes_only_rows_that_the_launchs_block_divides():
    """A row max whose lanes past the end hold 0.0: at 32 columns the original's one block of 64 has 32 such
    lanes (its max of negative rows is 0.0), the twin's block of 32 none; at 128 neither has any."""
    _, variant = one(ROW_MAX)
    assert "    if 0 < n <= 16384 and n & (n - 1) == 0 and n % 64 == 0:\n" in variant
    run_modules({"kb_original": ROW_MAX, "kb_variant": variant,
                 "kb_unguarded": variant.replace(" and n % 64 == 0:", ":")}, """
import torch
import kb_original as original, kb_variant as variant, kb_unguarded as unguarded
torch.manual_seed(0)
for cols in (32, 128):
    x = -torch.rand(3, cols) - 1
    assert torch.equal(variant.row_sum(x), original.row_sum(x)), cols
x = -torch.rand(3, 32) - 1
assert torch.equal(original.row_sum(x), torch.zeros(3)) and (unguarded.row_sum(x) < -1).all()
""")


# MM writing into the caller's output, its store unmasked along M: matmul_configs' configs then carry a pruner
# that keeps only the tiles of BLOCK_M that divide M (the tutorial's 16 x 16 x 16 and 64 x 32 x 32 kept here)
MM_INTO = MM.replace("def mm(a, b):", "def mm(a, b, c):").replace(
    "    c = torch.empty((M, N), device=a.device)\n", "").replace(
    "acc, mask=(offs_m[:, None] < M) & (offs_n[None, :] < N))", "acc, mask=offs_n[None, :] < N)")


@pytest.mark.slow
def test_after_matmul_configs_the_twin_keeps_the_pruner_that_keeps_the_tiles_that_divide_m():
    """At M = 48 the pruner keeps BLOCK_M = 16 only: a tile of 64 rows would store rows 48-63 past the output,
    into the rest of its buffer. The twin's autotuner, given BLOCK_K from its launch, prunes the same (without
    its pruner it would also have two configs to time, which the interpreter cannot without a GPU)."""
    [(_, tuned)] = [v for v in made_by(MM_INTO, "matmul_configs") if "tutorial" in v[0]]
    lines = tuned.splitlines(keepends=True)
    tuned = "".join(line for line in lines if not line.lstrip().startswith("triton.Config(") or any(
        tile in line for tile in ('"BLOCK_M": 16, "BLOCK_N": 16', '"BLOCK_M": 64, "BLOCK_N": 32')))
    assert tuned.count("triton.Config(") == 2 and "_mm_kernel_tiles_divide" in tuned
    _, variant = one(tuned)
    twin = variant[variant.index("configs=_configs_without("):]
    assert "prune_configs_by=_pruning_with({\"early_config_prune\": _mm_kernel_tiles_divide}, 'BLOCK_K')" in twin
    run_modules({"kb_original": tuned, "kb_variant": variant}, """
import torch
import kb_original as original, kb_variant as variant
torch.manual_seed(0)
M, N, K = 48, 32, 40
a, b = torch.randn(M, K), torch.randn(K, N)
for module in (original, variant):
    buffer = torch.zeros(64, N)
    module.mm(a, b, buffer[:M])
    assert torch.allclose(buffer[:M], a @ b, atol=1e-3, rtol=1e-3), module
    assert torch.equal(buffer[M:], torch.zeros(64 - M, N)), module  # no row past M stored
""")


def made_by(source: str, rewrite: str) -> list[tuple[str, str]]:
    found = options(source, (rewrite,))
    return [(v.rationale, v.apply(found.module)) for v in found.variants]
