"""`kernelband capture`'s own side: run the program under the recorder in a child process, read what it
recorded, write the tasks of the entries with the most device time, and say what was found.

The program's output passes through (to `echo`); KernelBand's own stays apart. A program that cannot start, fails
or launches no Triton kernel is a UserError, and nothing is written.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from collections import deque
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path

from kernelband.capture import boot, records, writer
from kernelband.errors import UserError

USAGE = "give the program after --: `kernelband capture -- python my_script.py ARGS` (or `-- python -m module ARGS`)"
_PYTHON = re.compile(r"^python[\d.]*(\.exe)?$")


@dataclass
class KernelRow:
    kernel: str
    entry: str
    where: str  # the entry's file:line
    launches: int
    time_ms: float
    share: float  # of the program's captured device time
    task: str  # the task file it went to, or ""
    command: str  # how to optimize it, or why there is no task


@dataclass
class TaskRow:
    path: str
    entry: str
    kernel: str  # the wrapped kernel, or "" where the entry's file is the module
    share: float
    seen: int  # search shapes the program ran
    added: int  # search shapes added between and around them
    held_out: int
    note: str


@dataclass
class Report:
    command: list[str]
    out: str
    mode: str
    device: str
    wall_s: float
    hooks_s: float
    finish_s: float
    launches: int
    benchmark_launches: int
    unattributed: int
    device_ms: float
    new_launches: int = 0  # of `launches`: those that brought a new entry, kernel or signature (described once)
    hooks_new_s: float = 0.0  # of `hooks_s`: the time of those launches
    child_s: float = 0.0  # the program's process, start to end: start-up and imports, the run, finishing
    write_s: float = 0.0  # writing the tasks, once it has ended
    kernels: list[KernelRow] = field(default_factory=list)
    tasks: list[TaskRow] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)

    @property
    def us_per_launch(self) -> float:
        return 1e6 * self.hooks_s / self.launches if self.launches else 0.0

    @property
    def us_per_seen_launch(self) -> float:
        """The hooks' time per launch of a seen signature: what every launch pays once the program's signatures
        are known (a new one is described once)."""
        seen = self.launches - self.new_launches
        return 1e6 * (self.hooks_s - self.hooks_new_s) / seen if seen > 0 else 0.0

    @property
    def overhead(self) -> float:
        """The hooks' share of the program's wall time under capture."""
        return self.hooks_s / self.wall_s if self.wall_s > 0 else 0.0

    def to_dict(self) -> dict:
        return {**asdict(self), "us_per_launch": self.us_per_launch, "us_per_seen_launch": self.us_per_seen_launch,
                "overhead": self.overhead}


def child_command(command: list[str], raw: Path, max_bytes: int) -> list[str]:
    """The child's command line for `command` (`python SCRIPT ARGS` or `python -m MODULE ARGS`)."""
    if not command:
        raise UserError(USAGE)
    if not _PYTHON.match(os.path.basename(command[0])):
        raise UserError(f"capture runs a Python program, not {command[0]!r}: {USAGE}")
    python = shutil.which(command[0])
    if python is None:
        raise UserError(f"{command[0]!r} is not found on PATH: {USAGE}")
    rest = command[1:]
    if not rest:
        raise UserError(f"no script after {command[0]}: {USAGE}")
    if rest[0] == "-m":
        if len(rest) < 2:
            raise UserError(f"no module after -m: {USAGE}")
    elif rest[0].startswith("-"):
        raise UserError(f"capture takes a script or -m MODULE after python, not the option {rest[0]}: {USAGE}")
    elif not os.path.isfile(rest[0]):
        raise UserError(f"script {rest[0]} does not exist")
    return [python, "-m", "kernelband.capture.boot", str(raw), str(max_bytes), "--", *rest]


def _env() -> dict[str, str]:
    """The program's environment, with KernelBand importable for the child's boot (which also decides whether
    the program's kernels run in Triton's interpreter)."""
    src = str(Path(__file__).resolve().parents[2])
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([src] + ([env["PYTHONPATH"]] if env.get("PYTHONPATH") else []))
    return env


def _run(command: list[str], raw: Path, max_bytes: int, echo: Callable[[str], None]) -> records.Capture:
    args = child_command(command, raw, max_bytes)
    tail: deque[str] = deque(maxlen=20)
    with subprocess.Popen(args, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                          text=True, errors="replace", env=_env()) as proc:
        for line in proc.stdout:
            echo(line)
            if line.strip():
                tail.append(line.strip())
    last = tail[-1] if tail else "no output"
    if not (raw / records.RECORD_FILE).exists():
        raise UserError(f"the program could not be run under capture (exit code {proc.returncode}): {last}")
    capture = records.Capture.load(raw)
    if capture.exit_code != 0:
        failure = raw / boot.FAILURE_FILE
        why = failure.read_text().strip() if failure.exists() else last
        raise UserError(f"the program failed (exit code {capture.exit_code}): {why}; no task was written")
    if capture.launches == 0:
        raise UserError("the program launched no Triton kernel: there is nothing to capture")
    if not capture.entries:
        raise UserError(f"none of the program's {capture.launches} Triton launches came from a host function "
                        "outside Triton and torch (or an autotuner's benchmark): there is nothing to capture")
    return capture


