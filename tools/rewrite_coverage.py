"""How many variants each built-in rewrite makes of each task's starting kernel, and why it makes none.

    python tools/rewrite_coverage.py [TASK_FILE ...] [--tritonbench PATH] [--tasks REF,REF] [--examples]
                                     [--json] [--check] [--outputs [--jobs N]] [--show TASK_REF:REWRITE]

By default every TritonBench-G task (184; the paper's 29 are a part of them); `--examples` adds the built-in
examples, `--tasks` names task refs instead, and task files given are added. The table has one row per
structural rewrite (STRUCTURAL, below): the tasks it fires on and its variants, then its refusals grouped (a
reason with the kernel's and the module's names replaced, so that kernels refused for the same fact count
together). `--json` prints {"tasks": {REF: {REWRITE: VARIANTS}}, "refusals": {REWRITE: {REASON: COUNT}},
"tl_dot": {...}, "broken": N} and, with `--outputs`, "outputs".

Every variant is applied and must compile; the exit status is 1 if one does not. `--check` also takes every
variant as a parent once more (second-generation rewrites) and checks those compile too. `--outputs` evaluates
every structural variant in the Triton interpreter against its task's starting kernel (each config of an
autotuned variant alone), where the interpreter runs the starting kernel at all: the record says, per task and
rewrite, how many matched, which did not, or why the task could not be run. `--show` prints the variants of
one (task, rewrite) as unified diffs.
"""

from __future__ import annotations

import argparse
import difflib
import json
import re
import sys
from collections import Counter
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from kernelband.errors import UserError, run_script
from kernelband.proposers.rewriter.analysis.source import ModuleSource
from kernelband.proposers.rewriter.proposer import options
from kernelband.proposers.rewriter.registry import REWRITES
from kernelband.tasks import example_names, load_task
from kernelband.tasks import tritonbench as tb

# The structural rewrites, each with the one line that says what it does and why its meaning is certain where it
# applies.
STRUCTURAL = {
    "matmul_configs": "tl.dot kernels autotuned over Triton's matmul tutorial configs and Inductor's mm configs "
                      "(a plain GEMM: its M, N and K tiles read from the tiles' shapes, each bounded or checked to "
                      "divide the size it tiles), or over the fused-attention tutorial's tiles on the free tiles "
                      "of any other tl.dot kernel, keeping the order of the launch's values",
    "split_k": "a plain GEMM's K loop (range, range over block indices or while) split over a third grid axis "
               "where the launch's M x N tiles leave SMs idle; float32 partials in a workspace through the "
               "store's own addressing, summed in a fixed order before the kernel's own epilogue",
    "persistent_tiles": "a plain GEMM on min(SMs, tiles) programs, each looping over the tiles of the original grid "
                        "with the program id replaced by the tile's and the parameters it assigns set anew each "
                        "tile, where there are more tiles than SMs",
    "grouped_ordering": "the program ids of a 2-D tiling (a split pid // n, pid % n, or two program ids) permuted "
                        "into groups of GROUP_M row tiles per sweep of the column tiles (an L2 swizzle)",
    "online_softmax": "a softmax reduction (a row's max, then a sum of exp(x - max)) in one pass with a running "
                      "max and a rescaled sum: two loop passes merged, or a one-block row walked in chunks where "
                      "it is long, any other max, min or sum of the row carried along; rows too few to fill the "
                      "GPU split over several programs and combined",
    "split_rows": "rows whose statistics are sums (RMSNorm's sum of squares, an L2 norm, a row sum), too few for "
                  "the SMs, split over several programs a row: each sums its segment, then each adds its row's "
                  "partials in one fixed order and stores its segment; a loop's sums (any loop form, lane by lane "
                  "or one value), a chain of loops of sums each reading the sums before it (LayerNorm's mean, then "
                  "its variance) a stage each, or a one-block row's",
    "launch_fusion": "two launches that run one after the other (analysis/buffers.py) as one: on one grid, the "
                     "second reading what the same program of the first stored, in registers (the store kept "
                     "where the host uses the buffer); an element-wise kernel over a flattened tensor computed "
                     "where the next reads its output; a second kernel run by the last program of the first to "
                     "finish (one program combining partials, or a few run in turn behind a host check); "
                     "independent launches as one grid of both",
    "single_pass": "loops over a row in blocks of B (any loop form, 2-D tiles, tl.dot K loops) as one block of "
                   "the row's next power of two where it fits, the loops kept for longer rows",
    "inductor_configs": "row and element-wise kernels autotuned over Inductor's reduction and pointwise configs, "
                        "where every block size covers the same elements (masked, not reshaped)",
    "contiguity_hints": "tl.max_contiguous(tl.multiple_of(offs, P), P) on offs = M + tl.arange(0, P) where M is "
                        "certain to be a multiple of P (an integer scalar times P, or a loop stepping by P from 0)",
    "data_masks": "loads and stores masked by B & D, D reading loaded values, masked by the bounds B alone with D "
                  "applied by tl.where: a load's other (0 without one) where D is false, a store writing back the "
                  "old values the same program loaded from the same addresses before it",
    "divisibility_hints": "a twin in which the integer parameters of the loads' and stores' offsets and mask bounds "
                          "(strides, sizes) that the host finds to be multiples of 8 are rebound `x = x // 8 * 8` "
                          "under a constexpr bit, launched where one is, the original elsewhere",
    "zero_fill": "a buffer allocated zeroed on the host, allocated empty where the first launch after it runs on "
                 "every path from it, nothing reads it before, the kernel only writes it and its stores' indices "
                 "over the grid cover every element (a flat block over numel, or rows of a row-major tensor)",
}
TILES = ("matmul_configs", "split_k", "persistent_tiles")
# Words a reason uses that a module may also use as a name: they stay words.
KEEP = frozenset({"tl", "triton", "torch", "meta", "float", "int", "min", "max", "range", "a", "an", "as", "at", "be",
                  "by", "in", "is", "it", "no", "not", "of", "on", "or", "to", "the", "its", "and", "one", "two",
                  "all", "any", "for", "has", "if", "else", "row", "sum", "exp", "log", "out", "x", "y"})


