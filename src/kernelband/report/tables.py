"""The report's tables as plain rows of cells, so that the HTML page and the terminal show the same ones.

A cell is `(text, value)`: the text as shown, the number it stands for (None for labels and blanks).
"""

from __future__ import annotations

from dataclasses import dataclass, field

from kernelband.report.definitions import MARGIN
from kernelband.report.metrics import n_tasks

Cell = tuple[str, float | None]


@dataclass
class Table:
    id: str
    title: str
    columns: list[str]
    rows: list[list[Cell]] = field(default_factory=list)
    note: str = ""

    def numeric(self, i: int) -> bool:
        """Column i holds numbers (right-aligned wherever it is drawn)."""
        return any(row[i][1] is not None for row in self.rows)


def num(value, spec: str = ".3f", suffix: str = "") -> Cell:
    return ("-", None) if value is None else (format(value, spec) + suffix, float(value))


def pct(value) -> Cell:
    return num(value, ".0f", "%")


def label(text) -> Cell:
    return ("-" if text is None else str(text), None)


def cell_pair(point: dict) -> Cell:
    """The paper's cell: `speedup / Fast@1 %`, with the number of tasks the geomean covers when some
    produced no correct kernel."""
    if point["geomean"] is None:
        text = f"- / {point['fast1']:.0f}%" if point["fast1"] is not None else "-"
    else:
        text = f"{point['geomean']:.3f} / {point['fast1']:.0f}%"
    if point["n_valid"] is not None and point["n_valid"] < point["n_tasks"]:
        text += f" ({point['n_valid']:g}/{point['n_tasks']:g})"
    return (text, point["geomean"])


def _summary(id: str, title: str, policies: list[str], summary: dict) -> Table:
    t = Table(id, title, ["policy", "tasks", "seeds", "geomean speedup", "Fast@1", "best speedup", "correct evals",
                          "correct tasks", "improved tasks", "faster tasks", "geomean, correct tasks", "median SOL",
                          "tokens per task", "evals per task"])
    for p in policies:
        s = summary[p]
        t.rows.append([label(p), num(len(s["tasks"]), "d"), num(s["n_seeds"], "d"), num(s["geomean_best"]),
                       pct(s["fast1_best"]), num(s["best_speedup"]), pct(s["correct_eval_pct"]),
                       pct(s["correct_task_pct"]), pct(s["improved_task_pct"]), pct(s["faster_task_pct"]),
                       num(s["geomean_correct"]), num(s["sol_median"], ".2f"), num(s["tokens_per_task"], ".0f"),
                       num(s["evaluations_per_task"], ".1f")])
    return t


