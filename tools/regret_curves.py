"""Cumulative regret against T for every policy on the synthetic bandit of tests/test_policies.py: the figure
and the table of docs/guide/search.md ("The policies on a synthetic bandit").

The environment is the test's own (`ClusterBandit`, imported from the test module, so that the figure and the
test cannot drift apart): 12 kernels in three groups with distinct runtime and counter profiles, three
strategies, each group with its own best strategy; a pull's reward is Gaussian (sd 0.1) around the
(group, strategy) mean, and children do not join the pool. The regret of a pull is the best mean over all
groups (0.3) minus the mean of the arm pulled, so even the best arm of a worse group costs regret. T counts
pulls (evaluations), so that q = 1 and q = 4 compare at the same budget; at q = 4 a policy picks 4 arms an
iteration (`bon` 3: one per strategy from the first kernel, the only parent it knows here).

Two layouts: `test`, the test's, where the group holding the best arm (mean 0.3) is kernels 0-3, the first
in the pool; and `last`, the same kernels with the groups' reward rows reversed, so that the best arm lies
with kernels 8-11. Every kernel starts equally fast, so a policy that ranks kernels by time and breaks ties by
id (`beam`, `greedy`, `coordinate`) never leaves kernel 0: the first layout rewards that by luck, the second
shows what it costs.

    python tools/regret_curves.py [--seeds 10] [--horizon 100] [--q 1 --q 4] [--png docs/guide/img/regret.png]

CPU only; about a minute per q on one core at the defaults.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import numpy as np

from kernelband.errors import run_script
from kernelband.policies.base import POLICIES
from kernelband.report.stats import interval

ROOT = Path(__file__).resolve().parents[1]
REPORT_AT = (10, 20, 40)


def environment():
    """The test module's bandit, policies and strategies."""
    sys.path.insert(0, str(ROOT / "tests"))
    try:
        import test_policies
    finally:
        sys.path.pop(0)
    return test_policies


def bandit(env, layout: str, seed: int):
    """The test's bandit, or with `last` its groups' reward rows reversed (the profiles stay with the kernels)."""
    if layout == "test":
        return env.ClusterBandit(seed)

    class BestLast(env.ClusterBandit):
        def mean(self, arm) -> float:
            return float(env.MEANS[2 - self.group[arm.candidate], env.NAMES.index(arm.strategy)])

    return BestLast(seed)


def regrets(env, policy, arms, pulls: int, q: int) -> list[float]:
    """The regret of each pull, `pulls` of them, q arms an iteration (fewer where the policy gives fewer; the
    run stops, as a search does, when it gives none)."""
    best, out = env.MEANS.max(), []
    while len(out) < pulls:
        picked = policy.select(arms.pool, env.STRATEGIES, min(q, pulls - len(out)), env.always)
        if not picked:
            break
        for arm in picked:
            policy.update(arm, *arms.pull(arm))
            out.append(best - arms.mean(arm))
    return out


def curves(env, name: str, seeds: int, horizon: int, q: int, layout: str) -> np.ndarray:
    """Cumulative regret after each pull, one row per seed (NaN after a run that stopped early)."""
    out = np.full((seeds, horizon), np.nan)
    for seed in range(seeds):
        regret = regrets(env, env.new_policy(name, seed), bandit(env, layout, seed), horizon, q)
        out[seed, :len(regret)] = np.cumsum(regret)
    return out


def cell(values: np.ndarray) -> str:
    if np.isnan(values).any():
        return f"stopped ({int(np.isnan(values).sum())} of {len(values)} seeds)"
    low, high = interval(list(values))
    return f"{values.mean():.2f} [{low:.2f}, {high:.2f}]"


LAYOUTS = {"test": "best arm with kernels 0-3 (the test's)", "last": "best arm with kernels 8-11"}


def plot(results: dict[tuple[str, int], dict[str, np.ndarray]], seeds: int, path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    layouts = list(dict.fromkeys(layout for layout, _ in results))
    qs = list(dict.fromkeys(q for _, q in results))
    fig, axes = plt.subplots(len(layouts), len(qs), figsize=(4.6 * len(qs), 3.2 * len(layouts)), squeeze=False)
    colours = dict(zip(POLICIES, plt.get_cmap("tab10").colors, strict=False))
    for (layout, q), by_policy in results.items():
        ax = axes[layouts.index(layout)][qs.index(q)]
        for name, rows in by_policy.items():
            t = np.arange(1, rows.shape[1] + 1)
            low, high = np.nanpercentile(rows, [10, 90], axis=0)
            ax.plot(t, np.nanmean(rows, axis=0), label=name, color=colours[name],
                    lw=1.8 if name.startswith("kernelband") else 1.0)
            ax.fill_between(t, low, high, color=colours[name], alpha=0.12, lw=0)
        ax.set_xlabel("T (pulls)", fontsize=8)
        ax.set_ylabel("cumulative regret", fontsize=8)
        ax.set_title(f"{LAYOUTS[layout]}, q = {q}", fontsize=8)
        ax.tick_params(labelsize=7)
        ax.grid(alpha=0.3)
    axes[0][0].legend(fontsize=7, frameon=False)
    fig.suptitle(f"Synthetic bandit: mean over {seeds} seeds, band 10-90 % of seeds", fontsize=9)
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=72)
    plt.close(fig)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seeds", type=int, default=10)
    ap.add_argument("--horizon", type=int, default=100, help="pulls per run (at least 40)")
    ap.add_argument("--q", type=int, action="append", help="arms per iteration (repeatable; default 1 and 4)")
    ap.add_argument("--layout", choices=LAYOUTS, action="append", help="repeatable; default both")
    ap.add_argument("--png", type=Path, help="write the figure here")
    args = ap.parse_args()
    if args.horizon < max(REPORT_AT) or args.seeds < 2:
        raise SystemExit(f"give --horizon {max(REPORT_AT)} or more and --seeds 2 or more")
    env = environment()
    results: dict[tuple[str, int], dict[str, np.ndarray]] = {}
    at = (*REPORT_AT, args.horizon)
    for layout in args.layout or list(LAYOUTS):
        for q in args.q or [1, 4]:
            started = time.monotonic()
            rows = results[layout, q] = {name: curves(env, name, args.seeds, args.horizon, q, layout)
                                         for name in POLICIES}
            print(f"\n{LAYOUTS[layout]}, q = {q}: cumulative regret after T pulls, mean [95 % bootstrap "
                  f"interval] over {args.seeds} seeds ({time.monotonic() - started:.0f} s)\n")
            print("| policy | " + " | ".join(f"T = {t}" for t in at) + " |")
            print("| --- |" + " --- |" * len(at))
            for name, curve in sorted(rows.items(), key=lambda kv: np.nan_to_num(kv[1][:, -1].mean(), nan=np.inf)):
                print(f"| `{name}` | " + " | ".join(cell(curve[:, t - 1]) for t in at) + " |")
    if args.png:
        plot(results, args.seeds, args.png)
        print(f"\nwrote {args.png} ({args.png.stat().st_size // 1024} KiB)")


if __name__ == "__main__":
    run_script(main)
