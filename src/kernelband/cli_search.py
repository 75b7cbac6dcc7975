"""`kernelband optimize` and `kernelband runs`."""

from __future__ import annotations

import json
import signal
import threading
from contextlib import contextmanager
from pathlib import Path

import typer
from rich.live import Live
from rich.table import Table

from kernelband import stacks
from kernelband.cli import _fail, _fmt, app, err, out
from kernelband.errors import UserError
from kernelband.search.store import DEFAULT_DB


class LiveView:
    """The live display of a run: iteration, best speedup, pool and clusters, last arm, tokens."""

    def __init__(self, task: str, policy: str, proposer: str, iterations: int):
        self.head = f"{task}  policy {policy}  proposer {proposer}"
        self.iterations = iterations
        self.state = {"iteration": 0, "best_speedup": 1.0, "pool_size": 1, "clusters": {}, "last": "-",
                      "tokens": 0, "evaluations": 0}
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
        table.add_row("evaluations", str(s["evaluations"]))
        table.add_row("tokens", str(s["tokens"]))
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
                self.state["evaluations"] += event.get("child") is not None
            elif kind == "iteration":
                self.state.update(iteration=event["iteration"], pool_size=event["pool_size"],
                                  clusters=event.get("clusters") or {}, best_speedup=event["best_speedup"])
            if self.live is not None:
                self.live.update(self.render())


@contextmanager
def _run_store(db: Path):
    """The run database of one command. One the command created is removed again if the command fails with
    nothing stored in it: bad input leaves no empty database behind (and never touches a used one)."""
    from kernelband.search.store import Store

    new = not db.exists()
    store = Store(db)
    try:
        yield store
    except UserError:
        if new and not store.runs() and not store.benches():
            store.close()
            db.unlink(missing_ok=True)
        raise


@app.command("optimize")
def optimize_cmd(
    task: str = typer.Argument(..., help="examples:<name>, tritonbench:<name> or a task file"),
    policy: str = typer.Option("kernelband", "--policy", help="kernelband, kernelband-masked, beam, bon, random, "
                               "greedy"),
    proposer: str = typer.Option("auto", "--proposer", help="rewrite or llm (default: llm if one is configured, "
                                 "else the built-in rewriter)"),
    iterations: int = typer.Option(10, "--iterations", "-n", help="iterations T"),
    batch: int = typer.Option(1, "--batch", "-q", help="arms pulled per iteration"),
    evaluations: int | None = typer.Option(None, "--evaluations", help="budget in evaluations"),
    model: str | None = typer.Option(None, "--model", help="LLM model"),
    base_url: str | None = typer.Option(None, "--base-url", help="OpenAI-compatible endpoint"),
    max_tokens: int | None = typer.Option(None, "--max-tokens", help="LLM max tokens per reply"),
    budget_tokens: int | None = typer.Option(None, "--budget-tokens", help="LLM budget: tokens in all"),
    budget_calls: int | None = typer.Option(None, "--budget-calls", help="LLM budget: calls in all"),
    strategies: str | None = typer.Option(None, "--strategies", help="strategy config file (.toml or .json)"),
    preset: str = typer.Option("default", "--preset", help="timing protocol: default or paper"),
    finalists: int = typer.Option(3, "--finalists", help="fastest kernels re-measured at the end; the fastest "
                                  "on that re-measurement is handed back"),
    seed: int = typer.Option(0, "--seed"),
    db: Path = typer.Option(Path(DEFAULT_DB), "--db", help="the run database"),
    resume: bool = typer.Option(False, "--resume", help="resume the unfinished run with these settings"),
    as_json: bool = typer.Option(False, "--json", help="print the summary as one JSON object"),
    interpreter: bool = typer.Option(False, "--interpreter", help="use the Triton interpreter even with a GPU"),
    tritonbench: str | None = typer.Option(None, "--tritonbench", help="TritonBench data (json or checkout)"),
    no_ncu: bool = typer.Option(False, "--no-ncu", help="do not profile with Nsight Compute"),
) -> None:
    """Search for a faster kernel that gives the same results; the whole search goes into the run store."""
    from kernelband.evaluation.records import PRESETS
    from kernelband.search.policies import make_policy
    from kernelband.search.strategies import load_strategies
    from kernelband.tasks import load_task

    try:
        if preset not in PRESETS:
            raise UserError(f"unknown preset {preset!r}: use {', '.join(PRESETS)}")
        if iterations < 1 or batch < 1 or finalists < 1 or (evaluations is not None and evaluations < 1):
            raise UserError("--iterations, --batch, --finalists and --evaluations must be at least 1")
        t = load_task(task, tritonbench)
        # A bad policy or strategies file is refused before the evaluator is imported (torch: seconds) and
        # before it starts its workers (seconds each: every one imports torch too).
        make_policy(policy, seed)
        loaded = load_strategies(strategies)
        from kernelband.evaluation.evaluator import Evaluator
        from kernelband.search.loop import RunConfig
        from kernelband.search.session import ProposerChoice, make_proposer, open_search, resumable_run

        chosen = make_proposer(ProposerChoice(proposer, model, base_url, max_tokens, budget_calls, budget_tokens))
        view = LiveView(t.ref, policy, chosen.name, iterations)
        with _run_store(db) as store:
            if resume:
                resumable_run(store, t, policy, chosen.name, seed)  # before the evaluator's workers start
            with Evaluator(mode="interpreter" if interpreter else None, warm=2, preset=preset,
                           use_ncu=False if no_ncu else None) as ev:
                search = open_search(t, ev, store, policy, chosen, seed,
                                     RunConfig(iterations, batch, evaluations, preset, finalists=finalists),
                                     resume=resume, on_event=view, strategies=loaded)
                if as_json:
                    summary = search.run()
                else:
                    try:
                        with Live(view.render(), console=err, refresh_per_second=4, transient=False) as live:
                            view.live = live
                            summary = search.run()
                    finally:
                        if not err.is_terminal:  # off a terminal the last frame ends without a line break
                            err.line()
    except UserError as exc:
        _fail(str(exc))
    if as_json:
        print(json.dumps(summary.to_dict(), default=str))
        return
    _print_summary(summary, store)


