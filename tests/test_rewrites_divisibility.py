"""divisibility_hints: the integer parameters a kernel's offsets and masks read (found by data flow, whatever
their names), the constexpr bits that state which are multiples of 8, the host test that sets them from the
launch's values, where it refuses; and that every variant gives the original's outputs in the interpreter,
whether the values are multiples of 8 or not (a bit set where a value is not would change the result)."""

from __future__ import annotations

import os
import re
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest
from interpreted import run_modules
from test_rewrite_correctness import one_config_each
from test_rewrites_structural import example, made

from kernelband.proposers.rewriter.analysis.facts import facts_of
from kernelband.proposers.rewriter.analysis.source import ModuleSource

MATMUL = example("matmul").module_source

# A 2-D row kernel: rows `stride` apart, a lambda grid of meta, its arguments passed by keyword.
ROWS = '''
import torch
import triton
import triton.language as tl


@triton.jit
def scale_rows(src, dst, pitch_in, pitch_out, width, factor, BLOCK: tl.constexpr):
    r = tl.program_id(0)
    lanes = tl.arange(0, BLOCK)
    for c in range(0, width, BLOCK):
        keep = c + lanes < width
        v = tl.load(src + r * pitch_in + c + lanes, mask=keep, other=0.0)
        tl.store(dst + r * pitch_out + c + lanes, v * factor, mask=keep)


def scale(x):
    out = torch.empty(x.shape, dtype=x.dtype)
    grid = lambda meta: (x.shape[0],)
    scale_rows[grid](src=x, dst=out, pitch_in=x.stride(0), pitch_out=out.stride(0), width=x.shape[1],
                     factor=2.0, BLOCK=16)
    return out
'''

# An element-wise kernel over n, autotuned, launched in two places (one of them through a local).
ELEMENTWISE = '''
import torch
import triton
import triton.language as tl


@triton.autotune(configs=[triton.Config({"B": 16})], key=["count"])
@triton.jit
def axpy(p, q, o, count, B: tl.constexpr):
    """o = 2 p + q"""
    at = tl.program_id(0) * B + tl.arange(0, B)
    tl.store(o + at, 2 * tl.load(p + at, mask=at < count) + tl.load(q + at, mask=at < count), mask=at < count)


def twice(x, y):
    out = torch.empty_like(x)
    axpy[lambda meta: (triton.cdiv(x.numel(), meta["B"]),)](x, y, out, x.numel())
    n = out.numel()
    again = torch.empty_like(x)
    axpy[lambda meta: (triton.cdiv(n, meta["B"]),)](out, y, again, n)
    return again
'''

TRACE = '''
import torch, kb_original as original, kb_variant as variant
launched = []
class Seen:
    def __init__(self, name, kernel):
        self.name, self.kernel = name, kernel
    def __getitem__(self, grid):
        def launch(*args, **kwargs):
            launched.append((self.name, kwargs.get("{flag}")))
            return self.kernel[grid](*args, **kwargs)
        return launch
setattr(variant, "{kernel}", Seen("{kernel}", getattr(variant, "{kernel}")))
torch.manual_seed(0)
'''


def kernel_text(source: str, name: str) -> str:
    start = source.index(f"def {name}(")
    return source[start:source.index("\n\n\n", start)]


def one(source: str) -> tuple[str, str]:
    [(rationale, new)], _ = made(source, "divisibility_hints")
    return rationale, new


def traced(source: str, kernel: str, check: str) -> None:
    """Runs `check` with `original` and `variant` imported, each launch of the variant's kernel recorded in
    `launched` as (kernel, its bits); one process per config of an autotuned variant."""
    _, new = one(source)
    for _, each in one_config_each(new):
        run_modules({"kb_original": source, "kb_variant": each},
                    TRACE.format(kernel=kernel, flag="ALIGNED") + check)


