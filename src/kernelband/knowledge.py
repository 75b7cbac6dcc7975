"""Knowledge carried across kernels: what every pull of every run taught, kept in a run database and read back
by the next runs on the same GPU model under the same measurement rules.

One row per pull (the store's `knowledge_pulls` table):
  - psi's training example: phi of the parent, the strategy, the reward and whether the child was faster;
  - for the built-in rewriter, the variant's family and the parent's load (rewriter/priors.py), with the
    child's gain over its parent: the counts `priors.json` holds, per GPU model.

Writing: each pull is written as its evaluation is learned from, one row in its own transaction, so a run
killed with SIGKILL keeps every example before the one in flight. Rows are keyed by (run, pull), so the replay
of a resumed run writes nothing twice.

Reading: a run warm-starts from the rows written before it began (the cut, kept in the run's config, so that a
resumed run replays from the same knowledge), of the same GPU model and rules, and never from its own task:
the knowledge is what was learned on *other* kernels. A bench's test tasks read only what the train tasks
taught (tasks/split.py), so every test run starts from the same knowledge whatever the order of the runs.
Rows from another GPU model or other rules, and rows that do not parse, are ignored, and a note says so.
"""

from __future__ import annotations

import hashlib
import json
import math
import sqlite3
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from kernelband.errors import UserError
from kernelband.evaluation.records import PHI_KEYS, RULES
from kernelband.policies.kernelband import CompatibilityHead, PhiScaler, one_thread
from kernelband.proposers.rewriter.priors import family, load_class
from kernelband.search.core import Candidate, reward
from kernelband.store import Store
from kernelband.tasks import split as splits

OFF = "off"
WIN = 1.05  # a variant "won" when it beat its parent by 5 %: the threshold priors.json was counted with
HELD_BACK = 0.2  # of the examples, fixed by hash, that `kernelband knowledge` scores psi on


def knowledge_option(text: str | None) -> str:
    """--knowledge: "" (None given: the run database in use), "off", or a database path that must exist."""
    if text is None or text.strip() == "":
        return ""
    if text.strip().lower() == OFF:
        return OFF
    path = Path(text).expanduser()
    if not path.is_file():
        raise UserError(f"--knowledge {text}: no such database (give a run database, or off)")
    return str(path)


@dataclass
class Example:
    """One pull as carried: (strategy, phi of the parent, reward), the tuple the policies' warm_start takes."""

    strategy: str
    phi: dict
    reward: float
    key: str  # "origin/run/pull": what the held-back fraction is drawn by
    profiled: bool = True  # phi came from Nsight Compute; without it psi cannot learn from the example

    @property
    def faster(self) -> bool:
        return self.reward > 0

    def as_tuple(self) -> tuple[str, dict | None, float]:
        """phi is None where the run skipped the profiler: its reward still counts, its phi would mislead."""
        return self.strategy, self.phi if self.profiled else None, self.reward


@dataclass
class Loaded:
    examples: list[Example]
    notes: list[str] = field(default_factory=list)


def _rows(store: Store, sql: str, args: tuple = ()) -> list[dict]:
    """The query's rows; none from a database opened read-only that was written before the table existed."""
    try:
        return store.query(sql, args)
    except sqlite3.OperationalError as exc:
        if "no such table" in str(exc):
            return []
        raise


def _parse(row: dict) -> Example | None:
    try:
        phi = json.loads(row["phi"])
        r = float(row["reward"])
    except (TypeError, ValueError):
        return None
    if not isinstance(phi, dict) or not row["strategy"] or not math.isfinite(r) or r > 1.0 or r < -1.0:
        return None
    if any(v is not None and not isinstance(v, (int, float)) for v in phi.values()):
        return None
    return Example(row["strategy"], {k: phi.get(k) for k in PHI_KEYS}, r,
                   f"{row['origin']}/{row['run_id']}/{row['pull']}", bool(row["profiled"]))


