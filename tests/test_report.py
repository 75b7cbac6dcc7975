"""The report: metrics against an independent computation, the CLI, and the page in a real browser.

A realistic run database is built with the real Store API: 2 policies x 3 tasks (kernelband with seeds 0
and 1, beam with seed 0), 4 iterations each, candidates with EvalResults carrying speedups, rho features
and per-shape speed-of-light fractions, iterations with policy statistics (clusters for kernelband),
held-out evaluations and run summaries. The plan of each run (what every iteration produced) is kept, and
the expected metrics are computed from the plan directly, not from the database.

The browser test opens the HTML report in headless Chromium (Debian's `chromium`) over the DevTools
protocol: no console errors, every image loaded, the tables hold the numbers from the database. It keeps
a full-page screenshot in test-artifacts/report.png.
"""

from __future__ import annotations

import base64
import json
import math
import os
import random
import shutil
import sqlite3
import statistics
import subprocess
import time
import urllib.request
from pathlib import Path

import pytest
from rich.console import Console
from typer.testing import CliRunner

from kernelband.cli.app import app
from kernelband.errors import UserError
from kernelband.evaluation.records import EvalResult, Features, Outcome, ShapeResult
from kernelband.report.html import write_report
from kernelband.report.metrics import parse_target, report_data
from kernelband.report.tables import build as build_tables
from kernelband.search.core import LLMCall, source_hash
from kernelband.search.loop import Summary
from kernelband.store import Store

pytestmark = pytest.mark.timeout(120)

ROOT = Path(__file__).resolve().parents[1]
T = 4
POLICIES = {"kernelband": [0, 1], "beam": [0]}
TASKS = ["examples:rmsnorm", "examples:softmax", "examples:vector_add"]
STRATEGIES = ["tiling", "vectorization", "pipeline", "access_layout"]
K0_SOL = [0.20, 0.35, 0.30]
K0_SOURCE = '''import triton
import triton.language as tl


@triton.jit
def kernel(x_ptr, out_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    tl.store(out_ptr + offs, tl.load(x_ptr + offs, mask=mask), mask=mask)


def entry(x):
    BLOCK = 128
    return x  # if n < 1 && "<b>not a tag</b>"
'''


# -- the plan of every run, and the database built from it -------------------------------------------------
def plan(policy: str, task: str, seed: int) -> list[list[tuple[str, float | None]]]:
    """Per iteration, the kernels it produced: (outcome, speedup)."""
    key = (policy, task, seed)
    if key == ("beam", "examples:softmax", 0):  # never beats k0
        return [[("ok", 0.8)], [("compile_error", None)], [("ok", 0.95)], [("wrong_output", None)]]
    rng = random.Random(f"{policy}/{task}/{seed}")
    iterations = []
    for t in range(T):
        kids = []
        for _ in range(2 if (policy == "kernelband" and t == 1) else 1):  # one iteration pulls two arms
            r = rng.random()
            if r < 0.25:
                kids.append(("compile_error", None))
            elif r < 0.35:
                kids.append(("wrong_output", None))
            else:
                kids.append(("ok", round(rng.uniform(0.6, 2.6), 4)))
        iterations.append(kids)
    if key == ("beam", "examples:rmsnorm", 0):  # stopped early: nothing left to try
        iterations = iterations[:2]
    return iterations


HELD_OUT_FAILS = ("kernelband", "examples:softmax", 1)


def _shapes(speedup: float, sol_scale: float) -> list[ShapeResult]:
    shapes = [ShapeResult(index=i, label=f"n={4096 << (2 * i)}", held_out=False, correct=True, ref_ms=1.0 + i,
                          cand_ms=(1.0 + i) / speedup, speedup=speedup, bound_ms=(1.0 + i) * sol,
                          sol_fraction=min(1.0, sol * sol_scale), ref_call_ms=0.02 + i, call_ms=0.04 + i)
              for i, sol in enumerate(K0_SOL)]
    return shapes + [ShapeResult(index=3, label="n=999983", held_out=True)]


def _result(task: str, outcome: str, speedup: float | None, cid: int) -> EvalResult:
    if outcome != "ok":
        return EvalResult(task=task, outcome=Outcome(outcome), detail=f"{outcome} in candidate {cid} <&>",
                          stage="compile" if outcome == "compile_error" else "correctness")
    rho = {"log_time": -math.log(speedup), "log_memory_footprint": 20.0 + (cid % 3),
           "arithmetic_intensity": 0.25 * (1 + cid % 2), "block_dim_x": float(128 << (cid % 3)),
           "block_dim_y": 1.0, "achieved_occupancy": 0.3 + 0.05 * (cid % 5)}
    return EvalResult(task=task, outcome=Outcome.OK, speedup=speedup,
                      shapes=_shapes(speedup, 1.0 if cid == 0 else speedup),
                      features=Features(rho=rho), device="NVIDIA H100 80GB HBM3")


def build_db(path: Path) -> tuple[Store, int, dict]:
    """Returns the store, the bench id and {(policy, task, seed): run id}."""
    store = Store(path)
    bench = store.create_bench("examples", {"policies": list(POLICIES), "seeds": [0, 1], "iterations": T,
                                            "proposer": "llm", "preset": "default", "q": 1})
    ids = {}
    for policy, seeds in POLICIES.items():
        for task in TASKS:
            for seed in seeds:
                ids[(policy, task, seed)] = _build_run(store, bench, policy, task, seed)
    store.finish_bench(bench)
    return store, bench, ids


