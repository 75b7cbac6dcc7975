"""The two feature vectors the bandit uses.

rho(k) = [log time, log memory footprint, arithmetic intensity, block_dim_x, block_dim_y, achieved occupancy]
phi(k) = [L2 hit rate, DRAM bandwidth %, SM throughput %, warp execution efficiency, achieved occupancy,
          registers/thread, shared-memory bank conflicts, global-load coalescing %, tensor-core utilisation]

phi comes from Nsight Compute when `ncu` is there. Without it, what the compiler
and the timing give is used (registers; bandwidth and throughput from time and
the task's byte and FLOP counts) and the rest stays None: missing, not guessed.
`sources` says where each value came from.

block_dim_x/y are the dominant launch's first two BLOCK* meta-parameters (the
tile a program works on); with none, block_dim_x is the thread count
(num_warps * 32). Without ncu, rho's occupancy is the theoretical occupancy
computed from registers, shared memory and warps (source "estimate").
"""

from __future__ import annotations

import math

from kernelband.evaluation.records import PHI_KEYS, RHO_KEYS, EvalResult, Features, ShapeResult
from kernelband.evaluation.sol import Peaks, bound_bytes
from kernelband.tasks.model import ShapeInfo


def theoretical_occupancy(num_warps: int | None, n_regs: int | None, shared: int | None, device: dict) -> float | None:
    if not num_warps or n_regs is None or not device:
        return None
    max_warps = device.get("max_threads_per_sm", 2048) // 32
    limits = [max_warps // num_warps, 32]
    regs_per_warp = math.ceil(max(n_regs, 1) * 32 / 256) * 256
    limits.append(device.get("regs_per_sm", 65536) // (regs_per_warp * num_warps))
    if shared:
        limits.append(device.get("shared_per_sm", 233472) // (shared + 1024))
    blocks = max(0, min(limits))
    return min(1.0, blocks * num_warps / max_warps)


def dominant_launch(launches: list[dict]) -> dict | None:
    if not launches:
        return None
    return max(launches, key=lambda x: math.prod(x.get("grid") or [1]) * (x.get("num_warps") or 1))


def assemble(result: EvalResult, rep: ShapeInfo, rep_result: ShapeResult, reply: dict, peaks: Peaks | None,
             io_bytes: dict[int, int], device: dict, ncu: dict | None) -> Features:
    f = Features(rho={k: None for k in RHO_KEYS}, phi={k: None for k in PHI_KEYS})
    launch = dominant_launch(reply.get("launches", []))
    if launch:
        f.compile = {k: launch.get(k) for k in ("kernel", "grid", "constexprs", "num_warps", "num_stages",
                                                "n_regs", "n_spills", "shared")}
        f.compile["launches_per_call"] = reply.get("launch_count")
    total_ms = sum(s.cand_ms for s in result.shapes if s.cand_ms and not s.held_out)
    if total_ms:
        f.rho["log_time"], f.sources["log_time"] = math.log(total_ms), "timing"
    footprint = reply.get("footprint_bytes")
    if footprint:
        f.rho["log_memory_footprint"], f.sources["log_memory_footprint"] = math.log(footprint), "allocator"
    nbytes = bound_bytes(rep.bytes, io_bytes.get(rep.index))
    if rep.flops is not None and nbytes:
        f.rho["arithmetic_intensity"], f.sources["arithmetic_intensity"] = rep.flops / nbytes, "task"
    if launch:
        blocks = list((launch.get("constexprs") or {}).values())
        if blocks:
            f.rho["block_dim_x"] = float(blocks[0])
            f.rho["block_dim_y"] = float(blocks[1]) if len(blocks) > 1 else 1.0
            f.sources["block_dim_x"] = f.sources["block_dim_y"] = "launch"
        elif launch.get("num_warps"):
            f.rho["block_dim_x"], f.rho["block_dim_y"] = float(launch["num_warps"] * 32), 1.0
            f.sources["block_dim_x"] = f.sources["block_dim_y"] = "launch"
    if ncu:
        f.profile = {k: ncu[k] for k in ("kernels", "duration_ns") if ncu.get(k) is not None}
        for key in PHI_KEYS:
            if ncu.get(key) is not None:
                f.phi[key], f.sources[f"phi.{key}"] = float(ncu[key]), "ncu"
    if f.phi["registers_per_thread"] is None and launch and launch.get("n_regs") is not None:
        f.phi["registers_per_thread"], f.sources["phi.registers_per_thread"] = float(launch["n_regs"]), "compiler"
    if peaks and rep_result.cand_ms:
        seconds = rep_result.cand_ms * 1e-3
        if f.phi["dram_bw_pct"] is None and nbytes:
            f.phi["dram_bw_pct"] = min(100.0, 100 * nbytes / seconds / (peaks.bw_gbps * 1e9))
            f.sources["phi.dram_bw_pct"] = "timing"
        if f.phi["sm_throughput_pct"] is None and rep.flops:
            f.phi["sm_throughput_pct"] = min(100.0, 100 * rep.flops / seconds / (peaks.tflops * 1e12))
            f.sources["phi.sm_throughput_pct"] = "timing"
    if f.phi["achieved_occupancy"] is not None:
        f.rho["achieved_occupancy"], f.sources["achieved_occupancy"] = f.phi["achieved_occupancy"] / 100.0, "ncu"
    elif launch:
        occ = theoretical_occupancy(launch.get("num_warps"), launch.get("n_regs"), launch.get("shared"), device)
        if occ is not None:
            f.rho["achieved_occupancy"], f.sources["achieved_occupancy"] = occ, "estimate"
    return f
