#!/usr/bin/env bash
# The sweep of issue 49 ("The rewriter reads what a kernel computes"): the default policy (`kernelband`), the
# built-in rewriter, T = 10, q = 4, seed 0, on the 29 TritonBench-G level-1/2 tasks (l12.db) and the built-in
# examples (ex.db). Per task, its report has the speedups over the starting kernel, torch eager and
# torch.compile, and the SOL fractions. About 1,700 evaluations at about 8.6 s each on one GPU (Nsight Compute
# profiles included): some 245 GPU-minutes, so each session resumes from the databases the last one committed on
# its GPU model (docs/results/reach/MODEL/*.db.xz, e.g. h200/, unpacked where $S has none) and each bench picks up
# where it stopped. The benches come first; nothing else runs before them.
#
#   setsid nohup bash scripts/gpu/reach_sweep.sh > /dev/null 2>&1 < /dev/null &     # from a copy of the tree
#   KB_STATE=kernelband-runs/reach bash scripts/gpu/gpu_collect.sh 575                # in each later call
#   SIDE_NOW=1 ...: the sweep on all GPUs but the last, which scripts/gpu/side_checks.sh takes at once (2: two)
# Needs .wheels/ and .data/ carried with the call (scripts/gpu/carry.sh). SMOKE=1: tiny benches on the
# interpreter, the plumbing on a machine without a GPU.
set -u
cd "$(dirname "$0")/../.."
S=${KB_STATE:-kernelband-runs/reach}
mkdir -p "$S"
export PYTHONPATH=$PWD/src PYTHONUNBUFFERED=1
[ -f .data/tritonbench_g_tasks.json ] && export KERNELBAND_TRITONBENCH=$PWD/.data/tritonbench_g_tasks.json
py=${PYTHON:-python3}
log() { echo "$(date -u +%T) $*" >> "$S/session.log"; }
"$py" -c "import libcst" 2> /dev/null || "$py" -m pip install --no-index --no-deps -q .wheels/*.whl
if [ "${SMOKE:-0}" = 1 ]; then
  declare -A suite=([l12]="--suite examples --tasks vector_add" [ex]="--suite examples --tasks softmax")
  declare -A gpus=([l12]="" [ex]="")
  search=(-n 1 -q 1) run=(--interpreter --no-ncu)
else
  declare -A suite=([l12]="--suite tritonbench-g-l12" [ex]="--suite examples")
  # the examples on the last GPU, the 29 tasks on the others (both on one where there is only one)
  # SIDE_NOW=1 (or 2): the last GPU (or two) is left to scripts/gpu/side_checks.sh from the start
  n=$(( $(nvidia-smi -L 2>/dev/null | wc -l) - ${SIDE_NOW:-0} ))
  [ "$n" -ge 1 ] || n=1
  last=$((n - 1))
  declare -A gpus=([l12]="--gpus $(seq -s, 0 $((n > 1 ? n - 2 : 0)))" [ex]="--gpus $last")
  search=(-n 10 -q 4) run=(--runs-per-gpu 2)
  model=$(nvidia-smi --query-gpu=name --format=csv,noheader 2>/dev/null | head -n 1 | grep -o 'H[0-9]\+')
  log "GPU model ${model:-unknown}, $(nvidia-smi -L 2>/dev/null | wc -l) GPUs"
  # the last session's databases on this GPU model, to resume (a bench resumes only on its own model)
  kept=docs/results/reach/$(echo "${model:-unknown}" | tr 'A-Z' 'a-z')
  for part in l12 ex; do
    [ -f "$S/$part.db" ] || [ ! -f "$kept/$part.db.xz" ] || "$py" -c "import lzma
import shutil, sys; shutil.copyfileobj(lzma.open(sys.argv[1]), open(sys.argv[2], 'wb'))" \
      "$kept/$part.db.xz" "$S/$part.db"
  done
  [ -f ~/.cache/kernelband/calibration.json ] || "$py" -m kernelband calibrate > "$S/calibrate.log" 2>&1
fi
bench_of() {  # database -> "id status" of its bench, if any
  [ -f "$1" ] && "$py" - "$1" <<'PY'
import sqlite3, sys
for bench, status in sqlite3.connect(sys.argv[1]).execute("SELECT id, status FROM benches ORDER BY id"):
    print(bench, status)
    break
PY
}
# a lane whose bench is done leaves its GPU to the level-1/2 lane
if [ "${SMOKE:-0}" != 1 ] && [ "$(bench_of "$S/ex.db" | cut -d' ' -f2)" = done ]; then
  gpus[l12]="--gpus $(seq -s, 0 "$last")"
fi
lane() {  # one suite's bench on its GPUs, begun or resumed, then its report
  local part=$1 id status
  read -r id status <<< "$(bench_of "$S/$part.db")"
  log "$part: $([ -n "$id" ] && echo "bench $id, $status" || echo "new bench")"
  # shellcheck disable=SC2086
  if [ -n "$id" ]; then
    [ "$status" = done ] || "$py" -m kernelband bench --resume "$id" --db "$S/$part.db" ${gpus[$part]} "${run[@]}" \
      --json > "$S/bench-$part.json" 2> "$S/bench-$part.log"
  else
    "$py" -m kernelband bench ${suite[$part]} --policies kernelband --seeds 1 --proposer rewrite \
      --db "$S/$part.db" ${gpus[$part]} "${search[@]}" "${run[@]}" --json > "$S/bench-$part.json" 2> "$S/bench-$part.log"
  fi
  read -r id status <<< "$(bench_of "$S/$part.db")"
  log "$part: bench $id $status"
  if [ "$status" = done ]; then
    COLUMNS=160 "$py" -m kernelband report "bench:$id" --db "$S/$part.db" --format text > "$S/report-$part.txt" 2>> "$S/bench-$part.log"
    "$py" -m kernelband report "bench:$id" --db "$S/$part.db" --format markdown > "$S/report-$part.md" 2>> "$S/bench-$part.log"
  fi
  touch "$S/$part.finished"  # scripts/gpu/side_checks.sh waits for it to take the lane's GPU
}
lane l12 &
lane ex &
wait
touch "$S/done"
log "done"
