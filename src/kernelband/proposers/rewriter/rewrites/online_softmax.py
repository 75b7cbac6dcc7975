"""online_softmax: a softmax reduction (a max over a row, then a sum of exp(x - max) over it; reductions.py)
computed in one pass over the row, with a running max and a sum rescaled as the max grows:

* two passes of a loop (a max pass, then an exp-sum pass, in any loop form, with scalar or lane-wise running
  values) become one (online_passes.py);
* a row held in one block (`BLOCK = next_power_of_2(n_cols)`) gets a twin that walks it in fixed-size chunks:
  one loop for the statistics (online max and sum, and any other max, min or sum the kernel takes of the row),
  then one for the stores (online_rows.py); rows longer than a threshold take it, on the host where the launch
  passes the block size, else at compile time in the kernel (online_launch.py).

A kernel that already keeps a running max with a rescaled sum (flash attention) is no target.
"""

from __future__ import annotations

from kernelband.proposers.rewriter.analysis.facts import facts_of
from kernelband.proposers.rewriter.analysis.source import ModuleSource
from kernelband.proposers.rewriter.analysis.syntax import fresh_name
from kernelband.proposers.rewriter.edits import Found, Variant
from kernelband.proposers.rewriter.rewrites.online_launch import (
    CHUNK,
    LONG,
    host_knows,
    in_kernel,
    lifted_guards,
    on_host,
)
from kernelband.proposers.rewriter.rewrites.online_passes import merge
from kernelband.proposers.rewriter.rewrites.online_rows import plan
from kernelband.proposers.rewriter.rewrites.online_split import split_edits


def online_softmax(ms: ModuleSource) -> Found:
    variants, reasons = [], []
    for kernel in ms.kernels.values():
        reductions = facts_of(kernel).reductions
        targets = reductions.targets
        if not targets:
            reasons.append(reductions.why_none())
            continue
        for entry in (t for t in targets if t.form == "two_pass"):
            made = merge(kernel, entry)
            (variants if isinstance(made, Variant) else reasons).append(made)
            if isinstance(made, Variant):
                break
        rows = [t for t in targets if t.form == "one_block"]
        if not rows:
            continue
        if not ms.launches_of(kernel):
            reasons.append(f"{kernel.name} is launched nowhere in this module (a helper, run by the kernels that call it)")
            continue
        found = plan(kernel, [reduction for row in rows for reduction in (row.max, row.sum)])
        if isinstance(found, str):
            reasons.append(found)
            continue
        used = set(kernel.names) | {n for s in ms.scopes for n in s.assigns} | set(ms.kernels)
        chunk = fresh_name("CHUNK", used)
        on_the_host = host_knows(ms, found)
        lifted = lifted_guards(ms, found) if on_the_host else []
        if on_the_host:
            twin = fresh_name(f"{kernel.name}_online", used)
            edits = on_host(ms, found, twin, chunk)
            edits = edits if isinstance(edits, str) else [*edits, *lifted]
            where = f"{twin}, chosen at the launch"
        else:
            edits = in_kernel(ms, found, fresh_name("LONG_ROW", used), chunk)
            where = "chosen in the kernel at compile time"
        if isinstance(edits, str):
            reasons.append(edits)
            continue
        touched = frozenset({kernel.name} | {x.scope.top for x in ms.launches_of(kernel)} - {None})
        stats = ", ".join(f"{s.op}" + (" of exp(x - max)" if s.against else "") for s in found.stats)
        what = (f"{kernel.name}'s row block {found.block} in chunks of {CHUNK} where it is over {LONG}: one pass "
                f"for its statistics ({stats}, online), one for its stores ({where})"
                + ("; the launch's bound on the row's length lifted" if lifted else ""))
        variants.append(Variant("online_softmax", what, touched, tuple(edits)))
        if on_the_host:
            split = split_edits(ms, found, twin, chunk)
            split = split if isinstance(split, str) else [*split, *lifted]
            if isinstance(split, str):
                reasons.append(split)
            else:
                variants.append(Variant("online_softmax", f"{what}; rows too few for the SMs split over programs, "
                                        f"partial statistics combined in a second stage", touched, tuple(split)))
    return Found(variants, reasons)
