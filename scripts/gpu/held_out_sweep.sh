#!/usr/bin/env bash
# Issue 51's held-out comparison of the policies, in pieces that each fit one GPU session (docs/lab/
# held_out_plan.md; sized by tools/bench_plan.py). The built-in rewriter, T = 10, q = 1, 5 seeds, in two lanes:
#   held (held.db): the knowledge fill (`kernelband` on the train tasks of the split), then the test bench
#     (POLICIES on the test tasks, knowledge carried from the fill: the run database's own, so that a resumed
#     run finds it wherever the tree lies);
#   cold (cold.db): the test tasks again with COLD and --knowledge off. It needs no fill, so it runs beside.
# Each session resumes the parts the last one committed on its GPU model (docs/results/held_out/MODEL/*.db.xz,
# unpacked where $S has none): a bench resumes only on its own model, and knowledge carries only within one. The
# benches come first; nothing but the calibration (the evaluator's speed-of-light check reads it, 20 s) runs
# before them.
#
#   rm -rf /tmp/kb && cp -r . /tmp/kb && cd /tmp/kb && setsid nohup bash scripts/gpu/held_out_sweep.sh > /dev/null 2>&1 < /dev/null &
#   cd /tmp/kb && KB_STATE=kernelband-runs/held_out COLLECT_PACK_S=150 bash scripts/gpu/gpu_collect.sh 560
#   # (each later call; 150 s: the parts reach some 200 MB, docs/lab/held_out_plan.md)
#   # here: copy held.db.xz and cold.db.xz from the call's files over docs/results/held_out/MODEL/, commit
#   JOIN=1 MODEL=h200 bash scripts/gpu/held_out_sweep.sh   # here, once both lanes are done: one database
# KEPT=DIR reads the parts from DIR instead of docs/results/held_out/MODEL. GPUS=0,1: those GPUs only (shared
# by the lanes as all of them are); WAIT_FOR=FILE: begin once FILE exists (another script's GPUs come free).
# Needs .wheels/ and .data/ carried with the call (scripts/gpu/carry.sh). SMOKE=1: tiny benches (one task, -n 1,
# one seed) on the interpreter, the plumbing on a machine without a GPU; with JOIN=1 after it, the join too.
set -u
cd "$(dirname "$0")/../.."
export PYTHONPATH=$PWD/src PYTHONUNBUFFERED=1
[ -f .data/tritonbench_g_tasks.json ] && export KERNELBAND_TRITONBENCH=$PWD/.data/tritonbench_g_tasks.json
py=${PYTHON:-python3}
SUITES=${SUITES:-tritonbench-g-l12}  # tritonbench-g-l12,examples adds the examples' test and cold benches
POLICIES=${POLICIES:-kernelband,random,beam,coordinate}
COLD=${COLD-kernelband}  # COLD= (empty): no cold lane
FILL=${FILL-kernelband}
SEEDS=${SEEDS:-5}
# torch eager and torch.compile are not timed in these benches (--no-baselines): the verdict compares policies with
# each other, and a max-autotune compile of every shape of every task in every session costs GPU minutes that the
# searches need. BASELINES=1 times them.
[ "${BASELINES:-0}" = 1 ] && baselines=() || baselines=(--no-baselines)
if [ "${SMOKE:-0}" = 1 ]; then
  S=${KB_STATE:-kernelband-runs/held_out-smoke}
  SEEDS=1
  # one task a side: the fill's and the test benches'
  declare -A only=([train]="--tasks add_value" [test]="--tasks add_example")
  search=(-n 1 -q 1) run=(--interpreter --no-ncu)
else
  S=${KB_STATE:-kernelband-runs/held_out}
  declare -A only=([train]="" [test]="")
  # q = 1 leaves one evaluation in flight a run, and timing and ncu hold the GPU some 5 s of an evaluation's
  # 12.6 (docs/lab/held_out_plan.md): 4 runs a GPU keep it busy where 2 leave it idle most of the time
  search=(-n 10 -q 1) run=(--runs-per-gpu "${RUNS_PER_GPU:-4}")
