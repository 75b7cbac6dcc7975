"""What a run hands back: the module it chose, made ready for a user's program and checked, and the files the user
gets (best.py, best.autotune.py, best.diff).

The chosen module is rewritten in up to three ways, each only where it applies:

- an autotuned module, whoever wrote it, is pinned (pinning.py): the choices its autotuners made during the
  evaluations are written into it, the starting kernel's launch among the fallback's configurations;
- where both the search and the final check measured the starting kernel faster on some search shapes, the
  entry calls the starting kernel there (dispatch.py);
- the launch values that depend only on the shape are computed once per shape (launch_cache.py).

The rewritten module is then evaluated like any candidate, in a fresh worker, on every search shape and every
held-out shape: its figures are the ones the run reports. Where it fails, misses a pinned table (a key met on
those shapes went to the fallback tuner: the table does not say what the launch computes) or is slower than
the module as searched by more than the run's noise floor, the pinned module alone is tried, then the module as
searched goes back, with a typed reason for an autotuned one. An autotuned module also goes back as it is when
the pinning cannot handle it or the run checks no finalist (the rewritten module would go back unchecked).
"""

from __future__ import annotations

import difflib
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from enum import Enum
from pathlib import Path

from kernelband.evaluation.records import EvalResult, TunedChoice
from kernelband.search.core import Objective, objective_speedup, shape_speedup
from kernelband.search.dispatch import Start, dispatch, to_start
from kernelband.search.launch_cache import cache_launch_values
from kernelband.search.pinning import pin

# The least slowdown of the pinned module against the autotuned one that counts as slower, whatever the run's
# noise floor says (k0 timed against itself, which can come out at 1.000).
MIN_SLOWER = 0.01
PINNED_NAME, AUTOTUNED_NAME, DIFF_NAME = "best.py", "best.autotune.py", "best.diff"


class Form(str, Enum):
    AS_IS = "as_is"  # no autotuner in the module, or the starting kernel (`dispatched` and `cached` say what else)
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
    # module's time), "call_ms" (its wall time per call), "timer", "placements" (how it was timed)}, the figures a
    # user's process is checked against (scripts/gpu/handback_repeat.py)
    shapes: list[dict] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    dispatched: list[str] = field(default_factory=list)  # search shapes the entry sends to the starting kernel
    cached: list[str] = field(default_factory=list)  # the functions computing launch values once per shape
    evaluation: str = ""  # the stored evaluation whose figures the run reports ("held_out", "handed_back", ...)

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
    return [{"label": s.label, "held_out": s.held_out, "ms": s.cand_ms, "call_ms": s.call_ms, "timer": s.timer,
             "placements": s.placements} for s in result.shapes]


def margin(noise: float | None) -> float:
    """The least slowdown that counts as slower: the run's noise floor (k0 timed against itself), at least
    MIN_SLOWER."""
    return max(MIN_SLOWER, abs(noise - 1.0) if noise is not None else 0.0)


@dataclass
class _Form:
    """A rewritten module to try, and what was done to it."""

    source: str
    pinned: bool = False
    dispatched: list[str] = field(default_factory=list)
    cached: list[str] = field(default_factory=list)

    def what(self) -> str:
        done = [what for what, done in (("pinned", self.pinned), ("sending shapes to the starting kernel",
                                                                  self.dispatched),
                                        ("its launch values cached", self.cached)) if done]
        return "the module " + ", ".join(done)


def hand_back(source: str, search: EvalResult | None, check: EvalResult | None,
              evaluate: Callable[[str], EvalResult], noise: float | None, starting: bool = False,
              start: Start | None = None, objective: Objective | str = Objective.DEVICE) -> Chosen:
    """The module to hand back for the chosen candidate `source`: its search evaluation, its finalist re-check
    (None when the run made none) and `evaluate`, which evaluates a module on every search and held-out shape
    in a fresh worker. `noise`: the run's noise floor (k0 timed against itself) on the `objective`; `start`: the
    starting kernel (for the fallback's configurations and the dispatch)."""
    if starting:
        return Chosen(source, Handback(Form.AS_IS, shapes=shape_times(check)), check)
    tuned = autotuned(source)
    as_searched = Handback(Form.AUTOTUNED if tuned else Form.AS_IS, shapes=shape_times(check),
                           autotuned_speedup=check.speedup if tuned and check is not None else None)
    pinned = pin(source, choices(check, search), start.source if start is not None else None) if tuned else None
    if pinned is not None:
        as_searched.notes = list(pinned.notes)
        if pinned.source is None:
            as_searched.reason, as_searched.detail = NotPinned.UNSUPPORTED, pinned.reason
    if check is None or not check.ok:
        if tuned and pinned.source is not None:
            return _autotuned(source, check, as_searched, NotPinned.NOT_CHECKED,
                              "the run re-checks no finalist: the pinned module would go back unchecked")
        return Chosen(source, as_searched, check)
    forms = _forms(source, pinned.source if pinned is not None else None, search, check, noise, start, objective,
                   as_searched.notes)
    failures: list[tuple[_Form, tuple[NotPinned, str]]] = []
    for form in forms:
        result = evaluate(form.source)
        if form.pinned:
            as_searched.pinned_speedup, as_searched.pinned_held_out_speedup = result.speedup, result.held_out_speedup
        why = _rejected(form, result, check, noise, objective)
        if why is None:
            record = Handback(Form.PINNED if form.pinned else as_searched.form, as_searched.reason,
                              as_searched.detail, shapes=shape_times(result), dispatched=form.dispatched,
                              cached=form.cached, notes=as_searched.notes + [f"{f.what()}: {w}" for f, (_, w) in failures])
            if form.pinned:
                record.kernels, record.keys = pinned.kernels, pinned.keys
                record.detail = f"{pinned.keys} keys of {', '.join(pinned.kernels)} pinned"
                record.autotuned_speedup = check.speedup
                record.pinned_speedup, record.pinned_held_out_speedup = result.speedup, result.held_out_speedup
            return Chosen(form.source, record, result, autotuned=source if form.pinned else None)
        failures.append((form, why))
    as_searched.notes += [f"{form.what()}: {why}" for form, (_, why) in failures]
    alone = [why for form, why in failures if form.pinned]  # the last: the pinned module alone
    if alone and as_searched.reason is None:
        return _autotuned(source, check, as_searched, *alone[-1])
    return Chosen(source, as_searched, check)


