"""The HTML report: one self-contained page (inline CSS, no script, no network) and PNG plots beside it.

`write_report(data, out_dir)` writes `index.html`, `report.json` (the data it was made from) and the plots:

* `speedup.png`, `fast1.png` (a bench): geomean speedup and Fast@1 per iteration, one line per policy, current
  iteration and best so far side by side (the paper's Figures 1-4);
* `trajectory.png` (a run): its best so far and each iteration's best kernel, per iteration;
* `tasks.png` (a bench): each task's best speedup per policy (bars: mean over seeds; whiskers: min, max);
* `sol.png`: speed-of-light fractions (a bench: per task; a run: per shape, k0 against the best kernel);
* `pool.png`: one run's correct candidates, PCA of the z-normalised rho, coloured by cluster (Figure 5).

The lineage tree is a nested HTML list; the best kernels' diffs are escaped `<pre>` blocks.
"""

from __future__ import annotations

import html
import json
from pathlib import Path

from matplotlib.ticker import MaxNLocator

from kernelband.report import tables as tbl

CSS = """
body { font-family: system-ui, sans-serif; margin: 2em auto; max-width: 1200px; padding: 0 1em; color: #222; }
h1 { font-size: 1.5em; } h2 { font-size: 1.2em; margin-top: 2em; border-bottom: 1px solid #ccc; }
table { border-collapse: collapse; margin: 0.8em 0; font-size: 0.9em; }
th, td { border: 1px solid #ccc; padding: 0.25em 0.6em; }
th { background: #f2f2f2; } td.n { text-align: right; font-variant-numeric: tabular-nums; }
caption { text-align: left; font-weight: bold; padding: 0.3em 0; }
p.note, .meta { color: #555; font-size: 0.9em; }
img { max-width: 100%; border: 1px solid #eee; margin: 0.5em 0; }
pre { background: #f7f7f7; padding: 0.8em; overflow-x: auto; font-size: 0.85em; }
ul.tree, ul.tree ul { list-style: none; padding-left: 1.2em; border-left: 1px dotted #bbb; margin: 0; }
ul.tree { font-family: ui-monospace, monospace; font-size: 0.85em; } ul.tree li { margin: 0.15em 0; }
.ok { color: #1a7f37; } .bad { color: #b42318; } .path { font-weight: bold; background: #fff3c4; }
dl dt { font-weight: bold; } dl dd { margin: 0 0 0.4em 1.5em; }
"""

COLOURS = ["#1f77b4", "#d62728", "#2ca02c", "#ff7f0e", "#9467bd", "#8c564b", "#e377c2", "#7f7f7f", "#17becf"]


def esc(value) -> str:
    return html.escape(str(value), quote=True)


# -- plots ---------------------------------------------------------------------------------------------
def _figure(width: float, height: float, ncols: int = 1):
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    fig = Figure(figsize=(width, height), dpi=100, layout="constrained")
    FigureCanvasAgg(fig)  # Agg: no display, no pyplot state
    axes = fig.subplots(1, ncols, squeeze=False)[0]
    return fig, list(axes)


def _colour(data: dict, policy: str) -> str:
    return COLOURS[data["policies"].index(policy) % len(COLOURS)]


def _curves(data: dict, out: Path, key: str, name: str, ylabel: str) -> str | None:
    if not data["policies"]:
        return None
    fig, axes = _figure(11, 4, 2)
    for ax, which, title in zip(axes, ("current", "best"), ("current iteration", "best so far")):
        for p in data["policies"]:
            its = data["iterations"][p]
            xs = [it["t"] for it in its]
            ys = [it[which][key] for it in its]
            ax.plot(xs, [float("nan") if y is None else y for y in ys], marker="o", label=p, color=_colour(data, p))
        if key == "geomean":
            ax.axhline(1.0, color="#999", lw=0.8, ls="--")
        else:
            ax.set_ylim(-3, 103)
        ax.xaxis.set_major_locator(MaxNLocator(integer=True))
        ax.set_title(title)
        ax.set_xlabel("iteration")
        ax.set_ylabel(ylabel)
        ax.grid(alpha=0.3)
        ax.legend()
    fig.savefig(out / name)
    return name


