"""launch_fusion: two launches that run one after the other in a host function (analysis/buffers.py: on one
path, no other launch between them) as one launch. What the pair does with memory decides the form:

- the second kernel reads a buffer the first one writes, on the same grid, at the very addresses and under the
  very mask the same program wrote it: one kernel whose body is the first kernel's body followed by the
  second's, the value kept in registers (below);
- ... on another grid, the first kernel element-wise over its tensors flattened: it is computed where the
  second reads its output (launch_inline.py); or the second one so: it is computed where the first stores its
  input (launch_epilogue.py);
- ... the second kernel one program combining what the first one's programs wrote (a two-stage reduction): the
  last program of the first kernel to finish combines (launch_reduction.py);
- neither kernel touches what the other writes: one launch whose programs run one body or the other by program
  id (launch_horizontal.py);
- the programs cannot run side by side (a program of the second kernel may read what other programs of the
  first wrote, or the second writes what the first reads or writes: a second stage summing partials over
  several programs, a second pass adding to the first one's output): the last program of the first kernel to
  finish runs the second kernel's programs in turn, where they are few (launch_reduction.py). The variant comes
  with the reason the programs cannot run side by side.

Anything else is refused with the fact that is missing: a name that may be the same memory as another, a host
statement between the launches that may read or change what they touch, a kernel returning early, autotuned, or
whose programs may wait on each other.

The same-grid form:

    add_kernel[(rows,)](x, y, h, cols, BLOCK=B)          add_kernel_rmsnorm_kernel_fused[(rows,)](
    rmsnorm_kernel[(rows,)](out, h, w, cols, eps, BLOCK=B)     x_ptr=x, y_ptr=y, h_ptr=h, ..., out_ptr=out, ...)

    in the fused kernel:  h_value = x + y                       (was: tl.store(h_ptr + offs, x + y, mask=mask))
                          hv = tl.where(mask, h_value.to(h_ptr_1.dtype.element_ty), 0.0).to(...)
                                                               (was: hv = tl.load(h_ptr_1 + offs, mask=mask, other=0.0))

Program p of the fused kernel runs program p of the first kernel, then program p of the second. That is the
same computation when program p of the second reads, of what the first kernel writes, only what program p of
the first wrote: both launches have the same grid; the first kernel stores the intermediate once, in a
statement of its body's top level, and does not read it; every load of it in the second kernel has the same
address and mask as that store, in the launches' terms (analysis/values.py: each local by the value that
reaches it, each parameter by what the launch passes); both access one 1-D block `... + tl.arange(0, B)`:
within a program no two lanes share an address. Across programs the first kernel is taken to write each element
once, as a kernel without a data race does. Neither kernel is autotuned or uses atomics, and the first returns
nowhere early.

The stored value is cast to the intermediate's element type, as tl.store casts it, so the registers hold the
value the load would have read. The intermediate stays allocated; its store is dropped where the function
uses it nowhere but in the two launches (not returned, read, passed on or kept in an object), and kept
otherwise. The fused launch passes every argument by keyword and takes the second launch's num_warps, num_stages
and num_ctas, then those of the first that the second does not set: they do not change what a kernel computes.
"""

from __future__ import annotations

import ast
from typing import NamedTuple

import libcst as cst

from kernelband.proposers.rewriter.analysis.buffers import HostFunction, Site, host_functions
from kernelband.proposers.rewriter.analysis.facts import facts_of
from kernelband.proposers.rewriter.analysis.host_flow import Order
from kernelband.proposers.rewriter.analysis.source import ModuleSource
from kernelband.proposers.rewriter.analysis.syntax import arg_of, code, fresh_name, subnodes
from kernelband.proposers.rewriter.analysis.values import is_call
from kernelband.proposers.rewriter.edits import Found, Variant, keyword_arg
from kernelband.proposers.rewriter.rewrites.launch_epilogue import NotElementwise, epilogue
from kernelband.proposers.rewriter.rewrites.launch_horizontal import horizontal
from kernelband.proposers.rewriter.rewrites.launch_inline import inline
from kernelband.proposers.rewriter.rewrites.launch_reading import (
    NotCertain,
    Rename,
    Side,
    check_arguments,
    check_options,
    globals_clash,
    joined_params,
    launch_args,
    one_program,
    options_of,
    renames_of,
    same_grid,
    top_level_store,
    used_names,
)
from kernelband.proposers.rewriter.rewrites.launch_reduction import reduction
from kernelband.proposers.rewriter.rewrites.launch_sites import Moved

