"""What the rewriter reads from a module's source: its Triton kernels, their launch sites and scopes.

Everything here is read with libcst and keeps references to the nodes of one parsed tree, so that a
rewrite can replace exactly those nodes and leave the rest of the file (comments, formatting) as it was.

What the kernels compute (each constexpr's role, loops, accesses, ...) is the rest of this package's, read
from here once (`facts`).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from functools import cached_property

import libcst as cst

from kernelband.proposers.rewriter.analysis.launch_args import Spread, map_args
from kernelband.proposers.rewriter.analysis.syntax import (
    CDIV_NAMES,
    Scope,
    code,
    contains,
    dotted,
    int_value,
    loads,
    make_scope,
    subnodes,
    walk,
)


# -- kernels ----------------------------------------------------------------------------------------------
@dataclass
class Param:
    name: str
    constexpr: bool
    default: cst.BaseExpression | None


@dataclass(eq=False)
class Kernel:
    name: str
    node: cst.FunctionDef
    params: list[Param]
    jit: cst.Decorator
    autotune: cst.Decorator | None
    heuristics: bool
    tl: frozenset[str]  # the names triton.language goes by in this module
    ms: ModuleSource | None = None  # the module it is read from (the analysis's facts are kept there)

    def param(self, name: str) -> Param | None:
        return next((p for p in self.params if p.name == name), None)

    @cached_property
    def _calls(self) -> list[cst.Call]:
        return subnodes(self.node.body, cst.Call)

    def calls(self, fname: str) -> list[cst.Call]:
        return [c for c in self._calls if self.is_tl(c.func, fname)]

    def program_axis(self, node: cst.BaseExpression) -> int | None:
        """The axis of `tl.program_id(axis)`, None for anything else."""
        if isinstance(node, cst.Call) and self.is_tl(node.func, "program_id") and len(node.args) == 1:
            return int_value(node.args[0].value)
        return None

    @cached_property
    def program_ids(self) -> set[int]:
        return {id(c) for c in self.calls("program_id")}

    @property
    def tl_name(self) -> str:
        return "tl" if "tl" in self.tl else sorted(self.tl)[0]

    def is_tl(self, func: cst.BaseExpression, fname: str) -> bool:
        name = dotted(func)
        if name is None or "." not in name:
            return False
        base, _, attr = name.rpartition(".")
        return attr == fname and (base in self.tl or base == "triton.language")

    @cached_property
    def loads(self) -> list[cst.Call]:
        return self.calls("load")

    @cached_property
    def stores(self) -> list[cst.Call]:
        return self.calls("store")

    @cached_property
    def scope(self) -> Scope:
        return make_scope(self.node, self.name)

    @cached_property
    def names(self) -> set[str]:
        return {n.value for n in subnodes(self.node, cst.Name)}

    @cached_property
    def uses_dot(self) -> bool:
        return bool(self.calls("dot"))

    @cached_property
    def atomics(self) -> bool:
        return any(self.calls(f"atomic_{op}") for op in ("add", "max", "min", "xchg", "cas", "and", "or", "xor"))

    @cached_property
    def pid_names(self) -> set[str]:
        """Locals derived from tl.program_id."""
        program_ids = self.program_ids
        tainted: set[str] = set()
        changed = True
        while changed:
            changed = False
            for name, values in self.scope.assigns.items():
                if name in tainted:
                    continue
                for value in values:
                    if value is not None and (contains(value, program_ids)
                                              or any(n.value in tainted for n in loads(value))):
                        tainted.add(name)
                        changed = True
                        break
        return tainted

    @cached_property
    def pipelinable(self) -> bool:
        """A loop that loads, through a pointer or a tensor descriptor: what num_stages pipelines."""
        return any(self._loads_in(loop) for loop in subnodes(self.node.body, cst.For))

    @cached_property
    def descriptor_loads(self) -> list[cst.Call]:
        """`desc.load([...])`: in a Triton kernel only a tensor descriptor (made in the kernel or on the host)
        has a method of that name."""
        return [c for c in subnodes(self.node.body, cst.Call) if isinstance(c.func, cst.Attribute)
                and c.func.attr.value == "load" and isinstance(c.func.value, cst.Name)
                and c.func.value.value not in self.tl]

    def _loads_in(self, node: cst.CSTNode) -> bool:
        return contains(node, {id(c) for c in (*self.loads, *self.descriptor_loads)})

    def bases(self, address: cst.BaseExpression, seen: frozenset[str] = frozenset()) -> set[str]:
        """The parameters an address expression is a pointer into: the bare names of its `+` chain and of what a
        `-` takes an offset from (`h_ptr + row - 1`), followed through locals (`row_ptr = x_ptr + row * stride`)."""
        found: set[str] = set()
        for term in _pointer_terms(address):
            if not isinstance(term, cst.Name) or term.value in seen:
                continue
            if self.param(term.value) is not None:
                found.add(term.value)
            else:
                for value in self.scope.assigns.get(term.value, []):
                    if value is not None:
                        found |= self.bases(value, seen | {term.value})
        return found

    def address(self, call: cst.Call) -> cst.BaseExpression | None:
        return call.args[0].value if call.args and call.args[0].keyword is None else None

    @cached_property
    def pointers(self) -> set[str]:
        found: set[str] = set()
        for call in (*self.loads, *self.stores):
            if (address := self.address(call)) is not None:
                found |= self.bases(address)
        return found

    @cached_property
    def inplace(self) -> list[str]:
        """Pointer params both read and written: autotuning must restore them between its runs."""
        read = set().union(*[self.bases(a) for c in self.loads if (a := self.address(c)) is not None])
        written = set().union(*[self.bases(a) for c in self.stores if (a := self.address(c)) is not None])
        return [p.name for p in self.params if p.name in read & written]


def _pointer_terms(node: cst.BaseExpression) -> list[cst.BaseExpression]:
    """The terms of an address that may be its pointer: those of a `+` chain, and the left side of a `-`."""
    if isinstance(node, cst.BinaryOperation) and isinstance(node.operator, cst.Subtract):
        return _pointer_terms(node.left)
    return [t for term in add_chain(node) for t in (_pointer_terms(term) if term is not node else [term])]


def add_chain(node: cst.BaseExpression) -> list[cst.BaseExpression]:
    if isinstance(node, cst.BinaryOperation) and isinstance(node.operator, cst.Add):
        return add_chain(node.left) + add_chain(node.right)
    return [node]


def _decorator_name(decorator: cst.Decorator) -> str:
    target = decorator.decorator
    if isinstance(target, cst.Call):
        target = target.func
    return dotted(target) or ""


def _kernel(node: cst.FunctionDef, tl: frozenset[str]) -> Kernel | None:
    names = [_decorator_name(d) for d in node.decorators]
    jit = next((d for d, n in zip(node.decorators, names) if n in ("triton.jit", "jit")), None)
    if jit is None:
        return None
    autotune = next((d for d, n in zip(node.decorators, names) if n.endswith("autotune")), None)
    heuristics = any(n.endswith("heuristics") for n in names)
    params = []
    for p in (*node.params.posonly_params, *node.params.params):
        annotation = code(p.annotation.annotation) if p.annotation else ""
        params.append(Param(p.name.value, annotation.strip("'\"").endswith("constexpr"), p.default))
    return Kernel(node.name.value, node, params, jit, autotune, heuristics, tl)


def _tl_aliases(module: cst.Module) -> frozenset[str]:
    aliases = set()
    for imp in subnodes(module, cst.Import):
        for alias in imp.names:
            if dotted(alias.name) == "triton.language" and alias.asname is not None:
                aliases.add(alias.asname.name.value)
    for imp in subnodes(module, cst.ImportFrom):
        if imp.module is not None and dotted(imp.module) == "triton" and not isinstance(imp.names, cst.ImportStar):
            for alias in imp.names:
                if dotted(alias.name) == "language":
                    aliases.add(alias.asname.name.value if alias.asname else "language")
    return frozenset(aliases or {"tl"})


def _imported(module: cst.Module) -> frozenset[str]:
    """Module names bound by plain `import x` / `import x as y`."""
    names = set()
    for imp in subnodes(module, cst.Import):
        for alias in imp.names:
            names.add(alias.asname.name.value if alias.asname else (dotted(alias.name) or "").split(".")[0])
    return frozenset(names)


# -- launches ---------------------------------------------------------------------------------------------
@dataclass(eq=False)
class Launch:
    """`kernel[grid](args...)`."""

    kernel: Kernel
    call: cst.Call
    scope: Scope
    args: dict[str, int]  # kernel param -> index in call.args of the argument that is its value
    spread: dict[str, Spread] = field(default_factory=dict)  # params covered by a starred argument
    keyed: dict[str, cst.BaseExpression] = field(default_factory=dict)  # keys of a readable `**dict`
    unmapped: str | None = None  # why some params' values are not known (a starred argument of unknown extent)

    @property
    def where(self) -> str:
        return f"{self.kernel.name} launch in {self.scope.name}"

    @property
    def subscript(self) -> cst.Subscript:
        return self.call.func

    @property
    def grid(self) -> list[cst.BaseExpression]:
        return [e.slice.value for e in self.subscript.slice if isinstance(e.slice, cst.Index)]

    def arg(self, name: str) -> cst.Arg | None:
        index = self.args.get(name)
        return self.call.args[index] if index is not None else None

    def value(self, name: str) -> cst.BaseExpression | None:
        """What the launch passes for a parameter (or a launch option of a `**dict`): its argument's value, the
        element of a starred argument that covers it, or its value in a `**dict`; None where it passes none
        that is known."""
        arg = self.arg(name)
        if arg is not None:
            return arg.value
        if name in self.spread:
            return self.spread[name].value
        return self.keyed.get(name)

    def kwarg(self, name: str) -> cst.Arg | None:
        return next((a for a in self.call.args if a.keyword is not None and a.keyword.value == name), None)

    @property
    def tupled(self) -> bool:
        """Whether the subscript itself is the grid's tuple: `kernel[a, b]`, `kernel[n,]` (not `kernel[grid]`)."""
        return len(self.subscript.slice) != 1 or isinstance(self.subscript.slice[0].comma, cst.Comma)

    @cached_property
    def grid_value(self) -> list[cst.BaseExpression]:
        """The grid, with a name assigned once in the launching function replaced by its value."""
        grid = self.grid
        if len(grid) == 1 and isinstance(grid[0], cst.Name) and not self.tupled:
            value = self.scope.value(grid[0].value)
            if value is not None:
                return [value]
        return grid

    @cached_property
    def meta_grid(self) -> tuple[str, cst.BaseExpression] | None:
        """(parameter name, body) when the grid is `lambda meta: ...` or a local `def grid(meta)`."""
        grid = self.grid_value
        if len(grid) != 1 or self.tupled:
            return None
        node = grid[0]
        if isinstance(node, cst.Lambda) and len(node.params.params) == 1:
            return node.params.params[0].name.value, node.body
        if isinstance(node, cst.Name):
            for fn in subnodes(self.scope.node, cst.FunctionDef):
                if fn.name.value == node.value and len(fn.params.params) == 1:
                    return fn.params.params[0].name.value, _returned(fn)
        return None

    @cached_property
    def meta_use(self) -> tuple[frozenset[str], bool]:
        """(the constexprs the grid reads through meta["..."], whether that is its only use of meta: not
        passed on, not indexed by a variable)."""
        if self.meta_grid is None:
            return frozenset(), True
        meta, body = self.meta_grid
        keys, keyed = set(), 0
        for sub in subnodes(body, cst.Subscript):
            if dotted(sub.value) == meta and len(sub.slice) == 1 and isinstance(sub.slice[0].slice, cst.Index):
                key = sub.slice[0].slice.value
                if isinstance(key, cst.SimpleString):
                    keys.add(key.evaluated_value)
                    keyed += 1
        return frozenset(keys), keyed == sum(1 for n in subnodes(body, cst.Name) if n.value == meta)

    @cached_property
    def region(self) -> list[cst.BaseExpression]:
        """The grid and the values of the locals that exist only to compute it (`grid = ...`,
        `num_blocks = ...`): a value read anywhere else (an output size, say) is not part of it."""
        reachable: list[str] = []
        pending = [n.value for n in loads(*self.grid)]
        while pending:
            name = pending.pop(0)
            value = self.scope.value(name)
            if name not in reachable and value is not None:
                reachable.append(name)
                pending.extend(n.value for n in loads(value))
        private: list[str] = []
        while True:
            roots = [self.subscript, *(self.scope.value(p) for p in private)]
            allowed = {id(n) for root in roots for n in subnodes(root, cst.Name)}
            more = [name for name in reachable if name not in private and all(
                id(n) in allowed for n in self.scope.body_loads() if n.value == name)]
            if not more:
                return [*self.grid, *(self.scope.value(p) for p in private)]
            private.extend(more)

    def ceil_divisions(self) -> list[CeilDiv]:
        found = []
        for node in self.region:
            found.extend(ceil_divisions(node))
        return found

    def tile_divisions(self) -> list[CeilDiv]:
        """The grid's ceiling divisions and its floor divisions (`M // 64`, `floor` set)."""
        found = []
        for node in self.region:
            found.extend(tile_divisions(node))
        return found


