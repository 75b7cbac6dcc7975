"""The LLM proposer's prompt: named sections, rendered by one function.

A kernel engineer asked to make a kernel faster first asks what inputs it gets, where its time goes and what
was tried already; the sections answer those before the source. Each section is built from typed records
(the parent's `EvalResult`, the task's `ShapeInfo`, the lineage's `Attempt`s), so a test can render the prompt
for a fixed parent and check every section by its title. A section with nothing to say is left out: it would
cost tokens and tell the model nothing.
"""

from __future__ import annotations

import statistics
from dataclasses import dataclass

from kernelband.evaluation.records import PHI_KEYS
from kernelband.search.core import Attempt, Candidate, Context, Objective, Strategy

# What each phi feature means, for the prompt: (unit, meaning).
PHI_MEANINGS = {
    "l2_hit_rate": ("%", "share of L2 requests served from L2; low means little reuse between blocks"),
    "dram_bw_pct": ("%", "DRAM bandwidth used, of the device's peak; high means memory-bound"),
    "sm_throughput_pct": ("%", "SM compute throughput, of the peak; high means compute-bound"),
    "warp_execution_efficiency": ("%", "active threads per executed warp instruction; low means divergence "
                                       "or masked-off lanes"),
    "achieved_occupancy": ("%", "warps resident on an SM, of the maximum; low leaves latency unhidden"),
    "registers_per_thread": ("", "registers per thread; many limit occupancy"),
    "shared_bank_conflicts": ("", "shared-memory bank conflicts, counted; each one serialises an access"),
    "global_load_coalescing_pct": ("%", "bytes used of each global-load sector; low: uncoalesced"),
    "tensor_core_util_pct": ("%", "tensor-core pipe activity, of the peak"),
}
ERROR_LINES = 6  # lines of an earlier attempt's error text shown in the prompt (its end, where the cause is)
ERROR_LINE_CHARS = 200
TRIED = 12  # variants already tried from the parent, listed so that the model does not repeat them

SYSTEM_PROMPT = """\
You are an expert in writing fast Triton GPU kernels. You are given a Python module holding Triton kernels \
and an entry function, and one optimization strategy to apply. Rewrite the module so that the entry \
function gets faster on the GPU while returning the same results as before, for every input shape.

Rules:
- Keep the entry function's name and signature; the module must be complete and importable on its own.
- Compute the results with Triton kernels on the GPU: do not call the reference implementation, do not \
cache results between calls, do not special-case the benchmark's inputs.
- Write only the module: no tests, no benchmarks, no example usage.

Reply format: first one line `Rationale: <what you changed and why it should be faster>`, then exactly one \
```python fenced block holding the complete module. Nothing after the block."""


@dataclass(frozen=True)
class Section:
    title: str
    body: str


# Section titles, named once: the tests look the sections up by them.
TASK = "Task"
INPUTS = "Inputs the kernel must handle (search shapes)"
STRATEGY = "Strategy to apply"
PARENT = "The current kernel"
PERFORMANCE = "Performance of the current kernel"
PROFILE = "Hardware profile of the current kernel"
TRIED_HERE = "Variants already tried from the current kernel: do not repeat them"
LINEAGE = "Tried earlier on this kernel's ancestors, oldest first"
REFLECTION = "Reflection on the last attempts"
SOURCE = "Current kernel source"
REPLY = "Your reply"


def render(sections: list[Section]) -> str:
    """The user message: each section under its `## title`."""
    return "\n\n".join(f"## {s.title}\n{s.body}" for s in sections)


def sections(parent: Candidate, strategy: Strategy, context: Context) -> list[Section]:
    parts = [
        Section(TASK, f"Name: {context.task_name}\nEntry function: {context.entry}"),
        Section(INPUTS, shapes_summary(context)),
        Section(STRATEGY, f"{strategy.name} (targets {strategy.target}): {strategy.description}"),
        Section(PARENT, parent_summary(parent, context)),
        Section(PERFORMANCE, performance_summary(parent)),
        Section(PROFILE, phi_summary(context.phi)),
        Section(TRIED_HERE, tried_summary(context.tried)),
        Section(LINEAGE, history_summary(context.history)),
        Section(REFLECTION, context.reflection.strip()),
        Section(SOURCE, f"```python\n{parent.source.rstrip()}\n```"),
        Section(REPLY, f"One line `Rationale: ...`, then exactly one ```python block with the complete rewritten "
                       f"module, which must define `{context.entry}`."),
    ]
    return [s for s in parts if s.body]


def build_messages(parent: Candidate, strategy: Strategy, context: Context) -> list[dict]:
    return [{"role": "system", "content": SYSTEM_PROMPT},
            {"role": "user", "content": render(sections(parent, strategy, context))}]


# -- the sections' bodies -------------------------------------------------------------------------------------
def shapes_summary(context: Context) -> str:
    """One line per search shape: its parameters and the tensors `make_inputs` builds for it."""
    return "\n".join(f"- {s.label}: {s.inputs}" for s in context.shapes if not s.held_out)


