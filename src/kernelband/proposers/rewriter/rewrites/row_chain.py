"""A row held in one block whose sums form a chain (LayerNorm's variance, a sum of (x - mean)^2 around the mean,
a sum of x): each sum reads the sums before it, so a program cannot take its share of a later sum before the
earlier ones are complete. Split over SPLIT programs a row (online_split.py's launch), one stage a level of the
chain, as split_loops.py does for loops of sums:

    stage 1  <kernel>_partials: program (row, j) sums its segment of the row for the sums that read no other
             sum, in chunks of CHUNK, and stores its partials;
    stage i  <kernel>_partials_i: each program adds its row's SPLIT partials of the levels before, in one fixed
             order, runs the scalars that read them (the mean), and sums its segment for the i-th level;
    last     <kernel>_combine: each adds all of its row's partials, runs what reads the sums, and stores its
             segment along the row.

The chunked twin for long rows that are not split walks the whole row once a level, then once to store.

The levels are facts of meaning: a sum is a level after each sum whose value its operand holds (the
analysis's canonical forms, analysis/reductions.py), whatever the names. Refused, with the fact: a max or min
among them, a statement that both reduces and reads the row outside the reduction, compile-time branches
around the row block, a scalar set twice, a statement that a level's sums need and that reads a later level.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import libcst as cst

from kernelband.proposers.rewriter.analysis.facts import facts_of
from kernelband.proposers.rewriter.analysis.reductions import BlockReduction, holds
from kernelband.proposers.rewriter.analysis.source import Kernel
from kernelband.proposers.rewriter.analysis.syntax import assigned, fresh_name, loads
from kernelband.proposers.rewriter.edits import statements
from kernelband.proposers.rewriter.rewrites.online_launch import CHUNK, with_params
from kernelband.proposers.rewriter.rewrites.online_rows import (
    ChunkRead,
    Leaf,
    Plan,
    Stat,
    buffer_clash,
    emit_kept,
    inner_first,
    is_store,
    row_block,
    row_leaves,
    stat_init,
    stat_update,
)
from kernelband.proposers.rewriter.rewrites.online_split import (
    header,
    partial_offsets,
    partials_stored,
    segment_span,
)

FINAL = -1  # the loop that stores along the row, after every level


@dataclass(eq=False)
class ChainPlan(Plan):
    """A row block's plan whose sums form a chain: each sum's level, and for each statement the levels
    complete before it may run (`ready`) and the chunk loops that run it (levels, FINAL)."""

    level: dict[int, int] = field(default_factory=dict)  # by id of the sum's call
    ready: dict[int, int] = field(default_factory=dict)  # by id of the leaf
    loops: dict[int, set[int]] = field(default_factory=dict)  # by id of the leaf

    @property
    def chain(self) -> int:
        return max(self.level.values()) + 1


def chain_plan(kernel: Kernel, rows: list[BlockReduction]) -> ChainPlan | str | None:  # noqa: C901 - one check per fact
    """The plan of a row block whose sums read other sums; None where no sum over it reads another (not a
    chain); or the fact that makes the split uncertain."""
    name = kernel.name
    found = row_block(kernel, rows)
    if isinstance(found, str):
        return found
    extent, region, calls = found
    block = extent.dim
    facts = facts_of(kernel)
    deps: dict[int, set[int]] = {}
    reductions: dict[int, BlockReduction] = {}
    for each in facts.reductions.each:
        mine = {id(b.call): b for b in each.block if id(b.call) in calls}
        for key, reduction in mine.items():
            reductions.setdefault(key, reduction)
            read = {k for k, other in mine.items() if k != key and holds(reduction.operand, other.value)}
            if deps.setdefault(key, read) != read:
                return f"{name}'s sum over {block} reads other reductions in one specialization than in another"
    if not any(deps.values()):
        return None
    if any(r.op != "sum" for r in reductions.values()):
        op = next(r.op for r in reductions.values() if r.op != "sum")
        return f"{name} takes a {op} over {block} among a chain of sums (each stage adds partial sums)"
    level: dict[int, int] = {}

    def level_of(key: int, seen: tuple = ()) -> int:
        if key not in level:
            level[key] = 1 + max((level_of(d, (*seen, key)) for d in deps[key] if d not in seen), default=-1)
        return level[key]
    used = set(kernel.names)
    stats = {}
    for key in calls:
        level_of(key)
        shapes = [each.shapes.of(b.value) for each in facts.reductions.each for b in each.block if id(b.call) == key]
        if any(shape != () for shape in shapes):
            return f"{name}'s sums over {block} are tiles (a block of rows) or of unknown shape, not one value a row"
        stats[key] = Stat(calls[key], "sum", fresh_name("sum_run", used), ())
    walk = row_leaves(kernel, region, block, stats)
    if isinstance(walk, str):
        return walk
    if any(kind != "leaf" or guards for kind, _, _, guards in walk):
        return f"{name}'s chain of sums sits among compile-time branches"
    leaves = [entry[1] for entry in walk]
    plan = ChainPlan(kernel, extent, region, leaves, list(stats.values()), level)
    why = _ready(plan) or _loops(plan) or buffer_clash(plan.kernel, plan.leaves)
    return why or plan


def _ready(plan: ChainPlan) -> str:
    """The levels each statement waits for: those of the sums it takes, and of the values it reads."""
    name = plan.kernel.name
    ready: dict[str, int] = {}
    scalars: set[str] = set()
    for leaf in plan.leaves:
        if leaf.kind == "row+stat":
            return f"{name} reads its row outside a sum over it in the statement that takes the sum"
        if leaf.row and isinstance(leaf.node, cst.Expr) and not is_store(plan.kernel, leaf.node):
            return f"{name} calls something along its row that stores nothing"
        wait = max((ready.get(n.value, 0) for n in loads(leaf.node)), default=0)
        wait = max([wait, *(plan.level[id(s.call)] + 1 for s in leaf.stats)])
        plan.ready[id(leaf)] = wait
        made = assigned(leaf.node)
        if not leaf.row:
            if twice := sorted(made & scalars):
                return f"{name} sets {twice[0]} twice (a stage runs the scalars that its levels let it run)"
            scalars |= made
        ready.update(dict.fromkeys(made, wait))
    return ""


def _loops(plan: ChainPlan) -> str:
    """Which chunk loops each row statement runs in: a level's, where that level's sums read what it makes;
    the last, where the stores along the row read it."""
    name = plan.kernel.name
    wants = {k: set().union(*[{n.value for n in loads(s.call)} for s in plan.stats if plan.level[id(s.call)] == k])
             for k in range(plan.chain)}
    for loop, wanted in (*wants.items(), (FINAL, set())):
        for leaf in reversed(plan.leaves):
            if not leaf.row or not (assigned(leaf.node) & wanted or loop == FINAL and is_store(plan.kernel, leaf.node)):
                continue
            if loop != FINAL and plan.ready[id(leaf)] > loop:
                return f"{name}'s sums of one level read {sorted(assigned(leaf.node) & wanted)[0]}, which reads " \
                       f"a sum of that level or a later one"
            plan.loops.setdefault(id(leaf), set()).add(loop)
            wanted |= {n.value for n in loads(leaf.node)}
    for stat in plan.stats:
        late = [n.value for n in loads(stat.call) if any(
            not leaf.row and n.value in assigned(leaf.node) and plan.ready[id(leaf)] > plan.level[id(stat.call)]
            for leaf in plan.leaves)]
        if late:
            return f"{name}'s sum of level {plan.level[id(stat.call)] + 1} reads {late[0]}, which a later level gives"
    return ""


class ChainTwin:
    """The parts of the chain's stages and twin: scalars by the levels they wait for, each level's chunk loop
    over `span` (first, end), and the stores' loop."""

    def __init__(self, plan: ChainPlan, chunk: str, span: tuple[str, str] | None = None) -> None:
        self.plan, self.chunk = plan, chunk
        kernel = plan.kernel
        self.tl = kernel.tl_name
        used = set(kernel.names) | {s.run for s in plan.stats}
        self.start = fresh_name("chunk", used)
        self.span = span or ("0", plan.size)
        self.leaves = {id(leaf.node): leaf for leaf in plan.leaves}
        self.chunked = ChunkRead(kernel, plan.block, chunk, self.start, {id(s.call): s.run for s in plan.stats})

    def _emit(self, keep) -> list[cst.BaseStatement]:
        return emit_kept(self.plan.region, lambda small: keep(self.leaves[id(small)], small)
                     if id(small) in self.leaves else [])

    def scalars(self, low: int, high: int, final: bool) -> list[cst.BaseStatement]:
        """The scalars (statistics' statements among them) that wait for `low` to `high` levels; scalar stores
        only in the `final` stage (every program of the row stores the same value)."""
        def keep(leaf: Leaf, small):
            if leaf.row or not low <= self.plan.ready[id(leaf)] <= high or is_store(self.plan.kernel, small) \
                    and not final:
                return []
            return [small.visit(self.chunked) if leaf.stats else small]
        return self._emit(keep)

    def starts(self, level: int) -> list[cst.BaseStatement]:
        return statements("".join(f"{s.run} = {stat_init(self.tl, s)}\n" for s in self.of(level)))

    def of(self, level: int) -> list[Stat]:
        return [s for s in self.plan.stats if self.plan.level[id(s.call)] == level]

    def loop(self, level: int) -> list[cst.BaseStatement]:
        """A level's chunk loop (level FINAL: the stores')."""
        mine = {id(s.call) for s in self.of(level)}

        def keep(leaf: Leaf, small):
            out = [u for s in inner_first([s for s in leaf.stats if id(s.call) in mine])
                   for u in stat_update(self.tl, s, self.chunked)]
            return out + ([small.visit(self.chunked)] if level in self.plan.loops.get(id(leaf), ()) else [])
        body = self._emit(keep)
        if not body:
            return []
        loop = cst.parse_statement(f"for {self.start} in range({self.span[0]}, {self.span[1]}, {self.chunk}):\n"
                                   f"    pass\n")
        return [loop.with_changes(body=loop.body.with_changes(body=body))]

    def combined(self, names: dict[str, str], parts: dict[int, str], levels: int) -> list[cst.BaseStatement]:
        """The sums of the first `levels` levels from the row's SPLIT partials, added in one fixed order."""
        offsets = partial_offsets(self.tl, names)
        return statements("".join(f"{s.run} = {self.tl}.sum({self.tl}.load({parts[id(s.call)]} + {offsets}), 0)\n"
                                  for level in range(levels) for s in self.of(level)))