def _returned(fn: cst.FunctionDef) -> cst.CSTNode:
    """What a one-statement function returns (`def grid(meta): return (...)`), else its body."""
    body = fn.body.body
    if len(body) == 1 and isinstance(body[0], cst.SimpleStatementLine) and len(body[0].body) == 1 \
            and isinstance(body[0].body[0], cst.Return) and body[0].body[0].value is not None:
        return body[0].body[0].value
    return fn.body


@dataclass
class CeilDiv:
    """`cdiv(numerator, divisor)`, `(numerator + divisor - 1) // divisor`, `(numerator + 63) // 64` or
    `math.ceil(numerator / divisor)`: every node that is the divisor, or (`less_one`) the divisor less one."""

    numerator: cst.BaseExpression
    divisor: cst.BaseExpression  # an Integer or a Name (a Subscript where asked for)
    nodes: list[cst.BaseExpression]  # the divisor and its copies in the numerator
    less_one: list[cst.BaseExpression] = field(default_factory=list)  # of nodes: an integer that is divisor - 1
    # `numerator // divisor`: the whole tiles only, so the tiles cover the numerator exactly where the tile
    # divides it (a grid written so assumes it does)
    floor: bool = False


def _same(a: cst.BaseExpression, b: cst.BaseExpression) -> bool:
    if isinstance(a, cst.Integer) and isinstance(b, cst.Integer):
        return int_value(a) == int_value(b)
    if isinstance(a, cst.Subscript) and isinstance(b, cst.Subscript):
        return a.deep_equals(b)
    return isinstance(a, cst.Name) and isinstance(b, cst.Name) and a.value == b.value


