"""launch_fusion's second form: a first kernel element-wise over its tensors flattened (`h[k] = f(x[k], y[k])` for
every k < n, one program per block of B elements) is not launched any more; the kernel that read h loads x and y
where it loaded h and computes f there. Its grid may be anything (rows, say): what it reads of h is what the
first kernel computed at the same memory offset.

Certain where: the first kernel is one straight-line block whose only store is `h + pid * B + tl.arange(0, B)`
masked by `offsets < n`, launched on `(triton.cdiv(n, B),)`, so it writes every element below n; every load it
makes is at the same offsets under the same mask; its stored value is built from those loads, its scalar
parameters and constants by arithmetic and tl functions known to be element-wise; h is a dense tensor the
function allocates (`torch.empty_like(x)`, ...) and n is `h.numel()` (or `x.numel()` of the x it is made like),
so each offset the reader reads h at (within h, as the original reads it) is below n; and the function reads h
nowhere else. The reader's address of h is followed through at most one local (`h_row = h_ptr + row * s`).
"""

from __future__ import annotations

import ast
import copy

import libcst as cst

from kernelband.proposers.rewriter.analysis.source import Launch, ModuleSource
from kernelband.proposers.rewriter.analysis.syntax import arg_of, code, dotted, fresh_name
from kernelband.proposers.rewriter.edits import Variant, keyword_arg
from kernelband.proposers.rewriter.rewrites.launch_reading import (
    ALLOCATIONS,
    NotCertain,
    Rename,
    Side,
    options_of,
    param_of,
    statement_of,
    uses,
)

ELEMENTWISE = frozenset({"where", "maximum", "minimum", "exp", "exp2", "log", "log2", "sqrt", "sqrt_rn", "rsqrt",
                         "abs", "sigmoid", "sin", "cos", "erf", "floor", "ceil", "fma", "fdiv", "div_rn", "clamp"})
DENSE = ALLOCATIONS - {"empty_strided"}  # a new tensor whose elements fill its storage


def add_terms(node: ast.AST) -> list[ast.AST]:
    if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Add):
        return add_terms(node.left) + add_terms(node.right)
    return [node]


def _host(node: ast.AST) -> str | None:
    """The host code X of a `__host__(X)` marker."""
    if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id == "__host__":
        return ast.unparse(node.args[0])
    return None


def _flat_offsets(one: Side, address: cst.BaseExpression) -> tuple[str, str, str]:
    """(pointer, block, the offsets' text) of `P + pid * B + tl.arange(0, B)` (in any order), in host code."""
    terms = add_terms(one.expand(address))
    tensors = {code(a.value) for p in one.kernel.pointers if (a := one.launch.arg(p)) is not None}
    pointers = [t for t in terms if _host(t) in tensors]
    aranges = [t for t in terms if isinstance(t, ast.Call) and ast.unparse(t.func).endswith(".arange")]
    rest = [t for t in terms if t not in pointers and t not in aranges]
    if len(pointers) != 1 or len(aranges) != 1 or len(rest) != 1 or len(aranges[0].args) != 2 \
            or ast.unparse(aranges[0].args[0]) != "0":
        raise NotCertain(f"{one.kernel.name} does not address `P + pid * B + tl.arange(0, B)`")
    block = ast.unparse(aranges[0].args[1])
    stride = rest[0]
    if not (isinstance(stride, ast.BinOp) and isinstance(stride.op, ast.Mult) and sorted(
            ast.unparse(x) for x in (stride.left, stride.right)) == sorted(["__pid_0", block])):
        raise NotCertain(f"{one.kernel.name} does not address `P + pid * B + tl.arange(0, B)`")
    return _host(pointers[0]), block, " + ".join(sorted(ast.unparse(t) for t in (stride, aranges[0])))


def _numel_of(launch: Launch, n: str, h: str) -> bool:
    """Whether host code `n` is certain to be h's number of elements."""
    value = launch.scope.value(n) if n.isidentifier() else None
    text = code(value) if value is not None else n
    if text == f"{h}.numel()":
        return True
    allocation, scope = launch.scope.value(h), launch.scope
    if not (isinstance(allocation, cst.Call) and dotted(allocation.func) == "torch.empty_like" and allocation.args
            and isinstance(allocation.args[0].value, cst.Name)):
        return False
    like = allocation.args[0].value.value  # the same tensor wherever it is read: bound once
    return text == f"{like}.numel()" and len(scope.assigns.get(like, [])) + (like in scope.params) == 1


class _Names(ast.NodeTransformer):
    """Names replaced by expressions (given as code)."""

    def __init__(self, names: dict[str, str]) -> None:
        self.names = names

    def visit_Name(self, node: ast.Name) -> ast.AST:
        return ast.parse(self.names[node.id], mode="eval").body if node.id in self.names else node


