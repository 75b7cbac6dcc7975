"""What launch_fusion reads of two launches and their kernels, beyond the host facts (analysis/buffers.py): a
kernel expression's value in terms of what its launch passes (two accesses of two kernels with the same value
touch the same addresses in the same program), the host code around the launches, and the pieces every fused
kernel is made of (renamed parameters and locals, the launch options)."""

from __future__ import annotations

import ast
import copy

import libcst as cst

from kernelband import pyast
from kernelband.proposers.rewriter.analysis.buffers import HostFunction, Site
from kernelband.proposers.rewriter.analysis.facts import facts_of
from kernelband.proposers.rewriter.analysis.source import Kernel, ModuleSource
from kernelband.proposers.rewriter.analysis.syntax import arg_of, code, dotted, fresh_name, loads, subnodes
from kernelband.proposers.rewriter.edits import keyword_arg

# Calls that read sizes or allocate: nothing they do can touch a kernel's buffers.
PURE_CALLS = frozenset({"empty", "empty_like", "zeros", "zeros_like", "ones", "ones_like", "full", "full_like",
                        "empty_strided", "new_empty", "new_zeros", "new_ones", "new_full", "cdiv",
                        "next_power_of_2", "min", "max", "int", "float", "len", "stride", "size", "numel", "dim",
                        "element_size", "view", "reshape", "ceil", "sqrt", "prod", "is_contiguous"})
METADATA = frozenset({"stride", "size", "numel", "shape", "dim", "ndim", "dtype", "device", "element_size"})
# Allocations shaped like a tensor: `torch.empty_like(h)` and `h.new_empty(n)` read no element of h.
SHAPED = frozenset({"empty_like", "zeros_like", "ones_like", "full_like", "new_empty", "new_zeros", "new_ones",
                    "new_full"})
# Views that never copy: `v = h.view(M, N)` reads no element of h (v is h's memory, buffers.py follows it).
VIEWS = frozenset({"view", "view_as", "t", "transpose", "permute", "squeeze", "unsqueeze", "expand", "expand_as",
                   "narrow", "unflatten", "as_strided"})
LAUNCH_SPEED = frozenset({"num_warps", "num_stages", "num_ctas"})  # options that change no result


class NotCertain(Exception):
    """Why the fusion's meaning is not certain."""


# -- the value of a kernel expression, in terms of what the launch passes -------------------------------------
class _Host(ast.NodeTransformer):
    """A canonical form (analysis/values.py) with each parameter replaced by what the launch passes for it,
    marked as the host's: `__host__(cols)`."""

    def __init__(self, side: Side) -> None:
        self.side = side

    def visit_Name(self, node: ast.Name) -> ast.AST:
        if self.side.kernel.param(node.id) is None:
            return node
        given = self.side.arg_code(node.id)
        if given is None:
            raise NotCertain(f"the {self.side.site.where} does not pass {node.id}")
        return ast.Call(ast.Name("__host__"), [pyast.parse(given, mode="eval").body], [])


class Side:
    """One launch of a pair: its kernel's values in the launch's terms, and its top-level locals."""

    def __init__(self, site: Site, args: dict[str, str] | None = None) -> None:
        self.site, self.launch, self.kernel = site, site.launch, site.kernel
        self.ms = self.kernel.ms
        self.values = facts_of(self.kernel).values
        self.args = args  # the codes the launch's values have at the fused launch (where they were moved)
        kernel = self.kernel
        self.top: dict[str, cst.BaseExpression] = {}
        for statement in kernel.node.body.body:
            if isinstance(statement, cst.SimpleStatementLine):
                for small in statement.body:
                    if isinstance(small, cst.Assign) and len(small.targets) == 1 \
                            and isinstance(small.targets[0].target, cst.Name):
                        self.top[small.targets[0].target.value] = small.value
        self.locals = set(kernel.scope.assigns) - {p.name for p in kernel.params}

    def arg_code(self, param: str) -> str | None:
        if self.args is not None and param in self.args:
            return self.args[param]
        value = self.launch.value(param)
        if value is not None:
            return code(value).strip()
        declared = self.kernel.param(param)
        return None if declared is None or declared.default is None else code(declared.default)

    def expand(self, node: cst.BaseExpression) -> ast.expr:
        return self.host_form(self.values.expand(node))

    def host_form(self, tree: ast.expr) -> ast.expr:
        """A canonical form of the kernel in the launch's terms."""
        return _Host(self).visit(copy.deepcopy(tree))

    def canonical(self, node: cst.BaseExpression | None) -> str:
        return "" if node is None else ast.dump(self.expand(node))


