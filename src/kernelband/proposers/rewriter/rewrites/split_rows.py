"""split_rows: rows whose statistics are sums (RMSNorm's sum of x * x, an L2 norm, a row's sum or mean), too few
to fill the GPU, each split over SPLIT programs as a two-stage reduction: program (row, j) sums its segment of
the row and stores the partial; then each program of the row adds its row's SPLIT partials in one fixed order,
runs what reads the sums, and stores its segment. The launch chooses it on the host from its grid and the SM
count (online_split.py), the original launch otherwise.

Two forms of row, found by data flow (analysis/loops.py's carried sums, analysis/reductions.py's sums over a
block), whatever the names:

* a loop that sums the row in blocks, lane by lane or as one value, then what reads the sums, loops that store
  along the row among it (split_loops.py); loops of sums that read the sums before them (LayerNorm's variance
  around its mean) each take a stage of partials of their own, between the two;
* a row held in one block (`BLOCK = next_power_of_2(n)`), its sums, maxima and minima reduced over the block
  (online_rows.py's plan and online_split.py's stages, the chunked twin taking long rows that are not split);
  sums that read the sums before them (LayerNorm's variance around its mean, a user's one-block LayerNorm) each
  take a stage of partials a level of the chain, between the two (row_chain.py).

A softmax whose passes are loops over the row's blocks (a running max, then a sum of exp(x - max) against it) is
such a chain: the loop of the max takes the first stage, its partials combined by their maximum. A softmax held in
one block is online_softmax's, which splits it; one already online (a sum rescaled as the max grows) is not split.
"""

from __future__ import annotations

from kernelband.proposers.rewriter.analysis.facts import facts_of
from kernelband.proposers.rewriter.analysis.source import Kernel, ModuleSource
from kernelband.proposers.rewriter.analysis.syntax import code, fresh_name
from kernelband.proposers.rewriter.edits import Found, Variant
from kernelband.proposers.rewriter.rewrites.online_launch import CHUNK, host_knows
from kernelband.proposers.rewriter.rewrites.online_rows import plan
from kernelband.proposers.rewriter.rewrites.online_split import split_edits
from kernelband.proposers.rewriter.rewrites.row_chain import ChainPlan, chain_bodies, chain_plan
from kernelband.proposers.rewriter.rewrites.split_loops import fill, loop_edits, loop_split, reducing_loops

# Rows not split take the chunked twin only past this many elements on a GPU. The twin walks a row of sums once
# a pass where the original holds it in registers: at 16,384 floats it took 1.4-2.8x the original's time on an
# H200, at 32,768 the same (online_softmax's twin reads the row once where the original reads it three times,
# so it takes rows from online_launch.LONG on).
SUM_LONG = 32768


def split_rows(ms: ModuleSource) -> Found:
    variants, reasons = [], []
    for kernel in ms.kernels.values():
        reductions = facts_of(kernel).reductions
        looped = reducing_loops(kernel)
        if (reductions.softmax or reductions.online) and not (
                looped and not reductions.online and all(f.form == "two_pass" for f in reductions.softmax)):
            reasons.append(f"{kernel.name} keeps a running max with a sum rescaled as it grows: a split's partials "
                           f"would need the rescaling" if reductions.online else
                           f"{kernel.name} takes a max of its row with a sum of exp(x - max) in one block: "
                           f"online_softmax splits such rows")
            continue
        if not looped and not any(b.op == "sum" for b in reductions.block):
            reasons.append(f"{kernel.name} takes no sum over a row")
            continue
        if not ms.launches_of(kernel):
            reasons.append(f"{kernel.name} is launched nowhere in this module (a helper, run by the kernels that "
                           f"call it)")
            continue
        made = _loop(ms, kernel) if looped else _one_block(ms, kernel)
        if isinstance(made, str):
            reasons.append(made)
            continue
        edits, what = made
        touched = frozenset({kernel.name} | {x.scope.top for x in ms.launches_of(kernel)} - {None})
        variants.append(Variant("split_rows", what, touched, tuple(edits)))
    return Found(variants, reasons)


def _loop(ms: ModuleSource, kernel: Kernel) -> tuple[list, str] | str:
    found = loop_split(kernel)
    return found if isinstance(found, str) else loop_edits(ms, found)


def _one_block(ms: ModuleSource, kernel: Kernel) -> tuple[list, str] | str:
    name = kernel.name
    reductions = facts_of(kernel).reductions.block
    rows = [b for b in reductions if b.loop is None]
    if not rows:
        # The loop's iterations each reduce a block of their own (a recurrence's step, a tile of outputs); no
        # iteration adds to another's, so no program can take a share of one row's sums.
        sums = ", ".join(dict.fromkeys(f"over {b.dim}" if b.dim else f"`{code(b.call)}`" for b in reductions
                                       if b.op == "sum"))
        return f"{name} takes its sums ({sums}) inside a loop that carries no sum from one iteration to the " \
               f"next (each iteration reduces a block of its own: a split's partials would need the loop's " \
               f"iteration)"
    found = plan(kernel, rows)
    if isinstance(found, str):
        # A sum that reads another sum is a chain (LayerNorm's variance around its mean): a stage a level.
        chain = chain_plan(kernel, rows)
        if chain is None:
            return found
        found = chain
    if isinstance(found, str):
        return found
    if not host_knows(ms, found):
        setter = "set by the autotuner or a heuristic, not by every launch" if found.extent.param is not None \
            else "computed in the kernel from its constexpr parameters, which the host does not compute"
        return f"{name}'s row block {found.block} is {setter} (the split is chosen at the launch, from the block)"
    used = set(kernel.names) | {n for s in ms.scopes for n in s.assigns} | set(ms.kernels)
    twin, chunk = fresh_name(f"{name}_chunked", used), fresh_name("CHUNK", used)
    if isinstance(found, ChainPlan):
        edits = split_edits(ms, found, twin, chunk, fill, found.chain, chain_bodies, SUM_LONG)
        if isinstance(edits, str):
            return edits
        return edits, _chain_rationale(found, twin)
    edits = split_edits(ms, found, twin, chunk, fill, long=SUM_LONG)
    if isinstance(edits, str):
        return edits
    stats = ", ".join(s.op for s in found.stats)
    return edits, (f"{name}'s row block {found.block} ({stats}) split over SPLIT programs a row where the rows are "
                   f"too few for the SMs: each reduces its segment in chunks of {CHUNK} ({name}_partials), then "
                   f"each combines its row's SPLIT partials in one fixed order and stores its segment "
                   f"({name}_combine); rows of more than {SUM_LONG} not split walked in chunks ({twin})")


def _chain_rationale(found: ChainPlan, twin: str) -> str:
    name = found.kernel.name
    stages = ", ".join(f"{name}_partials" + (f"_{i}" if i > 1 else "") for i in range(1, found.chain + 1))
    return (f"{name}'s row block {found.block} (a chain of {found.chain} levels of sums, each reading the ones "
            f"before) split over SPLIT programs a row where the rows are too few for the SMs, one stage a level: "
            f"each adds its row's SPLIT partials of the levels before in one fixed order and sums its segment in "
            f"chunks of {CHUNK} ({stages}), then each adds them all and stores its segment ({name}_combine); long "
            f"rows of more than {SUM_LONG} not split walked in chunks, once a level ({twin})")
