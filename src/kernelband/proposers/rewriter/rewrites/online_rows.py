"""A row held in one block (`BLOCK = next_power_of_2(n_cols)`, reductions over BLOCK) walked in fixed-size chunks
instead: one pass for the row's statistics with online max and sum, then a second pass for what the kernel
stores along the row.

    row = tl.load(p + offs, mask=offs < n, other=-inf)    prologue: what reads no row value
    m = tl.max(row, 0)                                     m_run = -inf; s_run = 0.0
    e = tl.exp(row - m)                                    for chunk in range(0, BLOCK, CHUNK):
    s = tl.sum(e, 0)                                  ->       row = LOAD(chunk + tl.arange(0, CHUNK))
    tl.store(q + offs, e / s, mask=offs < n)                   m_prev = m_run
                                                               m_run = tl.maximum(m_run, tl.max(row, 0))
                                                               e = tl.exp(row - m_run)
                                                               s_run = rescaled(s_run, m_prev, m_run) + tl.sum(e, 0)
                                                           m = m_run; s = s_run          (what reads the statistics)
                                                           for chunk in range(0, BLOCK, CHUNK):
                                                               row = LOAD(...); e = tl.exp(row - m)
                                                               tl.store(q + chunk + ..., e / s, mask=...)

Each statement of the kernel (or of the loop holding the row block) is one of: a row statement (it reads or
makes a value along BLOCK), a statistic (it reduces such a value over BLOCK: tl.max, tl.min, tl.sum), or a scalar
statement. Scalars that read no statistic run first; the row statements that the statistics need run in the
first chunk loop, each reduction kept as a running value (max, min, sum; a sum of exp(scale * (x - max)) of a
max rescaled as the max grows); then the statistics and the scalars that read them; then the row statements
that the stores need, in the second chunk loop, reading the statistics' final values. Compile-time branches
are kept around whatever part of them each phase runs.

The twin covers BLOCK lanes as the original does, CHUNK at a time (both powers of two, CHUNK <= BLOCK), with
the original's masks: each lane is read, reduced and stored as before; only the order of the sums changes
(and the statistics are float32). Refused, with the fact: a reduction over BLOCK other than max, min and sum;
a max or min of a value that depends on another statistic, or a sum that depends on one other than as
exp(scale * (x - max)); a value along BLOCK that a scan, reshape, sort or tl.dot makes (it depends on the whole
block); a row value read after the row loops; a scalar set after a row statement reads it.
"""

from __future__ import annotations

import ast
from dataclasses import dataclass, field

import libcst as cst

from kernelband.proposers.rewriter.analysis.facts import facts_of
from kernelband.proposers.rewriter.analysis.identities import unmasked
from kernelband.proposers.rewriter.analysis.reductions import BlockReduction, Exponent, exponent_of, holds
from kernelband.proposers.rewriter.analysis.row_extent import RowExtent
from kernelband.proposers.rewriter.analysis.source import Kernel
from kernelband.proposers.rewriter.analysis.syntax import (
    assigned,
    code,
    dotted,
    fresh_name,
    loads,
    subnodes,
)
from kernelband.proposers.rewriter.edits import statements
from kernelband.proposers.rewriter.rewrites.online_passes import NEG_INF, rescaled, scale_code

STORES = ("store", "atomic_add", "atomic_max", "atomic_min", "atomic_xchg", "atomic_cas", "atomic_and",
          "atomic_or", "atomic_xor")


@dataclass(eq=False)
class Stat:
    """One reduction over the block, kept as a running value over the chunks."""

    call: cst.Call
    op: str  # "max", "min", "sum"
    run: str  # the running value's name (its final value after the first loop)
    shape: tuple[str, ...] | None
    against: Stat | None = None  # a sum of exp(scale * (x - max)): that max
    exponent: Exponent | None = None
    prev: str | None = None  # a max that a sum is taken against: its value before this chunk


