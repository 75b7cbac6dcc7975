"""The `coarsen` rewrite: each program does the work of C consecutive programs of the first grid axis.

For kernels that launch one small program per row (a KV-cache copy of 64 elements, a decode step per
head), most of the time goes to starting programs, not to moving data. The rewrite

    <head>                             <head>
    pid = tl.program_id(0)             first = tl.program_id(0) * COARSEN
    <body>                      ->     X_start = X                      (X: a name the body rebinds)
                                       for i in tl.static_range(COARSEN):
                                           X = X_start
                                           pid = first + i
                                           if pid < n_programs:
                                               <body>

adds the two parameters `n_programs` (the old grid's first axis) and `COARSEN: tl.constexpr`, and at
every launch divides the grid's first axis by C and passes both. The loop starts at the first top-level
statement that reads `tl.program_id(0)`; where that statement is not a plain `pid = tl.program_id(0)`,
every read of `tl.program_id(0)` from there on becomes the loop's program number (`coarsen_pid`). A
parameter or earlier name that the body rebinds (`X += row * stride`) is reset at the top of each pass,
so that one program's pointer arithmetic does not carry into the next. It applies where this keeps the
meaning for certain:
- every program id is read with a literal axis, and the number of programs is not read (`tl.num_programs`);
- the body returns nowhere but at its end;
- no parameter has a default (the new ones go last);
- every launch's grid is a tuple, written out or in a local name (`grid = (n,)`), or a function of meta
  (`lambda meta: ...`, a local `def grid(meta)`) of a kernel with no autotuner, launched with every
  parameter the grid function reads (those it names as `meta["..."]`, where it uses meta no other way;
  else all) given as a plain name, attribute or constant. The launch then passes
  `n_programs=grid({...})[0]`, the grid function called with those arguments by name (what Triton calls it
  with), and its grid becomes `lambda meta: (triton.cdiv(grid(meta)[0], C),) + grid(meta)[1:]`;
- the module imports `triton` (for `triton.cdiv`).
"""

from __future__ import annotations

import textwrap
from collections.abc import Callable
from functools import partial

import libcst as cst

from kernelband.proposers.rewriter.analysis.source import Kernel, Launch, ModuleSource, launch_statement
from kernelband.proposers.rewriter.analysis.syntax import assigned, code, fresh_name, subnodes
from kernelband.proposers.rewriter.edits import Edit, Found, Variant, statements

FACTORS = (2, 4, 8)


def coarsen(ms: ModuleSource) -> Found:
    def names(used: set[str]) -> dict[str, str]:
        return {"n": fresh_name("n_programs", used), "c": fresh_name("COARSEN", used),
                "first": fresh_name("first_program", used), "i": fresh_name("coarsen_i", used),
                "pid": fresh_name("coarsen_pid", used)}

    return first_axis_variants(ms, "coarsen", FACTORS, names, lambda kernel: partial(_kernel_edit, kernel),
                               "consecutive programs per program in")