USE = {"returned": "returns it", "handed on": "hands it on", "read": "reads it again"}


def _one_block(side: Side, call: cst.Call) -> bool:
    """Whether the access is `... + tl.arange(0, B)` with no other arange and no reshaping (`[:, None]`), under
    a mask over that arange: its lanes hold distinct addresses, and the access, its mask and so the value kept
    for it (`tl.where(mask, value, ...)`) are all one block of B."""
    tree = side.expand(side.kernel.address(call))
    mask = side.expand(arg_of(call, 2, "mask") or cst.Name("None"))
    aranges = [[n for n in ast.walk(t) if is_call(n, "__arange")] for t in (tree, mask)]
    # a host value (`__host__(x.shape[1])`) is one scalar however it is indexed: only the kernel's own
    # subscripts reshape
    host = {id(n) for t in (tree, mask) for c in ast.walk(t) if is_call(c, "__host__") for n in ast.walk(c)}
    if [len(a) for a in aranges] != [1, 1] or ast.dump(aranges[0][0]) != ast.dump(aranges[1][0]) or any(
            isinstance(n, ast.Subscript) and id(n) not in host for t in (tree, mask) for n in ast.walk(t)):
        return False
    terms, pending = [], [tree]
    while pending:
        node = pending.pop()
        if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Add):
            pending += [node.left, node.right]
        else:
            terms.append(node)
    return any(t is aranges[0][0] for t in terms)


def _scalar(kernel, call: cst.Call) -> bool:
    """Whether the store writes one value a program: an address and a value with no lanes (`tl.store(mean_ptr +
    row, total)`), so that the same address read by the same program is that value."""
    facts = facts_of(kernel)
    address, value = (facts.values.expand(node) for node in (kernel.address(call), arg_of(call, 1, "value")))
    return facts.shapes.of(address) == () and facts.shapes.of(value) == ()


def _check_site(site: Site) -> None:
    if site.statement is None:
        raise NotCertain(f"the host keeps what the {site.where} returns (the compiled kernel), or the launch is "
                         "part of a larger expression")
    if site.launch.unmapped is not None:
        raise NotCertain(f"{site.launch.unmapped} ({site.where})")
    if site.touches.unknown:
        raise NotCertain(f"{site.kernel.name} has an access whose pointer reaches no parameter here "
                         f"(`{site.touches.unknown[0]}`): which tensor it touches is not known")
    for passed in site.passed.values():
        if passed.root is None:
            raise NotCertain(f"the {site.where} passes `{passed.code}` for {passed.param}: which tensor it is, is "
                             "not known")


def _fuse(ms: ModuleSource, host: HostFunction, a: Site, b: Site, order: Order) -> Variant | Fallback:
    for site in (a, b):
        _check_site(site)
    k1, k2 = a.kernel, b.kernel
    used = used_names(ms, k1, k2)
    moved = Moved(host, a, b, order, used)
    check_arguments(host, a, b)
    check_options(a, b)
    flows = sorted((w, r) for w in a.writes for r in b.reads if host.may_alias(w, r, (a, b)))
    clash = _clash(host, a, b)
    if not flows and clash is None:
        return horizontal(ms, host, a, b, moved, used)
    if one_program(host, b):
        return reduction(ms, host, a, b, moved, used)
    try:
        if clash is not None:
            raise NotCertain(clash)
        return _interleaved(ms, host, a, b, moved, flows, used)
    except NotCertain as why:
        try:
            return Fallback(reduction(ms, host, a, b, moved, used), str(why))
        except NotCertain as last:
            raise NotCertain(f"{why}; nor can the last program of {k1.name} to finish run {k2.name}'s programs "
                             f"in turn: {last}") from None


class Fallback(NamedTuple):
    """The last-program form, made where the kernels' programs cannot run side by side, and why they cannot."""

    variant: Variant
    why: str


