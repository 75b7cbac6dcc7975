"""What `kernelband capture`'s hooks do per launch, on the compiled-kernel path (tests/compiled_launch.py reaches
Triton's own hook objects without a GPU): device times come from CUDA events read back without waiting (a
stand-in for torch.cuda counts the waits), a launch never reads a tensor's values back to the host, a launch of
a seen signature issues no torch op at all, and a new signature's statistics, computed at the end, are those of
its values at the launch."""

from __future__ import annotations

import collections
import math
from pathlib import Path

import compiled_launch
import pytest
import torch
import triton
from torch.utils._python_dispatch import TorchDispatchMode

from kernelband.capture import describe, sources
from kernelband.capture.record import CudaTimer, Recorder, WallTimer

TESTS = str(Path(__file__).parent)


class FakeCuda:
    """torch.cuda as CudaTimer uses it, with a device clock the test moves: an event records the clock's time.
    `passed` says whether the device has reached the events recorded; reading a time before it has raises,
    as cudaEventElapsedTime does."""

    def __init__(self, passed: bool):
        self.passed = passed
        self.synced = False
        self.clock = 0.0
        self.capturing = False
        self.calls: collections.Counter = collections.Counter()
        cuda = self

        class Event:
            def __init__(self, enable_timing: bool = False):
                assert enable_timing
                self.at: float | None = None

            def record(self, stream=None) -> None:
                cuda.calls["record"] += 1
                self.at = cuda.clock

            def query(self) -> bool:
                cuda.calls["query"] += 1
                return cuda.passed or cuda.synced

            def elapsed_time(self, end) -> float:
                cuda.calls["elapsed_time"] += 1
                if not (cuda.passed or cuda.synced):
                    raise RuntimeError("CUDA error: device not ready")
                return end.at - self.at

        class Stream:
            def __init__(self, handle: int):
                self.cuda_stream = handle

        self.Event = Event
        self.ExternalStream = Stream
        self._current = Stream(0)

    def synchronize(self) -> None:
        self.calls["synchronize"] += 1
        self.synced = True

    def current_device(self) -> int:
        return 0

    def current_stream(self):
        self.calls["current_stream"] += 1
        return self._current

    def is_current_stream_capturing(self) -> bool:
        return self.capturing


def _durations(recorder_timer_cuda: FakeCuda, ms_of) -> tuple:
    """Exit hooks that move the device clock by `ms_of(launch metadata)` before the recorder's end event: added
    after the recorder's, they run before it (the exit chain runs in reverse)."""
    times: list[float] = []

    def run_kernel(metadata) -> None:
        ms = ms_of(metadata.get())
        times.append(ms)
        recorder_timer_cuda.clock += ms

    return run_kernel, times


def _run_with_cuda(tmp_path: Path, cuda: FakeCuda, calls: list, batch: int, monkeypatch) -> tuple[Recorder, list]:
    monkeypatch.setattr(CudaTimer, "BATCH", batch)
    recorder = Recorder(tmp_path, 1 << 20, [], [TESTS], interpreter=False, timer=CudaTimer(cuda))
    runtime = triton.knobs.runtime
    run_kernel, times = _durations(cuda, lambda data: data["kernelband_capture"][3]["n"] / 1000)
    recorder.install()
    runtime.launch_exit_hook.add(run_kernel)
    try:
        for x in calls:
            compiled_launch.scale(x, 2.0)
    finally:
        runtime.launch_exit_hook.remove(run_kernel)
        recorder.uninstall()
    return recorder, times


@pytest.mark.parametrize("passed", [False, True], ids=["device-behind", "device-done"])
def test_device_times_come_from_events_read_without_waiting_and_every_launch_is_timed(tmp_path: Path, monkeypatch,
                                                                                       passed: bool):
    cuda = FakeCuda(passed)
    sizes = [1000, 1000, 3000, 1000, 3000, 2000, 1000, 1000, 2000, 3000]
    recorder, times = _run_with_cuda(tmp_path, cuda, [torch.randn(n) for n in sizes], 4, monkeypatch)
    # while the program runs: two events per launch, no wait, and a time read only where the device is done
    assert cuda.calls["synchronize"] == 0 and cuda.calls["record"] == 2 * len(sizes)
    assert cuda.calls["elapsed_time"] == (8 if passed else 0)  # two batches of four read back; the rest pending
    assert cuda.calls["current_stream"] == 1  # the stream's object is made once
    entries = recorder.finish()
    assert cuda.calls["synchronize"] == 1 and cuda.calls["elapsed_time"] == len(sizes)  # one wait, at the end
    assert recorder.errors == [] and recorder.launches == len(sizes)
    (entry,) = entries
    (kernel,) = entry.kernels
    assert kernel.time_ms == pytest.approx(sum(times)) and entry.time_ms == pytest.approx(sum(times))
    by_size = collections.defaultdict(float)
    for n, ms in zip(sizes, times):
        by_size[n] += ms
    assert {c.args[0].tensor.shape[0]: c.time_ms for c in entry.cases} == pytest.approx(by_size)
    assert {c.grid[0]: c.time_ms for c in kernel.cases} == pytest.approx(
        {math.ceil(n / 128): ms for n, ms in by_size.items()})


