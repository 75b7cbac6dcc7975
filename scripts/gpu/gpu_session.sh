#!/usr/bin/env bash
# The GPU machine's benchmark session, detached so that it outlives the device call that starts it:
#
#   setsid nohup bash scripts/gpu/gpu_session.sh > /dev/null 2>&1 < /dev/null &
#   bash scripts/gpu/gpu_collect.sh 575     # in each later call: wait, then copy the results to $OUT
#
# Needs .wheels/ (libcst for the rewriter) and .data/tritonbench_g_tasks.json, carried with the call
# (`bash scripts/gpu/carry.sh` makes both in a fresh checkout).
# With one GPU the parts run one after another; with several, the evaluator's parts (fault tests,
# throughput, repeatability, peers) take the last GPU and the search sweep the others, side by side.
# A sweep database carried back in $S (kernelband-runs/gpu) is resumed.
#
# Settings (environment): SWEEP_BUDGET_S (start no new search run after this many seconds), GRID_BUDGET_S,
# GRID_DONE (an earlier session's grid rows, e.g. docs/results/grid-bench3.jsonl: those tasks are not run again),
# SWEEP_TIMEOUT_S and EVAL_TIMEOUT_S (hard stops), EVAL_PARTS (eval_throughput parts, in order; 'none': only
# calibration and the GPU tests, on GPU 0, before the sweep takes every GPU; otherwise the GPU tests run
# after the evaluator parts), RUNS_PER_GPU (default 4),
# SWEEP_TASKS (a new bench's plan), SWEEP_TASKS_NOW (only these of the bench's tasks this time, in this order), SWEEP_POLICIES (phases split by ';', run one after another within one SWEEP_BUDGET_S, e.g.
# 'kernelband;greedy,random': every task with kernelband first), SWEEP_PARTS (search_quality parts, default
# bench,grid,overhead), SWEEP_RESUME_H100 / SWEEP_RESUME_H200, SWEEP_POLICIES_H100 / _H200 and SWEEP_PARTS_H100 / _H200 (the same, per GPU
# model: a bench stays on one), SWEEP_RESUME=part.db.xz:BENCH (continue a committed sweep database, .xz or .gz; BENCH
# `new`: a new bench in it), SWEEP_WARM_PROFILERS (the sweep's workers kept started under ncu per GPU), EVAL=0 (no
# evaluator parts: the sweep takes every GPU), SWEEP=0 (no sweep: the evaluator parts take GPU 0), SIDE_BY_SIDE=0
# (several GPUs: the evaluator's parts on GPU 0 of an otherwise idle host first, then the sweep on every GPU),
# EVAL_TASKS (the evaluator parts' tasks, comma-separated; default the 29), REPEAT_TASKS ('all': the 29), REPEAT_PRESETS
# (presets or variants, e.g. default+placements=8), REPEAT_EXTRA ('T1,T2:P1,P2;T3:P3': more pairs), EVAL_LANES (the
# evaluator parts on the last EVAL_LANES GPUs: the repeat part's pairs split between them), POOL_THREADS (default 4), WARM_PROFILERS (workers kept started
# under ncu; default POOL_THREADS + 3), MEMORY_SHARE (the evaluator parts: the share of GPU memory that checks sharing
# the GPU may declare at once; 'none': no limit), SWEEP_STRATEGIES (a strategies file for a new bench), GPU_TESTS=0 (skip the GPU fault tests; GPU_TESTS=after:
# run them on GPU 0 once the sweep has ended, so that they take no GPU from it), SMOKE=1 (a tiny
# version of everything).
# A/B sweep before the main one, into its own database $S/ab.db (e.g. the built-in strategies with `coarsen`
# added, against the runs of the same tasks in the main bench): AB_STRATEGIES (a strategies file; unset: none),
# AB_TASKS (comma-separated), AB_POLICIES (default kernelband), AB_BUDGET_S (default 600: start no new run
# after), AB_TIMEOUT_S (default 1200), AB_RESUME=ab.db.xz:BENCH (continue one).
set -u
# every worker holds a socket and a log file in the sweep's process: 8 GPUs' pools are hundreds of them
ulimit -n "$(ulimit -Hn)" 2>/dev/null || true
S=${KB_STATE:-kernelband-runs/gpu}
mkdir -p "$S"
exec >> "$S/session.log" 2>&1
# One session per machine: a device call that finds the machine still held, its session still running, must
# not start a second sweep beside it (bench 3: two sweeps on one H200, each with its own GPU lock, until the
# GPU lock became a file lock too). gpu_collect.sh then collects the running one.
if [ -f "$S/session.pid" ] && kill -0 "$(cat "$S/session.pid")" 2>/dev/null; then
  echo "== $(date -u +%FT%TZ) a session is running already (pid $(cat "$S/session.pid")): not starting another"
  exit 0