def first_axis_variants(ms: ModuleSource, rewrite: str, factors: tuple[int, ...],
                        names: Callable[[set[str]], dict[str, str]],
                        kernel_edit: Callable[[Kernel], Callable[[dict[str, str]], Edit] | str], what: str,
                        factor_at: Callable[[Launch, int], int | str | None] | None = None,
                        at_run_time: str = "", none_fits: str = "") -> Found:
    """The variants of a rewrite that gives each program of a kernel's first grid axis the work of `factor`
    programs (coarsen, rows): every launch divides that axis by the factor and passes the old axis as
    `names["n"]` and the factor as `names["c"]`. `names(used)` picks the new names; `kernel_edit(kernel)` is
    the kernel's edit for given names, or why the kernel cannot take it. `factor_at(launch, factor)`, if
    given, is what a launch passes for `factor`: a smaller number, code evaluated at run time (the variant's
    rationale then says "up to" and `at_run_time`), or None (no variant for that factor: `none_fits` says
    why when no factor is left); variants that come out the same as an earlier one are left out."""
    variants, reasons = [], []
    for kernel in ms.kernels.values():
        launches = ms.launches_of(kernel)
        grids = [grid_plan(launch, kernel) for launch in launches]
        edit = launch_obstacle(ms, kernel, launches, grids) or kernel_edit(kernel)
        if isinstance(edit, str):
            reasons.append(edit)
            continue
        chosen = names(set(kernel.names))
        touched = frozenset({kernel.name} | {x.scope.top or kernel.name for x in launches})
        made: set[tuple] = set()
        for factor in factors:
            at = [factor_at(launch, factor) if factor_at else factor for launch in launches]
            if None in at or tuple(at) in made:
                continue
            made.add(tuple(at))
            edits: list[tuple[cst.CSTNode, Edit]] = [(kernel.node, edit(chosen))]
            for launch, grid, f in zip(launches, grids, at):
                edits += _launch_edits(ms, launch, grid, chosen, f)
            if all(isinstance(f, int) for f in at) and len(set(at)) == 1:
                rationale = f"{at[0]} {what} {kernel.name}: the first grid axis divided by {at[0]}"
            else:
                rationale = f"up to {factor} {what} {kernel.name}{at_run_time}: the first grid axis divided by as many"
            variants.append(Variant(rewrite, f"{rationale} at {len(launches)} launch(es)", touched, tuple(edits)))
        if not made:
            reasons.append(f"{kernel.name}: {none_fits}")
    return Found(variants, reasons)


def _launch_edits(ms: ModuleSource, launch: Launch, grid: tuple[str, str], names: dict[str, str],
                  factor: int | str) -> list[tuple[cst.CSTNode, Edit]]:
    """The launch's edits: a factor worked out at run time is computed once, on a line of its own before the
    launch under the factor's name (`ROWS = min(16, ...)`), and the grid and the keyword read that name, where
    the launch is a statement of its own; a number is written in place."""
    line = launch_statement(ms, launch)
    if isinstance(factor, int) or line is None:
        return [(launch.call, launch_edit(grid, names, factor))]
    name = fresh_name(names["c"], {n for scope in ms.scopes for n in scope.assigns} | set(launch.scope.params))
    assign = cst.parse_statement(f"{name} = {factor}\n")
    return [(launch.call, launch_edit(grid, names, name)),
            (line, lambda node: cst.FlattenSentinel([assign, node]))]


def _loop_start(kernel: Kernel) -> int | None:
    """The position of the first top-level statement that reads `tl.program_id(0)`."""
    for i, statement in enumerate(kernel.node.body.body):
        if any(kernel.program_axis(c) == 0 for c in subnodes(statement, cst.Call)):
            return i
    return None


def launch_obstacle(ms: ModuleSource, kernel: Kernel, launches: list[Launch], grids: list[tuple[str, str] | str]) -> str:
    """Why the kernel cannot take fewer programs on its first grid axis (each doing several), or ""."""
    if not launches:
        return f"{kernel.name} is not launched in this module"
    if kernel.heuristics:
        return f"{kernel.name} has @triton.heuristics"
    if _loop_start(kernel) is None:
        return f"{kernel.name} does not read `tl.program_id(0)`"
    if any(kernel.program_axis(c) is None for c in kernel.calls("program_id")):
        return f"{kernel.name} reads a program id whose axis is not a number"
    if kernel.calls("num_programs"):
        return f"{kernel.name} reads the number of programs"
    body = kernel.node.body.body
    returns = subnodes(kernel.node.body, cst.Return)
    last = body[-1]
    trailing = (isinstance(last, cst.SimpleStatementLine) and len(last.body) == 1
                and isinstance(last.body[0], cst.Return) and last.body[0].value is None)
    if len(returns) > (1 if trailing else 0):
        return f"{kernel.name} returns before its end"
    if any(p.default is not None for p in kernel.params):
        return f"{kernel.name} has a parameter with a default"
    if "triton" not in ms.imported:
        return "the module does not `import triton`"
    for grid in grids:
        if isinstance(grid, str):
            return grid
    return ""


