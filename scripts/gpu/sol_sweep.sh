#!/usr/bin/env bash
# The speed-of-light sweep behind BENCHMARKS.md's "Speed of light and torch baselines", staged for one device
# session on four GPUs: the 29 level-1/2 tasks (l12.db) and the built-in examples (ex.db) searched at T = 10,
# q = 4, seed 0 (`--seeds 1`) with the built-in rewriter, `kernelband` first on every task (stage 1, all GPUs),
# then `coordinate` and `random` (stage 2, GPUs 0-2), so that a session cut short keeps the method's runs on
# every task. Beside them on GPU 3 (the GPU lock is per physical GPU, so they queue with the benches' timing):
# the fresh-process self-evaluation of the examples (benchmarks/eval_self.py) and the GPU tests of the
# structural rewrites, the pinning and the baselines; once stage 1 is done, the handed-back modules timed again
# in fresh processes on that GPU alone (scripts/gpu/handback_repeat.py). Each bench's report (`kernelband report
# bench:N --db`) holds the per-task SOL fractions and the speedups over k0, torch eager and torch.compile.
#
# Detached, so that it outlives the device call that starts it:
#   setsid nohup bash scripts/gpu/sol_sweep.sh > /dev/null 2>&1 < /dev/null &
#   KB_STATE=kernelband-runs/sol bash scripts/gpu/gpu_collect.sh 575      # in each later call
# Needs .wheels/ and .data/ carried with the call (scripts/gpu/carry.sh). SMOKE=1: two tiny benches on the
# interpreter, the plumbing on a machine without a GPU.
set -u
cd "$(dirname "$0")/../.."
S=${KB_STATE:-kernelband-runs/sol}
mkdir -p "$S"
export PYTHONPATH=$PWD/src PYTHONUNBUFFERED=1
[ -f .data/tritonbench_g_tasks.json ] && export KERNELBAND_TRITONBENCH=$PWD/.data/tritonbench_g_tasks.json
py=${PYTHON:-python3}
log() { echo "$(date -u +%T) $*" >> "$S/session.log"; }
"$py" -c "import libcst" 2> /dev/null || "$py" -m pip install --no-index --no-deps -q .wheels/*.whl
if [ "${SMOKE:-0}" = 1 ]; then
  declare -A suite=([l12]="--suite examples --tasks vector_add" [ex]="--suite examples --tasks softmax")
  search=(-n 1 -q 1 --interpreter --no-ncu)
  later=(); side=0
else
  declare -A suite=([l12]="--suite tritonbench-g-l12" [ex]="--suite examples")
  search=(-n 10 -q 4)
  later=(--gpus 0,1,2); side=1
  log "calibrate"
  "$py" -m kernelband calibrate > "$S/calibrate.log" 2>&1
fi
stage() {  # name policies runs-per-gpu [bench options]: both suites at once, each into its own database
  local name=$1 policies=$2 per=$3 pids=(); shift 3
  for part in l12 ex; do
    # shellcheck disable=SC2086
    "$py" -m kernelband bench ${suite[$part]} --policies "$policies" --seeds 1 --proposer rewrite \
      --db "$S/$part.db" "${search[@]}" --runs-per-gpu "$per" "$@" --json \
      > "$S/bench-$part-$name.json" 2> "$S/bench-$part-$name.log" &
    pids+=($!)
  done
  wait "${pids[@]}"  # not the side lane, which waits for stage 1
  log "stage $name done"
}
if [ "$side" = 1 ]; then
  (
    export CUDA_VISIBLE_DEVICES=3
    log "eval_self"
    "$py" benchmarks/eval_self.py --runs 10 --tolerance 0.02 --out "$S/eval_self.json" > "$S/eval_self.log" 2>&1
    log "gpu tests"
    "$py" -m pytest -m gpu -q tests/test_rewrites_matmul.py tests/test_launch_fusion.py tests/test_pinning.py \
      tests/test_baselines_sol.py > "$S/gpu_tests.log" 2>&1
    while [ ! -f "$S/stage1" ]; do sleep 5; done
    for part in l12 ex; do
      log "handback $part"
      "$py" scripts/gpu/handback_repeat.py --db "$S/$part.db" --bench 1 --json "$S/handback-$part.json" \
        > "$S/handback-$part.log" 2>&1
    done
    log "side lane done"
  ) &
fi
log "stage 1"
stage kernelband kernelband 3
touch "$S/stage1"
stage others coordinate,random 3 "${later[@]}"
wait
touch "$S/done"
log "done"