fi
echo $$ > "$S/session.pid"
rm -f "$S/done"
export KERNELBAND_TRITONBENCH=.data/tritonbench_g_tasks.json PYTHONPATH=src PYTHONUNBUFFERED=1
echo "== $(date -u +%FT%TZ) session start"
python3 -m pip install --no-index --no-deps -q .wheels/*.whl
mkdir -p ~/.cache/kernelband && cp "$S/calibration.json" ~/.cache/kernelband/ 2>/dev/null
python3 -c "import libcst, sklearn, torch, triton; print('torch', torch.__version__, 'triton', triton.__version__)"
nvidia-smi --query-gpu=index,name,driver_version,clocks.sm,clocks.mem --format=csv,noheader
which ncu && ncu --version | tail -1
N=$(nvidia-smi -L | wc -l)
# A bench stays on one GPU model, and a device call may get an H200 where it asked for an H100 (run AD):
# SWEEP_RESUME_<MODEL> and SWEEP_POLICIES_<MODEL> (MODEL: H100, H200, ...), where set, replace SWEEP_RESUME and
# SWEEP_POLICIES for the model this machine has.
MODEL=$(nvidia-smi --query-gpu=name --format=csv,noheader | head -n 1 | grep -o 'H[0-9]\{3\}' | head -n 1)
if [ -n "$MODEL" ]; then
  by_model=SWEEP_RESUME_$MODEL; [ -n "${!by_model:-}" ] && SWEEP_RESUME=${!by_model}
  by_model=SWEEP_POLICIES_$MODEL; [ -n "${!by_model:-}" ] && SWEEP_POLICIES=${!by_model}
  by_model=SWEEP_PARTS_$MODEL; [ -n "${!by_model:-}" ] && SWEEP_PARTS=${!by_model}
  echo "GPU model $MODEL: sweep resumes ${SWEEP_RESUME:-nothing}, policies ${SWEEP_POLICIES:-the default}," \
    "parts ${SWEEP_PARTS:-bench,grid,overhead}"
fi
LAST=$((N - 1))
ALL_GPUS=$(seq -s, 0 $((N - 1)))
# EVAL_LANES: how many GPUs (the last ones) the evaluator parts take side by side with the sweep (default 1)
EVAL_LANES=${EVAL_LANES:-1}
[ "$EVAL_LANES" -ge "$N" ] && EVAL_LANES=$((N > 1 ? N - 1 : 1))
if [ "$N" -gt 1 ]; then SWEEP_GPUS=$(seq -s, 0 $((N - 1 - EVAL_LANES))); else SWEEP_GPUS=0; fi

EVAL_TASKS=${EVAL_TASKS:+--tasks $EVAL_TASKS}; REPEAT_TASKS=${REPEAT_TASKS:-add_value,softmax_triton1,matmul_kernel}
PEER_TASKS=${PEER_TASKS:-add_value,softmax_triton1,rmsnorm_triton,kldiv_compute,cosine_compute,matmul_kernel}
SWEEP_ARGS=""
if [ "${SMOKE:-0}" = 1 ]; then
  EVAL_TASKS="--tasks add_value,softmax_triton1,matrix_transpose"; REPEAT_TASKS=add_value; PEER_TASKS=add_value
  SWEEP_ARGS="--tasks add_value,softmax_triton1 --iterations 3"
fi
[ -n "${SWEEP_TASKS:-}" ] && SWEEP_ARGS="$SWEEP_ARGS --tasks $SWEEP_TASKS"
[ -n "${SWEEP_TASKS_NOW:-}" ] && SWEEP_ARGS="$SWEEP_ARGS --tasks-now $SWEEP_TASKS_NOW"

gpu_tests() {
  if [ "${GPU_TESTS:-1}" = 1 ]; then
    echo "== $(date -u +%FT%TZ) GPU fault tests"
    timeout 420 python3 -m pytest -o addopts= -m gpu tests/test_hostile.py tests/test_kernels.py -q -p no:cacheprovider > "$S/gpu_tests.log" 2>&1
    echo "gpu tests rc=$?"
  fi
}

# evaluator_parts GPU [LANE]: lane 0 (the default) runs EVAL_PARTS, then the GPU tests; lane i of EVAL_LANES runs
# only its share of the repeat part (eval_throughput.py --shard i/EVAL_LANES), into eval_throughput-i.json/.log
evaluator_parts() {
  export CUDA_VISIBLE_DEVICES=$1
  local lane=${2:-0} lanes=${EVAL_LANES:-1} parts=${EVAL_PARTS:-repeat,peers,speed,pool} suffix=""
  if [ "$lane" -gt 0 ]; then
    case ",$parts," in *,repeat,*) parts=repeat ;; *) return 0 ;; esac
    suffix="-$lane"
  else
    echo "== $(date -u +%FT%TZ) calibrate on GPU $1"
    timeout 300 python3 -m kernelband calibrate > "$S/calibrate.log" 2>&1
    if [ "${EVAL_PARTS:-}" = none ]; then gpu_tests; echo "== $(date -u +%FT%TZ) evaluator parts done"; return; fi
  fi
  echo "== $(date -u +%FT%TZ) evaluator throughput ($parts) on GPU $1, lane $lane of $lanes"
  # where the host's CPU goes meanwhile (the busiest processes every 30 s) and the GPUs' memory, for the analysis
  local sampler=""
  [ "$lane" -eq 0 ] && { ( while sleep 30; do echo "== $(date -u +%T)"; ps -eo pid,ppid,pcpu,times,etimes,rss,comm --sort=-pcpu | head -20
      nvidia-smi --query-gpu=index,memory.used,utilization.gpu --format=csv,noheader; done ) \
    >> "$S/ps.log" 2>&1 & sampler=$!; }
  # shellcheck disable=SC2086
  timeout "${EVAL_TIMEOUT_S:-1500}" python3 benchmarks/eval_throughput.py --parts "$parts" $EVAL_TASKS \
    --repeat-tasks "$REPEAT_TASKS" --repeat-presets "${REPEAT_PRESETS:-default,paper}" --peer-tasks "$PEER_TASKS" \
    --repeat-extra "${REPEAT_EXTRA:-}" --shard "$lane/$lanes" \
    --threads "${POOL_THREADS:-4}" ${WARM_PROFILERS:+--warm-profilers "$WARM_PROFILERS"} \
    ${MEMORY_SHARE:+--memory-share "$MEMORY_SHARE"} \
    --out "$S/eval_throughput$suffix.json" > "$S/eval_throughput$suffix.log" 2>&1
  echo "eval_throughput$suffix rc=$?"
  [ -n "$sampler" ] && kill "$sampler" 2>/dev/null
  [ "$lane" -eq 0 ] && gpu_tests  # last: the measurements come first when time is short
  echo "== $(date -u +%FT%TZ) evaluator parts done (lane $lane)"
}

# restore NAME SPEC: a committed database (SPEC = part.db.xz:BENCH, or .gz) becomes $S/NAME.db, its bench
# id $S/NAME.bench, once per machine; BENCH `new` begins a new bench in that database
restore() {
  if [ -n "$2" ] && [ ! -f "$S/$1.db" ]; then
    python3 -c "import gzip, lzma, shutil, sys
shutil.copyfileobj((lzma.open if sys.argv[1].endswith('.xz') else gzip.open)(sys.argv[1]), open(sys.argv[2], 'wb'))" \
      "${2%:*}" "$S/$1.db" && [ "${2##*:}" != new ] && echo "${2##*:}" > "$S/$1.bench"
  fi
}
# resume_arg NAME: `--bench-id N` once NAME's bench exists
resume_arg() { [ -f "$S/$1.bench" ] && echo "--bench-id $(cat "$S/$1.bench")"; }
# record NAME: the newest bench in $S/NAME.db, the one the first phase created, becomes NAME's bench. Read from
# the database, which has it from the bench's first second, not from the report written at the process's
# end: run V's first phase died, and its second phase began another bench.
record() {
  local id
  id=$(python3 -c "import sqlite3, sys; print(sqlite3.connect(sys.argv[1]).execute('SELECT max(id) FROM benches').fetchone()[0] or '')" \
    "$S/$1.db" 2>/dev/null)
  [ -n "$id" ] && echo "$id" > "$S/$1.bench"
}

ab_sweep() {
  [ -n "${AB_STRATEGIES:-}" ] || return 0
  export CUDA_VISIBLE_DEVICES=$1
  restore ab "${AB_RESUME:-}"
  local resume
  resume=$(resume_arg ab)
  echo "== $(date -u +%FT%TZ) A/B sweep ($AB_STRATEGIES, ${AB_POLICIES:-kernelband}) on GPUs $1 $resume"
  # shellcheck disable=SC2086
  timeout "${AB_TIMEOUT_S:-1200}" python3 benchmarks/search_quality.py --parts bench --db "$S/ab.db" \
    --out "$S/ab.json" --budget-s "${AB_BUDGET_S:-600}" --runs-per-gpu "${RUNS_PER_GPU:-4}" \
    --strategies "$AB_STRATEGIES" --policies "${AB_POLICIES:-kernelband}" --tasks "${AB_TASKS:?AB_TASKS}" $resume \
    $([ "${SMOKE:-0}" = 1 ] && echo --iterations 3) \
    >> "$S/ab.log" 2>&1
  echo "A/B sweep rc=$?"
  [ -z "$resume" ] && record ab
}

sweep() {
  ab_sweep "$1"
  export CUDA_VISIBLE_DEVICES=$1
  restore quality "${SWEEP_RESUME:-}"
  local resume
  resume=$(resume_arg quality)
  local start=$SECONDS phase=0 phases
  IFS=';' read -r -a phases <<< "${SWEEP_POLICIES:-}"
  [ ${#phases[@]} -eq 0 ] && phases=("")
  for policies in "${phases[@]}"; do
    phase=$((phase + 1))
    local left=$(( ${SWEEP_BUDGET_S:-1200} - (SECONDS - start) )) hard=$(( ${SWEEP_TIMEOUT_S:-2400} - (SECONDS - start) ))
    [ "$left" -le 0 ] && break
    local extra=""
    [ -n "$policies" ] && extra="--policies $policies --plan-policies ${SWEEP_POLICIES//;/,}"
    echo "== $(date -u +%FT%TZ) sweep phase $phase (${policies:-all policies}) on GPUs $1 $resume, ${left}s"
    # shellcheck disable=SC2086
    timeout "$hard" python3 benchmarks/search_quality.py --parts "${SWEEP_PARTS:-bench,grid,overhead}" \
      --db "$S/quality.db" --out "$S/quality$phase.json" --budget-s "$left" \
      --grid-budget-s "${GRID_BUDGET_S:-300}" ${GRID_DONE:+--grid-done "$GRID_DONE"} --runs-per-gpu "${RUNS_PER_GPU:-4}" \
      ${SWEEP_WARM_PROFILERS:+--warm-profilers "$SWEEP_WARM_PROFILERS"} ${SWEEP_STRATEGIES:+--strategies "$SWEEP_STRATEGIES"} $resume $SWEEP_ARGS $extra \
      >> "$S/sweep.log" 2>&1
    echo "sweep phase $phase rc=$?"
    if [ -z "$resume" ]; then  # the first phase created the bench: the next ones continue it
      record quality
      resume=$(resume_arg quality)
    fi
  done
  echo "== $(date -u +%FT%TZ) sweep done"
}

if [ "${EVAL:-1}" = 0 ]; then
  sweep "$ALL_GPUS"
elif [ "${SWEEP:-1}" = 0 ]; then
  evaluator_parts 0
elif [ "${EVAL_PARTS:-}" = none ]; then  # calibration and the GPU tests first, then the sweep on every GPU
  evaluator_parts 0
  sweep "$ALL_GPUS"
elif [ "$N" -gt 1 ] && [ "${SIDE_BY_SIDE:-1}" = 1 ]; then
  for lane in $(seq 0 $((EVAL_LANES - 1))); do evaluator_parts $((LAST - lane)) "$lane" & done
  sweep "$SWEEP_GPUS"
  if [ "${GPU_TESTS:-1}" = after ]; then  # on the sweep's first GPU as soon as it is free
    export CUDA_VISIBLE_DEVICES=0
    GPU_TESTS=1 gpu_tests
    GPU_TESTS=done
  fi
  wait
else  # one GPU, or SIDE_BY_SIDE=0: the evaluator's parts on an idle host first, then the sweep on every GPU
  evaluator_parts 0
  sweep "$ALL_GPUS"
fi
if [ "${GPU_TESTS:-1}" = after ]; then
  export CUDA_VISIBLE_DEVICES=0
  GPU_TESTS=1 gpu_tests
fi
echo "== $(date -u +%FT%TZ) session end"
touch "$S/done"
