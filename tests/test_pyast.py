"""kernelband.pyast: parsing from several threads at once. CPython 3.11 raised SystemError (AST constructor
recursion depth mismatch, python/cpython#106905) when a thread switch fell inside `ast.parse`: the grid's
lanes lost a task to it in tests/test_search_quality.py. Without the lock this test fails on 3.11."""

from __future__ import annotations

import gc
import threading
import time

from kernelband import pyast
from kernelband.tasks import load_task

SOURCE = load_task("examples:softmax").module_source


class Yielder:
    """Garbage in a cycle, freed by the collector at whatever allocation triggers it, ast.parse's included;
    its finalizer releases the GIL there, so another thread runs in the middle of that parse."""

    def __init__(self) -> None:
        self.me = self

    def __del__(self) -> None:
        time.sleep(0)


def test_threads_parse_at_once_without_error():
    errors: list[BaseException] = []

    def work() -> None:
        for _ in range(400):
            for _ in range(20):
                Yielder()
            try:
                pyast.parse(SOURCE)
            except BaseException as exc:  # noqa: BLE001  the failure under test is a SystemError
                errors.append(exc)

    threshold = gc.get_threshold()
    gc.set_threshold(50)
    try:
        runners = [threading.Thread(target=work) for _ in range(4)]
        for t in runners:
            t.start()
        for t in runners:
            t.join()
    finally:
        gc.set_threshold(*threshold)
    assert errors == []
    assert pyast.parse(SOURCE).body


def test_the_package_parses_only_through_the_lock():
    # a parse outside it (ast.literal_eval parses too) can meet another thread's: the search proposes in threads
    import re
    from pathlib import Path

    import kernelband

    root = Path(kernelband.__file__).parent
    direct = re.compile(r"(?<![\w.])ast\.(parse|literal_eval)\(")
    found = [f"{p.relative_to(root)}:{i}" for p in root.rglob("*.py") if p.name != "pyast.py"
             for i, line in enumerate(p.read_text().splitlines(), 1) if direct.search(line)]
    assert found == []
