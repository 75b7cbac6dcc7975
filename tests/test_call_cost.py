"""benchmarks/call_cost.py: the per-call wall time of the starting kernel, of a handed-back module and of that
module's kernels launched directly (its figures come from a GPU; here its plumbing, on the interpreter)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from interpreted import interpreted

from kernelband.store import Store

ROOT = Path(__file__).resolve().parents[1]
SCRIPT = ROOT / "benchmarks" / "call_cost.py"


def _handed_back(add_rmsnorm_source: str) -> str:
    from kernelband.proposers.rewriter.proposer import options
    from kernelband.search.launch_cache import cache_launch_values

    found = options(add_rmsnorm_source, ("rows",))
    return cache_launch_values(found.variants[0].apply(found.module)).source


def test_the_direct_launches_are_the_modules_own_with_their_grids_worked_out():
    from kernelband.tasks import load_task

    source = _handed_back(load_task("examples:add_rmsnorm").module_source)
    interpreted(source, f"""
import sys
sys.path.insert(0, {str(ROOT / "benchmarks")!r})
import call_cost
x, y, w = torch.randn(11, 700).half(), torch.randn(11, 700).half(), torch.randn(700).half()
call = lambda: module.add_rmsnorm(x, y, w)
direct = call_cost.launched_directly(call, (x, y, w), "cpu")
theirs, ours = call_cost.record_launches(call), call_cost.record_launches(direct)
assert [fn for fn, *_ in ours] == [fn for fn, *_ in theirs]  # the same kernels
assert [kw for _, _, kw, _ in ours] == [kw for _, _, kw, _ in theirs]
assert [tuple(grid) for *_, grid in ours] == [(3,), (11,)]  # numbers, worked out once
# the inputs are the call's own; the outputs and the intermediate are allocated anew
assert ours[0][1][0] is x and ours[0][1][2] is not theirs[0][1][2]
assert ours[0][1][2] is ours[1][1][1]  # the intermediate the second launch reads is the one the first wrote
""")


ALLOCATING = """
import torch
import triton
import triton.language as tl


@triton.jit
def k(x_ptr, a_ptr, b_ptr, c_ptr, n, BLOCK: tl.constexpr):
    pass


def entry(x):
    a = torch.empty_like(x)
    b = torch.zeros((x.shape[0], 2), dtype=torch.float16, device=x.device)
    c = x.new_empty(x.shape).t()  # a view of a tensor allocated in another shape: same data, strides of its own
    d = torch.empty(5)  # read by no launch: not the kernels' to allocate
    k[(1,)](x, a, b, c, x.numel(), BLOCK=16)
    return a, b, c, d
"""


def test_the_direct_side_allocates_the_outputs_with_the_modules_own_calls():
    """A direct side that allocated every output with `torch.empty_strided` would price best.py's
    `torch.empty_like(x)` (or a `torch.zeros`, a fill on the GPU) at what another call costs."""
    interpreted(ALLOCATING, f"""