def load(store: Store, gpu: str, rules: int = RULES, upto: int | None = None, exclude_task: str | None = None,
         train_only: bool = False) -> Loaded:
    """The usable examples for a run on `gpu` under `rules`, with notes on what was left out and why."""
    rows = _rows(store, "SELECT * FROM knowledge_pulls WHERE id <= ? ORDER BY id",
                       (upto if upto is not None else 2**62,))
    notes: list[str] = []
    foreign = [r for r in rows if r["gpu"] != gpu or r["rules"] != rules]
    if foreign:
        other = sorted({f"{r['gpu']} (rules {r['rules']})" for r in foreign})
        notes.append(f"knowledge: {len(foreign)} examples measured on another GPU model or under other rules "
                     f"ignored: {', '.join(other)}")
    rows = [r for r in rows if r["gpu"] == gpu and r["rules"] == rules]
    if exclude_task is not None:
        rows = [r for r in rows if r["task_key"] != exclude_task]
    if train_only:
        rows = [r for r in rows if r["split"] == "train"]
    examples = [e for r in rows if (e := _parse(r)) is not None]
    if len(examples) < len(rows):
        notes.append(f"knowledge: {len(rows) - len(examples)} malformed examples ignored")
    return Loaded(examples, notes)


def cut(store: Store) -> int:
    """The id of the last row written so far: a new run's knowledge stops there."""
    rows = _rows(store, "SELECT COALESCE(MAX(id), 0) AS top FROM knowledge_pulls")
    return int(rows[0]["top"])


def variant_family(child: Candidate) -> str | None:
    """The built-in rewriter's family of a child (its rationale reads "rewrite: ..."); None for other children."""
    from kernelband.proposers.rewriter.registry import REWRITES

    rewrite, sep, rest = child.rationale.partition(": ")
    return family(rewrite, rest) if sep and rewrite in REWRITES else None


class Carry:
    """A run's link to the knowledge store: the warm start at its beginning, one row per pull after."""

    def __init__(self, store: Store, origin: str, run_id: int, task_key: str, split: str, upto: int,
                 train_only: bool):
        self.store, self.origin, self.run_id, self.task_key, self.split = store, origin, run_id, task_key, split
        self.upto, self.train_only = upto, train_only
        self.notes: list[str] = []
        self.carried = 0

    def config(self) -> dict:
        """What the run's config keeps, so that a resume warm-starts from the same rows."""
        return {"db": str(self.store.path), "upto": self.upto, "train_only": self.train_only}

    def begin(self, policy, k0: Candidate) -> None:
        """Warm-starts `policy` (if it takes knowledge) from the rows up to the cut, for k0's GPU and rules."""
        warm = getattr(policy, "warm_start", None)
        if warm is None or k0.result is None:
            return
        loaded = load(self.store, k0.result.device, k0.result.rules, self.upto, self.task_key, self.train_only)
        self.notes += loaded.notes
        self.carried = len(loaded.examples)
        warm([e.as_tuple() for e in loaded.examples])

    def record(self, pull: int, strategy: str, parent: Candidate, child: Candidate | None) -> None:
        """One pull: psi's example, and the variant family's outcome when the rewriter made the child."""
        if parent.result is None:
            return
        r = reward(parent, child)
        fam = variant_family(child) if child is not None else None
        gain = parent.time / child.time if child is not None and child.valid and parent.valid else None
        load_ = load_class(getattr(parent.result.features, "compile", None)) if fam else None
        self.store.write(
            "INSERT OR IGNORE INTO knowledge_pulls (gpu, rules, origin, run_id, pull, task_key, split, strategy, "
            "phi, profiled, reward, faster, family, load, gain, created) "
            "VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
            (parent.result.device, parent.result.rules, self.origin, self.run_id, pull, self.task_key, self.split,
             strategy, json.dumps({k: parent.phi.get(k) for k in PHI_KEYS}), int(not parent.result.ncu_skipped),
             r, int(r > 0), fam, load_, gain, time.time()))


_OTHERS: dict[str, Store] = {}
_OTHERS_LOCK = threading.Lock()


def _other(path: str) -> Store:
    """One handle per knowledge database in this process: a bench's runs share it (a Store is thread-safe)."""
    key = str(Path(path).resolve())
    with _OTHERS_LOCK:
        if key not in _OTHERS:
            _OTHERS[key] = Store(key)
        return _OTHERS[key]


