"""The `rows` rewrite: each program does the work of R consecutive programs of the first grid axis at once,
as a leading axis of its tensors.

`coarsen` runs R programs' bodies one after another; `rows` runs them side by side:

                                            rows_pid = tl.program_id(0) * ROWS + tl.arange(0, ROWS)[:, None]
                                            rows_mask = rows_pid < n_programs
    pid = tl.program_id(0)            ->    pid = rows_pid
    x = tl.load(p + pid * n + offs, m)      x = tl.load(p + pid * n + offs, (m) & rows_mask)
    s = tl.sum(x, axis=0)                   s = tl.sum(x, axis=1, keep_dims=True)

Every value computed from the program number gains a leading axis of ROWS, and Triton broadcasts it
against the rest. The loads of the R rows are issued together, where `coarsen`'s loop makes each pass's
loads wait for the stores before them (the compiler cannot prove that they do not overlap). That matters
for kernels of one short row per program: dequantize_rowwise starts 524,288 programs of 128 bytes each,
and an H200 starts about 1.6 programs per nanosecond, whatever each one does.

Launches change as for `coarsen`: the grid's first axis is divided by R, and `n_programs` (the old first
axis) and `ROWS` are passed (`coarsen.launch_obstacle` says when they cannot be). The kernel changes only
where the meaning is certain:
- the body is straight-line: no loop, branch, conditional expression, `and`/`or` or subscript (every read
  of `tl.program_id(0)` becomes `rows_pid`, defined before the first);
- every call is one of triton.language's element-wise functions, creators, `tl.load`/`tl.store` or
  reductions (`ELEMENTWISE`, `REDUCTIONS`), a library function (`libdevice.tanh`, or `tanh` imported from
  `triton.language.extra`), a tensor's `.to`, or `float`/`int` of a constant;
- tensors start with one axis at most: `tl.zeros`/`tl.full` of a one-element shape;
- a reduction of a value computed from the program number reduces its whole (no axis, or axis 0);
- every store writes through an address computed from the program number.

R multiplies the elements each thread holds, so R is capped where that would pass `MAX_PER_THREAD`: at the
rewrite where the launch's block sizes and `num_warps` are numbers, otherwise by code evaluated at the
launch (`_factor_at`).
"""

from __future__ import annotations

import math
from collections import Counter

import libcst as cst

from kernelband.proposers.rewriter.analysis.knobs import MAX_PER_THREAD
from kernelband.proposers.rewriter.analysis.source import (
    Kernel,
    Launch,
    ModuleSource,
    launch_value,
    tile_terms,
)
from kernelband.proposers.rewriter.analysis.syntax import (
    code,
    contains,
    dotted,
    fresh_name,
    int_value,
    loads,
    subnodes,
)
from kernelband.proposers.rewriter.edits import Edit, Found, statements
from kernelband.proposers.rewriter.rewrites.coarsen import added_params, first_axis_variants

FACTORS = (4, 16)
ELEMENTWISE = frozenset({
    "program_id", "arange", "load", "store", "zeros", "full", "where", "exp", "exp2", "log", "log2", "sqrt",
    "sqrt_rn", "rsqrt", "abs", "maximum", "minimum", "clamp", "sigmoid", "sin", "cos", "erf", "floor", "ceil",
    "fma", "fdiv", "div_rn", "umulhi", "cdiv", "rand", "randn", "randint", "cast", "static_assert",
    "static_print", "device_print",
})  # not tl.multiple_of / tl.max_contiguous: their values give one per axis, and rows adds an axis
REDUCTIONS = frozenset({"sum", "max", "min", "argmax", "argmin", "xor_sum"})
METHODS = frozenset({"to"})
MASK_POSITION = {"load": 1, "store": 2}  # tl.load(pointer, mask, ...), tl.store(pointer, value, mask, ...)


