#!/usr/bin/env bash
# Evaluator speed of two source trees on one GPU machine, one after the other, in one call:
# this tree's src/ ("new") and an older commit's, unpacked under .data/old_src ("old").
#
#   here:        mkdir -p .data/old_src && git archive COMMIT src | tar x -C .data/old_src
#   GPU machine: bash scripts/gpu/ab_src.sh add_value,destindex_copy,kldiv_compute   (carry .wheels, .data)
#
# Writes $OUT/eval_new.json, $OUT/eval_old.json (eval_throughput.py --parts speed) and their logs.
set -u
export KERNELBAND_TRITONBENCH=.data/tritonbench_g_tasks.json PYTHONUNBUFFERED=1
python3 -m pip install --no-index --no-deps -q .wheels/*.whl
mkdir -p ~/.cache/kernelband && cp .data/calibration.json ~/.cache/kernelband/ 2>/dev/null
for v in new old; do
  if [ $v = new ]; then P=src; else P=.data/old_src/src; fi
  PYTHONPATH=$P timeout "${AB_TIMEOUT_S:-150}" python3 benchmarks/eval_throughput.py --parts speed --tasks "$1" \
    --out "$OUT/eval_$v.json" > "$OUT/log_$v.txt" 2>&1
  echo "== $v rc=$?"; grep -E "set-up|rror" "$OUT/log_$v.txt" | tail -8
done