def _build_run(store: Store, bench: int, policy: str, task: str, seed: int) -> int:
    rng = random.Random(f"strategies/{policy}/{task}/{seed}")
    run = store.create_run(task, source_hash(task), policy, "llm", seed, {"iterations": T, "q": 1,
                                                                          "preset": "default"},
                           device="NVIDIA H100 80GB HBM3", bench_id=bench)
    store.add_candidate(run, 0, K0_SOURCE, source_hash(K0_SOURCE), None, None, 0, 0, "the starting kernel")
    k0 = _result(task, "ok", 0.995, 0)  # k0 against itself: the noise floor
    store.add_evaluation(run, 0, "search", k0)
    valid = {0: 1.0}
    best_id, cid, tokens, evaluations, per_iteration = 0, 0, 0, 0, []
    iterations = plan(policy, task, seed)
    for t, kids in enumerate(iterations, start=1):
        arms = []
        for slot, (outcome, speedup) in enumerate(kids):
            cid += 1
            strategy = rng.choice(STRATEGIES)
            source = K0_SOURCE.replace("BLOCK = 128", f"BLOCK = {128 << cid}  # {strategy}")
            parent = best_id
            store.add_candidate(run, cid, source, source_hash(source), parent, strategy, t, slot, f"try {strategy}")
            store.add_proposal(run, t, slot, parent, strategy, cid, "", f"try {strategy}", 1000 + cid, 500,
                               [LLMCall("m", tokens_in=1000 + cid, tokens_out=500, attempts=1)])
            store.add_evaluation(run, cid, "search", _result(task, outcome, speedup, cid))
            tokens += 1500 + cid
            evaluations += 1
            if outcome == "ok":
                valid[cid] = speedup
                if speedup > valid[best_id]:
                    best_id = cid
            arms.append({"candidate": parent, "strategy": strategy, "child": cid, "outcome": outcome,
                         "speedup": speedup, "reward": 0.0 if speedup is None else 1 - 1 / speedup})
        speedups = [a["speedup"] for a in arms if a["speedup"]]
        stats = {"t": t, "counts": {s: 1 for s in STRATEGIES}}
        if policy == "kernelband":
            stats["clusters"] = {c: c % 3 for c in valid}
        store.add_iteration(run, t, arms, valid[best_id], max(speedups) if speedups else None, len(valid), tokens,
                            stats, 1.5)
        per_iteration.append({"iteration": t, "best_speedup": valid[best_id],
                              "iteration_speedup": max(speedups) if speedups else None, "pool_size": len(valid),
                              "tokens": tokens, "seconds": 1.5})
    held, outcome = 1.0, "ok"
    if best_id != 0:
        if (policy, task, seed) == HELD_OUT_FAILS:
            result = EvalResult(task=task, outcome=Outcome.WRONG_OUTPUT, detail="held-out shape n=999983 differs")
            held, outcome = None, "wrong_output"
        else:
            held = round(valid[best_id] * 0.9, 4)
            result = EvalResult(task=task, outcome=Outcome.OK, held_out_speedup=held)
        store.add_evaluation(run, best_id, "held_out", result)
    sol = statistics.median(min(1.0, s * valid[best_id]) for s in K0_SOL)
    summary = Summary(run_id=run, task=task, policy=policy, proposer="llm", seed=seed, iterations=len(iterations),
                      evaluations=evaluations, best_candidate=best_id, best_speedup=valid[best_id],
                      best_outcome=outcome, held_out_speedup=held, best_sol_fraction=sol, k0_self_speedup=0.995,
                      tokens=tokens, pool_size=len(valid), per_iteration=per_iteration,
                      stopped="" if len(iterations) == T else "the policy has no applicable arm left")
    store.finish_run(run, "done", summary.to_dict())
    return run


# -- the expected numbers, from the plans ------------------------------------------------------------------
def gm(values: list[float]) -> float:
    return math.prod(values) ** (1 / len(values))


def expected_curves(policy: str) -> list[dict]:
    """Per iteration: current and best geomean / Fast@1 / n_valid, averaged over the policy's seeds."""
    rows = []
    for t in range(1, T + 1):
        per_seed = []
        for seed in POLICIES[policy]:
            cur, best, generated = [], [], []
            for task in TASKS:
                its = plan(policy, task, seed)
                sp = [s for kids in its[:t] for o, s in kids if o == "ok"]
                best.append(max([1.0, *sp]))
                generated.append(sp)
                now = [s for o, s in its[t - 1] if o == "ok"] if t <= len(its) else []
                cur.append(max(now) if now else None)
            valid = [c for c in cur if c is not None]
            gen = [max(sp) for sp in generated if sp]
            per_seed.append({"cur": gm(valid) if valid else None, "cur_fast": 100 * sum(c > 1.1 for c in valid) / 3,
                             "n_valid": len(valid), "best": gm(best), "best_fast": 100 * sum(b > 1.1 for b in best) / 3,
                             "gen": gm(gen) if gen else None, "gen_fast": 100 * sum(g > 1.1 for g in gen) / 3})
        rows.append({k: _mean([d[k] for d in per_seed]) for k in per_seed[0]})
    return rows


def _mean(values: list) -> float | None:
    """The mean over seeds of the values that exist (a seed with no correct kernel in an iteration has none)."""
    vals = [v for v in values if v is not None]
    return statistics.mean(vals) if vals else None


def expected_summary(policy: str) -> dict:
    per_seed = []
    for seed in POLICIES[policy]:
        best, correct, ok, n, held, sols = [], [], 0, 0, [], []
        for task in TASKS:
            sp = [s for kids in plan(policy, task, seed) for o, s in kids if o == "ok"]
            n += sum(len(kids) for kids in plan(policy, task, seed))
            ok += len(sp)
            b = max([1.0, *sp])
            best.append(b)
            if sp:
                correct.append(max(sp))
            if (policy, task, seed) != HELD_OUT_FAILS:
                held.append(round(b * 0.9, 4) if b > 1.0 else 1.0)
            sols.append(statistics.median(min(1.0, s * b) for s in K0_SOL))
        per_seed.append({"geomean_best": gm(best), "fast1_best": 100 * sum(b > 1.1 for b in best) / 3,
                         "best_speedup": max(best), "correct_eval_pct": 100 * ok / n,
                         "correct_task_pct": 100 * len(correct) / 3, "geomean_correct": gm(correct),
                         "held_out_geomean": gm(held), "sol_median": statistics.median(sols)})
    return {k: statistics.mean(d[k] for d in per_seed) for k in per_seed[0]}


