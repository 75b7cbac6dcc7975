"""Rows summed by a loop over their blocks (`acc += x * x` lane by lane, or `total += tl.sum(x * x, 0)`), then read
by what follows the loop (a loop that stores along the row, a store of the row's statistic), split over SPLIT
programs a row as a two-stage reduction (online_split.py's stages, launch and host choice):

    stage 1  <kernel>_partials[(*grid, SPLIT)]: what runs before the loop, then the loop over the j-th of SPLIT
             equal runs of its iterations, then each sum (its lanes summed) stored, in float32, as the row's
             j-th partial;
    stage 2  <kernel>_combine[(*grid, SPLIT)]: what runs before the loop, each sum as tl.sum of the row's SPLIT
             partials (one reduction of SPLIT values: the same order on every run), then what follows the loop,
             each later loop over the j-th run of its own iterations.

A chain of loops of sums, each reading the sums of those before it (LayerNorm's mean, then its variance around
the mean), takes a stage a loop: stage i (<kernel>_partials_i) runs what precedes its loop with the earlier
sums added from their partials as the last stage adds them, then its run of its loop, and stores its sums'
partials; the last stage adds every sum's partials. Every stage adds a sum's partials in the same order, so the
programs of a row all read the same mean; each sum keeps its own expression in float32, its terms added in
another order only. The partials of all sums share one workspace, a row of it a sum.

A run of iterations is `range(lo, hi, step)`: per = cdiv(cdiv(end - start, step), SPLIT) iterations, lo = start
+ j * per * step, hi = min(lo + per * step, end); the runs of the SPLIT programs tile the loop's iterations, each
once. A value the loop advances by a fixed step (`ptrs += BLOCK`) starts a run advanced by the iterations
before it. Everything is found from data flow (loops.py's carried values, reductions.py's sums over lanes), not
from names: what a loop of sums carries is a sum that starts from 0 or a fixed step; nothing in the loop reads a
sum but its own update (a running value, whose part before a segment another program holds); lanes are read
after the loop only summed over them; nothing between two loops of sums stores; the loops after the chain carry
nothing but fixed steps (a running max, say, which a program that starts at a later block cannot know); no other
value a loop of sums leaves behind is read after it. SPLIT aims at FILL_WARPS warps a SM, from the launch's
num_warps.
"""

from __future__ import annotations

import ast
from dataclasses import dataclass, field

import libcst as cst

from kernelband.proposers.rewriter.analysis.facts import facts_of
from kernelband.proposers.rewriter.analysis.host_flow import header as first_line
from kernelband.proposers.rewriter.analysis.loops import Loop, carried_increment
from kernelband.proposers.rewriter.analysis.reductions import source_of
from kernelband.proposers.rewriter.analysis.source import Kernel, Launch, ModuleSource, launch_statement
from kernelband.proposers.rewriter.analysis.syntax import assigned, code, dotted, fresh_name, loads, subnodes
from kernelband.proposers.rewriter.edits import statements
from kernelband.proposers.rewriter.rewrites.online_passes import _zero
from kernelband.proposers.rewriter.rewrites.online_split import (
    MIN_RUN,
    Launching,
    header,
    partial_offsets,
    split_axis,
    split_launch,
    stage_def,
    stage_names,
)

OPS = ("sum", "max", "min")  # what a loop of the row may carry: partials combine by the same op
FILL_WARPS = 32  # warps a SM that the split aims at: half of what an SM holds, enough to keep loads in flight
MAX_SPLIT = 32  # programs a row at most: a split wider than the row's blocks leaves programs with none
DEFAULT_WARPS = 4  # Triton's num_warps where a launch passes none


@dataclass(eq=False)
class Sum:
    name: str
    lanes: bool  # a tile of the block's lanes, reduced after the loop; else one value
    reads: list[cst.Call] = field(default_factory=list)  # tl.sum(lanes) after the loop, each read as the row's sum
    op: str = "sum"  # or "max", "min": a running maximum's partials combine by their maximum
    part: str = ""  # the partials' pointer parameter
    row: str = ""  # the row's sum in stage 2, where the lanes were summed


@dataclass(eq=False)
class Phase:
    loop: Loop  # a loop that sums the row
    sums: list[Sum]
    steps: dict[str, str]  # values it advances by a fixed step: name -> code of the step