def _print_summary(summary, store) -> None:
    table = Table(title=f"run {summary.run_id}: {summary.task} ({summary.policy}, {summary.proposer})",
                  title_justify="left")
    for col in ("iteration", "best speedup", "this iteration", "pool", "tokens", "seconds"):
        table.add_column(col, justify="right")
    for row in summary.per_iteration:
        table.add_row(str(row["iteration"]), _fmt(row["best_speedup"], ".3f"), _fmt(row["iteration_speedup"], ".3f"),
                      str(row["pool_size"]), str(row["tokens"]), f"{row['seconds']:.1f}")
    out.print(table)
    held = "" if summary.confirmed_speedup is None else f", re-measured {summary.confirmed_speedup:.3f}x"
    held += "" if summary.held_out_speedup is None else f", held-out {summary.held_out_speedup:.3f}x"
    out.print(f"best: candidate {summary.best_candidate}, {summary.best_speedup:.3f}x over the starting kernel "
              f"({summary.best_outcome}{held}); {summary.evaluations} evaluations", highlight=False)
    if summary.finalists:
        rows = "; ".join(f"candidate {f['candidate']} {f['speedup']:.3f}x -> "
                         + (f"{f['confirmed_speedup']:.3f}x" if f["confirmed_speedup"] else f["outcome"])
                         for f in summary.finalists)
        out.print(f"finalists, re-measured on fresh inputs (the fastest wins; the starting kernel if none is "
                  f"faster): {rows}", highlight=False)
    if summary.k0_self_speedup is not None:
        out.print(f"noise floor: the starting kernel timed against itself gave {summary.k0_self_speedup:.3f}x",
                  highlight=False)
    if summary.interpreter:
        out.print("[yellow]interpreter timings[/]: the kernels ran in the Triton interpreter on the CPU; these "
                  "speedups say nothing about GPU speed (run on a GPU machine for real ones)", highlight=False)
    if summary.stopped:
        out.print(f"stopped early: {summary.stopped}", highlight=False)
    if summary.best_path:
        out.print(f"best kernel: {summary.best_path}\ndiff:        {summary.diff_path}", highlight=False)
    out.print(f"run store:   {store.path}", highlight=False)


