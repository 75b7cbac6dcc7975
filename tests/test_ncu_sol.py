"""Nsight Compute CSV into phi, the speed-of-light bound, the calibration cache, and the verdict on
a candidate measured faster than the bound."""

from __future__ import annotations

import csv
import io
import json

import pytest

from kernelband.evaluation import ncu, sol
from kernelband.evaluation.evaluator import Evaluator
from kernelband.evaluation.records import PHI_KEYS, EvalResult, Outcome, ShapeResult
from kernelband.tasks.model import ShapeInfo

# ncu --csv --page raw --print-units base: process messages, a header row, a units row, one row per kernel.
ID_COLUMNS = ["ID", "Process ID", "Process Name", "Host Name", "Kernel Name", "Context", "Stream",
              "Block Size", "Grid Size", "Device", "CC"]
UNITS = {"lts__t_sector_hit_rate.pct": "%", "dram__throughput.avg.pct_of_peak_sustained_elapsed": "%",
         "smsp__thread_inst_executed_per_inst_executed.ratio": "", "launch__registers_per_thread":
         "register/thread", "l1tex__data_bank_conflicts_pipe_lsu_mem_shared.sum": "", ncu.DURATION: "nsecond"}


def ncu_csv(kernels: list[dict[str, str]], metrics: list[str]) -> str:
    buf = io.StringIO()
    writer = csv.writer(buf, quoting=csv.QUOTE_ALL, lineterminator="\n")
    writer.writerow(ID_COLUMNS + metrics)
    writer.writerow([""] * len(ID_COLUMNS) + [UNITS.get(m, "") for m in metrics])
    for i, k in enumerate(kernels):
        writer.writerow([str(i), "4242", "python3.11", "127.0.0.1", k.get("name", f"kernel_{i}"), "1", "7",
                         "(128, 1, 1)", "(4096, 1, 1)", "0", "9.0"] + [k.get(m, "") for m in metrics])
    return ("==PROF== Connected to process 4242 (/usr/bin/python3.11)\n"
            "==PROF== Profiling \"softmax_kernel\" - 0: 0%....50%....100% - 9 passes\n"
            + buf.getvalue() + "==PROF== Disconnected from process 4242\n")


M = {key: metric for key, (metric, _) in ncu.METRICS.items()}
DRAM, L2, WARP, REGS, BANK = (M["dram_bw_pct"], M["l2_hit_rate"], M["warp_execution_efficiency"],
                              M["registers_per_thread"], M["shared_bank_conflicts"])


def test_one_kernel_fills_the_metrics_present_and_leaves_the_rest_none():
    text = ncu_csv([{ncu.DURATION: "10,240", DRAM: "87.5", L2: "42.25", WARP: "24", REGS: "40"}],
                   [DRAM, L2, WARP, REGS, ncu.DURATION])
    phi = ncu.parse(text)
    assert phi["dram_bw_pct"] == pytest.approx(87.5)
    assert phi["l2_hit_rate"] == pytest.approx(42.25)
    assert phi["warp_execution_efficiency"] == pytest.approx(24 / 32 * 100)  # threads per instruction of 32
    assert phi["registers_per_thread"] == 40
    assert phi["duration_ns"] == 10240  # "10,240": ncu's thousands separator
    assert phi["kernels"] == 1
    for key in set(PHI_KEYS) - {"dram_bw_pct", "l2_hit_rate", "warp_execution_efficiency",
                                "registers_per_thread"}:
        assert phi[key] is None, key  # not measured: missing, not guessed


def test_several_kernels_are_weighted_by_duration_and_conflicts_summed():
    text = ncu_csv([{ncu.DURATION: "1000", DRAM: "20", BANK: "5", L2: "n/a"},
                    {ncu.DURATION: "3000", DRAM: "60", BANK: "7", L2: "80"}],
                   [DRAM, BANK, L2, ncu.DURATION])
    phi = ncu.parse(text)
    assert phi["dram_bw_pct"] == pytest.approx((20 * 1000 + 60 * 3000) / 4000)
    assert phi["shared_bank_conflicts"] == 12
    assert phi["l2_hit_rate"] == pytest.approx(80)  # only the kernel that has a value counts
    assert phi["kernels"] == 2 and phi["duration_ns"] == 4000