@pytest.fixture(scope="module")
def built(tmp_path_factory):
    folder = tmp_path_factory.mktemp("report")
    store, bench, ids = build_db(folder / "runs.db")
    data = report_data(store, f"bench:{bench}")
    page = write_report(data, folder / "out")
    yield {"store": store, "bench": bench, "ids": ids, "data": data, "page": page, "folder": folder}
    store.close()


# -- metrics ---------------------------------------------------------------------------------------------
def test_plans_cover_the_cases():
    """The random plans must contain what the definitions are about: failed iterations, slow kernels."""
    curves = expected_curves("kernelband") + expected_curves("beam")
    assert any(row["n_valid"] < 3 for row in curves)
    assert any(s is not None and s < 1.0 for p in POLICIES for task in TASKS for seed in POLICIES[p]
               for kids in plan(p, task, seed) for _, s in kids)


def test_parse_target():
    assert parse_target("bench:3") == ("bench", 3)
    assert parse_target("run:12") == ("run", 12)
    assert parse_target("12") == ("run", 12)
    assert parse_target(7) == ("run", 7)
    for bad in ("bench:", "foo:3", "3x", ""):
        with pytest.raises(Exception, match="run:N"):
            parse_target(bad)


def test_per_iteration_metrics(built):
    data = built["data"]
    assert data["policies"] == ["beam", "kernelband"]
    for policy in POLICIES:
        got, want = data["iterations"][policy], expected_curves(policy)
        assert [row["t"] for row in got] == list(range(1, T + 1))
        for row, exp in zip(got, want):
            assert row["best"]["geomean"] == pytest.approx(exp["best"])
            assert row["best"]["fast1"] == pytest.approx(exp["best_fast"])
            assert row["current"]["fast1"] == pytest.approx(exp["cur_fast"])
            assert row["current"]["n_valid"] == pytest.approx(exp["n_valid"])
            assert row["best_generated"]["fast1"] == pytest.approx(exp["gen_fast"])
            for key, which in (("cur", "current"), ("gen", "best_generated")):
                if exp[key] is None:
                    assert row[which]["geomean"] is None
                else:
                    assert row[which]["geomean"] == pytest.approx(exp[key])
        # the paper's tables start equal: at t=1 the best generated kernel is the current one
        assert got[0]["best_generated"] == got[0]["current"]
    # the early-stopped beam run (2 of 4 iterations) keeps its best; expected_curves counts it so
    rms = [r for r in data["tasks"] if r["policy"] == "beam" and r["task"] == "examples:rmsnorm"][0]
    assert rms["iterations"] == 2


def test_summary_metrics(built):
    data = built["data"]
    for policy in POLICIES:
        got, want = data["summary"][policy], expected_summary(policy)
        for key, value in want.items():
            assert got[key] == pytest.approx(value), key
        assert got["n_seeds"] == len(POLICIES[policy])
        assert got["tasks"] == TASKS
    # the held-out failure is counted, and the per-seed values are kept
    assert data["summary"]["kernelband"]["per_seed"]["1"]["held_out_failed"] == 1
    assert data["summary"]["kernelband"]["held_out_failed"] == pytest.approx(0.5)
    # tokens: iteration t of a run costs the sum over its kids of 1500 + candidate id
    kb_tokens = data["iterations"]["kernelband"][0]["tokens"]
    assert kb_tokens == pytest.approx(1500 + 1)


def test_per_task_rows_match_the_database(built):
    store, data = built["store"], built["data"]
    rows = {(r["policy"], r["task"], r["seed"]): r for r in data["tasks"]}
    assert len(rows) == 9
    for key, run_id in built["ids"].items():
        summary = store.run(run_id).summary
        row = rows[key]
        assert row["run_id"] == run_id
        assert row["best_speedup"] == summary["best_speedup"]
        assert row["held_out"] == summary["held_out_speedup"]
        assert row["sol_fraction"] == summary["best_sol_fraction"]
        assert row["evaluations"] == sum(len(k) for k in plan(*key))
    json.dumps(data, allow_nan=False)  # strict JSON


def test_pool_and_lineage(built):
    data, store = built["data"], built["store"]
    focus = data["focus_run"]
    assert store.run(focus).policy == "kernelband"  # the largest clustered pool
    valid = [e for e in store.evaluations(focus) if e["which"] == "search" and e["outcome"] == "ok"]
    pool = data["pool"]
    assert len(pool["points"]) == len(valid)
    assert pool["features"][:6] == ["log_time", "log_memory_footprint", "arithmetic_intensity", "block_dim_x",
                                    "block_dim_y", "achieved_occupancy"]
    assert {p["cluster"] for p in pool["points"]} == {p["candidate"] % 3 for p in pool["points"]}
    assert sum(pool["explained_variance"]) <= 1.0 + 1e-9
    nodes = data["lineage"]["nodes"]
    assert len(nodes) == len(store.candidates(focus))
    assert sum(n["best"] for n in nodes) == 1


def test_run_report(built, tmp_path):
    run_id = built["ids"][("kernelband", "examples:vector_add", 0)]
    data = report_data(built["store"], run_id)
    assert data["kind"] == "run" and data["policies"] == ["kernelband"]
    best = [r for r in data["iterations"]["kernelband"]]
    assert best[-1]["best"]["geomean"] == pytest.approx(built["store"].run(run_id).summary["best_speedup"])
    assert data["shape_sol"] and data["shape_sol"][0]["k0"] == pytest.approx(K0_SOL[0])
    page = write_report(data, tmp_path / "run")
    # one run: its trajectory, not a bench's geomean and Fast@1 over one task (flat at 0 or 100 %)
    files = {p.name for p in page.parent.iterdir()}
    assert {"trajectory.png", "sol.png", "pool.png"} <= files and not {"speedup.png", "fast1.png"} & files
    tables = {t.id: t for t in build_tables(data)}
    assert not {"summary", "iter-current", "iter-best", "iter-best-generated", "tokens"} & set(tables)
    stored = built["store"].iterations(run_id)
    assert [r[1][0] for r in tables["trajectory"].rows] == [f"{it['best_speedup']:.3f}" for it in stored]
    assert all(r[6][0].startswith("#") for r in tables["trajectory"].rows)  # the arms pulled
    best = data["best_kernels"][0]["candidate"]
    search = built["store"].evaluation(run_id, best)
    shapes = tables["shapes"].rows
    assert [r[0][0] for r in shapes] == [s.label for s in search.shapes]
    assert shapes[0][4][0] == f"{search.shapes[0].speedup:.3f}" and shapes[0][8][0] == "0.995"  # k0 vs itself
    # per call beside the device time: the wall times of back-to-back calls and their speedup
    assert [c[0] for c in shapes[0][5:8]] == ["0.02", "0.04", "0.500"]
    html = page.read_text()
    assert "Trajectory" in html and "Per shape, against the reference and torch" in html and 'id="lineage"' in html
    assert "Speedup and Fast@1 per iteration" not in html
    assert not data["warnings"]  # measured on a GPU: no interpreter warning


