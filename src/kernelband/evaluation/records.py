"""Plain records an evaluation produces; they are stored and reloaded as JSON."""

from __future__ import annotations

import re
from dataclasses import asdict, dataclass, field
from enum import Enum

from kernelband.evaluation.interleave import STATS


class Outcome(str, Enum):
    OK = "ok"
    COMPILE_ERROR = "compile_error"
    RUNTIME_ERROR = "runtime_error"
    WRONG_OUTPUT = "wrong_output"
    TIMEOUT = "timeout"
    CRASHED = "crashed"
    SUSPICIOUS = "suspicious"


@dataclass(frozen=True)
class Preset:
    """How a kernel is timed on one shape. Warm-up and repetitions count iterations or milliseconds."""

    name: str
    warmup: float
    rep: float
    unit: str  # "iters" | "ms"
    stat: str  # a name in interleave.STATS: "mean", "median", "trimmed" (the mean of the middle 80 %)
    rounds: int  # reference and candidate measured in turn, ABBA..., this many times each
    max_ms: float | None = None  # cap on one measurement
    # GPU time (µs) queued after each L2 flush, before the timed call: the CPU enqueues the call while the
    # GPU waits, so a kernel of a few µs is timed on the GPU, not the Python that launches it (0: off)
    ahead_us: float = 0.0
    # A shape is measured again (both sides, up to `retries` more times) when the reference comes out more
    # than `recheck` times its usual time in this evaluator: the window was disturbed (0: off).
    # evaluation/interleave.py
    recheck: float = 0.0
    retries: int = 0
    # How an autotuner in the kernel times its configs (ms of do_bench warm-up and repetitions), when it
    # brings no benchmark of its own; None: Triton's own (25 and 100). A config's time only picks the config:
    # the kernel is then timed by the preset like any other.
    tune_warmup: float | None = None
    tune_rep: float | None = None
    # Copies of a shape's inputs that one timing cycles through, call after call: the same values (made from
    # the same seed) at as many addresses, so that where one copy happens to lie does not set the time of a
    # kernel of a few µs. Capped so that the copies hold at most `placement_mib` MiB (large shapes: one copy).
    placements: int = 1
    placement_mib: float = 64.0
    # "events": each call timed by do_bench's CUDA events. "span": a shape whose reference takes under
    # `span_below_ms` (by events) is timed by the calls' spans on the GPU as CUPTI records them (first kernel's
    # start to last kernel's end), which leave out the launch's start-up: the part of a µs kernel's event time
    # that moves from one process to the next (worker/timing.py; BENCHMARKS.md, timing repeatability). With
    # `span_task_ms`, only in a task whose reference takes under it over the shapes timed. Needs `recheck`.
    timer: str = "events"
    span_below_ms: float = 0.1
    span_task_ms: float | None = None  # None: no limit
    # ABBA rounds of a shape timed by spans (at least `rounds`), then two more at a time up to
    # `span_rounds_max` while the speedup's standard error from the iterations and the rounds is over
    # `span_se`: a kernel of a few µs varies by 3-8 % from call to call, and its window drifts; more calls
    # average the one, and rounds in ABBA order cancel the other where it is linear (interleave.measure_shape)
    span_rounds: int = 1
    span_rounds_max: int = 1
    span_se: float = 0.0

    def __post_init__(self) -> None:
        if self.timer not in ("events", "span"):
            raise ValueError(f"timer is 'events' or 'span', not {self.timer!r}")
        if self.stat not in STATS:
            raise ValueError(f"stat is one of {', '.join(STATS)}, not {self.stat!r}")

    def wire(self) -> dict:
        return asdict(self)

    def tune(self) -> dict | None:
        """The autotuners' budget (and GPU-ahead wait) as a worker's `load` takes it, or None for Triton's own."""
        if self.tune_rep is None:
            return None
        return {"warmup": self.tune_warmup or 0.0, "rep": self.tune_rep, "ahead_us": self.ahead_us}


