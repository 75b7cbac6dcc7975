"""The launch values of a handed-back module that depend only on the shape, computed once per shape.

A launch's grid and arguments are often computed from the inputs' sizes on every call: `triton.cdiv`,
`triton.next_power_of_2`, a `min`/`max` of them, a block count written out twice (in the grid and as a
constexpr), a divisibility mask summed over a generator. In Triton 3.9 `triton.cdiv` and `triton.next_power_of_2`
are `constexpr_function`s: a call from the host costs about 1.4 µs (an import and the unwrapping of its
arguments), the most of what a launch of a few µs adds to a call. `cache_launch_values` moves these values, in
each function that launches kernels, into a function of the sizes alone, cached with `functools.cache` (one
entry per distinct shape, as Triton's autotuner keeps one choice per key), each value named once: the launch
reads `grid`, `ROWS`, `block` instead of the expressions.

What depends only on the shape: a value computed from integers read off the inputs (`x.shape`, `x.numel()`,
`x.size(i)`, `x.stride(i)`), parameters annotated `int`, and numbers (literals, or module constants assigned a
number once), through arithmetic, indexing by a number, comprehensions and the calls in PURE_CALLS. Only the
function's top-level statements are read, and a name must be assigned once in it. A value whose inputs are bound
after the first launch that reads a cached value stays where it is. A function whose values cost less than the
cached call is left as it is (`_cost`): a handful of builtin calls, no Triton helper, no comprehension. Then
the strides a launch passes are read once per tensor (stride_reads.py): they are the layout's, read every call.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import libcst as cst

from kernelband import pyast
from kernelband.proposers.rewriter.analysis.source import Launch, ModuleSource
from kernelband.proposers.rewriter.analysis.source import (
    _launch as launch_of,  # the launch's arguments by parameter
)
from kernelband.proposers.rewriter.analysis.syntax import (
    Scope,
    code,
    contains,
    dotted,
    fresh_name,
    loads,
    subnodes,
)
from kernelband.search.module_edits import (
    Named,
    Replace,
    Unparenthesize,
    expression_key,
    shape_tuple,
    spaced,
    with_import,
)
from kernelband.search.stride_reads import gather_strides

# Triton's host helpers, `constexpr_function`s in Triton 3.9: a call from the host costs about 1.4 µs, ten
# times the cached call, so that one alone is worth caching
TRITON_HELPERS = frozenset({"triton.cdiv", "triton.next_power_of_2"})
PURE_CALLS = TRITON_HELPERS | frozenset({"min", "max", "int", "abs", "round", "float", "bool", "math.ceil",
                                         "math.floor", "math.log2", "math.sqrt", "tuple", "len", "sum", "enumerate",
                                         "range", "zip", "type"})
# builtins a value may read as values (`type(v) is int`)
PURE_NAMES = frozenset({"True", "False", "None", "int", "float", "bool"})
_COMPREHENSIONS = (cst.GeneratorExp, cst.ListComp, cst.SetComp)
# tensor methods and attributes that give the integers a shape is made of
SHAPE_METHODS = frozenset({"numel", "size", "stride", "dim", "element_size"})
SHAPE_ATTRIBUTES = frozenset({"shape", "ndim"})
NUMBER_ANNOTATIONS = frozenset({"int", "float", "bool"})
MIN_CALLS = 3  # the least cost, in builtin calls, worth the cached call


@dataclass
class Cached:
    source: str  # the module, with each function's shape-only launch values cached (the same source if none)
    # per function: "f_launch(rows, cols) -> block, ROWS, grid", and "f: a.stride(), b.stride() read once"
    functions: list[str] = field(default_factory=list)


def cache_launch_values(source: str) -> Cached:
    """The module with the launch values that depend only on the shape computed once per shape (see the
    module's docstring); the source unchanged where there is nothing worth caching."""
    ms = ModuleSource(source)
    used = {n.value for n in subnodes(ms.module, cst.Name)}
    constants = _constants(ms)
    shadowed = frozenset(ms.module_scope.assigns)
    replace: dict[int, list[cst.BaseStatement]] = {}
    functions = []
    for scope in ms.scopes:
        fn = scope.node
        if not (isinstance(fn, cst.FunctionDef) and fn in ms.module.body and isinstance(fn.body, cst.IndentedBlock)):
            continue
        launches = _launches(ms, scope)
        plan = _Plan(fn, scope, launches, constants, used, shadowed).make() if launches else None
        if plan is not None:
            replace[id(fn)] = plan.statements
            functions.append(plan.summary)
    if replace:
        source = with_import(ms.module.visit(Replace(replace)), "functools").code
    # the strides a launch passes, read once per tensor (stride_reads.py): read on every call, not cached
    source, gathered = gather_strides(source, _launches)
    return Cached(source, functions + gathered)


def _launches(ms: ModuleSource, scope: Scope) -> list[Launch]:
    """The launches in a function: of the module's kernels, and of the copies of them a module-level name binds
    (`k_tuned = triton.autotune(...)(k)`: a pinned module's fallback, launched beside the pinned kernel)."""
    found = [launch for launch in ms.launches if launch.scope is scope]
    copies = {}
    for name in ms.module_scope.assigns:
        value = ms.module_scope.value(name)
        if (isinstance(value, cst.Call) and len(value.args) == 1 and isinstance(value.args[0].value, cst.Name)
                and value.args[0].value.value in ms.kernels):
            copies[name] = ms.kernels[value.args[0].value.value]
    nested = {id(c) for fn in subnodes(scope.node.body, cst.FunctionDef) for c in subnodes(fn, cst.Call)}
    for call in subnodes(scope.node.body, cst.Call):
        if isinstance(call.func, cst.Subscript) and dotted(call.func.value) in copies and id(call) not in nested:
            found.append(launch_of(copies[dotted(call.func.value)], call, scope, ms.module_scope))
    return found


def _constants(ms: ModuleSource) -> frozenset[str]:
    """Module-level names assigned a number once and declared global nowhere: constants a cached value may read."""
    declared = {n.name.value for g in subnodes(ms.module, cst.Global) for n in g.names}
    found = set()
    for name in ms.module_scope.assigns:
        value = ms.module_scope.value(name)
        if isinstance(value, cst.Integer | cst.Float) and name not in declared:
            found.add(name)
    return frozenset(found)


def _cost(node: cst.CSTNode) -> int:
    """What computing a value costs per call, in builtin calls: a Triton helper or a comprehension (a frame of
    its own) counts MIN_CALLS, so that one alone is worth caching."""
    calls = subnodes(node, cst.Call)
    helpers = sum(1 for c in calls if dotted(c.func) in TRITON_HELPERS)
    return len(calls) - helpers + MIN_CALLS * (helpers + sum(len(subnodes(node, k)) for k in _COMPREHENSIONS))


def _bound_inside(node: cst.CSTNode) -> set[str]:
    """The names a comprehension in `node` binds (its `for` targets): not names of the function."""
    return {n.value for comp in subnodes(node, cst.CompFor) for n in subnodes(comp.target, cst.Name)}


def _reads(node: cst.CSTNode) -> list[cst.Name]:
    """The names an expression reads from the function, a comprehension's own aside."""
    inner = _bound_inside(node)
    return [n for n in loads(node) if n.value not in inner]


def _nontrivial(node: cst.BaseExpression) -> bool:
    """More than a name, a number or a tuple of those: something is computed."""
    return bool(subnodes(node, cst.Call) or subnodes(node, cst.BinaryOperation) or subnodes(node, cst.IfExp)
                or subnodes(node, cst.Comparison) or subnodes(node, cst.BooleanOperation)
                or subnodes(node, cst.Subscript) or any(subnodes(node, k) for k in _COMPREHENSIONS))


def _number_index(node: cst.Subscript) -> bool:
    """`v[0]`, `v[-1]`, `v[1:]`: an index or a slice by numbers."""
    def number(part) -> bool:
        return part is None or isinstance(part, cst.Integer) or (
            isinstance(part, cst.UnaryOperation) and isinstance(part.expression, cst.Integer))
    if len(node.slice) != 1:
        return False
    part = node.slice[0].slice
    if isinstance(part, cst.Index):
        return number(part.value)
    return isinstance(part, cst.Slice) and number(part.lower) and number(part.upper) and number(part.step)


# What an expression moved out of a branch may compute: these calls and operators never raise on numbers; a
# division (cdiv too) only by a number other than 0, a shift or a power only by a number of at least 0.
_SAFE_CALLS = frozenset({"min", "max", "abs", "bool", "triton.next_power_of_2"})
_BY_NONZERO = (cst.Divide, cst.FloorDivide, cst.Modulo)
_BY_POSITIVE = (cst.LeftShift, cst.RightShift, cst.Power)


def _number(node: cst.BaseExpression) -> float | None:
    try:
        value = pyast.literal_eval(code(node))
    except (ValueError, SyntaxError):
        return None
    return value if isinstance(value, int | float) else None


def _cannot_raise(node: cst.BaseExpression) -> bool:
    if subnodes(node, cst.Subscript):  # an index past the end
        return False
    for call in subnodes(node, cst.Call):
        name = dotted(call.func)
        if name == "triton.cdiv" and len(call.args) == 2 and _number(call.args[1].value):
            continue
        if name not in _SAFE_CALLS:
            return False
    for op in subnodes(node, cst.BinaryOperation):
        right = _number(op.right)
        if isinstance(op.operator, _BY_NONZERO) and not right:
            return False
        if isinstance(op.operator, _BY_POSITIVE) and (right is None or right < 0):
            return False
    return True


def _shape_leaf(node: cst.BaseExpression) -> bool:
    """`x.numel()`, `x.size(0)`, `x.stride(-1)`, `x.shape[1]`, `x.ndim`: an integer of an input's shape."""
    if isinstance(node, cst.Call) and isinstance(node.func, cst.Attribute):
        return (node.func.attr.value in SHAPE_METHODS and isinstance(node.func.value, cst.Name)
                and all(isinstance(a.value, cst.Integer | cst.UnaryOperation) and not a.star for a in node.args))
    if isinstance(node, cst.Subscript):
        return (isinstance(node.value, cst.Attribute) and node.value.attr.value == "shape"
                and isinstance(node.value.value, cst.Name) and len(node.slice) == 1
                and isinstance(node.slice[0].slice, cst.Index)
                and isinstance(node.slice[0].slice.value, cst.Integer | cst.UnaryOperation))
    return isinstance(node, cst.Attribute) and node.attr.value == "ndim" and isinstance(node.value, cst.Name)


class _Plan:
    """One function's cached launch values: what to move, and the function that computes them."""

    def __init__(self, fn: cst.FunctionDef, scope: Scope, launches: list[Launch], constants: frozenset[str],
                 used: set[str], shadowed: frozenset[str]):
        self.fn, self.scope, self.launches, self.constants, self.used = fn, scope, launches, constants, used
        self.body = list(fn.body.body)
        self.declared = {n.name.value for d in subnodes(fn, cst.Global) + subnodes(fn, cst.Nonlocal) for n in d.names}
        # names the function or the module binds: a PURE_CALLS name among them is not the builtin or module
        self.shadowed = set(scope.assigns) | set(scope.params) | shadowed
        self.ints: dict[str, int] = {}  # integer names of the shape -> the statement that binds them (-1: a parameter)
        self.derived: dict[str, tuple[int, cst.BaseExpression]] = {}  # computed from them, once
        self.inner: set[str] = set()  # the targets of the comprehension `_pure` is reading
        self.statements: list[cst.BaseStatement] = []
        self.summary = ""

    def _once(self, name: str) -> bool:
        """Assigned once in the function, as a local of its own (not a parameter, not declared global)."""
        return (len(self.scope.assigns.get(name, [])) == 1 and name not in self.scope.params
                and name not in self.declared)

    def _pure(self, node: cst.CSTNode) -> set[str] | None:
        """The shape's integers an expression reads, where it reads nothing else and calls only PURE_CALLS (or
        `.bit_length()`); None otherwise."""
        if isinstance(node, cst.Integer | cst.Float):
            return set()
        if isinstance(node, cst.Name):
            if node.value in self.ints:
                return {node.value}
            if node.value in self.inner or node.value in self.constants:
                return set()
            return set() if node.value in PURE_NAMES and node.value not in self.shadowed else None
        if isinstance(node, cst.Subscript):
            return self._pure(node.value) if _number_index(node) else None
        if isinstance(node, _COMPREHENSIONS):
            return self._comprehension(node)
        if isinstance(node, cst.Call):
            name = dotted(node.func)
            if name in PURE_CALLS and name.split(".")[0] not in self.shadowed:
                parts = [a.value for a in node.args if not a.star and a.keyword is None]
                if len(parts) != len(node.args):
                    return None
            elif (isinstance(node.func, cst.Attribute) and node.func.attr.value == "bit_length"
                  and not node.args):
                parts = [node.func.value]
            else:
                return None
        elif isinstance(node, cst.BinaryOperation):
            parts = [node.left, node.right]
        elif isinstance(node, cst.UnaryOperation):
            parts = [node.expression]
        elif isinstance(node, cst.IfExp):
            parts = [node.test, node.body, node.orelse]
        elif isinstance(node, cst.Comparison):
            parts = [node.left, *(c.comparator for c in node.comparisons)]
        elif isinstance(node, cst.BooleanOperation):
            parts = [node.left, node.right]
        elif isinstance(node, cst.Tuple):
            if any(isinstance(e, cst.StarredElement) for e in node.elements):
                return None
            parts = [e.value for e in node.elements]
        else:
            return None
        found: set[str] = set()
        for part in parts:
            names = self._pure(part)
            if names is None:
                return None
            found |= names
        return found

    def _comprehension(self, node: cst.GeneratorExp | cst.ListComp | cst.SetComp) -> set[str] | None:
        """The shape's integers a comprehension reads: its iterables' and, with its targets bound, its element's
        and conditions'."""
        found: set[str] = set()
        bound = set()
        comp = node.for_in
        parts: list[cst.BaseExpression] = []
        while comp is not None:
            if comp.asynchronous is not None:
                return None
            names = self._pure(comp.iter) if not (bound & {n.value for n in loads(comp.iter)}) else None
            if names is None:
                return None
            found |= names
            bound |= {n.value for n in subnodes(comp.target, cst.Name)}
            parts += [c.test for c in comp.ifs]
            comp = comp.inner_for_in
        self.inner |= bound
        try:
            for part in [node.elt, *parts]:
                names = self._pure(part)
                if names is None:
                    return None
                found |= names
        finally:
            self.inner -= bound
        return found

    def _read(self) -> None:
        """The shape's integers and the values computed from them, statement by statement."""
        for param in self.fn.params.params:
            annotation = dotted(param.annotation.annotation) if param.annotation else None
            if annotation in NUMBER_ANNOTATIONS and param.name.value not in self.scope.assigns:
                self.ints[param.name.value] = -1
        for i, statement in enumerate(self.body):
            if not (isinstance(statement, cst.SimpleStatementLine) and len(statement.body) == 1):
                continue
            small = statement.body[0]
            if isinstance(small, cst.Assign) and len(small.targets) == 1:
                target, value = small.targets[0].target, small.value
            elif isinstance(small, cst.AnnAssign) and small.value is not None:
                target, value = small.target, small.value
            else:
                continue
            if isinstance(target, cst.Tuple) and shape_tuple(value):
                names = [e.value.value for e in target.elements if isinstance(e.value, cst.Name)]
                if len(names) == len(target.elements) and all(self._once(n) for n in names):
                    self.ints.update((n, i) for n in names)
            elif isinstance(target, cst.Name) and self._once(target.value):
                if _shape_leaf(value):
                    self.ints[target.value] = i
                elif self._pure(value) is not None:
                    self.ints[target.value] = i
                    if _nontrivial(value):
                        self.derived[target.value] = (i, value)

    def _statement_of(self, launch: Launch) -> int:
        return next(i for i, s in enumerate(self.body) if contains(s, {id(launch.call)}))

    def _values(self, launch: Launch) -> list[tuple[str, cst.BaseExpression]]:
        """A launch's values, each with the name it would go by: keyword arguments by their keyword, positional
        ones by the kernel's parameter, then the grid (`grid`, or after the kernel where the function has a
        `grid` of its own)."""
        by_index = {i: name for name, i in launch.args.items()}
        named = [(a.keyword.value, a.value) for a in launch.call.args if a.keyword is not None]
        named += [(by_index[i], a.value) for i, a in enumerate(launch.call.args)
                  if a.keyword is None and not a.star and i in by_index]
        grid = launch.subscript.slice
        if len(grid) == 1 and isinstance(grid[0].slice, cst.Index):
            named.append(("grid" if "grid" not in self.scope.assigns else f"{launch.kernel.name}_grid",
                          grid[0].slice.value))
        return named

    def _always(self, statement: cst.BaseStatement) -> set[str] | None:
        """What a statement computes whenever it runs: None for a plain statement (all of it); for an `if` with
        an `else`, the values (by _key) a launch in every branch computes (a pinned launch and its fallback); for
        anything else, none (a branch or a loop may not run)."""
        if isinstance(statement, cst.SimpleStatementLine):
            return None
        if not isinstance(statement, cst.If):
            return set()
        branches, rest = [statement.body], statement.orelse
        while isinstance(rest, cst.If):
            branches.append(rest.body)
            rest = rest.orelse
        if rest is None:
            return set()
        branches.append(rest.body)
        computed = [{expression_key(v) for launch in self.launches if contains(branch, {id(launch.call)})
                     for _, v in self._values(launch)} for branch in branches]
        return set.intersection(*computed)

    def _movable(self, value: cst.BaseExpression, at: int, statement: cst.BaseStatement) -> bool:
        """A value the cached function computes in place of the launch: read off the shape, bound before `at`,
        and computed whenever the statement runs, or unable to raise (moved out of a branch, it runs for shapes
        the branch would have left out)."""
        names = self._pure(value)
        if names is None or not _nontrivial(value) or any(self.ints[n] >= at for n in names):
            return False
        always = self._always(statement)
        return always is None or expression_key(value) in always or _cannot_raise(value)

    def _reads_derived(self, value: cst.BaseExpression, at: int) -> bool:
        """The value reads a name computed from the shape before `at` (`grid = (...)`, then `k[grid]`)."""
        return any(n.value in self.derived and self.derived[n.value][0] < at for n in _reads(value))

    def make(self) -> _Plan | None:
        self._read()
        placed = sorted(((self._statement_of(launch), k, launch) for k, launch in enumerate(self.launches)),
                        key=lambda x: x[:2])
        at = next((i for i, _, launch in placed
                   if any(self._movable(v, i, self.body[i]) or self._reads_derived(v, i)
                          for _, v in self._values(launch))), None)
        if at is None:
            return None
        derived = self._moved_before(at)
        launch_values = [(base, value) for i, _, launch in placed if i >= at
                         for base, value in self._values(launch) if self._movable(value, at, self.body[i])]
        if sum(_cost(v) for _, v in derived + launch_values) < MIN_CALLS:
            return None
        return self._build(at, derived, launch_values)

    def _moved_before(self, at: int) -> list[tuple[str, cst.BaseExpression]]:
        """The values computed from the shape before the first cached launch that move into the cached function:
        those the launches onward read, directly or through another moved value, and that nothing left in place
        before the launch reads (`ROWS = min(4, ... block ...)` moves `block` with it)."""
        later = {n.value for n in loads(*self.body[at:])}
        moved = {name: i for name, (i, _) in self.derived.items() if i < at}
        while True:
            needed = {name for name in moved if name in later}
            grew = True
            while grew:
                reads = {n.value for name in needed for n in loads(self.derived[name][1])}
                grew = bool((reads & set(moved)) - needed)
                needed |= reads & set(moved)
            lines = {moved[name] for name in needed}
            kept = {name for name in needed
                    if all(j in lines or not any(n.value == name for n in loads(self.body[j]))
                           for j in range(moved[name] + 1, at))}
            if kept == set(moved):
                return [(name, value) for name, (i, value) in self.derived.items() if name in kept]
            moved = {name: moved[name] for name in kept}

    def _build(self, at: int, derived, launch_values) -> _Plan:
        # the names a new local must not take: the function's own, and those it reads (globals, builtins)
        taken = set(self.scope.assigns) | set(self.scope.params) | {n.value for n in loads(self.fn.body)}
        taken |= self.shadowed
        named: list[tuple[str, cst.BaseExpression]] = []  # in the order computed, each value written once
        seen: dict[str, str] = {}  # what an expression computes (_key) -> the name it goes by
        replace: dict[int, cst.CSTNode | list] = {}
        for name, value in derived:
            named.append((name, value.visit(Named(seen))))
            seen[expression_key(value)] = name
        for base, value in launch_values:
            key = expression_key(value)
            if key not in seen:
                named.append((fresh_name(base, taken), value.visit(Named(seen))))
                seen[key] = named[-1][0]
            replace[id(value)] = cst.Name(seen[key])
        names = [n for n, _ in named]
        order = list(self.ints)  # in the order the function binds them
        inputs = sorted({n.value for _, v in named for n in _reads(v) if n.value in self.ints and n.value not in names},
                        key=order.index)
        function = fresh_name(f"{self.fn.name.value}_launch", self.used)
        body = self.body[:at]
        moved = {id(self.body[self.derived[name][0]]) for name, _ in derived}
        body = [s for s in body if id(s) not in moved]
        rest = [s.visit(Replace(replace)) for s in self.body[at:]]
        wanted = {n.value for n in loads(*rest)}
        returned = [n for n in names if n in wanted]
        call = cst.parse_statement(f"{', '.join(returned)} = {function}({', '.join(inputs)})\n")
        new_fn = self.fn.with_changes(body=self.fn.body.with_changes(body=[*body, call, *rest]))
        lines = "".join(self._comments(n) + f"    {n} = {code(v.visit(Unparenthesize()))}{self._trailing(n)}\n"
                        for n, v in named)
        text = (f"@functools.cache\n"
                f"def {function}({', '.join(inputs)}):\n"
                f'    """What {self.fn.name.value}\'s launches compute from the shape alone: once per shape, not on '
                f'every call."""\n'
                f"{lines}"
                f"    return {', '.join(returned)}\n")
        cached = spaced([cst.parse_statement(text)])[0]
        self.statements = [cached, new_fn]
        self.summary = f"{function}({', '.join(inputs)}) -> {', '.join(returned)}"
        return self


    def _moved(self, name: str) -> cst.SimpleStatementLine | None:
        """The statement a moved value came from, if it was one of the function's."""
        return self.body[self.derived[name][0]] if name in self.derived else None

    def _comments(self, name: str) -> str:
        """The comment lines above a moved statement, which go with it."""
        statement = self._moved(name)
        lines = [line.comment.value for line in statement.leading_lines if line.comment] if statement else []
        return "".join(f"    {line}\n" for line in lines)

    def _trailing(self, name: str) -> str:
        statement = self._moved(name)
        comment = statement.trailing_whitespace.comment if statement is not None else None
        return f"  {comment.value}" if comment is not None else ""