def _bars(data: dict, groups: list[str], series: dict[str, list], title: str, value_label: str,
          lines: tuple[float, ...] = (1.0,), errors: dict | None = None, log: bool = False):
    """Grouped bars, one group per task or shape and one bar per series; horizontal when the groups are
    many, so that a suite of 30 tasks stays readable."""
    n, k = max(len(series), 1), len(groups)
    horizontal = k > 10
    if horizontal:
        fig, (ax,) = _figure(9, 1.5 + 0.22 * k * n)
    else:
        fig, (ax,) = _figure(min(14, max(8, 0.45 * k * n + 2)), 4.5)
    width = 0.8 / n
    for i, (name, values) in enumerate(series.items()):
        pos = [g + (i - (n - 1) / 2) * width for g in range(k)]
        vals = [float("nan") if v is None else v for v in values]
        err = None
        if errors and name in errors:
            err = [[max(0.0, v - lo) if lo is not None else 0 for v, lo in zip(vals, errors[name][0])],
                   [max(0.0, hi - v) if hi is not None else 0 for v, hi in zip(vals, errors[name][1])]]
        colour = _colour(data, name) if name in data["policies"] else None
        if horizontal:
            ax.barh(pos, vals, width, label=name, xerr=err, capsize=2, color=colour)
        else:
            ax.bar(pos, vals, width, label=name, yerr=err, capsize=2, color=colour)
    styles = ["--", ":"]
    for j, value in enumerate(lines):
        (ax.axvline if horizontal else ax.axhline)(value, color="#999" if j == 0 else "#c90", lw=0.8,
                                                    ls=styles[j % 2])
    if horizontal:
        ax.set_yticks(range(k))
        ax.set_yticklabels(groups, fontsize=8)
        ax.invert_yaxis()
        ax.set_xlabel(value_label)
        if log:
            ax.set_xscale("log")
    else:
        ax.set_xticks(range(k))
        ax.set_xticklabels(groups, rotation=45 if k > 4 else 0, ha="right" if k > 4 else "center", fontsize=8)
        ax.set_ylabel(value_label)
        if log:
            ax.set_yscale("log")
    ax.set_title(title, fontsize=10)
    ax.legend(fontsize=8)
    ax.grid(alpha=0.3, axis="x" if horizontal else "y")
    return fig


def _task_bars(data: dict, out: Path) -> str | None:
    means = data["task_means"]
    if not means or data["kind"] == "run":  # one task: the curves say it all
        return None
    tasks = sorted({m["task"] for m in means})
    series, errors = {}, {}
    for p in data["policies"]:
        rows = {m["task"]: m for m in means if m["policy"] == p}
        series[p] = [rows[t]["best_speedup"] if t in rows else None for t in tasks]
        errors[p] = ([rows[t]["min"] if t in rows else None for t in tasks],
                     [rows[t]["max"] if t in rows else None for t in tasks])
    values = [v for vs in series.values() for v in vs if v]
    log = bool(values) and max(values) / max(min(values), 1e-9) > 20
    fig = _bars(data, tasks, series, "best speedup per task (mean over seeds; whiskers: min-max)",
                "best speedup over k0", (1.0, data["fast_threshold"]), errors, log)
    fig.savefig(out / "tasks.png")
    return "tasks.png"


def _sol_bars(data: dict, out: Path) -> str | None:
    if data["kind"] == "run":
        rows = data["shape_sol"]
        if not rows:
            return None
        groups = [r["label"][:30] for r in rows]
        series = {"k0": [r["k0"] for r in rows], "best kernel": [r["best"] for r in rows]}
        title = f"speed-of-light fraction per search shape (run {data['focus_run']})"
    else:
        means = [m for m in data["task_means"] if m["sol_fraction"] is not None]
        if not means:
            return None
        groups = sorted({m["task"] for m in means})
        series = {}
        for p in data["policies"]:
            rows = {m["task"]: m["sol_fraction"] for m in means if m["policy"] == p}
            series[p] = [rows.get(t) for t in groups]
        title = "speed-of-light fraction of the best kernel per task (mean over seeds)"
    fig = _bars(data, groups, series, title, "bound time / kernel time")
    fig.savefig(out / "sol.png")
    return "sol.png"


