"""The split_k and persistent_tiles rewrites: the twins they make of a tl.dot kernel, the host code that picks
the twin or the original launch, where they refuse, and that they give the original's outputs in the Triton
interpreter (its "SM count" is matmul_launch.CPU_SMS = 4)."""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest
from interpreted import run_modules
from test_rewrite_correctness import one_config_each
from test_rewrites_structural import MM, example, made, made_plain

from kernelband.proposers.rewriter.rewrites.matmul_launch import CPU_SMS
from kernelband.tasks import tritonbench as tb

MATMUL = example("matmul").module_source


def kernel_text(source: str, name: str) -> str:
    start = source.index(f"def {name}(")
    return source[start:source.index("\n\n\n", start)]


# -- split_k --------------------------------------------------------------------------------------------------
def test_split_k_adds_a_twin_that_splits_the_k_loop_and_launches_it_only_where_split_k_exceeds_one():
    [(rationale, new)], reasons = made_plain(MATMUL, "split_k")
    assert rationale.startswith("matmul_kernel's K loop split over a third grid axis into up to 16 float32 partial")
    assert kernel_text(new, "matmul_kernel") == kernel_text(MATMUL, "matmul_kernel")
    twin = kernel_text(new, "matmul_kernel_split_k")
    assert "BLOCK_K: tl.constexpr, ws_ptr, ws_span, SPLIT_K: tl.constexpr, REDUCE: tl.constexpr):" in twin
    partial = twin[twin.index("    else:\n"):]
    assert ("        pid_k = tl.program_id(axis=2)\n"
            "        k_per_split = tl.cdiv(tl.cdiv(K, BLOCK_K), SPLIT_K) * BLOCK_K\n"
            "        k_start = pid_k * k_per_split\n"
            "        k_steps = (k_start // BLOCK_K).to(tl.int64)\n"
            "        a_ptrs += k_steps * (BLOCK_K * stride_ak)\n"
            "        b_ptrs += k_steps * (BLOCK_K * stride_bk)\n"
            "        for k in range(k_start, tl.minimum(K, k_start + k_per_split), BLOCK_K):\n") in partial
    assert ("        ws_base = ws_ptr + pid_k.to(tl.int64) * ws_span\n"
            "        c_ptrs = ws_base + offs_m[:, None] * stride_cm + offs_n[None, :] * stride_cn\n"
            "        tl.store(c_ptrs, acc, mask=") in partial
    reduce = twin[twin.index("    if REDUCE:\n"):twin.index("    else:\n")]
    assert ("        ws_base = ws_ptr\n        for split in range(0, SPLIT_K):\n"
            "            c_ptrs = ws_base + offs_m[:, None] * stride_cm + offs_n[None, :] * stride_cn\n"
            "            acc += tl.load(c_ptrs, mask=(offs_m[:, None] < M) & (offs_n[None, :] < N), other=0.0)\n"
            "            ws_base += ws_span\n") in reduce
    assert reduce.endswith("        tl.store(c_ptrs, acc.to(tl.float16), mask=(offs_m[:, None] < M) & "
                           "(offs_n[None, :] < N))\n")  # the kernel's own epilogue, on the sum
    assert ("    _split_k = max(1, min(16, _sms // max(1, _tiles), triton.cdiv(K, 4 * 32))) if len(_grid) <= 2 else 1\n"
            "    if _split_k > 1:\n") in new
    assert "    else:\n        matmul_kernel[grid](a, b, c, M, N, K," in new  # the original launch, as it was
    assert "matmul_kernel_split_k[_grid + (1,) * (2 - len(_grid)) + (_split_k,)](" in new
    assert new.count("ws_ptr=_ws[0, c.storage_offset():], ws_span=_ws.shape[1], SPLIT_K=_split_k") == 2
    compile(new, "matmul", "exec")


MM_PTRS = MM.replace(
    "    acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)\n",
    "    a_ptrs = a_ptr + offs_m[:, None] * K + offs_k[None, :]\n"
    "    acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)\n").replace(
    "        a = tl.load(a_ptr + offs_m[:, None] * K + (k + offs_k)[None, :],\n",
    "        a = tl.load(a_ptrs,\n").replace(
    "        acc = tl.dot(a, b, acc)\n", "        acc = tl.dot(a, b, acc)\n        a_ptrs += BLOCK_K\n")


CARRIES = ("mm_kernel's K loop carries a_ptrs from one step to the next other than by a fixed increment: a split "
           "cannot start part-way")