def _relative(path: Path) -> str:
    try:
        return str(path.resolve().relative_to(Path.cwd().resolve()))
    except ValueError:
        return str(path)


def _write_tasks(capture: records.Capture, out: Path, raw: Path, top: int) -> tuple[list[writer.Written], list[str]]:
    written, notes, taken = [], [], set()
    for entry in capture.entries[:top]:
        units = [None] if entry.mode == "entry" else list(entry.kernels)
        for kernel in units:
            label = entry.name if kernel is None else f"{entry.name} / {kernel.name}"
            if kernel is None and not entry.cases:
                notes.append(f"{label}: no call's arguments could be described; no task")
                continue
            if kernel is not None and not (kernel.cases and kernel.module_source):
                notes.append(f"{label}: {kernel.module_note or 'no launch could be described'}; no task")
                continue
            other = [a for c in (kernel.cases if kernel else []) for a in c.args if a.kind == "other"]
            if other:
                notes.append(f"{label}: its argument {other[0].name} is a {other[0].value}, which a task cannot "
                             "build; no task")
                continue
            task = writer.write(capture, entry, kernel, out, raw, taken)
            if len(task.plan.shapes) < writer.plans.MIN_SHAPES:
                task.path.unlink()
                notes.append(f"{label}: only {len(task.plan.shapes)} shapes and no size to vary; no task")
                continue
            written.append(task)
    return written, notes


def capture(command: list[str], out: Path, top: int = 5, max_bytes: int = 16 << 20,
            echo: Callable[[str], None] = sys.stderr.write) -> Report:
    if top < 1:
        raise UserError(f"--top must be at least 1, not {top}")
    if max_bytes < 0:
        raise UserError(f"--max-bytes cannot be negative ({max_bytes})")
    raw = Path(tempfile.mkdtemp(prefix="kernelband-capture-"))
    try:
        t0 = time.perf_counter()
        cap = _run(command, raw, max_bytes, echo)
        t1 = time.perf_counter()
        try:
            out.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            raise UserError(f"cannot create --out {out}: {exc.strerror}") from exc
        written, notes = _write_tasks(cap, out, raw, top)
        shutil.copyfile(raw / records.RECORD_FILE, out / records.RECORD_FILE)
        t2 = time.perf_counter()
    finally:
        shutil.rmtree(raw, ignore_errors=True)
    report = _report(cap, out, top, written, notes)
    report.child_s, report.write_s = t1 - t0, t2 - t1
    return report


def _report(cap: records.Capture, out: Path, top: int, written: list[writer.Written], notes: list[str]) -> Report:
    total = cap.time_ms
    report = Report(cap.command, _relative(out), cap.mode, cap.device, cap.wall_s, cap.hooks_s, cap.finish_s,
                    cap.launches, cap.benchmark_launches, cap.unattributed, total, new_launches=cap.new_launches,
                    hooks_new_s=cap.hooks_new_s, notes=notes)
    if cap.graph_launches:
        report.notes.append(f"{cap.graph_launches} launches went into CUDA graphs being captured: their replays "
                            "are not seen")
    if cap.unattributed:
        report.notes.append(f"{cap.unattributed} launches came from no host function outside Triton and torch "
                            "(or carried no arguments to read): not counted")
    task_of = {(w.entry.name, w.entry.file, w.kernel.name if w.kernel else None): _relative(w.path)
               for w in written}
    rank = {id(e): i for i, e in enumerate(cap.entries)}
    for entry in cap.entries:
        for k in entry.kernels:
            path = task_of.get((entry.name, entry.file, k.name if entry.mode == "launch" else None), "")
            if path:
                how = f"kernelband optimize {path}"
            elif rank[id(entry)] >= top:
                how = f"not in the top {top} entries (--top)"
            else:
                how = "no task (see the notes)"
            report.kernels.append(KernelRow(k.name, entry.name, f"{_relative(Path(entry.file))}:{entry.line}",
                                            k.launches, k.time_ms, k.time_ms / total if total > 0 else 0.0,
                                            path, how))
    report.kernels.sort(key=lambda r: -r.time_ms)
    for w in written:
        seen = sum(s.case is not None for s in w.plan.shapes)
        time_ms = w.kernel.time_ms if w.kernel else w.entry.time_ms
        note = "; ".join(filter(None, [w.note, w.plan.left_out]))
        report.tasks.append(TaskRow(_relative(w.path), w.entry.name, w.kernel.name if w.kernel else "",
                                    time_ms / total if total > 0 else 0.0, seen, len(w.plan.shapes) - seen,
                                    len(w.plan.held_out), note))
    if cap.hook_errors:
        report.notes.append(f"the capture's hooks met {len(cap.hook_errors)} error(s), the program went on: "
                            + "; ".join(cap.hook_errors))
    return report
