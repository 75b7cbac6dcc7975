"""What a run hands back: the module it chose, with its autotuners' choices pinned where that can be done and
checked, and the files the user gets (best.py, best.autotune.py, best.diff).

A module with `triton.autotune` in it, whoever wrote it, is pinned (pinning.py): the choices its autotuners
made during the evaluations are written into it. The pinned module is then evaluated like any candidate, in a
fresh worker, on every search shape and every held-out shape: its figures are the ones the run reports. The
autotuned module goes back instead, with a typed reason, when the pinning cannot handle it, when the run
checks no finalist (the pinned module would go back unchecked), when the pinned module fails, when a key met
on those shapes missed its table (the fallback tuner chose: the table does not say what the launch computes),
or when it is slower than the autotuned module by more than the run's noise floor.
"""

from __future__ import annotations

import difflib
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from enum import Enum
from pathlib import Path

from kernelband.evaluation.records import EvalResult, TunedChoice
from kernelband.search.pinning import pin

# The least slowdown of the pinned module against the autotuned one that counts as slower, whatever the run's
# noise floor says (k0 timed against itself, which can come out at 1.000).
MIN_SLOWER = 0.01
PINNED_NAME, AUTOTUNED_NAME, DIFF_NAME = "best.py", "best.autotune.py", "best.diff"


class Form(str, Enum):
    AS_IS = "as_is"  # no autotuner in the module, or the starting kernel: handed back as it is
    PINNED = "pinned"  # the autotuners' choices pinned (best.py), the autotuned module beside it (best.autotune.py)
    AUTOTUNED = "autotuned"  # the autotuned module, not pinned: `reason` says why


class NotPinned(str, Enum):
    UNSUPPORTED = "unsupported"  # the pinning cannot handle the module (`detail` says what)
    NOT_CHECKED = "not_checked"  # the run checks no finalist: a pinned module would go back unchecked
    FAILED = "failed"  # the pinned module's evaluation was not ok
    TABLE_MISSED = "table_missed"  # a key met on the evaluated shapes went to the fallback tuner
    SLOWER = "slower"  # slower than the autotuned module by more than the noise floor


@dataclass
class Handback:
    form: Form
    reason: NotPinned | None = None
    detail: str = ""  # one line: what was pinned, or why not
    kernels: list[str] = field(default_factory=list)  # the kernels pinned
    keys: int = 0  # the keys in their tables
    autotuned_speedup: float | None = None  # the autotuned module re-measured (search shapes)
    pinned_speedup: float | None = None  # the pinned module's evaluation (search shapes)
    pinned_held_out_speedup: float | None = None
    # per shape of the evaluation whose figures the run reports: {"label", "held_out", "ms" (the handed-back
    # module's time), "timer", "placements" (how it was timed)}, the figures a user's process is checked against
    # (scripts/gpu/handback_repeat.py)
    shapes: list[dict] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)

    def to_dict(self) -> dict:
        d = asdict(self)
        d["form"] = self.form.value
        d["reason"] = self.reason.value if self.reason is not None else None
        return d


@dataclass
class Chosen:
    """The module handed back, the record of how, and the evaluation whose figures the run reports."""

    source: str
    handback: Handback
    check: EvalResult | None
    autotuned: str | None = None  # the autotuned module, when the pinned one goes back


def autotuned(source: str) -> bool:
    return "autotune" in source


def choices(*results: EvalResult | None) -> list[TunedChoice]:
    """The recorded choices of the evaluations, the first record of each (kernel, key) kept."""
    seen, found = set(), []
    for result in results:
        for choice in (result.tuned if result is not None else []):
            mark = (choice.kernel, repr(choice.key))
            if mark not in seen:
                seen.add(mark)
                found.append(choice)
    return found


def shape_times(result: EvalResult | None) -> list[dict]:
    if result is None:
        return []
    return [{"label": s.label, "held_out": s.held_out, "ms": s.cand_ms, "timer": s.timer, "placements": s.placements}
            for s in result.shapes]