@dataclass(eq=False)
class LoopSplit:
    kernel: Kernel
    phases: list[Phase]  # the loops that sum the row, one after another: each reads the sums of those before it
    later: list[Loop]  # the loops after them, each run over the j-th run of its iterations


def reducing_loops(kernel: Kernel) -> list[Loop]:
    """The loops that carry a sum, a running maximum or a running minimum of the row."""
    return [loop for loop in facts_of(kernel).loops.all if any(c.kind in OPS for c in loop.carried.values())]


def loop_split(kernel: Kernel) -> LoopSplit | str:  # noqa: C901 - one check per fact
    """The split of the kernel's first loop, which sums its row, and of the loops of sums that follow it one
    after another; or the fact that stands in the way."""
    name, facts = kernel.name, facts_of(kernel)
    body = list(kernel.node.body.body)
    if kernel.calls("dot"):
        return f"{name} multiplies with tl.dot (split_k splits such loops)"
    tops = [loop for loop in facts.loops.all if any(s is loop.node for s in body)]
    summing = reducing_loops(kernel)
    if any(loop not in tops for loop in summing):
        return f"{name} sums its row in a loop that sits in a loop or a branch"
    loop = tops[0]
    index = next(i for i, s in enumerate(body) if s is summing[0].node)
    before, rest = body[:index], body[index + 1:]
    earlier = [n for s in before for n in subnodes(s, cst.For | cst.While)]
    if earlier:
        return (f"{name} runs a loop (`{first_line(earlier[0])}`) before the one that sums its row: each program of "
                f"a split would run it again, in each stage")
    loop = summing[0]
    if any(kernel.is_tl(c.func, "store") for s in before for c in subnodes(s, cst.Call)):
        return f"{name} stores before the loop that sums its row (each stage stores it again)"
    first = _phase(kernel, loop, rest)
    if isinstance(first, str):
        return first
    phases, later, between = [first], [], []
    for at, statement in enumerate(rest):
        inner = subnodes(statement, cst.For) + subnodes(statement, cst.While)
        if not inner:
            between.append(statement)
            continue
        found = facts.loops.of(statement)
        if found is None:
            return f"{name} loops inside a branch after its sum loop"
        if len(inner) > 1:
            return f"{name} loops inside its loop after the sums"
        if found in summing and not later:  # the next loop of the chain: its own stage of partials
            if any(kernel.is_tl(c.func, "store") for s in between for c in subnodes(s, cst.Call)):
                return f"{name} stores between the loops that sum its row (each later stage stores it again)"
            made = _phase(kernel, found, rest[at + 1:])
            if isinstance(made, str):
                return made
            phases.append(made)
            between = []
            continue
        why = _counted(kernel, found, "loop after the sums")
        if why:
            return why
        for carried in found.carried.values():
            if carried.name == found.var or carried.kind == "increment" and _step_of(found, carried.name):
                continue
            if carried.kind == "sum":
                return f"{name}'s loop after its row sums carries {carried.name} from one block to the next, " \
                       f"after a loop along the row that sums nothing (a chain of row sums takes its loops of " \
                       f"sums one after another)"
            return f"{name}'s loop after its row sums carries {carried.name} from one block to the next, which " \
                   f"is neither a sum nor a fixed step (a program that starts at a later block does not know its " \
                   f"value there)"
        later.append(found)
    return LoopSplit(kernel, phases, later)


