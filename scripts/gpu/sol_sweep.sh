#!/usr/bin/env bash
# The speed-of-light sweep behind BENCHMARKS.md's "Speed of light and torch baselines": the level-1/2 tasks and
# the built-in examples searched by kernelband, coordinate and random at T = 10, q = 4, seed 0 (`--seeds 1`) with the built-in
# rewriter; then each run's best kernel against k0, torch eager, torch.compile and the speed of light
# (benchmarks/sol_baselines.py), the handed-back modules timed again in fresh processes
# (scripts/gpu/handback_repeat.py), the fresh-process self-evaluation of the examples (benchmarks/eval_self.py)
# and the GPU tests of the structural rewrites, the pinning and the baselines.
#
# Detached, so that it outlives the device call that starts it (one GPU: about 2 h; four: under 40 min):
#   setsid nohup bash scripts/gpu/sol_sweep.sh > /dev/null 2>&1 < /dev/null &
#   bash scripts/gpu/gpu_collect.sh 575      # in each later call, with KB_STATE=kernelband-runs/sol
# Needs .wheels/ and .data/ carried with the call (scripts/gpu/carry.sh). SMOKE=1: two tasks, one iteration,
# the interpreter: the plumbing on a machine without a GPU.
set -u
cd "$(dirname "$0")/../.."
S=${KB_STATE:-kernelband-runs/sol}
mkdir -p "$S"
export PYTHONPATH=$PWD/src
[ -f .data/tritonbench_g_tasks.json ] && export KERNELBAND_TRITONBENCH=$PWD/.data/tritonbench_g_tasks.json
DB=$S/quality.db
py=${PYTHON:-python3}
"$py" -c "import libcst" 2> /dev/null || "$py" -m pip install --no-index --no-deps -q .wheels/*.whl
if [ "${SMOKE:-0}" = 1 ]; then
  suites=(examples)
  search=(--tasks vector_add,softmax -n 1 -q 1 --interpreter --no-ncu)
  sol=(--interpreter --tasks examples:vector_add,examples:softmax)
  later=0
else
  suites=(tritonbench-g-l12 examples)
  search=(-n 10 -q 4 --runs-per-gpu "${RUNS_PER_GPU:-4}")
  sol=()
  later=1
  "$py" -m kernelband calibrate > "$S/calibrate.log" 2>&1
fi
for suite in "${suites[@]}"; do
  "$py" -m kernelband bench --suite "$suite" --policies kernelband,coordinate,random --seeds 1 --proposer rewrite \
    --db "$DB" "${search[@]}" --json > "$S/bench-$suite.json" 2> "$S/bench-$suite.log"
  bench=$("$py" -c "import json, sys; print(json.load(open(sys.argv[1]))['bench_id'])" "$S/bench-$suite.json" \
    2>> "$S/bench-$suite.log") || continue
  echo "$bench" > "$S/quality.bench"
  "$py" benchmarks/sol_baselines.py --db "$DB" --bench "$bench" "${sol[@]}" --out "$S/sol-$suite.json" \
    > "$S/sol-$suite.log" 2>&1
  [ "$later" = 1 ] && "$py" scripts/gpu/handback_repeat.py --db "$DB" --bench "$bench" --json "$S/handback-$suite.json" \
    > "$S/handback-$suite.log" 2>&1
done
if [ "$later" = 1 ]; then
  "$py" benchmarks/eval_self.py --runs 10 --tolerance 0.02 --out "$S/eval_self.json" > "$S/eval_self.log" 2>&1
  "$py" -m pytest -m gpu -q tests/test_rewrites_matmul.py tests/test_launch_fusion.py tests/test_pinning.py \
    tests/test_baselines_sol.py > "$S/gpu_tests.log" 2>&1
fi
touch "$S/done"
