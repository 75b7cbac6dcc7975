"""The built-in rewriter's priors: how likely a variant is to beat its parent, by the variant's family and by
how much work each thread of the parent's kernel holds.

A **family** is a rewrite, or one sort of change of it where the sorts fared differently: a block grown or
shrunk, num_warps raised or lowered, vector_width growing the block or halving the warps, autotune wrapping
a kernel or adding a config to one that is autotuned already (`family`).

The **load** of a parent is read from its evaluation's compile features (the launch that did the most
work on the representative shape: its BLOCK* constexprs, num_warps, register spills), with no profiler:
`heavy` when the compiler spilled registers or a thread holds more than 32 elements of the tile, `light`
at 2 or fewer, `mid` between (`load_class`). On the train tasks of the GPU benches the load decides which
family wins: growing a block beat its parent 8 times in 8 on a light kernel and 0 times in 94 otherwise;
raising num_warps 23 in 48 on a heavy one and 1 in 85 otherwise (BENCHMARKS.md, "the rewriter's priors by
parent load").

A family no counted run has met (the structural rewrites, which fire only where the analysis has found their
fact: a plain GEMM, a max pass then an exp-sum pass) has no counts, and the same rule gives it (0 + 1) / (0 + 2):
as likely to win as to lose. So on a tl.dot kernel `tiling` draws `matmul_configs` before wrapping the kernel in
a generic autotuner, which beat its parent 30 times in 141.

The counts live in `priors.json`, written by `tools/rewrite_priors.py --split train` from a run database, with
where they come from (the command, date, GPU models and tasks) at its head. A family's prior is
(won + 1) / (children + 2); with the parent's load known, its prior for that load is the count for that
load shrunk toward the family's: (won + STRENGTH x prior) / (children + STRENGTH). The counts come from the
train side of the fixed split (tasks/split.py) only, so that a bench's test tasks are held out from them.
"""

from __future__ import annotations

import json
import math
import re
from functools import lru_cache
from pathlib import Path

FILE = Path(__file__).with_name("priors.json")
STRENGTH = 4.0  # children a family's prior counts for against a load's own
HEAVY_PER_THREAD, LIGHT_PER_THREAD = 32, 2
LOADS = ("light", "mid", "heavy")

_CHANGE = re.compile(r"(\d+) -> (\d+)\b")


def _direction(text: str) -> str | None:
    """'grow' or 'shrink' for "... 4 -> 16 ...", "... x -> x * 2", "... x -> max(1, x // 2)"; None if unsaid."""
    if match := _CHANGE.search(text):
        return "grow" if int(match.group(2)) > int(match.group(1)) else "shrink"
    after = text.partition(" -> ")[2]
    return "shrink" if "// " in after else "grow" if "* " in after else None


def family(rewrite: str, rationale: str) -> str:
    """The family of a variant, from its rewrite and rationale (as stored: "block_size: ..." works too)."""
    text = rationale.removeprefix(f"{rewrite}: ")
    if rewrite in ("block_size", "num_warps"):
        way = _direction(text)
        return f"{rewrite} {way}" if way else rewrite
    if rewrite == "vector_width":
        return "vector_width warps" if "num_warps" in text else "vector_width block"
    if rewrite == "autotune":
        return "autotune add" if text.startswith("add ") else "autotune wrap"
    return rewrite


def load_class(compile_info: dict | None) -> str | None:
    """'light', 'mid' or 'heavy' (module doc) from an evaluation's `features.compile`; None when unknown."""
    if not compile_info:
        return None
    if compile_info.get("n_spills"):
        return "heavy"
    blocks = [v for v in (compile_info.get("constexprs") or {}).values() if isinstance(v, int) and v > 0]
    if not blocks:
        return None
    per_thread = math.prod(blocks) / (32 * (compile_info.get("num_warps") or 4))
    return "heavy" if per_thread > HEAVY_PER_THREAD else "light" if per_thread <= LIGHT_PER_THREAD else "mid"


@lru_cache(maxsize=1)
def _counts() -> dict:
    return json.loads(FILE.read_text())


def prior(name: str, load: str | None = None, counts: dict | None = None) -> float:
    """The prior of family `name` for a parent of this load (None: any)."""
    counts = counts or _counts()
    n, won = counts["families"].get(name, (0, 0))
    base = (won + 1) / (n + 2)
    if load is None or f"{name}|{load}" not in counts["by_load"]:
        return base
    n, won = counts["by_load"][f"{name}|{load}"]
    return (won + STRENGTH * base) / (n + STRENGTH)
