"""The LLM prompt, rendered for a fixed parent: every named section says what it should, and only that."""

from __future__ import annotations

from kernelband.evaluation.records import EvalResult, Features, Outcome, ShapeResult
from kernelband.proposers import prompt
from kernelband.search.core import Attempt, Candidate, Context, Strategy
from kernelband.tasks.model import ShapeInfo

K0_DESCRIPTION = "Element-wise add of two vectors, deliberately naive: 128-element blocks, one warp."
PARENT_SOURCE = "def add(x, y):\n    return x  # BLOCK_SIZE=256, num_warps=4\n"
STRATEGY = Strategy("fusion", "Merge passes so that each byte is loaded once.", "DRAM")


def parent(**kw) -> Candidate:
    shapes = [ShapeResult(0, "n=4096", False, correct=True, ref_ms=0.020, cand_ms=0.010, speedup=2.0,
                          sol_fraction=0.25),
              ShapeResult(1, "n=1048576", False, correct=True, ref_ms=0.400, cand_ms=0.250, speedup=1.6,
                          sol_fraction=0.61),
              ShapeResult(2, "n=999983", True, correct=True, ref_ms=0.3, cand_ms=0.2)]
    launch = {"kernel": "add_kernel", "grid": [4096], "constexprs": {"BLOCK_SIZE": 256}, "num_warps": 4,
              "num_stages": 3, "n_regs": 26, "n_spills": 0, "shared": 0}
    result = EvalResult("vector_add", Outcome.OK, speedup=1.625, shapes=shapes, features=Features(compile=launch))
    fields = dict(id=5, source=PARENT_SOURCE, parent=2, strategy="tiling", iteration=3, result=result,
                  rationale="block_size: BLOCK_SIZE 128 -> 256 at the add_kernel launch in add")
    return Candidate(**{**fields, **kw})


def context(**kw) -> Context:
    shapes = (ShapeInfo(0, "n=4096", False, "float32[4096] float32[4096]", 32768),
              ShapeInfo(1, "n=1048576", False, "float32[1048576] float32[1048576]", 8388608),
              ShapeInfo(2, "n=999983", True, "float32[999983] float32[999983]", 7999864))
    fields = dict(task_name="vector_add", entry="add", description=K0_DESCRIPTION,
                  phi={"l2_hit_rate": None, "dram_bw_pct": None}, shapes=shapes,
                  tried=[Attempt("fusion", "wrong_output", "shape n=4096 differs", "", None,
                                 "load x and y once into one 2-D tile")],
                  history=[Attempt("tiling", "ok", "", "", 1.625, "block_size: BLOCK_SIZE 128 -> 256")])
    return Context(**{**fields, **kw})


def rendered(cand: Candidate, ctx: Context) -> dict[str, str]:
    """The user message split back into {title: body}, through the same renderer the proposer uses."""
    [system, user] = prompt.build_messages(cand, STRATEGY, ctx)
    assert system["content"] == prompt.SYSTEM_PROMPT
    out = {}
    for block in user["content"].split("\n\n## "):
        title, _, body = block.removeprefix("## ").partition("\n")
        out[title] = body
    return out


def test_every_section_for_a_generated_parent():
    s = rendered(parent(), context())
    assert list(s) == [prompt.TASK, prompt.INPUTS, prompt.STRATEGY, prompt.PARENT, prompt.PERFORMANCE,
                       prompt.TRIED_HERE, prompt.LINEAGE, prompt.SOURCE, prompt.REPLY]
    assert s[prompt.TASK] == "Name: vector_add\nEntry function: add"
    # the shapes and dtypes the kernel must handle; the held-out shape stays unseen
    assert s[prompt.INPUTS] == ("- n=4096: float32[4096] float32[4096]\n"
                                "- n=1048576: float32[1048576] float32[1048576]")
    assert s[prompt.STRATEGY].startswith("fusion (targets DRAM): Merge passes")
    # the parent described as it is, not as k0's docstring says k0 is
    assert K0_DESCRIPTION not in "\n".join(s.values()) and "one warp" not in "\n".join(s.values())
    assert s[prompt.PARENT].startswith("Candidate 5, made from candidate 2 by the strategy tiling: block_size:")
    assert "add_kernel, grid (4096,), BLOCK_SIZE=256, num_warps=4, num_stages=3, 26 registers per thread" \
        in s[prompt.PARENT]
    # where the time goes: speedup, per-shape times against k0's, the speed-of-light fractions
    perf = s[prompt.PERFORMANCE].splitlines()
    assert perf[0] == "Speedup over the starting kernel: 1.625x (runtime-weighted over the shapes)."
    assert perf[1].startswith("Fraction of the speed-of-light bound (median over the shapes): 43 %")
    assert perf[2:] == ["- n=4096: 0.01 ms (the starting kernel: 0.02 ms), 25 % of the speed of light",
                        "- n=1048576: 0.25 ms (the starting kernel: 0.4 ms), 61 % of the speed of light"]
    # what was tried from this parent, by its rationale, so that the model does not repeat it
    assert s[prompt.TRIED_HERE] == ('- strategy fusion, "load x and y once into one 2-D tile": wrong_output '
                                    "(shape n=4096 differs)")
    assert s[prompt.LINEAGE].startswith('1. strategy tiling, "block_size: BLOCK_SIZE 128 -> 256": ok, speedup 1.625x')
    assert s[prompt.SOURCE] == f"```python\n{PARENT_SOURCE.rstrip()}\n```"
    assert "`add`" in s[prompt.REPLY]


def test_no_profile_section_when_nothing_was_measured_and_the_measured_lines_when_some_was():
    assert prompt.PROFILE not in rendered(parent(), context())
    s = rendered(parent(), context(phi={"l2_hit_rate": None, "dram_bw_pct": 41.25}))
    assert s[prompt.PROFILE].startswith("- dram_bw_pct: 41.2 %") and "l2_hit_rate" not in s[prompt.PROFILE]
    assert "not measured" not in s[prompt.PROFILE]


def test_the_starting_kernel_is_described_by_the_task_description():
    k0 = parent(id=0, parent=None, strategy=None, rationale="the starting kernel")
    s = rendered(k0, context(tried=[], history=[]))
    assert s[prompt.PARENT].startswith(f"The starting kernel of the task. Its description: {K0_DESCRIPTION}")
    perf = s[prompt.PERFORMANCE]  # k0 is not compared with itself
    assert "Speedup" not in perf and "(the starting kernel:" not in perf and "- n=4096: 0.01 ms, 25 %" in perf
    assert prompt.TRIED_HERE not in s and prompt.LINEAGE not in s


def test_a_search_made_faster_per_call_tells_the_model_so_with_the_per_call_times():
    from dataclasses import replace

    from kernelband.search.core import Objective

    cand = parent(objective=Objective.CALL)
    cand.result = replace(cand.result, call_speedup=0.8, shapes=[
        replace(s, ref_call_ms=0.030, call_ms=0.045) for s in cand.result.shapes])
    perf = rendered(cand, context())[prompt.PERFORMANCE].splitlines()
    assert perf[0].startswith("Speedup over the starting kernel per call: 0.800x (the wall time of back-to-back")
    assert perf[2] == ("- n=4096: 0.01 ms (the starting kernel: 0.02 ms), 0.045 ms per call (the starting kernel: "
                       "0.03 ms), 25 % of the speed of light")