@app.command("runs")
def runs_cmd(
    db: Path = typer.Option(Path(DEFAULT_DB), "--db", help="the run database"),
    as_json: bool = typer.Option(False, "--json"),
) -> None:
    """List the runs in a run database."""
    from kernelband.search.store import Store

    if not db.exists():
        _fail(f"no run database at {db}; `kernelband optimize` creates it (or pass --db)")
    try:
        rows = Store(db).runs()
    except UserError as exc:
        _fail(str(exc))
    if as_json:
        print(json.dumps([r.to_dict() for r in rows], default=str))
        return
    table = Table(title=f"{db}: {len(rows)} runs", title_justify="left")
    for col in ("run", "task", "policy", "proposer", "seed", "status", "best", "evals", "device"):
        table.add_column(col)
    for r in rows:
        s = r.summary or {}
        table.add_row(str(r.id), r.task, r.policy, r.proposer, str(r.seed), r.status,
                      _fmt(s.get("best_speedup"), ".3f"), _fmt(s.get("evaluations"), "d"), r.device)
    out.print(table)


@app.command("bench")
def bench_cmd(
    suite: str = typer.Option("tritonbench-g-l12", "--suite", help="tritonbench-g-l12, tritonbench-g or examples"),
    policies: str = typer.Option("kernelband", "--policies", help="comma-separated policies"),
    iterations: int = typer.Option(10, "--iterations", "-n"),
    seeds: str = typer.Option("1", "--seeds", help="a count (3: seeds 0,1,2) or a list (0,5,9)"),
    batch: int = typer.Option(1, "--batch", "-q", help="arms pulled per iteration"),
    proposer: str = typer.Option("auto", "--proposer", help="rewrite or llm (default: llm if configured)"),
    tasks: str | None = typer.Option(None, "--tasks", help="comma-separated subset of the suite's tasks"),
    tasks_now: str | None = typer.Option(None, "--tasks-now",
                                         help="run only these of the bench's tasks now, in this order (with "
                                              "--resume: the most telling first; the plan keeps every task)"),
    preset: str = typer.Option("default", "--preset"),
    finalists: int = typer.Option(3, "--finalists", help="fastest kernels of each run re-measured at the end"),
    db: Path = typer.Option(Path(DEFAULT_DB), "--db", help="the run database"),
    resume: int | None = typer.Option(None, "--resume", help="resume bench N (`kernelband runs` lists them)"),
    refresh_baselines: bool = typer.Option(False, "--refresh-baselines", help="measure k0 baselines again"),
    gpus: str | None = typer.Option(None, "--gpus", help="GPU indices to use (default: all visible)"),
    runs_per_gpu: int = typer.Option(2, "--runs-per-gpu", help="runs in flight per GPU (compiles overlap timing)"),
    interpreter: bool = typer.Option(False, "--interpreter", help="use the Triton interpreter even with a GPU"),
    tritonbench: str | None = typer.Option(None, "--tritonbench", help="TritonBench data (json or checkout)"),
    no_ncu: bool = typer.Option(False, "--no-ncu", help="do not profile with Nsight Compute"),
    strategies: str | None = typer.Option(None, "--strategies",
                                          help="strategy config file (.toml or .json), kept with the bench"),
    as_json: bool = typer.Option(False, "--json"),
) -> None:
    """Run every task x policy x seed of a suite into one run database, on every visible GPU."""
    from contextlib import ExitStack

    from kernelband.evaluation.records import PRESETS
    from kernelband.search.bench import Bench, BenchConfig, parse_seeds, planned_jobs
    from kernelband.search.policies import POLICIES
    from kernelband.search.session import ProposerChoice, make_proposer

    try:
        with _run_store(db) as store:
            if resume is not None:
                if strategies is not None:
                    raise UserError("--strategies with --resume: a bench keeps the strategies it began with")
                config = BenchConfig(**store.bench(resume)["config"])
                config.refresh_baselines = refresh_baselines
            else:
                names = [p.strip() for p in policies.split(",") if p.strip()]
                unknown = [p for p in names if p not in POLICIES]
                if unknown or not names:
                    raise UserError(f"unknown policies {unknown}: use {', '.join(POLICIES)}")
                if preset not in PRESETS:
                    raise UserError(f"unknown preset {preset!r}: use {', '.join(PRESETS)}")
                if finalists < 1:
                    raise UserError("--finalists must be at least 1")
                kind = make_proposer(ProposerChoice(proposer)).name
                config = BenchConfig(suite, names, parse_seeds(seeds), iterations, batch, kind, preset,
                                     [t.strip() for t in tasks.split(",")] if tasks else [], refresh_baselines,
                                     finalists, BenchConfig.strategies_from(strategies))
                # an unknown suite or task is refused before the evaluator is imported (torch) and its
                # workers start
                planned_jobs(config, tritonbench)
            from kernelband.evaluation.evaluator import Evaluator, detect_mode

            mode = "interpreter" if interpreter else detect_mode()
            indices = _gpu_indices(gpus) if mode == "gpu" else [0]
            with ExitStack() as stack:
                evaluators = [stack.enter_context(Evaluator(mode=mode, warm=2, device_index=i, preset=config.preset,
                                                            use_ncu=False if no_ncu else None)) for i in indices]
                bench = Bench(store, config, evaluators, lambda: make_proposer(ProposerChoice(config.proposer)),
                              tritonbench, bench_id=resume, on_event=_bench_event, runs_per_gpu=runs_per_gpu,
                              tasks_now=[t.strip() for t in tasks_now.split(",") if t.strip()] if tasks_now else None)
                stacks.dump_on(signal.SIGUSR1)  # a sweep that seems stuck: `kill -USR1 PID` shows where
                bench_id = bench.run()
    except UserError as exc:
        _fail(str(exc))
    runs = store.runs(bench_id)
    if as_json:
        print(json.dumps({"bench_id": bench_id, "runs": [r.to_dict() for r in runs], "errors": bench.errors},
                         default=str))
        return
    out.print(f"bench {bench_id}: {len(runs)} runs on {len(indices)} GPU(s) in {store.path}; "
              f"`kernelband report bench:{bench_id} --db {store.path} --out DIR` shows them", highlight=False)
    for line in bench.errors:
        out.print(f"[red]error[/] {line}", highlight=False)


