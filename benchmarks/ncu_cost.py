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


def child(repeat: int) -> None:
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
    for name, call in calls.items():
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
    ap.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.child:
        child(args.repeat)
        return
    if not ncu.available():
        raise SystemExit("ncu_cost: no ncu on PATH (or KERNELBAND_NCU)")
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
