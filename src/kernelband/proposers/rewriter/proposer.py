"""The built-in proposer: deterministic source rewrites, no LLM.

For an arm (parent kernel, strategy) it lists every variant the strategy's rewrites can make of the
parent (`kernelband.proposers.rewriter.registry`), in a fixed order. The seed draws one of the strategy's rewrites,
weighted by how often that rewrite's children beat their parent on a GPU before (`priors.json`), then
one of its variants, skipping sources the run has seen already. A strategy none of whose rewrites applies is inapplicable: `applicable`
says False and `propose` returns no source, with the reason, so no evaluation is spent on it.
"""

from __future__ import annotations

import ast
import random
from dataclasses import dataclass
from functools import lru_cache

import libcst as cst

from kernelband import pyast
from kernelband.proposers.base import ProposerBase
from kernelband.proposers.rewriter.analysis.source import ModuleSource
from kernelband.proposers.rewriter.edits import Variant
from kernelband.proposers.rewriter.priors import family, load_class, prior
from kernelband.proposers.rewriter.registry import REWRITES
from kernelband.search.core import Candidate, Context, Proposal, Strategy, source_hash


@dataclass(frozen=True, eq=False)
class Options:
    """Every variant of one source under some rewrites, and why there are not more."""

    module: ModuleSource | None
    variants: tuple[Variant, ...]
    reasons: tuple[str, ...]


@lru_cache(maxsize=64)
def _parse(source: str) -> ModuleSource | None:
    try:
        return ModuleSource(source)
    except cst.ParserSyntaxError:
        return None


@lru_cache(maxsize=512)
def options(source: str, rewrites: tuple[str, ...]) -> Options:
    module = _parse(source)
    if module is None:
        return Options(None, (), ("the source does not parse",))
    variants, reasons = [], []
    for name in rewrites:
        if name not in REWRITES:
            reasons.append(f"no built-in rewrite is called {name!r}")
            continue
        try:
            found = REWRITES[name](module)
        except Exception as exc:  # noqa: BLE001 - a user's module the analysis cannot read costs a proposal, not the run
            reasons.append(f"{name} could not read this module: {type(exc).__name__}: {exc}")
            continue
        variants.extend(found.variants)
        reasons.extend(found.reasons)
    return Options(module, tuple(variants), tuple(dict.fromkeys(reasons)))


def parameter_moves(source: str, rewrites: tuple[str, ...]) -> list[str]:
    """The keys of the one-parameter steps (`edits.Move`) that these rewrites can take on the source, in their
    order: what coordinate descent walks."""
    return list(dict.fromkeys(v.move.key for v in options(source, rewrites).variants if v.move is not None))


def _defines(source: str, name: str) -> bool:
    try:
        tree = pyast.parse(source)
    except SyntaxError:
        return False
    return any(isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef) and node.name == name
               or isinstance(node, ast.Assign) and any(isinstance(t, ast.Name) and t.id == name for t in node.targets)
               for node in tree.body)


class RewriterProposer(ProposerBase):
    name = "rewrite"
    uses_profile = False  # its rewrites do not depend on φ

    def applicable(self, parent: Candidate, strategy: Strategy) -> bool:
        return bool(strategy.rewrites) and bool(options(parent.source, tuple(strategy.rewrites)).variants)

    def propose(self, parent: Candidate, strategy: Strategy, context: Context) -> Proposal:
        if not strategy.rewrites:
            return Proposal(source=None, error=f"{strategy.name} has no built-in rewrite; it needs an LLM proposer")
        found = options(parent.source, tuple(strategy.rewrites))
        if not found.variants:
            why = "; ".join(found.reasons[:3]) or "nothing to change"
            return Proposal(source=None, error=f"no {strategy.name} rewrite applies to this kernel: {why}")
        variants = self._reached(found, context.entry)
        if context.move:
            variants = [v for v in variants if v.move is not None and v.move.key == context.move]
            if not variants:
                return Proposal(source=None, error=f"no {strategy.name} variant of this kernel is the move "
                                f"{context.move!r}")
        if not variants:
            return Proposal(source=None, error=f"the {strategy.name} rewrites change only code that "
                            f"{context.entry} does not reach")
        load = load_class(parent.result.features.compile if parent.result else None)
        for variant in self._order(variants, context.seed, load):
            source = variant.apply(found.module)
            if source == parent.source or source_hash(source) in context.seen:
                continue
            if self._sound(source, parent.source, context.entry):
                return Proposal(source=source, rationale=f"{variant.rewrite}: {variant.rationale}")
        return Proposal(source=None, error=f"all {len(variants)} {strategy.name} variants of this kernel were "
                        "tried already")

    @staticmethod
    def _order(variants: list[Variant], seed: int, load: str | None = None) -> list[Variant]:
        """Every variant once, in the order the seed draws them: a family with probability proportional to
        its prior for a parent of this `load` (`priors.load_class`), then, within it, the variants from a
        seeded starting point in their fixed order."""
        rng = random.Random(seed)
        by_family: dict[str, list[Variant]] = {}
        for variant in variants:
            by_family.setdefault(family(variant.rewrite, variant.rationale), []).append(variant)
        for name, group in by_family.items():
            start = rng.randrange(len(group))
            by_family[name] = group[start:] + group[:start]
        order = []
        while by_family:
            names = list(by_family)
            name = rng.choices(names, weights=[prior(n, load) for n in names])[0]
            order.append(by_family[name].pop(0))
            if not by_family[name]:
                del by_family[name]
        return order

    @staticmethod
    def _reached(found: Options, entry: str) -> list[Variant]:
        reach = found.module.reachable(entry) if entry else None
        if reach is None:
            return list(found.variants)
        return [v for v in found.variants if v.touches & reach]

    @staticmethod
    def _sound(source: str, parent: str, entry: str) -> bool:
        """It compiles and still defines the entry (a safety net: rewrites are built to keep both)."""
        try:
            compile(source, "<rewrite>", "exec")
        except SyntaxError:
            return False
        return not entry or not _defines(parent, entry) or _defines(source, entry)
