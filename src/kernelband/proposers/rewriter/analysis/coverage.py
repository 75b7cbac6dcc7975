"""Which elements of a tensor a launch's stores write: whether every program's store through a pointer parameter,
over the whole grid, reaches every element of the tensor the launch passes for it. Read from canonical forms
(analysis/values.py), whatever the source calls things:

    flat    offs = pid * B + tl.arange(0, B)           grid cdiv(n, B) on axis 0, n the tensor's numel
            tl.store(p + offs, v, mask=offs < n)        (or no mask, the grid's numerator the numel)
    rows    tl.store(p + row * S + cols, v,             grid rows on axis 0, the tensor's rows; S its row
                     mask=cols < n_cols)                 length; cols = tl.arange(0, B) with B >= n_cols
                                                         (next_power_of_2(n_cols) at the launch), or
            for c in range(0, n_cols, B):                cols = c + tl.arange(0, B) over column blocks
                tl.store(p + row * S + c + ..., ...)

`writes(kernel, param)` is the kernel's side, computed once per kernel and parameter: the parameter is only
written (no load, no atomic, no helper handed it), and each store to it that every program runs, in one of the
forms above. `HostTerms` reads host values where a statement sees them, each name by the assignment that
reaches it, so that two expressions of one value compare equal as text. `covers(...)` is the launch's side:
the launch's values and grid make a store's index set the tensor's elements.
"""

from __future__ import annotations

import ast
import re
from dataclasses import dataclass, field

import libcst as cst

from kernelband import pyast
from kernelband.proposers.rewriter.analysis.buffers import HostFunction, Site, fresh_call
from kernelband.proposers.rewriter.analysis.facts import facts_of
from kernelband.proposers.rewriter.analysis.host_flow import Path, Step, grid
from kernelband.proposers.rewriter.analysis.source import Kernel
from kernelband.proposers.rewriter.analysis.syntax import arg_of, assigned, code, dotted, subnodes
from kernelband.proposers.rewriter.analysis.tile_index import TileDim, tile_index
from kernelband.proposers.rewriter.analysis.values import (
    add_terms,
    factors,
    is_call,
    same,
    tl_name,
)


# -- the kernel's side ---------------------------------------------------------------------------------------
@dataclass(frozen=True, eq=False)
class Cover:
    """A store through the parameter that every program runs, in one of the module docstring's forms. Its
    expressions are canonical, in the kernel's parameters."""

    form: str  # "flat", "rows" or "tile"
    store: str  # its code, for reasons
    block: ast.expr  # B: the extent of its tl.arange
    bound: ast.expr | None  # flat: n of `offs < n`; rows: n_cols (the mask's bound or the loop's end)
    stride: ast.expr | None = None  # rows: S, what the row's program id is scaled by
    looped: bool = False  # rows: the columns walked by a loop over blocks
    tile: tuple[TileDim, ...] = ()  # tile: the stored tile's dimensions (analysis/tile_index.py)


@dataclass
class Written:
    """What a kernel does with one pointer parameter: `refusal` says why it is not only written, or why no
    store covers a tensor; else `covers` are the stores that may."""

    param: str
    covers: list[Cover] = field(default_factory=list)
    refusal: str | None = None


def writes(kernel: Kernel, param: str) -> Written:
    cache = kernel.ms.cache.setdefault("coverage", {})
    key = (kernel.name, param)
    if key not in cache:
        cache[key] = _writes(kernel, param)
    return cache[key]


