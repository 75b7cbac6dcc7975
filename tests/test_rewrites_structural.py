"""The structural rewrites: where each applies, where it refuses because the meaning of the change is not
certain, and that the rewritten kernel gives the starting kernel's outputs in the interpreter."""

from __future__ import annotations

import re

import pytest
from interpreted import interpreted
from test_rewrite_correctness import one_config_each

from kernelband.proposers.rewriter.proposer import options
from kernelband.proposers.rewriter.rewrites.inductor_configs import POINTWISE_XBLOCKS

ADD = '''\
import torch
import triton
import triton.language as tl


@triton.jit
def add_kernel(x_ptr, y_ptr, out_ptr, n, BLOCK: tl.constexpr):
    pid = tl.program_id(axis=0)
    offs = pid * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    x = tl.load(x_ptr + offs, mask=mask)
    y = tl.load(y_ptr + offs, mask=mask)
    tl.store(out_ptr + offs, x + y, mask=mask)


def add(x, y):
    out = torch.empty_like(x)
    n = out.numel()
    add_kernel[(triton.cdiv(n, 128),)](x, y, out, n, BLOCK=128)
    return out
'''

ROW_SUM = '''\
import torch
import triton
import triton.language as tl


@triton.jit
def row_sum_kernel(x_ptr, out_ptr, n_cols, BLOCK: tl.constexpr):
    row = tl.program_id(0)
    cols = tl.arange(0, BLOCK)
    acc = tl.zeros([BLOCK], tl.float32)
    for start in range(0, n_cols, BLOCK):
        acc += tl.load(x_ptr + row * n_cols + start + cols, mask=start + cols < n_cols, other=0.0)
    tl.store(out_ptr + row, tl.sum(acc, axis=0))


def row_sum(x):
    out = torch.empty(x.shape[0], device=x.device)
    row_sum_kernel[(x.shape[0],)](x, out, x.shape[1], BLOCK=64)
    return out
'''

MM = '''\
import torch
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
        a = tl.load(a_ptr + offs_m[:, None] * K + (k + offs_k)[None, :],
                    mask=(offs_m[:, None] < M) & ((k + offs_k)[None, :] < K), other=0.0)
        b = tl.load(b_ptr + (k + offs_k)[:, None] * N + offs_n[None, :],
                    mask=((k + offs_k)[:, None] < K) & (offs_n[None, :] < N), other=0.0)
        acc = tl.dot(a, b, acc)
    tl.store(c_ptr + offs_m[:, None] * N + offs_n[None, :], acc, mask=(offs_m[:, None] < M) & (offs_n[None, :] < N))


def mm(a, b):
    M, K = a.shape
    _, N = b.shape
    c = torch.empty((M, N), device=a.device)
    mm_kernel[(triton.cdiv(M, 32), triton.cdiv(N, 32))](a, b, c, M, N, K, BLOCK_M=32, BLOCK_N=32, BLOCK_K=32)
    return c
'''


def made(source: str, rewrite: str) -> tuple[list[tuple[str, str]], tuple[str, ...]]:
    found = options(source, (rewrite,))
    return [(v.rationale, v.apply(found.module)) for v in found.variants], found.reasons


def made_plain(source: str, rewrite: str) -> tuple[list[tuple[str, str]], tuple[str, ...]]:
    """`made` by the rewrite alone: without the divisibility hints the tl.dot tile rewrites carry
    (`divisibility_hints.aligned`), its own text."""
    from kernelband.proposers.rewriter.analysis.source import ModuleSource
    from kernelband.proposers.rewriter.registry import REWRITES

    module = ModuleSource(source)
    found = getattr(REWRITES[rewrite], "plain", REWRITES[rewrite])(module)
    return [(v.rationale, v.apply(module)) for v in found.variants], tuple(dict.fromkeys(found.reasons))


def configs(source: str) -> list[str]:
    return re.findall(r"triton\.Config\((.*)\),\n", source)


def example(name: str):
    from kernelband.tasks import load_task

    return load_task(f"examples:{name}")


