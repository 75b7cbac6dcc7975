"""tools/rewrite_coverage.py: how many variants each built-in rewrite makes of each task's starting kernel."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from kernelband.proposers.rewriter.proposer import options
from kernelband.proposers.rewriter.registry import REWRITES
from kernelband.tasks import load_task

TOOL = Path(__file__).resolve().parents[1] / "tools" / "rewrite_coverage.py"
TASKS = ["examples:vector_add", "examples:transpose"]


def coverage(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, str(TOOL), *args], capture_output=True, text=True, timeout=300,
                          env={**os.environ, "PYTHONPATH": str(TOOL.parents[1] / "src")})


def test_the_coverage_tool_counts_the_variants_of_each_rewrite_per_task():
    done = coverage("--tasks", ",".join(TASKS))
    assert done.returncode == 0, done.stderr[-2000:]
    lines = done.stdout.splitlines()
    assert lines[0].split() == ["task"] + [name[:14] for name in REWRITES]
    rows = {line.split()[0]: [int(n) for n in line.split()[1:]] for line in lines[1:1 + len(TASKS)]}
    expected = {ref: [len(options(load_task(ref).module_source, (name,)).variants) for name in REWRITES]
                for ref in TASKS}
    assert rows == expected and any(n > 0 for counts in expected.values() for n in counts)
    applies = lines[1 + len(TASKS)]
    assert applies.startswith("tasks with >= 1 variant")
    assert [int(n) for n in applies.split()[-len(REWRITES):]] == [
        sum(counts[i] > 0 for counts in expected.values()) for i in range(len(REWRITES))]
    assert lines[-1] == "variants that do not compile: 0"


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


def test_every_structural_rewrite_has_a_rationale_line_under_the_table():
    sys.path.insert(0, str(TOOL.parent))
    try:
        from rewrite_coverage import STRUCTURAL
    finally:
        sys.path.remove(str(TOOL.parent))
    assert set(STRUCTURAL) <= set(REWRITES) and len(STRUCTURAL) >= 4
    done = coverage("--tasks", "examples:softmax")
    assert done.returncode == 0, done.stderr[-2000:]
    for name, line in STRUCTURAL.items():
        assert f"{name}: {line}" in done.stdout.splitlines()