def test_the_features_keep_how_many_kernels_ncus_profile_read():
    """phi is duration-weighted over every kernel the profiled call launched (torch's too): the features say
    how many there were and how long they ran, and a stored result keeps it."""
    from kernelband.evaluation import features

    text = ncu_csv([{ncu.DURATION: "1000", DRAM: "20"}, {ncu.DURATION: "3000", DRAM: "60"}], [DRAM, ncu.DURATION])
    rep = ShapeInfo(0, "n=1024", False, "", 8192)
    result = EvalResult(task="t", outcome=Outcome.OK, shapes=[ShapeResult(0, "n=1024", False)])
    f = features.assemble(result, rep, result.shapes[0], {}, None, {}, {}, ncu.parse(text))
    assert f.profile == {"kernels": 2.0, "duration_ns": 4000.0}
    assert f.phi["dram_bw_pct"] == pytest.approx(50)
    result.features = f
    assert EvalResult.from_dict(json.loads(json.dumps(result.to_dict()))).features.profile == f.profile
    assert features.assemble(result, rep, result.shapes[0], {}, None, {}, {}, None).profile == {}
    stored = result.to_dict()
    del stored["features"]["profile"]  # a result stored before the field existed
    assert EvalResult.from_dict(stored).features.profile == {}


def test_the_profiled_run_keeps_how_its_worker_saw_it_and_a_failure_keeps_nothing():
    """`Profile.measure` keeps the worker's own seconds of the profiled run (profiler start, the call with
    ncu's replays, profiler stop); a failed run leaves none, and its note says why."""
    replies = [{"ok": True, "seconds": {"start": 0.5, "run": 1.25, "stop": 0.01}},
               {"ok": False, "error": "CUDA error: no profiler"}]

    class Worker:
        ncu_log = None
        closed = False

        def request(self, message, timeout):
            assert message["op"] == "profile" and message["shape"] == 3 and message["seed"] == 7
            return replies.pop(0)

        def close(self):
            self.closed = True

    with Evaluator(mode="interpreter", warm=0, use_ncu=False) as ev:
        ok, failed = (ncu.Profile(None, "", 3, 7, "GPU", ev.pool) for _ in range(2))
        for profile in (ok, failed):
            profile.worker = Worker()
        ok.measure()
        assert ok.seconds == {"start": 0.5, "run": 1.25, "stop": 0.01} and ok.note is None
        worker = failed.worker
        failed.measure()
        assert failed.seconds == {} and failed.note == "ncu: profiling run failed: CUDA error: no profiler"
        assert worker.closed and failed.worker is None  # a failed profile gives its worker up


def test_a_report_without_kernels_gives_none():
    assert ncu.parse("==PROF== Connected to process 1\n==WARNING== No kernels were profiled.\n") is None
    assert ncu.parse(ncu_csv([], [DRAM, ncu.DURATION])) is None


def test_the_profiler_command_asks_for_every_phi_metric_as_a_raw_csv(monkeypatch):
    monkeypatch.setenv("KERNELBAND_NCU", "/opt/nsight/ncu")
    cmd = ncu.command("/tmp/x.csv")
    assert cmd[0] == "/opt/nsight/ncu"
    metrics = cmd[cmd.index("--metrics") + 1].split(",")
    assert {m for m, _ in ncu.METRICS.values()} | {ncu.DURATION} == set(metrics)
    assert {"--csv", "--page", "raw"} <= set(cmd)
    assert cmd[cmd.index("--log-file") + 1] == "/tmp/x.csv"


# -- speed of light --------------------------------------------------------------------------------
PEAKS = sol.Peaks("Test GPU", bw_gbps=1000.0, tflops=100.0, tflops_by_dtype={"float16": 100.0})


def test_bound_is_the_larger_of_memory_time_and_compute_time():
    # 2 GB at 1000 GB/s is 2 ms; 1e12 FLOP at 100 TFLOP/s is 10 ms.
    assert sol.bound_ms(2e9, 1e12, PEAKS) == pytest.approx(10.0)
    assert sol.bound_ms(2e9, 1e9, PEAKS) == pytest.approx(2.0)
    assert sol.bound_ms(2e9, None, PEAKS) == pytest.approx(2.0)
    assert sol.bound_ms(None, 1e12, PEAKS) == pytest.approx(10.0)
    assert sol.bound_ms(None, None, PEAKS) is None


