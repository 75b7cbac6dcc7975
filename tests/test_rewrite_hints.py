"""contiguity_hints: tl.max_contiguous / tl.multiple_of where an offset vector is certain to be P consecutive values
from a multiple of P, and nowhere else."""

from __future__ import annotations

import pytest

from kernelband.proposers.rewriter.proposer import options
from kernelband.tasks import load_task

KERNEL = '''\
import torch
import triton
import triton.language as tl


@triton.jit
def k(x_ptr, out_ptr, n, BLOCK: tl.constexpr):
    pid = tl.program_id(0)
{body}
    tl.store(out_ptr + offs, tl.load(x_ptr + offs, mask=offs < n), mask=offs < n)


def f(x):
    out = torch.empty_like(x)
    k[(triton.cdiv(x.numel(), 128),)](x, out, x.numel(), BLOCK=128)
    return out
'''


def hinted(body: str) -> tuple[list[str], tuple[str, ...]]:
    """The changed lines of each variant, and the reasons for none."""
    source = KERNEL.format(body=body)
    found = options(source, ("contiguity_hints",))
    old = source.splitlines()
    return ([line.strip() for v in found.variants for line in v.apply(found.module).splitlines() if line not in old],
            found.reasons)


HINT = "tl.max_contiguous(tl.multiple_of({}, BLOCK), BLOCK)"


@pytest.mark.parametrize("body, value", [
    ("    offs = pid * BLOCK + tl.arange(0, BLOCK)", "pid * BLOCK + tl.arange(0, BLOCK)"),
    ("    offs = tl.arange(0, BLOCK) + BLOCK * pid", "tl.arange(0, BLOCK) + BLOCK * pid"),
    ("    start = pid * BLOCK\n    offs = start + tl.arange(0, BLOCK)", "start + tl.arange(0, BLOCK)"),
    ("    q = tl.cdiv(n, BLOCK)\n    r = pid // q + pid % q\n    offs = r * BLOCK + tl.arange(0, BLOCK)",
     "r * BLOCK + tl.arange(0, BLOCK)"),
    ("    for s in range(0, n, BLOCK):\n        offs = s + tl.arange(0, BLOCK)", "s + tl.arange(0, BLOCK)"),
])
def test_offsets_from_a_multiple_of_the_block_get_both_hints(body, value):
    lines, _ = hinted(body)
    assert lines == [f"offs = {HINT.format(value)}"]


@pytest.mark.parametrize("body", [
    "    offs = (pid * BLOCK + tl.arange(0, BLOCK)) % n",  # wraps: not one contiguous run
    "    offs = pid * 3 + tl.arange(0, BLOCK)",  # the start is not a multiple of the block
    "    offs = pid * BLOCK + 1 + tl.arange(0, BLOCK)",
    "    x = tl.load(x_ptr + pid)\n    offs = x * BLOCK + tl.arange(0, BLOCK)",  # a loaded value may be a tensor
    "    v = pid + tl.arange(0, BLOCK)\n    offs = v * BLOCK + tl.arange(0, BLOCK)",  # a tensor times the block
    "    n = tl.load(x_ptr + tl.arange(0, BLOCK))\n    offs = n * BLOCK + tl.arange(0, BLOCK)",  # a rebound parameter
    "    for s in range(1, n, BLOCK):\n        offs = s + tl.arange(0, BLOCK)",  # starts at 1
    "    for s in range(0, n, 64):\n        offs = s + tl.arange(0, BLOCK)",  # steps by another size
    "    s = pid * BLOCK\n    s += 1\n    offs = s + tl.arange(0, BLOCK)",  # rebound
    "    offs = tl.arange(0, BLOCK)",  # nothing to add: the compiler knows it
])
def test_offsets_not_certain_to_be_aligned_get_none(body):
    lines, reasons = hinted(body)
    assert lines == [] and reasons == ("k has no offsets `M + tl.arange(0, P)` whose start M is certain to be a multiple of P",)


def test_the_matmul_example_gets_hints_on_both_tile_offsets():
    source = load_task("examples:matmul").module_source
    found = options(source, ("contiguity_hints",))
    [variant] = found.variants
    new = variant.apply(found.module)
    assert "offs_m = tl.max_contiguous(tl.multiple_of(pid_m * BLOCK_M + tl.arange(0, BLOCK_M), BLOCK_M), BLOCK_M)" \
        in new
    assert "offs_n = tl.max_contiguous(tl.multiple_of(pid_n * BLOCK_N + tl.arange(0, BLOCK_N), BLOCK_N), BLOCK_N)" \
        in new
    assert "offs_k = tl.arange(0, BLOCK_K)\n" in new and variant.rationale.startswith(
        "tl.max_contiguous(tl.multiple_of(..., P), P) on offs_m, offs_n in matmul_kernel")


def test_hints_keep_the_block_free_for_the_config_sets_and_stop_rows_adding_an_axis():
    """inductor_configs still tunes a hinted kernel (the hints follow the block); rows does not rewrite one, whose
    hints give one value for each of the offsets' axes."""
    source = load_task("examples:vector_add").module_source
    found = options(source, ("contiguity_hints",))
    new = found.variants[0].apply(found.module)
    assert options(new, ("inductor_configs",)).variants and options(new, ("block_size",)).variants
    assert options(source, ("rows",)).variants and not options(new, ("rows",)).variants


@pytest.mark.slow
@pytest.mark.parametrize("name", ["vector_add", "transpose", "dequantize"])
def test_a_hinted_example_gives_the_same_outputs_in_the_interpreter(evaluator, name):
    task = load_task(f"examples:{name}")
    found = options(task.module_source, ("contiguity_hints",))
    result = evaluator.evaluate(task, found.variants[0].apply(found.module), seed=4)
    assert result.ok, (result.outcome, result.detail, result.error[-2000:])