def _phase(kernel: Kernel, loop: Loop, rest: list[cst.BaseStatement]) -> Phase | str:  # noqa: C901
    """The sums and fixed steps of a loop that sums the row (`rest`: the statements after it); or the fact that
    stands in the way."""
    name, facts = kernel.name, facts_of(kernel)
    why = _counted(kernel, loop, "sum loop")
    if why:
        return why
    sums, steps = [], {}
    for carried in loop.carried.values():
        if carried.name == loop.var:
            continue
        if carried.kind == "increment":
            step = _step_of(loop, carried.name)
            if step is None:
                return f"{name}'s sum loop advances {carried.name} other than by adding a fixed step"
            steps[carried.name] = step
            continue
        if carried.kind not in OPS:
            return f"{name}'s sum loop carries {carried.name} from one block to the next, which is neither a sum, a " \
                   f"running max or min nor a fixed step (a program that starts at a later block does not know " \
                   f"its value there)"
        start = facts.values.env_at(loop.node).get(carried.name)
        if carried.kind == "sum" and not _zero_start(start):
            return f"{name}'s sum {carried.name} does not start from 0 (each run of the blocks would add its start)"
        if carried.kind != "sum" and not _float_start(start):
            # a maximum's start counts once however many runs take it, but its partials are kept in float32
            return f"{name}'s running {carried.kind} {carried.name} does not start from a float (its partials are " \
                   f"kept in float32)"
        if carried.shape is None or len(carried.shape) > 1:
            return f"{name}'s sum {carried.name} is " + ("of a shape not known" if carried.shape is None else
                                                         "a tile of more than one dimension (a block of rows)")
        sums.append(Sum(carried.name, bool(carried.shape), op=carried.kind))
    if not sums:
        return f"{name}'s loop over its row carries no sum"
    for total in sums:
        updates = [small for small in subnodes(loop.node.body, cst.BaseSmallStatement) if total.name in assigned(small)]
        allowed = {id(n) for small in updates for n in loads(small)}
        if any(n.value == total.name and id(n) not in allowed for n in loads(loop.node.body)):
            return f"{name} reads its sum {total.name} inside the loop that accumulates it (a running value: the " \
                   f"part of it before a program's run of the blocks is another program's)"
        why = _read_after(kernel, total, rest)
        if why:
            return why
    left = (assigned(loop.node.body) | {loop.var}) - {s.name for s in sums}
    read = _read_before_set(rest, left)
    if read:
        return f"{name} reads {read} after its sum loop, which the loop leaves as its last block set it"
    return Phase(loop, sums, steps)


def _float_start(value: ast.AST | None) -> bool:
    """A start written as a float: a float constant (`-float("inf")` included) or a float dtype."""
    return value is not None and any(
        isinstance(n, ast.Constant) and isinstance(n.value, float)
        or isinstance(n, ast.Call) and isinstance(n.func, ast.Name) and n.func.id == "float"
        or isinstance(n, ast.Attribute) and n.attr in ("float32", "float16", "bfloat16", "float64")
        for n in ast.walk(value))


def _zero_start(value: ast.AST | None) -> bool:
    while isinstance(value, ast.Call) and isinstance(value.func, ast.Attribute) and value.func.attr == "to":
        value = value.func.value
    return value is not None and _zero(value)


def _counted(kernel: Kernel, loop: Loop, what: str) -> str:
    """Why the loop's iterations cannot be cut into runs ("" where they can)."""
    name = kernel.name
    node = loop.node
    if loop.exits or node.orelse is not None:
        return f"{name}'s {what} leaves its loop early"
    if loop.var is None or loop.form not in ("range", "cdiv", "while") or isinstance(node, cst.For) and (
            any(a.star for a in node.iter.args)):
        return f"{name}'s {what} is not a counted loop (range, tl.range, or while v < n with v += step)"
    step = loop.step
    positive = isinstance(step, ast.Constant) and isinstance(step.value, int) and step.value > 0 \
        or isinstance(step, ast.Name) and step.id in loop.block
    if not positive:
        return f"{name}'s {what} steps by something not known to be positive"
    if subnodes(node.body, cst.For) or subnodes(node.body, cst.While):
        return f"{name} loops inside its {what}"
    return ""


def _step_of(loop: Loop, name: str) -> str | None:
    """Code of the fixed step a loop adds to `name` each iteration (`p += S`, `p = p + S`)."""
    found = carried_increment(loop, name)
    return found[1] if found is not None and found[0] == "add" else None


def _read_after(kernel: Kernel, total: Sum, rest: list[cst.BaseStatement]) -> str:
    """Why the sum is read after its loop in a way the split cannot give; records each tl.sum of its lanes."""
    facts = facts_of(kernel)
    parents = kernel.ms.parents
    sums = {id(b.call): b for b in facts.reductions.block if b.op == total.op}
    shape = facts.shapes.of_name(total.name)
    for statement in rest:
        for name in (n for n in loads(statement) if n.value == total.name):
            if not total.lanes:
                continue
            call = parents.get(id(parents.get(id(name))))
            found = sums.get(id(call)) if isinstance(call, cst.Call) else None
            if found is None or call.args[0].value is not name or found.dim != (shape or (None,))[0]:
                done = "summed" if total.op == "sum" else f"reduced by their {total.op}"
                return f"{kernel.name} reads its lanes {total.name} after the loop other than {done} over them"
            total.reads.append(call)
        if isinstance(statement, cst.SimpleStatementLine) and total.name in assigned(statement):
            break  # set anew on every path: what follows reads another value
    return ""