def rows(ms: ModuleSource) -> Found:
    library = _library(ms.module)

    def names(used: set[str]) -> dict[str, str]:
        return {"n": fresh_name("n_programs", used), "c": fresh_name("ROWS", used),
                "pid": fresh_name("rows_pid", used), "mask": fresh_name("rows_mask", used)}

    def kernel_edit(kernel: Kernel):
        plan = _Plan.of(kernel, library)
        return plan if isinstance(plan, str) else plan.kernel_edit

    return first_axis_variants(ms, "rows", FACTORS, names, kernel_edit, "consecutive programs side by side in "
                               "each program of", factor_at=lambda launch, factor: _factor_at(ms, launch, factor),
                               at_run_time=f" (fewer where a thread would hold over {MAX_PER_THREAD} elements, "
                                           "set at the launch from its block sizes)",
                               none_fits=f"no number of rows fits (a thread would hold over {MAX_PER_THREAD} elements)")


def _factor_at(ms: ModuleSource, launch: Launch, factor: int) -> int | str | None:
    """What the launch passes for R = `factor`: the largest power of two up to `factor` that keeps at most
    MAX_PER_THREAD elements a thread (R tiles over 32 x num_warps threads; `tile_terms`). A number where the
    tile and num_warps are numbers (None when under 2: nothing side by side); otherwise code that works it
    out at the launch. A kernel whose tile cannot be read at the launch gets `factor` as it is."""
    terms = tile_terms(ms, launch)
    if terms is None:
        return factor
    given = launch.kwarg("num_warps")
    warps = 4 if given is None else launch_value(ms, launch, given.value)  # Triton's default
    if all(isinstance(t, int) for t in [*terms, warps]):
        bound = MAX_PER_THREAD * 32 * warps // max(1, math.prod(terms))
        return min(factor, 1 << (bound.bit_length() - 1)) if bound >= 2 else None
    threads = (MAX_PER_THREAD * 32 * warps if isinstance(warps, int)
               else f"{MAX_PER_THREAD * 32} * {_parenthesized(warps)}")
    tile = " * ".join(map(_parenthesized, terms)) if len(terms) > 1 else str(terms[0])
    return f"min({factor}, 1 << max(0, int({threads} // ({tile})).bit_length() - 1))"


def _parenthesized(term: int | str) -> str:
    """A term of a product, in parentheses unless it is a number or a name."""
    return str(term) if isinstance(term, int) or term.isidentifier() else f"({term})"


class _Plan:
    """What changes in one kernel: the statement that takes the program number, the masked accesses and
    the reductions that keep a row axis."""

    def __init__(self, kernel: Kernel, at: int, accesses: dict[int, str], reductions: set[int]):
        self.kernel, self.at = kernel, at  # `at`: the first statement that reads tl.program_id(0)
        self.accesses, self.reductions = accesses, reductions  # id(call) -> "load" | "store"; id(call)

    @classmethod
    def of(cls, kernel: Kernel, library: frozenset[str] = frozenset()) -> _Plan | str:
        """The plan, or why the kernel is not one `rows` can change for certain."""
        name = kernel.name
        body = list(kernel.node.body.body)
        if isinstance(body[-1], cst.SimpleStatementLine) and isinstance(body[-1].body[0], cst.Return):
            body = body[:-1]
        if not all(isinstance(s, cst.SimpleStatementLine) for s in body):
            return f"{name} has a loop or a branch (rows needs a straight-line body)"
        at = next((i for i, s in enumerate(body) if any(kernel.program_axis(c) == 0 for c in subnodes(s, cst.Call))),
                  None)
        if at is None:
            return f"{name} does not read `tl.program_id(0)`"
        for kind, what in ((cst.IfExp, "a conditional expression"), (cst.BooleanOperation, "`and` or `or`"),
                           (cst.Subscript, "a subscript"), (cst.Lambda, "a lambda")):
            if subnodes(kernel.node.body, kind):
                return f"{name} has {what} (rows keeps to straight, one-axis code)"
        if unknown := _Depends.unknown(kernel):
            return f"{name} assigns {', '.join(unknown)} in a way `rows` does not follow"
        depends = _Depends(kernel)
        accesses, reductions = {}, set()
        for call in subnodes(kernel.node.body, cst.Call):
            why = _call_obstacle(kernel, call, library)
            if why:
                return f"{name}: {why}"
            fname = dotted(call.func).rpartition(".")[2] if dotted(call.func) else ""
            if kernel.is_tl(call.func, fname) and fname in MASK_POSITION:
                address = kernel.address(call)
                if address is None:
                    return f"{name} passes a pointer by keyword"
                if depends(address):
                    accesses[id(call)] = fname
                elif fname == "store":
                    return f"{name} stores where the program number does not say (every row would write there)"
            elif kernel.is_tl(call.func, fname) and fname in REDUCTIONS and call.args and depends(call.args[0].value):
                axis = _axis(call)
                if axis is False:
                    return f"{name} reduces over an axis other than 0, or keeps its dimensions"
                reductions.add(id(call))
        if not any(kind == "store" for kind in accesses.values()):
            return f"{name} stores nothing through an address the program number gives"
        return cls(kernel, at, accesses, reductions)

    def kernel_edit(self, names: dict[str, str]) -> Edit:
        kernel, tl, plan = self.kernel, self.kernel.tl_name, self
        call = code(next(c for c in kernel.calls("program_id") if kernel.program_axis(c) == 0))

        def edit(node: cst.FunctionDef) -> cst.FunctionDef:
            node = node.visit(_Rows(plan, names))
            body = list(node.body.body)
            taken = statements(f"{names['pid']} = {call} * {names['c']} + {tl}.arange(0, {names['c']})[:, None]\n"
                               f"{names['mask']} = {names['pid']} < {names['n']}\n")
            taken[0] = taken[0].with_changes(leading_lines=body[self.at].leading_lines)
            body[self.at:self.at] = taken
            body[self.at + len(taken)] = body[self.at + len(taken)].with_changes(leading_lines=())
            return node.with_changes(params=added_params(node, names["n"], names["c"], tl),
                                     body=node.body.with_changes(body=body))
        return edit