import sys
sys.path.insert(0, {str(ROOT / "benchmarks")!r})
import call_cost
x = torch.randn(4, 4)
call = lambda: module.entry(x)
direct = call_cost.launched_directly(call, (x,), "cpu")
made = [(step[1].__name__, [a for a in step[2] if not isinstance(a, torch.Tensor)]) for step in direct.steps]
assert made == [("empty_like", []), ("zeros", [(4, 2)]), ("new_empty", [torch.Size([4, 4])])], made
[(_, args, _, _)] = call_cost.record_launches(direct)
[(_, theirs, _, _)] = call_cost.record_launches(call)
assert args[0] is x and all(a is not b for a, b in zip(args[1:4], theirs[1:4]))  # made anew per call
assert args[2].dtype == torch.float16 and not args[2].any()  # zeros, as the module's
# after the recording, torch and its tensors allocate as before
assert all(type(getattr(torch, n)).__name__ == "builtin_function_or_method" for n in call_cost.ALLOCATORS)
assert not set(call_cost.TENSOR_ALLOCATORS) & set(vars(torch.Tensor))  # inherited from its C base, as before
""")


def test_the_script_measures_each_examples_smallest_and_largest_shape_in_a_fresh_process(tmp_path: Path):
    from kernelband.tasks import load_task

    task = load_task("examples:add_rmsnorm")
    # best.py was written on the machine that ran the search, which is gone: the database keeps the module
    best = tmp_path / "elsewhere" / "run-1" / "best.py"
    store = Store(tmp_path / "runs.db")
    run = store.create_run(task.ref, task.key, "greedy", "rewrite", 0, {"preset": "default"})
    store.finish_run(run, "done", {"best_path": str(best), "best_candidate": 3, "handback": {
        "form": "as_is", "cached": ["add_rmsnorm_launch(rows, cols) -> block, ROWS, grid"]}},
        handed_back=_handed_back(task.module_source))
    store.close()
    out = tmp_path / "call_cost.json"
    env = {**os.environ, "KERNELBAND_MODE": "interpreter"}
    proc = subprocess.run([sys.executable, str(SCRIPT), "--db", str(tmp_path / "runs.db"), "--rounds", "2",
                           "--calls", "1", "--out", str(out)], capture_output=True, text=True, timeout=600, env=env)
    assert proc.returncode in (0, 1), proc.stderr[-2000:]  # interpreter times: the verdict means nothing here
    data = json.loads(out.read_text())
    assert data["devices"] == ["Triton interpreter (CPU)"]
    [measured] = data["runs"]
    assert measured["task"] == "examples:add_rmsnorm" and "error" not in measured
    assert [r["label"] for r in measured["rows"]] == ["rows=8, cols=256", "rows=11, cols=700"]  # smallest, largest
    for row in measured["rows"]:
        assert all(row[f"{v}_us"] > 0 and len(row["times"][v]["rounds"]) == 2 for v in ("start", "handed_back",
                                                                                        "direct"))
        assert row["over_direct_us"] == row["handed_back_us"] - row["direct_us"]
    assert "| add_rmsnorm | rows=8, cols=256 |" in proc.stdout and "launch values cached" in proc.stdout
    bad = subprocess.run([sys.executable, str(SCRIPT), "--db", str(tmp_path / "missing.db")], capture_output=True,
                         text=True, timeout=60, env=env)
    assert bad.returncode == 2 and bad.stderr.startswith("error: no run database")


def test_make_hands_the_modules_back_through_kernelband_bench_and_passes_no_ncu(monkeypatch, tmp_path: Path):
    import importlib.util

    spec = importlib.util.spec_from_file_location("call_cost", SCRIPT)
    call_cost = importlib.util.module_from_spec(spec)
    monkeypatch.setitem(sys.modules, "call_cost", call_cost)  # its dataclasses look their module up
    spec.loader.exec_module(call_cost)
    commands = []
    monkeypatch.setattr(call_cost.subprocess, "run",
                        lambda command, timeout: commands.append(command) or subprocess.CompletedProcess(command, 0))
    monkeypatch.setattr(sys, "argv", ["call_cost.py", "--make", "--no-ncu", "--examples", "softmax", "--db",
                                      str(tmp_path / "none.db")])
    assert call_cost.main() == 2  # the bench made nothing here, so there is no database to read
    [command] = commands
    bench = command[command.index("bench"):]
    assert bench[bench.index("--tasks") + 1] == "softmax" and "--no-ncu" in bench and "--no-baselines" in bench
    assert bench[bench.index("--db") + 1] == str(tmp_path / "none.db")
    # a database carried from an earlier session: only the examples it has no finished run of are made
    carried = tmp_path / "carried.db"
    carried.touch()
    monkeypatch.setattr(call_cost, "handed_back", lambda db, bench, examples: [{"task": "examples:softmax", "file": ""}])
    monkeypatch.setattr(sys, "argv", ["call_cost.py", "--make", "--examples", "softmax,transpose", "--db",
                                      str(carried)])
    call_cost.main()
    bench = commands[-1][commands[-1].index("bench"):]
    assert bench[bench.index("--tasks") + 1] == "transpose" and len(commands) == 2
