"""The LLM calls of a report's runs, read from the run store.

A failed proposal costs tokens and an arm's pull but leaves no candidate, so without this table the report
would not show it at all. A run's report lists every call (outcome, latency, tokens, HTTP attempts); a
bench's report counts each run's calls by outcome.
"""

from __future__ import annotations

import statistics

from kernelband.store import RunRow, Store


def run_calls(store: Store, run_id: int) -> list[dict]:
    """Every LLM call of one run, in the order they were made."""
    return [{k: row.get(k) for k in ("iteration", "slot", "strategy", "outcome", "latency_s", "tokens_in",
                                      "tokens_out", "attempts", "error")}
            for row in store.llm_calls(run_id)]


def run_outcomes(store: Store, rows: list[RunRow]) -> list[dict]:
    """Per run that made LLM calls: how many, by outcome, their tokens and median latency."""
    out = []
    for row in rows:
        calls = store.llm_calls(row.id)
        if not calls:
            continue
        counts: dict[str, int] = {}
        for call in calls:
            counts[call["outcome"]] = counts.get(call["outcome"], 0) + 1
        latencies = [c["latency_s"] for c in calls if c["latency_s"] is not None]
        out.append({"run_id": row.id, "task": row.task, "policy": row.policy, "seed": row.seed,
                    "calls": len(calls), "outcomes": counts,
                    "tokens": sum(c["tokens_in"] + c["tokens_out"] for c in calls),
                    "median_latency_s": statistics.median(latencies) if latencies else None})
    return out