@pytest.mark.parametrize("old, new, reason", [
    ("dtype=tl.float32)", "dtype=tl.float16)",
     "mm_kernel's accumulator acc does not start as float32 or int32 zeros before the K loop"),
    ("range(0, K, BLOCK_K)", "range(BLOCK_K, K, BLOCK_K)",
     "mm_kernel's K loop runs from BLOCK_K to K: neither from 0 up nor down to 0 (a split's share of K "
     "would not be a run of its steps)"),
    ("        a_ptrs += BLOCK_K\n", "        a_ptrs += BLOCK_K + k * 0\n",
     CARRIES),
    ("        a_ptrs += BLOCK_K\n", "        a_ptrs = a_ptrs * 1\n", CARRIES),
    ("        acc = tl.dot(a, b, acc)\n", "        acc = tl.dot(a, b, acc)\n        acc = acc * 0.5\n",
     "mm_kernel's tl.dot is not summed over a loop"),
    ("        acc = tl.dot(a, b, acc)\n", "        acc = tl.dot(a, b)\n", "mm_kernel's tl.dot is not summed over a loop"),
    ("        acc = tl.dot(a, b, acc)\n", "        acc = tl.dot(a, b, acc)\n        big = tl.max(acc)\n",
     "mm_kernel reads the sum of its tl.dot inside the loop (a running value, not a sum over K)"),
    ("    tl.store(", "    a_ptrs += 0\n    tl.store(",
     "mm_kernel reads what its K loop leaves (other than acc) after the loop"),
    ("    tl.store(", "    acc = acc * 2.0\n    tl.store(", None),  # an epilogue, run on the full sum only
    ("    acc = tl.zeros(", "    c_first = tl.load(c_ptr)\n    acc = tl.zeros(", "mm_kernel reads and writes c_ptr"),
    ("    tl.store(", "    tl.store(c_ptr, 0.0)\n    tl.store(", "mm_kernel stores 2 times, not once"),
    ("    tl.store(", "    tl.atomic_add(", "mm_kernel has atomics or a return other than a guard (`if C: return` in "
                                             "its body)"),
    # axis 2 of a 2-D grid is 0 in every program: the split shares axis 2 and reads it back as pid // SPLIT_K
    ("pid_n = tl.program_id(axis=1)", "pid_n = tl.program_id(axis=2)", None),
    ("pid_n = tl.program_id(axis=1)", "pid_n = tl.program_id(axis=2) + tl.num_programs(2) * 0",
     "mm_kernel reads the grid's extent on axis 2 (tl.num_programs(2))"),
    ("    return c\n", "    return c, mm_kernel\n", None),  # not a launch: still fine
    ("    mm_kernel[(", "    _ = mm_kernel[(", "the mm_kernel launch in mm is not a statement of its own in a function"),
    ("BLOCK_K=32)", "BLOCK_K=32 + 0)", None),  # an expression the host can read again: still fine
    ("dtype=tl.float32)\n", "dtype=tl.float32) + 1.0\n", "mm_kernel's accumulator acc does not start as float32 or "
                                                         "int32 zeros before the K loop"),
    ("acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)", "acc = tl.full((BLOCK_M, BLOCK_N), 1.0, dtype=tl.float32)",
     "mm_kernel's accumulator acc does not start as float32 or int32 zeros before the K loop"),  # ones are no sum
    ("acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)", "acc = tl.full((BLOCK_M, BLOCK_N), 0, tl.float32)", None),
    ("BLOCK_K=32)", "BLOCK_K=int(32))", None),  # a call that gives the same value again: still fine
    ("BLOCK_K=32)", "BLOCK_K=pick(32))", "a launch of mm_kernel computes K or BLOCK_K with a call that may not give the "
                                         "same value twice (not a tensor's sizes, int, min, max or cdiv): the host "
                                         "cannot read it again to choose the split"),
])
def test_split_k_refuses_where_splitting_k_is_not_certain_to_mean_the_same(old, new, reason):
    source = MM_PTRS.replace(old, new)
    assert source != MM_PTRS
    variants, reasons = made(source, "split_k")
    if reason is None:
        assert len(variants) == 1
    else:
        assert not variants and reasons == (reason,)


def test_facts_that_no_rewrite_can_read_are_refusals_not_errors():
    from respellings.gemm import BLOCK_POINTERS

    from kernelband.proposers.rewriter.registry import REWRITES
    # tl.advance by offsets held in a local: a split cannot scale them, one per axis
    named = BLOCK_POINTERS.replace("        a_block = tl.advance(a_block, (0, BK))\n",
                                   "        a_block = tl.advance(a_block, step_a)\n") \
        .replace("    acc = tl.zeros((BM, BN)", "    step_a = (0, BK)\n    acc = tl.zeros((BM, BN)")
    variants, reasons = made(named, "split_k")
    assert not variants and reasons == ("mm_block_ptr's K loop carries a_block from one step to the next other "
                                        "than by a fixed increment: a split cannot start part-way",)
    # a program id on an axis a constexpr chooses: its tiles follow no known axis
    axis = MM_PTRS.replace("tl.program_id(axis=0)", "tl.program_id(axis=AX)") \
        .replace("BLOCK_K: tl.constexpr)", "BLOCK_K: tl.constexpr, AX: tl.constexpr = 0)")
    assert axis != MM_PTRS
    for rewrite in REWRITES:
        assert not [r for r in made(axis, rewrite)[1] if "could not read" in r], rewrite


