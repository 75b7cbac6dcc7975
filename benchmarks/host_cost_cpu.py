"""What a handed-back module's own Python costs per call, on a machine with no GPU: call_cost.py's three figures
(the starting kernel, best.py, best.py's kernels launched directly) with every launch running Triton's host code
to the driver and no further, at each example's smallest search shape, where the host's time is the call's.

Triton's `JITFunction.run` runs as it does on a GPU (binding and specialising the arguments, the compiled
kernel's cache key, a callable grid called with the bound arguments) against a stand-in driver: the current
device and stream are 0, a kernel is "compiled" once per cache key into one whose launch does nothing. An
autotuner's first call on a key times its configurations as equal (it keeps the first) and later calls take the
cached choice, as on a GPU. The tensors live on the CPU: an allocation costs what torch's CPU allocator does, not
the GPU's caching allocator, so the figures are a proxy for the host's share of call_cost.py's, not a forecast
of them. Each figure is the least per-call time of `--rounds` rounds of `--calls` calls, the variants taking
turns round by round (the least: the machine may be shared, and other work only ever adds).

    python benchmarks/host_cost_cpu.py --db runs.db [--bench N] [--examples a,b] [--rewrite] [--out x.json]
    python benchmarks/host_cost_cpu.py --task examples:matmul --file best.py [--autotuned best.autotune.py]

With `--db`, each example's newest finished run is measured (as call_cost.py finds it); `--rewrite` first
applies this checkout's hand-back rewrites (pinning, dispatch, launch values cached) anew to the run's chosen
candidate and its stored evaluations, so that a change to them is measured on a GPU run's own modules. Where the
run's module is pinned, the autotuned module it was pinned from is measured beside it ("autotuned"): the pinned
launch should cost no more than Triton's autotuner taking a key it already tuned.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

ROUNDS, CALLS = 15, 2000
HERE = Path(__file__).resolve().parent


# -- one fresh process: one module, Triton's launches stopped at the driver -----------------------------
class _NoLaunch:
    """A compiled kernel whose launch does nothing."""

    function = packed_metadata = None

    def launch_metadata(self, *args):
        return None

    def run(self, *args):
        return None


class _Driver:
    """Triton's active driver, as far as `JITFunction.run` asks it: device 0, stream 0, a Hopper target."""

    def get_current_device(self):
        return 0

    def get_current_stream(self, device=None):
        return 0

    def get_current_target(self):
        from triton.backends.compiler import GPUTarget

        return GPUTarget("cuda", 90, 32)


def stop_at_the_driver() -> None:
    """Triton's launches run their host code and launch nothing; autotuners time every configuration as equal."""
    from triton.runtime import driver
    from triton.runtime.autotuner import Autotuner
    from triton.runtime.jit import JITFunction

    def compile_nothing(self, key, signature, device, constexprs, options, attrs, warmup):
        kernel = self.device_caches[device][0][key] = _NoLaunch()
        return kernel

    driver.set_active(_Driver())
    JITFunction._do_compile = compile_nothing
    Autotuner._bench = lambda self, *args, config, **kwargs: [1.0, 1.0, 1.0]


def _least_us(variants: dict, rounds: int, calls: int) -> dict[str, float]:
    import time

    for fn in variants.values():
        for _ in range(50):  # compiles, an autotuner's first call: outside the timing
            fn()
    least = {name: float("inf") for name in variants}
    for _ in range(rounds):
        for name, fn in variants.items():
            t0 = time.perf_counter()
            for _ in range(calls):
                fn()
            least[name] = min(least[name], (time.perf_counter() - t0) * 1e6 / calls)
    return least


def child(args) -> None:
    os.environ.pop("TRITON_INTERPRET", None)
    stop_at_the_driver()
    import torch

    sys.path.insert(0, str(HERE))
    import call_cost

    from kernelband.tasks import load_task
    from kernelband.worker import harness as harness_mod

    task = load_task(args.task)
    folder = Path(tempfile.mkdtemp())
    (folder / "kb_start.py").write_text(task.module_source)
    modules = {"start": harness_mod.import_file("kb_start", str(folder / "kb_start.py")),
               "handed_back": harness_mod.import_file("kb_handed_back", args.file)}
    if args.autotuned:
        modules["autotuned"] = harness_mod.import_file("kb_autotuned", args.autotuned)
    harness = harness_mod.for_task(task.wire(), modules["start"], task.module_source, "gpu")
    info = harness.describe("gpu")
    shape = min((s for s in info["shapes"] if not s["held_out"]), key=lambda s: s["nbytes"])
    torch.manual_seed(0)
    inputs = harness.make_inputs(shape["index"], "cpu")
    variants = {name: (lambda entry: lambda: entry(*inputs))(getattr(m, info["entry"])) for name, m in modules.items()}
    variants["handed_back"]()  # an autotuner left in it tunes now, before its launches are recorded
    variants["direct"] = call_cost.launched_directly(variants["handed_back"], inputs, "cpu")
    times = _least_us(variants, args.rounds, args.calls)
    print(json.dumps({"label": shape["label"], **{f"{k}_us": v for k, v in times.items()}}))


