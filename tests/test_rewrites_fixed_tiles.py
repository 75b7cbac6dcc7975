"""The tile rewrites on a GEMM whose tiles are integers of the source, not constexpr parameters: `tl.arange(0, 64)`
inline, a local `BLOCK_M: tl.constexpr = 64`, a module constant. A fixed tile is a tile of M, N or K as much as a
constexpr's (`analysis.dots.Tile`, `Roles.fixed_tiles`): split_k splits the K loop by it, persistent_tiles loops
over its tiles and grouped_ordering visits them in groups, with the original's outputs in the interpreter;
matmul_configs, which changes tiles, sets those a parameter sizes and keeps the fixed ones at their size."""

from __future__ import annotations

import pytest
from interpreted import run_modules
from test_rewrite_correctness import one_config_each
from test_rewrites_matmul import interpreted_pair, kernel_text
from test_rewrites_structural import made, made_plain

from kernelband.proposers.rewriter.analysis.dots import Tile
from kernelband.proposers.rewriter.analysis.facts import facts_of
from kernelband.proposers.rewriter.analysis.source import ModuleSource

# The tiles as a user writes them inline: the offsets, the accumulator, the K loop and the grid.
INLINE = '''\
import torch
import triton
import triton.language as tl


@triton.jit
def mm_kernel(a_ptr, b_ptr, c_ptr, M, N, K):
    pid_m = tl.program_id(axis=0)
    pid_n = tl.program_id(axis=1)
    offs_m = pid_m * 64 + tl.arange(0, 64)
    offs_n = pid_n * 64 + tl.arange(0, 64)
    offs_k = tl.arange(0, 32)
    acc = tl.zeros((64, 64), dtype=tl.float32)
    for k in range(0, K, 32):
        a = tl.load(a_ptr + offs_m[:, None] * K + (k + offs_k)[None, :],
                    mask=(offs_m[:, None] < M) & ((k + offs_k)[None, :] < K), other=0.0)
        b = tl.load(b_ptr + (k + offs_k)[:, None] * N + offs_n[None, :],
                    mask=((k + offs_k)[:, None] < K) & (offs_n[None, :] < N), other=0.0)
        acc += tl.dot(a, b)
    tl.store(c_ptr + offs_m[:, None] * N + offs_n[None, :], acc, mask=(offs_m[:, None] < M) & (offs_n[None, :] < N))


def mm(a, b):
    M, K = a.shape
    _, N = b.shape
    c = torch.empty((M, N), device=a.device)
    mm_kernel[(triton.cdiv(M, 64), triton.cdiv(N, 64))](a, b, c, M, N, K)
    return c
'''

NAMED = (INLINE.replace("pid_m * 64 + tl.arange(0, 64)", "pid_m * BLOCK_M + tl.arange(0, BLOCK_M)")
         .replace("pid_n * 64 + tl.arange(0, 64)", "pid_n * BLOCK_N + tl.arange(0, BLOCK_N)")
         .replace("tl.arange(0, 32)", "tl.arange(0, BLOCK_K)").replace("range(0, K, 32)", "range(0, K, BLOCK_K)")
         .replace("tl.zeros((64, 64)", "tl.zeros((BLOCK_M, BLOCK_N)"))
# Constexpr locals of the kernel, bound once.
LOCAL = NAMED.replace("    pid_m = tl.program_id(axis=0)\n", "    BLOCK_M: tl.constexpr = 64\n"
                      "    BLOCK_N: tl.constexpr = 64\n    BLOCK_K: tl.constexpr = 32\n"
                      "    pid_m = tl.program_id(axis=0)\n")
# Module constants (Triton reads a global only as a constexpr), which the host's grid reads too.
MODULE = NAMED.replace("\n\n@triton.jit", "\nBLOCK_M: tl.constexpr = 64\nBLOCK_N = tl.constexpr(64)\n"
                       "BLOCK_K: tl.constexpr = 32\n\n\n@triton.jit").replace(
    "(triton.cdiv(M, 64), triton.cdiv(N, 64))", "(triton.cdiv(M, BLOCK_M), triton.cdiv(N, BLOCK_N))")
SPELLINGS = {"inline": INLINE, "local": LOCAL, "module": MODULE}

