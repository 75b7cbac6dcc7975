"""The LLM path inside a search, against the scripted OpenAI-compatible server on 127.0.0.1: proposals counted
by outcome (live view, summary, `optimize --json`, report), what the model is told was tried, duplicates, the
hybrid proposer's routing, and the run store's migration of older databases."""

from __future__ import annotations

import json
import os
import re
import sqlite3
from pathlib import Path

import pytest
from llm_server import MODEL, completion, ok, send, serve, status
from rich.console import Console

from kernelband.search.core import LLMCall, ProposalOutcome
from kernelband.search.loop import RunConfig
from kernelband.search.session import ProposerChoice, make_proposer, open_search
from kernelband.store import Store

pytestmark = [pytest.mark.slow, pytest.mark.timeout(600)]

TRIED_RATIONALE = "Use 1024-element blocks with four warps."


def reply(rationale: str, code: str) -> str:
    return f"Rationale: {rationale}\n\n```python\n{code}```\n"


def search(evaluator, task, proposer, db: Path, policy="greedy", iterations=2, q=1, strategies=None, on_event=None):
    store = Store(db)
    config = RunConfig(iterations=iterations, q=q, held_out=False)
    s = open_search(task, evaluator, store, policy, proposer, 0, config, strategies, on_event=on_event,
                    out_dir=db.parent)
    return store, s.run()


def llm(url: str, kind: str = "llm"):
    return make_proposer(ProposerChoice(kind, model=MODEL, base_url=url, max_retries=0))


def test_failed_proposals_are_counted_shown_and_reported(evaluator, vector_add, tmp_path):
    from kernelband.cli.optimize import LiveView
    from kernelband.report import html, metrics
    from kernelband.report.text import print_report

    k0 = vector_add.module_source
    broken = k0.replace("def add(", "def add(:")
    reformatted = "# the starting kernel, reformatted\n" + k0.replace("    return out", "    return (out)")
    with serve() as server:
        server.script.extend([ok(reply(TRIED_RATIONALE, broken)), ok(reply("Nothing new.", reformatted))])
        proposer = llm(server.url)
        view = LiveView(vector_add.ref, "greedy", proposer.name, 2, proposer.waiting_s)
        store, summary = search(evaluator, vector_add, proposer, tmp_path / "runs.db", on_event=view)
        prompts = [r["body"]["messages"][1]["content"] for r in server.requests]

    # counted by outcome: in the summary (what `optimize --json` prints) and in the live view
    assert summary.proposals == {"syntax_error": 1, "duplicate": 1}
    assert summary.evaluations == 0 and summary.tokens == 400  # the duplicate's tokens are spent too
    console = Console(width=150, record=True)
    console.print(view.render())
    assert "1 broken Python, 1 duplicate" in console.export_text()
    # the second prompt names the variant already tried from the same parent, by its rationale
    assert TRIED_RATIONALE not in prompts[0]
    tried = prompts[1].split("## Variants already tried from the current kernel: do not repeat them\n")[1]
    assert tried.startswith('- strategy ') and f'"{TRIED_RATIONALE}": syntax_error' in tried.split("\n## ")[0]

    # the per-run table of LLM calls: outcome, latency, tokens, attempts
    calls = store.llm_calls(summary.run_id)
    assert [(c["outcome"], c["attempts"], c["tokens_in"]) for c in calls] == [("syntax_error", 1, 120),
                                                                               ("duplicate", 1, 120)]
    data = metrics.report_data(store, f"run:{summary.run_id}")
    assert [c["outcome"] for c in data["llm_calls"]] == ["syntax_error", "duplicate"]
    console = Console(width=200, record=True)
    print_report(data, console)
    text = console.export_text()
    assert "LLM calls" in text and "attempts" in text and "syntax_error" in text and "duplicate" in text
    page = html.render(data, {})
    assert '<table id="llm-calls">' in page and "the same code as candidate 0" in page


def routed_strategies(prompts: list[str]) -> list[str]:
    return [re.search(r"## Strategy to apply\n(\w+) \(targets", p).group(1) for p in prompts]


@pytest.mark.parametrize("routing, to_llm", [
    (None, {"fusion", "reordering", "access_layout"}),
    ('[[strategies]]\nname = "tiling"\nproposer = "llm"\n\n[[strategies]]\nname = "fusion"\nproposer = "rewriter"\n',
     {"tiling", "reordering", "access_layout"}),
])
def test_hybrid_sends_only_the_llm_strategies_to_the_llm(evaluator, vector_add, tmp_path, routing, to_llm):
    strategies = None
    if routing is not None:
        strategies = tmp_path / "routing.toml"
        strategies.write_text(routing)
    with serve() as server:
        server.default = ok("I would rather not write code today.")
        # one iteration of six arms: every applicable (k0, strategy) arm is pulled once
        store, summary = search(evaluator, vector_add, llm(server.url, "hybrid"), tmp_path / "runs.db",
                                policy="random", iterations=1, q=6, strategies=strategies)
        prompts = [r["body"]["messages"][1]["content"] for r in server.requests]
    assert summary.proposer == "hybrid"
    arms = [a["strategy"] for it in store.iterations(summary.run_id) for a in it["arms"]]
    llm_arms = [s for s in arms if s in to_llm]
    assert sorted(routed_strategies(prompts)) == sorted(llm_arms) == sorted(to_llm)
    assert len(server.requests) == len(llm_arms)
    rewriter_arms = [s for s in arms if s not in to_llm]
    assert rewriter_arms and summary.evaluations == len(rewriter_arms)  # the rewriter's children were evaluated
    assert summary.proposals == {"no_code": len(llm_arms), "ok": len(rewriter_arms)}


