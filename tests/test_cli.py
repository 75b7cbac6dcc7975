"""The `kernelband` command, run as a user runs it: exit codes, one-line errors, JSON output. Each test runs
its first case as a process; further cases of the same path go through `kernelband.cli.main` in this process
(`kernelband_here`), the same code without a process start each."""

from __future__ import annotations

import importlib.util
import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from kernelband.tasks import example_names
from kernelband.tasks import tritonbench as tb

ROOT = Path(__file__).resolve().parents[1]
# KERNELBAND_TRITONBENCH, else shared/tritonbench/... next to or above the checkout
TB_JSON = tb.find() or Path("<none>")
TB_SKIP = tb.missing_reason() or f"{TB_JSON} is not TritonBench-G's JSON file"
needs_tb = pytest.mark.skipif(not TB_JSON.is_file(), reason=TB_SKIP)
EXAMPLES = ROOT / "src" / "kernelband" / "tasks" / "examples"
RESULT_KEYS = {"outcome", "speedup", "shapes", "features", "interpreter", "detail", "seed"}
SHAPE_KEYS = {"label", "correct", "ref_ms", "cand_ms", "speedup", "sol_fraction", "held_out"}


def kernelband(*args: str, timeout: float = 300) -> subprocess.CompletedProcess:
    exe = Path(sys.executable).with_name("kernelband")
    cmd = [str(exe)] if exe.exists() else [sys.executable, "-c", "from kernelband.cli import main; main()"]
    env = {**os.environ, "KERNELBAND_MODE": "interpreter", "KERNELBAND_TRITONBENCH": str(TB_JSON)}
    return subprocess.run(cmd + list(args), capture_output=True, text=True, env=env, timeout=timeout)


def kernelband_here(*args: str) -> subprocess.CompletedProcess:
    """`kernelband.cli.main` in this process, with argv, the environment and stdout/stderr as a process of
    `kernelband` would have them: the same code from the argument parsing to the exit code, without the
    interpreter start and torch import that make each process cost seconds. Each test checks its first case
    in a real process; its further cases of the same path run here. An exception that escapes is written to
    stderr as a traceback, as the process would."""
    import traceback

    from typer.testing import CliRunner

    from kernelband.cli import main

    env = {"KERNELBAND_MODE": "interpreter", "KERNELBAND_TRITONBENCH": str(TB_JSON)}
    argv = sys.argv
    with CliRunner().isolation(env=env) as (stdout, stderr, _):
        sys.argv = ["kernelband", *args]
        try:
            main()
            code = 0
        except SystemExit as exc:
            code = exc.code if isinstance(exc.code, int) else (0 if exc.code is None else 1)
        except Exception:  # noqa: BLE001 - shown as the process would show it
            traceback.print_exc()
            code = 1
        finally:
            sys.argv = argv
            sys.stdout.flush()
            sys.stderr.flush()
        out, err = stdout.getvalue().decode(), stderr.getvalue().decode()
    return subprocess.CompletedProcess(list(args), code, out, err)


def assert_user_error(proc: subprocess.CompletedProcess, text: str) -> None:
    assert proc.returncode == 2, (proc.returncode, proc.stdout[-2000:], proc.stderr[-2000:])
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1, proc.stderr
    assert lines[0].startswith("error: ") and text in lines[0]
    assert "Traceback" not in proc.stderr + proc.stdout
    assert proc.stdout == ""


# -- kernelband tasks ---------------------------------------------------------------------------
@needs_tb
def test_tasks_lists_tritonbench_levels_1_and_2():
    proc = kernelband("tasks", "--suite", "tritonbench-g", "--difficulty", "1", "2", "--json")
    assert proc.returncode == 0, proc.stderr
    rows = json.loads(proc.stdout)
    raw = json.loads(TB_JSON.read_text())["tasks"]
    assert {r["name"] for r in rows} == {t["name"] for t in raw if str(t["difficulty"]) in ("1", "2")}
    assert {r["difficulty"] for r in rows} == {1, 2}
    assert all(r["ref"] == f"tritonbench:{r['name']}" for r in rows)
    by_name = {r["name"]: r for r in rows}
    assert by_name["sin_computation"]["excluded_by_paper"] is True
    assert by_name["add_value"]["excluded_by_paper"] is False
    for name, values in tb.EXTRA_LOOP_VALUES.items():
        assert by_name[name]["added_loop_values"] == list(values)


