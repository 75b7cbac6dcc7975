"""The report in the terminal: the same tables as the HTML page, drawn with rich.

A wide table with few rows (the summary) is printed turned on its side, one column per policy, so that
it fits a terminal. Numeric columns are as narrow as their numbers and header words: numbers never wrap.
"""

from __future__ import annotations

from rich import box
from rich.console import Console
from rich.table import Table

from kernelband.report import tables as tbl
from kernelband.report.markdown import _on


def _turned(t: tbl.Table) -> tbl.Table:
    """Rows become columns: the first column's cells head the new columns."""
    rows = [[(col, None)] + [row[i] for row in t.rows] for i, col in enumerate(t.columns) if i > 0]
    return tbl.Table(t.id, t.title, [t.columns[0], *(row[0][0] for row in t.rows)], rows, t.note)


def _rich(t: tbl.Table) -> Table:
    table = Table(title=t.title, title_justify="left", caption=t.note or None, caption_justify="left",
                  box=box.SIMPLE_HEAD, pad_edge=False)
    for i, col in enumerate(t.columns):
        if t.numeric(i):  # as wide as its widest cell or header word; the header wraps, the numbers never do
            width = max([len(row[i][0]) for row in t.rows] + [len(word) for word in col.split()])
            table.add_column(col, justify="right", min_width=width, max_width=width)
        else:
            table.add_column(col, overflow="fold")
    for row in t.rows:
        table.add_row(*(text for text, _ in row))
    return table


def print_report(data: dict, console: Console) -> None:
    if data["kind"] == "bench":
        console.print(f"bench {data['id']} ({data['bench']['suite']}, {data['bench']['status']}){_on(data)} in "
                      f"{data['db']}", highlight=False)
    else:
        r = data["run"]
        console.print(f"run {data['id']}: {r['task']} ({r['policy']}, seed {r['seed']}, {r['status']}){_on(data)} "
                      f"in {data['db']}", highlight=False)
    for warning in data.get("warnings", []):
        console.print(f"[yellow]warning[/]: {warning}", highlight=False)
    if not data["policies"]:
        console.print("no run here has a correctly evaluated starting kernel: nothing to report")
    for t in tbl.build(data):
        if len(t.columns) > 8 and len(t.rows) <= 6:
            t = _turned(t)
        console.print(_rich(t))
    if data["kind"] == "run":  # one run: its lineage and the diff of the kernel handed back, here
        lines = tbl.lineage_lines(data["lineage"])
        if lines:
            console.print("lineage (parent, then its children indented):", highlight=False)
            for line in lines:
                console.print("  " + line, highlight=False, markup=False)
        for k in data["best_kernels"]:
            if k["candidate"] in (None, 0):
                console.print("no generated kernel beat the starting kernel", highlight=False)
            else:
                console.print(f"best kernel: candidate {k['candidate']} ({k['speedup']:.3f}x), its diff against "
                              "the starting kernel:", highlight=False)
                console.print(k["diff"], highlight=False, markup=False, soft_wrap=True)
        return
    for k in data["best_kernels"]:
        if k["candidate"] not in (None, 0):
            console.print(f"best for {k['task']}: {k['policy']} seed {k['seed']} run {k['run_id']} candidate "
                          f"{k['candidate']} ({k['speedup']:.3f}x); `kernelband report run:{k['run_id']} --out DIR`"
                          " shows its diff", highlight=False)