def parent_summary(parent: Candidate, context: Context) -> str:
    """Where the parent came from and how its main kernel is launched, as measured. The task's description is
    the starting kernel's docstring: it is shown for k0 only, since it describes k0's block sizes and warps."""
    if parent.parent is None:
        lines = ["The starting kernel of the task." + (f" Its description: {context.description}"
                                                         if context.description else "")]
    else:
        lines = [f"Candidate {parent.id}, made from candidate {parent.parent} by the strategy {parent.strategy}"
                 + (f": {parent.rationale}" if parent.rationale else ".")]
    launch = parent.result.features.compile if parent.result is not None else {}
    if launch.get("kernel"):
        parts = [f"grid {tuple(launch['grid'])}" if launch.get("grid") else ""]
        parts += [f"{k}={v}" for k, v in (launch.get("constexprs") or {}).items()]
        parts += [f"{k}={launch[k]}" for k in ("num_warps", "num_stages") if launch.get(k) is not None]
        if launch.get("n_regs") is not None:
            parts.append(f"{launch['n_regs']} registers per thread")
        if launch.get("n_spills"):
            parts.append(f"{launch['n_spills']} register spills")
        if launch.get("shared"):
            parts.append(f"{launch['shared']} bytes of shared memory")
        lines.append(f"Its largest launch (grid x warps), as measured: {launch['kernel']}, "
                     + ", ".join(p for p in parts if p) + ".")
    return "\n".join(lines)


def performance_summary(parent: Candidate) -> str:
    """The parent's speedup, its time per search shape against the starting kernel's, and how close each
    shape comes to the speed-of-light bound (the time the task's bytes and FLOPs need at the GPU's peaks)."""
    result = parent.result
    if result is None or not parent.valid:
        return ""
    per_call = parent.objective == Objective.CALL
    if parent.parent is None:  # k0 is the yardstick: its speedup is 1 by definition
        lines = ["Its times are the baseline that every speedup is measured against."]
    elif per_call:
        lines = [f"Speedup over the starting kernel per call: {parent.speedup:.3f}x (the wall time of back-to-back "
                 f"calls, the host's Python and launches included, runtime-weighted over the shapes: what this "
                 f"search makes faster)."]
    else:
        lines = [f"Speedup over the starting kernel: {parent.speedup:.3f}x (runtime-weighted over the shapes)."]
    if result.interpreter:
        lines.append("These times come from the Triton interpreter on a CPU: they rank kernels only roughly.")
    fractions = []
    for s in result.shapes:
        if s.held_out or s.cand_ms is None:
            continue
        line = f"- {s.label}: {s.cand_ms:.4g} ms"
        if s.ref_ms is not None and parent.parent is not None:
            line += f" (the starting kernel: {s.ref_ms:.4g} ms)"
        if per_call and s.call_ms is not None:
            line += f", {s.call_ms:.4g} ms per call" + (f" (the starting kernel: {s.ref_call_ms:.4g} ms)"
                                                       if s.ref_call_ms is not None and parent.parent is not None
                                                       else "")
        if s.sol_fraction is not None:
            line += f", {100 * s.sol_fraction:.0f} % of the speed of light"
            fractions.append(s.sol_fraction)
        lines.append(line)
    if fractions:
        lines.insert(1, f"Fraction of the speed-of-light bound (median over the shapes): "
                        f"{100 * statistics.median(fractions):.0f} %; 100 % is the hardware's limit.")
    return "\n".join(lines)


def phi_summary(phi: dict[str, float | None]) -> str:
    """One line per measured phi feature, with what it means; features nothing measured are left out."""
    lines = []
    for key in (*PHI_KEYS, *(k for k in phi if k not in PHI_KEYS)):
        value = phi.get(key)
        if value is None:
            continue
        unit, meaning = PHI_MEANINGS.get(key, ("", ""))
        shown = f"{value:.1f} %" if unit == "%" else f"{value:g}"
        lines.append(f"- {key}: {shown}" + (f"  ({meaning})" if meaning else ""))
    return "\n".join(lines)


def trim_error(text: str) -> str:
    """The last few lines of an error text, each cut to a readable length."""
    lines = [line.rstrip() for line in text.strip().splitlines() if line.strip()][-ERROR_LINES:]
    cut = ERROR_LINE_CHARS
    return "\n".join(line if len(line) <= cut else line[:cut] + " ..." for line in lines)


def _attempt(attempt: Attempt, with_error: bool) -> str:
    line = f"strategy {attempt.strategy}"
    if attempt.rationale:
        line += f", \"{attempt.rationale}\""
    line += f": {attempt.outcome}"
    if attempt.speedup is not None:
        line += f", speedup {attempt.speedup:.3f}x over the starting kernel"
    if attempt.detail:
        line += f" ({attempt.detail})"
    if with_error and attempt.error:
        line += "\n   error:\n" + "\n".join("     " + e for e in trim_error(attempt.error).splitlines())
    return line


def tried_summary(tried: list[Attempt]) -> str:
    return "\n".join(f"- {_attempt(a, with_error=False)}" for a in tried[-TRIED:])


def history_summary(history: list[Attempt]) -> str:
    return "\n".join(f"{i}. {_attempt(a, with_error=True)}" for i, a in enumerate(history, 1))