@needs_tb
def test_tasks_filters_by_one_level_and_lists_the_papers_set():
    one = json.loads(kernelband("tasks", "--suite", "tritonbench-g", "--difficulty", "1", "--json").stdout)
    raw = json.loads(TB_JSON.read_text())["tasks"]
    assert {r["name"] for r in one} == {t["name"] for t in raw if str(t["difficulty"]) == "1"}
    paper = json.loads(kernelband_here("tasks", "--suite", "tritonbench-g-l12", "--json").stdout)
    assert [r["name"] for r in paper] == tb.level12(TB_JSON)
    assert len(paper) == 29 and "sin_computation" not in {r["name"] for r in paper}
    everything = json.loads(kernelband_here("tasks", "--suite", "tritonbench-g", "--json").stdout)
    assert len(everything) == 184


@needs_tb
def test_tasks_refuses_a_level_its_suite_does_not_have():
    """An empty table for `--difficulty 7` would read as "no such tasks"; the levels exist or it says which do."""
    levels = sorted({int(t["difficulty"]) for t in json.loads(TB_JSON.read_text())["tasks"]})
    assert_user_error(kernelband("tasks", "--suite", "tritonbench-g", "--difficulty", "7"),
                      f"no level 7 in tritonbench-g: its levels are {', '.join(map(str, levels))}")
    assert_user_error(kernelband_here("tasks", "--suite", "tritonbench-g-l12", "--difficulty", "2", "3"),
                      "no level 3 in tritonbench-g-l12: its levels are 1, 2")
    assert_user_error(kernelband_here("tasks", "--suite", "examples", "--difficulty", "1"),
                      "--difficulty filters the TritonBench suites")


def test_tasks_lists_the_examples():
    proc = kernelband("tasks", "--suite", "examples", "--json")
    assert proc.returncode == 0, proc.stderr
    rows = json.loads(proc.stdout)
    assert [r["ref"] for r in rows] == [f"examples:{n}" for n in example_names()]
    assert len(rows) >= 9 and all(r["description"] for r in rows)
    table = kernelband_here("tasks")  # the examples are the default suite
    assert table.returncode == 0 and f"examples: {len(rows)} tasks" in table.stdout
    assert all(f"examples:{n}" in table.stdout for n in example_names())


def test_tasks_rejects_an_unknown_suite_and_stray_arguments():
    assert_user_error(kernelband("tasks", "--suite", "kernelbench"), "unknown suite 'kernelbench'")
    assert_user_error(kernelband_here("tasks", "--suite", "examples", "oops"), "unexpected argument 'oops'")
    assert_user_error(kernelband_here("tasks", "--suite", "tritonbench-g", "--tritonbench", "/no/such/tb.json"),
                      "TritonBench data not found at /no/such/tb.json")


# -- kernelband eval: user errors -------------------------------------------------------------------
def test_eval_of_an_unknown_task_is_one_line_and_exit_2():
    assert_user_error(kernelband("eval", "no_such_task"), "unknown task 'no_such_task'")


def test_eval_with_a_missing_candidate_file_is_exit_2(tmp_path):
    missing = tmp_path / "cand.py"
    assert_user_error(kernelband("eval", "examples:vector_add", "--candidate", str(missing)),
                      f"cannot read candidate {missing}")


def test_a_binary_file_where_source_is_expected_is_exit_2(tmp_path):
    """A database or an image passed as a candidate, a task file or a strategies file."""
    binary = b"SQLite format 3\x00" + bytes(range(128, 256))
    for name, args in [("cand.py", ("eval", "examples:vector_add", "--candidate")), ("task.py", ("eval",)),
                       ("s.toml", ("optimize", "examples:vector_add", "--db", str(tmp_path / "r.db"),
                                   "--strategies"))]:
        path = tmp_path / name
        path.write_bytes(binary)
        run = kernelband if name == "cand.py" else kernelband_here
        assert_user_error(run(*args, str(path)), f"{path} is not a UTF-8 text file")
    assert not (tmp_path / "r.db").exists()