def test_an_older_database_gets_the_new_columns(tmp_path):
    db = tmp_path / "old.db"
    old = sqlite3.connect(db)
    old.executescript("""
        CREATE TABLE proposals (run_id INTEGER NOT NULL, iteration INTEGER NOT NULL, slot INTEGER NOT NULL,
            parent INTEGER NOT NULL, strategy TEXT NOT NULL, candidate INTEGER, error TEXT NOT NULL DEFAULT '',
            rationale TEXT NOT NULL DEFAULT '', tokens_in INTEGER NOT NULL DEFAULT 0,
            tokens_out INTEGER NOT NULL DEFAULT 0, PRIMARY KEY (run_id, iteration, slot));
        CREATE TABLE llm_calls (id INTEGER PRIMARY KEY, run_id INTEGER NOT NULL, iteration INTEGER NOT NULL,
            slot INTEGER NOT NULL, model TEXT NOT NULL DEFAULT '', tokens_in INTEGER NOT NULL DEFAULT 0,
            tokens_out INTEGER NOT NULL DEFAULT 0, latency_s REAL, outcome TEXT NOT NULL,
            error TEXT NOT NULL DEFAULT '', created REAL NOT NULL);
        INSERT INTO proposals VALUES (1, 1, 0, 0, 'tiling', 1, '', 'r', 10, 5), (1, 2, 0, 0, 'tiling', NULL, 'x', '', 0, 0),
            (1, 3, 0, 0, 'fusion', NULL, 'same', '', 10, 5), (1, 4, 0, 0, 'fusion', NULL, 'none', '', 0, 0);
        INSERT INTO llm_calls (run_id, iteration, slot, model, outcome, created) VALUES
            (1, 1, 0, 'm', 'ok', 0), (1, 2, 0, 'm', 'timeout', 0), (1, 3, 0, 'm', 'ok', 0);
    """)
    old.close()
    store = Store(db)
    outcomes = [store.proposal(1, i, 0)["outcome"] for i in (1, 2, 3, 4)]
    assert outcomes == ["ok", "timeout", "duplicate", "nothing"]
    assert [c["attempts"] for c in store.llm_calls(1)] == [None, None, None]  # not counted back then
    store.add_proposal(1, 5, 0, 0, "fusion", None, "HTTP 429", "", 0, 0,
                       [LLMCall("m", ProposalOutcome.RATE_LIMITED, attempts=3)], "rate_limited")
    assert store.llm_calls(1)[-1]["attempts"] == 3 and store.llm_calls(1)[-1]["strategy"] == "fusion"
    store.close()
    Store(db).close()  # a second open finds nothing to migrate


def test_optimize_json_carries_the_counts_and_the_llm_flags(tmp_path):
    """`optimize` and `report` through the typer app in this process (the LLM server is a thread of it): the
    flags reach the proposer and the counts reach --json and the report."""
    from typer.testing import CliRunner

    from kernelband.cli import app as app_module

    env = {k: None for k in os.environ if k.startswith(("KERNELBAND_LLM", "OPENAI"))}
    env["KERNELBAND_MODE"] = "interpreter"
    env["COLUMNS"] = "200"  # the report's tables at full width
    db = tmp_path / "runs.db"
    runner = CliRunner()
    with serve() as server:
        server.script.extend([ok("no code, sorry"), status(429, {"error": {"message": "slow down"}}),
                              lambda h: send(h, 200, json.dumps(completion("late")).encode())])
        proc = runner.invoke(app_module.app, ["optimize", "examples:vector_add", "--proposer", "llm", "--model", MODEL,
                                              "--base-url", server.url, "-n", "2", "--llm-timeout", "30",
                                              "--llm-retries", "0", "--policy", "greedy", "--db", str(db), "--json"],
                             env=env)
        assert proc.exit_code == 0, (proc.stderr[-2000:], proc.exception)
        assert len(server.requests) == 2  # --llm-retries 0: the 429 is not retried
    summary = json.loads(proc.stdout)
    assert summary["proposals"] == {"no_code": 1, "rate_limited": 1}
    text = runner.invoke(app_module.app, ["report", str(summary["run_id"]), "--db", str(db), "--format", "text"],
                         env=env)
    assert text.exit_code == 0, (text.stderr[-2000:], text.exception)
    assert "LLM calls" in text.stdout and "rate_limited" in text.stdout and "attempts" in text.stdout