# -- inductor_configs -----------------------------------------------------------------------------------------
def test_an_element_wise_kernel_gets_inductors_pointwise_configs():
    [(rationale, new)] = made(ADD, "inductor_configs")[0]
    assert rationale.startswith("Inductor's pointwise configs: @triton.autotune on add_kernel: 9 configs")
    assert configs(new)[0] == '{"BLOCK": 128}, num_warps=4'  # the launch's own config first
    assert configs(new)[1:] == [f'{{"BLOCK": {x}}}, num_warps={w}, num_stages=1' for x, w in POINTWISE_XBLOCKS]
    assert ('    add_kernel[lambda meta: (triton.cdiv(n, meta["BLOCK"]),)](x, y, out, n, '
            'tune_numel=x.numel() + y.numel() + out.numel())\n') in new


def test_a_row_kernel_gets_inductors_reduction_configs():
    [(rationale, new)] = made(ROW_SUM, "inductor_configs")[0]
    assert rationale.startswith("Inductor's reduction configs: @triton.autotune on row_sum_kernel")
    blocks = [(int(b), int(w)) for b, w in re.findall(r'"BLOCK": (\d+)}, num_warps=(\d+)', new)]
    assert blocks == [(64, 4), (1024, 8), (2048, 16), (2048, 8), (512, 4), (256, 2), (4096, 16), (8192, 16),
                      (128, 2)]  # the launch's own first
    assert "row_sum_kernel[(x.shape[0],)](x, out, x.shape[1], tune_numel=" in new


@pytest.mark.parametrize("name, kind", [("vector_add", "pointwise"), ("dequantize", "pointwise"),
                                        ("dropout", "pointwise"), ("softmax", "reduction"),
                                        ("rmsnorm", "reduction"), ("layernorm", "reduction")])
def test_inductor_configs_apply_to_the_row_and_element_wise_examples(name, kind):
    [(rationale, new)] = made(example(name).module_source, "inductor_configs")[0]
    assert rationale.startswith(f"Inductor's {kind} configs")
    compile(new, name, "exec")


@pytest.mark.parametrize("old, new, reason", [
    ("    x = tl.load(x_ptr + offs, mask=mask)\n", "    x = tl.load(x_ptr + offs)\n",
     "add_kernel has 1 unmasked tl.load/tl.store: a larger tile would reach past the end of its tensors"),
    ("    tl.store(out_ptr + offs, x + y, mask=mask)\n", "    tl.store(out_ptr + offs, x + y)\n",
     "add_kernel has 1 unmasked tl.load/tl.store: a larger tile would reach past the end of its tensors"),
    ("    tl.store(out_ptr + offs, x + y, mask=mask)\n", "    tl.store(out_ptr + pid, tl.sum(x + y, axis=0), mask=pid < n)\n",
     "add_kernel reduces or loops inside its block: not element-wise"),  # per-block sums change with the block
    ("    y = tl.load(y_ptr + offs, mask=mask)\n", "    y = tl.load(y_ptr + offs % BLOCK, mask=mask)\n",
     "add_kernel reads BLOCK other than as its arange extent and program stride"),
    ("    x = tl.load(x_ptr + offs, mask=mask)\n", "    x = tl.cumsum(tl.load(x_ptr + offs, mask=mask), 0)\n",
     "add_kernel calls tl.cumsum, whose result depends on the tile's extent"),
])
def test_inductor_configs_refuse_an_element_wise_kernel_whose_meaning_depends_on_the_block(old, new, reason):
    source = ADD.replace(old, new)
    assert source != ADD
    variants, reasons = made(source, "inductor_configs")
    assert not variants and reasons == (reason,)


@pytest.mark.parametrize("old, new, reason", [
    ("    tl.store(out_ptr + row, tl.sum(acc, axis=0))\n", "    tl.store(out_ptr + row, tl.sum(acc, axis=0) / BLOCK)\n",
     "row_sum_kernel reads BLOCK other than as a loop step, arange extent and accumulator shape"),
    ("    for start in range(0, n_cols, BLOCK):\n", "    for start in range(0, BLOCK * 4, BLOCK):\n",
     "row_sum_kernel reads BLOCK other than as a loop step, arange extent and accumulator shape"),
    ("    cols = tl.arange(0, BLOCK)\n", "    cols = tl.arange(0, BLOCK)[:, None] + tl.arange(0, BLOCK)[None, :]\n",
     "row_sum_kernel's tiles are not 1-D blocks of BLOCK"),
])
def test_inductor_configs_refuse_a_row_kernel_whose_meaning_depends_on_the_block(old, new, reason):
    source = ROW_SUM.replace(old, new)
    assert source != ROW_SUM
    variants, reasons = made(source, "inductor_configs")
    assert not variants and reasons == (reason,)