def test_a_compressed_run_database_is_exit_2_saying_how_to_unpack_it(tmp_path):
    """docs/results/bench.db.xz is how our bench's database is kept; given as --db it is named, not read."""
    import gzip
    import lzma
    import sqlite3

    plain = tmp_path / "bench.db"
    sqlite3.connect(plain).close()
    for suffix, pack, unpack in ((".xz", lzma.compress, "xz -dc"), (".gz", gzip.compress, "gzip -dc")):
        packed = tmp_path / f"bench.db{suffix}"
        packed.write_bytes(pack(plain.read_bytes() + b"\0" * 4096))
        before = packed.read_bytes()
        run = kernelband if suffix == ".xz" else kernelband_here
        assert_user_error(run("runs", "--db", str(packed)),
                          f"(it is compressed: `{unpack} {packed} > bench.db` unpacks it)")
        assert packed.read_bytes() == before


def test_eval_with_a_bad_preset_or_shape_selection_is_exit_2():
    assert_user_error(kernelband("eval", "examples:vector_add", "--preset", "turbo"), "unknown preset 'turbo'")
    assert_user_error(kernelband_here("eval", "examples:vector_add", "--shapes", "some"),
                      "unknown --shapes 'some'")


# -- kernelband eval: results -----------------------------------------------------------------------
def test_eval_of_the_starting_kernel_is_ok_with_the_full_record():
    proc = kernelband("eval", "examples:vector_add", "--json", "--interpreter", "--seed", "7")
    assert proc.returncode == 0, (proc.stdout[-2000:], proc.stderr[-3000:])
    result = json.loads(proc.stdout)
    assert RESULT_KEYS <= set(result)
    assert result["outcome"] == "ok" and result["interpreter"] is True and result["seed"] == 7
    assert result["speedup"] > 0
    assert len(result["shapes"]) >= 2
    for shape in result["shapes"]:
        assert SHAPE_KEYS <= set(shape)
        assert shape["correct"] is True and shape["ref_ms"] > 0 and shape["cand_ms"] > 0
        assert shape["sol_fraction"] is None  # the interpreter has no speed of light
        # the torch baselines' fields are there, with the reason they were not timed
        assert shape["eager_ms"] is None and "interpreter" in shape["eager_skipped"]
        assert shape["compiled_ms"] is None and "interpreter" in shape["compiled_skipped"]
    assert result["speedup_vs_eager"] is None and "interpreter" in result["vs_eager_skipped"]
    assert result["speedup_vs_compile"] is None and "interpreter" in result["vs_compile_skipped"]
    assert "sol_median" in result and "sol_median_large" in result
    assert set(result["features"]) >= {"rho", "phi", "sources"}
    assert result["features"]["rho"]["block_dim_x"] == 128  # vector_add's BLOCK_SIZE
    # the wall time per call beside the device time, both sides, and its runtime-weighted speedup (interpreter
    # timings: the record says so, as for the device times)
    search = [s for s in result["shapes"] if not s["held_out"]]
    assert all(s["call_ms"] > 0 and s["ref_call_ms"] > 0 for s in result["shapes"])
    assert result["call_speedup"] == pytest.approx(sum(s["ref_call_ms"] for s in search)
                                                   / sum(s["call_ms"] for s in search))
    assert result["seconds"]["timing_call"] > 0


@pytest.mark.parametrize("script, args", [
    ("eval_throughput.py", ["--parts", "pool", "--out", "out.json"]),
    ("eval_throughput.py", ["--parts", "pool,nope", "--out", "out.json"]),
    ("eval_throughput.py", ["--parts", "pool@4,pool@0", "--out", "out.json"]),
    ("eval_throughput.py", ["--parts", "pool", "--preset", "default+max_ms=x", "--out", "out.json"]),
    ("search_quality.py", ["--parts", "bench", "--db", "runs.db"]),
    ("interpreter_times.py", ["--out", "out.json"]),
    ("sol_baselines.py", ["--out", "out.json"])])
