"""The built-in rewrites make correct kernels: each variant evaluated against its task's starting kernel in the
Triton interpreter (correctness on the interpreter's shapes and the task's own tests).

In the default run, one variant of each rewrite, on the cheapest task it applies to. Every variant of every
rewrite, on every example and on the TritonBench-G level-1/2 tasks, takes an hour and more on two cores: it is
the `check` marker's, deselected by default like the GPU tests:

    python -m pytest -m check tests/test_rewrite_correctness.py [-k coarsen]

A variant of a config-set rewrite (EACH_CONFIG) is evaluated once per config, with that config alone: the
interpreter's autotuner checks the outputs of only the config it picks.
"""

from __future__ import annotations

import libcst as cst
import pytest

from kernelband.proposers.rewriter.proposer import options
from kernelband.proposers.rewriter.registry import REWRITES
from kernelband.tasks import example_names, load_task
from kernelband.tasks import tritonbench as tb

SEED = 3
# The examples, cheapest in the interpreter first (dropout's tl.rand is the slowest by far).
BY_COST = ["transpose", "vector_add", "dequantize", "rmsnorm", "add_rmsnorm", "softmax", "matmul", "layernorm", "dropout"]
TOO_SLOW = {"matmul_kernel"}  # minutes per evaluation in the interpreter
EACH_CONFIG = {"inductor_configs", "matmul_configs"}  # rewrites whose configs are far from the launch's values


def tritonbench_refs() -> list[str]:
    path = tb.find()
    if path is None:
        return []
    return [f"tritonbench:{name}" for name in tb.level12(path) if name not in TOO_SLOW]


def one_config_each(source: str) -> list[tuple[str, str]]:
    """(label, source) once per config index: every list of `triton.Config(...)` calls in the source (an autotune
    decorator's, or a list it reads by name) keeps only its config at that index, or its last where it has
    fewer; the source itself where it has none. A variant with two autotuned kernels (a twin beside the
    original) keeps one config in each, and a config written over several lines stays whole."""
    module = cst.parse_module(source)

    def config_lists(node: cst.CSTNode) -> list[cst.List]:
        found: list[cst.List] = []

        class Lists(cst.CSTVisitor):
            def visit_List(self, node: cst.List) -> None:
                if node.elements and all(isinstance(e.value, cst.Call)
                                         and module.code_for_node(e.value.func).endswith("triton.Config")
                                         for e in node.elements):
                    found.append(node)
        node.visit(Lists())
        return found

    lists = config_lists(module)
    if not lists:
        return [("", source)]

    class KeepOne(cst.CSTTransformer):
        def __init__(self, index: int) -> None:
            self.index = index

        def leave_List(self, original: cst.List, updated: cst.List) -> cst.List:
            if not any(original is each for each in lists):
                return updated
            kept = updated.elements[min(self.index, len(updated.elements) - 1)]
            return updated.with_changes(elements=[kept.with_changes(comma=cst.MaybeSentinel.DEFAULT)])

    first = lists[0]
    return [(f" [{' '.join(module.code_for_node(first.elements[min(i, len(first.elements) - 1)].value).split())}]",
             module.visit(KeepOne(i)).code)
            for i in range(max(len(each.elements) for each in lists))]


def wrong_variants(evaluator, ref: str, rewrite: str, first_only: bool = False,
                   each_config: bool = False) -> tuple[int, list[str]]:
    """How many variants of `ref`'s starting kernel `rewrite` makes (at most one with `first_only`) were
    evaluated, and a line for each that is not correct; with `each_config`, each config of an autotuned
    variant on its own."""
    task = load_task(ref)
    found = options(task.module_source, (rewrite,))
    variants = found.variants[:1] if first_only else found.variants
    wrong = []
    for variant in variants:
        source = variant.apply(found.module)
        for label, each in one_config_each(source) if each_config else [("", source)]:
            result = evaluator.evaluate(task, each, seed=SEED)
            if not result.ok:
                wrong.append(f"{ref}: {variant.rationale[:70]}{label}: {result.outcome.value} "
                             f"{result.detail[:200]} {result.error[-300:]!r}")
    return len(variants), wrong