@dataclass(eq=False)
class Leaf:
    """A small statement of the row block, with its kind and phases."""

    node: cst.BaseSmallStatement
    item: int  # the index of the region's statement that holds it
    guards: tuple[cst.If, ...]  # the `if`s around it
    kind: str = "scalar"  # "scalar", "row", "stat" (reduces, reads no row value outside), "row+stat"
    stats: list[Stat] = field(default_factory=list)
    late: bool = False  # a scalar that runs after the statistics (it reads one, or shares an `if` with one)
    first: bool = False  # runs in the first chunk loop (a row statement the statistics need, or a rebinding)
    second: bool = False  # runs in the second chunk loop (a row statement the stores need, or a store)

    @property
    def row(self) -> bool:
        return self.kind in ("row", "row+stat")

    @property
    def phases(self) -> set[int]:
        """When it runs in the twin: 0 before the loops, 1 in the first, 2 between them, 3 in the second."""
        if self.kind == "scalar":
            return {2 if self.late else 0}
        return {p for p, on in ((1, self.first or bool(self.stats)), (2, self.kind == "stat"), (3, self.second)) if on}


@dataclass(eq=False)
class Plan:
    kernel: Kernel
    extent: RowExtent  # the row block: a constexpr parameter, or an integer the source fixes
    region: cst.IndentedBlock  # the statements holding the row block (the kernel's body or a loop's)
    leaves: list[Leaf]
    stats: list[Stat]

    @property
    def block(self) -> str:
        """The row block as shapes spell it (`BLOCK_SIZE`, `1024`, a module constant's name)."""
        return self.extent.dim

    @property
    def size(self) -> str:
        """Code of the row block's size in the kernel: its parameter, or the integer the source fixes."""
        return self.extent.size


def is_store(kernel: Kernel, node: cst.CSTNode) -> bool:
    return isinstance(node, cst.Expr) and isinstance(node.value, cst.Call) and any(
        kernel.is_tl(node.value.func, s) for s in STORES)


def _walk(suite: cst.BaseSuite, item: int | None = None, guards: tuple = ()) -> list:
    """The region's small statements and `if` tests in order: ("leaf", small, item, guards) and
    ("test", if node, item, guards)."""
    out = []
    for index, statement in enumerate(suite.body):
        at = index if item is None else item
        if isinstance(statement, cst.SimpleStatementLine):
            out += [("leaf", small, at, guards) for small in statement.body]
        elif isinstance(statement, cst.If):
            out += _walk_if(statement, at, guards)
        elif isinstance(statement, cst.BaseSmallStatement):
            out.append(("leaf", statement, at, guards))
        else:
            out.append(("other", statement, at, guards))
    return out


def _walk_if(node: cst.If, item: int, guards: tuple) -> list:
    inner = (*guards, node)
    out = [("test", node, item, guards), *_walk(node.body, item, inner)]
    if isinstance(node.orelse, cst.If):
        out += _walk_if(node.orelse, item, inner)
    elif node.orelse is not None:
        out += _walk(node.orelse.body, item, inner)
    return out


def plan(kernel: Kernel, rows: list[BlockReduction]) -> Plan | str:  # noqa: C901 - one check per fact
    """What the twin of the row block that the row's reductions `rows` reduce does with each statement; or the
    fact that makes it uncertain."""
    found = row_block(kernel, rows)
    if isinstance(found, str):
        return found
    extent, region, calls = found
    stats = _stats(kernel, extent.dim, calls)
    if isinstance(stats, str):
        return stats
    walk = row_leaves(kernel, region, extent.dim, stats)
    if isinstance(walk, str):
        return walk
    why = _phases(kernel, walk)
    leaves = [entry[1] for entry in walk if isinstance(entry[1], Leaf)]
    return why or Plan(kernel, extent, region, leaves, list(stats.values()))


def row_block(kernel: Kernel, rows: list[BlockReduction]) -> tuple[RowExtent, cst.IndentedBlock, dict] | str:
    """(the row block's extent, the statements holding it, its reductions' calls by id); or the fact that makes
    a twin of it uncertain whatever its statistics."""
    name = kernel.name
    facts = facts_of(kernel)
    extent = facts.row_extents.of(rows)
    if isinstance(extent, str):
        return extent
    block = extent.dim
    role = facts.roles.get(block) if extent.param is not None else None
    if role.steps if role is not None else facts.row_extents.steps(extent):
        return f"{name} steps a loop by its row block {block}"
    shaped = (role.shaped[0] if role.shaped else None) if role is not None else facts.row_extents.shaped(extent)
    if shaped:
        return f"tl.{shaped}'s result depends on the extent of {block} (the whole row block)"
    reductions = facts.reductions
    calls: dict[int, cst.Call] = {}
    for each in reductions.each:
        for found in each.block:
            if found.dim == block:
                calls[id(found.call)] = found.call
            elif found.dim is None and block in (each.shapes.of(found.operand) or ()):
                return f"{name} reduces a value along {block} over an axis its shape does not say"
    loops = {b.loop for each in reductions.each for b in each.block if id(b.call) in calls}
    if len(loops) != 1:
        return f"{name} reduces over {block} in more than one loop"
    [loop] = loops
    region = kernel.node.body if loop is None else loop.body
    if not isinstance(region, cst.IndentedBlock):
        return f"{name}'s row block is in a one-line suite"
    return _shapes_obstacle(kernel, block, calls) or (extent, region, calls)


