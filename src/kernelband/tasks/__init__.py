"""Finding tasks by name: `examples:<name>`, `tritonbench:<name>` or a path to a task file."""

from __future__ import annotations

from pathlib import Path

from kernelband.errors import UserError
from kernelband.tasks import pyfile, tritonbench
from kernelband.tasks.model import ShapeInfo, Task, TaskInfo

EXAMPLES_DIR = Path(__file__).resolve().parent / "examples"

__all__ = ["Task", "TaskInfo", "ShapeInfo", "load_task", "example_names"]


def example_names() -> list[str]:
    return sorted(p.stem for p in EXAMPLES_DIR.glob("*.py") if not p.stem.startswith("_"))


def load_task(ref: str, tritonbench_path: str | None = None) -> Task:
    ref = ref.strip()
    if ref.startswith("tritonbench:"):
        return tritonbench.load(ref.split(":", 1)[1], tritonbench_path)
    if ref.startswith("examples:") or ref in example_names():
        name = ref.split(":", 1)[-1]
        path = EXAMPLES_DIR / f"{name}.py"
        if not path.is_file():
            raise UserError(f"no built-in example named {name!r}; there are: {', '.join(example_names())}")
        return pyfile.load(path, ref=f"examples:{name}", name=name)
    path = Path(ref).expanduser()
    if path.suffix == ".py" or path.exists():
        if not path.is_file():
            raise UserError(f"task file {path} does not exist")
        return pyfile.load(path)
    raise UserError(f"unknown task {ref!r}: use examples:<name>, tritonbench:<name> or a path to a task file")
