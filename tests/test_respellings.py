"""The structural rewrites fire on the ways users write the same computation (tests/respellings/): on every
spelling of each pattern, and on every spelling with all its names replaced by opaque ones (a rewrite that
matches by name fails there); and every variant of every spelling gives the original's outputs in the
interpreter, in a fresh process, or, for spellings the interpreter refuses (block pointers), compiles for
sm_90."""

from __future__ import annotations

import functools
import importlib
import pkgutil
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))

import respellings  # noqa: E402
from respellings.check import block_pointers_compile, compiles_for_sm90, same_outputs  # noqa: E402
from respellings.renamed import renamed  # noqa: E402
from test_rewrite_correctness import one_config_each  # noqa: E402

from kernelband.proposers.rewriter.proposer import options  # noqa: E402

PATTERNS = [m.name for m in pkgutil.iter_modules(respellings.__path__) if m.name not in ("check", "renamed")]
SPELLINGS = [s for name in PATTERNS for s in importlib.import_module(f"respellings.{name}").SPELLINGS]


def every_variant(spelling) -> list[str]:
    """Each variant of the spelling's rewrites, one per autotune config (each checked, not only the pick), and
    the first of each rewrite on the renamed spelling."""
    made = [v for rewrite in spelling.rewrites for v in variants(spelling.source, rewrite)[0]]
    made += [v for rewrite in spelling.rewrites
             for v in variants(renamed(spelling.source, spelling.entry), rewrite)[0][:1]]
    return [each for variant in made for _, each in one_config_each(variant)]


@functools.cache
def variants(source: str, rewrite: str) -> tuple[list[str], tuple[str, ...]]:
    """Made once per worker: a spelling's tests share an xdist group, so its variants are made for the first."""
    found = options(source, (rewrite,))
    return [v.apply(found.module) for v in found.variants], found.reasons


def grouped(spellings) -> list:
    return [pytest.param(s, id=s.id, marks=pytest.mark.xdist_group(f"spelling-{s.id}")) for s in spellings]


def test_each_pattern_has_at_least_six_spellings():
    by_pattern: dict[str, int] = {}
    for spelling in SPELLINGS:
        by_pattern[spelling.pattern] = by_pattern.get(spelling.pattern, 0) + 1
    assert by_pattern and all(count >= 6 for count in by_pattern.values()), by_pattern


def test_the_renamer_leaves_no_defined_name_but_the_entry():
    spelling = SPELLINGS[0]
    new = renamed(spelling.source, spelling.entry)
    assert new != spelling.source and f"def {spelling.entry}(" in new
    compile(new, "<renamed>", "exec")


@pytest.mark.parametrize("spelling", grouped(SPELLINGS))
def test_every_rewrite_of_the_pattern_fires_on_the_spelling_and_on_it_renamed(spelling):
    for source in (spelling.source, renamed(spelling.source, spelling.entry)):
        for rewrite in spelling.rewrites:
            made, reasons = variants(source, rewrite)
            assert made, f"{rewrite} does not fire on {spelling.id}{'' if source is spelling.source else ' renamed'}: " \
                         f"{reasons}"


@pytest.mark.slow
@pytest.mark.parametrize("spelling", grouped(SPELLINGS))
def test_every_variant_of_the_spelling_gives_the_originals_outputs(spelling):
    made = every_variant(spelling)
    assert made
    if spelling.interpretable:
        same_outputs(spelling, made)
        return
    pytest.importorskip("triton.backends.nvidia")
    if "make_block_ptr" in spelling.source and not block_pointers_compile():
        pytest.skip("this Triton no longer compiles block pointers (the GPU test runs them: pytest -m gpu)")
    compiles_for_sm90(spelling, [spelling.source, *made])


@pytest.mark.gpu
@pytest.mark.parametrize("spelling", SPELLINGS, ids=lambda s: s.id)
def test_every_variant_of_the_spelling_gives_the_originals_outputs_on_the_gpu(spelling):
    torch = pytest.importorskip("torch")
    if not torch.cuda.is_available():
        pytest.skip("no CUDA GPU")
    same_outputs(spelling, every_variant(spelling), device="cuda")