def _shapes_obstacle(kernel: Kernel, block: str, calls: dict[int, cst.Call]) -> str:
    facts = facts_of(kernel)
    name = kernel.name
    for call in kernel.calls("arange"):
        expanded = facts.values.expand(call)
        if expanded.args[1] is not None and ast.unparse(expanded.args[1]) == block \
                and ast.unparse(expanded.args[0]) != "0":
            return f"{name} makes a range along {block} that does not start at 0"
    for call in subnodes(kernel.node.body, cst.Call):
        if any(kernel.is_tl(call.func, r) for r in ("argmax", "argmin", "reduce", "xor_sum", "prod")) and call.args:
            shape = facts.shapes.of(facts.values.expand(call.args[0].value))
            if shape and block in shape:
                return f"{name} reduces a value along {block} by {dotted(call.func)} (not a max, min or sum)"
    for call in kernel.calls("dot"):
        if any(block in (facts.shapes.of(facts.values.expand(a.value)) or ()) for a in call.args[:2]):
            return f"a tl.dot of {name} multiplies values along {block}"
    for access in facts.accesses.all:
        if access.form != "pointer" and block in (access.shape or ()):
            return f"{name} reads or writes along {block} through a block pointer or descriptor"
        if access.shape is not None and list(access.shape).count(block) > 1:
            return f"{name} has a tile with two dimensions of {block}"
    helpers = {k.name: k for k in kernel.ms.kernels.values() if k is not kernel}
    for call in subnodes(kernel.node.body, cst.Call):
        helper = helpers.get(dotted(call.func) or "")
        if helper is not None and helper.calls("arange"):
            return f"{name} calls {helper.name}, which makes its own range"
    return ""


def _stats(kernel: Kernel, block: str, calls: dict[int, cst.Call]) -> dict[int, Stat] | str:
    """The running value each reduction over the block becomes, and what each sum is taken against."""
    facts = facts_of(kernel)
    name = kernel.name
    used = set(kernel.names)
    stats: dict[int, Stat] = {}
    kinds: dict[int, tuple] = {}
    for each in facts.reductions.each:
        found = {id(b.call): b for b in each.block if id(b.call) in calls}
        for key, reduction in found.items():
            deps = [other for k, other in found.items() if k != key and holds(reduction.operand, other.value)]
            if reduction.op != "sum" and deps:
                return f"{name}'s {reduction.op} over {block} depends on another reduction over the row"
            if reduction.op == "sum" and deps:
                tops = [d for d in deps if d.op == "max"]
                exponent = exponent_of(unmasked(reduction.operand, "sum")[1], tops[0].value) \
                    if len(tops) == 1 == len(deps) else None  # tl.where(mask, tl.exp(x - m), 0.0) rescales alike
                if exponent is None or scale_code(exponent, kernel.tl_name) is None:
                    return f"{name}'s sum over {block} depends on another reduction over the row other than as " \
                           f"exp(x - max)"
                kind = ("softmax", id(tops[0].call), exponent.base, scale_code(exponent, kernel.tl_name))
            else:
                kind = (reduction.op,)
            if kinds.setdefault(key, kind) != kind:
                return f"{name}'s sum over {block} is taken against a max in one specialization and not another"
            if key not in stats:
                stats[key] = Stat(reduction.call, reduction.op, fresh_name(f"{reduction.op}_run", used), None)
            if stats[key].shape is None:
                stats[key].shape = each.shapes.of(reduction.value)
            if kind[0] == "softmax":
                stats[key].exponent = exponent
    if any(stat.shape is None for stat in stats.values()):
        return f"the shape of a reduction over {block} in {name} is not known"
    for key, kind in kinds.items():
        if kind[0] == "softmax":
            top = stats[kind[1]]
            stats[key].against = top
            top.prev = top.prev or fresh_name(f"{top.run}_prev", used)
    return stats


