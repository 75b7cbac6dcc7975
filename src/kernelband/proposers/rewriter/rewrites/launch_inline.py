"""launch_fusion's second form: a first kernel element-wise over its tensors flattened (`h[k] = f(x[k], y[k])` for
every k < n, one program per block of B elements) is not launched any more; the kernel that read h loads x and y
where it loaded h and computes f there. Its grid may be anything (rows, say): what it reads of h is what the
first kernel computed at the same memory offset.

Certain where: the first kernel is one straight-line block whose only store is `h + pid * B + tl.arange(0, B)`
masked by `offsets < n`, launched on a ceil division of n by B (`triton.cdiv(n, B)`, `(n + B - 1) // B`), so
it writes every element below n; every load it makes is at the same offsets under the same mask; its stored
value is built from those loads, its scalar parameters and constants by arithmetic and tl functions known to be
element-wise (helpers it calls included); h is a dense tensor the function allocates and n is `h.numel()` (or
`x.numel()` of the x it is made like), so each offset the reader reads h at (within h, as the original reads it)
is below n. The reader's address of h is followed through at most one local (`h_row = h_ptr + row * s`).

Where the function uses h again (returns it, reads it, hands it on), the reader also stores what it computes
where it loaded h, at one load that covers a row: `h + pid * S + c` for every c < N (one block of B >= N, or a
loop from 0 to N by B), on a grid of R programs. Its programs then write every element of h exactly when
S == N and R * N == h.numel(), and the host checks that before it launches the fused kernel; otherwise it
launches the two kernels as before:

    if h.stride(0) == cols and rows * cols == h.numel():
        rmsnorm_kernel_add_kernel_inlined[(rows,)](...)      (h stored where it is computed)
    else:
        add_kernel[...](...)
        rmsnorm_kernel[(rows,)](...)
"""

from __future__ import annotations

import ast
import copy

import libcst as cst

from kernelband import pyast
from kernelband.proposers.rewriter.analysis.buffers import HostFunction, Site
from kernelband.proposers.rewriter.analysis.facts import KernelFacts, facts_of
from kernelband.proposers.rewriter.analysis.launch_args import unpacked
from kernelband.proposers.rewriter.analysis.source import ModuleSource
from kernelband.proposers.rewriter.analysis.syntax import arg_of, code, dotted, fresh_name, subnodes
from kernelband.proposers.rewriter.analysis.values import add_terms, factors, is_call, marker_arg, same
from kernelband.proposers.rewriter.edits import Variant, keyword_arg
from kernelband.proposers.rewriter.rewrites.launch_reading import (
    NotCertain,
    Rename,
    Side,
    all_params,
    options_of,
    param_of,
)
from kernelband.proposers.rewriter.rewrites.launch_sites import Moved

ELEMENTWISE = frozenset({"where", "maximum", "minimum", "exp", "exp2", "log", "log2", "sqrt", "sqrt_rn", "rsqrt",
                         "abs", "sigmoid", "sin", "cos", "erf", "floor", "ceil", "fma", "fdiv", "div_rn", "clamp"})
DENSE = frozenset({"empty", "empty_like", "zeros", "zeros_like", "ones", "ones_like", "full", "full_like", "new_empty",
                   "new_zeros", "new_ones", "new_full"})
SHAPED_LIKE = frozenset({"empty_like", "zeros_like", "ones_like", "full_like"})  # (x, ...): x's sizes
TORCH_SIZED = frozenset({"torch.empty", "torch.zeros", "torch.ones", "torch.full"})  # (sizes, ...) or (*sizes)
NEW_SIZED = frozenset({"new_empty", "new_zeros", "new_ones", "new_full"})  # t.new_empty(sizes): sizes, t's dtype


def host_code(node: ast.AST) -> str | None:
    """The host code X of a `__host__(X)` marker."""
    if is_call(node, "__host__"):
        return ast.unparse(node.args[0])
    return None


class NotFlat(NotCertain):
    """An address that is not one block of B per program over a flattened tensor."""