# BLOCK_M and BLOCK_N parameters beside a K tile of 32 inline.
MIXED = (INLINE.replace("def mm_kernel(a_ptr, b_ptr, c_ptr, M, N, K):",
                        "def mm_kernel(a_ptr, b_ptr, c_ptr, M, N, K, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr):")
         .replace("pid_m * 64 + tl.arange(0, 64)", "pid_m * BLOCK_M + tl.arange(0, BLOCK_M)")
         .replace("pid_n * 64 + tl.arange(0, 64)", "pid_n * BLOCK_N + tl.arange(0, BLOCK_N)")
         .replace("tl.zeros((64, 64)", "tl.zeros((BLOCK_M, BLOCK_N)")
         .replace("mm_kernel[(triton.cdiv(M, 64), triton.cdiv(N, 64))](a, b, c, M, N, K)",
                  "mm_kernel[(triton.cdiv(M, 64), triton.cdiv(N, 32))](a, b, c, M, N, K, BLOCK_M=64, BLOCK_N=32)"))


def gemm_tiles(source: str) -> tuple[Tile, Tile, Tile, str]:
    [dot] = facts_of(ModuleSource(source).kernels["mm_kernel"]).dots.all
    return dot.m, dot.n, dot.k, dot.why


def test_a_tile_the_source_fixes_is_a_tile_of_the_gemm_in_every_spelling():
    assert gemm_tiles(INLINE) == (Tile("64", size=64), Tile("64", size=64), Tile("32", size=32), "")
    assert gemm_tiles(LOCAL) == gemm_tiles(INLINE)  # a constexpr local bound once reads as its value
    m, n, k, why = gemm_tiles(MODULE)
    assert (m.code, m.text, n.text, k.text, why) == ("BLOCK_M", "64", "64", "32", "")
    assert all(t.fixed for t in (m, n, k))
    m, n, k, why = gemm_tiles(MIXED)
    assert (m, n, k, why) == (Tile("BLOCK_M", param="BLOCK_M"), Tile("BLOCK_N", param="BLOCK_N"),
                              Tile("32", size=32), "")


def test_a_k_loop_that_does_not_step_by_the_fixed_k_tile_is_not_a_gemm_over_it():
    skipping = INLINE.replace("range(0, K, 32)", "range(0, K, 64)")
    assert gemm_tiles(skipping)[3] == "the loop around mm_kernel's tl.dot does not step by its K tile (32)"
    for rewrite in ("split_k", "persistent_tiles"):
        assert made(skipping, rewrite)[0] == []


@pytest.mark.parametrize("spelling", sorted(SPELLINGS))
def test_split_k_splits_the_k_loop_by_the_fixed_k_tile(spelling):
    [(rationale, new)], reasons = made_plain(SPELLINGS[spelling], "split_k")
    assert reasons == ()
    assert rationale.startswith("mm_kernel's K loop split over a third grid axis")
    twin = kernel_text(new, "mm_kernel_split_k")
    assert "k_per_split = tl.cdiv(tl.cdiv(K, 32), SPLIT_K) * 32\n" in twin
    assert "for k in range(k_start, tl.minimum(K, k_start + k_per_split), 32):\n" in twin
    grid = "(triton.cdiv(M, BLOCK_M), triton.cdiv(N, BLOCK_N))" if spelling == "module" else \
        "(triton.cdiv(M, 64), triton.cdiv(N, 64))"
    assert f"    _grid = tuple({grid})\n" in new
    assert "    _split_k = max(1, min(16, _sms // max(1, _tiles), triton.cdiv(K, 4 * 32))) if len(_grid) <= 2 " \
           "else 1\n" in new
    assert "mm_kernel_split_k[_grid + (1,) * (2 - len(_grid)) + (_split_k,)](a, b, c, M, N, K, ws_ptr=" in new
    assert f"        mm_kernel[{grid}](a, b, c, M, N, K)\n" in new  # the original launch, where no split pays


@pytest.mark.parametrize("spelling", sorted(SPELLINGS))
def test_persistent_tiles_loop_over_the_fixed_tiles_of_the_original_grid(spelling):
    [(rationale, new)], reasons = made_plain(SPELLINGS[spelling], "persistent_tiles")
    assert reasons == ()
    assert rationale.startswith("mm_kernel on one program per SM")
    twin = kernel_text(new, "mm_kernel_persistent")
    assert "    for tile in range(tl.program_id(axis=0), G0 * G1, NUM_PROGS):\n" in twin
    assert "        pid_m = (tile % G0)\n        pid_n = (tile // G0)\n" in twin
    assert "mm_kernel_persistent[(_sms,)](a, b, c, M, N, K, G0=_grid[0], G1=_tiles // _grid[0], NUM_PROGS=_sms)" \
        in new