def hand_back(source: str, search: EvalResult | None, check: EvalResult | None,
              evaluate: Callable[[str], EvalResult], noise: float | None, starting: bool = False) -> Chosen:
    """The module to hand back for the chosen candidate `source`: its search evaluation, its finalist re-check
    (None when the run made none) and `evaluate`, which evaluates a module on every search and held-out shape
    in a fresh worker. `noise`: the run's noise floor (k0 timed against itself)."""
    if starting or not autotuned(source):
        return Chosen(source, Handback(Form.AS_IS, shapes=shape_times(check)), check)
    as_searched = Handback(Form.AUTOTUNED, autotuned_speedup=check.speedup if check is not None else None,
                           shapes=shape_times(check))
    pinned = pin(source, choices(check, search))
    if pinned.source is None:
        return _autotuned(source, check, as_searched, NotPinned.UNSUPPORTED, pinned.reason)
    as_searched.notes = pinned.notes
    if check is None or not check.ok:
        return _autotuned(source, check, as_searched, NotPinned.NOT_CHECKED,
                          "the run re-checks no finalist: the pinned module would go back unchecked")
    result = evaluate(pinned.source)
    record = Handback(Form.PINNED, kernels=pinned.kernels, keys=pinned.keys, autotuned_speedup=check.speedup,
                      pinned_speedup=result.speedup, pinned_held_out_speedup=result.held_out_speedup,
                      shapes=shape_times(result), notes=pinned.notes,
                      detail=f"{pinned.keys} keys of {', '.join(pinned.kernels)} pinned")
    as_searched.pinned_speedup, as_searched.pinned_held_out_speedup = result.speedup, result.held_out_speedup
    if not result.ok:
        return _autotuned(source, check, as_searched, NotPinned.FAILED,
                          f"the pinned module is {result.outcome.value}: {result.detail}")
    if result.tuned:
        missed = "; ".join(f"{c.kernel} {c.key} on {c.shape}" for c in result.tuned[:3])
        return _autotuned(source, check, as_searched, NotPinned.TABLE_MISSED,
                          f"the fallback tuner chose where the table should have: {missed}")
    slower = slower_than(result, check, noise)
    if slower:
        return _autotuned(source, check, as_searched, NotPinned.SLOWER, slower)
    return Chosen(pinned.source, record, result, autotuned=source)


def slower_than(pinned: EvalResult, tuned: EvalResult, noise: float | None) -> str:
    """Why the pinned module counts as slower than the autotuned one, or "". Interpreter timings measure Python,
    not a GPU: there the pinned module is judged on its checks alone."""
    if pinned.interpreter or pinned.speedup is None or tuned.speedup is None:
        return ""
    margin = max(MIN_SLOWER, abs(noise - 1.0) if noise is not None else 0.0)
    if pinned.speedup < tuned.speedup * (1.0 - margin):
        return (f"the pinned module re-measured {pinned.speedup:.3f}x against the autotuned one's {tuned.speedup:.3f}x, "
                f"more than the noise floor ({margin:.1%}) slower")
    return ""


def _autotuned(source: str, check: EvalResult | None, record: Handback, reason: NotPinned, detail: str) -> Chosen:
    record.reason, record.detail = reason, detail
    return Chosen(source, record, check)


def write_files(folder: Path, chosen: Chosen, k0_source: str, task_name: str) -> tuple[str, str]:
    """best.py (the module handed back), best.autotune.py (the autotuned form, beside a pinned best.py) and
    best.diff (best.py against the starting kernel) in `folder`; the paths of best.py and best.diff."""
    folder.mkdir(parents=True, exist_ok=True)
    best_path, diff_path = folder / PINNED_NAME, folder / DIFF_NAME
    best_path.write_text(chosen.source)
    if chosen.autotuned is not None:
        (folder / AUTOTUNED_NAME).write_text(chosen.autotuned)
    else:  # a run resumed into the same folder may have left one
        (folder / AUTOTUNED_NAME).unlink(missing_ok=True)
    diff = difflib.unified_diff(k0_source.splitlines(keepends=True), chosen.source.splitlines(keepends=True),
                                fromfile=f"{task_name}/k0.py", tofile=f"{task_name}/{PINNED_NAME}")
    diff_path.write_text("".join(diff))
    return str(best_path), str(diff_path)
