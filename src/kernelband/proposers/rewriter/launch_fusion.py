"""launch_fusion: two launches one after the other in a host function, where the second kernel reads, at the
very addresses and under the very mask, a buffer the first one wrote, as one launch of a new kernel whose body
is the first kernel's body followed by the second's. The second kernel's loads of that buffer become the
value the first one stored, kept in registers:

    add_kernel[(rows,)](x, y, h, cols, BLOCK=B)          add_kernel_rmsnorm_kernel_fused[(rows,)](
    rmsnorm_kernel[(rows,)](out, h, w, cols, eps, BLOCK=B)     x_ptr=x, y_ptr=y, h_ptr=h, ..., out_ptr=out, ...)

    in the fused kernel:  h_value = x + y                       (was: tl.store(h_ptr + offs, x + y, mask=mask))
                          hv = tl.where(mask, h_value.to(h_ptr_1.dtype.element_ty), 0.0).to(...)
                                                               (was: hv = tl.load(h_ptr_1 + offs, mask=mask, other=0.0))

Program p of the fused kernel runs program p of the first kernel, then program p of the second. That is the
same computation when program p of the second reads, of what the first kernel writes, only what program p of
the first wrote, and nothing the other programs could change in between:

- both launches have the same grid, written the same way, read from names nothing reassigns in between (a
  `lambda meta:` grid is refused: it depends on the block sizes);
- the first kernel stores the intermediate once, in a statement of its body's top level, and does not read
  it; every load of it in the second kernel has the same address and mask as that store, once each local is
  replaced by its value (a local assigned more than once, or inside a block, is refused), each parameter by
  what the launch passes for it, and `tl.program_id(axis=0)` written any way; both access a 1-D block,
  `... + tl.arange(0, B)` with no other arange: within a program no two lanes share an address. Across
  programs the first kernel is taken to write each element once, as a kernel without a data race does;
- the intermediate, and every other buffer either kernel stores to, is a tensor the function allocates
  (`torch.empty_like(x)`, ...): no other name can alias it; the second kernel stores to none of the first
  kernel's buffers, the first to none of the second's except the intermediate;
- between the launches come only assignments of names neither launch reads, with no call but size and
  allocation ones (`triton.cdiv`, `x.stride(0)`, `torch.empty(...)`): the fused launch takes the second
  launch's place;
- neither kernel is autotuned or uses atomics, and the first returns nowhere early.

The stored value is cast to the intermediate's element type, as tl.store casts it, so the registers hold the
value the load would have read. The intermediate stays allocated; its store is dropped where the function
reads it nowhere but in the two launches (not returned, not passed on), and kept otherwise. The fused launch
passes every argument by keyword and takes the second launch's num_warps, num_stages and num_ctas, then those
of the first that the second does not set: they do not change what a kernel computes. Other compiler options
(enable_fp_fusion, ...) must be the same at both launches.
"""

from __future__ import annotations

import ast

import libcst as cst

from kernelband.proposers.rewriter.edits import Found, Variant, keyword_arg
from kernelband.proposers.rewriter.source import Launch, ModuleSource
from kernelband.proposers.rewriter.syntax import assigned, code, dotted, fresh_name, loads, subnodes

ALLOCATIONS = frozenset({"empty", "empty_like", "zeros", "zeros_like", "ones", "ones_like", "full", "full_like",
                         "empty_strided"})
# Calls that read sizes or allocate: nothing they do can touch a kernel's buffers.
PURE_CALLS = ALLOCATIONS | {"cdiv", "next_power_of_2", "min", "max", "int", "float", "len", "stride", "size",
                            "numel", "dim", "element_size"}
LAUNCH_SPEED = frozenset({"num_warps", "num_stages", "num_ctas"})  # options that change no result


class NotCertain(Exception):
    """Why the fusion's meaning is not certain."""


# -- the value of a kernel expression, in terms of what the launch passes -------------------------------------
class _Expand(ast.NodeTransformer):
    """An expression of a kernel with each local replaced by its value, each parameter by the launch's argument
    (marked as the host's) and `tl.program_id(k)` by `__pid_k`: two accesses of two kernels with the same
    expansion touch the same addresses in the same program."""

    def __init__(self, side: _Side) -> None:
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


class _Side:
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

    def params_of(self, buffer: str) -> set[str]:
        return {p for p, i in self.launch.args.items() if code(self.launch.call.args[i].value) == buffer}


