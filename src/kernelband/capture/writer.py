"""Writing one captured task: the module, the task definition below the marker, and the kept tensors of its
seen cases beside it (`<task>.data/`).

The module is the entry's file as written (its module part, where it is itself a task file) or, for a wrapped
launch, the kernel's file (or the kernel alone) with the generated entry after it. The task definition has no
`reference`: the starting kernel's outputs are the ground truth, as for any task without one.
"""

from __future__ import annotations

import math
import re
import shlex
import shutil
from dataclasses import dataclass
from pathlib import Path

from kernelband.capture import plan as plans
from kernelband.capture import records, sources, wrapper
from kernelband.tasks.pyfile import MARKER_LINE


@dataclass
class Written:
    path: Path
    entry: records.Entry
    kernel: records.Kernel | None  # the wrapped kernel (launch mode), or None: the entry's file is the module
    plan: plans.Plan
    note: str  # how the module was made, where it is not the entry's file as written


def _task_name(base: str, taken: set[str]) -> str:
    base = re.sub(r"\W", "_", base).strip("_") or "task"
    name, k = base, 2
    while name in taken:
        name, k = f"{base}_{k}", k + 1
    taken.add(name)
    return name


def _defines(module: str, name: str) -> bool:
    return re.search(rf"^(?:async\s+)?(?:def|class)\s+{re.escape(name)}\b|^{re.escape(name)}\s*[:=]", module,
                     re.MULTILINE) is not None


def _number(value) -> str:
    if isinstance(value, float) and not math.isfinite(value):
        return f"float({str(value)!r})"
    if isinstance(value, float):
        return f"{value:.6g}" if "e" in f"{value:.6g}" or "." in f"{value:.6g}" else f"{value:.6g}.0"
    return repr(value)


def _whole(x: float) -> float | int:
    return int(x) if float(x).is_integer() else x


def _shown(path: str) -> str:
    """A path as the user knows it: relative to the working directory where it lies below it."""
    try:
        return str(Path(path).resolve().relative_to(Path.cwd().resolve()))
    except ValueError:
        return path


def _tensor(t: records.Tensor, dims: tuple, exact: bool, saved: int | None) -> str:
    parts = [repr(t.dtype), repr(tuple(dims))]
    if exact:
        parts.append(f"stride={tuple(t.stride)!r}")
    else:
        if (order := plans.order(t)) is not None:
            parts.append(f"order={order!r}")
        if expanded := plans.expanded(t):
            parts.append(f"expanded={expanded!r}")
    if t.is_float:
        if t.mean is not None:
            parts.append(f"mean={_number(t.mean)}, std={_number(t.std)}")
    elif t.low is not None:
        parts.append(f"low={_number(_whole(t.low))}, high={_number(_whole(t.high))}")
    if saved is not None:
        parts.append(f"saved={saved}")
    return f"T({', '.join(parts)})"


def _args(case: records.Case, plan: plans.Plan, exact: bool) -> list[str]:
    """The passed arguments of a case, as template source: exact (a seen case) or sized by variables."""
    out = []
    passed = [i for i in range(len(case.args)) if i not in plan.derived]
    where = {i: k for k, i in enumerate(passed)}
    for i in passed:
        a, template = case.args[i], plan.templates[i]
        if template[0] == "same":
            out.append(f"Same({where[template[1]]})")
        elif a.kind == "tensor":
            dims = a.tensor.shape if exact else template[1]
            out.append(_tensor(a.tensor, dims, exact, i if exact and a.tensor.saved else None))
        elif exact:
            out.append(wrapper.literal(a))
        elif template[0] == "var":
            out.append(f"V({template[1]!r})")
        elif template[0] == "scaled":
            out.append(f"Scaled({a.value}, {template[1]!r}, {template[2]})")
        else:
            out.append(wrapper.literal(a))
    return out


def _shape_line(s: plans.Shape) -> str:
    items = [f"{k}={v}" for k, v in s.sizes.items()] + ([f"seen={s.case.id!r}"] if s.case is not None else [])
    return f"    dict({', '.join(items)}),  # {s.note}"


