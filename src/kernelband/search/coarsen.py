"""The `coarsen` rewrite: each program does the work of C consecutive programs of the first grid axis.

For kernels that launch one small program per row (a KV-cache copy of 64 elements, a decode step per
head), most of the time goes to starting programs, not to moving data. The rewrite

    pid = tl.program_id(0)             first = tl.program_id(0) * COARSEN
    <body>                      ->     for i in tl.static_range(COARSEN):
                                           pid = first + i
                                           if pid < n_programs:
                                               <body>

adds the two parameters `n_programs` (the old grid's first axis) and `COARSEN: tl.constexpr`, and at
every launch divides the grid's first axis by C and passes both. It applies where this keeps the meaning
for certain:
- the first program id is read once, by a top-level `name = tl.program_id(0)`, and the number of programs
  is not read (`tl.num_programs`);
- the body returns nowhere but at its end;
- no parameter has a default (the new ones go last);
- every launch's grid is a tuple, written out or in a local name (`grid = (n,)`), or a function of meta
  (`lambda meta: ...`, a local `def grid(meta)`) of a kernel with no autotuner, launched with every
  parameter given as a plain name, attribute or constant. The launch then passes
  `n_programs=grid({...})[0]`, the grid function called with the launch's arguments by name (what Triton
  calls it with), and its grid becomes `lambda meta: (triton.cdiv(grid(meta)[0], C),) + grid(meta)[1:]`;
- the module imports `triton` (for `triton.cdiv`).
"""

from __future__ import annotations

import textwrap

import libcst as cst

from kernelband.search.edits import Edit, Found, Variant, statements
from kernelband.search.kernelsource import Kernel, Launch, ModuleSource, code, fresh_name, subnodes

FACTORS = (2, 4, 8)


def coarsen(ms: ModuleSource) -> Found:
    variants, reasons = [], []
    for kernel in ms.kernels.values():
        launches = ms.launches_of(kernel)
        grids = [_grid(launch, kernel) for launch in launches]
        why = _why_not(ms, kernel, launches, grids)
        if why:
            reasons.append(why)
            continue
        used = set(kernel.names)
        names = {"n": fresh_name("n_programs", used), "c": fresh_name("COARSEN", used),
                 "first": fresh_name("first_program", used), "i": fresh_name("coarsen_i", used)}
        for factor in FACTORS:
            edits: list[tuple[cst.CSTNode, Edit]] = [(kernel.node, _kernel_edit(kernel, names))]
            edits += [(launch.call, _launch_edit(grid, names, factor)) for launch, grid in zip(launches, grids)]
            touched = frozenset({kernel.name} | {x.scope.top or kernel.name for x in launches})
            variants.append(Variant("coarsen", f"{factor} consecutive programs per program in {kernel.name}: the "
                                    f"first grid axis divided by {factor} at {len(launches)} launch(es)",
                                    touched, tuple(edits)))
    return Found(variants, reasons)


def _pid_line(kernel: Kernel) -> tuple[int, str] | None:
    """(position in the body, name) of the top-level `name = tl.program_id(0)`."""
    for i, statement in enumerate(kernel.node.body.body):
        if isinstance(statement, cst.SimpleStatementLine) and len(statement.body) == 1:
            assign = statement.body[0]
            if (isinstance(assign, cst.Assign) and len(assign.targets) == 1
                    and isinstance(assign.targets[0].target, cst.Name) and kernel.program_axis(assign.value) == 0):
                return i, assign.targets[0].target.value
    return None


def _why_not(ms: ModuleSource, kernel: Kernel, launches: list[Launch], grids: list[tuple[str, str] | str]) -> str:
    if not launches:
        return f"{kernel.name} is not launched in this module"
    if kernel.heuristics:
        return f"{kernel.name} has @triton.heuristics"
    found = _pid_line(kernel)
    if found is None:
        return f"{kernel.name} reads its first program id other than by one top-level `name = tl.program_id(0)`"
    if sum(1 for c in kernel.calls("program_id") if kernel.program_axis(c) == 0) != 1:
        return f"{kernel.name} reads its first program id more than once"
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


