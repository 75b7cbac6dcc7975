"""The run store: one SQLite database holds every run, candidate, evaluation, bandit step and LLM call.

Writes are committed as they happen (WAL journal), so a run killed with SIGKILL loses at most the
evaluation that was in flight. `--resume` replays the stored history through a fresh policy: proposals
and evaluations that are already stored are read back instead of being made again.
"""

from __future__ import annotations

import json
import os
import sqlite3
import threading
import time
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import datetime, timezone
from enum import Enum
from pathlib import Path
from urllib.parse import quote

from kernelband.errors import UserError
from kernelband.evaluation.records import EvalResult
from kernelband.search.core import LLMCall
from kernelband.store_schema import SCHEMA

DEFAULT_DB = "kernelband-runs/kernelband.db"

# The database's version (SQLite's user_version) and what each step to it does to a database written before.
# 1: run summaries gain the baseline and SOL fields (search/loop.py's Summary), unknown for a run stored before
# they were measured, with that as the reason.
SCHEMA_VERSION = 1
_BEFORE_BASELINES = "stored before the baselines were timed"
SUMMARY_ADDED = {"best_vs_eager": None, "best_vs_compile": None, "vs_eager_skipped": _BEFORE_BASELINES,
                 "vs_compile_skipped": _BEFORE_BASELINES, "best_sol_large": None}

class RunStatus(str, Enum):
    """Where a run stands. Every status but `done` can be resumed: `running` is a run in progress or one whose
    process was killed (SIGKILL leaves no chance to say so), `interrupted` one stopped by Ctrl-C, `failed` one
    that ended with an error (its `reason`), which --resume takes up again once the cause is fixed (an LLM
    endpoint back, for instance)."""

    RUNNING = "running"
    DONE = "done"
    FAILED = "failed"
    INTERRUPTED = "interrupted"


@dataclass
class RunRow:
    id: int
    task: str
    task_key: str
    policy: str
    proposer: str
    seed: int
    config: dict
    status: str
    device: str
    created: float
    finished: float | None
    summary: dict | None
    bench_id: int | None
    reason: str = ""  # why a failed or interrupted run ended

    def to_dict(self) -> dict:
        return dict(self.__dict__)


# What a compressed database starts with, and the command that unpacks it (docs/results/bench.db.xz is one)
_PACKED = {b"\xfd7zXZ\x00": "xz -dc", b"\x1f\x8b": "gzip -dc"}


def _compressed_hint(path: Path) -> str:
    try:
        with open(path, "rb") as f:
            head = f.read(6)
    except OSError:
        return ""
    for magic, unpack in _PACKED.items():
        if head.startswith(magic):
            return f" (it is compressed: `{unpack} {path} > {path.stem}` unpacks it)"
    return ""


def utc_seconds(text: str) -> float:
    """UTC seconds (the store's clock) of "2026-11-23 07:24:01" or "2026-11-23T07:24:01" (a date alone: its
    midnight)."""
    try:
        return datetime.fromisoformat(text).replace(tzinfo=timezone.utc).timestamp()
    except ValueError:
        raise UserError(f"not a UTC time: {text!r} (e.g. \"2026-11-23 07:24:01\")") from None


def artifacts_dir(db: str | Path) -> Path:
    """Where the files of a database's runs go (run-<id>/best.py, best.diff): beside the database, in a folder
    named after it, so that two databases in one folder do not overwrite each other's run-1."""
    db = Path(db).expanduser()
    return db.parent / (db.stem if db.suffix else f"{db.name}.d")


def _read_only_uri(path: Path) -> str:
    """SQLite's URI for reading `path` without writing anything: `mode=ro`, and `immutable=1` where its folder
    cannot be written (read-only media), as SQLite would otherwise need to create the WAL's index file there."""
    uri = f"file:{quote(str(path.resolve()))}?mode=ro"
    return uri + ("" if os.access(path.parent, os.W_OK) else "&immutable=1")


