"""Speed of light: the device's measured peaks and a shape's lower-bound time.

bound = max(bytes / peak bandwidth, flops / peak throughput, launch floor). The
peaks and the floor come from `kernelband calibrate` and are cached per GPU name
in `~/.cache/kernelband/calibration.json` (or `$KERNELBAND_CACHE`).

The launch floor is the time of an empty Triton kernel, timed by the worker's
own timing code under the evaluator's preset, by events and by spans
(worker/calibrate.py): no kernel timed so can take less. Without it, a shape of
a few hundred KB has a bound of a few hundred ns that no kernel can approach,
and the median SOL fraction is set by shapes no rewrite can make faster. The
floor is an estimate, not a law: the "faster than the bound" check compares with
the bytes and FLOPs alone (`ShapeResult.data_bound_ms`).
"""

from __future__ import annotations

import json
import os
import statistics
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path

from kernelband.evaluation.interleave import summarise
from kernelband.evaluation.records import PRESETS, EvalResult, Outcome, ShapeResult


@dataclass(frozen=True)
class Peaks:
    device: str
    bw_gbps: float  # device-to-device copy, bytes read + written
    tflops: float  # the best dense matmul rate over the dtypes measured
    tflops_by_dtype: dict = field(default_factory=dict)
    torch: str = ""
    # The launch floor (ms): an empty Triton kernel timed by events and by the calls' spans (Preset.timer);
    # None in a cache written before the floor was measured (Reference.peaks measures it on next use)
    floor_ms: float | None = None
    floor_span_ms: float | None = None

    def floor(self, timer: str) -> float:
        """The floor for a shape timed by `timer` ("events", "span" or "mixed"); 0 where not measured."""
        if timer == "span" and self.floor_span_ms:
            return self.floor_span_ms
        return self.floor_ms or 0.0


# The shapes the second SOL median keeps: those that move at least this many bytes (16 MB), where the
# bound is set by bandwidth or compute, not by the launch.
LARGE_BYTES = 16e6


def cache_dir() -> Path:
    return Path(os.environ.get("KERNELBAND_CACHE", Path.home() / ".cache" / "kernelband"))


def _path(path: str | os.PathLike | None) -> Path:
    return Path(path) if path else cache_dir() / "calibration.json"


def load(device: str, path: str | os.PathLike | None = None) -> Peaks | None:
    try:
        data = json.loads(_path(path).read_text())
    except (OSError, ValueError):
        return None
    entry = data.get(device)
    if not isinstance(entry, dict):
        return None
    try:
        return Peaks(**{k: v for k, v in entry.items() if k in Peaks.__dataclass_fields__})
    except TypeError:
        return None


def save(peaks: Peaks, path: str | os.PathLike | None = None) -> Path:
    p = _path(path)
    p.parent.mkdir(parents=True, exist_ok=True)
    try:
        data = json.loads(p.read_text())
    except (OSError, ValueError):
        data = {}
    data[peaks.device] = asdict(peaks)
    tmp = p.with_suffix(".tmp")
    tmp.write_text(json.dumps(data, indent=2))
    tmp.replace(p)
    return p


# The preset the launch floor is timed under: the evaluator's default, whatever a run's preset (the floor is
# cached per GPU, once)
FLOOR_PRESET = "default"


def calibrate_request(floor_only: bool = False) -> dict:
    """A worker's `calibrate` request: the peaks (unless `floor_only`) and the launch floor's times."""
    return {"op": "calibrate", "floor_only": floor_only, "preset": PRESETS[FLOOR_PRESET].wire()}


def with_floor(peaks: Peaks, floor: dict | None) -> Peaks:
    """`peaks` with the floor from a `calibrate` reply's "floor" (its per-call times, summarised with the
    preset's statistic). A reply without one (the floor could not be timed) gives a floor of 0, which
    `Peaks.floor` reads as no floor, and which is not measured again at each use."""
    if not floor:
        return replace(peaks, floor_ms=0.0)
    stat = PRESETS[FLOOR_PRESET].stat
    return replace(peaks, floor_ms=floor_from(floor.get("events") or [], stat) or 0.0,
                   floor_span_ms=floor_from(floor.get("span") or [], stat))


def bound_bytes(declared: float | None, io_bytes: int | None) -> float | None:
    """Bytes that must move: the task's count, but never more than its inputs and outputs.

    TritonBench's scripts sometimes count a tensor twice; the smaller of the two keeps
    the bound a lower bound.
    """
    values = [v for v in (declared, io_bytes) if v]
    return min(values) if values else None


def bound_ms(nbytes: float | None, flops: float | None, peaks: Peaks, floor_ms: float = 0.0) -> float | None:
    """max(bytes / bandwidth, flops / peak, floor_ms); None without bytes or FLOPs (a floor alone bounds
    nothing the task says it does)."""
    times = [t for t in _terms_ms(nbytes, flops, peaks) if t is not None]
    return max(*times, floor_ms) if times else None


