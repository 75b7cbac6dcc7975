"""Setting up a search: the proposer, the policy, the strategies and the run row, new or resumed."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from kernelband.errors import UserError
from kernelband.search.core import Strategy
from kernelband.search.loop import RunConfig, Search
from kernelband.store import RunRow, RunStatus, Store
from kernelband.tasks.model import Task


@dataclass
class ProposerChoice:
    kind: str  # "rewrite" | "llm" | "hybrid" | "auto"
    model: str | None = None
    base_url: str | None = None
    max_tokens: int | None = None
    budget_calls: int | None = None
    budget_tokens: int | None = None
    timeout_s: float | None = None  # per HTTP request (--llm-timeout)
    max_retries: int | None = None  # per call (--llm-retries)


def make_proposer(choice: ProposerChoice):
    """The LLM when one is configured (or asked for), else the built-in rewriter; with "hybrid" both, each
    strategy going to the side its `proposer` names."""
    from kernelband.proposers import llm
    from kernelband.proposers.rewriter.proposer import RewriterProposer

    if choice.kind not in ("auto", "rewrite", "llm", "hybrid"):
        raise UserError(f"unknown proposer {choice.kind!r}: use auto, rewrite, llm or hybrid")
    overrides = {k: v for k, v in (("model", choice.model), ("base_url", choice.base_url),
                                   ("max_tokens", choice.max_tokens), ("budget_calls", choice.budget_calls),
                                   ("budget_tokens", choice.budget_tokens)) if v is not None}
    if choice.timeout_s is not None:
        overrides["timeout_s"] = llm.check_timeout(choice.timeout_s, "--llm-timeout")
    if choice.max_retries is not None:
        overrides["max_retries"] = llm.check_retries(choice.max_retries, "--llm-retries")
    config = llm.LLMConfig.from_env(**overrides)
    kind = choice.kind
    if kind == "auto":
        kind = "llm" if config.configured() else "rewrite"
    if kind == "rewrite":
        return RewriterProposer()
    if not config.configured():
        raise UserError(f"--proposer {kind} needs an endpoint: set KERNELBAND_LLM_BASE_URL and "
                        "KERNELBAND_LLM_MODEL (or --base-url and --model)")
    if kind == "hybrid":
        from kernelband.proposers.hybrid import HybridProposer
        return HybridProposer(RewriterProposer(), llm.LLMProposer(config))
    return llm.LLMProposer(config)


def check_search(policy: str, seed: int, strategies_file: str | None) -> list[Strategy]:
    """The strategies of `strategies_file` (None: the built-in ones), once the policy and the file are known
    good: the command line and the API check them before an evaluator starts its workers (seconds each, every
    one importing torch)."""
    from kernelband.policies.base import make_policy
    from kernelband.search.strategies import load_strategies

    make_policy(policy, seed)
    return load_strategies(strategies_file)


def resumable_run(store: Store, task: Task, policy: str, proposer: str, seed: int,
                  bench_id: int | None = None) -> RunRow | None:
    """The latest run of the same task, policy, proposer and seed, to resume: an unfinished one (running,
    interrupted or failed) goes on, a finished one gives its stored summary. Outside a bench there must be one:
    the command line checks this before it starts an evaluator's workers."""
    run = store.find_run(task.key, policy, proposer, seed, bench_id)
    if bench_id is None and run is None:
        raise UserError(f"nothing to resume: no {policy}/{proposer} run of {task.ref} with seed {seed} in "
                        f"{store.path}")
    return run


def open_search(task: Task, evaluator, store: Store, policy: str, proposer, seed: int, config: RunConfig,
                strategies_file: str | None = None, resume: bool = False, bench_id: int | None = None,
                on_event=None, lookup=None, out_dir: Path | None = None,
                strategies: list[Strategy] | None = None, knowledge: str = "") -> Search:
    """A new run, or with `resume` the latest run of the same task, policy, proposer and seed: an unfinished
    one (running, interrupted or failed) goes on, a finished one gives its stored summary.
    The strategies: `strategies` as given (a bench's), else those of `strategies_file`, else the built-in ones.
    `knowledge`: where knowledge is carried across kernels (knowledge.open_carry); a resumed run keeps its own."""
    from kernelband.knowledge import open_carry
    from kernelband.policies.base import make_policy
    from kernelband.search.strategies import load_strategies

    if strategies is None:
        strategies = load_strategies(strategies_file)
    bandit = make_policy(policy, seed)  # an unknown policy is an error before any run is stored
    run = resumable_run(store, task, policy, proposer.name, seed, bench_id) if resume else None
    if run is not None and run.device and run.status != RunStatus.DONE:  # a done run is only read
        gpu = evaluator.fingerprint(task)["gpu"]
        if gpu != run.device:  # its stored evaluations would be replayed beside new ones from another GPU
            raise UserError(f"run {run.id} was measured on {run.device} and this machine's GPU is {gpu}: resume it "
                            "on the same GPU model, or start a new run (without --resume)")
    if run is not None:
        config = RunConfig(**{k: v for k, v in run.config.items() if k in RunConfig.__dataclass_fields__})
        run_id = run.id
        if run.status != RunStatus.DONE:  # failed or interrupted before: running again (a done one is only read)
            store.reopen_run(run_id)
        # a run stored before knowledge was carried resumes without it, as it began
        carry = open_carry(store, knowledge, run_id, task.ref, task.key, bench_id is not None,
                           saved=run.config.get("knowledge", {}))
    else:
        carry = open_carry(store, knowledge, 0, task.ref, task.key, bench_id is not None)
        extra = {"knowledge": carry.config()} if carry is not None else {}
        run_id = store.create_run(task.ref, task.key, policy, proposer.name, seed,
                                  {**config.to_dict(), "strategies": [s.name for s in strategies], **extra},
                                  bench_id=bench_id)
        if carry is not None:
            carry.run_id = run_id
    search = Search(task, evaluator, proposer, bandit, strategies, store, run_id, seed, config,
                    out_dir=out_dir if out_dir is not None else store.artifacts, on_event=on_event, lookup=lookup)
    search.knowledge = carry
    return search