def flat_offsets(one: Side, address: cst.BaseExpression) -> tuple[str, str, str]:
    """(pointer, block, the offsets' text) of `P + pid * B + tl.arange(0, B)` (in any order), in host code."""
    terms = add_terms(one.expand(address))
    tensors = {p.code for p in one.site.passed.values()}
    pointers = [t for t in terms if host_code(t) in tensors]
    aranges = [t for t in terms if is_call(t, "__arange")]
    rest = [t for t in terms if t not in pointers and t not in aranges]
    if len(pointers) != 1 or len(aranges) != 1 or len(rest) != 1 or ast.unparse(aranges[0].args[0]) != "0":
        raise NotFlat(f"{one.kernel.name} does not address `P + pid * B + tl.arange(0, B)`")
    block = ast.unparse(aranges[0].args[1])
    stride = rest[0]
    if not (isinstance(stride, ast.BinOp) and isinstance(stride.op, ast.Mult) and sorted(
            ast.unparse(x) for x in (stride.left, stride.right)) == sorted(["__pid(0)", block])):
        raise NotFlat(f"{one.kernel.name} does not address `P + pid * B + tl.arange(0, B)`")
    return host_code(pointers[0]), block, " + ".join(sorted(ast.unparse(t) for t in (stride, aranges[0])))


def flat_store(host: HostFunction, side: Side, store: cst.Call, dims: list[str], h: str) -> tuple[str, str]:
    """(block, offsets) of an element-wise kernel's store `P + pid * B + tl.arange(0, B)` masked by `offsets < n`,
    launched on the grid `dims` (host code), n / B rounded up, with n certain to be h.numel(): its programs write
    every element below n."""
    kernel, site = side.kernel, side.site
    _, block, offsets = flat_offsets(side, kernel.address(store))
    mask = side.expand(arg_of(store, 2, "mask") or cst.Name("None"))
    if not (isinstance(mask, ast.Compare) and len(mask.ops) == 1 and isinstance(mask.ops[0], ast.Lt)
            and " + ".join(sorted(ast.unparse(t) for t in add_terms(mask.left))) == offsets
            and host_code(mask.comparators[0]) is not None):
        raise NotCertain(f"{kernel.name}'s store is not masked by `offsets < n`")
    n = host_code(mask.comparators[0])
    division = ceil_division(pyast.parse(dims[0], mode="eval").body) if len(dims) == 1 else None
    wanted = (n, host_code(pyast.parse(block, mode="eval").body))
    if division is None or [ast.dump(pyast.parse(x, mode="eval")) for x in division] != [
            ast.dump(pyast.parse(x, mode="eval")) for x in wanted]:
        raise NotCertain(f"the grid of the {site.where} is not n / B rounded up for its mask's n and block")
    if not numel_of(host, site, n, h):
        raise NotCertain(f"{n} is not certain to be {h}.numel()")
    return block, offsets


def ceil_division(node: ast.AST) -> tuple[str, str] | None:
    """(n, B) of a host expression that divides n by B rounding up: `triton.cdiv(n, B)`, `(n + B - 1) // B`,
    `-(-n // B)`."""
    if isinstance(node, ast.Call) and ast.unparse(node.func).rpartition(".")[2] == "cdiv" and len(node.args) == 2:
        return ast.unparse(node.args[0]), ast.unparse(node.args[1])
    if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.USub) and isinstance(node.operand, ast.BinOp) \
            and isinstance(node.operand.op, ast.FloorDiv) and isinstance(node.operand.left, ast.UnaryOp) \
            and isinstance(node.operand.left.op, ast.USub):
        return ast.unparse(node.operand.left.operand), ast.unparse(node.operand.right)
    if isinstance(node, ast.BinOp) and isinstance(node.op, ast.FloorDiv):
        divisor, signed = ast.unparse(node.right), _signed(node.left)
        ones = [t for s, t in signed if s < 0 and ast.unparse(t) == "1"]
        copies = [t for s, t in signed if s > 0 and ast.unparse(t) == divisor]
        rest = [t for s, t in signed if t not in ones and t not in copies]
        if len(ones) == 1 and len(copies) == 1 and len(rest) == 1 and all(s > 0 for s, t in signed if t in rest):
            return ast.unparse(rest[0]), divisor
        folded = [t for s, t in signed if s > 0 and isinstance(node.right, ast.Constant) and isinstance(
            t, ast.Constant) and t.value == node.right.value - 1]  # `(n + 1023) // 1024`
        if len(signed) == 2 and len(folded) == 1 and all(s > 0 for s, _ in signed):
            return ast.unparse(next(t for _, t in signed if t is not folded[0])), divisor
    return None


