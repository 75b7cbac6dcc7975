"""The worker: a process that loads one module (the reference or a candidate)
and answers the evaluator's requests about it.

It is started warm (torch imported, CUDA initialised, Triton's driver helpers
built) with an environment stripped of secrets, in its own directory, and it
confines itself with `sandbox.apply` before the first line of task or
candidate code runs. It never decides whether its module is correct: it only
builds inputs, runs, times and reports, and the parent compares.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import random
import socket
import sys
import threading
import time
import traceback

from kernelband.worker import poison

_CUDA_FAULT_MARKERS = (
    "illegal memory access", "unspecified launch failure", "misaligned address", "illegal instruction",
    "device-side assert", "CUDA error: an illegal", "cudaErrorIllegalAddress", "cudaErrorLaunchFailure",
    "CUDA_ERROR_ILLEGAL_ADDRESS", "CUDA_ERROR_LAUNCH_FAILED", "hardware stack error",
)


def _error_text(exc: BaseException) -> str:
    text = "".join(traceback.format_exception(type(exc), exc, exc.__traceback__))
    return text[-6000:]


def _is_cuda_fault(text: str) -> bool:
    return any(marker in text for marker in _CUDA_FAULT_MARKERS)


_FREES_MEMORY = frozenset({"run", "tests", "selfcheck", "time", "features", "profile", "calibrate", "baselines"})


class Worker:
    def __init__(self, sock: socket.socket, workdir: str, mode: str):
        self.created = time.perf_counter()  # the start-up time counts from here: imports, CUDA, first kernel
        self.sock = sock
        self.dir = workdir
        self.mode = mode
        self.gpu = mode == "gpu"
        self.device = "cuda" if self.gpu else "cpu"
        self.module = None
        self.role = ""
        self.harness = None
        self.kept: list = []
        self.files = 0
        self.sandbox: dict = {}
        self.phases: dict = {}  # seconds of the start's GPU part, by phase (context, first_kernel, ...)
        self.send_lock = threading.Lock()  # a reply, or the stuck watch's answer in its place: never both
        self.stuck = None  # the stuck watch (worker/stuck.py), from the start on

    # -- start-up -------------------------------------------------------------------------------
    def load_libraries(self) -> None:
        """The slow, CPU-only part of the start: importing torch and Triton."""
        import torch  # noqa: F401
        import triton  # noqa: F401
        import triton.testing  # noqa: F401

    def start_context(self) -> None:
        """The first part of the start that uses the GPU: CUDA's context. The parent lets it run when no timing
        is on the GPU, and lets the rest (`start`) run in a hold of its own, so that a timing that comes
        meanwhile waits for one part, not both (a worker's start was the largest cause of timings waiting for
        shared steps: BENCHMARKS.md, evaluator throughput)."""
        import torch

        t = time.perf_counter()
        if self.gpu:
            torch.cuda.init()
            torch.empty(1, device="cuda")
        else:
            from kernelband.worker import cpu_shim
            cpu_shim.install()
        self.phases = {"context": time.perf_counter() - t}

    def start(self) -> dict:
        """The rest of the start that uses the GPU (Triton's driver, a first kernel), then the guards and the
        sandbox: the worker is ready."""
        import torch
        import triton

        phases, t = self.phases, time.perf_counter()
        from kernelband.worker import guards, warmup_kernel
        warmup_kernel.run(self.device)
        phases["first_kernel"], t = time.perf_counter() - t, time.perf_counter()
        guards.install_launch_hooks()
        self.guard = guards.TamperGuard()
        self.log = guards.LOG
        from kernelband.worker import sandbox
        self.sandbox = sandbox.apply(self.dir)
        from kernelband.worker import stuck
        self.stuck = stuck.for_worker(self.sock, self.send_lock)  # its thread is one of the worker's own
        self.guard.accept_current_threads()
        from kernelband.worker import audit
        audit.block_interpreter_hooks()  # after the sandbox's own audit hook
        if not self.gpu:
            audit.count_interpreter_stores()
        phases["guards_sandbox"] = time.perf_counter() - t
        props = {}
        if self.gpu:
            p = torch.cuda.get_device_properties(0)
            props = {"name": p.name, "sm_count": p.multi_processor_count,
                     "regs_per_sm": getattr(p, "regs_per_multiprocessor", 65536),
                     "max_threads_per_sm": getattr(p, "max_threads_per_multi_processor", 2048),
                     "shared_per_sm": getattr(p, "shared_memory_per_multiprocessor", 233472),
                     "total_memory": p.total_memory, "driver": _driver_version(torch)}
        # `phases`: where the part of the start that holds the GPU (shared) went, in seconds
        return {"op": "ready", "pid": os.getpid(), "startup_s": time.perf_counter() - self.created, "phases": phases,
                "sandbox": self.sandbox, "device": props,
                "versions": {"torch": torch.__version__, "triton": triton.__version__,
                             "python": sys.version.split()[0]}}

    # -- requests -------------------------------------------------------------------------------
    def handle(self, request: dict) -> dict:
        op = request.get("op")
        handler = getattr(self, f"op_{op}", None)
        if handler is None:
            return {"ok": False, "outcome": "internal", "error": f"unknown op {op!r}"}
        reply = handler(request)
        if self.gpu and op in _FREES_MEMORY and reply.get("outcome") != "crashed":
            # Reference workers stay alive between candidates: give their large shapes' memory back
            # (the inputs of a timed shape and do_bench's L2-flush buffer too), or a few dozen idle
            # references fill the GPU.
            import torch

            try:
                torch.cuda.empty_cache()
            except Exception:  # noqa: BLE001 - a faulted context: the reply already says what happened
                pass
        return reply

    def _seed(self, seed: int) -> None:
        import torch
        random.seed(seed)
        torch.manual_seed(seed)
        try:
            import numpy
            numpy.random.seed(seed % (2**32))
        except ImportError:
            pass

    def _tamper(self) -> list[str]:
        return self.guard.changed()

    def op_load(self, request: dict) -> dict:
        task = request["task"]
        role = request["role"]
        source = request["module_source"]
        module_name = "kb_reference" if role == "ref" else "kb_candidate"
        self.role = role
        profiler_s = None
        if self.gpu and request.get("profiler") and not os.environ.get("CUDA_INJECTION64_PATH"):
            # CUPTI started for the span timer before any of the module runs (seconds of CPU a process:
            # BENCHMARKS.md, timing repeatability), not under another tool's injection (ncu)
            from kernelband.worker.timing import warm_profiler
            profiler_s = warm_profiler()
        if self.gpu and request.get("tune"):
            import triton

            from kernelband.worker.timing import tune_with
            tune_with(triton.runtime.driver.active, self.guard.original("triton.testing:do_bench"),
                      **request["tune"])
        path = os.path.join(self.dir, f"{module_name}.py")
        with open(path, "w") as f:
            f.write(source)
        from kernelband.worker import harness as harness_mod
        t0 = time.perf_counter()
        try:
            with self.stuck.watch(path, request.get("stuck_s"), "importing it"):
                module = harness_mod.import_file(module_name, path)
        except BaseException as exc:  # noqa: BLE001 - anything the module raises is its outcome
            return {"ok": False, "outcome": "compile_error", "error": _error_text(exc)}
        self.module = module
        try:
            with self.stuck.watch(path, request.get("stuck_s"), "describing the task with it"):
                self.harness = harness_mod.for_task(task, module, source, self.mode)
                info = self.harness.describe(self.mode)
        except ImportError as exc:
            # The performance script imports the entry point from the module.
            return {"ok": False, "outcome": "compile_error", "error": _error_text(exc)}
        except BaseException as exc:  # noqa: BLE001
            return {"ok": False, "outcome": "task_error", "error": _error_text(exc)}
        if not callable(getattr(module, info["entry"], None)):
            return {"ok": False, "outcome": "compile_error",
                    "error": f"the module defines no callable {info['entry']!r} (the task's entry point)"}
        return {"ok": True, "info": info, "load_s": time.perf_counter() - t0, "profiler_s": profiler_s,
                "tampered": self._tamper()}

    def op_precompile(self, request: dict) -> dict:
        """Compile the module's kernels for the given shapes (and the task's own test cases, with `tests`)
        without launching them."""
        if not self.gpu:
            return {"ok": True, "compile_s": 0.0}
        from triton.runtime.jit import JITFunction
        try:
            from triton.runtime.autotuner import Autotuner
        except ImportError:
            Autotuner = None
        run_before = JITFunction.run
        tuner_before = Autotuner.run if Autotuner else None

        def compile_only(self_, *args, grid, warmup, **kwargs):
            return run_before(self_, *args, grid=grid, warmup=True, **kwargs)

        def tune_compile_only(self_, *args, **kwargs):
            kwargs.pop("warmup", None)
            return self_.warmup(*args, **kwargs)

        t0 = time.perf_counter()
        self.log.enabled = False
        JITFunction.run = compile_only
        if Autotuner:
            Autotuner.run = tune_compile_only
        try:
            for index in request["shapes"]:
                try:
                    self._seed(request.get("seed", 0))
                    inputs = self.harness.make_inputs(index, self.device)
                    with self.stuck.watch(self.module.__file__, request.get("stuck_s"), "compiling its kernels"):
                        self.harness.call(inputs)
                except Exception:  # noqa: BLE001 - garbage outputs may upset the wrapper: fine
                    pass
            if request.get("tests") and getattr(self.harness, "has_tests", False):
                # The task's own test cases may call for other specialisations (dtypes, block sizes) than
                # the search shapes: compiled here too, so that no compile runs while the GPU lock is held.
                try:
                    self._seed(request.get("tests_seed", 0))
                    self.harness.run_tests()
                except Exception:  # noqa: BLE001
                    pass
        finally:
            JITFunction.run = run_before
            if Autotuner:
                Autotuner.run = tuner_before
            self.log.enabled = True
            import torch
            torch.cuda.synchronize()
        return {"ok": True, "compile_s": time.perf_counter() - t0}

    def _write(self, obj, tag: str) -> dict:
        """The reply's fields that carry `obj`: its entries, and its tensors' file and layout."""
        from kernelband import tensorfile
        from kernelband.worker.outputs import flatten
        entries, tensors = flatten(obj)
        if not tensors:
            return {"file": None, "entries": entries}
        self.files += 1
        path = os.path.join(self.dir, f"out-{self.files}-{tag}.tensors")
        return {"file": path, "layout": tensorfile.write(tensors, path), "entries": entries}

    def op_tune(self, request: dict) -> dict:
        """Call the module once on inputs of one shape and keep nothing: an autotuner in it times its
        configs for that shape now, so that the correctness runs after it find them chosen. The reply says
        what they chose (`tuners.choices_since`)."""
        import torch

        from kernelband.worker import tuners
        try:
            before = tuners.snapshot(self.module)
        except Exception:  # noqa: BLE001 - an object of the module's that attribute reads upset: nothing recorded
            before = None
        try:
            self._seed(request["seed"])
            self.harness.call(self.harness.make_inputs(request["shape"], self.device))
            if self.gpu:
                torch.cuda.synchronize()
        except BaseException as exc:  # noqa: BLE001
            return self._failed(exc)
        # the configurations the module's autotuners chose for the keys this shape met first
        try:
            chosen = tuners.choices_since(self.module, before) if before is not None else []
        except Exception:  # noqa: BLE001 - an autotuner without the attributes Triton's has: nothing recorded
            chosen = []
        return {"ok": True, "tuned": chosen, "tampered": self._tamper()}

    def _failed(self, exc: BaseException, tampered: bool = True) -> dict:
        """The reply for a call of the module that raised: a CUDA fault is `crashed`. With `tampered`, it says
        what the module replaced, as the op's own reply would."""
        text = _error_text(exc)
        outcome = "crashed" if self.gpu and _is_cuda_fault(text) else "runtime_error"
        reply = {"ok": False, "outcome": outcome, "error": text}
        return {**reply, "tampered": self._tamper()} if tampered else reply

    def op_run(self, request: dict) -> dict:
        """Run the module (or the task's reference) on fresh inputs of one shape."""
        import torch

        from kernelband.worker import audit
        from kernelband.worker.harness import tensors_in
        index, seed = request["shape"], request["seed"]
        use_reference = request.get("use_reference", False) and getattr(self.harness, "has_reference", False)
        plain = self.role != "ref"  # a candidate's outputs must be plain tensors; the task's own code is trusted
        try:
            self._seed(seed)
            inputs = self.harness.make_inputs(index, self.device)
            in_tensors = tensors_in(inputs)
            before = [t.clone() for t in in_tensors]
            self.log.reset()
            threads_before = self.guard.new_threads()
            modes = audit.function_modes()
            t0 = time.perf_counter()
            out = self.harness.reference(inputs) if use_reference else self.harness.call(inputs)
            call_s = time.perf_counter() - t0
            # Before anything touches the output (worker/audit.py): a lazy subclass or hook of the candidate's
            # must not get to run first; the values written for the parent are those it returned.
            problem = audit.output_problem(out, ("cuda", "cpu") if self.gpu else ("cpu",), modes) if plain else ""
            if problem:
                return {"ok": False, "outcome": "suspicious", "error": problem, "check": "plain_output",
                        "tampered": self._tamper()}
            written = audit.snapshot(out) if plain else out
            out_tensors = tensors_in(out)
            # Work still running on another stream or thread, or a hook filling the outputs later, shows up as
            # a difference between the copy taken now (on the current stream) and the tensors once everything
            # has finished, the outputs written included.
            copies = tensors_in(written) if plain else [t.clone() for t in out_tensors] if self.gpu else []
            if self.gpu:
                torch.cuda.synchronize()
                time.sleep(0.002)
                torch.cuda.synchronize()
            new_threads = [t for t in self.guard.new_threads() if t not in threads_before]
            mutated = [i for i, (a, b) in enumerate(zip(before, in_tensors)) if not _same(a, b)]
        except BaseException as exc:  # noqa: BLE001
            return self._failed(exc)
        aliased = []
        if request.get("check_alias") and self.kept:
            kept_ptrs = {t.untyped_storage().data_ptr() for t in self.kept if t.numel()}
            aliased = [i for i, t in enumerate(out_tensors)
                       if t.numel() and t.untyped_storage().data_ptr() in kept_ptrs
                       and not any(t.untyped_storage().data_ptr() == x.untyped_storage().data_ptr()
                                   for x in in_tensors)]
        if request.get("keep"):
            self.kept = list(out_tensors)
        payload = {"result": written}
        # In-place kernels: the inputs the reference modifies are outputs too.
        wanted = mutated if request.get("return_mutated") else request.get("return_inputs", [])
        if wanted:
            payload["inputs"] = {str(i): in_tensors[i] for i in wanted if i < len(in_tensors)}
        fields = self._write(payload, f"run{index}")
        lazy = any(not _same(a, b) for a, b in zip(copies, out_tensors))
        return {"ok": True, **fields, "mutated_inputs": mutated,
                "n_inputs": len(in_tensors), "launches": self.log.count, "lazy_output": lazy,
                "new_threads": new_threads, "aliased": aliased, "tampered": self._tamper(),
                "call_s": call_s}

    def op_selfcheck(self, request: dict) -> dict:
        """Run the module twice on the same inputs and say whether it agrees with itself. The second run
        fills uninitialized memory, so outputs that depend on it count as disagreeing.

        Used on the reference only, to drop shapes it cannot judge; compared here, on the device,
        because the reference is the task's own code and nothing is decided about a candidate.
        """
        import torch

        from kernelband.worker.harness import tensors_in
        index, seed = request["shape"], request["seed"]
        outs = []
        try:
            for filled in (False, True):  # the second call with uninitialized memory filled
                with poison.filled_memory() if filled else contextlib.nullcontext():
                    self._seed(seed)
                    inputs = self.harness.make_inputs(index, self.device)
                    out = self.harness.call(inputs)
                    outs.append([t.detach().clone() for t in tensors_in(out) + tensors_in(inputs)])
            if self.gpu:
                torch.cuda.synchronize()
        except BaseException as exc:  # noqa: BLE001
            return self._failed(exc, tampered=False)
        atol, rtol = self.harness.atol, self.harness.rtol
        for a, b in zip(*outs):
            same = (a.shape == b.shape and a.dtype == b.dtype and
                    (torch.allclose(a, b, atol=atol, rtol=rtol, equal_nan=True) if a.is_floating_point()
                     else torch.equal(a, b)))
            if not same:
                return {"ok": True, "deterministic": False}
        return {"ok": True, "deterministic": True}

    def op_tests(self, request: dict) -> dict:
        if not getattr(self.harness, "has_tests", False):
            return {"ok": True, "file": None, "entries": []}
        try:
            self._seed(request["seed"])
            self.log.reset()
            filled = bool(request.get("filled_memory"))
            if filled and self.gpu:
                poison.scramble_free_memory(self.device)
            with poison.filled_memory() if filled else contextlib.nullcontext():
                results = self.harness.run_tests()
        except BaseException as exc:  # noqa: BLE001
            return self._failed(exc)
        return {"ok": True, **self._write({"tests": results}, "tests"), "launches": self.log.count,
                "tampered": self._tamper()}

    def op_time(self, request: dict) -> dict:
        from kernelband.worker.shape_timing import time_shape
        try:
            self._seed(request["seed"])
            reply = time_shape(self.harness, request["shape"], request["preset"], self.gpu, self.guard,
                               bool(request.get("span")), self.device, request.get("call", True))
        except BaseException as exc:  # noqa: BLE001
            return self._failed(exc)
        return {**reply, "tampered": self._tamper()}

    def op_features(self, request: dict) -> dict:
        """Launch configuration, compiled resources and memory footprint on one shape."""
        import torch

        from kernelband.worker import audit
        from kernelband.worker.harness import nbytes
        index, seed = request["shape"], request["seed"]
        try:
            self._seed(seed)
            if self.gpu:
                torch.cuda.synchronize()
                torch.cuda.reset_peak_memory_stats()
                base = torch.cuda.memory_allocated()
            inputs = self.harness.make_inputs(index, self.device)
            self.log.reset()
            with contextlib.nullcontext() if self.gpu else audit.TorchWork() as counted:
                out = self.harness.call(inputs)
            if self.gpu:
                torch.cuda.synchronize()
                footprint = torch.cuda.max_memory_allocated() - base
            else:
                footprint = nbytes(inputs) + nbytes(out)
            launches = list(self.log.recent)
            work = audit.gpu_work(lambda: self.harness.call(inputs), self.guard.original("torch.profiler:profile"),
                                  self.module, launches) if self.gpu else counted.summary()
        except BaseException as exc:  # noqa: BLE001
            return self._failed(exc, tampered=False)
        from dataclasses import asdict
        return {"ok": True, "footprint_bytes": int(footprint), "launches": [asdict(x) for x in launches],
                "launch_count": self.log.count, "work": work, "tampered": self._tamper()}

    def op_profile_prepare(self, request: dict) -> dict:
        """The profiled shape's inputs made and one call (the kernels loaded, warmed up) outside the profiled
        range, kept for `op_profile`: that much of the profiler's GPU work need not have the GPU alone."""
        import torch
        self._profile_inputs = None
        try:
            self._seed(request["seed"])
            inputs = self.harness.make_inputs(request["shape"], self.device)
            self.harness.call(inputs)
            torch.cuda.synchronize()
        except BaseException as exc:  # noqa: BLE001
            return {"ok": False, "outcome": "runtime_error", "error": _error_text(exc)}
        self._profile_inputs = (request["shape"], request["seed"], inputs)
        return {"ok": True}

    def op_profile(self, request: dict) -> dict:
        """One run of a shape between cudaProfilerStart and cudaProfilerStop (the worker runs under ncu), on
        the inputs `op_profile_prepare` kept for the same shape and seed, else on new ones after a warm-up.
        `seconds`: the profiler start and stop calls and the run between them (ncu replays each kernel at its
        launch), as this process saw them."""
        import torch
        kept = getattr(self, "_profile_inputs", None)
        self._profile_inputs = None
        try:
            if kept is not None and kept[:2] == (request["shape"], request["seed"]):
                inputs = kept[2]
            else:
                self._seed(request["seed"])
                inputs = self.harness.make_inputs(request["shape"], self.device)
                self.harness.call(inputs)  # compile and warm up outside the profiled range
                torch.cuda.synchronize()
            cudart = torch.cuda.cudart()
            t0 = time.perf_counter()
            cudart.cudaProfilerStart()
            t1 = time.perf_counter()
            self.harness.call(inputs)
            torch.cuda.synchronize()
            t2 = time.perf_counter()
            cudart.cudaProfilerStop()
            t3 = time.perf_counter()
        except BaseException as exc:  # noqa: BLE001
            return {"ok": False, "outcome": "runtime_error", "error": _error_text(exc)}
        return {"ok": True, "seconds": {"start": t1 - t0, "run": t2 - t1, "stop": t3 - t2}}

    def op_calibrate(self, request: dict) -> dict:
        """Peaks and launch floor of this GPU (trusted code, no module needed): worker/calibrate.py."""
        from kernelband.worker.calibrate import run
        try:
            return {"ok": True, **run(request, self.guard, self.gpu)}
        except BaseException as exc:  # noqa: BLE001
            return {"ok": False, "outcome": "runtime_error", "error": _error_text(exc)}

    def op_baselines(self, request: dict) -> dict:
        """The task's torch reference timed as written and compiled, as `op_time` times the module."""
        from kernelband.worker.baselines import time_baselines
        from kernelband.worker.shape_timing import placements
        self._seed(request["seed"])
        copies = placements(self.harness, request["shape"], request["preset"], self.device)
        return time_baselines(self.harness.torch_reference, copies, request, self.gpu, self.guard)

    def op_exit(self, request: dict) -> dict:
        raise SystemExit(0)


