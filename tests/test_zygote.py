"""Workers forked from the zygote (evaluation/zygote.py, worker/zygote.py): the fork is used where it is
meant to be, a forked worker is as much a worker of its own as a started one (session, environment, sandbox,
exit code), and a zygote that dies leaves workers to start as processes of their own."""

from __future__ import annotations

import os
import signal
import subprocess

import psutil
import pytest

from kernelband.evaluation import zygote
from kernelband.evaluation.gone import WorkerGone
from kernelband.evaluation.pool import WorkerPool


def test_where_workers_are_forked_is_a_setting(monkeypatch):
    monkeypatch.delenv("KERNELBAND_ZYGOTE", raising=False)
    assert zygote.enabled("interpreter") and not zygote.enabled("gpu")  # a GPU's workers: not yet checked there
    monkeypatch.setenv("KERNELBAND_ZYGOTE", "1")
    assert zygote.enabled("gpu")
    monkeypatch.setenv("KERNELBAND_ZYGOTE", "0")
    assert not zygote.enabled("interpreter")


def test_a_forked_worker_is_a_child_of_the_zygote_in_a_session_of_its_own_with_no_secret(monkeypatch):
    monkeypatch.setenv("KERNELBAND_ZYGOTE", "1")
    monkeypatch.setenv("OPENAI_API_KEY", "sk-secret-of-the-parent")
    z = zygote.Zygote("interpreter")  # started now, with the secret in this process's environment
    monkeypatch.setattr(zygote, "_zygotes", {"interpreter": z})
    pool = WorkerPool("interpreter", warm=0)
    try:
        worker = pool.acquire()
        assert isinstance(worker.proc, zygote.Child) and worker.ready.pid == worker.proc.pid
        proc = psutil.Process(worker.proc.pid)
        assert proc.ppid() == z.proc.pid
        assert os.getpgid(worker.proc.pid) == worker.proc.pid and os.getsid(worker.proc.pid) == worker.proc.pid
        assert proc.cwd() == worker.dir
        for pid in (z.proc.pid, worker.proc.pid):  # neither the zygote's memory nor a child's holds it
            assert b"sk-secret-of-the-parent" not in open(f"/proc/{pid}/environ", "rb").read()
        assert worker.ready.sandbox["audit_hook"]  # its guards and sandbox are its own, set after the fork
        pool.release(worker)
    finally:
        pool.close()
        z.close()


def test_a_forked_worker_killed_by_a_signal_is_reported_so():
    if not zygote.enabled("interpreter"):
        pytest.skip("KERNELBAND_ZYGOTE=0")
    pool = WorkerPool("interpreter", warm=0)
    try:
        worker = pool.acquire()
        assert isinstance(worker.proc, zygote.Child)
        os.kill(worker.proc.pid, signal.SIGKILL)
        assert worker.proc.wait(timeout=30) == -signal.SIGKILL
        with pytest.raises(WorkerGone, match="SIGKILL"):
            worker.request({"op": "features"}, 30)
        pool.release(worker)
    finally:
        pool.close()


def test_a_child_that_outlives_its_zygote_is_still_waited_for_and_new_workers_start_on_their_own(monkeypatch):
    monkeypatch.setenv("KERNELBAND_ZYGOTE", "1")
    z = zygote.Zygote("interpreter")
    monkeypatch.setattr(zygote, "_zygotes", {"interpreter": z})
    pool = WorkerPool("interpreter", warm=0)
    try:
        forked = pool.acquire()
        assert isinstance(forked.proc, zygote.Child)
        z.proc.kill()
        z.proc.wait(timeout=30)
        with pytest.raises(subprocess.TimeoutExpired):
            forked.proc.wait(timeout=1)  # still running, with no one to report its exit
        os.kill(forked.proc.pid, signal.SIGKILL)
        assert forked.proc.wait(timeout=30) == zygote.UNKNOWN_EXIT
        started = pool.acquire()
        assert isinstance(started.proc, subprocess.Popen) and started.alive()
        for worker in (forked, started):
            pool.release(worker)
    finally:
        pool.close()
        z.close()
