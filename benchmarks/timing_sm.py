"""Does a one-block kernel land on the same SM in every call of a process, and on another in the next? (GPU)

    for p in 1 2 3 4 5 6; do python3 benchmarks/timing_sm.py; done

l2_norm_triton1 launches one program per shape (its inputs are 1-D: one row) and its time moves by 1-2 %
from one worker process to the next, not within one (benchmarks/timing_process.py). A latency-bound block's
time depends on its SM's distance to the L2 slices that hold its data. This prints, for one process: the SM
(`%smid`) of a one-block kernel after the GPU-ahead wait, 20 times; the SM after a `g`-block kernel launched
between the wait and it, for g = 1..16 (can the harness move the block?); and the task's summed time as a
worker times it (timing_process.total_ms), so processes can be compared. One JSON line.
"""

from __future__ import annotations

import argparse
import json
import tempfile
from pathlib import Path

import triton
import triton.language as tl
from _task_harness import starting_harness
from timing_process import total_ms


@triton.jit
def _smid(out_ptr):
    zero = tl.full([1], 0, tl.int32)
    sm = tl.inline_asm_elementwise("mov.u32 $0, %smid;", "=r,r", [zero], dtype=tl.int32, is_pure=False, pack=1)
    tl.store(out_ptr + tl.program_id(0) + tl.arange(0, 1), sm)


@triton.jit
def _touch(out_ptr):
    tl.store(out_ptr + tl.program_id(0) + tl.arange(0, 1), tl.full([1], 1, tl.int32))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--task", default="l2_norm_triton1")
    args = parser.parse_args()

    import torch

    out = torch.zeros(64, dtype=torch.int32, device="cuda")
    spare = torch.zeros(64, dtype=torch.int32, device="cuda")

    def sm_after(blocks: int) -> int:
        torch.cuda._sleep(300_000)
        if blocks:
            _touch[(blocks,)](spare)
        _smid[(1,)](out)
        torch.cuda.synchronize()
        return int(out[0])

    plain = [sm_after(0) for _ in range(20)]
    after = {g: sm_after(g) for g in range(1, 17)}
    h, search = starting_harness(args.task, Path(tempfile.mkdtemp(prefix="kb-sm-")))
    torch.manual_seed(0)
    inputs = {s["index"]: h.make_inputs(s["index"], "cuda") for s in search}
    total_ms(h, inputs)
    totals = [round(total_ms(h, inputs) * 1000, 3) for _ in range(3)]
    print(json.dumps({"task": args.task, "sm_plain": plain, "sm_after_g_blocks": after, "totals_us": totals,
                      "plain_sm_after": sm_after(0)}), flush=True)


if __name__ == "__main__":
    main()