def build(data: dict) -> list[Table]:
    """The tables of a bench; of one run, its own (run_tables): a summary over one task, per-iteration
    geomeans and Fast@1 over one task say less than the run itself."""
    if data["kind"] == "run":
        return run_tables(data) + llm_tables(data)
    policies = data["policies"]
    summary, iterations = data["summary"], data["iterations"]
    tables = []

    t = _summary("summary", "Summary per policy (best kernel of each task; means over seeds)", policies, summary)
    t.note = (f"Faster tasks: the kernel handed back is a generated one, re-measured on fresh inputs above "
              f"1 + max({MARGIN:g}, 2 x |noise floor - 1|) and above 1.0 on the held-out shapes; a run with no "
              f"re-measurement gets no verdict and does not count.")
    tables.append(t)
    common = data.get("common")
    if common:
        t = _summary("summary-common", f"Summary on the {n_tasks(len(common['tasks']))} that every policy "
                     "finished (like for like)", policies, common["summary"])
        t.note = "Tasks: " + ", ".join(common["tasks"]) + ". Unfinished runs are left out of this table."
        tables.append(t)

    tables += stats_tables(data.get("stats"))

    horizon = max((len(iterations[p]) for p in policies), default=0)
    for which, title in (("current", "Current iteration (paper Table 1): speedup / Fast@1"),
                         ("best", "Best so far, k0 included (paper Table 2): speedup / Fast@1"),
                         ("best_generated", "Best generated kernel so far, k0 not counted: speedup / Fast@1")):
        t = Table(f"iter-{which.replace('_', '-')}", title, ["iteration", *policies])
        for i in range(horizon):
            t.rows.append([label(i + 1)] + [cell_pair(iterations[p][i][which]) if i < len(iterations[p])
                                            else label(None) for p in policies])
        if which == "current":
            t.note = ("(a/b): the geomean covers a of b tasks; the others produced no correct kernel in that "
                      "iteration and count as not fast.")
        elif which == "best":
            t.note = "A task whose best is still the starting kernel counts 1.0."
        else:
            t.note = ("The paper's Table 2 may mean this one: it equals the current iteration at t=1. "
                      "(a/b) as for the current iteration.")
        tables.append(t)

    t = Table("tokens", "LLM tokens per iteration (mean per task; cumulative in brackets)", ["iteration", *policies])
    for i in range(horizon):
        row = [label(i + 1)]
        for p in policies:
            if i >= len(iterations[p]):
                row.append(label(None))
                continue
            it = iterations[p][i]
            row.append((f"{it['tokens']:.0f} ({it['tokens_cum']:.0f})", it["tokens"]))
        t.rows.append(row)
    tables.append(t)

    t = Table("held-out", "Held-out shapes (never seen during the search), reported apart",
              ["policy", "tasks with held-out", "held-out geomean", "held-out Fast@1", "failed on held-out",
               "search geomean", "search, re-measured (tasks)"])
    for p in policies:
        s = summary[p]
        t.rows.append([label(p), num(s["n_held_out"], "g"), num(s["held_out_geomean"]), pct(s["held_out_fast1"]),
                       num(s["held_out_failed"], "g"), num(s["geomean_best"]),
                       (f"{num(s.get('confirmed_geomean'))[0]} ({s.get('n_confirmed') or 0:g})",
                        s.get("confirmed_geomean"))])
    tables.append(t)

    t = Table("baselines", "The best kernel against torch (eager and torch.compile) and the speed of light",
              ["policy", "vs eager geomean", "tasks", "vs compile geomean", "tasks", "SOL median",
               "SOL median, >= 16 MB"])
    for p in policies:
        s = summary[p]
        t.rows.append([label(p), num(s.get("vs_eager_geomean")), num(s.get("n_vs_eager"), "g"),
                       num(s.get("vs_compile_geomean")), num(s.get("n_vs_compile"), "g"),
                       num(s.get("sol_median"), ".2f"), num(s.get("sol_median_large"), ".2f")])
    t.note = ("vs eager / vs compile: runtime-weighted speedup over the task's torch reference as written and "
              "through torch.compile(mode=\"max-autotune-no-cudagraphs\"), geometric mean over the tasks that "
              "have them (tasks: how many). SOL: the median over tasks of the best kernel's median fraction of "
              "max(bytes / bandwidth, FLOPs / peak, launch floor).")
    tables.append(t)

    tables.append(_tasks(data, "Per task and run (noise floor: k0 timed against itself)"))

    if any(m["n_seeds"] > 1 for m in data["task_means"]):
        t = Table("task-means", "Per task, averaged over seeds", ["task", "policy", "seeds", "mean best speedup",
                                                                  "min", "max", "mean held-out", "mean SOL"])
        for m in data["task_means"]:
            t.rows.append([label(m["task"]), label(m["policy"]), num(m["n_seeds"], "d"), num(m["best_speedup"]),
                           num(m["min"]), num(m["max"]), num(m["held_out"]), num(m["sol_fraction"], ".2f")])
        tables.append(t)

    tables += grid_tables(data.get("grid"))
    tables += llm_tables(data)

    return tables + _excluded(data)


