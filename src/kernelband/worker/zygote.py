"""The zygote: a process that imports torch and Triton once, then forks each worker from there.

A worker's start is mostly those imports (about 1.8 s of CPU each on a 2-core machine); a fork of a process
that has them is a few milliseconds. The zygote runs trusted code only and never touches CUDA, so that each
child initialises its own context after the fork. It starts with a worker's allow-listed environment
(evaluation/env.py): no secret is in its memory, so none is in a child's. Each child becomes an ordinary
worker (`main.serve`) before it reads a request: its own session, directory, log, environment, and then its
own guards and sandbox.

The parent's end (evaluation/zygote.py) talks over a SOCK_SEQPACKET socket, one JSON message a packet:
  parent -> zygote  {"id", "dir", "log", "env", "mode"} with the worker's socket passed along (SCM_RIGHTS)
  zygote -> parent  {"op": "ready"} once, {"op": "forked", "id", "pid"}, {"op": "exit", "pid", "code", "cpu"}
The zygote reaps its children and reports each exit code and CPU seconds, which only a parent process can
read. It ends
when the parent closes its end.
"""

from __future__ import annotations

import argparse
import json
import os
import select
import socket
import sys
import tempfile
import traceback

PACKET = 1 << 20


def _send(ctl: socket.socket, message: dict) -> None:
    ctl.send(json.dumps(message).encode())


def _child(request: dict, fd: int, ctl: socket.socket) -> None:
    """In the forked child: become the worker the request describes, serve it, and exit."""
    code = 1
    try:
        ctl.close()
        os.setsid()  # its own process group, which the parent signals as a whole (Worker.kill)
        os.chdir(request["dir"])
        log = os.open(request["log"], os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
        null = os.open(os.devnull, os.O_RDONLY)
        os.dup2(null, 0)
        os.dup2(log, 1)
        os.dup2(log, 2)
        os.close(log)
        os.close(null)
        os.environ.clear()
        os.environ.update(request["env"])
        tempfile.tempdir = None  # TMPDIR is the worker's own directory now
        from kernelband.worker.main import serve
        serve(fd, request["dir"], request["mode"])
        code = 0
    except SystemExit as exc:
        code = exc.code if isinstance(exc.code, int) else 1
    except BaseException:  # noqa: BLE001 - the child's failure is its log's, never the zygote's
        traceback.print_exc()
    finally:
        try:
            sys.stdout.flush()
            sys.stderr.flush()
        finally:
            os._exit(code)


def _reap(ctl: socket.socket) -> None:
    """Each ended child's exit code and CPU seconds (which reach only its parent's accounts) to the parent."""
    while True:
        try:
            pid, status, usage = os.wait4(-1, os.WNOHANG)
        except ChildProcessError:
            return
        if pid == 0:
            return
        _send(ctl, {"op": "exit", "pid": pid, "code": os.waitstatus_to_exitcode(status),
                    "cpu": usage.ru_utime + usage.ru_stime})


def serve(ctl: socket.socket) -> None:
    import torch  # noqa: F401 - what every worker would import: once here
    import triton  # noqa: F401
    import triton.testing  # noqa: F401

    import kernelband.worker.main  # noqa: F401

    _send(ctl, {"op": "ready", "pid": os.getpid()})
    while True:
        readable, _, _ = select.select([ctl], [], [], 0.2)
        _reap(ctl)
        if not readable:
            continue
        data, fds, _, _ = socket.recv_fds(ctl, PACKET, 1)
        if not data:
            return  # the parent closed its end
        request = json.loads(data)
        pid = os.fork()
        if pid == 0:
            _child(request, fds[0], ctl)
        for fd in fds:
            os.close(fd)
        _send(ctl, {"op": "forked", "id": request["id"], "pid": pid})


def main() -> None:
    parser = argparse.ArgumentParser(prog="kernelband.worker.zygote")
    parser.add_argument("--fd", type=int, required=True)
    args = parser.parse_args()
    ctl = socket.socket(fileno=args.fd)
    try:
        serve(ctl)
    except (OSError, KeyboardInterrupt):
        pass


if __name__ == "__main__":
    main()
