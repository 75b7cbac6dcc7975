"""launch_fusion's epilogue form: a second kernel element-wise over its tensors flattened (`out[k] = f(h[k], y[k])`
for every k < n, one program per block of B elements) is not launched any more; the first kernel, which stores h,
computes f where it stores h, at the same elements. Its grid may be anything (the tiles of a GEMM, say): each
element of h it stores is one whose f it now computes.

    mm_kernel[grid](a, b, c, M, N, K, ...)                mm_kernel_gelu_kernel_epilogue[grid](
    gelu_kernel[(triton.cdiv(n, 1024),)](c, out, n, ...)      ..., c_ptr=c, ..., out_ptr_1=out)

    in the fused kernel:  c_value = acc                          (was: tl.store(c_ptr + offs, acc, mask=m))
                          tl.store(c_ptr + offs, c_value, mask=m)   (kept only where the host uses c again)
                          tl.store(out_ptr_1 + offs, gelu(c_value.to(c_ptr.dtype.element_ty)), mask=m)

Certain where: the second kernel is one straight-line block whose only store is `out + pid * B + tl.arange(0, B)`
masked by `offsets < n`, launched on a ceil division of n by B, so it writes every element below n; every load it
makes is at the same offsets under the same mask; its stored value is built from those loads, its scalar
parameters and constants by element-wise arithmetic (launch_inline.py's rules); h is a tensor the function
allocates empty (no value of its own an element the first kernel leaves would show) and n is `h.numel()`. The
first kernel stores h once, in a statement of its body's top level, and does not read it; each element it stores
lies at the same offset from h as the second kernel reads it, and the fused kernel reads y and writes out at that
offset too (the store's address with h's pointer swapped), under the store's mask. The stored value is cast to h's
element type first, as tl.store casts it, so f sees the value the load would have read.
"""

from __future__ import annotations

import ast
import copy

import libcst as cst

from kernelband.proposers.rewriter.analysis.buffers import HostFunction, Site
from kernelband.proposers.rewriter.analysis.source import ModuleSource
from kernelband.proposers.rewriter.analysis.syntax import arg_of, code, dotted, fresh_name, subnodes
from kernelband.proposers.rewriter.analysis.values import add_terms
from kernelband.proposers.rewriter.edits import Variant, keyword_arg
from kernelband.proposers.rewriter.rewrites.launch_inline import (
    Inline,
    Names,
    NotFlat,
    flat_offsets,
    flat_store,
    line_of,
    reader_address,
)
from kernelband.proposers.rewriter.rewrites.launch_reading import (
    NotCertain,
    Side,
    all_params,
    launch_args,
    options_of,
    param_of,
    top_level_store,
)
from kernelband.proposers.rewriter.rewrites.launch_sites import Moved


class NotElementwise(NotCertain):
    """The second kernel is not element-wise over a flattened tensor at all: the form does not apply."""


# Allocations that give no value of their own: an element the first kernel leaves is garbage in both programs.
EMPTY = frozenset({"empty", "empty_like", "new_empty"})


def _consumer(host: HostFunction, b: Site, h: str) -> tuple[Side, ast.expr, Inline, list[ast.expr | None]]:
    """The second kernel read as `out[k] = f(h[k], y[g(k)], ...)` for every k < h.numel(): its side, f (loads as
    placeholders), the walker that read it and, per load, g (None: k itself)."""
    k2 = b.kernel
    two = Side(b)
    if k2.autotune is not None or k2.heuristics:
        raise NotCertain(f"{k2.name} is autotuned or has heuristics: its block size is not the launch's")
    if any(not isinstance(s, cst.SimpleStatementLine) for s in k2.node.body.body) or len(k2.stores) != 1 \
            or k2.atomics:
        raise NotElementwise(f"{k2.name} is not one straight-line block with one store")
    [store] = k2.stores
    dims, unknown = host.grid(b)
    try:
        if dims is None:
            flat_offsets(two, k2.address(store))
            raise NotCertain(unknown)
        flat_store(host, two, store, dims, h)
    except NotFlat as why:  # its store is no flat block: the form does not apply at all
        raise NotElementwise(str(why)) from None
    for load in k2.loads:
        if two.canonical(arg_of(load, 1, "mask")) != two.canonical(arg_of(store, 2, "mask")):
            raise NotCertain(f"{k2.name} loads under another mask than it stores")
    walker = Inline(two)
    value = walker.visit(two.values.expand(arg_of(store, 1, "value")))
    own = [t for t in add_terms(two.values.expand(k2.address(store))) if not _pointer(two, t)]
    gathers = [_gathered(two, address, own) for address in walker.addresses]
    return two, value, walker, gathers


