"""A scripted OpenAI-compatible chat-completions server on 127.0.0.1, for the LLM tests: each request gets
the next scripted reply (a function of the request handler), and every request is kept for the test to read.
The tests drive it through the real openai client, never a faked one."""

from __future__ import annotations

import contextlib
import json
import threading
import time
from collections import deque
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

MODEL = "test-model"


def completion(content: str, finish_reason: str = "stop", tokens=(120, 80)) -> dict:
    return {"id": "chatcmpl-1", "object": "chat.completion", "created": int(time.time()), "model": MODEL,
            "choices": [{"index": 0, "message": {"role": "assistant", "content": content},
                         "finish_reason": finish_reason, "logprobs": None}],
            "usage": {"prompt_tokens": tokens[0], "completion_tokens": tokens[1],
                      "total_tokens": tokens[0] + tokens[1]}}


class Server:
    """A chat-completions endpoint: each request gets the next scripted reply, a function of the handler."""

    def __init__(self):
        self.script: deque = deque()
        self.default = None  # the reply once the script is over (None: HTTP 500, "script is over")
        self.requests: list[dict] = []  # {"at", "headers", "body"}
        self.stop = threading.Event()
        server = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self):
                body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
                headers = {k.lower(): v for k, v in self.headers.items()}
                server.requests.append({"at": time.monotonic(), "path": self.path, "headers": headers,
                                        "body": body})
                if server.script:
                    reply = server.script.popleft()
                else:
                    reply = server.default or status(500, {"error": "script is over"})
                with contextlib.suppress(OSError):  # the client may have given up on a slow reply
                    reply(self)

            def log_message(self, *args):
                pass

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.httpd.server_address[1]}/v1"
        threading.Thread(target=self.httpd.serve_forever, args=(0.05,), daemon=True).start()

    def close(self):
        self.stop.set()
        self.httpd.shutdown()
        self.httpd.server_close()


def send(handler, code: int, body: bytes, headers: dict | None = None, length: int | None = None):
    handler.send_response(code)
    handler.send_header("Content-Type", "application/json")
    handler.send_header("Content-Length", str(len(body) if length is None else length))
    for k, v in (headers or {}).items():
        handler.send_header(k, v)
    handler.end_headers()
    handler.wfile.write(body)


def ok(content: str, **kw):
    return lambda h: send(h, 200, json.dumps(completion(content, **kw)).encode())


def status(code: int, body: dict, headers: dict | None = None):
    return lambda h: send(h, code, json.dumps(body).encode(), headers)


def serve():
    """A server for a `with` block, closed after it."""
    return contextlib.closing(Server())