def harness(capture: records.Capture, entry: records.Entry, plan: plans.Plan, entry_name: str,
            share: float, module_note: str) -> str:
    where = f"{entry.name} ({_shown(entry.file)}:{entry.line})"
    calls = f"{entry.calls} call{'s' if entry.calls != 1 else ''}"
    lines = [
        MARKER_LINE,
        f"# Captured by `kernelband capture` from `{shlex.join(capture.command)}` ({capture.device}):",
        f"# {where}, {calls}, {100 * share:.0f}% of the program's device time.",
    ]
    if module_note:
        lines.append(f"# The module above: {module_note}.")
    lines += [
        "# No reference: the starting kernel's outputs are the ground truth, as for any task without one.",
        "import torch  # noqa: E402  (the task definition runs on its own)",
        "",
        "from kernelband.capture.inputs import Same, Scaled, T, V, build  # noqa: E402, F401",
        "",
        f"ENTRY = {entry_name!r}",
    ]
    if plan.variables:
        lines.append(f"# Size variables: {', '.join(plan.variables)}. A shape is seen (a case the program ran) or "
                     "added (between or around the seen sizes).")
    lines += ["SHAPES = [", *(_shape_line(s) for s in plan.shapes), "]",
              "HELD_OUT = [", *(_shape_line(s) for s in plan.held_out), "]"]
    if plan.interpreter:
        lines += ["# Without a GPU: the smallest seen shape (its kept values), the next smallest, the smallest held out.",
                  "INTERPRETER_SHAPES = [", *(_shape_line(s) for s in plan.interpreter), "]"]
    if plan.interpreter_held:
        lines += ["INTERPRETER_HELD_OUT = [", *(_shape_line(s) for s in plan.interpreter_held), "]"]
    if plan.left_out:
        lines.append(f"# Left out: {plan.left_out}.")
    first = plan.cases[0]
    lines += ["# The arguments of added sizes: integers drawn within the captured range, floats with the captured",
              "# mean and spread, in the captured dim order.",
              "ARGS = [", *(f"    {a}," for a in _args(first, plan, exact=False)), "]",
              "# The seen cases as captured: exact strides; `saved` values lie beside this task (TASK_DATA).",
              "CASES = {"]
    for s in [*plan.shapes, *plan.held_out]:
        if s.case is not None:
            lines += [f"    {s.case.id!r}: [", *(f"        {a}," for a in _args(s.case, plan, exact=True)), "    ],"]
    lines.append("}")
    params = ", ".join(["device", *plan.variables, "seen=None"])
    sizes = ", ".join(f"{v}={v}" for v in plan.variables)
    lines += ["", "", f"def make_inputs({params}):",
              f"    sizes = dict({sizes})",
              "    if seen is not None:",
              "        return build(CASES[seen], sizes, device, globals().get(\"TASK_DATA\"), seen)",
              "    return build(ARGS, sizes, device)", ""]
    return "\n".join(lines)


def write(capture: records.Capture, entry: records.Entry, kernel: records.Kernel | None, out: Path, raw: Path,
          taken: set[str]) -> Written:
    """Write the task of `entry` (with `kernel`: the task wrapping that kernel's launch) into `out`."""
    total = capture.time_ms
    if kernel is None:
        module = sources.read(entry.file)
        entry_name, note = entry.function, ""
        the_plan = plans.make(entry.cases)
        name = _task_name(entry_name, taken)
        share = entry.time_ms / total if total > 0 else 0.0
    else:
        cases = wrapper.launch_cases(kernel)
        axes = wrapper.program_axes(kernel.module_source, kernel.name)
        the_plan = plans.make(cases, lambda chosen, varying: wrapper.derive(chosen, varying, axes))
        base = entry.function if entry.function != "<module>" else f"launch_{kernel.name}"
        if len(entry.kernels) > 1:
            base = f"{base}_{kernel.name}"
        name = _task_name(base, taken)
        entry_name = name
        module = kernel.module_source
        while _defines(module, entry_name):
            entry_name += "_captured"
        note = "; ".join(filter(None, [kernel.module_note, f"its last function, {entry_name}, is generated"]))
        module = (module.rstrip() + "\n\n\n" + wrapper.source(kernel, the_plan.cases[0], the_plan.derived,
                                                                 entry_name, entry.why))
        share = kernel.time_ms / total if total > 0 else 0.0
    path = out / f"{name}.py"
    text = module.rstrip() + "\n\n\n" + harness(capture, entry, the_plan, entry_name, share, note)
    path.write_text(text, encoding="utf-8")
    data = out / f"{name}.data"
    shutil.rmtree(data, ignore_errors=True)
    for s in [*the_plan.shapes, *the_plan.held_out]:
        kept = raw / "data" / f"{s.case.id}.pt" if s.case is not None else None
        if kept is not None and kept.exists():
            data.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(kept, data / kept.name)
    return Written(path, entry, kernel, the_plan, note)
