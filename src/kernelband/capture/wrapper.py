"""The generated entry of a task that wraps one captured kernel launch, where the entry's own file cannot be
the task's module.

The wrapper takes the launch's tensors and launches the kernel as the program did: the same constexprs and
launch options, and each integer argument and grid dim computed from the tensors where one expression gives
the captured value in every chosen case (`x.shape[0]`, `x.stride(1)`, `x.numel()`, `triton.cdiv(x.shape[0],
32)`, or a product of two of those for a grid dim). An integer that no expression gives stays an argument;
float, bool and string arguments are written in as captured, and a tensor passed twice is passed twice. It returns every tensor it launched with: the
kernel's outputs are among them.
"""

from __future__ import annotations

import ast
import itertools
import math
import re
from collections.abc import Callable
from dataclasses import dataclass

from kernelband import pyast
from kernelband.capture import records
from kernelband.capture.plan import Derived, order

_RESERVED = {"torch", "triton", "tl", "device", "seen"}


def launch_cases(kernel: records.Kernel) -> list[records.Case]:
    """The kernel's cases with the grid's dims as integer arguments `grid_0`...: they are sized like the rest."""
    out = []
    for c in kernel.cases:
        grid = [records.Arg(f"grid_{k}", "int", int(g)) for k, g in enumerate((c.grid or [1])[:3])]
        out.append(records.Case(c.id, list(c.args) + grid, c.calls, c.time_ms, c.grid, c.constexprs, c.options))
    return out


def param_names(case: records.Case) -> list[str]:
    """Each argument's name in the wrapper: the kernel's own, kept clear of the names the wrapper uses."""
    names = []
    for a in case.args:
        name = a.name if a.name.isidentifier() else re.sub(r"\W", "_", a.name)
        while name in _RESERVED or name in names:
            name += "_"
        names.append(name)
    return names


@dataclass
class _Form:
    expr: str
    value: Callable[[records.Case], int]
    refs: frozenset  # the tensor dims (argument index, dim) it depends on


def _bases(case: records.Case, names: list[str], param: str) -> list[_Form]:
    """Shapes, numels and strides of the tensors; for a stride parameter strides first, and first those of
    the tensor whose name starts as the parameter's does without "stride" (`stride_am`: `a_ptr`)."""
    shapes, strides, numels = [], [], []
    hint = param.lower().replace("stride", "").replace("_", "")[:1]
    tensors = [(i, a) for i, a in enumerate(case.args) if a.kind == "tensor" and a.same_as is None]
    if "stride" in param.lower():
        tensors.sort(key=lambda ia: not names[ia[0]].lower().startswith(hint))
    for i, a in tensors:
        rank = len(a.tensor.shape)
        dims = order(a.tensor) or tuple(range(rank))
        for d in range(rank):
            shapes.append(_Form(f"{names[i]}.shape[{d}]", lambda c, i=i, d=d: c.args[i].tensor.shape[d],
                                frozenset({(i, d)})))
            # a dense stride is the product of the dims that vary faster
            inner = dims[dims.index(d) + 1:]
            strides.append(_Form(f"{names[i]}.stride({d})", lambda c, i=i, d=d: c.args[i].tensor.stride[d],
                                 frozenset((i, e) for e in inner)))
        numels.append(_Form(f"{names[i]}.numel()", lambda c, i=i: math.prod(c.args[i].tensor.shape),
                            frozenset((i, e) for e in range(rank))))
    return strides + shapes + numels if "stride" in param.lower() else shapes + numels + strides


