"""`kernelband bench`: a sweep of a suite x policies x seeds into one run database."""

from __future__ import annotations

import json
import signal
from pathlib import Path

import typer

from kernelband import stacks
from kernelband.cli.app import Command, app, err, fail, flag, fmt, geo, out, run_store, versus
from kernelband.errors import UserError
from kernelband.policies.base import DEFAULT_POLICY
from kernelband.store import DEFAULT_DB


@app.command("bench", cls=Command)
def bench_cmd(
    suite: str = typer.Option("tritonbench-g-l12", "--suite", help="tritonbench-g-l12, tritonbench-g or examples"),
    policies: str = typer.Option(DEFAULT_POLICY, "--policies", help="comma-separated policies"),
    iterations: int = typer.Option(10, "--iterations", "-n"),
    seeds: str = typer.Option("1", "--seeds", help="a count (3: seeds 0,1,2) or a list (0,5,9)"),
    batch: int = typer.Option(1, "--batch", "-q", help="arms pulled per iteration"),
    proposer: str = typer.Option("auto", "--proposer", help="auto, rewrite, llm or hybrid (default auto: llm if configured)"),
    llm_timeout: float | None = typer.Option(None, "--llm-timeout", help="seconds per LLM request (default 120, "
                                             "or KERNELBAND_LLM_TIMEOUT)"),
    llm_retries: int | None = typer.Option(None, "--llm-retries", help="retries of a failed LLM request "
                                           "(default 4, or KERNELBAND_LLM_RETRIES)"),
    tasks: str | None = typer.Option(None, "--tasks", help="comma-separated subset of the suite's tasks"),
    tasks_now: str | None = typer.Option(None, "--tasks-now",
                                         help="run only these of the bench's tasks now, in this order (with "
                                              "--resume: the most telling first; the plan keeps every task)"),
    preset: str = typer.Option("default", "--preset"),
    finalists: int = typer.Option(3, "--finalists", help="fastest kernels of each run re-measured at the end"),
    db: Path = typer.Option(Path(DEFAULT_DB), "--db", help="the run database"),
    resume: int | None = typer.Option(None, "--resume", help="resume bench N (`kernelband runs` lists them)"),
    refresh_baselines: bool = flag("--refresh-baselines", "measure k0 baselines again"),
    gpus: str | None = typer.Option(None, "--gpus", help="GPU indices to use (default: all visible)"),
    runs_per_gpu: int = typer.Option(2, "--runs-per-gpu", help="runs in flight per GPU (compiles overlap timing)"),
    interpreter: bool = flag("--interpreter", "use the Triton interpreter even with a GPU"),
    tritonbench: str | None = typer.Option(None, "--tritonbench", help="TritonBench data (json or checkout)"),
    no_ncu: bool = flag("--no-ncu", "do not profile with Nsight Compute"),
    no_baselines: bool = flag("--no-baselines", "do not time torch eager and torch.compile (no compile wait)"),
    strategies: str | None = typer.Option(None, "--strategies",
                                          help="strategy config file (.toml or .json), kept with the bench"),
    split: str | None = typer.Option(None, "--split", help="train or test: only that side of the fixed split "
                                     "(default: both, train tasks first)"),
    knowledge: str | None = typer.Option(None, "--knowledge", help="knowledge carried across kernels: a database, "
                                         "or off (default: the run database)"),
    ray_address: str | None = typer.Option(None, "--ray", help="run on a Ray cluster: auto (the one `ray start` "
                                           "made, or RAY_ADDRESS), local (a runtime in this process) or an address"),
    gpu_model: str | None = typer.Option(None, "--gpu-model", help="with --ray: the GPU model to run on, where the "
                                         "cluster has several"),
    cpus_per_actor: int = typer.Option(1, "--cpus-per-actor", help="with --ray on a cluster without GPUs: CPUs "
                                       "per actor (one evaluator each)"),
    as_json: bool = flag("--json"),
) -> None:
    """Run every task x policy x seed of a suite into one run database, on every visible GPU (or with --ray, on
    every GPU of a Ray cluster)."""
    from kernelband.bench import BenchConfig, against_torch, parse_seeds, planned_jobs
    from kernelband.evaluation.records import PRESETS
    from kernelband.knowledge import knowledge_option
    from kernelband.policies.base import POLICIES
    from kernelband.search.session import ProposerChoice, make_proposer
    from kernelband.tasks.split import check as check_split

    try:
        def choice(kind: str) -> ProposerChoice:
            return ProposerChoice(kind, timeout_s=llm_timeout, max_retries=llm_retries)

        with run_store(db) as store:
            if resume is not None:
                if strategies is not None:
                    raise UserError("--strategies with --resume: a bench keeps the strategies it began with")
                config = BenchConfig(**store.bench(resume)["config"])
                config.refresh_baselines = refresh_baselines
                if split is not None or knowledge is not None or no_baselines:
                    raise UserError("--split, --knowledge or --no-baselines with --resume: a bench keeps those it "
                                    "began with")
            else:
                names = [p.strip() for p in policies.split(",") if p.strip()]
                unknown = [p for p in names if p not in POLICIES]
                if unknown or not names:
                    raise UserError(f"unknown policies {unknown}: use {', '.join(POLICIES)}")
                if preset not in PRESETS:
                    raise UserError(f"unknown preset {preset!r}: use {', '.join(PRESETS)}")
                if finalists < 1:
                    raise UserError("--finalists must be at least 1")
                kind = make_proposer(choice(proposer)).name
                config = BenchConfig(suite, names, parse_seeds(seeds), iterations, batch, kind, preset,
                                     [t.strip() for t in tasks.split(",")] if tasks else [], refresh_baselines,
                                     finalists, BenchConfig.strategies_from(strategies), check_split(split),
                                     knowledge_option(knowledge), baselines=not no_baselines)
                # an unknown suite or task: refused before the evaluator (torch) is imported and its workers start
                planned_jobs(config, tritonbench)
            if ray_address is None and gpu_model is not None:
                raise UserError("--gpu-model picks the nodes of a Ray cluster: use it with --ray")
            if ray_address is not None and gpus is not None:
                raise UserError("--gpus is for the bench on this machine: with --ray, every GPU of the cluster "
                                "(of --gpu-model) is used")
            if ray_address is not None:
                bench_id, errors, where = _on_ray(store, config, ray_address, choice(config.proposer), tritonbench,
                                                  resume, runs_per_gpu, cpus_per_actor, gpu_model, interpreter,
                                                  False if no_ncu else None, tasks_now)
            else:
                bench_id, errors, where = _local(store, config, choice, gpus, runs_per_gpu, interpreter, tritonbench,
                                                 no_ncu, resume, tasks_now)
    except UserError as exc:
        fail(str(exc))
    runs = store.runs(bench_id)
    versus_torch = against_torch(runs)
    if as_json:
        print(json.dumps({"bench_id": bench_id, "runs": [r.to_dict() for r in runs], "errors": errors,
                          "against_torch": versus_torch}, default=str))
        return
    out.print(f"bench {bench_id}: {len(runs)} runs on {where} in {store.path}; "
              f"`kernelband report bench:{bench_id} --db {store.path} --out DIR` shows them", highlight=False,
              soft_wrap=True)
    for policy, v in versus_torch.items():
        out.print(f"{policy}: vs eager {geo(v['vs_eager_geomean'], v['n_vs_eager'])}, vs compile "
                  f"{geo(v['vs_compile_geomean'], v['n_vs_compile'])} (geometric means); SOL median "
                  f"{fmt(v['sol_median'], '.2f')}, >= 16 MB {fmt(v['sol_median_large'], '.2f')}", highlight=False)
    for line in errors:
        out.print(f"[red]error[/] {line}", highlight=False)