@app.command("merge")
def merge_cmd(
    source: Path = typer.Argument(..., help="the run database to copy from"),
    bench: int = typer.Argument(..., help="the bench in SOURCE to copy"),
    db: Path = typer.Option(Path(DEFAULT_DB), "--db", help="the run database to copy into"),
    into: int | None = typer.Option(None, "--into", help="join this bench of --db (default: a new bench)"),
) -> None:
    """Copy a bench from another run database (a sweep split over machines or sessions) into --db."""
    try:
        with _run_store(db) as store:
            target, copied = store.merge_bench(source, bench, into)
        store.close()
    except UserError as exc:
        _fail(str(exc))
    out.print(f"bench {bench} of {source}: {copied} runs copied into bench {target} of {db}", highlight=False)


def _gpu_indices(text: str | None) -> list[int]:
    import torch

    count = torch.cuda.device_count()
    if text is None:
        return list(range(count))
    try:
        wanted = [int(x) for x in text.split(",") if x.strip()]
    except ValueError:
        raise UserError(f"--gpus {text!r}: give indices like 0,1") from None
    bad = [i for i in wanted if not 0 <= i < count]
    if bad or not wanted:
        raise UserError(f"--gpus {text!r}: this machine has GPUs 0..{count - 1}")
    return wanted


def _bench_event(event: dict) -> None:
    kind = event["kind"]
    where = f"{event['task']} {event['policy']} seed {event['seed']}"
    if kind == "job_done":
        err.print(f"done    {where}: best {event['best_speedup']:.3f}x, {event['evaluations']} evaluations",
                  highlight=False)
    elif kind == "job_skipped":
        err.print(f"skipped {where}: finished earlier", highlight=False)
    elif kind == "job_error":
        err.print(f"[red]error[/]   {where}: {event['error']}", highlight=False)


__all__ = ["optimize_cmd", "runs_cmd", "bench_cmd", "merge_cmd", "err"]