def test_a_benchmark_script_given_bad_input_says_so_in_one_line_and_exits_2(tmp_path, script, args):
    """TritonBench data that is not where it is said to be, or an unknown part: `errors.run_script`."""
    script_path = Path(__file__).resolve().parents[1] / "benchmarks" / script
    env = {**os.environ, "KERNELBAND_TRITONBENCH": str(tmp_path / "missing.json")}
    done = subprocess.run([sys.executable, str(script_path), *args], cwd=tmp_path, env=env, capture_output=True,
                          text=True, timeout=300)
    assert done.returncode == 2, done.stderr[-2000:]
    assert done.stderr.startswith("error: ") and done.stderr.count("\n") == 1, done.stderr
    said = {"pool,nope": "unknown part 'nope'", "pool@4,pool@0": "unknown part 'pool@0'",
            "pool --preset default+max_ms=x": "bad value in 'max_ms=x'"}
    assert said.get(" ".join(args[1:-2]), str(tmp_path / "missing.json")) in done.stderr


def run_throughput(cwd: Path, *args: str) -> tuple[subprocess.CompletedProcess, dict]:
    """benchmarks/eval_throughput.py on the interpreter with `args`: the finished process and its report."""
    env = {**os.environ, "KERNELBAND_MODE": "interpreter", "KERNELBAND_TRITONBENCH": str(TB_JSON)}
    done = subprocess.run([sys.executable, str(ROOT / "benchmarks" / "eval_throughput.py"), *args, "--out", "out.json"],
                          cwd=cwd, env=env, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    return done, json.loads((cwd / "out.json").read_text())


@pytest.fixture(scope="module")
def throughput(tmp_path_factory) -> tuple[subprocess.CompletedProcess, dict]:
    """One run of eval_throughput.py with its pool and repeat parts, which the tests below read: each part is
    its own entry of the report, and one evaluator set-up serves both."""
    if not TB_JSON.is_file():
        pytest.skip(TB_SKIP)
    return run_throughput(tmp_path_factory.mktemp("throughput"), "--parts", "pool@2,repeat",
                          "--tasks", "add_value,softmax_triton1", "--preset", "default+max_ms=25",
                          "--repeat-tasks", "add_value", "--repeat-presets", "default", "--repeats", "2")


@needs_tb
@pytest.mark.xdist_group("throughput-run")  # on one xdist worker, so the module's one run serves both
def test_the_throughput_pool_part_says_where_each_candidates_time_went_and_where_its_phi_came_from(throughput):
    """benchmarks/eval_throughput.py's pool part on the interpreter: per task, its seconds (the timing's phases
    among them) and whether its φ came from ncu; a rate with ncu off says so."""
    done, report = throughput
    pool = report["pool@2"]
    assert pool["outcomes"] == {"add_value": "ok", "softmax_triton1": "ok"}
    assert pool["presets"] == ["default+max_ms=25"]  # --preset: the variant evaluated the candidates
    assert sorted(pool["seconds_by_task"]) == ["add_value", "softmax_triton1"]
    for seconds in pool["seconds_by_task"].values():
        assert 0 < seconds["timing_bench"] <= seconds["timing_requests"] <= seconds["timing"] < seconds["total"]
    assert pool["ncu"] is False and pool["phi_from_ncu"] == [] and pool["ncu_notes"] == {}
    assert "φ from ncu for 0 of 2 `ok` (ncu off)" in done.stdout
    steps = {(r["mode"], r["step"]) for r in pool["gpu_lock"]["steps"]}  # the lock's accounting, by step
    assert {("shared", "correctness run"), ("shared", "compare"), ("exclusive", "timing")} <= steps, steps
    assert pool["gpu_lock"]["seconds"]["alone"] > 0
    cores = pool["cores"]  # where the CPU went: the candidates' workers ended during the part
    assert cores["ended_workers"] > 0 and cores["parent"] >= 0 and cores["live_workers"]["reference"] >= 0
    # the Triton launches per call, ncu's kernels (none: ncu off), where the candidates' workers' start went
    assert all(n >= 1 for n in pool["triton_launches"].values()) and pool["ncu_kernels"] == {}
    assert {"context", "first_kernel", "guards_sandbox"} <= set(pool["worker_start_phases"])
    assert pool["worker_start_phases"]["first_kernel"]["n"] == 2  # one worker per candidate
    assert "candidate workers' start on the GPU, medians: context" in done.stdout
    # the starting kernels timed against themselves: what the pool's concurrency did to their timing
    assert sorted(pool["self_speedups"]) == ["add_value", "softmax_triton1"]
    assert all(v > 0 for v in pool["self_speedups"].values())
    assert "pool@2: the starting kernels against themselves: geomean " in done.stdout


def test_every_part_the_throughput_script_describes_is_one_it_takes():
    """Each part eval_throughput.py's docstring names is in the list --parts checks against (a part described
    and handled but missing from that list once stopped a GPU session's pool at once)."""
    path = ROOT / "benchmarks" / "eval_throughput.py"
    spec = importlib.util.spec_from_file_location("eval_throughput", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    described = re.findall(r"^  ([a-z][a-z-]+)  ", module.__doc__, flags=re.M)
    named = set(module.PARTS)
    assert {"speed", "pool", "pool-noncu", "repeat", "peers"} <= set(described), described
    assert set(described) <= named, set(described) - named


@needs_tb
@pytest.mark.xdist_group("throughput-run")  # on one xdist worker, so the module's one run serves both
def test_the_throughput_repeat_part_keeps_each_shapes_times_and_the_spread_of_its_iterations(throughput):
    """benchmarks/eval_throughput.py's repeat part on the interpreter: per evaluation, each search shape's time
    on both sides and, aligned with them, the CV of the measurement's iterations (None where one iteration ran,
    as on the interpreter)."""
    report = throughput[1]
    (row,) = report["repeat"]
    assert row["n"] == 2 and len(row["shapes_ms"]) == len(row["shapes_iter_cv"]) == 2
    for times, spread in zip(row["shapes_ms"], row["shapes_iter_cv"]):
        assert [len(side) for side in spread] == [len(side) for side in times] and times[0]
        assert all(cv is None or cv >= 0 for side in spread for cv in side)


@pytest.mark.parametrize("given, said", [("missing.db", "no database at missing.db"),
                                         ("bench.db.xz", "is not a KernelBand run database")])
def test_the_priors_script_given_no_database_says_so_in_one_line_and_exits_2(tmp_path, given, said):
    (tmp_path / "bench.db.xz").write_bytes(b"\xfd7zXZ\x00 packed")
    script_path = Path(__file__).resolve().parents[1] / "tools" / "rewrite_priors.py"
    done = subprocess.run([sys.executable, str(script_path), given], cwd=tmp_path, capture_output=True, text=True,
                          timeout=120)
    assert done.returncode == 2, done.stderr[-2000:]
    assert done.stderr.startswith("error: ") and done.stderr.count("\n") == 1 and said in done.stderr, done.stderr


def test_eval_of_a_wrong_candidate_is_exit_1_naming_the_shape(tmp_path):
    source = (EXAMPLES / "vector_add.py").read_text()
    wrong = source.replace("x + y, mask=mask", "x - y, mask=mask")
    assert wrong != source
    cand = tmp_path / "cand.py"
    cand.write_text(wrong)  # a whole task file: the part above the marker is the candidate
    proc = kernelband("eval", "examples:vector_add", "--json", "--candidate", str(cand))
    assert proc.returncode == 1, (proc.stdout[-2000:], proc.stderr[-3000:])
    result = json.loads(proc.stdout)
    assert result["outcome"] == "wrong_output"
    first = result["shapes"][0]
    assert first["correct"] is False and first["max_abs_err"] > 0
    assert result["detail"].startswith(f"shape {first['label']}: ")
    assert "max abs error" in result["detail"]


def test_eval_prints_a_readable_table_that_warns_about_interpreter_timings(tmp_path):
    cand = tmp_path / "cand.py"
    cand.write_text(pyfile_module(EXAMPLES / "vector_add.py"))
    proc = kernelband("eval", "examples:vector_add", "--candidate", str(cand), "--seed", "3")
    assert proc.returncode == 0, (proc.stdout[-2000:], proc.stderr[-3000:])
    assert "outcome ok" in proc.stdout
    assert "n=4096" in proc.stdout
    assert "Triton-interpreter timings" in proc.stdout
    assert "seed: 3" in proc.stdout
    # the features the bandit reads, with their sources; φ has none in the interpreter, and says why
    assert re.search(r"ρ: log_time [-\d.]+ \(timing\)", proc.stdout), proc.stdout
    assert "φ: none measured (the Triton interpreter has no hardware counters)" in proc.stdout


def test_the_features_lines_give_each_value_its_source_and_the_profiles_kernels():
    from kernelband.cli.evaluate import feature_lines
    from kernelband.evaluation.records import Features

    f = Features(rho={"log_time": -2.5, "block_dim_x": None}, phi={"l2_hit_rate": 75.96, "dram_bw_pct": None,
                                                                   "registers_per_thread": 32.0},
                 sources={"log_time": "timing", "phi.l2_hit_rate": "ncu", "phi.registers_per_thread": "compiler"},
                 profile={"kernels": 2.0, "duration_ns": 4500.0})
    assert feature_lines(f, interpreter=False) == [
        "ρ: log_time -2.5 (timing)", "φ: l2_hit_rate 75.96 (ncu), registers_per_thread 32 (compiler)",
        "ncu profile: 2 kernels, 4.5 µs in all (φ weights them by duration)"]
    f = Features(rho={"log_time": 1.0}, phi={"l2_hit_rate": None}, sources={"log_time": "timing"})
    assert feature_lines(f, interpreter=False)[1] == "φ: none measured (no Nsight Compute profile; the notes say why)"


def pyfile_module(path: Path) -> str:
    from kernelband.tasks.pyfile import module_part

    return module_part(path.read_text())


def test_a_mistyped_option_or_argument_is_one_line_and_exit_2():
    assert_user_error(kernelband("optimize", "examples:vector_add", "--iterations", "ten"),
                      "Invalid value for '--iterations'")
    assert_user_error(kernelband_here("eval", "examples:vector_add", "--no-such-flag"),
                      "No such option: --no-such-flag")
    assert_user_error(kernelband_here("optimize"), "Missing argument 'task'")
    assert_user_error(kernelband_here("frobnicate"), "No such command 'frobnicate'")


def test_help_into_a_closed_pipe_ends_without_a_traceback():
    """`kernelband merge --help | head -3`: the reader goes away before the help is written."""
    exe = Path(sys.executable).with_name("kernelband")
    cmd = [str(exe)] if exe.exists() else [sys.executable, "-c", "from kernelband.cli import main; main()"]
    proc = subprocess.Popen(cmd + ["merge", "--help"], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    proc.stdout.close()
    err = proc.stderr.read()
    proc.wait(timeout=60)
    assert "Traceback" not in err, err


def test_finalists_below_one_is_refused_before_anything_runs(tmp_path):
    db = tmp_path / "runs.db"
    assert_user_error(kernelband("optimize", "examples:vector_add", "--finalists", "0", "--db", str(db)),
                      "--finalists")
    assert_user_error(kernelband_here("bench", "--suite", "examples", "--finalists", "0", "--db", str(db)),
                      "--finalists")


def test_bad_input_leaves_no_new_database_behind(tmp_path):
    db = tmp_path / "new.db"
    assert_user_error(kernelband("optimize", "examples:vector_add", "--policy", "nope", "--db", str(db)), "policy")
    assert_user_error(kernelband_here("optimize", "examples:vector_add", "--proposer", "bogus", "--db", str(db)),
                      "use auto, rewrite, llm or hybrid")
    assert_user_error(kernelband_here("optimize", "examples:vector_add", "--resume", "--db", str(db)),
                      "nothing to resume")
    assert_user_error(kernelband_here("bench", "--suite", "nope", "--db", str(db)), "suite")
    assert not db.exists()


@pytest.mark.parametrize("args, said", [(["missing.db"], "missing.db (unpack docs/results/bench.db.xz"),
                                        (["bench.db.xz"], "cannot open the run database"),
                                        (["ok.db", "--since", "yesterday"], "not a UTC time: 'yesterday'"),
                                        (["ok.db", "--bench", "7"], "no bench 7 in")])
def test_quarantine_given_bad_input_says_so_in_one_line_and_exits_2(tmp_path, args, said):
    from kernelband.store import Store

    (tmp_path / "bench.db.xz").write_bytes(b"\xfd7zXZ\x00 packed")
    Store(tmp_path / "ok.db").close()
    flags = {"--db": str(tmp_path / args[0]), "--bench": "3", "--since": "2026-11-25T11:08:31", "--reason": "test"}
    for i in range(1, len(args), 2):
        flags[args[i]] = args[i + 1]
    assert_user_error(kernelband("quarantine", *[x for kv in flags.items() for x in kv]), said)


def test_quarantine_moves_the_windows_runs_to_a_quarantined_bench(tmp_path):
    from kernelband.store import Store

    db = tmp_path / "runs.db"
    store = Store(db)
    bench = store.create_bench("examples", {"policies": ["random"]})
    store.create_run("examples:vector_add", "key", "random", "rewrite", 0, {}, bench_id=bench)
    store.close()
    proc = kernelband("quarantine", "--db", str(db), "--bench", str(bench), "--since", "2000-01-01",
                      "--reason", "a second sweep")
    assert proc.returncode == 0, proc.stderr
    assert f"holds the 0 runs of bench {bench}" in proc.stdout  # no evaluation in the window: nothing moves
    store = Store(db)
    assert [b["status"] for b in store.benches()].count("quarantined") == 1
    store.close()


def test_a_second_gpu_session_on_a_machine_whose_session_still_runs_does_not_start(tmp_path):
    """scripts/gpu/gpu_session.sh: a device call that finds the machine still held, its session running, must
    not start a second sweep on the same GPU (bench 3, BENCHMARKS.md): it says so and leaves."""
    state = tmp_path / "state"
    state.mkdir()
    (state / "session.pid").write_text(f"{os.getpid()}\n")  # this test's process: alive
    root = Path(__file__).resolve().parents[1]
    done = subprocess.run(["bash", str(root / "scripts" / "gpu" / "gpu_session.sh")], cwd=tmp_path, capture_output=True,
                          text=True, timeout=60, env={**os.environ, "KB_STATE": str(state)})
    assert done.returncode == 0
    log = (state / "session.log").read_text()
    assert f"a session is running already (pid {os.getpid()})" in log
    assert "session start" not in log and not (state / "done").exists()


# -- first use: help, errors and output a new user meets -------------------------------------------
def test_flags_take_no_value_in_help():
    helped = subprocess.run(kernelband_cmd() + ["optimize", "--help"], capture_output=True, text=True,
                            env={**os.environ, "COLUMNS": "200"}, timeout=60)
    assert helped.returncode == 0
    resume = [ln for ln in helped.stdout.splitlines() if "--resume" in ln]
    assert resume and "<bool>" not in resume[0], resume
    # no flag is shown with a value, typer's own --help included, on a command and on the group
    assert "<bool>" not in helped.stdout and re.search(r"--help\s+Show this message", helped.stdout)
    top = subprocess.run(kernelband_cmd() + ["--help"], capture_output=True, text=True,
                         env={**os.environ, "COLUMNS": "200"}, timeout=60)
    assert top.returncode == 0 and "--version" in top.stdout and "<bool>" not in top.stdout
    assert re.search(r"--iterations\s+-n\s+<int>", helped.stdout)  # options with a value still show its type


def test_iterations_zero_names_the_flag(tmp_path):
    proc = kernelband("optimize", "examples:vector_add", "--iterations", "0", "--db", str(tmp_path / "x.db"))
    assert_user_error(proc, "--iterations must be at least 1, not 0")
    proc = kernelband_here("optimize", "examples:vector_add", "--batch", "0", "--db", str(tmp_path / "x.db"))
    assert_user_error(proc, "--batch must be at least 1, not 0")
    proc = kernelband_here("optimize", "examples:vector_add", "--objective", "wall", "--db", str(tmp_path / "x.db"))
    assert_user_error(proc, "--objective is device or call, not 'wall'")


def test_eval_prints_the_wall_time_per_call_beside_the_device_time_as_interpreter_timings():
    from kernelband.cli import app as app_module
    from kernelband.cli.evaluate import _print_result
    from kernelband.evaluation.records import EvalResult, Outcome, ShapeResult

    shape = ShapeResult(0, "n=4096", False, correct=True, ref_ms=2.0, cand_ms=1.0, speedup=2.0, ref_call_ms=2.5,
                        call_ms=3.125)
    result = EvalResult(task="examples:vector_add", outcome=Outcome.OK, speedup=2.0, call_speedup=0.8,
                        interpreter=True, shapes=[shape])
    with app_module.out.capture() as captured:
        _print_result(result)
    text = captured.get()
    assert "ref call interpreter ms" in text and "cand call interpreter ms" in text and "3.125" in text
    assert "speedup 2.000x (runtime-weighted)   per call 0.800x" in text
    assert "Triton-interpreter timings" in text


def test_a_failed_candidate_shows_no_feature_lines():
    """Features are measured after correctness and timing: after a compile error there are none to show, and
    "ρ: none measured (the interpreter has no counters)" would blame the wrong thing."""
    from kernelband.cli import app as app_module
    from kernelband.cli.evaluate import _print_result
    from kernelband.evaluation.records import EvalResult, Outcome

    failed = EvalResult(task="examples:vector_add", outcome=Outcome.COMPILE_ERROR, preset="default",
                        interpreter=True, detail="compile: SyntaxError: invalid syntax (line 3)")
    with app_module.out.capture() as captured:
        _print_result(failed)
    text = captured.get()
    assert "compile_error" in text and "(line 3)" in text
    assert "ρ:" not in text and "φ:" not in text and "none measured" not in text
    ok = EvalResult(task="examples:vector_add", outcome=Outcome.OK, preset="default", interpreter=True)
    with app_module.out.capture() as captured:
        _print_result(ok)
    assert "ρ: none measured" in captured.get()


def test_tables_into_a_pipe_are_not_cut_to_80_columns(tmp_path):
    from kernelband.store import Store

    db = tmp_path / "x.db"
    name = "tritonbench:a_task_with_a_name_long_enough_to_be_cut_in_eighty_columns"
    Store(db).create_run(name, "key", "kernelband-masked", "rewrite", 12345, {})
    env = {k: v for k, v in os.environ.items() if k != "COLUMNS"}
    proc = subprocess.run(kernelband_cmd() + ["runs", "--db", str(db)], capture_output=True, text=True, env=env,
                          timeout=60)
    assert proc.returncode == 0, proc.stderr
    assert name in proc.stdout and "kernelband-masked" in proc.stdout and "…" not in proc.stdout


def kernelband_cmd() -> list[str]:
    exe = Path(sys.executable).with_name("kernelband")
    return [str(exe)] if exe.exists() else [sys.executable, "-c", "from kernelband.cli import main; main()"]


def test_ci_installs_with_the_readmes_command_and_the_readme_says_how_to_get_the_cpu_build():
    """A plain PyPI index gives CUDA wheels of several GB for the torch pin: the README names PyTorch's CPU
    index, and CI runs exactly the README's install command."""
    readme = (ROOT / "README.md").read_text()
    block = readme.split("## Set-up", 1)[1].split("```bash", 1)[1].split("```", 1)[0]
    install = [ln.split("#")[0].strip() for ln in block.splitlines() if ln.startswith("pip install")]
    ci = (ROOT / ".ci" / "run").read_text().split("# --- README: install ---", 1)[1].strip().splitlines()[0]
    assert install == [ci.strip()], (install, ci)
    assert "--index-url https://download.pytorch.org/whl/cpu" in readme.split("## Set-up", 1)[1].split("##")[0]