def open_carry(store: Store, choice: str, run_id: int, task_ref: str, task_key: str, in_bench: bool,
               saved: dict | None = None) -> Carry | None:
    """The run's Carry: `choice` is --knowledge ("" the run's own database, "off", or a path); `saved` is the
    `knowledge` entry of a resumed run's config (its database and cut)."""
    if saved is not None:
        choice = saved.get("db", OFF) if saved else OFF
    if choice == OFF:
        return None
    origin = str(store.path.resolve())
    db = _other(choice) if choice and str(Path(choice).resolve()) != origin else store
    side = splits.side(task_ref)
    if saved:
        return Carry(db, origin, run_id, task_key, side, int(saved["upto"]), bool(saved["train_only"]))
    return Carry(db, origin, run_id, task_key, side, cut(db), in_bench and side == "test")


# -- what is known ----------------------------------------------------------------------------------------

def held_back(example: Example) -> bool:
    """A fixed HELD_BACK share of the examples, drawn by sha256 of the example's key."""
    digest = hashlib.sha256(f"held-back:{example.key}".encode()).digest()
    return int.from_bytes(digest[:8], "big") / 2**64 < HELD_BACK


def _matrix(examples: list[Example]) -> np.ndarray:
    return np.array([[np.nan if e.phi.get(k) is None else float(e.phi[k]) for k in PHI_KEYS] for e in examples],
                    dtype=float).reshape(-1, len(PHI_KEYS))


def accuracy(examples: list[Example], epochs: int = 5) -> dict[str, dict]:
    """Per strategy: examples, faster share, and psi's accuracy on the held-back examples when trained on the
    others as a warm-started policy trains it (with the majority label's accuracy beside it: psi is worth
    something only where it beats that)."""
    examples = [e for e in examples if e.profiled]
    scaler = PhiScaler().fit_rows(_matrix(examples)) if examples else None
    out: dict[str, dict] = {}
    for strategy in sorted({e.strategy for e in examples}):
        mine = [e for e in examples if e.strategy == strategy]
        train = [e for e in mine if not held_back(e)]
        test = [e for e in mine if held_back(e)]
        row = {"examples": len(mine), "faster": sum(e.faster for e in mine), "held_back": len(test),
               "psi_accuracy": None, "majority_accuracy": None}
        if train and test:
            head = CompatibilityHead(random_state=0)
            for e in train:
                head.buffer.append((_matrix([e])[0], int(e.faster)))
            with one_thread():
                head.fit_buffer(scaler, epochs)
                p = head.predict(scaler.transform(_matrix(test)))
            labels = np.array([e.faster for e in test])
            majority = sum(e.faster for e in train) * 2 >= len(train)
            row["psi_accuracy"] = float(np.mean((p > 0.5) == labels))
            row["majority_accuracy"] = float(np.mean(labels == majority))
        out[strategy] = row
    return out


def variant_counts(store: Store, gpu: str, rules: int = RULES, win: float = WIN) -> dict:
    """The rewriter's variant outcomes on `gpu`, in priors.json's shape ({"families": {family: [children,
    won]}, "by_load": {"family|load": [children, won]}}): what priors.prior(counts=...) reads."""
    rows = _rows(store, "SELECT family, load, gain FROM knowledge_pulls WHERE gpu = ? AND rules = ? "
                       "AND family IS NOT NULL", (gpu, rules))
    counts: dict[str, dict[str, list[int]]] = {"families": {}, "by_load": {}}
    for row in rows:
        won = int(row["gain"] is not None and row["gain"] >= win)
        keys = [("families", row["family"])] + ([("by_load", f"{row['family']}|{row['load']}")] if row["load"] else [])
        for part, key in keys:
            n, w = counts[part].get(key, [0, 0])
            counts[part][key] = [n + 1, w + won]
    return counts


def summary(store: Store) -> dict:
    """What the store knows, per GPU model and rules: examples per strategy and psi's held-back accuracy, and
    the variant families' counts."""
    groups = _rows(store, "SELECT gpu, rules, COUNT(*) AS n FROM knowledge_pulls GROUP BY gpu, rules "
                         "ORDER BY gpu, rules")
    out = []
    for g in groups:
        loaded = load(store, g["gpu"], g["rules"])
        out.append({"gpu": g["gpu"], "rules": g["rules"], "current_rules": g["rules"] == RULES,
                    "examples": len(loaded.examples), "notes": [n for n in loaded.notes if "malformed" in n],
                    "strategies": accuracy(loaded.examples),
                    "variants": variant_counts(store, g["gpu"], g["rules"])})
    return {"db": str(store.path), "groups": out}
