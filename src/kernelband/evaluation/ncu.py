"""phi(k) from Nsight Compute.

The candidate runs in a worker started under
`ncu --clock-control none --profile-from-start off --csv --page raw`, warm
like any other (the pool starts it ahead of need). The worker compiles and runs
the representative shape once, then runs it again between cudaProfilerStart
and cudaProfilerStop, and exits; ncu then writes one CSV row per kernel. Counters
of several kernels are averaged, weighted by their durations. Results are cached
by (GPU, source hash, shape) for the life of the evaluator.
"""

from __future__ import annotations

import csv
import hashlib
import io
import os
import shutil

# phi key -> (metric, scale to percent or count)
METRICS: dict[str, tuple[str, float]] = {
    "l2_hit_rate": ("lts__t_sector_hit_rate.pct", 1.0),
    "dram_bw_pct": ("dram__throughput.avg.pct_of_peak_sustained_elapsed", 1.0),
    "sm_throughput_pct": ("sm__throughput.avg.pct_of_peak_sustained_elapsed", 1.0),
    # active threads per executed instruction, out of 32
    "warp_execution_efficiency": ("smsp__thread_inst_executed_per_inst_executed.ratio", 100.0 / 32.0),
    "achieved_occupancy": ("sm__warps_active.avg.pct_of_peak_sustained_active", 1.0),
    "registers_per_thread": ("launch__registers_per_thread", 1.0),
    "shared_bank_conflicts": ("l1tex__data_bank_conflicts_pipe_lsu_mem_shared.sum", 1.0),
    "global_load_coalescing_pct": ("smsp__sass_average_data_bytes_per_sector_mem_global_op_ld.pct", 1.0),
    "tensor_core_util_pct": ("sm__pipe_tensor_op_hmma_cycles_active.avg.pct_of_peak_sustained_active", 1.0),
}
DURATION = "gpu__time_duration.sum"

_cache: dict[str, dict] = {}


def executable() -> str | None:
    return os.environ.get("KERNELBAND_NCU") or shutil.which("ncu")


def available() -> bool:
    return executable() is not None


def command(log_file: str) -> list[str]:
    metrics = ",".join([m for m, _ in METRICS.values()] + [DURATION])
    return [executable(), "--clock-control", "none", "--profile-from-start", "off", "--target-processes", "all",
            "--csv", "--page", "raw", "--print-units", "base", "--metrics", metrics, "--log-file", log_file]


def _number(text: str) -> float | None:
    text = (text or "").replace(",", "").strip()
    try:
        return float(text)
    except ValueError:
        return None


def parse(text: str) -> dict[str, float | None] | None:
    """Duration-weighted phi values from ncu's raw CSV page, or None if it holds no kernel."""
    lines = [ln for ln in text.splitlines() if ln.startswith('"')]
    if len(lines) < 2:
        return None
    rows = list(csv.DictReader(io.StringIO("\n".join(lines))))
    rows = [r for r in rows if r.get(DURATION) not in (None, "") and _number(r.get(DURATION)) is not None]
    if not rows:
        return None
    weights = [_number(r[DURATION]) or 0.0 for r in rows]
    total = sum(weights) or float(len(rows))
    if not sum(weights):
        weights = [1.0] * len(rows)
    out: dict[str, float | None] = {}
    for key, (metric, scale) in METRICS.items():
        values = [(_number(r.get(metric)), w) for r, w in zip(rows, weights)]
        values = [(v, w) for v, w in values if v is not None]
        if not values:
            out[key] = None
            continue
        if key == "shared_bank_conflicts":
            out[key] = sum(v for v, _ in values)
        else:
            out[key] = sum(v * w for v, w in values) / sum(w for _, w in values) * scale
    out["kernels"] = float(len(rows))
    out["duration_ns"] = total
    return out


def cache_key(device: str, source: str, shape: int) -> str:
    return hashlib.sha256(f"{device}\0{shape}\0{source}".encode()).hexdigest()


def profile(task, source: str, shape: int, seed: int, device: str, pool) -> tuple[dict | None, str | None]:
    """(phi values, note). The note says why there are none."""
    key = cache_key(device, source, shape)
    if key in _cache:
        return _cache[key], None
    from kernelband.evaluation.pool import WorkerGone
    try:
        worker = pool.acquire_profiler()
    except WorkerGone as exc:
        return None, f"ncu: no profiling worker ({exc.detail.splitlines()[0] if exc.detail else exc.outcome})"
    try:
        reply = worker.request({"op": "load", "role": "cand", "task": task.wire(), "module_source": source}, 300)
        if not reply.get("ok"):
            return None, "ncu: the candidate did not load under the profiler"
        reply = worker.request({"op": "profile", "shape": shape, "seed": seed}, 300)
        if not reply.get("ok"):
            return None, f"ncu: profiling run failed: {reply.get('error', '')[-200:]}"
        try:
            worker.request({"op": "exit"}, 5)
        except WorkerGone:
            pass
        try:
            worker.proc.wait(timeout=120)
        except Exception:  # noqa: BLE001
            worker.kill()
        try:
            with open(worker.ncu_log) as f:
                text = f.read()
        except OSError:
            return None, "ncu: wrote no report"
        values = parse(text)
        if values is None:
            tail = " ".join(text.strip().splitlines()[-2:])[:300]
            return None, f"ncu: no kernel in the report ({tail})"
        _cache[key] = values
        return values, None
    except WorkerGone as exc:
        return None, f"ncu: profiling worker {exc.outcome}"
    finally:
        pool.release(worker)