class _Inline(ast.NodeTransformer):
    """The stored value of an element-wise kernel with its locals replaced by their values and each load by a
    placeholder; refuses anything but element-wise arithmetic on loads, parameters and constants."""

    def __init__(self, one: Side) -> None:
        self.one, self.loads, self.params = one, [], set()  # loads: the pointer each placeholder reads

    def visit_Call(self, node: ast.Call) -> ast.AST:
        kernel, func = self.one.kernel, ast.unparse(node.func)
        base, _, name = func.rpartition(".")
        if base in kernel.tl and name == "load":
            pointers = [t.id for t in add_terms(node.args[0]) if isinstance(t, ast.Name) and t.id in kernel.pointers] \
                if node.args else []
            if len(pointers) != 1:
                raise NotCertain(f"{kernel.name} loads through a pointer not named in the load")
            self.loads.append(pointers[0])
            return ast.Name(f"__load_{len(self.loads) - 1}")
        if not (base in kernel.tl and name in ELEMENTWISE or name == "to" and base not in kernel.tl):
            raise NotCertain(f"{kernel.name} calls {func}, not known to be element-wise")
        return self.generic_visit(node)

    def visit_Name(self, node: ast.Name) -> ast.AST:
        kernel = self.one.kernel
        if kernel.param(node.id) is not None:
            if node.id in kernel.pointers:
                raise NotCertain(f"{kernel.name} stores a value computed from the pointer {node.id}")
            self.params.add(node.id)
            return node
        if node.id not in self.one.locals:
            return node
        if node.id not in self.one.top or len(kernel.scope.assigns[node.id]) != 1:
            raise NotCertain(f"{kernel.name} assigns {node.id} more than once or inside a block")
        return self.visit(ast.parse(code(self.one.top[node.id]).strip(), mode="eval").body)

    def generic_visit(self, node: ast.AST) -> ast.AST:
        if isinstance(node, ast.Subscript | ast.Lambda | ast.IfExp | ast.BoolOp | ast.NamedExpr | ast.Starred):
            raise NotCertain(f"{self.one.kernel.name} computes its stored value with {type(node).__name__}")
        return super().generic_visit(node)


def _reader_address(two: Side, load: cst.Call, h2: set[str], pointer: str) -> str:
    """The text of the reader's load address with the intermediate's pointer replaced by `pointer`: directly a
    term of the address, or of a local assigned once at the top level that is a term of it."""
    address = two.kernel.address(load)
    terms = add_terms(ast.parse(code(address).strip(), mode="eval").body)
    out = []
    for term in terms:
        names = {n.id for n in ast.walk(term) if isinstance(n, ast.Name)}
        if isinstance(term, ast.Name) and term.id in h2:
            out.append(pointer)
        elif isinstance(term, ast.Name) and term.id in two.top and len(two.kernel.scope.assigns[term.id]) == 1 \
                and two.kernel.bases(cst.Name(term.id)) & h2:
            value = ast.parse(code(two.top[term.id]).strip(), mode="eval").body
            inner = add_terms(value)
            reads = [n.id for n in ast.walk(value) if isinstance(n, ast.Name)]
            if [ast.unparse(t) for t in inner].count(next(iter(h2 & set(reads)), "")) != 1 or any(
                    r in two.locals and (r not in two.top or len(two.kernel.scope.assigns[r]) != 1) for r in reads):
                raise NotCertain(f"{two.kernel.name} addresses {term.id} in a way not followed here")
            out.append("(" + " + ".join(pointer if ast.unparse(t) in h2 else ast.unparse(t) for t in inner) + ")")
        elif names & h2 or two.kernel.bases(cst.parse_expression(ast.unparse(term))) & h2:
            raise NotCertain(f"{two.kernel.name} reads the intermediate at an address not followed here")
        else:
            out.append(ast.unparse(term))
    return " + ".join(out)


