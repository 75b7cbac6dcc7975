"""split_k on GEMMs spelled as users write them, with the outputs of the original where the split runs (the
interpreter's 4 "SMs"): an epilogue that updates the accumulator in place (a linear layer's `acc = acc + bias`,
`acc = tl.maximum(acc, 0.0)`), where each split stores the loop's partial sum alone and the bias and ReLU apply
once, to the full sum; and a batched product whose output base pointer is computed before the K loop, which the
twin computes after it, from the workspace in a partial program; and a K passed as a constexpr."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))

from respellings.gemm import BATCHED_BASES, K_CONSTEXPR, LINEAR_BIAS_RELU  # noqa: E402
from test_rewrites_matmul import interpreted_pair, kernel_text  # noqa: E402

from kernelband.proposers.rewriter.proposer import options  # noqa: E402


def split_variant(source: str) -> str:
    found = options(source, ("split_k",))
    assert len(found.variants) == 1, found.reasons
    return found.variants[0].apply(found.module)


def test_a_partial_split_runs_only_the_stores_addressing_and_the_reduction_runs_the_whole_epilogue():
    new = split_variant(LINEAR_BIAS_RELU)
    twin = kernel_text(new, "linear_relu_kernel_split_k")
    reduce, partial = twin.split("    else:\n")
    assert "acc = acc + bias[None, :].to(tl.float32)" in reduce and "acc = tl.maximum(acc, 0.0)" in reduce
    assert "bias" not in partial and "tl.maximum(acc" not in partial
    assert "        tl.store(y_ptrs, acc, mask=" in partial


def test_a_store_masked_by_a_value_of_the_accumulator_is_refused():
    """A mask read from the accumulator would differ between a partial sum and the full one (a partial store
    would leave the workspace unwritten where its partial sum fails the test), whether or not the epilogue
    updates the accumulator first."""
    store = "    tl.store(y_ptrs, acc.to(tl.float16), mask=(offs_m[:, None] < M) & (offs_n[None, :] < N))\n"
    relu, bias = "    acc = tl.maximum(acc, 0.0)\n", "    acc = acc + bias[None, :].to(tl.float32)\n"
    assert store in LINEAR_BIAS_RELU and relu in LINEAR_BIAS_RELU and bias in LINEAR_BIAS_RELU
    for source in (LINEAR_BIAS_RELU, LINEAR_BIAS_RELU.replace(relu, ""),
                   LINEAR_BIAS_RELU.replace(relu, "").replace(bias, "")):
        masked = source.replace(store, "    keep = acc > 0.5\n" + store.replace("mask=", "mask=keep & "))
        found = options(masked, ("split_k",))
        assert not found.variants and found.reasons == (
            "linear_relu_kernel's store addresses or masks with a value computed from acc",)


@pytest.mark.slow
def test_split_k_of_an_epilogue_that_updates_the_accumulator_gives_the_originals_outputs_in_the_interpreter():
    """One 32 x 32 tile and K = 512 take SPLIT_K = 4; two tiles and K = 260 take 2; six tiles take the original
    launch. A ReLU after the bias makes a per-split epilogue visible: it would clip each partial sum."""
    new = split_variant(LINEAR_BIAS_RELU)
    shapes = {(16, 32, 512): 4, (40, 20, 260): 2, (50, 70, 45): 1}
    check = f"""
variant.linear_relu_kernel_split_k = Recorded(variant.linear_relu_kernel_split_k)
for (M, N, K), expected in {shapes!r}.items():
    x = torch.randn(M, K).half()
    w = (torch.randn(N, K) * K**-0.5).half()
    bias = torch.randn(N).half()
    grids.clear()
    got, want = variant.linear_relu(x, w, bias), original.linear_relu(x, w, bias)
    assert torch.allclose(got.float(), want.float(), atol=1e-3, rtol=1e-2), (M, N, K)
    assert [g[-1] for g in grids[:1]] == ([expected] if expected > 1 else []), grids