# -- which parameters -----------------------------------------------------------------------------------------
@pytest.mark.parametrize("source, kernel, params", [
    (MATMUL, "matmul_kernel", ["M", "N", "K", "stride_am", "stride_ak", "stride_bk", "stride_bn", "stride_cm",
                               "stride_cn"]),
    (ROWS, "scale_rows", ["pitch_in", "pitch_out", "width"]),  # not `factor`: it scales values, not offsets
    (ELEMENTWISE, "axpy", ["count"]),
])
def test_the_parameters_are_those_the_offsets_and_masks_read(source, kernel, params):
    ms = ModuleSource(source)
    assert facts_of(ms.kernels[kernel]).alignment.params == params


def test_a_parameter_under_a_division_or_modulo_does_not_set_the_offsets_alignment():
    ms = ModuleSource(ELEMENTWISE.replace("at = tl.program_id(0) * B", "at = (tl.program_id(0) % count) * B")
                      .replace(", mask=at < count", ""))
    assert facts_of(ms.kernels["axpy"]).alignment.params == []


def test_a_bound_compared_with_loaded_data_is_no_mask_bound():
    ms = ModuleSource(ELEMENTWISE.replace("def axpy(p, q, o, count, B", "def axpy(p, q, o, count, t, B").replace(
        "mask=at < count)\n", "mask=tl.load(p + at, mask=at < count) > t)\n"))
    assert facts_of(ms.kernels["axpy"]).alignment.params == ["count"]


# -- the kernel and the launch ------------------------------------------------------------------------------------
def test_the_matmul_kernel_rebinds_each_parameter_under_its_bit_and_the_host_sets_the_bits_from_the_values():
    rationale, new = one(MATMUL)
    assert rationale.startswith("matmul_kernel states M, N, K, stride_am, stride_ak, stride_bk, stride_bn, "
                                "stride_cm, stride_cn multiples of 8 where its launch's values are")
    assert new.count("def matmul_kernel") == 1  # in place: a later rewrite of the kernel holds on every shape
    twin = kernel_text(new, "matmul_kernel")
    assert "BLOCK_K: tl.constexpr, ALIGNED: tl.constexpr = 0):" in twin
    for bit, name in enumerate(["M", "N", "K", "stride_am", "stride_ak", "stride_bk"]):
        assert f"    if ALIGNED & {1 << bit}:\n        {name} = {name} // 8 * 8\n" in twin
    host = new[new.index("def matmul("):]
    # each value read once, before the test, and the same locals passed to whichever launch runs
    assert host.count("a.stride(0)") == 1 and "    _stride_am = a.stride(0)\n" in host
    assert ("    _aligned = sum(1 << i for i, v in enumerate((M, N, K, _stride_am, _stride_ak, _stride_bk, _stride_bn, "
            "_stride_cm, _stride_cn)) if type(v) is int and v % 8 == 0 and v % 16)\n"
            "    matmul_kernel[grid](a, b, c, M, N, K, _stride_am, _stride_ak,") in host
    assert "num_warps=4, num_stages=1, ALIGNED=_aligned)\n    return c\n" in host and host.count("matmul_kernel[") == 1


def test_keyword_arguments_a_meta_grid_an_autotuner_and_two_launches_are_kept():
    _, new = one(ROWS)
    assert "pitch_in=_pitch_in, pitch_out=_pitch_out, width=_width," in new
    assert "scale_rows[grid](src=x, dst=out, pitch_in=_pitch_in" in new and "ALIGNED=_aligned)" in new
    _, new = one(ELEMENTWISE)
    twin = new[new.index("@triton.autotune"):]
    assert twin.startswith('@triton.autotune(configs=[triton.Config({"B": 16})]') and new.count("def axpy(") == 1
    assert '    """o = 2 p + q"""\n    # The host sets bit i of ALIGNED' in twin  # after the docstring
    assert new.count("ALIGNED=_aligned)") == 2 and "    _count = x.numel()\n" in new
    assert "enumerate((n,)) if type(v) is int" in new  # a plain name is read where it stands


