"""`kernelband optimize` end to end in the interpreter with the built-in rewriter, and resume after SIGKILL."""

from __future__ import annotations

import json
import os
import signal
import sqlite3
import subprocess
import sys
import time
from pathlib import Path

import pytest
from invoke import invoke, process_env

from kernelband.cli import app as app_module
from kernelband.store import Store

pytestmark = pytest.mark.slow


def _cli(*args: str, env: dict | None = None) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "kernelband", *args], capture_output=True, text=True,
                          timeout=600, env=env or process_env())


def test_optimize_end_to_end_with_the_rewriter(tmp_path: Path):
    db = tmp_path / "runs.db"
    proc = _cli("optimize", "examples:vector_add", "--iterations", "3", "--seed", "1", "--db", str(db), "--json")
    assert proc.returncode == 0, proc.stderr[-2000:]
    summary = json.loads(proc.stdout)
    assert {"run_id", "best_speedup", "best_outcome", "iterations"} <= set(summary)
    assert summary["proposer"] == "rewrite"
    assert summary["iterations"] == 3 and summary["evaluations"] >= 1
    assert summary["best_outcome"] == "ok"
    assert summary["interpreter"] is True and summary["device"]  # labelled: interpreter timings
    # both measures, whatever the objective (device, the default): the wall time per call beside the device time
    assert summary["objective"] == "device" and summary["k0_self_call_speedup"] > 0
    assert summary["best_call_speedup"] > 0 and summary["confirmed_call_speedup"] > 0
    # against torch: not timed on the interpreter, and the summary says why
    assert summary["best_vs_eager"] is None and "interpreter" in summary["vs_eager_skipped"]
    assert summary["best_vs_compile"] is None and "interpreter" in summary["vs_compile_skipped"]
    assert "best_sol_large" in summary

    store = Store(db)
    run = store.run(summary["run_id"])
    assert run.status == "done" and run.policy == "kernelband"
    candidates = store.candidates(run.id)
    assert candidates[0]["parent"] is None and candidates[0]["strategy"] is None
    children = candidates[1:]
    assert children and all(c["parent"] is not None and c["strategy"] for c in children)
    assert all(c["source"] != candidates[0]["source"] for c in children)
    evaluations = {e["candidate"]: e for e in store.evaluations(run.id) if e["which"] == "search"}
    assert all(c["id"] in evaluations for c in candidates)  # every candidate was evaluated and stored
    # After the search the best kernel is checked and timed once more: search shapes (fresh inputs) and held-out.
    if summary["best_candidate"] != 0:
        # a pinned autotuned kernel reports the pinned module's own evaluation (search/handback.py)
        which = "handed_back" if summary["handback"]["form"] == "pinned" else "held_out"
        final = store.evaluation(run.id, summary["best_candidate"], which)
        assert final is not None and final.seed != evaluations[summary["best_candidate"]]["result"]["seed"]
        assert {s.held_out for s in final.shapes} == {False, True}
        assert summary["confirmed_speedup"] == final.speedup > 0
    else:
        assert summary["confirmed_speedup"] == 1.0
    # the finalists: the fastest kernels of the search, each re-checked; the one handed back is among them or k0
    finalists = summary["finalists"]
    assert len(finalists) <= 3
    assert all(store.evaluation(run.id, f["candidate"], "held_out") is not None for f in finalists)
    assert summary["best_candidate"] in [0] + [f["candidate"] for f in finalists] or not finalists
    iterations = store.iterations(run.id)
    assert [row["iteration"] for row in iterations] == [1, 2, 3]
    assert all(row["arms"] for row in iterations)
    # The best kernel and its diff are written next to the run.
    best = Path(summary["best_path"]).read_text()
    assert "def add(" in best
    assert Path(summary["diff_path"]).exists()
    assert store.handed_back(run.id) == best  # and kept in the database, for a machine without the file

    listed = invoke("runs", "--db", str(db), "--json")
    assert listed.returncode == 0
    assert [r["id"] for r in json.loads(listed.stdout)] == [run.id]


