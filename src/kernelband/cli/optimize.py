"""`kernelband optimize`: one search, with its live view and summary."""

from __future__ import annotations

import json
import threading
from collections.abc import Callable
from pathlib import Path

import typer
from rich.live import Live
from rich.table import Table

from kernelband.cli.app import Command, app, err, fail, flag, fmt, out, run_store, versus
from kernelband.errors import UserError
from kernelband.policies.base import DEFAULT_POLICY, POLICIES
from kernelband.search.core import outcome_counts_text
from kernelband.store import DEFAULT_DB


class LiveView:
    """The live display of a run: iteration, best speedup, pool and clusters, last arm, proposals by outcome,
    tokens, and how long an LLM call has been out (so that a hung endpoint shows). `render` is called by
    rich's refresh as well as after each event, so the waiting time counts up while nothing else happens."""

    def __init__(self, task: str, policy: str, proposer: str, iterations: int,
                 waiting: Callable[[], float | None] = lambda: None):
        self.head = f"{task}  policy {policy}  proposer {proposer}"
        self.iterations = iterations
        self.waiting = waiting
        self.state = {"iteration": 0, "best_speedup": 1.0, "pool_size": 1, "clusters": {}, "last": "-",
                      "tokens": 0, "evaluations": 0, "proposals": {}}
        self.lock = threading.Lock()
        self.live: Live | None = None

    def render(self) -> Table:
        s = self.state
        table = Table(title=self.head, title_justify="left", show_header=False)
        table.add_column(style="bold")
        table.add_column()
        clusters = s["clusters"]
        sizes = {}
        for cluster in clusters.values():
            sizes[cluster] = sizes.get(cluster, 0) + 1
        table.add_row("iteration", f"{s['iteration']} / {self.iterations}")
        table.add_row("best speedup", f"{s['best_speedup']:.3f}x")
        table.add_row("pool", f"{s['pool_size']} valid kernels"
                      + (f", clusters {dict(sorted(sizes.items()))}" if sizes else ""))
        table.add_row("last arm", s["last"])
        table.add_row("proposals", outcome_counts_text(s["proposals"]))
        table.add_row("evaluations", str(s["evaluations"]))
        table.add_row("tokens", str(s["tokens"]))
        waited = self.waiting()
        if waited is not None:
            table.add_row("LLM", f"waiting for the LLM ({waited:.0f} s)")
        return table

    def __call__(self, event: dict) -> None:
        with self.lock:
            kind = event["kind"]
            if kind == "pull":
                speed = f" {event['speedup']:.3f}x" if event.get("speedup") else ""
                detail = f" ({event['detail'][:80]})" if event["outcome"] != "ok" and event.get("detail") else ""
                self.state["last"] = (f"candidate {event['candidate']} x {event['strategy']} -> "
                                      f"{event['outcome']}{speed}{detail}")
                self.state["best_speedup"] = event["best_speedup"]
                self.state["tokens"] = event["tokens"]
                self.state["proposals"] = event.get("proposals", self.state["proposals"])
                self.state["evaluations"] += event.get("child") is not None
            elif kind == "iteration":
                self.state.update(iteration=event["iteration"], pool_size=event["pool_size"],
                                  clusters=event.get("clusters") or {}, best_speedup=event["best_speedup"])
            if self.live is not None:
                self.live.refresh()


