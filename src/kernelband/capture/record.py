"""The recorder: inside the captured program, every Triton launch with its kernel, its entry, its arguments,
grid and device time.

How a launch reaches it:

* Compiled kernels (a GPU): Triton's own hooks. `knobs.runtime.jit_cache_hook` names each JIT function as it is
  first compiled; the recorder gives it a `launch_metadata` callback (the hook Triton's profiler uses), which
  hands the launch's grid, compiled metadata and bound arguments to `knobs.runtime.launch_enter_hook`. The enter
  and exit hooks record CUDA events on the launch's stream around the kernel: its device time, with no wait.
* The interpreter has no launch hooks; there the recorder wraps `InterpretedFunction.run`, and a launch's
  device time is the wall time of its interpretation.

The entry is the first frame above the launch outside Triton, torch, the standard library and the capture. A
call of the entry starts where its frame is new, or where its frame launches again from an earlier point in its
code; its arguments are read then, from the frame. Launches an autotuner makes to benchmark its configs are
counted apart: they are not the program's work. A hook never raises into the program: an error in it is counted
and reported.

What a launch costs: where its entry, kernel and signature are seen, a walk up the frames (classified once per
code object), the signature's key (shapes, strides, dtypes, integers) and, on a GPU, two event records; nothing
waits for the device and no torch op is issued. A new entry, kernel or signature is described once, with copies
only (`describe`). Whatever reads back from the device or from files is left to the end (`finish`): the
events' times, the statistics, the kept tensors, and the module a wrapped kernel's task carries.
"""

from __future__ import annotations

import collections
import inspect
import os
import sys
import sysconfig
import time
from pathlib import Path
from typing import Protocol

import torch
import triton

from kernelband.capture import describe, records, sources

MAX_CASES = 64  # distinct signatures kept per entry and per kernel; calls beyond count as uncased time
_KEY = "kernelband_capture"
_SKIP, _BENCH, _USER = 0, 1, 2


def _package_dir(module) -> str:
    return os.path.dirname(os.path.abspath(module.__file__)) + os.sep


def interpreting() -> bool:
    knobs = getattr(triton, "knobs", None)
    if knobs is not None and hasattr(knobs.runtime, "interpret"):
        return bool(knobs.runtime.interpret)
    return os.environ.get("TRITON_INTERPRET", "0") not in ("", "0")


class _Unit:
    """One entry function while the program runs: its record and what tells its calls apart."""

    def __init__(self, record: records.Entry, max_bytes: int):
        self.record = record
        self.cases: dict[tuple, records.Case | None] = {}
        self.kernels: dict[int, _KernelState] = {}
        self.frame_id = 0
        self.lasti = -1
        self.call_case: records.Case | None = None
        self.budget = describe.Budget(max_bytes)


class _KernelState:
    def __init__(self, fn, record: records.Kernel, max_bytes: int):
        self.fn = fn  # held, so that its id stays its own
        self.record = record
        self.cases: dict[tuple, records.Case] = {}
        self.budget = describe.Budget(max_bytes)


class Timer(Protocol):
    """How a launch's time is taken: `start` as it is launched (on `stream`, a driver handle, where there is
    one), `stop` once it is queued; `collect` adds the times to their targets (`wait`: all of them, at the
    end). `capturing` says whether launches go into a CUDA graph being captured, where nothing may be added."""

    def start(self, targets: list, stream) -> None: ...

    def stop(self) -> None: ...

    def collect(self, wait: bool) -> None: ...

    def capturing(self) -> bool: ...


class WallTimer:
    """Time per launch on the host's clock: the interpreter's, where the launch is the computation."""

    def __init__(self):
        self.open = None

    def start(self, targets: list, stream) -> None:
        self.open = (time.perf_counter(), targets)

    def stop(self) -> None:
        if self.open is None:
            return
        t0, targets = self.open
        self.open = None
        ms = (time.perf_counter() - t0) * 1e3
        for t in targets:
            t.time_ms += ms

    def collect(self, wait: bool) -> None:
        pass

    def capturing(self) -> bool:
        return False