def _clash(host: HostFunction, a: Site, b: Site) -> str | None:
    """Why the two kernels' programs may not run interleaved: the second writes what the first touches."""
    k1, k2 = a.kernel, b.kernel
    for w in sorted(b.writes):
        for t in sorted(a.reads | a.writes):
            if host.may_alias(w, t, (b, a)):
                verb = "writes" if t in a.writes else "reads"
                same = f"{w}, which {k1.name} also {verb}" if w == t else \
                    f"{w}, which may be the memory {k1.name} {verb} as {t}"
                return f"{k2.name} writes {same}: in one launch the order of their accesses to it is not certain"
    return None


def _interleaved(ms: ModuleSource, host: HostFunction, a: Site, b: Site, moved: Moved,
                 flows: list[tuple[str, str]], used: set[str]) -> Variant:
    """The forms whose programs run both kernels' work side by side: on one grid, or the first inlined."""
    k1, k2 = a.kernel, b.kernel
    for w, r in flows:
        if w != r:
            raise NotCertain(f"{k2.name} reads {r}, which may be the memory {k1.name} writes as {w}")
    shared = sorted({w for w, _ in flows})
    try:
        grid = same_grid(host, a, b, moved.dims())
    except NotCertain:  # the first grid is not known (a meta grid of an autotuned kernel): not the second's
        grid = False
    if len(shared) > 1:
        raise NotCertain(f"{k2.name} reads {', '.join(shared)}, which {k1.name} writes" + (
            "" if grid else f", on another grid: its programs may read what other programs of {k1.name} write"))
    [h] = shared
    if grid:
        return _same_grid(ms, host, a, b, moved, h, used)
    try:
        return inline(ms, host, a, b, moved, h, used)
    except NotCertain as why:
        try:
            return epilogue(ms, host, a, b, moved, h, used)
        except NotElementwise:  # the second kernel is no element-wise one: the first form's reason is the one
            raise NotCertain(f"{k2.name} reads {h} on another grid than {k1.name} writes it (a program may read "
                             f"what other programs wrote), and {why}") from None
        except NotCertain as after:
            raise NotCertain(f"{k2.name} reads {h} on another grid than {k1.name} writes it (a program may read "
                             f"what other programs wrote), and {why}; nor can {k1.name} compute {k2.name} where it "
                             f"stores {h}: {after}") from None


def _same_grid(ms: ModuleSource, host: HostFunction, a: Site, b: Site, moved: Moved, h: str,
               used: set[str]) -> Variant:
    k1, k2 = a.kernel, b.kernel
    one = Side(a, {p.name: code(moved.arg(p.name)).strip() for p in k1.params if moved.arg(p.name) is not None})
    two = Side(b)
    for kernel in (k1, k2):
        if kernel.autotune is not None or kernel.heuristics:
            raise NotCertain(f"{kernel.name} is autotuned or has heuristics: the fused kernel would have one "
                             "config for both")
        if kernel.atomics:
            raise NotCertain(f"{kernel.name} uses atomics")
    if code(k1.jit) != code(k2.jit) or isinstance(k1.jit.decorator, cst.Call):
        raise NotCertain(f"{k1.name} and {k2.name} are not both plain @triton.jit")
    if subnodes(k1.node.body, cst.Return):
        raise NotCertain(f"{k1.name} returns early: the second kernel's part would not run")
    store = top_level_store(ms, a, h)
    value, mask = arg_of(store, 1, "value"), arg_of(store, 2, "mask")
    if value is None or isinstance(value, cst.Integer | cst.Float):
        raise NotCertain(f"{k1.name}'s store to {h} stores a literal: its shape is not certain")
    scalar = mask is None and _scalar(k1, store)
    if mask is None and not scalar:
        raise NotCertain(f"{k1.name}'s store to {h} is unmasked and not one value a program")
    if not scalar and not _one_block(one, store):
        raise NotCertain(f"{k1.name}'s store to {h} is not one 1-D block `... + tl.arange(0, B)` under a mask over it")
    address = one.canonical(k1.address(store))
    h2 = b.params_of(h)
    reads = [c for c in k2.loads if k2.bases(k2.address(c)) & h2]
    for load in reads:
        read_mask = arg_of(load, 1, "mask")
        if two.canonical(k2.address(load)) != address or (
                read_mask is not None if scalar else two.canonical(read_mask) != one.canonical(mask)):
            raise NotCertain(f"{k2.name} reads {h} at other addresses or under another mask than {k1.name} "
                             f"writes it")
    return _fused(ms, host, a, b, moved, h, store, reads, used)


