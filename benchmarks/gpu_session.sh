#!/usr/bin/env bash
# One GPU-machine call: the search-quality sweep on GPUs 0..N-2, and the evaluator's repeatability, the
# peers' protocol and the GPU fault tests on the last GPU, side by side. Results land in $OUT.
#   bash benchmarks/gpu_session.sh [BENCH_ID_TO_RESUME]
set -u
export KERNELBAND_TRITONBENCH=.data/tritonbench_g_tasks.json PYTHONPATH=src
python3 -m pip install --no-index --no-deps -q .wheels/*.whl 2>&1 | tail -1
python3 -c "import libcst, sklearn; print('libcst', libcst.__file__ is not None)"
nvidia-smi --query-gpu=index,name,driver_version --format=csv,noheader
N=$(nvidia-smi -L | wc -l)
LAST=$((N - 1))
SEARCH=$(seq -s, 0 $((N - 2)))
mkdir -p kernelband-runs
RESUME=${1:+--bench-id $1}
(
  export CUDA_VISIBLE_DEVICES=$LAST
  if [ -z "${1:-}" ]; then
    timeout 300 python3 benchmarks/eval_throughput.py --parts repeat --repeat-tasks add_value,softmax_triton1 \
      --out "$OUT/eval_repeat.json" > "$OUT/repeat.log" 2>&1
    timeout 150 python3 -m pytest -m gpu tests/test_hostile.py -q -p no:cacheprovider > "$OUT/gpu_tests.log" 2>&1
  else
    timeout 200 python3 benchmarks/eval_throughput.py --parts peers \
      --peer-tasks add_value,softmax_triton1,rmsnorm_triton,kldiv_compute,cosine_compute \
      --out "$OUT/eval_peers.json" > "$OUT/peers.log" 2>&1
    timeout 200 python3 -m pytest -m gpu tests/test_hostile.py -q -p no:cacheprovider > "$OUT/gpu_tests.log" 2>&1
  fi
) &
CUDA_VISIBLE_DEVICES=$SEARCH timeout 560 python3 benchmarks/search_quality.py --parts overhead,bench \
  --db kernelband-runs/quality.db --out "$OUT/quality.json" --budget-s ${BUDGET_S:-400} $RESUME > "$OUT/bench.log" 2>&1
wait
cp kernelband-runs/quality.db "$OUT/quality.db"
tail -5 "$OUT/bench.log"; tail -8 "$OUT/repeat.log" 2>/dev/null; tail -4 "$OUT/gpu_tests.log" 2>/dev/null
tail -8 "$OUT/peers.log" 2>/dev/null
