"""`kernelband capture`: a real multi-kernel program (examples/tiny_lm) captured in the interpreter, its tasks
evaluated and optimized; the compiled-kernel hook path through Triton's own hook objects; the shapes a task
gets; bad input."""

from __future__ import annotations

import json
import runpy
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from invoke import invoke, process_env

from kernelband.capture import plan, records, sources, wrapper
from kernelband.capture.record import Recorder, WallTimer
from kernelband.tasks import load_task
from kernelband.worker.harness import PyFileHarness

ROOT = Path(__file__).resolve().parents[1]
STEP = ROOT / "examples" / "tiny_lm" / "step.py"
STEPS = 3
# on one xdist worker, so that the module's one capture serves every test that reads it
CAPTURED = pytest.mark.xdist_group("tiny-lm-capture")


def _cli(*args: str, cwd: Path | None = None) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "kernelband", *args], capture_output=True, text=True, timeout=600,
                          env=process_env(), cwd=cwd)


# -- the example program, captured once ------------------------------------------------------------------------
@pytest.fixture(scope="module")
def captured(tmp_path_factory):
    out = tmp_path_factory.mktemp("tasks")
    proc = _cli("capture", "--out", str(out), "--json", "--", "python", str(STEP), "--steps", str(STEPS))
    assert proc.returncode == 0, proc.stderr[-3000:]
    return out, json.loads(proc.stdout), proc.stderr


def _tiny_lm():
    """The example program's own functions (its batches), imported as a module."""
    sys.path.insert(0, str(STEP.parent))
    try:
        return runpy.run_path(str(STEP), run_name="tiny_lm_step")
    finally:
        sys.path.remove(str(STEP.parent))


def _harness(path: Path) -> dict:
    task = load_task(str(path))
    return PyFileHarness(task.harness_source, task.harness_file, module=None, data_dir=task.data_dir).ns


@pytest.mark.slow
@CAPTURED
def test_capture_writes_a_task_per_entry_in_order_of_device_time(captured):
    out, report, _ = captured
    tasks = report["tasks"]
    # every host function that launched a kernel, one task each; lm_head's file imports the local module
    # `gather`, so its task wraps its kernel launch
    assert {t["entry"] for t in tasks} == {"embedding", "add_rmsnorm", "lm_head", "softmax", "token_nll"}
    assert [t["kernel"] for t in tasks if t["entry"] == "lm_head"] == ["matmul_kernel"]
    assert all(t["kernel"] == "" for t in tasks if t["entry"] != "lm_head")
    shares = [t["share"] for t in tasks]
    assert shares == sorted(shares, reverse=True) and 0.99 < sum(shares) <= 1.0 + 1e-9
    kernels = report["kernels"]
    assert [k["time_ms"] for k in kernels] == sorted((k["time_ms"] for k in kernels), reverse=True)
    assert {k["kernel"] for k in kernels} == {"embedding_kernel", "add_kernel", "rmsnorm_kernel", "matmul_kernel",
                                            "softmax_kernel", "nll_kernel"}
    for k in kernels:
        assert k["task"] and k["command"] == f"kernelband optimize {k['task']}"
    assert [k["launches"] for k in kernels if k["kernel"] == "embedding_kernel"] == [2 * STEPS]
    assert report["launches"] == 7 * STEPS and report["overhead"] < 1
    # three batch lengths in three steps: every launch brings a new signature; the program's process took longer
    # than the program, and writing came after it
    assert report["new_launches"] == 7 * STEPS and report["hooks_new_s"] == report["hooks_s"]
    assert report["child_s"] > report["wall_s"] + report["finish_s"] and report["write_s"] > 0
    for t in tasks:
        # three batch lengths seen; sizes added between and around them up to the ten a task needs
        assert (t["seen"], t["added"], t["held_out"]) == (3, 7, 2), t
        path = Path(t["path"]) if Path(t["path"]).is_absolute() else ROOT / t["path"]
        assert path.exists() and path.with_suffix(".data").is_dir()
    assert (out / records.RECORD_FILE).exists()
    embedding = (out / "embedding.py").read_text()
    assert embedding.startswith((STEP.parent / "gather.py").read_text().rstrip())  # the entry's file as written
    assert "Left out: 3 other signatures" in embedding  # the position ids: expanded, another layout


