"""What a host function does with the kernels it launches: its launches in order with the control flow around
them, the tensors each launch passes for each pointer parameter, which of them each kernel reads and writes,
which host names may be the same memory, and what else the host does with a buffer:

    h = torch.empty_like(x)           h is fresh memory: no other name is it (but for names made from it)
    v = x.view(-1, n)                 v is x's memory (as are x[1:], x.contiguous(), torch.view_as_real(x))
    add[(rows,)](x, y, h, n)          add reads x and y and writes h (its accesses, through block pointers, its
                                      atomics, and the @triton.jit helpers it hands a pointer to)
    if big:                           the two launches under the `if` are alternatives: no run makes both;
        norm[(rows,)](out, h, w)      add and norm are a sequence (nothing between them but `if big`)
    else:
        other[(1,)](out, h)
    return out, h                     h is returned: the host reads it again

Two names may be the same memory where both reach the same allocation, or both come from outside the function
(parameters, what a call returns). Everything is read from each kernel's accesses (`facts_of(kernel)`) and the
host function's statements (the control flow: analysis/host_flow.py); nothing here edits source.
`host_functions(ms)` gives them, computed once per parsed module.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from functools import cached_property

import libcst as cst

from kernelband.proposers.rewriter.analysis.facts import facts_of
from kernelband.proposers.rewriter.analysis.host_flow import (
    Order,
    Path,
    grid,
    next_pairs,
    order,
    paths,
    reaching,
)
from kernelband.proposers.rewriter.analysis.source import Kernel, Launch, ModuleSource
from kernelband.proposers.rewriter.analysis.syntax import (
    Scope,
    arg_of,
    assigned,
    code,
    dotted,
    loads,
    names_only,
    subnodes,
)

OUTSIDE = "outside"  # the storage of every tensor the function did not allocate itself
# Calls that return new memory.
FRESH_TORCH = frozenset({"empty", "empty_like", "zeros", "zeros_like", "ones", "ones_like", "full", "full_like",
                         "empty_strided", "rand", "randn", "randint", "rand_like", "randn_like", "arange", "clone"})
FRESH_METHODS = frozenset({"clone", "new_empty", "new_zeros", "new_ones", "new_full", "new_tensor"})
# Calls whose result may be the memory of the tensor they are called on (or given first).
VIEW_METHODS = frozenset({"view", "reshape", "contiguous", "t", "transpose", "permute", "flatten", "squeeze",
                          "unsqueeze", "expand", "expand_as", "view_as", "narrow", "as_strided", "unflatten",
                          "movedim", "select", "to", "float", "half", "bfloat16", "type", "detach", "cuda", "cpu",
                          "type_as", "requires_grad_"})
VIEW_ATTRIBUTES = frozenset({"T", "mT", "H", "data", "real", "imag"})
TORCH_VIEWS = frozenset({"view_as_real", "view_as_complex", "squeeze", "unsqueeze", "reshape", "flatten", "transpose",
                         "permute", "narrow", "as_strided", "select", "movedim", "t"})
# What reads a tensor's sizes, not its elements.
METADATA = frozenset({"stride", "size", "numel", "shape", "dim", "ndim", "dtype", "device", "element_size",
                      "is_contiguous", "is_cuda", "nelement", "data_ptr"})
SHAPED_LIKE = frozenset({"empty_like", "zeros_like", "ones_like", "full_like", "rand_like", "randn_like"})


# -- what a kernel reads and writes, by parameter ---------------------------------------------------------------
@dataclass(frozen=True)
class Touches:
    reads: frozenset[str]  # pointer parameters loaded from (atomics included)
    writes: frozenset[str]  # pointer parameters stored to (atomics included)
    unknown: tuple[str, ...] = ()  # accesses whose pointer reaches no parameter here: the code of each

    @property
    def pointers(self) -> frozenset[str]:
        return self.reads | self.writes


def touches(kernel: Kernel) -> Touches:
    """The pointer parameters a kernel reads and writes: its loads and stores (pointer arithmetic, block pointers,
    descriptors), its atomics (read and written), and what it hands to a @triton.jit helper (taken as read and
    written: the helper's accesses are its own)."""
    ms = kernel.ms
    cache = ms.cache.setdefault("touches", {})
    if kernel.name in cache:
        return cache[kernel.name]
    facts = facts_of(kernel)
    reads: set[str] = set()
    writes: set[str] = set()
    unknown: list[str] = []
    for access in facts.accesses.all:
        if not access.bases:
            unknown.append(code(access.call.args[0].value) if access.call.args else code(access.call))
        (writes if access.store else reads).update(access.bases)
    helpers = {name for name in ms.kernels if name != kernel.name}
    for call in subnodes(kernel.node.body, cst.Call):
        name = dotted(call.func) or ""
        atomic = name.rpartition(".")[2].startswith("atomic_") and kernel.is_tl(call.func, name.rpartition(".")[2])
        if atomic:
            pointer = arg_of(call, 0, "pointer")
            bases = facts.accesses.bases_of(pointer) if pointer is not None else frozenset()
            if not bases:
                unknown.append(code(call))
            reads |= bases
            writes |= bases
        elif name in helpers:
            helper = ms.kernels[name]
            cache[kernel.name] = Touches(frozenset(), frozenset(), (f"{name}(...)",))  # a helper calling back
            inner = touches(helper)
            unknown.extend(inner.unknown)
            for param, arg in _bound(helper, call).items():
                bases = facts.accesses.bases_of(arg)
                if param in inner.reads:
                    reads |= bases
                if param in inner.writes:
                    writes |= bases
    constexprs = {p.name for p in kernel.params if p.constexpr}  # added to a pointer, never one
    cache[kernel.name] = Touches(frozenset(reads - constexprs), frozenset(writes - constexprs), tuple(unknown))
    return cache[kernel.name]


def _bound(helper: Kernel, call: cst.Call) -> dict[str, cst.BaseExpression]:
    """The helper's parameters, each with the argument the call gives it."""
    bound = {}
    positional = [a for a in call.args if a.keyword is None and not a.star]
    for param, arg in zip(helper.params, positional):
        bound[param.name] = arg.value
    for arg in call.args:
        if arg.keyword is not None:
            bound[arg.keyword.value] = arg.value
    return bound


@dataclass(frozen=True)
class Passed:
    """What a launch passes for one pointer parameter of its kernel."""

    param: str
    code: str
    root: str | None  # the host name whose memory it is (x for x, x[1:], x.view(..)); None where not known
    read: bool
    written: bool


@dataclass(eq=False)
class Site:
    """One launch in its host function."""

    launch: Launch
    statement: cst.SimpleStatementLine | None  # the line that is the launch alone, else None
    path: Path  # from the function's body to that line
    passed: dict[str, Passed]
    touches: Touches

    @property
    def kernel(self) -> Kernel:
        return self.launch.kernel

    @property
    def where(self) -> str:
        return self.launch.where

    @property
    def reads(self) -> set[str | None]:
        return {p.root for p in self.passed.values() if p.read}

    @property
    def writes(self) -> set[str | None]:
        return {p.root for p in self.passed.values() if p.written}

    def params_of(self, buffer: str) -> set[str]:
        return {p.param for p in self.passed.values() if p.root == buffer}


@dataclass(frozen=True)
class Use:
    """A use of a buffer's elements by the host, outside the launches asked about."""

    kind: str  # "returned", "handed on" (an argument of a call), "read"
    code: str


@dataclass(eq=False)
class HostFunction:
    """A function that launches kernels: its launch sites, the order between them, and its buffers."""

    ms: ModuleSource
    scope: Scope
    sites: list[Site] = field(default_factory=list)

    @property
    def name(self) -> str:
        return self.scope.name

    # -- control flow (analysis/host_flow.py) -------------------------------------------------------------------
    def order(self, a: Site, b: Site) -> Order:
        """How `b` follows `a` (a comes first in the source)."""
        return order(a.path, b.path, a.where, b.where)

    def pairs(self) -> list[tuple[Site, Site, Order]]:
        """Each launch with each launch that can run next after it, no other launch between them on that run."""
        orders = {(i, j): self.order(self.sites[i], self.sites[j])
                  for i in range(len(self.sites)) for j in range(i + 1, len(self.sites))}
        return [(self.sites[i], self.sites[j], orders[i, j]) for i, j in next_pairs(orders, len(self.sites))]

    def apart(self) -> list[str]:
        """Why no two launches of the function follow each other, where none does."""
        if self.pairs():
            return []
        return [self.order(a, b).why for i, a in enumerate(self.sites) for b in self.sites[i + 1:]][:1]

    def reaching(self, name: str, site: Site) -> cst.BaseExpression | None:
        return reaching(name, site.path)

    def grid(self, site: Site) -> tuple[list[str] | None, str]:
        return grid(site.launch, site.path)

    # -- names and memory ----------------------------------------------------------------------------------------
    def storage(self, name: str) -> frozenset[str]:
        """Which memory a host name may be: an allocation of the function (one token per allocation) or
        OUTSIDE (a parameter, what a call returns, a value unpacked from a tuple)."""
        return self._storages.get(name, frozenset({OUTSIDE}))

    @cached_property
    def _storages(self) -> dict[str, frozenset[str]]:
        found: dict[str, set[str]] = {}
        for name, values in self.scope.assigns.items():
            tokens: set[str] = set()
            for i, value in enumerate(values):
                tokens |= self._tokens(name, i, value)
            found[name] = tokens
        for name in self.scope.params:
            found.setdefault(name, set()).add(OUTSIDE)
        changed = True
        while changed:  # a name made from another is the other's memory too
            changed = False
            for tokens in found.values():
                for other in [t[5:] for t in list(tokens) if t.startswith("like:")]:
                    more = {t for t in found.get(other, {OUTSIDE}) if not t.startswith("like:")}
                    if not more <= tokens:
                        tokens |= more
                        changed = True
        return {name: frozenset(t for t in tokens if not t.startswith("like:")) for name, tokens in found.items()}

    def _tokens(self, name: str, index: int, value: cst.BaseExpression | None) -> set[str]:
        if value is None:
            return {OUTSIDE}
        if isinstance(value, cst.BaseNumber | cst.BaseString) or dotted(value) in ("None", "True", "False"):
            return set()  # no tensor
        if fresh_call(value):
            return {f"{name}#{index}"}
        root = root_of(value)
        if root is not None:
            return {f"like:{root}"}
        return {OUTSIDE} | {f"like:{n.value}" for n in loads(value) if not self._metadata(n)}

    def storage_at(self, name: str, site: Site) -> frozenset[str]:
        """The memory a name may be where a launch reads it: that of the value its last assignment before the
        launch gives it, where one plain assignment does."""
        value = self.reaching(name, site)
        index = next((i for i, v in enumerate(self.scope.assigns.get(name, [])) if v is value), None)
        if value is None or index is None:
            return self.storage(name)
        tokens = set()
        for token in self._tokens(name, index, value):
            tokens |= self.storage(token[5:]) if token.startswith("like:") else {token}
        return frozenset(tokens)

    def may_alias(self, x: str | None, y: str | None, at: tuple[Site, Site] | None = None) -> bool:
        """Whether two host names may be the same memory (a name not known is any memory), each where the
        launch of `at` passes it when given."""
        if x is None or y is None or x == y:
            return True
        sx, sy = (self.storage_at(x, at[0]), self.storage_at(y, at[1])) if at else (self.storage(x), self.storage(y))
        return bool(sx & sy) or (OUTSIDE in sx and OUTSIDE in sy)

    def restored(self, site: Site) -> list[str]:
        """The pointer parameters of the site's kernel that one run of the launch changes in a way a second run
        reads (an autotuner reruns it): read and written (atomics included), or written where the launch passes
        memory the kernel also reads through another parameter."""
        read = [p for p in site.passed.values() if p.read]
        changed = {name for name, p in site.passed.items()
                   if p.written and (p.read or any(self.may_alias(p.root, r.root, (site, site)) for r in read))}
        return [p.name for p in site.kernel.params if p.name in changed]

    def aliases(self, name: str) -> set[str]:
        """The host names that may be the memory of `name` (itself included)."""
        own = self.storage(name) - {OUTSIDE}
        return {name} | {other for other in self._storages if own & self.storage(other)}

    def fresh(self, name: str) -> bool:
        """Whether the name is memory the function allocates (every value it takes is a new tensor)."""
        return OUTSIDE not in self.storage(name) and name not in self.scope.params

    def uses(self, name: str, besides: list[Site], within: list[cst.CSTNode] | None = None) -> list[Use]:
        """Where the host uses the elements of `name`, or of a name that may be its memory, other than in the
        launches `besides`: reading sizes (`h.stride(0)`, `torch.empty_like(h)`) is no use, nor is a view bound to a
        local name (`v = h.view(-1)`: v's uses count); one kept in an object or a global (`CACHE['h'] = h`,
        `f.h = h`) is handed on. `within`: only the uses inside these nodes (the statements between two points)."""
        skip = {id(site.launch.call) for site in besides}
        inside = {id(node) for node in within} if within is not None else None
        names = self.aliases(name)
        found = []
        for node in self.scope.body_loads():
            if inside is not None and not self._under(node, inside):
                continue
            if node.value not in names or self._under(node, skip) or self._metadata(node) \
                    or isinstance(self._parent(node), cst.NameItem):  # `global g`: a declaration, no use
                continue
            statement = self._statement_of(node)
            small = statement.body[0] if isinstance(statement, cst.SimpleStatementLine) else None
            kind = "read"
            if isinstance(small, cst.Assign) and self._is_root(node, small.value):
                if self._locals_only(small):
                    continue  # `v = h.view(...)`: v's own uses count
                kind = "handed on"  # `CACHE['h'] = h`, `f.h = h`: kept where the function no longer sees it
            elif self._inside(node, cst.Return):
                kind = "returned"
            elif self._argument(node):
                kind = "handed on"
            found.append(Use(kind, code(statement).strip() if statement is not None else node.value))
        return found

    def _locals_only(self, assign: cst.Assign) -> bool:
        """Whether an assignment binds local names only: no element, attribute, global or nonlocal name."""
        declared = {n.name.value for d in subnodes(self.scope.node, cst.Global | cst.Nonlocal) for n in d.names}
        return all(names_only(t.target) for t in assign.targets) and not assigned(assign) & declared

    def _parent(self, node: cst.CSTNode) -> cst.CSTNode | None:
        return self.ms.parents.get(id(node))

    def _under(self, node: cst.CSTNode, ids: set[int]) -> bool:
        while node is not None:
            if id(node) in ids:
                return True
            node = self._parent(node)
        return False

    def _inside(self, node: cst.CSTNode, kind: type) -> bool:
        while node is not None and not isinstance(node, cst.FunctionDef):
            if isinstance(node, kind):
                return True
            node = self._parent(node)
        return False

    def _statement_of(self, node: cst.CSTNode) -> cst.CSTNode | None:
        while node is not None and not isinstance(node, cst.SimpleStatementLine | cst.BaseCompoundStatement):
            node = self._parent(node)
        return node

    def _metadata(self, node: cst.Name) -> bool:
        parent = self._parent(node)
        if isinstance(parent, cst.Attribute) and parent.value is node and parent.attr.value in METADATA:
            return True
        arg = parent if isinstance(parent, cst.Arg) else None
        call = self._parent(arg) if arg is not None else None
        return isinstance(call, cst.Call) and (dotted(call.func) or "").rpartition(".")[2] in SHAPED_LIKE \
            and call.args and call.args[0] is arg

    def _argument(self, node: cst.Name) -> bool:
        parent = self._parent(node)
        while isinstance(parent, cst.Attribute | cst.Subscript | cst.SubscriptElement | cst.Index | cst.Call) \
                and not isinstance(parent, cst.Arg):
            if isinstance(parent, cst.Call):
                return False  # the name's own method (`h.sum()`): a read
            parent = self._parent(parent)
        return isinstance(parent, cst.Arg)

    @staticmethod
    def _is_root(node: cst.Name, value: cst.BaseExpression) -> bool:
        """Whether a value is a view of this very name node (`h.view(-1)`, `h[1:]`)."""
        return root_of(value) == node.value and any(n is node for n in loads(value))

def fresh_call(value: cst.BaseExpression) -> bool:
    """Whether an expression is a call that returns new memory (`torch.empty_like(x)`, `x.new_empty(..)`,
    `x.clone()`)."""
    if not isinstance(value, cst.Call):
        return False
    name = dotted(value.func) or ""
    if name.startswith("torch.") and name.rpartition(".")[2] in FRESH_TORCH:
        return True
    return isinstance(value.func, cst.Attribute) and value.func.attr.value in FRESH_METHODS


def root_of(node: cst.BaseExpression) -> str | None:
    """The host name whose memory an expression may be: x for x, x[1:], x.view(-1), x.T,
    torch.view_as_real(x); None for anything else (a new tensor, a computed one, a literal)."""
    while True:
        if isinstance(node, cst.Name):
            return node.value
        if isinstance(node, cst.Subscript):
            node = node.value
        elif isinstance(node, cst.Attribute) and node.attr.value in VIEW_ATTRIBUTES:
            node = node.value
        elif isinstance(node, cst.Call) and isinstance(node.func, cst.Attribute) \
                and node.func.attr.value in VIEW_METHODS and dotted(node.func.value) != "torch":
            node = node.func.value
        elif isinstance(node, cst.Call) and (dotted(node.func) or "").startswith("torch.") \
                and dotted(node.func).rpartition(".")[2] in TORCH_VIEWS and node.args:
            node = node.args[0].value
        else:
            return None


# -- the module ---------------------------------------------------------------------------------------------
def _site(ms: ModuleSource, launch: Launch, places: dict[int, Path]) -> Site | None:
    node: cst.CSTNode | None = launch.call
    while node is not None and not isinstance(node, cst.SimpleStatementLine):
        node = ms.parents.get(id(node))
    if node is None or id(node) not in places:
        return None
    expr = ms.parents.get(id(launch.call))
    alone = isinstance(expr, cst.Expr) and len(node.body) == 1 and node.body[0] is expr
    kernel_touches = touches(launch.kernel)
    passed = {}
    for param in sorted(kernel_touches.pointers):
        value = launch.value(param)
        if value is None:
            default = launch.kernel.param(param).default if launch.kernel.param(param) else None
            text, root = (code(default).strip() if default is not None else "nothing"), None
        else:
            text, root = code(value).strip(), root_of(value)
        passed[param] = Passed(param, text, root, param in kernel_touches.reads, param in kernel_touches.writes)
    return Site(launch, node if alone else None, places[id(node)], passed, kernel_touches)


def host_functions(ms: ModuleSource) -> list[HostFunction]:
    """Every function of the module that launches a kernel, with its launch sites in source order."""
    if "host_functions" in ms.cache:
        return ms.cache["host_functions"]["all"]
    found: dict[int, HostFunction] = {}
    places: dict[int, dict[int, Path]] = {}
    for launch in ms.launches:
        scope = launch.scope
        if not isinstance(scope.node, cst.FunctionDef):
            continue
        if id(scope) not in found:
            found[id(scope)] = HostFunction(ms, scope)
            places[id(scope)] = paths(scope)
        site = _site(ms, launch, places[id(scope)])
        if site is not None:
            found[id(scope)].sites.append(site)
    ms.cache["host_functions"] = {"all": list(found.values())}
    return ms.cache["host_functions"]["all"]