ADD_2D = """
import torch
import triton
import triton.language as tl


@triton.jit
def add2d(a_ptr, b_ptr, c_ptr, M, N, stride, BR: tl.constexpr, BC: tl.constexpr):
    r = tl.program_id(0) * BR + tl.arange(0, BR)[:, None]
    c = tl.program_id(1) * BC + tl.arange(0, BC)[None, :]
    mask = (r < M) & (c < N)
    tl.store(c_ptr + r * stride + c, tl.load(a_ptr + r * stride + c, mask=mask) + tl.load(b_ptr + r * stride + c,
                                                                                             mask=mask), mask=mask)


def add(a, b):
    M, N = a.shape
    c = torch.empty_like(a)
    add2d[(triton.cdiv(M, 16), triton.cdiv(N, 64))](a, b, c, M, N, a.stride(0), BR=16, BC=64)
    return c
"""


def test_a_kernel_over_2d_tiles_gets_inductors_2d_pointwise_configs_with_xblock_along_its_rows():
    """XBLOCK is the tile of the contiguous axis, the arange along the tile's last dimension (BC here); the grid's
    literal tiles follow the config."""
    from kernelband.proposers.rewriter.rewrites.inductor_configs import POINTWISE_2D_BLOCKS

    [(rationale, new)] = made(ADD_2D, "inductor_configs")[0]
    assert rationale.startswith("Inductor's 2-D pointwise configs")
    got = [(int(c), int(r)) for c, r in re.findall(r'"BC": (\d+), "BR": (\d+)', new)]
    assert got == list(POINTWISE_2D_BLOCKS)
    assert 'triton.cdiv(M, meta["BR"]), triton.cdiv(N, meta["BC"])' in new
    looped = ADD_2D.replace("    mask = (r < M) & (c < N)\n", "    for _ in range(2):\n        pass\n    mask = (r < M) & (c < N)\n")
    assert made(looped, "inductor_configs") == ([], ("add2d reduces or loops inside its 2-D tile: not element-wise",))


def test_inductor_configs_leave_tl_dot_and_2d_tiles_and_autotuned_kernels_alone():
    assert made(example("matmul").module_source, "inductor_configs")[1] == (
        "matmul_kernel tiles a tl.dot: matmul_configs tunes it",)
    assert made(example("transpose").module_source, "inductor_configs")[1] == (
        "transpose_kernel's tiles are not 1-D blocks of BLOCK",)
    [(_, tuned)] = made(ADD, "inductor_configs")[0]
    assert made(tuned, "inductor_configs") == (
        [], ("the autotune configs of add_kernel hold Inductor's pointwise configs already",))


# -- matmul_configs -------------------------------------------------------------------------------------------
def test_a_dot_kernel_gets_the_tutorials_and_inductors_matmul_configs():
    variants, _ = made_plain(MM, "matmul_configs")
    assert [r.split(":")[0] for r, _ in variants] == ["Triton's matmul tutorial configs", "Inductor's mm configs"]
    tutorial, inductor = (configs(new) for _, new in variants)
    assert tutorial[0] == inductor[0] == '{"BLOCK_M": 32, "BLOCK_N": 32, "BLOCK_K": 32}, num_warps=4'  # the launch's
    assert tutorial[1] == '{"BLOCK_M": 128, "BLOCK_N": 256, "BLOCK_K": 64}, num_warps=8, num_stages=3'
    assert '{"BLOCK_M": 128, "BLOCK_N": 128, "BLOCK_K": 64}, num_warps=8, num_stages=5' in inductor
    assert len(tutorial) == len(inductor) == 9
    new = variants[0][1]
    assert ('    mm_kernel[lambda meta: (triton.cdiv(M, meta["BLOCK_M"]), triton.cdiv(N, meta["BLOCK_N"]))](a, b, c, M, N, '
            'K, tune_numel=a.numel() + b.numel() + c.numel())\n') in new


