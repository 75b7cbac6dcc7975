#!/usr/bin/env bash
# The GPU measurements of the issues beside issue 49's sweep, on the last GPU (from the start with SIDE_NOW=1,
# else once scripts/gpu/reach_sweep.sh has finished the examples' lane there; the 29 tasks run on the other GPUs,
# each under its own timing lock), in this order: the host cost of a hand-back per call (of hand-backs made for
# it), split_rows' variants on the GPU (benchmarks/split_rows_gpu.py), triton_mul2's, the fp16 matmul's and
# add_example's searches once more at this tree (mul2_again.db, matmul_hints.db, add_again.db), the cost of
# capturing a model's kernels, the capture's GPU test, the online reductions against torch, and the re-spelled
# kernels' variants run on the GPU (block pointers included).
# Each writes NAME.json, its table in NAME.log and its errors in NAME.err under $S.
#
#   setsid nohup bash scripts/gpu/side_checks.sh > /dev/null 2>&1 < /dev/null &   # from the same copy as the sweep
#   SKIP=online_softmax,respellings_gpu setsid nohup bash scripts/gpu/side_checks.sh ...  # those done already
set -u
cd "$(dirname "$0")/../.."
S=${KB_STATE:-kernelband-runs/reach}
mkdir -p "$S"
export PYTHONPATH=$PWD/src PYTHONUNBUFFERED=1
[ -f .data/tritonbench_g_tasks.json ] && export KERNELBAND_TRITONBENCH=$PWD/.data/tritonbench_g_tasks.json
py=${PYTHON:-python3}
log() { echo "$(date -u +%T) side: $*" >> "$S/session.log"; }
# SIDE_NOW=1 (or 2): the sweep left the last GPU (or two) free (scripts/gpu/reach_sweep.sh with the same), so no
# wait; with two, the matmul's search runs on the second beside the other steps
side=${SIDE_NOW:-0}
[ "$side" -ge 1 ] || while [ ! -f "$S/ex.finished" ]; do sleep 10; done
# SIDE_WAIT=FILE: begin once FILE exists (after.done: once the ten-process self-evaluation leaves the GPUs quiet)
[ -z "${SIDE_WAIT:-}" ] || while [ ! -f "$SIDE_WAIT" ]; do sleep 10; done
n=$(nvidia-smi -L 2>/dev/null | wc -l)
export CUDA_VISIBLE_DEVICES=$(( n > 0 ? n - 1 : 0 ))
step() {  # name, seconds, command...; a name in $SKIP (comma-separated) was measured in an earlier session
  local name=$1 limit=$2
  shift 2
  case ",${SKIP:-}," in *",$name,"*) log "$name skipped"; return ;; esac
  log "$name begins"
  timeout "$limit" "$@" > "$S/$name.log" 2> "$S/$name.err"
  log "$name exit $?"
}
# triton_mul2 searched once more (zero_fill drops its host zero fill), then the fp16 matmul at this tree (its tile
# rewrites carry divisibility hints). A matmul search outlasts what one session leaves it (about 40 s an
# evaluation), so its bench resumes from the database a session committed (docs/results/reach/MODEL/NAME.db.xz).
resumed() {  # name: the committed database unpacked into $S, where there is one and $S has none
  local kept
  kept=docs/results/reach/$(nvidia-smi --query-gpu=name --format=csv,noheader 2>/dev/null | head -n 1 \
    | grep -o 'H[0-9]\+' | tr 'A-Z' 'a-z')/$1.db.xz
  [ -f "$S/$1.db" ] || [ ! -f "$kept" ] || "$py" -c "import lzma
import shutil, sys; shutil.copyfileobj(lzma.open(sys.argv[1]), open(sys.argv[2], 'wb'))" "$kept" "$S/$1.db"
  [ -f "$S/$1.db" ] && "$py" -c "import sqlite3, sys
print(sqlite3.connect(sys.argv[1]).execute('SELECT min(id) FROM benches').fetchone()[0] or '')" "$S/$1.db"
}
search() {  # name, seconds, suite, task: its bench begun, or resumed where one was committed
  local name=$1 limit=$2 id
  id=$(resumed "$name")
  if [ -n "$id" ]; then
    step "$name" "$limit" "$py" -m kernelband bench --resume "$id" --db "$S/$name.db" --json
  else
    step "$name" "$limit" "$py" -m kernelband bench --suite "$3" --tasks "$4" --policies kernelband --seeds 1 \
      --proposer rewrite -n 10 -q 4 --db "$S/$name.db" --json
  fi
}
matmul() {
  search mul2_again 600 tritonbench-g-l12 triton_mul2
  search matmul_hints 1800 examples matmul
}
[ "$side" -ge 2 ] && [ "$n" -ge 2 ] && { CUDA_VISIBLE_DEVICES=$((n - 2)) matmul & }
# its own hand-backs (greedy, one iteration an example): the sweep's earlier runs left their best.py files on
# machines long gone, and their databases predate the column that keeps the module
step call_cost 1200 "$py" benchmarks/call_cost.py --make --db "$S/call_cost.db" --out "$S/call_cost.json"
step split_rows_gpu 780 "$py" benchmarks/split_rows_gpu.py --out "$S/split_rows_gpu.json"
{ [ "$side" -ge 2 ] && [ "$n" -ge 2 ]; } || matmul
# add_example once more: its sweep run (0.77x torch.compile) kept the host's zero fill, which every rewrite's
# variant drops since a84ae39 (`zero_fill.dropping_fills`)
search add_again 900 tritonbench-g-l12 add_example
step capture_overhead 600 "$py" benchmarks/capture_overhead.py --repeats 5 --steps 30 --batch 8 --scale 32 \
  --dim 1024 --vocab 16384 --eval --out "$S/capture_overhead.json"
step capture_tests 300 "$py" -m pytest -p no:cacheprovider -o addopts= -m gpu tests/test_capture.py -q
step online_softmax 300 "$py" benchmarks/online_softmax.py --out "$S/online_softmax.json"
step respellings_gpu 240 "$py" -m pytest -p no:cacheprovider -o addopts= -m gpu tests/test_respellings.py -q
wait
touch "$S/side.done"
log done