class Store:
    """A thread-safe handle on the database (one connection, one lock). `read_only`: for commands that only
    read (`runs`, `report`): nothing is created or written, so a database on read-only media can be read."""

    def __init__(self, path: str | Path = DEFAULT_DB, read_only: bool = False):
        self.path = Path(path).expanduser()
        self.read_only = read_only
        try:
            if read_only:
                if not self.path.is_file():
                    raise UserError(f"no run database at {self.path}")
                self._db = sqlite3.connect(_read_only_uri(self.path), uri=True, check_same_thread=False,
                                           isolation_level=None)
                self._db.execute("SELECT COUNT(*) FROM sqlite_master").fetchone()  # not a database: an error now
            else:
                self.path.parent.mkdir(parents=True, exist_ok=True)
                self._db = sqlite3.connect(str(self.path), check_same_thread=False, isolation_level=None)
                self._db.execute("PRAGMA journal_mode=WAL")
                self._db.execute("PRAGMA synchronous=NORMAL")
                self._db.executescript(SCHEMA)
                self._migrate()
        except (OSError, sqlite3.DatabaseError) as exc:
            raise UserError(f"cannot open the run database {self.path}: {exc}{_compressed_hint(self.path)}") from exc
        self._lock = threading.RLock()

    @property
    def artifacts(self) -> Path:
        return artifacts_dir(self.path)

    def _migrate(self) -> None:
        """Bring a database written by an older KernelBand to SCHEMA and SCHEMA_VERSION (a new one only gets the
        stamp)."""
        _add_columns(self._db)
        version = self._db.execute("PRAGMA user_version").fetchone()[0]
        if version >= SCHEMA_VERSION:
            return
        try:
            self._db.execute("BEGIN IMMEDIATE")
        except sqlite3.OperationalError:  # a database opened read-only: its readers take the defaults
            return
        try:
            if version < 1:
                for run_id, text in self._db.execute("SELECT id, summary FROM runs WHERE summary IS NOT NULL")\
                        .fetchall():
                    summary = json.loads(text)
                    if isinstance(summary, dict) and any(k not in summary for k in SUMMARY_ADDED):
                        summary = {**SUMMARY_ADDED, **summary}
                        self._db.execute("UPDATE runs SET summary = ? WHERE id = ?", (json.dumps(summary), run_id))
            self._db.execute(f"PRAGMA user_version = {SCHEMA_VERSION}")
            self._db.execute("COMMIT")
        except BaseException:
            self._db.execute("ROLLBACK")
            raise

    def close(self) -> None:
        with self._lock:
            self._db.close()

    @contextmanager
    def _tx(self):
        with self._lock:
            self._db.execute("BEGIN IMMEDIATE")
            try:
                yield self._db
            except BaseException:
                self._db.execute("ROLLBACK")
                raise
            self._db.execute("COMMIT")

    def write(self, sql: str, args: tuple = ()) -> None:
        """One statement in its own transaction (tables other modules own, such as knowledge.py's)."""
        with self._tx() as db:
            db.execute(sql, args)

    def query(self, sql: str, args: tuple = ()) -> list[dict]:
        return self._rows(sql, args)

    def _rows(self, sql: str, args: tuple = ()) -> list[dict]:
        with self._lock:
            cur = self._db.execute(sql, args)
            cols = [c[0] for c in cur.description]
            return [dict(zip(cols, row, strict=True)) for row in cur.fetchall()]

    # -- runs ---------------------------------------------------------------------------------
    def create_run(self, task: str, task_key: str, policy: str, proposer: str, seed: int, config: dict,
                   device: str = "", bench_id: int | None = None) -> int:
        with self._tx() as db:
            cur = db.execute("INSERT INTO runs (bench_id, task, task_key, policy, proposer, seed, config, status,"
                             " device, created) VALUES (?,?,?,?,?,?,?,?,?,?)",
                             (bench_id, task, task_key, policy, proposer, seed, json.dumps(config),
                              RunStatus.RUNNING.value, device, time.time()))
            return cur.lastrowid

    def run(self, run_id: int) -> RunRow:
        rows = self._rows("SELECT * FROM runs WHERE id = ?", (run_id,))
        if not rows:
            raise UserError(f"no run {run_id} in {self.path}; `kernelband runs --db {self.path}` lists them")
        return _run_row(rows[0])

    def runs(self, bench_id: int | None = None) -> list[RunRow]:
        if bench_id is None:
            return [_run_row(r) for r in self._rows("SELECT * FROM runs ORDER BY id")]
        return [_run_row(r) for r in self._rows("SELECT * FROM runs WHERE bench_id = ? ORDER BY id", (bench_id,))]

    def find_run(self, task_key: str, policy: str, proposer: str, seed: int,
                 bench_id: int | None = None) -> RunRow | None:
        rows = self._rows("SELECT * FROM runs WHERE task_key = ? AND policy = ? AND proposer = ? AND seed = ? "
                          "AND bench_id IS ? ORDER BY id DESC LIMIT 1", (task_key, policy, proposer, seed, bench_id))
        return _run_row(rows[0]) if rows else None

    def last_unfinished_run(self) -> RunRow | None:
        rows = self._rows("SELECT * FROM runs WHERE status != 'done' ORDER BY id DESC LIMIT 1")
        return _run_row(rows[0]) if rows else None

    def finish_run(self, run_id: int, status: str, summary: dict, handed_back: str = "") -> None:
        """The run done, with its summary and the source of the module it hands back: kept here, since the
        file written beside it (summary's best_path) may be on a machine long gone."""
        with self._tx() as db:
            db.execute("UPDATE runs SET status = ?, finished = ?, summary = ?, reason = '', handed_back = ? "
                       "WHERE id = ?", (RunStatus(status).value, time.time(), json.dumps(summary), handed_back,
                                        run_id))

    def handed_back(self, run_id: int) -> str:
        """The module a finished run handed back ('' where the run predates the column or is not done)."""
        try:
            rows = self._rows("SELECT handed_back FROM runs WHERE id = ?", (run_id,))
        except sqlite3.OperationalError:  # an older database opened read-only: no such column
            return ""
        return rows[0]["handed_back"] if rows else ""

    def end_run(self, run_id: int, status: RunStatus, reason: str) -> None:
        """A run that ended without finishing: `failed` (an error) or `interrupted` (Ctrl-C), and why."""
        with self._tx() as db:
            db.execute("UPDATE runs SET status = ?, finished = ?, reason = ? WHERE id = ?",
                       (RunStatus(status).value, time.time(), reason, run_id))

    def reopen_run(self, run_id: int) -> None:
        """A resumed run is running again."""
        with self._tx() as db:
            db.execute("UPDATE runs SET status = ?, finished = NULL, reason = '' WHERE id = ?",
                       (RunStatus.RUNNING.value, run_id))

    def set_device(self, run_id: int, device: str) -> None:
        with self._tx() as db:
            db.execute("UPDATE runs SET device = ? WHERE id = ?", (device, run_id))

    # -- candidates, proposals, evaluations -----------------------------------------------------
    def add_candidate(self, run_id: int, cid: int, source: str, source_hash: str, parent: int | None,
                      strategy: str | None, iteration: int, slot: int, rationale: str = "") -> None:
        with self._tx() as db:
            db.execute("INSERT OR IGNORE INTO candidates VALUES (?,?,?,?,?,?,?,?,?)",
                       (run_id, cid, parent, strategy, iteration, slot, source, source_hash, rationale))

    def candidates(self, run_id: int) -> list[dict]:
        return self._rows("SELECT * FROM candidates WHERE run_id = ? ORDER BY id", (run_id,))

    def add_proposal(self, run_id: int, iteration: int, slot: int, parent: int, strategy: str,
                     candidate: int | None, error: str, rationale: str, tokens_in: int, tokens_out: int,
                     calls: list[LLMCall], outcome: str = "ok") -> None:
        with self._tx() as db:
            db.execute("INSERT OR REPLACE INTO proposals (run_id, iteration, slot, parent, strategy, candidate, error,"
                       " rationale, tokens_in, tokens_out, outcome) VALUES (?,?,?,?,?,?,?,?,?,?,?)",
                       (run_id, iteration, slot, parent, strategy, candidate, error, rationale, tokens_in,
                        tokens_out, outcome))
            for call in calls:
                db.execute("INSERT INTO llm_calls (run_id, iteration, slot, model, tokens_in, tokens_out, latency_s,"
                           " outcome, error, created, attempts) VALUES (?,?,?,?,?,?,?,?,?,?,?)",
                           (run_id, iteration, slot, call.model or "", call.tokens_in, call.tokens_out,
                            call.latency_s, call.outcome.value, call.error, time.time(), call.attempts))

    def proposal(self, run_id: int, iteration: int, slot: int) -> dict | None:
        rows = self._rows("SELECT * FROM proposals WHERE run_id = ? AND iteration = ? AND slot = ?",
                          (run_id, iteration, slot))
        return rows[0] if rows else None

    def add_evaluation(self, run_id: int, candidate: int, which: str, result: EvalResult) -> None:
        with self._tx() as db:
            db.execute("INSERT OR REPLACE INTO evaluations VALUES (?,?,?,?,?,?,?)",
                       (run_id, candidate, which, result.outcome.value, result.speedup,
                        json.dumps(result.to_dict(), default=str), time.time()))

    def evaluation(self, run_id: int, candidate: int, which: str = "search") -> EvalResult | None:
        rows = self._rows("SELECT result FROM evaluations WHERE run_id = ? AND candidate = ? AND which = ?",
                          (run_id, candidate, which))
        return EvalResult.from_dict(json.loads(rows[0]["result"])) if rows else None

    def find_evaluation(self, bench_id: int, task_key: str, source_hash: str, device: str) -> EvalResult | None:
        """A search-shape evaluation of this source on this task and GPU kind, from any run of the bench."""
        rows = self._rows("SELECT e.result FROM evaluations e JOIN runs r ON r.id = e.run_id JOIN candidates c "
                          "ON c.run_id = e.run_id AND c.id = e.candidate WHERE r.bench_id = ? AND r.task_key = ? "
                          "AND c.hash = ? AND r.device = ? AND e.which = 'search' ORDER BY e.created DESC LIMIT 1",
                          (bench_id, task_key, source_hash, device))
        return EvalResult.from_dict(json.loads(rows[0]["result"])) if rows else None

    def evaluations(self, run_id: int) -> list[dict]:
        rows = self._rows("SELECT * FROM evaluations WHERE run_id = ? ORDER BY candidate", (run_id,))
        for row in rows:
            row["result"] = json.loads(row["result"])
        return rows

    # -- iterations and LLM calls ---------------------------------------------------------------
    def add_iteration(self, run_id: int, iteration: int, arms: list[dict], best_speedup: float | None,
                      iteration_speedup: float | None, pool_size: int, tokens: int, stats: dict,
                      seconds: float) -> None:
        with self._tx() as db:
            db.execute("INSERT OR REPLACE INTO iterations VALUES (?,?,?,?,?,?,?,?,?)",
                       (run_id, iteration, json.dumps(arms), best_speedup, iteration_speedup, pool_size, tokens,
                        json.dumps(stats, default=str), seconds))

    def iterations(self, run_id: int) -> list[dict]:
        rows = self._rows("SELECT * FROM iterations WHERE run_id = ? ORDER BY iteration", (run_id,))
        for row in rows:
            row["arms"], row["stats"] = json.loads(row["arms"]), json.loads(row["stats"])
        return rows

    def llm_calls(self, run_id: int) -> list[dict]:
        """The run's LLM calls, each with the strategy of the proposal it was made for."""
        return self._rows("SELECT l.*, p.strategy FROM llm_calls l LEFT JOIN proposals p ON p.run_id = l.run_id "
                          "AND p.iteration = l.iteration AND p.slot = l.slot WHERE l.run_id = ? ORDER BY l.id",
                          (run_id,))

    # -- benches and baselines ------------------------------------------------------------------
    def create_bench(self, suite: str, config: dict) -> int:
        with self._tx() as db:
            cur = db.execute("INSERT INTO benches (suite, config, status, created) VALUES (?,?,?,?)",
                             (suite, json.dumps(config), "running", time.time()))
            return cur.lastrowid

    def bench(self, bench_id: int) -> dict:
        rows = self._rows("SELECT * FROM benches WHERE id = ?", (bench_id,))
        if not rows:
            raise UserError(f"no bench {bench_id} in {self.path}")
        row = rows[0]
        row["config"] = json.loads(row["config"])
        return row

    def benches(self) -> list[dict]:
        rows = self._rows("SELECT * FROM benches ORDER BY id")
        for row in rows:
            row["config"] = json.loads(row["config"])
        return rows

    def finish_bench(self, bench_id: int) -> None:
        with self._tx() as db:
            db.execute("UPDATE benches SET status = 'done', finished = ? WHERE id = ?", (time.time(), bench_id))

    def quarantine(self, bench_id: int, since: float, until: float | None, reason: str) -> dict:
        """Set aside what was measured in [since, until] (None: until now) while the GPU was not ours alone,
        so that bench `bench_id` measures it again: its runs with an evaluation in the window move, whole, to
        a new bench of status `quarantined` (kept for inspection, never resumed); a bench created in the
        window is quarantined too; golden baselines measured in the window are dropped (the cache measures
        them again). Returns {"bench": new bench id, "runs": moved run ids, "benches": quarantined bench
        ids, "baselines": dropped count}."""
        mine = self.bench(bench_id)
        if mine["status"] == "quarantined":
            raise UserError(f"bench {bench_id} is quarantined already")
        end = time.time() if until is None else until
        if end < since:
            raise UserError("the window ends before it starts: give --until after --since")
        window = {"since": since, "until": end, "reason": reason}
        touched = [r["run_id"] for r in self._rows(
            "SELECT DISTINCT e.run_id FROM evaluations e JOIN runs r ON r.id = e.run_id "
            "WHERE r.bench_id = ? AND e.created BETWEEN ? AND ? ORDER BY e.run_id", (bench_id, since, end))]
        others = [b["id"] for b in self._rows("SELECT id FROM benches WHERE id != ? AND status != 'quarantined' "
                                              "AND created BETWEEN ? AND ?", (bench_id, since, end))]
        with self._tx() as db:
            new = db.execute("INSERT INTO benches (suite, config, status, created) VALUES (?,?,?,?)",
                             (mine["suite"], json.dumps({**mine["config"], "quarantined_from": bench_id,
                                                         "window": window}), "quarantined", time.time())).lastrowid
            db.executemany("UPDATE runs SET bench_id = ? WHERE id = ?", [(new, run) for run in touched])
            for other in others:
                db.execute("UPDATE benches SET status = 'quarantined', config = ? WHERE id = ?",
                           (json.dumps({**self.bench(other)["config"], "window": window}), other))
            dropped = db.execute("DELETE FROM baselines WHERE created BETWEEN ? AND ?", (since, end)).rowcount
        return {"bench": new, "runs": touched, "benches": others, "baselines": dropped}

    def merge_bench(self, other: str | Path, bench_id: int, into: int | None = None) -> tuple[int, int]:
        """Copy bench `bench_id` of the database `other` into this one: every run with its candidates,
        proposals, evaluations, iterations and LLM calls, and the golden baselines. The runs join bench
        `into` (its settings must match; the task lists are joined) or a new bench with the same settings.
        A run whose (task, policy, proposer, seed) is already done in the target is skipped. The knowledge rows
        each copied run wrote into `other` (knowledge.py) come with it, GPU model and rules kept, each pull
        once however often the bench is merged (merged again, a run copied before its knowledge was gets it).
        Returns (target bench, runs copied). For sweeps split over machines or sessions."""
        other = Path(other).expanduser()
        if not other.is_file():
            raise UserError(f"no run database at {other}")
        if other.resolve() == self.path.resolve():
            raise UserError(f"{other} is the database being merged into: give another one with --db")
        src = Store(other, read_only=True)
        try:
            theirs = src.bench(bench_id)
            same = ("suite", "policies", "seeds", "iterations", "q", "proposer", "preset")
            if into is None:
                into = self.create_bench(theirs["suite"], theirs["config"])
                if theirs["status"] == "done":
                    self.finish_bench(into)
            else:
                ours = self.bench(into)
                differ = [k for k in same if ours["config"].get(k) != theirs["config"].get(k)]
                if differ:
                    raise UserError(f"bench {bench_id} of {other} differs from bench {into} in {', '.join(differ)}")
                tasks = list(dict.fromkeys((ours["config"].get("tasks") or []) + (theirs["config"].get("tasks") or [])))
                with self._tx() as db:
                    db.execute("UPDATE benches SET config = ? WHERE id = ?",
                               (json.dumps({**ours["config"], "tasks": tasks}), into))
            copied = 0
            pulls = {_pull_key(r) for r in _knowledge_rows(self)}
            theirs_pulls = _knowledge_rows(src)
            for run in src.runs(bench_id):
                mine = [r for r in theirs_pulls if _wrote(r, run, src.path)]
                done = self.find_run(run.task_key, run.policy, run.proposer, run.seed, into)
                if done is not None and done.status == "done":
                    if done.created == run.created:  # this very run, copied before its knowledge was
                        with self._tx() as db:
                            self._copy_pulls(db, mine, done.id, pulls)
                    continue
                copied += 1
                self._copy_run(src, run, into, mine, pulls)
            with self._tx() as db:
                for row in src._rows("SELECT * FROM baselines"):
                    db.execute("INSERT OR IGNORE INTO baselines VALUES (?,?,?,?,?,?,?)", tuple(row.values()))
            return into, copied
        finally:
            src.close()

    def _copy_run(self, src: Store, run: RunRow, bench_id: int, pulls: list[dict], seen: set[tuple]) -> None:
        """The run, its records and its knowledge rows `pulls`, in one transaction: a merge killed midway leaves
        no run without its knowledge. The copied rows become the copy's own (this database, its new run id),
        as the run would have written them here, so a later merge of this database finds them the same way;
        a pull in `seen` (already here) is left out, and the pulls copied join it."""
        run_id = run.id
        row = src._rows("SELECT * FROM runs WHERE id = ?", (run_id,))[0]
        with self._tx() as db:
            new = db.execute("INSERT INTO runs (bench_id, task, task_key, policy, proposer, seed, config, status, "
                             "device, created, finished, summary, reason, handed_back) "
                             "VALUES (?,?,?,?,?,?,?,?,?,?,?,?,?,?)",
                             (bench_id, row["task"], row["task_key"], row["policy"], row["proposer"], row["seed"],
                              row["config"], row["status"], row["device"], row["created"], row["finished"],
                              row["summary"], row.get("reason") or "", row.get("handed_back") or "")).lastrowid
            for table in ("candidates", "proposals", "evaluations", "iterations", "llm_calls"):
                for r in src._rows(f"SELECT * FROM {table} WHERE run_id = ?", (run_id,)):
                    r["run_id"] = new
                    if table == "llm_calls":
                        r.pop("id")
                    cols = ", ".join(r)
                    db.execute(f"INSERT INTO {table} ({cols}) VALUES ({', '.join('?' * len(r))})", tuple(r.values()))
            self._copy_pulls(db, pulls, new, seen)

    def _copy_pulls(self, db: sqlite3.Connection, pulls: list[dict], run_id: int, seen: set[tuple]) -> None:
        """Knowledge rows as rows of this database's run `run_id`, but those in `seen` (which the rest join)."""
        here = str(self.path.resolve())
        for r in pulls:
            if _pull_key(r) in seen:
                continue
            seen.add(_pull_key(r))
            r = {**r, "origin": here, "run_id": run_id}
            r.pop("id")  # the order of writing here: after every cut a run of this database has taken
            db.execute(f"INSERT OR IGNORE INTO knowledge_pulls ({', '.join(r)}) VALUES ({', '.join('?' * len(r))})",
                       tuple(r.values()))

    def baseline(self, gpu: str, driver: str, triton: str, task_key: str, preset: str) -> EvalResult | None:
        rows = self._rows("SELECT result FROM baselines WHERE gpu = ? AND driver = ? AND triton = ? AND task_key = ?"
                          " AND preset = ?", (gpu, driver, triton, task_key, preset))
        return EvalResult.from_dict(json.loads(rows[0]["result"])) if rows else None

    def save_baseline(self, gpu: str, driver: str, triton: str, task_key: str, preset: str,
                      result: EvalResult) -> None:
        with self._tx() as db:
            db.execute("INSERT OR REPLACE INTO baselines VALUES (?,?,?,?,?,?,?)",
                       (gpu, driver, triton, task_key, preset, json.dumps(result.to_dict(), default=str),
                        time.time()))

    # -- the exhaustive grid beside a bench (benchmarks/search_quality.py --parts grid) ----------------------
    def save_grid_row(self, bench_id: int, row: dict) -> None:
        """One finished task of the grid a user would run by hand, kept with the bench it is compared with."""
        with self._tx() as db:
            db.execute("INSERT OR REPLACE INTO grid VALUES (?,?,?,?)",
                       (bench_id, row["task"], json.dumps(row, default=str), time.time()))

    def grid_rows(self, bench_id: int) -> list[dict]:
        return [json.loads(r["row"]) for r in self._rows("SELECT row FROM grid WHERE bench_id = ? ORDER BY task",
                                                          (bench_id,))]