def grid_plan(launch: Launch, kernel: Kernel) -> tuple[str, str] | str:
    """(the first axis, the grid with it divided by {factor}) as code, or why the grid cannot be divided."""
    not_tuple = f"the grid of the {launch.where} is not a tuple"
    if launch.meta_grid is not None:
        return _meta_grid(launch, kernel)
    grid = launch.grid
    if len(grid) > 1:  # kernel[a, b]
        rest = ", ".join(_braced(code(g)) for g in grid[1:])
        return code(grid[0]), f"triton.cdiv({_braced(code(grid[0]))}, {{factor}}), {rest}"
    if len(grid) != 1:
        return not_tuple
    value = launch.grid_value[0]
    if not isinstance(value, cst.Tuple | cst.List) or not value.elements:
        return not_tuple
    if isinstance(grid[0], cst.Tuple):  # kernel[(a, b)]
        elements = [code(e.value) for e in grid[0].elements]
        divided = [f"triton.cdiv({_braced(elements[0])}, {{factor}})", *map(_braced, elements[1:])]
        return elements[0], "(" + ", ".join(divided) + ("," if len(divided) == 1 else "") + ")"
    if isinstance(grid[0], cst.Name):  # grid = (a, b); kernel[grid]
        name = grid[0].value
        return f"{name}[0]", f"(triton.cdiv({name}[0], {{factor}}),) + tuple({name}[1:])"
    return not_tuple


def _plain(node: cst.BaseExpression) -> bool:
    """A name, an attribute of one, or a constant: evaluating it twice changes nothing."""
    if isinstance(node, cst.Name | cst.Integer | cst.Float | cst.SimpleString):
        return True
    if isinstance(node, cst.Attribute):
        return _plain(node.value)
    return isinstance(node, cst.UnaryOperation) and _plain(node.expression)


def _meta_grid(launch: Launch, kernel: Kernel) -> tuple[str, str] | str:
    """A grid that is a function of meta: its first axis is that function called with the launch's arguments
    that it reads, by parameter name, as Triton calls it."""
    if kernel.autotune is not None:
        return f"the grid of the {launch.where} is a function of meta, which the autotuner's configs add to"
    given = {}
    for param in _read_by_grid(launch, kernel):
        arg = launch.arg(param.name)
        if arg is None:
            return f"the {launch.where} does not give {param.name} (the grid function reads it)"
        if not _plain(arg.value):
            return (f"the {launch.where} passes {param.name} as an expression (the grid function would "
                    "evaluate it a second time)")
        given[param.name] = code(arg.value)
    function = code(launch.grid[0])
    if not isinstance(launch.grid[0], cst.Name):
        function = f"({function})"
    meta = fresh_name("grid_meta", set(kernel.names))
    bound = "{" + ", ".join(f"{name!r}: {value}" for name, value in given.items()) + "}"
    divided = (f"lambda {meta}: (triton.cdiv({function}({meta})[0], {{factor}}),) + "
               f"tuple({function}({meta})[1:])")
    return f"{function}({bound})[0]", _braced(divided).replace("{{factor}}", "{factor}")


def _read_by_grid(launch: Launch, kernel: Kernel) -> list:
    """The parameters the grid function may read: those it names as meta["..."] when that is its only use of
    meta (`lambda meta: (x.shape[0],)` reads none), else every one."""
    keys, only = launch.meta_use
    return [p for p in kernel.params if p.name in keys] if only else list(kernel.params)


def _braced(text: str) -> str:
    """Code with its braces doubled, for str.format (only {factor} is filled in)."""
    return text.replace("{", "{{").replace("}", "}}")


class _ProgramNumber(cst.CSTTransformer):
    """`tl.program_id(0)` -> the coarsened loop's program number."""

    def __init__(self, kernel: Kernel, name: str) -> None:
        self.kernel, self.name = kernel, name

    def leave_Call(self, original_node: cst.Call, updated_node: cst.Call) -> cst.BaseExpression:
        return cst.Name(self.name) if self.kernel.program_axis(original_node) == 0 else updated_node


