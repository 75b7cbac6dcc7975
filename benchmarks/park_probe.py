"""Why a parked profiling worker hangs under the real Nsight Compute (run X: `pool-parked` evaluated nothing in
8 minutes, its four handed-out workers' ncu front ends and targets busy the whole time).

For each way of parking, one profiling worker is started under ncu, parked for a few seconds, handed out,
then asked to load a task's starting kernel, compile it, run the profiled call and exit, each with a short
time limit. Before and after each step the worker's process tree is listed (pid, parent, process group,
session, state, command, CPU seconds), so that it shows which processes a group signal reaches, and how ncu
takes a stopped target. Ways (--ways, comma-separated):

  none    no parking (the control)
  group   SIGSTOP / SIGCONT to the worker's process group (what `park_profilers` did before run X)
  front   `Worker.pause` / `resume`: ncu's front end (and its launcher) only, the Python worker left running
          (what `park_profilers` does since run X)
  target  the signals to the Python worker only

    PYTHONPATH=src KERNELBAND_TRITONBENCH=.data/tritonbench_g_tasks.json \\
        python3 benchmarks/park_probe.py --task add_value --out $OUT/park_probe.json
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import sys
import time

import psutil

from kernelband.errors import run_script
from kernelband.evaluation import ncu
from kernelband.evaluation.pool import Worker, WorkerGone
from kernelband.tasks import load_task


def tree(pid: int) -> list[dict]:
    rows = []
    try:
        top = psutil.Process(pid)
        procs = [top] + top.children(recursive=True)
    except psutil.Error:
        return rows
    for p in procs:
        try:
            with p.oneshot():
                t = p.cpu_times()
                rows.append({"pid": p.pid, "ppid": p.ppid(), "pgid": os.getpgid(p.pid), "sid": os.getsid(p.pid),
                             "status": p.status(), "name": p.name(), "cpu_s": round(t.user + t.system, 2),
                             "cmd": " ".join(p.cmdline())[:80]})
        except (psutil.Error, OSError):
            pass
    return rows


def signal_some(worker: Worker, way: str, sig: int) -> list[int]:
    """Send `sig` the way `way` parks; the pids signalled."""
    if way == "group":
        worker._signal_group(sig)
        return [worker.proc.pid]
    if way == "front":
        stopped = worker._front_end()
        worker.pause() if sig == signal.SIGSTOP else worker.resume()
        return stopped
    Worker._signal([worker.ready.pid], sig)
    return [worker.ready.pid]


def step(log: list, worker: Worker, name: str, message: dict | None, timeout: float) -> bool:
    t0 = time.monotonic()
    entry: dict = {"step": name}
    ok = True
    if message is not None:
        try:
            reply = worker.request(message, timeout)
            entry["reply_ok"] = bool(reply.get("ok"))
            entry["error"] = (reply.get("error") or "")[-300:]
            ok = entry["reply_ok"]
        except WorkerGone as exc:
            entry["gone"] = f"{exc.outcome}: {exc.detail[:300]}"
            ok = False
    entry["s"] = round(time.monotonic() - t0, 2)
    entry["tree"] = tree(worker.proc.pid)
    log.append(entry)
    print(json.dumps({k: v for k, v in entry.items() if k != "tree"}), flush=True)
    for row in entry["tree"]:
        print("   ", row, flush=True)
    return ok


def probe(way: str, task, park_s: float, timeout: float, base: str, mode: str = "gpu") -> dict:
    log: list = []
    t0 = time.monotonic()
    worker = Worker(mode, base, 0 if mode == "gpu" else None, None, profiler=True)
    result: dict = {"way": way, "steps": log}
    try:
        worker.wait_ready(180)
        result["start_s"] = round(time.monotonic() - t0, 2)
        step(log, worker, "ready", None, 0)
        if way != "none":
            result["signalled"] = signal_some(worker, way, signal.SIGSTOP)
        time.sleep(park_s)
        step(log, worker, "parked", None, 0)
        if way != "none":
            signal_some(worker, way, signal.SIGCONT)
        time.sleep(1.0)
        step(log, worker, "resumed", None, 0)
        ok = step(log, worker, "load", {"op": "load", "role": "cand", "task": task.wire(),
                                         "module_source": task.module_source}, timeout)
        ok = ok and step(log, worker, "precompile", {"op": "precompile", "shapes": [0], "seed": 1}, timeout)
        ok = ok and step(log, worker, "profile", {"op": "profile", "shape": 0, "seed": 1}, timeout)
        if ok:
            text = ncu.report_text(worker, wait=60) or ""
            result["phi"] = ncu.parse(text)
            result["ncu_tail"] = text[-400:] if result["phi"] is None else ""
        result["ok"] = bool(ok and result.get("phi"))
    except WorkerGone as exc:
        result["gone"] = f"{exc.outcome}: {exc.detail[:500]}"
        result["ok"] = False
    finally:
        result["worker_log"] = worker.log_tail(1500)
        worker.close()
    result["seconds"] = round(time.monotonic() - t0, 2)
    print(json.dumps({k: v for k, v in result.items() if k not in ("steps", "worker_log")}), flush=True)
    return result


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--task", default="add_value")
    ap.add_argument("--ways", default="none,group,front,target")
    ap.add_argument("--park-s", type=float, default=5.0)
    ap.add_argument("--mode", default="gpu", choices=("gpu", "interpreter"),
                    help="interpreter: a CPU check of the script with a stand-in KERNELBAND_NCU")
    ap.add_argument("--timeout", type=float, default=45.0, help="seconds allowed per request")
    ap.add_argument("--out", default=os.environ.get("OUT", ".") + "/park_probe.json")
    args = ap.parse_args()
    task = load_task(f"tritonbench:{args.task}")
    base = os.path.join(os.environ.get("TMPDIR", "/tmp"), f"park-probe-{os.getpid()}")
    os.makedirs(base, exist_ok=True)
    results = []
    for way in args.ways.split(","):
        print(f"== {way}", flush=True)
        results.append(probe(way, task, args.park_s, args.timeout, base, args.mode))
        with open(args.out, "w") as f:
            json.dump(results, f, indent=1, default=str)
    print(json.dumps({r["way"]: r["ok"] for r in results}), file=sys.stderr)


if __name__ == "__main__":
    run_script(main)
