"""What launch_fusion reads of two launches and their kernels: a kernel expression's value in terms of what the
launch passes (two accesses with the same value touch the same addresses in the same program), the buffers a
kernel reads and writes, and the host code between and around the launches."""

from __future__ import annotations

import ast
from collections import Counter

import libcst as cst

from kernelband.proposers.rewriter.analysis.source import Launch, ModuleSource, add_chain
from kernelband.proposers.rewriter.analysis.syntax import assigned, code, dotted, loads, subnodes

ALLOCATIONS = frozenset({"empty", "empty_like", "zeros", "zeros_like", "ones", "ones_like", "full", "full_like",
                         "empty_strided"})
# Calls that read sizes or allocate: nothing they do can touch a kernel's buffers.
PURE_CALLS = ALLOCATIONS | {"cdiv", "next_power_of_2", "min", "max", "int", "float", "len", "stride", "size",
                            "numel", "dim", "element_size"}
METADATA = frozenset({"stride", "size", "numel", "shape", "dim", "ndim", "dtype", "device", "element_size"})
LAUNCH_SPEED = frozenset({"num_warps", "num_stages", "num_ctas"})  # options that change no result


class NotCertain(Exception):
    """Why the fusion's meaning is not certain."""


# -- the value of a kernel expression, in terms of what the launch passes -------------------------------------
class _Expand(ast.NodeTransformer):
    """An expression of a kernel with each local replaced by its value, each parameter by the launch's argument
    (marked as the host's) and `tl.program_id(k)` by `__pid_k`: two accesses of two kernels with the same
    expansion touch the same addresses in the same program."""

    def __init__(self, side: Side) -> None:
        self.side = side

    def visit_Call(self, node: ast.Call) -> ast.AST:
        func = ast.unparse(node.func)
        if func.rpartition(".")[2] == "program_id" and func.rpartition(".")[0] in self.side.kernel.tl | {
                "triton.language"}:
            axis = node.args[0] if node.args else next((k.value for k in node.keywords if k.arg == "axis"), None)
            if isinstance(axis, ast.Constant) and isinstance(axis.value, int):
                return ast.Name(f"__pid_{axis.value}")
            raise NotCertain(f"{self.side.kernel.name} calls tl.program_id on an axis that is not a literal")
        return self.generic_visit(node)

    def visit_Name(self, node: ast.Name) -> ast.AST:
        return self.side.value_of(node.id)