def _signed_terms(node: cst.BaseExpression, sign: int = 1) -> list[tuple[int, cst.BaseExpression]]:
    if isinstance(node, cst.BinaryOperation) and isinstance(node.operator, cst.Add | cst.Subtract):
        right_sign = sign if isinstance(node.operator, cst.Add) else -sign
        return _signed_terms(node.left, sign) + _signed_terms(node.right, right_sign)
    return [(sign, node)]


def ceil_divisions(root: cst.CSTNode, subscripts: bool = False) -> list[CeilDiv]:
    """The ceiling divisions under `root` whose divisor is an integer or a name; with `subscripts`, also a
    subscript (a meta grid's `META["BLOCK_M"]`)."""
    kinds = (cst.Integer, cst.Name, cst.Subscript) if subscripts else (cst.Integer, cst.Name)
    found = []
    for call in subnodes(root, cst.Call):
        name = dotted(call.func) or ""
        if name.rpartition(".")[2] in CDIV_NAMES and len(call.args) == 2:
            divisor = call.args[1].value
            if isinstance(divisor, kinds):
                found.append(CeilDiv(call.args[0].value, divisor, [divisor]))
    for op in subnodes(root, cst.BinaryOperation):
        if not isinstance(op.operator, cst.FloorDivide) or not isinstance(op.right, kinds):
            continue
        terms = _signed_terms(op.left)
        copies = [t for s, t in terms if s > 0 and _same(t, op.right)]
        minus_one = any(s < 0 and int_value(t) == 1 for s, t in terms)
        rest = [t for s, t in terms if s > 0 and not _same(t, op.right)]
        if copies and minus_one and rest:
            found.append(CeilDiv(rest[0], op.right, [op.right, *copies]))
            continue
        # `(n + 63) // 64`: the divisor less one written as its value
        divisor = int_value(op.right) if isinstance(op.right, cst.Integer) else None
        integers = [(s, t) for s, t in terms if int_value(t) is not None]
        others = [t for _, t in terms if int_value(t) is None]
        if divisor is not None and divisor > 1 and len(integers) == 1 and integers[0][0] > 0 \
                and int_value(integers[0][1]) == divisor - 1 and all(s > 0 for s, _ in terms) and len(others) == 1:
            found.append(CeilDiv(others[0], op.right, [op.right, integers[0][1]], [integers[0][1]]))
    for call in subnodes(root, cst.Call):  # `math.ceil(n / 64)`
        if (dotted(call.func) or "").rpartition(".")[2] == "ceil" and len(call.args) == 1 \
                and isinstance(quotient := call.args[0].value, cst.BinaryOperation) \
                and isinstance(quotient.operator, cst.Divide) and isinstance(quotient.right, cst.Integer | cst.Name):
            found.append(CeilDiv(quotient.left, quotient.right, [quotient.right]))
    return found


