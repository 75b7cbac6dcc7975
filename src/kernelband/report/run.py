"""What the report of a single run shows beyond a bench's figures: how the search went, iteration by iteration,
and the kernel handed back shape by shape against the reference.

A bench's per-iteration geomeans and Fast@1 over one task are a step function at 0 % or 100 %: for one run the
report shows the run's own trajectory instead (best so far and each iteration's best, with the arms pulled), and
a per-shape table of the kernel handed back against the reference measured beside it, with the starting
kernel's own measurement against the reference as the noise floor.
"""

from __future__ import annotations

from kernelband.evaluation.records import EvalResult
from kernelband.store import RunRow, Store

INTERPRETER_WARNING = ("interpreter timings: the kernels ran in the Triton interpreter on the CPU, so these "
                       "speedups say nothing about a GPU (run on a GPU machine for real ones)")


def interpreter_run(row: RunRow) -> bool:
    """The run was timed in the Triton interpreter (its summary says so; an unfinished run: its device)."""
    return bool((row.summary or {}).get("interpreter")) or row.device.startswith("Triton interpreter")


def trajectory(store: Store, run_id: int) -> list[dict]:
    """Per iteration: best so far, the iteration's best, the pool, tokens so far, seconds, and its arms."""
    rows = []
    for it in store.iterations(run_id):
        arms = []
        for a in it["arms"]:
            speed = f" {a['speedup']:.3f}x" if a.get("speedup") else ""
            child = f" #{a['child']}" if a.get("child") is not None else ""
            arms.append(f"#{a['candidate']} x {a['strategy']} ->{child} {a['outcome']}{speed}")
        rows.append({"iteration": it["iteration"], "best_speedup": it["best_speedup"],
                     "iteration_speedup": it["iteration_speedup"], "pool_size": it["pool_size"],
                     "tokens": it["tokens"], "seconds": it["seconds"], "arms": "; ".join(arms)})
    return rows


def shape_table(store: Store, run_id: int, best_candidate: int | None, evaluation: str | None = None) -> list[dict]:
    """Per shape: the reference's and the kernel handed back's times in the same evaluation (the one whose figures
    the run reports, `evaluation`, else its final check on the search and held-out shapes where there is one, else
    its search evaluation), by device time and per call, the speedups, the starting kernel against the reference
    on that shape (the noise floor) and both speed-of-light fractions."""
    k0 = store.evaluation(run_id, 0, "search")
    if k0 is None:
        return []
    best: EvalResult | None = k0
    if best_candidate not in (None, 0):
        final = None
        for which in dict.fromkeys([evaluation or "held_out", "held_out"]):
            final = store.evaluation(run_id, best_candidate, which)
            if final is not None and final.shapes:
                break
        best = final if final is not None and final.shapes else store.evaluation(run_id, best_candidate)
    if best is None:
        return []
    k0_shapes = {s.index: s for s in k0.shapes}
    rows = []
    for s in best.shapes:
        base = k0_shapes.get(s.index)
        rows.append({"label": s.label, "held_out": s.held_out, "ref_ms": s.ref_ms, "best_ms": s.cand_ms,
                     "speedup": s.speedup, "correct": s.correct,
                     "k0_self": base.speedup if base is not None else None,
                     "ref_call_ms": s.ref_call_ms, "best_call_ms": s.call_ms,
                     "call_speedup": s.ref_call_ms / s.call_ms if s.ref_call_ms and s.call_ms else None,
                     "eager_ms": s.eager_ms, "compiled_ms": s.compiled_ms,
                     "k0_sol": base.sol_fraction if base is not None else None, "best_sol": s.sol_fraction})
    return rows