def test_a_launch_into_a_cuda_graph_being_captured_records_no_event(tmp_path: Path, monkeypatch):
    cuda = FakeCuda(passed=True)
    cuda.capturing = True
    recorder, _ = _run_with_cuda(tmp_path, cuda, [torch.randn(100)] * 3, 4, monkeypatch)
    assert recorder.graph_launches == 3 and cuda.calls["record"] == 0 and recorder.finish() == []


class _Ops(TorchDispatchMode):
    def __init__(self):
        super().__init__()
        self.names: list[str] = []

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        self.names.append(func.overloadpacket.__name__)
        return func(*args, **(kwargs or {}))


def _program(device: str, scaler: compiled_launch.Scaler) -> None:
    """Three shapes, each called three times: an entry of one kernel, an entry with integer and bool tensors,
    and a method (launch mode)."""
    table = torch.randn(50, 16, device=device)
    for step in range(9):
        n = (100, 300, 200)[step % 3]
        x = torch.randn(n, device=device)
        compiled_launch.scale(x, 0.5)
        ids = torch.randint(0, 50, (n // 100, 4), device=device)
        compiled_launch.lookup(ids, table, ids % 2 == 0)
        scaler.apply(x.t() if x.dim() > 1 else x)


def test_a_launch_issues_no_torch_op_for_a_seen_signature_and_only_copies_for_a_new_one(tmp_path: Path):
    """The hooks' own torch ops, launch by launch: none where the signature is seen; for a new signature the
    copies its statistics and kept values need (and an integer tensor's range where it is not kept), no
    statistic. On a GPU each op is a launch of its own, and a kind never run before loads its kernel."""
    ops = _Ops()
    with ops:
        torch.ones(1).add(1)  # the dispatch mode's first use imports much of torch: not in a hook
    recorder = Recorder(tmp_path, 1000, [], [TESTS], interpreter=False, timer=WallTimer())
    runtime = triton.knobs.runtime
    launches: list = []
    state: dict = {}

    # on just before the recorder's enter and exit hooks, off just after (the exit chain runs in reverse): the
    # kernel's own work, between them, is not counted
    def on(metadata) -> None:
        ops.__enter__()

    def off(metadata) -> None:
        ops.__exit__(None, None, None)

    def entered(metadata) -> None:
        state.update(cases=recorder._cases, ops=len(ops.names))
        on(metadata)

    def exited(metadata) -> None:
        off(metadata)
        launches.append((recorder._cases != state["cases"], ops.names[state["ops"]:]))

    runtime.launch_enter_hook.add(entered)
    runtime.launch_exit_hook.add(exited)
    recorder.install()
    runtime.launch_enter_hook.add(off)
    runtime.launch_exit_hook.add(on)
    try:
        _program("cpu", compiled_launch.Scaler(3.0))
    finally:
        recorder.uninstall()
        for chain in (runtime.launch_enter_hook, runtime.launch_exit_hook):
            for hook in (entered, exited, on, off):
                chain.remove(hook)
    assert recorder.errors == [] and len(launches) == 27
    new = [names for is_new, names in launches if is_new]
    assert len(new) == 9  # three entries, three shapes
    assert [names for is_new, names in launches if not is_new] == [[]] * 18
    issued = {n for names in new for n in names}
    assert "clone" in issued  # the kept values and the samples statistics are computed from at the end
    assert issued <= {"clone", "as_strided", "aminmax", "slice", "view", "detach", "_to_copy", "view_as_real",
                      "alias"}, issued
    assert recorder.new_launches == 9 and 0 < recorder.hooks_new_s < recorder.hooks_s


def test_a_launch_never_reads_tensor_values_back_to_the_host(tmp_path: Path):
    """On "meta" tensors every read of values on the host (.item(), .tolist(), .cpu(), printing) raises, as on
    a GPU it would wait for the device: the hooks meet no error on them."""
    recorder = Recorder(tmp_path, 1 << 20, [], [TESTS], interpreter=False, timer=WallTimer())
    recorder.install()
    try:
        _program("meta", compiled_launch.Scaler(3.0))
    finally:
        recorder.uninstall()
    assert recorder.errors == [] and recorder.launches == 27 and recorder.new_launches == 9
    with pytest.raises((RuntimeError, NotImplementedError)):
        recorder.finish()  # the end reads the statistics back: there, not before


def _expected(values: torch.Tensor, sample: int) -> tuple[float, float]:
    v = torch.view_as_real(values) if values.is_complex() else values
    if v.numel() > sample:
        v = v.contiguous().reshape(-1)[:: v.numel() // sample]
    x = v.double().reshape(-1)
    x = x[torch.isfinite(x)]
    return x.mean().item(), x.std(unbiased=False).item()


@pytest.mark.parametrize("max_bytes", [0, 1 << 20], ids=["not-kept", "kept"])
def test_statistics_computed_at_the_end_are_those_of_the_values_at_the_launch(tmp_path: Path, monkeypatch,
                                                                             max_bytes: int):
    """The program overwrites its tensors after each launch; a sampled tensor (more elements than SAMPLE, not
    contiguous) is read as it was, and copies waiting for their statistics are reduced when they pass
    PENDING_BYTES, with the same result."""
    monkeypatch.setattr(describe, "SAMPLE", 500)
    recorder = Recorder(tmp_path, max_bytes, [], [TESTS], interpreter=False, timer=WallTimer())
    recorder.keeper.pending_bytes = 3000  # a few samples at a time
    torch.manual_seed(0)
    xs = [torch.randn(n) * (1 + n / 100) + n / 1000 for n in (400, 900, 1700)]
    xs.append(torch.randn(40, 50).t())  # 2000 elements, not contiguous: sampled from its row-major order
    xs[0][3] = math.inf  # not finite: left out
    expected = [_expected(x, 500) for x in xs]
    table = torch.randn(50, 16)
    expected_table = _expected(table, 500)
    # more signatures than an entry keeps integer tensors of (INT_CASES): the later ones have their range
    # reduced at the launch
    lookups = [torch.randint(rows % 9, 50 - rows % 9, (rows, 4)) for rows in range(1, describe.INT_CASES + 3)]
    masks = [ids % 2 == 0 for ids in lookups]
    expected_ranges = [(ids.min().item(), ids.max().item()) for ids in lookups]
    expected_masks = [(int(m.min()), int(m.max())) for m in masks]
    recorder.install()
    try:
        for x in xs:
            compiled_launch.scale(x, 2.0)
            x.mul_(-7).add_(100)  # the program writes into its tensors after the launch
        for ids, mask in zip(lookups, masks):
            compiled_launch.lookup(ids, table, mask)
            ids.fill_(99), mask.fill_(False)
        table.fill_(5)
    finally:
        recorder.uninstall()
    entries = {e.name: e for e in recorder.finish()}
    assert recorder.errors == []
    seen = [c.args[0].tensor for c in entries["scale"].cases]
    assert [t.saved for t in seen] == [max_bytes > 0] * 4
    assert [(t.mean, t.std) for t in seen] == [pytest.approx(e, rel=1e-5) for e in expected]
    args = [{a.name: a.tensor for a in c.args} for c in entries["lookup"].cases]
    assert [a["ids"].saved for a in args] == [True] * describe.INT_CASES + [False] * 2
    assert [(a["ids"].low, a["ids"].high) for a in args] == expected_ranges
    assert [(a["mask"].low, a["mask"].high) for a in args] == expected_masks
    assert (args[0]["table"].mean, args[0]["table"].std) == pytest.approx(expected_table, rel=1e-5)


def test_a_wrapped_kernel_reads_its_source_files_at_the_end_not_in_a_launch(tmp_path: Path, monkeypatch):
    read: list[str] = []
    for name in ("read", "extracted_module", "launch_path"):
        original = getattr(sources, name)
        monkeypatch.setattr(sources, name, lambda *a, _o=original, _n=name: read.append(_n) or _o(*a))
    recorder = Recorder(tmp_path, 1 << 20, [], [TESTS], interpreter=False, timer=WallTimer())
    recorder.install()
    try:
        scaler = compiled_launch.Scaler(3.0)
        for n in (100, 200, 100):
            scaler.apply(torch.randn(n))
    finally:
        recorder.uninstall()
    assert read == [] and recorder.launches == 3
    (entry,) = recorder.finish()
    assert entry.mode == "launch" and "Scaler.apply is not a function at the top level" in entry.why
    (kernel,) = entry.kernels
    assert read and kernel.launch_as == "kernel" and "def scale_kernel" in kernel.module_source
    assert [c.calls for c in kernel.cases] == [2, 1] and all(a.tensor.saved for a in kernel.cases[0].args[:1])
