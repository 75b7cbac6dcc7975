"""TritonBench-G tasks, addressed as `tritonbench:<name>`.

Two sources, tried in this order:

* the JSON file KernelBand's authors released (`tritonbench_g_tasks.json`, 184
  tasks, each with the instance code and the performance script);
* a TritonBench checkout with its original layout
  (`data/TritonBench_G_v1/<name>.py`,
  `performance_metrics/perf_G/golden_metrics/<name>_perf.py`).

Where they are: `--tritonbench PATH` or `KERNELBAND_TRITONBENCH` (the JSON file
or the checkout), else `shared/tritonbench/kernelband_nvidia/` found next to or
above the current directory.

The instance code is split at its line of 146 `#`: above is the starting
kernel, below the instance's own tests, which join the correctness inputs.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path

from kernelband.errors import UserError
from kernelband.tasks.model import Task

SEPARATOR = "#" * 146
_JSON_RELATIVE = Path("shared/tritonbench/kernelband_nvidia/tritonbench_g_tasks.json")

# Level-1/2 tasks whose performance script has fewer than 10 shapes get loop values added to the
# script's own (`2 ** 7.5` is 181): the `range` of the script's loop yields these after its own.
EXTRA_LOOP_VALUES: dict[str, tuple[float, ...]] = {
    # cols 4..128 -> also 5, 11, 22, 45, 90 (x 8192 rows, fp16): its kernel has a fixed 128-column block
    # and leaves wider rows partly unwritten, so the added widths stay within 128
    "geglu_tanh_triton": (2.5, 3.5, 4.5, 5.5, 6.5),
    # q, k of (s, s, s): the kernel needs a power-of-two s (tl.arange(0, C)), so smaller cubes
    "int8_quantization": (0, 1),
    # d_head 4..512 -> also 1024, 2048 (a power of two: the kernel's tl.arange needs it)
    "matrix_transpose": (10, 11),
    # 4096 rows x 128..32768 cols -> also 181 cols
    "softmax_triton1": (7.5,),
    # 4096 rows x 16..1024 cols -> also 23, 45, 91 cols (the kernel caps its block at 1024 columns)
    "triton_softmax": (4.5, 5.5, 6.5),
    # The starting kernel hard-codes M = N = K = 4096 and reads out of bounds on the script's own
    # sizes (768..3968); 4096 is the one size it computes correctly.
    "matmul_kernel": (32,),
}

# Input fixes, applied to the performance script's text. destindex_copy and destindex_copy_kv2 draw
# destination slots with randint, so several rows race for one slot and the starting kernel gives a
# different answer on every run; a KV-cache copy means distinct slots, so KernelBand draws a permutation.
INPUT_FIXES: dict[str, tuple[tuple[str, str], ...]] = {
    "destindex_copy": (("torch.randint(0, seq_len, (seq_len,), dtype=torch.int32)",
                        "torch.randperm(seq_len).to(torch.int32)"),),
    "destindex_copy_kv2": (("torch.randint(0, seq_len, (seq_len,), dtype=torch.int32)",
                            "torch.randperm(seq_len).to(torch.int32)"),),
}

# Tasks whose performance script counts bytes the kernel need not move, so that its speed-of-light bound is
# not a lower bound on a correct kernel's time; the bound is reported, but a kernel beating it is not
# suspicious. Each entry says why.
BYTES_OVERCOUNTED: dict[str, str] = {
    # get_gbps counts all 16 blocks of mid_out per row; the kernel reads ceil(seq_len / 32) of them, and
    # seq_len is drawn from 1..511, so about half. A launch change (num_warps 4 -> 2) measured 1.39x faster
    # than k0 on an H100, under the bound (BENCHMARKS.md, search quality).
    "flash_decode2_phi": "the script counts every block of mid_out; the kernel reads only the blocks within "
                         "each row's sequence length",
}

# Under the CPU interpreter every program of a launch runs in Python, so fixed sizes made for GPUs (4096 or
# 8192 rows) take minutes per shape. These tasks get a smaller fixed size there; the kernels are the same,
# the shapes are the script's own with fewer rows. On a GPU nothing changes.
INTERPRETER_FIXES: dict[str, tuple[tuple[str, str], ...]] = {
    # 4096 x N rows -> 64 x N
    "softmax_triton1": (("M = 4096", "M = 64"),),
    "triton_softmax": (("M = 4096", "M = 64"),),
    # (batch, 128, 256) -> (batch, 4, 256): a (batch, M) grid of rows
    "rmsnorm_triton": (("M = 128  # Example fixed size", "M = 4  # Example fixed size"),),
    # 8192 x N rows -> 64 x N
    "geglu_tanh_triton": (("torch.rand((8192, size)", "torch.rand((64, size)"),),
    # BLOCK_SIZE = 4: 2**12 elements are 1024 programs; the loop starts at 2**8 instead
    "add_example": (("for i in range(12, 28):", "for i in range(8, 28):"),),
}

# The paper's evaluation set: levels 1 and 2, less sin_computation (it reduces to almost nothing).
PAPER_EXCLUDED = ("sin_computation",)


@dataclass(frozen=True)
class Entry:
    name: str
    difficulty: int | None
    instance: str
    perf: str


def _candidates() -> list[Path]:
    places = []
    for start in (Path.cwd(), Path(__file__).resolve().parent):
        for ancestor in (start, *start.parents):
            places.append(ancestor / _JSON_RELATIVE)
            places.append(ancestor.parent / _JSON_RELATIVE)
    return places


def locate(path: str | os.PathLike | None = None) -> Path:
    given = path or os.environ.get("KERNELBAND_TRITONBENCH")
    if given:
        p = Path(given).expanduser()
        if not p.exists():
            raise UserError(f"TritonBench data not found at {p} (set by "
                            f"{'--tritonbench' if path else 'KERNELBAND_TRITONBENCH'})")
        return p
    for place in _candidates():
        if place.is_file():
            return place
    raise UserError("TritonBench data not found: pass --tritonbench PATH (tritonbench_g_tasks.json or a "
                    "TritonBench checkout) or set KERNELBAND_TRITONBENCH")


def find(path: str | os.PathLike | None = None) -> Path | None:
    """Like `locate`, but None where there is no TritonBench data."""
    try:
        return locate(path)
    except UserError:
        return None


@lru_cache(maxsize=4)
def _load_entries(location: str) -> dict[str, Entry]:
    p = Path(location)
    entries: dict[str, Entry] = {}
    if p.is_file():
        try:
            data = json.loads(p.read_text())
            for t in data["tasks"]:
                diff = t.get("difficulty")
                entries[t["name"]] = Entry(t["name"], int(diff) if diff not in (None, "") else None,
                                           t["instance_py"], t["perf_py"])
        except (OSError, ValueError, KeyError, TypeError) as exc:
            raise UserError(f"{p} is not a TritonBench-G task file: {exc}") from exc
        return entries
    instances = p / "data" / "TritonBench_G_v1"
    perfs = p / "performance_metrics" / "perf_G" / "golden_metrics"
    if not instances.is_dir() or not perfs.is_dir():
        raise UserError(f"{p} has neither tritonbench_g_tasks.json nor a TritonBench layout "
                        "(data/TritonBench_G_v1, performance_metrics/perf_G/golden_metrics)")
    difficulty: dict[str, int] = {}
    meta = p / "data" / "TritonBench_G_v1.json"
    if meta.is_file():
        for rec in json.loads(meta.read_text()):
            name = Path(rec.get("file", "")).stem
            if name and str(rec.get("difficulty", "")).isdigit():
                difficulty[name] = int(rec["difficulty"])
    for inst in sorted(instances.glob("*.py")):
        perf = perfs / f"{inst.stem}_perf.py"
        if perf.is_file():
            entries[inst.stem] = Entry(inst.stem, difficulty.get(inst.stem), inst.read_text(), perf.read_text())
    return entries


def entries(path: str | os.PathLike | None = None) -> dict[str, Entry]:
    return _load_entries(str(locate(path)))


def split_instance(instance: str) -> tuple[str, str]:
    """(starting kernel, the instance's tests)."""
    lines = instance.splitlines(keepends=True)
    for i, line in enumerate(lines):
        if line.strip() == SEPARATOR:
            return "".join(lines[:i]), "".join(lines[i + 1:])
    return instance, ""


def to_task(entry: Entry) -> Task:
    module, tests = split_instance(entry.instance)
    perf = entry.perf
    for old, new in INPUT_FIXES.get(entry.name, ()):
        perf = perf.replace(old, new)
    return Task(ref=f"tritonbench:{entry.name}", name=entry.name, kind="tritonbench", module_source=module,
                harness_source=perf, harness_file=f"<tritonbench:{entry.name}_perf.py>",
                tests_source=tests or None, extra_loop_values=EXTRA_LOOP_VALUES.get(entry.name, ()),
                interpreter_fixes=INTERPRETER_FIXES.get(entry.name, ()),
                description=f"TritonBench-G {entry.name} (level {entry.difficulty})", difficulty=entry.difficulty,
                bytes_overcounted=BYTES_OVERCOUNTED.get(entry.name, ""))


def load(name: str, path: str | os.PathLike | None = None) -> Task:
    all_entries = entries(path)
    if name not in all_entries:
        close = [n for n in all_entries if name.lower() in n.lower()][:5]
        hint = f"; did you mean {', '.join(close)}?" if close else "; `kernelband tasks --suite tritonbench-g` lists them"
        raise UserError(f"no TritonBench-G task named {name!r}{hint}")
    return to_task(all_entries[name])


def level12(path: str | os.PathLike | None = None, paper: bool = True) -> list[str]:
    """The level-1/2 tasks; with `paper`, without the ones the paper excluded (29 tasks)."""
    names = sorted(n for n, e in entries(path).items() if e.difficulty in (1, 2))
    return [n for n in names if not (paper and n in PAPER_EXCLUDED)]
