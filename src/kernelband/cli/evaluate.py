"""`kernelband eval` (one candidate: correctness, timing, features) and `kernelband calibrate` (the GPU's peaks)."""

from __future__ import annotations

import json
from pathlib import Path

import typer
from rich.table import Table

from kernelband.cli.app import Command, app, fail, flag, fmt, out, versus
from kernelband.errors import UserError


@app.command("eval", cls=Command)
def eval_cmd(
    task: str = typer.Argument(..., help="examples:<name>, tritonbench:<name> or a task file"),
    candidate: Path | None = typer.Option(None, "--candidate", "-c", help="module to evaluate (default: the "
                                          "task's own starting kernel)"),
    preset: str = typer.Option("default", "--preset", help="timing protocol: default, paper or tritonbench"),
    shapes: str = typer.Option("search", "--shapes", help="search, held-out or all"),
    seed: int | None = typer.Option(None, "--seed", help="input seed (default: a fresh random one)"),
    as_json: bool = flag("--json", "print one JSON object"),
    interpreter: bool = flag("--interpreter", "use the Triton interpreter even with a GPU"),
    tritonbench: str | None = typer.Option(None, "--tritonbench", help="TritonBench data (json or checkout)"),
    no_ncu: bool = flag("--no-ncu", "do not profile with Nsight Compute"),
    no_baselines: bool = flag("--no-baselines", "do not time torch eager and torch.compile (no compile wait)"),
) -> None:
    """Evaluate a candidate kernel: correctness on every shape, timing against the reference, features."""
    from kernelband import api

    try:
        result = api.evaluate(task, candidate, preset=preset, shapes=shapes, seed=seed, interpreter=interpreter,
                              use_ncu=False if no_ncu else None, tritonbench=tritonbench,
                              baselines=not no_baselines)
    except UserError as exc:
        fail(str(exc))
    if as_json:
        print(json.dumps(result.to_dict(), default=str))
    else:
        _print_result(result)
    raise typer.Exit(0 if result.ok else 1)


def _print_result(result) -> None:
    unit = "interpreter ms" if result.interpreter else "ms"
    table = Table(title=f"{result.task}  ({result.device}, preset {result.preset})", title_justify="left")
    for col in ("shape", "ok", f"ref {unit}", f"cand {unit}", "speedup", f"ref call {unit}", f"cand call {unit}",
                "eager ms", "compile ms", "GB/s", "TFLOP/s", "SOL"):
        table.add_column(col, justify="left" if col == "shape" else "right")
    for s in result.shapes:
        ok = {True: "[green]yes[/]", False: "[red]no[/]", None: "-"}[s.correct]
        label = s.label + (" (held out)" if s.held_out else "")
        table.add_row(label[:60], ok, fmt(s.ref_ms, ".4g"), fmt(s.cand_ms, ".4g"), fmt(s.speedup, ".3f"),
                      fmt(s.ref_call_ms, ".4g"), fmt(s.call_ms, ".4g"), fmt(s.eager_ms, ".4g"),
                      fmt(s.compiled_ms, ".4g"), fmt(s.gbps, ".1f"), fmt(s.tflops, ".2f"),
                      "-" if s.sol_fraction is None else f"{100 * s.sol_fraction:.0f}%")
    out.print(table)
    colour = "green" if result.ok else "red"
    line = f"outcome [bold {colour}]{result.outcome.value}[/]"
    if result.speedup is not None:
        line += f"   speedup {result.speedup:.3f}x (runtime-weighted)"
    if result.held_out_speedup is not None:
        line += f"   held-out {result.held_out_speedup:.3f}x"
    if result.call_speedup is not None:
        line += f"   per call {result.call_speedup:.3f}x"
        line += "" if result.held_out_call_speedup is None else f" (held-out {result.held_out_call_speedup:.3f}x)"
    out.print(line)
    out.print("speedup: device time, the GPU kept ahead of the CPU; per call: the wall time of back-to-back calls, "
              "host and device, as an eager program pays it", highlight=False, soft_wrap=True)
    out.print(baseline_line(result), highlight=False, soft_wrap=True)
    if result.detail:
        out.print(result.detail, highlight=False, soft_wrap=True)
    if result.interpreter:
        out.print("[yellow]Timings are Triton-interpreter timings on the CPU: they say nothing about GPU speed.[/]")
    if result.ok:  # a candidate that failed never reached the stage that measures features
        for line in feature_lines(result.features, result.interpreter):
            out.print(line, highlight=False, soft_wrap=True)
    for note in result.notes:
        out.print(f"note: {note}", highlight=False, soft_wrap=True)
    out.print(f"sandbox: {result.sandbox}   seed: {result.seed}   "
              f"{result.seconds.get('total', 0):.1f} s", highlight=False)