def tile_divisions(root: cst.CSTNode, subscripts: bool = False) -> list[CeilDiv]:
    """`ceil_divisions`, and the plain floor divisions `n // d` (d an integer or a name; a subscript where asked
    for) that are no part of one."""
    ceilings = ceil_divisions(root, subscripts)
    taken = {id(n) for c in ceilings for n in c.nodes}
    kinds = (cst.Integer, cst.Name, cst.Subscript) if subscripts else (cst.Integer, cst.Name)
    floors = [CeilDiv(op.left, op.right, [op.right], floor=True) for op in subnodes(root, cst.BinaryOperation)
              if isinstance(op.operator, cst.FloorDivide) and isinstance(op.right, kinds) and id(op.right) not in taken]
    return ceilings + floors


# -- the module -------------------------------------------------------------------------------------------
class _Parents(cst.CSTVisitor):
    def __init__(self) -> None:
        self.parents: dict[int, cst.CSTNode] = {}
        self.stack: list[cst.CSTNode] = []

    def on_visit(self, node: cst.CSTNode) -> bool:
        if self.stack:
            self.parents[id(node)] = self.stack[-1]
        self.stack.append(node)
        return True

    def on_leave(self, original_node: cst.CSTNode) -> None:
        self.stack.pop()


class ModuleSource:
    """A parsed module with its kernels, scopes and launch sites."""

    def __init__(self, source: str) -> None:
        self.source = source
        self.module = cst.parse_module(source)
        self.cache: dict[str, dict] = {}  # the analysis's facts, computed once (analysis/facts.py)
        parents = _Parents()
        walk(self.module, parents)
        self.parents = parents.parents
        self.tl = _tl_aliases(self.module)
        self.imported = _imported(self.module)
        self.kernels: dict[str, Kernel] = {}
        self.scopes: list[Scope] = [make_scope(self.module, None)]
        self.launches: list[Launch] = []
        self._walk(self.module.body, None)
        self._find_launches()

    @property
    def module_scope(self) -> Scope:
        return self.scopes[0]

    def _walk(self, body, top: str | None) -> None:
        for statement in body:
            if isinstance(statement, cst.FunctionDef):
                kernel = _kernel(statement, self.tl) if top is None else None
                if kernel is not None:
                    kernel.ms = self
                    self.kernels[kernel.name] = kernel
                    continue
                self.scopes.append(make_scope(statement, top or statement.name.value))
                self._walk(statement.body.body, top or statement.name.value)
            elif isinstance(statement, cst.ClassDef):
                self._walk(statement.body.body, top or statement.name.value)

    def _find_launches(self) -> None:
        order = {id(call): i for i, call in enumerate(subnodes(self.module, cst.Call))}
        claimed: set[int] = set()
        for scope in reversed(self.scopes):  # innermost first: a launch belongs to its own function
            root = scope.node.body if isinstance(scope.node, cst.FunctionDef) else scope.node
            for call in subnodes(root, cst.Call):
                if id(call) in claimed or not isinstance(call.func, cst.Subscript):
                    continue
                kernel = self.kernels.get(dotted(call.func.value) or "")
                if kernel is not None:
                    claimed.add(id(call))
                    self.launches.append(_launch(kernel, call, scope, self.module_scope))
        self.launches.sort(key=lambda launch: order[id(launch.call)])

    def ancestors(self, nodes) -> set[int]:
        """Ids of the nodes and of everything above them."""
        found: set[int] = set()
        for node in nodes:
            key = id(node)
            while key not in found:
                found.add(key)
                parent = self.parents.get(key)
                if parent is None:
                    break
                key = id(parent)
        return found

    def launches_of(self, kernel: Kernel) -> list[Launch]:
        return [launch for launch in self.launches if launch.kernel is kernel]

    def name_value(self, scope: Scope, name: str) -> tuple[str, cst.BaseExpression | None]:
        """Where a name used in `scope` gets its value: ("local", value), ("default", default),
        ("module", value) or ("unknown", None)."""
        if name in scope.params:
            return "default", scope.params[name].default
        if name in scope.assigns:
            return "local", scope.value(name)
        return "module", self.module_scope.value(name)

    def reachable(self, entry: str) -> set[str] | None:
        """Module-level functions, classes and kernels the entry can reach; None when it is not defined here."""
        tops: dict[str, cst.CSTNode] = {s.name.value: s for s in self.module.body
                                        if isinstance(s, cst.FunctionDef | cst.ClassDef)}
        if entry not in tops:
            return None
        seen, pending = set(), [entry]
        while pending:
            name = pending.pop()
            if name in seen or name not in tops:
                continue
            seen.add(name)
            pending.extend(n.value for n in subnodes(tops[name], cst.Name))
        return seen


