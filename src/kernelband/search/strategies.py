"""The strategy catalogue: what a bandit arm may ask a proposer to do to a kernel.

Six built-in strategies, as in the authors' release, each with a description an LLM is prompted with,
the hardware resource it mainly relieves, the built-in rewrites that implement it without an LLM
(`kernelband.proposers.rewriter.registry`), and who writes its proposals under `--proposer hybrid`: the
rewriter for the launch parameters and autotuning it covers well (tiling, vectorization, pipeline), the LLM
for the rest. A user file (TOML or JSON) can add strategies, replace built-in ones by
name, or (`replace_all = true`) stand alone:

    replace_all = false            # optional

    [[strategies]]
    name = "tiling"                # replaces the built-in "tiling"; fields left out keep its values
    description = "..."

    [[strategies]]
    name = "split_k"               # a new strategy: description and target are required
    description = "Split the K loop of a matmul across programs and reduce the partial sums."
    target = "SM"
    rewrites = []                  # names of built-in rewrites; none: only an LLM can apply it
    proposer = "llm"               # under --proposer hybrid: "rewriter" or "llm" writes its proposals
                                   # (default: "rewriter" when it lists rewrites, else "llm")

JSON has the same shape: {"replace_all": false, "strategies": [{"name": ..., ...}]}.
"""

from __future__ import annotations

import json
import re
import sys
from pathlib import Path

from kernelband.errors import UserError, read_text
from kernelband.search.core import RESOURCES, Strategy

BUILTIN: tuple[Strategy, ...] = (
    Strategy(
        "tiling",
        "Retune how much work each program instance does: change the BLOCK_* constexpr tile sizes (powers of "
        "two, with the launch grid recomputed from them, e.g. grid = lambda meta: (triton.cdiv(n, "
        "meta['BLOCK_SIZE']),)), or wrap the kernel in @triton.autotune over a few triton.Config tile sizes, "
        "num_warps and num_stages keyed on the problem sizes. Larger tiles amortise index arithmetic and raise "
        "reuse in registers and shared memory; smaller tiles give more programs and occupancy on small inputs. "
        "Where each program handles one small row, let each program loop over several consecutive rows "
        "(coarsening) so that fewer programs start. For a matmul whose output has fewer tiles than the GPU has "
        "SMs and whose K is long, split K over a third grid axis and sum the partial tiles; for one with many "
        "tiles, a persistent grid of one program per SM that loops over the tiles. Where rows are too few for the "
        "SMs, split each row over several programs that sum their segments, then combine the partial sums.",
        "SM", ("block_size", "autotune", "coarsen", "inductor_configs", "matmul_configs", "split_k", "persistent_tiles",
               "split_rows"),
        proposer="rewriter"),
    Strategy(
        "vectorization",
        "Make every thread move more contiguous data per instruction so that loads and stores become 128-bit "
        "vector accesses: raise the elements per thread (BLOCK / (32 * num_warps)) of 1-D kernels, keep offsets "
        "of the form pid * BLOCK + tl.arange(0, BLOCK) contiguous along the fastest-varying dimension, and state "
        "alignment with tl.multiple_of / tl.max_contiguous where it holds; where strides or sizes are multiples "
        "of 8 but not 16 (which Triton does not specialize on), launch a copy of the kernel that states it. "
        "Avoid per-element index division and gathers on the contiguous axis. Where a load or store is masked by "
        "data the kernel loaded (mask = (offs < n) & ~flag), mask it by the bounds alone and apply the data "
        "term with tl.where, so that the mask no longer breaks the vector.",
        "DRAM", ("vector_width", "contiguity_hints", "divisibility_hints", "data_masks"), proposer="rewriter"),
    Strategy(
        "fusion",
        "Cut global-memory round trips by doing more work per byte loaded: merge consecutive kernels or passes "
        "into one (e.g. keep a row in registers and compute its max, sum and normalised output in a single "
        "pass instead of re-reading it; fold bias, activation and dtype casts into the producing kernel). "
        "Intermediates stay in registers or shared memory instead of being written to and re-read from DRAM. "
        "An output the host allocates zeroed that the kernel then writes whole needs no zero fill: allocate it "
        "empty.",
        "DRAM", ("fused_absmax", "single_pass", "online_softmax", "launch_fusion", "zero_fill")),
    Strategy(
        "pipeline",
        "Hide memory latency behind computation: for kernels with a loop over K or over row chunks, raise "
        "num_stages (software pipelining of the tl.load calls in the loop; also tl.range(..., num_stages=...)) "
        "and retune num_warps so that enough warps are in flight. Issue the loads of the next iteration before "
        "the arithmetic of the current one and keep loop-carried accumulators in registers.",
        "SM", ("num_stages", "num_warps"), proposer="rewriter"),
    Strategy(
        "reordering",
        "Change the order in which program instances visit tiles so that programs running at the same time "
        "share data in L2: for 2-D tiled launches (matmul-like), map the linear program id to (pid_m, pid_n) "
        "in groups of GROUP_M row tiles per sweep over the column tiles (the L2 swizzle of Triton's matmul "
        "tutorial), or reorder loops so that consecutive iterations touch neighbouring memory. The result must "
        "stay identical; only the visiting order changes.",
        "L2", ("grouped_ordering",)),
    Strategy(
        "access_layout",
        "Improve how the kernel touches memory: make the contiguous dimension the fastest-varying index of every "
        "tl.load/tl.store (coalesced accesses; transpose tiles in registers with tl.trans rather than striding "
        "through global memory), use tl.make_block_ptr for 2-D tiles, and give the caches hints: "
        "eviction_policy='evict_first' for data read once, 'evict_last' for data read again, "
        "cache_modifier='.cg' for loads that should bypass L1. Where each program touches one short row, "
        "give each program a 2-D tile of several consecutive rows instead, so that one program makes "
        "one wide access where several made narrow ones.",
        "L2", ("rows", "cache_hints")),
)

