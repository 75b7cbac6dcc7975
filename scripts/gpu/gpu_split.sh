#!/usr/bin/env bash
# The evaluator's parts split over the GPUs of one machine, detached (run AK: four GPUs, each part on its own):
#
#   setsid nohup bash scripts/gpu/gpu_split.sh > /dev/null 2>&1 < /dev/null &
#   bash scripts/gpu/gpu_collect.sh 575     # in a later call: wait, then copy the logs to $OUT
#
# Parts: calibration, then eval_throughput's POOL_PARTS (default pool-noncu@8,peers; empty: none) over the 29
# tasks under POOL_PRESET (default `default`), the peers on PEER_TASKS; the GPU tests (GPU_TESTS=0: none; at most
# TESTS_TIMEOUT_S, default 720), then GPU1_CMD (default: nothing); the repeat part (REPEAT_TASKS, default all;
# REPEAT_PRESETS, default `default`; REPEAT_EXTRA: more TASKS:PRESETS groups, as --repeat-extra; REPEAT=0: none).
#   4 GPUs or more: pool on 0, tests on 1, a repeat lane on each of 2 and up (GPU_TESTS=0: on each of 1 and up).
#   2 or 3 GPUs: pool then a repeat lane on 0, tests then a repeat lane on 1 (and a lane on 2).
#   1 GPU: one after the other, each part alone on the GPU: pool, tests, repeat.
# REPEAT_SHARDS=I/N gives this machine's lanes the I-th of N shares of the repeat part, so that N machines in
# turn split it (run AL: two one-GPU machines). Logs and JSON in kernelband-runs/gpu, `done` written when every
# part has ended.
set -u
S=${KB_STATE:-kernelband-runs/gpu}
mkdir -p "$S"
exec >> "$S/session.log" 2>&1
rm -f "$S/done"
# absolute: GPU1_CMD may change directory, and a relative PYTHONPATH would then lose `src`
export KERNELBAND_TRITONBENCH=$PWD/.data/tritonbench_g_tasks.json PYTHONPATH=$PWD/src PYTHONUNBUFFERED=1
# run AN's second machine lost a call to a `run` without `carry`: every part failed on the missing data
if ! ls .wheels/*.whl "$KERNELBAND_TRITONBENCH" > /dev/null 2>&1; then
  echo "no .wheels or .data here: run scripts/gpu/carry.sh, and give the call carry [\".wheels\", \".data\"]"
  touch "$S/done"; exit 2
fi
python3 -m pip install --no-index --no-deps -q .wheels/*.whl
N=$(nvidia-smi -L | wc -l)
echo "== $(date -u +%FT%TZ) split session on $N GPUs"; nvidia-smi --query-gpu=index,name --format=csv,noheader
PEERS=${PEER_TASKS:-add_value,softmax_triton1,rmsnorm_triton,kldiv_compute,cosine_compute,matrix_transpose}
POOL=${POOL_PARTS-pool-noncu@8,peers}
# this machine's lanes: LANES of them, the machine's share I of N (REPEAT_SHARDS) cut into LANES
IFS=/ read -r MINE OF <<< "${REPEAT_SHARDS:-0/1}"
TESTING=$([ "${GPU_TESTS:-1}" = 0 ] && echo 0 || echo 1)
LANES=$(( N >= 4 ? N - 1 - TESTING : N ))

ended() {  # $1: what ended; its exit status read first (run AO: `echo "$(date) rc=$?"` gave date's, always 0)
  local rc=$?
  echo "$(date -u +%T) $1 rc=$rc"
}
pool() {  # $1: GPU
  CUDA_VISIBLE_DEVICES=$1 timeout 300 python3 -m kernelband calibrate > "$S/calibrate.log" 2>&1
  [ -n "$POOL" ] || return 0
  CUDA_VISIBLE_DEVICES=$1 timeout "${EVAL_TIMEOUT_S:-900}" python3 benchmarks/eval_throughput.py \
    --parts "$POOL" --peer-tasks "$PEERS" --threads "${POOL_THREADS:-4}" \
    --preset "${POOL_PRESET:-default}" --out "$S/eval_throughput.json" > "$S/eval_throughput.log" 2>&1
  ended pool
}
tests() {  # $1: GPU
  [ "${GPU_TESTS:-1}" = 0 ] && return 0
  # run AL: 27 passed in 461 s; run AO's 480 s limit cut the last one off (124 reads as a timeout)
  CUDA_VISIBLE_DEVICES=$1 timeout "${TESTS_TIMEOUT_S:-720}" python3 -m pytest -o addopts= -m gpu tests/test_hostile.py \
    tests/test_kernels.py -q -p no:cacheprovider > "$S/gpu_tests.log" 2>&1
  ended "gpu tests"
  [ -n "${GPU1_CMD:-}" ] && CUDA_VISIBLE_DEVICES=$1 bash -c "$GPU1_CMD" > "$S/gpu1.log" 2>&1
  return 0
}
lane() {  # $1: GPU, $2: lane index on this machine
  [ "${REPEAT:-1}" = 0 ] && return 0
  CUDA_VISIBLE_DEVICES=$1 timeout "${REPEAT_TIMEOUT_S:-1500}" python3 benchmarks/eval_throughput.py \
    --parts repeat --repeat-tasks "${REPEAT_TASKS:-all}" --repeat-presets "${REPEAT_PRESETS:-default}" \
    --repeat-extra "${REPEAT_EXTRA:-}" \
    --shard "$((MINE * LANES + $2))/$((OF * LANES))" --out "$S/eval_throughput-r$2.json" \
    > "$S/eval_throughput-r$2.log" 2>&1
  ended "repeat lane $2"
}

if [ "$N" -ge 4 ]; then
  pool 0 & tests 1 &
  for l in $(seq 0 $((LANES - 1))); do lane $((l + 1 + TESTING)) "$l" & done
elif [ "$N" -ge 2 ]; then
  { pool 0; lane 0 0; } & { tests 1; lane 1 1; } &
  [ "$N" -eq 3 ] && lane 2 2 &
else
  pool 0; tests 0; lane 0 0
fi
wait
echo "== $(date -u +%FT%TZ) split session end"
touch "$S/done"
