"""The starting kernel where the search measured it faster: a handed-back module whose entry calls the starting
kernel's on those shapes.

A kernel faster over the search shapes in all can be slower on some of them (a small shape, a block size that
suits only the large ones). Where both the chosen kernel's search evaluation and its final check measured it
slower than the starting kernel on a search shape, by more than the run's noise floor (`to_start`), the module
handed back keeps the starting kernel beside its own kernels (its top-level names given the suffix `_start`)
and its entry's first statement sends calls with that shape's arguments there. The shapes are told apart by the
shapes of the entry's leading tensor arguments, the fewest that do (one membership test of a set of tuples,
a few hundred ns per call).
"""

from __future__ import annotations

from dataclasses import dataclass, field

import libcst as cst

from kernelband.evaluation.records import EvalResult
from kernelband.proposers.rewriter.analysis.syntax import code, fresh_name, make_scope, subnodes
from kernelband.search.core import Objective, shape_speedup
from kernelband.search.module_edits import Replace, spaced
from kernelband.tasks.model import ShapeInfo

SUFFIX = "_start"
SHAPES_NAME = "STARTING_KERNEL_SHAPES"


@dataclass(frozen=True)
class Start:
    """What the hand-back knows of the starting kernel: its source, the task's entry and shapes."""

    source: str
    entry: str
    shapes: tuple[ShapeInfo, ...] = ()


@dataclass
class Dispatched:
    source: str | None  # the module with the dispatch; None where it cannot be written (`reason` says why)
    shapes: list[str] = field(default_factory=list)  # the labels of the search shapes sent to the starting kernel
    reason: str = ""


def to_start(search: EvalResult | None, check: EvalResult, margin: float, objective: Objective | str) -> list[str]:
    """The search shapes on which the chosen kernel's search evaluation and its final check both measured it
    slower than the starting kernel by more than `margin` (on the objective's measure). Interpreter timings
    measure Python, not a GPU: none there."""
    if search is None or check.interpreter or search.interpreter:
        return []
    searched = {s.label: shape_speedup(s, objective) for s in search.shapes if not s.held_out}
    slower = []
    for shape in check.shapes:
        now, before = shape_speedup(shape, objective), searched.get(shape.label)
        if not shape.held_out and now is not None and before is not None and max(now, before) < 1.0 - margin:
            slower.append(shape.label)
    return slower


def dispatch(source: str, start: Start, labels: list[str]) -> Dispatched:
    """`source` with its entry sending the shapes `labels` to the starting kernel (see the module's docstring)."""
    if not labels:
        return Dispatched(None, reason="no shape to send to the starting kernel")
    try:
        return _Dispatch(source, start, labels).run()
    except _Cannot as exc:
        return Dispatched(None, labels, str(exc))
    except cst.ParserSyntaxError as exc:
        return Dispatched(None, labels, f"a module does not parse: {str(exc).splitlines()[0]}")


class _Cannot(Exception):
    pass


def _entry(module: cst.Module, name: str) -> cst.FunctionDef:
    found = next((s for s in module.body if isinstance(s, cst.FunctionDef) and s.name.value == name), None)
    if found is None:
        raise _Cannot(f"no module-level function {name!r} to dispatch from")
    params = found.params
    if params.star_arg not in (None, cst.MaybeSentinel.DEFAULT) or params.star_kwarg is not None \
            or params.kwonly_params or params.posonly_params:
        raise _Cannot(f"{name} takes starred, keyword-only or positional-only arguments")
    return found


def _imported_names(statement: cst.CSTNode) -> set[str]:
    names = set()
    for imp in subnodes(statement, cst.Import) + subnodes(statement, cst.ImportFrom):
        if isinstance(imp.names, cst.ImportStar):
            raise _Cannot("the starting kernel imports with *")
        for alias in imp.names:
            names.add(code(alias.asname.name) if alias.asname else code(alias.name).split(".")[0])
    return names