def test_split_k_on_an_autotuned_kernel_chooses_the_split_from_the_autotuners_configs():
    """The split is chosen before the autotuner picks a config: from the largest tiles and the smallest BLOCK_K
    among its configs; the partial launch's grid is the lambda's plus the split axis."""
    [(_, tuned)] = made(MATMUL, "matmul_configs")[0][:1]
    [(_, new)], _ = made(tuned, "split_k")
    assert ("    _grid = grid\n    _sms = torch.cuda.get_device_properties(c.device).multi_processor_count if "
            "c.device.type == \"cuda\" else 4\n"
            "    _tiles = min(_grid(_config.kwargs)[0] * (_grid(_config.kwargs)[1] if len(_grid(_config.kwargs)) > 1 "
            "else 1) for _config in matmul_kernel_split_k.configs)\n"
            "    _split_k = max(1, min(16, _sms // max(1, _tiles), triton.cdiv(K, 4 * min(_config.kwargs[\"BLOCK_K\"] "
            "for _config in matmul_kernel_split_k.configs))))\n    if _split_k > 1:\n") in new
    assert ("matmul_kernel_split_k[lambda meta: tuple(_grid(meta)) + (1,) * (2 - len(_grid(meta))) + (_split_k,)]("
            in new)
    assert "    else:\n        matmul_kernel[grid](a, b, c, M, N, K," in new
    odd = tuned.replace('triton.cdiv(M, meta["BLOCK_M"])', 'triton.cdiv(M, meta["BLOCK_M"] + meta["num_warps"])')
    assert odd != tuned
    assert made(odd, "split_k") == ([], ("the grid of a launch of matmul_kernel is not a function of its block "
                                         "sizes alone",))


def test_split_k_and_persistent_tiles_leave_element_wise_kernels_alone():
    for rewrite in ("split_k", "persistent_tiles"):
        assert made(example("vector_add").module_source, rewrite) == (
            [], ("add_kernel has no tl.dot, nor calls a helper that has one",))


# -- persistent_tiles -----------------------------------------------------------------------------------------
def test_persistent_tiles_loops_each_program_over_the_tiles_of_the_original_grid():
    [(rationale, new)], _ = made_plain(MATMUL, "persistent_tiles")
    assert rationale.startswith("matmul_kernel on one program per SM, each looping over the tiles")
    assert kernel_text(new, "matmul_kernel") == kernel_text(MATMUL, "matmul_kernel")
    twin = kernel_text(new, "matmul_kernel_persistent")
    assert "    for tile in range(tl.program_id(axis=0), G0 * G1, NUM_PROGS):\n" in twin
    assert "        pid = (tile % G0)\n" in twin and "program_id" not in twin.split("NUM_PROGS):\n")[1]
    assert ("    if len(_grid) <= 2 and _tiles > _sms:\n        matmul_kernel_persistent[(_sms,)](a, b, c, M, N, K,") in new
    assert "G0=_grid[0], G1=_tiles // _grid[0], NUM_PROGS=_sms)\n    else:\n        matmul_kernel[grid](" in new


def test_persistent_tiles_map_a_2d_grid_and_num_programs_onto_the_tile():
    source = MM.replace("    pid_n = tl.program_id(axis=1)\n",
                        "    pid_n = tl.program_id(axis=1) % tl.num_programs(1) + 0 * tl.num_programs(0)\n")
    [(_, new)], _ = made(source, "persistent_tiles")
    twin = kernel_text(new, "mm_kernel_persistent")
    assert "        pid_m = (tile % G0)\n        pid_n = (tile // G0) % G1 + 0 * G0\n" in twin


def test_persistent_tiles_on_an_autotuned_2d_grid_compute_both_extents_in_the_kernel():
    [(_, tuned)] = made(MM, "matmul_configs")[0][:1]
    [(_, persistent)], _ = made(tuned, "persistent_tiles")
    assert "    grid_0 = tl.cdiv(M, BLOCK_M)\n    grid_1 = tl.cdiv(N, BLOCK_N)\n" in persistent


def test_persistent_tiles_start_each_tile_from_the_parameters_as_passed():
    """A kernel that moves a pointer parameter (`a_ptr += row * stride`): in the persistent twin the parameter is
    a local of each tile, set from the value passed, so the second tile of a program does not start from the
    first tile's moved pointer."""
    source = MM_PTRS.replace("    a_ptrs = a_ptr + offs_m[:, None] * K", "    a_ptr += pid_m * BLOCK_M * K\n"
                             "    a_ptrs = a_ptr + tl.arange(0, BLOCK_M)[:, None] * K")
    [(_, new)], _ = made(source, "persistent_tiles")
    twin = kernel_text(new, "mm_kernel_persistent")
    assert "        a_ptr_tile = a_ptr\n" in twin and "a_ptr_tile += pid_m * BLOCK_M * K" in twin
    interpreted_pair(source, new, "a = torch.randn(70, 45).half(); b = torch.randn(45, 50).half()\n"
                     "assert torch.equal(variant.mm(a, b), original.mm(a, b))")


