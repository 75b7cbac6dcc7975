#!/usr/bin/env bash
# The speed-of-light sweep behind BENCHMARKS.md's "Speed of light and torch baselines": the 29 level-1/2 tasks
# (l12.db) and the built-in examples (ex.db) searched at T = 10, q = 4, seed 0 (`--seeds 1`) with the built-in
# rewriter; `kernelband` on every task first (one bench), then `coordinate` and `random` (a second bench of the
# same database). The whole sweep is about 4,700 evaluations (3,000 after reuse): more than one device session,
# so each session resumes it from the databases of the last (docs/results/sol/*.db.xz, unpacked where $S has
# none) and each bench picks up where it stopped.
#
# One session, in order:
#   1. `kernelband calibrate`;
#   2. unless SELF=0: the fresh-process self-evaluation of the examples (benchmarks/eval_self.py), one example
#      at a time on each GPU, each process alone on its GPU; then the GPU tests of the structural rewrites, the
#      pinning and the baselines; then the zygote's check on a GPU (an eval with and without it, the hostile
#      candidates with it);
#   3. the benches, l12 on GPUs 0-2 and the examples on GPU 3 (never two benches on one GPU: on four H100s,
#      two benches and a self-evaluation per GPU queued worker starts behind timings for minutes), then, once a
#      bench is complete, the hand-back check of its autotuned kernels (scripts/gpu/handback_repeat.py).
# Each bench's report (`kernelband report bench:N --db`) has the per-task SOL fractions and the speedups over k0,
# torch eager and torch.compile.
#
# Detached, so that it outlives the device call that starts it:
#   setsid nohup bash scripts/gpu/sol_sweep.sh > /dev/null 2>&1 < /dev/null &
#   KB_STATE=kernelband-runs/sol bash scripts/gpu/gpu_collect.sh 575      # in each later call
# Needs .wheels/ and .data/ carried with the call (scripts/gpu/carry.sh). SMOKE=1: tiny benches on the
# interpreter, the plumbing on a machine without a GPU.
set -u
cd "$(dirname "$0")/../.."
S=${KB_STATE:-kernelband-runs/sol}
mkdir -p "$S"
export PYTHONPATH=$PWD/src PYTHONUNBUFFERED=1
[ -f .data/tritonbench_g_tasks.json ] && export KERNELBAND_TRITONBENCH=$PWD/.data/tritonbench_g_tasks.json
py=${PYTHON:-python3}
log() { echo "$(date -u +%T) $*" >> "$S/session.log"; }
db=("")  # the databases' suffix: none for an H100 sweep
"$py" -c "import libcst" 2> /dev/null || "$py" -m pip install --no-index --no-deps -q .wheels/*.whl
if [ "${SMOKE:-0}" = 1 ]; then
  declare -A suite=([l12]="--suite examples --tasks vector_add" [ex]="--suite examples --tasks softmax")
  declare -A gpus=([l12]="" [ex]="")
  search=(-n 1 -q 1) run=(--interpreter --no-ncu)
  SELF=0
else
  declare -A suite=([l12]="--suite tritonbench-g-l12" [ex]="--suite examples")
  declare -A gpus=([l12]="--gpus 0,1,2" [ex]="--gpus 3")
  search=(-n 10 -q 4) run=(--runs-per-gpu 2)
  # the committed databases are an H100 sweep, which a bench resumes on H100s only: on another model (an H200
  # machine that came for an H100 one) the sweep begins anew in databases named for it
  model=$(nvidia-smi --query-gpu=name --format=csv,noheader 2>/dev/null | head -n 1 | grep -o 'H[0-9]\+')
  [ "${model:-H100}" = H100 ] || db=("-${model,,}")
  log "GPU model ${model:-unknown}: databases l12${db[0]}.db and ex${db[0]}.db"
  for part in l12 ex; do  # the last session's databases, to resume
    [ -n "${db[0]}" ] || [ -f "$S/$part.db" ] || [ ! -f "docs/results/sol/$part.db.xz" ] || "$py" -c "import lzma
import shutil, sys; shutil.copyfileobj(lzma.open(sys.argv[1]), open(sys.argv[2], 'wb'))" "docs/results/sol/$part.db.xz" \
      "$S/$part.db"
  done
  log "calibrate"
  "$py" -m kernelband calibrate > "$S/calibrate.log" 2>&1
fi
if [ "${SELF:-1}" = 1 ]; then
  log "eval_self"
  "$py" benchmarks/eval_self.py --runs 10 --tolerance 0.02 --gpus 0,1,2,3 --out "$S/eval_self.json" \
    > "$S/eval_self.log" 2>&1
  log "gpu tests"
  "$py" -m pytest -o addopts= -m gpu -q tests/test_rewrites_matmul.py tests/test_launch_fusion.py tests/test_pinning.py \
    tests/test_baselines_sol.py > "$S/gpu_tests.log" 2>&1
  # workers forked from a zygote on a GPU (off there by default until checked): one eval each way, timed,
  # and the hostile candidates with the zygote on
  log "zygote"
  for z in 0 1; do
    start=$(date +%s%N)
    CUDA_VISIBLE_DEVICES=0 KERNELBAND_ZYGOTE=$z "$py" -m kernelband eval examples:softmax --json \
      > "$S/zygote-$z.json" 2> "$S/zygote-$z.log"
    echo "KERNELBAND_ZYGOTE=$z exit $? $(( ($(date +%s%N) - start) / 1000000 )) ms" >> "$S/zygote.txt"
  done
  CUDA_VISIBLE_DEVICES=0 KERNELBAND_ZYGOTE=1 timeout 400 "$py" -m pytest -o addopts= -m gpu -q tests/test_hostile.py \
    > "$S/zygote_hostile.log" 2>&1
fi
bench_of() {  # database policies -> "id status" of its bench planned with exactly these policies, if any
  [ -f "$1" ] && "$py" - "$1" "$2" <<'PY'
import json, sqlite3, sys
for bench, config, status in sqlite3.connect(sys.argv[1]).execute("SELECT id, config, status FROM benches"):
    if ",".join(json.loads(config)["policies"]) == sys.argv[2]:
        print(bench, status)
        break
PY
}
lane() {  # one suite's benches, one after another, on its GPUs
  local part=$1 name id status
  for policies in kernelband coordinate,random; do
    name=${policies%%,*}
    read -r id status <<< "$(bench_of "$S/$part${db[0]}.db" "$policies")"
    log "$part $policies: $([ -n "$id" ] && echo "bench $id, $status" || echo "new bench")"
    # shellcheck disable=SC2086
    if [ -n "$id" ]; then
      [ "$status" = done ] || "$py" -m kernelband bench --resume "$id" --db "$S/$part${db[0]}.db" ${gpus[$part]} "${run[@]}" \
        --json > "$S/bench-$part-$name.json" 2> "$S/bench-$part-$name.log"
    else
      "$py" -m kernelband bench ${suite[$part]} --policies "$policies" --seeds 1 --proposer rewrite \
        --db "$S/$part${db[0]}.db" ${gpus[$part]} "${search[@]}" "${run[@]}" --json \
        > "$S/bench-$part-$name.json" 2> "$S/bench-$part-$name.log"
    fi
    read -r id status <<< "$(bench_of "$S/$part${db[0]}.db" "$policies")"
    log "$part $policies: bench $id $status"
    if [ "${SMOKE:-0}" != 1 ] && [ "$status" = done ] && [ ! -f "$S/handback-$part-$name.json" ]; then
      CUDA_VISIBLE_DEVICES=${gpus[$part]##*[ ,]} "$py" scripts/gpu/handback_repeat.py --db "$S/$part${db[0]}.db" \
        --bench "$id" --json "$S/handback-$part-$name.json" > "$S/handback-$part-$name.log" 2>&1
    fi
  done
  log "$part done"
}
lane l12 &
lane ex &
wait
touch "$S/done"
log "done"