@pytest.mark.slow
@CAPTURED
def test_capture_does_not_change_what_the_program_computes(captured):
    _, _, program_output = captured
    plain = subprocess.run([sys.executable, str(STEP), "--steps", str(STEPS)], capture_output=True, text=True,
                           env={**process_env(), "TRITON_INTERPRET": "1"}, timeout=300)
    assert plain.returncode == 0, plain.stderr
    losses = [line for line in plain.stdout.splitlines() if line.startswith("step ")]
    assert len(losses) == STEPS
    assert [line for line in program_output.splitlines() if line.startswith("step ")] == losses


@pytest.mark.slow
@CAPTURED
def test_each_captured_task_evaluates_ok_on_a_seen_case_with_its_kept_values(captured):
    out, report, _ = captured
    for t in report["tasks"]:
        path = out / Path(t["path"]).name
        res = invoke("eval", str(path), "--shapes", "all", "--no-baselines", "--json")
        assert res.returncode == 0, (path.name, res.stdout[-2000:], res.stderr[-2000:])
        result = json.loads(res.stdout)
        assert result["outcome"] == "ok"
        labels = [s["label"] for s in result["shapes"]]
        # the interpreter's shapes: a seen case (its values read from the task's data in the worker), an
        # added size and a held-out one
        assert any("seen=" in label for label in labels) and len(labels) == 3, labels


@pytest.mark.slow
@CAPTURED
def test_optimize_runs_to_the_end_on_a_captured_task(captured, tmp_path: Path):
    out, _, _ = captured
    proc = _cli("optimize", str(out / "lm_head.py"), "-n", "1", "--seed", "0", "--db", str(tmp_path / "r.db"),
                "--json")
    assert proc.returncode == 0, proc.stderr[-2000:]
    summary = json.loads(proc.stdout)
    assert summary["iterations"] == 1 and summary["best_outcome"] == "ok"


@pytest.mark.slow
@CAPTURED
def test_captured_index_tensors_keep_their_values(captured):
    out, _, _ = captured
    program = _tiny_lm()
    lengths = program["LENGTHS"]
    batches = {lengths[s % len(lengths)]: program["make_batch"](s, 2, lengths[s % len(lengths)], 128, "cpu")
               for s in range(STEPS)}
    embedding = _harness(out / "embedding.py")
    nll = _harness(out / "token_nll.py")
    seen = [s for s in embedding["SHAPES"] if "seen" in s]
    assert sorted(s["ids_1"] for s in seen) == sorted(batches)
    for shape in seen:
        ids, table = embedding["make_inputs"]("cpu", **shape)
        assert torch.equal(ids, batches[shape["ids_1"]][0])  # the token ids the program ran with
        assert table.shape == (128, 64) and table.dtype == torch.float16
    for shape in (s for s in nll["SHAPES"] if "seen" in s):
        probs, targets = nll["make_inputs"]("cpu", **shape)
        assert torch.equal(targets, batches[shape["targets_1"]][1])
        assert probs.shape == (2 * shape["targets_1"], 128)
    # an added size draws its ids within the range the program's ids took
    added = next(s for s in embedding["SHAPES"] if "seen" not in s)
    ids, _ = embedding["make_inputs"]("cpu", **added)
    low = min(int(b[0].min()) for b in batches.values())
    high = max(int(b[0].max()) for b in batches.values())
    assert ids.shape == (2, added["ids_1"]) and low <= int(ids.min()) and int(ids.max()) <= high


@pytest.mark.slow
@CAPTURED
def test_a_seen_case_without_its_kept_values_is_an_error_not_a_silent_draw(captured, tmp_path: Path):
    out, _, _ = captured
    task = tmp_path / "embedding.py"
    task.write_text((out / "embedding.py").read_text())  # the file without its .data folder
    ns = _harness(task)
    seen = next(s for s in ns["SHAPES"] if "seen" in s)
    with pytest.raises(FileNotFoundError, match="keep the task's <task>.data/ folder"):
        ns["make_inputs"]("cpu", **seen)