def _on_ray(store, config, address: str, proposer, tritonbench, resume, runs_per_actor: int, cpus_per_actor: int,
            gpu_model, interpreter: bool, use_ncu, tasks_now) -> tuple[int, list[str], str]:
    from kernelband.raybench import ray_bench, require_ray

    require_ray()
    result = ray_bench(store, config, address, proposer, tritonbench_path=tritonbench, bench_id=resume,
                       on_event=_bench_event, runs_per_actor=runs_per_actor, cpus_per_actor=cpus_per_actor,
                       gpu_model=gpu_model, interpreter=interpreter, use_ncu=use_ncu,
                       tasks_now=_names(tasks_now))
    for node in result.nodes:
        err.print(f"node    {node.label}: {result.done_per_node[node.label]} runs done", highlight=False)
    actors = sum(n.actors for n in result.nodes)
    return result.bench_id, result.errors, f"{actors} Ray actor(s) on {len(result.nodes)} node(s)"


def _names(text: str | None) -> list[str] | None:
    return [t.strip() for t in text.split(",") if t.strip()] if text else None


def _local(store, config, choice, gpus, runs_per_gpu: int, interpreter: bool, tritonbench, no_ncu: bool, resume,
           tasks_now) -> tuple[int, list[str], str]:
    from contextlib import ExitStack

    from kernelband.bench import Bench
    from kernelband.evaluation.evaluator import Evaluator, detect_mode
    from kernelband.search.session import make_proposer

    mode = "interpreter" if interpreter else detect_mode()
    indices = _gpu_indices(gpus) if mode == "gpu" else [0]
    with ExitStack() as stack:
        evaluators = [stack.enter_context(Evaluator(mode=mode, warm=2, device_index=i, preset=config.preset,
                                                    use_ncu=False if no_ncu else None,
                                                    baselines=config.baselines)) for i in indices]
        bench = Bench(store, config, evaluators, lambda: make_proposer(choice(config.proposer)), tritonbench,
                      bench_id=resume, on_event=_bench_event, runs_per_gpu=runs_per_gpu, tasks_now=_names(tasks_now))
        stacks.dump_on(signal.SIGUSR1)  # a sweep that seems stuck: `kill -USR1 PID` shows where
        bench_id = bench.run()
    return bench_id, bench.errors, f"{len(indices)} GPU(s)"


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
    """The sweep's live lines on stderr; on Ray, each names the node that ran the run."""
    kind = event["kind"]
    if kind == "node":
        gpu = f"GPU model {event['model']}" if event["model"] else "GPU model unnamed"
        err.print(f"node    {event['node']}: {event['actors']} actor(s), "
                  f"{gpu if event['gpus'] else 'CPU (interpreter)'}", highlight=False)
        return
    if kind == "actor_lost":
        err.print(f"[red]lost[/]    {event['node']}: actor {event['actor']} ({event['error']}); its runs are dealt "
                  "again", highlight=False)
        return
    where = f"{event['task']} {event['policy']} seed {event['seed']}"
    if "node" in event:
        where += f" on {event['node']}"
    if kind == "job_done":
        err.print(f"done    {where}: best {event['best_speedup']:.3f}x, {event['evaluations']} evaluations, "
                  f"{versus('vs eager', event.get('best_vs_eager'))}, {versus('vs compile', event.get('best_vs_compile'))}",
                  highlight=False)
    elif kind == "job_skipped":
        err.print(f"skipped {where}: finished earlier", highlight=False)
    elif kind == "job_note":
        err.print(f"note    {where}: {event['note']}", highlight=False)
    elif kind == "job_error":
        err.print(f"[red]error[/]   {where}: {event['error']}", highlight=False)
