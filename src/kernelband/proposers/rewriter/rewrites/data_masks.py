"""data_masks: loads and stores masked by their bounds only, the part of the mask that reads loaded data applied
with tl.where (analysis/data_masks.py finds the accesses and splits their masks):

    mask = offsets < n                                  mask = offsets < n
    m = tl.load(m_ptr + offsets, mask=mask)             m = tl.load(m_ptr + offsets, mask=mask)
    mask = mask & ~m                                    keep = ~m
                                                        mask = mask & ~m
    p = tl.load(p_ptr + offsets, mask=mask)       ->    p = tl.where(keep, tl.load(p_ptr + offsets, mask=offsets < n), False)
    g = tl.load(g_ptr + offsets, mask=mask)             g_old = tl.load(g_ptr + offsets, mask=offsets < n)
                                                        g = tl.where(keep, g_old, False)
    g += p                                              g += p
    tl.store(g_ptr + offsets, g, mask=mask)             tl.store(g_ptr + offsets, tl.where(keep, g, g_old), mask=offsets < n)

Why: a mask that reads loaded data has constancy 1 in Triton's axis analysis, so every lane is its own predicated
32-bit access; masked by bounds alone the same accesses are 128-bit vectors (sm_90: masked_add's 16 ld.global.b32
and 8 st.global.b32 per thread become 4 ld.global.v4 and 2 st.global.v4). Whether that pays where the data mask
drops most lanes is the evaluator's to say; the meaning is certain to stay:

* a load gives its `other` (cast to its element type, as tl.load casts it) where the data term is false, and 0
  without one (Triton's interpreter fills masked-off lanes with zeros; `False` is a zero that keeps every dtype
  in tl.where, an int or float literal does not keep bool or int loads);
* a store writes back, where the data term is false, the values the same program loaded from the same
  addresses before it with nothing stored in between (the same canonical address, no loop or branch between):
  those lanes keep what they held. A store without such a load keeps its mask: reading the old values would
  add traffic. Only where each program writes elements of its own (`pid * S + tl.arange(0, S)` along one
  program axis: analysis/data_masks.owned), so that no other program's store falls between the load and the
  write-back;
* the data term is read once into a fresh name, at a point where each of its terms still has the value it
  has at the accesses; the bounds text likewise, inline where its names still hold their values.
"""

from __future__ import annotations

import ast

import libcst as cst

from kernelband.proposers.rewriter.analysis.accesses import WRITES
from kernelband.proposers.rewriter.analysis.data_masks import (
    MaskedAccess,
    Term,
    holds,
    last_change,
    masked_accesses,
    owned,
    reads_data,
)
from kernelband.proposers.rewriter.analysis.facts import facts_of
from kernelband.proposers.rewriter.analysis.source import Kernel, ModuleSource
from kernelband.proposers.rewriter.analysis.syntax import arg_of, code, fresh_name, subnodes
from kernelband.proposers.rewriter.analysis.values import same
from kernelband.proposers.rewriter.edits import Edit, Found, Variant, replace_with

ATOMS = (cst.Name, cst.Call, cst.Attribute, cst.Subscript, cst.Integer, cst.Float)


def _conjunct_keys(form: ast.expr) -> set[str]:
    if isinstance(form, ast.BinOp) and isinstance(form.op, ast.BitAnd):
        return _conjunct_keys(form.left) | _conjunct_keys(form.right)
    return {ast.dump(form)}


def _joined(texts: list[tuple[cst.BaseExpression, str]]) -> str:
    """The conjunction of terms: each parenthesized unless it is one atom."""
    if len(texts) == 1:
        return texts[0][1]
    return " & ".join(t if isinstance(n, ATOMS) or getattr(n, "lpar", None) else f"({t})" for n, t in texts)


def _text_at(term: Term, until: int, block: list) -> tuple[cst.BaseExpression, str] | None:
    """Text that reads the term's value before statement `until`: its own, or the one value its name holds."""
    if holds(term.node, term.at, until, block):
        return term.node, code(term.node).strip()
    if term.definition is not None and holds(term.definition[0], term.definition[1], until, block):
        return term.definition[0], code(term.definition[0]).strip()
    return None


def _with_arg(call: cst.Call, index: int, keyword: str, text: str) -> str:
    """The call's code with one argument (by keyword or position) replaced by `text`."""
    args, positional = list(call.args), 0
    for i, arg in enumerate(args):
        if arg.keyword is None and not arg.star:
            hit, positional = positional == index, positional + 1
        else:
            hit = arg.keyword is not None and arg.keyword.value == keyword
        if hit:
            args[i] = arg.with_changes(value=cst.parse_expression(text))
    return code(call.with_changes(args=args))


