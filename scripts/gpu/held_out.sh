#!/usr/bin/env bash
# The held-out comparison of the policies (BENCHMARKS.md's test-task table): the train tasks of the fixed split
# (kernelband/tasks/split.py) run first and fill the knowledge store, then the test tasks are benched with the
# knowledge carried, then `kernelband` again on the test tasks without it (--knowledge off). All three benches
# go into one run database, so that `kernelband report bench:N --db DB` reproduces each table.
#
#   bash scripts/gpu/held_out.sh                 # on the GPU machine, after scripts/gpu/carry.sh
#   DB=... SEEDS=5 POLICIES=kernelband,kernelband-masked,beam,random,coordinate bash scripts/gpu/held_out.sh
#
# A bench that stops (time, a signal) resumes with `kernelband bench --resume N --db DB`; its id is printed.
set -euo pipefail
cd "$(dirname "$0")/../.."
DB=${DB:-kernelband-runs/held-out.db}
SEEDS=${SEEDS:-5}
POLICIES=${POLICIES:-kernelband,kernelband-masked,beam,random}
ITERATIONS=${ITERATIONS:-10}
Q=${Q:-4}
common=(--suite tritonbench-g-l12 --seeds "$SEEDS" -n "$ITERATIONS" -q "$Q" --proposer rewrite --db "$DB" --json)
bench_id() { python -c "import json, sys; print(json.load(sys.stdin)['bench_id'])"; }

train=$(kernelband bench "${common[@]}" --split train --policies "$POLICIES" | bench_id)
echo "train bench $train (fills the knowledge store)"
test=$(kernelband bench "${common[@]}" --split test --policies "$POLICIES" | bench_id)
echo "test bench $test (knowledge carried from the train tasks)"
cold=$(kernelband bench "${common[@]}" --split test --policies kernelband --knowledge off | bench_id)
echo "test bench $cold (kernelband without knowledge)"
kernelband knowledge --db "$DB"
kernelband report "bench:$test" --db "$DB" --format markdown > "$(dirname "$DB")/held-out-test.md"
kernelband report "bench:$cold" --db "$DB" --format markdown > "$(dirname "$DB")/held-out-cold.md"
echo "tables: $(dirname "$DB")/held-out-test.md and held-out-cold.md"