def row_leaves(kernel: Kernel, region: cst.IndentedBlock, block: str, stats: dict[int, Stat]) -> list | str:
    """The walk of the region (`_walk`) with a Leaf, of its kind, for each small statement: the names made
    along the block are followed in order."""
    name = kernel.name
    row_names: set[str] = set()
    walk = []
    for kind, node, item, guards in _walk(region):
        if kind == "other":
            return f"{name} loops inside its row block"
        if kind == "test" or isinstance(node, cst.Pass) or isinstance(node, cst.Return) and node.value is None:
            walk.append((kind, node, item, guards))
            continue
        if not isinstance(node, cst.Assign | cst.AugAssign | cst.AnnAssign | cst.Expr):
            return f"{name} has a `{code(node).split()[0]}` among its row statements"
        inside = [s for key, s in stats.items() if any(id(c) == key for c in subnodes(node, cst.Call))]
        hidden = {id(n) for s in inside for n in subnodes(s.call, cst.CSTNode)}
        row = any(n.value in row_names for n in loads(node) if id(n) not in hidden) \
            or any(_makes_block(kernel, c, block) for c in subnodes(node, cst.Call) if id(c) not in hidden) \
            or (not inside and block in (_value_shape(kernel, node) or ()))
        leaf = Leaf(node, item, guards, ("row+stat" if row else "stat") if inside else ("row" if row else "scalar"),
                    inside)
        if row:
            row_names |= assigned(node)
        walk.append(("leaf", leaf, item, guards))
    leaves = [entry[1] for entry in walk if isinstance(entry[1], Leaf)]
    changed = True
    while changed:  # a scalar that a row statement reassigns, or that reads one, is computed with the row
        changed = False
        for leaf in leaves:
            if leaf.kind == "scalar" and (assigned(leaf.node) | {n.value for n in loads(leaf.node)}) & row_names \
                    and not is_store(kernel, leaf.node):
                leaf.kind, changed = "row", True
                row_names |= assigned(leaf.node)
    scalar_names = set().union(*[assigned(leaf.node) for leaf in leaves if not leaf.row])
    if both := sorted(scalar_names & row_names):
        return f"{name} sets {both[0]} both along the row and as one value"
    for kind, node, _, _ in walk:
        if kind == "test" and ({n.value for n in loads(node.test)} & row_names
                               or any(_makes_block(kernel, c, block) for c in subnodes(node.test, cst.Call))):
            return f"{name} branches on a value along its row block"
    return walk


def _value_shape(kernel: Kernel, small: cst.BaseSmallStatement) -> tuple[str, ...] | None:
    """The shape of what an assignment assigns."""
    value = getattr(small, "value", None)
    if not isinstance(small, cst.Assign | cst.AugAssign | cst.AnnAssign) or value is None:
        return None
    facts = facts_of(kernel)
    return facts.shapes.of(facts.values.expand(value))


def _makes_block(kernel: Kernel, call: cst.Call, block: str) -> bool:
    """`tl.arange(0, BLOCK)`, `tl.zeros([.., BLOCK])`, `tl.full((BLOCK,), ..)`: a tile along the block, however
    its extent is spelled (`1024`, a local bound to it, a module constant), as its shape says."""
    if not any(kernel.is_tl(call.func, f) for f in ("arange", "zeros", "full")):
        return False
    facts = facts_of(kernel)
    return block in (facts.shapes.of(facts.values.expand(call)) or ())


def _along(kernel: Kernel, node: cst.BaseExpression, block: str) -> bool:
    """Whether an extent's code is the row block's (an original node of the kernel, read as its value)."""
    return ast.unparse(facts_of(kernel).values.expand(node)) == block


