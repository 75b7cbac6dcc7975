"""split_rows on a GPU: rows too few to fill the GPU, split over several programs a row.

Two parts, written to one JSON file:
- `variants`: every split_rows variant of every task it fires on (the TritonBench-G tasks and the built-in
  examples), evaluated by the project's evaluator against the task's reference: outcome, runtime-weighted
  speedup over the starting kernel, speedup per search shape.
- `rows`: the examples rmsnorm and layernorm on the few-row shapes issue 49 quotes (64 rows of 32,000 columns)
  and beside them, the starting kernel, each variant, the task's reference in eager torch and under
  torch.compile(mode="max-autotune-no-cudagraphs"), each checked against the eager reference, then timed on the
  GPU (do_bench_cudagraph) and per call, host included (do_bench), medians both.

    python benchmarks/split_rows_gpu.py --out $OUT/split_rows_gpu.json        # GPU machine, about 8 minutes
    python benchmarks/split_rows_gpu.py --interpreter --out split_rows.json   # CPU: tiny shapes, the plumbing
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import single_pass_gpu  # the evaluator's pass over a rewrite's variants, beside this script

EXAMPLES = ("examples:rmsnorm", "examples:layernorm")
GPU_ROWS = [(16, 32768), (64, 32000), (128, 16384), (8192, 8192)]
CPU_ROWS = [(2, 700)]
QUICK = ["examples:rmsnorm"]


def fired() -> list[str]:
    """The tasks split_rows makes a variant of: the TritonBench-G tasks, then the examples."""
    return [*(f"tritonbench:{name}" for name in single_pass_gpu.fired("split_rows")), *EXAMPLES]


def _module(source: str, name: str, folder: Path):
    path = folder / f"{name}.py"
    path.write_text(source)
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def timed(fn, gpu: bool) -> tuple[float, float]:
    """Milliseconds (on the GPU, replayed from a CUDA graph; a call, host included) of `fn`: do_bench_cudagraph's
    and do_bench's medians on a GPU, one call twice in the interpreter. At these shapes a call's host work
    outlasts its kernels, so do_bench alone times the host."""
    if gpu:
        import triton.testing

        return (triton.testing.do_bench_cudagraph(fn, rep=100, return_mode="median"),
                triton.testing.do_bench(fn, warmup=25, rep=100, return_mode="median"))
    start = time.perf_counter()
    fn()
    elapsed = (time.perf_counter() - start) * 1e3
    return elapsed, elapsed


def few_rows(gpu: bool, with_compile: bool) -> list[dict]:
    """The examples on rows too few for the GPU: each kernel against eager torch and torch.compile."""
    import torch

    from kernelband.proposers.rewriter.proposer import options
    from kernelband.tasks import load_task

    folder = Path(tempfile.mkdtemp())
    sys.path.insert(0, str(folder))
    device = "cuda" if gpu else "cpu"
    rows = []
    for ref in EXAMPLES:
        task = load_task(ref)
        harness: dict = {}
        exec(compile(task.harness_source, task.harness_file or ref, "exec"), harness)
        entry, stem = harness["ENTRY"], ref.split(":")[1]
        contenders = [("k0", getattr(_module(task.module_source, f"{stem}_k0", folder), entry))]
        found = options(task.module_source, ("split_rows",))
        for index, variant in enumerate(found.variants):
            module = _module(variant.apply(found.module), f"{stem}_split{index}", folder)
            contenders.append((f"split_rows {index}", getattr(module, entry)))
        contenders.append(("torch eager", harness["reference"]))
        if with_compile:
            # Static shapes, as the evaluator's baseline: a compiled function called on a second shape would
            # otherwise recompile with dynamic sizes and time a generic kernel.
            contenders.append(("torch.compile max-autotune-no-cudagraphs",
                               torch.compile(harness["reference"], mode="max-autotune-no-cudagraphs", dynamic=False)))
        for n_rows, n_cols in (GPU_ROWS if gpu else CPU_ROWS):
            torch.manual_seed(0)
            args = harness["make_inputs"](device, rows=n_rows, cols=n_cols)
            want = harness["reference"](*args).float()
            moved = harness["bytes_moved"](rows=n_rows, cols=n_cols)
            for label, fn in contenders:
                row = {"task": ref, "kernel": label, "rows": n_rows, "cols": n_cols, "bytes": moved}
                try:
                    row["max_abs_err"] = (fn(*args).float() - want).abs().max().item()
                    row["ms"], row["call_ms"] = timed(lambda fn=fn, args=args: fn(*args), gpu)
                    row["gbps"] = moved / (row["ms"] * 1e-3) / 1e9
                except Exception as exc:  # a contender that fails is reported, not fatal to the table
                    row["error"] = f"{type(exc).__name__}: {exc}"[:300]
                rows.append(row)
                print(f"{stem:10s} {n_rows:6d} x {n_cols:6d}  {label:42s} "
                      + (f"{row['ms']:9.4f} ms  {row['gbps']:7.1f} GB/s  a call {row['call_ms']:8.4f} ms  "
                         f"err {row['max_abs_err']:.1e}"
                         if "ms" in row else row["error"]), flush=True)
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--interpreter", action="store_true", help="run on the CPU with the Triton interpreter")
    parser.add_argument("--tasks", default="", help="comma-separated task refs to evaluate (default: every task "
                                                      "split_rows fires on; with --interpreter, rmsnorm)")
    parser.add_argument("--no-compile", action="store_true", help="leave torch.compile out of the table")
    parser.add_argument("--out", required=True)
    args = parser.parse_args()
    if args.interpreter:
        os.environ["TRITON_INTERPRET"] = "1"
    import torch

    gpu = not args.interpreter
    if gpu and not torch.cuda.is_available():
        sys.exit("no GPU: run with --interpreter")
    refs = args.tasks.split(",") if args.tasks else (fired() if gpu else QUICK)
    table = few_rows(gpu, not args.no_compile)
    variants = single_pass_gpu.run("cuda" if gpu else "cpu", refs, "split_rows")
    meta = {"device": torch.cuda.get_device_name() if gpu else "cpu (interpreter)", "torch": torch.__version__,
            "date": time.strftime("%Y-%m-%d"), "commit": subprocess.run(
                ["git", "-C", str(Path(__file__).parent), "rev-parse", "--short", "HEAD"], capture_output=True,
                text=True).stdout.strip()}
    Path(args.out).write_text(json.dumps({"meta": meta, "rows": table, "variants": variants}, indent=1))
    wrong = [r for r in variants if r.get("ok") is False]
    print(f"{len(variants)} variants, {len(wrong)} not correct, {sum('error' in r for r in variants)} not run; "
          f"wrote {args.out}")


if __name__ == "__main__":
    main()