class _Dispatch:
    def __init__(self, source: str, start: Start, labels: list[str]):
        self.module = cst.parse_module(source)
        self.start_module = cst.parse_module(start.source)
        self.start, self.labels = start, labels

    def _key(self, params: list[str]) -> tuple[list[str], set]:
        """The fewest leading tensor arguments whose shapes tell the shapes sent to the starting kernel from the
        other search shapes, and those shapes' values of them."""
        shapes = self.start.shapes
        if not shapes or any(s.args is None or len(s.args) != len(params) for s in shapes):
            raise _Cannot("the task does not say the entry's arguments' shapes (its harness calls the entry "
                          "through a script)")
        tensors = [i for i in range(len(params)) if all(s.args[i] is not None for s in shapes)]
        sent = [s for s in shapes if s.label in self.labels and not s.held_out]
        kept = [s for s in shapes if s.label not in self.labels and not s.held_out]
        for n in range(1, len(tensors) + 1):
            sent_keys = {_key_of(s, tensors[:n]) for s in sent}
            if not sent_keys & {_key_of(s, tensors[:n]) for s in kept}:
                return [params[i] for i in tensors[:n]], sent_keys
        raise _Cannot("the shapes sent to the starting kernel have the same argument shapes as others")

    def run(self) -> Dispatched:
        entry = _entry(self.module, self.start.entry)
        theirs = _entry(self.start_module, self.start.entry)
        params = [p.name.value for p in entry.params.params]
        if params != [p.name.value for p in theirs.params.params]:
            raise _Cannot(f"{self.start.entry} takes other arguments than the starting kernel's")
        by, values = self._key(params)
        ours = make_scope(self.module, None)
        used = set(ours.assigns) | {n.value for n in subnodes(self.module, cst.Name)}
        imports, defined = [], []
        for statement in self.start_module.body:
            if isinstance(statement, cst.SimpleStatementLine) and all(
                    isinstance(s, cst.Import | cst.ImportFrom) for s in statement.body):
                imports.append(statement)
            elif isinstance(statement, cst.FunctionDef | cst.ClassDef) or (
                    isinstance(statement, cst.SimpleStatementLine)
                    and all(isinstance(s, cst.Assign | cst.AnnAssign | cst.Expr) for s in statement.body)):
                defined.append(statement)
            else:
                raise _Cannot("the starting kernel runs code at import other than definitions and assignments")
        ours_imports = {code(s.with_changes(leading_lines=[])).strip() for s in self.module.body
                        if isinstance(s, cst.SimpleStatementLine)}
        missing = [s for s in imports if code(s.with_changes(leading_lines=[])).strip() not in ours_imports]
        clash = set().union(*[_imported_names(s) for s in missing]) & used if missing else set()
        if clash:
            raise _Cannot(f"the starting kernel imports {', '.join(sorted(clash))}, which the module binds otherwise")
        imported = set().union(*[_imported_names(s) for s in imports]) if imports else set()
        renamed = {name: fresh_name(f"{name}{SUFFIX}", used) for name in make_scope(self.start_module, None).assigns
                   if name not in imported}
        body = [_Rename(renamed).rename(s) for s in defined
                if not (s is self.start_module.body[0] and _docstring(s))]
        shapes_name = fresh_name(SHAPES_NAME, used)
        test = by[0] + ".shape" if len(by) == 1 else "(" + ", ".join(f"{p}.shape" for p in by) + ")"
        prologue = cst.parse_statement(
            f"if {test} in {shapes_name}:  # the starting kernel was faster on these shapes in the search\n"
            f"    return {renamed[self.start.entry]}({', '.join(params)})\n")
        statements = list(entry.body.body)
        at = 1 if statements and _docstring(statements[0]) else 0
        new_entry = entry.with_changes(body=entry.body.with_changes(
            body=[*statements[:at], prologue, *statements[at:]]))
        listed = ", ".join(repr(v) for v in sorted(values))
        what = by[0] if len(by) == 1 else ", ".join(by)
        constant = cst.parse_statement(f"{shapes_name} = {{{listed}}}\n").with_changes(leading_lines=[
            cst.EmptyLine(), cst.EmptyLine(),
            cst.EmptyLine(comment=cst.Comment(f"# The shapes ({what}) on which the search measured the starting "
                                                f"kernel faster: {self.start.entry} calls it there."))])
        comments = [line for line in entry.leading_lines if line.comment is not None]
        module = self.module.visit(Replace({id(entry): [constant, new_entry.with_changes(
            leading_lines=[cst.EmptyLine(), cst.EmptyLine(), *comments])]}))
        header = cst.EmptyLine(comment=cst.Comment(
            "# The starting kernel, which the entry calls on the shapes where the search measured it faster."))
        tail = spaced(body)
        tail[0] = tail[0].with_changes(leading_lines=[cst.EmptyLine(), cst.EmptyLine(), header])
        module = module.with_changes(body=[*_after_imports(module.body, missing), *tail])
        return Dispatched(module.code, list(self.labels))


