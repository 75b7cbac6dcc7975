"""What a run makes faster (`--objective device|call`), and what its summary says of both measures and of the
held-out shapes: a search of stand-ins whose two measures disagree."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace

import pytest

from kernelband.evaluation.records import EvalResult, Outcome, ShapeResult
from kernelband.proposers.base import ProposerBase
from kernelband.search.core import Proposal, Strategy, source_hash
from kernelband.search.loop import RunConfig
from kernelband.search.session import open_search
from kernelband.store import Store
from kernelband.tasks import load_task

STRATEGIES = [Strategy("tile", "tile it", "SM"), Strategy("pipe", "pipeline it", "DRAM")]
# Two children of k0: FAST_KERNEL is faster on the GPU but pays more per call on the host; LEAN_CALL the reverse.
MEASURES = {"FAST_KERNEL": (2.0, 0.8), "LEAN_CALL": (1.2, 1.5)}


def _shape(label: str, held_out: bool, device: float, call: float) -> ShapeResult:
    return ShapeResult(0, label, held_out, correct=True, ref_ms=1.0, cand_ms=1.0 / device, speedup=device,
                       ref_call_ms=1.0, call_ms=1.0 / call)


class MeasuredEvaluator:
    """Every kernel correct; a child's two speedups are its marker's MEASURES, k0's 1.0 on both; the held-out
    shape of a final check as `held_out` says."""

    def __init__(self, held_out: dict[str, float] | None = None, interpreter: bool = False):
        self.held_out = held_out or {}
        self.interpreter = interpreter

    def evaluate(self, task, source, preset=None, which="search", seed=None, profile=True) -> EvalResult:
        device, call = next((m for name, m in MEASURES.items() if name in source), (1.0, 1.0))
        shapes = [_shape("n=1", False, device, call)]
        if which == "all":
            slow = next((v for name, v in self.held_out.items() if name in source), device)
            shapes.append(_shape("n=7 (held out)", True, slow, slow))
        return EvalResult(task=task.ref, outcome=Outcome.OK, speedup=device, call_speedup=call,
                          held_out_speedup=shapes[-1].speedup if which == "all" else None,
                          held_out_call_speedup=shapes[-1].speedup if which == "all" else None,
                          shapes=shapes, device="stand-in", interpreter=self.interpreter)

    def info(self, task):
        return SimpleNamespace(entry="add", shapes=())


class BothChildren(ProposerBase):
    name = "scripted"

    def propose(self, parent, strategy, context):
        if parent.id != 0:
            return Proposal(source=None, error="only k0 has children here")
        for marker in MEASURES:
            source = parent.source + f"\n{marker} = 1\n"
            if source_hash(source) not in context.seen:
                return Proposal(source=source, rationale=marker)
        return Proposal(source=None, error="both made")


def _run(tmp_path: Path, objective: str, evaluator=None):
    store = Store(tmp_path / f"{objective}.db")
    search = open_search(load_task("examples:vector_add"), evaluator or MeasuredEvaluator(), store, "greedy",
                         BothChildren(), 0, RunConfig(iterations=1, q=2, finalists=3, objective=objective),
                         strategies=STRATEGIES, knowledge="off")
    return search.run(), store


def _marker(store: Store, summary) -> str:
    source = next(c["source"] for c in store.candidates(summary.run_id) if c["id"] == summary.best_candidate)
    return next(name for name in MEASURES if name in source)


def test_the_objective_chooses_which_measure_the_search_and_the_verdict_read(tmp_path: Path):
    device, store = _run(tmp_path, "device")
    assert _marker(store, device) == "FAST_KERNEL"
    assert (device.best_speedup, device.best_call_speedup) == (2.0, 0.8)
    call, store = _run(tmp_path, "call")
    assert _marker(store, call) == "LEAN_CALL"  # the child that pays less per call wins there
    assert call.objective == "call" and store.run(call.run_id).config["objective"] == "call"
    # the summary holds both measures whatever the objective, the device time's under the old names
    assert (call.best_speedup, call.best_call_speedup) == (1.2, 1.5)
    assert (call.confirmed_speedup, call.confirmed_call_speedup) == (1.2, 1.5)
    # the per-iteration curve and the finalists are on the objective
    assert call.per_iteration[-1]["best_speedup"] == 1.5
    assert {f["confirmed_call_speedup"] for f in call.finalists} == {0.8, 1.5}


def test_the_summary_prints_both_measures_and_names_the_objective(tmp_path: Path):
    from kernelband.cli import app as app_module
    from kernelband.cli.optimize import _print_summary

    summary, store = _run(tmp_path, "call")
    with app_module.out.capture() as captured:
        _print_summary(summary, store)
    text = captured.get()
    assert "1.200x over the starting kernel by device time, 1.500x per call" in text
    assert "per call re-measured 1.500x" in text and "objective: the wall time per call" in text
    summary, store = _run(tmp_path, "device")
    with app_module.out.capture() as captured:
        _print_summary(summary, store)
    text = captured.get()
    assert "2.000x over the starting kernel by device time, 0.800x per call" in text
    assert "objective:" not in text


def test_a_held_out_shape_slower_than_the_starting_kernel_is_warned_of_in_one_line(tmp_path: Path):
    from kernelband.cli import app as app_module
    from kernelband.cli.optimize import _print_summary

    summary, store = _run(tmp_path, "device", MeasuredEvaluator(held_out={"FAST_KERNEL": 0.5}))
    assert summary.held_out_slower == ["n=7 (held out) (0.50x)"]
    with app_module.out.capture() as captured:
        _print_summary(summary, store)
    warned = [line for line in captured.get().splitlines() if "warning" in line]
    assert warned == ["warning: the kernel handed back is slower than the starting kernel on held-out shapes: "
                      "n=7 (held out) (0.50x)"]
    # within the noise floor, or on interpreter timings: no warning
    summary, _ = _run(tmp_path, "device", MeasuredEvaluator(held_out={"FAST_KERNEL": 0.995}))
    assert summary.held_out_slower == []
    summary, _ = _run(tmp_path, "device", MeasuredEvaluator(held_out={"FAST_KERNEL": 0.5}, interpreter=True))
    assert summary.held_out_slower == []


@pytest.mark.parametrize("objective", ["fast", ""])
def test_an_unknown_objective_is_a_user_error(objective):
    from kernelband.api import check_run_config
    from kernelband.errors import UserError

    with pytest.raises(UserError, match="--objective is device or call"):
        check_run_config(RunConfig(objective=objective))