def _fused(ms: ModuleSource, host: HostFunction, a: Site, b: Site, moved: Moved, h: str, store: cst.Call,
           reads: list[cst.Call], used: set[str]) -> Variant:
    k1, k2 = a.kernel, b.kernel
    renames = renames_of(k1, k2, used)
    globals_clash(k1, k2, renames)
    name = fresh_name(f"{k1.name}_{k2.name}_fused", used)
    kept = fresh_name(f"{h}_value", used)
    hp = sorted(b.params_of(h))[0]
    hp = renames.get(hp, hp)
    tl = k2.tl_name
    cast = f"{kept}.to({hp}.dtype.element_ty)"
    calls = {}
    for load in reads:  # the replacements are not renamed again: they are written in the new names
        mask, other = arg_of(load, 1, "mask"), arg_of(load, 2, "other")
        if mask is None:  # one value a program, read where it was stored
            calls[id(load)] = cast
            continue
        otherwise = cast if other is None else code(other.visit(Rename(renames)))  # no other: the lanes are free
        calls[id(load)] = f"{tl}.where({code(mask.visit(Rename(renames)))}, {cast}, {otherwise}).to({hp}.dtype.element_ty)"
    body2 = k2.node.body.visit(Rename(renames, calls))
    uses = host.uses(h, [a, b])
    line = ms.parents.get(id(ms.parents.get(id(store))))
    value = arg_of(store, 1, "value")
    replaced = [cst.parse_statement(f"{kept} = {code(value)}\n").with_changes(leading_lines=line.leading_lines)]
    if uses:
        replaced.append(line.with_changes(leading_lines=[], body=[line.body[0].with_changes(
            value=store.visit(_Swap(value, kept)))]))
    statements = []
    for statement in k1.node.body.body:
        statements.extend(replaced if statement is line else [statement])
    kernel = k1.node.with_changes(
        name=cst.Name(name), params=joined_params(k1, k2, renames),
        body=k1.node.body.with_changes(body=[*statements, *body2.body]),
        leading_lines=[cst.EmptyLine(), cst.EmptyLine()])
    args = launch_args(a, {}, {p.name: moved.arg(p.name) for p in k1.params if moved.arg(p.name) is not None})
    args += launch_args(b, renames)
    options = {**options_of(a), **options_of(b)}
    args += [keyword_arg(k, v) for k, v in options.items()]
    call = b.launch.call.with_changes(func=b.launch.subscript.with_changes(value=cst.Name(name)), args=args)
    last = max((k1.node, k2.node), key=lambda node: ms.module.body.index(node))
    edits = (*moved.edits(call), (last, lambda node, kernel=kernel: cst.FlattenSentinel([node, kernel])))
    fate = f"{h} still stored ({host.name} {USE[uses[0].kind]})" if uses else f"{h} no longer stored"
    return Variant("launch_fusion", f"the launches of {k1.name} and {k2.name} in {host.name} as one kernel "
                   f"({name}): {k2.name} reads {h} from registers, {fate}",
                   frozenset({k1.name, k2.name, name, a.launch.scope.top}), edits)


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
    hosts = [host for host in host_functions(ms) if len(host.sites) >= 2]
    for host in hosts:
        reasons.extend(host.apart())
        for a, b, order in host.pairs():
            try:
                made = _fuse(ms, host, a, b, order)
            except NotCertain as why:
                reasons.append(str(why))
                continue
            if isinstance(made, Fallback):  # the reason says why the pair is not one kernel side by side
                made, why = made
                reasons.append(why)
            variants.append(made)
    if not hosts:
        reasons.append("no function launches two kernels one after the other")
    return Found(variants, reasons)