def _launch(kernel: Kernel, call: cst.Call, scope: Scope, module: Scope) -> Launch:
    mapping = map_args(kernel.params, list(kernel.node.decorators), call, scope, module)
    return Launch(kernel, call, scope, mapping.args, mapping.spread, mapping.keyed, mapping.unmapped)


def launch_statement(ms: ModuleSource, launch: Launch) -> cst.SimpleStatementLine | None:
    """The line a launch in a host function is alone on, where statements can go before it; else None."""
    line = ms.parents.get(id(ms.parents.get(id(launch.call))))
    if isinstance(ms.parents.get(id(launch.call)), cst.Expr) and isinstance(line, cst.SimpleStatementLine) \
            and len(line.body) == 1 and launch.scope.name != "<module>":
        return line
    return None


def launch_value(ms: ModuleSource, launch: Launch, node: cst.BaseExpression) -> int | str:
    """A launch argument's value where the source says it (a literal, or a name assigned one once), else its
    code. A parameter's default is not its value: a caller may pass another."""
    value = int_value(node)
    if value is None and isinstance(node, cst.Name):
        kind, given = ms.name_value(launch.scope, node.value)
        value = int_value(given) if kind != "default" else None
    return value if value is not None else code(node)


def tile_terms(ms: ModuleSource, launch: Launch, values: dict[str, int] | None = None) -> list[int | str] | None:
    """The extents of the launched kernel's distinct `tl.arange(0, X)` ranges, whose product bounds what one of
    its tensors holds (its tile; for kernels without tl.dot): a number where the source or `values` says it,
    else the launch's code for it. None where an extent cannot be read at the launch (not a number or a
    parameter that the launch passes)."""
    kernel = launch.kernel
    terms: dict[str, int | str] = {}
    for call in kernel.calls("arange"):
        if len(call.args) != 2 or int_value(call.args[0].value) != 0:
            return None
        end = call.args[1].value
        value = int_value(end)
        if value is None:
            if not isinstance(end, cst.Name) or kernel.param(end.value) is None:
                return None
            if values and end.value in values:
                value = values[end.value]
            elif (arg := launch.arg(end.value)) is not None:
                value = launch_value(ms, launch, arg.value)
            else:
                return None
        terms.setdefault(code(end), value)
    return list(terms.values()) or None