def test_resume_after_sigkill_reevaluates_nothing(tmp_path: Path):
    db = tmp_path / "runs.db"
    args = ["optimize", "examples:vector_add", "--iterations", "3", "--seed", "7", "--finalists", "1", "--db", str(db),
            "--json"]
    proc = subprocess.Popen([sys.executable, "-m", "kernelband", *args], env=process_env(),
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    deadline = time.time() + 400
    done_before: dict[int, float] = {}
    while time.time() < deadline:
        time.sleep(0.5)
        if proc.poll() is not None:
            pytest.fail(f"the run ended before it could be killed: {proc.stderr.read().decode()[-2000:]}")
        if db.exists():
            try:
                with sqlite3.connect(db) as con:
                    rows = con.execute("SELECT candidate, created FROM evaluations").fetchall()
            except sqlite3.OperationalError:  # the file exists, its tables not yet: the run is starting
                continue
            if len(rows) >= 2:  # k0 and a child evaluated, the rest of the run to come
                done_before = dict(rows)
                break
    else:
        pytest.fail("no evaluations were stored in time")
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait()

    store = Store(db)
    run_id = store.runs()[0].id
    assert store.run(run_id).status == "running"
    arms_before = {row["iteration"]: row["arms"] for row in store.iterations(run_id)}

    resumed = invoke(*args, "--resume")
    assert resumed.returncode == 0, resumed.stderr[-2000:]
    summary = json.loads(resumed.stdout)
    assert summary["run_id"] == run_id  # the same run, continued
    assert store.run(run_id).status == "done"
    assert summary["iterations"] == 3
    after = {e["candidate"]: e["created"] for e in store.evaluations(run_id)}
    for cid, created in done_before.items():
        assert after[cid] == created, f"candidate {cid} was evaluated again"
    # The replayed iterations took the same arms as before the kill.
    for row in store.iterations(run_id):
        if row["iteration"] in arms_before:
            assert row["arms"] == arms_before[row["iteration"]]
    assert len(store.runs()) == 1


def test_two_databases_keep_their_kernels_apart_and_resuming_a_finished_run_prints_its_summary(tmp_path: Path,
                                                                                            monkeypatch):
    """--db a.db and then --db b.db in one folder: each run 1 writes its best kernel into a folder named after
    its database. --resume of the finished run prints its stored summary and exits 0, evaluating nothing."""
    args = ["optimize", "examples:vector_add", "--iterations", "1", "--policy", "greedy", "--finalists", "1",
            "--json"]
    paths = {}
    for name in ("a", "b"):
        proc = invoke(*args, "--db", str(tmp_path / f"{name}.db"))
        assert proc.returncode == 0, proc.stderr[-2000:]
        summary = json.loads(proc.stdout)
        assert summary["run_id"] == 1
        paths[name] = Path(summary["best_path"])
        assert paths[name] == tmp_path / name / "run-1" / "best.py" and paths[name].is_file()
    assert paths["a"] != paths["b"]
    store = Store(tmp_path / "a.db")
    evaluated = store.evaluations(1)
    again = invoke(*args, "--db", str(tmp_path / "a.db"), "--resume")
    assert again.returncode == 0, again.stderr[-2000:]
    summary = json.loads(again.stdout)
    assert summary["run_id"] == 1 and summary["finished_before"] is True
    assert summary["best_path"] == str(paths["a"])
    assert store.evaluations(1) == evaluated and len(store.runs()) == 1
    # on a terminal narrower than the paths, each path still comes on one line (to copy whole)
    monkeypatch.setattr(app_module.out, "width", 40)
    assert len(f"best kernel: {paths['a']}") > 40
    text = invoke(*args[:-1], "--db", str(tmp_path / "a.db"), "--resume")
    assert text.returncode == 0, text.stderr[-2000:]
    assert "run 1 had finished" in text.stdout and f"best kernel: {paths['a']}" in text.stdout
    assert f"run store:   {tmp_path / 'a.db'}" in text.stdout


def test_a_starting_kernel_with_a_syntax_error_fails_the_run_naming_the_line(tmp_path: Path):
    source = (Path(__file__).parent / "data" / "small_add.py").read_text()
    broken = tmp_path / "broken_add.py"
    broken.write_text(source.replace("    mask = offsets < n\n", "    mask = offsets < n)\n", 1))
    line = source.splitlines().index("    mask = offsets < n") + 1
    db = tmp_path / "x.db"
    proc = invoke("optimize", str(broken), "--iterations", "1", "--db", str(db))
    assert proc.returncode == 2
    assert proc.stderr.strip().splitlines()[-1].endswith(f"SyntaxError: unmatched ')' (line {line})"), proc.stderr
    [run] = Store(db).runs()
    assert run.status == "failed" and f"(line {line})" in run.reason
    listed = invoke("runs", "--db", str(db))
    assert listed.returncode == 0 and "failed: " in listed.stdout and f"(line {line})" in listed.stdout


def test_resume_with_nothing_to_resume_is_a_user_error(tmp_path: Path):
    proc = invoke("optimize", "examples:vector_add", "--db", str(tmp_path / "x.db"), "--resume")
    assert proc.returncode == 2
    assert "nothing to resume" in proc.stderr
    assert "Traceback" not in proc.stderr


def test_a_run_is_not_resumed_on_another_gpu_model(tmp_path: Path):
    """A run measured on an H200 and resumed here (the interpreter) would mix two devices' speedups in one
    search: one line, exit 2, and the stored run untouched."""
    from kernelband.tasks import load_task

    db = tmp_path / "x.db"
    store = Store(db)
    task = load_task("examples:vector_add")
    run = store.create_run(task.ref, task.key, "greedy", "rewrite", 0, {"iterations": 3}, device="NVIDIA H200")
    proc = invoke("optimize", "examples:vector_add", "--policy", "greedy", "--seed", "0", "--db", str(db), "--resume")
    assert proc.returncode == 2, proc.stderr[-2000:]
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith(f"error: run {run} was measured on NVIDIA H200 and this "
                                                   "machine's GPU is Triton interpreter (CPU)"), proc.stderr
    [row] = Store(db).runs()
    assert row.status == "running" and row.device == "NVIDIA H200"
    assert Store(db).candidates(run) == []


def test_llm_proposer_without_endpoint_is_a_user_error(tmp_path: Path):
    proc = invoke("optimize", "examples:vector_add", "--proposer", "llm", "--db", str(tmp_path / "x.db"))
    assert proc.returncode == 2
    assert "KERNELBAND_LLM_BASE_URL" in proc.stderr


def test_an_llm_endpoint_that_cannot_be_reached_is_one_line_and_the_run_is_kept(tmp_path: Path):
    """A wrong --base-url: exit 2 and one line that says so, not ten iterations of `connection failed`; the
    run stays in the store as `failed`, with the reason, for --resume once the endpoint is right. No retries:
    the OpenAI client's backoff between them would only add seconds to the same verdict."""
    import socket

    with socket.socket() as sock:  # a port on this host where nothing listens
        sock.bind(("127.0.0.1", 0))
        url = f"http://127.0.0.1:{sock.getsockname()[1]}/v1"
    db = tmp_path / "x.db"
    proc = invoke("optimize", "examples:vector_add", "--proposer", "llm", "--base-url", url,
                "--model", "m", "--iterations", "2", "--llm-retries", "0", "--db", str(db))
    assert proc.returncode == 2, proc.stderr[-2000:]
    # the live display (on stderr, stdout being kept for --json) showed the run starting; then one error line
    lines = proc.stderr.strip().splitlines()
    assert [ln for ln in lines if ln.startswith("error: ")] == lines[-1:]
    assert lines[-1].startswith("error: cannot reach the LLM endpoint at http://127.0.0.1:")
    assert "Traceback" not in proc.stderr + proc.stdout
    [run] = Store(db).runs()
    assert run.status == "failed" and run.proposer == "llm"
    assert run.reason.startswith("cannot reach the LLM endpoint at http://127.0.0.1:")


def test_an_unknown_policy_is_a_user_error_that_stores_no_run(tmp_path: Path):
    db = tmp_path / "x.db"
    store = Store(db)  # a finished run already in the store
    store.finish_run(store.create_run("examples:vector_add", "k", "kernelband", "rewrite", 0, {}), "done", {})
    store.close()
    proc = invoke("optimize", "examples:vector_add", "--policy", "bogus", "--db", str(db))
    assert proc.returncode == 2
    assert proc.stderr.strip().splitlines()[-1].startswith("error: unknown policy 'bogus'")
    assert [(r.policy, r.status) for r in Store(db).runs()] == [("kernelband", "done")]  # nothing added or lost


def test_ctrl_c_says_the_run_is_kept_and_how_to_resume_it(tmp_path: Path):
    """Ctrl-C in the middle of a search: exit 130, no traceback, a line that says the run is kept and how to go
    on, no worker left behind, and the run `interrupted` in the store: not `failed` (nothing went wrong) and
    not `done`, so that --resume continues it."""
    import psutil

    db = tmp_path / "x.db"
    proc = subprocess.Popen([sys.executable, "-m", "kernelband", "optimize", "examples:vector_add", "--iterations",
                             "1000", "--db", str(db)], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            env=process_env(), preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
    deadline = time.monotonic() + 300
    while time.monotonic() < deadline and proc.poll() is None:  # until the run is in the store
        try:
            if db.exists() and sqlite3.connect(db).execute("SELECT COUNT(*) FROM proposals").fetchone()[0]:
                break
        except sqlite3.OperationalError:  # the file exists before its tables do
            pass
        time.sleep(0.2)
    workers = [c.pid for c in psutil.Process(proc.pid).children(recursive=True)]
    proc.send_signal(signal.SIGINT)
    _, stderr = proc.communicate(timeout=120)
    assert proc.returncode == 130, stderr[-2000:]
    assert "Traceback" not in stderr
    assert stderr.strip().splitlines()[-1].startswith("interrupted: what was stored is kept in the run database")
    assert [(r.status, r.reason) for r in Store(db).runs()] == [("interrupted", "interrupted (Ctrl-C)")]
    time.sleep(1)
    assert not [pid for pid in workers if psutil.pid_exists(pid) and psutil.Process(pid).status() != "zombie"]