def _phases(kernel: Kernel, walk: list) -> str:  # noqa: C901 - one rule per kind of statement
    """Which loop each row statement runs in and which scalars wait for the statistics; or why a statement
    cannot move so."""
    name = kernel.name
    leaves = [entry[1] for entry in walk if isinstance(entry[1], Leaf)]
    late_names: set[str] = set()
    late_items: set[int] = set()
    changed = True
    while changed:  # a scalar reading a statistic waits for it, and so does all of the statement holding it
        changed = False
        for leaf in leaves:
            if leaf.kind == "stat":
                late_names |= assigned(leaf.node)
            elif leaf.kind == "scalar" and not leaf.late and ({n.value for n in loads(leaf.node)} & late_names
                                                             or leaf.item in late_items):
                leaf.late, changed = True, True
                late_names |= assigned(leaf.node)
                late_items.add(leaf.item)
        for kind, node, item, _ in walk:
            if kind == "test" and item not in late_items and {n.value for n in loads(node.test)} & late_names:
                late_items.add(item)
                changed = True
    sums = {id(s.call) for leaf in leaves for s in leaf.stats if s.op == "sum"}
    needed: set[str] = set()  # the first loop: what the reductions' operands read, back to the loads
    for leaf in reversed(leaves):  # each reduction reads what is made before it (`p = p / tl.sum(p)` makes p anew)
        made, reads = assigned(leaf.node), set().union(*[{n.value for n in loads(s.call)} for s in leaf.stats])
        if not (made & needed) or leaf.kind == "scalar" and not leaf.late:
            needed |= reads
            continue
        if leaf.late:
            return f"{name}'s reduction over the row reads {sorted(made & needed)[0]}, which another reduction " \
                   f"over the row gives"
        if any(id(s.call) in sums for s in leaf.stats):
            return f"{name} reads the row's sum {sorted(made & needed)[0]} before the sum is complete"
        leaf.first = True
        needed |= {n.value for n in loads(leaf.node)}
    # The second loop: what the stores along the row read.
    wanted: set[str] = set()
    for leaf in reversed(leaves):
        if leaf.row and (is_store(kernel, leaf.node) or assigned(leaf.node) & wanted):
            leaf.second = True
            wanted |= {n.value for n in loads(leaf.node)}
        elif leaf.row and isinstance(leaf.node, cst.Expr):
            return f"{name} calls something along its row that stores nothing"
    # Values may move only where nothing that reads them before runs after them.
    readers = []  # (position, names read, phases)
    for position, (kind, node, _, _) in enumerate(walk):
        if isinstance(node, Leaf):
            readers.append((position, {n.value for n in loads(node.node)}, node.phases))
        elif kind == "test":
            inside = [leaf.phases for leaf in leaves if node in leaf.guards]
            readers.append((position, {n.value for n in loads(node.test)}, set().union(*inside)))
    for position, (_, leaf, _, _) in enumerate(walk):
        if not isinstance(leaf, Leaf) or leaf.row or _restates(kernel, leaf.node):
            continue
        mine = max(leaf.phases)
        for before, reads, phases in readers:
            if before < position and reads & assigned(leaf.node) and phases and max(phases) > mine:
                return f"{name} sets {sorted(reads & assigned(leaf.node))[0]} after a statement along the row " \
                       f"reads it"
    return buffer_clash(kernel, leaves)


def buffer_clash(kernel: Kernel, leaves: list[Leaf]) -> str:
    """Why statements cannot move across the row's: one of them reads one value of a buffer that the row's
    statements write (or the reverse); "" where none does."""
    accesses = facts_of(kernel).accesses
    row_reads = [a for a in accesses.loads if in_row(a.call, leaves)]
    row_writes = [a for a in accesses.stores if in_row(a.call, leaves)]
    mine = {id(c) for leaf in leaves for c in subnodes(leaf.node, cst.Call)}
    for access in accesses.all:
        if in_row(access.call, leaves) or id(access.call) not in mine:
            continue
        clash = row_writes if not access.store else row_reads
        if any(access.bases & other.bases for other in clash):
            return f"{kernel.name} reads one value of a buffer that it writes along the row (or the reverse)"
    return ""


def _restates(kernel: Kernel, small: cst.BaseSmallStatement) -> bool:
    """`start = 0` where start is 0 already (single_pass's twin sets each pass's offset anew): wherever it
    runs, it changes nothing."""
    if not (isinstance(small, cst.Assign) and len(small.targets) == 1 and isinstance(small.targets[0].target, cst.Name)):
        return False
    values = facts_of(kernel).values
    before = values.env_at(small).get(small.targets[0].target.value)
    return before is not None and ast.dump(before) == ast.dump(values.expand(small.value))


