"""The library entry points behind `kernelband.evaluate` and `kernelband.optimize`: what `kernelband eval` and
`kernelband optimize` do, without the terminal."""

from __future__ import annotations

from pathlib import Path

from kernelband.errors import UserError, read_text
from kernelband.evaluation.records import PRESETS, EvalResult
from kernelband.policies.base import DEFAULT_POLICY
from kernelband.search.loop import RunConfig, Summary
from kernelband.search.session import ProposerChoice, check_search, make_proposer, open_search, resumable_run
from kernelband.store import DEFAULT_DB, Store
from kernelband.tasks import load_task
from kernelband.tasks.model import Task
from kernelband.tasks.pyfile import module_part

SHAPES = {"search": "search", "held-out": "held_out", "held_out": "held_out", "all": "all"}


def _task(task: str | Task, tritonbench: str | None) -> Task:
    return task if isinstance(task, Task) else load_task(task, tritonbench)


def candidate_source(candidate: str | Path | None) -> str | None:
    """A candidate given as a file (a Path, or a str without a line break) or as source text; None: k0."""
    if candidate is None:
        return None
    if isinstance(candidate, Path) or "\n" not in candidate:
        return module_part(read_text(Path(candidate), "candidate"))
    return module_part(candidate)


def check_preset(preset: str) -> None:
    if preset not in PRESETS:
        raise UserError(f"unknown preset {preset!r}: use {', '.join(PRESETS)}")


def evaluate(task: str | Task, candidate: str | Path | None = None, *, preset: str = "default",
             shapes: str = "search", seed: int | None = None, interpreter: bool = False,
             use_ncu: bool | None = None, tritonbench: str | None = None, baselines: bool = True) -> EvalResult:
    """Evaluate one candidate of a task (None: the task's own starting kernel): correctness on every shape,
    timing against the reference, features; `baselines`: also time torch eager and torch.compile. Bad input
    raises `kernelband.errors.UserError`."""
    check_preset(preset)
    which = SHAPES.get(shapes)
    if which is None:
        raise UserError(f"unknown --shapes {shapes!r}: use search, held-out or all")
    t = _task(task, tritonbench)
    source = candidate_source(candidate)
    from kernelband.evaluation.evaluator import Evaluator  # torch: only once the input is checked

    with Evaluator(mode="interpreter" if interpreter else None, warm=1, preset=preset, use_ncu=use_ncu,
                   baselines=baselines) as ev:
        # A fresh process knows no usual time of the reference, which the timing needs to tell a disturbed
        # measurement and measure it again: learnt first, as a search's task set-up does (Timing.prime).
        ev.prime_timing(t, preset, which)
        return ev.evaluate(t, source, which=which, seed=seed)


def check_run_config(config: RunConfig) -> None:
    """Names the first setting that is out of range, as the command line spells it."""
    check_preset(config.preset)
    if config.objective not in ("device", "call"):
        raise UserError(f"--objective is device or call, not {config.objective!r}")
    for flag, value in (("--iterations", config.iterations), ("--batch", config.q),
                        ("--finalists", config.finalists), ("--evaluations", config.evaluations)):
        if value is not None and value < 1:
            raise UserError(f"{flag} must be at least 1, not {value}")


def optimize(task: str | Task, *, policy: str = DEFAULT_POLICY, proposer: str = "auto", iterations: int = 10,
             batch: int = 1, evaluations: int | None = None, preset: str = "default", finalists: int = 3,
             seed: int = 0, db: str | Path = DEFAULT_DB, strategies: str | None = None, resume: bool = False,
             interpreter: bool = False, use_ncu: bool | None = None, tritonbench: str | None = None,
             on_event=None, knowledge: str | None = None, objective: str = "device") -> Summary:
    """Run one search into the run database `db` and return its summary. `proposer`: "rewrite", "llm", "hybrid"
    or "auto" (the LLM if one is configured in the environment). `knowledge`: where knowledge is carried across
    kernels (None: `db`; "off"; or another run database). `objective`: "device" (the kernels' time) or "call"
    (the wall time per call, host cost included). Bad input raises `UserError`."""
    from kernelband.knowledge import knowledge_option

    config = RunConfig(iterations, batch, evaluations, preset, finalists=finalists, objective=objective)
    check_run_config(config)
    carried_from = knowledge_option(knowledge)
    t = _task(task, tritonbench)
    chosen = make_proposer(ProposerChoice(proposer))
    loaded = check_search(policy, seed, strategies)
    store = Store(db)
    try:
        if resume:
            resumable_run(store, t, policy, chosen.name, seed)
        from kernelband.evaluation.evaluator import Evaluator  # torch: only once the input is checked

        with Evaluator(mode="interpreter" if interpreter else None, warm=2, preset=preset, use_ncu=use_ncu) as ev:
            search = open_search(t, ev, store, policy, chosen, seed, config, resume=resume, on_event=on_event,
                                 strategies=loaded, knowledge=carried_from)
            return search.run()
    finally:
        store.close()
