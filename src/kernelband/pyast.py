"""`ast.parse` that threads may call at once.

CPython 3.11 keeps the depth counter of the AST constructor in interpreter-wide state, so two threads
parsing at the same moment can fail with `SystemError: AST constructor recursion depth mismatch`
(python/cpython#106905). The search parses in threads: a sweep's runs propose and load tasks side by side,
and the exhaustive grid loads one task per GPU. Every parse in this package goes through this lock; parsing
a kernel module takes about a millisecond, so the lock costs nothing a user would see.
"""

from __future__ import annotations

import ast
import threading

_lock = threading.RLock()  # re-entrant: a finalizer that runs inside a parse may parse too


def parse(source: str, filename: str = "<unknown>", mode: str = "exec") -> ast.AST:
    with _lock:
        return ast.parse(source, filename=filename, mode=mode)


def literal_eval(source: str):
    """`ast.literal_eval` of a string, which parses it first."""
    with _lock:
        return ast.literal_eval(source)
