"""Two benches' runs of the same policy, compared on the same (task, seed): what knowledge carried across
kernels buys (`kernelband` with knowledge in one bench, `--knowledge off` in the other), or any other change
made between two benches. Prints, per bench, the geomean best speedup and Fast@1 with 95 % intervals, the area
under the best-so-far curve, and the paired Wilcoxon p-value (kernelband/report/stats.py).

    python tools/compare_benches.py held-out.db 2 3 [--policy kernelband]

CPU only: it reads the database, nothing runs.
"""

from __future__ import annotations

import argparse
import json
from dataclasses import replace

from kernelband.errors import UserError, run_script
from kernelband.report import stats
from kernelband.report.metrics import FAST, run_facts
from kernelband.store import Store


def compare(store: Store, benches: list[int], policy: str) -> dict:
    runs = []
    for bench in benches:
        facts = [run_facts(store, r) for r in store.runs(bench) if r.policy == policy]
        if not facts:
            raise UserError(f"bench {bench} in {store.path} has no {policy} runs")
        runs += [replace(s, policy=f"bench {bench}") for s in stats.samples(f for f in facts if f.usable)]
    return stats.compute(runs, FAST)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("db")
    ap.add_argument("benches", type=int, nargs=2)
    ap.add_argument("--policy", default="kernelband")
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args()
    result = compare(Store(args.db), args.benches, args.policy)
    if args.json:
        print(json.dumps(result))
        return
    print("| bench | runs | geomean best [95 %] | Fast@1 [95 %] | AUC | median evals to 95 % |")
    print("| --- | ---: | ---: | ---: | ---: | ---: |")
    for name, s in result["policies"].items():
        g, f = s["geomean"], s["fast1"]
        interval = f"[{g['low']:.3f}, {g['high']:.3f}]" if g["low"] is not None else ""
        fast = f"[{100 * f['low']:.0f}, {100 * f['high']:.0f}]" if f["low"] is not None else ""
        print(f"| {name} | {s['runs']} | {g['value']:.3f} {interval} | {100 * f['value']:.0f} % {fast} | "
              f"{s['auc']:.3f} | {s['evals_to_95_median']} |")
    for p in result["pairs"]:
        print(f"\n{p['a']} / {p['b']}: {p['n']} pairs, geomean ratio {p['ratio_geomean']}, {p['a']} better in "
              f"{p['a_wins']}, {p['b']} in {p['b_wins']}, Wilcoxon p = {p['p']}")


if __name__ == "__main__":
    run_script(main)
