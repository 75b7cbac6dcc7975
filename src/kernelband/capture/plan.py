"""A captured task's shapes: from the cases an entry (or a wrapped kernel) was seen with, its search shapes,
held-out shapes and size variables.

The cases of one *structure* (the same dtypes, ranks, layouts and non-size values; the one with the most
device time) make the task; others are left out, and said so. A *position* is a tensor's dim or an integer
argument; positions that hold the same value in every chosen case are one size variable when that value varies
between cases. With one case, or none varying, the variable is the first tensor's first dim (batch or rows)
with every position equal to it. SHAPES are the seen cases by device time, at most 16; where fewer than 10
were seen, sizes between and around them are added (the variables scaled together). HELD_OUT are seen cases
not chosen or, where there are none, sizes near the dominant case's that are odd: not multiples of a tile.
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable
from dataclasses import dataclass, field

from kernelband.capture import records
from kernelband.capture.inputs import size_of
from kernelband.evaluation.shapes import INTERPRETER_MAX_BYTES

MAX_SHAPES = 16
MIN_SHAPES = 10  # as a task needs (MIN_SEARCH_SHAPES in kernelband.worker.harness)
MAX_HELD_OUT = 4
NEAR = (5 / 4, 3 / 4, 9 / 8, 5 / 8, 3 / 2, 1 / 2, 2)  # held-out sizes near the most-timed one (made odd)
# Added sizes around one seen size: alternately smaller and larger, nearer ones first.
AROUND = (1 / 2, 2, 1 / 4, 4, 3 / 4, 3 / 2, 1 / 8, 3, 8, 1 / 16, 6, 16, 5 / 8, 3 / 8, 7 / 8, 12, 24, 32, 48, 64)


@dataclass
class Shape:
    sizes: dict[str, int]
    case: records.Case | None  # the seen case, or None for an added size
    note: str


@dataclass
class Derived:
    """Arguments a wrapping entry computes from its tensors (index -> expression), and whether an added size
    keeps what was captured true: `agrees(case)` is False where expressions that all fit the seen cases part."""
    exprs: dict[int, str]
    agrees: Callable[[records.Case], bool] = lambda case: True


@dataclass
class Plan:
    cases: list[records.Case]  # the chosen cases' structure: these are the task's seen cases
    variables: list[str]
    # per argument: ("tensor", dims with variable names) | ("same", index) | ("var", name) |
    # ("scaled", name, base) | ("derived", expression) | ("fixed",)
    templates: list[tuple]
    shapes: list[Shape]
    held_out: list[Shape]
    derived: dict[int, str] = field(default_factory=dict)  # argument index -> expression (wrapped kernels)
    left_out: str = ""  # cases of other structures, not in the task
    # Without a GPU: the smallest seen shape and the next smallest, where small enough, so that the
    # interpreter runs a case with its kept values too, and the smallest held-out shape (empty: the
    # evaluator's own choice)
    interpreter: list[Shape] = field(default_factory=list)
    interpreter_held: list[Shape] = field(default_factory=list)


def order(t: records.Tensor) -> tuple[int, ...] | None:
    """Dims from the slowest-varying to the fastest; None when row-major (size-1 dims ignored)."""
    if t.contiguous:
        return None
    return tuple(sorted(range(len(t.shape)), key=lambda d: (-t.stride[d], d)))


def expanded(t: records.Tensor) -> tuple[int, ...]:
    return tuple(d for d, (n, s) in enumerate(zip(t.shape, t.stride)) if s == 0 and n > 1)


def structure(case: records.Case) -> tuple:
    parts = []
    for a in case.args:
        if a.kind == "tensor":
            t = a.tensor
            parts.append(("t", t.dtype, len(t.shape), order(t), expanded(t), a.same_as))
        elif a.kind in ("int", "float"):
            parts.append(a.kind)
        else:
            parts.append((a.kind, a.value))
    return (tuple(parts), repr(sorted((case.constexprs or {}).items())), repr(sorted((case.options or {}).items())))


def _positions(case: records.Case, skip: set[int]) -> list[tuple[tuple, int]]:
    """(position, value): (i, d) for dim d of tensor argument i; (i,) for integer argument i."""
    out = []
    for i, a in enumerate(case.args):
        if i in skip:
            continue
        if a.kind == "tensor" and a.same_as is None:
            out += [((i, d), n) for d, n in enumerate(a.tensor.shape)]
        elif a.kind == "int":
            out.append(((i,), a.value))
    return out


def _name(case: records.Case, position: tuple, taken: set[str]) -> str:
    arg = case.args[position[0]].name
    base = arg if len(position) == 1 else f"{arg.removesuffix('_ptr')}_{position[1]}"
    base = re.sub(r"\W", "_", base)
    if not base.isidentifier() or base in ("device", "seen"):
        base = f"n_{base}"
    name, k = base, 2
    while name in taken:
        name, k = f"{base}_{k}", k + 1
    taken.add(name)
    return name


def _share(case: records.Case, total: float) -> str:
    pct = 100 * case.time_ms / total if total > 0 else 0.0
    return f"seen: {case.calls} call{'s' if case.calls != 1 else ''}, {pct:.0f}% of its device time"


def _odd(x: float) -> int:
    n = max(1, round(x))
    return n if n % 2 else n + 1


def _classes(chosen: list[records.Case], skip: set[int], tensors_only: bool = False) -> dict[tuple, list[tuple]]:
    """Value vectors (one value per chosen case) -> the positions that hold them."""
    by_position: dict[tuple, list[int]] = {}
    for c in chosen:
        for pos, value in _positions(c, skip):
            if not tensors_only or len(pos) == 2:
                by_position.setdefault(pos, []).append(value)
    classes: dict[tuple, list[tuple]] = {}
    for pos, values in by_position.items():
        classes.setdefault(tuple(values), []).append(pos)
    return classes


def _varying(classes: dict[tuple, list[tuple]]) -> list[tuple]:
    """The value vectors of the size variables: those that vary, else the one of the first tensor's dim 0."""
    varying = [v for v in classes if len(set(v)) > 1]
    if not varying and classes:
        lead = next((v for v, ps in classes.items() if any(len(p) == 2 and p[1] == 0 for p in ps)), None)
        varying = [lead if lead is not None else next(iter(classes))]
    return varying