def _same(a, b) -> bool:
    import torch
    if a.shape != b.shape or a.dtype != b.dtype:
        return False
    return bool(torch.equal(a, b)) or (a.dtype.is_floating_point and bool(torch.equal(a.isnan(), b.isnan()))
                                        and bool(torch.equal(a.nan_to_num(), b.nan_to_num())))


def main() -> None:
    parser = argparse.ArgumentParser(prog="kernelband.worker")
    parser.add_argument("--fd", type=int, required=True)
    parser.add_argument("--dir", required=True)
    parser.add_argument("--mode", choices=["gpu", "interpreter"], required=True)
    args = parser.parse_args()
    serve(args.fd, args.dir, args.mode)


def serve(fd: int, workdir: str, mode: str) -> None:
    """The worker's life on socket `fd`: its start, then one request after another until the parent closes
    the socket (a process of its own: `main`, or a child of the zygote, worker/zygote.py)."""
    from kernelband import protocol

    sock = socket.socket(fileno=fd)
    worker = Worker(sock, workdir, mode)
    try:
        worker.load_libraries()
        protocol.send(sock, {"op": "loaded"})
        if protocol.recv(sock).get("op") != "start":
            return
        worker.start_context()
        protocol.send(sock, {"op": "context"})
        if protocol.recv(sock).get("op") != "go":
            return
        ready = worker.start()
    except (protocol.ProtocolError, OSError):
        return
    except BaseException as exc:  # noqa: BLE001
        protocol.send(sock, {"op": "failed", "error": _error_text(exc)})
        return
    protocol.send(sock, ready)
    while True:
        try:
            request = protocol.recv(sock)
        except (protocol.ProtocolError, OSError):
            return
        try:
            reply = worker.handle(request)
        except SystemExit:
            return
        except BaseException as exc:  # noqa: BLE001
            reply = {"ok": False, "outcome": "runtime_error", "error": _error_text(exc)}
        with worker.send_lock:
            protocol.send(sock, reply)
        if reply.get("outcome") == "crashed":
            # A CUDA fault leaves the context unusable: this worker is done.
            os._exit(3)


def _driver_version(torch) -> str:
    """The CUDA driver version as `major.minor` (a new driver means new baselines)."""
    try:
        v = int(torch._C._cuda_getDriverVersion())
    except Exception:  # noqa: BLE001 - private API: missing on some builds
        return ""
    return f"{v // 1000}.{(v % 1000) // 10}"