def test_the_tritonbench_matmul_keeps_its_tiles_where_only_the_host_knows_the_sizes_they_tile():
    """Its store is not masked and its sizes are constants of the kernel's, but the rows and columns the store
    covers are the grid's, `triton.cdiv(M, BLOCK_SIZE_M)` of a host M the kernel is not passed: no check could say
    a new M tile divides it, so matmul_configs refuses, saying so. split_k keeps the M and N tiles and splits the
    K loop's 4096 / BLOCK_SIZE_K steps, a constant of the kernel's; persistent_tiles keeps the tiles."""
    path = tb.find()
    if path is None:
        pytest.skip("no TritonBench-G data")
    from kernelband.tasks import load_task

    source = load_task("tritonbench:matmul_kernel").module_source
    assert made(source, "matmul_configs")[1] == (
        "a store along BLOCK_SIZE_M in matmul_kernel is not masked, and the size BLOCK_SIZE_M tiles is neither a "
        "constant nor a parameter a check could read",)
    [(_, split)] = made(source, "split_k")[0]
    assert "k_per_split = tl.cdiv(tl.cdiv(4096, BLOCK_SIZE_K), SPLIT_K) * BLOCK_SIZE_K\n" in split
    assert len(made(source, "persistent_tiles")[0]) == 1


def test_persistent_tiles_on_an_autotuned_kernel_compute_the_grid_in_the_kernel():
    """After matmul_configs the tiles follow the config the autotuner picks: the twin keeps the autotuner, counts
    the tiles itself from the grid lambda (meta["BLOCK_M"] as BLOCK_M, M as the M it is passed), and the launch's
    grid is min(SMs, tiles) of the chosen config."""
    [(_, tuned)] = made_plain(MATMUL, "matmul_configs")[0][:1]
    [(_, new)], _ = made_plain(tuned, "persistent_tiles")
    twin = new[new.index("@triton.autotune", new.index("def matmul_kernel(")):]
    assert twin.index("def matmul_kernel_persistent(") > 0 and "@triton.jit" in twin
    assert ("    grid_0 = (tl.cdiv(M, BLOCK_M) * tl.cdiv(N, BLOCK_N))\n    grid_1 = 1\n"
            "    # Persistent tiles: NUM_PROGS programs, each taking every NUM_PROGS-th tile of the original grid\n"
            "    for tile in range(tl.program_id(axis=0), grid_0 * grid_1, NUM_PROGS):\n") in twin
    assert ("    _grid = grid\n    _sms = torch.cuda.get_device_properties(c.device).multi_processor_count if "
            "c.device.type == \"cuda\" else 4\n    matmul_kernel_persistent[lambda meta: (min(_sms, _grid(meta)[0] * "
            "(_grid(meta)[1] if len(_grid(meta)) > 1 else 1)),)](a, b, c, M, N, K,") in new
    assert "tune_numel=a.numel() + b.numel() + c.numel(), NUM_PROGS=_sms)\n    return c\n" in new
    unknown = tuned.replace('triton.cdiv(M, meta["BLOCK_M"])', 'triton.cdiv(a.shape[0], meta["BLOCK_M"])')
    assert unknown != tuned
    assert made(unknown, "persistent_tiles") == ([], (
        "the grid of the matmul_kernel launch in matmul reads what the kernel is not passed, or calls other than "
        "cdiv",))


# -- the same outputs in the interpreter ----------------------------------------------------------------------
def interpreted_pair(original: str, variant: str, check: str) -> None:
    """Runs `check` with `original` and `variant` (the two modules) and `torch` in scope, in a fresh
    interpreter-mode process; the variant's twin kernel `TWIN` is wrapped so that `grids` lists the grids it
    was launched on."""
    script = f"""
import torch
import kb_original as original
import kb_variant as variant
torch.manual_seed(0)
grids = []
class Recorded:
    def __init__(self, kernel):
        self.kernel = kernel
    def __getitem__(self, grid):
        grids.append(grid)
        return self.kernel[grid]
    def __getattr__(self, name):
        return getattr(self.kernel, name)
{check}"""
    run_modules({"kb_original": original, "kb_variant": variant}, script)


MATMUL_SHAPES = """
for M, N, K in SHAPES:
    a = torch.randn(M, K).half()
    b = (torch.randn(K, N) * K**-0.5).half()
    grids.clear()
    got, want = variant.matmul(a, b), original.matmul(a, b)
    CHECK
    print(M, N, K, grids)
"""