def _add_columns(db: sqlite3.Connection) -> None:
    """The columns added to SCHEMA's tables since a database was written, filled where the old rows say
    enough."""
    def columns(table: str) -> set[str]:
        return {row[1] for row in db.execute(f"PRAGMA table_info({table})")}

    if "reason" not in columns("runs"):
        db.execute("ALTER TABLE runs ADD COLUMN reason TEXT NOT NULL DEFAULT ''")
    if "handed_back" not in columns("runs"):
        db.execute("ALTER TABLE runs ADD COLUMN handed_back TEXT NOT NULL DEFAULT ''")
    if "attempts" not in columns("llm_calls"):
        db.execute("ALTER TABLE llm_calls ADD COLUMN attempts INTEGER")
    if "outcome" not in columns("proposals"):
        db.execute("ALTER TABLE proposals ADD COLUMN outcome TEXT NOT NULL DEFAULT ''")
        # A proposal that made a candidate was ok; one whose call answered but made none repeated a candidate;
        # one with neither had nothing to propose.
        db.execute("UPDATE proposals SET outcome = CASE WHEN candidate IS NOT NULL THEN 'ok' ELSE COALESCE("
                   "(SELECT CASE l.outcome WHEN 'ok' THEN 'duplicate' ELSE l.outcome END FROM llm_calls l "
                   "WHERE l.run_id = proposals.run_id AND l.iteration = proposals.iteration "
                   "AND l.slot = proposals.slot ORDER BY l.id DESC LIMIT 1), 'nothing') END")