@app.command("optimize", cls=Command)
def optimize_cmd(
    task: str = typer.Argument(..., help="examples:<name>, tritonbench:<name> or a task file"),
    policy: str = typer.Option(DEFAULT_POLICY, "--policy", help=f"one of {', '.join(POLICIES)}"),
    proposer: str = typer.Option("auto", "--proposer", help="auto, rewrite, llm or hybrid (the rewriter for launch "
                                 "parameters, the LLM for the rest); default: llm if one is configured, else the "
                                 "built-in rewriter"),
    iterations: int = typer.Option(10, "--iterations", "-n", help="iterations T"),
    batch: int = typer.Option(1, "--batch", "-q", help="arms pulled per iteration"),
    evaluations: int | None = typer.Option(None, "--evaluations", help="budget in evaluations"),
    model: str | None = typer.Option(None, "--model", help="LLM model"),
    base_url: str | None = typer.Option(None, "--base-url", help="OpenAI-compatible endpoint"),
    max_tokens: int | None = typer.Option(None, "--max-tokens", help="LLM max tokens per reply"),
    budget_tokens: int | None = typer.Option(None, "--budget-tokens", help="LLM budget: tokens in all"),
    budget_calls: int | None = typer.Option(None, "--budget-calls", help="LLM budget: calls in all"),
    llm_timeout: float | None = typer.Option(None, "--llm-timeout", help="seconds per LLM request (default 120, "
                                             "or KERNELBAND_LLM_TIMEOUT)"),
    llm_retries: int | None = typer.Option(None, "--llm-retries", help="retries of a failed LLM request "
                                           "(default 4, or KERNELBAND_LLM_RETRIES)"),
    strategies: str | None = typer.Option(None, "--strategies", help="strategy config file (.toml or .json)"),
    preset: str = typer.Option("default", "--preset", help="timing protocol: default or paper"),
    finalists: int = typer.Option(3, "--finalists", help="fastest kernels re-measured at the end; the fastest "
                                  "on that re-measurement is handed back"),
    objective: str = typer.Option("device", "--objective", help="what to make faster: device (the kernels' time, "
                                  "the GPU kept ahead) or call (the wall time per call an eager program pays, host "
                                  "cost included)"),
    seed: int = typer.Option(0, "--seed"),
    db: Path = typer.Option(Path(DEFAULT_DB), "--db", help="the run database"),
    resume: bool = flag("--resume", "resume the unfinished run with these settings"),
    as_json: bool = flag("--json", "print the summary as one JSON object"),
    interpreter: bool = flag("--interpreter", "use the Triton interpreter even with a GPU"),
    tritonbench: str | None = typer.Option(None, "--tritonbench", help="TritonBench data (json or checkout)"),
    no_ncu: bool = flag("--no-ncu", "do not profile with Nsight Compute"),
    knowledge: str | None = typer.Option(None, "--knowledge", help="knowledge carried across kernels: a database, "
                                         "or off (default: the run database)"),
) -> None:
    """Search for a faster kernel that gives the same results; the whole search goes into the run store."""
    from kernelband.api import check_run_config
    from kernelband.knowledge import knowledge_option
    from kernelband.search.loop import RunConfig
    from kernelband.search.session import (
        ProposerChoice,
        check_search,
        make_proposer,
        open_search,
        resumable_run,
    )
    from kernelband.tasks import load_task

    try:
        config = RunConfig(iterations, batch, evaluations, preset, finalists=finalists, objective=objective)
        check_run_config(config)
        carried_from = knowledge_option(knowledge)
        t = load_task(task, tritonbench)
        chosen = make_proposer(ProposerChoice(proposer, model, base_url, max_tokens, budget_calls, budget_tokens,
                                              llm_timeout, llm_retries))
        view = LiveView(t.ref, policy, chosen.name, iterations, chosen.waiting_s)
        loaded = check_search(policy, seed, strategies)
        with run_store(db) as store:
            if resume:
                resumable_run(store, t, policy, chosen.name, seed)
            from kernelband.evaluation.evaluator import Evaluator  # torch: only once the input is checked

            with Evaluator(mode="interpreter" if interpreter else None, warm=2, preset=preset,
                           use_ncu=False if no_ncu else None) as ev:
                search = open_search(t, ev, store, policy, chosen, seed, config, resume=resume, on_event=view,
                                     strategies=loaded, knowledge=carried_from)
                if as_json:
                    summary = search.run()
                else:
                    try:
                        with Live(console=err, refresh_per_second=4, transient=False, get_renderable=view.render) as live:
                            view.live = live
                            summary = search.run()
                    finally:
                        if not err.is_terminal:  # off a terminal the last frame ends without a line break
                            err.line()
    except UserError as exc:
        fail(str(exc))
    carry = search.knowledge
    for note in carry.notes if carry is not None else ():
        err.print(note, highlight=False)
    if as_json:
        print(json.dumps(summary.to_dict(), default=str))
        return
    if carry is not None and carry.carried:
        err.print(f"knowledge: started from {carry.carried} examples of other kernels in {carry.store.path}",
                  highlight=False)
    _print_summary(summary, store)