def _arg(call: cst.Call, index: int, keyword: str) -> cst.BaseExpression | None:
    for arg in call.args:
        if arg.keyword is not None and arg.keyword.value == keyword:
            return arg.value
    positional = [a for a in call.args if a.keyword is None]
    return positional[index].value if index < len(positional) else None


def _one_block(side: _Side, call: cst.Call) -> bool:
    """Whether the access is `... + tl.arange(0, B)` with no other arange: its lanes hold distinct addresses."""
    tree = side.expand(side.kernel.address(call))
    aranges = [n for n in ast.walk(tree) if isinstance(n, ast.Call) and ast.unparse(n.func).endswith(".arange")]
    if len(aranges) != 1 or not isinstance(tree, ast.BinOp):
        return False
    terms, pending = [], [tree]
    while pending:
        node = pending.pop()
        if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Add):
            pending += [node.left, node.right]
        else:
            terms.append(node)
    return any(t is aranges[0] for t in terms)


# -- the host function ------------------------------------------------------------------------------------
def _statement(ms: ModuleSource, launch: Launch) -> cst.SimpleStatementLine:
    line = ms.parents.get(id(ms.parents.get(id(launch.call))))
    if not (isinstance(ms.parents.get(id(launch.call)), cst.Expr) and isinstance(line, cst.SimpleStatementLine)
            and len(line.body) == 1 and launch.scope.name != "<module>"):
        raise NotCertain(f"the {launch.where} is not a statement of its own in a function")
    return line


def _pure(node: cst.CSTNode) -> bool:
    return all((dotted(c.func) or (c.func.attr.value if isinstance(c.func, cst.Attribute) else "")).rpartition(".")[2]
               in PURE_CALLS for c in subnodes(node, cst.Call))


def _fresh(ms: ModuleSource, launch: Launch, name: str) -> bool:
    """Whether `name` is a tensor the launching function allocates, once: no other name is the same tensor."""
    value = launch.scope.value(name)
    return isinstance(value, cst.Call) and (dotted(value.func) or "").startswith("torch.") \
        and dotted(value.func).rpartition(".")[2] in ALLOCATIONS


def _between(ms: ModuleSource, first: Launch, second: Launch) -> list[cst.CSTNode]:
    """The statements between the two launches, which must be in one block, in order."""
    a, b = _statement(ms, first), _statement(ms, second)
    block = ms.parents.get(id(a))
    if block is None or ms.parents.get(id(b)) is not block:
        raise NotCertain(f"the {first.where} and the {second.where} are not in one block")
    body = list(block.body)
    i, j = body.index(a), body.index(b)
    return body[i + 1:j]


def _options(launch: Launch) -> dict[str, cst.BaseExpression]:
    """The launch's keywords that are not kernel parameters: num_warps, num_stages, ..."""
    return {a.keyword.value: a.value for a in launch.call.args
            if a.keyword is not None and launch.kernel.param(a.keyword.value) is None}


def _check_host(one: _Side, two: _Side, between: list[cst.CSTNode], written: set[str]) -> None:
    """The launches can be one at the second one's place: the same grid, nothing in between or in the second's
    arguments that reads what the first writes (it now runs later), nothing that changes what the first reads."""
    first, second = one.launch, two.launch
    for launch in (first, second):
        if launch.meta_grid is not None:
            raise NotCertain(f"the grid of the {launch.where} depends on its block sizes")
        if any(a.star for a in launch.call.args):
            raise NotCertain(f"the {launch.where} passes starred arguments")
        if not all(_pure(a.value) for a in launch.call.args) or not all(_pure(g) for g in launch.grid):
            raise NotCertain(f"the {launch.where} calls something that may have effects in its arguments")
    if [ast.dump(ast.parse(code(g).strip(), mode="eval")) for g in first.grid_value] != \
            [ast.dump(ast.parse(code(g).strip(), mode="eval")) for g in second.grid_value]:
        raise NotCertain(f"the {first.where} and the {second.where} have different grids")
    read = {n.value for launch in (first, second) for n in loads(launch.call)}
    for statement in between:
        if not (isinstance(statement, cst.SimpleStatementLine) and all(
                isinstance(s, cst.Assign) for s in statement.body)) or not _pure(statement) \
                or assigned(statement) & read:
            raise NotCertain(f"between the {first.where} and the {second.where} comes `{code(statement).strip()}`")
        if {n.value for n in loads(statement)} & written:
            raise NotCertain(f"`{code(statement).strip()}` between the launches reads what {first.kernel.name} writes")
    if any(not isinstance(a.value, cst.Name) and {n.value for n in loads(a.value)} & written
           for a in second.call.args):
        raise NotCertain(f"the {second.where} computes an argument from what {first.kernel.name} writes")
    options = (_options(first), _options(second))
    semantic = [{k: code(v) for k, v in o.items() if k not in LAUNCH_SPEED} for o in options]
    if semantic[0] != semantic[1]:
        raise NotCertain(f"the {first.where} and the {second.where} set different compiler options")


