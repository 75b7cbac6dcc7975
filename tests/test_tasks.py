"""Loading tasks: KernelBand's own task files, the built-in examples and TritonBench-G."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from kernelband.errors import TaskError, UserError
from kernelband.evaluation.shapes import INTERPRETER_MAX_BYTES
from kernelband.tasks import example_names, load_task, pyfile
from kernelband.tasks import tritonbench as tb
from kernelband.worker.harness import MIN_SEARCH_SHAPES, PyFileHarness

ROOT = Path(__file__).resolve().parents[1]
# KERNELBAND_TRITONBENCH, else shared/tritonbench/... next to or above the checkout
TB_JSON = tb.find() or Path("<none>")
TB_SKIP = tb.missing_reason() or f"{TB_JSON} is not TritonBench-G's JSON file"
needs_tb = pytest.mark.skipif(not TB_JSON.is_file(), reason=TB_SKIP)

KERNEL = '''"""A tiny task for tests."""
import torch
import triton
import triton.language as tl


@triton.jit
def add_kernel(x_ptr, y_ptr, out_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    tl.store(out_ptr + offs, tl.load(x_ptr + offs, mask=mask) + tl.load(y_ptr + offs, mask=mask), mask=mask)


def add(x, y):
    out = torch.empty_like(x)
    add_kernel[(triton.cdiv(x.numel(), 256),)](x, y, out, x.numel(), BLOCK=256)
    return out
'''

DEFINITION = {
    "ENTRY": 'ENTRY = "add"',
    "SHAPES": "SHAPES = [dict(n=1000 * k + 1) for k in range(1, 11)]",
    "HELD_OUT": "HELD_OUT = [dict(n=777)]",
    "INTERPRETER_SHAPES": "INTERPRETER_SHAPES = [dict(n=300), dict(n=500)]",
    "make_inputs": "def make_inputs(device, n):\n    return torch.randn(n, device=device), torch.randn(n, device=device)",
}


def task_file(tmp_path: Path, marker: bool = True, drop: tuple[str, ...] = (), **replace: str) -> Path:
    parts = {**DEFINITION, **replace}
    body = "\n".join(v for k, v in parts.items() if k not in drop)
    text = KERNEL + ("\n\n" + pyfile.MARKER_LINE + "\n" if marker else "\n") + "import torch\n\n" + body + "\n"
    path = tmp_path / "mytask.py"
    path.write_text(text)
    return path


# -- KernelBand task files --------------------------------------------------------------------------
def test_task_file_splits_at_the_marker(tmp_path):
    path = task_file(tmp_path)
    task = load_task(str(path))
    assert (task.kind, task.name, task.ref) == ("pyfile", "mytask", str(path))
    assert task.module_source == KERNEL + "\n\n"
    assert "def add(" in task.module_source and "ENTRY" not in task.module_source
    assert 'ENTRY = "add"' in task.harness_source and "add_kernel" not in task.harness_source
    assert task.description == "A tiny task for tests."
    # The harness keeps the file's line numbers, so tracebacks point at the right line.
    file_lines = path.read_text().splitlines()
    harness_lines = task.harness_source.splitlines()
    line = next(i for i, t in enumerate(file_lines) if t.startswith("ENTRY"))
    assert harness_lines[line] == file_lines[line]


def test_marker_may_be_written_with_fewer_dashes():
    module, harness, line = pyfile.split("x = 1\n# --- kernelband task ---\nENTRY = 'f'\n", "t.py")
    assert module == "x = 1\n" and harness.strip() == "ENTRY = 'f'" and line == 2


def test_a_candidate_file_may_be_a_whole_task_file(tmp_path):
    text = task_file(tmp_path).read_text()
    assert pyfile.module_part(text) == KERNEL + "\n\n"
    assert pyfile.module_part(KERNEL) == KERNEL


def test_task_file_without_the_marker_is_a_user_error(tmp_path):
    with pytest.raises(UserError, match="no '# -+ kernelband task -+' line separates"):
        load_task(str(task_file(tmp_path, marker=False)))


@pytest.mark.parametrize("missing", ["ENTRY", "SHAPES", "HELD_OUT", "make_inputs"])
def test_task_definition_without_a_required_name_is_a_user_error(tmp_path, missing):
    with pytest.raises(UserError, match=f"the task definition lacks {missing} "):
        load_task(str(task_file(tmp_path, drop=(missing,))))


def test_required_names_may_be_bound_inside_blocks(tmp_path):
    shapes = "if True:\n    SHAPES = [dict(n=1000 * k + 1) for k in range(1, 11)]"
    assert load_task(str(task_file(tmp_path, SHAPES=shapes))).kind == "pyfile"


def test_task_definition_with_a_syntax_error_names_the_line(tmp_path):
    path = task_file(tmp_path, HELD_OUT="HELD_OUT = [dict(n=777)")
    with pytest.raises(UserError, match=r"mytask\.py:\d+: the task definition is not valid Python"):
        load_task(str(path))


def test_missing_task_file_is_a_user_error(tmp_path):
    with pytest.raises(UserError, match="does not exist"):
        load_task(str(tmp_path / "nope.py"))


@pytest.mark.parametrize("ref", ["no_such_task", "examples:no_such_example", "tritonbench:no_such_task"])
def test_unknown_task_is_a_user_error(ref):
    if ref.startswith("tritonbench:") and not TB_JSON.is_file():
        pytest.skip(TB_SKIP)
    with pytest.raises(UserError) as info:
        load_task(ref, str(TB_JSON))
    assert "\n" not in str(info.value) and "no_such" in str(info.value)


def _harness(path: Path) -> PyFileHarness:
    task = load_task(str(path))
    return PyFileHarness(task.harness_source, task.harness_file, module=None)


def test_a_task_needs_ten_search_shapes_and_a_held_out_one(tmp_path):
    assert MIN_SEARCH_SHAPES == 10
    _harness(task_file(tmp_path))  # 10 search shapes, 1 held out: fine
    with pytest.raises(ValueError, match="SHAPES lists 9 search shapes; a task needs at least 10"):
        _harness(task_file(tmp_path, SHAPES="SHAPES = [dict(n=1000 * k + 1) for k in range(1, 10)]"))
    with pytest.raises(ValueError, match="HELD_OUT lists no shapes"):
        _harness(task_file(tmp_path, HELD_OUT="HELD_OUT = []"))


def test_too_few_shapes_reaches_the_user_as_a_one_line_task_error(tmp_path, evaluator):
    task = load_task(str(task_file(tmp_path, SHAPES="SHAPES = [dict(n=4096), dict(n=5000)]")))
    with pytest.raises(TaskError) as info:
        evaluator.info(task)
    assert isinstance(info.value, UserError)
    message = str(info.value)
    assert "\n" not in message
    assert "the task definition fails to load" in message and "SHAPES lists 2 search shapes" in message


def test_default_tolerances_are_the_papers(tmp_path, evaluator):
    info = evaluator.info(load_task(str(task_file(tmp_path))))
    assert (info.atol, info.rtol) == (1e-3, 1e-1)
    assert info.entry == "add"
    # In the interpreter the CPU-sized shapes replace SHAPES; HELD_OUT stays.
    assert [s.label for s in info.search] == ["n=300", "n=500"]
    assert [s.label for s in info.held_out] == ["n=777"]


def test_tolerances_can_be_set_by_the_task(tmp_path):
    h = _harness(task_file(tmp_path, ENTRY='ENTRY = "add"\nATOL, RTOL = 1e-5, 1e-3'))
    assert (h.atol, h.rtol) == (1e-5, 1e-3)


# -- built-in examples ----------------------------------------------------------------------------
def test_there_are_eight_examples():
    assert len(example_names()) == 9
    assert example_names() == sorted(example_names())


@pytest.mark.parametrize("name", example_names())
def test_every_example_loads_with_enough_shapes(name):
    task = load_task(f"examples:{name}")
    assert load_task(name) == task  # the bare name works too
    assert (task.ref, task.kind, task.name) == (f"examples:{name}", "pyfile", name)
    assert "@triton.jit" in task.module_source and task.description
    h = PyFileHarness(task.harness_source, task.harness_file, module=None)
    assert (h.atol, h.rtol) == (1e-3, 1e-1)
    gpu = h.describe("gpu")  # shapes on the meta device: no memory, no time
    search = [s for s in gpu["shapes"] if not s["held_out"]]
    held = [s for s in gpu["shapes"] if s["held_out"]]
    assert len(search) >= 10 and len(held) >= 1
    assert len({s["label"] for s in gpu["shapes"]}) == len(gpu["shapes"])  # no shape twice
    assert all(s["nbytes"] > 0 for s in gpu["shapes"])
    interp = h.describe("interpreter")  # CPU-sized shapes replace them under the interpreter
    assert interp["interpreter_shapes_given"]
    assert all(s["nbytes"] <= INTERPRETER_MAX_BYTES for s in interp["shapes"])
    assert any(s["held_out"] for s in interp["shapes"])


# -- TritonBench-G ------------------------------------------------------------------------------
@needs_tb
def test_all_184_tasks_load_from_the_json():
    entries = tb.entries(TB_JSON)
    raw = json.loads(TB_JSON.read_text())["tasks"]
    assert len(entries) == len(raw) == 184
    for name in entries:
        task = load_task(f"tritonbench:{name}", str(TB_JSON))
        assert (task.kind, task.name, task.ref) == ("tritonbench", name, f"tritonbench:{name}")
        assert task.module_source.strip() and task.harness_source.strip()


@needs_tb
def test_instance_code_is_split_at_the_line_of_146_hashes():
    raw = {t["name"]: t for t in json.loads(TB_JSON.read_text())["tasks"]}
    split = 0
    for name, t in raw.items():
        task = tb.to_task(tb.entries(TB_JSON)[name])
        lines = t["instance_py"].splitlines()
        if "#" * 146 in (ln.strip() for ln in lines):
            split += 1
            at = [ln.strip() for ln in lines].index("#" * 146)
            assert task.module_source.splitlines() == lines[:at]
            assert (task.tests_source or "").splitlines() == lines[at + 1:]
        else:
            assert task.module_source == t["instance_py"] and task.tests_source is None
    assert split == len(raw)  # every instance of the release has its tests below the line


def test_split_needs_exactly_146_hashes():
    text = "kernel = 1\n" + "#" * 146 + "\ntest = 2\n"
    assert tb.split_instance(text) == ("kernel = 1\n", "test = 2\n")
    for n in (145, 147):
        other = text.replace("#" * 146, "#" * n)
        assert tb.split_instance(other) == (other, "")


@needs_tb
def test_level_1_2_list_is_29_tasks_without_sin_computation():
    raw = json.loads(TB_JSON.read_text())["tasks"]
    level12 = {t["name"] for t in raw if str(t["difficulty"]) in ("1", "2")}
    assert "sin_computation" in level12
    paper = tb.level12(TB_JSON)
    assert len(paper) == 29
    assert set(paper) == level12 - {"sin_computation"}
    assert set(tb.level12(TB_JSON, paper=False)) == level12
    assert all(tb.load(n, TB_JSON).difficulty in (1, 2) for n in paper)


@needs_tb
def test_extra_loop_values_belong_to_level_1_2_tasks():
    level12 = set(tb.level12(TB_JSON))
    assert set(tb.EXTRA_LOOP_VALUES) <= level12
    for name, values in tb.EXTRA_LOOP_VALUES.items():
        assert load_task(f"tritonbench:{name}", str(TB_JSON)).extra_loop_values == values
    assert load_task("tritonbench:add_value", str(TB_JSON)).extra_loop_values == ()


# A TritonBench task's harness as a worker builds it, in a script run with CUDA mapped to the CPU.
TB_HARNESS = textwrap.dedent("""
    import json, sys, types
    from kernelband.worker import cpu_shim
    cpu_shim.install()
    from kernelband.tasks import tritonbench as tb
    from kernelband.worker import harness

    def tb_harness(name):
        task = tb.load(name, sys.argv[1])
        module = types.ModuleType("kb_" + name)
        sys.modules[module.__name__] = module
        exec(compile(task.module_source, "<" + name + ">", "exec"), module.__dict__)
        return harness.for_task(task.wire(), module, task.module_source, "gpu")