def _signed(node: ast.AST, sign: int = 1) -> list[tuple[int, ast.AST]]:
    if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Add | ast.Sub):
        return _signed(node.left, sign) + _signed(node.right, sign if isinstance(node.op, ast.Add) else -sign)
    return [(sign, node)]


def numel_of(host: HostFunction, a: Site, n: str, h: str) -> bool:
    """Whether host code `n` is certain to be h's number of elements: `h.numel()`, or the number of elements
    of a tensor whose sizes h is allocated with."""
    value = host.reaching(n, a) if n.isidentifier() else None
    text = code(value).strip() if value is not None else n
    if text == f"{h}.numel()":
        return True
    like = sized_like(host.scope, host.reaching(h, a))
    scope = host.scope
    if like is not None and text == f"{like}.numel()" \
            and len(scope.assigns.get(like, [])) + (like in scope.params) == 1:  # the same tensor wherever read
        return True
    sizes = allocated_sizes(host.reaching(h, a))
    product = sorted(ast.unparse(f) for f in factors(pyast.parse(text, mode="eval").body))
    return sizes is not None and sorted(sizes) == product and all(
        len(scope.assigns.get(s, [])) + (s in scope.params) == 1 for s in sizes if s.isidentifier())


def allocated_sizes(allocation: cst.BaseExpression | None) -> list[str] | None:
    """The sizes an allocation is given one by one, as code (`torch.empty((M, N), ...)`, `torch.empty(M, N)`,
    `x.new_empty((M, N))`): names and integers only; None for any other."""
    if not isinstance(allocation, cst.Call):
        return None
    func = dotted(allocation.func) or ""
    method = isinstance(allocation.func, cst.Attribute) and allocation.func.attr.value in NEW_SIZED \
        and func.partition(".")[0] != "torch"
    if not (method or func in TORCH_SIZED) or func.endswith("full"):
        return None
    given = [a.value for a in allocation.args if a.keyword is not None and a.keyword.value == "size"] or [
        a.value for a in allocation.args if a.keyword is None and not a.star]
    if len(given) == 1 and isinstance(given[0], cst.Tuple | cst.List):
        given = [e.value for e in given[0].elements]
    if not given or not all(isinstance(g, cst.Name | cst.Integer) for g in given):
        return None
    return [code(g).strip() for g in given]


def sized_like(scope, allocation: cst.BaseExpression | None) -> str | None:
    """The tensor (a name) whose sizes an allocation takes: `torch.empty_like(x)`, `t.new_empty(x.shape)`,
    `torch.empty(x.size(), ...)`, `torch.zeros((M, N), ...)` where `M, N = x.shape`; None for any other."""
    if not isinstance(allocation, cst.Call):
        return None
    func = dotted(allocation.func) or ""
    positional = [a.value for a in allocation.args if a.keyword is None and not a.star]
    sizes = [a.value for a in allocation.args if a.keyword is not None and a.keyword.value == "size"]
    if func.rpartition(".")[2] in SHAPED_LIKE and func.partition(".")[0] in ("torch", func) and positional:
        return positional[0].value if isinstance(positional[0], cst.Name) else None
    method = isinstance(allocation.func, cst.Attribute) and allocation.func.attr.value in NEW_SIZED \
        and func.partition(".")[0] != "torch"
    if not (method or func in TORCH_SIZED):
        return None
    if sizes or func.endswith("full"):  # `full(size, fill_value)`: the sizes first
        given = sizes or positional[:1]
    else:  # one value is the sizes (a tuple, `x.shape`, or the one size), several the sizes themselves
        given = positional
    return _sizes_tensor(scope, given)