def _pool(data: dict, out: Path) -> str | None:
    pool = data["pool"]
    if not pool or not pool["points"]:
        return None
    fig, (ax,) = _figure(6.5, 5)
    clusters = sorted({p["cluster"] for p in pool["points"] if p["cluster"] is not None}, key=str)
    for i, c in enumerate([*clusters, None]):
        pts = [p for p in pool["points"] if p["cluster"] == c]
        if not pts:
            continue
        ax.scatter([p["x"] for p in pts], [p["y"] for p in pts], s=[30 + 20 * min(p["speedup"] or 1, 5) for p in pts],
                   color="#aaa" if c is None else COLOURS[i % len(COLOURS)], alpha=0.8,
                   label="not clustered (yet)" if c is None else f"cluster {c}", edgecolors="k", linewidths=0.4)
    best = data["lineage"] and next((n["id"] for n in data["lineage"]["nodes"] if n["best"]), None)
    for p in pool["points"]:
        if p["candidate"] == 0 or p["candidate"] == best:
            ax.annotate("k0" if p["candidate"] == 0 else f"best #{p['candidate']}", (p["x"], p["y"]),
                        textcoords="offset points", xytext=(5, 5), fontsize=8)
    ev = pool["explained_variance"] + [0.0, 0.0]
    ax.set_xlabel(f"PC1 ({100 * ev[0]:.0f}% of variance)")
    ax.set_ylabel(f"PC2 ({100 * ev[1]:.0f}% of variance)")
    ax.set_title(f"candidate pool of run {pool['run_id']} ({pool['task']}, {pool['policy']})", fontsize=10)
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8)
    fig.savefig(out / "pool.png")
    return "pool.png"


def _trajectory(data: dict, out: Path) -> str | None:
    rows = data["trajectory"]
    if not rows:
        return None
    fig, (ax,) = _figure(8, 4)
    xs = [r["iteration"] for r in rows]
    ax.plot(xs, [r["best_speedup"] for r in rows], marker="o", label="best so far", color=COLOURS[0])
    ax.plot(xs, [float("nan") if r["iteration_speedup"] is None else r["iteration_speedup"] for r in rows],
            marker="x", ls=":", label="this iteration's best", color=COLOURS[1])
    ax.axhline(1.0, color="#999", lw=0.8, ls="--")
    ax.xaxis.set_major_locator(MaxNLocator(integer=True))
    ax.set_title(f"run {data['id']}: speedup over the starting kernel", fontsize=10)
    ax.set_xlabel("iteration")
    ax.set_ylabel("speedup over k0")
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8)
    fig.savefig(out / "trajectory.png")
    return "trajectory.png"


def figures(data: dict, out: Path) -> dict[str, str]:
    """Draws every plot that has data; returns {plot: file name}. One run gets its trajectory, not a bench's
    geomean and Fast@1 curves (over one task, a step between 0 and 100 %)."""
    bench = data["kind"] == "bench"
    made = {"speedup": bench and _curves(data, out, "geomean", "speedup.png", "geomean speedup over k0"),
            "fast1": bench and _curves(data, out, "fast1", "fast1.png",
                                       f"Fast@1 (% of tasks > {data['fast_threshold']}x)"),
            "trajectory": not bench and _trajectory(data, out),
            "tasks": _task_bars(data, out), "sol": _sol_bars(data, out), "pool": _pool(data, out)}
    return {k: v for k, v in made.items() if v}


