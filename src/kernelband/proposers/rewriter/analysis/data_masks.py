"""Loads and stores masked by a value the kernel loaded, and the parts of their masks:

    mask = offsets < n_elements                      the bounds part B: terms that read no loaded value
    p_mask = tl.load(p_mask_ptr + offsets, mask=mask).to(tl.int1)
    mask = mask & ~p_mask                            the data part D: terms that read one
    p = tl.load(p_ptr + offsets, mask=mask)          masked by B & D

A mask is followed through the assignments of one straight-line block (the kernel's body or one loop body): a
name stands for the value of its last assignment before the access, `&` and `&=` split it into terms, and each
term is classified by its canonical form (analysis/values.py), never by how the source spells it. Each term keeps
the statement it is read at, so that a rewrite can tell where its text still holds that value.

`masked_accesses(kernel)` gives, once per parsed module, every load and store whose canonical mask reads a loaded
value, each with its block, its terms, or why it is not one a rewrite may split. Nothing here edits source.
"""

from __future__ import annotations

import ast
from dataclasses import dataclass, field

import libcst as cst

from kernelband.proposers.rewriter.analysis.accesses import WRITES, Access
from kernelband.proposers.rewriter.analysis.facts import facts_of
from kernelband.proposers.rewriter.analysis.source import Kernel
from kernelband.proposers.rewriter.analysis.syntax import arg_of, assigned, code, loads, subnodes
from kernelband.proposers.rewriter.analysis.values import add_terms, factors, is_call, same, tl_name

# What a kernel reads from memory: a term built on one of these depends on data, not on the launch.
DATA_CALLS = frozenset({"load", *WRITES}) - {"store"}
# The markers of where a program is and which lanes it holds (analysis/values.py).
INDEX_MARKERS = ("__pid", "__nprog", "__arange", "__loop")


@dataclass(eq=False)
class Term:
    """One `&` term of a mask: `node` read just before statement `at` of the block."""

    node: cst.BaseExpression
    at: int
    form: ast.expr  # canonical
    definition: tuple[cst.BaseExpression, int] | None = None  # a name's one-term value and where it is read

    @property
    def key(self) -> str:
        return ast.dump(self.form)


@dataclass(eq=False)
class MaskedAccess:
    access: Access
    block: list[cst.BaseStatement] = field(default_factory=list)
    index: int = -1  # the statement of the block that holds the access
    bounds: list[Term] = field(default_factory=list)
    data: list[Term] = field(default_factory=list)
    refusal: str | None = None

    @property
    def call(self) -> cst.Call:
        return self.access.call

    @property
    def statement(self) -> cst.SimpleStatementLine:
        return self.block[self.index]

    def key(self, terms: list[Term]) -> tuple[str, ...]:
        return tuple(sorted(t.key for t in terms))


def reads_data(form: ast.AST) -> bool:
    return any(tl_name(n) in DATA_CALLS for n in ast.walk(form))


def _outside_data(form: ast.AST) -> list[ast.AST]:
    """The nodes of a canonical form that are not inside a load (an address it reads is the load's own)."""
    found, pending = [], [form]
    while pending:
        node = pending.pop()
        if tl_name(node) in DATA_CALLS:
            continue
        found.append(node)
        pending.extend(ast.iter_child_nodes(node))
    return found


def _unwrapped(node: cst.BaseExpression) -> cst.BaseExpression:
    return node.with_changes(lpar=[], rpar=[]) if getattr(node, "lpar", None) else node


def holds(node: cst.BaseExpression, at: int, until: int, block: list[cst.BaseStatement]) -> bool:
    """Whether the text of `node`, read before statement `at`, has the same value before statement `until`: no
    statement from `at` on rebinds a name it reads."""
    names = {n.value for n in loads(node)}
    return not any(assigned(s) & names for s in block[at:until])


def last_change(node: cst.BaseExpression, at: int, block: list[cst.BaseStatement]) -> int:
    """The last statement before which `node`'s text still reads the value it has before `at`."""
    names = {n.value for n in loads(node)}
    return next((i for i in range(at, len(block)) if assigned(block[i]) & names), len(block))