def _sizes_tensor(scope, given: list[cst.BaseExpression]) -> str | None:
    """The tensor that sizes written as `x.shape`, `x.size()`, or the names `M, N = x.shape` binds, are all
    the sizes of."""
    if len(given) == 1:
        node = given[0]
        if isinstance(node, cst.Attribute) and node.attr.value == "shape" and isinstance(node.value, cst.Name):
            return node.value.value
        if isinstance(node, cst.Call) and not node.args and isinstance(node.func, cst.Attribute) \
                and node.func.attr.value == "size" and isinstance(node.func.value, cst.Name):
            return node.func.value.value
        if isinstance(node, cst.Tuple | cst.List):
            given = [e.value for e in node.elements if not isinstance(e, cst.StarredElement)] \
                if not any(isinstance(e, cst.StarredElement) for e in node.elements) else []
    names = tuple(g.value if isinstance(g, cst.Name) else None for g in given)
    if not names or None in names or any(len(scope.assigns.get(n, [])) != 1 or n in scope.params for n in names):
        return None
    return next((t for t, sizes in unpacked(scope).items() if sizes == names), None)


class Names(ast.NodeTransformer):
    """Names replaced by expressions (given as code); `tl.` written as the reader's name for triton.language."""

    def __init__(self, names: dict[str, str], tl: str) -> None:
        self.names, self.tl = names, tl

    def visit_Name(self, node: ast.Name) -> ast.AST:
        if node.id in self.names:
            return pyast.parse(self.names[node.id], mode="eval").body
        return ast.Name(self.tl) if node.id == "tl" else node


class Inline(ast.NodeTransformer):
    """The stored value of an element-wise kernel, in canonical form (locals by their values, helpers inlined),
    with each load replaced by a placeholder; refuses anything but element-wise arithmetic on loads, scalar
    parameters and constants."""

    def __init__(self, one: Side) -> None:
        self.one, self.loads, self.params = one, [], set()  # loads: the pointer each placeholder reads
        self.addresses: list[ast.expr] = []  # and the address it reads, canonical
        self.pointers = one.site.touches.pointers

    def visit_Call(self, node: ast.Call) -> ast.AST:
        kernel, func = self.one.kernel, ast.unparse(node.func)
        base, _, name = func.rpartition(".")
        if base == "tl" and name == "load":
            pointers = [t.id for t in add_terms(node.args[0]) if isinstance(t, ast.Name) and t.id in self.pointers] \
                if node.args else []
            if len(pointers) != 1:
                raise NotCertain(f"{kernel.name} loads through a pointer not named in the load")
            self.loads.append(pointers[0])
            self.addresses.append(node.args[0])
            return ast.Name(f"__load_{len(self.loads) - 1}")
        if is_call(node, "__var"):
            raise NotCertain(f"{kernel.name} stores a value that a loop or a branch sets")
        marker = func if func.startswith("__") else None
        if marker is not None or not (base == "tl" and name in ELEMENTWISE or name == "to" and base != "tl"):
            shown = {"__pid": "tl.program_id", "__nprog": "tl.num_programs", "__arange": "tl.arange"}.get(
                func, func)
            raise NotCertain(f"{kernel.name} calls {shown}, not known to be element-wise")
        return self.generic_visit(node)

    def visit_Name(self, node: ast.Name) -> ast.AST:
        kernel = self.one.kernel
        if kernel.param(node.id) is not None:
            if node.id in self.pointers:
                raise NotCertain(f"{kernel.name} stores a value computed from the pointer {node.id}")
            self.params.add(node.id)
        return node

    def generic_visit(self, node: ast.AST) -> ast.AST:
        if isinstance(node, ast.Subscript | ast.Lambda | ast.IfExp | ast.BoolOp | ast.NamedExpr | ast.Starred):
            raise NotCertain(f"{self.one.kernel.name} computes its stored value with {type(node).__name__}")
        return super().generic_visit(node)