def _writes(kernel: Kernel, param: str) -> Written:
    facts = facts_of(kernel)
    accesses = facts.accesses
    where = f"{param} in {kernel.name}"
    for access in accesses.loads:
        if param in access.bases:
            return Written(param, refusal=f"{where} is loaded (`{code(access.call).strip()}`): it is read")
    for call, bases in accesses.atomics:
        if param in bases:
            return Written(param, refusal=f"{where} takes an atomic (`{code(call).strip()}`): it is read")
    for access in accesses.all:
        if not access.bases:
            return Written(param, refusal=f"an access in {kernel.name} (`{code(access.call).strip()}`) reaches no "
                                          f"parameter: it may read {param}")
    for call in subnodes(kernel.node.body, cst.Call):
        if (dotted(call.func) or "") in kernel.ms.kernels and any(
                param in accesses.bases_of(a.value) for a in call.args):
            return Written(param, refusal=f"{where} is handed to the helper {dotted(call.func)}, which may read it")
    stores = [a for a in accesses.stores if param in a.bases]
    if not stores:
        return Written(param, refusal=f"{kernel.name} stores nothing to {param}")
    if subnodes(kernel.node.body, cst.Return):
        return Written(param, refusal=f"{kernel.name} may return early: a program may not reach its store to {param}")
    found, reasons = [], []
    for access in stores:
        cover, why = _cover(kernel, param, access)
        if cover is not None:
            found.append(cover)
        else:
            reasons.append(why)
    return Written(param, found) if found else Written(param, refusal=reasons[0])


def _placement(kernel: Kernel, call: cst.Call) -> tuple[cst.For | None, str]:
    """The loop a store's line sits in, where every program runs the line: the kernel body's top level, or
    the top level of one loop there. Else why not."""
    parents = kernel.ms.parents
    node: cst.CSTNode = call
    while not isinstance(node, cst.SimpleStatementLine | cst.SimpleStatementSuite):
        node = parents[id(node)]
    owner = parents[id(node)]  # a one-line `if c: tl.store(...)` holds its statement itself
    if isinstance(node, cst.SimpleStatementLine):
        owner = parents[id(owner)]
    if owner is kernel.node:
        return None, ""
    if isinstance(owner, cst.For) and parents[id(parents[id(owner)])] is kernel.node:
        return owner, ""
    kind = f"`{code(owner.test).strip()}`" if isinstance(owner, cst.If) else type(owner).__name__.lower()
    return None, f"the store `{code(call).strip()}` in {kernel.name} is under {kind}: not every program reaches it"


def _unwrapped(term: ast.expr) -> ast.expr:
    """A term less its casts (`pid.to(tl.int64)`) and hints (`tl.multiple_of(x, 16)`): the same integer."""
    while isinstance(term, ast.Call) and (
            isinstance(term.func, ast.Attribute) and term.func.attr == "to" and tl_name(term) is None
            or tl_name(term) in ("multiple_of", "max_contiguous")) and term.args:
        term = term.func.value if tl_name(term) is None else term.args[0]
    return term


def _flat_terms(node: ast.expr) -> list[ast.expr]:
    terms = []
    for term in add_terms(_unwrapped(node)):
        term = _unwrapped(term)
        terms.extend(add_terms(term) if isinstance(term, ast.BinOp) and isinstance(term.op, ast.Add) else [term])
    return terms


def _key(terms: list[ast.expr]) -> list[str]:
    return sorted(ast.dump(t) for t in terms)