def test_bound_bytes_never_exceed_what_the_inputs_and_outputs_hold():
    assert sol.bound_bytes(3e6, 2_000_000) == 2_000_000
    assert sol.bound_bytes(1e6, 2_000_000) == 1e6
    assert sol.bound_bytes(None, 2_000_000) == 2_000_000
    assert sol.bound_bytes(None, None) is None


def test_calibration_is_cached_per_gpu_name(tmp_path, monkeypatch):
    monkeypatch.setenv("KERNELBAND_CACHE", str(tmp_path / "cache"))
    assert sol.load("NVIDIA H100 80GB HBM3") is None
    h100 = sol.Peaks("NVIDIA H100 80GB HBM3", 3000.0, 700.0, {"float16": 700.0, "float32": 60.0}, "2.4")
    h200 = sol.Peaks("NVIDIA H200", 4200.0, 750.0, {"float16": 750.0})
    path = sol.save(h100)
    assert path == tmp_path / "cache" / "calibration.json"
    sol.save(h200)
    assert sol.load("NVIDIA H100 80GB HBM3") == h100
    assert sol.load("NVIDIA H200") == h200
    assert sol.load("NVIDIA A100") is None
    assert set(json.loads(path.read_text())) == {"NVIDIA H100 80GB HBM3", "NVIDIA H200"}


def test_a_corrupt_calibration_cache_is_ignored_and_replaced(tmp_path):
    path = tmp_path / "calibration.json"
    path.write_text("{not json")
    assert sol.load("Test GPU", path) is None
    sol.save(PEAKS, path)
    assert sol.load("Test GPU", path) == PEAKS


# -- the evaluator's speed-of-light check ----------------------------------------------------------
def _judge(cand_ms: float, ref_ms: float, nbytes: float = 1e9, overcounted: str = "", flops: float | None = None):
    """Run the speed-of-light verdict (sol.judge) on one shape whose bound is nbytes / 1000 GB/s (or
    flops / 100 TFLOP/s, if larger)."""
    shape = ShapeInfo(index=0, label="n=1", held_out=False, inputs="", nbytes=int(nbytes), bytes=nbytes, flops=flops)
    result = EvalResult(task="t", outcome=Outcome.OK)
    sr = ShapeResult(0, "n=1", False, correct=True, ref_ms=ref_ms, cand_ms=cand_ms)
    result.shapes = [sr]
    sol.judge([shape], result, {0: sr}, {0: int(nbytes)}, PEAKS, overcounted)
    return result, sr


def test_a_candidate_slower_than_the_bound_is_ok_and_gets_its_fraction():
    result, sr = _judge(cand_ms=2.0, ref_ms=4.0)
    assert result.outcome == Outcome.OK
    assert sr.bound_ms == pytest.approx(1.0)
    assert sr.sol_fraction == pytest.approx(0.5)
    assert sr.gbps == pytest.approx(500.0)


def test_a_candidate_faster_than_the_bound_is_suspicious():
    result, sr = _judge(cand_ms=0.5, ref_ms=4.0)
    assert result.outcome == Outcome.SUSPICIOUS
    assert "speed_of_light" in result.checks
    assert "faster than the speed-of-light bound" in result.detail
    assert sr.sol_fraction == pytest.approx(2.0)


def test_within_the_noise_margin_of_the_bound_is_not_suspicious():
    result, _ = _judge(cand_ms=1.0 / (sol.BANDWIDTH_TOLERANCE - 0.01), ref_ms=4.0)
    assert result.outcome == Outcome.OK


def test_a_compute_bound_shape_may_beat_the_calibrated_matmul_rate_by_more():
    flops = 2e11  # 2 ms at 100 TFLOP/s, more than the 1 GB's 1 ms at 1000 GB/s: FLOPs set the bound
    ok, sr = _judge(cand_ms=2.0 / 1.10, ref_ms=4.0, flops=flops)  # a tuned matmul 10 % over the library's rate
    assert ok.outcome == Outcome.OK and sr.sol_fraction == pytest.approx(1.10)
    bad, _ = _judge(cand_ms=2.0 / (sol.COMPUTE_TOLERANCE + 0.05), ref_ms=4.0, flops=flops)
    assert bad.outcome == Outcome.SUSPICIOUS and "speed_of_light" in bad.checks
    # the same 10 % over a bound that bytes set is still suspicious
    moved, _ = _judge(cand_ms=1.0 / 1.10, ref_ms=4.0, flops=1e10)
    assert moved.outcome == Outcome.SUSPICIOUS


