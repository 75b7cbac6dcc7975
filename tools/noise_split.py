"""Where the timing noise of the repeat part comes from (no GPU needed):

    python3 tools/noise_split.py eval_throughput.json eval_throughput-1.json ...

For each (task, preset) of `eval_throughput.py --parts repeat`, its 5 evaluations of the starting kernel
against itself, from the per-shape times each kept (`shapes_ms`): the log-ratio ref/cand of shape i in
evaluation e splits into the evaluation's mean over its shapes and the shape's residual. Printed:

- `CV(speedup)`: as the repeat part reports it (runtime-weighted);
- `between`: the standard deviation of the evaluations' means (what moves every shape of an evaluation
  together: a worker process, a placement, a clock);
- `expected`: what `between` would be if each shape's error were independent, the residuals' standard
  deviation over the square root of the number of shapes;
- `within`: the residuals' standard deviation (a shape's own error).

`between` well above `expected` says the noise is per evaluation, which more iterations of each shape cannot
remove; `between` near `expected` says it is per shape, which they can (BENCHMARKS.md, run AG).
"""

from __future__ import annotations

import json
import math
import statistics
import sys
from pathlib import Path

from kernelband.errors import UserError, run_script


def split(shapes_ms: list[list[list[float]]]) -> dict | None:
    """{"between", "expected", "within", "shapes", "evaluations"} from [[ref ms...], [cand ms...]] per evaluation;
    None with fewer than 2 evaluations or shapes."""
    logs = [[math.log(r / c) for r, c in zip(ref, cand) if r > 0 and c > 0] for ref, cand in shapes_ms]
    logs = [row for row in logs if row]
    if len(logs) < 2 or min(len(row) for row in logs) < 2:
        return None
    means = [statistics.fmean(row) for row in logs]
    residuals = [x - m for row, m in zip(logs, means) for x in row]
    shapes = statistics.median(len(row) for row in logs)
    within = math.sqrt(sum(r * r for r in residuals) / max(1, len(residuals) - len(logs)))
    return {"between": statistics.stdev(means), "expected": within / math.sqrt(shapes), "within": within,
            "shapes": shapes, "evaluations": len(logs)}


def main() -> None:
    if len(sys.argv) < 2:
        raise UserError("usage: noise_split.py EVAL_THROUGHPUT_JSON [...]")
    rows = []
    for name in sys.argv[1:]:
        path = Path(name)
        if not path.is_file():
            raise UserError(f"no file at {path}")
        try:
            rows += json.loads(path.read_text()).get("repeat", [])
        except json.JSONDecodeError as exc:
            raise UserError(f"{path} is not JSON ({exc.msg})") from None
    print("| task | preset | CV(speedup) | between | expected if per shape | within (a shape) | shapes | "
          "s each |")
    print("| --- | --- | --- | --- | --- | --- | --- | --- |")
    for row in sorted(rows, key=lambda r: (r["task"], r["preset"])):
        parts = split(row.get("shapes_ms") or [])
        cv = row.get("cv_speedup")
        cells = ([f"{100 * parts[k]:.2f} %" for k in ("between", "expected", "within")] + [f"{parts['shapes']:g}"]
                 if parts else ["-"] * 4)
        print(f"| {row['task']} | `{row['preset']}` | {'-' if cv is None else f'{100 * cv:.2f} %'} | "
              + " | ".join(cells) + f" | {row.get('seconds_each', 0):.1f} |")


if __name__ == "__main__":
    run_script(main)