def baseline_line(result) -> str:
    """The speedups over torch eager and torch.compile and the SOL medians, each with why it is missing."""
    return (f"{versus('vs eager', result.speedup_vs_eager, result.vs_eager_skipped)}   "
            f"{versus('vs compile', result.speedup_vs_compile, result.vs_compile_skipped)}   "
            f"SOL median {fmt(result.sol_median, '.2f')} (shapes >= 16 MB: {fmt(result.sol_median_large, '.2f')})")


def feature_lines(features, interpreter: bool) -> list[str]:
    """ρ and φ as the bandit sees them, each value with where it came from (`features.sources`), and how many
    kernels Nsight Compute's profile covered."""
    lines = []
    for name, values in (("ρ", features.rho), ("φ", features.phi)):
        prefix = "phi." if name == "φ" else ""
        shown = [f"{k} {v:.4g} ({features.sources.get(prefix + k, '?')})" for k, v in values.items() if v is not None]
        why = ("the Triton interpreter has no hardware counters" if interpreter
               else "no Nsight Compute profile; the notes say why")
        lines.append(f"{name}: " + (", ".join(shown) if shown else f"none measured ({why})"))
    if features.profile:
        kernels = int(features.profile.get("kernels") or 0)
        lines.append(f"ncu profile: {kernels} kernel{'' if kernels == 1 else 's'}, "
                     f"{features.profile.get('duration_ns', 0) / 1000:.1f} µs in all (φ weights them by duration)")
    return lines


@app.command("calibrate", cls=Command)
def calibrate_cmd(
    force: bool = flag("--force", "measure again even if cached"),
    as_json: bool = flag("--json"),
) -> None:
    """Measure this GPU's peak copy bandwidth, matmul throughput and launch floor (cached per GPU name)."""
    from kernelband.evaluation import sol
    from kernelband.evaluation.evaluator import detect_mode
    from kernelband.evaluation.gone import WorkerGone
    from kernelband.evaluation.pool import WorkerPool
    if detect_mode() != "gpu":
        fail("no GPU: calibration measures a GPU's peaks (the interpreter has no speed of light)")
    with WorkerPool("gpu", warm=0) as pool:
        try:
            worker = pool.acquire()
            name = worker.ready.device.get("name", "")
            peaks = None if force else sol.load(name)
            if peaks is None or peaks.floor_ms is None:  # a cache from before the floor: the floor alone
                reply = worker.request(sol.calibrate_request(floor_only=peaks is not None), 600)
                if not reply.get("ok"):
                    fail(f"calibration failed: {reply.get('error', '')[-300:]}")
                peaks = sol.with_floor(peaks or sol.Peaks(**reply["peaks"]), reply.get("floor"))
                path = sol.save(peaks)
            else:
                path = sol._path(None)
        except WorkerGone as exc:
            fail(f"calibration worker {exc.outcome}: {exc.detail.splitlines()[0] if exc.detail else ''}")
    if as_json:
        print(json.dumps({**peaks.__dict__, "cache": str(path)}))
    else:
        out.print(f"{peaks.device}: copy {peaks.bw_gbps:.0f} GB/s, matmul {peaks.tflops:.0f} TFLOP/s "
                  f"({', '.join(f'{k} {v:.0f}' for k, v in peaks.tflops_by_dtype.items())}), launch floor "
                  f"{fmt(peaks.floor_ms and peaks.floor_ms * 1e3, '.2f')} µs by events, "
                  f"{fmt(peaks.floor_span_ms and peaks.floor_span_ms * 1e3, '.2f')} µs by spans; cached in {path}")