def reader_address(two: Side, load: cst.Call, h2: set[str], pointer: str) -> str:
    """The text of the reader's load address with the intermediate's pointer replaced by `pointer`: directly a
    term of the address, or of a local assigned once at the top level that is a term of it."""
    address = two.kernel.address(load)
    terms = add_terms(pyast.parse(code(address).strip(), mode="eval").body)
    out = []
    for term in terms:
        names = {n.id for n in ast.walk(term) if isinstance(n, ast.Name)}
        if isinstance(term, ast.Name) and term.id in h2:
            out.append(pointer)
        elif isinstance(term, ast.Name) and term.id in two.top and len(two.kernel.scope.assigns[term.id]) == 1 \
                and two.kernel.bases(cst.Name(term.id)) & h2:
            value = pyast.parse(code(two.top[term.id]).strip(), mode="eval").body
            inner = add_terms(value)
            reads = [n.id for n in ast.walk(value) if isinstance(n, ast.Name)]
            if [ast.unparse(t) for t in inner].count(next(iter(h2 & set(reads)), "")) != 1 or any(
                    r in two.locals and (r not in two.top or len(two.kernel.scope.assigns[r]) != 1) for r in reads):
                raise NotCertain(f"{two.kernel.name} reads the intermediate through {term.id}, a pointer whose "
                                 "value is not one plain sum here")
            out.append("(" + " + ".join(pointer if ast.unparse(t) in h2 else ast.unparse(t) for t in inner) + ")")
        elif names & h2 or two.kernel.bases(cst.parse_expression(ast.unparse(term))) & h2:
            raise NotCertain(f"{two.kernel.name} reads the intermediate at an address whose pointer is not one "
                             "plain sum here")
        else:
            out.append(ast.unparse(term))
    return " + ".join(out)


def _covering(host: HostFunction, two: Side, loads: list[cst.Call], h: str) -> tuple[cst.Call, str]:
    """A load of h that reads `h + pid * S + c` for every c < N, one program per row, and the host condition
    under which the programs' loads together are every element of h, each once."""
    dims, _ = host.grid(two.site)
    if dims is None or len(dims) != 1:
        raise NotCertain(f"the grid of the {two.site.where} is not one dimension of rows")
    facts = facts_of(two.kernel)
    for load in loads:
        condition = _covers(two, facts, load, h, dims[0])
        if condition is not None:
            return load, condition
    raise NotCertain(f"no load of {h} in {two.kernel.name} covers a whole row of it in every program")


