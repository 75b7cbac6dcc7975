"""launch_fusion on a GPU: are its variants right where the interpreter cannot tell, and are they faster?

Parts:

  evaluate  each launch_fusion variant of the tasks it fires on (examples:add_rmsnorm and the TritonBench-G
            tasks: int8_quantization and chunk_gla_fwd independent launches, max_reduction and triton_argmax
            two-stage reductions), evaluated by the project's evaluator against the task's reference: outcome,
            runtime-weighted speedup over the starting kernel, and the speedup per search shape.
  stress    the host functions it rewrites, called on the device with the variant and with the original, over
            many sizes and repeated calls, the outputs compared: the two-stage form's last program (an atomic
            counter) sees every partial only if the memory order holds on real hardware, which the interpreter,
            running one program after another, cannot show; the same for the fusion corpus
            (tests/respellings/fusion.py). Each call's time by triton.testing.do_bench, original and variant.

The interpreter runs both end to end on small sizes (no GPU: `--device cpu`, the CPU shim as the evaluator uses
it). On the GPU machine:

    python benchmarks/launch_fusion_gpu.py --parts evaluate,stress --out $OUT/launch_fusion.json
"""

from __future__ import annotations

import argparse
import importlib
import json
import os
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
TASKS = ["examples:add_rmsnorm", "tritonbench:int8_quantization", "tritonbench:chunk_gla_fwd",
         "tritonbench:max_reduction", "tritonbench:triton_argmax"]
# (task, host function, arguments made from `torch` and `device`, sizes): the calls the stress part makes.
CALLS = {
    "tritonbench:max_reduction": ("max", "[torch.randn(n, device=device)]",
                                  [7, 1000, 4096, 1 << 20, 12345677]),
    "tritonbench:triton_argmax": ("argmax", "[torch.randn(n, device=device)]",
                                  [7, 1000, 4096, 1 << 20, 12345677]),
    "tritonbench:int8_quantization": ("per_block_int8", "[torch.randn(4, n, 64, device=device).half(), "
                                      "torch.randn(4, n, 64, device=device).half()]", [130, 1024, 8192]),
    "tritonbench:chunk_gla_fwd": ("chunk_fwd_intra_gated_gk_fn", "[torch.randn(2, 4, n, 320, device=device), "
                                  "torch.randn(2, 4, n, 320, device=device), "
                                  "-torch.rand(2, 4, n, 320, device=device), 0.1, 64]", [64, 256, 2048]),
}
SMALL = {"tritonbench:max_reduction": [7, 1000], "tritonbench:triton_argmax": [7, 1000],
         "tritonbench:int8_quantization": [130], "tritonbench:chunk_gla_fwd": []}  # no block pointers on a CPU


def variants(source: str) -> list[tuple[str, str]]:
    from kernelband.proposers.rewriter.proposer import options

    found = options(source, ("launch_fusion",))
    return [(v.rationale, v.apply(found.module)) for v in found.variants]


def evaluate(device: str) -> list[dict]:
    from kernelband.evaluation.evaluator import Evaluator
    from kernelband.tasks import load_task

    rows = []
    with Evaluator(mode="gpu" if device == "cuda" else "interpreter", use_ncu=False) as ev:
        for ref in TASKS:
            task = load_task(ref)
            for rationale, source in variants(task.module_source):
                started = time.time()
                try:
                    result = ev.evaluate(task, source, seed=1)
                except Exception as exc:  # the task itself cannot run here (block pointers on a CPU)
                    rows.append({"task": ref, "variant": rationale, "error": str(exc)[:300]})
                    continue
                rows.append({"task": ref, "variant": rationale, "ok": result.ok, "outcome": result.outcome.value,
                             "detail": result.detail[:300], "speedup": result.speedup,
                             "shapes": {s.label: s.speedup for s in result.shapes if not s.held_out},
                             "seconds": round(time.time() - started, 1)})
                print(json.dumps(rows[-1]), flush=True)
    return rows