def _print_summary(summary, store) -> None:
    if summary.finished_before:
        out.print(f"run {summary.run_id} had finished: its stored summary (--resume runs nothing more)",
                  highlight=False)
    table = Table(title=f"run {summary.run_id}: {summary.task} ({summary.policy}, {summary.proposer})",
                  title_justify="left")
    for col in ("iteration", "best speedup", "this iteration", "pool", "tokens", "seconds"):
        table.add_column(col, justify="right")
    for row in summary.per_iteration:
        table.add_row(str(row["iteration"]), fmt(row["best_speedup"], ".3f"), fmt(row["iteration_speedup"], ".3f"),
                      str(row["pool_size"]), str(row["tokens"]), f"{row['seconds']:.1f}")
    out.print(table)
    if summary.proposals:
        out.print(f"proposals: {outcome_counts_text(summary.proposals)}", highlight=False)
    for line in best_lines(summary):
        out.print(line, highlight=False)
    out.print(f"against torch: {versus('vs eager', summary.best_vs_eager, summary.vs_eager_skipped)}, "
              f"{versus('vs compile', summary.best_vs_compile, summary.vs_compile_skipped)}; SOL median "
              f"{fmt(summary.best_sol_fraction, '.2f')} (shapes >= 16 MB: {fmt(summary.best_sol_large, '.2f')})",
              highlight=False)
    if summary.finalists:
        confirmed = "confirmed_call_speedup" if summary.objective == "call" else "confirmed_speedup"
        rows = "; ".join(f"candidate {f['candidate']} {f['speedup']:.3f}x -> "
                         + (f"{f[confirmed]:.3f}x" if f.get(confirmed) else f["outcome"])
                         for f in summary.finalists)
        out.print(f"finalists, re-measured on fresh inputs (the fastest wins; the starting kernel if none is "
                  f"faster): {rows}", highlight=False)
    if summary.k0_self_speedup is not None:
        per_call = "" if summary.k0_self_call_speedup is None else f" ({summary.k0_self_call_speedup:.3f}x per call)"
        out.print(f"noise floor: the starting kernel timed against itself gave {summary.k0_self_speedup:.3f}x"
                  f"{per_call}", highlight=False)
    if summary.interpreter:
        out.print("[yellow]interpreter timings[/]: the kernels ran in the Triton interpreter on the CPU; these "
                  "speedups say nothing about GPU speed (run on a GPU machine for real ones)", highlight=False)
    if summary.stopped:
        out.print(f"stopped early: {summary.stopped}", highlight=False)
    if summary.held_out_slower:
        out.print(f"[yellow]warning[/]: the kernel handed back is slower than the starting kernel on held-out "
                  f"shapes: {', '.join(summary.held_out_slower)}", highlight=False, soft_wrap=True)
    handback = summary.handback or {}
    if handback.get("dispatched"):
        out.print(f"the starting kernel is called on {', '.join(handback['dispatched'])}, where the search measured "
                  f"it faster", highlight=False, soft_wrap=True)
    if handback.get("cached"):
        out.print(f"launch values computed once per shape: {'; '.join(handback['cached'])}", highlight=False,
                  soft_wrap=True)
    if handback.get("form") == "pinned":
        out.print(f"autotuning pinned: {handback['detail']}; the figures above are the pinned module's "
                  f"(the autotuned one re-measured {fmt(handback.get('autotuned_speedup'), '.3f')}x)", highlight=False)
    elif handback.get("form") == "autotuned":
        out.print(f"handed back autotuned ({handback['reason']}): {handback['detail']}", highlight=False)
    if summary.best_path:
        # soft_wrap: a path longer than the terminal is never broken by a newline, so it copies whole
        out.print(f"best kernel: {summary.best_path}\ndiff:        {summary.diff_path}", highlight=False,
                  soft_wrap=True)
    out.print(f"run store:   {store.path}", highlight=False, soft_wrap=True)


def best_lines(summary) -> list[str]:
    """The kernel handed back, on both measures whatever the run made faster: the device time and the wall time
    per call; the objective's first."""
    per_call = "" if summary.best_call_speedup is None else f", {summary.best_call_speedup:.3f}x per call"
    held = [f"re-measured {summary.confirmed_speedup:.3f}x" if summary.confirmed_speedup is not None else "",
            f"held-out {summary.held_out_speedup:.3f}x" if summary.held_out_speedup is not None else "",
            f"per call re-measured {summary.confirmed_call_speedup:.3f}x"
            if summary.confirmed_call_speedup is not None else "",
            f"held-out {summary.held_out_call_speedup:.3f}x" if summary.held_out_call_speedup is not None else ""]
    lines = [f"best: candidate {summary.best_candidate}, {summary.best_speedup:.3f}x over the starting kernel by "
             f"device time{per_call} ({', '.join([summary.best_outcome, *[h for h in held if h]])}); "
             f"{summary.evaluations} evaluations"]
    if summary.objective == "call":
        lines.append("objective: the wall time per call (--objective call): the search, the choice and the verdict "
                     "read the per-call figures")
    return lines