def test_the_report_of_an_interpreter_run_says_first_that_its_speedups_say_nothing_about_a_gpu(tmp_path):
    from kernelband.report import markdown
    from kernelband.report.text import print_report

    store = Store(tmp_path / "runs.db")
    run = store.create_run("examples:vector_add", "key", "greedy", "rewrite", 0, {"iterations": 1},
                           device="Triton interpreter (CPU)")
    store.add_candidate(run, 0, K0_SOURCE, source_hash(K0_SOURCE), None, None, 0, 0, "the starting kernel")
    k0 = _result("examples:vector_add", "ok", 0.98, 0)
    k0.interpreter, k0.device = True, "Triton interpreter (CPU)"
    store.add_evaluation(run, 0, "search", k0)
    child = K0_SOURCE.replace("BLOCK = 128", "BLOCK = 256")
    store.add_candidate(run, 1, child, source_hash(child), 0, "block_size", 1, 0, "bigger blocks")
    store.add_evaluation(run, 1, "search", _result("examples:vector_add", "ok", 1.3, 1))
    store.add_iteration(run, 1, [{"candidate": 0, "strategy": "block_size", "child": 1, "outcome": "ok",
                                  "speedup": 1.3}], 1.3, 1.3, 2, 0, {}, 2.0)
    store.finish_run(run, "done", {"best_candidate": 1, "best_speedup": 1.3, "best_outcome": "ok",
                                   "interpreter": True, "iterations": 1, "evaluations": 1})
    data = report_data(store, f"run:{run}")
    assert data["warnings"][0].startswith("interpreter timings:") and "say nothing about a GPU" in data["warnings"][0]
    assert markdown.render(data).split("\n\n")[1].startswith("**Warning:** interpreter timings:")
    console = Console(record=True, width=200)
    print_report(data, console)
    text = console.export_text()
    assert text.splitlines()[1].startswith("warning: interpreter timings:")
    assert "#1 block_size (iteration 1): ok 1.300x <- best" in text  # the lineage
    assert "+    BLOCK = 256" in text  # the diff of the kernel handed back
    page = write_report(data, tmp_path / "out").read_text()
    assert page.index("Warning: interpreter timings") < page.index("<h2>")


def test_the_llm_calls_are_reported_per_run(built, tmp_path):
    """A run's report lists its calls (outcome, latency, tokens, attempts); a bench's counts them per run."""
    outcomes = built["data"]["llm_outcomes"]
    assert sorted(r["run_id"] for r in outcomes) == sorted(built["ids"].values())
    assert all(r["outcomes"] == {"ok": r["calls"]} and r["tokens"] > 0 for r in outcomes)
    assert '<table id="llm-outcomes">' in built["page"].read_text()
    run_id = built["ids"][("kernelband", "examples:vector_add", 0)]
    data = report_data(built["store"], run_id)
    calls = built["store"].llm_calls(run_id)
    assert [(c["outcome"], c["attempts"], c["tokens_in"]) for c in data["llm_calls"]] == \
        [("ok", 1, c["tokens_in"]) for c in calls] and calls
    assert '<table id="llm-calls">' in write_report(data, tmp_path / "run").read_text()


# -- the command line ------------------------------------------------------------------------------------
def test_cli(built, tmp_path):
    runner = CliRunner()
    db = built["store"].path
    res = runner.invoke(app, ["report", f"bench:{built['bench']}", "--db", str(db), "--out", str(tmp_path / "r")])
    assert res.exit_code == 0, res.output
    assert (tmp_path / "r" / "index.html").exists() and (tmp_path / "r" / "report.json").exists()
    res = runner.invoke(app, ["report", f"bench:{built['bench']}", "--db", str(db), "--format", "text"])
    assert res.exit_code == 0, res.output
    geomean = built["data"]["summary"]["kernelband"]["geomean_best"]
    assert f"{geomean:.3f}" in res.output and "Best so far" in res.output
    res = runner.invoke(app, ["report", f"bench:{built['bench']}", "--db", str(db), "--format", "markdown",
                              "--out", str(tmp_path / "md")])
    assert res.exit_code == 0, res.output
    assert res.output == (tmp_path / "md" / "report.md").read_text()
    summary = res.output[res.output.index("### Summary per policy"):].split("\n\n")[1].splitlines()
    header = [c.strip() for c in summary[0].strip("|").split("|")]
    row = next(r for r in summary[2:] if r.startswith("| kernelband |"))
    cells = dict(zip(header, (c.strip() for c in row.strip("|").split("|"))))
    assert cells["geomean speedup"] == f"{geomean:.3f}"  # the database's number, in its column
    assert summary[1].count("---:") == len(header) - 1  # every column but the policy's is numeric
    for args in (["run:999", "--db", str(db), "--out", str(tmp_path / "x")],
                 ["bench:42", "--db", str(db), "--out", str(tmp_path / "x")],
                 ["nonsense", "--db", str(db), "--out", str(tmp_path / "x")],
                 ["run:1", "--db", str(tmp_path / "missing.db"), "--out", str(tmp_path / "x")],
                 ["run:1", "--db", str(db)],
                 ["run:1", "--db", str(db), "--format", "pdf"]):
        res = runner.invoke(app, ["report", *args])
        assert res.exit_code == 2, (args, res.output)
        assert "error:" in res.output and res.output.strip().count("\n") == 0, res.output
    assert not (tmp_path / "missing.db").exists()