def inline(ms: ModuleSource, one: Side, two: Side, h: str, written: set[str]) -> Variant:
    """The first kernel, element-wise over its tensors flattened (`h[k] = f(x[k], y[k])` for every k < n), is
    no longer launched: the second loads x and y where it loaded h and computes f."""
    k1, k2, first, second = one.kernel, two.kernel, one.launch, two.launch
    if any(not isinstance(s, cst.SimpleStatementLine) for s in k1.node.body.body) or written != {h} \
            or len(k1.stores) != 1:
        raise NotCertain(f"{k1.name} is not one straight-line block that stores only {h}")
    if uses(ms, first, h) != 2:
        raise NotCertain(f"{first.scope.name} reads {h} again: {k1.name} must still write it")
    allocation = first.scope.value(h)
    if not (isinstance(allocation, cst.Call) and (dotted(allocation.func) or "").rpartition(".")[2] in DENSE):
        raise NotCertain(f"{h} is not certain to be dense")
    [store] = k1.stores
    _, block, offsets = _flat_offsets(one, k1.address(store))
    mask = one.expand(arg_of(store, 2, "mask") or cst.Name("None"))
    grid = [ast.parse(code(g).strip(), mode="eval").body for g in first.grid_value]
    if not (isinstance(mask, ast.Compare) and len(mask.ops) == 1 and isinstance(mask.ops[0], ast.Lt)
            and " + ".join(sorted(ast.unparse(t) for t in add_terms(mask.left))) == offsets
            and _host(mask.comparators[0]) is not None):
        raise NotCertain(f"{k1.name}'s store is not masked by `offsets < n`")
    n = _host(mask.comparators[0])
    cdiv = ast.unparse(ast.parse(f"triton.cdiv({n}, {_host(ast.parse(block, mode='eval').body)})", mode="eval"))
    if not (len(grid) == 1 and isinstance(grid[0], ast.Tuple) and len(grid[0].elts) == 1
            and ast.unparse(grid[0].elts[0]) == cdiv):
        raise NotCertain(f"the grid of the {first.where} is not `(triton.cdiv(n, B),)` for its mask's n and block")
    if not _numel_of(first, n, h):
        raise NotCertain(f"{n} is not certain to be {h}.numel()")
    for load in k1.loads:
        _, b, o = _flat_offsets(one, k1.address(load))
        if (b, o) != (block, offsets) or one.canonical(arg_of(load, 1, "mask")) != one.canonical(arg_of(store, 2,
                                                                                                           "mask")):
            raise NotCertain(f"{k1.name} loads at other offsets or under another mask than it stores")
    walker = _Inline(one)
    value = walker.visit(ast.parse(code(arg_of(store, 1, "value")).strip(), mode="eval").body)
    if not walker.loads:
        raise NotCertain(f"{k1.name} stores a value computed from no load: its shape is not certain")
    used = k2.names | k1.names | set(ms.kernels) | {x for s in ms.scopes for x in s.assigns}
    name = fresh_name(f"{k2.name}_{k1.name}_inlined", used)
    extra: dict[str, str] = {}  # new parameter of the reader -> host code
    params: dict[str, str] = {}  # the first kernel's parameter -> the reader's new one
    for param in sorted(walker.params) + sorted(set(walker.loads)):
        host = one.arg_code(param)
        if host is None:
            raise NotCertain(f"the {first.where} does not pass {param}")
        params[param] = fresh_name(param, used)
        extra[params[param]] = host
    k1_params = {p.name.value: p for p in (*k1.node.params.posonly_params, *k1.node.params.params)}
    globals_used = {n.id for n in ast.walk(value) if isinstance(n, ast.Name)} - set(params) - {
        f"__load_{i}" for i in range(len(walker.loads))}
    if globals_used & (two.locals | {p.name for p in k2.params}):
        raise NotCertain(f"{k2.name} has a local named like a global {k1.name} reads")
    h2 = two.params_of(h)
    hp = sorted(h2)[0]
    calls = {}
    for load in [c for c in k2.loads if k2.bases(k2.address(c)) & h2]:
        mask2, other = arg_of(load, 1, "mask"), arg_of(load, 2, "other")
        inlined = copy.deepcopy(value)
        loads = {}
        for i, base in enumerate(walker.loads):
            address = _reader_address(two, load, h2, params[base])
            loads[f"__load_{i}"] = f"{k1.tl_name}.load({address}" + (
                f", mask={code(mask2)})" if mask2 is not None else ")")
        text = ast.unparse(_Names({**params, **loads}).visit(inlined))
        cast = f"({text}).to({hp}.dtype.element_ty)"
        calls[id(load)] = cast if other is None else \
            f"{k2.tl_name}.where({code(mask2)}, {cast}, {code(other)}).to({hp}.dtype.element_ty)"
    body = k2.node.body.visit(Rename({}, calls))
    params2 = [param_of(p) for p in (*k2.node.params.posonly_params, *k2.node.params.params)]
    new_params = [param_of(k1_params[p], new) for p, new in params.items()]  # a constexpr stays one
    every = [p for p in params2 + new_params if p.default is None] + [p for p in params2 + new_params if p.default]
    kernel = k2.node.with_changes(name=cst.Name(name), params=cst.Parameters(params=every), body=body,
                                  leading_lines=[cst.EmptyLine(), cst.EmptyLine()])
    args = [keyword_arg(p.name, a.value) for p in k2.params if (a := second.arg(p.name)) is not None]
    args += [keyword_arg(k, v) for k, v in options_of(second).items()]
    args += [keyword_arg(key, cst.parse_expression(host)) for key, host in extra.items()]
    call = second.call.with_changes(func=second.subscript.with_changes(value=cst.Name(name)), args=args)
    last = max((k1.node, k2.node), key=lambda node: ms.module.body.index(node))
    edits = ((statement_of(ms, first), lambda node: cst.RemovalSentinel.REMOVE),
             (second.call, lambda node, call=call: call),
             (last, lambda node, kernel=kernel: cst.FlattenSentinel([node, kernel])))
    return Variant("launch_fusion", f"{k1.name} (element-wise over {h} flattened) computed where {k2.name} reads "
                   f"{h}, in {name}: one launch, {h} no longer stored", frozenset({k1.name, k2.name, name,
                                                                                   first.scope.top}), edits)