def _tasks(data: dict, title: str) -> Table:
    t = Table("tasks", title, ["task", "policy", "seed", "run", "best speedup", "per call", "held-out",
                               "best outcome", "SOL", "SOL >= 16 MB", "vs eager", "vs compile", "evaluations",
                               "correct evals", "tokens", "noise floor", "status", "re-measured",
                               "re-measured per call", "faster", "handed back as"])
    for r in data["tasks"]:
        t.rows.append([label(r["task"]), label(r["policy"]), num(r["seed"], "d"), num(r["run_id"], "d"),
                       num(r["best_speedup"]), num(r.get("best_call_speedup")), num(r["held_out"]),
                       label(r["best_outcome"]),
                       num(r["sol_fraction"], ".2f"), num(r.get("sol_large"), ".2f"), num(r.get("vs_eager")),
                       num(r.get("vs_compile")), num(r["evaluations"], "d"), num(r["evals_ok"], "d"),
                       num(r["tokens"], "d"), num(r["k0_self_speedup"]), label(r["status"]),
                       num(r.get("confirmed")), num(r.get("confirmed_call")),
                       label({True: "yes", False: "no"}.get(r.get("faster"))), label(r.get("handed_back_as") or "")])
    t.note = ("Speedups by device time (the GPU kept ahead of the CPU), and per call: the wall time of back-to-back "
              "calls, host cost included, as an eager program pays it. A run made faster on one of them "
              "(`--objective`); faster: on that one.")
    return t


def _excluded(data: dict) -> list[Table]:
    if not data["excluded"]:
        return []
    t = Table("excluded", "Runs left out", ["run", "task", "policy", "seed", "reason"])
    for r in data["excluded"]:
        t.rows.append([num(r["run_id"], "d"), label(r["task"]), label(r["policy"]), num(r["seed"], "d"),
                       label(r["reason"])])
    return [t]


def run_tables(data: dict) -> list[Table]:
    """One run's trajectory and its kernel against the reference, shape by shape (report/run.py)."""
    t = Table("trajectory", f"Run {data['id']}, iteration by iteration", ["iteration", "best so far",
              "this iteration", "pool", "tokens", "seconds", "arms pulled: parent x strategy -> child outcome"])
    for r in data["trajectory"]:
        t.rows.append([num(r["iteration"], "d"), num(r["best_speedup"]), num(r["iteration_speedup"]),
                       num(r["pool_size"], "d"), num(r["tokens"], "d"), num(r["seconds"], ".1f"), label(r["arms"])])
    t.note = "Speedups over the starting kernel; this iteration: the best correct kernel it produced (- if none)."
    shapes = Table("shapes", "The kernel handed back against the reference, per shape",
                   ["shape", "held out", "reference ms", "kernel ms", "speedup", "reference call ms",
                    "kernel call ms", "per-call speedup", "k0 against itself", "torch eager ms", "torch.compile ms",
                    "SOL k0", "SOL kernel"])
    for r in data["shapes"]:
        correct = "" if r["correct"] is not False else " (wrong)"
        shapes.rows.append([label(r["label"] + correct), label("yes" if r["held_out"] else ""),
                            num(r["ref_ms"], ".4g"), num(r["best_ms"], ".4g"), num(r["speedup"]),
                            num(r.get("ref_call_ms"), ".4g"), num(r.get("best_call_ms"), ".4g"),
                            num(r.get("call_speedup")), num(r["k0_self"]), num(r.get("eager_ms"), ".4g"),
                            num(r.get("compiled_ms"), ".4g"), num(r["k0_sol"], ".2f"), num(r["best_sol"], ".2f")])
    shapes.note = ("The reference timed beside the kernel in the same evaluation (its final check on fresh inputs "
                   "where there is one); call ms: the wall time per call of back-to-back calls, host cost included; "
                   "k0 against itself: the starting kernel's own evaluation, the noise floor "
                   "of each shape; torch eager and torch.compile: the task's torch reference timed by the same "
                   "rules (- where it was not).")
    return [t] + ([shapes] if data["shapes"] else []) + [_tasks(data, "The run (noise floor: k0 timed against "
                                                                 "itself)")] + _excluded(data)