def _read_before_set(rest: list[cst.BaseStatement], names: set[str]) -> str:
    """A name of `names` that the statements may read before they set it; "" where none."""
    pending = set(names)
    for statement in rest:
        if isinstance(statement, cst.For | cst.While):  # what the body sets before reading it is no read
            head = statement.iter if isinstance(statement, cst.For) else statement.test
            reads = {n.value for n in loads(head)}
            inner = pending - ({n.value for n in subnodes(statement.target, cst.Name)}
                               if isinstance(statement, cst.For) else set())
            reads |= {n.value for n in loads(statement.body)} & inner - _set_first(statement.body.body, inner)
        else:
            reads = {n.value for n in loads(statement)}
        if reads & pending:
            return sorted(reads & pending)[0]
        pending -= assigned(statement)
    return ""


def _set_first(body: list[cst.BaseStatement], names: set[str]) -> set[str]:
    """Names that a loop body's top-level simple statements set before anything in it reads them."""
    done, read = set(), set()
    for statement in body:
        read |= {n.value for n in loads(statement)} - done
        if isinstance(statement, cst.SimpleStatementLine):
            done |= assigned(statement) - read
    return done & names


# -- the stages -----------------------------------------------------------------------------------------------
class _Rows(cst.CSTTransformer):
    """Each tl.sum of a sum's lanes read as the row's sum."""

    def __init__(self, rows: dict[int, str]) -> None:
        self.rows = rows

    def leave_Call(self, original_node: cst.Call, updated_node: cst.Call) -> cst.BaseExpression:
        return cst.Name(self.rows[id(original_node)]) if id(original_node) in self.rows else updated_node


def _run(kernel: Kernel, loop: Loop, names: dict[str, str], used: set[str],
         steps: dict[str, str]) -> list[cst.BaseStatement] | str:
    """The statements that give the program its run of the loop's iterations, then the loop over that run."""
    tl, node = kernel.tl_name, loop.node
    if isinstance(node, cst.For):
        args = [a for a in node.iter.args if a.keyword is None]
        first, end, step = ("0", code(args[0].value), "1") if len(args) == 1 else (
            code(args[0].value), code(args[1].value), code(args[2].value) if len(args) == 3 else "1")
    else:
        first = source_of(loop.start, tl) if loop.start is not None else None
        if first is None:
            return f"{kernel.name}'s while loop starts {loop.var} where code cannot name it"
        end, step = code(node.test.comparisons[0].comparator), _step_of(loop, loop.var)
    per, skipped, lo, hi = (fresh_name(f"{loop.var}_{part}", used) for part in ("per", "skipped", "lo", "hi"))
    count = f"({end})" if first == "0" else f"({end}) - ({first})"
    text = (f"{per} = {tl}.cdiv({tl}.cdiv({count}, {step}), {names['split']})\n"
            f"{skipped} = {names['sid']} * {per}\n"
            f"{lo} = {'' if first == '0' else f'{first} + '}{skipped} * {step}\n"
            f"{hi} = {tl}.minimum({lo} + {per} * {step}, {end})\n")
    text += "".join(f"{name} += {skipped} * ({each})\n" for name, each in steps.items())
    if isinstance(node, cst.For):
        keywords = [a for a in node.iter.args if a.keyword is not None]
        bounds = [cst.Arg(cst.parse_expression(v)) for v in (lo, hi, step)]
        # a static_range unrolls bounds fixed at compile time: a program's run has bounds read at run time
        func = cst.parse_expression(f"{tl}.range") if kernel.is_tl(node.iter.func, "static_range") else node.iter.func
        new = node.with_changes(iter=node.iter.with_changes(func=func, args=[*bounds, *keywords]))
    else:
        text += f"{loop.var} = {lo}\n"
        comparison = node.test.comparisons[0].with_changes(comparator=cst.Name(hi))
        new = node.with_changes(test=node.test.with_changes(comparisons=[comparison]))
    made = statements(text)
    made[0] = made[0].with_changes(leading_lines=node.leading_lines)
    return [*made, new.with_changes(leading_lines=[])]


