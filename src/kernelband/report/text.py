"""The report in the terminal: the same tables as the HTML page, drawn with rich."""

from __future__ import annotations

from rich.console import Console
from rich.table import Table

from kernelband.report import tables as tbl


def print_report(data: dict, console: Console) -> None:
    if data["kind"] == "bench":
        console.print(f"bench {data['id']} ({data['bench']['suite']}, {data['bench']['status']}) in {data['db']}",
                      highlight=False)
    else:
        r = data["run"]
        console.print(f"run {data['id']}: {r['task']} ({r['policy']}, seed {r['seed']}, {r['status']}) in "
                      f"{data['db']}", highlight=False)
    if not data["policies"]:
        console.print("no run here has a correctly evaluated starting kernel: nothing to report")
    for t in tbl.build(data):
        table = Table(title=t.title, title_justify="left", caption=t.note or None, caption_justify="left")
        for i, col in enumerate(t.columns):
            numeric = any(row[i][1] is not None for row in t.rows)
            table.add_column(col, justify="right" if numeric else "left", overflow="fold")
        for row in t.rows:
            table.add_row(*(text for text, _ in row))
        console.print(table)
    for k in data["best_kernels"]:
        if k["candidate"] not in (None, 0):
            console.print(f"best for {k['task']}: {k['policy']} seed {k['seed']} run {k['run_id']} candidate "
                          f"{k['candidate']} ({k['speedup']:.3f}x); `kernelband report run:{k['run_id']} --out DIR`"
                          " shows its diff", highlight=False)