class _Plan:
    """The edits of one kernel: statements inserted before lines, and calls replaced."""

    def __init__(self, kernel: Kernel) -> None:
        self.kernel, self.tl = kernel, kernel.tl_name
        self.used = set(kernel.names)
        self.inserts: dict[int, tuple[cst.CSTNode, list[str]]] = {}
        self.calls: dict[int, tuple[cst.Call, Edit]] = {}
        self.defined: set[str] = set()  # the fresh names of loads hoisted so far
        self.captures: dict[tuple, str | None] = {}
        self.reasons: list[str] = []
        self.loads = self.stores = 0

    def insert(self, statement: cst.CSTNode, line: str) -> None:
        self.inserts.setdefault(id(statement), (statement, []))[1].append(line)

    def capture(self, base: str, terms: list[Term], group: list[MaskedAccess]) -> str | None:
        """A fresh name bound to the conjunction of `terms` before the first of `group`'s accesses, at a line where
        every term still reads its value; None where there is no such line."""
        block, key = group[0].block, (id(group[0].block[0]), base, group[0].key(terms))
        if key in self.captures:
            return self.captures[key]
        first = min(m.index for m in group)
        at = min([first, *(last_change(t.node, t.at, block) for t in terms)])
        name = None
        if at >= max(t.at for t in terms):
            name = fresh_name(base, self.used)
            self.insert(block[at], f"{name} = {_joined([(t.node, code(t.node).strip()) for t in terms])}")
        self.captures[key] = name
        return name

    def bounds(self, masked: MaskedAccess, group: list[MaskedAccess]) -> str | None:
        texts = [_text_at(t, masked.index, masked.block) for t in masked.bounds]
        if all(texts):
            return _joined(texts)
        return self.capture("bounds", masked.bounds, [m for m in group if m.key(m.bounds) == masked.key(masked.bounds)])


def _old_load(kernel: Kernel, store: MaskedAccess) -> tuple[cst.Call, int] | None:
    """The load that read the store's addresses last before it in its block, with no loop, branch, store or
    atomic between them."""
    accesses = facts_of(kernel).accesses
    for index in range(store.index - 1, -1, -1):
        statement = store.block[index]
        if not isinstance(statement, cst.SimpleStatementLine):
            return None
        calls = subnodes(statement, cst.Call)
        if any(kernel.is_tl(c.func, name) for c in calls for name in WRITES):
            return None
        for call in reversed(calls):
            access = accesses.of(call)
            if access is not None and not access.store and same(access.address, store.access.address):
                return (call, index) if len(statement.body) == 1 else None
    return None


def _target(statement: cst.SimpleStatementLine) -> str:
    small = statement.body[0]
    if isinstance(small, cst.Assign) and len(small.targets) == 1 and isinstance(small.targets[0].target, cst.Name):
        return small.targets[0].target.value
    return "loaded"