def loop_edits(ms: ModuleSource, found: LoopSplit) -> tuple[list, str] | str:
    """The launches' and the stage kernels' edits with the variant's rationale, or why the rows cannot be split."""
    kernel, tl = found.kernel, found.kernel.tl_name
    name = kernel.name
    body = list(kernel.node.body.body)
    at = [next(i for i, s in enumerate(body) if s is phase.loop.node) for phase in found.phases]
    axis = split_axis(ms, kernel, body)
    if isinstance(axis, str):
        return axis
    used = set(kernel.names) | {n for s in ms.scopes for n in s.assigns} | set(ms.kernels)
    chain = len(found.phases)
    names = stage_names(kernel, used, chain)
    keys = ("partials", *(f"partials_{i}" for i in range(2, chain + 1)), "combine")
    sums = [total for phase in found.phases for total in phase.sums]
    for total in sums:
        total.part = fresh_name(f"{total.name}_part", used)
        total.row = fresh_name(f"{total.name}_row", used) if total.lanes else total.name
    where = f"{names['lin']} * {names['split']} + {names['sid']}"
    offsets = partial_offsets(tl, names)
    rows = _Rows({id(call): s.row for s in sums for call in s.reads})
    later = {id(loop.node): loop for loop in found.later}
    stages = []
    for stage in range(len(keys)):  # stage i: the sums of the loops before the i-th added, then its loop
        made = [*header(tl, names, axis), *body[:at[0]]]
        for i in range(min(stage, chain)):
            made += statements("".join(f"{s.row} = {tl}.{s.op}({tl}.load({s.part} + {offsets}), 0)\n"
                                       for s in found.phases[i].sums))
            for statement in body[at[i] + 1:at[i + 1] if i + 1 < chain else len(body)]:
                if id(statement) not in later:
                    made.append(statement.visit(rows))
                    continue
                loop = later[id(statement)]
                steps = {c.name: _step_of(loop, c.name) for c in loop.carried.values()
                         if c.kind == "increment" and c.name != loop.var}
                run = _run(kernel, loop, names, used, steps)
                if isinstance(run, str):
                    return run
                made += [s.visit(rows) for s in run]
        if stage < chain:
            phase = found.phases[stage]
            run = _run(kernel, phase.loop, names, used, phase.steps)
            if isinstance(run, str):
                return run
            made += [s.visit(rows) for s in run]
            made += statements("".join(f"{tl}.store({s.part} + {where}, "
                                       f"{f'{tl}.{s.op}({s.name}, 0)' if s.lanes else s.name})\n" for s in phase.sums))
        stages.append(made)
    pointers = [s.part for s in sums]
    stages = [stage_def(kernel, names[key], made, pointers, {names["split"]: 2}) for key, made in zip(keys, stages)]
    edits = []
    for launch in ms.launches_of(kernel):
        blocks = _blocks_at(kernel, launch, found.phases[0].loop)
        edits.append((launch_statement(ms, launch), split_launch(
            ms, launch, names, pointers, used, fill(launch),
            lambda launch, line, gpu, local, blocks=blocks: _unsplit(launch, line, gpu, local, blocks),
            more=("runs",), stages=keys)))
    edits.append((kernel.node, lambda node: cst.FlattenSentinel([node, *stages])))
    tail = ("then each adds its row's SPLIT partials in one fixed order and runs what follows"
            + (", its loops over its run" if found.later else "") + f" ({names['combine']})")
    def said(s: Sum) -> str:
        return s.name if s.op == "sum" else f"{s.name}, a running {s.op}"

    if chain == 1:
        what = (f"{name}'s row sums ({', '.join(map(said, sums))}) split over SPLIT programs a row where "
                f"the rows are too few for the SMs: each sums its run of the loop's blocks ({names['partials']}), "
                + tail)
    else:
        listed = "; then ".join(", ".join(map(said, phase.sums)) for phase in found.phases)
        middle = ", ".join(names[key] for key in keys[1:-1])
        what = (f"{name}'s chain of row sums ({listed}) split over SPLIT programs a row where the rows are too "
                f"few for the SMs, one stage a loop of sums: each sums its run of the first loop's blocks "
                f"({names['partials']}); for each later loop, each adds its row's SPLIT partials of the sums "
                f"before it in one fixed order and sums its run of that loop's blocks ({middle}); " + tail)
    if any(s.op != "sum" for s in sums):
        what += "; a running max's or min's partials combine by their max or min"
    return edits, what


