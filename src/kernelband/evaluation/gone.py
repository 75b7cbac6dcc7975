"""The failure of a worker process, shared by the worker handle and the profiler (no module imports both)."""

from __future__ import annotations


class WorkerGone(Exception):
    """The worker died, timed out or broke the protocol; `outcome` says which."""

    def __init__(self, outcome: str, detail: str):
        super().__init__(detail)
        self.outcome = outcome
        self.detail = detail
