"""What a user's program pays per call of the module a run handed back: per built-in example, at its smallest and
its largest search shape, the wall time per call of the starting kernel, of the handed-back module (best.py),
and of best.py's own kernels launched directly with the same configurations and the same output allocations.

The wall time per call is that of back-to-back calls synchronised once (what an eager program pays): `--calls`
calls a round (fewer where a round would pass `--round-ms`), the three alternating from round to round, the
median of `--rounds` rounds. Each run's module is measured in a fresh Python process with no profiler in it.
"Launched directly": the launches one call of best.py makes on that shape are recorded (kernel, grid, arguments,
configuration) and replayed with their grids worked out beforehand and the outputs allocated anew each call by the
calls best.py made for them (`torch.empty_like(x)`, `torch.empty(shape, ...)`, `torch.zeros(...)`: each costs what
it costs, a zeros a fill on the GPU); an output made otherwise (a copy, a view at an offset) is allocated with
`torch.empty_strided`, and a tensor no launch reads is not allocated. The hand-back adds no host cost on a shape when best.py is within max(3 µs, 5 %) of that.

    python benchmarks/call_cost.py --db runs.db [--bench N] [--out call_cost.json]
    python benchmarks/call_cost.py --make --db runs.db [--policy greedy -n 1 -q 2] [--examples a,b] ...

`--make` first runs `kernelband bench --suite examples` into the database (one run per example) to hand the
modules back; without it the newest finished run of each built-in example in the database is measured. Exit
status: 0 when best.py is within the bound on every shape measured, 1 otherwise, 2 for bad input. On the
interpreter (KERNELBAND_MODE=interpreter) it runs end to end, and its figures say nothing about a GPU.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

ROUNDS, CALLS, ROUND_MS = 9, 300, 50.0
SLACK_US, SLACK_SHARE = 3.0, 0.05  # best.py may cost this much more per call than its kernels launched directly
VARIANTS = ("start", "handed_back", "direct")


# -- one fresh process: one run's module ------------------------------------------------------------------
# The torch functions and tensor methods that allocate a tensor, whose calls best.py makes are replayed as made.
ALLOCATORS = ("empty", "empty_like", "empty_strided", "zeros", "zeros_like", "ones", "ones_like", "full", "full_like")
TENSOR_ALLOCATORS = ("new_empty", "new_zeros", "new_ones", "new_full")


@dataclass
class Launch:
    fn: object  # the JITFunction
    args: tuple
    kwargs: dict
    grid: object


@dataclass
class Allocation:
    fn: object  # the torch function, or the unbound tensor method
    args: tuple
    kwargs: dict
    result: object  # the tensor it returned
    # per tensor argument that an earlier allocation of the call made: (its place, that allocation)
    made_from: list[tuple[int, Allocation]] = field(default_factory=list)


def record_call(call) -> list[Launch | Allocation]:
    """The Triton launches and the tensor allocations (ALLOCATORS, TENSOR_ALLOCATORS) of one `call()`, in order."""
    import torch
    from triton.runtime.jit import JITFunction

    classes = [JITFunction]
    try:
        from triton.runtime.interpreter import InterpretedFunction
        classes.append(InterpretedFunction)
    except ImportError:
        pass
    seen: list[Launch | Allocation] = []
    latest: dict[int, Allocation] = {}  # data_ptr -> the latest allocation there
    launching = []  # non-empty while a launch runs: what the launch itself allocates (the interpreter) is not the call's
    runs = {cls: cls.run for cls in classes}
    allocators = {(torch, name): getattr(torch, name) for name in ALLOCATORS}
    allocators |= {(torch.Tensor, name): getattr(torch.Tensor, name) for name in TENSOR_ALLOCATORS}
    inherited = [name for name in TENSOR_ALLOCATORS if name not in vars(torch.Tensor)]  # from its C base

    def recording(original):
        def run(self, *args, grid, warmup, **kwargs):
            if not warmup:
                seen.append(Launch(self, args, dict(kwargs), grid))
            launching.append(self)
            try:
                return original(self, *args, grid=grid, warmup=warmup, **kwargs)
            finally:
                launching.pop()
        return run

    def allocating(original):
        def allocate(*args, **kwargs):
            result = original(*args, **kwargs)
            if not launching and isinstance(result, torch.Tensor):
                made_from = [(place, latest[a.data_ptr()]) for place, a in enumerate(args)
                             if isinstance(a, torch.Tensor) and a.data_ptr() in latest]
                seen.append(Allocation(original, args, dict(kwargs), result, made_from))
                latest[result.data_ptr()] = seen[-1]
            return result
        return allocate

    for cls, original in runs.items():
        cls.run = recording(original)
    for (owner, name), original in allocators.items():
        setattr(owner, name, allocating(original))
    try:
        call()
    finally:
        for cls, original in runs.items():
            cls.run = original
        for (owner, name), original in allocators.items():
            if owner is torch.Tensor and name in inherited:
                delattr(owner, name)
            else:
                setattr(owner, name, original)
    return seen


def record_launches(call) -> list[tuple]:
    """(kernel, positional arguments, keyword arguments, grid) of every Triton launch `call()` makes."""
    return [(e.fn, e.args, e.kwargs, e.grid) for e in record_call(call) if isinstance(e, Launch)]


def launched_directly(call, inputs: tuple, device: str):
    """A function that makes the launches of one `call()` on `inputs` itself: the same kernels, configurations
    and inputs, the grids as numbers, and every other tensor argument (the outputs, the intermediates) allocated
    anew per call by the allocation `call` made it with (else `torch.empty_strided`, with its shape, strides and
    dtype)."""
    import torch

    from kernelband.worker.guards import launch_grid
    from kernelband.worker.harness import tensors_in

    given = {t.data_ptr() for t in tensors_in(inputs)}
    allocated: dict[int, Allocation] = {}  # data_ptr -> the call's latest allocation there
    steps: list[tuple] = []  # ("allocate", fn, args, kwargs, slots) or ("strided", shape, stride, dtype)
    replayed: dict[int, int] = {}  # id of an allocation -> its step
    strided: dict[tuple, int] = {}  # (data_ptr, dtype) of a tensor made otherwise -> its step

    def replay(allocation: Allocation) -> int:
        if id(allocation) not in replayed:
            slots = [(place, replay(earlier)) for place, earlier in allocation.made_from
                     if allocation.args[place].data_ptr() not in given]
            steps.append(("allocate", allocation.fn, list(allocation.args), allocation.kwargs, slots))
            replayed[id(allocation)] = len(steps) - 1
        return replayed[id(allocation)]

    def step_of(tensor) -> int:
        allocation = allocated.get(tensor.data_ptr())
        if allocation is not None and allocation.result.dtype == tensor.dtype:
            return replay(allocation)
        key = (tensor.data_ptr(), tensor.dtype)  # made otherwise (a copy, a view at an offset, another dtype)
        if key not in strided:
            steps.append(("strided", tuple(tensor.shape), tuple(tensor.stride()), tensor.dtype))
            strided[key] = len(steps) - 1
        return strided[key]

    plan = []
    for event in record_call(call):
        if isinstance(event, Allocation):
            allocated[event.result.data_ptr()] = event
            continue
        fn, args, kwargs, grid = event.fn, event.args, event.kwargs, event.grid
        slots = [(place, step_of(arg)) for place, arg in enumerate(args)
                 if isinstance(arg, torch.Tensor) and arg.data_ptr() not in given]
        numbers = launch_grid(grid, kwargs, list(getattr(fn, "arg_names", []) or []), args)
        plan.append((fn[tuple(numbers) if numbers else grid], list(args), kwargs, slots))

    def direct():
        fresh = []
        for step in steps:
            if step[0] == "allocate":
                _, fn, args, kwargs, slots = step
                for place, k in slots:
                    args[place] = fresh[k]
                fresh.append(fn(*args, **kwargs))
            else:
                _, shape, stride, dtype = step
                fresh.append(torch.empty_strided(shape, stride, dtype=dtype, device=device))
        for launch, args, kwargs, slots in plan:
            for place, k in slots:
                args[place] = fresh[k]
            launch(*args, **kwargs)

    direct.steps = steps  # what it allocates, for a reader
    return direct


def per_call_us(variants: dict, rounds: int, calls: int, round_ms: float, synchronize) -> dict[str, dict]:
    """Each variant's wall time per call (µs) of back-to-back calls, the variants alternating from round to
    round: {"us": median over the rounds, "rounds": each round's, "calls": calls a round}."""
    from kernelband.worker.timing import back_to_back

    counts = {}
    for name, fn in variants.items():
        for _ in range(3):  # compiles, an autotuner's first call: outside the timing
            fn()
        once_ms = back_to_back(fn, 1, synchronize)
        counts[name] = int(min(calls, max(1, round_ms // max(once_ms, 1e-4))))
    times: dict[str, list[float]] = {name: [] for name in variants}
    names = list(variants)
    for r in range(rounds):
        for name in names[r % len(names):] + names[:r % len(names)]:
            times[name].append(1000.0 * back_to_back(variants[name], counts[name], synchronize))
    return {name: {"us": statistics.median(t), "rounds": [round(x, 3) for x in t], "calls": counts[name]}
            for name, t in times.items()}


def _bound(entry, inputs: tuple):
    return lambda: entry(*inputs)


def child(args) -> None:
    interpreter = os.environ.get("KERNELBAND_MODE") == "interpreter"
    if interpreter:
        os.environ["TRITON_INTERPRET"] = "1"
        from triton.runtime.autotuner import Autotuner

        # no driver to time an autotuner's configurations on (a pinned module's fallback, on the interpreter's
        # shapes): they tie, and it keeps the first
        Autotuner._bench = lambda self, *args, config, **kwargs: [1.0, 1.0, 1.0]
    import torch

    from kernelband.tasks import load_task
    from kernelband.worker import harness as harness_mod

    mode, device = ("interpreter", "cpu") if interpreter else ("gpu", "cuda")
    synchronize = (lambda: None) if interpreter else torch.cuda.synchronize
    task = load_task(args.task)
    folder = Path(tempfile.mkdtemp())
    (folder / "kb_start.py").write_text(task.module_source)
    start = harness_mod.import_file("kb_start", str(folder / "kb_start.py"))
    best = harness_mod.import_file("kb_handed_back", args.file)
    harness = harness_mod.for_task(task.wire(), start, task.module_source, mode)
    info = harness.describe(mode)
    search = [s for s in info["shapes"] if not s["held_out"]]
    ends = {s["label"]: s for s in (min(search, key=lambda s: s["nbytes"]), max(search, key=lambda s: s["nbytes"]))}
    rows = []
    for shape in ends.values():
        torch.manual_seed(0)
        inputs = harness.make_inputs(shape["index"], device)
        variants = {"start": _bound(getattr(start, info["entry"]), inputs),
                    "handed_back": _bound(getattr(best, info["entry"]), inputs)}
        variants["handed_back"]()  # an autotuner left in it tunes now, before its launches are recorded
        variants["direct"] = launched_directly(variants["handed_back"], inputs, device)
        times = per_call_us(variants, args.rounds, args.calls, args.round_ms, synchronize)
        rows.append({"label": shape["label"], "nbytes": shape["nbytes"], **{f"{k}_us": v["us"] for k, v in times.items()},
                     "times": times})
    print(json.dumps({"rows": rows, "device": "Triton interpreter (CPU)" if interpreter
                      else torch.cuda.get_device_name(0)}))


# -- the sweep ----------------------------------------------------------------------------------------------
def _module_file(path: str, source: str, run_id: int) -> str:
    """best.py where the run wrote it, else the module the database keeps written out anew: a bench resumed
    on another machine leaves the files of its earlier runs behind."""
    if (path and Path(path).is_file()) or not source:
        return path
    folder = Path(tempfile.mkdtemp(prefix=f"kb-run-{run_id}-"))
    (folder / "best.py").write_text(source)
    return str(folder / "best.py")


def handed_back(db: str, bench: int | None, examples: list[str]) -> list[dict]:
    """The newest finished run of each example in the database, with what its summary says of best.py."""
    from kernelband.store import Store

    found: dict[str, dict] = {}
    store = Store(db)
    for run in store.runs(bench):
        summary = run.summary or {}
        name = run.task.removeprefix("examples:")
        if run.status != "done" or not run.task.startswith("examples:") or name not in examples:
            continue
        handback = summary.get("handback") or {}
        found[name] = {"run": run.id, "task": run.task, "file": _module_file(summary.get("best_path", ""),
                                                                              store.handed_back(run.id), run.id),
                       "best_candidate": summary.get("best_candidate"), "form": handback.get("form"),
                       "cached": handback.get("cached", []), "dispatched": handback.get("dispatched", []),
                       "confirmed_speedup": summary.get("confirmed_speedup"),
                       "confirmed_call_speedup": summary.get("confirmed_call_speedup")}
    return [found[name] for name in examples if name in found]


def measure(run: dict, args) -> dict:
    command = [sys.executable, __file__, "--child", "--task", run["task"], "--file", run["file"], "--rounds",
               str(args.rounds), "--calls", str(args.calls), "--round-ms", str(args.round_ms)]
    proc = subprocess.run(command, capture_output=True, text=True, timeout=args.timeout)
    lines = [line for line in proc.stdout.splitlines() if line.startswith("{")]
    if proc.returncode != 0 or not lines:
        tail = proc.stderr.strip().splitlines()[-1] if proc.stderr.strip() else f"exit {proc.returncode}"
        return {**run, "error": tail, "rows": []}
    reply = json.loads(lines[-1])
    for row in reply["rows"]:
        row["over_direct_us"] = row["handed_back_us"] - row["direct_us"]
        row["within"] = row["over_direct_us"] <= max(SLACK_US, SLACK_SHARE * row["direct_us"])
    return {**run, "device": reply["device"], "rows": reply["rows"]}


def make(args, examples: list[str]) -> int:
    """Hand the modules back: `kernelband bench --suite examples` into the database, for the examples it has no
    finished run of (a database carried from an earlier session keeps those). torch eager and torch.compile are
    not timed: the figures here are the kernels' own, and a max-autotune compile per shape costs minutes."""
    done = {run["task"].removeprefix("examples:") for run in handed_back(args.db, None, examples)} \
        if Path(args.db).is_file() else set()
    todo = [name for name in examples if name not in done]
    if not todo:
        return 0
    command = [sys.executable, "-c", "from kernelband.cli import main; main()", "bench", "--suite", "examples",
               "--tasks", ",".join(todo), "--policies", args.policy, "-n", str(args.iterations), "-q",
               str(args.batch), "--seeds", "1", "--finalists", str(args.finalists), "--db", args.db, "--no-baselines"]
    command += ["--no-ncu"] if args.no_ncu else []
    print("making the hand-backs:", " ".join(command[3:]), file=sys.stderr, flush=True)
    return subprocess.run(command, timeout=args.timeout * len(todo)).returncode


def main() -> int:
    from kernelband.tasks import example_names

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--db", help="the run database")
    parser.add_argument("--bench", type=int, help="only this bench's runs")
    parser.add_argument("--examples", default="", help="comma-separated built-in examples (default: all)")
    parser.add_argument("--make", action="store_true", help="first hand the modules back: kernelband bench "
                        "--suite examples into --db")
    parser.add_argument("--policy", default="greedy", help="with --make: the policy")
    parser.add_argument("-n", "--iterations", type=int, default=1, help="with --make: iterations per example")
    parser.add_argument("-q", "--batch", type=int, default=2, help="with --make: arms per iteration")
    parser.add_argument("--finalists", type=int, default=1, help="with --make: kernels re-checked at the end")
    parser.add_argument("--no-ncu", action="store_true", help="with --make: no Nsight Compute profiles (shorter runs; "
                        "the hand-back is still a searched one)")
    parser.add_argument("--rounds", type=int, default=ROUNDS)
    parser.add_argument("--calls", type=int, default=CALLS, help="back-to-back calls a round, at most")
    parser.add_argument("--round-ms", type=float, default=ROUND_MS, help="fewer calls where a round would take longer")
    parser.add_argument("--timeout", type=float, default=900.0, help="seconds one example may take")
    parser.add_argument("--out", type=Path, help="write the results here as JSON")
    parser.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--task", help=argparse.SUPPRESS)
    parser.add_argument("--file", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        child(args)
        return 0
    known = list(example_names())
    examples = [e for e in args.examples.split(",") if e] or known
    unknown = [e for e in examples if e not in known]
    if unknown or not args.db or args.rounds < 1 or args.calls < 1:
        why = (f"no built-in example {', '.join(unknown)}" if unknown else "pass --db PATH" if not args.db
               else "--rounds and --calls must be at least 1")
        print(f"error: {why}", file=sys.stderr)
        return 2
    if args.make and make(args, examples) != 0:
        print("error: kernelband bench failed; the database keeps what it finished", file=sys.stderr)
        return 1
    if not Path(args.db).is_file():
        print(f"error: no run database at {args.db!r}: pass --db PATH (or --make)", file=sys.stderr)
        return 2
    t0, results = time.perf_counter(), []
    for run in handed_back(args.db, args.bench, examples):
        results.append(measure(run, args) if Path(run["file"]).is_file()
                       else {**run, "error": f"no file at {run['file']}", "rows": []})
        if args.out:  # as it goes: a call cut short keeps the examples done
            args.out.write_text(json.dumps({"runs": results}, indent=1))
    print("| example | shape | starting kernel | handed back | its kernels launched directly | handed back - "
          "direct | within max(3 µs, 5 %) | best.py |")
    print("| --- | --- | ---: | ---: | ---: | ---: | --- | --- |")
    for r in results:
        what = ", ".join([r.get("form") or "?"] + (["launch values cached"] if r.get("cached") else [])
                         + ([f"k0 on {len(r['dispatched'])} shapes"] if r.get("dispatched") else []))
        for row in r["rows"]:
            print(f"| {r['task'].removeprefix('examples:')} | {row['label']} | {row['start_us']:.1f} µs | "
                  f"{row['handed_back_us']:.1f} µs | {row['direct_us']:.1f} µs | {row['over_direct_us']:+.1f} µs | "
                  f"{'yes' if row['within'] else 'NO'} | candidate {r['best_candidate']}, {what} |")
        if r.get("error"):
            print(f"| {r['task']} | - | - | - | - | - | failed: {r['error']} | |")
    rows = [row for r in results for row in r["rows"]]
    ok = bool(rows) and all(row["within"] for row in rows) and not any(r.get("error") for r in results)
    devices = sorted({r["device"] for r in results if r.get("device")})
    print(f"{sum(row['within'] for row in rows)} of {len(rows)} shapes within the bound; {', '.join(devices)}; "
          f"{time.perf_counter() - t0:.0f} s")
    if args.out:
        args.out.write_text(json.dumps({"runs": results, "devices": devices, "ok": ok}, indent=1))
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