def in_row(call: cst.Call, leaves: list[Leaf]) -> bool:
    return any(leaf.row and any(c is call for c in subnodes(leaf.node, cst.Call)) for leaf in leaves)


# -- the twin's statements --------------------------------------------------------------------------------------
class ChunkRead(cst.CSTTransformer):
    """A row statement over one chunk: `tl.arange(0, BLOCK)` from the chunk's start, tiles of CHUNK, and each
    reduction over the block read as its running or final value."""

    def __init__(self, kernel: Kernel, block: str, chunk: str, start: str, names: dict[int, str]) -> None:
        self.kernel, self.block, self.chunk, self.start, self.names = kernel, block, chunk, start, names

    def leave_Call(self, original_node: cst.Call, updated_node: cst.Call) -> cst.BaseExpression:
        if id(original_node) in self.names:
            return cst.Name(self.names[id(original_node)])
        kernel, block = self.kernel, self.block
        if kernel.is_tl(original_node.func, "arange") and _makes_block(kernel, original_node, block):
            chunk = updated_node.with_changes(args=[
                a.with_changes(value=cst.Name(self.chunk)) if _along(kernel, o.value, block) else a
                for o, a in zip(original_node.args, updated_node.args, strict=True)])
            return cst.parse_expression(f"({self.start} + {code(chunk)})")
        if (kernel.is_tl(original_node.func, "zeros") or kernel.is_tl(original_node.func, "full")) \
                and _makes_block(kernel, original_node, block):
            shape, given = updated_node.args[0], original_node.args[0].value
            if isinstance(given, cst.Tuple | cst.List):
                value = shape.value.with_changes(elements=[
                    e.with_changes(value=cst.Name(self.chunk)) if _along(kernel, o.value, block) else e
                    for o, e in zip(given.elements, shape.value.elements, strict=True)])
            else:
                value = cst.Name(self.chunk) if _along(kernel, given, block) else shape.value
            return updated_node.with_changes(args=[shape.with_changes(value=value), *updated_node.args[1:]])
        return updated_node


def emit_kept(suite: cst.BaseSuite, keep) -> list:
    """The statements of a suite that `keep(small)` maps to new small statements (a list, possibly empty),
    with the `if`s around them kept."""
    out = []
    for statement in suite.body:
        if isinstance(statement, cst.SimpleStatementLine):
            body = [new for small in statement.body for new in keep(small)]
            lines = [cst.SimpleStatementLine(body=[b.with_changes(semicolon=cst.MaybeSentinel.DEFAULT)])
                     for b in body]
            if lines:
                lines[-1] = lines[-1].with_changes(trailing_whitespace=statement.trailing_whitespace)
                lines[0] = lines[0].with_changes(leading_lines=statement.leading_lines)
            out += lines
        elif isinstance(statement, cst.If):
            branch = _emit_if(statement, keep)
            if branch is not None:
                out.append(branch)
        elif isinstance(statement, cst.BaseSmallStatement):
            out.extend(cst.SimpleStatementLine(body=[b]) for b in keep(statement))
    return out


def _emit_if(node: cst.If, keep) -> cst.If | None:
    body = emit_kept(node.body, keep)
    orelse = None
    if isinstance(node.orelse, cst.If):
        orelse = _emit_if(node.orelse, keep)
    elif node.orelse is not None:
        inner = emit_kept(node.orelse.body, keep)
        orelse = cst.Else(body=cst.IndentedBlock(body=inner)) if inner else None
    if not body and orelse is None:
        return None
    return cst.If(test=node.test, body=cst.IndentedBlock(body=body or [cst.SimpleStatementLine([cst.Pass()])]),
                  orelse=orelse, leading_lines=node.leading_lines)