"""
    interpreted_pair(LINEAR_BIAS_RELU, new, check)


def test_an_output_base_computed_before_the_k_loop_is_computed_after_it_in_the_twin():
    new = split_variant(BATCHED_BASES)
    twin = kernel_text(new, "batched_matmul_kernel_split_k")
    head, branches = twin.split("    if REDUCE:\n")
    assert "c_base" not in head and "a_base = a_ptr + batch * batch_stride_a" in head
    reduce, partial = branches.split("    else:\n")
    assert "            c_base = ws_base + batch * batch_stride_c\n" in reduce  # each split's partial tile
    assert "        c_base = c_ptr + batch * batch_stride_c\n" in reduce
    assert "        c_base = ws_base + batch * batch_stride_c\n" in partial


def test_an_output_read_before_the_k_loop_stays_a_refusal():
    """C += A @ B with C's old tile loaded before the loop: the kernel reads the output, which a split would
    read once per split; it stays refused."""
    store = "    tl.store(c_base + offs_m[:, None] * N"
    accumulate = BATCHED_BASES.replace("    acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)\n", (
        "    acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)\n"
        "    old = tl.load(c_base + offs_m[:, None] * N + offs_n[None, :], mask=(offs_m[:, None] < M) & "
        "(offs_n[None, :] < N), other=0.0)\n")).replace(store, "    acc += old.to(tl.float32)\n" + store)
    assert "acc += old" in accumulate
    found = options(accumulate, ("split_k",))
    assert not found.variants and found.reasons == ("batched_matmul_kernel reads and writes c_ptr",)


@pytest.mark.slow
def test_split_k_of_a_batched_product_with_its_output_base_before_the_loop_gives_the_originals_outputs():
    """Two batches of one 32 x 32 tile each and K = 512 take SPLIT_K = 2 (4 "SMs" over 2 tiles); three batches
    of two tiles take the original launch."""
    new = split_variant(BATCHED_BASES)
    shapes = {(2, 16, 32, 512): 2, (3, 40, 20, 130): 1}
    check = f"""
variant.batched_matmul_kernel_split_k = Recorded(variant.batched_matmul_kernel_split_k)
for (B, M, N, K), expected in {shapes!r}.items():
    a = torch.randn(B, M, K).half()
    b = (torch.randn(B, K, N) * K**-0.5).half()
    grids.clear()
    got, want = variant.bmm(a, b), original.bmm(a, b)
    assert torch.allclose(got.float(), want.float(), atol=1e-3, rtol=1e-2), (B, M, N, K)
    assert [g[-1] for g in grids[:1]] == ([expected] if expected > 1 else []), grids
"""
    interpreted_pair(BATCHED_BASES, new, check)


@pytest.mark.slow
def test_split_k_of_a_constexpr_k_gives_the_originals_outputs_in_the_interpreter():
    """One 32 x 32 tile and K = 512 take SPLIT_K = 4, K = 256 takes 2 (each split keeps 4 K steps)."""
    new = split_variant(K_CONSTEXPR)
    assert "k_per_split = tl.cdiv(tl.cdiv(K, BLOCK_K), SPLIT_K) * BLOCK_K" in new
    shapes = {(16, 32, 512): 4, (20, 8, 256): 2, (64, 64, 96): 1}
    check = f"""
variant.matmul_k_const_split_k = Recorded(variant.matmul_k_const_split_k)
for (M, N, K), expected in {shapes!r}.items():
    a = torch.randn(M, K).half()
    b = (torch.randn(K, N) * K**-0.5).half()
    grids.clear()
    got, want = variant.matmul(a, b), original.matmul(a, b)
    assert torch.allclose(got.float(), want.float(), atol=1e-3, rtol=1e-2), (M, N, K)
    assert [g[-1] for g in grids[:1]] == ([expected] if expected > 1 else []), grids
"""
    interpreted_pair(K_CONSTEXPR, new, check)
