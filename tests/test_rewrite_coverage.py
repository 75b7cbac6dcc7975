"""tools/rewrite_coverage.py: how many variants each built-in rewrite makes of each task's starting kernel, and
why a structural rewrite makes none, grouped by the fact that is missing."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from kernelband.proposers.rewriter.proposer import options
from kernelband.proposers.rewriter.registry import REWRITES
from kernelband.tasks import load_task

TOOL = Path(__file__).resolve().parents[1] / "tools" / "rewrite_coverage.py"
TASKS = ["examples:vector_add", "examples:transpose", "examples:matmul"]
sys.path.insert(0, str(TOOL.parent))
from rewrite_coverage import STRUCTURAL, grouped  # noqa: E402


def coverage(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, str(TOOL), *args], capture_output=True, text=True, timeout=300,
                          env={**os.environ, "PYTHONPATH": str(TOOL.parents[1] / "src")})


def test_the_coverage_json_counts_the_variants_of_each_rewrite_per_task_and_groups_the_refusals():
    done = coverage("--tasks", ",".join(TASKS), "--json")
    assert done.returncode == 0, done.stderr[-2000:]
    found = json.loads(done.stdout)
    expected = {ref: {name: len(options(load_task(ref).module_source, (name,)).variants) for name in REWRITES}
                for ref in TASKS}
    assert found["tasks"] == expected and any(n for row in expected.values() for n in row.values())
    assert set(found["refusals"]) == set(STRUCTURAL) and found["broken"] == 0
    assert found["tl_dot"] == {"kernels": 1, "tile_rewrite": 1}  # the matmul example
    # the three examples' kernels are refused online_softmax for the same fact: one reason, counted per task
    assert found["refusals"]["online_softmax"] == {"K takes no max over a row": 3}


def test_the_coverage_table_has_a_row_per_structural_rewrite_and_its_grouped_refusals():
    done = coverage("--tasks", ",".join(TASKS))
    assert done.returncode == 0, done.stderr[-2000:]
    lines = done.stdout.splitlines()
    assert lines[0].split() == ["rewrite", "tasks", "variants"]
    rows = {line.split()[0]: [int(n) for n in line.split()[1:]] for line in lines[1:1 + len(STRUCTURAL)]}
    assert list(rows) == list(STRUCTURAL)
    assert rows["matmul_configs"][0] == 1
    for name, line in STRUCTURAL.items():
        assert f"{name}: {line}" in lines
    assert lines[-1] == "variants that do not compile: 0"


def test_a_refusal_is_grouped_by_its_fact_not_by_the_names_it_mentions():
    one = "def relu_kernel(x_ptr, BLOCK):\n    pass\n"
    two = "def scale(a_ptr, TILE):\n    pass\n"
    assert grouped("relu_kernel reads BLOCK other than as a tile", one) == "K reads X other than as a tile"
    assert grouped("scale reads TILE other than as a tile", two) == "K reads X other than as a tile"


def test_the_coverage_tools_check_compiles_the_second_generation_too():
    done = coverage("--tasks", "examples:transpose", "--check")
    assert done.returncode == 0, done.stderr[-2000:]
    lines = done.stdout.splitlines()
    assert int(next(ln for ln in lines if ln.startswith("second-generation variants:")).split()[-1]) > 0
    assert lines[-1] == "variants that do not compile: 0"


def test_the_coverage_tool_shows_one_rewrites_variants_as_diffs():
    done = coverage("--show", "examples:vector_add:block_size")
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.startswith("### BLOCK_SIZE 128 -> ") and "\n-    grid = " in done.stdout
    assert "\n+    grid = " in done.stdout


def test_the_coverage_tool_given_an_unknown_rewrite_says_so_in_one_line_and_exits_2():
    done = coverage("--show", "examples:vector_add:nope")
    assert done.returncode == 2
    assert done.stderr.startswith("error: no built-in rewrite is called 'nope'") and done.stderr.count("\n") == 1


def test_every_structural_rewrite_is_a_rewrite():
    assert set(STRUCTURAL) <= set(REWRITES) and len(STRUCTURAL) >= 7
