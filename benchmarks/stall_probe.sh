#!/usr/bin/env bash
# A GPU session's evaluator parts that may stall: run them, and if a part's line has not come within
# STALL_S seconds of the one before (or of the start, for the first), write who holds the GPU lock and every
# thread's stack (eval_throughput's SIGUSR1), the GPU's memory and the busiest processes to $OUT, then stop.
#   STALL_S=150 bash benchmarks/stall_probe.sh pool-unwarmed@8,pool@8 add_value,softmax_triton1,...
# (the first part's limit also covers the references' set-up: FIRST_S, default 300)
set -u
parts=$1 tasks=$2
export KERNELBAND_TRITONBENCH=${KERNELBAND_TRITONBENCH:-.data/tritonbench_g_tasks.json} PYTHONPATH=src PYTHONUNBUFFERED=1
python3 -m pip install --no-index --no-deps -q .wheels/*.whl 2>/dev/null
log=$OUT/stall_probe.log
python3 benchmarks/eval_throughput.py --parts "$parts" --tasks "$tasks" --park-profilers \
  --out "$OUT/stall_probe.json" > "$log" 2>&1 &
pid=$!
IFS=, read -r -a want <<< "$parts"
i=0 since=$SECONDS limit=${FIRST_S:-300}
while kill -0 $pid 2>/dev/null && [ $i -lt ${#want[@]} ]; do
  sleep 2
  if grep -q "^${want[$i]}: " "$log"; then
    echo "$(date -u +%T) ${want[$i]} done after $((SECONDS - since)) s"; i=$((i + 1)) since=$SECONDS limit=${STALL_S:-150}
  elif [ $((SECONDS - since)) -gt "$limit" ]; then
    echo "$(date -u +%T) ${want[$i]}: no result in $limit s: stacks to $log"
    kill -USR1 $pid; sleep 3
    nvidia-smi --query-gpu=index,memory.used,utilization.gpu --format=csv,noheader
    ps -eo pid,ppid,pcpu,times,etimes,rss,args --sort=-pcpu | head -25 | cut -c1-200 > "$OUT/stall_ps.txt"
    break
  fi
done
kill $pid 2>/dev/null; sleep 2; pkill -9 -f ncu; pkill -9 -f kernelband.worker
grep -E "^(pool|speed)[^ ]*: " "$log" | cut -c1-400
grep -E "^gpu lock|^gpu memory|^activity" "$log" | cut -c1-3000