@pytest.mark.slow
def test_split_k_gives_the_originals_outputs_in_the_interpreter():
    """A small-M, long-K shape takes SPLIT_K = 4 (one 32 x 32 tile, 4 CPU "SMs", K / (4 * 32) = 4) and 2; the
    task's interpreter shapes take the original launch. The partials differ from the original only in float32
    rounding, so the float16 outputs agree to the task's tolerance."""
    [(_, new)], _ = made(MATMUL, "split_k")
    shapes = [(16, 32, 512, 4), (40, 20, 520, 2), (8, 8, 300, 3), (50, 70, 45, 1)]
    check = MATMUL_SHAPES.replace("SHAPES", str([s[:3] for s in shapes])).replace("CHECK", (
        "assert torch.allclose(got.float(), want.float(), atol=1e-3, rtol=1e-2), (M, N, K)\n"
        "    assert torch.equal(got, variant.matmul(a, b))  # deterministic\n"
        "    expected = EXPECTED[(M, N, K)]\n"
        "    assert [g[-1] for g in grids[:1]] == ([expected] if expected > 1 else []), grids"))
    check = f"EXPECTED = {({s[:3]: s[3] for s in shapes})!r}\nvariant.matmul_kernel_split_k = " \
            f"Recorded(variant.matmul_kernel_split_k)\n{check}"
    interpreted_pair(MATMUL, new, check)


@pytest.mark.slow
def test_split_k_of_a_k_loop_counting_down_gives_the_originals_outputs_in_the_interpreter():
    """`for k in range(K, 0, -BK)` with masks `rk < k`: each split counts down from what is left of K at its
    first step. One 16 x 16 tile and K = 300: SPLIT_K 4, the last split's run shorter than the others."""
    from respellings.gemm import COUNT_DOWN

    [(_, new)], _ = made(COUNT_DOWN, "split_k")
    assert "for k in range(K - k_start, tl.maximum(K - k_start - k_per_split, 0), -BK):" in new
    check = MATMUL_SHAPES.replace("SHAPES", "[(16, 16, 300), (10, 12, 75)]").replace("CHECK", (
        "assert torch.allclose(got.float(), want.float(), atol=1e-3, rtol=1e-2), (M, N, K)\n"
        "    splits = [g({'BM': 16, 'BN': 16, 'BK': 16})[-1] for g in grids[:1]]  # the autotuner's grid lambdas\n"
        "    assert splits == [4 if K == 300 else 2], splits"))
    check = f"variant.mm_remaining_split_k = Recorded(variant.mm_remaining_split_k)\n{check}"
    interpreted_pair(COUNT_DOWN, new, check)


# An int8 GEMM with an int32 accumulator and output (a quantized layer's matmul).
INT8 = MM.replace("dtype=tl.float32", "dtype=tl.int32").replace("other=0.0", "other=0").replace(
    "torch.empty((M, N), device=a.device)", "torch.empty((M, N), device=a.device, dtype=torch.int32)")


def test_split_k_of_an_int32_accumulator_keeps_int32_partials():
    [(rationale, new)], _ = made(INT8, "split_k")
    assert "int32 partial tiles" in rationale
    assert "dtype=torch.int32)" in new and "dtype=torch.float32)" not in new


def test_split_k_reads_an_accumulator_dtype_given_as_a_constexpr_default_that_no_launch_sets():
    as_param = INT8.replace("BLOCK_K: tl.constexpr):", "BLOCK_K: tl.constexpr, ACC: tl.constexpr = tl.int32):")
    as_param = as_param.replace("dtype=tl.int32", "dtype=ACC")
    [(rationale, _)], _ = made(as_param, "split_k")
    assert "int32 partial tiles" in rationale
    passed = as_param.replace("BLOCK_K=32)", "BLOCK_K=32, ACC=tl.int32)")
    assert made(passed, "split_k") == ([], ("mm_kernel's accumulator acc does not start as float32 or int32 zeros "
                                           "before the K loop",))


@pytest.mark.slow
def test_split_k_of_an_int8_gemm_gives_the_originals_outputs_bit_for_bit_in_the_interpreter():
    """Integer partials add exactly, in any order: the split's int32 output equals the original's."""
    [(_, new)], _ = made(INT8, "split_k")
    interpreted_pair(INT8, new, """
variant.mm_kernel_split_k = Recorded(variant.mm_kernel_split_k)
a = torch.randint(-128, 128, (20, 520), dtype=torch.int8)
b = torch.randint(-128, 128, (520, 30), dtype=torch.int8)
got, want = variant.mm(a, b), original.mm(a, b)
assert grids and grids[0][-1] == 4, grids
assert got.dtype == torch.int32 and torch.equal(got, want) and torch.equal(want, a.int() @ b.int())
""")


@pytest.mark.slow
def test_persistent_tiles_give_the_originals_outputs_in_the_interpreter():
    """Exactly the original's outputs: each tile is computed as its program computed it. 50 x 70 and 100 x 100
    have 6 and 16 tiles, more than 4: the persistent launch; 64 x 64 has 4: the original's."""
    [(_, new)], _ = made(MATMUL, "persistent_tiles")
    check = MATMUL_SHAPES.replace("SHAPES", "[(50, 70, 45), (100, 100, 40), (64, 64, 64)]").replace("CHECK", (
        f"assert torch.equal(got, want), (M, N, K)\n"
        f"    assert grids == ([({CPU_SMS},)] if -(-M // 32) * -(-N // 32) > {CPU_SMS} else []), grids"))
    check = f"variant.matmul_kernel_persistent = Recorded(variant.matmul_kernel_persistent)\n{check}"
    interpreted_pair(MATMUL, new, check)


