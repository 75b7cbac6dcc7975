"""The `kernelband` command line."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import typer
from rich.console import Console
from rich.table import Table

from kernelband.errors import UserError, read_text

app = typer.Typer(add_completion=False, no_args_is_help=True, pretty_exceptions_enable=False,
                  help="Make Triton kernels faster, and prove it.")
out = Console()
err = Console(stderr=True)

SUITES = ("examples", "tritonbench-g", "tritonbench-g-l12")


def _fail(message: str) -> None:
    err.print(f"[bold red]error:[/] {message}", highlight=False, soft_wrap=True)
    raise typer.Exit(2)


def _fmt(value, spec: str = ".3g", none: str = "-") -> str:
    return none if value is None else format(value, spec)


@app.command("eval")
def eval_cmd(
    task: str = typer.Argument(..., help="examples:<name>, tritonbench:<name> or a task file"),
    candidate: Path | None = typer.Option(None, "--candidate", "-c", help="module to evaluate (default: the "
                                          "task's own starting kernel)"),
    preset: str = typer.Option("default", "--preset", help="timing protocol: default, paper or tritonbench"),
    shapes: str = typer.Option("search", "--shapes", help="search, held-out or all"),
    seed: int | None = typer.Option(None, "--seed", help="input seed (default: a fresh random one)"),
    as_json: bool = typer.Option(False, "--json", help="print one JSON object"),
    interpreter: bool = typer.Option(False, "--interpreter", help="use the Triton interpreter even with a GPU"),
    tritonbench: str | None = typer.Option(None, "--tritonbench", help="TritonBench data (json or checkout)"),
    no_ncu: bool = typer.Option(False, "--no-ncu", help="do not profile with Nsight Compute"),
) -> None:
    """Evaluate a candidate kernel: correctness on every shape, timing against the reference, features."""
    from kernelband.evaluation.records import PRESETS
    from kernelband.tasks import load_task
    from kernelband.tasks.pyfile import module_part

    try:
        if preset not in PRESETS:
            raise UserError(f"unknown preset {preset!r}: use {', '.join(PRESETS)}")
        which = {"search": "search", "held-out": "held_out", "held_out": "held_out", "all": "all"}.get(shapes)
        if which is None:
            raise UserError(f"unknown --shapes {shapes!r}: use search, held-out or all")
        t = load_task(task, tritonbench)
        source = None
        if candidate is not None:
            source = module_part(read_text(candidate, "candidate"))
        from kernelband.evaluation.evaluator import Evaluator  # torch: after the input is checked

        with Evaluator(mode="interpreter" if interpreter else None, warm=1, preset=preset,
                       use_ncu=False if no_ncu else None) as ev:
            result = ev.evaluate(t, source, which=which, seed=seed)
    except UserError as exc:
        _fail(str(exc))
    if as_json:
        print(json.dumps(result.to_dict(), default=str))
    else:
        _print_result(result)
    raise typer.Exit(0 if result.ok else 1)


def _print_result(result) -> None:
    unit = "interpreter ms" if result.interpreter else "ms"
    table = Table(title=f"{result.task}  ({result.device}, preset {result.preset})", title_justify="left")
    for col in ("shape", "ok", f"ref {unit}", f"cand {unit}", "speedup", "GB/s", "TFLOP/s", "SOL"):
        table.add_column(col, justify="left" if col == "shape" else "right")
    for s in result.shapes:
        ok = {True: "[green]yes[/]", False: "[red]no[/]", None: "-"}[s.correct]
        label = s.label + (" (held out)" if s.held_out else "")
        table.add_row(label[:60], ok, _fmt(s.ref_ms, ".4g"), _fmt(s.cand_ms, ".4g"), _fmt(s.speedup, ".3f"),
                      _fmt(s.gbps, ".1f"), _fmt(s.tflops, ".2f"),
                      "-" if s.sol_fraction is None else f"{100 * s.sol_fraction:.0f}%")
    out.print(table)
    colour = "green" if result.ok else "red"
    line = f"outcome [bold {colour}]{result.outcome.value}[/]"
    if result.speedup is not None:
        line += f"   speedup {result.speedup:.3f}x (runtime-weighted)"
    if result.held_out_speedup is not None:
        line += f"   held-out {result.held_out_speedup:.3f}x"
    out.print(line)
    if result.detail:
        out.print(result.detail, highlight=False, soft_wrap=True)
    if result.interpreter:
        out.print("[yellow]Timings are Triton-interpreter timings on the CPU: they say nothing about GPU speed.[/]")
    for line in feature_lines(result.features, result.interpreter):
        out.print(line, highlight=False, soft_wrap=True)
    for note in result.notes:
        out.print(f"note: {note}", highlight=False, soft_wrap=True)
    out.print(f"sandbox: {result.sandbox}   seed: {result.seed}   "
              f"{result.seconds.get('total', 0):.1f} s", highlight=False)


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


@app.command("tasks")
def tasks_cmd(
    levels: list[str] | None = typer.Argument(None, hidden=True),
    suite: str = typer.Option("examples", "--suite", help=f"one of {', '.join(SUITES)}"),
    difficulty: list[int] | None = typer.Option(None, "--difficulty", help="TritonBench levels, e.g. 1 2"),
    as_json: bool = typer.Option(False, "--json"),
    tritonbench: str | None = typer.Option(None, "--tritonbench"),
) -> None:
    """List tasks."""
    from kernelband.tasks import example_names, load_task
    from kernelband.tasks import tritonbench as tb

    try:
        wanted = set(difficulty or [])
        for extra in levels or []:  # `--difficulty 1 2`: the values after the first arrive here
            if not extra.isdigit() or not wanted:
                raise UserError(f"unexpected argument {extra!r}")
            wanted.add(int(extra))
        rows = []
        if suite == "examples":
            if wanted:
                raise UserError("--difficulty filters the TritonBench suites; the built-in examples have no level")
            for name in example_names():
                t = load_task(f"examples:{name}")
                rows.append({"ref": t.ref, "name": name, "difficulty": None, "description": t.description,
                             "added_loop_values": []})
        elif suite in ("tritonbench-g", "tritonbench-g-l12"):
            entries = tb.entries(tritonbench)
            names = tb.level12(tritonbench) if suite == "tritonbench-g-l12" else sorted(entries)
            present = {entries[n].difficulty for n in names} - {None}
            if missing := sorted(wanted - present):
                raise UserError(f"no level {', '.join(map(str, missing))} in {suite}: its levels are "
                                f"{', '.join(map(str, sorted(present)))}")
            for name in names:
                e = entries[name]
                if wanted and e.difficulty not in wanted:
                    continue
                rows.append({"ref": f"tritonbench:{name}", "name": name, "difficulty": e.difficulty,
                             "description": f"TritonBench-G level {e.difficulty}",
                             "added_loop_values": list(tb.EXTRA_LOOP_VALUES.get(name, ())),
                             "excluded_by_paper": name in tb.PAPER_EXCLUDED})
        else:
            raise UserError(f"unknown suite {suite!r}: use {', '.join(SUITES)}")
    except UserError as exc:
        _fail(str(exc))
    if as_json:
        print(json.dumps(rows))
        return
    table = Table(title=f"{suite}: {len(rows)} tasks", title_justify="left")
    for col in ("task", "level", "description"):
        table.add_column(col)
    for r in rows:
        table.add_row(r["ref"], "-" if r["difficulty"] is None else str(r["difficulty"]), r["description"])
    out.print(table)


@app.command("calibrate")
def calibrate_cmd(
    force: bool = typer.Option(False, "--force", help="measure again even if cached"),
    as_json: bool = typer.Option(False, "--json"),
) -> None:
    """Measure this GPU's peak copy bandwidth and matmul throughput (cached per GPU name)."""
    from kernelband.evaluation import sol
    from kernelband.evaluation.evaluator import detect_mode
    from kernelband.evaluation.pool import WorkerGone, WorkerPool
    if detect_mode() != "gpu":
        _fail("no GPU: calibration measures a GPU's peaks (the interpreter has no speed of light)")
    with WorkerPool("gpu", warm=0) as pool:
        try:
            worker = pool.acquire()
            name = worker.ready.device.get("name", "")
            peaks = None if force else sol.load(name)
            if peaks is None:
                reply = worker.request({"op": "calibrate"}, 600)
                if not reply.get("ok"):
                    _fail(f"calibration failed: {reply.get('error', '')[-300:]}")
                peaks = sol.Peaks(**reply["peaks"])
                path = sol.save(peaks)
            else:
                path = sol._path(None)
        except WorkerGone as exc:
            _fail(f"calibration worker {exc.outcome}: {exc.detail.splitlines()[0] if exc.detail else ''}")
    if as_json:
        print(json.dumps({**peaks.__dict__, "cache": str(path)}))
    else:
        out.print(f"{peaks.device}: copy {peaks.bw_gbps:.0f} GB/s, matmul {peaks.tflops:.0f} TFLOP/s "
                  f"({', '.join(f'{k} {v:.0f}' for k, v in peaks.tflops_by_dtype.items())}); cached in {path}")


