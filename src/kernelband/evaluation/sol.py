"""Speed of light: the device's measured peaks and a shape's lower-bound time.

bound = max(bytes / peak bandwidth, flops / peak throughput). The peaks come
from `kernelband calibrate` and are cached per GPU name in
`~/.cache/kernelband/calibration.json` (or `$KERNELBAND_CACHE`).
"""

from __future__ import annotations

import json
import os
from dataclasses import asdict, dataclass, field
from pathlib import Path

from kernelband.evaluation.records import EvalResult, Outcome


@dataclass(frozen=True)
class Peaks:
    device: str
    bw_gbps: float  # device-to-device copy, bytes read + written
    tflops: float  # the best dense matmul rate over the dtypes measured
    tflops_by_dtype: dict = field(default_factory=dict)
    torch: str = ""


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


def bound_bytes(declared: float | None, io_bytes: int | None) -> float | None:
    """Bytes that must move: the task's count, but never more than its inputs and outputs.

    TritonBench's scripts sometimes count a tensor twice; the smaller of the two keeps
    the bound a lower bound.
    """
    values = [v for v in (declared, io_bytes) if v]
    return min(values) if values else None


def bound_ms(nbytes: float | None, flops: float | None, peaks: Peaks) -> float | None:
    times = [t for t in _terms_ms(nbytes, flops, peaks) if t is not None]
    return max(times) if times else None


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
        if peaks is None:
            continue
        sr.bound_ms = bound_ms(nbytes, shape.flops, peaks)
        if sr.bound_ms:
            sr.sol_fraction = sr.bound_ms / sr.cand_ms
            ref_fraction = sr.bound_ms / sr.ref_ms if sr.ref_ms else 0.0
            margin = tolerance(nbytes, shape.flops, peaks)
            if sr.sol_fraction > margin:
                if ref_fraction > margin:
                    sr.note = "bound below even the reference's time: the task's byte count is too high"
                    continue
                if overcounted:
                    sr.note = f"faster than the bound, which is no check here: {overcounted}"
                    continue
                result.outcome, result.stage = Outcome.SUSPICIOUS, "timing"
                result.detail = (f"shape {shape.label}: {sr.cand_ms * 1e3:.2f} us is faster than the "
                                 f"speed-of-light bound {sr.bound_ms * 1e3:.2f} us")
                result.checks.append("speed_of_light")
