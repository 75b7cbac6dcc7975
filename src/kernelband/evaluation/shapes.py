"""Which of a task's shapes an evaluation runs, and which one stands for the task (features, ncu)."""

from __future__ import annotations

from kernelband.errors import UserError
from kernelband.tasks.model import ShapeInfo, TaskInfo

# In interpreter mode a task keeps its smallest search shapes: at most this many, each at most this big.
INTERPRETER_SHAPES = 2
INTERPRETER_MAX_BYTES = 1 << 20
# The representative shape (features, ncu): the largest search shape with inputs under this size.
REPRESENTATIVE_MAX_BYTES = 64 << 20


def select_shapes(info: TaskInfo, mode: str, which: str = "search",
                  valid: set[int] | None = None) -> list[ShapeInfo]:
    search, held = info.search, info.held_out
    if valid is not None:
        search = [s for s in search if s.index in valid]
        held = [s for s in held if s.index in valid]
    if mode == "interpreter" and not info.interpreter_shapes_given:
        search = _smallest(search, INTERPRETER_SHAPES)
        held = _smallest(held, 1)
    if which == "search":
        return search
    if which == "held_out":
        return held
    if which == "all":
        return search + held
    raise UserError(f"unknown shape selection {which!r}: use search, held_out or all")


def _smallest(shapes: list[ShapeInfo], k: int) -> list[ShapeInfo]:
    ordered = sorted(shapes, key=lambda s: s.nbytes)
    small = [s for s in ordered if s.nbytes <= INTERPRETER_MAX_BYTES][:k]
    return sorted(small or ordered[:1], key=lambda s: s.index)


def selfcheck_order(info: TaskInfo, mode: str) -> list[ShapeInfo]:
    """The shapes the reference checks itself on, in the order it tries them. In interpreter mode the smallest
    first and, unless the task gives its interpreter shapes, past INTERPRETER_MAX_BYTES only the smallest of
    each kind: the one `_smallest` falls back to. A task whose small shapes are all dropped would otherwise run
    its GPU-sized ones in Python, for minutes."""
    if mode != "interpreter":
        return list(info.shapes)
    ordered = sorted(info.shapes, key=lambda s: s.nbytes)
    if info.interpreter_shapes_given:
        return ordered
    kept, past = [], set()
    for shape in ordered:
        if shape.nbytes > INTERPRETER_MAX_BYTES:
            if shape.held_out in past:
                continue
            past.add(shape.held_out)
        kept.append(shape)
    return kept


def representative(shapes: list[ShapeInfo]) -> ShapeInfo:
    fitting = [s for s in shapes if s.nbytes <= REPRESENTATIVE_MAX_BYTES]
    return max(fitting, key=lambda s: s.nbytes) if fitting else min(shapes, key=lambda s: s.nbytes)


def alias_shape(shapes: list[ShapeInfo]) -> ShapeInfo:
    """The shape run twice (other inputs the second time): the smallest search shape."""
    search = [s for s in shapes if not s.held_out]
    return min(search or shapes, key=lambda s: s.nbytes)


def derive_seed(seed: int, index: int, salt: int = 0) -> int:
    """The seed of one shape's inputs for one purpose (`salt`), from the evaluation's seed."""
    return (seed * 1_000_003 + index * 7919 + salt * 104_729) % (2**31 - 1)
