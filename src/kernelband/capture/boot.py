"""The captured program's process: `python -m kernelband.capture.boot RAW MAX_BYTES -- SCRIPT ARGS...` (or
`-- -m MODULE ARGS...`) runs the program as `python SCRIPT ARGS` would, with the recorder installed, then writes
what it recorded to RAW (`capture.json`, and the kept tensors in `data/`). An exception that ends the program
prints its usual traceback and is also written, in one line, to RAW/failure.txt.
"""

from __future__ import annotations

import os
import runpy
import sys
import time
import traceback
from pathlib import Path

FAILURE_FILE = "failure.txt"


def _exit_code(exc: SystemExit) -> int:
    if exc.code is None:
        return 0
    if isinstance(exc.code, int):
        return exc.code
    print(exc.code, file=sys.stderr)
    return 1


def main(argv: list[str]) -> int:
    raw, max_bytes, sep, *program = argv
    raw_dir = Path(raw)
    if sep != "--" or not program:
        print("usage: python -m kernelband.capture.boot RAW MAX_BYTES -- SCRIPT ARGS...", file=sys.stderr)
        return 2
    module = program[1] if program[0] == "-m" else None
    program_dir = os.getcwd() if module else os.path.dirname(os.path.abspath(program[0]))
    # Where a task's module can import from: the evaluator's workers have this path, less the program's
    # own directory (KernelBand's source root, which they are given, is on it already).
    worker_path = [p for p in sys.path[1:] if p and os.path.isabs(p)
                   and os.path.realpath(p) != os.path.realpath(program_dir)]
    sys.path[0] = program_dir

    import torch

    from kernelband.evaluation.env import detect_mode

    # Where KernelBand runs kernels in Triton's interpreter (no GPU), the program's run there too. Decided here,
    # before Triton is imported, and not by `kernelband capture`'s own process, which so never imports torch.
    if detect_mode() == "interpreter":
        os.environ.setdefault("TRITON_INTERPRET", "1")

    import triton

    from kernelband.capture import records
    from kernelband.capture.record import Recorder

    recorder = Recorder(raw_dir / "data", int(max_bytes), worker_path, [program_dir])
    recorder.install()
    code = 0
    t0 = time.perf_counter()
    try:
        if module:
            sys.argv = [module, *program[2:]]
            runpy.run_module(module, run_name="__main__", alter_sys=True)
        else:
            sys.argv = list(program)
            runpy.run_path(program[0], run_name="__main__")
    except SystemExit as exc:
        code = _exit_code(exc)
    except BaseException as exc:  # noqa: BLE001 - the program's own failure: reported, and its exit code kept
        tb = exc.__traceback__
        while tb is not None and (tb.tb_frame.f_code.co_filename in (__file__, runpy.__file__)
                                  or tb.tb_frame.f_code.co_filename.startswith("<frozen")):
            tb = tb.tb_next  # the program's traceback as python would print it: without this file and runpy
        traceback.print_exception(type(exc), exc, tb)
        (raw_dir / FAILURE_FILE).write_text(f"{type(exc).__name__}: {exc}".splitlines()[0][:500])
        code = 1
    wall_s = time.perf_counter() - t0
    recorder.uninstall()
    t1 = time.perf_counter()
    entries = recorder.finish()
    gpu = not recorder.interpreter
    capture = records.Capture(
        command=["python", *program], mode="gpu" if gpu else "interpreter",
        device=torch.cuda.get_device_name() if gpu else "Triton interpreter on the CPU", exit_code=code,
        wall_s=wall_s, hooks_s=recorder.hooks_s, finish_s=time.perf_counter() - t1, launches=recorder.launches,
        benchmark_launches=recorder.benchmark_launches, unattributed=recorder.unattributed,
        graph_launches=recorder.graph_launches, new_launches=recorder.new_launches, hooks_new_s=recorder.hooks_new_s,
        program_dir=program_dir, worker_path=worker_path, hook_errors=recorder.errors,
        versions={"torch": torch.__version__, "triton": triton.__version__,
                  "python": sys.version.split()[0]},
        entries=entries)
    capture.save(raw_dir)
    return code


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