def floor_from(times: list[float], stat: str) -> float | None:
    """The floor from an empty kernel's per-call times, summarised as the evaluator summarises a shape."""
    return summarise([times], stat)[0] if times else None


def _terms_ms(nbytes: float | None, flops: float | None, peaks: Peaks) -> tuple[float | None, float | None]:
    return (nbytes / (peaks.bw_gbps * 1e9) * 1e3 if nbytes else None,
            flops / (peaks.tflops * 1e12) * 1e3 if flops else None)


# How much faster than its bound a time may be before it is suspicious, by the term that sets the bound.
# Bandwidth: 5 %, for noise and for a kernel that beats the calibration's copy rate by a little.
# Compute: 25 %, because the peak is what torch.matmul reached at one size, not the hardware's limit: a
# Triton matmul reached 718 TFLOP/s against the H200's calibrated 678 (BENCHMARKS.md, calibration), and five
# calibrations of the same H100 model ranged from 686 to 739. A kernel that skips its work is far faster
# than either margin; its outputs fail the other checks too.
BANDWIDTH_TOLERANCE = 1.05
COMPUTE_TOLERANCE = 1.25


def tolerance(nbytes: float | None, flops: float | None, peaks: Peaks) -> float:
    """The margin for a shape: the compute one where its FLOPs, not its bytes, set the bound."""
    bytes_ms, flops_ms = _terms_ms(nbytes, flops, peaks)
    compute = flops_ms is not None and (bytes_ms is None or flops_ms > bytes_ms)
    return COMPUTE_TOLERANCE if compute else BANDWIDTH_TOLERANCE


def void_reason(sr: ShapeResult, overcounted: str) -> str:
    """Why a timed shape's data bound bounds nothing ("" where it holds): the candidate beats it by more than
    the shape's margin (`sr.sol_margin`, which `judge` records; the bandwidth one for an evaluation stored
    before it did), and so does the reference, or the task says its bytes are overcounted. `judge` gives such
    a shape no fraction; a bench measures again a stored one that has one."""
    margin = sr.sol_margin or BANDWIDTH_TOLERANCE
    if not sr.data_bound_ms or not sr.cand_ms or sr.data_bound_ms / sr.cand_ms <= margin:
        return ""
    if sr.ref_ms and sr.data_bound_ms / sr.ref_ms > margin:
        return "bound below even the reference's time: the task's byte count is too high"
    return f"faster than the bound, which is no check here: {overcounted}" if overcounted else ""


def judge(shapes, result: EvalResult, by_index, io_bytes: dict[int, int], peaks: Peaks | None,
          overcounted: str = "") -> None:
    """Each timed shape's GB/s, TFLOP/s and fraction of the bound; a candidate faster than the bound is
    suspicious, unless the reference is too, or the task says its bytes are overcounted."""
    for shape in shapes:
        sr = by_index[shape.index]
        if not sr.cand_ms:
            continue
        nbytes = bound_bytes(shape.bytes, io_bytes.get(shape.index))
        if shape.bytes or nbytes:
            sr.gbps = (shape.bytes or nbytes) / (sr.cand_ms * 1e-3) / 1e9
        if shape.flops:
            sr.tflops = shape.flops / (sr.cand_ms * 1e-3) / 1e12
        sr.moved_bytes = nbytes
        if peaks is None:
            continue
        sr.data_bound_ms = bound_ms(nbytes, shape.flops, peaks)
        sr.bound_ms = bound_ms(nbytes, shape.flops, peaks, peaks.floor(sr.timer))
        if sr.bound_ms:
            sr.sol_fraction = sr.bound_ms / sr.cand_ms
        if sr.data_bound_ms:
            # the check reads the bytes and FLOPs alone: a kernel cannot beat bandwidth, but the floor is an
            # estimate of a launch that a kernel may well beat
            sr.sol_margin = tolerance(nbytes, shape.flops, peaks)
            if sr.data_bound_ms / sr.cand_ms > sr.sol_margin:
                reason = void_reason(sr, overcounted)
                if reason:
                    # the bound bounds nothing: no fraction of it is shown or enters the medians
                    # (flash_decode2_phi's large shapes read 1.37 of it)
                    sr.note, sr.sol_fraction = reason, None
                    continue
                result.outcome, result.stage = Outcome.SUSPICIOUS, "timing"
                result.detail = (f"shape {shape.label}: {sr.cand_ms * 1e3:.2f} us is faster than the "
                                 f"speed-of-light bound {sr.data_bound_ms * 1e3:.2f} us")
                result.checks.append("speed_of_light")
    medians(result)


def medians(result: EvalResult) -> None:
    """The result's median SOL fraction over its timed search shapes, and over those moving LARGE_BYTES."""
    timed = [s for s in result.shapes if not s.held_out and s.sol_fraction is not None]
    result.sol_median = statistics.median(s.sol_fraction for s in timed) if timed else None
    large = [s.sol_fraction for s in timed if (s.moved_bytes or 0) >= LARGE_BYTES]
    result.sol_median_large = statistics.median(large) if large else None
