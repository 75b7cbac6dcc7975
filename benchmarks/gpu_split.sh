#!/usr/bin/env bash
# The evaluator's parts split over the GPUs of one machine, detached (run AK: four GPUs, each part on its own):
#
#   setsid nohup bash benchmarks/gpu_split.sh > /dev/null 2>&1 < /dev/null &
#   bash benchmarks/gpu_collect.sh 575     # in a later call: wait, then copy the logs to $OUT
#
# GPU 0: calibration, then eval_throughput's POOL_PARTS (default pool-noncu@8,peers) over the 29 tasks, the
# peers on PEER_TASKS. GPU 1: the GPU tests, then GPU1_CMD (default: nothing). GPUs 2 and up: the repeat part
# (REPEAT_TASKS, default all; REPEAT_PRESETS, default `default`), its pairs split between them. Four GPUs at
# least. Logs and JSON in kernelband-runs/gpu, `done` written when every part has ended.
set -u
S=${KB_STATE:-kernelband-runs/gpu}
mkdir -p "$S"
exec >> "$S/session.log" 2>&1
rm -f "$S/done"
# absolute: GPU1_CMD may change directory (run AK: `cd benchmarks` lost `src` and the script failed to import)
export KERNELBAND_TRITONBENCH=$PWD/.data/tritonbench_g_tasks.json PYTHONPATH=$PWD/src PYTHONUNBUFFERED=1
python3 -m pip install --no-index --no-deps -q .wheels/*.whl
N=$(nvidia-smi -L | wc -l)
echo "== $(date -u +%FT%TZ) split session on $N GPUs"; nvidia-smi --query-gpu=index,name --format=csv,noheader
[ "$N" -ge 4 ] || { echo "needs 4 GPUs"; touch "$S/done"; exit 2; }
CUDA_VISIBLE_DEVICES=0 timeout 300 python3 -m kernelband calibrate > "$S/calibrate.log" 2>&1
PEERS=${PEER_TASKS:-add_value,softmax_triton1,rmsnorm_triton,kldiv_compute,cosine_compute,matrix_transpose}
( CUDA_VISIBLE_DEVICES=0 timeout "${EVAL_TIMEOUT_S:-900}" python3 benchmarks/eval_throughput.py \
    --parts "${POOL_PARTS:-pool-noncu@8,peers}" --peer-tasks "$PEERS" --threads "${POOL_THREADS:-4}" --park-profilers \
    --out "$S/eval_throughput.json" > "$S/eval_throughput.log" 2>&1; echo "pool rc=$?" ) &
( export CUDA_VISIBLE_DEVICES=1
  timeout 480 python3 -m pytest -m gpu tests/test_hostile.py tests/test_kernels.py -q -p no:cacheprovider \
    > "$S/gpu_tests.log" 2>&1; echo "gpu tests rc=$?"
  [ -n "${GPU1_CMD:-}" ] && bash -c "$GPU1_CMD" > "$S/gpu1.log" 2>&1 ) &
LANES=$((N - 2))
for lane in $(seq 0 $((LANES - 1))); do
  ( CUDA_VISIBLE_DEVICES=$((lane + 2)) timeout "${EVAL_TIMEOUT_S:-900}" python3 benchmarks/eval_throughput.py \
      --parts repeat --repeat-tasks "${REPEAT_TASKS:-all}" --repeat-presets "${REPEAT_PRESETS:-default}" \
      --shard "$lane/$LANES" --out "$S/eval_throughput-r$lane.json" > "$S/eval_throughput-r$lane.log" 2>&1
    echo "repeat lane $lane rc=$?" ) &
done
wait
echo "== $(date -u +%FT%TZ) split session end"
touch "$S/done"
