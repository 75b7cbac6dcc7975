"""What a task is, as the trusted parent knows it: sources and settings.

The parent never executes task code. It splits a task into the module to make
faster (the kernels and the entry function) and the harness (how to build
inputs for a shape); workers run both and report the task's shapes back as a
`TaskInfo`.
"""

from __future__ import annotations

import hashlib
from dataclasses import asdict, dataclass, field


@dataclass(frozen=True)
class Task:
    ref: str  # how the user named it: "examples:softmax", "tritonbench:add_value", "path/to/task.py"
    name: str
    kind: str  # "pyfile" | "tritonbench"
    module_source: str  # the starting kernel k0
    harness_source: str  # trusted: builds inputs, lists shapes
    harness_file: str = "<harness>"
    tests_source: str | None = None  # TritonBench instance tests, run against every module
    extra_loop_values: tuple[float, ...] = ()  # TritonBench: loop values added to the script's own
    # TritonBench: (old, new) replacements in the performance script under the CPU interpreter only
    interpreter_fixes: tuple[tuple[str, str], ...] = ()
    description: str = ""
    difficulty: int | None = None
    # why the declared bytes per shape are more than the kernel must move (empty: they are a lower bound). The
    # speed-of-light bound is then reported but not a check: a kernel faster than it is not suspicious.
    bytes_overcounted: str = ""
    # files the harness reads (a captured task's kept tensors: `<task>.data/` beside its file), and a digest of
    # their contents: other files, another reference
    data_dir: str = ""
    data_digest: str = ""

    @property
    def key(self) -> str:
        """Identifies the reference: same key, same reference worker, and the same task in the run store.
        The interpreter's size reductions are left out: they follow from the task's kind and name, are not
        applied on a GPU, and adding them would part stored GPU sweeps from the tasks they measured."""
        h = hashlib.sha256()
        for part in (self.kind, self.name, self.module_source, self.harness_source, self.tests_source or "",
                     repr(self.extra_loop_values), *([self.data_digest] if self.data_digest else [])):
            h.update(part.encode())
            h.update(b"\0")
        return h.hexdigest()[:16]

    def wire(self) -> dict:
        """What a worker needs to build the harness."""
        return {"kind": self.kind, "name": self.name, "harness_source": self.harness_source,
                "harness_file": self.harness_file, "tests_source": self.tests_source,
                "extra_loop_values": list(self.extra_loop_values),
                "interpreter_fixes": [list(f) for f in self.interpreter_fixes], "data_dir": self.data_dir}


@dataclass(frozen=True)
class ShapeInfo:
    index: int
    label: str
    held_out: bool
    inputs: str
    nbytes: int
    bytes: float | None = None  # declared bytes moved, for GB/s and the speed-of-light bound
    flops: float | None = None
    added: bool = False  # a shape KernelBand added to the task's own
    group: str = "search"
    position: int = 0
    # the entry's positional arguments as the harness passes them: each tensor's shape, None for anything else;
    # None where the harness does not call the entry itself (TritonBench's performance scripts)
    args: tuple[tuple[int, ...] | None, ...] | None = None


@dataclass(frozen=True)
class TaskInfo:
    entry: str
    atol: float
    rtol: float
    allow_torch_only: bool
    has_tests: bool
    shapes: tuple[ShapeInfo, ...] = field(default_factory=tuple)
    interpreter_shapes_given: bool = False
    # below this share of the call's GPU kernel time in Triton kernels, a candidate is suspicious (TRITON_SHARE)
    triton_share_min: float = 0.5

    @classmethod
    def from_wire(cls, d: dict) -> TaskInfo:
        shapes = tuple(ShapeInfo(**{k: v for k, v in s.items() if k in ShapeInfo.__dataclass_fields__ and k != "args"},
                                 args=_arg_shapes(s.get("args")))
                       for s in d["shapes"])
        return cls(entry=d["entry"], atol=float(d["atol"]), rtol=float(d["rtol"]),
                   allow_torch_only=bool(d["allow_torch_only"]), has_tests=bool(d["has_tests"]),
                   shapes=shapes, interpreter_shapes_given=bool(d.get("interpreter_shapes_given")),
                   triton_share_min=float(d.get("triton_share_min", 0.5)))

    @property
    def search(self) -> list[ShapeInfo]:
        return [s for s in self.shapes if not s.held_out]

    @property
    def held_out(self) -> list[ShapeInfo]:
        return [s for s in self.shapes if s.held_out]

    def to_dict(self) -> dict:
        return asdict(self)


def _arg_shapes(args: list | None) -> tuple[tuple[int, ...] | None, ...] | None:
    return None if args is None else tuple(None if a is None else tuple(int(n) for n in a) for a in args)