class _Rows(cst.CSTTransformer):
    """Reads `rows_pid` for `tl.program_id(0)`, masks the planned loads and stores, and keeps the row axis in
    the planned reductions."""

    def __init__(self, plan: _Plan, names: dict[str, str]) -> None:
        self.plan, self.names = plan, names

    def leave_Call(self, original_node: cst.Call, updated_node: cst.Call) -> cst.BaseExpression:
        if self.plan.kernel.program_axis(original_node) == 0:
            return cst.Name(self.names["pid"])
        kind = self.plan.accesses.get(id(original_node))
        if kind is not None:
            return _masked(updated_node, MASK_POSITION[kind], self.names["mask"])
        if id(original_node) in self.plan.reductions:
            args = [a for i, a in enumerate(updated_node.args)
                    if i == 0 or (a.keyword is not None and a.keyword.value != "axis")]
            extra = cst.parse_expression("_(axis=1, keep_dims=True)").args
            args[-1] = args[-1].with_changes(comma=cst.Comma(whitespace_after=cst.SimpleWhitespace(" ")))
            return updated_node.with_changes(args=[*args, extra[0], extra[1].with_changes(comma=cst.MaybeSentinel.DEFAULT)])
        return updated_node


def _masked(call: cst.Call, position: int, mask: str) -> cst.Call:
    args = list(call.args)
    for i, arg in enumerate(args):
        if (arg.keyword is None and i == position) or (arg.keyword is not None and arg.keyword.value == "mask"):
            if code(arg.value).strip() == "None":
                return call.with_changes(args=[*args[:i], arg.with_changes(value=cst.Name(mask)), *args[i + 1:]])
            value = cst.parse_expression(f"({code(arg.value)}) & {mask}")
            return call.with_changes(args=[*args[:i], arg.with_changes(value=value), *args[i + 1:]])
    extra = cst.parse_expression(f"_(mask={mask})").args[0]
    if args:
        args[-1] = args[-1].with_changes(comma=cst.Comma(whitespace_after=cst.SimpleWhitespace(" ")))
    return call.with_changes(args=[*args, extra])