# -- the host function ------------------------------------------------------------------------------------
def pure(node: cst.CSTNode) -> bool:
    return all((dotted(c.func) or (c.func.attr.value if isinstance(c.func, cst.Attribute) else "")).rpartition(".")[2]
               in PURE_CALLS for c in subnodes(node, cst.Call))


def reads_data(ms: ModuleSource, node: cst.CSTNode, names: set[str]) -> bool:
    """Whether the code reads the elements of one of these tensors, not only its sizes or memory (`h.stride(0)`,
    `torch.empty_like(h)`, `h.new_zeros(n)`, `h.view(M, N)`)."""
    for name in loads(node):
        parent = ms.parents.get(id(name))
        if name.value in names and not (isinstance(parent, cst.Attribute) and parent.value is name
                                        and parent.attr.value in METADATA | SHAPED | VIEWS) and not _shaped_like(ms, parent):
            return True
    return False


def _shaped_like(ms: ModuleSource, arg: cst.CSTNode | None) -> bool:
    """Whether a tensor is the first argument of an allocation shaped like it (`torch.empty_like(h)`), which
    reads its sizes, dtype and device, never its elements."""
    call = ms.parents.get(id(arg))
    return isinstance(arg, cst.Arg) and arg.keyword is None and isinstance(call, cst.Call) and call.args[0] is arg \
        and (dotted(call.func) or "").rpartition(".")[2] in SHAPED


def options_of(site: Site) -> dict[str, cst.BaseExpression]:
    """The launch's keywords that are not kernel parameters: num_warps, num_stages, ..."""
    launch = site.launch
    given = {key: value for key, value in launch.keyed.items() if launch.kernel.param(key) is None}
    return given | {a.keyword.value: a.value for a in launch.call.args
                    if a.keyword is not None and launch.kernel.param(a.keyword.value) is None}


def check_options(a: Site, b: Site) -> None:
    options = (options_of(a), options_of(b))
    semantic = [{k: code(v) for k, v in o.items() if k not in LAUNCH_SPEED} for o in options]
    if semantic[0] != semantic[1]:
        raise NotCertain(f"the {a.where} and the {b.where} set different compiler options")


def check_arguments(host: HostFunction, a: Site, b: Site) -> None:
    """The second launch's arguments read what the first kernel writes only for its sizes, and call nothing
    with effects: they are evaluated after both kernels' work is launched as one."""
    written = {w for w in a.writes if w is not None}
    for arg in b.launch.call.args:
        if b.launch.unmapped is not None:
            raise NotCertain(f"{b.launch.unmapped} ({b.where})")
        if not pure(arg.value):
            raise NotCertain(f"the {b.where} calls something that may have effects in its arguments")
        if not isinstance(arg.value, cst.Name) and reads_data(host.ms, arg.value, written):
            raise NotCertain(f"the {b.where} computes an argument from what {a.kernel.name} writes")


def same_grid(host: HostFunction, a: Site, b: Site, dims_a: list[cst.BaseExpression]) -> bool:
    dims_b, _ = host.grid(b)
    if dims_b is None:
        return False
    return [ast.dump(pyast.parse(code(d).strip(), mode="eval")) for d in dims_a] == \
        [ast.dump(pyast.parse(d, mode="eval")) for d in dims_b]


def one_program(host: HostFunction, site: Site) -> bool:
    """Whether the launch runs one program: every dimension of its grid is the literal 1."""
    dims, _ = host.grid(site)
    return dims is not None and all(d.strip("() ") == "1" for d in dims)


