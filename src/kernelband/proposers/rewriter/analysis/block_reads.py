"""How a kernel reads a block size B and its blocks' offsets: B only as a block's extent (a tl.arange extent, a
tile's shape, a block pointer's block shape, a hint, the factor of a block offset `i * B`), and a block's offset
(`start`, `i * B`, a while loop's `s`, times any scale) only as the offset of its lanes: added to
`tl.arange(0, B)` at the same scale, compared as such (`start + lanes < n`, `lanes < n - i * B`), a block
pointer's offset, or compared with a number it passes on every block (`i >= 0`). Anything else (`B * x`,
`start // B`, `start == 0`) makes the result depend on how the row is split."""

from __future__ import annotations

import ast
import re

from kernelband.proposers.rewriter.analysis.loops import Loop
from kernelband.proposers.rewriter.analysis.padding import HINTS, Padding, broadcast_subscript, key
from kernelband.proposers.rewriter.analysis.values import factors, is_call, marker_arg, method_name, tl_name


class BlockReads:
    """The reads of B and of the blocks' offsets of `loops`, the loops that step by B."""

    def __init__(self, name: str, param: str, loops: list[Loop], padding: Padding) -> None:
        self.name, self.param, self.loops, self.padding = name, param, loops, padding

    def why(self, tree: ast.AST) -> str:
        """Why a canonical value reads B or a block's offset otherwise ("" where it does not)."""
        name, param = self.name, self.param
        parents = {id(c): p for p in ast.walk(tree) for c in ast.iter_child_nodes(p)}
        cdiv = {loop.var for loop in self.loops if loop.form == "cdiv"}
        for node in ast.walk(tree):
            if isinstance(node, ast.Name) and node.id == param and not self._extent(node, parents):
                top = _product(node, parents)
                if not any(is_call(f, "__loop") and marker_arg(f) in cdiv for f in factors(top)):
                    return f"{name}'s {param} enters its arithmetic ({_short(parents.get(id(node), node))}), " \
                           "not only a block's extent"
            offset = self._offset_at(node, parents, cdiv)
            if offset is not None and not self._lane_offset(offset, parents):
                return (f"{name} reads the offset of a block of {param} other than as its lanes' offset "
                        f"({_short(parents.get(id(offset), offset))})")
        return ""

    def _extent(self, node: ast.Name, parents: dict) -> bool:
        parent = parents.get(id(node))
        if is_call(parent, "__arange") and len(parent.args) == 2 and parent.args[1] is node:
            return True
        if tl_name(parent) in HINTS and parent.args[1:2] == [node]:
            return True
        if isinstance(parent, ast.Tuple | ast.List):
            holder = parents.get(id(parent))
            if isinstance(holder, ast.keyword):
                return holder.arg in ("shape", "block_shape") and tl_name(parents.get(id(holder))) in (
                    "zeros", "full", "empty", "make_block_ptr", "make_tensor_descriptor", "broadcast_to")
            shape_at = {"zeros": 0, "full": 0, "empty": 0, "make_block_ptr": 4, "make_tensor_descriptor": 3,
                        "broadcast_to": 1}
            position = shape_at.get(tl_name(holder))
            return position is not None and holder.args[position:position + 1] == [parent]
        return False

    def _offset_at(self, node: ast.AST, parents: dict, cdiv: set) -> ast.AST | None:
        """The product where a block's offset is read, if `node` reads one: `start`, `i * B`, `s` (times any
        scale: `start * stride`)."""
        for loop in self.loops:
            if loop.form in ("range", "cdiv") and is_call(node, "__loop") and marker_arg(node) == loop.var \
                    or loop.form == "while" and is_call(node, "__var") and marker_arg(node) == loop.var:
                return _product(node, parents)
        return None

    def _lane_offset(self, offset: ast.AST, parents: dict) -> bool:
        """Whether a block offset (times the scale of its product) is added to the block's lanes at that scale:
        `start + tl.arange(0, B)`, `(start + cols) * stride`, `i * B * s + cols * s`, or compared as one; or
        is a block pointer's offset along B."""
        holder = parents.get(id(offset))
        if isinstance(holder, ast.Compare) and _every_block(holder):
            return True  # holds on every block, whatever its size
        parts = factors(offset)
        cdiv = any(is_call(f, "__loop") and loop.form == "cdiv" and marker_arg(f) == loop.var
                   for f in parts for loop in self.loops)
        if cdiv and not any(isinstance(f, ast.Name) and f.id == self.param for f in parts):
            return False  # a block's index read other than as its offset
        scale = sorted(key(f) for f in parts if not self._offset_factor(f))
        top = offset
        while True:
            parent = parents.get(id(top))
            if isinstance(parent, ast.BinOp) and isinstance(parent.op, ast.Add | ast.Sub) \
                    or isinstance(parent, ast.UnaryOp) and isinstance(parent.op, ast.USub) \
                    or isinstance(parent, ast.Subscript) and parent.value is top and broadcast_subscript(parent) \
                    or (tl_name(parent) in HINTS or tl_name(parent) == "cast") and parent.args[:1] == [top] \
                    or method_name(parent) == "to" and parent.func.value is top:
                top = parent
                continue
            break
        holder = parents.get(id(top))
        if isinstance(holder, ast.Tuple | ast.List):
            owner = parents.get(id(holder))
            if isinstance(owner, ast.keyword):
                owner = parents.get(id(owner)) if owner.arg == "offsets" else None
            elif tl_name(owner) == "make_block_ptr" and owner.args[3:4] != [holder]:
                owner = None
            if tl_name(owner) == "make_block_ptr":
                return True  # a block pointer's offset: its block_shape gives the lanes (padding.block_bounded)
        sides = [holder.left, *holder.comparators] if isinstance(holder, ast.Compare) else [top]
        for side in sides:
            counted, _ = self.padding.terms(side)
            for term in counted:
                pieces = term.split("*")
                if self.padding.lane in pieces and sorted(p for p in pieces if p != self.padding.lane) == scale:
                    return True
        return False

    def _offset_factor(self, node: ast.AST) -> bool:
        return is_call(node, "__loop") or is_call(node, "__var") or (isinstance(node, ast.Name)
                                                                      and node.id == self.param)


