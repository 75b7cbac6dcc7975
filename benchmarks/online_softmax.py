"""The online reductions on the row shapes issue 49 quotes (GPU machine): rows of 32,000 columns, 64, 8,192 and
16,384 rows, float32 and float16; each starting kernel, each `online_softmax` variant of it, torch eager and
torch.compile(mode="max-autotune-no-cudagraphs"), timed with triton.testing.do_bench (median), and each time as
a fraction of the DRAM bandwidth (bytes a softmax must move, read once and written once, over the measured
device-to-device copy bandwidth).

The starting kernels: examples:softmax (three loop passes over 128-column blocks; the variant merges the max
and exp-sum passes) and tritonbench:softmax_triton1 (one block per row, BLOCK = next_power_of_2(n_cols); the
variants walk long rows in chunks, and split rows too few for the SMs over several programs). Every output
is checked against torch.softmax first.

    python benchmarks/online_softmax.py --out online.json                  # GPU: the quoted shapes
    python benchmarks/online_softmax.py --interpreter --out online.json    # CPU: tiny shapes, the plumbing
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

TASKS = ("examples:softmax", "tritonbench:softmax_triton1")
GPU_SHAPES = [(64, 32000), (128, 65536), (8192, 32000), (16384, 32000)]
CPU_SHAPES = [(3, 100), (9, 100)]  # fewer and more rows than the interpreter's SM count (online_split.CPU_SMS)


def _module(source: str, name: str, folder: Path):
    path = folder / f"{name}.py"
    path.write_text(source)
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def kernels(folder: Path) -> list[tuple[str, object]]:
    """(label, softmax function) of each starting kernel and each of its online_softmax variants."""
    from kernelband.proposers.rewriter.proposer import options
    from kernelband.tasks import load_task

    found = []
    for ref in TASKS:
        source = load_task(ref).module_source
        stem = ref.split(":")[1]
        found.append((f"{stem} k0", _module(source, f"{stem}_k0", folder).softmax))
        made = options(source, ("online_softmax",))
        for index, variant in enumerate(made.variants):
            label = f"{stem} online {index}" + (" (split)" if "split" in variant.rationale else "")
            found.append((label, _module(variant.apply(made.module), f"{stem}_v{index}", folder).softmax))
        # the one-block child single_pass makes of a blocked softmax, and its online variants (the chunked twin,
        # the few-rows split), which reach rows of any length through its lifted bound
        single = options(source, ("single_pass",))
        for first, child in enumerate(single.variants):
            child_source = child.apply(single.module)
            made = options(child_source, ("online_softmax",))
            for index, variant in enumerate(made.variants):
                label = f"{stem} single_pass {first} online {index}" + (" (split)" if "split" in variant.rationale
                                                                        else "")
                found.append((label, _module(variant.apply(made.module), f"{stem}_s{first}v{index}", folder).softmax))
    return found


def timed(fn, gpu: bool) -> float:
    """Milliseconds a call takes: do_bench's median on a GPU, else the median of three calls."""
    if gpu:
        import triton.testing

        return triton.testing.do_bench(fn, warmup=25, rep=100, return_mode="median")
    times = []
    for _ in range(3):
        start = time.perf_counter()
        fn()
        times.append((time.perf_counter() - start) * 1e3)
    return statistics.median(times)


def copy_bandwidth(gpu: bool) -> float | None:
    """Bytes per second of a device-to-device copy (bytes read and written), as `kernelband calibrate`
    measures the peak."""
    if not gpu:
        return None
    import torch

    src = torch.empty(1 << 28, dtype=torch.uint8, device="cuda")
    dst = torch.empty_like(src)
    ms = timed(lambda: dst.copy_(src), gpu)
    return 2 * src.numel() / (ms * 1e-3)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--interpreter", action="store_true", help="run on the CPU with the Triton interpreter")
    parser.add_argument("--out", default="online_softmax.json")
    parser.add_argument("--no-compile", action="store_true", help="leave torch.compile out")
    args = parser.parse_args()
    if args.interpreter:
        os.environ["TRITON_INTERPRET"] = "1"
    import torch

    gpu = not args.interpreter
    if gpu and not torch.cuda.is_available():
        sys.exit("no GPU: run with --interpreter")
    device = "cuda" if gpu else "cpu"
    folder = Path(tempfile.mkdtemp())
    sys.path.insert(0, str(folder))
    bandwidth = copy_bandwidth(gpu)
    # static shapes, as the evaluator's baseline: a function compiled once for all shapes recompiles with dynamic
    # sizes after the first and times a generic kernel
    compiled = None if args.no_compile else torch.compile(lambda x: torch.softmax(x, dim=-1),
                                                          mode="max-autotune-no-cudagraphs", dynamic=False)
    contenders = kernels(folder)
    rows = []
    for dtype in (torch.float32, torch.float16):
        for n_rows, n_cols in (GPU_SHAPES if gpu else CPU_SHAPES):
            torch.manual_seed(0)
            x = torch.randn(n_rows, n_cols, device=device, dtype=dtype)
            want = torch.softmax(x.float(), dim=-1)
            moved = 2 * x.numel() * x.element_size()
            entries = [*contenders, ("torch eager", lambda x: torch.softmax(x, dim=-1))]
            if compiled is not None:
                entries.append(("torch.compile max-autotune-no-cudagraphs", compiled))
            for label, fn in entries:
                row = {"kernel": label, "dtype": str(dtype).split(".")[1], "rows": n_rows, "cols": n_cols,
                       "bytes": moved}
                try:
                    got = fn(x)
                    row["max_abs_err"] = (got.float() - want).abs().max().item()
                    row["ms"] = timed(lambda fn=fn, x=x: fn(x), gpu)
                    row["dram_fraction"] = moved / (row["ms"] * 1e-3) / bandwidth if bandwidth else None
                except Exception as exc:  # a contender that fails is reported, not fatal to the sweep
                    row["error"] = f"{type(exc).__name__}: {exc}"[:300]
                rows.append(row)
                fraction = f"{row['dram_fraction']:5.2f}" if row.get("dram_fraction") else "    -"
                print(f"{row['dtype']:8s} {n_rows:6d} x {n_cols:6d}  {label:48s} "
                      + (f"{row['ms']:9.4f} ms  DRAM {fraction}  err {row['max_abs_err']:.1e}"
                         if "ms" in row else row["error"]), flush=True)
    meta = {"device": torch.cuda.get_device_name() if gpu else "cpu (interpreter)", "torch": torch.__version__,
            "copy_bandwidth_gbps": bandwidth / 1e9 if bandwidth else None,
            "date": time.strftime("%Y-%m-%d"), "commit": subprocess.run(
                ["git", "-C", str(Path(__file__).parent), "rev-parse", "--short", "HEAD"], capture_output=True,
                text=True).stdout.strip()}
    Path(args.out).write_text(json.dumps({"meta": meta, "rows": rows}, indent=1))
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