@pytest.mark.slow
@pytest.mark.parametrize("rewrite, twin, shape", [("persistent_tiles", "mm_kernel_persistent", (40, 70, 32)),
                                                  ("split_k", "mm_kernel_split_k", (20, 30, 520))])
def test_a_2d_grid_kernel_gives_its_outputs_in_the_interpreter(rewrite, twin, shape):
    """The 2-D grid of mm (program_id(0) and (1)), float32 output: persistent on 2 x 3 tiles, split-K (4) on 1 x 1."""
    [(_, new)], _ = made(MM, rewrite)
    interpreted_pair(MM, new, f"""
variant.{twin} = Recorded(variant.{twin})
M, N, K = {shape}
a, b = torch.randn(M, K), torch.randn(K, N)
got, want = variant.mm(a, b), original.mm(a, b)
assert grids and grids[0][-1] == 4, grids
assert torch.allclose(got, want, atol=1e-4, rtol=1e-4), (got - want).abs().max()
""")


@pytest.mark.slow
@pytest.mark.parametrize("rewrite, twin, shapes", [("split_k", "matmul_kernel_split_k", [(40, 20, 520)]),
                                                   ("persistent_tiles", "matmul_kernel_persistent", [(100, 100, 40)])])
def test_after_grouped_ordering_each_gives_the_originals_outputs_in_the_interpreter(rewrite, twin, shapes):
    """On top of the L2 swizzle (`tl.num_programs(0)` in the twin: the partial launch's first axis, the
    persistent twin's G0): 2 tiles split in 2, and 16 tiles on 4 programs."""
    [(_, grouped)] = made(MATMUL, "grouped_ordering")[0][:1]
    [(_, new)], _ = made(grouped, rewrite)
    assert "GROUP_M" in kernel_text(new, twin)
    check = MATMUL_SHAPES.replace("SHAPES", str(shapes)).replace("CHECK", (
        "assert torch.allclose(got.float(), want.float(), atol=1e-3, rtol=1e-2), (M, N, K)\n"
        "    assert grids and grids[0][-1] in (2, 4), grids"))
    interpreted_pair(MATMUL, new, f"variant.{twin} = Recorded(variant.{twin})\n{check}")


def one_tuned_config(source: str) -> str:
    """matmul_configs' first variant with only its 64 x 32 x 32 config (the interpreter's autotuner checks no
    outputs)."""
    [(_, tuned)] = made(source, "matmul_configs")[0][:1]
    lines = tuned.splitlines(keepends=True)
    at = [i for i, line in enumerate(lines) if line.lstrip().startswith("triton.Config(")]
    return "".join(line for i, line in enumerate(lines) if i not in at or '"BLOCK_M": 64, "BLOCK_N": 32' in line)


@pytest.mark.slow
@pytest.mark.parametrize("rewrite, twin, shapes, check", [
    # 100 x 100 has 2 x 4 tiles on 4 programs, 50 x 70 has 3 on 3
    ("persistent_tiles", "matmul_kernel_persistent", [(100, 100, 40), (50, 70, 45)],
     "assert torch.equal(got, want), (M, N, K)\n    assert len(grids) == 1, grids\n"
     "    assert variant.matmul_kernel_persistent.best_config.kwargs == original.matmul_kernel.best_config.kwargs"),
    # one 64 x 32 tile: SPLIT_K 4; 100 x 100 has 8 tiles: the original launch
    ("split_k", "matmul_kernel_split_k", [(16, 32, 512), (40, 20, 520), (100, 100, 40)],
     "assert torch.allclose(got.float(), want.float(), atol=1e-3, rtol=1e-2), (M, N, K)\n"
     "    assert [g(dict(BLOCK_M=64, BLOCK_N=32))[-1] for g in grids[:1]] == ([4] if M * N < 64 * 64 else []), M"),
])
def test_on_an_autotuned_kernel_each_gives_the_originals_outputs_in_the_interpreter(rewrite, twin, shapes, check):
    """Against the autotuned kernel the rewrite is made from, on the same config: the example's own 32 x 32
    tiles make other tl.dot shapes, whose float32 sums np.matmul (the interpreter's tl.dot) may round
    differently in the last bit, as OpenBLAS's Haswell kernel does, and a float16 output then by one ulp."""
    tuned = one_tuned_config(MATMUL)
    [(_, new)], _ = made(tuned, rewrite)
    assert new.count("triton.Config(") == 2
    check = MATMUL_SHAPES.replace("SHAPES", str(shapes)).replace("CHECK", check)
    interpreted_pair(tuned, new, f"variant.{twin} = Recorded(variant.{twin})\n{check}")


