"""KernelBand's own task format: one Python file per task.

Above the marker line is the module to make faster (Triton kernels and the
entry function); below it, the task definition:

    ENTRY = "softmax"                   # the function candidates must define
    SHAPES = [dict(rows=..., cols=...)] # search shapes (at least 10), keyword arguments of make_inputs
    HELD_OUT = [...]                    # at least one: checked only at the end of a search
    INTERPRETER_SHAPES = [...]          # optional: used instead of SHAPES on a CPU
    INTERPRETER_HELD_OUT = [...]        # optional: used instead of HELD_OUT on a CPU
    ATOL, RTOL = 1e-3, 1e-1             # optional (these are the defaults)
    ALLOW_TORCH_ONLY = False            # optional
    TRITON_SHARE = 0.5                  # optional: the least share of the call's GPU kernel time in Triton
    TASK_DATA                           # set by KernelBand: where the worker reads `<task>.data/` (or None)
    def make_inputs(device, **shape) -> tuple   # the entry's positional arguments
    def reference(*inputs)              # optional ground truth in plain torch
    def bytes_moved(**shape) -> int     # optional, for GB/s and the speed-of-light bound
    def flops(**shape) -> int           # optional

A candidate is a module: the part above the marker, rewritten.
"""

from __future__ import annotations

import ast
import hashlib
import re
from pathlib import Path

from kernelband import pyast
from kernelband.errors import UserError, read_text
from kernelband.tasks.model import Task

MARKER = re.compile(r"^#\s*-{3,}\s*kernelband task\s*-{3,}\s*$", re.MULTILINE)
MARKER_LINE = "# --------------------------------- kernelband task ---------------------------------"


def split(source: str, where: str) -> tuple[str, str, int]:
    """(module source, harness source, line number where the harness starts)."""
    match = MARKER.search(source)
    if match is None:
        raise UserError(f"{where}: no '{MARKER_LINE.strip()}' line separates the kernel from the task "
                        "definition (see the task format in the README)")
    module = source[: match.start()]
    line = source.count("\n", 0, match.end()) + 1
    # Blank lines keep the harness's line numbers equal to the file's in tracebacks.
    harness = "\n" * line + source[match.end():].lstrip("\n")
    return module, harness, line


def module_part(source: str) -> str:
    """A candidate file may be a bare module or a whole task file: keep the module."""
    match = MARKER.search(source)
    return source[: match.start()] if match else source


# Names the task definition must bind. How many shapes SHAPES and HELD_OUT hold is checked where they are
# evaluated, in the worker (MIN_SEARCH_SHAPES in kernelband.worker.harness).
REQUIRED = ("ENTRY", "SHAPES", "HELD_OUT", "make_inputs")


def _top_level_names(tree: ast.Module) -> set[str]:
    """Names the module binds outside functions and classes (inside `if`, `try`... too)."""
    names: set[str] = set()
    todo = list(tree.body)
    while todo:
        node = todo.pop()
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            names.add(node.name)
            continue
        if isinstance(node, (ast.Assign, ast.AnnAssign, ast.AugAssign)):
            for target in node.targets if isinstance(node, ast.Assign) else [node.target]:
                names.update(n.id for n in ast.walk(target) if isinstance(n, ast.Name))
        elif isinstance(node, (ast.Import, ast.ImportFrom)):
            names.update((a.asname or a.name).split(".")[0] for a in node.names)
        for field in ("body", "orelse", "finalbody", "handlers"):
            todo.extend(getattr(node, field, []))
    return names


def load(path: Path, ref: str | None = None, name: str | None = None) -> Task:
    source = read_text(path, "task file")
    module, harness, _ = split(source, str(path))
    try:
        tree = pyast.parse(harness, filename=str(path))
    except SyntaxError as exc:
        raise UserError(f"{path}:{exc.lineno}: the task definition is not valid Python: {exc.msg}") from exc
    missing = [n for n in REQUIRED if n not in _top_level_names(tree)]
    if missing:
        raise UserError(f"{path}: the task definition lacks {', '.join(missing)} (ENTRY names the function to "
                        "make faster, SHAPES and HELD_OUT list the shapes, make_inputs builds a shape's inputs)")
    description = ""
    try:
        description = (ast.get_docstring(pyast.parse(module)) or "").strip().splitlines()[0]
    except (SyntaxError, IndexError):
        pass
    data = path.with_suffix(".data")
    data_dir = str(data.resolve()) if data.is_dir() else ""
    return Task(ref=ref or str(path), name=name or path.stem, kind="pyfile", module_source=module,
                harness_source=harness, harness_file=str(path), description=description, data_dir=data_dir,
                data_digest=_digest(data) if data_dir else "")


def _digest(directory: Path) -> str:
    """The names and contents of the files in `directory` (a task's data), as a hex digest."""
    h = hashlib.sha256()
    for f in sorted(p for p in directory.iterdir() if p.is_file()):
        h.update(f.name.encode() + b"\0")
        with open(f, "rb") as stream:
            for block in iter(lambda: stream.read(1 << 20), b""):
                h.update(block)
    return h.hexdigest()[:16]