# -- the fused kernel -------------------------------------------------------------------------------------
class Rename(cst.CSTTransformer):
    """Renames a kernel's parameters and locals (not attribute or keyword names) and replaces some of its
    calls by expressions."""

    def __init__(self, names: dict[str, str], calls: dict[int, str] | None = None,
                 before: dict[int, list[str]] | None = None, keywords: dict[int, dict[str, str]] | None = None
                 ) -> None:
        super().__init__()
        self.names, self.calls, self.before = names, calls or {}, before or {}  # before: lines to put first
        self.keywords = keywords or {}  # keyword arguments to add to calls

    def leave_SimpleStatementLine(self, original_node, updated_node):
        if id(original_node) in self.before:
            lines = [cst.parse_statement(text) for text in self.before[id(original_node)]]
            lines[0] = lines[0].with_changes(leading_lines=updated_node.leading_lines)
            return cst.FlattenSentinel([*lines, updated_node.with_changes(leading_lines=[])])
        return updated_node

    def leave_Call(self, original_node, updated_node):
        if id(original_node) in self.calls:
            return cst.parse_expression(self.calls[id(original_node)])
        if id(original_node) in self.keywords:
            more = [keyword_arg(k, cst.parse_expression(v)) for k, v in self.keywords[id(original_node)].items()]
            return updated_node.with_changes(args=[*updated_node.args, *more])
        return updated_node

    def leave_Name(self, original_node, updated_node):
        return updated_node.with_changes(value=self.names.get(updated_node.value, updated_node.value))

    def leave_Attribute(self, original_node, updated_node):
        return updated_node.with_changes(attr=original_node.attr)

    def leave_Arg(self, original_node, updated_node):
        return updated_node.with_changes(keyword=original_node.keyword)


def param_of(p: cst.Param, name: str | None = None) -> cst.Param:
    return cst.Param(cst.Name(name or p.name.value), annotation=p.annotation, default=p.default)


def all_params(kernel: Kernel) -> list[cst.Param]:
    return [*kernel.node.params.posonly_params, *kernel.node.params.params]


def used_names(ms: ModuleSource, *kernels: Kernel) -> set[str]:
    """Names a new kernel, local or parameter must not take."""
    return set().union(*[k.names for k in kernels]) | set(ms.kernels) | {n for s in ms.scopes for n in s.assigns} \
        | {n.value for n in subnodes(ms.module, cst.Name)}


def renames_of(first: Kernel, second: Kernel, used: set[str]) -> dict[str, str]:
    """New names for the second kernel's parameters and locals that the first kernel uses too."""
    own = {p.name for p in second.params} | set(second.scope.assigns)
    return {n: fresh_name(n, used) for n in sorted(own) if n in first.names}


def globals_clash(first: Kernel, second: Kernel, renames: dict[str, str]) -> None:
    """Neither body may bind a name the other reads as a global (a module constant, a helper)."""
    for one, two in ((first, second), (second, first)):
        own = {p.name for p in two.params} | set(two.scope.assigns)
        if set(one.scope.assigns) & ({n.value for n in loads(two.node.body)} - own):
            raise NotCertain(f"{one.name} assigns a name that {two.name} reads as a global")


def joined_params(first: Kernel, second: Kernel, renames: dict[str, str],
                  extra: list[cst.Param] = ()) -> cst.Parameters:
    """Both kernels' parameters (the second's renamed), those without a default first."""
    params = [param_of(p) for p in all_params(first)] + [
        param_of(p, renames.get(p.name.value)) for p in all_params(second)] + list(extra)
    return cst.Parameters(params=[p for p in params if p.default is None] + [p for p in params if p.default])