def _cover(kernel: Kernel, param: str, access) -> tuple[Cover | None, str]:
    text = code(access.call).strip()
    if access.form != "pointer" or access.address is None:
        return None, f"the store `{text}` in {kernel.name} is not through pointer arithmetic the coverage reads"
    loop_node, why = _placement(kernel, access.call)
    if why:
        return None, why
    terms = _flat_terms(access.address)
    bases = [t for t in terms if isinstance(t, ast.Name) and t.id == param]
    rest = [t for t in terms if not (isinstance(t, ast.Name) and t.id == param)]
    aranges = [t for t in rest if is_call(t, "__arange")]
    pids = [t for t in rest if any(is_call(n, "__pid") for n in ast.walk(t))]
    others = [t for t in rest if t not in aranges and t not in pids]
    unread = f"the store `{text}` in {kernel.name} has an index the coverage does not read"
    if len(bases) != 1 or len(aranges) != 1 or len(pids) != 1 \
            or not same(aranges[0].args[0], ast.Constant(0)):
        if loop_node is None and len(bases) == 1 and len(pids) == 1 == len(rest) and not aranges \
                and is_call(_unwrapped(pids[0]), "__pid") and same(_unwrapped(pids[0]).args[0], ast.Constant(0)):
            bound = _bound(access.mask, rest)  # one element a program: a flat block of 1
            if bound is False:
                return None, _masked(kernel, text, access.call)
            return Cover("flat", text, ast.Constant(1), bound), ""
        tile = tile_index(access.address, access.mask, param) if loop_node is None else ""
        if isinstance(tile, tuple) and len(tile) == 2:  # a 2-D tile of lanes, each dimension its own
            return Cover("tile", text, tile[0].block, None, tile=tile), ""
        return None, f"{unread}: not {param} + program id * S + tl.arange(0, B)"
    block = aranges[0].args[1]
    pid_factors = [_unwrapped(f) for f in factors(_unwrapped(pids[0]))]
    program = [f for f in pid_factors if is_call(f, "__pid")]
    scale = [f for f in pid_factors if not is_call(f, "__pid")]
    if len(program) != 1 or not same(program[0].args[0], ast.Constant(0)) or len(scale) != 1 \
            or any(is_call(n, "__pid") for n in ast.walk(scale[0])):
        return None, f"{unread}: its program id term is not tl.program_id(0) * S"
    mask = access.mask
    if loop_node is None and not others and same(scale[0], block):
        bound = _bound(mask, rest)
        if bound is False:
            return None, _masked(kernel, text, access.call)
        return Cover("flat", text, block, bound), ""
    # rows: the row's program id scaled by the row length, the columns a block or a loop over blocks
    if loop_node is None:
        if others:
            return None, f"{unread}: the terms {', '.join(ast.unparse(t) for t in others)}"
        bound = _bound(mask, aranges)
        if bound is False:
            return None, _masked(kernel, text, access.call)
        return Cover("rows", text, block, bound, scale[0]), ""
    loop = facts_of(kernel).loops.of(loop_node)
    if loop is None or loop.var is None or loop.exits or loop.form not in ("range", "cdiv"):
        return None, f"the store `{text}` in {kernel.name} is in a loop that is not a counted loop over columns"
    marker = ast.Call(ast.Name("__loop"), [ast.Constant(loop.var)], [])
    column = marker if loop.form == "range" else ast.BinOp(marker, ast.Mult(), block)
    fits = loop.form == "cdiv" or same(loop.start, ast.Constant(0)) and same(loop.step, block)
    if len(others) != 1 or not (same(others[0], column) or loop.form == "cdiv" and _key(factors(others[0])) == _key(
            factors(column))) or not fits:
        return None, f"{unread}: its columns are not `start + tl.arange(0, B)` over range(0, n_cols, B)"
    bound = _bound(mask, [others[0], aranges[0]])
    if bound is False or bound is not None and not same(bound, loop.end):
        return None, _masked(kernel, text, access.call)
    return Cover("rows", text, block, loop.end, scale[0], looped=True), ""


def _bound(mask: ast.expr | None, index: list[ast.expr]) -> ast.expr | None | bool:
    """n for a mask `index < n` (None for no mask); False for any other mask."""
    if mask is None:
        return None
    if isinstance(mask, ast.Compare) and len(mask.ops) == 1 and isinstance(mask.ops[0], ast.Lt) \
            and _key(_flat_terms(mask.left)) == _key(index) \
            and not any(is_call(n, m) for n in ast.walk(mask.comparators[0]) for m in ("__pid", "__arange", "__var")) \
            and not any(tl_name(n) for n in ast.walk(mask.comparators[0])):
        return mask.comparators[0]
    return False


def _masked(kernel: Kernel, text: str, call: cst.Call) -> str:
    mask = arg_of(call, 2, "mask")
    return (f"the store `{text}` in {kernel.name} is masked by `{code(mask).strip() if mask else ''}`, not by its "
            "index against a bound: the elements it leaves keep their zeros")