FIELDS = ("name", "description", "target", "rewrites", "proposer")
PROPOSERS = ("rewriter", "llm")
NAME = re.compile(r"^[A-Za-z][A-Za-z0-9_-]*$")


def builtin_strategies() -> list[Strategy]:
    return list(BUILTIN)


def load_strategies(path: str | Path | None) -> list[Strategy]:
    """The built-in strategies, changed by the user's file when one is given."""
    if path is None:
        return builtin_strategies()
    path = Path(path)
    data = _read(path)
    replace_all, entries = _top_level(path, data)
    builtin = {s.name: s for s in BUILTIN}
    strategies: dict[str, Strategy] = {} if replace_all else dict(builtin)
    seen: set[str] = set()
    for index, entry in enumerate(entries, 1):
        strategy = _strategy(path, index, entry, None if replace_all else builtin.get(entry.get("name")))
        if strategy.name in seen:
            raise UserError(f"{path}: strategy {strategy.name!r} is defined twice; keep one")
        seen.add(strategy.name)
        strategies[strategy.name] = strategy
    if not strategies:
        raise UserError(f"{path}: replace_all = true with no strategies leaves nothing to search with; "
                        "add at least one [[strategies]] entry")
    return list(strategies.values())


def _read(path: Path) -> dict:
    text = read_text(path, "strategy file")
    if path.suffix == ".json":
        try:
            data = json.loads(text)
        except ValueError as exc:
            raise UserError(f"{path} is not valid JSON: {exc}") from exc
    elif path.suffix == ".toml":
        data = _toml(path, text)
    else:
        raise UserError(f"strategy file {path} must end in .toml or .json")
    if not isinstance(data, dict):
        raise UserError(f"{path}: the top level must be a table/object with a 'strategies' list")
    return data


def _toml(path: Path, text: str) -> dict:
    if sys.version_info >= (3, 11):
        import tomllib
    else:
        try:
            import tomli as tomllib
        except ImportError as exc:
            raise UserError(f"reading {path} needs Python 3.11+ or the tomli package; or write it as JSON") from exc
    try:
        return tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise UserError(f"{path} is not valid TOML: {exc}") from exc


def _top_level(path: Path, data: dict) -> tuple[bool, list[dict]]:
    unknown = sorted(set(data) - {"replace_all", "strategies"})
    if unknown:
        raise UserError(f"{path}: unknown top-level key {unknown[0]!r}; use 'replace_all' and 'strategies'")
    replace_all = data.get("replace_all", False)
    if not isinstance(replace_all, bool):
        raise UserError(f"{path}: replace_all must be true or false")
    entries = data.get("strategies", [])
    if not isinstance(entries, list) or not all(isinstance(e, dict) for e in entries):
        raise UserError(f"{path}: 'strategies' must be a list of tables ([[strategies]] in TOML)")
    return replace_all, entries


def _strategy(path: Path, index: int, entry: dict, base: Strategy | None) -> Strategy:
    from kernelband.proposers.rewriter.registry import REWRITES

    where = f"{path}: strategy #{index}"
    unknown = sorted(set(entry) - set(FIELDS))
    if unknown:
        raise UserError(f"{where}: unknown field {unknown[0]!r}; a strategy has {', '.join(FIELDS)}")
    name = entry.get("name")
    if not isinstance(name, str) or not NAME.match(name):
        raise UserError(f"{where}: 'name' must be a word of letters, digits, _ or - (got {name!r})")
    where = f"{path}: strategy {name!r}"
    fields = {"description": base.description, "target": base.target, "rewrites": list(base.rewrites)} if base else {}
    fields.update({k: v for k, v in entry.items() if k != "name"})
    description, target = fields.get("description"), fields.get("target")
    rewrites = fields.get("rewrites", [])
    # Left out: the built-in's routing while rewrites remain, else the rewriter exactly when there are rewrites.
    default = base.proposer if base is not None and rewrites else ("rewriter" if rewrites else "llm")
    proposer = entry["proposer"] if "proposer" in entry else default
    if not isinstance(description, str) or not description.strip():
        raise UserError(f"{where}: needs a 'description' (the text an LLM is prompted with)")
    if target not in RESOURCES:
        raise UserError(f"{where}: 'target' must be one of {', '.join(RESOURCES)} (got {target!r})")
    if not isinstance(rewrites, list) or not all(isinstance(r, str) for r in rewrites):
        raise UserError(f"{where}: 'rewrites' must be a list of rewrite names")
    unknown_rewrites = [r for r in rewrites if r not in REWRITES]
    if unknown_rewrites:
        raise UserError(f"{where}: unknown rewrite {unknown_rewrites[0]!r}; the built-in ones are "
                        f"{', '.join(REWRITES)}")
    if proposer not in PROPOSERS:
        raise UserError(f"{where}: 'proposer' must be \"rewriter\" or \"llm\" (got {proposer!r})")
    if proposer == "rewriter" and not rewrites:
        raise UserError(f"{where}: proposer = \"rewriter\" needs built-in 'rewrites' to apply; list some, or "
                        "use proposer = \"llm\"")
    return Strategy(name, description.strip(), target, tuple(rewrites), proposer)