def test_the_benchs_void_bound_test_agrees_with_the_verdict_on_a_compute_bound_shape():
    """A tuned matmul and its reference both 10 % over the calibrated rate: within the compute margin, so the
    fraction stands, and the bench's test of a stored fraction (`void_reason`, which reads the margin the verdict
    recorded) agrees, instead of measuring that source again each time a policy reaches it."""
    flops = 2e11
    result, sr = _judge(cand_ms=2.0 / 1.10, ref_ms=2.0 / 1.10, flops=flops)
    assert result.outcome == Outcome.OK and sr.sol_fraction == pytest.approx(1.10)
    assert sr.sol_margin == sol.COMPUTE_TOLERANCE and sol.void_reason(sr, "") == ""
    _, void = _judge(cand_ms=0.5, ref_ms=0.6)  # bytes set the bound, which both beat by far
    assert void.sol_fraction is None and sol.void_reason(void, "") == void.note != ""


def test_the_margin_follows_the_term_that_sets_the_bound():
    assert sol.tolerance(2e9, 1e12, PEAKS) == sol.COMPUTE_TOLERANCE  # 10 ms of FLOPs against 2 ms of bytes
    assert sol.tolerance(2e9, 1e9, PEAKS) == sol.BANDWIDTH_TOLERANCE
    assert sol.tolerance(None, 1e12, PEAKS) == sol.COMPUTE_TOLERANCE
    assert sol.tolerance(2e9, None, PEAKS) == sol.BANDWIDTH_TOLERANCE


def test_a_bound_the_reference_also_beats_blames_the_task_not_the_candidate():
    result, sr = _judge(cand_ms=0.5, ref_ms=0.6)
    assert result.outcome == Outcome.OK
    assert "byte count is too high" in sr.note


def test_a_task_that_overcounts_its_bytes_reports_the_bound_without_judging_by_it_or_a_fraction_of_it():
    result, sr = _judge(cand_ms=0.5, ref_ms=1.0, overcounted="reads only the rows within each length")
    assert result.outcome == Outcome.OK and "speed_of_light" not in result.checks
    assert sr.data_bound_ms == pytest.approx(1.0) and sr.sol_fraction is None  # not "2.0 of the speed of light"
    assert "reads only the rows within each length" in sr.note


def test_flash_decode2_phi_says_why_its_bytes_are_overcounted():
    from kernelband.tasks import load_task
    from kernelband.tasks import tritonbench as tb

    if tb.find() is None:
        pytest.skip("no TritonBench-G data (set KERNELBAND_TRITONBENCH)")
    assert "sequence length" in load_task("tritonbench:flash_decode2_phi").bytes_overcounted
    assert load_task("tritonbench:add_value").bytes_overcounted == ""


def test_a_dead_profiling_worker_leaves_a_note_with_the_step_and_ncus_own_error(tmp_path):
    from kernelband.evaluation.gone import WorkerGone

    exc = WorkerGone("crashed", "worker killed by SIGSEGV\n==PROF== Connected to process 12\n"
                                "==ERROR== Failed to profile \"kernel\" in process 12\n==PROF== Disconnected")
    note = ncu.gone_note(exc, "profile_prepare")
    assert note == ('ncu: profiling worker crashed on profile_prepare (worker killed by SIGSEGV; '
                    '==ERROR== Failed to profile "kernel" in process 12)')
    assert ncu.gone_note(WorkerGone("timeout", ""), "profile") == "ncu: profiling worker timeout on profile"
    # ncu's own errors go to its --log-file, beside the CSV, not to the worker's log
    log = tmp_path / "ncu.csv"
    log.write_text("==PROF== Connected to process 12\n==ERROR== Unknown Error on device 0.\n"
                   "==ERROR== The application returned an error code (9).\n")
    assert ncu.gone_note(WorkerGone("crashed", "worker exited with code 9\n"), "profile_prepare", str(log)) == (
        "ncu: profiling worker crashed on profile_prepare (worker exited with code 9; "
        "==ERROR== The application returned an error code (9).)")
    assert ncu.gone_note(WorkerGone("crashed", "worker exited with code 9"), "load", str(tmp_path / "none")) == (
        "ncu: profiling worker crashed on load (worker exited with code 9)")
    assert len(ncu.gone_note(WorkerGone("crashed", "x" * 1000), "load")) == 300