def case_at(first: records.Case, templates: list[tuple], sizes: dict[str, int]) -> records.Case:
    """The case `first` would be at added `sizes`: tensors sized by the templates, dense in their dim order."""
    args = []
    for a, template in zip(first.args, templates):
        if template[0] == "tensor":
            shape = [size_of(d, sizes) for d in template[1]]
            dense = order(a.tensor) or tuple(range(len(shape)))
            stride, step = [0] * len(shape), 1
            for d in reversed(dense):
                stride[d], step = step, step * shape[d]
            args.append(records.Arg(a.name, "tensor", tensor=records.Tensor(a.tensor.dtype, shape, stride)))
        elif template[0] == "var":
            args.append(records.Arg(a.name, "int", size_of(template[1], sizes)))
        else:
            args.append(a)
    return records.Case(first.id, args, constexprs=first.constexprs, options=first.options)


def make(cases: list[records.Case],
         derive: Callable[[list[records.Case], set[tuple[int, int]]], Derived] | None = None) -> Plan:
    """The plan of a task from its cases (any order). `derive(chosen, varying tensor dims)` names the arguments
    a wrapping entry computes from its tensors: they are neither passed nor varied."""
    groups: dict[tuple, list[records.Case]] = {}
    for c in cases:
        groups.setdefault(structure(c), []).append(c)
    ranked = sorted(groups.values(), key=lambda g: (-sum(c.time_ms for c in g), -sum(c.calls for c in g)))
    seen = sorted(ranked[0], key=lambda c: (-c.time_ms, -c.calls))
    others = [c for g in ranked[1:] for c in g]
    total = sum(c.time_ms for c in cases)
    left_out = ""
    if others:
        pct = 100 * sum(c.time_ms for c in others) / total if total > 0 else 0.0
        left_out = (f"{len(others)} other signature{'s' if len(others) > 1 else ''} ({pct:.0f}% of the time) "
                    "differ in dtypes, layouts or fixed values and are not in this task")
    chosen, rest = seen[:MAX_SHAPES], seen[MAX_SHAPES:]
    derived = Derived({})
    if derive is not None:
        tensor_classes = _classes(chosen, set(), tensors_only=True)
        moving = {p for v in _varying(tensor_classes) for p in tensor_classes[v]}
        derived = derive(chosen, moving)

    # size variables: positions with the same values in every chosen case, where those values vary; values
    # that are a whole multiple of a variable's in every case are that multiple ("2*rows")
    classes = _classes(chosen, set(derived.exprs))
    varying = sorted(_varying(classes), key=lambda v: (min(v), v))
    taken: set[str] = set()
    var_of: dict[tuple, str] = {}
    variables, bases = [], []
    for values in varying:
        base = next(((b, name) for b, name in bases
                     if values[0] % b[0] == 0 and all(v == b_ * (values[0] // b[0]) for v, b_ in zip(values, b))),
                    None)
        if base is None:
            name = _name(chosen[0], classes[values][0], taken)
            variables.append(name)
            bases.append((values, name))
            spec = name
        else:
            spec = f"{values[0] // base[0][0]}*{base[1]}"
        for pos in classes[values]:
            var_of[pos] = spec
    varying = [b for b, _ in bases]
    lead_var, lead_base = (variables[0], varying[0][0]) if variables else (None, 1)

    templates: list[tuple] = []
    first = chosen[0]
    for i, a in enumerate(first.args):
        if i in derived.exprs:
            templates.append(("derived", derived.exprs[i]))
        elif a.kind == "tensor" and a.same_as is not None:
            templates.append(("same", a.same_as))
        elif a.kind == "tensor":
            templates.append(("tensor", tuple(var_of.get((i, d), n) for d, n in enumerate(a.tensor.shape))))
        elif a.kind == "int" and (i,) in var_of:
            templates.append(("var", var_of[(i,)]))  # a variable, or a multiple of one: "2*rows"
        elif a.kind == "int" and a.name.startswith("grid_") and lead_var:
            templates.append(("scaled", lead_var, lead_base))
        else:
            templates.append(("fixed",))

    def sizes_of(c: records.Case) -> dict[str, int]:
        return {name: _value(c, classes[v][0]) for v, name in bases}

    def keep(sizes: dict[str, int]) -> bool:
        return derived.agrees(case_at(first, templates, sizes))

    shapes = [Shape(sizes_of(c), c, _share(c, total)) for c in chosen]
    points = [s.sizes for s in shapes]
    if variables:
        for sizes in _added(points, MIN_SHAPES - len(shapes), keep):
            shapes.append(Shape(sizes, None, "added"))
    if rest:
        held = [Shape(sizes_of(c), c, _share(c, total)) for c in rest[:MAX_HELD_OUT]]
    else:
        held = []
        for f in NEAR:
            sizes = {v: _odd(points[0][v] * f) for v in variables}
            if sizes not in points and sizes not in [h.sizes for h in held] and keep(sizes):
                held.append(Shape(sizes, None, "added: near the most-timed size, odd"))
            if len(held) == 2:
                break
    def size(s: Shape) -> int:
        return _bytes(s.case or case_at(first, templates, s.sizes))

    small = sorted((s for s in shapes if size(s) <= INTERPRETER_MAX_BYTES), key=lambda s: (s.case is None, size(s)))
    interpreter = small[:1] + sorted(small[1:], key=size)[:1]
    if not interpreter or interpreter[0].case is None:
        interpreter = []
    interpreter_held = [min(held, key=size)] if interpreter and held else []
    return Plan(chosen, variables, templates, shapes, held, derived.exprs, left_out, interpreter, interpreter_held)


def _bytes(case: records.Case) -> int:
    """The bytes of a case's tensors (the element size read off the dtype's name: float16 -> 2)."""
    total = 0
    for a in case.args:
        if a.kind == "tensor" and a.same_as is None:
            bits = re.search(r"\d+", a.tensor.dtype)
            total += math.prod(a.tensor.shape) * (int(bits.group()) // 8 if bits else 1)
    return total


def _value(case: records.Case, pos: tuple) -> int:
    a = case.args[pos[0]]
    return a.tensor.shape[pos[1]] if len(pos) == 2 else a.value


def _scale(point: dict[str, int], f: float) -> dict[str, int]:
    return {v: max(1, round(n * f)) for v, n in point.items()}


def _added(points: list[dict[str, int]], wanted: int, keep: Callable[[dict[str, int]], bool]) -> list[dict[str, int]]:
    """`wanted` new points between and around `points`: geometric midpoints of neighbours first, then the
    smallest scaled down and the largest up, alternately; only points `keep` accepts."""
    if wanted <= 0:
        return []
    ordered = sorted(points, key=lambda p: math.prod(p.values()))
    lo, hi = ordered[0], ordered[-1]
    candidates = []
    for a, b in zip(ordered, ordered[1:]):
        candidates.append({v: round(math.sqrt(a[v] * b[v])) for v in a})
    for f in AROUND:
        candidates.append(_scale(lo if f < 1 else hi, f))
    out: list[dict[str, int]] = []
    for c in candidates:
        if c not in points and c not in out and keep(c):
            out.append(c)
        if len(out) == wanted:
            break
    return out