# The evaluator's rules: bump it with any change that could give the same source on the same GPU another
# outcome or speedup (a new check, a new waiver, a new timing protocol). A stored evaluation under other rules
# is never reused: a sweep evaluates that source again and measures the golden baseline again. Evaluations
# stored before the stamp existed load as rules 1. Rules 2: a shape whose FLOPs set its speed-of-light bound
# is suspicious only 25 % below it, not 5 % (sol.COMPUTE_TOLERANCE). Rules 3: under `default`, autotuners
# time their configs with do_bench(warmup=5, rep=20) instead of Triton's 25/100 (Preset.tune_rep). Rules 4:
# they time them with the GPU-ahead wait after each flush too (worker/timing.py, `tune_with`). Rules 5: under
# `default`, each call runs on one of 32 copies of the inputs, and in tasks under 0.2 ms in all, shapes under
# 0.1 ms are timed by the calls' spans (Preset.placements, Preset.timer, Preset.span_task_ms). Rules 6: under
# `default`, a measurement is the mean of its middle 80 % of iterations, not their median (Preset.stat). Rules 7:
# a candidate's outputs must be plain tensors, its kernels must end in the timed region, and its Triton kernels
# must take the task's TRITON_SHARE of its GPU kernel time (worker/audit.py). Rules 8: a shape is measured again
# when its candidate comes out over `recheck` times its usual time too, not only its reference; a side with no
# usual time on a shape and timer (a candidate's first timing, a task's first under spans) is measured alone once
# first (evaluation/interleave.py). Rules 9: under `default`, shapes under 0.1 ms are timed by their spans in every
# task, not only in tasks under 0.2 ms in all (Preset.span_task_ms). Rules 10: under `default`, a shape timed by
# spans is measured in 2 ABBA rounds, not 1, and in 4 where the speedup's standard error from the iterations is
# over 0.5 % after 2 (Preset.span_rounds, span_rounds_max, span_se). Rules 11: a span leaves out the launch gaps of
# up to 3 µs between a call's kernels (worker/timing.py, `busy_us`), and the standard error that asks for more
# rounds sees the rounds' spread too (interleave.speedup_se).
RULES = 11

# The note of an evaluation that skipped Nsight Compute by choice (`Evaluator.evaluate(profile=False)`).
NCU_SKIPPED = "ncu: not run (the search's policy and proposer do not use φ)"
# An evaluation that ran out of GPU memory while other evaluations' steps shared the GPU is evaluated again,
# its checks with the GPU alone (Evaluator.evaluate); its note:
ALONE_NOTE = ("out of GPU memory beside other evaluations' steps ({first}): evaluated again, its checks with "
              "the GPU alone ({closed} idle references of other tasks closed first)")
_ALONE_NOTE_HEAD = "out of GPU memory beside other evaluations' steps ("  # what ALONE_NOTE starts with
_OUT_OF_MEMORY = re.compile(r"out of memory|OutOfMemoryError")


def evaluated_again_alone(result) -> bool:
    """The evaluation's verdict is its second attempt, with the GPU alone (EvalResult.retried_alone)."""
    return result.retried_alone


def out_of_memory(error: str) -> bool:
    """The error says a worker ran out of GPU memory (torch's OutOfMemoryError, Triton's launch error)."""
    return bool(error) and _OUT_OF_MEMORY.search(error) is not None

PRESETS = {
    # The paper's protocol: do_bench, 100 warm-up and 1000 timed iterations, the mean.
    "paper": Preset("paper", warmup=100, rep=1000, unit="iters", stat="mean", rounds=1, ahead_us=150.0,
                    recheck=1.2, retries=2),
    # Cheaper: fewer iterations, capped at 40 ms a measurement, the reference and the
    # candidate measured once each per shape, who goes first alternating from shape to shape. (Two ABBA
    # rounds agreed to a median 0.14 % on an idle H100 once the GPU was kept ahead: BENCHMARKS.md, timing
    # repeatability.)
    # Autotuners time each config for 5 + 20 ms instead of Triton's 25 + 100: in bench 2 (H200) the tune
    # calls of an autotuned candidate, the GPU to itself, took a median 14.1 s, of which do_bench's own
    # 125 ms per config and shape came to at least 11.2 s (2.2 s at 25 ms).
    # Shapes under 0.1 ms are timed by the calls' spans on the GPU (CUPTI), in every task; and each call runs
    # on one of 32 copies of the inputs in pages of their own. By events, the launch's part of a µs kernel's
    # time moves from one process to the next, and the kernel's own time with where its inputs lie
    # (BENCHMARKS.md, timing repeatability: l2_norm_triton1's CV of 5 evaluations 1.0-2.5 % by events, 0.3-0.6 %
    # so). That part is small in a long task's runtime-weighted speedup, but not in its per-shape figures,
    # which the hand-back's per-shape dispatch and the user's table read (BENCHMARKS.md, noise floor). Every
    # candidate starts CUPTI anyway (the audit's split of its kernels), so a short shape's spans cost some 12 ms
    # a measurement more.
    # A measurement is the mean of its middle 80 % of iterations (`trimmed`): where a shape's iterations fall in
    # two groups, the median jumps between them from one measurement to the next (BENCHMARKS.md, timing
    # repeatability:
    # cosine_compute's CV of 5 evaluations 1.16 % by the median, 0.62 % so, on one H200 in one session; all
    # 29 tasks at or below 0.62 %).
    "default": Preset("default", warmup=10, rep=100, unit="iters", stat="trimmed", rounds=1, max_ms=40.0,
                      ahead_us=150.0, recheck=1.2, retries=2, tune_warmup=5.0, tune_rep=20.0,
                      placements=32, timer="span", span_rounds=2, span_rounds_max=4, span_se=0.005),
    # What TritonBench, GEAK-eval and the KernelBand release do: do_bench(warmup=100 ms, rep=1000 ms).
    "tritonbench": Preset("tritonbench", warmup=100, rep=1000, unit="ms", stat="median", rounds=1),
}