# -- the compiled-kernel path: Triton's JIT cache hook, launch_metadata and launch enter/exit hooks -------------
def test_the_compiled_path_records_entry_arguments_grid_and_options_through_tritons_hooks(tmp_path: Path):
    import compiled_launch
    import triton

    runtime = triton.knobs.runtime
    user_hook = runtime.jit_cache_hook
    recorder = Recorder(tmp_path, 1 << 20, [], [str(Path(__file__).parent)], interpreter=False, timer=WallTimer())
    recorder.install()
    try:
        x = torch.randn(1000)
        outs = [compiled_launch.scale(x, 2.0), compiled_launch.scale(x, 2.0),
                compiled_launch.scale(torch.randn(3000), 0.5)]
    finally:
        recorder.uninstall()
    entries = recorder.finish()
    assert torch.equal(outs[0], x * 2.0)
    assert compiled_launch.kernel.launch_metadata is None and runtime.jit_cache_hook is user_hook  # all undone
    assert recorder.errors == [] and recorder.launches == 3
    (entry,) = entries
    assert (entry.name, entry.mode, entry.calls, entry.params) == ("scale", "entry", 3, ["x", "factor"])
    assert [(c.calls, c.args[0].tensor.shape, c.args[1].value) for c in entry.cases] == [(2, [1000], 2.0),
                                                                                        (1, [3000], 0.5)]
    assert entry.cases[0].args[0].tensor.saved and (tmp_path / f"{entry.cases[0].id}.pt").exists()
    (kernel,) = entry.kernels
    assert kernel.name == "scale_kernel" and kernel.launches == 3 and kernel.constexpr_params == ["BLOCK"]
    assert [(c.grid, c.constexprs, c.options) for c in kernel.cases] == [
        ([8], {"BLOCK": 128}, {"num_warps": 4, "num_stages": 3}),
        ([24], {"BLOCK": 128}, {"num_warps": 4, "num_stages": 3})]
    assert entry.time_ms > 0 and entry.time_ms == pytest.approx(sum(c.time_ms for c in entry.cases))


# -- the shapes of a task --------------------------------------------------------------------------------------
def _tensor(name: str, shape, dtype="float32", stride=None) -> records.Arg:
    if stride is None:
        stride, step = [], 1
        for n in reversed(shape):
            stride.insert(0, step)
            step *= n
    return records.Arg(name, "tensor", tensor=records.Tensor(dtype, list(shape), list(stride), mean=0.0, std=1.0))


def _case(i: int, rows: int, cols: int = 64, time_ms: float = 1.0) -> records.Case:
    return records.Case(f"c{i}", [_tensor("x", (rows, cols)), _tensor("w", (cols,)),
                                  records.Arg("eps", "float", 1e-6)], calls=1, time_ms=time_ms)


def test_one_seen_size_gets_sizes_around_it_and_odd_held_out_sizes():
    p = plan.make([_case(0, 48)])
    assert p.variables == ["x_0"]
    assert p.templates[0] == ("tensor", ("x_0", 64)) and p.templates[1] == ("tensor", (64,))
    rows = [s.sizes["x_0"] for s in p.shapes]
    assert len(rows) == plan.MIN_SHAPES and rows[0] == 48 and len(set(rows)) == len(rows)
    assert min(rows) < 48 < max(rows)
    assert [s.case is not None for s in p.shapes] == [True] + [False] * 9
    held = [s.sizes["x_0"] for s in p.held_out]
    assert len(held) == 2 and all(n % 2 == 1 and n not in rows for n in held)


def test_more_than_sixteen_seen_sizes_keep_the_most_timed_and_hold_out_the_next():
    cases = [_case(i, 8 * (i + 1), time_ms=float(i + 1)) for i in range(20)]
    p = plan.make(cases)
    assert len(p.shapes) == plan.MAX_SHAPES and all(s.case is not None for s in p.shapes)
    assert [s.case.id for s in p.shapes] == [f"c{i}" for i in range(19, 3, -1)]  # by device time
    assert [s.case.id for s in p.held_out] == ["c3", "c2", "c1", "c0"]


