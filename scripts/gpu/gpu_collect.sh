#!/usr/bin/env bash
# Return within about SECONDS: wait for scripts/gpu/gpu_session.sh to finish, but at most SECONDS less
# COLLECT_PACK_S (default 75), then copy what it has so far to $OUT (the sweep database as quality.db.xz, to
# copy over the committed one):
#   bash scripts/gpu/gpu_collect.sh 575
# The last COLLECT_PACK_S seconds are for the copy and its packing (xz -9e of a 41 MB database: 27 s on this
# project's CPU machine): run AE's last call waited 575 s and the device's 600 s limit cut the packing off,
# losing that call's database. The database is copied through SQLite's backup API, consistent mid-run.
# KB_MORE=DIR[:DIR...]: other scripts' state folders of this session, whose databases come back too (their
# names must differ from $S's) and whose logs come back as logs-DIRNAME.tar.gz; the wait is for $S alone.
set -u
S=${KB_STATE:-kernelband-runs/gpu}
wait_s=$(( ${1:-0} - ${COLLECT_PACK_S:-75} ))
end=$((SECONDS + (wait_s > 0 ? wait_s : 0)))
while [ $SECONDS -lt $end ] && [ ! -f "$S/done" ]; do sleep 5; done
mkdir -p "$OUT"
# the sweep's threads' stacks into its log (search_quality.py's SIGUSR1 handler: kernelband.stacks)
pkill -USR1 -f '^python3 benchmarks/search_quality.py' && sleep 1  # not `timeout`, which USR1 ends
cp ~/.cache/kernelband/calibration.json "$S/" 2>/dev/null
for path in "$S"/*.db $(for d in ${KB_MORE:+${KB_MORE//:/ }}; do echo "$d"/*.db; done); do
  db=$(basename "$path" .db)
  [ -f "$path" ] && python3 - "$path" "$OUT/$db.db" <<'PY'
import sqlite3, sys
src, dst = sqlite3.connect(sys.argv[1], timeout=60), sqlite3.connect(sys.argv[2])
src.backup(dst)
dst.close()
PY
done
# how steady the reference's timings were so far (tools/reference_drift.py), before zipping the copy: in
# the bench this session continues, where it knows it (the whole database's figures mixed every bench's)
bench=$(cat "$S/quality.bench" 2>/dev/null)
[ -f "$OUT/quality.db" ] && PYTHONPATH=src python3 tools/reference_drift.py "$OUT/quality.db" \
  ${bench:+--bench "$bench"} 2>/dev/null | head -n 1 | sed "s/^/${bench:+bench $bench: }/"
# xz, as committed (docs/results/bench.db.xz): near-identical candidate sources compress far better than gzip
for path in "$OUT"/*.db; do
  db=$(basename "$path" .db)
  [ -f "$OUT/$db.db" ] && python3 -c "import lzma, shutil, sys
shutil.copyfileobj(open(sys.argv[1], 'rb'), lzma.open(sys.argv[1] + '.xz', 'wb', preset=9 | lzma.PRESET_EXTREME))" \
    "$OUT/$db.db" && rm "$OUT/$db.db"
done
# the logs last, after the packing: run AG's grid wrote 3 rows during it, and they came back nowhere whole. The
# grid's rows also as grid.jsonl, for GRID_DONE in a later session if the database copy above lacks some.
tar czf "$OUT/logs.tar.gz" -C "$S" $(cd "$S" && ls ./*.log ./*.json ./*.md ./*.txt 2>/dev/null)
for d in ${KB_MORE:+${KB_MORE//:/ }}; do
  [ -d "$d" ] && tar czf "$OUT/logs-$(basename "$d").tar.gz" -C "$d" $(cd "$d" && ls ./*.log ./*.json ./*.txt 2>/dev/null)
  tail -n 5 "$d/session.log" 2>/dev/null
done
grep -h '^{"kind": "grid"' "$S/sweep.log" > "$OUT/grid.jsonl" 2>/dev/null || rm -f "$OUT/grid.jsonl"
[ -f "$S/done" ] && echo "session finished"
nvidia-smi --query-gpu=index,memory.used --format=csv,noheader 2>/dev/null
tail -n 25 "$S/session.log"
grep -h "^{\"kind\": \"job_done\|job_error" "$S/ab.log" "$S/sweep.log" 2>/dev/null | tail -n 5
grep -h "^{\"kind\": \"heartbeat" "$S/sweep.log" 2>/dev/null | tail -n 1 | cut -c1-1500
tail -n 3 "$S"/eval_throughput*.log "$S/gpu_tests.log" 2>/dev/null
