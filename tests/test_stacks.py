"""`kill -USR1` on a sweep prints every thread's stack and the sweep carries on (kernelband.stacks)."""

import os
import signal
import subprocess
import sys
import textwrap
import time

CHILD = textwrap.dedent("""
    import signal, sys, threading, time
    from kernelband import stacks

    stacks.dump_on(signal.SIGUSR1)
    stop = threading.Event()

    def parked():
        stop.wait()

    def churn():  # threads start and end all the time, as the evaluator's spawners do
        while not stop.is_set():
            batch = [threading.Thread(target=time.sleep, args=(0.0005,)) for _ in range(8)]
            for t in batch:
                t.start()
            for t in batch:
                t.join()

    threading.Thread(target=parked, name="parked-worker", daemon=True).start()
    for i in range(4):
        threading.Thread(target=churn, name=f"churn-{i}", daemon=True).start()
    print("ready", flush=True)
    sys.stdin.read()  # until the test closes stdin
    stop.set()
    print("done", flush=True)
""")


def test_usr1_prints_every_threads_stack_and_the_process_carries_on(tmp_path):
    # faulthandler.register(SIGUSR1, all_threads=True) died with SIGSEGV in 9 of 10 such children
    script = tmp_path / "child.py"
    script.write_text(CHILD)
    proc = subprocess.Popen([sys.executable, str(script)], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, env={**os.environ, "PYTHONUNBUFFERED": "1"})
    try:
        assert proc.stdout.readline().strip() == "ready"
        for _ in range(100):
            proc.send_signal(signal.SIGUSR1)
            time.sleep(0.005)
        time.sleep(0.2)
        proc.send_signal(signal.SIGUSR1)  # one more, alone: its dump is complete
        out, errors = proc.communicate("", timeout=60)
    finally:
        proc.kill()
    assert proc.returncode == 0, errors
    assert out.strip() == "done"
    dumps = errors.count("Thread MainThread (most recent call last):")
    assert 1 <= dumps <= 101  # signals that arrive together are handled once
    assert errors.count("Thread parked-worker (most recent call last):") == dumps
    assert "in parked" in errors and "in churn" in errors
