"""The extent a row's reductions reduce (the row block), read by meaning rather than spelling: whatever the
source writes (`tl.arange(0, BLOCK_SIZE)` with BLOCK_SIZE a constexpr parameter, `tl.arange(0, 1024)`, a local
bound once to 1024, a module constant `BLOCK = 1024`, `2 * HALF` of module constants), the shapes analysis
spells the reduced dimension one way (`dim`), and this fact says what sets its value:

* a constexpr parameter: the launch (or the autotuner, or a heuristic) passes it;
* an integer the source fixes (`KernelValues.integer`): no launch can change it, so a rewrite may write the
  integer itself wherever it needs the block's size, in the kernel or on the host;
* an expression of constexpr parameters (`2 * HALF`, HALF a parameter): the kernel knows it at compile time,
  the host does not compute it;
* otherwise the block's size is not known to any rewrite, and the refusal names that fact.

It also holds what the row block's size must not do for a chunked twin to walk it, for blocks that are not a
parameter (a parameter's roles say the same): a loop that steps by it (the row is then longer than the block,
walked in blocks already) and a call whose result depends on its extent (a reshape, a scan, a sort).
"""

from __future__ import annotations

import ast
from dataclasses import dataclass

from kernelband import pyast
from kernelband.proposers.rewriter.analysis.reductions import BlockReduction
from kernelband.proposers.rewriter.analysis.roles import SHAPE_DEPENDENT, Roles
from kernelband.proposers.rewriter.analysis.shapes import SCANS, Shapes
from kernelband.proposers.rewriter.analysis.syntax import code
from kernelband.proposers.rewriter.analysis.values import KernelValues, method_name, names_in, tl_name


@dataclass(frozen=True)
class RowExtent:
    """The row block: `dim`, as shapes spell it; `param`, the constexpr parameter it is (where it is one);
    `fixed`, the integer the source fixes it to (where it does); else an expression of constexpr parameters."""

    dim: str
    param: str | None = None
    fixed: int | None = None

    @property
    def size(self) -> str:
        """Code of the block's size inside the kernel: the parameter, the integer, or the expression."""
        if self.param is not None:
            return self.param
        return str(self.fixed) if self.fixed is not None else f"({self.dim})"


class RowExtents:
    """The row block of each set of row reductions a rewrite asks about (each computed once)."""

    def __init__(self, values: KernelValues, shapes: Shapes, roles: Roles) -> None:
        self.values, self.shapes, self.roles = values, shapes, roles
        self.kernel = values.kernel
        self._of: dict[str | None, RowExtent | str] = {}

    def of(self, reductions: list[BlockReduction]) -> RowExtent | str:
        """The one extent these reductions reduce, with what sets its value; or the fact that is missing."""
        name = self.kernel.name
        unknown = [r for r in reductions if r.dim is None]
        if unknown:
            return f"{name}'s {code(unknown[0].call)} reduces an extent its shape does not say (a tile of more " \
                   f"than one dimension reduced whole, or an axis that is not a literal)"
        dims = list(dict.fromkeys(r.dim for r in reductions))
        if len(dims) != 1:
            return f"{name} reduces its rows over more than one extent ({', '.join(dims) or 'none'}): no one row block"
        if dims[0] not in self._of:
            self._of[dims[0]] = self._extent(dims[0])
        return self._of[dims[0]]

    def _extent(self, dim: str) -> RowExtent | str:
        name = self.kernel.name
        param = self.kernel.param(dim)
        if param is not None and param.constexpr:
            return RowExtent(dim, param=dim)
        node = pyast.parse(dim, mode="eval").body
        fixed = self.values.integer(node)
        constexprs = set(self.values.constexpr_names)
        if fixed is None and names_in(node) and names_in(node) <= constexprs \
                and all(isinstance(n, ast.Name | ast.BinOp | ast.Constant | ast.operator | ast.expr_context)
                        for n in ast.walk(node)):
            return RowExtent(dim)
        if fixed is None:
            return f"{name}'s row block {dim} is neither a constexpr parameter nor an integer the source fixes " \
                   f"(its size is known to no launch and no rewrite)"
        if fixed <= 0 or fixed & (fixed - 1):
            return f"{name}'s row block {dim} is {fixed}, not a power of two (no chunk of a power of two divides it)"
        return RowExtent(dim, fixed=fixed)

    def steps(self, extent: RowExtent) -> bool:
        """Whether a loop advances by the row block (its step, or the divisor of its block count)."""
        for loop in self.roles.loops.all:
            if loop.step is not None and self._is(loop.step, extent):
                return True
            if loop.form == "cdiv":
                divisor = self.values.expand(loop.node.iter.args[-1].value)
                if isinstance(divisor, ast.Call) and len(divisor.args) == 2 and self._is(divisor.args[1], extent):
                    return True
        return False

    def shaped(self, extent: RowExtent) -> str | None:
        """A tl call whose result depends on the row block's extent (a reshape, a scan along it, a sort)."""
        for expression in self.roles.expressions:
            for node in ast.walk(expression):
                call = tl_name(node) or method_name(node)
                if call not in SHAPE_DEPENDENT or not (node.args or method_name(node)):
                    continue
                dims = list(self.shapes.of(node.args[0] if tl_name(node) else node.func.value) or ())
                if call in SCANS and dims:  # a scan depends on the extent of the axis it runs along only
                    axis = next((k.value for k in node.keywords if k.arg == "axis"),
                                node.args[1] if tl_name(node) and len(node.args) > 1 else ast.Constant(0))
                    if isinstance(axis, ast.Constant) and isinstance(axis.value, int) \
                            and -len(dims) <= axis.value < len(dims):
                        dims = [dims[axis.value]]
                if extent.dim in dims:
                    return call
        return None

    def _is(self, node: ast.expr, extent: RowExtent) -> bool:
        if ast.unparse(node) == extent.dim:
            return True
        return extent.fixed is not None and not names_in(node) & self.values.param_names \
            and self.values.integer(node) == extent.fixed