# -- the page in a real browser ----------------------------------------------------------------------------
class DevTools:
    """A minimal Chrome DevTools protocol client over one websocket."""

    def __init__(self, url: str):
        import websocket

        self.ws = websocket.create_connection(url, timeout=30, suppress_origin=True)
        self.next_id = 0
        self.events: list[dict] = []

    def call(self, method: str, **params) -> dict:
        self.next_id += 1
        self.ws.send(json.dumps({"id": self.next_id, "method": method, "params": params}))
        while True:
            msg = json.loads(self.ws.recv())
            if msg.get("id") == self.next_id:
                if "error" in msg:
                    raise RuntimeError(f"{method}: {msg['error']}")
                return msg.get("result", {})
            self.events.append(msg)

    def wait_for(self, method: str, timeout: float = 30) -> dict:
        deadline = time.monotonic() + timeout
        seen = 0  # events that arrived while a call waited for its reply count too
        while time.monotonic() < deadline:
            for event in self.events[seen:]:
                if event.get("method") == method:
                    return event
            seen = len(self.events)
            self.events.append(json.loads(self.ws.recv()))
        raise TimeoutError(method)

    def errors(self) -> list[str]:
        found = []
        for e in self.events:
            m, p = e.get("method"), e.get("params", {})
            if m == "Runtime.consoleAPICalled" and p.get("type") in ("error", "assert"):
                found.append(f"console: {[a.get('value') for a in p.get('args', [])]}")
            elif m == "Runtime.exceptionThrown":
                found.append(f"exception: {p['exceptionDetails'].get('text')}")
            elif m == "Log.entryAdded" and p["entry"].get("level") == "error":
                found.append(f"log: {p['entry'].get('text')} {p['entry'].get('url', '')}")
            elif m == "Network.loadingFailed":
                found.append(f"network: {p.get('errorText')}")
        return found

    def open(self, url: str) -> None:
        self.events.clear()
        self.call("Page.navigate", url=url)
        self.wait_for("Page.loadEventFired")

    def evaluate(self, expression: str):
        res = self.call("Runtime.evaluate", expression=expression, returnByValue=True, awaitPromise=True)
        return res["result"].get("value")


DOM = """JSON.stringify({
  scripts: document.scripts.length,
  images: Array.from(document.images).map(i => ({src: i.getAttribute('src'), w: i.naturalWidth, ok: i.complete})),
  tables: Object.fromEntries(Array.from(document.querySelectorAll('table[id]')).map(t => [t.id, {
    head: Array.from(t.querySelectorAll('thead th')).map(c => c.textContent),
    rows: Array.from(t.tBodies[0].rows).map(r => Array.from(r.cells).map(c => c.textContent))}])),
  pres: Array.from(document.querySelectorAll('pre')).map(p => p.textContent),
  preChildren: Array.from(document.querySelectorAll('pre *')).length,
  lineage: document.querySelectorAll('#lineage li').length,
  external: Array.from(document.querySelectorAll('[src],[href]')).map(e => e.getAttribute('src') || e.getAttribute('href'))
    .filter(u => /^[a-z]+:/i.test(u)),
})"""