def test_matmul_configs_sets_the_tiles_a_parameter_sizes_and_keeps_the_fixed_ones():
    # every tile fixed: read through the literals lifted to constexprs (rewrites/literal_tiles.py), M and N one
    # square tile, so only the tables' square configs
    variants, reasons = made(INLINE, "matmul_configs")
    assert [rationale.split(": @")[0] for rationale, _ in variants] == [
        "mm_kernel's literal tiles as constexprs (BLOCK_MN=64, BLOCK_K=32); Triton's matmul tutorial configs",
        "mm_kernel's literal tiles as constexprs (BLOCK_MN=64, BLOCK_K=32); Inductor's mm configs"]
    assert 'triton.Config({"BLOCK_MN": 128, "BLOCK_K": 32}' in variants[0][1]
    [(tutorial, new), (inductor, _)], _ = made_plain(MIXED, "matmul_configs")
    assert tutorial.startswith("Triton's matmul tutorial configs: @triton.autotune on mm_kernel: 9 configs over "
                               "BLOCK_M, BLOCK_N, num_warps, num_stages")
    # Inductor's 8 configs differ in BLOCK_K alone in two pairs: 6 of them, and the launch's own
    assert inductor.startswith("Inductor's mm configs: @triton.autotune on mm_kernel: 7 configs over BLOCK_M, BLOCK_N")
    assert 'triton.Config({"BLOCK_M": 128, "BLOCK_N": 256}, num_warps=8, num_stages=3)' in new
    assert "BLOCK_K" not in new
    assert 'mm_kernel[lambda meta: (triton.cdiv(M, meta["BLOCK_M"]), triton.cdiv(N, meta["BLOCK_N"]))]' in new


@pytest.mark.parametrize("spelling", sorted(SPELLINGS))
def test_grouped_ordering_groups_the_rows_of_fixed_tiles(spelling):
    """`pid_m * 64` and `pid_n * 64` tile program ids 0 and 1: a 2-D tiling, grouped as a constexpr's would be."""
    variants, reasons = made(SPELLINGS[spelling], "grouped_ordering")
    assert reasons == () and [r for r, _ in variants] == [
        f"grouped program order in mm_kernel: GROUP_M = {size} row tiles per column sweep" for size in (8, 4, 16)]
    assert "    pid = tl.program_id(1) * num_pid_m + tl.program_id(0)\n" in variants[0][1]


# -- the same outputs in the interpreter ----------------------------------------------------------------------
# (M, N, K, the split the launch takes): one 64 x 64 tile on 4 CPU "SMs" splits K = 520 in min(4, cdiv(520, 128))
# = 4 and K = 300 in 3; 4 x 3 tiles are more than 4: the persistent launch; one tile of 64 x 64 x 64 neither.
SHAPES = [(20, 30, 520, 4), (40, 20, 300, 3), (200, 150, 40, 1), (64, 64, 64, 1)]


@pytest.mark.slow
@pytest.mark.parametrize("spelling", sorted(SPELLINGS))
@pytest.mark.parametrize("rewrite, twin", [("split_k", "mm_kernel_split_k"),
                                           ("persistent_tiles", "mm_kernel_persistent")])
def test_each_gives_the_originals_outputs_in_the_interpreter(spelling, rewrite, twin):
    """split_k: the float32 partial sums differ from the original's sum only in rounding; persistent_tiles:
    each tile computed as its program computed it, exactly."""
    source = SPELLINGS[spelling]
    [(_, new)], _ = made(source, rewrite)
    if rewrite == "split_k":
        taken = "[g[-1] for g in grids[:1]] == ([split] if split > 1 else [])"
        same = "torch.allclose(got, want, atol=1e-4, rtol=1e-4)"
    else:
        taken = "grids == ([(4,)] if -(-M // 64) * -(-N // 64) > 4 else [])"
        same = "torch.equal(got, want)"
    interpreted_pair(source, new, f"""
variant.{twin} = Recorded(variant.{twin})
for M, N, K, split in {SHAPES!r}:
    a, b = torch.randn(M, K), torch.randn(K, N)
    grids.clear()
    got, want = variant.mm(a, b), original.mm(a, b)
    assert {same}, (M, N, K, (got - want).abs().max())
    assert {taken}, (M, N, K, grids)
""")