MM_INTO = MM.replace("M, N, K, BLOCK_M: tl.constexpr", "M, N, K, stride_cm, BLOCK_M: tl.constexpr").replace(
    "tl.store(c_ptr + offs_m[:, None] * N", "tl.store(c_ptr + offs_m[:, None] * stride_cm").replace(
    "def mm(a, b):", "def mm(a, b, c):").replace("    c = torch.empty((M, N), device=a.device)\n", "").replace(
    "(a, b, c, M, N, K, BLOCK_M=32", "(a, b, c, M, N, K, c.stride(0), BLOCK_M=32")


@pytest.mark.slow
def test_split_k_writes_into_an_output_view_and_nothing_around_it_in_the_interpreter():
    """The workspace mirrors the output's storage from its offset: a view into a larger buffer (a storage offset,
    a row stride wider than the row) gets the product, and the buffer around it keeps its values."""
    [(_, new)], _ = made(MM_INTO, "split_k")
    interpreted_pair(MM_INTO, new, """
variant.mm_kernel_split_k = Recorded(variant.mm_kernel_split_k)
M, N, K = 20, 30, 520
a, b = torch.randn(M, K), torch.randn(K, N)
big = torch.full((M + 5, N + 7), 7.0)
view = big[2:2 + M, 3:3 + N]
variant.mm(a, b, view)
assert grids and grids[0][-1] == 4, grids
assert torch.allclose(view, a @ b, atol=1e-4, rtol=1e-4), (view - a @ b).abs().max()
view.fill_(7.0)
assert torch.equal(big, torch.full_like(big, 7.0))
""")


COMPILE = """
import importlib.util, sys
import triton
from triton.backends.compiler import GPUTarget
from triton.compiler import ASTSource
spec = importlib.util.spec_from_file_location("kb_variant", sys.argv[1])
module = importlib.util.module_from_spec(spec)
spec.loader.exec_module(module)
POINTERS = {"a_ptr": "*fp16", "b_ptr": "*fp16", "c_ptr": "*fp16", "ws_ptr": "*fp32"}
for name, constexprs in CASES:
    fn = getattr(module, name)
    while not isinstance(fn, triton.runtime.JITFunction):  # an autotuner's kernel
        fn = fn.fn
    constexprs = {"BLOCK_M": 64, "BLOCK_N": 64, "BLOCK_K": 32, **constexprs}
    signature = {p: "constexpr" if p in constexprs else POINTERS.get(p, "i32") for p in fn.arg_names}
    source = ASTSource(fn, signature, constexprs={(fn.arg_names.index(k),): v for k, v in constexprs.items()})
    compiled = triton.compile(source, target=GPUTarget("cuda", 90, 32), options={"num_warps": 4, "num_stages": 3})
    assert compiled.asm["cubin"], name
"""


@pytest.mark.slow
@pytest.mark.parametrize("rewrite, cases", [
    ("split_k", [("matmul_kernel_split_k", {"SPLIT_K": 4, "REDUCE": False}),
                 ("matmul_kernel_split_k", {"SPLIT_K": 4, "REDUCE": True})]),
    ("persistent_tiles", [("matmul_kernel_persistent", {"NUM_PROGS": 132})]),
    ("matmul_configs,persistent_tiles", [("matmul_kernel_persistent", {"NUM_PROGS": 132})]),
    ("matmul_configs,split_k", [("matmul_kernel_split_k", {"SPLIT_K": 4, "REDUCE": False}),
                                ("matmul_kernel_split_k", {"SPLIT_K": 4, "REDUCE": True})]),
])
def test_the_twins_compile_for_an_h100_without_one(rewrite, cases):
    """The interpreter runs Python; Triton's compiler is stricter (a name's type in each branch of a constexpr
    `if`, the types a loop carries). Compiled to an sm_90 cubin on the CPU, with the ptxas Triton ships."""
    pytest.importorskip("triton.backends.nvidia")
    new = MATMUL
    for each in rewrite.split(","):
        [(_, new)] = made(new, each)[0][:1]
    path = os.path.join(tempfile.mkdtemp(), "kb_variant.py")
    with open(path, "w") as f:
        f.write(new)
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    proc = subprocess.run([sys.executable, "-c", f"CASES = {cases!r}\n{COMPILE}", path], env=env,
                          capture_output=True, text=True, timeout=300)
    if "ptxas" in proc.stderr and "not found" in proc.stderr.lower():
        pytest.skip("no ptxas with this Triton")
    assert proc.returncode == 0, proc.stderr[-3000:]