def _forms(case: records.Case, names: list[str], i: int, blocks: list[int]) -> list[_Form]:
    a = case.args[i]
    bases = _bases(case, names, a.name)
    forms = list(bases)
    forms += [_Form(f"triton.cdiv({f.expr}, {b})", lambda c, f=f, b=b: -(-f.value(c) // b), f.refs)
              for f in bases for b in blocks]
    if a.name.startswith("grid_"):
        cdivs = forms[len(bases):]
        forms.insert(0, _Form("1", lambda c: 1, frozenset()))
        forms += [_Form(f"{f.expr} * {g.expr}", lambda c, f=f, g=g: f.value(c) * g.value(c), f.refs | g.refs)
                  for f, g in itertools.combinations(cdivs, 2) if not f.refs & g.refs]
    return forms


def program_axes(source: str, kernel: str) -> set[int]:
    """The grid axes the kernel `kernel` in `source` reads with `tl.program_id` (all three where unknown)."""
    try:
        tree = pyast.parse(source)
    except SyntaxError:
        return {0, 1, 2}
    fn = next((n for n in ast.walk(tree) if isinstance(n, ast.FunctionDef) and n.name == kernel), None)
    if fn is None:
        return {0, 1, 2}
    axes = set()
    for call in ast.walk(fn):
        if isinstance(call, ast.Call) and getattr(call.func, "attr", getattr(call.func, "id", "")) == "program_id":
            arg = call.args[0] if call.args else next((k.value for k in call.keywords if k.arg == "axis"), None)
            if not isinstance(arg, ast.Constant):
                return {0, 1, 2}
            axes.add(arg.value)
    return axes


def derive(cases: list[records.Case], varying: set[tuple[int, int]], axes: set[int]) -> Derived:
    """The expression the wrapper writes for each argument it computes (see the module's docstring). Where
    several expressions give the captured values, the first of the likeliest kind is written (for a grid dim,
    one that depends on a varying dim, `varying`; for an argument, a plain shape or stride before a count of
    blocks), and an added size is kept only where the others of that kind agree with it (`Derived.agrees`). A
    grid dim of 1 on an axis the kernel never reads (`axes`) stays 1."""
    first = cases[0]
    names = param_names(first)
    blocks = sorted({v for v in (first.constexprs or {}).values() if isinstance(v, int) and not isinstance(v, bool)
                     and v > 1})
    exprs: dict[int, str] = {}
    alternatives: list[tuple[_Form, list[_Form]]] = []
    for i, a in enumerate(first.args):
        if a.kind == "tensor" and a.same_as is not None:
            exprs[i] = names[a.same_as]
        elif a.kind in ("float", "bool", "none", "str", "dtype"):
            exprs[i] = literal(a)
        elif a.name.startswith("grid_") and int(a.name[5:]) not in axes and all(c.args[i].value == 1 for c in cases):
            exprs[i] = "1"
        elif a.kind == "int":
            wanted = [c.args[i].value for c in cases]
            forms = _forms(first, names, i, blocks)
            matching = [f for f in forms if all(f.value(c) == w for c, w in zip(cases, wanted))]
            if a.name.startswith("grid_"):
                pool = [f for f in matching if f.refs & varying] or matching
            else:  # an argument: a size, a stride or a count of blocks, in that order of likelihood
                plain = len(_bases(first, names, a.name))
                pool = [f for f in matching if forms.index(f) < plain] or matching
            if pool:
                exprs[i] = pool[0].expr
                alternatives.append((pool[0], pool[1:]))

    def agrees(case: records.Case) -> bool:
        return all(f.value(case) == chosen.value(case) for chosen, others in alternatives for f in others)

    return Derived(exprs, agrees)


def literal(a: records.Arg) -> str:
    if a.kind == "dtype":
        return f"torch.{a.value}"
    if a.kind == "float" and not math.isfinite(a.value):
        return f"float({str(a.value)!r})"
    return repr(a.value)


def source(kernel: records.Kernel, case: records.Case, derived: dict[int, str], name: str, why: str) -> str:
    """The wrapper function: `name(<arguments not derived>)` launching `kernel` as `case` (with its grid)."""
    names = param_names(case)
    n_kernel = len(case.args) - len([a for a in case.args if a.name.startswith("grid_")])
    params = [names[i] for i in range(len(case.args)) if i not in derived]

    def expr(i: int) -> str:
        return derived.get(i, names[i])

    grid = ", ".join(expr(i) for i in range(n_kernel, len(case.args)))
    call = [expr(i) for i in range(n_kernel)]
    call += [f"{k}={records.constant_code(v)}" for k, v in (case.constexprs or {}).items()]
    call += [f"{k}={v!r}" for k, v in (case.options or {}).items()]
    tensors = [names[i] for i, a in enumerate(case.args[:n_kernel]) if a.kind == "tensor" and a.same_as is None]
    lines = [f"# Generated by `kernelband capture`: {why}; this entry launches {kernel.name} as the program did.",
             f"def {name}({', '.join(params)}):",
             f"    {kernel.launch_as}[({grid},)](",
             *_wrap(call, "        "),
             "    )",
             f"    return {', '.join(tensors) if tensors else 'None'}"]
    return "\n".join(lines) + "\n"


def _wrap(items: list[str], indent: str, width: int = 110) -> list[str]:
    lines, line = [], indent
    for item in items:
        piece = item + ","
        if len(line) + len(piece) + 1 > width and line.strip():
            lines.append(line.rstrip())
            line = indent
        line += piece + " "
    if line.strip():
        lines.append(line.rstrip())
    return lines