# -- host values ---------------------------------------------------------------------------------------------
class HostTerms:
    """Host expressions of one function as text in which every name stands for the value that reaches it:
    `n` after `n = x.numel()` reads `x.numel()`; a tensor a call allocates (assigned once) keeps its name; a
    name set by a compound statement or several times in a way that cannot be followed reads as a token of its
    own, equal to nothing else. `x.size(0)` reads as `x.shape[0]`, `x.nelement()` as `x.numel()`."""

    def __init__(self, hf: HostFunction, places: dict[int, Path]) -> None:
        self.hf, self.places = hf, places

    def at(self, node: cst.BaseExpression | ast.expr | str, path: Path, depth: int = 0) -> str:
        tree = node if isinstance(node, ast.expr) else pyast.parse(
            f"({node if isinstance(node, str) else code(node).strip()})", mode="eval").body
        return ast.unparse(self._tree(tree, path, depth))

    def _tree(self, tree: ast.expr, path: Path, depth: int) -> ast.expr:
        terms = self

        class Resolve(ast.NodeTransformer):
            def visit_Name(self, name: ast.Name) -> ast.AST:
                return terms._name(name.id, path, depth)

            def visit_Call(self, call: ast.Call) -> ast.AST:
                self.generic_visit(call)
                if isinstance(call.func, ast.Attribute) and call.func.attr == "size" and not call.keywords:
                    if not call.args:
                        return ast.Attribute(call.func.value, "shape")
                    if len(call.args) == 1:
                        return ast.Subscript(ast.Attribute(call.func.value, "shape"), call.args[0])
                if isinstance(call.func, ast.Attribute) and call.func.attr == "nelement" and not call.args:
                    call.func.attr = "numel"
                return call

        return Resolve().visit(tree)

    def _name(self, name: str, path: Path, depth: int) -> ast.expr:
        if name not in self.hf.scope.assigns:
            return ast.Name(name)
        if any(isinstance(step.owner, cst.For | cst.With) and name in assigned(
                step.owner.target if isinstance(step.owner, cst.For) else step.owner.items[0]) for step in path):
            return ast.Name(f"__opaque_{name}")
        for level in range(len(path) - 1, -1, -1):
            step = path[level]
            for index in range(step.index - 1, -1, -1):
                statement = step.block[index]
                if name not in assigned(statement):
                    continue
                small = statement.body[0] if isinstance(statement, cst.SimpleStatementLine) \
                    and len(statement.body) == 1 else None
                where = path[:level] + (Step(step.owner, step.part, step.block, index),)
                if isinstance(small, cst.Assign) and len(small.targets) == 1 and depth <= 12:
                    part = self._unpacked(small, name, where, depth)
                    if part is not None:
                        return part
                if not (isinstance(small, cst.Assign) and len(small.targets) == 1
                        and isinstance(small.targets[0].target, cst.Name)) or depth > 12:
                    return ast.Name(f"__opaque_{name}_{id(statement)}")
                if fresh_call(small.value):  # a tensor: its name, where one allocation is the only value it takes
                    once = len(self.hf.scope.assigns[name]) == 1
                    return ast.Name(name if once else f"__opaque_{name}_{id(statement)}")
                value = pyast.parse(f"({code(small.value).strip()})", mode="eval").body
                return self._tree(value, where, depth + 1)
        return ast.Name(name)  # a parameter or a global, which no statement before this one sets

    def _unpacked(self, small: cst.Assign, name: str, where: Path, depth: int) -> ast.expr | None:
        """Item i of what `a, b = value` unpacks, for `name` at place i: `x.shape[i]` where the value is a
        tensor's shape (the unpacking states its rank), the item where the value is a tuple."""
        target = small.targets[0].target
        if not isinstance(target, cst.Tuple | cst.List) or not all(
                isinstance(e.value, cst.Name) and not isinstance(e, cst.StarredElement) for e in target.elements):
            return None
        names = [e.value.value for e in target.elements]
        if names.count(name) != 1:
            return None
        i = names.index(name)
        value = self._tree(pyast.parse(f"({code(small.value).strip()})", mode="eval").body, where, depth + 1)
        if isinstance(value, ast.Tuple) and len(value.elts) == len(names):
            return value.elts[i]
        if isinstance(value, ast.Attribute) and value.attr == "shape":
            return ast.Subscript(value, ast.Constant(i))
        return None


