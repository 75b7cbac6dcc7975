"""The fixed train/test split (tasks/split.py), as `kernelband tasks --split` and a bench use it."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from kernelband.bench import Bench, BenchConfig, planned_jobs
from kernelband.cli import app as app_module
from kernelband.errors import UserError
from kernelband.proposers.rewriter.proposer import RewriterProposer
from kernelband.store import Store
from kernelband.tasks import example_names, load_task, split
from kernelband.tasks import tritonbench as tb

# The 29 level-1/2 TritonBench-G tasks of the paper's set, by name: the split depends on names only.
LEVEL12 = ['add_example', 'add_value', 'cosine_compute', 'dequantize_rowwise', 'destindex_copy',
           'destindex_copy_kv2', 'dropout_triton', 'f8_conversion_utils', 'flash_decode2_phi', 'fused_activation',
           'geglu_tanh_triton', 'int8_quantization', 'kldiv_compute', 'l2_norm_triton1', 'masked_add_cuda',
           'matmul_kernel', 'matrix_transpose', 'mul_exponent_compensator', 'quantize_global', 'rmsnorm_triton',
           'seeded_dropout', 'sin_kernel', 'softmax_triton1', 'square_matrix', 'triton_argmax', 'triton_mul2',
           'triton_softmax', 'vector_addition', 'vector_addition_custom']
# The train side as the rule gives it today: a change of the rule or its salt must be deliberate.
TRAIN = ['add_value', 'cosine_compute', 'dropout_triton', 'f8_conversion_utils', 'flash_decode2_phi',
         'geglu_tanh_triton', 'kldiv_compute', 'masked_add_cuda', 'mul_exponent_compensator', 'quantize_global',
         'seeded_dropout', 'square_matrix', 'triton_argmax', 'triton_mul2', 'triton_softmax']
needs_tb = pytest.mark.skipif(tb.find() is None, reason="no TritonBench-G data")


def test_the_split_is_stable_and_about_half_and_half():
    refs = [f"tritonbench:{n}" for n in LEVEL12]
    train, test = split.select(refs, "train"), split.select(refs, "test")
    assert [r.split(":")[1] for r in train] == TRAIN
    assert 14 <= len(train) <= 16 and 14 <= len(test) <= 16 and len(train) + len(test) == 29
    assert split.side("triton_softmax") == split.side("tritonbench:triton_softmax") == "train"
    # a name's side does not depend on which other tasks are in the suite
    assert split.select(refs[::-1][:7], "train") == [r for r in refs[::-1][:7] if r in train]
    assert split.train_first(refs) == train + test


def test_the_built_in_examples_and_task_files_are_test_tasks():
    assert example_names()
    assert all(split.side(f"examples:{n}") == "test" for n in example_names())
    assert split.side("/tmp/my_kernel.py") == split.side("softmax") == "test"


def test_an_unknown_split_is_refused():
    with pytest.raises(UserError, match="use train or test"):
        split.select(["tritonbench:add_value"], "validation")


def test_tasks_command_lists_one_side(tmp_path: Path):
    runner = CliRunner()
    result = runner.invoke(app_module.app, ["tasks", "--suite", "examples", "--split", "test", "--json"])
    assert result.exit_code == 0, result.output
    assert {r["name"] for r in json.loads(result.output)} == set(example_names())
    result = runner.invoke(app_module.app, ["tasks", "--suite", "examples", "--split", "train", "--json"])
    assert json.loads(result.output) == []
    result = runner.invoke(app_module.app, ["tasks", "--split", "dev"])
    assert result.exit_code == 2


@needs_tb
def test_tasks_command_splits_the_tritonbench_suite():
    runner = CliRunner()
    result = runner.invoke(app_module.app, ["tasks", "--suite", "tritonbench-g-l12", "--split", "train", "--json"])
    assert result.exit_code == 0, result.output
    assert [r["name"] for r in json.loads(result.output)] == TRAIN


@needs_tb
def test_a_bench_plans_one_side_or_train_tasks_first():
    test_only = planned_jobs(BenchConfig("tritonbench-g-l12", ["random"], [0], split="test"))
    assert len(test_only) == 14 and all(split.side(j.task) == "test" for j in test_only)
    both = [j.task for j in planned_jobs(BenchConfig("tritonbench-g-l12", ["random"], [0]))]
    assert both[:15] == [f"tritonbench:{n}" for n in TRAIN]


class Standin:
    def keep_references(self, tasks: int) -> None:
        pass


@needs_tb
def test_a_bench_ends_every_train_run_before_a_test_run_starts(tmp_path: Path):
    """On two GPUs with two runs each, the test tasks wait for the last train run: they start from all that the
    train tasks taught."""
    store = Store(tmp_path / "b.db")
    names = ["tritonbench:add_value", "tritonbench:add_example", "tritonbench:triton_softmax",
             "tritonbench:sin_kernel", "tritonbench:square_matrix"]
    config = BenchConfig("tritonbench-g-l12", ["greedy"], [0, 1], 2, tasks=names)
    bench_id = store.create_bench(config.suite, config.to_dict())
    for name in names:
        key = load_task(name).key
        for seed in (0, 1):
            store.finish_run(store.create_run(name, key, "greedy", "rewrite", seed, {}, bench_id=bench_id),
                             "done", {})
    events = []
    Bench(store, config, [Standin(), Standin()], RewriterProposer, bench_id=bench_id,
          on_event=events.append).run()
    sides = [split.side(e["task"]) for e in events]
    assert sides == sorted(sides, key=lambda s: s != "train") and sides.count("train") == 6