def _key_of(shape: ShapeInfo, positions: list[int]) -> tuple:
    """A shape's argument shapes at `positions`: the one shape itself for one position, else their tuple."""
    return shape.args[positions[0]] if len(positions) == 1 else tuple(shape.args[i] for i in positions)


def _after_imports(body, imports: list) -> list:
    """The module's statements with `imports` after its own imports."""
    body = list(body)
    last = max((i for i, s in enumerate(body) if isinstance(s, cst.SimpleStatementLine)
                and all(isinstance(x, cst.Import | cst.ImportFrom) for x in s.body)), default=-1)
    return [*body[:last + 1], *[s.with_changes(leading_lines=[]) for s in imports], *body[last + 1:]]


def _docstring(statement) -> bool:
    return (isinstance(statement, cst.SimpleStatementLine) and len(statement.body) == 1
            and isinstance(statement.body[0], cst.Expr) and isinstance(statement.body[0].value, cst.SimpleString))


class _Rename(cst.CSTTransformer):
    """The starting kernel's module-level names given their new names wherever they refer to the module-level
    binding: not a function's own locals or parameters, an attribute, or an argument's keyword."""

    def __init__(self, renamed: dict[str, str]):
        super().__init__()
        self.renamed = renamed
        self.locals: list[set[str]] = []
        self.skip: set[int] = set()

    def rename(self, statement: cst.CSTNode) -> cst.CSTNode:
        for node in subnodes(statement, cst.Attribute):
            self.skip.add(id(node.attr))
        for node in subnodes(statement, cst.Arg):
            if node.keyword is not None:
                self.skip.add(id(node.keyword))
        return statement.visit(self)

    def visit_FunctionDef(self, node: cst.FunctionDef) -> None:
        scope = make_scope(node, None)
        self.locals.append((set(scope.assigns) | set(scope.params)) - {node.name.value})

    def leave_FunctionDef(self, original_node, updated_node):
        self.locals.pop()
        return self._named(original_node, updated_node)

    def leave_ClassDef(self, original_node, updated_node):
        return self._named(original_node, updated_node)

    def _named(self, original, updated):
        new = self.renamed.get(original.name.value) if not self.locals else None
        return updated.with_changes(name=cst.Name(new)) if new else updated

    def visit_Lambda(self, node: cst.Lambda) -> None:
        self.locals.append({p.name.value for p in node.params.params})

    def leave_Lambda(self, original_node, updated_node):
        self.locals.pop()
        return updated_node

    def visit_Param(self, node: cst.Param) -> None:
        self.skip.add(id(node.name))

    def leave_Name(self, original_node, updated_node):
        if id(original_node) in self.skip or any(original_node.value in scope for scope in self.locals):
            return updated_node
        new = self.renamed.get(original_node.value)
        return updated_node.with_changes(value=new) if new else updated_node
