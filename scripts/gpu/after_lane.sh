#!/usr/bin/env bash
# Issue 50's ten-process self-evaluation on the GPUs issue 49's level-1/2 lane leaves (all but the last, which
# scripts/gpu/side_checks.sh holds with SIDE_NOW=1), once the lane is done (reach_sweep.sh touches l12.finished):
# each example's own kernel evaluated against itself in ten fresh processes, one at a time a GPU. A search beside
# it would disturb the repeatability it measures, so it waits for the lane rather than sharing its GPUs.
#
#   setsid nohup bash scripts/gpu/after_lane.sh > /dev/null 2>&1 < /dev/null &   # from the same copy as the sweep
#   AFTER_NOW=1 AFTER_GPUS=1,2,3 ...: at once, on GPUs 1-3, where the lane has one run left on GPU 0
#   EVAL_SELF_RESUME=docs/results/reach/h200/side/eval_self_rules11.json.xz ...: only the processes that part lacks
#   AFTER_ALONE=1 ...: no sweep beside it, so no minute's wait for one to install libcst
#   CALL_COST_S=600 ...: first issue 50's per-call cost on the idle GPU (call_cost.py --make --no-ncu), at most
#   that many seconds, into $S/call_cost.json; EVAL_SELF_S (the self-evaluation's stop) counts call_cost's time in
#   CALL_COST_DB=docs/results/reach/h200/call_cost_part.db.xz ...: call_cost's database begins as that part (its
#   finished hand-backs are kept, its unfinished runs resumed)
#   PLACE_BIAS=1 ...: after the self-evaluation, benchmarks/place_bias.py in three fresh processes ($S/place_bias.log)
#   RESPELL_GPU="expr" ...: then the corpus spellings that pytest -k expression picks, run on the GPU
#   (tests/test_respellings.py -m gpu; $S/respell_gpu.log): variants the interpreter cannot run (descriptors)
set -u
cd "$(dirname "$0")/../.."
S=${KB_STATE:-kernelband-runs/reach}
mkdir -p "$S"
export PYTHONPATH=$PWD/src PYTHONUNBUFFERED=1
py=${PYTHON:-python3}
log() { echo "$(date -u +%T) after: $*" >> "$S/session.log"; }
# AFTER_NOW=1: no wait (the lane is down to a run on GPUs AFTER_GPUS leaves out); AFTER_GPUS: the GPUs to take
[ "${AFTER_NOW:-0}" = 1 ] || while [ ! -f "$S/l12.finished" ]; do sleep 10; done
n=$(nvidia-smi -L 2>/dev/null | wc -l)
gpus=${AFTER_GPUS:-$(seq -s, 0 $(( n > 1 ? n - 2 : 0 )))}
# the sweep beside installs the carried wheels (libcst) as it starts: give it a minute, then install them here
[ "${AFTER_ALONE:-0}" = 1 ] || for _ in $(seq 12); do "$py" -c "import libcst" 2> /dev/null && break; sleep 5; done
"$py" -c "import libcst" 2> /dev/null || "$py" -m pip install --no-index --no-deps -q .wheels/*.whl
t0=$SECONDS
if [ -n "${CALL_COST_S:-}" ]; then
  if [ -n "${CALL_COST_DB:-}" ] && [ ! -f "$S/call_cost.db" ]; then
    # a part that cannot be read leaves no empty database behind: call_cost then begins afresh
    xz -dc "$CALL_COST_DB" > "$S/call_cost.db.part" 2>> "$S/session.log" && mv "$S/call_cost.db.part" "$S/call_cost.db" \
      || { rm -f "$S/call_cost.db.part"; log "CALL_COST_DB $CALL_COST_DB unreadable: call_cost begins afresh"; }
  fi
  log "call_cost begins on GPU ${gpus%%,*}"
  CUDA_VISIBLE_DEVICES=${gpus%%,*} timeout "$CALL_COST_S" "$py" benchmarks/call_cost.py --make --no-ncu \
    --db "$S/call_cost.db" --out "$S/call_cost.json" > "$S/call_cost.log" 2>&1
  log "call_cost exit $?"
fi
left=$(( ${EVAL_SELF_S:-1500} - (SECONDS - t0) ))  # `timeout 0` would mean no limit at all
if [ "$left" -gt 0 ]; then
  log "eval_self begins on GPUs $gpus"
  timeout "$left" "$py" benchmarks/eval_self.py --runs 10 --tolerance 0.02 --gpus "$gpus" \
    --out "$S/eval_self.json" ${EVAL_SELF_RESUME:+--resume "$EVAL_SELF_RESUME"} > "$S/eval_self.log" \
    2> "$S/eval_self.err"
  log "eval_self exit $?"
else
  log "eval_self skipped: no time left of EVAL_SELF_S"
fi
if [ "${PLACE_BIAS:-0}" = 1 ]; then
  log "place_bias begins on GPU ${gpus%%,*}"
  for _ in 1 2 3; do
    CUDA_VISIBLE_DEVICES=${gpus%%,*} timeout 120 "$py" benchmarks/place_bias.py --ring >> "$S/place_bias.log" 2>&1
  done
  log "place_bias done"
fi
if [ -n "${RESPELL_GPU:-}" ]; then
  log "respellings on GPU ${gpus%%,*}: $RESPELL_GPU"
  CUDA_VISIBLE_DEVICES=${gpus%%,*} timeout 300 "$py" -m pytest -q -o addopts= -p no:cacheprovider -m gpu tests/test_respellings.py \
    -k "$RESPELL_GPU" > "$S/respell_gpu.log" 2>&1
  log "respellings exit $?"
fi
touch "$S/after.done"
# alone, nothing else in $S waits: gpu_collect.sh may return at once
[ "${AFTER_ALONE:-0}" = 1 ] && touch "$S/done"