# -- the fused kernel -------------------------------------------------------------------------------------
class _Rename(cst.CSTTransformer):
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


def _param(p: cst.Param, name: str | None = None) -> cst.Param:
    return cst.Param(cst.Name(name or p.name.value), annotation=p.annotation, default=p.default)


def _pair(ms: ModuleSource, first: Launch, second: Launch) -> Variant:
    one, two = _Side(ms, first), _Side(ms, second)
    k1, k2 = first.kernel, second.kernel
    for kernel in (k1, k2):
        if kernel.autotune is not None or kernel.heuristics:
            raise NotCertain(f"{kernel.name} is autotuned or has heuristics")
        if kernel.atomics:
            raise NotCertain(f"{kernel.name} uses atomics")
    if code(k1.jit) != code(k2.jit) or isinstance(k1.jit.decorator, cst.Call):
        raise NotCertain(f"{k1.name} and {k2.name} are not both plain @triton.jit")
    if subnodes(k1.node.body, cst.Return):
        raise NotCertain(f"{k1.name} returns early: the second kernel's part would not run")
    written = one.buffers(k1.stores)
    shared = written & (two.buffers(k2.loads))
    if not shared:
        raise NotCertain(f"{k2.name} reads nothing {k1.name} writes")
    if len(shared) > 1:
        raise NotCertain(f"{k2.name} reads more than one buffer {k1.name} writes ({', '.join(sorted(shared))})")
    [h] = shared
    between = _between(ms, first, second)
    _check_host(one, two, between, written)
    stored_by_two = two.buffers(k2.stores)
    for buffer in written | stored_by_two:
        if not _fresh(ms, first, buffer):
            raise NotCertain(f"{buffer} is not a tensor {first.scope.name} allocates: another name may alias it")
    if stored_by_two & (one.buffers(k1.loads) | written):
        raise NotCertain(f"{k2.name} writes a buffer {k1.name} reads or writes")
    if h in one.buffers(k1.loads):
        raise NotCertain(f"{k1.name} reads {h} as well as writing it")
    if (written - {h}) & (two.buffers(k2.loads) | stored_by_two):
        raise NotCertain(f"{k2.name} reads or writes another buffer {k1.name} writes")
    if any(set(assigned(s)) & {h} or h in {n.value for n in loads(s)} for s in between):
        raise NotCertain(f"{h} is read or assigned between the launches")
    h1 = one.params_of(h)
    stores = [c for c in k1.stores if k1.bases(k1.address(c)) & h1]
    if len(stores) != 1:
        raise NotCertain(f"{k1.name} stores to {h} {len(stores)} times, not once")
    [store] = stores
    line = ms.parents.get(id(ms.parents.get(id(store))))
    if not (isinstance(ms.parents.get(id(store)), cst.Expr) and line in k1.node.body.body and len(line.body) == 1):
        raise NotCertain(f"{k1.name} stores to {h} inside a block or in a compound statement")
    value, mask = _arg(store, 1, "value"), _arg(store, 2, "mask")
    if value is None or isinstance(value, cst.Integer | cst.Float) or mask is None:
        raise NotCertain(f"{k1.name}'s store to {h} is unmasked or stores a literal: its shape is not certain")
    if not _one_block(one, store):
        raise NotCertain(f"{k1.name}'s store to {h} is not one 1-D block `... + tl.arange(0, B)`")
    address, where = one.canonical(k1.address(store)), one.canonical(mask)
    h2 = two.params_of(h)
    reads = [c for c in k2.loads if k2.bases(k2.address(c)) & h2]
    for load in reads:
        if two.canonical(k2.address(load)) != address or two.canonical(_arg(load, 1, "mask")) != where:
            raise NotCertain(f"{k2.name} reads {h} at other addresses or under another mask than {k1.name} "
                             f"writes it")
    return _fused(ms, one, two, h, store, reads, between)