def test_each_config_of_an_autotuned_variant_is_split_out_alone():
    found = options(load_task("examples:vector_add").module_source, ("inductor_configs",))
    source = found.variants[0].apply(found.module)
    split = one_config_each(source)
    total = source.count("triton.Config(")
    assert total > 1 and len(split) == total
    assert all(each.count("triton.Config(") == 1 and label.strip("[] ") in each for label, each in split)
    assert len({each for _, each in split}) == total
    assert one_config_each("x = 1\n") == [("", "x = 1\n")]


def test_each_config_index_is_kept_in_every_config_list_and_a_config_over_lines_stays_whole():
    source = (
        "import triton\n"
        "A = [triton.Config({'B': 16}), triton.Config(\n    {'B': 32},\n    num_warps=4)]\n"
        "@triton.autotune(configs=[triton.Config({'C': 1}), triton.Config({'C': 2}), triton.Config({'C': 4})],"
        " key=[])\n"
        "def f():\n    pass\n")
    split = one_config_each(source)
    assert len(split) == 3
    for (_, each), (b, c) in zip(split, [(16, 1), (32, 2), (32, 4)]):
        compile(each, "<split>", "exec")
        assert each.count("triton.Config(") == 2 and f"{{'B': {b}}}" in each and f"{{'C': {c}}}" in each
    assert split[1][0] == " [triton.Config( {'B': 32}, num_warps=4)]"


def test_the_cost_order_names_every_example():
    assert sorted(BY_COST) == sorted(example_names())


@pytest.mark.slow
@pytest.mark.parametrize("rewrite", sorted(REWRITES))
def test_a_variant_of_each_rewrite_is_correct_in_the_interpreter(evaluator, rewrite):
    refs = [f"examples:{name}" for name in BY_COST] + tritonbench_refs()
    ref = next((r for r in refs if options(load_task(r).module_source, (rewrite,)).variants), None)
    if ref is None:
        pytest.skip(f"{rewrite} applies to no example{'' if tb.find() else ' (and no TritonBench-G data)'}")
    evaluated, wrong = wrong_variants(evaluator, ref, rewrite, first_only=True)
    assert evaluated == 1 and not wrong, wrong


@pytest.fixture(scope="module")
def patient_evaluator():
    """Limits for the TritonBench tasks' larger interpreter shapes and own tests."""
    from kernelband.evaluation.evaluator import Evaluator, Limits

    with Evaluator(mode="interpreter", warm=2, limits=Limits(load_s=120, run_s=300, time_s=300),
                   memory_limit=6 << 30) as ev:
        yield ev


@pytest.mark.slow
@pytest.mark.check
@pytest.mark.parametrize("rewrite", sorted(REWRITES))
def test_every_variant_of_a_rewrite_is_correct_on_the_examples(patient_evaluator, rewrite):
    made, wrong = 0, []
    for name in BY_COST:
        evaluated, failed = wrong_variants(patient_evaluator, f"examples:{name}", rewrite,
                                           each_config=rewrite in EACH_CONFIG)
        made, wrong = made + evaluated, wrong + failed
    if not made:
        pytest.skip(f"{rewrite} applies to no example")
    assert not wrong, f"{len(wrong)} of {made} variants of {rewrite} wrong:\n" + "\n".join(wrong)


@pytest.mark.slow
@pytest.mark.check
@pytest.mark.parametrize("rewrite", sorted(REWRITES))
def test_every_variant_of_a_rewrite_is_correct_on_the_tritonbench_tasks(patient_evaluator, rewrite):
    refs = tritonbench_refs()
    if not refs:
        pytest.skip("no TritonBench-G data: set KERNELBAND_TRITONBENCH or put it under shared/tritonbench/")
    made, wrong = 0, []
    for ref in refs:
        evaluated, failed = wrong_variants(patient_evaluator, ref, rewrite, each_config=rewrite in EACH_CONFIG)
        made, wrong = made + evaluated, wrong + failed
    if not made:
        pytest.skip(f"{rewrite} applies to no TritonBench-G level-1/2 task")
    assert not wrong, f"{len(wrong)} of {made} variants of {rewrite} wrong:\n" + "\n".join(wrong)