def lineage_lines(lin: dict | None) -> list[str]:
    """The lineage tree as indented lines (the terminal and Markdown; the page draws it as a nested list)."""
    if not lin:
        return []
    children: dict[int | None, list[dict]] = {}
    for n in lin["nodes"]:
        children.setdefault(n["parent"], []).append(n)
    lines: list[str] = []

    def walk(n: dict, depth: int) -> None:
        what = "k0" if n["id"] == 0 else f"#{n['id']} {n['strategy'] or '?'} (iteration {n['iteration']})"
        speed = f" {n['speedup']:.3f}x" if n["speedup"] is not None else ""
        lines.append(f"{'  ' * depth}{what}: {n['outcome']}{speed}" + (" <- best" if n["best"] else ""))
        for kid in children.get(n["id"], []):
            walk(kid, depth + 1)

    for root in children.get(None, []):
        walk(root, 0)
    return lines


def _interval(point: dict, spec: str = ".3f", scale: float = 1.0, suffix: str = "") -> Cell:
    """`value [low, high]`; the value alone where there is no interval (one run)."""
    if point["value"] is None:
        return label(None)
    text = format(point["value"] * scale, spec) + suffix
    if point["low"] is not None:
        text += f" [{format(point['low'] * scale, spec)}, {format(point['high'] * scale, spec)}]"
    return (text, point["value"])


def stats_tables(stats: dict | None) -> list[Table]:
    """Intervals, anytime performance and paired tests (report/stats.py); none for a single run."""
    if not stats or not stats["policies"]:
        return []
    t = Table("stats", "Per policy over (task, seed) runs, with 95 % bootstrap intervals",
              ["policy", "runs", "tasks", "seeds", "geomean best [95 %]", "Fast@1 [95 %]", "AUC best so far",
               "median evals to 95 %", "reached 95 %"])
    for p, s in stats["policies"].items():
        t.rows.append([label(p), num(s["runs"], "d"), num(s["tasks"], "d"), num(s["seeds"], "d"),
                       _interval(s["geomean"]), _interval(s["fast1"], ".0f", 100, "%"), num(s["auc"]),
                       num(s["evals_to_95_median"], "g"), num(s["reached_95"], "d")])
    t.note = (f"Intervals: percentile bootstrap over the (task, seed) runs. AUC: the geometric mean best speedup so "
              f"far over evaluations 1..{stats['horizon']} and the runs. Evals to 95 %: evaluations until a run's best reached 95 % of "
              f"the best speedup any run found for its task (- where half the runs never did).")
    pairs = _pairs_table("stats-pairs", "Paired comparisons on the same (task, seed)", stats["pairs"])
    out = [t, pairs] if stats["pairs"] else [t]
    room = stats.get("room")
    tasks = max((s["tasks"] for s in stats["policies"].values()), default=0)
    if room and 0 < room["tasks"] < tasks:  # only where some tasks have none: else the tables above say it all
        name = f"the {room['tasks']} of {tasks} tasks where the best of all runs reaches {room['min']:g}x"
        r = Table("stats-room", f"Per policy over {name}", ["policy", "runs", "geomean best [95 %]"])
        r.rows = [[label(p), num(g["n"], "d"), _interval(g)] for p, g in room["geomean"].items()]
        r.note = ("Tasks where no run of any policy finds that much end at about 1.0 for every policy and pull "
                  "the means over all tasks together; the subset is the same for every policy.")
        out.append(r)
        if room["pairs"]:
            out.append(_pairs_table("stats-room-pairs", f"Paired comparisons over {name}", room["pairs"]))
    return out