import kernelband.cli_report  # noqa: E402,F401  (registers report)
from kernelband import cli_search  # noqa: E402,F401  (registers optimize and runs)


def _click_exceptions():
    """The click that typer runs on: its own copy in recent typer, the click package before."""
    try:
        from typer._click import exceptions
    except ImportError:
        import click.exceptions as exceptions
    return exceptions


def main() -> None:
    """The `kernelband` command. A mistyped option or argument is one line and exit code 2, like every other
    bad input, instead of click's usage box."""
    errors = _click_exceptions()
    try:
        code = app(standalone_mode=False)
    except errors.NoArgsIsHelpError as exc:
        exc.show()
        sys.exit(2)
    except errors.UsageError as exc:
        where = exc.ctx.command_path if exc.ctx is not None else "kernelband"
        err.print(f"[bold red]error:[/] {' '.join(exc.format_message().split())} (`{where} --help` lists the "
                  "options)", highlight=False, soft_wrap=True)
        sys.exit(2)
    except typer.Abort:  # Ctrl-C at a prompt (click's Abort where typer uses click, typer's own where it vendors it)
        code = 130
    except UserError as exc:  # pragma: no cover - commands catch their own
        err.print(f"error: {exc}")
        sys.exit(2)
    if code == 130:  # Ctrl-C: typer turns the KeyboardInterrupt into exit code 130
        how = {"optimize": "the same command with --resume continues the run",
               "bench": "`kernelband bench ... --resume N` continues the bench (N: its id, `kernelband runs` "
                        "shows it)"}.get(sys.argv[1] if len(sys.argv) > 1 else "")
        err.print("interrupted" + (f": what was stored is kept in the run database; {how}" if how else ""),
                  highlight=False, soft_wrap=True)
    sys.exit(code if isinstance(code, int) else 0)


if __name__ == "__main__":
    main()