def task_refs(tritonbench: str | None, examples: bool) -> list[str]:
    refs = [f"examples:{name}" for name in example_names()] if examples else []
    try:
        refs += [f"tritonbench:{name}" for name in sorted(tb.entries(tritonbench))]
    except UserError as exc:
        print(f"(no TritonBench tasks: {exc})", file=sys.stderr)
    return refs


def variant_sources(source: str, rewrite: str) -> tuple[list[tuple[str, str]], tuple[str, ...]]:
    found = options(source, (rewrite,))
    return [(v.rationale, v.apply(found.module)) for v in found.variants], found.reasons


def compiles(source: str) -> bool:
    try:
        compile(source, "<variant>", "exec")
    except SyntaxError:
        return False
    return True


def grouped(reason: str, source: str) -> str:
    """The reason with the names the module defines (kernels, parameters, locals) replaced by placeholders."""
    try:
        ms = ModuleSource(source)
    except Exception:  # noqa: BLE001 - a module that does not parse keeps its reason as it is
        return reason
    kernels = set(ms.kernels) | {s.name for s in ms.scopes if s.name != "<module>"}
    names = {n for k in ms.kernels.values() for n in k.names}
    names |= {n for s in ms.scopes for n in (*s.assigns, *s.params)}
    names -= KEEP

    def swap(match: re.Match) -> str:
        word = match.group(0)
        if word in kernels:
            return "K"
        # a name the module defines, where it reads as code (BLOCK_M, acc_ptr, N): a plain word stays a word
        code_like = "_" in word or any(c.isupper() or c.isdigit() for c in word)
        return "X" if word in names and code_like else word
    return re.sub(r"\b[A-Za-z_][A-Za-z0-9_]*\b", swap, reason)


def coverage(refs: list[str], tritonbench: str | None = None, check: bool = False, files: list[str] = ()) -> dict:
    """Per task, the number of variants of each rewrite; per structural rewrite, its grouped refusals; the
    tl.dot kernels a tile rewrite fires on; and how many variants (with `check`, second generation too) do not
    compile."""
    tasks: dict[str, dict[str, int]] = {}
    refusals: dict[str, Counter] = {name: Counter() for name in STRUCTURAL}
    broken = second = 0
    dot = {"kernels": 0, "tile_rewrite": 0}
    sources = [(ref, load_task(ref, tritonbench).module_source) for ref in refs]
    sources += [(path, load_task(path).module_source) for path in files]
    for ref, source in sources:
        tasks[ref] = {}
        for rewrite in REWRITES:
            made, reasons = variant_sources(source, rewrite)
            broken += sum(not compiles(new) for _, new in made)
            if check:
                for _, new in made:
                    for again in REWRITES:
                        remade, _ = variant_sources(new, again)
                        second += len(remade)
                        broken += sum(not compiles(s) for _, s in remade)
            tasks[ref][rewrite] = len(made)
            if rewrite in refusals and not made:
                refusals[rewrite].update({grouped(r, source) for r in reasons})
        if "tl.dot" in source:
            dot["kernels"] += 1
            dot["tile_rewrite"] += any(tasks[ref][r] for r in TILES)
    return {"tasks": tasks, "refusals": {k: dict(v.most_common()) for k, v in refusals.items()}, "tl_dot": dot,
            "broken": broken, "second": second}