def rewrite(source: str, search: EvalResult | None, check: EvalResult, noise: float | None, start: Start | None,
            objective: Objective | str = Objective.DEVICE) -> _Form:
    """The first module `hand_back` would evaluate for the chosen candidate `source` (every rewrite that
    applies), not evaluated; `source` itself where no rewrite applies."""
    pinned = pin(source, choices(check, search), start.source if start is not None else None) \
        if autotuned(source) else None
    forms = _forms(source, pinned.source if pinned is not None else None, search, check, noise, start, objective, [])
    return forms[0] if forms else _Form(source)


def _forms(source: str, pinned: str | None, search: EvalResult | None, check: EvalResult, noise: float | None,
           start: Start | None, objective: Objective | str, notes: list[str]) -> list[_Form]:
    """The rewritten modules to try, in order: every rewrite that applies, then the pinned module alone where
    the first is more than that. None where nothing applies."""
    base = _Form(pinned, pinned=True) if pinned is not None else _Form(source)
    full = _Form(base.source, base.pinned)
    labels = to_start(search, check, margin(noise), objective) if start is not None else []
    if labels:
        sent = dispatch(full.source, start, labels)
        if sent.source is not None:
            full.source, full.dispatched = sent.source, sent.shapes
        else:
            notes.append(f"the starting kernel was faster on {', '.join(labels)}, but the module cannot send those "
                         f"shapes to it: {sent.reason}")
    cached = cache_launch_values(full.source)
    full.source, full.cached = cached.source, cached.functions
    forms = [full] if full.source != source else []
    if pinned is not None and full.source != pinned:
        forms.append(base)
    return forms


def _rejected(form: _Form, result: EvalResult, check: EvalResult, noise: float | None,
              objective: Objective | str) -> tuple[NotPinned, str] | None:
    """Why the rewritten module's evaluation does not let it go back, or None."""
    if not result.ok:
        return NotPinned.FAILED, f"the {'pinned ' if form.pinned else 'rewritten '}module is " \
            f"{result.outcome.value}: {result.detail}"
    if form.pinned and result.tuned:
        missed = "; ".join(f"{c.kernel} {c.key} on {c.shape}" for c in result.tuned[:3])
        return NotPinned.TABLE_MISSED, f"the fallback tuner chose where the table should have: {missed}"
    slower = slower_than(result, check, noise, objective)
    return (NotPinned.SLOWER, slower) if slower else None


def slower_than(rewritten: EvalResult, searched: EvalResult, noise: float | None,
                objective: Objective | str = Objective.DEVICE) -> str:
    """Why the rewritten module counts as slower than the module as searched, or "". Interpreter timings measure
    Python, not a GPU: there the rewritten module is judged on its checks alone."""
    mine, theirs = objective_speedup(rewritten, objective), objective_speedup(searched, objective)
    if rewritten.interpreter or mine is None or theirs is None:
        return ""
    slack = margin(noise)
    if mine < theirs * (1.0 - slack):
        return (f"the rewritten module re-measured {mine:.3f}x against the searched one's {theirs:.3f}x, "
                f"more than the noise floor ({slack:.1%}) slower")
    return ""


def held_out_slower(result: EvalResult | None, noise: float | None,
                    objective: Objective | str = Objective.DEVICE) -> list[str]:
    """The held-out shapes on which `result` (the final check of the module handed back) measured it slower than
    the starting kernel by more than the noise floor, each as "label (0.50x)". None on interpreter timings."""
    if result is None or result.interpreter:
        return []
    slack = margin(noise)
    found = []
    for shape in result.shapes:
        speedup = shape_speedup(shape, objective)
        if shape.held_out and speedup is not None and speedup < 1.0 - slack:
            found.append(f"{shape.label} ({speedup:.2f}x)")
    return found


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
