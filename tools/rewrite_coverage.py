"""How many variants each built-in rewrite makes of each task's starting kernel.

    python tools/rewrite_coverage.py [--tritonbench PATH] [--tasks REF,REF] [--show TASK_REF:REWRITE] [--check]

One row per task (the examples and, where the data is found, the 29 TritonBench-G level-1/2 tasks of the
paper), one column per rewrite, then a row of how many tasks each rewrite applies to and the rationale line
of each structural rewrite (STRUCTURAL). Every variant is
applied and must compile; the exit status is 1 if one does not. `--check` also takes every variant as a
parent once more (second-generation rewrites) and checks those compile too. `--show` prints the variants
of one (task, rewrite) as unified diffs.
"""

from __future__ import annotations

import argparse
import difflib
import sys

from kernelband.errors import UserError, run_script
from kernelband.proposers.rewriter.proposer import options
from kernelband.proposers.rewriter.registry import REWRITES
from kernelband.tasks import example_names, load_task
from kernelband.tasks import tritonbench as tb

# The structural rewrites (issue 39's list: more than launch parameters), each with the one line that says what
# it does and why its meaning is certain where it applies.
STRUCTURAL = {
    "inductor_configs": "row and element-wise kernels autotuned over Inductor's reduction and pointwise configs, "
                        "where every block size covers the same elements (masked, not reshaped)",
    "matmul_configs": "tl.dot kernels autotuned over Triton's matmul tutorial configs and Inductor's mm configs, "
                      "where BLOCK_M/N scale the program id, BLOCK_K steps the loop and every access is masked",
    "single_pass": "loops over a row in blocks of B (any loop form, 2-D tiles, tl.dot K loops) as one block of "
                   "the row's next power of two where it fits, the loops kept for longer rows",
    "online_softmax": "a max pass and an exp-sum pass over a row as one pass with a running max and a rescaled "
                      "sum, matched only in the plain two-loop form",
    "contiguity_hints": "tl.max_contiguous(tl.multiple_of(offs, P), P) on offs = M + tl.arange(0, P) where M is "
                        "certain to be a multiple of P (an integer scalar times P, or a loop stepping by P from 0)",
    "split_k": "a tl.dot kernel's K loop split over a third grid axis where the launch's M x N tiles leave SMs idle; "
               "float32 partials in a workspace, summed in a fixed order before the kernel's own epilogue "
               "(deterministic), the original launch where SPLIT_K would be 1 (on an autotuned kernel, chosen from "
               "its configs)",
    "persistent_tiles": "a tl.dot kernel on min(SMs, tiles) programs, each looping over the tiles of the original "
                        "grid with the program id replaced by the tile's, where there are more tiles than SMs "
                        "(an autotuned kernel counts its tiles from the grid lambda, in the kernel)",
    "launch_fusion": "two launches that run one after the other (analysis/buffers.py) as one: on one grid, the "
                     "second reading what the same program of the first stored, in registers (the store kept "
                     "where the host uses the buffer); an element-wise kernel over a flattened tensor computed "
                     "where the next reads its output; a two-stage reduction combined by the last program; "
                     "independent launches as one grid of both",
}


def task_refs(tritonbench: str | None) -> list[str]:
    refs = [f"examples:{name}" for name in example_names()]
    try:
        refs += [f"tritonbench:{name}" for name in tb.level12(tritonbench)]
    except UserError as exc:
        print(f"(no TritonBench tasks: {exc})", file=sys.stderr)
    return refs


def variant_sources(source: str, rewrite: str) -> list[tuple[str, str]]:
    found = options(source, (rewrite,))
    return [(v.rationale, v.apply(found.module)) for v in found.variants]


def compiles(source: str) -> bool:
    try:
        compile(source, "<variant>", "exec")
    except SyntaxError:
        return False
    return True


def coverage(refs: list[str], tritonbench: str | None = None, check: bool = False) -> dict:
    """Per task, the number of variants of each rewrite; per rewrite, the tasks it applies to; and how many
    variants (first and, with `check`, second generation) do not compile."""
    rows: dict[str, dict[str, int]] = {}
    applies = dict.fromkeys(REWRITES, 0)
    broken = second = 0
    for ref in refs:
        source = load_task(ref, tritonbench).module_source
        rows[ref] = {}
        for rewrite in REWRITES:
            made = variant_sources(source, rewrite)
            broken += sum(not compiles(new) for _, new in made)
            if check:
                for _, new in made:
                    for again in REWRITES:
                        remade = variant_sources(new, again)
                        second += len(remade)
                        broken += sum(not compiles(s) for _, s in remade)
            rows[ref][rewrite] = len(made)
            applies[rewrite] += bool(made)
    return {"rows": rows, "applies": applies, "broken": broken, "second": second}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--tritonbench", default=None)
    parser.add_argument("--tasks", default="", help="comma-separated task refs (default: every example and "
                                                    "TritonBench-G level-1/2 task)")
    parser.add_argument("--show", default=None, help="TASK_REF:REWRITE, e.g. examples:matmul:num_warps")
    parser.add_argument("--check", action="store_true", help="also rewrite every variant once more")
    args = parser.parse_args()
    if args.show:
        ref, _, rewrite = args.show.rpartition(":")
        if rewrite not in REWRITES:
            raise UserError(f"no built-in rewrite is called {rewrite!r}: one of {', '.join(REWRITES)}")
        source = load_task(ref, args.tritonbench).module_source
        for rationale, new in variant_sources(source, rewrite):
            print(f"### {rationale}")
            sys.stdout.writelines(difflib.unified_diff(source.splitlines(True), new.splitlines(True), n=1))
        return
    refs = args.tasks.split(",") if args.tasks else task_refs(args.tritonbench)
    found = coverage(refs, args.tritonbench, args.check)
    print(f"{'task':42}" + "".join(f"{name[:14]:>16}" for name in REWRITES))
    for ref, row in found["rows"].items():
        print(f"{ref:42}" + "".join(f"{row[name]:>16}" for name in REWRITES))
    print(f"{'tasks with >= 1 variant':42}" + "".join(f"{found['applies'][name]:>16}" for name in REWRITES))
    for name, line in STRUCTURAL.items():
        print(f"{name}: {line}")
    if args.check:
        print(f"second-generation variants: {found['second']}")
    print(f"variants that do not compile: {found['broken']}")
    if found["broken"]:
        raise SystemExit(1)


if __name__ == "__main__":
    run_script(main)
