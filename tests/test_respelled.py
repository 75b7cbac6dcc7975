"""The re-spellings the rewriter reads a module through where a rewrite makes nothing of it as written: literal
tiles as constexprs (rewrites/literal_tiles.py) and helper calls written out (rewrites/inline_helpers.py). The
corpus (tests/respellings/literal_tiles.py, helpers.py) checks that the rewrites fire through them and that every
variant gives the original's outputs; these check what they refuse and how they write."""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))

from respellings.elementwise import PLAIN  # noqa: E402
from respellings.literal_tiles import AFFINE_LITERAL, GEMM_LITERAL  # noqa: E402

from kernelband.proposers.rewriter.analysis.source import ModuleSource  # noqa: E402
from kernelband.proposers.rewriter.proposer import options  # noqa: E402
from kernelband.proposers.rewriter.rewrites.inline_helpers import inline  # noqa: E402
from kernelband.proposers.rewriter.rewrites.literal_tiles import lift  # noqa: E402


def test_a_literal_that_is_also_a_number_in_the_kernel_is_not_lifted_and_the_reason_says_where():
    source = AFFINE_LITERAL.replace("x * alpha + beta", "x * 1024")
    found = options(source, ("block_size", "inductor_configs"))
    assert not found.variants
    assert any("also as a value that is not a tile's size" in r and "x * 1024" in r for r in found.reasons)


def test_a_gemms_literal_tiles_are_named_by_the_axes_they_size_and_the_launch_passes_them():
    lifted = lift(ModuleSource(GEMM_LITERAL))
    assert "BLOCK_MN=64, BLOCK_K=32" in lifted.why
    text = lifted.ms.source
    assert "rm = pm * BLOCK_MN + tl.arange(0, BLOCK_MN)" in text and "range(0, K, BLOCK_K)" in text
    assert "tl.zeros((BLOCK_MN, BLOCK_MN)" in text and "BLOCK_MN=64, BLOCK_K=32)" in text
    assert "triton.cdiv(M, 64)" in text  # the grid's literal stays: the rewrites read it as following the tile
    [tutorial, inductor] = options(GEMM_LITERAL, ("matmul_configs",)).variants
    assert "BLOCK_MN=64" in tutorial.rationale and "Inductor" in inductor.rationale


def test_a_rewrite_that_fires_on_the_module_as_written_reads_no_respelling():
    for source, rewrite in ((PLAIN, "block_size"), (PLAIN, "inductor_configs")):
        made = options(source, (rewrite,)).variants
        assert made and not any("literal tiles" in v.rationale for v in made)


HELPERS = '''
import torch
import triton
import triton.language as tl


@triton.jit
def _advance(p, n):
    """The value n elements on."""
    p += n
    return tl.load(p)


@triton.jit
def _early(p, n):
    if n == 0:
        return 0.0
    return tl.load(p)


@triton.jit
def k(x_ptr, y_ptr, n):
    p = x_ptr
    v = _advance(p, n)
    w = _early(p, n)
    tl.store(y_ptr, v + w + tl.load(p))


def run(x):
    y = torch.empty(1, device=x.device)
    k[(1,)](x, y, 1)
    return y
'''


def test_an_inlined_helper_that_assigns_its_parameter_works_on_a_local_and_one_that_returns_early_stays():
    inlined = inline(ModuleSource(HELPERS))
    body = inlined.ms.source.split("def k(")[1]
    assert inlined.why == "_advance inlined in k"
    # the caller's p is left as it was, and the helper's docstring stays with the helper
    assert "p_1 = p\n    p_1 += n\n    v = tl.load(p_1)\n" in body and "elements on" not in body
    assert "w = _early(p, n)" in body and "tl.store(y_ptr, v + w + tl.load(p))" in body