# -- on a GPU: correct at full size, and how much faster ------------------------------------------------------
# A task needs 10 search shapes: small M x N, long K; the last two have 256 and 1,024 tiles of 32 x 32, which fill
# an H100's 132 SMs (the original launch runs).
SKINNY = ("SHAPES = [dict(M=64, N=64, K=16384), dict(M=128, N=128, K=8192), dict(M=256, N=256, K=4096),\n"
          "          dict(M=64, N=1024, K=8192), dict(M=1024, N=64, K=8192), dict(M=32, N=32, K=32768),\n"
          "          dict(M=128, N=256, K=16384), dict(M=96, N=200, K=10000), dict(M=512, N=512, K=2048),\n"
          "          dict(M=1024, N=1024, K=1024)]\n")


@pytest.mark.gpu
@pytest.mark.parametrize("rewrite, skinny, base", [
    ("split_k", True, ""),
    ("split_k", True, "matmul_configs"),  # k0: the example autotuned over the tutorial's configs
    ("persistent_tiles", False, ""),
    ("persistent_tiles", False, "grouped_ordering,matmul_configs"),  # k0: the example grouped, then autotuned
])
def test_on_a_gpu_the_twin_is_correct_and_its_speedups_are_printed(tmp_path, rewrite, skinny, base):
    """Under the evaluator's rules, against the starting kernel (the example, or its `base` rewrites' first
    variants): split_k on small-M/N long-K shapes (SKINNY), persistent_tiles on the example's own shapes. Run
    with `-s` to see the figures; the outcome must be ok (outputs checked at full size)."""
    from kernelband.evaluation.evaluator import Evaluator
    from kernelband.tasks import load_task

    harness = Path(example("matmul").harness_file).read_text()
    kernel, definition = harness[:len(MATMUL)], harness[len(MATMUL):]
    assert kernel == MATMUL
    for each in filter(None, base.split(",")):
        [(_, kernel)] = made(kernel, each)[0][:1]
    if skinny:
        start = definition.index("SHAPES = [")
        definition = definition[:start] + SKINNY + definition[definition.index("]\n", start) + 2:]
    path = tmp_path / "matmul_task.py"
    path.write_text(kernel + definition)
    task = load_task(str(path))
    [(_, new)], _ = made(task.module_source, rewrite)
    with Evaluator(mode="gpu", warm=1) as ev:
        result = ev.evaluate(task, new)
    assert result.ok, (result.outcome, result.detail, result.error[-2000:])
    print(f"\n{rewrite} after {base or 'nothing'} on {result.device}: speedup over k0 {result.speedup:.3f}")
    for shape in result.shapes:
        print(f"  {shape.label:28} k0 {shape.ref_ms:.4f} ms  {rewrite} {shape.cand_ms:.4f} ms  x{shape.speedup:.2f}")


# -- tensor descriptors (TMA on Hopper) ------------------------------------------------------------------------
MM_DESCRIPTORS = '''
import torch
import triton
import triton.language as tl


@triton.jit
def mm_desc(a_ptr, b_ptr, c_ptr, M, N, K, BM: tl.constexpr, BN: tl.constexpr, BK: tl.constexpr):
    pid_m = tl.program_id(0)
    pid_n = tl.program_id(1)
    a_desc = tl.make_tensor_descriptor(a_ptr, shape=[M, K], strides=[K, 1], block_shape=[BM, BK])
    b_desc = tl.make_tensor_descriptor(b_ptr, shape=[K, N], strides=[N, 1], block_shape=[BK, BN])
    c_desc = tl.make_tensor_descriptor(c_ptr, shape=[M, N], strides=[N, 1], block_shape=[BM, BN])
    acc = tl.zeros((BM, BN), dtype=tl.float32)
    for k in range(0, K, BK):
        a = a_desc.load([pid_m * BM, k])
        b = b_desc.load([k, pid_n * BN])
        acc = tl.dot(a, b, acc)
    c_desc.store([pid_m * BM, pid_n * BN], acc.to(tl.float16))


def matmul(a, b):
    M, K = a.shape
    _, N = b.shape
    c = torch.empty((M, N), device=a.device, dtype=torch.float16)
    mm_desc[(triton.cdiv(M, 64), triton.cdiv(N, 64))](a, b, c, M, N, K, BM=64, BN=64, BK=32)
    return c
'''


@pytest.mark.slow
@pytest.mark.parametrize("rewrite", ["matmul_configs", "persistent_tiles", "grouped_ordering"])
def test_a_gemm_through_tensor_descriptors_gets_its_tile_rewrites_and_keeps_its_outputs(rewrite):
    """Tensor descriptors bound every access (TMA pads and clips): the tiles are free, read from the
    descriptors' block shapes. Each variant (each config alone) gives the original's outputs in the interpreter."""
    from respellings import Spelling
    from respellings.check import same_outputs

    made_, _ = made(MM_DESCRIPTORS, rewrite)
    assert made_
    spelling = Spelling("gemm", "descriptors", MM_DESCRIPTORS, "matmul",
                        "args = [torch.randn(70, 48).half(), torch.randn(48, 56).half()]", (rewrite,), atol=2e-2)
    same_outputs(spelling, [each for _, new in made_ for _, each in one_config_each(new)])  # in one process