def test_matmul_configs_apply_to_the_matmul_example():
    variants, _ = made(example("matmul").module_source, "matmul_configs")
    assert len(variants) == 2
    assert all("key ['M', 'N', 'K', 'tune_numel']" in r for r, _ in variants)


@pytest.mark.parametrize("old, new, reason", [
    ("        acc = tl.dot(a, b, acc)\n", "        acc += a * b\n", "mm_kernel has no tl.dot, nor calls a helper that has one"),
    ("    acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)\n",
     "    acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32) + tl.cumsum(tl.zeros((BLOCK_M, BLOCK_N), "
     "dtype=tl.float32), 1)\n", "tl.cumsum's result depends on the extent of BLOCK_N"),
])
def test_matmul_configs_refuse_where_a_tile_size_is_not_free(old, new, reason):
    source = MM.replace(old, new)
    assert source != MM
    variants, reasons = made(source, "matmul_configs")
    assert not variants and reasons[0] == reason


UNMASKED_A = MM.replace("                    mask=(offs_m[:, None] < M) & ((k + offs_k)[None, :] < K), other=0.0)",
                        "                    )")


def test_a_tile_along_which_a_load_is_not_masked_is_tuned_behind_a_check_that_it_divides_the_size():
    """A is read without a mask: a config's tiles must divide M and K. The autotuner prunes the others (the
    launch's own config stays where none does), and M and K are in its key, so each size is pruned anew."""
    variants, _ = made(UNMASKED_A, "matmul_configs")
    assert len(variants) == 2
    new = variants[0][1]
    assert 'prune_configs_by={"early_config_prune": _mm_kernel_tiles_divide}' in new
    assert ("    kept = [c for c in configs if all(named_args[size] % c.kwargs[tile] == 0 for tile, size in "
            '(("BLOCK_M", "M"), ("BLOCK_K", "K"),))]\n    return kept or configs[:1]\n') in new
    assert "key=[\"M\", \"N\", \"K\", \"tune_numel\"]" in new
    interpreted(new, "class C:\n    def __init__(self, **kwargs):\n        self.kwargs = kwargs\n"
                "configs = [C(BLOCK_M=32, BLOCK_K=32), C(BLOCK_M=64, BLOCK_K=64), C(BLOCK_M=128, BLOCK_K=32)]\n"
                "kept = module._mm_kernel_tiles_divide(configs, {'M': 192, 'K': 64, 'N': 5})\n"
                "assert kept == configs[:2], kept\n"
                "assert module._mm_kernel_tiles_divide(configs, {'M': 48, 'K': 48, 'N': 5}) == configs[:1]\n")
    for _, each in one_config_each(new):  # every config alone, on sizes they all divide
        interpreted(each, "a = torch.randn(128, 128).half(); b = torch.randn(128, 40).half()\n"
                    "assert torch.allclose(module.mm(a, b).float(), a.float() @ b.float(), atol=0.05, rtol=0.01)\n")


def test_a_config_set_needs_every_block_size_it_sets_to_be_free_at_the_launch():
    """A grid that does not follow BLOCK_M (64 rows a program in the grid, 32 in the kernel) cannot take a
    tuned BLOCK_M: no set is offered rather than a set without it."""
    variants, reasons = made(MM.replace("triton.cdiv(M, 32)", "triton.cdiv(M, 64)"), "matmul_configs")
    assert not variants
    assert reasons[0] == ("Triton's matmul tutorial configs set BLOCK_K, BLOCK_M, BLOCK_N but the launches of "
                          "mm_kernel let autotune set BLOCK_N, BLOCK_K")


# -- the same outputs in the interpreter ---------------------------------------------------------------------
def one_config(source: str, index: int) -> str:
    """The autotuned source with only its `index`-th config (the interpreter's autotuner runs every config but
    its outputs are checked only for the one it picks)."""
    lines = source.splitlines(keepends=True)
    at = [i for i, line in enumerate(lines) if line.lstrip().startswith("triton.Config(")]
    return "".join(line for i, line in enumerate(lines) if i not in at or i == at[index])