# -- the sweep ----------------------------------------------------------------------------------------------
def rewritten(db: str, run: dict) -> tuple[str, str | None]:
    """The run's chosen candidate as this checkout's hand-back rewrites it (without evaluating it), and the
    autotuned candidate where the rewrite pins it."""
    from kernelband.search.dispatch import Start
    from kernelband.search.handback import rewrite
    from kernelband.store import Store
    from kernelband.tasks import load_task
    from kernelband.tasks.model import TaskInfo
    from kernelband.worker import harness as harness_mod

    store = Store(db)
    row = store.run(run["run"])
    summary = row.summary or {}
    best = summary["best_candidate"]
    source = next(c["source"] for c in store.candidates(row.id) if c["id"] == best)
    search, check = store.evaluation(row.id, best, "search"), store.evaluation(row.id, best, "held_out")
    objective = summary.get("objective") or "device"
    noise = summary.get("k0_self_call_speedup") if objective == "call" else summary.get("k0_self_speedup")
    task = load_task(run["task"])
    folder = Path(tempfile.mkdtemp())
    (folder / "kb_start.py").write_text(task.module_source)
    module = harness_mod.import_file(f"kb_start_{row.id}", str(folder / "kb_start.py"))
    info = TaskInfo.from_wire(harness_mod.for_task(task.wire(), module, task.module_source, "gpu").describe("gpu"))
    form = rewrite(source, search, check, noise, Start(task.module_source, info.entry, info.shapes), objective)
    store.close()
    return form.source, source if form.pinned else None


def main() -> int:
    sys.path.insert(0, str(HERE))
    import call_cost

    from kernelband.tasks import example_names

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--db", help="the run database (each example's newest finished run)")
    parser.add_argument("--bench", type=int, help="with --db: only this bench's runs")
    parser.add_argument("--examples", default="", help="with --db: comma-separated built-in examples (default: all)")
    parser.add_argument("--rewrite", action="store_true", help="with --db: the hand-back rewrites applied anew")
    parser.add_argument("--task", help="one task (with --file)")
    parser.add_argument("--file", help="the module handed back")
    parser.add_argument("--autotuned", help="the autotuned module it was pinned from")
    parser.add_argument("--rounds", type=int, default=ROUNDS)
    parser.add_argument("--calls", type=int, default=CALLS)
    parser.add_argument("--out", type=Path, help="write the results here as JSON")
    parser.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        child(args)
        return 0
    if bool(args.db) == bool(args.task and args.file):
        print("error: pass --db PATH, or --task and --file", file=sys.stderr)
        return 2
    if args.db:
        known = list(example_names())
        runs = call_cost.handed_back(args.db, args.bench, [e for e in args.examples.split(",") if e] or known)
    else:
        runs = [{"task": args.task, "file": args.file, "autotuned": args.autotuned, "form": None}]
    results = []
    for run in runs:
        if args.db:
            autotuned = None
            if args.rewrite:
                source, autotuned = rewritten(args.db, run)
                run = {**run, "file": str(Path(tempfile.mkdtemp()) / "best.py"), "rewritten": True}
                Path(run["file"]).write_text(source)
            run["autotuned"] = autotuned
            if autotuned is not None:
                Path(run["file"]).with_name("best.autotune.py").write_text(autotuned)
                run["autotuned"] = str(Path(run["file"]).with_name("best.autotune.py"))
        command = [sys.executable, __file__, "--child", "--task", run["task"], "--file", run["file"],
                   "--rounds", str(args.rounds), "--calls", str(args.calls)]
        command += ["--autotuned", run["autotuned"]] if run.get("autotuned") else []
        proc = subprocess.run(command, capture_output=True, text=True, timeout=1800)
        lines = [line for line in proc.stdout.splitlines() if line.startswith("{")]
        if proc.returncode != 0 or not lines:
            tail = proc.stderr.strip().splitlines()[-1] if proc.stderr.strip() else f"exit {proc.returncode}"
            results.append({**run, "error": tail})
        else:
            row = json.loads(lines[-1])
            row["over_direct_us"] = row["handed_back_us"] - row["direct_us"]
            results.append({**run, **row})
        if args.out:  # as it goes
            args.out.write_text(json.dumps({"runs": results}, indent=1))
    print("| example | shape | starting kernel | handed back | launched directly | handed back - direct | autotuned |")
    print("| --- | --- | ---: | ---: | ---: | ---: | ---: |")
    for r in results:
        name = r["task"].removeprefix("examples:")
        if "error" in r:
            print(f"| {name} | - | - | - | - | failed: {r['error']} | |")
            continue
        auto = f"{r['autotuned_us']:.2f} µs" if "autotuned_us" in r else ""
        print(f"| {name} | {r['label']} | {r['start_us']:.2f} µs | {r['handed_back_us']:.2f} µs | "
              f"{r['direct_us']:.2f} µs | {r['over_direct_us']:+.2f} µs | {auto} |")
    return 1 if any("error" in r for r in results) else 0


if __name__ == "__main__":
    sys.exit(main())