def fill(launch: Launch) -> int:
    """The programs a SM that give it FILL_WARPS warps, at the launch's num_warps (a literal; else Triton's
    default), two at least."""
    warps = launch.kwarg("num_warps")
    count = int(warps.value.value) if warps is not None and isinstance(warps.value, cst.Integer) else DEFAULT_WARPS
    return max(2, FILL_WARPS // max(1, count))


def _unsplit(launch, line: cst.SimpleStatementLine, gpu: str, local: dict[str, str], blocks: str | None) -> Launching:
    """Rows enough for the SMs: the original launch. SPLIT's cap: MAX_SPLIT, and where the host can count the
    first loop's blocks from what the launch passes, the largest power of two (SPLIT sizes an arange) that leaves
    each program MIN_RUN of them on a GPU (one in the interpreter, whose small shapes exercise the split); 1 (no
    split) where the row has fewer than 2 * MIN_RUN."""
    orelse = cst.Else(body=cst.IndentedBlock(body=[line.with_changes(leading_lines=[])]))
    if blocks is None:
        return Launching([], line.body[0].value, "", str(MAX_SPLIT), {}, orelse)
    runs = f"{local['runs']} = {blocks} // ({MIN_RUN} if {gpu} else 1)\n"
    cap = f"1 << (max(1, min({MAX_SPLIT}, {local['runs']})).bit_length() - 1)"
    return Launching([], line.body[0].value, runs, cap, {}, orelse)


def _blocks_at(kernel: Kernel, launch: Launch, loop: Loop) -> str | None:
    """The number of the loop's iterations as host code, from the values the launch passes for the parameters
    its range reads; None where it reads anything else (a value the kernel computes) or is not a range."""
    node = loop.node
    if not isinstance(node, cst.For) or not isinstance(node.iter, cst.Call) or dotted(node.iter.func) != "range":
        return None
    args = [a.value for a in node.iter.args if a.keyword is None]
    if not 1 <= len(args) <= 3:
        return None
    first, end, step = (None, args[0], None) if len(args) == 1 else (args[0], args[1], args[2] if len(args) == 3 else None)
    parts = []
    for part in (first, end, step):
        if part is None:
            parts.append(None)
            continue
        host = _on_host(kernel, launch, part)
        if host is None:
            return None
        parts.append(host)
    count = parts[1] if parts[0] in (None, "0") else f"({parts[1]}) - ({parts[0]})"
    return f"triton.cdiv({count}, {parts[2]})" if parts[2] not in (None, "1") else count


def _on_host(kernel: Kernel, launch: Launch, expression: cst.BaseExpression) -> str | None:
    """The kernel-side expression with each parameter replaced by what the launch passes for it (its default
    where it passes none) and tl.cdiv by triton.cdiv; None where it reads a name that is no parameter, or calls
    anything else."""
    params = {p.name: p for p in kernel.params}
    for call in subnodes(expression, cst.Call):
        if (dotted(call.func) or "").rpartition(".")[2] != "cdiv":
            return None

    class Host(cst.CSTTransformer):
        missing = False

        def leave_Name(self, original_node: cst.Name, updated_node: cst.Name) -> cst.BaseExpression:
            if original_node.value not in params:
                self.missing = True
                return updated_node
            arg = launch.arg(original_node.value)
            value = arg.value if arg is not None and not arg.star else params[original_node.value].default
            if value is None:
                self.missing = True
                return updated_node
            plain = isinstance(value, cst.Name | cst.Integer | cst.Attribute | cst.Call)
            return cst.parse_expression(code(value) if plain else f"({code(value)})")

        def leave_Call(self, original_node: cst.Call, updated_node: cst.Call) -> cst.BaseExpression:
            return updated_node.with_changes(func=cst.parse_expression("triton.cdiv"))

    host = Host()
    if isinstance(expression, cst.Integer):
        return expression.value
    made = expression.visit(host)
    return None if host.missing else code(made)
