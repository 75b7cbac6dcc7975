"""phi(k) from Nsight Compute.

The candidate runs in a worker started under
`ncu --clock-control none --profile-from-start off --csv --page raw`, warm
like any other (the pool starts it ahead of need). The worker imports and
compiles the candidate while nothing else waits for it; in a step that shares
the GPU it runs the representative shape once; then, with the GPU to itself,
it runs the shape again between cudaProfilerStart and cudaProfilerStop (ncu's
set-up in the process, 0.6-1.3 s, is paid there: a profiled launch beside
other processes' work makes ncu fail), and exits; ncu then
writes one CSV row per kernel. Counters of several kernels are averaged,
weighted by their durations. Results are cached
by (GPU, source hash, shape) for the life of the evaluator.
"""

from __future__ import annotations

import csv
import hashlib
import io
import os
import shutil
import threading

from kernelband.evaluation.gone import WorkerGone

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


def gone_note(exc: Exception, op: str, ncu_log: str | None = None) -> str:
    """The note of a profile whose worker died: the step, how it ended and ncu's own last error line, from the
    worker's log or from ncu's `--log-file` (`ncu_log`), where ncu writes its `==ERROR==` lines beside the CSV
    (a worker can exit with ncu's code 9 and no error line in its own log)."""
    outcome = getattr(exc, "outcome", "gone")
    lines = (getattr(exc, "detail", "") or str(exc)).strip().splitlines()
    said = [lines[0]] if lines else []
    try:
        with open(ncu_log or "", errors="replace") as f:
            lines += f.read().splitlines()
    except OSError:
        pass
    said += [ln.strip() for ln in lines if "==ERROR==" in ln][-1:]
    note = f"ncu: profiling worker {outcome} on {op}" + (f" ({'; '.join(said)})" if said else "")
    return note if len(note) <= 300 else note[:299] + "…"


def cache_key(device: str, source: str, shape: int) -> str:
    return hashlib.sha256(f"{device}\0{shape}\0{source}".encode()).hexdigest()


def report_text(worker, wait: float = 120.0) -> str | None:
    """Ask a profiling worker to exit, wait for ncu to write its CSV, and return it (None if it wrote none)."""
    try:
        worker.request({"op": "exit"}, 5)
    except WorkerGone:
        pass
    try:
        worker.proc.wait(timeout=wait)
    except Exception:  # noqa: BLE001
        worker.kill()
    try:
        with open(worker.ncu_log) as f:
            return f.read()
    except OSError:
        return None


class Profile:
    """One candidate profiled under ncu, in three steps, so that only the profiled run itself holds the GPU:

    * `prepare` (a side thread, no GPU lock): a warm profiling worker imports the candidate and compiles its
      kernels for the representative shape, while the candidate's own worker does the same;
    * `warm` (a shared step of the GPU lock, optional): the shape's inputs made and one warm-up call;
    * `measure` (the GPU alone): the inputs and warm-up call if `warm` did not run, then one run between
      cudaProfilerStart and Stop, during which ncu pays its set-up in the process and replays each kernel to
      read its counters;
    * `finish` (no GPU lock): the worker exits, ncu writes its CSV, and the counters are parsed.

    `cancel` ends it at any point (the candidate failed): the worker is killed, nothing waits for it.
    The values are cached by (GPU, source, shape); a cached profile needs no worker at all.
    """

    def __init__(self, task, source: str, shape: int, seed: int, device: str, pool, tune: dict | None = None):
        self.task, self.source, self.shape, self.seed, self.pool = task, source, shape, seed, pool
        self.tune = tune  # the autotuners' budget (Preset.tune)
        self.key = cache_key(device, source, shape)
        self.values: dict | None = _cache.get(self.key)
        self.note: str | None = None
        self.worker = None
        self.prepared = None  # the future of `prepare`, once started
        self.seconds: dict[str, float] = {}  # the profiled run as its worker saw it: start, run, stop
        self._cancelled = False
        self._lock = threading.Lock()

    def start(self, executor) -> Profile:
        """Run `prepare` on `executor`; `prepared` is its future."""
        self.prepared = executor.submit(self.prepare)
        return self

    def prepare(self) -> None:
        if self.values is not None:
            return
        try:
            worker = self.pool.acquire_profiler()
        except WorkerGone as exc:
            self.note = f"ncu: no profiling worker ({exc.detail.splitlines()[0] if exc.detail else exc.outcome})"
            return
        with self._lock:
            if self._cancelled:
                self.pool.release(worker)
                return
            self.worker = worker
        try:
            with self.pool.busy("profiler_compile"):
                reply = worker.request({"op": "load", "role": "cand", "task": self.task.wire(),
                                        "module_source": self.source, "tune": self.tune}, 300)
                if reply.get("ok"):
                    reply = worker.request({"op": "precompile", "shapes": [self.shape], "seed": self.seed}, 300)
            if not reply.get("ok"):
                self._fail("ncu: the candidate did not load under the profiler")
        except (WorkerGone, OSError) as exc:
            self._fail(gone_note(exc, "load", worker.ncu_log))

    def _fail(self, note: str) -> None:
        self.note = self.note or note
        self.cancel()

    def cancel(self) -> None:
        with self._lock:
            self._cancelled = True
            worker, self.worker = self.worker, None
        if worker is not None:
            self.pool.release(worker)

    def warm(self) -> None:
        """The profiled shape's inputs made and its first call, outside the profiled range: a step that may
        share the GPU with other checks (never with a timing), after `prepare` has returned and before
        `measure`. Optional: without it, `measure` makes the inputs and calls once with the GPU to itself."""
        self._run("profile_prepare", "the warm-up before the profiled run failed")

    def measure(self) -> None:
        """The profiled run: call with the GPU to yourself, after `prepare` (and `warm`, if at all)."""
        reply = self._run("profile", "profiling run failed")
        self.seconds = {k: float(v) for k, v in (reply or {}).get("seconds", {}).items()}

    def _run(self, op: str, failed: str) -> dict | None:
        """One request for the profiled shape to the profiling worker, its reply if it succeeded; a failure
        ends the profile."""
        worker = self.worker
        if worker is None:
            return None
        try:
            reply = worker.request({"op": op, "shape": self.shape, "seed": self.seed}, 300)
        except WorkerGone as exc:
            self._fail(gone_note(exc, op, worker.ncu_log))
            return None
        if not reply.get("ok"):
            self._fail(f"ncu: {failed}: {reply.get('error', '')[-200:]}")
            return None
        return reply

    def finish(self) -> tuple[dict | None, str | None]:
        """(phi values, note); the note says why there are none."""
        with self._lock:
            worker, self.worker = self.worker, None
        if worker is None:
            return self.values, self.note
        try:
            text = report_text(worker)
        finally:
            self.pool.release(worker)
        if text is None:
            return None, "ncu: wrote no report"
        values = parse(text)
        if values is None:
            tail = " ".join(text.strip().splitlines()[-2:])[:300]
            return None, f"ncu: no kernel in the report ({tail})"
        _cache[self.key] = values
        self.values = values
        return values, None