class Side:
    """One of the two launches, with its kernel's top-level locals."""

    def __init__(self, ms: ModuleSource, launch: Launch) -> None:
        self.ms, self.launch, self.kernel = ms, launch, launch.kernel
        kernel = self.kernel
        self.top: dict[str, cst.BaseExpression] = {}
        for statement in kernel.node.body.body:
            if isinstance(statement, cst.SimpleStatementLine):
                for small in statement.body:
                    if isinstance(small, cst.Assign) and len(small.targets) == 1 \
                            and isinstance(small.targets[0].target, cst.Name):
                        self.top[small.targets[0].target.value] = small.value
        self.locals = set(kernel.scope.assigns)
        self.expanding: set[str] = set()

    def arg_code(self, param: str) -> str | None:
        arg = self.launch.arg(param)
        if arg is not None:
            return code(arg.value)
        default = self.kernel.param(param).default
        return None if default is None else code(default)

    def value_of(self, name: str) -> ast.AST:
        kernel = self.kernel
        if kernel.param(name) is not None:
            if name in self.locals:
                raise NotCertain(f"{kernel.name} assigns its parameter {name}")
            given = self.arg_code(name)
            if given is None:
                raise NotCertain(f"the {self.launch.where} does not pass {name}")
            return ast.Call(ast.Name("__host__"), [ast.parse(given, mode="eval").body], [])
        if name not in self.locals:
            return ast.Name(name)  # a global: tl, triton, a module constant
        if name not in self.top or len(kernel.scope.assigns[name]) != 1 or name in self.expanding:
            raise NotCertain(f"{kernel.name} assigns {name} more than once or inside a block")
        self.expanding.add(name)
        try:
            return self.expand(self.top[name])
        finally:
            self.expanding.discard(name)

    def expand(self, node: cst.BaseExpression) -> ast.AST:
        return _Expand(self).visit(ast.parse(code(node).strip(), mode="eval").body)

    def canonical(self, node: cst.BaseExpression | None) -> str:
        return "" if node is None else ast.dump(self.expand(node))

    def buffers(self, calls: list[cst.Call]) -> set[str]:
        """The host names of the tensors these loads or stores address (the launch's arguments for them)."""
        found = set()
        for call in calls:
            address = self.kernel.address(call)
            if address is None:
                raise NotCertain(f"{self.kernel.name} has a tl.load or tl.store whose address is a keyword")
            for param in self.kernel.bases(address):
                arg = self.launch.arg(param)
                if arg is None or not isinstance(arg.value, cst.Name):
                    raise NotCertain(f"the {self.launch.where} passes {param} as an expression, not a name")
                found.add(arg.value.value)
        return found

    def check_followed(self, tensors: set[str]) -> None:
        """Every load and store of the kernel reaches a tensor parameter, and these tensors' parameters only, as
        terms of its address's `+` chain, through locals whose every value is known (what `Kernel.bases`
        follows): a pointer picked by tl.where, a block pointer or a tuple would hide which tensor an access
        touches."""
        kernel = self.kernel
        pointers = {p for t in tensors for p in self.params_of(t)}
        derived = set(pointers)
        ranges = Counter(loop.target.value for loop in subnodes(kernel.node.body, cst.For)
                         if isinstance(loop.target, cst.Name) and isinstance(loop.iter, cst.Call)
                         and (dotted(loop.iter.func) or "").endswith("range"))  # integers, not pointers
        while True:
            more = {name for name, values in kernel.scope.assigns.items() if name not in derived and any(
                v is not None and {n.value for n in loads(v)} & derived for v in values)}
            if not more:
                break
            derived |= more

        def followed(node: cst.BaseExpression, seen: frozenset[str]) -> bool:
            for term in add_chain(node):
                if not isinstance(term, cst.Name):
                    if {n.value for n in loads(term)} & derived:
                        return False
                elif term.value in self.locals:
                    values = kernel.scope.assigns[term.value]
                    if term.value in seen or (None in values and values.count(None) != ranges[term.value]) \
                            or not all(followed(v, seen | {term.value}) for v in values if v is not None):
                        return False
            return True

        for call in (*kernel.loads, *kernel.stores):
            address = kernel.address(call)
            if address is None or not kernel.bases(address) or not followed(address, frozenset()):
                raise NotCertain(f"{kernel.name} has a tl.load or tl.store whose pointer is not followed here"
                                 + (f" (`{code(address)}`)" if address is not None else ""))

    def params_of(self, buffer: str) -> set[str]:
        return {p for p, i in self.launch.args.items() if code(self.launch.call.args[i].value) == buffer}



# -- the host function ------------------------------------------------------------------------------------
def statement_of(ms: ModuleSource, launch: Launch) -> cst.SimpleStatementLine:
    line = ms.parents.get(id(ms.parents.get(id(launch.call))))
    if not (isinstance(ms.parents.get(id(launch.call)), cst.Expr) and isinstance(line, cst.SimpleStatementLine)
            and len(line.body) == 1 and launch.scope.name != "<module>"):
        raise NotCertain(f"the {launch.where} is not a statement of its own in a function")
    return line


def pure(node: cst.CSTNode) -> bool:
    return all((dotted(c.func) or (c.func.attr.value if isinstance(c.func, cst.Attribute) else "")).rpartition(".")[2]
               in PURE_CALLS for c in subnodes(node, cst.Call))


def fresh(ms: ModuleSource, launch: Launch, name: str) -> bool:
    """Whether `name` is a tensor the launching function allocates, once: no other name is the same tensor."""
    value = launch.scope.value(name)
    return isinstance(value, cst.Call) and (dotted(value.func) or "").startswith("torch.") \
        and dotted(value.func).rpartition(".")[2] in ALLOCATIONS


def between_of(ms: ModuleSource, first: Launch, second: Launch) -> list[cst.CSTNode]:
    """The statements between the two launches, which must be in one block, in order."""
    a, b = statement_of(ms, first), statement_of(ms, second)
    block = ms.parents.get(id(a))
    if block is None or ms.parents.get(id(b)) is not block:
        raise NotCertain(f"the {first.where} and the {second.where} are not in one block")
    body = list(block.body)
    i, j = body.index(a), body.index(b)
    return body[i + 1:j]