def _axis(call: cst.Call) -> int | None | bool:
    """The axis a reduction names (None: all of them), or False for one `rows` does not change."""
    axis = None
    for i, arg in enumerate(call.args):
        if arg.keyword is not None and arg.keyword.value in ("keep_dims", "keepdims") or arg.keyword is None and i > 1:
            return False
        if (arg.keyword is None and i == 1) or (arg.keyword is not None and arg.keyword.value == "axis"):
            if code(arg.value).strip() == "None":
                continue
            axis = int_value(arg.value)
            if axis != 0:
                return False
    return axis


def _library(module: cst.Module) -> frozenset[str]:
    """Names imported from triton.language's element-wise libraries (`from triton.language.extra.libdevice
    import tanh`)."""
    names = set()
    for imp in subnodes(module, cst.ImportFrom):
        source = dotted(imp.module) if imp.module is not None else None
        if source and source.startswith(("triton.language.extra", "triton.language.math")) \
                and not isinstance(imp.names, cst.ImportStar):
            names |= {(a.asname.name if a.asname else a.name).value for a in imp.names}
    return frozenset(names)


def _call_obstacle(kernel: Kernel, call: cst.Call, library: frozenset[str] = frozenset()) -> str:
    if isinstance(call.func, cst.Attribute) and call.func.attr.value in METHODS:
        return ""  # tl.load(...).to(tl.float32)
    name = dotted(call.func)
    if name is None:
        return f"it calls `{code(call.func)}`"
    base, _, attr = name.rpartition(".")
    if not base:
        constant = all(isinstance(a.value, cst.SimpleString | cst.Integer | cst.Float) for a in call.args)
        if name in ("float", "int") and constant or name in library:
            return ""  # float("-inf"), libdevice's tanh
        return f"it calls `{name}` (a function `rows` cannot look into)"
    if kernel.is_tl(call.func, attr):
        if attr in ELEMENTWISE or attr in REDUCTIONS:
            return _shape_obstacle(kernel, call, attr)
        return f"it calls `{name}`, which `rows` does not know to be element-wise"
    local = set(kernel.scope.params) | set(kernel.scope.assigns)
    root = base.split(".")[0]
    if root in local:
        return f"it calls the method `.{attr}`"
    if root in kernel.tl and ("math" in base or "extra" in base):
        return ""  # tl.math.exp, tl.extra.cuda.libdevice.tanh
    return "" if root not in kernel.tl else f"it calls `{name}`"


def _shape_obstacle(kernel: Kernel, call: cst.Call, attr: str) -> str:
    if attr not in ("zeros", "full") or not call.args:
        return ""
    shape = call.args[0].value
    if isinstance(shape, cst.List | cst.Tuple) and len(shape.elements) <= 1:
        return ""
    return f"`{code(call)}` may make a tensor of more than one axis"


class _Depends:
    """Whether an expression is computed from the program number: it reads `tl.program_id(0)`, or a name
    assigned from such an expression."""

    def __init__(self, kernel: Kernel) -> None:
        self.program_ids = {id(c) for c in kernel.calls("program_id") if kernel.program_axis(c) == 0}
        self.names: set[str] = set()
        values = {name: [v for v in found if v is not None] for name, found in kernel.scope.assigns.items()}
        for aug in subnodes(kernel.node.body, cst.AugAssign):  # `c += program_id * stride`
            if isinstance(aug.target, cst.Name):
                values.setdefault(aug.target.value, []).append(aug.value)
        changed = True
        while changed:
            changed = False
            for name, found in values.items():
                if name not in self.names and any(self(v) for v in found):
                    self.names.add(name)
                    changed = True

    @staticmethod
    def unknown(kernel: Kernel) -> list[str]:
        """Names assigned in a way the analysis does not follow (tuple targets, walrus): one of them could
        carry the program number into an address that would then go unmasked."""
        augmented = Counter(a.target.value for a in subnodes(kernel.node.body, cst.AugAssign)
                            if isinstance(a.target, cst.Name))  # recorded with no value; followed above
        return sorted(n for n, found in kernel.scope.assigns.items() if found.count(None) > augmented[n])

    def __call__(self, node: cst.CSTNode) -> bool:
        return contains(node, self.program_ids) or any(n.value in self.names for n in loads(node))
