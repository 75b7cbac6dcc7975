"""The wire between the trusted parent and a worker process.

Messages are length-prefixed JSON on a socket pair. JSON, never pickle: a
worker runs untrusted code, and unpickling what it sends would hand that code
the parent. Tensors do not travel on the socket; they are written to raw
tensor files in the worker's directory (`kernelband.tensorfile`) and named,
with their layout, in the message.
"""

from __future__ import annotations

import json
import socket
import struct
import time

_HEADER = struct.Struct("!I")
# A worker that announces a larger message is broken or hostile.
MAX_MESSAGE_BYTES = 64 * 1024 * 1024


class ProtocolError(RuntimeError):
    """The peer closed the connection or sent something that is not a message."""


def send(sock: socket.socket, message: dict) -> None:
    data = json.dumps(message, allow_nan=True, default=str).encode()
    sock.sendall(_HEADER.pack(len(data)) + data)


def _recv_exact(sock: socket.socket, n: int, deadline: float | None) -> bytes:
    chunks = []
    while n:
        if deadline is not None:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                raise TimeoutError
            sock.settimeout(remaining)
        else:
            sock.settimeout(None)
        try:
            chunk = sock.recv(min(n, 1 << 20))
        except TimeoutError as exc:
            raise TimeoutError from exc
        if not chunk:
            raise ProtocolError("connection closed")
        chunks.append(chunk)
        n -= len(chunk)
    return b"".join(chunks)


def recv(sock: socket.socket, timeout: float | None = None) -> dict:
    """Read one message; TimeoutError after `timeout` seconds, ProtocolError on EOF."""
    deadline = None if timeout is None else time.monotonic() + timeout
    (size,) = _HEADER.unpack(_recv_exact(sock, _HEADER.size, deadline))
    if size > MAX_MESSAGE_BYTES:
        raise ProtocolError(f"message of {size} bytes is over the limit")
    try:
        message = json.loads(_recv_exact(sock, size, deadline))
    except json.JSONDecodeError as exc:
        raise ProtocolError(f"not JSON: {exc}") from exc
    if not isinstance(message, dict):
        raise ProtocolError("message is not an object")
    return message
