"""The torch references written for TritonBench tasks (tasks/tritonbench_references.py) agree with each task's
own kernel, shape by shape: on the interpreter on every shape it can run in seconds, on a GPU on every shape."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from kernelband.tasks import tritonbench as tb
from kernelband.tasks.tritonbench_references import REFERENCES

# Run in a process of its own: the interpreter (and the CPU shim for `.cuda()`) must be set before Triton loads.
CHECK = r'''
import json, os, sys, tempfile, torch
mode, names, cap, most = sys.argv[1], sys.argv[2].split(","), int(sys.argv[3]), int(sys.argv[4])
if mode == "interpreter":
    from kernelband.worker import cpu_shim
    cpu_shim.install()
from kernelband.tasks import load_task
from kernelband.tasks.tritonbench_references import REFERENCES
from kernelband.worker.harness import for_task, import_file, tensors_in
device = "cuda" if mode == "gpu" else "cpu"
report = {}
for name in names:
    task = load_task(f"tritonbench:{name}")
    path = os.path.join(tempfile.mkdtemp(), f"kb_ref_{name}.py")
    open(path, "w").write(task.module_source)
    harness = for_task(task.wire(), import_file(f"kb_ref_{name}", path), task.module_source, mode)
    shapes = harness.describe(mode)["shapes"]
    checked, problems = 0, []
    for shape in sorted(shapes, key=lambda s: s["nbytes"])[:most]:
        if shape["nbytes"] > cap:
            continue
        runs = []
        for fn in (harness.call, harness.torch_reference):
            torch.manual_seed(shape["index"])
            inputs = harness.make_inputs(shape["index"], device)
            out = fn(inputs)
            runs.append([t.detach().float().cpu() for t in tensors_in(out) + tensors_in(inputs)])
        kernel, ref = runs
        tight = all(t.dtype != torch.float16 for t in tensors_in(inputs))
        tol = 1e-5 if tight else 2e-3
        if len(kernel) != len(ref):
            problems.append(f"{shape['label']}: {len(kernel)} tensors against {len(ref)}")
        for a, b in zip(kernel, ref):
            if a.shape != b.shape or not torch.allclose(a, b, atol=tol, rtol=tol, equal_nan=True):
                problems.append(f"{shape['label']}: max diff {(a - b).abs().max().item() if a.shape == b.shape else a.shape}")
                break
        checked += 1
    report[name] = {"shapes": len(shapes), "checked": checked, "problems": problems}
print(json.dumps(report))
'''


def _check(mode: str, names: list[str], cap: int, most: int = 1 << 30) -> dict:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}
    if mode == "interpreter":
        env["TRITON_INTERPRET"] = "1"
    done = subprocess.run([sys.executable, "-c", CHECK, mode, ",".join(names), str(cap), str(most)], env=env,
                          capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(done.stdout.strip().splitlines()[-1])


needs_data = pytest.mark.skipif(tb.find() is None, reason="no TritonBench data")


@needs_data
def test_every_reference_is_a_level_1_2_task():
    assert set(REFERENCES) <= set(tb.level12(paper=False))


@needs_data
def test_references_agree_with_the_task_kernels_on_their_smallest_shape():
    report = _check("interpreter", sorted(REFERENCES), 256 << 10, most=1)
    for name, r in report.items():
        assert r["checked"] == 1, f"{name}: no shape small enough to check on the interpreter"
        assert not r["problems"], f"{name}: {r['problems']}"


@pytest.mark.check
@needs_data
def test_references_agree_with_the_task_kernels_on_the_interpreter():
    # every shape of up to 256 KB of inputs (about 3 minutes on a CPU): `pytest -m check`
    report = _check("interpreter", sorted(REFERENCES), 256 << 10)
    for name, r in report.items():
        assert r["checked"] >= 1, f"{name}: no shape small enough to check on the interpreter"
        assert not r["problems"], f"{name}: {r['problems']}"


@pytest.mark.gpu
@needs_data
def test_references_agree_with_the_task_kernels_on_every_shape():
    report = _check("gpu", sorted(REFERENCES), 1 << 40)
    for name, r in report.items():
        assert r["checked"] == r["shapes"], name
        assert not r["problems"], f"{name}: {r['problems']}"


@needs_data
def test_a_wrong_reference_is_caught():
    """The check fails where a reference is wrong: triton_mul2's kernel against x + x + 1e-3."""
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path), "TRITON_INTERPRET": "1"}
    wrong = CHECK.replace("from kernelband.tasks.tritonbench_references import REFERENCES",
                          "from kernelband.tasks import tritonbench_references as R\n"
                          "R.REFERENCES['triton_mul2'] = lambda x: x + x + 1e-3")
    done = subprocess.run([sys.executable, "-c", wrong, "interpreter", "triton_mul2", str(64 << 10), "1"], env=env,
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    assert json.loads(done.stdout.strip().splitlines()[-1])["triton_mul2"]["problems"]