class CudaTimer:
    """Device time per launch: CUDA events on the launch's stream, read back in order once they have passed.
    Nothing waits for the device before the end (`collect(wait=True)`): an event's time is read only once
    `query` says it has passed, in batches of `BATCH` launches.

    `cuda` is torch.cuda, or a stand-in with the same names (tests count its waits without a GPU)."""

    BATCH = 512

    def __init__(self, cuda=None):
        self.cuda = torch.cuda if cuda is None else cuda
        self.free: list = []
        self.pending: collections.deque = collections.deque()
        self.streams: dict[tuple[int, int], object] = {}
        self.open = None

    def _event(self):
        return self.free.pop() if self.free else self.cuda.Event(enable_timing=True)

    def capturing(self) -> bool:
        """Whether the launch goes into a CUDA graph being captured: it runs later, at each replay, and an
        event recorded or a copy queued now would become part of the graph."""
        return self.cuda.is_current_stream_capturing()

    def _stream(self, handle: int):
        """The stream object of a launch's stream handle, made once per device and handle: making the current
        stream's object costs more than the rest of a launch's timing."""
        key = (self.cuda.current_device(), handle)
        stream = self.streams.get(key)
        if stream is None:
            current = self.cuda.current_stream()
            stream = current if current.cuda_stream == handle else self.cuda.ExternalStream(handle)
            self.streams[key] = stream
        return stream

    def start(self, targets: list, stream) -> None:
        on = self._stream(stream)
        event = self._event()
        event.record(on)
        self.open = (event, targets, on)

    def stop(self) -> None:
        if self.open is None:
            return
        start, targets, stream = self.open
        self.open = None
        end = self._event()
        end.record(stream)
        self.pending.append((start, end, targets))
        if len(self.pending) >= self.BATCH:
            self.collect(wait=False)

    def collect(self, wait: bool) -> None:
        if wait:
            self.cuda.synchronize()
        while self.pending and (wait or self.pending[0][1].query()):
            start, end, targets = self.pending.popleft()
            ms = start.elapsed_time(end)
            for t in targets:
                t.time_ms += ms
            self.free += (start, end)