def _pointer(two: Side, term: ast.expr) -> bool:
    return isinstance(term, ast.Name) and term.id in two.site.touches.pointers


class _Offsets(ast.NodeTransformer):
    """The offsets (a sum whose terms are the store's: `pid * B + tl.arange(0, B)`) replaced by `__offs`."""

    def __init__(self, terms: list[ast.expr]) -> None:
        self.terms = sorted(ast.dump(t) for t in terms)

    def visit_BinOp(self, node: ast.BinOp) -> ast.AST:
        if isinstance(node.op, ast.Add) and sorted(ast.dump(t) for t in add_terms(node)) == self.terms:
            return ast.Name("__offs")
        return self.generic_visit(node)


def _gathered(two: Side, address: ast.expr, own: list[ast.expr]) -> ast.expr | None:
    """None where a load reads at the store's offsets; else what it reads at as a function of them (`__offs %
    N`, a bias broadcast along rows), which only the offsets, scalar parameters and constants make."""
    rest = [t for t in add_terms(address) if not _pointer(two, t)]
    if sorted(ast.dump(t) for t in rest) == sorted(ast.dump(t) for t in own):
        return None
    where = _Offsets(own).visit(copy.deepcopy(rest[0] if len(rest) == 1 else address))
    names = {n.id for n in ast.walk(where) if isinstance(n, ast.Name)}
    markers = {ast.unparse(c.func) for c in ast.walk(where) if isinstance(c, ast.Call)}
    scalars = {p.name for p in two.kernel.params if not p.constexpr} - two.site.touches.pointers
    if len(rest) != 1 or "__offs" not in names or markers - {"tl.where", "tl.minimum", "tl.maximum"} \
            or names - scalars - {"__offs", "tl"}:
        raise NotCertain(f"{two.kernel.name} loads at offsets other than a function of its store's")
    return where


def _producer_store(ms: ModuleSource, a: Site, h: str) -> cst.Call:
    """The first kernel's one store of h, a statement of its body's top level."""
    k1 = a.kernel
    if k1.atomics or subnodes(k1.node.body, cst.Return):
        raise NotCertain(f"{k1.name} uses atomics or returns early")
    return top_level_store(ms, a, h)