def _knowledge_rows(store: Store) -> list[dict]:
    """The knowledge store's rows; none in a database opened read-only that was written before it existed."""
    try:
        return store._rows("SELECT * FROM knowledge_pulls ORDER BY id")
    except sqlite3.OperationalError as exc:
        if "no such table" in str(exc):
            return []
        raise


def _pull_key(row: dict) -> tuple:
    """A pull however often it is copied: its GPU model, rules, task, pull count and the time it was written (its
    origin and run id change with the database it is in)."""
    return row["gpu"], row["rules"], row["task_key"], row["pull"], row["created"]


def _wrote(row: dict, run: RunRow, path: Path) -> bool:
    """Whether the knowledge row is one that `run` wrote into the database at `path`: same run id and task, and
    an origin that is that database, either as the run named it when it began (its `knowledge` entry, maybe a
    relative path; the origin is resolved) or as it is now (rows a merge copied into it). Rows other databases'
    runs wrote into it, when it was their --knowledge, have their own origin."""
    if row["run_id"] != run.id or row["task_key"] != run.task_key:
        return False
    if row["origin"] == str(path.resolve()):
        return True
    named = (run.config.get("knowledge") or {}).get("db")
    if not named:
        return False
    tail, parts = Path(os.path.normpath(named)).parts, Path(row["origin"]).parts
    return len(tail) <= len(parts) and parts[len(parts) - len(tail):] == tail


def _run_row(row: dict) -> RunRow:
    return RunRow(id=row["id"], task=row["task"], task_key=row["task_key"], policy=row["policy"],
                  proposer=row["proposer"], seed=row["seed"], config=json.loads(row["config"]), status=row["status"],
                  device=row["device"], created=row["created"], finished=row["finished"],
                  summary=json.loads(row["summary"]) if row["summary"] else None, bench_id=row["bench_id"],
                  reason=row.get("reason") or "")