""")


def run_tb_script(body: str, *args: str) -> dict:
    """`TB_HARNESS` + `body` in a fresh interpreter-mode Python; the JSON of its last line."""
    env = {**os.environ, "TRITON_INTERPRET": "1", "CUDA_VISIBLE_DEVICES": ""}
    proc = subprocess.run([sys.executable, "-c", TB_HARNESS + textwrap.dedent(body), str(TB_JSON), *args],
                          capture_output=True, text=True, env=env, timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return json.loads(proc.stdout.strip().splitlines()[-1])


ENUMERATE = """
    # Enumerate the shapes as a worker does: the harness on the meta device.
    out = {}
    for name in tb.level12(sys.argv[1]):
        h = tb_harness(name)
        shapes = h.describe("interpreter")["shapes"]
        search = [s for s in shapes if not s["held_out"]]
        out[name] = {"search": len(search), "added": sum(s["added"] for s in search),
                     "held_out": len(shapes) - len(search)}
    print(json.dumps(out))
"""


@pytest.fixture(scope="module")
def tb_shape_counts():
    if not TB_JSON.is_file():
        pytest.skip(TB_SKIP)
    return run_tb_script(ENUMERATE)


@needs_tb
def test_every_level_1_2_task_has_ten_search_shapes(tb_shape_counts):
    assert set(tb_shape_counts) == set(tb.level12(TB_JSON))
    short = {n: c["search"] for n, c in tb_shape_counts.items() if c["search"] < 10}
    assert not short, f"fewer than 10 search shapes: {short}"
    assert all(c["held_out"] >= 1 for c in tb_shape_counts.values())


@needs_tb
def test_added_loop_values_are_what_lifts_short_scripts_to_ten_shapes(tb_shape_counts):
    for name, values in tb.EXTRA_LOOP_VALUES.items():
        counts = tb_shape_counts[name]
        assert counts["added"] == len(values), name
    # Without the added values these scripts have fewer than 10 shapes; with them, 10 or more.
    lifted = {n for n, c in tb_shape_counts.items() if c["search"] - c["added"] < 10}
    assert lifted == set(tb.EXTRA_LOOP_VALUES) - {"matmul_kernel"}
    assert len(lifted) == 5
    # Tasks without added values keep exactly their script's shapes.
    assert all(c["added"] == 0 for n, c in tb_shape_counts.items() if n not in tb.EXTRA_LOOP_VALUES)


@needs_tb
def test_input_fixes_apply_to_the_performance_script():
    for name, fixes in tb.INPUT_FIXES.items():
        raw = tb.entries(TB_JSON)[name].perf
        task = load_task(f"tritonbench:{name}", str(TB_JSON))
        for old, new in fixes:
            assert old in raw, f"{name}: the fix no longer matches the script"
            assert old not in task.harness_source and new in task.harness_source


@needs_tb
def test_a_checkout_with_tritonbenchs_layout_loads_the_same_task(tmp_path):
    entry = tb.entries(TB_JSON)["add_value"]
    data = tmp_path / "data" / "TritonBench_G_v1"
    perf = tmp_path / "performance_metrics" / "perf_G" / "golden_metrics"
    data.mkdir(parents=True)
    perf.mkdir(parents=True)
    (data / "add_value.py").write_text(entry.instance)
    (perf / "add_value_perf.py").write_text(entry.perf)
    (data / "orphan.py").write_text("x = 1\n")  # an instance without a performance script is not a task
    (tmp_path / "data" / "TritonBench_G_v1.json").write_text(json.dumps([{"file": "add_value.py",
                                                                           "difficulty": "2"}]))
    from_checkout = load_task("tritonbench:add_value", str(tmp_path))
    from_json = load_task("tritonbench:add_value", str(TB_JSON))
    assert from_checkout == from_json
    assert from_checkout.difficulty == 2
    assert set(tb.entries(tmp_path)) == {"add_value"}
    with pytest.raises(UserError, match="no TritonBench-G task named 'orphan'"):
        load_task("tritonbench:orphan", str(tmp_path))


def test_a_directory_without_tritonbenchs_layout_is_a_user_error(tmp_path):
    with pytest.raises(UserError, match="neither tritonbench_g_tasks.json nor a TritonBench layout"):
        tb.entries(tmp_path)
    with pytest.raises(UserError, match="TritonBench data not found"):
        tb.entries(tmp_path / "missing")


def test_the_tritonbench_location_comes_from_the_environment(tmp_path, monkeypatch):
    monkeypatch.setenv("KERNELBAND_TRITONBENCH", str(tmp_path / "elsewhere.json"))
    with pytest.raises(UserError, match="KERNELBAND_TRITONBENCH"):
        tb.locate()
    bad = tmp_path / "bad.json"
    bad.write_text('{"tasks": [{"nom": 1}]}')
    monkeypatch.setenv("KERNELBAND_TRITONBENCH", str(bad))
    with pytest.raises(UserError, match="is not a TritonBench-G task file"):
        load_task("tritonbench:add_value")


@needs_tb
def test_every_interpreter_size_reduction_finds_its_text_in_the_script():
    """A reduction whose text the script no longer has would silently leave the GPU size in place."""
    for name, fixes in tb.INTERPRETER_FIXES.items():
        task = load_task(f"tritonbench:{name}", str(TB_JSON))
        assert task.interpreter_fixes == fixes
        for old, new in fixes:
            assert task.harness_source.count(old) >= 1, (name, old)
            assert new not in task.harness_source, (name, new)


def test_a_tasks_key_is_its_code_not_the_interpreters_size_reductions():
    """The key names a task in the run store: a stored GPU sweep must keep matching its tasks when the
    interpreter's reductions (not applied on a GPU) change, and any change to the kernel or harness must
    give a new key."""
    import dataclasses

    task = load_task("examples:vector_add")
    assert dataclasses.replace(task, interpreter_fixes=(("a", "b"),)).key == task.key
    assert dataclasses.replace(task, module_source=task.module_source + "\n").key != task.key
    assert dataclasses.replace(task, harness_source=task.harness_source + "\n").key != task.key


KEEPS_NOTHING = """
    # A worker lives on between requests: once a shape's inputs are dropped, nothing of the harness keeps them.
    import gc, weakref
    from kernelband.worker.harness import tensors_in
    out = {}
    for name in sys.argv[2].split(","):
        h = tb_harness(name)
        shapes = h.describe("interpreter")["shapes"]
        index = min(shapes, key=lambda s: s["nbytes"])["index"]
        inputs = h.make_inputs(index, "cpu")
        refs = [weakref.ref(t) for t in tensors_in(inputs)]
        del inputs
        gc.collect()
        out[name] = {"tensors": len(refs), "alive": sum(r() is not None for r in refs)}
    print(json.dumps(out))
