"""Whether a source file can be a task's module as it was written, and the module a wrapping task carries when
it cannot.

A task's module is imported on its own in an evaluator's worker, whose Python path is the program's less the
program's own directory. So the file can be the module when every module it imports is found there too (or
nowhere: an optional import the program did without), it has no relative imports, and importing it runs none of
the program: its top level only imports, defines and assigns (an `if __name__ == "__main__":` block is fine).
"""

from __future__ import annotations

import ast
import importlib.machinery
import inspect
import sys
import textwrap
from functools import lru_cache

from kernelband import pyast
from kernelband.tasks.pyfile import module_part

HEADER = "import torch\nimport triton\nimport triton.language as tl\n"


@lru_cache(maxsize=256)
def _tree(path: str) -> ast.Module | None:
    try:
        with open(path, encoding="utf-8") as f:
            return pyast.parse(module_part(f.read()), filename=path)
    except (OSError, SyntaxError, UnicodeDecodeError, ValueError):
        return None


def read(path: str) -> str:
    """The module part of a file (all of it, unless it is itself a task file)."""
    with open(path, encoding="utf-8") as f:
        return module_part(f.read())


def _found(name: str, path: list[str]) -> bool:
    if name in sys.builtin_module_names:
        return True
    try:
        return importlib.machinery.PathFinder.find_spec(name, path) is not None
    except (ImportError, ValueError):
        return False


def local_imports(tree: ast.Module, worker_path: tuple[str, ...], program_path: tuple[str, ...]) -> list[str]:
    """The modules the file imports that only the program's own directory holds (relative imports too)."""
    local = []
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.level:
            local.append("." * node.level + (node.module or ""))
            continue
        if isinstance(node, ast.Import):
            names = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            names = [node.module or ""]
        else:
            continue
        for name in names:
            top = name.split(".")[0]
            if top and not _found(top, list(worker_path)) and _found(top, list(program_path)):
                local.append(name)
    return list(dict.fromkeys(local))


def _is_main_guard(node: ast.stmt) -> bool:
    test = getattr(node, "test", None)
    return (isinstance(node, ast.If) and isinstance(test, ast.Compare) and isinstance(test.left, ast.Name)
            and test.left.id == "__name__")


def import_time_work(tree: ast.Module) -> str | None:
    """The first top-level statement that does more than import, define or assign, or an assignment that calls
    one of the file's own functions: what importing the file would run of the program."""
    own = {n.name for n in tree.body if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef))}

    def check(body: list[ast.stmt]) -> str | None:
        for node in body:
            if isinstance(node, (ast.Import, ast.ImportFrom, ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef,
                                 ast.Pass)) or _is_main_guard(node):
                continue
            if isinstance(node, ast.Expr) and isinstance(node.value, ast.Constant):
                continue  # a docstring
            if isinstance(node, (ast.Assign, ast.AnnAssign, ast.AugAssign)):
                calls = [c for c in ast.walk(node) if isinstance(c, ast.Call)
                         and isinstance(c.func, ast.Name) and c.func.id in own]
                if calls:
                    return f"line {node.lineno} calls {calls[0].func.id}() when the file is imported"
                continue
            if isinstance(node, (ast.If, ast.Try)):
                inner = [*node.body, *node.orelse, *getattr(node, "finalbody", [])]
                inner += [s for h in getattr(node, "handlers", []) for s in h.body]
                if (why := check(inner)) is not None:
                    return why
                continue
            return f"line {node.lineno} runs code when the file is imported (no `if __name__ == \"__main__\":`)"
        return None

    return check(tree.body)


def why_not_module(path: str, worker_path: list[str], program_path: list[str]) -> str | None:
    """None when the file at `path` can be a task's module as written; else why not, in a few words."""
    if not path.endswith(".py"):
        return f"{path} is not a Python file"
    tree = _tree(path)
    if tree is None:
        return f"{path} cannot be read or parsed"
    local = local_imports(tree, tuple(worker_path), tuple(program_path))
    if local:
        return f"{path} imports local module{'s' if len(local) > 1 else ''} {', '.join(local)}"
    return import_time_work(tree)


def _jit_path(obj) -> tuple[object, int]:
    """The plain JIT function under an autotuner or heuristics (their `fn`, `depth` times), or (None, 0)."""
    for depth in range(8):
        if obj is None:
            break
        if type(obj).__name__ in ("JITFunction", "InterpretedFunction"):
            return obj, depth
        obj = getattr(obj, "fn", None)
    return None, 0


def launch_path(fn, module_globals: dict) -> str:
    """How the kernel `fn` is reached from its module: "name", or "name.fn" through an autotuner; "" if not."""
    found = ""
    for name, value in module_globals.items():
        inner, depth = _jit_path(value)
        if inner is fn and (not found or depth == 0):
            found = name + ".fn" * depth
    return found


def extracted_module(fn) -> str:
    """A module of the kernel `fn` alone: its source, the JIT functions it calls from its module (and theirs),
    the module-level numbers it reads and the modules it names, for a kernel whose file cannot be carried."""
    python_fn = fn.fn
    module_globals = python_fn.__globals__
    parts, imports, constants, todo, done = [], [], [], [python_fn], set()
    while todo:
        f = todo.pop()
        if f.__name__ in done:
            continue
        done.add(f.__name__)
        parts.append(textwrap.dedent(inspect.getsource(f)))
        for name in f.__code__.co_names:
            value = module_globals.get(name)
            inner, _ = _jit_path(value)
            if inner is not None and inner.fn.__code__.co_filename == python_fn.__code__.co_filename:
                todo.append(inner.fn)
            elif inspect.ismodule(value) and name not in ("torch", "triton", "tl"):
                imports.append(f"import {value.__name__} as {name}" if value.__name__ != name
                               else f"import {name}")
            elif type(value).__name__ == "constexpr":
                constants.append(f"{name} = tl.constexpr({getattr(value, 'value', value)!r})")
            elif isinstance(value, (bool, int, float, str)):
                constants.append(f"{name} = {value!r}")
    head = HEADER + "".join(f"{line}\n" for line in dict.fromkeys(imports))
    consts = "".join(f"{line}\n" for line in dict.fromkeys(constants))
    return head + "\n" + consts + "\n\n" + "\n\n".join(reversed(parts))