@pytest.fixture(scope="module")
def browser(tmp_path_factory):
    exe = shutil.which("chromium") or shutil.which("chromium-browser")
    if exe is None:
        pytest.skip("no `chromium` on PATH (Debian: apt-get install chromium): the browser check is skipped")
    profile = tmp_path_factory.mktemp("chromium-profile")
    args = [exe, "--headless=new", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage", "--no-first-run",
            "--no-default-browser-check", "--disable-extensions", "--disable-background-networking",
            "--remote-debugging-port=0", "--remote-allow-origins=*", f"--user-data-dir={profile}",
            "--window-size=1280,1000", "about:blank"]
    proc = subprocess.Popen(args, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=dict(os.environ))
    try:
        port_file = profile / "DevToolsActivePort"
        deadline = time.monotonic() + 30
        while not (port_file.exists() and port_file.read_text().strip()):
            if proc.poll() is not None or time.monotonic() > deadline:
                pytest.fail(f"chromium did not start (exit code {proc.poll()})")
            time.sleep(0.1)
        port = int(port_file.read_text().split()[0])
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/json/list", timeout=10) as reply:
            pages = [t for t in json.load(reply) if t["type"] == "page"]
        tools = DevTools(pages[0]["webSocketDebuggerUrl"])
        for domain in ("Page", "Runtime", "Log", "Network"):
            tools.call(f"{domain}.enable")
        yield tools
        tools.ws.close()
    finally:
        proc.terminate()
        try:
            proc.wait(10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


def test_browser_sees_broken_pages(browser, tmp_path):
    """The checks below must be able to fail: a page with a missing image and a console error."""
    bad = tmp_path / "bad.html"
    bad.write_text('<html><body><img src="missing.png"><script>console.error("boom")</script></body></html>')
    browser.open(bad.as_uri())
    errors = browser.errors()
    assert any("boom" in e for e in errors) and any("missing.png" in e or "ERR_FILE" in e for e in errors), errors
    dom = json.loads(browser.evaluate(DOM))
    assert dom["images"][0]["w"] == 0


def test_report_in_browser(built, browser):
    page, data, store = built["page"], built["data"], built["store"]
    browser.open(page.as_uri())
    dom = json.loads(browser.evaluate(DOM))
    assert browser.errors() == []
    assert dom["scripts"] == 0 and dom["external"] == []

    assert {Path(i["src"]).name for i in dom["images"]} == {"speedup.png", "fast1.png", "tasks.png", "sol.png",
                                                          "pool.png"}
    for image in dom["images"]:
        assert image["ok"] and image["w"] > 0, image

    tables = dom["tables"]
    # per task: the numbers stored in the database
    rows = {(r[1], r[0], int(r[2])): r for r in tables["tasks"]["rows"]}
    assert len(rows) == 9
    col = {name: i for i, name in enumerate(tables["tasks"]["head"])}
    for key, run_id in built["ids"].items():
        s = store.run(run_id).summary
        row = rows[key]
        assert int(row[col["run"]]) == run_id
        assert row[col["best speedup"]] == f"{s['best_speedup']:.3f}"
        assert row[col["held-out"]] == ("-" if s["held_out_speedup"] is None else f"{s['held_out_speedup']:.3f}")
        assert row[col["best outcome"]] == s["best_outcome"]
        assert row[col["SOL"]] == f"{s['best_sol_fraction']:.2f}"
        assert int(row[col["evaluations"]]) == s["evaluations"]
    # summary and per-iteration tables: the independently computed numbers
    summary = {r[0]: r for r in tables["summary"]["rows"]}
    for policy in POLICIES:
        want = expected_summary(policy)
        row = summary[policy]
        assert row[3] == f"{want['geomean_best']:.3f}"
        assert row[4] == f"{want['fast1_best']:.0f}%"
        assert row[5] == f"{want['best_speedup']:.3f}"
        assert row[6] == f"{want['correct_eval_pct']:.0f}%"
        assert row[tables["summary"]["head"].index("geomean, correct tasks")] == f"{want['geomean_correct']:.3f}"
    head = tables["iter-best"]["head"]
    for policy in POLICIES:
        col = head.index(policy)
        for t, exp in enumerate(expected_curves(policy)):
            assert tables["iter-best"]["rows"][t][col] == f"{exp['best']:.3f} / {exp['best_fast']:.0f}%"
            assert tables["iter-current"]["rows"][t][col].split(" / ")[1].startswith(f"{exp['cur_fast']:.0f}%")
    held = {r[0]: r for r in tables["held-out"]["rows"]}
    assert held["kernelband"][2] == f"{expected_summary('kernelband')['held_out_geomean']:.3f}"

    # the diffs are text, escaped: the starting kernel's `<b>` is not an element
    assert dom["preChildren"] == 0
    assert all('n < 1 && "<b>not a tag</b>"' in p for p in dom["pres"])
    assert all(p.startswith("---") for p in dom["pres"])
    assert dom["lineage"] == len(store.candidates(data["focus_run"]))

    metrics = browser.call("Page.getLayoutMetrics")["cssContentSize"]
    shot = browser.call("Page.captureScreenshot", format="png", captureBeyondViewport=True,
                        clip={"x": 0, "y": 0, "width": metrics["width"], "height": metrics["height"], "scale": 1})
    artifacts = ROOT / "test-artifacts"
    artifacts.mkdir(exist_ok=True)
    png = base64.b64decode(shot["data"])
    assert png[:8] == b"\x89PNG\r\n\x1a\n"
    (artifacts / "report.png").write_bytes(png)


def test_unfinished_and_broken_runs(tmp_path):
    """A run still going (no summary) reports what it has; a run whose k0 failed is left out, not fatal."""
    store = Store(tmp_path / "partial.db")
    bench = store.create_bench("examples", {"policies": ["random"], "seeds": [0], "iterations": 5})
    live = store.create_run("examples:softmax", "k", "random", "rewrite", 0, {"iterations": 5}, bench_id=bench)
    store.add_candidate(live, 0, K0_SOURCE, source_hash(K0_SOURCE), None, None, 0, 0)
    store.add_evaluation(live, 0, "search", _result("examples:softmax", "ok", 1.01, 0))
    for cid, (outcome, speedup) in enumerate([("ok", 1.3), ("runtime_error", None)], start=1):
        source = K0_SOURCE.replace("128", str(cid))
        store.add_candidate(live, cid, source, source_hash(source), 0, "tiling", cid, 0)
        store.add_evaluation(live, cid, "search", _result("examples:softmax", outcome, speedup, cid))
        store.add_iteration(live, cid, [], 1.3, speedup, 2, 0, {}, 1.0)
    broken = store.create_run("examples:rmsnorm", "k2", "random", "rewrite", 0, {"iterations": 5}, bench_id=bench)
    store.add_candidate(broken, 0, K0_SOURCE, source_hash(K0_SOURCE), None, None, 0, 0)
    store.add_evaluation(broken, 0, "search", _result("examples:rmsnorm", "compile_error", None, 0))

    data = report_data(store, f"bench:{bench}")
    assert data["warnings"] == ["unfinished sweep: 0 of ? planned runs are done"]
    assert [e["run_id"] for e in data["excluded"]] == [broken]
    row = [r for r in data["tasks"] if r["run_id"] == live][0]
    assert (row["best_speedup"], row["best_candidate"], row["evaluations"], row["evals_ok"]) == (1.3, 1, 2, 1)
    its = data["iterations"]["random"]
    assert len(its) == 5  # the configured horizon
    assert [it["best"]["geomean"] for it in its] == [1.3] * 5
    assert [it["current"]["geomean"] for it in its] == [1.3, None, None, None, None]
    assert data["summary"]["random"]["correct_eval_pct"] == 50.0
    write_report(data, tmp_path / "out")  # renders
    empty = report_data(store, f"run:{broken}")
    assert empty["policies"] == [] and empty["excluded"]
    assert "nothing to report" in write_report(empty, tmp_path / "empty").read_text()
    store.close()


def test_a_sweep_split_over_two_databases_merges_into_the_same_report(tmp_path):
    """Half the tasks in one database, half in another (two machines or sessions): merged, the report's
    numbers are those of the sweep run in one database; merging again copies nothing."""
    whole, bench, _ = build_db(tmp_path / "whole.db")
    with whole._tx() as db:
        db.execute("UPDATE runs SET handed_back = 'the module of run ' || id")
    expected = report_data(whole, f"bench:{bench}")
    parts = []
    for name, keep in (("a", TASKS[: len(TASKS) // 2]), ("b", TASKS[len(TASKS) // 2:])):
        part = tmp_path / f"{name}.db"
        with sqlite3.connect(tmp_path / "whole.db") as src, sqlite3.connect(part) as dst:
            src.backup(dst)  # the open database's WAL included
        store = Store(part)
        with store._tx() as db:
            gone = [r.id for r in store.runs(bench) if r.task not in keep]
            for table in ("candidates", "proposals", "evaluations", "iterations", "llm_calls"):
                db.executemany(f"DELETE FROM {table} WHERE run_id = ?", [(i,) for i in gone])
            db.executemany("DELETE FROM runs WHERE id = ?", [(i,) for i in gone])
        store.close()
        parts.append(part)

    merged = tmp_path / "merged.db"
    runner = CliRunner()
    res = runner.invoke(app, ["merge", str(parts[0]), str(bench), "--db", str(merged)])
    assert res.exit_code == 0, res.output
    target = int(" ".join(res.output.split()).split("into bench ")[1].split()[0])
    res = runner.invoke(app, ["merge", str(parts[1]), str(bench), "--db", str(merged), "--into", str(target)])
    assert res.exit_code == 0, res.output
    store = Store(merged)
    assert len(store.runs(target)) == len(whole.runs(bench))
    kept = sorted(whole.handed_back(r.id) for r in whole.runs(bench))
    assert all(kept) and sorted(store.handed_back(r.id) for r in store.runs(target)) == kept  # the modules too
    got = report_data(store, f"bench:{target}")
    assert got["summary"] == expected["summary"]
    def rows(data):  # run ids are new in the merged database
        return sorted(json.dumps({k: v for k, v in r.items() if k != "run_id"}, sort_keys=True)
                       for r in data["tasks"])

    assert rows(got) == rows(expected)

    again = runner.invoke(app, ["merge", str(parts[1]), str(bench), "--db", str(merged), "--into", str(target)])
    assert "0 runs copied" in " ".join(again.output.split())
    other = Store(tmp_path / "other.db")
    odd = other.create_bench("examples", {"policies": ["random"], "seeds": [0], "iterations": 3})
    other.close()
    res = runner.invoke(app, ["merge", str(tmp_path / "other.db"), str(odd), "--db", str(merged), "--into",
                              str(target)])
    message = " ".join(res.output.split())
    assert res.exit_code == 2 and "differs from bench" in message and "policies" in message
    res = runner.invoke(app, ["merge", str(merged), str(target), "--db", str(merged)])
    assert res.exit_code == 2 and "the database being merged into" in " ".join(res.output.split())
    assert len(Store(merged).runs(target)) == len(whole.runs(bench))  # nothing lost, nothing doubled
    res = runner.invoke(app, ["merge", str(parts[0]), "99", "--db", str(tmp_path / "new.db")])
    assert res.exit_code == 2 and "no bench 99" in " ".join(res.output.split())
    assert not (tmp_path / "new.db").exists()  # a failed merge leaves no empty database behind


def test_the_report_names_the_gpu_and_warns_when_runs_were_measured_on_several(tmp_path):
    """A bench is measured on one GPU model; the report says which, and warns when its runs name several."""
    from kernelband.report.markdown import render

    store, bench, ids = build_db(tmp_path / "runs.db")
    with store._tx() as db:
        db.execute("UPDATE runs SET device = 'NVIDIA H200' WHERE bench_id = ?", (bench,))
    data = report_data(store, f"bench:{bench}")
    assert data["devices"] == ["NVIDIA H200"] and data["warnings"] == []
    assert render(data).startswith(f"## Bench {bench} (") and " on NVIDIA H200\n" in render(data).splitlines(True)[0]
    other = next(iter(ids.values()))
    store.set_device(other, "NVIDIA H100 80GB HBM3")
    data = report_data(store, f"bench:{bench}")
    assert data["devices"] == ["NVIDIA H100 80GB HBM3", "NVIDIA H200"]
    [warning] = data["warnings"]
    assert warning == (f"runs measured on different GPU models (NVIDIA H200 {len(ids) - 1}, NVIDIA H100 80GB HBM3 1 "
                       "runs): their speedups differ by GPU as well as by policy")
    assert "differ by GPU as well as by policy" in write_report(data, tmp_path / "out").read_text()


def test_the_report_warns_when_policies_cover_different_tasks(tmp_path):
    store, bench, ids = build_db(tmp_path / "runs.db")
    assert report_data(store, f"bench:{bench}")["warnings"] == []
    policy = next(iter(POLICIES))
    gone = [run for (p, task, _), run in ids.items() if p == policy and task == TASKS[0]]
    with store._tx() as db:
        db.executemany("UPDATE runs SET bench_id = NULL WHERE id = ?", [(i,) for i in gone])
    data = report_data(store, f"bench:{bench}")
    assert len(data["warnings"]) == 1 and "cover different tasks" in data["warnings"][0]
    assert f"{policy} {len(TASKS) - 1}" in data["warnings"][0]
    page = write_report(data, tmp_path / "out").read_text()
    assert "do not compare the policies" in page


def test_a_partial_bench_compares_the_policies_on_the_tasks_every_one_finished(tmp_path):
    """While the policies cover different tasks, the report adds each policy's summary over the tasks that every
    policy finished under every seed (an unfinished run counts as not finished): the like-for-like table."""
    from kernelband.report import tables
    from kernelband.report.markdown import render

    store, bench, ids = build_db(tmp_path / "runs.db")
    assert report_data(store, f"bench:{bench}")["common"] is None  # the same tasks: the summary compares
    with store._tx() as db:  # beam never ran the first task; kernelband's seed 1 is still on the second
        db.executemany("UPDATE runs SET bench_id = NULL WHERE id = ?",
                       [(run,) for (p, task, _), run in ids.items() if p == "beam" and task == TASKS[0]])
        db.execute("UPDATE runs SET status = 'running' WHERE id = ?", (ids[("kernelband", TASKS[1], 1)],))
    data = report_data(store, f"bench:{bench}")
    common = data["common"]
    assert common["tasks"] == TASKS[2:]
    rows = {(r["policy"], r["seed"], r["task"]): r["best_speedup"] for r in data["tasks"]}
    for policy, seeds in POLICIES.items():
        s = common["summary"][policy]
        assert s["n_tasks"] == 1 and s["tasks"] == TASKS[2:]
        assert s["geomean_best"] == pytest.approx(statistics.mean(rows[(policy, seed, TASKS[2])] for seed in seeds))
        assert data["summary"][policy]["n_tasks"] > 1  # the full summary still covers what each one has
    assert "the summary on the 1 task that every policy finished does" in data["warnings"][-1]
    table = next(t for t in tables.build(data) if t.id == "summary-common")
    assert table.title.startswith("Summary on the 1 task that every policy finished")
    assert [row[3][1] for row in table.rows] == pytest.approx([common["summary"][p]["geomean_best"]
                                                               for p in data["policies"]])
    assert "Summary on the 1 task that every policy finished" in write_report(data, tmp_path / "out").read_text()
    assert "### Summary on the 1 task that every policy finished" in render(data)


def test_the_report_of_a_quarantined_bench_says_so_first(tmp_path):
    """A bench set aside by `Store.quarantine` (its GPU was shared) still reports, warning first that its
    figures are not results, with the reason given."""
    store, bench, _ = build_db(tmp_path / "runs.db")
    aside = store.quarantine(bench, 0.0, None, "a second sweep on the GPU")["bench"]
    data = report_data(store, f"bench:{aside}")
    assert data["warnings"][0].startswith("quarantined: measured while the GPU was not the bench's alone "
                                          "(a second sweep on the GPU)")
    with pytest.raises(UserError, match="has no runs yet"):  # every run had an evaluation in the window
        report_data(store, f"bench:{bench}")


def test_faster_needs_a_re_measurement_above_the_noise_and_a_held_out_win(built):
    from dataclasses import replace

    from kernelband.report.metrics import run_facts

    store = built["store"]
    facts = run_facts(store, store.run(next(iter(built["ids"].values()))))  # noise floor 0.995: margin 1 %
    gen = replace(facts, best_candidate=3, best_outcome="ok", held_out=1.05)
    assert replace(gen, confirmed=1.02).faster is True
    assert replace(gen, confirmed=1.005).faster is False  # inside the margin
    assert replace(gen, confirmed=1.02, held_out=0.98).faster is False  # slower on shapes never searched
    assert replace(gen, confirmed=1.02, held_out=None).faster is True  # a task with no held-out shapes
    assert replace(gen, confirmed=None).faster is None  # not re-measured: no verdict
    assert replace(gen, confirmed=1.5, best_candidate=0).faster is False  # k0 handed back
    assert replace(gen, confirmed=1.5, best_outcome="wrong_output").faster is False
    noisy = replace(gen, row=replace(gen.row, summary={**gen.row.summary, "k0_self_speedup": 0.96}))
    assert replace(noisy, confirmed=1.05).faster is False  # the margin grows with the noise floor: 8 %
    assert replace(noisy, confirmed=1.09).faster is True


def test_the_summary_counts_faster_tasks_from_the_per_task_verdicts(built):
    data = built["data"]
    for policy, s in data["summary"].items():
        for seed, per_seed in s["per_seed"].items():
            rows = [r for r in data["tasks"] if r["policy"] == policy and str(r["seed"]) == seed]
            assert per_seed["n_faster_tasks"] == sum(r["faster"] is True for r in rows)
            assert per_seed["n_faster_unknown"] == sum(r["faster"] is None for r in rows)
            # these runs were never re-measured: a generated best gets no verdict, k0 a "no"
            assert per_seed["n_faster_unknown"] == sum(r["best_candidate"] not in (None, 0)
                                                       and r["best_outcome"] == "ok" for r in rows)


def test_the_report_shows_the_grid_by_hand_beside_the_policies_on_its_tasks(tmp_path):
    """A bench's exhaustive launch-parameter grid (stored with it by benchmarks/search_quality.py) is compared
    with each policy on the tasks the grid covers: the page, the terminal and Markdown show it, with the
    numbers of the stored rows and of the runs."""
    from kernelband.report import tables
    from kernelband.report.markdown import render

    store, bench, _ = build_db(tmp_path / "runs.db")
    assert report_data(store, f"bench:{bench}")["grid"] is None  # no grid: no grid tables
    rows = [{"task": TASKS[0], "variants": 6, "evaluations_made": 9, "best_speedup": 1.5, "confirmed": 1.4,
             "held_out": 1.2, "noise_floor": 1.0, "handed_back": 2, "faster": True},
            {"task": TASKS[1], "variants": 4, "evaluations_made": 7, "best_speedup": 1.05, "confirmed": 1.0,
             "held_out": 1.0, "noise_floor": 1.0, "handed_back": None, "faster": False},
            {"task": TASKS[2], "deferred": True}]
    for row in rows:
        store.save_grid_row(bench, row)
    assert [r["task"] for r in store.grid_rows(bench)] == TASKS
    data = report_data(store, f"bench:{bench}")
    grid = data["grid"]
    assert grid["tasks"] == TASKS[:2]  # the deferred task is not in the figures
    assert grid["summary"]["geomean_best"] == pytest.approx(math.sqrt(1.5 * 1.05))
    assert grid["summary"]["faster_pct"] == 50 and grid["summary"]["fast1"] == 50
    runs = {(r["policy"], r["task"]): [x["best_speedup"] for x in data["tasks"]
                                       if x["policy"] == r["policy"] and x["task"] == r["task"]]
            for r in data["tasks"]}
    for policy in POLICIES:  # seeds averaged per task, then the geomean over the grid's tasks
        per_task = [statistics.mean(runs[(policy, t)]) for t in TASKS[:2]]
        assert grid["policies"][policy]["geomean_best"] == pytest.approx(math.sqrt(per_task[0] * per_task[1]))
    table = next(t for t in tables.build(data) if t.id == "grid")
    assert [row[0][0] for row in table.rows] == ["grid (by hand)", *sorted(POLICIES)]
    assert table.rows[0][2][1] == pytest.approx(math.sqrt(1.5 * 1.05))
    page = write_report(data, tmp_path / "out").read_text()
    assert "By hand: the launch-parameter grid" in page and "variant 2" in page
    assert "### By hand: the exhaustive launch-parameter grid" in render(data)