def _pairs_table(key: str, title: str, pairs: list[dict]) -> Table:
    t = Table(key, title, ["policy a", "policy b", "pairs", "geomean a/b", "a better", "b better", "Wilcoxon p"])
    for c in pairs:
        t.rows.append([label(c["a"]), label(c["b"]), num(c["n"], "d"), num(c["ratio_geomean"]),
                       num(c["a_wins"], "d"), num(c["b_wins"], "d"), num(c["p"], ".3g")])
    t.note = ("Wilcoxon signed-rank test, two-sided, on the log ratio of the best speedups; p near 1: no "
              "evidence either way; a small p with few pairs is still weak.")
    return t


def llm_tables(data: dict) -> list[Table]:
    """A run's LLM calls one by one; a bench's counted by outcome per run. None where no call was made."""
    tables = []
    if data.get("llm_calls"):
        t = Table("llm-calls", "LLM calls", ["iteration", "strategy", "outcome", "latency s", "tokens in",
                                             "tokens out", "attempts", "error"])
        for c in data["llm_calls"]:
            t.rows.append([num(c["iteration"], "d"), label(c["strategy"]), label(c["outcome"]),
                           num(c["latency_s"], ".1f"), num(c["tokens_in"], "d"), num(c["tokens_out"], "d"),
                           num(c["attempts"], "d"), label(c["error"][:120] or None)])
        t.note = "attempts: HTTP requests, retries included. Only calls with outcome ok gave a kernel to evaluate."
        tables.append(t)
    if data.get("llm_outcomes"):
        t = Table("llm-outcomes", "LLM calls per run, by outcome", ["run", "task", "policy", "seed", "calls",
                                                                    "outcomes", "tokens", "median latency s"])
        for r in data["llm_outcomes"]:
            counts = ", ".join(f"{n} {o}" for o, n in sorted(r["outcomes"].items(), key=lambda x: -x[1]))
            t.rows.append([num(r["run_id"], "d"), label(r["task"]), label(r["policy"]), num(r["seed"], "d"),
                           num(r["calls"], "d"), label(counts), num(r["tokens"], "d"),
                           num(r["median_latency_s"], ".1f")])
        tables.append(t)
    return tables


def grid_tables(grid: dict | None) -> list[Table]:
    """The exhaustive grid (what a user would do by hand) beside the policies on the same tasks, and per task."""
    if not grid:
        return []
    t = Table("grid", f"By hand: the exhaustive launch-parameter grid against the policies, on the "
              f"{n_tasks(len(grid['tasks']))} the grid covers",
              ["method", "tasks", "geomean best", "Fast@1", "best speedup", "faster tasks", "held-out geomean",
               "re-measured geomean", "evals per task"])
    for name, s in [("grid (by hand)", grid["summary"]), *grid["policies"].items()]:
        t.rows.append([label(name), num(s["tasks"], "d"), num(s["geomean_best"]), pct(s["fast1"]),
                       num(s["best_speedup"]), pct(s["faster_pct"]), num(s["held_out_geomean"]),
                       num(s["confirmed_geomean"]), num(s["evaluations_per_task"], ".1f")])
    t.note = ("The grid: every block size, num_warps and num_stages value the rewriter offers for the starting "
              "kernel, one parameter at a time (at most 12), its 3 fastest re-measured on fresh inputs and on the "
              "held-out shapes, judged by the runs' \"faster\" rule. Policies that have not finished every grid "
              "task are left out; seeds are averaged per task.")
    per_task = Table("grid-tasks", "The grid per task", ["task", "variants", "evaluated anew", "best searched",
                                                         "handed back", "re-measured", "held-out", "noise floor",
                                                         "faster"])
    for r in grid["rows"]:
        back = "k0" if r.get("handed_back") is None else f"variant {r['handed_back']}"
        per_task.rows.append([label(r["task"]), num(r.get("variants"), "d"), num(r.get("evaluations_made"), "d"),
                              num(r.get("best_speedup")), label(back), num(r.get("confirmed")),
                              num(r.get("held_out")), num(r.get("noise_floor")),
                              label("yes" if r.get("faster") else "no")])
    return [t, per_task]