fi
mkdir -p "$S"
log() { echo "$(date -u +%T) $*" | tee -a "$S/session.log"; }
unpack() {  # xz file -> database, by Python's lzma: the GPU machine's image may have no xz
  "$py" -c "import lzma, shutil, sys; shutil.copyfileobj(lzma.open(sys.argv[1]), open(sys.argv[2], 'wb'))" "$1" "$2"
}
state() { "$py" scripts/gpu/bench_state.py "$S/$1.db" "$2" "$3" "$4"; }  # part suite split knowledge -> "id status"
specs() {  # a lane's benches in order, as "suite split knowledge policies"
  local suite
  if [ "$1" = held ]; then
    for suite in ${SUITES//,/ }; do  # the fill on every suite's train tasks (the examples have none), then the tests
      [ -n "$FILL" ] && [ "$suite" != examples ] && echo "$suite train - $FILL"
    done
    for suite in ${SUITES//,/ }; do echo "$suite test - $POLICIES"; done
  elif [ -n "$COLD" ]; then
    for suite in ${SUITES//,/ }; do echo "$suite test off $COLD"; done
  fi
}
open_lane() {  # true while one of the lane's benches is not done
  local suite split knowledge policies id status
  while read -r suite split knowledge policies; do
    read -r id status <<< "$(state "$1" "$suite" "$split" "${knowledge/-/}")"
    [ "$status" = done ] || return 0
  done < <(specs "$1")
  return 1
}

if [ "${JOIN:-0}" = 1 ]; then  # on the CPU machine: the cold benches joined to held.db as benches of their own
  kept=${KEPT:-docs/results/held_out/${MODEL:-h200}}
  for part in held cold; do
    [ -f "$S/$part.db" ] || [ ! -f "$kept/$part.db.xz" ] || unpack "$kept/$part.db.xz" "$S/$part.db"
  done
  [ -f "$S/held.db" ] || { echo "error: no held.db in $S or $kept" >&2; exit 2; }
  cp "$S/held.db" "$S/all.db"
  while read -r suite split knowledge policies; do
    read -r id status <<< "$(state cold "$suite" "$split" off)"
    [ -n "$id" ] && "$py" -m kernelband merge "$S/cold.db" "$id" --db "$S/all.db"
  done < <(specs cold)
  "$py" -m kernelband runs --db "$S/all.db" | tail -n 5
  exit 0
fi

[ -z "${WAIT_FOR:-}" ] || while [ ! -f "$WAIT_FOR" ]; do sleep 10; done
"$py" -c "import libcst" 2> /dev/null || "$py" -m pip install --no-index --no-deps -q .wheels/*.whl
if [ "${SMOKE:-0}" = 1 ]; then
  n=1
else
  n=$(nvidia-smi -L 2>/dev/null | wc -l)
  [ "$n" -ge 1 ] || n=1
  model=$(nvidia-smi --query-gpu=name --format=csv,noheader 2>/dev/null | head -n 1 | grep -o 'H[0-9]\+')
  log "GPU model ${model:-unknown}, $n GPUs"
  kept=${KEPT:-docs/results/held_out/$(echo "${model:-unknown}" | tr 'A-Z' 'a-z')}
  for part in held cold; do
    [ -f "$S/$part.db" ] || [ ! -f "$kept/$part.db.xz" ] || unpack "$kept/$part.db.xz" "$S/$part.db"
  done
  [ -f ~/.cache/kernelband/calibration.json ] || "$py" -m kernelband calibrate > "$S/calibrate.log" 2>&1
fi
# The lanes' GPUs: cold is about a fifth of the GPU time (tools/bench_plan.py), so on four GPUs or more it takes
# the last one and held the others; on fewer it shares the last with held (the GPU lock's flock keeps two
# processes' timings apart). A lane that is done takes none: the other gets them all.
all=${GPUS:-$(seq -s, 0 $((n - 1)))}
last=${all##*,}
n=$(tr ',' '\n' <<< "$all" | wc -l)
declare -A gpus=([held]="$all" [cold]="$last")
if ! open_lane cold; then
  gpus[held]=$all
elif ! open_lane held; then
  gpus[cold]=$all
elif [ "$n" -ge 4 ]; then
  gpus[held]=${all%,*}
fi
[ "${SMOKE:-0}" = 1 ] && gpus=([held]="" [cold]="")  # the interpreter: no --gpus

bench() {  # part suite split knowledge policies: the bench begun or resumed on the lane's GPUs; true once done
  local part=$1 suite=$2 split=$3 knowledge=$4 policies=$5 id status name
  name=$part-$suite-$split
  read -r id status <<< "$(state "$part" "$suite" "$split" "$knowledge")"
  log "$name: $([ -n "$id" ] && echo "bench $id, $status" || echo "new bench")"
  local where=()
  [ -n "${gpus[$part]}" ] && where=(--gpus "${gpus[$part]}")
  if [ -n "$id" ]; then
    [ "$status" = done ] || "$py" -m kernelband bench --resume "$id" --db "$S/$part.db" "${where[@]}" "${run[@]}" \
      --json > "$S/bench-$name.json" 2> "$S/bench-$name.log"
  else
    # shellcheck disable=SC2086
    "$py" -m kernelband bench --suite "$suite" --split "$split" ${only[$split]} ${knowledge:+--knowledge $knowledge} \
      --policies "$policies" --seeds "$SEEDS" --proposer rewrite --db "$S/$part.db" "${where[@]}" "${search[@]}" \
      "${run[@]}" "${baselines[@]}" --json > "$S/bench-$name.json" 2> "$S/bench-$name.log"
  fi
  read -r id status <<< "$(state "$part" "$suite" "$split" "$knowledge")"
  log "$name: bench ${id:-none} ${status:-not begun}"
  [ "$status" = done ] || return 1
  COLUMNS=160 "$py" -m kernelband report "bench:$id" --db "$S/$part.db" --format text > "$S/report-$name.txt" \
    2>> "$S/bench-$name.log"
}
lane() {  # the lane's benches in turn: one that is not done ends the lane (the test bench needs the whole fill)
  local suite split knowledge policies
  while read -r suite split knowledge policies; do
    bench "$1" "$suite" "$split" "${knowledge/-/}" "$policies" || break
  done < <(specs "$1")
  touch "$S/$1.finished"
}
lane held &
lane cold &
wait
touch "$S/done"
log "done"