def top_level_store(ms: ModuleSource, site: Site, h: str) -> cst.Call:
    """The kernel's one store of the buffer h, a statement of its body's top level; NotCertain where it stores h
    more often, elsewhere, or also reads it."""
    kernel = site.kernel
    if h in site.reads:
        raise NotCertain(f"{kernel.name} reads {h} as well as writing it")
    stores = [c for c in kernel.stores if kernel.bases(kernel.address(c)) & site.params_of(h)]
    if len(stores) != 1:
        raise NotCertain(f"{kernel.name} stores to {h} {len(stores)} times, not once")
    [store] = stores
    line = ms.parents.get(id(ms.parents.get(id(store))))
    if not (isinstance(ms.parents.get(id(store)), cst.Expr) and line in kernel.node.body.body
            and len(line.body) == 1):
        raise NotCertain(f"{kernel.name} stores to {h} inside a block or in a compound statement")
    return store


def launch_args(site: Site, renames: dict[str, str], values: dict[str, cst.BaseExpression] | None = None) -> list:
    """The launch's arguments for its kernel's parameters, by keyword (the parameters renamed)."""
    args = []
    for param in site.kernel.params:
        given = values.get(param.name) if values is not None else None
        if given is None:
            given = site.launch.value(param.name)
        if given is not None:
            args.append(keyword_arg(renames.get(param.name, param.name), given))
    return args


def program_calls(kernel: Kernel) -> list[cst.Call]:
    """The kernel's `tl.program_id` and `tl.num_programs` calls; refuses a helper it calls that reads them."""
    helpers = {k for k in kernel.ms.kernels if k != kernel.name}
    for call in subnodes(kernel.node.body, cst.Call):
        name = dotted(call.func) or ""
        if name in helpers:
            helper = kernel.ms.kernels[name]
            if helper.calls("program_id") or helper.calls("num_programs"):
                raise NotCertain(f"{kernel.name} reads its program id in the helper {name}")
    return [*kernel.calls("program_id"), *kernel.calls("num_programs")]


def axis_of(kernel: Kernel, call: cst.Call) -> int:
    axis = arg_of(call, 0, "axis")
    value = int(axis.value) if isinstance(axis, cst.Integer) else None
    if value is None or value not in (0, 1, 2):
        raise NotCertain(f"{kernel.name} reads a program id on an axis that is not a number")
    return value


def branch_body(kernel: Kernel, renames: dict[str, str], calls: dict[int, str], used: set[str],
                keywords: dict[int, dict[str, str]] | None = None) -> list[cst.BaseStatement]:
    """The kernel's body, renamed, to run under an `if` of the fused kernel: each parameter the body assigns is
    first copied into a new local, since a branch may not give a value it did not make another type."""
    assigned = sorted({p.name for p in kernel.params} & set(kernel.scope.assigns))
    local = {p: fresh_name(f"{renames.get(p, p)}_local", used) for p in assigned}
    body = kernel.node.body.visit(Rename({**renames, **local}, calls, keywords=keywords))
    head = [cst.parse_statement(f"{local[p]} = {renames.get(p, p)}\n") for p in assigned]
    return head + list(body.body)


def flat_ids(index: str, sizes: list[str]) -> list[str]:
    """The program id on each axis of a grid of these sizes, from one flat index that runs over the grid's
    programs, axis 0 fastest."""
    ids = [f"{index} % {sizes[0]}" if len(sizes) > 1 else index]
    if len(sizes) > 1:
        ids.append(f"{index} // {sizes[0]}" + (f" % {sizes[1]}" if len(sizes) > 2 else ""))
    if len(sizes) > 2:
        ids.append(f"{index} // ({sizes[0]} * {sizes[1]})")
    return ids


def program_ids(kernel: Kernel, ids: list[str], counts: list[str]) -> dict[int, str]:
    """Each `tl.program_id(axis)` and `tl.num_programs(axis)` of the kernel replaced by the code given for its
    axis (an axis past those given: 0 and 1)."""
    calls = {}
    for call in program_calls(kernel):
        axis = axis_of(kernel, call)
        if kernel.is_tl(call.func, "program_id"):
            calls[id(call)] = ids[axis] if axis < len(ids) else "0"
        else:
            calls[id(call)] = counts[axis] if axis < len(counts) else "1"
    return calls