def test_sizes_in_proportion_are_one_variable_and_other_layouts_are_left_out():
    def case(i, seq, time_ms=1.0, ids_stride=None):
        return records.Case(f"c{i}", [_tensor("probs", (2 * seq, 128)),
                                      _tensor("targets", (2, seq), "int64", ids_stride)], 1, time_ms)

    p = plan.make([case(0, 16), case(1, 8), case(2, 12), case(3, 16, 0.5, ids_stride=[0, 1])])
    assert p.variables == ["targets_1"]
    assert p.templates[0] == ("tensor", ("2*targets_1", 128))
    assert "1 other signature" in p.left_out
    sizes = [s.sizes["targets_1"] for s in p.shapes]
    assert sorted(sizes[:3]) == [8, 12, 16] and 10 in sizes and 14 in sizes  # between the seen ones


def test_a_wrapped_launch_computes_its_sizes_strides_and_grid_from_its_tensors():
    def case(i, m):
        a, b, c = _tensor("a_ptr", (m, 64), "float16"), _tensor("b_ptr", (64, 128), "float16"), \
            _tensor("c_ptr", (m, 128), "float16")
        ints = [("M", m), ("N", 128), ("K", 64), ("stride_am", 64), ("stride_ak", 1), ("stride_bk", 128),
                ("stride_bn", 1), ("stride_cm", 128), ("stride_cn", 1)]
        return records.Case(f"c{i}", [a, b, c, *(records.Arg(n, "int", v) for n, v in ints)], 1, 1.0,
                            grid=[-(-m // 32) * 4], constexprs={"BLOCK_M": 32, "BLOCK_N": 32, "BLOCK_K": 32},
                            options={"num_warps": 4})

    kernel = records.Kernel("matmul_kernel", "k.py", 1, [], ["BLOCK_M", "BLOCK_N", "BLOCK_K"],
                            cases=[case(0, 16), case(1, 24), case(2, 32)], launch_as="matmul_kernel")
    axes = wrapper.program_axes("@triton.jit\ndef matmul_kernel(a):\n    pid = tl.program_id(axis=0)\n",
                                "matmul_kernel")
    p = plan.make(wrapper.launch_cases(kernel), lambda chosen, varying: wrapper.derive(chosen, varying, axes))
    names = ["M", "N", "K", "stride_am", "stride_ak", "stride_bk", "stride_bn", "stride_cm", "stride_cn"]
    assert [p.derived[3 + i] for i in range(9)] == [
        "a_ptr.shape[0]", "b_ptr.shape[1]", "a_ptr.shape[1]", "a_ptr.stride(0)", "a_ptr.stride(1)",
        "b_ptr.stride(0)", "b_ptr.stride(1)", "c_ptr.stride(0)", "c_ptr.stride(1)"], names
    # every seen M fits one 32-row tile: the grid that grows with M is the one written
    assert p.derived[12] == "triton.cdiv(a_ptr.shape[0], 32) * triton.cdiv(b_ptr.shape[1], 32)"
    text = wrapper.source(kernel, p.cases[0], p.derived, "lm_head", "step.py imports local module gather")
    assert "def lm_head(a_ptr, b_ptr, c_ptr):" in text and "return a_ptr, b_ptr, c_ptr" in text
    assert "BLOCK_M=32" in text and "num_warps=4" in text


def test_a_file_is_a_module_unless_it_imports_local_modules_or_runs_the_program(tmp_path: Path):
    (tmp_path / "helpers.py").write_text("X = 1\n")
    ok = tmp_path / "ok.py"
    ok.write_text("import torch\nimport missing_optional_module\nN = torch.float16\n\ndef f():\n    pass\n\n"
                  "if __name__ == '__main__':\n    f()\n")
    local = tmp_path / "local.py"
    local.write_text("import helpers\n\ndef f():\n    pass\n")
    runs = tmp_path / "runs.py"
    runs.write_text("def f():\n    return 1\n\nY = f()\n")
    worker, program = [p for p in sys.path if p], [str(tmp_path)]
    assert sources.why_not_module(str(ok), worker, program) is None
    assert sources.why_not_module(str(local), worker, program) == f"{local} imports local module helpers"
    assert "line 4 calls f()" in sources.why_not_module(str(runs), worker, program)


def test_a_task_with_data_beside_it_is_another_task_when_the_data_changes(tmp_path: Path):
    task = tmp_path / "t.py"
    task.write_text((ROOT / "src/kernelband/tasks/examples/vector_add.py").read_text())
    bare = load_task(str(task))
    assert bare.data_dir == "" and bare.wire()["data_dir"] == ""
    (tmp_path / "t.data").mkdir()
    (tmp_path / "t.data" / "c0.pt").write_bytes(b"one")
    first = load_task(str(task))
    (tmp_path / "t.data" / "c0.pt").write_bytes(b"two")
    second = load_task(str(task))
    assert first.data_dir == str((tmp_path / "t.data").resolve())
    assert len({bare.key, first.key, second.key}) == 3


# -- bad input -------------------------------------------------------------------------------------------------
def _one_line_error(res) -> str:
    """KernelBand's own error: the last line of stderr, exit code 2, no traceback of KernelBand's (a failing
    program's own traceback is its output, which capture passes through)."""
    assert res.returncode == 2, (res.stdout, res.stderr)
    lines = res.stderr.strip().splitlines()
    assert lines[-1].startswith("error:") and "kernelband" not in "".join(lines[:-1]), res.stderr
    return lines[-1]


def test_no_program_or_not_a_python_program_is_a_one_line_error(tmp_path: Path):
    assert "give the program after --" in _one_line_error(invoke("capture", "--out", str(tmp_path)))
    assert "not 'ls'" in _one_line_error(invoke("capture", "--", "ls", "-l"))
    assert "does not exist" in _one_line_error(invoke("capture", "--", "python", str(tmp_path / "nope.py")))
    assert "not a size" in _one_line_error(invoke("capture", "--max-bytes", "lots", "--", "python", "x.py"))
    assert not (tmp_path / records.RECORD_FILE).exists()


@pytest.mark.slow
def test_a_failing_program_or_one_that_launches_nothing_is_a_one_line_error(tmp_path: Path):
    failing = tmp_path / "failing.py"
    failing.write_text("raise ValueError('bad batch')\n")
    res = _cli("capture", "--out", str(tmp_path / "a"), "--", "python", str(failing))
    assert "the program failed (exit code 1): ValueError: bad batch" in _one_line_error(res)
    assert f'File "{failing}", line 1' in res.stderr  # the program's own traceback, as python prints it
    quiet = tmp_path / "quiet.py"
    quiet.write_text("import torch\nprint(torch.ones(2).sum())\n")
    line = _one_line_error(_cli("capture", "--out", str(tmp_path / "b"), "--", "python", str(quiet)))
    assert "launched no Triton kernel" in line
    assert not (tmp_path / "a").exists() and not (tmp_path / "b").exists()


# -- on a GPU: the compiled path for real ----------------------------------------------------------------------
@pytest.mark.gpu
def test_gpu_capture_times_kernels_by_cuda_events_and_its_tasks_evaluate_ok(tmp_path: Path):
    """The example program on a GPU: every launch reaches the hooks with its arguments (none unattributed, no
    hook error), device times come from CUDA events, and each task written evaluates `ok` there."""
    env = {**process_env(), "KERNELBAND_MODE": "gpu"}
    env.pop("TRITON_INTERPRET", None)
    proc = subprocess.run([sys.executable, "-m", "kernelband", "capture", "--out", str(tmp_path), "--json", "--",
                           "python", str(STEP), "--steps", "6", "--batch", "4", "--scale", "8", "--dim", "256",
                           "--vocab", "2048"], capture_output=True, text=True, env=env, timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    report = json.loads(proc.stdout)
    assert report["mode"] == "gpu" and report["launches"] == 7 * 6 and report["unattributed"] == 0
    assert not [n for n in report["notes"] if "hooks met" in n], report["notes"]
    assert {t["entry"] for t in report["tasks"]} == {"embedding", "add_rmsnorm", "lm_head", "softmax", "token_nll"}
    assert all(k["time_ms"] > 0 for k in report["kernels"])
    for t in report["tasks"]:
        res = subprocess.run([sys.executable, "-m", "kernelband", "eval", str(tmp_path / Path(t["path"]).name),
                              "--no-baselines", "--no-ncu", "--json"], capture_output=True, text=True, env=env,
                             timeout=600)
        assert json.loads(res.stdout)["outcome"] == "ok", (t["path"], res.stderr[-2000:])