def chain_bodies(plan: ChainPlan, names: dict[str, str], parts: dict[int, str], axis: int, chunk: str,
                 twin: str) -> tuple[list[list[cst.BaseStatement]], cst.FunctionDef]:
    """online_split.split_edits's `build` for a chain: a stage of partials a level, then the combining stage;
    and the chunked twin."""
    tl, chain = plan.kernel.tl_name, plan.chain
    staged = ChainTwin(plan, chunk, segment_span(plan, names))
    bodies = []
    for level in range(chain):
        bodies.append([*header(tl, names, axis), *staged.scalars(0, 0, False), *staged.combined(names, parts, level),
                       *staged.scalars(1, level, False), *staged.starts(level), *staged.loop(level),
                       *partials_stored(tl, names, parts, staged.of(level))])
    bodies.append([*header(tl, names, axis), *staged.scalars(0, 0, True), *staged.combined(names, parts, chain),
                   *staged.scalars(1, chain, True), *staged.loop(FINAL)])
    whole = ChainTwin(plan, chunk)
    body = whole.scalars(0, 0, True)
    for level in range(chain):
        body += [*whole.starts(level), *whole.loop(level), *whole.scalars(level + 1, level + 1, True)]
    body += whole.loop(FINAL)
    kernel = plan.kernel
    made = kernel.node.with_changes(name=cst.Name(twin), body=kernel.node.body.with_changes(body=body),
                                    params=with_params(kernel.node, tl, **{chunk: CHUNK}))
    return bodies, made