def _kernel_edit(kernel: Kernel, names: dict[str, str]) -> Edit:
    at = _loop_start(kernel)
    tl = kernel.tl_name

    def edit(node: cst.FunctionDef) -> cst.FunctionDef:
        body = list(node.body.body)
        rest = body[at:]
        if rest and isinstance(rest[-1], cst.SimpleStatementLine) and isinstance(rest[-1].body[0], cst.Return):
            rest = rest[:-1]
        pid_call = code(next(c for c in subnodes(body[at], cst.Call) if kernel.program_axis(c) == 0))
        first = rest[0].body[0] if isinstance(rest[0], cst.SimpleStatementLine) and len(rest[0].body) == 1 else None
        if (isinstance(first, cst.Assign) and len(first.targets) == 1 and isinstance(first.targets[0].target, cst.Name)
                and kernel.program_axis(first.value) == 0
                and not any(kernel.program_axis(c) == 0 for s in rest[1:] for c in subnodes(s, cst.Call))):
            pid, rest = first.targets[0].target.value, rest[1:]  # `row = tl.program_id(0)`: row is the number
        else:
            pid = names["pid"]
            rest = [s.visit(_ProgramNumber(kernel, pid)) for s in rest]
        before = set(kernel.scope.params) | assigned(*body[:at])
        rebound = sorted(assigned(*rest) & before - {pid})
        used = set(kernel.names) | set(names.values())
        starts = {name: fresh_name(f"{name}_start", used) for name in rebound}
        inner_code = "".join(code(s) for s in rest) or "pass\n"
        text = (f"{names['first']} = {pid_call} * {names['c']}\n"
                + "".join(f"{start} = {name}\n" for name, start in starts.items())
                + f"for {names['i']} in {tl}.static_range({names['c']}):\n"
                + "".join(f"    {name} = {start}\n" for name, start in starts.items())
                + f"    {pid} = {names['first']} + {names['i']}\n"
                f"    if {pid} < {names['n']}:\n" + textwrap.indent(inner_code, " " * 8))
        block = statements(text)
        block[0] = block[0].with_changes(leading_lines=body[at].leading_lines)
        return node.with_changes(params=added_params(node, names["n"], names["c"], tl),
                                 body=node.body.with_changes(body=[*body[:at], *block]))
    return edit


def added_params(node: cst.FunctionDef, n: str, c: str, tl: str) -> cst.Parameters:
    """The kernel's parameters with `n` (the old grid's first axis) and `c: tl.constexpr` (the factor) last."""
    params = list(node.params.params)
    inner = separator(params)
    params[-1:] = [params[-1].with_changes(comma=inner), cst.Param(cst.Name(n), comma=inner),
                   cst.Param(cst.Name(c), annotation=cst.Annotation(cst.parse_expression(f"{tl}.constexpr")),
                             comma=params[-1].comma)]
    return node.params.with_changes(params=params)


def launch_edit(grid: tuple[str, str], names: dict[str, str], factor: int | str) -> Edit:
    """The launch with its grid's first axis divided by `factor` (a number, or code evaluated at the launch),
    passing the old axis as `names["n"]` and the factor as `names["c"]`."""
    first, divided = grid

    def edit(call: cst.Call) -> cst.Call:
        subscript = call.func
        new_slice = cst.parse_expression(f"_[{divided.format(factor=factor)}]").slice
        n_arg, c_arg = cst.parse_expression(f"_({names['n']}={first}, {names['c']}={factor})").args
        args = list(call.args)
        if args:  # the new arguments go last, laid out like the ones before them
            sep = separator(args)
            args[-1:] = [args[-1].with_changes(comma=sep), n_arg.with_changes(comma=sep),
                         c_arg.with_changes(comma=args[-1].comma)]
        else:
            args = [n_arg, c_arg]
        return call.with_changes(func=subscript.with_changes(slice=new_slice), args=args)
    return edit


def separator(items: list[cst.Param] | list[cst.Arg]) -> cst.Comma:
    """The comma (and the line break and indent after it) between the last two items, for items appended."""
    if len(items) > 1 and isinstance(items[-2].comma, cst.Comma):
        comma = items[-2].comma
        if isinstance(comma.whitespace_after, cst.ParenthesizedWhitespace):  # not its comment
            comma = comma.with_changes(whitespace_after=comma.whitespace_after.with_changes(
                first_line=cst.TrailingWhitespace()))
        return comma
    return cst.Comma(whitespace_after=cst.SimpleWhitespace(" "))