def _covers(two: Side, facts: KernelFacts, load: cst.Call, h: str, rows: str) -> str | None:
    """The host condition under which this load's programs read every element of h, once each; None where it is
    not `h + pid * S + c` for every c < N."""
    access = facts.accesses.of(load)
    mask = arg_of(load, 1, "mask")
    if access is None or mask is None or access.form != "pointer":
        return None
    terms = add_terms(two.expand(two.kernel.address(load)))
    pointer = [t for t in terms if host_code(t) == h]
    programs = [t for t in terms if "__pid" in ast.unparse(t)]
    lanes = [t for t in terms if t not in pointer and t not in programs]
    if len(pointer) != 1 or len(programs) != 1:
        return None
    found = [f for f in factors(programs[0]) if not is_call(f, "__pid")]
    if [ast.unparse(f) for f in factors(programs[0]) if is_call(f, "__pid")] != ["__pid(0)"] or len(found) != 1 \
            or host_code(found[0]) is None:
        return None
    stride = host_code(found[0])
    test = two.expand(mask)
    if not (isinstance(test, ast.Compare) and len(test.ops) == 1 and isinstance(test.ops[0], ast.Lt)
            and host_code(test.comparators[0]) is not None
            and sorted(ast.dump(t) for t in add_terms(test.left)) == sorted(ast.dump(t) for t in lanes)):
        return None
    extent = host_code(test.comparators[0])
    aranges = [t for t in lanes if is_call(t, "__arange")]
    if len(aranges) != 1 or ast.unparse(aranges[0].args[0]) != "0" or host_code(aranges[0].args[1]) is None:
        return None
    block = host_code(aranges[0].args[1])
    rest = [t for t in lanes if t is not aranges[0]]
    if stride is None or subnodes(two.kernel.node.body, cst.Return):
        return None
    condition = f"({stride}) == ({extent}) and ({rows}) * ({extent}) == {h}.numel()"
    if not rest and access.loop is None and _top_level(two, load):
        return condition + f" and ({block}) >= ({extent})"
    loop = access.loop
    if len(rest) != 1 or loop is None or loop.parent is not None or loop.exits or not _top_level(two, loop.node) \
            or not _top_level(two, load, loop.node.body):
        return None
    index = rest[0]
    start, step, end = (None if x is None else two.host_form(x) for x in (loop.start, loop.step, loop.end))
    marker = {"range": "__loop", "while": "__var"}.get(loop.form)
    if loop.form == "cdiv":
        parts = factors(index)
        if len(parts) != 2 or not any(is_call(p, "__loop") and marker_arg(p) == loop.var for p in parts) \
                or not any(host_code(p) == block for p in parts) or host_code(end) != extent:
            return None
        return condition
    if marker is None or not (is_call(index, marker) and marker_arg(index) == loop.var):
        return None
    if not (same(start, ast.Constant(0)) and host_code(step) == block and host_code(end) == extent):
        return None
    return condition


def _top_level(two: Side, node: cst.CSTNode, body: cst.BaseSuite | None = None) -> bool:
    """Whether a node runs each time the block runs (the kernel's body by default): inside no `if` or loop of it
    but its own."""
    body = body or two.kernel.node.body
    parent = two.ms.parents.get(id(node))
    while parent is not None and parent is not body:
        if isinstance(parent, cst.If | cst.For | cst.While | cst.With) and parent is not node:
            return False
        parent = two.ms.parents.get(id(parent))
    return parent is body