def readable(text: str) -> str:
    """Host text as a reason shows it: a token stands for its name again."""
    text = re.sub(r"__opaque_([A-Za-z_]\w*?)(_\d+)?\b", r"\1", text)
    return re.sub(r"__meta_(\w+)", r'meta["\1"]', text)


# -- the launch's side ---------------------------------------------------------------------------------------
@dataclass(frozen=True)
class Tensor:
    """What the host knows of a buffer's elements, as `HostTerms` text: its numel (several spellings), its
    exact dimensions where the allocation states them, and whether it is row-major contiguous."""

    name: str
    numel: frozenset[str]
    dims: tuple[str, ...] | None
    contiguous: bool


def covers(hf: HostFunction, terms: HostTerms, site: Site, param: str, tensor: Tensor) -> str | None:
    """None where the launch's stores through `param` write every element of `tensor`, else the missing fact."""
    why = _covers(hf, terms, site, param, tensor)
    return readable(why) if why is not None else None


def _covers(hf: HostFunction, terms: HostTerms, site: Site, param: str, tensor: Tensor) -> str | None:
    written = writes(site.kernel, param)
    if written.refusal is not None:
        return written.refusal
    dims, why = _grid(hf, terms, site)
    if dims is None:
        return why
    reasons = []
    for cover in written.covers:
        check = {"flat": _flat, "rows": _rows, "tile": _tile}[cover.form]
        why = check(terms, site, cover, dims, tensor)
        if why is None:
            return None
        reasons.append(why)
    return reasons[0]


def _grid(hf: HostFunction, terms: HostTerms, site: Site) -> tuple[list[str] | None, str]:
    launch = site.launch
    if launch.meta_grid is not None:  # a block size the autotuner picks reads as the same token in both places
        meta, body = launch.meta_grid
        if not isinstance(body, cst.Tuple | cst.List):
            return None, f"the grid of the {site.where} is not a tuple"
        text = [code(e.value).strip() for e in body.elements]
        tree = [pyast.parse(f"({t})", mode="eval").body for t in text]
        for i, dim in enumerate(tree):
            tree[i] = _MetaKeys(meta, lambda key: _value(terms, site, key)).visit(dim)
        return [terms.at(t, site.path) for t in tree], ""
    found, why = grid(launch, site.path)
    if found is None:
        return None, why
    return [terms.at(t, site.path) for t in found], ""


class _MetaKeys(ast.NodeTransformer):
    def __init__(self, meta: str, value) -> None:
        self.meta, self.value = meta, value

    def visit_Subscript(self, node: ast.Subscript) -> ast.AST:
        if isinstance(node.value, ast.Name) and node.value.id == self.meta and isinstance(node.slice, ast.Constant):
            return pyast.parse(f"({self.value(node.slice.value) or '__unknown'})", mode="eval").body
        return self.generic_visit(node)


def _value(terms: HostTerms, site: Site, param: str) -> str | None:
    """What the launch passes as a kernel parameter, as host text; a block size an autotuner or a heuristic
    picks reads as `__meta_NAME`."""
    launch = site.launch
    arg = launch.arg(param)
    if arg is not None:
        return terms.at(arg.value, site.path)
    if launch.kernel.autotune is not None or launch.kernel.heuristics:
        return f"__meta_{param}"
    declared = launch.kernel.param(param)
    return terms.at(declared.default, site.path) if declared is not None and declared.default is not None else None