def reads_data(ms: ModuleSource, node: cst.CSTNode, names: set[str]) -> bool:
    """Whether the code reads the elements of one of these tensors, not only its sizes (`h.stride(0)`)."""
    for name in loads(node):
        parent = ms.parents.get(id(name))
        if name.value in names and not (isinstance(parent, cst.Attribute) and parent.value is name
                                        and parent.attr.value in METADATA):
            return True
    return False


def uses(ms: ModuleSource, launch: Launch, name: str) -> int:
    """How often the launching function reads a tensor other than for its sizes: 2 where only the two launches
    pass it (nothing returns it or hands it on)."""
    return sum(reads_data(ms, n, {name}) for n in launch.scope.body_loads() if n.value == name)


def options_of(launch: Launch) -> dict[str, cst.BaseExpression]:
    """The launch's keywords that are not kernel parameters: num_warps, num_stages, ..."""
    return {a.keyword.value: a.value for a in launch.call.args
            if a.keyword is not None and launch.kernel.param(a.keyword.value) is None}


def same_grid(first: Launch, second: Launch) -> bool:
    return [ast.dump(ast.parse(code(g).strip(), mode="eval")) for g in first.grid_value] == \
        [ast.dump(ast.parse(code(g).strip(), mode="eval")) for g in second.grid_value]


def check_host(one: Side, two: Side, between: list[cst.CSTNode], written: set[str]) -> None:
    """The launches can be one at the second one's place: nothing in between or in the second's arguments that
    reads what the first writes (it now runs later), nothing that changes what the first reads."""
    first, second = one.launch, two.launch
    for launch in (first, second):
        if launch.meta_grid is not None:
            raise NotCertain(f"the grid of the {launch.where} depends on its block sizes")
        if any(a.star for a in launch.call.args):
            raise NotCertain(f"the {launch.where} passes starred arguments")
        if not all(pure(a.value) for a in launch.call.args) or not all(pure(g) for g in launch.grid):
            raise NotCertain(f"the {launch.where} calls something that may have effects in its arguments")
    read = {n.value for n in loads(first.call)}  # evaluated later than before: nothing may rebind them
    for statement in between:
        if not (isinstance(statement, cst.SimpleStatementLine) and all(
                isinstance(s, cst.Assign) for s in statement.body)) or not pure(statement) \
                or assigned(statement) & read:
            raise NotCertain(f"between the {first.where} and the {second.where} comes `{code(statement).strip()}`")
        if reads_data(one.ms, statement, written):
            raise NotCertain(f"`{code(statement).strip()}` between the launches reads what {first.kernel.name} writes")
    if any(not isinstance(a.value, cst.Name) and reads_data(one.ms, a.value, written) for a in second.call.args):
        raise NotCertain(f"the {second.where} computes an argument from what {first.kernel.name} writes")
    options = (options_of(first), options_of(second))
    semantic = [{k: code(v) for k, v in o.items() if k not in LAUNCH_SPEED} for o in options]
    if semantic[0] != semantic[1]:
        raise NotCertain(f"the {first.where} and the {second.where} set different compiler options")


# -- the fused kernel -------------------------------------------------------------------------------------
class Rename(cst.CSTTransformer):
    """Renames a kernel's parameters and locals (not attribute or keyword names) and replaces some of its
    calls by expressions."""

    def __init__(self, names: dict[str, str], calls: dict[int, str] | None = None) -> None:
        super().__init__()
        self.names, self.calls = names, calls or {}

    def leave_Call(self, original_node, updated_node):
        if id(original_node) in self.calls:
            return cst.parse_expression(self.calls[id(original_node)])
        return updated_node

    def leave_Name(self, original_node, updated_node):
        return updated_node.with_changes(value=self.names.get(updated_node.value, updated_node.value))

    def leave_Attribute(self, original_node, updated_node):
        return updated_node.with_changes(attr=original_node.attr)

    def leave_Arg(self, original_node, updated_node):
        return updated_node.with_changes(keyword=original_node.keyword)


def param_of(p: cst.Param, name: str | None = None) -> cst.Param:
    return cst.Param(cst.Name(name or p.name.value), annotation=p.annotation, default=p.default)