class Recorder:
    def __init__(self, data_dir: Path, max_bytes: int, worker_path: list[str], program_path: list[str],
                 interpreter: bool | None = None, timer: Timer | None = None):
        self.data_dir = data_dir
        self.max_bytes = max_bytes
        self.worker_path = worker_path
        self.program_path = program_path
        self.interpreter = interpreting() if interpreter is None else interpreter
        self.units: dict[object, _Unit] = {}
        self.keeper = describe.Keeper()
        self.timer = timer or (WallTimer() if self.interpreter else CudaTimer())
        self.hooks_s = 0.0
        # of those, the launches that brought a new entry, kernel or signature (described once each) and their time
        self.new_launches = 0
        self.hooks_new_s = 0.0
        self._new = False  # the launch in the hooks now brought something new
        self.launches = 0
        self.benchmark_launches = 0
        self.unattributed = 0
        self.graph_launches = 0
        self.errors: list[str] = []
        self._cases = 0
        self._where: dict[object, int] = {}
        # the capture's own frames (its hooks) are skipped too; the rest of KernelBand (its examples) is not
        self._skip_dirs = tuple(_package_dir(m) for m in (triton, torch)) + (
            os.path.dirname(os.path.abspath(__file__)) + os.sep,)
        stdlib = sysconfig.get_paths()["stdlib"]
        self._stdlib = os.path.realpath(stdlib) + os.sep, stdlib + os.sep
        self._attached: dict[int, tuple[object, object]] = {}
        self._known: dict[int, tuple] = {}  # per kernel (held, so that its id stays its own): its constexprs
        self._why: dict[str, str | None] = {}  # per source file: why it cannot be a task's module (None: it can)
        self._undo: list = []

    # -- hooks ----------------------------------------------------------------------------------------------
    def install(self) -> None:
        if self.interpreter:
            from triton.runtime.interpreter import InterpretedFunction
            original = InterpretedFunction.run
            recorder = self

            def run(fn, *args, grid, warmup, **kwargs):
                if warmup:
                    return original(fn, *args, grid=grid, warmup=warmup, **kwargs)
                t0 = time.perf_counter()
                recorder._new = False
                targets = recorder._interpreted(fn, args, kwargs, grid)
                if targets:
                    recorder.timer.start(targets, None)
                t1 = time.perf_counter()
                try:
                    return original(fn, *args, grid=grid, warmup=warmup, **kwargs)
                finally:
                    t2 = time.perf_counter()
                    recorder.timer.stop()
                    recorder._spent((t1 - t0) + (time.perf_counter() - t2), last=True)

            InterpretedFunction.run = run
            self._undo.append(lambda: setattr(InterpretedFunction, "run", original))
            return
        runtime = triton.knobs.runtime
        previous = runtime.jit_cache_hook

        def discover(**kw):
            try:
                self._attach(kw["fn"].jit_function)
            except Exception as exc:  # noqa: BLE001 - a hook never raises into the program
                self._error(exc)
            return previous(**kw) if previous is not None else None

        runtime.jit_cache_hook = discover
        runtime.launch_enter_hook.add(self._enter)
        runtime.launch_exit_hook.add(self._exit)
        self._undo += [lambda: setattr(runtime, "jit_cache_hook", previous),
                       lambda: runtime.launch_enter_hook.remove(self._enter),
                       lambda: runtime.launch_exit_hook.remove(self._exit)]

    def uninstall(self) -> None:
        for undo in reversed(self._undo):
            undo()
        self._undo.clear()
        for fn, user in self._attached.values():
            fn.launch_metadata = user
        self._attached.clear()

    def _attach(self, fn) -> None:
        if id(fn) in self._attached:
            return
        user = fn.launch_metadata

        def metadata(grid, compiled, args, _fn=fn, _user=user):
            out = dict(_user(grid, compiled, args)) if _user is not None else {}
            out[_KEY] = (_fn, grid, compiled, args)
            return out

        self._attached[id(fn)] = (fn, user)
        fn.launch_metadata = metadata

    def _enter(self, metadata) -> None:
        t0 = time.perf_counter()
        self._new = False
        try:
            data = metadata.get()
            got = data.get(_KEY)
            if got is None:
                self.launches += 1
                self.unattributed += 1
                return
            fn, grid, compiled, args = got
            options = {k: getattr(compiled, k) for k in ("num_warps", "num_stages") if hasattr(compiled, k)}
            known = self._known.get(id(fn))
            if known is None:
                known = self._known[id(fn)] = (fn, [p.name for p in fn.params if p.is_constexpr])
            targets = self._launch(fn, dict(args), [int(g) for g in grid], options, known[1])
            if targets:
                self.timer.start(targets, data.get("stream"))
        except Exception as exc:  # noqa: BLE001
            self._error(exc)
        finally:
            self._spent(time.perf_counter() - t0, last=False)

    def _exit(self, metadata) -> None:
        t0 = time.perf_counter()
        try:
            self.timer.stop()
        except Exception as exc:  # noqa: BLE001
            self._error(exc)
        finally:
            self._spent(time.perf_counter() - t0, last=True)

    def _spent(self, seconds: float, last: bool) -> None:
        """Count time in the hooks; `last`: the launch's hooks are done."""
        self.hooks_s += seconds
        if self._new:
            self.hooks_new_s += seconds
            if last:
                self.new_launches += 1

    def _interpreted(self, fn, args: tuple, kwargs: dict, grid) -> list | None:
        try:
            known = self._known.get(id(fn))
            if known is None:
                signature = inspect.signature(fn.fn)
                constexprs = [n for n, p in signature.parameters.items() if "constexpr" in str(p.annotation)]
                known = self._known[id(fn)] = (fn, constexprs, signature)
            _, constexprs, signature = known
            params = signature.parameters
            bound = signature.bind_partial(*args, **{k: v for k, v in kwargs.items() if k in params})
            bound.apply_defaults()
            values = dict(bound.arguments)
            options = {k: v for k, v in kwargs.items() if k not in params and k in ("num_warps", "num_stages")}
            if callable(grid):
                grid = grid(values)
            return self._launch(fn, values, [int(g) for g in grid], options, constexprs)
        except Exception as exc:  # noqa: BLE001
            self._error(exc)
            return None

    def _error(self, exc: Exception) -> None:
        if len(self.errors) < 5:
            self.errors.append(f"{type(exc).__name__}: {exc}")

    # -- one launch -----------------------------------------------------------------------------------------
    def _classify(self, code) -> int:
        path = code.co_filename
        if path.startswith("<frozen") or path.startswith(self._stdlib) and "-packages" not in path:
            return _SKIP
        if path.startswith(self._skip_dirs):
            bench = code.co_name == "_bench" and path.endswith("autotuner.py")
            return _BENCH if bench else _SKIP
        return _USER

    def _entry_frame(self, frame):
        """The entry's frame, or None (an autotuner's benchmark, or no frame outside Triton and torch)."""
        while frame is not None:
            where = self._where.get(frame.f_code)
            if where is None:
                where = self._where[frame.f_code] = self._classify(frame.f_code)
            if where == _USER:
                return frame
            if where == _BENCH:
                self.benchmark_launches += 1
                return None
            frame = frame.f_back
        self.unattributed += 1
        return None

    def _launch(self, fn, values: dict, grid: list[int], options: dict, constexprs: list[str]) -> list | None:
        self.launches += 1
        if self.timer.capturing():
            self.graph_launches += 1
            return None
        frame = self._entry_frame(sys._getframe(2))
        if frame is None:
            return None
        unit = self.units.get(frame.f_code)
        if unit is None:
            self._new = True
            unit = self.units[frame.f_code] = _Unit(self._new_entry(frame), self.max_bytes)
        entry = unit.record
        targets: list = [entry]
        if entry.mode == "entry":
            case = self._call_case(unit, frame)
            targets.append(case if case is not None else _Uncased(entry))
        else:
            self._new_call(unit, frame)
        state = unit.kernels.get(id(fn))
        if state is None:
            self._new = True
            state = unit.kernels[id(fn)] = _KernelState(fn, self._new_kernel(fn, constexprs), self.max_bytes)
            entry.kernels.append(state.record)
        kernel = state.record
        kernel.launches += 1
        targets.append(kernel)
        names = [n for n in values if n not in constexprs]
        args = [values[n] for n in names]
        key = (describe.key(args), tuple(grid), tuple(sorted(options.items())),
               tuple((n, values[n]) for n in constexprs))
        case = state.cases.get(key)
        if case is None and len(state.cases) < MAX_CASES:
            self._new = True
            keep = state.budget if entry.mode == "launch" else None  # entry mode keeps the entry's arguments
            cid = self._case_id()
            case = records.Case(cid, self.keeper.describe(names, args, cid, keep), grid=grid,
                                constexprs={n: records.constant(values[n]) for n in constexprs}, options=options)
            state.cases[key] = case
            kernel.cases.append(case)
        if case is not None:
            case.calls += 1
            targets.append(case)
        return targets

    def _case_id(self) -> str:
        self._cases += 1
        return f"c{self._cases - 1}"

    def _new_call(self, unit: _Unit, frame) -> bool:
        new = id(frame) != unit.frame_id or frame.f_lasti <= unit.lasti
        unit.frame_id, unit.lasti = id(frame), frame.f_lasti
        if new:
            unit.record.calls += 1
        return new

    def _call_case(self, unit: _Unit, frame) -> records.Case | None:
        """The case of the entry's current call: on its first launch, from the arguments in its frame."""
        if not self._new_call(unit, frame):
            return unit.call_case
        entry = unit.record
        local = frame.f_locals
        try:
            values = [local[name] for name in entry.params]
        except KeyError:  # an argument deleted before the launch
            unit.call_case = None
            return None
        key = describe.key(values)
        if key not in unit.cases:
            self._new = True
            case = None
            if len(unit.cases) < MAX_CASES and all(describe.kind(v) != "other" for v in values):
                cid = self._case_id()
                case = records.Case(cid, self.keeper.describe(entry.params, values, cid, unit.budget))
                entry.cases.append(case)
            unit.cases[key] = case
        case = unit.call_case = unit.cases[key]
        if case is not None:
            case.calls += 1
        return case

    # -- first sight of an entry or a kernel ----------------------------------------------------------------
    def _new_entry(self, frame) -> records.Entry:
        code = frame.f_code
        qualname = getattr(code, "co_qualname", code.co_name)
        entry = records.Entry(name=qualname, function=code.co_name, file=code.co_filename,
                              line=code.co_firstlineno, mode="entry")
        why = self._why_launch_mode(frame, qualname)
        if why:
            entry.mode, entry.why = "launch", why
        else:
            entry.params = list(code.co_varnames[:code.co_argcount])
        return entry

    def _why_launch_mode(self, frame, qualname: str) -> str:
        code = frame.f_code
        if code.co_name == "<module>":
            return f"the kernels are launched at the top level of {code.co_filename}"
        if qualname != code.co_name:
            return f"{qualname} is not a function at the top level of its module"
        found = frame.f_globals.get(code.co_name)
        if found is None or getattr(inspect.unwrap(found), "__code__", None) is not code:
            return f"{code.co_name} is not found by its name in its module"
        if code.co_flags & (inspect.CO_VARARGS | inspect.CO_VARKEYWORDS) or code.co_kwonlyargcount:
            return f"{code.co_name} takes *args, **kwargs or keyword-only arguments"
        local = frame.f_locals
        for name in code.co_varnames[:code.co_argcount]:
            if describe.kind(local.get(name)) == "other":
                return f"{code.co_name}'s argument {name} is a {type(local.get(name)).__name__}, not a tensor or a number"
        return self._why_not_module(code.co_filename) or ""

    def _why_not_module(self, path: str) -> str | None:
        """`sources.why_not_module`, once per file: it parses the file and looks for each module it imports."""
        if path not in self._why:
            self._why[path] = sources.why_not_module(path, self.worker_path, self.program_path)
        return self._why[path]

    def _new_kernel(self, fn, constexprs: list[str]) -> records.Kernel:
        python_fn = fn.fn
        code = python_fn.__code__
        return records.Kernel(name=python_fn.__name__, file=code.co_filename, line=code.co_firstlineno,
                              params=list(inspect.signature(python_fn).parameters), constexpr_params=constexprs)

    def _add_module(self, fn, kernel: records.Kernel) -> None:
        """The module a wrapping task carries for `kernel` (an entry in launch mode): the kernel's file, or the
        kernel alone where that file cannot be the module. It reads source files, so it is done at the end, not
        in a launch's hooks."""
        python_fn = fn.fn
        code = python_fn.__code__
        kernel.launch_as = sources.launch_path(fn, python_fn.__globals__)
        why = self._why_not_module(code.co_filename)
        try:
            if why or not kernel.launch_as:
                kernel.module_source = sources.extracted_module(fn)
                kernel.launch_as = python_fn.__name__
                kernel.module_note = f"the kernel alone, with what it uses from its file ({why or 'not found by name'})"
            else:
                kernel.module_source = sources.read(code.co_filename)
        except (OSError, TypeError) as exc:
            kernel.module_note = f"its source cannot be read ({exc})"

    # -- the end --------------------------------------------------------------------------------------------
    def finish(self) -> list[records.Entry]:
        """Wait for the device, read back times and statistics, write the kept tensors: the entries, by device
        time, most first."""
        self.timer.collect(wait=True)
        self.keeper.finish(self.data_dir)
        for unit in self.units.values():
            if unit.record.mode == "launch":
                for state in unit.kernels.values():
                    try:
                        self._add_module(state.fn, state.record)
                    except Exception as exc:  # noqa: BLE001 - one kernel without a module; the rest is written
                        self._error(exc)
                        state.record.module_note = f"its module cannot be made ({type(exc).__name__}: {exc})"
        entries = [u.record for u in self.units.values()]
        for e in entries:
            e.kernels.sort(key=lambda k: -k.time_ms)
        return sorted(entries, key=lambda e: -e.time_ms)


class _Uncased:
    """Where the device time of a call with no case goes: the entry's `uncased_ms`."""

    def __init__(self, entry: records.Entry):
        self.entry = entry

    @property
    def time_ms(self) -> float:
        return self.entry.uncased_ms

    @time_ms.setter
    def time_ms(self, value: float) -> None:
        self.entry.uncased_ms = value
