"""What `kernelband capture`'s hooks do per launch, on the compiled-kernel path (tests/compiled_launch.py reaches
Triton's own hook objects without a GPU): a launch of a seen signature issues no torch op at all, and a new
signature's statistics, computed at the end, are those of its values at the launch."""

from __future__ import annotations

import math
from pathlib import Path

import compiled_launch
import pytest
import torch
import triton
from torch.utils._python_dispatch import TorchDispatchMode

from kernelband.capture import describe
from kernelband.capture.record import Recorder, WallTimer

TESTS = str(Path(__file__).parent)


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