class _Masks:
    def __init__(self, kernel: Kernel) -> None:
        self.kernel = kernel
        self.facts = facts_of(kernel)
        self.ms = kernel.ms

    def blocks(self) -> dict[int, cst.IndentedBlock]:
        """The straight-line blocks accesses may be split in: the kernel's body and each loop body."""
        found = {id(self.kernel.node.body): self.kernel.node.body}
        for loop in (*subnodes(self.kernel.node.body, cst.For), *subnodes(self.kernel.node.body, cst.While)):
            if isinstance(loop.body, cst.IndentedBlock):
                found[id(loop.body)] = loop.body
        return found

    def all(self) -> list[MaskedAccess]:
        blocks = self.blocks()
        found = []
        for access in self.facts.accesses.all:
            if access.mask is None or not (reads_data(access.mask)
                                           or any(is_call(n, "__var") for n in ast.walk(access.mask))):
                continue
            found.append(self._masked(access, blocks))
        return found

    def _masked(self, access: Access, blocks: dict[int, cst.IndentedBlock]) -> MaskedAccess:
        found = MaskedAccess(access)
        what = f"the {access.kind} of {', '.join(sorted(access.bases)) or 'a pointer'} in {self.kernel.name}"
        if access.form != "pointer":
            found.refusal = f"{what} is not through a pointer tensor"
            return found
        if access.address is None or reads_data(access.address):
            found.refusal = f"{what} reads an address computed from loaded values: lanes its mask drops may lie " \
                            "outside the tensor"
            return found
        line, block = self._line(access.call, blocks)
        if block is None:
            found.refusal = f"{what} is masked by loaded values in a branch, not in straight-line code"
            return found
        if line is None or len(line.body) != 1:
            found.refusal = f"{what} shares its line with another statement"
            return found
        found.block = list(block.body)
        found.index = found.block.index(line)
        mask = arg_of(access.call, 2 if access.store else 1, "mask")
        for term in self.terms(mask, found.index, found.block):
            (found.data if reads_data(term.form) else found.bounds).append(term)
            if any(is_call(n, "__var") for n in ast.walk(term.form)):
                found.refusal = f"the mask term `{code(term.node).strip()}` of {what} holds a value set in a loop " \
                                "or a branch: whether it reads loaded values is not known"
                return found
        if not found.bounds:
            found.refusal = f"the mask of {what} has no `&` term free of loaded values (a bounds term) to mask " \
                            "the access by alone"
            return found
        for term in found.data:
            if any(is_call(n, m) for n in _outside_data(term.form) for m in INDEX_MARKERS):
                found.refusal = f"the data term `{code(term.node).strip()}` of {what} also reads the offsets: it " \
                                "may bound them, and lanes outside it may lie outside the tensor"
                return found
        return found

    def _line(self, call: cst.Call, blocks) -> tuple[cst.SimpleStatementLine | None, cst.IndentedBlock | None]:
        """The line holding the call and the block it is a statement of; (None, None) for a branch."""
        node: cst.CSTNode = call
        line = None
        while (parent := self.ms.parents.get(id(node))) is not None:
            if isinstance(node, cst.SimpleStatementLine) and line is None:
                line = node
            if isinstance(parent, cst.IndentedBlock):
                if id(parent) in blocks and line is not None and node is line:
                    return line, parent
                return None, None
            if isinstance(node, cst.BaseCompoundStatement):
                return None, None
            node = parent
        return None, None

    def terms(self, node: cst.BaseExpression, at: int, block: list[cst.BaseStatement]) -> list[Term]:
        """The `&` terms of `node` read before statement `at`, names followed to their assignments in the block."""
        node = _unwrapped(node)
        if isinstance(node, cst.BinaryOperation) and isinstance(node.operator, cst.BitAnd):
            return self.terms(node.left, at, block) + self.terms(node.right, at, block)
        if isinstance(node, cst.Name):
            where = self._assignment(node.value, at, block)
            if where is not None:
                value, augmented, index = where
                if augmented:  # `mask &= d`: the name's value before that line, and d
                    return self.terms(cst.Name(node.value), index, block) + self.terms(value, index, block)
                split = self.terms(value, index, block)
                if len(split) > 1:
                    return split
                term = self._term(node, at, block)
                term.definition = (split[0].node, split[0].at)
                return [term]
        return [self._term(node, at, block)]

    def _term(self, node: cst.BaseExpression, at: int, block: list[cst.BaseStatement]) -> Term:
        """The canonical form of `node` read with the values that reach statement `at`."""
        return Term(node, at, self.facts.values.read_at(node, block[at]))

    def _assignment(self, name: str, at: int, block: list[cst.BaseStatement]):
        """(value, augmented `&=`, index) of the last plain assignment of `name` in the block before `at`, the
        only binding of it from there on; None where the name comes from outside the block or is bound
        otherwise (a loop, a branch, a tuple)."""
        for index in range(at - 1, -1, -1):
            statement = block[index]
            if name not in assigned(statement):
                continue
            if not (isinstance(statement, cst.SimpleStatementLine) and len(statement.body) == 1):
                return None
            small = statement.body[0]
            if isinstance(small, cst.Assign) and len(small.targets) == 1 \
                    and isinstance(small.targets[0].target, cst.Name):
                return small.value, False, index
            if isinstance(small, cst.AugAssign) and isinstance(small.operator, cst.BitAndAssign) \
                    and isinstance(small.target, cst.Name):
                return small.value, True, index
            return None
        return None


def masked_accesses(kernel: Kernel) -> list[MaskedAccess]:
    cache = kernel.ms.cache.setdefault("data_masks", {})
    if kernel.name not in cache:
        masks = _Masks(kernel)
        cache[kernel.name] = masks.all()
    return cache[kernel.name]


def owned(kernel: Kernel, address: ast.expr | None) -> bool:
    """Whether each program of the kernel reaches elements of `address` no other program reaches: the address is
    a base plus `pid(a) * S + arange(0, S)` (in any order, with terms that read neither a program id nor an
    arange), and the kernel reads no program id on another axis. A store that writes back what it loaded is
    then no race with another program's store."""
    if address is None:
        return False
    axes = {kernel.program_axis(c) for c in kernel.calls("program_id")}
    if len(axes) != 1 or None in axes:
        return False
    terms = add_terms(address)
    pids = [t for t in terms if any(is_call(n, "__pid") for n in ast.walk(t))]
    ranges = [t for t in terms if any(is_call(n, "__arange") for n in ast.walk(t))]
    if len(pids) != 1 or len(ranges) != 1 or pids[0] is ranges[0] or not is_call(ranges[0], "__arange"):
        return False
    span = factors(pids[0])
    pid = [f for f in span if is_call(f, "__pid")]
    rest = [f for f in span if not is_call(f, "__pid")]
    start, end = (ranges[0].args + [None, None])[:2]
    return (len(pid) == 1 and len(rest) == 1 and isinstance(start, ast.Constant) and start.value == 0
            and same(rest[0], end) and not any(is_call(n, "__pid") or is_call(n, "__arange")
                                               for n in ast.walk(rest[0])))