def _module(folder: str, name: str, source: str):
    with open(os.path.join(folder, f"{name}.py"), "w") as f:
        f.write(source)
    return importlib.import_module(name)


def _flat(out) -> list:
    import torch

    if isinstance(out, torch.Tensor):
        return [out]
    if isinstance(out, tuple | list):
        return [t for o in out for t in _flat(o)]
    return []


def _same(want: list, got: list) -> bool:
    import torch

    return len(want) == len(got) and all(
        w.shape == g.shape and (torch.allclose(w.float(), g.float(), atol=1e-2, rtol=1e-2, equal_nan=True)
                                if w.is_floating_point() else torch.equal(w, g)) for w, g in zip(want, got))


def stress(device: str, repeats: int) -> list[dict]:
    import torch
    import triton.testing

    sys.path.insert(0, str(HERE.parent / "tests"))
    from respellings.fusion import SPELLINGS

    from kernelband.tasks import load_task

    folder = tempfile.mkdtemp()
    sys.path.insert(0, folder)
    cases = []  # (label, original source, variant source, function, [args])
    for ref, (function, make, sizes) in CALLS.items():
        source = load_task(ref).module_source
        for index, (_, new) in enumerate(variants(source)):
            for n in sizes if device == "cuda" else SMALL[ref]:
                cases.append((f"{ref} {function} n={n} #{index}", source, new, function, make, n))
    for spelling in SPELLINGS:
        for index, (_, new) in enumerate(variants(spelling.source)):
            cases.append((f"fusion-{spelling.name} #{index}", spelling.source, new, spelling.entry, None,
                          spelling.inputs))
    rows = []
    for count, (label, source, new, function, make, arg) in enumerate(cases):
        original = getattr(_module(folder, f"kb_original_{count}", source), function)
        variant = getattr(_module(folder, f"kb_variant_{count}", new), function)
        torch.manual_seed(0)
        if make is None:
            scope = {"torch": torch}
            exec(arg, scope)
            args = [a.to(device) if isinstance(a, torch.Tensor) else a for a in scope["args"]]
        else:
            args = eval(make, {"torch": torch, "device": device, "n": arg})
        wrong = sum(not _same(_flat(original(*args)), _flat(variant(*args))) for _ in range(repeats))
        row = {"case": label, "calls": repeats, "wrong": wrong}
        if device == "cuda":
            row["original_ms"] = triton.testing.do_bench(lambda f=original, a=args: f(*a))
            row["variant_ms"] = triton.testing.do_bench(lambda f=variant, a=args: f(*a))
            row["speedup"] = row["original_ms"] / row["variant_ms"]
        rows.append(row)
        print(json.dumps(row), flush=True)
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--parts", default="evaluate,stress")
    parser.add_argument("--device", default=None, help="cuda (default where there is one) or cpu (interpreter)")
    parser.add_argument("--repeats", type=int, default=None, help="calls per stress case (200 on cuda, 2 on cpu)")
    parser.add_argument("--out", default="launch_fusion.json")
    args = parser.parse_args()
    import torch

    device = args.device or ("cuda" if torch.cuda.is_available() else "cpu")
    if device == "cpu":
        os.environ["TRITON_INTERPRET"] = "1"
        from kernelband.worker import cpu_shim

        cpu_shim.install()
    results = {"device": torch.cuda.get_device_name() if device == "cuda" else "cpu (Triton interpreter)"}
    parts = args.parts.split(",")
    if "evaluate" in parts:
        results["evaluate"] = evaluate(device)
    if "stress" in parts:
        results["stress"] = stress(device, args.repeats or (200 if device == "cuda" else 2))
    Path(args.out).write_text(json.dumps(results, indent=1))
    wrong = [r for r in results.get("stress", []) if r["wrong"]]
    print(f"wrote {args.out}; stress cases with a wrong call: {len(wrong)}")


if __name__ == "__main__":
    main()