def test_a_launch_whose_value_is_kept_or_returned_reads_its_values_just_before_its_line():
    kept = ELEMENTWISE.replace("    axpy[lambda meta: (triton.cdiv(n,", "    handle = axpy[lambda meta: (triton.cdiv(n,") \
        .replace("    return again\n", "    return again if handle is not None else None\n")
    assert kept != ELEMENTWISE
    _, new = one(kept)
    assert ("    _aligned = sum(1 << i for i, v in enumerate((n,)) if type(v) is int and v % 8 == 0 and v % 16)\n"
            "    handle = axpy[lambda meta: (triton.cdiv(n, meta[\"B\"]),)](out, y, again, n, ALIGNED=_aligned)\n") in new


# -- the same outputs, and bits only where the values say ----------------------------------------------------
def test_the_matmul_variant_gives_the_originals_outputs_and_sets_a_bit_where_a_value_is_a_multiple_of_8():
    traced(MATMUL, "matmul_kernel", """
for M, N, K in [(40, 24, 48), (24, 40, 40), (37, 37, 37), (33, 40, 37), (32, 48, 16)]:
    a = torch.randn(M, K).half()
    b = torch.randn(K, N).half()
    launched.clear()
    assert torch.equal(variant.matmul(a, b), original.matmul(a, b)), (M, N, K)
    values = (M, N, K, a.stride(0), a.stride(1), b.stride(0), b.stride(1), N, 1)
    bits = sum(1 << i for i, v in enumerate(values) if v % 8 == 0 and v % 16)  # Triton knows those of 16
    assert launched == [("matmul_kernel", bits)], (launched, bits)
    assert bits & 16 == 0  # a.stride(1) is 1: never stated a multiple of 8
""")


def test_the_row_variant_gives_the_originals_outputs_on_aligned_odd_and_strided_rows():
    traced(ROWS, "scale_rows", """
for x in [torch.randn(3, 40), torch.randn(3, 24), torch.randn(4, 37), torch.randn(3, 40)[:, :37], torch.randn(2, 32)]:
    launched.clear()
    assert torch.equal(variant.scale(x), original.scale(x))
    bits = sum(1 << i for i, v in enumerate((x.stride(0), x.shape[1], x.shape[1])) if v % 8 == 0 and v % 16)
    assert launched == [("scale_rows", bits)], (launched, bits)
""")


def test_the_element_wise_variant_gives_the_originals_outputs_at_each_of_its_launches():
    traced(ELEMENTWISE, "axpy", """
for n in (40, 24, 37, 48):
    x, y = torch.randn(n), torch.randn(n)
    launched.clear()
    assert torch.equal(variant.twice(x, y), original.twice(x, y))
    assert launched == [("axpy", 1 if n % 8 == 0 and n % 16 else 0)] * 2, launched
""")


# -- what the hint does on a GPU: compiled for sm_90 ----------------------------------------------------------------
COMPILE = '''
import importlib, re, torch, triton
from triton.backends.compiler import GPUTarget
from triton.compiler import ASTSource
from triton.runtime.jit import JITFunction
wide = {}
def run(self, *args, grid=None, warmup=False, **kwargs):
    values = dict(zip(self.arg_names, args))
    values.update(kwargs)
    signature, constexprs, attrs = {}, {}, {}
    for i, name in enumerate(self.arg_names):  # as Triton specializes: 1 a constant, multiples of 16 known
        value = values.get(name, self.params[i].default)
        if self.params[i].is_constexpr or isinstance(value, int) and value == 1:
            signature[name], constexprs[(i,)] = "constexpr", value
        elif isinstance(value, torch.Tensor):
            signature[name], attrs[(i,)] = "*fp16", [["tt.divisibility", 16]]
        else:
            signature[name] = "i32"
            attrs.update({(i,): [["tt.divisibility", 16]]} if value % 16 == 0 else {})
    options = {k: v for k, v in kwargs.items() if k in ("num_warps", "num_stages")}
    ptx = triton.compile(ASTSource(self, signature, constexprs=constexprs, attrs=attrs),
                         target=GPUTarget("cuda", 90, 32), options=options).asm["ptx"]
    wide[self.fn.__module__] = len(re.findall(r"(?:ld|st)\\.global(?:\\.\\w+)*\\.v4\\.b32|cp\\.async[^;]*0x10;", ptx))
JITFunction.run = run
a, b = torch.randn(1000, 1000).half(), torch.randn(1000, 1000).half()
for name in ("kb_original", "kb_variant"):
    importlib.import_module(name).matmul(a, b)
assert wide["kb_original"] == 0 and wide["kb_variant"] > 0, wide
'''