# -- the page ------------------------------------------------------------------------------------------
def table_html(t: tbl.Table) -> str:
    head = "".join(f"<th>{esc(c)}</th>" for c in t.columns)
    body = []
    for row in t.rows:
        cells = []
        for text, value in row:
            if value is None:
                cells.append(f"<td>{esc(text)}</td>")
            else:
                cells.append(f'<td class="n" data-value="{value!r}">{esc(text)}</td>')
        body.append("<tr>" + "".join(cells) + "</tr>")
    note = f'<p class="note">{esc(t.note)}</p>' if t.note else ""
    return (f'<table id="{esc(t.id)}"><caption>{esc(t.title)}</caption><thead><tr>{head}</tr></thead>'
            f'<tbody>{"".join(body)}</tbody></table>{note}')


def lineage_html(lin: dict) -> str:
    children: dict[int | None, list[dict]] = {}
    for n in lin["nodes"]:
        children.setdefault(n["parent"], []).append(n)

    def item(n: dict) -> str:
        speed = f" {n['speedup']:.3f}x" if n["speedup"] is not None else ""
        what = "k0 (the starting kernel)" if n["id"] == 0 else f"#{n['id']} {n['strategy'] or '?'} (it {n['iteration']})"
        cls = "ok" if n["outcome"] == "ok" else "bad"
        mark = " path" if n["on_best_path"] else ""
        best = " &larr; best" if n["best"] else ""
        detail = f' title="{esc(n["detail"])}"' if n["detail"] else ""
        kids = children.get(n["id"], [])
        sub = "<ul>" + "".join(item(k) for k in kids) + "</ul>" if kids else ""
        return (f'<li><span class="{cls}{mark}"{detail}>{esc(what)}: {esc(n["outcome"])}{esc(speed)}</span>'
                f"{best}{sub}</li>")

    roots = children.get(None, [])
    return '<ul class="tree" id="lineage">' + "".join(item(r) for r in roots) + "</ul>"


def _img(figs: dict, key: str, alt: str) -> str:
    return f'<img src="{esc(figs[key])}" alt="{esc(alt)}">' if key in figs else ""


