"""The report as Markdown: the same tables as the page and the terminal, as pipe tables to paste into a
pull request, an issue or BENCHMARKS.md."""

from __future__ import annotations

from kernelband.report import tables as tbl


def _cell(text: str) -> str:
    return text.replace("|", "\\|")


def table(t: tbl.Table) -> str:
    """One table as a Markdown pipe table under a heading, with its note."""
    lines = [f"### {t.title}", "", "| " + " | ".join(_cell(c) for c in t.columns) + " |",
             "| " + " | ".join("---:" if t.numeric(i) else "---" for i in range(len(t.columns))) + " |"]
    lines += ["| " + " | ".join(_cell(text) for text, _ in row) + " |" for row in t.rows]
    if t.note:
        lines += ["", t.note]
    return "\n".join(lines)


def _on(data: dict) -> str:
    return f" on {', '.join(data['devices'])}" if data.get("devices") else ""


def render(data: dict) -> str:
    if data["kind"] == "bench":
        head = f"## Bench {data['id']} ({data['bench']['suite']}, {data['bench']['status']}){_on(data)}"
    else:
        r = data["run"]
        head = f"## Run {data['id']}: {r['task']} ({r['policy']}, seed {r['seed']}, {r['status']}){_on(data)}"
    parts = [head]
    parts += [f"**Warning:** {w}" for w in data.get("warnings", [])]
    parts += [table(t) for t in tbl.build(data)]
    if data["kind"] == "run":
        lines = tbl.lineage_lines(data["lineage"])
        if lines:
            parts.append("### Lineage\n\n```\n" + "\n".join(lines) + "\n```")
        for k in data["best_kernels"]:
            if k["candidate"] not in (None, 0) and k["diff"]:
                parts.append(f"### Best kernel: candidate {k['candidate']} ({k['speedup']:.3f}x)\n\n```diff\n"
                             + k["diff"].rstrip("\n") + "\n```")
    return "\n\n".join(parts) + "\n"