def _at_launch(terms: HostTerms, site: Site, expression: ast.expr) -> str | None:
    """A canonical kernel expression of parameters and constants as the launch's host text."""
    params = {p.name for p in site.kernel.params}
    unknown = []

    class Substitute(ast.NodeTransformer):
        def visit_Name(self, name: ast.Name) -> ast.AST:
            value = _value(terms, site, name.id) if name.id in params else None
            if value is None:
                unknown.append(name.id)
                return name
            return pyast.parse(f"({value})", mode="eval").body

        def visit_Call(self, call: ast.Call) -> ast.AST:
            unknown.append(ast.unparse(call))
            return call

    text = ast.unparse(Substitute().visit(pyast.parse(ast.unparse(expression), mode="eval").body))
    return None if unknown else text


def _ceil_division(text: str) -> tuple[str, str] | None:
    """(a, b) of a grid dimension `cdiv(a, b)` or `(a + b - 1) // b`."""
    node = pyast.parse(text, mode="eval").body
    if isinstance(node, ast.Call) and ast.unparse(node.func).rpartition(".")[2] == "cdiv" and len(node.args) == 2:
        return ast.unparse(node.args[0]), ast.unparse(node.args[1])
    if isinstance(node, ast.BinOp) and isinstance(node.op, ast.FloorDiv) and isinstance(node.left, ast.BinOp) \
            and isinstance(node.left.op, ast.Sub) and ast.unparse(node.left.right) == "1" \
            and isinstance(node.left.left, ast.BinOp) and isinstance(node.left.left.op, ast.Add) \
            and ast.unparse(node.left.left.right) == ast.unparse(node.right):
        return ast.unparse(node.left.left.left), ast.unparse(node.right)
    return None


def _one_program_elsewhere(dims: list[str]) -> bool:
    return all(d == "1" for d in dims[1:])


def _flat(terms: HostTerms, site: Site, cover: Cover, dims: list[str], tensor: Tensor) -> str | None:
    where = f"the {site.where}"
    block = _at_launch(terms, site, cover.block)
    division = _ceil_division(dims[0]) if dims else None
    if block == "1" and dims and division is None:  # one element a program: the grid counts the elements
        division = (dims[0], "1")
    if not _one_program_elsewhere(dims):
        return f"{where} has a grid of more than one axis ({', '.join(dims)}): its store covers axis 0 only"
    if division is None or block is None or division[1] != block:
        return f"{where} has a grid ({dims[0]}) that is not cdiv(n, {block or ast.unparse(cover.block)}): its " \
               "programs' blocks may not reach every element"
    bound = _at_launch(terms, site, cover.bound) if cover.bound is not None else None
    if cover.bound is not None and bound not in tensor.numel:
        return f"{where} bounds its store by {bound or ast.unparse(cover.bound)}, which is not the numel of " \
               f"{tensor.name} ({' or '.join(sorted(tensor.numel))}): the elements past it keep their zeros"
    if division[0] not in tensor.numel and division[0] != bound:
        return f"{where} has a grid of cdiv({division[0]}, {division[1]}) programs, which does not reach the " \
               f"numel of {tensor.name} ({' or '.join(sorted(tensor.numel))})"
    return None


def _rows(terms: HostTerms, site: Site, cover: Cover, dims: list[str], tensor: Tensor) -> str | None:
    where = f"the {site.where}"
    if tensor.dims is None or len(tensor.dims) != 2 or not tensor.contiguous:
        return f"{tensor.name} is not allocated with two stated dimensions, row-major: the rows of {where} may " \
               "not be its rows"
    rows = {tensor.dims[0], f"{tensor.name}.shape[0]"}
    cols = {tensor.dims[1], f"{tensor.name}.shape[1]", f"{tensor.name}.shape[-1]"}
    if not dims or dims[0] not in rows or not _one_program_elsewhere(dims):
        return f"{where} has a grid ({', '.join(dims)}) that is not one program per row of {tensor.name} " \
               f"({tensor.dims[0]})"
    stride = _at_launch(terms, site, cover.stride)
    if stride not in cols | {f"{tensor.name}.stride(0)"}:
        return f"{where} passes a row stride ({stride}) that is not the row length of {tensor.name}"
    block = _at_launch(terms, site, cover.block)
    width = _at_launch(terms, site, cover.bound) if cover.bound is not None else block
    if width not in cols:
        return f"{where} bounds its columns by {width}, which is not the row length of {tensor.name} " \
               f"({tensor.dims[1]}): the columns past it keep their zeros"
    if cover.looped or block == width:
        return None
    tree = pyast.parse(block or "None", mode="eval").body
    if isinstance(tree, ast.Call) and ast.unparse(tree.func) == "max":  # max(next_power_of_2(n), 16) >= n
        tree = next((a for a in tree.args if isinstance(a, ast.Call)), tree)
    if isinstance(tree, ast.Call) and ast.unparse(tree.func).rpartition(".")[2] == "next_power_of_2" \
            and len(tree.args) == 1 and ast.unparse(tree.args[0]) == width:
        return None
    return f"{where} passes a block ({block}) not known to be at least the row length {width}: one block may " \
           "not reach every column"