"""


@needs_tb
def test_a_shapes_inputs_are_not_kept_by_the_harness():
    # In a reference worker kept for many candidates, kept inputs filled an 80 GB GPU with 29 tasks' references.
    counts = run_tb_script(KEEPS_NOTHING, "add_value,softmax_triton1,matrix_transpose")
    assert all(c["tensors"] >= 1 for c in counts.values()), counts
    assert all(c["alive"] == 0 for c in counts.values()), counts


def test_the_reason_for_missing_tritonbench_data_says_what_to_set(monkeypatch, tmp_path):
    """A skipped test's reason, as `pytest -rs` shows it: what is missing and how to provide it."""
    monkeypatch.setenv("KERNELBAND_TRITONBENCH", str(tmp_path / "nowhere.json"))
    reason = tb.missing_reason()
    assert reason == f"TritonBench data not found at {tmp_path / 'nowhere.json'} (set by KERNELBAND_TRITONBENCH)"
    data = tmp_path / "tritonbench_g_tasks.json"
    data.write_text('{"tasks": []}')
    assert tb.missing_reason(data) is None


def test_pytest_shows_the_reasons_of_skipped_tests():
    """The README says each skipped test says why: pytest prints the reasons only with -rs."""
    import tomllib

    config = tomllib.loads((Path(__file__).parents[1] / "pyproject.toml").read_text())
    assert "-rs" in config["tool"]["pytest"]["ini_options"]["addopts"].split()


def test_a_script_that_moves_its_own_tensors_to_the_gpu_builds_its_other_entries_on_meta():
    """fast_rms_layernorm's module makes its weight with `torch.ones(n).cuda()`: for the entries not wanted,
    built on meta, the `.cuda()` keeps the tensor there (a meta tensor has no data to copy), and outside the
    build `.cuda()` is torch's own again."""
    import torch

    from kernelband.worker.tb_compat import Performance_Metrics

    class Script(Performance_Metrics):
        def get_input_tensors(self):
            self.input_tensors = []
            for size in (4, 8, 16):
                self.input_tensors.append((torch.ones(size).cuda(), torch.rand(2, size)))

    cuda = torch.Tensor.cuda
    entries = Script("moves_its_own").build(None, "meta")
    assert [e[0].is_meta and e[0].shape[0] for e in entries] == [4, 8, 16]
    assert torch.Tensor.cuda is cuda