@dataclass
class ShapeResult:
    index: int
    label: str
    held_out: bool
    correct: bool | None = None
    max_abs_err: float | None = None
    max_rel_err: float | None = None
    ref_ms: float | None = None
    cand_ms: float | None = None
    ref_cv: float | None = None  # coefficient of variation over the timed iterations
    cand_cv: float | None = None
    # each measurement's mean or median (ms), in the order taken: ABBA over the rounds, `timed_first` first
    ref_rounds: list[float] = field(default_factory=list)
    cand_rounds: list[float] = field(default_factory=list)
    timed_first: str = ""  # "ref" | "cand"
    speedup: float | None = None
    gbps: float | None = None
    tflops: float | None = None
    # The speed-of-light bound: max(bytes / bandwidth, flops / peak, launch floor) (evaluation/sol.py)
    bound_ms: float | None = None
    sol_fraction: float | None = None  # bound_ms / cand_ms: 1.0 is the speed of light
    # max(bytes / bandwidth, flops / peak) alone: what the "faster than the bound" check compares with (the
    # floor is an estimate of the launch, no limit a kernel cannot beat)
    data_bound_ms: float | None = None
    sol_margin: float | None = None  # how far below data_bound_ms a time may come before the check (sol.tolerance)
    moved_bytes: float | None = None  # the bytes the bound counts (sol.bound_bytes)
    # The task's torch reference timed on this shape under the same preset (evaluation/baselines.py): as
    # written (eager) and through torch.compile(mode="max-autotune-no-cudagraphs"); the reason where not timed
    eager_ms: float | None = None
    compiled_ms: float | None = None
    eager_skipped: str = ""
    compiled_skipped: str = ""
    note: str = ""
    retimed: int = 0  # measured again this many times: the reference came out off its usual time
    ahead_us: float | None = None  # the longest GPU-ahead wait either side's measurement used
    host_sync: str = ""  # "ref", "cand" or "ref,cand": whose call waits for the GPU (its time includes the CPU's)
    placements: int = 1  # copies of the inputs the timing cycled through (Preset.placements), the fewer side's
    timer: str = "events"  # "events", "span" (Preset.timer), or "mixed": one side's spans could not be read, so
    # both sides were timed again by events
    # The wall time per call of back-to-back calls, synchronised once, beside the device times above: what an eager
    # program pays per call, the host's work included (worker/timing.py, `call_time`); ms
    call_ms: float | None = None
    ref_call_ms: float | None = None


@dataclass
class Features:
    """rho(k) clusters candidates; phi(k) feeds the strategy heads. None means measured by nothing."""

    rho: dict[str, float | None] = field(default_factory=dict)
    phi: dict[str, float | None] = field(default_factory=dict)
    sources: dict[str, str] = field(default_factory=dict)  # feature -> "ncu" | "compiler" | "timing" | ...
    compile: dict = field(default_factory=dict)  # registers, spills, shared memory, launch configuration
    # ncu's profile of the representative shape: the kernels it read (Triton's and any other the call
    # launched; phi weights them by duration) and their summed duration in ns; empty without ncu
    profile: dict = field(default_factory=dict)


@dataclass
class TunedConfig:
    """One configuration of a `triton.autotune` kernel: its constexprs and launch options, and the time the
    autotuner measured for it where it keeps one (ms; None for the chosen config's own record)."""

    kwargs: dict = field(default_factory=dict)
    num_warps: int | None = None
    num_stages: int | None = None
    num_ctas: int | None = None
    maxnreg: int | None = None
    pre_hook: bool = False  # the config runs a hook of its own before each launch
    ms: float | None = None

    @classmethod
    def from_dict(cls, d: dict) -> TunedConfig:
        return cls(**{k: v for k, v in d.items() if k in cls.__dataclass_fields__})