def outputs(refs: list[str], tritonbench: str | None, jobs: int, rewrites: list[str]) -> dict:
    """Every variant of the given structural rewrites evaluated in the interpreter against its task's starting
    kernel, on the tasks they fire on."""
    from kernelband.evaluation.evaluator import Evaluator, Limits

    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))
    from test_rewrite_correctness import one_config_each

    found: dict[str, dict] = {}
    with Evaluator(mode="interpreter", warm=jobs, limits=Limits(load_s=120, run_s=300, time_s=300),
                   memory_limit=6 << 30) as evaluator:
        def task(ref: str) -> tuple[str, dict]:
            loaded = load_task(ref, tritonbench)
            record: dict = {}
            made = {r: variant_sources(loaded.module_source, r)[0] for r in rewrites}
            if not any(made.values()):
                return ref, record
            try:
                base = evaluator.evaluate(loaded, loaded.module_source, seed=3)
            except UserError as exc:  # the starting kernel fails on every shape: nothing to compare against
                return ref, {"skipped": f"the starting kernel does not run in the interpreter: {str(exc)[:200]}"}
            if not base.ok:
                return ref, {"skipped": f"the starting kernel is not ok in the interpreter: {base.outcome.value} "
                                        f"{(base.detail or base.error)[:160]}"}
            for rewrite, variants in made.items():
                ok, wrong = 0, []
                for rationale, source in variants:
                    for label, each in one_config_each(source):
                        result = evaluator.evaluate(loaded, each, seed=3)
                        if result.ok:
                            ok += 1
                        else:
                            wrong.append(f"{rationale[:80]}{label}: {result.outcome.value} "
                                         f"{(result.detail or result.error)[-200:]}")
                if variants:
                    record[rewrite] = {"ok": ok, "wrong": wrong}
            return ref, record

        with ThreadPoolExecutor(max_workers=jobs) as pool:
            for ref, record in pool.map(task, refs):
                if record:
                    found[ref] = record
                    print(f"{ref}: {record}", file=sys.stderr, flush=True)
    return found


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("files", nargs="*", help="task files to add")
    parser.add_argument("--tritonbench", default=None)
    parser.add_argument("--tasks", default="", help="comma-separated task refs (default: every TritonBench-G task)")
    parser.add_argument("--examples", action="store_true", help="add the built-in examples")
    parser.add_argument("--json", action="store_true")
    parser.add_argument("--show", default=None, help="TASK_REF:REWRITE, e.g. examples:matmul:num_warps")
    parser.add_argument("--check", action="store_true", help="also rewrite every variant once more")
    parser.add_argument("--outputs", action="store_true", help="evaluate every structural variant in the interpreter")
    parser.add_argument("--rewrites", default="", help="with --outputs: only these structural rewrites' variants")
    parser.add_argument("--jobs", type=int, default=2)
    args = parser.parse_args()
    if args.show:
        ref, _, rewrite = args.show.rpartition(":")
        if rewrite not in REWRITES:
            raise UserError(f"no built-in rewrite is called {rewrite!r}: one of {', '.join(REWRITES)}")
        source = load_task(ref, args.tritonbench).module_source
        for rationale, new in variant_sources(source, rewrite)[0]:
            print(f"### {rationale}")
            sys.stdout.writelines(difflib.unified_diff(source.splitlines(True), new.splitlines(True), n=1))
        return
    refs = args.tasks.split(",") if args.tasks else task_refs(args.tritonbench, args.examples)
    found = coverage(refs, args.tritonbench, args.check, args.files)
    if args.outputs:
        rewrites = args.rewrites.split(",") if args.rewrites else list(STRUCTURAL)
        if unknown := [r for r in rewrites if r not in STRUCTURAL]:
            raise UserError(f"--rewrites: {', '.join(unknown)} is not a structural rewrite: one of "
                            f"{', '.join(STRUCTURAL)}")
        fired = [ref for ref, counts in found["tasks"].items() if any(counts.get(r) for r in rewrites)]
        found["outputs"] = outputs(fired, args.tritonbench, args.jobs, rewrites)
    if args.json:
        print(json.dumps(found, indent=1))
    else:
        print(f"{'rewrite':18} {'tasks':>6} {'variants':>9}")
        for name in STRUCTURAL:
            fired = sum(bool(row[name]) for row in found["tasks"].values())
            print(f"{name:18} {fired:>6} {sum(row[name] for row in found['tasks'].values()):>9}")
        dot = found["tl_dot"]
        print(f"tl.dot kernels with a tile rewrite ({', '.join(TILES)}): {dot['tile_rewrite']} of {dot['kernels']}")
        for name, line in STRUCTURAL.items():
            print(f"\n{name}: {line}")
            for reason, count in found["refusals"][name].items():
                print(f"  {count:4}  {reason}")
        if args.check:
            print(f"second-generation variants: {found['second']}")
        print(f"variants that do not compile: {found['broken']}")
    if found["broken"]:
        raise SystemExit(1)


if __name__ == "__main__":
    run_script(main)