@pytest.mark.slow
@pytest.mark.parametrize("name, rewrite, variant, index", [
    ("vector_add", "inductor_configs", 0, 0),  # XBLOCK 1,024 over the interpreter's shapes
    ("softmax", "inductor_configs", 0, 0),  # RBLOCK 1,024: one iteration covers each row
    ("rmsnorm", "inductor_configs", 0, 7),  # RBLOCK 128: several iterations
    ("matmul", "matmul_configs", 0, 0),  # 128 x 256 x 64 tiles, larger than the matrices
    ("matmul", "matmul_configs", 1, 4),  # 128 x 128 x 32
])
def test_a_config_of_a_set_gives_the_same_outputs_in_the_interpreter(evaluator, name, rewrite, variant, index):
    task = example(name)
    variants, _ = made(task.module_source, rewrite)
    source = one_config(variants[variant][1], index)
    assert len(configs(source)) == 1
    result = evaluator.evaluate(task, source, seed=4)
    assert result.ok, (result.outcome, result.detail, result.error[-2000:])


# -- single_pass ----------------------------------------------------------------------------------------------
def test_a_row_loop_becomes_one_block_where_the_row_fits_and_stays_otherwise():
    [(rationale, new)] = made(ROW_SUM, "single_pass")[0]
    assert rationale == ("row_sum_kernel's 1 loop(s) over n_cols as one block of triton.next_power_of_2(n_cols) "
                         "where 0 < n_cols <= 16384 (row_sum_kernel_single_pass), the loops otherwise")
    assert ROW_SUM.split("\n\n\ndef row_sum(")[0] in new  # the original kernel, unchanged
    assert ('@triton.jit\ndef row_sum_kernel_single_pass(x_ptr, out_ptr, n_cols, BLOCK: tl.constexpr):\n'
            '    row = tl.program_id(0)\n    cols = tl.arange(0, BLOCK)\n    acc = tl.zeros([BLOCK], tl.float32)\n'
            '    start = 0\n'
            '    acc += tl.load(x_ptr + row * n_cols + start + cols, mask=start + cols < n_cols, other=0.0)\n'
            '    tl.store(out_ptr + row, tl.sum(acc, axis=0))\n') in new
    assert ("    if 0 < x.shape[1] <= 16384:\n        row_sum_kernel_single_pass[(x.shape[0],)](x, out, x.shape[1], "
            "BLOCK=triton.next_power_of_2(x.shape[1]), num_warps=min(16, max(4, triton.next_power_of_2(x.shape[1]) "
            "// 256)))\n    else:\n        row_sum_kernel[(x.shape[0],)](x, out, x.shape[1], BLOCK=64)\n") in new


@pytest.mark.parametrize("name, loops", [("softmax", 3), ("rmsnorm", 2), ("layernorm", 3)])
def test_single_pass_applies_to_the_row_examples(name, loops):
    [(rationale, new)] = made(example(name).module_source, "single_pass")[0]
    assert rationale.startswith(f"{name}_kernel's {loops} loop(s) over n_cols as one block")
    assert new.count(f"{name}_kernel_single_pass[(rows,)]") == 1 and "if 0 < cols <= 16384:" in new
    compile(new, name, "exec")


ROW_SUM_N = ROW_SUM.replace("    row_sum_kernel[(x.shape[0],)](x, out, x.shape[1], BLOCK=64)\n",
                            "    n = x.shape[1]\n    row_sum_kernel[(x.shape[0],)](x, out, n, BLOCK=64)\n")


def test_single_pass_leaves_element_wise_and_whole_row_kernels_alone():
    """Refusals of meaning on other forms of the row loop: tests/test_single_pass.py."""
    assert made(ADD, "single_pass")[1] == ("add_kernel has no loop that walks a row in blocks of a constexpr",)
    whole_row = ROW_SUM_N.replace("BLOCK=64", "BLOCK=triton.next_power_of_2(n)").replace(
        "    for start in range(0, n_cols, BLOCK):\n        acc +=", "    if True:\n        start = 0\n        acc +=")
    assert made(whole_row, "single_pass")[1] == (
        "row_sum_kernel has no loop that walks a row in blocks of a constexpr",)