def _every_block(compare: ast.Compare) -> bool:
    """Whether a comparison of a block's offset (at least 0) with a number holds on every block: `start >= 0`."""
    if len(compare.ops) != 1:
        return False
    op, left, right = compare.ops[0], compare.left, compare.comparators[0]
    if isinstance(left, ast.Constant):
        op, right = {ast.LtE: ast.GtE(), ast.Lt: ast.Gt(), ast.GtE: ast.LtE(), ast.Gt: ast.Lt()}.get(type(op), op), left
    if not (isinstance(right, ast.Constant) and isinstance(right.value, int | float)):
        return False
    return (isinstance(op, ast.GtE) and right.value <= 0) or (isinstance(op, ast.Gt) and right.value < 0)


def _product(node: ast.AST, parents: dict) -> ast.AST:
    """The whole product a factor belongs to."""
    while isinstance(parents.get(id(node)), ast.BinOp) and isinstance(parents[id(node)].op, ast.Mult):
        node = parents[id(node)]
    return node


def readable(node: ast.AST) -> str:
    """A canonical value as a kernel would spell it: `k`, `acc`, `tl.program_id(0)`, `tl.arange(0, B)`."""
    text = ast.unparse(node)
    text = re.sub(r"__(?:loop|var)\('([^']*)'\)", r"\1", text)
    return re.sub(r"__(pid|nprog|arange)\(", lambda m: {"pid": "tl.program_id(", "nprog": "tl.num_programs(",
                                                        "arange": "tl.arange("}[m.group(1)], text)


def _short(node: ast.AST) -> str:
    text = readable(node)
    return text if len(text) <= 50 else text[:47] + "..."
