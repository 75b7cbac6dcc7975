"""The worker's stuck watch (worker/stuck.py): a thread that stays in its module's own code is reported, one
that keeps calling into library code (as compiling does) is not."""

from __future__ import annotations

import threading
import time

from kernelband.worker.stuck import StuckWatch

MODULE = "/tmp/kb_candidate.py"  # the file name the module's code carries


def _module_function(body: str, **names):
    """A function whose code is the module's own (compiled with the module's file name)."""
    scope = dict(names)
    exec(compile("def work(stop):\n" + body, MODULE, "exec"), scope)
    return scope["work"]


def _library_step():
    """Library code (this file): where a compiling module spends its time."""
    return sum(range(200))


def _watched(work, limit_s: float, run_s: float) -> tuple[list, float]:
    """Runs `work` for up to `run_s` under the watch in a thread; what was reported, and when."""
    reports: list = []
    stop = threading.Event()
    t0 = time.monotonic()

    def on_stuck(stuck):
        reports.append((stuck, time.monotonic() - t0))
        stop.set()

    watch = StuckWatch(on_stuck, sample_s=0.05)

    def target():
        with watch.watch(MODULE, limit_s, "importing it"):
            work(stop)

    thread = threading.Thread(target=target, daemon=True)
    thread.start()
    stop.wait(run_s)
    stop.set()
    thread.join(5)
    return reports, time.monotonic() - t0


def test_a_loop_in_the_modules_own_code_is_reported_with_its_line():
    loop = _module_function("    x = 0\n    while not stop.is_set():\n        x += 1\n")
    reports, _ = _watched(loop, limit_s=0.5, run_s=10)
    assert len(reports) == 1
    stuck, after = reports[0]
    assert stuck.line in (2, 3) and stuck.doing == "importing it"
    assert 0.5 <= after < 5
    assert stuck.message().startswith(f"stuck: the module's own code ran 1 s without returning (line {stuck.line}")


def test_a_module_that_keeps_calling_library_code_is_not_stuck():
    compiling = _module_function("    while not stop.is_set():\n        step()\n", step=_library_step)
    reports, took = _watched(compiling, limit_s=0.5, run_s=2)
    assert reports == [] and took >= 2


def test_no_limit_means_no_watch():
    loop = _module_function("    while not stop.is_set():\n        pass\n")
    reports, took = _watched(loop, limit_s=0, run_s=1)
    assert reports == [] and took >= 1
