#!/usr/bin/env bash
# Issue 49's correctness check on the GPU machine's spare CPU cores, beside the sweep: every structural variant of
# every TritonBench-G task evaluated in the Triton interpreter against its starting kernel
# (tools/rewrite_coverage.py --outputs), at the lowest priority and with no GPU visible, so the sweep's timings
# keep their cores. That machine's Triton (3.6) still interprets block pointers, which this project's CPU
# Triton refuses. Per task, a line in $S/outputs.log as it finishes; the whole in $S/outputs.json at the end.
#
#   setsid nohup bash scripts/gpu/outputs_check.sh > /dev/null 2>&1 < /dev/null &   # from a copy of the tree
set -u
cd "$(dirname "$0")/../.."
S=${KB_STATE:-kernelband-runs/reach}
mkdir -p "$S"
export PYTHONPATH=$PWD/src PYTHONUNBUFFERED=1 CUDA_VISIBLE_DEVICES=""
py=${PYTHON:-python3}
"$py" -c "import libcst" 2> /dev/null || "$py" -m pip install --no-index --no-deps -q .wheels/*.whl
data=()
[ -f .data/tritonbench_g_tasks.json ] && data=(--tritonbench "$PWD/.data/tritonbench_g_tasks.json")
nice -n 19 "$py" tools/rewrite_coverage.py "${data[@]}" --outputs --jobs "${JOBS:-8}" --json \
  > "$S/outputs.json" 2> "$S/outputs.log"
echo "exit $?" >> "$S/outputs.log"
