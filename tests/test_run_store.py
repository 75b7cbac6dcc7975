"""The run database as a user meets it: on read-only media, and opened by an older version of its schema."""

from __future__ import annotations

import os
import shutil
import sqlite3
import subprocess
import sys
from pathlib import Path

import pytest

from kernelband.store import RunStatus, Store, artifacts_dir


def _read_only_mount(source: Path, mount: Path, command: str) -> subprocess.CompletedProcess:
    """`command` in a user and mount namespace of its own where `mount` is `source` bound read-only: read-only
    media, for root as well (root ignores permission bits, not a read-only file system)."""
    if shutil.which("unshare") is None:
        pytest.skip("needs unshare (util-linux) for a read-only bind mount")
    mount.mkdir()
    script = f"mount --bind -o ro {source} {mount} && {command}"
    proc = subprocess.run(["unshare", "-rm", "sh", "-c", script], capture_output=True, text=True, timeout=120,
                          env={**os.environ, "COLUMNS": "200"})
    if "mount" in proc.stderr and proc.returncode != 0 and "kernelband" not in proc.stderr:
        pytest.skip(f"no user namespaces here for a read-only bind mount: {proc.stderr.strip()[:200]}")
    return proc


def test_a_database_on_read_only_media_can_be_listed_and_reported(tmp_path):
    media = tmp_path / "media"
    media.mkdir()
    store = Store(media / "runs.db")
    run = store.create_run("examples:vector_add", "key", "greedy", "rewrite", 0, {"iterations": 1})
    store.add_candidate(run, 0, "def add(x, y):\n    return x + y\n", "h0", None, None, 0, 0, "the starting kernel")
    store.close()  # the last connection folds the WAL into the file
    before = sorted(os.listdir(media))
    cli = f"{sys.executable} -c 'from kernelband.cli import main; main()'"
    mount = tmp_path / "mnt"
    proc = _read_only_mount(media, mount, f"touch {mount}/probe 2>/dev/null && echo WRITABLE; "
                                          f"{cli} runs --db {mount}/runs.db && "
                                          f"{cli} report run:{run} --db {mount}/runs.db --format text")
    assert "WRITABLE" not in proc.stdout  # the mount is read-only indeed
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert "examples:vector_add" in proc.stdout and "greedy" in proc.stdout
    assert f"run {run}" in proc.stdout
    assert sorted(os.listdir(media)) == before  # nothing written beside it


def test_reading_opens_the_database_read_only(tmp_path):
    db = tmp_path / "runs.db"
    Store(db).close()
    reader = Store(db, read_only=True)
    assert reader.runs() == []
    with pytest.raises(sqlite3.OperationalError, match="readonly database"):
        reader.create_run("t", "k", "greedy", "rewrite", 0, {})


def test_an_older_database_gets_the_runs_reason_column(tmp_path):
    db = tmp_path / "old.db"
    con = sqlite3.connect(db)
    con.executescript("CREATE TABLE runs (id INTEGER PRIMARY KEY, bench_id INTEGER, task TEXT NOT NULL, "
                      "task_key TEXT NOT NULL, policy TEXT NOT NULL, proposer TEXT NOT NULL, seed INTEGER NOT NULL,"
                      " config TEXT NOT NULL, status TEXT NOT NULL, device TEXT NOT NULL DEFAULT '', created REAL "
                      "NOT NULL, finished REAL, summary TEXT);"
                      "INSERT INTO runs (task, task_key, policy, proposer, seed, config, status, created) "
                      "VALUES ('t', 'k', 'greedy', 'rewrite', 0, '{}', 'running', 0);")
    con.commit()
    con.close()
    assert Store(db, read_only=True).run(1).reason == ""  # read as it is, unchanged
    store = Store(db)
    store.end_run(1, RunStatus.FAILED, "the starting kernel fails to load")
    row = store.run(1)
    assert (row.status, row.reason) == ("failed", "the starting kernel fails to load")
    # and the column of the module a run hands back
    assert Store(db, read_only=True).handed_back(1) == "" and store.handed_back(1) == ""
    store.finish_run(1, "done", {}, handed_back="import triton\n")
    assert store.handed_back(1) == "import triton\n"


def test_two_databases_in_one_folder_keep_their_files_apart(tmp_path):
    assert artifacts_dir(tmp_path / "a.db") == tmp_path / "a"
    assert artifacts_dir(tmp_path / "b.db") == tmp_path / "b"
    assert artifacts_dir(tmp_path / "runs") == tmp_path / "runs.d"  # never the database file itself