def _grid(launch: Launch, kernel: Kernel) -> tuple[str, str] | str:
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
    by parameter name, as Triton calls it."""
    if kernel.autotune is not None:
        return f"the grid of the {launch.where} is a function of meta, which the autotuner's configs add to"
    given = {}
    for param in kernel.params:
        arg = launch.arg(param.name)
        if arg is None:
            return f"the {launch.where} does not give {param.name} (the grid function needs every argument)"
        if not _plain(arg.value):
            return (f"the {launch.where} passes {param.name} as an expression (the grid function would "
                    "evaluate it a second time)")
        given[param.name] = code(arg.value)
    function = code(launch.grid[0])
    if not isinstance(launch.grid[0], cst.Name):
        function = f"({function})"
    meta = fresh_name("coarsen_meta", set(kernel.names))
    bound = "{" + ", ".join(f"{name!r}: {value}" for name, value in given.items()) + "}"
    divided = (f"lambda {meta}: (triton.cdiv({function}({meta})[0], {{factor}}),) + "
               f"tuple({function}({meta})[1:])")
    return f"{function}({bound})[0]", _braced(divided).replace("{{factor}}", "{factor}")


def _braced(text: str) -> str:
    """Code with its braces doubled, for str.format (only {factor} is filled in)."""
    return text.replace("{", "{{").replace("}", "}}")


def _kernel_edit(kernel: Kernel, names: dict[str, str]) -> Edit:
    at, pid = _pid_line(kernel)
    tl = kernel.tl_name

    def edit(node: cst.FunctionDef) -> cst.FunctionDef:
        params = list(node.params.params)
        inner = _separator(params)
        params[-1:] = [params[-1].with_changes(comma=inner),
                       cst.Param(cst.Name(names["n"]), comma=inner),
                       cst.Param(cst.Name(names["c"]), annotation=cst.Annotation(cst.parse_expression(f"{tl}.constexpr")),
                                 comma=params[-1].comma)]
        body = list(node.body.body)
        rest = body[at + 1:]
        if rest and isinstance(rest[-1], cst.SimpleStatementLine) and isinstance(rest[-1].body[0], cst.Return):
            rest = rest[:-1]
        pid_call = code(body[at].body[0].value)
        inner_code = "".join(code(s) for s in rest) or "pass\n"
        text = (f"{names['first']} = {pid_call} * {names['c']}\n"
                f"for {names['i']} in {tl}.static_range({names['c']}):\n"
                f"    {pid} = {names['first']} + {names['i']}\n"
                f"    if {pid} < {names['n']}:\n" + textwrap.indent(inner_code, " " * 8))
        block = statements(text)
        block[0] = block[0].with_changes(leading_lines=body[at].leading_lines)
        return node.with_changes(params=node.params.with_changes(params=params),
                                 body=node.body.with_changes(body=[*body[:at], *block]))
    return edit


def _launch_edit(grid: tuple[str, str], names: dict[str, str], factor: int) -> Edit:
    first, divided = grid

    def edit(call: cst.Call) -> cst.Call:
        subscript = call.func
        new_slice = cst.parse_expression(f"_[{divided.format(factor=factor)}]").slice
        n_arg, c_arg = cst.parse_expression(f"_({names['n']}={first}, {names['c']}={factor})").args
        args = list(call.args)
        if args:  # the new arguments go last, laid out like the ones before them
            sep = _separator(args)
            args[-1:] = [args[-1].with_changes(comma=sep), n_arg.with_changes(comma=sep),
                         c_arg.with_changes(comma=args[-1].comma)]
        else:
            args = [n_arg, c_arg]
        return call.with_changes(func=subscript.with_changes(slice=new_slice), args=args)
    return edit


def _separator(items: list[cst.Param] | list[cst.Arg]) -> cst.Comma:
    """The comma (and the line break and indent after it) between the last two items, for items appended."""
    if len(items) > 1 and isinstance(items[-2].comma, cst.Comma):
        return items[-2].comma
    return cst.Comma(whitespace_after=cst.SimpleWhitespace(" "))