def epilogue(ms: ModuleSource, host: HostFunction, a: Site, b: Site, moved: Moved, h: str,
             used: set[str]) -> Variant:
    """The second kernel, element-wise over its tensors flattened, computed where the first stores h (module
    doc); NotCertain with the missing fact otherwise."""
    k1, k2 = a.kernel, b.kernel
    two, value, walker, gathers = _consumer(host, b, h)
    allocation = host.reaching(h, a)
    if not (host.fresh(h) and isinstance(allocation, cst.Call)
            and (dotted(allocation.func) or "").rpartition(".")[2] in EMPTY):
        raise NotCertain(f"{h} is not allocated empty here: where {k1.name} leaves an element, {k2.name} would "
                         "compute from the value it holds")
    if any(g is not None and base in b.params_of(h) for g, base in zip(gathers, walker.loads, strict=True)):
        raise NotCertain(f"{k2.name} reads {h} at other elements than it writes out")
    store = _producer_store(ms, a, h)
    one = Side(a, {p.name: code(moved.arg(p.name)).strip() for p in k1.params if moved.arg(p.name) is not None})
    h1, h2 = a.params_of(h), b.params_of(h)
    out = [p for p in k2.params if k2.bases(k2.address(k2.stores[0])) & {p.name}]
    if len(out) != 1:
        raise NotCertain(f"{k2.name} stores through a pointer not named in the store")
    params: dict[str, str] = {}  # the second kernel's parameter -> the fused kernel's new one
    extra: dict[str, cst.BaseExpression] = {}  # new parameter -> what the second launch passes
    indices = {n.id for g in gathers if g is not None for n in ast.walk(g) if isinstance(n, ast.Name)} - {"__offs"}
    for param in sorted(walker.params | indices) + sorted(set(walker.loads) - h2) + [out[0].name]:
        given = b.launch.value(param)
        if given is None:
            raise NotCertain(f"the {b.where} does not pass {param}")
        params[param] = fresh_name(param, used)
        extra[params[param]] = given
    globals_used = {n.id for n in ast.walk(value) if isinstance(n, ast.Name)} - set(params) - {
        f"__load_{i}" for i in range(len(walker.loads))} - {"tl"}
    if globals_used & (one.locals | {p.name for p in k1.params}):
        raise NotCertain(f"{k1.name} has a local named like a global {k2.name} reads")
    hp = sorted(h1)[0]
    kept = fresh_name(f"{h}_value", used)
    mask = arg_of(store, 2, "mask")
    masked = f", mask={code(mask)}" if mask is not None else ""
    loads = {}
    offsets = f"({reader_address(one, store, h1, '0')})"  # the elements of h the store writes
    for i, (base, gather) in enumerate(zip(walker.loads, gathers, strict=True)):
        if base in h2:
            loads[f"__load_{i}"] = f"{kept}.to({hp}.dtype.element_ty)"
        elif gather is None:
            loads[f"__load_{i}"] = f"{k1.tl_name}.load({reader_address(one, store, h1, params[base])}{masked})"
        else:
            at = ast.unparse(Names({**params, "__offs": offsets}, k1.tl_name).visit(copy.deepcopy(gather)))
            loads[f"__load_{i}"] = f"{k1.tl_name}.load({params[base]} + {at}{masked})"
    text = ast.unparse(Names({**params, **loads}, k1.tl_name).visit(copy.deepcopy(value)))
    line = line_of(ms, store)
    uses = host.uses(h, [a, b])
    statements = [cst.parse_statement(f"{kept} = {code(arg_of(store, 1, 'value'))}\n").with_changes(
        leading_lines=line.leading_lines)]
    if uses:
        statements.append(cst.parse_statement(
            f"{k1.tl_name}.store({code(k1.address(store))}, {kept}{masked})\n"))
    statements.append(cst.parse_statement(
        f"{k1.tl_name}.store({reader_address(one, store, h1, params[out[0].name])}, {text}{masked})\n"))
    body = [s for statement in k1.node.body.body for s in (statements if statement is line else [statement])]
    name = fresh_name(f"{k1.name}_{k2.name}_epilogue", used)
    k2_params = {p.name.value: p for p in all_params(k2)}
    every = [param_of(p) for p in all_params(k1)]
    new = [param_of(k2_params[p], fresh) for p, fresh in params.items()]
    every = [p for p in every + new if p.default is None] + [p for p in every + new if p.default]
    kernel = k1.node.with_changes(name=cst.Name(name), params=cst.Parameters(params=every),
                                  body=k1.node.body.with_changes(body=body),
                                  leading_lines=[cst.EmptyLine(), cst.EmptyLine()])
    args = launch_args(a, {}, {p.name: moved.arg(p.name) for p in k1.params if moved.arg(p.name) is not None})
    args += [keyword_arg(k, v) for k, v in options_of(a).items()]
    args += [keyword_arg(k, v) for k, v in extra.items()]
    first = moved.call()
    call = first.with_changes(func=first.func.with_changes(value=cst.Name(name)), args=args)
    last = max((k1.node, k2.node), key=lambda node: ms.module.body.index(node))
    edits = (*moved.edits(call), (last, lambda node, kernel=kernel: cst.FlattenSentinel([node, kernel])))
    fate = f"{h} still stored" if uses else f"{h} no longer stored"
    return Variant("launch_fusion", f"{k2.name} (element-wise over {h} flattened) computed where {k1.name} stores "
                   f"{h}, in {name}: one launch, {fate}", frozenset({k1.name, k2.name, name, a.launch.scope.top}),
                   edits)