class Twin:
    """The parts of a twin's row block, in the order a twin runs them: the scalars that read no statistic,
    the running values' starts, the loop over the chunks that makes them, what reads the statistics, and the
    loop over the chunks that stores along the row. `span`: the chunk starts the loops walk, as (first, end)
    code (all of the block by default)."""

    def __init__(self, plan_: Plan, chunk: str, span: tuple[str, str] | None = None) -> None:
        self.plan, self.chunk = plan_, chunk
        kernel = plan_.kernel
        self.tl = kernel.tl_name
        used = set(kernel.names) | {s.run for s in plan_.stats} | {s.prev for s in plan_.stats if s.prev}
        self.start = fresh_name("chunk", used)
        self.span = span or ("0", plan_.size)
        self.leaves = {id(leaf.node): leaf for leaf in plan_.leaves}
        self.chunked = ChunkRead(kernel, plan_.block, chunk, self.start, {id(s.call): s.run for s in plan_.stats})

    def _emit(self, keep) -> list[cst.BaseStatement]:
        return emit_kept(self.plan.region, lambda small: keep(self.leaves.get(id(small)), small)
                     if id(small) in self.leaves else [])

    def _loop(self, body: list[cst.BaseStatement]) -> cst.For:
        loop = cst.parse_statement(f"for {self.start} in range({self.span[0]}, {self.span[1]}, {self.chunk}):\n"
                                   f"    pass\n")
        return loop.with_changes(body=loop.body.with_changes(body=body))

    def prologue(self) -> list[cst.BaseStatement]:
        return self._emit(lambda leaf, small: [small] if leaf.kind == "scalar" and not leaf.late else [])

    def starts(self) -> list[cst.BaseStatement]:
        return statements("".join(f"{s.run} = {stat_init(self.tl, s)}\n" for s in self.plan.stats))

    def statistics(self) -> list[cst.BaseStatement]:
        def keep(leaf, small):
            out = [u for stat in inner_first(leaf.stats) for u in stat_update(self.tl, stat, self.chunked)]
            return out + ([small.visit(self.chunked)] if leaf.first else [])
        return [self._loop(self._emit(keep))]

    def after(self) -> list[cst.BaseStatement]:
        return self._emit(lambda leaf, small: [small.visit(self.chunked)] if leaf.kind == "stat" or leaf.late else [])

    def stores(self) -> list[cst.BaseStatement]:
        stored = self._emit(lambda leaf, small: [small.visit(self.chunked)] if leaf.second else [])
        return [self._loop(stored)] if stored else []

    def body(self) -> list[cst.BaseStatement]:
        return [*self.prologue(), *self.starts(), *self.statistics(), *self.after(), *self.stores()]


def twin_body(plan_: Plan, chunk: str) -> list[cst.BaseStatement]:
    """The region's statements in the twin: scalars, the statistics loop, the statistics, the stores loop."""
    return Twin(plan_, chunk).body()


def inner_first(stats: list[Stat]) -> list[Stat]:
    """Reductions nested in one statement, inner ones first (a max before the sum taken against it)."""
    inner = {id(s.call): [o for o in stats if o is not s and any(c is o.call for c in subnodes(s.call, cst.Call))]
             for s in stats}
    done: list[Stat] = []

    def visit(stat: Stat) -> None:
        for other in inner[id(stat.call)]:
            visit(other)
        if stat not in done:
            done.append(stat)
    for stat in stats:
        visit(stat)
    return done


def stat_init(tl: str, stat: Stat) -> str:
    value = {"max": NEG_INF, "min": 'float("inf")', "sum": "0.0"}[stat.op]
    if not stat.shape:
        return value
    return f"{tl}.full(({', '.join(stat.shape)},), {value}, {tl}.float32)"


def stat_update(tl: str, stat: Stat, chunked: ChunkRead) -> list[cst.BaseSmallStatement]:
    part = code(stat.call.visit(_Without(chunked, stat.call)))
    part = f"{part}.to({tl}.float32)"
    if stat.op in ("max", "min"):
        keep = f"{stat.prev} = {stat.run}\n" if stat.prev else ""
        combine = "maximum" if stat.op == "max" else "minimum"
        text = f"{keep}{stat.run} = {tl}.{combine}({stat.run}, {part})\n"
    elif stat.against is None:
        text = f"{stat.run} = {stat.run} + {part}\n"
    else:
        top = stat.against
        text = f"{stat.run} = {rescaled(tl, stat.run, top.prev, top.run, stat.exponent)} + {part}\n"
    return [line.body[0] for line in statements(text)]


class _Without(cst.CSTTransformer):
    """A reduction's call over one chunk: the chunk transform applied inside it, the call itself kept."""

    def __init__(self, chunked: ChunkRead, call: cst.Call) -> None:
        self.chunked, self.call = chunked, call

    def leave_Call(self, original_node: cst.Call, updated_node: cst.Call) -> cst.BaseExpression:
        if original_node is self.call:
            return updated_node
        return self.chunked.leave_Call(original_node, updated_node)