def _plan(kernel: Kernel, masked: list[MaskedAccess]) -> _Plan:
    plan = _Plan(kernel)
    ready = [m for m in masked if m.refusal is None]
    plan.reasons += [m.refusal for m in masked if m.refusal is not None]
    by_call = {id(m.call): m for m in ready}
    # Which loads give a store its old values: those are kept in a fresh name.
    olds: dict[int, tuple[MaskedAccess, cst.Call, int]] = {}
    for store in (m for m in ready if m.access.store):
        found = _old_load(kernel, store)
        what = f"the store to {', '.join(sorted(store.access.bases))} in {kernel.name}"
        if not owned(kernel, store.access.address):
            plan.reasons.append(f"{what} keeps its mask: no proof that each program writes elements of its own "
                                "(writing back old values could race with another program's store)")
            continue
        if found is None:
            plan.reasons.append(f"{what} keeps its mask: the store's old values are not loaded before it")
            continue
        call, index = found
        load = by_call.get(id(call))
        access = facts_of(kernel).accesses.of(call)
        wanted = {t.key for t in store.bounds}
        read = {t.key for t in load.bounds} if load is not None else \
            (_conjunct_keys(access.mask) if access.mask is not None else set())
        if not read <= wanted or (load is None and access.mask is not None and reads_data(access.mask)):
            plan.reasons.append(f"{what} keeps its mask: the load of its old values is masked otherwise")
            continue
        olds[id(store.call)] = (store, call, index)
    hoisted: dict[int, str] = {}
    for store, call, index in olds.values():
        if id(call) not in hoisted:
            hoisted[id(call)] = fresh_name(f"{_target(store.block[index])}_old", plan.used)
    groups: dict[int, list[MaskedAccess]] = {}
    for m in ready:
        groups.setdefault(id(m.block[0]), []).append(m)
    for m in ready:
        if m.access.store and id(m.call) not in olds:
            continue
        group = [g for g in groups[id(m.block[0])] if not g.access.store or id(g.call) in olds]
        keep = plan.capture("keep", m.data, [g for g in group if g.key(g.data) == m.key(m.data)])
        bounds = plan.bounds(m, group)
        if keep is None or bounds is None:
            plan.reasons.append(f"the {m.access.kind} of {', '.join(sorted(m.access.bases))} in {kernel.name}: its "
                                "mask's terms never all hold their values at one line before it")
            continue
        if m.access.store:
            old = hoisted[id(olds[id(m.call)][1])]
            if id(olds[id(m.call)][1]) in by_call and old not in plan.defined:
                plan.reasons.append(f"the store to {', '.join(sorted(m.access.bases))} in {kernel.name} keeps its "
                                    "mask: the load of its old values keeps its own")
                continue
            plan.calls[id(m.call)] = (m.call, _stored(plan.tl, keep, bounds, old))
            plan.stores += 1
            continue
        rebuilt = _with_arg(m.call, 1, "mask", bounds)
        other = arg_of(m.call, 2, "other")
        name = hoisted.get(id(m.call))
        if name is None and other is not None:
            name = hoisted[id(m.call)] = fresh_name(f"{_target(m.statement)}_raw", plan.used)
        if name is None:
            plan.calls[id(m.call)] = (m.call, _loaded(plan.tl, keep, bounds))
        else:
            plan.insert(m.statement, f"{name} = {rebuilt}")
            plan.defined.add(name)
            fill = "False" if other is None else f"{plan.tl}.cast({code(other).strip()}, {name}.dtype)"
            plan.calls[id(m.call)] = (m.call, replace_with(f"{plan.tl}.where({keep}, {name}, {fill})"))
        plan.loads += 1
    # A store's old values read by a load the rewrite does not change (bounds only, or no mask).
    for store, call, index in olds.values():
        if id(call) not in plan.calls and id(store.call) in plan.calls:
            plan.insert(store.block[index], f"{hoisted[id(call)]} = {code(call).strip()}")
            plan.calls[id(call)] = (call, replace_with(hoisted[id(call)]))
    return plan


def _inserted(lines: list[str]):
    def edit(statement: cst.BaseStatement):
        return cst.FlattenSentinel([*(cst.parse_statement(line) for line in lines), statement])
    return edit


# The call edits below read the call as the edits inside it left it (a load in a store's value, say).
def _loaded(tl: str, keep: str, bounds: str) -> Edit:
    return lambda call: cst.parse_expression(f"{tl}.where({keep}, {_with_arg(call, 1, 'mask', bounds)}, False)")


def _stored(tl: str, keep: str, bounds: str, old: str) -> Edit:
    def edit(call: cst.Call) -> cst.BaseExpression:
        masked = cst.parse_expression(_with_arg(call, 2, "mask", bounds))
        value = code(arg_of(masked, 1, "value")).strip()
        return cst.parse_expression(_with_arg(masked, 1, "value", f"{tl}.where({keep}, {value}, {old})"))
    return edit


def data_masks(ms: ModuleSource) -> Found:
    variants, reasons = [], []
    for kernel in ms.kernels.values():
        masked = masked_accesses(kernel)
        if not masked:
            reasons.append(f"{kernel.name}: no load or store is masked by a value the kernel loads")
            continue
        plan = _plan(kernel, masked)
        reasons += plan.reasons
        if not plan.calls:
            continue
        edits = list(plan.calls.values())
        edits += [(statement, _inserted(lines)) for statement, lines in plan.inserts.values()]
        data = sorted({code(t.node).strip() for m in masked if m.refusal is None for t in m.data})
        variants.append(Variant(
            "data_masks", f"{plan.loads} load(s) and {plan.stores} store(s) in {kernel.name} masked by their bounds "
            f"only, the data term ({', '.join(data)}) applied with tl.where: vector accesses",
            frozenset({kernel.name}), tuple(edits)))
    return Found(variants, reasons)

