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
- between the launches come only assignments of names the first launch does not read, with no call but size
  and allocation ones (`triton.cdiv`, `x.stride(0)`, `torch.empty(...)`), reading no written tensor but for
  its sizes; the second launch's arguments read the written tensors only for their sizes: the fused launch
  takes the second launch's place;
- neither kernel is autotuned or uses atomics, and the first returns nowhere early.

The stored value is cast to the intermediate's element type, as tl.store casts it, so the registers hold the
value the load would have read. The intermediate stays allocated; its store is dropped where the function
reads it nowhere but in the two launches (not returned, not passed on), and kept otherwise. The fused launch
passes every argument by keyword and takes the second launch's num_warps, num_stages and num_ctas, then those
of the first that the second does not set: they do not change what a kernel computes. Other compiler options
(enable_fp_fusion, ...) must be the same at both launches.

Launches with different grids are the second form, an element-wise first kernel over a flattened tensor
inlined into its reader (launch_inline.py). What both forms read of the kernels and the host function is in
launch_reading.py.
"""

from __future__ import annotations

import ast

import libcst as cst

from kernelband.proposers.rewriter.analysis.source import Launch, ModuleSource
from kernelband.proposers.rewriter.analysis.syntax import arg_of, code, fresh_name, loads, subnodes
from kernelband.proposers.rewriter.edits import Found, Variant, keyword_arg
from kernelband.proposers.rewriter.rewrites.launch_inline import inline
from kernelband.proposers.rewriter.rewrites.launch_reading import (
    NotCertain,
    Rename,
    Side,
    between_of,
    check_host,
    fresh,
    options_of,
    param_of,
    same_grid,
    statement_of,
    uses,
)


def _one_block(side: Side, call: cst.Call) -> bool:
    """Whether the access is `... + tl.arange(0, B)` with no other arange and no reshaping (`[:, None]`), under
    a mask over that arange: its lanes hold distinct addresses, and the access, its mask and so the value kept
    for it (`tl.where(mask, value, ...)`) are all one block of B."""
    tree = side.expand(side.kernel.address(call))
    mask = side.expand(arg_of(call, 2, "mask") or cst.Name("None"))
    aranges = [[n for n in ast.walk(t) if isinstance(n, ast.Call) and ast.unparse(n.func).endswith(".arange")]
               for t in (tree, mask)]
    if [len(a) for a in aranges] != [1, 1] or ast.dump(aranges[0][0]) != ast.dump(aranges[1][0]) or any(
            isinstance(n, ast.Subscript) for t in (tree, mask) for n in ast.walk(t)):
        return False
    terms, pending = [], [tree]
    while pending:
        node = pending.pop()
        if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Add):
            pending += [node.left, node.right]
        else:
            terms.append(node)
    return any(t is aranges[0][0] for t in terms)


def _pair(ms: ModuleSource, first: Launch, second: Launch) -> Variant:
    one, two = Side(ms, first), Side(ms, second)
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
    tensors = written | two.buffers(k2.stores) | one.buffers(k1.loads) | two.buffers(k2.loads)
    one.check_followed(tensors)
    two.check_followed(tensors)
    between = between_of(ms, first, second)
    check_host(one, two, between, written)
    stored_by_two = two.buffers(k2.stores)
    for buffer in written | stored_by_two:
        if not fresh(ms, first, buffer):
            raise NotCertain(f"{buffer} is not a tensor {first.scope.name} allocates: another name may alias it")
    if stored_by_two & (one.buffers(k1.loads) | written):
        raise NotCertain(f"{k2.name} writes a buffer {k1.name} reads or writes")
    if h in one.buffers(k1.loads):
        raise NotCertain(f"{k1.name} reads {h} as well as writing it")
    if (written - {h}) & (two.buffers(k2.loads) | stored_by_two):
        raise NotCertain(f"{k2.name} reads or writes another buffer {k1.name} writes")
    if not same_grid(first, second):
        try:
            return inline(ms, one, two, h, written)
        except NotCertain as why:
            raise NotCertain(f"the {first.where} and the {second.where} have different grids, and {why}") from None
    h1 = one.params_of(h)
    stores = [c for c in k1.stores if k1.bases(k1.address(c)) & h1]
    if len(stores) != 1:
        raise NotCertain(f"{k1.name} stores to {h} {len(stores)} times, not once")
    [store] = stores
    line = ms.parents.get(id(ms.parents.get(id(store))))
    if not (isinstance(ms.parents.get(id(store)), cst.Expr) and line in k1.node.body.body and len(line.body) == 1):
        raise NotCertain(f"{k1.name} stores to {h} inside a block or in a compound statement")
    value, mask = arg_of(store, 1, "value"), arg_of(store, 2, "mask")
    if value is None or isinstance(value, cst.Integer | cst.Float) or mask is None:
        raise NotCertain(f"{k1.name}'s store to {h} is unmasked or stores a literal: its shape is not certain")
    if not _one_block(one, store):
        raise NotCertain(f"{k1.name}'s store to {h} is not one 1-D block `... + tl.arange(0, B)` under a mask over it")
    address, where = one.canonical(k1.address(store)), one.canonical(mask)
    h2 = two.params_of(h)
    reads = [c for c in k2.loads if k2.bases(k2.address(c)) & h2]
    for load in reads:
        if two.canonical(k2.address(load)) != address or two.canonical(arg_of(load, 1, "mask")) != where:
            raise NotCertain(f"{k2.name} reads {h} at other addresses or under another mask than {k1.name} "
                             f"writes it")
    return _fused(ms, one, two, h, store, reads, between)


def _fused(ms: ModuleSource, one: Side, two: Side, h: str, store: cst.Call, reads: list[cst.Call],
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
        mask, other = arg_of(load, 1, "mask"), arg_of(load, 2, "other")
        otherwise = cast if other is None else code(other.visit(Rename(renames)))  # no other: the lanes are free
        calls[id(load)] = f"{tl}.where({code(mask.visit(Rename(renames)))}, {cast}, {otherwise}).to({hp}.dtype.element_ty)"
    body2 = k2.node.body.visit(Rename(renames, calls))
    drop = uses(ms, first, h) == 2
    line = ms.parents.get(id(ms.parents.get(id(store))))
    value = arg_of(store, 1, "value")
    replaced = [cst.parse_statement(f"{kept} = {code(value)}\n").with_changes(leading_lines=line.leading_lines)]
    if not drop:
        replaced.append(line.with_changes(leading_lines=[], body=[line.body[0].with_changes(
            value=store.visit(_Swap(value, kept)))]))
    statements = []
    for statement in k1.node.body.body:
        statements.extend(replaced if statement is line else [statement])
    params1 = [param_of(p) for p in (*k1.node.params.posonly_params, *k1.node.params.params)]
    params2 = [param_of(p, renames.get(p.name.value))
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
    options = {**options_of(first), **options_of(second)}
    args += [keyword_arg(k, v) for k, v in options.items()]
    call = second.call.with_changes(func=second.subscript.with_changes(value=cst.Name(name)), args=args)
    launch_line = statement_of(ms, second)
    last = max((k1.node, k2.node), key=lambda node: ms.module.body.index(node))
    edits = ((statement_of(ms, first), lambda node: cst.RemovalSentinel.REMOVE),
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