def render(data: dict, figs: dict[str, str]) -> str:
    tables = {t.id: t for t in tbl.build(data)}
    if data["kind"] == "bench":
        b = data["bench"]
        cfg = b["config"]
        title = f"KernelBand report: bench {data['id']} ({b['suite']})"
        meta = (f"status {b['status']}; policies {', '.join(map(str, cfg.get('policies', data['policies'])))}; "
                f"seeds {cfg.get('seeds', '?')}; iterations {cfg.get('iterations', '?')}; "
                f"proposer {cfg.get('proposer', '?')}; preset {cfg.get('preset', '?')}; "
                f"GPU {', '.join(data.get('devices') or ['?'])}")
    else:
        r = data["run"]
        title = f"KernelBand report: run {data['id']} ({r['task']}, {r['policy']})"
        meta = (f"status {r['status']}; proposer {r['proposer']}; seed {r['seed']}; device {r['device'] or '?'}; "
                f"iterations {r['config'].get('iterations', '?')}; preset {r['config'].get('preset', '?')}")
    parts = [f"<h1>{esc(title)}</h1>",
             f'<p class="meta">{esc(meta)}<br>database {esc(data["db"])}; made {esc(data["generated"])}; '
             f'the numbers are also in <a href="report.json">report.json</a></p>']
    parts += [f'<p class="bad">Warning: {esc(w)}.</p>' for w in data.get("warnings", [])]
    if not data["policies"]:
        parts.append('<p class="bad">No run here has a correctly evaluated starting kernel: nothing to report.</p>')

    if data["kind"] == "run":
        parts += ["<h2>The run</h2>", table_html(tables["tasks"]),
                  "<h2>Trajectory</h2>", _img(figs, "trajectory", "speedup per iteration"),
                  table_html(tables["trajectory"])]
        if "shapes" in tables:
            parts += ["<h2>Per shape, against the reference and torch</h2>", table_html(tables["shapes"])]
    else:
        parts += ["<h2>Summary</h2>", table_html(tables["summary"])]
        if "summary-common" in tables:
            parts.append(table_html(tables["summary-common"]))
        if "stats" in tables:
            parts += ["<h2>Statistics: intervals, anytime performance, paired tests</h2>", table_html(tables["stats"])]
            parts += [table_html(tables[k]) for k in ("stats-pairs", "stats-room", "stats-room-pairs") if k in tables]
        parts += ["<h2>Speedup and Fast@1 per iteration</h2>",
                  _img(figs, "speedup", "geomean speedup per iteration"), _img(figs, "fast1", "Fast@1 per iteration"),
                  table_html(tables["iter-current"]), table_html(tables["iter-best"]),
                  table_html(tables["iter-best-generated"]), table_html(tables["tokens"]),
                  "<h2>Held-out shapes</h2>", table_html(tables["held-out"]),
                  "<h2>Against torch and the speed of light</h2>", table_html(tables["baselines"]),
                  "<h2>Per task</h2>", _img(figs, "tasks", "best speedup per task"), table_html(tables["tasks"])]
    if "task-means" in tables:
        parts.append(table_html(tables["task-means"]))
    if "grid" in tables:
        parts += ["<h2>By hand: the launch-parameter grid</h2>", table_html(tables["grid"]),
                  table_html(tables["grid-tasks"])]
    parts += ["<h2>Speed of light</h2>", _img(figs, "sol", "speed-of-light fractions") or
              '<p class="note">No speed-of-light bounds were measured (the interpreter has none).</p>']
    if "excluded" in tables:
        parts += ["<h2>Left out</h2>", table_html(tables["excluded"])]
    llm_calls = [table_html(tables[k]) for k in ("llm-calls", "llm-outcomes") if k in tables]
    if llm_calls:
        parts += ["<h2>LLM calls</h2>", *llm_calls]

    if data["lineage"]:
        pool, focus = data["pool"], data["focus_run"]
        which = ("" if data["kind"] == "run" else
                 f" (run {focus}: the largest clustered pool of the bench; `kernelband report run:N` shows any run)")
        parts.append(f"<h2>Candidate pool and lineage{esc(which)}</h2>")
        parts.append(_img(figs, "pool", "candidate pool, PCA of rho, coloured by cluster"))
        if pool and pool["note"]:
            parts.append(f'<p class="note">{esc(pool["note"])}</p>')
        if pool and pool["features"]:
            parts.append(f'<p class="note">rho features: {esc(", ".join(pool["features"]))}; z-normalised over '
                         f"the pool, projected by PCA; clusters from the last iteration's policy statistics.</p>")
        parts.append(lineage_html(data["lineage"]))

    parts.append("<h2>Best kernels</h2>")
    for k in data["best_kernels"]:
        head = (f"{k['task']}: {k['policy']} seed {k['seed']} (run {k['run_id']}), candidate {k['candidate']}"
                f", {'-' if k['speedup'] is None else format(k['speedup'], '.3f')}x")
        if k["strategy"]:
            head += f", last strategy {k['strategy']}"
        if k["candidate"] == 0:
            parts.append(f"<p>{esc(head)}: no generated kernel beat the starting kernel.</p>")
            continue
        parts.append(f"<details open><summary>{esc(head)}</summary><pre>{esc(k['diff'])}</pre></details>")

    parts.append("<h2>Definitions</h2><dl>" + "".join(f"<dt>{esc(k)}</dt><dd>{esc(v)}</dd>"
                                                     for k, v in data["definitions"].items()) + "</dl>")
    return ('<!DOCTYPE html>\n<html lang="en"><head><meta charset="utf-8">'
            f'<meta name="viewport" content="width=device-width, initial-scale=1"><title>{esc(title)}</title>'
            f"<style>{CSS}</style></head><body>\n" + "\n".join(p for p in parts if p) + "\n</body></html>\n")


def write_report(data: dict, out_dir: Path) -> Path:
    """Writes index.html, report.json and the plots into out_dir; returns the page's path."""
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    (out_dir / "report.json").write_text(json.dumps(data, indent=1, allow_nan=False))
    figs = figures(data, out_dir)
    page = out_dir / "index.html"
    page.write_text(render(data, figs), encoding="utf-8")
    return page