def test_at_a_stride_of_1000_only_the_hinted_kernel_moves_16_bytes_at_a_time_on_sm90():
    pytest.importorskip("triton.backends.nvidia")
    _, new = one(MATMUL)
    folder = Path(tempfile.mkdtemp())
    (folder / "kb_original.py").write_text(MATMUL.split("# -----")[0])
    (folder / "kb_variant.py").write_text(new.split("# -----")[0])
    done = subprocess.run([sys.executable, "-c", COMPILE], cwd=folder, capture_output=True, text=True, timeout=600,
                          env={**{k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"},
                               "PYTHONPATH": os.pathsep.join([str(folder), *sys.path])})
    if "ptxas" in done.stderr and done.returncode:
        pytest.skip("no ptxas for sm_90 here")
    assert done.returncode == 0, done.stderr[-3000:]


# -- refusals --------------------------------------------------------------------------------------------------------
@pytest.mark.parametrize("old, new, reason", [
    (", mask=at < count", "", "axpy's loads and stores use no integer parameter in their offsets or masks"),
    ("](x, y, out, x.numel())", "](*(x, y), *more, *more)",
     "the extent of `*more` is not known: the parameters after it cannot be mapped (axpy launch in twice)"),
    ("    axpy[lambda meta: (triton.cdiv(x.numel(), meta[\"B\"]),)](x, y, out, x.numel())\n",
     "    x.numel() and axpy[lambda meta: (triton.cdiv(x.numel(), meta[\"B\"]),)](x, y, out, x.numel())\n",
     "the axpy launch in twice runs only on some evaluations of its line (a branch of an expression, a lambda), or "
     "outside a function: its values cannot be read before it"),
])
def test_divisibility_hints_refuse_with_the_fact_that_is_missing(old, new, reason):
    source = ELEMENTWISE.replace(old, new)
    assert source != ELEMENTWISE
    made_, reasons = made(source, "divisibility_hints")
    assert made_ == [] and reasons == (reason,)


def test_parameters_every_launch_passes_as_numbers_triton_specializes_are_left_out():
    source = ROWS.replace("width=x.shape[1]", "width=64")
    rationale, _ = one(source)
    assert rationale.startswith("scale_rows states pitch_in, pitch_out multiples")
    fixed = source.replace("pitch_in=x.stride(0), pitch_out=out.stride(0)", "pitch_in=1, pitch_out=32")
    assert made(fixed, "divisibility_hints") == ([], (
        "every launch of scale_rows passes pitch_in, pitch_out, width as numbers that Triton specializes already "
        "(1 or multiples of 16) or that are not multiples of 8",))



# -- carried by the tile rewrites -----------------------------------------------------------------------------
@pytest.mark.parametrize("rewrite", ["matmul_configs", "split_k", "persistent_tiles"])
def test_the_tl_dot_tile_rewrites_carry_the_hints_on_every_kernel_and_keep_the_outputs(rewrite):
    variants, _ = made(MATMUL, rewrite)
    assert variants
    for rationale, new in variants:
        kernels = re.findall(r"@triton\.jit\ndef (\w+)\(", new)
        assert kernels and all("ALIGNED: tl.constexpr" in kernel_text(new, k) for k in kernels), (rationale, kernels)
        assert "multiples of 8" in rationale
    # the first config of the first variant: tiles larger than these shapes, masks and the stated bits at work
    run_modules({"kb_original": MATMUL, "kb_variant": one_config_each(variants[0][1])[0][1]}, """
import torch, kb_original as original, kb_variant as variant
torch.manual_seed(0)
for M, N, K in [(40, 24, 48), (37, 37, 37), (24, 40, 40)]:
    a, b = torch.randn(M, K).half(), torch.randn(K, N).half()
    assert torch.allclose(variant.matmul(a, b).float(), original.matmul(a, b).float(), atol=2e-2, rtol=2e-2)
""")


def test_a_hinted_kernel_keeps_its_facts_so_the_other_rewrites_still_read_it():
    _, hinted = one(MATMUL)
    assert "if ALIGNED & 4:\n        K = K // 8 * 8" in hinted  # K is rebound: read as K all the same
    for rewrite in ("split_k", "persistent_tiles", "grouped_ordering", "single_pass"):
        assert made(hinted, rewrite)[0], (rewrite, made(hinted, rewrite)[1])
    assert made(hinted, "divisibility_hints") == ([], (
        "matmul_kernel states the divisibility of K, M, N, stride_ak, stride_am, stride_bk, stride_bn, stride_cm, "
        "stride_cn already",))


def test_a_twin_takes_its_new_parameters_before_those_with_defaults():
    defaulted = MATMUL.replace("BLOCK_K: tl.constexpr", "BLOCK_K: tl.constexpr = 32")
    [(_, new)], _ = made(defaulted, "split_k")
    twin = kernel_text(new, "matmul_kernel_split_k")
    assert "ws_ptr, ws_span, SPLIT_K: tl.constexpr, REDUCE: tl.constexpr, BLOCK_K: tl.constexpr = 32" in twin
    compile(new, "split_k", "exec")
    # a launch that passes a defaulted parameter by position would bind it to the new ones instead
    positional = defaulted.replace("BLOCK_M=32, BLOCK_N=32, BLOCK_K=32", "32, 32, 32")
    assert made(positional, "split_k") == ([], ("a launch of matmul_kernel passes a parameter that has a default "
                                                "by position",))


def test_only_a_positional_star_or_a_defaulted_parameter_by_position_keeps_new_parameters_out():
    import libcst as cst

    from kernelband.proposers.rewriter.edits import defaults_by_keyword

    def ok(signature: str, call: str) -> bool:
        return defaults_by_keyword(cst.parse_statement(f"def k({signature}): pass").params,
                                   [cst.parse_expression(call)])
    assert ok("a, B", "k(x, *rest)")  # no default: nothing to shift
    assert ok("a, B=1", "k(x, **config.kwargs)") and ok("a, B=1", "k(x, B=2)")
    assert not ok("a, B=1", "k(x, 2)") and not ok("a, B=1", "k(*rest)")


def test_a_host_function_that_binds_a_builtin_the_test_calls_is_refused_and_the_tiles_go_plain():
    # iv_dependent_matmul's wrapper takes `type: str`: `type(v) is int` would call the string
    shadowed = MATMUL.replace("b: torch.Tensor) -> torch.Tensor:", "b: torch.Tensor, type: str = 'plain') -> torch.Tensor:", 1)
    assert shadowed != MATMUL
    assert made(shadowed, "divisibility_hints") == ([], (
        "the matmul_kernel launch in matmul sees type bound to its own values: the host's test of the bits calls "
        "the builtins",))
    [(rationale, new), _] = made(shadowed, "matmul_configs")
    assert "ALIGNED" not in new and "multiples of 8" not in rationale