def inline(ms: ModuleSource, host: HostFunction, a: Site, b: Site, moved: Moved, h: str,
           used: set[str]) -> Variant:
    """The first kernel, element-wise over its tensors flattened (`h[k] = f(x[k], y[k])` for every k < n), is
    no longer launched: the second loads x and y where it loaded h and computes f."""
    k1, k2 = a.kernel, b.kernel
    one = Side(a, {p.name: code(moved.arg(p.name)).strip() for p in k1.params if moved.arg(p.name) is not None})
    two = Side(b)
    if k1.autotune is not None or k1.heuristics:
        raise NotCertain(f"{k1.name} is autotuned or has heuristics: its block size is not the launch's")
    if any(not isinstance(s, cst.SimpleStatementLine) for s in k1.node.body.body) or a.writes != {h} \
            or len(k1.stores) != 1:
        raise NotCertain(f"{k1.name} is not one straight-line block that stores only {h}")
    allocation = host.reaching(h, a)
    if not (host.fresh(h) and isinstance(allocation, cst.Call)
            and (dotted(allocation.func) or "").rpartition(".")[2] in DENSE):
        raise NotCertain(f"{h} is not certain to be dense")
    [store] = k1.stores
    block, offsets = flat_store(host, one, store, [code(d).strip() for d in moved.dims()], h)
    for load in k1.loads:
        _, b_, o = flat_offsets(one, k1.address(load))
        if (b_, o) != (block, offsets) or one.canonical(arg_of(load, 1, "mask")) != one.canonical(
                arg_of(store, 2, "mask")):
            raise NotCertain(f"{k1.name} loads at other offsets or under another mask than it stores")
    walker = Inline(one)
    value = walker.visit(one.values.expand(arg_of(store, 1, "value")))
    if not walker.loads:
        raise NotCertain(f"{k1.name} stores a value computed from no load: its shape is not certain")
    h2 = b.params_of(h)
    reads = [c for c in k2.loads if k2.bases(k2.address(c)) & h2]
    uses = host.uses(h, [a, b])
    covering, guard = _covering(host, two, reads, h) if uses else (None, None)
    name = fresh_name(f"{k2.name}_{k1.name}_inlined", used)
    extra: dict[str, str] = {}  # new parameter of the reader -> host code
    params: dict[str, str] = {}  # the first kernel's parameter -> the reader's new one
    for param in sorted(walker.params) + sorted(set(walker.loads)):
        given = one.arg_code(param)
        if given is None:
            raise NotCertain(f"the {a.where} does not pass {param}")
        params[param] = fresh_name(param, used)
        extra[params[param]] = given
    k1_params = {p.name.value: p for p in all_params(k1)}
    globals_used = {n.id for n in ast.walk(value) if isinstance(n, ast.Name)} - set(params) - {
        f"__load_{i}" for i in range(len(walker.loads))} - {"tl"}
    if globals_used & (two.locals | {p.name for p in k2.params}):
        raise NotCertain(f"{k2.name} has a local named like a global {k1.name} reads")
    hp = sorted(h2)[0]
    calls, before = {}, {}
    for load in reads:
        mask2, other = arg_of(load, 1, "mask"), arg_of(load, 2, "other")
        loads = {}
        for i, base in enumerate(walker.loads):
            address = reader_address(two, load, h2, params[base])
            loads[f"__load_{i}"] = f"{k1.tl_name}.load({address}" + (
                f", mask={code(mask2)})" if mask2 is not None else ")")
        text = ast.unparse(Names({**params, **loads}, k2.tl_name).visit(copy.deepcopy(value)))
        if load is covering:
            kept = fresh_name(f"{h}_value", used)
            line = line_of(ms, load)
            before[id(line)] = [f"{kept} = {text}\n",
                                f"{k2.tl_name}.store({code(k2.address(load))}, {kept}, mask={code(mask2)})\n"]
            text = kept
        cast = f"({text}).to({hp}.dtype.element_ty)"
        calls[id(load)] = cast if other is None else \
            f"{k2.tl_name}.where({code(mask2)}, {cast}, {code(other)}).to({hp}.dtype.element_ty)"
    body = k2.node.body.visit(Rename({}, calls, before))
    params2 = [param_of(p) for p in all_params(k2)]
    new_params = [param_of(k1_params[p], new) for p, new in params.items()]  # a constexpr stays one
    every = [p for p in params2 + new_params if p.default is None] + [p for p in params2 + new_params if p.default]
    kernel = k2.node.with_changes(name=cst.Name(name), params=cst.Parameters(params=every), body=body,
                                  leading_lines=[cst.EmptyLine(), cst.EmptyLine()])
    args = [keyword_arg(p.name, value) for p in k2.params if (value := b.launch.value(p.name)) is not None]
    args += [keyword_arg(k, v) for k, v in options_of(b).items()]
    args += [keyword_arg(key, cst.parse_expression(given)) for key, given in extra.items()]
    call = b.launch.call.with_changes(func=b.launch.subscript.with_changes(value=cst.Name(name)), args=args)
    last = max((k1.node, k2.node), key=lambda node: ms.module.body.index(node))
    edits = (*moved.edits(call, guard), (last, lambda node, kernel=kernel: cst.FlattenSentinel([node, kernel])))
    fate = f"{h} stored where it is computed, where {guard}" if uses else f"{h} no longer stored"
    return Variant("launch_fusion", f"{k1.name} (element-wise over {h} flattened) computed where {k2.name} reads "
                   f"{h}, in {name}: one launch, {fate}", frozenset({k1.name, k2.name, name, a.launch.scope.top}),
                   edits)


def line_of(ms: ModuleSource, node: cst.CSTNode) -> cst.SimpleStatementLine:
    while not isinstance(node, cst.SimpleStatementLine):
        node = ms.parents[id(node)]
    return node