def _tile(terms: HostTerms, site: Site, cover: Cover, dims: list[str], tensor: Tensor) -> str | None:
    """A 2-D tile's dimensions, each along one of the tensor's (its stride the row length, or 1), each spanning
    its extent: a program axis of cdiv(extent, B) programs with the lanes bounded by the extent, or one block of
    lanes at 0 as long as the extent (bounded by it where longer)."""
    where = f"the {site.where}"
    if tensor.dims is None or len(tensor.dims) != 2 or not tensor.contiguous:
        return f"{tensor.name} is not allocated with two stated dimensions, row-major: the tile of {where} may " \
               "not be its elements"
    cols = {tensor.dims[1], f"{tensor.name}.shape[1]", f"{tensor.name}.shape[-1]", f"{tensor.name}.stride(0)"}
    extents = ({tensor.dims[0], f"{tensor.name}.shape[0]"}, cols - {f"{tensor.name}.stride(0)"})
    along: dict[int, TileDim] = {}
    for dim in cover.tile:
        stride = _at_launch(terms, site, dim.stride)
        axis = 0 if stride in cols else 1 if stride in ("1", f"{tensor.name}.stride(1)") else None
        if stride is None:
            return f"{where} scales a dimension of its stored tile by {ast.unparse(dim.stride)}, whose value at the " \
                   "launch the coverage does not read"
        if axis is None or axis in along:
            return f"{where} scales a dimension of its stored tile by {stride}, which is not a stride of {tensor.name}"
        along[axis] = dim
    used = {dim.axis for dim in cover.tile if dim.axis is not None}
    if any(d != "1" for i, d in enumerate(dims) if i not in used):
        return f"{where} has a grid ({', '.join(dims)}) with programs along an axis its store does not tile"
    for axis, dim in along.items():
        block = _at_launch(terms, site, dim.block)
        bound = _at_launch(terms, site, dim.bound) if dim.bound is not None else None
        extent = extents[axis]
        if dim.axis is None:
            if block in extent and bound in extent | {None}:
                continue
            width = bound if bound in extent else None
            tree = pyast.parse(block or "None", mode="eval").body
            if width is not None and isinstance(tree, ast.Call) \
                    and ast.unparse(tree.func).rpartition(".")[2] == "next_power_of_2" and len(tree.args) == 1 \
                    and ast.unparse(tree.args[0]) in extent:
                continue
            return f"{where} stores one block of {block} lanes along dimension {axis} of {tensor.name}, not known " \
                   f"to span its {tensor.dims[axis]} elements"
        count = dims[dim.axis] if dim.axis < len(dims) else "1"
        division = _ceil_division(count)
        if bound is None:
            return f"{where} stores dimension {axis} of {tensor.name} unmasked over {count} programs of {block}: " \
                   f"they write every element only where {block} divides {tensor.dims[axis]}"
        if bound not in extent or division is None or division[1] != block or division[0] not in extent:
            return f"{where} has {count} programs of {block} along dimension {axis} of {tensor.name}, bounded by " \
                   f"{bound}: not cdiv({tensor.dims[axis]}, {block})"
    return None
