"""What ncu's profiled run costs, by metric set (GPU machine).

ncu's profiled run holds the GPU alone for every candidate (about 1.4 s on an H100, run AB2), a third of
the GPU time a candidate needs. ncu replays a kernel once per pass, and metrics that need the kernel's SASS
patched (`smsp__sass_*`) cost more than hardware counters. This script profiles three Triton kernels
(element-wise, row softmax, matmul) under ncu with several metric sets, and reports per set and kernel the
wall time of the profiled launch (seen from inside the profiled process) and ncu's CSV rows, so that a
cheaper set can be checked against the current one:

    python3 benchmarks/ncu_cost.py --out ncu_cost.json [--repeat 2]

Each set is one `ncu` process (python, torch and the kernels' compile included); the kernels run once for a
warm-up before cudaProfilerStart, so their compile is not in the figures.

    python3 benchmarks/ncu_cost.py --concurrent 1,8 --busy --out ncu_concurrent.json

starts N processes under ncu at once (the current set; each profiles the add kernel twice, as a profiling
worker with the shared set-up does: ncu's set-up, then the profiled run), with `--busy` beside a process
that keeps the GPU busy with unprofiled kernels (other candidates' checks), and reports per process its
exit code, ncu's CSV rows and ncu's `==ERROR==` lines: do ncu processes that profile at the same time, or
beside other work, lose their profiles (run AD: a pool of 8 got φ from ncu for 13 of 29 candidates)?
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "src"))

from kernelband.evaluation import ncu  # noqa: E402

SASS = "smsp__sass_average_data_bytes_per_sector_mem_global_op_ld.pct"
# hardware-counter stand-ins for the coalescing of global loads: sectors and requests (their ratio)
ALT = ["l1tex__t_sectors_pipe_lsu_mem_global_op_ld.sum", "l1tex__t_requests_pipe_lsu_mem_global_op_ld.sum"]


def metric_sets() -> dict[str, list[str]]:
    current = [m for m, _ in ncu.METRICS.values()] + [ncu.DURATION]
    no_sass = [m for m in current if m != SASS]
    return {
        "current": current,
        "no_sass": no_sass,
        "no_sass_alt": no_sass + ALT,
        "sass_only": [SASS, ncu.DURATION],
        "duration_only": [ncu.DURATION],
    }


def run_set(name: str, metrics: list[str], repeat: int) -> dict:
    with tempfile.TemporaryDirectory() as tmp:
        log = os.path.join(tmp, "ncu.log")
        cmd = [ncu.executable(), "--clock-control", "none", "--profile-from-start", "off", "--csv", "--page", "raw",
               "--print-units", "base", "--metrics", ",".join(metrics), "--log-file", log,
               sys.executable, os.path.abspath(__file__), "--child", "--repeat", str(repeat)]
        t0 = time.perf_counter()
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=600)
        wall = time.perf_counter() - t0
        text = open(log).read() if os.path.exists(log) else ""
    child = [json.loads(ln) for ln in proc.stdout.splitlines() if ln.startswith("{")]
    rows = [ln for ln in text.splitlines() if ln.startswith('"')]
    return {"set": name, "metrics": metrics, "rc": proc.returncode, "process_s": round(wall, 2),
            "profiled": child,
            "csv_rows": rows[:40], "stderr_tail": proc.stderr[-1500:]}


def run_concurrent(n: int, busy: bool, repeat: int) -> dict:
    """`n` ncu processes started at once (the profiling workers' command, `ncu.command`; the add kernel
    profiled `repeat` times each), beside a busy process if asked."""
    with tempfile.TemporaryDirectory() as tmp:
        load = None
        if busy:
            load = subprocess.Popen([sys.executable, os.path.abspath(__file__), "--child-busy", "60"],
                                    stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
            time.sleep(8)  # its torch import and first kernels
        procs = []
        t0 = time.perf_counter()
        for i in range(n):
            log = os.path.join(tmp, f"ncu{i}.log")
            cmd = ncu.command(log) + [sys.executable, os.path.abspath(__file__), "--child", "--repeat", str(repeat),
                                      "--kernels", "add"]  # the profilers' own command line
            procs.append((log, subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)))
        out = []
        for log, proc in procs:
            stdout, stderr = proc.communicate(timeout=600)
            text = open(log).read() if os.path.exists(log) else ""
            out.append({"rc": proc.returncode, "csv_rows": sum(1 for ln in text.splitlines() if ln.startswith('"')) - 1,
                        "errors": [ln for ln in (text + stderr).splitlines() if "==ERROR==" in ln][:5],
                        "profiled": [json.loads(ln) for ln in stdout.splitlines() if ln.startswith("{")],
                        "stderr_tail": stderr[-600:] if proc.returncode else ""})
        wall = time.perf_counter() - t0
        if load is not None:
            load.kill()
            load.wait()
    lost = sum(1 for o in out if o["rc"] != 0 or o["csv_rows"] < repeat)
    return {"concurrent": n, "busy": busy, "seconds": round(wall, 1), "lost": lost, "processes": out}


def child_busy(seconds: float) -> None:
    """Unprofiled GPU work until killed or `seconds` are up: a copy kernel in a loop."""
    import torch

    x = torch.randn(1 << 26, device="cuda")
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        for _ in range(20):
            x.mul_(1.0000001)
        torch.cuda.synchronize()


def child(repeat: int, kernels: tuple[str, ...] = ("add", "softmax", "matmul")) -> None:
    import torch
    import triton
    import triton.language as tl

    @triton.jit
    def add_kernel(x, y, out, n, BLOCK: tl.constexpr):
        offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
        m = offs < n
        tl.store(out + offs, tl.load(x + offs, mask=m) + tl.load(y + offs, mask=m), mask=m)

    @triton.jit
    def softmax_kernel(x, out, cols, BLOCK: tl.constexpr):
        row = tl.program_id(0)
        offs = tl.arange(0, BLOCK)
        m = offs < cols
        v = tl.load(x + row * cols + offs, mask=m, other=-float("inf"))
        e = tl.exp(v - tl.max(v, 0))
        tl.store(out + row * cols + offs, e / tl.sum(e, 0), mask=m)

    @triton.jit
    def matmul_kernel(a, b, c, M, N, K, BM: tl.constexpr, BN: tl.constexpr, BK: tl.constexpr):
        pm, pn = tl.program_id(0), tl.program_id(1)
        rm, rn, rk = pm * BM + tl.arange(0, BM), pn * BN + tl.arange(0, BN), tl.arange(0, BK)
        acc = tl.zeros((BM, BN), dtype=tl.float32)
        for k in range(0, K, BK):
            acc += tl.dot(tl.load(a + rm[:, None] * K + (k + rk)[None, :]), tl.load(b + (k + rk)[:, None] * N + rn[None, :]))
        tl.store(c + rm[:, None] * N + rn[None, :], acc.to(tl.float16))

    dev = "cuda"
    n = 1 << 23
    x, y = torch.randn(n, device=dev), torch.randn(n, device=dev)
    o = torch.empty_like(x)
    rows, cols = 4096, 4096
    s, so = torch.randn(rows, cols, device=dev), torch.empty(rows, cols, device=dev)
    mm = 2048
    a, b = torch.randn(mm, mm, device=dev, dtype=torch.float16), torch.randn(mm, mm, device=dev, dtype=torch.float16)
    c = torch.empty(mm, mm, device=dev, dtype=torch.float16)
    calls = {
        "add": lambda: add_kernel[(triton.cdiv(n, 1024),)](x, y, o, n, BLOCK=1024),
        "softmax": lambda: softmax_kernel[(rows,)](s, so, cols, BLOCK=4096, num_warps=8),
        "matmul": lambda: matmul_kernel[(mm // 128, mm // 128)](a, b, c, mm, mm, mm, BM=128, BN=128, BK=32),
    }
    cudart = torch.cuda.cudart()
    for name, call in ((k, v) for k, v in calls.items() if k in kernels):
        call()
        torch.cuda.synchronize()
        for r in range(repeat):
            t0 = time.perf_counter()
            cudart.cudaProfilerStart()
            call()
            torch.cuda.synchronize()
            cudart.cudaProfilerStop()
            print(json.dumps({"kernel": name, "round": r, "s": round(time.perf_counter() - t0, 4)}), flush=True)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", default="ncu_cost.json")
    ap.add_argument("--repeat", type=int, default=2, help="profiled launches per kernel in each process")
    ap.add_argument("--sets", default=",".join(metric_sets()), help="comma-separated: " + ",".join(metric_sets()))
    ap.add_argument("--concurrent", default="",
                    help="comma-separated process counts: ncu processes started at once (instead of the sets)")
    ap.add_argument("--busy", action="store_true", help="with --concurrent: beside a process keeping the GPU busy")
    ap.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    ap.add_argument("--kernels", default="add,softmax,matmul", help=argparse.SUPPRESS)
    ap.add_argument("--child-busy", type=float, default=0.0, help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.child:
        child(args.repeat, tuple(args.kernels.split(",")))
        return
    if args.child_busy:
        child_busy(args.child_busy)
        return
    if not ncu.available():
        raise SystemExit("ncu_cost: no ncu on PATH (or KERNELBAND_NCU)")
    if args.concurrent:
        results = []
        for n in (int(x) for x in args.concurrent.split(",")):
            for busy in sorted({False, args.busy}):
                res = run_concurrent(n, busy, args.repeat)
                results.append(res)
                print(json.dumps({k: res[k] for k in ("concurrent", "busy", "seconds", "lost")}
                                 | {"errors": sorted({e for p in res["processes"] for e in p["errors"]})[:3]}),
                      flush=True)
        with open(args.out, "w") as f:
            json.dump(results, f, indent=1)
        return
    sets = metric_sets()
    results = []
    for name in args.sets.split(","):
        res = run_set(name, sets[name], args.repeat)
        results.append(res)
        summary = {k["kernel"]: k["s"] for k in res["profiled"] if k["round"] == args.repeat - 1}
        print(json.dumps({"set": name, "rc": res["rc"], "process_s": res["process_s"], "profiled_s": summary}),
              flush=True)
    with open(args.out, "w") as f:
        json.dump(results, f, indent=1)


if __name__ == "__main__":
    main()
