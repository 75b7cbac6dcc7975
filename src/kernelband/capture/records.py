"""What a capture records, as dataclasses that travel from the captured program's process to KernelBand's as
one JSON file (`capture.json` in the raw directory).

A *case* is one distinct argument signature (dtypes, shapes, strides, integer values) of an entry function's
calls or of a kernel's launches: the arguments of its first call, with how many calls had it and their device
time. Tensor values are not in the JSON: a kept tensor lies in the case's file beside it (`<case id>.pt`).
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

RECORD_FILE = "capture.json"


@dataclass
class Tensor:
    dtype: str  # torch's name without "torch.": "float16", "int64", "bool"
    shape: list[int]
    stride: list[int]
    saved: bool = False  # its values (the memory its strides span) are in the case's file
    low: float | None = None  # integer and bool tensors: the smallest and the largest value
    high: float | None = None
    mean: float | None = None  # float tensors: the mean and the spread of their finite values
    std: float | None = None

    @property
    def contiguous(self) -> bool:
        expected = 1
        for size, stride in reversed(list(zip(self.shape, self.stride))):
            if size != 1 and stride != expected:
                return False
            expected *= size
        return True

    @property
    def is_float(self) -> bool:
        return self.dtype.startswith(("float", "bfloat", "complex"))


def constant(value) -> Any:
    """A constexpr as JSON holds it: a number, bool, string or None as itself; anything else (a `tl.float16`)
    as the code that names it, {"code": "triton.language.float16"}."""
    if value is None or isinstance(value, (bool, int, float, str)):
        return value
    return {"code": repr(value)}


def constant_code(value) -> str:
    """The Python source of a constant `constant` recorded."""
    return value["code"] if isinstance(value, dict) else repr(value)


# The kinds of argument a case can describe; anything else is `other` and keeps its call out of the cases.
KINDS = ("tensor", "int", "float", "bool", "none", "str", "dtype")


@dataclass
class Arg:
    name: str
    kind: str  # one of KINDS, or "other"
    value: Any = None  # a scalar's value (a dtype's name: "float16"); for `other`, the type's name
    tensor: Tensor | None = None
    same_as: int | None = None  # the index of an earlier argument that is the very same tensor


@dataclass
class Case:
    id: str  # "c0", "c1", ...: unique in the capture; also the stem of its tensor file
    args: list[Arg]
    calls: int = 0
    time_ms: float = 0.0
    # kernel launches only:
    grid: list[int] | None = None
    constexprs: dict[str, Any] | None = None
    options: dict[str, int] | None = None  # num_warps, num_stages as compiled (or as passed, in the interpreter)


@dataclass
class Kernel:
    name: str
    file: str
    line: int
    params: list[str]
    constexpr_params: list[str]
    launches: int = 0
    time_ms: float = 0.0
    cases: list[Case] = field(default_factory=list)  # its distinct launch signatures, the first MAX_CASES
    # How a wrapping entry launches it from its module: its name there, with `.fn` for each autotuner or
    # heuristics around it (the wrapper launches the config the program ran)
    launch_as: str = ""
    module_source: str = ""  # the module a wrapping task carries (launch mode only)
    module_note: str = ""  # how that module was made, where it is not the kernel's file as written


@dataclass
class Entry:
    name: str  # qualified name of the host function: "embedding", "Model.forward", "<module>"
    function: str  # its name in its module
    file: str
    line: int
    mode: str  # "entry": the task's module is the entry's file; "launch": a generated entry wraps each kernel
    why: str = ""  # launch mode: why the entry's own file cannot be the module
    params: list[str] = field(default_factory=list)
    calls: int = 0
    time_ms: float = 0.0
    cases: list[Case] = field(default_factory=list)  # entry mode: the entry's distinct argument signatures
    kernels: list[Kernel] = field(default_factory=list)
    uncased_ms: float = 0.0  # device time of calls beyond MAX_CASES or with arguments a case cannot describe


@dataclass
class Capture:
    command: list[str]
    mode: str  # "gpu" or "interpreter"
    device: str
    exit_code: int
    wall_s: float  # the program's run, capture hooks included, finishing excluded
    hooks_s: float  # time spent in the capture's own hooks, on the host
    finish_s: float  # synchronising, reducing the statistics, reading the kept tensors back and writing them
    launches: int
    benchmark_launches: int  # launched by an autotuner's benchmark: not the program's own work
    unattributed: int  # launches with no host frame outside Triton and torch, or no arguments to read
    graph_launches: int  # launched into a CUDA graph being captured: they run at its replays, unseen
    program_dir: str
    worker_path: list[str]  # where a task's module can import from
    hook_errors: list[str] = field(default_factory=list)  # the first errors the hooks met (and kept from the program)
    # of `launches` and `hooks_s`: the launches that brought a new entry, kernel or signature, described once each;
    # the other launches cost the hooks (hooks_s - hooks_new_s) / (launches - new_launches) each
    new_launches: int = 0
    hooks_new_s: float = 0.0
    versions: dict[str, str] = field(default_factory=dict)
    entries: list[Entry] = field(default_factory=list)

    @property
    def time_ms(self) -> float:
        return sum(e.time_ms for e in self.entries)

    def save(self, directory: Path) -> Path:
        path = directory / RECORD_FILE
        path.write_text(json.dumps(asdict(self)))
        return path

    @classmethod
    def load(cls, directory: Path) -> Capture:
        raw = json.loads((directory / RECORD_FILE).read_text())
        raw["entries"] = [_entry(e) for e in raw["entries"]]
        return cls(**raw)


def _arg(d: dict) -> Arg:
    tensor = d.get("tensor")
    return Arg(**{**d, "tensor": Tensor(**tensor) if tensor else None})


def _case(d: dict) -> Case:
    return Case(**{**d, "args": [_arg(a) for a in d["args"]]})


def _entry(d: dict) -> Entry:
    kernels = [Kernel(**{**k, "cases": [_case(c) for c in k["cases"]]}) for k in d["kernels"]]
    return Entry(**{**d, "cases": [_case(c) for c in d["cases"]], "kernels": kernels})