@pytest.mark.slow
@pytest.mark.parametrize("name", ["softmax", "rmsnorm", "layernorm"])
def test_a_single_pass_example_gives_the_same_outputs_in_the_interpreter(evaluator, name):
    task = example(name)
    [(_, source)] = made(task.module_source, "single_pass")[0]
    result = evaluator.evaluate(task, source, seed=4)
    assert result.ok, (result.outcome, result.detail, result.error[-2000:])


@pytest.mark.slow
def test_a_row_too_long_for_one_block_takes_the_loops_in_the_interpreter():
    """Both sides of the launch's branch give the row sums: a row of 20,000 takes the original loops."""

    [(_, source)] = made(ROW_SUM_N, "single_pass")[0]
    interpreted(source, """
for cols in (300, 20000):
    x = torch.randn(3, cols)
    assert torch.allclose(module.row_sum(x), x.sum(dim=1), atol=1e-3, rtol=1e-4), cols
""")


# -- online_softmax -------------------------------------------------------------------------------------------
LOGSUMEXP = '''\
import torch
import triton
import triton.language as tl


@triton.jit
def lse_kernel(x_ptr, out_ptr, n_cols, BLOCK: tl.constexpr):
    row = tl.program_id(0)
    cols = tl.arange(0, BLOCK)
    acc_max = tl.full([BLOCK], float("-inf"), tl.float32)
    acc_sum = tl.zeros([BLOCK], tl.float32)
    for start in range(0, n_cols, BLOCK):
        x = tl.load(x_ptr + row * n_cols + start + cols, mask=start + cols < n_cols, other=float("-inf"))
        acc_max = tl.maximum(acc_max, x)
    m = tl.max(acc_max, axis=0)
    for start in range(0, n_cols, BLOCK):
        v = tl.load(x_ptr + row * n_cols + start + cols, mask=start + cols < n_cols, other=float("-inf"))
        acc_sum = acc_sum + tl.exp(v - m)
    tl.store(out_ptr + row, m + tl.log(tl.sum(acc_sum, axis=0)))


def lse(x):
    out = torch.empty(x.shape[0])
    lse_kernel[(x.shape[0],)](x, out, x.shape[1], BLOCK=16)
    return out
'''


def test_the_max_and_exp_sum_passes_become_one_with_a_running_max():
    [(rationale, new)] = made(LOGSUMEXP, "online_softmax")[0]
    assert rationale == ("lse_kernel's max pass and exp-sum pass over its row as one pass with a running max "
                         "(acc_max) and a rescaled sum (acc_sum), lane by lane")
    rescaled = ('tl.where({old} == {new}, acc_sum, tl.where({old} == float("-inf"), 0.0, '
                'acc_sum * tl.exp({old} - {new})))')
    assert ("    for start in range(0, n_cols, BLOCK):\n        acc_max_prev = acc_max\n"
            "        x = tl.load(x_ptr + row * n_cols + start + cols, mask=start + cols < n_cols, other=float(\"-inf\"))\n"
            "        acc_max = tl.maximum(acc_max, x)\n"
            "        v = tl.load(x_ptr + row * n_cols + start + cols, mask=start + cols < n_cols, other=float(\"-inf\"))\n"
            f"        acc_sum = {rescaled.format(old='acc_max_prev', new='acc_max')} + (tl.exp(v - acc_max))\n"
            "    m = tl.max(acc_max, axis=0)\n"
            f"    acc_sum = {rescaled.format(old='acc_max', new='m')}\n"
            "    tl.store(out_ptr + row, m + tl.log(tl.sum(acc_sum, axis=0)))\n") in new
    assert new.count("for start in range(") == 1


def test_online_softmax_applies_to_the_softmax_example_and_then_single_pass_to_its_last_two_loops():
    [(_, new)] = made(example("softmax").module_source, "online_softmax")[0]
    assert new.count("for start in range(0, n_cols, BLOCK_SIZE):") == 2
    [(rationale, _)] = made(new, "single_pass")[0]
    assert rationale.startswith("softmax_kernel's 2 loop(s)")
    assert made(example("layernorm").module_source, "online_softmax")[0] == []