def _fused(ms: ModuleSource, one: _Side, two: _Side, h: str, store: cst.Call, reads: list[cst.Call],
           between: list[cst.CSTNode]) -> Variant:
    k1, k2, first, second = one.kernel, two.kernel, one.launch, two.launch
    used = k1.names | k2.names | set(ms.kernels) | {n for s in ms.scopes for n in s.assigns}
    if k1.scope.assigns.keys() & ({n.value for n in loads(k2.node.body)} - set(two.locals) - {
            p.name for p in k2.params}):
        raise NotCertain(f"{k1.name} assigns a name that {k2.name} reads as a global")
    name = fresh_name(f"{k1.name}_{k2.name}_fused", used)
    kept = fresh_name(f"{h}_value", used)
    renames = {n: fresh_name(n, used) for n in sorted({p.name for p in k2.params} | two.locals) if n in k1.names}
    hp = sorted(two.params_of(h))[0]
    hp = renames.get(hp, hp)
    tl = k2.tl_name
    cast = f"{kept}.to({hp}.dtype.element_ty)"
    calls = {}
    for load in reads:  # the replacements are not renamed again: they are written in the new names
        mask, other = _arg(load, 1, "mask"), _arg(load, 2, "other")
        calls[id(load)] = cast if other is None else (
            f"{tl}.where({code(mask.visit(_Rename(renames)))}, {cast}, {code(other.visit(_Rename(renames)))})"
            f".to({hp}.dtype.element_ty)")
    body2 = k2.node.body.visit(_Rename(renames, calls))
    drop = sum(n.value == h for n in first.scope.body_loads()) == 2
    line = ms.parents.get(id(ms.parents.get(id(store))))
    value = _arg(store, 1, "value")
    replaced = [cst.parse_statement(f"{kept} = {code(value)}\n").with_changes(leading_lines=line.leading_lines)]
    if not drop:
        replaced.append(line.with_changes(leading_lines=[], body=[line.body[0].with_changes(
            value=store.visit(_Swap(value, kept)))]))
    statements = []
    for statement in k1.node.body.body:
        statements.extend(replaced if statement is line else [statement])
    params1 = [_param(p) for p in (*k1.node.params.posonly_params, *k1.node.params.params)]
    params2 = [_param(p, renames.get(p.name.value))
               for p in (*k2.node.params.posonly_params, *k2.node.params.params)]
    params = [p for p in params1 + params2 if p.default is None] + [p for p in params1 + params2 if p.default]
    kernel = k1.node.with_changes(
        name=cst.Name(name), params=cst.Parameters(params=params),
        body=k1.node.body.with_changes(body=[*statements, *body2.body]),
        leading_lines=[cst.EmptyLine(), cst.EmptyLine()])
    args = []
    for side, names in ((one, {}), (two, renames)):
        for param in side.kernel.params:
            if (arg := side.launch.arg(param.name)) is not None:
                args.append(keyword_arg(names.get(param.name, param.name), arg.value))
    options = {**_options(first), **_options(second)}
    args += [keyword_arg(k, v) for k, v in options.items()]
    call = second.call.with_changes(func=second.subscript.with_changes(value=cst.Name(name)), args=args)
    launch_line = _statement(ms, second)
    last = max((k1.node, k2.node), key=lambda node: ms.module.body.index(node))
    edits = ((_statement(ms, first), lambda node: cst.RemovalSentinel.REMOVE),
             (launch_line, lambda node, call=call: node.with_changes(body=[cst.Expr(call)])),
             (last, lambda node, kernel=kernel: cst.FlattenSentinel([node, kernel])))
    fate = f"{h} still stored ({first.scope.name} reads it again)" if not drop else f"{h} no longer stored"
    return Variant("launch_fusion", f"the launches of {k1.name} and {k2.name} in {first.scope.name} as one kernel "
                   f"({name}): {k2.name} reads {h} from registers, {fate}",
                   frozenset({k1.name, k2.name, name, first.scope.top}), edits)


class _Swap(cst.CSTTransformer):
    """A store with its value replaced by a name."""

    def __init__(self, value: cst.BaseExpression, name: str) -> None:
        super().__init__()
        self.value, self.name = value, name

    def on_leave(self, original_node, updated_node):
        return cst.Name(self.name) if original_node is self.value else updated_node


def launch_fusion(ms: ModuleSource) -> Found:
    if "triton" not in ms.imported:
        return Found([], ["the module does not `import triton`"])
    variants, reasons = [], []
    for first, second in zip(ms.launches, ms.launches[1:]):
        if first.scope is not second.scope:
            continue
        try:
            variants.append(_pair(ms, first, second))
        except NotCertain as why:
            reasons.append(str(why))
    if not variants and not reasons:
        reasons.append("no function launches two kernels one after the other")
    return Found(variants, reasons)