@dataclass
class TunedChoice:
    """The configuration an autotuned kernel chose for one key it met (worker/tuners.py)."""

    kernel: str  # the module's name for the autotuned kernel
    key: list  # the autotuner's key: the `key=[...]` arguments' values, then the tensors' dtypes
    chosen: TunedConfig
    exact: bool = True  # every key element is a plain value (a number, a string), so code can say it
    shape: str = ""  # the label of the shape whose call met the key first
    held_out: bool = False
    timings: list[TunedConfig] = field(default_factory=list)  # each config tried for this key, with its time

    @classmethod
    def from_dict(cls, d: dict) -> TunedChoice:
        d = {k: v for k, v in d.items() if k in cls.__dataclass_fields__}
        d["chosen"] = TunedConfig.from_dict(d.get("chosen", {}))
        d["timings"] = [TunedConfig.from_dict(t) for t in d.get("timings", [])]
        return cls(**d)


RHO_KEYS = ("log_time", "log_memory_footprint", "arithmetic_intensity", "block_dim_x", "block_dim_y",
            "achieved_occupancy")
PHI_KEYS = ("l2_hit_rate", "dram_bw_pct", "sm_throughput_pct", "warp_execution_efficiency", "achieved_occupancy",
            "registers_per_thread", "shared_bank_conflicts", "global_load_coalescing_pct", "tensor_core_util_pct")


@dataclass
class EvalResult:
    task: str
    outcome: Outcome
    detail: str = ""  # one line: what happened
    error: str = ""  # full error text, kept whatever the outcome
    stage: str = ""  # the stage the outcome was decided in
    speedup: float | None = None  # runtime-weighted: sum(ref ms) / sum(candidate ms), search shapes
    held_out_speedup: float | None = None
    # the same on the wall time per call (ShapeResult.call_ms): sum(ref_call_ms) / sum(call_ms)
    call_speedup: float | None = None
    held_out_call_speedup: float | None = None
    shapes: list[ShapeResult] = field(default_factory=list)
    features: Features = field(default_factory=Features)
    checks: list[str] = field(default_factory=list)  # anti-cheat checks that fired
    preset: str = "default"
    interpreter: bool = False  # timings are Triton-interpreter timings, not GPU timings
    device: str = ""
    sandbox: str = ""
    seed: int = 0
    seconds: dict[str, float] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)
    # the share of one call's GPU kernel time spent in the module's Triton kernels (copies and fills left out),
    # on the representative shape; None in the interpreter, which runs no GPU kernels (worker/audit.py)
    triton_share: float | None = None
    rules: int = RULES  # the evaluator's rules it was judged by
    # Nsight Compute skipped by choice (`Evaluator.evaluate(profile=False)`): φ is the compiler's and the
    # timing's, and a later search that reads φ evaluates the candidate again. Its note: NCU_SKIPPED.
    ncu_skipped: bool = False
    # The verdict is a second attempt with the GPU alone, after running out of memory beside other
    # evaluations' steps (`Evaluator.evaluate`). Its note: ALONE_NOTE.
    retried_alone: bool = False
    # What the candidate's autotuners chose, key by key, on the shapes evaluated (empty without triton.autotune)
    tuned: list[TunedChoice] = field(default_factory=list)
    # Runtime-weighted like `speedup`: sum(baseline ms) / sum(candidate ms) over the timed search shapes, each
    # None (with the reason) where a timed search shape lacks that baseline (evaluation/baselines.py)
    speedup_vs_eager: float | None = None
    speedup_vs_compile: float | None = None
    vs_eager_skipped: str = ""
    vs_compile_skipped: str = ""
    # The median over the timed search shapes of `sol_fraction`, and over those that move at least
    # sol.LARGE_BYTES (None: no such shape, or no calibration)
    sol_median: float | None = None
    sol_median_large: float | None = None

    @property
    def ok(self) -> bool:
        return self.outcome == Outcome.OK

    def to_dict(self) -> dict:
        d = asdict(self)
        d["outcome"] = self.outcome.value
        return d

    @classmethod
    def from_dict(cls, d: dict) -> EvalResult:
        d = dict(d)
        d["outcome"] = Outcome(d["outcome"])
        d["shapes"] = [ShapeResult(**{k: v for k, v in s.items() if k in ShapeResult.__dataclass_fields__})
                       for s in d.get("shapes", [])]
        d["features"] = Features(**d.get("features", {}))
        d["tuned"] = [TunedChoice.from_dict(t) for t in d.get("tuned", [])]  # none in rows stored before it
        d.setdefault("rules", 1)
        # rows stored before these flags were fields say them in their notes only
        notes = d.get("notes", [])
        d.setdefault("ncu_skipped", NCU_SKIPPED in notes)
        d.setdefault("retried_alone", any(n.startswith(_ALONE_NOTE_HEAD) for n in notes))
        return cls(**{k: v for k, v in d.items() if k in cls.__dataclass_fields__})