NO_SOFTMAX = "lse_kernel sums no exp(x - max) over the row it takes a max of"


@pytest.mark.parametrize("old, new, why", [
    # the sum is over another buffer, or not of exp(x - max) alone, or of values that are not the max's
    ("        v = tl.load(x_ptr + row * n_cols + start", "        v = tl.load(out_ptr + row * n_cols + start",
     NO_SOFTMAX),
    ("acc_sum + tl.exp(v - m)", "acc_sum + tl.exp(v - m) * v", NO_SOFTMAX),
    ("        acc_max = tl.maximum(acc_max, x)\n", "        acc_max = tl.maximum(acc_max, x * 2)\n", NO_SOFTMAX),
    ("    m = tl.max(acc_max, axis=0)\n", "    m = tl.max(acc_max, axis=0)\n    acc_sum = acc_sum + 1.0\n",
     "lse_kernel's sum acc_sum does not start from 0 before its pass"),
    ("for start in range(0, n_cols, BLOCK):\n        v", "for start in range(0, n_cols - 1, BLOCK):\n        v",
     "lse_kernel's max pass and sum pass do not walk the same iterations"),
    ("    tl.store(out_ptr + row, m + tl.log(tl.sum(acc_sum, axis=0)))\n",
     "    tl.store(out_ptr + row, m + tl.log(tl.sum(acc_sum + v, axis=0)))\n",
     "lse_kernel reads, after the passes, a value its sum pass leaves behind"),
])
def test_online_softmax_refuses_with_the_fact_that_is_missing(old, new, why):
    source = LOGSUMEXP.replace(old, new)
    assert source != LOGSUMEXP
    assert made(source, "online_softmax") == ([], (why,))


def test_online_softmax_takes_a_base_two_exponent_with_its_scale():
    source = LOGSUMEXP.replace("acc_sum + tl.exp(v - m)", "acc_sum + tl.exp2((v - m) * 1.4426950408889634)")
    [(_, new)] = made(source, "online_softmax")[0]
    assert "acc_sum * tl.exp2((acc_max_prev - acc_max) * (1.4426950408889634))" in new


def test_a_kernel_that_is_online_already_is_no_target():
    online = LOGSUMEXP.replace(
        "        acc_max = tl.maximum(acc_max, x)\n",
        "        new_max = tl.maximum(acc_max, x)\n        acc_sum = acc_sum * tl.exp(acc_max - new_max) + "
        "tl.exp(x - new_max)\n        acc_max = new_max\n")
    assert made(online, "online_softmax") == (
        [], ("lse_kernel already keeps a running max with a rescaled sum (online form) in a loop",))


@pytest.mark.slow
def test_an_online_softmax_example_gives_the_same_outputs_in_the_interpreter(evaluator):
    task = example("softmax")
    [(_, source)] = made(task.module_source, "online_softmax")[0]
    result = evaluator.evaluate(task, source, seed=4)
    assert result.ok, (result.outcome, result.detail, result.error[-2000:])
    [(_, both)] = made(source, "single_pass")[0]  # short rows in one block, long rows in one online pass
    result = evaluator.evaluate(task, both, seed=4)
    assert result.ok, (result.outcome, result.detail, result.error[-2000:])


@pytest.mark.slow
def test_an_online_logsumexp_gives_the_same_outputs_in_the_interpreter():
    """Rows with masked lanes (-inf in a whole lane) and rows whose maximum sits late: the running max's guard
    and its rescaling."""

    [(_, source)] = made(LOGSUMEXP, "online_softmax")[0]
    interpreted(source, """
x = torch.randn(4, 37)
x[1, 30] = 40.0  # the maximum grows late: the earlier sum is rescaled by exp(-40)
x[2, :20] = -1e4  # a long run far below the maximum
assert torch.allclose(module.lse(x), torch.logsumexp(x, dim=1), atol=1e-5, rtol=1e-5)
short = torch.randn(3, 5)  # fewer columns than one block: most lanes never see an element
assert torch.allclose(module.lse(short), torch.logsumexp(short, dim=1), atol=1e-5, rtol=1e-5)
""")


