"""How many variants each built-in strategy's rewrites make of each task's starting kernel.

    .venv/bin/python benchmarks/rewrite_coverage.py [--tritonbench PATH] [--show TASK:STRATEGY] [--check]

One row per task (the 8 examples and the 29 TritonBench-G level-1/2 tasks of the paper), one column per
strategy; every variant is applied and must compile. `--check` also takes every variant as a parent once
more (second-generation rewrites) and checks those compile too. `--show` prints the variants of one arm
as unified diffs.
"""

from __future__ import annotations

import argparse
import difflib
import sys

from kernelband.errors import UserError
from kernelband.proposers.rewriter.proposer import options
from kernelband.search.strategies import builtin_strategies
from kernelband.tasks import example_names, load_task
from kernelband.tasks import tritonbench as tb


def task_refs(tritonbench: str | None) -> list[str]:
    refs = [f"examples:{name}" for name in example_names()]
    try:
        refs += [f"tritonbench:{name}" for name in tb.level12(tritonbench)]
    except UserError as exc:
        print(f"(no TritonBench tasks: {exc})", file=sys.stderr)
    return refs


def variant_sources(source: str, rewrites: tuple[str, ...]) -> list[tuple[str, str]]:
    found = options(source, rewrites)
    return [(v.rationale, v.apply(found.module)) for v in found.variants]


def compiles(source: str) -> bool:
    try:
        compile(source, "<variant>", "exec")
    except SyntaxError:
        return False
    return True


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--tritonbench", default=None)
    parser.add_argument("--show", default=None, help="TASK_REF:STRATEGY, e.g. examples:matmul:reordering")
    parser.add_argument("--check", action="store_true", help="also rewrite every variant once more")
    args = parser.parse_args()
    strategies = builtin_strategies()
    if args.show:
        ref, _, name = args.show.rpartition(":")
        strategy = next(s for s in strategies if s.name == name)
        source = load_task(ref, args.tritonbench).module_source
        for rationale, new in variant_sources(source, strategy.rewrites):
            print(f"### {rationale}")
            sys.stdout.writelines(difflib.unified_diff(source.splitlines(True), new.splitlines(True), n=1))
        return 0
    print(f"{'task':42}" + "".join(f"{s.name[:12]:>14}" for s in strategies))
    totals = {s.name: 0 for s in strategies}
    broken = second = 0
    for ref in task_refs(args.tritonbench):
        source = load_task(ref, args.tritonbench).module_source
        row = []
        for strategy in strategies:
            made = variant_sources(source, strategy.rewrites)
            broken += sum(not compiles(new) for _, new in made)
            if args.check:
                for _, new in made:
                    for again in strategies:
                        remade = variant_sources(new, again.rewrites)
                        second += len(remade)
                        broken += sum(not compiles(s) for _, s in remade)
            totals[strategy.name] += bool(made)
            row.append(len(made))
        print(f"{ref:42}" + "".join(f"{n:>14}" for n in row))
    print(f"{'tasks with >= 1 variant':42}" + "".join(f"{totals[s.name]:>14}" for s in strategies))
    if args.check:
        print(f"second-generation variants: {second}")
    print(f"variants that do not compile: {broken}")
    return 1 if broken else 0


if __name__ == "__main__":
    sys.exit(main())