@pytest.mark.slow
def test_matmul_configs_on_a_fixed_k_tile_give_the_originals_outputs_in_the_interpreter():
    """Every config of both sets, one at a time, against the original on shapes no tile divides."""
    modules = {"kb_original": MIXED}
    for index, (_, variant) in enumerate(made(MIXED, "matmul_configs")[0]):
        for at, (_, one) in enumerate(one_config_each(variant)):
            modules[f"kb_variant_{index}_{at}"] = one
    run_modules(modules, f"""
import importlib, torch
import kb_original as original
torch.manual_seed(0)
for M, N, K in [(20, 30, 520), (200, 150, 40), (100, 70, 96)]:
    a, b = torch.randn(M, K), torch.randn(K, N)
    want = original.mm(a, b)
    for name in {sorted(set(modules) - {"kb_original"})!r}:
        got = importlib.import_module(name).mm(a, b)
        assert torch.allclose(got, want, atol=1e-4, rtol=1e-4), (name, M, N, K)
""")


@pytest.mark.slow
def test_grouped_ordering_and_the_twins_after_it_give_the_originals_outputs_in_the_interpreter():
    """The grouped order computes each tile as the original did, exactly; split_k and persistent_tiles on top
    of it (1 tile split in 4; 5 x 3 tiles on 4 programs) as on the original."""
    [(_, grouped), *_] = made(INLINE, "grouped_ordering")[0]
    [(_, split)], _ = made(grouped, "split_k")
    [(_, persistent)], _ = made(grouped, "persistent_tiles")
    run_modules({"kb_original": INLINE, "kb_grouped": grouped, "kb_split": split, "kb_persistent": persistent}, """
import torch
import kb_original as original, kb_grouped as grouped, kb_split as split, kb_persistent as persistent
torch.manual_seed(0)
for M, N, K in [(20, 30, 520), (300, 130, 64), (100, 70, 300)]:
    a, b = torch.randn(M, K), torch.randn(K, N)
    want = original.mm(a, b)
    assert torch.equal(grouped.mm(a, b), want), (M, N, K)
    assert torch.equal(persistent.mm(a, b), want), (M, N, K)
    assert torch.allclose(split.mm(a, b), want, atol=1e-4, rtol=1e-4), (M, N, K)
""")


def test_split_k_on_an_autotuned_kernel_counts_its_k_steps_at_the_fixed_k_tile():
    """No config sets the K tile: the split reads the source's 32, not a config's BLOCK_K."""
    [(_, tuned), _], _ = made(MIXED, "matmul_configs")
    [(_, new)], reasons = made_plain(tuned, "split_k")
    assert reasons == ()
    assert "    _split_k = max(1, min(16, _sms // max(1, _tiles), triton.cdiv(K, 4 * 32)))\n" in new
    assert len(made(tuned, "persistent_tiles")[0]) == 1


@pytest.mark.slow
@pytest.mark.parametrize("rewrite", ["split_k", "persistent_tiles"])
def test_after_matmul_configs_each_gives_the_originals_outputs_in_the_interpreter(rewrite):
    """The first three configs, one at a time: 64 x 32 (the launch's), 128 x 256 and 64 x 256."""
    [(_, tuned), _], _ = made(MIXED, "matmul_configs")
    [(_, new)], _ = made(tuned, rewrite)
    modules = {"kb_original": MIXED} | {f"kb_variant_{at}": one for at, (_, one) in enumerate(one_config_each(new)[:3])}
    run_modules(modules, f"""
import importlib, torch
import kb_original as original
torch.manual_seed(0)
for M, N, K in [(20, 30, 520), (300, 130, 64), (100, 70, 300)]:
    a, b = torch.randn(M, K), torch.randn(K, N)
    want = original.mm(a, b)
    for name in {sorted(set(modules) - {"kb_original"})!r}:
        got = importlib.import_module(name).mm(a, b)
        assert torch.allclose(got, want, atol=1e-4, rtol=1e-4), (name, M, N, K)
""")
