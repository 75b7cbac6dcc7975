"""A store's index read as a tile: one lane vector per dimension of the stored tile, each broadcast along its
own dimension (`x[:, None]`, `x[None, :]`) and scaled by a stride, however the kernel builds it (a pointer
tile assigned earlier, the lanes summed inside or outside the broadcast):

    p + (pid(0) * BM + tl.arange(0, BM))[:, None] * S + (pid(1) * BN + tl.arange(0, BN))[None, :]
    p + tl.arange(0, D)[None, :] * s1 + tl.arange(0, M)[:, None] * s0

Each dimension's lanes are a block of B lanes at a program's block offset (`pid(a) * B + tl.arange(0, B)`) or
at 0 (`tl.arange(0, B)`: one block spans that dimension); the mask, where there is one, bounds each dimension's
lanes (`lanes_d < n_d`, joined by &). Which elements of a tensor the store writes over the grid follows from
those facts and the launch's values (analysis/coverage.py).
"""

from __future__ import annotations

import ast
from dataclasses import dataclass

from kernelband.proposers.rewriter.analysis.values import add_terms, factors, is_call, tl_name


@dataclass(frozen=True, eq=False)
class TileDim:
    """One dimension of a stored tile: its lanes are pid(axis) * block + tl.arange(0, block) (axis None: at 0),
    scaled by stride, bounded by bound (None: unmasked)."""

    axis: int | None
    block: ast.expr
    stride: ast.expr
    bound: ast.expr | None


def _unwrapped(term: ast.expr) -> ast.expr:
    while isinstance(term, ast.Call) and (isinstance(term.func, ast.Attribute) and term.func.attr == "to"
                                          and tl_name(term) is None
                                          or tl_name(term) in ("multiple_of", "max_contiguous")) and term.args:
        term = term.func.value if tl_name(term) is None else term.args[0]
    return term


def _terms(node: ast.expr) -> list[ast.expr]:
    out = []
    for term in add_terms(_unwrapped(node)):
        term = _unwrapped(term)
        out.extend(_terms(term) if isinstance(term, ast.BinOp) and isinstance(term.op, ast.Add) else [term])
    return out


def _broadcast(node: ast.expr) -> tuple[ast.expr, int, int] | None:
    """(lanes, dimension, rank) of `lanes[None, :]`-style subscripts: one `:` among Nones."""
    if not isinstance(node, ast.Subscript) or not isinstance(node.slice, ast.Tuple):
        return None
    parts = node.slice.elts
    full = [i for i, p in enumerate(parts) if isinstance(p, ast.Slice) and p.lower is p.upper is p.step is None]
    if len(full) != 1 or not all(i in full or isinstance(p, ast.Constant) and p.value is None
                                 for i, p in enumerate(parts)):
        return None
    return node.value, full[0], len(parts)


def _lanes(node: ast.expr) -> tuple[int | None, ast.expr] | None:
    """(program axis or None, B) of `pid(a) * B + tl.arange(0, B)` or `tl.arange(0, B)`."""
    terms = _terms(node)
    aranges = [t for t in terms if is_call(t, "__arange")]
    rest = [t for t in terms if t not in aranges]
    if len(aranges) != 1 or not (isinstance(aranges[0].args[0], ast.Constant) and aranges[0].args[0].value == 0):
        return None
    block = aranges[0].args[1]
    if not rest:
        return None, block
    if len(rest) != 1:
        return None
    parts = [_unwrapped(f) for f in factors(_unwrapped(rest[0]))]
    pids = [f for f in parts if is_call(f, "__pid")]
    scale = [f for f in parts if not is_call(f, "__pid")]
    if len(pids) != 1 or len(scale) != 1 or ast.dump(scale[0]) != ast.dump(block) \
            or not isinstance(pids[0].args[0], ast.Constant):
        return None
    return pids[0].args[0].value, block


def _bounds(mask: ast.expr | None) -> dict[str, ast.expr] | None:
    """The bound of each lane expression a mask `a < n & b < m` compares (dumped lanes -> n); None for another
    mask."""
    if mask is None:
        return {}
    if isinstance(mask, ast.BinOp) and isinstance(mask.op, ast.BitAnd):
        left, right = _bounds(mask.left), _bounds(mask.right)
        return None if left is None or right is None else {**left, **right}
    if isinstance(mask, ast.Compare) and len(mask.ops) == 1 and isinstance(mask.ops[0], ast.Lt):
        bound = mask.comparators[0]
        if any(is_call(n, m) for n in ast.walk(bound) for m in ("__pid", "__arange", "__var", "__loop")):
            return None
        lanes = mask.left
        shaped = _broadcast(lanes)
        return {ast.dump(shaped[0] if shaped else lanes): bound}
    return None


def tile_index(address: ast.expr, mask: ast.expr | None, param: str) -> tuple[TileDim, ...] | str:
    """The dimensions of a store's index tile through `param`, or what of it is not such a tile."""
    terms = _terms(address)
    bases = [t for t in terms if isinstance(t, ast.Name) and t.id == param]
    if len(bases) != 1:
        return f"its address is not {param} plus an index"
    found: dict[int, tuple[ast.expr, ast.expr]] = {}
    rank = None
    for term in terms:
        if term is bases[0]:
            continue
        parts = factors(_unwrapped(term))
        shaped = [(i, b) for i, f in enumerate(parts) for b in [_broadcast(f)] if b is not None]
        if len(shaped) != 1:
            return f"the term {ast.unparse(term)} is not one dimension's lanes times a stride"
        i, (lanes, dim, size) = shaped[0]
        if rank not in (None, size) or dim in found:
            return f"the term {ast.unparse(term)} indexes a dimension another term indexes"
        rank = size
        others = parts[:i] + parts[i + 1:]
        stride = others[0] if len(others) == 1 else ast.Constant(1)
        if len(others) > 1:
            stride = others[0]
            for other in others[1:]:
                stride = ast.BinOp(stride, ast.Mult(), other)
        found[dim] = (lanes, stride)
    if rank is None or len(found) != rank:
        return "its index is not a tile with lanes along each of its dimensions"
    bounds = _bounds(mask)
    if bounds is None:
        return "its mask is not each dimension's lanes against a bound"
    dims = []
    for dim in range(rank):
        lanes, stride = found[dim]
        read = _lanes(lanes)
        if read is None:
            return f"the lanes {ast.unparse(lanes)} are not a block of lanes at a program's block offset"
        dims.append(TileDim(read[0], read[1], stride, bounds.pop(ast.dump(lanes), None)))
    if bounds:
        return "its mask bounds values other than its lanes"
    return tuple(dims)
