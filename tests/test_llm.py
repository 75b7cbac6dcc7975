"""The LLM proposer against a scripted OpenAI-compatible server on 127.0.0.1, through the real openai client.

Each test scripts the server's replies, one per HTTP request, and reads back the requests it received."""

from __future__ import annotations

import email.utils
import json
import re
import socket
import sys
import threading
import time

import pytest
from llm_server import MODEL, Server, completion, ok, send, status

from kernelband.errors import SetupError
from kernelband.proposers.llm import LLMConfig, LLMProposer, extract_code
from kernelband.proposers.prompt import phi_summary
from kernelband.search.core import Attempt, Candidate, Context, ProposalOutcome, Strategy

pytestmark = pytest.mark.timeout(30)

API_KEY = "sk-kernelband-llm-test-key"

PARENT = '''import torch
import triton
import triton.language as tl


@triton.jit
def add_kernel(x_ptr, y_ptr, out_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    tl.store(out_ptr + offs, tl.load(x_ptr + offs, mask=offs < n) + tl.load(y_ptr + offs, mask=offs < n),
             mask=offs < n)


def add(x, y):
    out = torch.empty_like(x)
    add_kernel[(triton.cdiv(x.numel(), 128),)](x, y, out, x.numel(), BLOCK=128)
    return out
'''
GOOD = PARENT.replace("128", "1024")
STRATEGY = Strategy("vectorize_memory", "Use wider blocks so that each program moves more bytes per load.",
                    "DRAM")
HISTORY_ERROR = ('Traceback (most recent call last):\n  File "kernel.py", line 9\n'
                 "CompilationError: BLOCK must be a power of 2")
RATIONALE = "1024-element blocks move 8x more bytes per program."


def context(**kw) -> Context:
    defaults = dict(task_name="vector_add", entry="add", description="Element-wise add of two vectors.",
                    phi={"dram_bw_pct": 41.25, "registers_per_thread": 26.0, "l2_hit_rate": None},
                    history=[Attempt("tile_sizes", "compile_error", "does not compile", HISTORY_ERROR)],
                    seed=7)
    return Context(**{**defaults, **kw})


def reply_with(code: str) -> str:
    return f"Rationale: {RATIONALE}\n\n```python\n{code}```\n"


@pytest.fixture
def server():
    s = Server()
    yield s
    s.close()


def proposer(server: Server, **kw) -> LLMProposer:
    defaults = dict(base_url=server.url, model=MODEL, api_key=API_KEY, max_tokens=4096, max_retries=0)
    return LLMProposer(LLMConfig(**{**defaults, **kw}))


def propose(p: LLMProposer, **kw):
    return p.propose(Candidate(3, PARENT), STRATEGY, context(**kw))


def test_good_kernel_and_what_was_sent(server):
    server.script.append(ok(reply_with(GOOD)))
    proposal = propose(proposer(server))
    assert proposal.source == GOOD and proposal.error == ""
    assert proposal.rationale == RATIONALE
    assert (proposal.tokens_in, proposal.tokens_out) == (120, 80)
    [call] = proposal.calls
    assert call.outcome == ProposalOutcome.OK and call.model == MODEL and call.attempts == 1
    assert (call.tokens_in, call.tokens_out) == (120, 80) and call.latency_s >= 0

    [request] = server.requests
    body = request["body"]
    assert request["path"] == "/v1/chat/completions"
    assert body["model"] == MODEL and body["temperature"] == 1.0 and body["max_tokens"] == 4096
    assert body["seed"] == 7
    prompt = "\n".join(m["content"] for m in body["messages"])
    assert [m["role"] for m in body["messages"]] == ["system", "user"]
    assert PARENT.strip() in prompt and "vectorize_memory" in prompt and STRATEGY.description in prompt
    assert "dram_bw_pct: 41.2 %" in prompt and "registers_per_thread: 26" in prompt
    assert "l2_hit_rate" not in prompt and "not measured" not in prompt  # nothing measured it: no line
    assert "BLOCK must be a power of 2" in prompt and "tile_sizes" in prompt
    assert "vector_add" in prompt and "`add`" in prompt and "```python" in prompt
    # The key goes in the Authorization header, never into the prompt.
    assert request["headers"]["authorization"] == f"Bearer {API_KEY}"
    assert API_KEY not in json.dumps(body)


@pytest.mark.parametrize("reply, outcome, error", [
    (reply_with(GOOD.replace("def add(x, y):", "def add(x, y)")), "syntax_error", "does not parse"),
    ("I would use wider blocks, but here is no code.", "no_code", "no ```python block"),
    (reply_with(GOOD.replace("def add(", "def plus(")), "missing_entry", "entry function 'add'"),
])
def test_unusable_code_costs_no_evaluation(server, reply, outcome, error):
    server.script.append(ok(reply))
    proposal = propose(proposer(server))
    assert proposal.source is None and error in proposal.error
    assert proposal.calls[0].outcome == outcome == proposal.outcome and proposal.tokens_in == 120


def test_reply_cut_off_at_max_tokens(server):
    server.script.append(ok(reply_with(GOOD), finish_reason="length"))
    proposal = propose(proposer(server))
    assert proposal.source is None and "cut off" in proposal.error
    assert proposal.calls[0].outcome == "truncated" and proposal.tokens_out == 80


@pytest.mark.parametrize("length", ["honest", "promised"])
def test_cut_off_body_is_an_http_error(server, length):
    """A cut-off JSON body: either its length says so, or the connection closes before the promised length."""
    body = json.dumps(completion(reply_with(GOOD))).encode()[:150]
    promised = len(body) if length == "honest" else len(body) + 500
    server.script.append(lambda h: send(h, 200, body, length=promised))
    proposal = propose(proposer(server))
    assert proposal.source is None
    [call] = proposal.calls
    assert call.outcome == "http_error" and call.error and call.attempts == 1
    assert len(server.requests) == 1


def test_429_honours_retry_after_seconds(server):
    server.script.extend([status(429, {"error": {"message": "slow down"}}, {"Retry-After": "1"}),
                          ok(reply_with(GOOD))])
    proposal = propose(proposer(server, max_retries=2))
    assert proposal.source == GOOD and proposal.calls[0].attempts == 2
    first, second = server.requests
    assert second["at"] - first["at"] >= 0.95
    assert second["headers"]["authorization"] == f"Bearer {API_KEY}"


def test_5xx_honours_retry_after_date(server):
    def overloaded(handler):
        in_2s = email.utils.formatdate(time.time() + 2, usegmt=True)
        status(503, {"error": {"message": "overloaded"}}, {"Retry-After": in_2s})(handler)

    server.script.extend([overloaded, ok(reply_with(GOOD))])
    proposal = propose(proposer(server, max_retries=1))
    assert proposal.source == GOOD and len(server.requests) == 2
    assert server.requests[1]["at"] - server.requests[0]["at"] >= 0.95  # the date has whole seconds


def test_http_error_after_retries(server):
    server.script.extend([status(500, {"error": {"message": "boom"}}, {"retry-after-ms": "50"})] * 2)
    proposal = propose(proposer(server, max_retries=1))
    assert proposal.source is None and "HTTP 500" in proposal.error and "boom" in proposal.error
    assert proposal.calls[0].outcome == "http_error" and proposal.calls[0].attempts == 2


def closed_port_url() -> str:
    """An endpoint on this host where nothing listens: connecting is refused."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    return f"http://127.0.0.1:{port}/v1"


def test_an_endpoint_that_cannot_be_reached_is_a_setup_error():
    """A wrong --base-url would fail every proposal the same way: the run stops with one line that says what
    to fix, instead of spending its iterations on `connection failed`."""
    p = LLMProposer(LLMConfig(base_url=closed_port_url(), model=MODEL, api_key=API_KEY, max_retries=0))
    with pytest.raises(SetupError, match=r"cannot reach the LLM endpoint at http://127\.0\.0\.1:\d+/v1: .*"
                                         r"check --base-url"):
        propose(p)


@pytest.mark.parametrize("code, text", [(401, "refused the API key (HTTP 401)"),
                                        (403, "refused the API key (HTTP 403)"),
                                        (404, f"answered HTTP 404 for model '{MODEL}'; check --model")])
def test_a_refused_key_or_an_unknown_model_before_any_success_is_a_setup_error(server, code, text):
    server.script.append(status(code, {"error": {"message": "no"}}))
    with pytest.raises(SetupError, match=re.escape(text)):
        propose(proposer(server))


def test_once_a_call_has_gone_through_the_same_errors_are_recorded_like_any_other(server):
    server.script.extend([ok(reply_with(GOOD)), status(401, {"error": {"message": "expired"}}),
                          status(404, {"error": {"message": "gone"}})])
    p = proposer(server)
    assert propose(p).source == GOOD
    for code in (401, 404):
        proposal = propose(p)
        assert proposal.source is None and f"HTTP {code}" in proposal.error
        assert proposal.calls[0].outcome == "http_error"


def test_slow_reply_times_out(server):
    def slow(handler):
        server.stop.wait(10)
        send(handler, 200, json.dumps(completion(reply_with(GOOD))).encode())

    server.script.extend([slow, slow])
    started = time.monotonic()
    proposal = propose(proposer(server, timeout_s=0.5, max_retries=1))
    assert time.monotonic() - started < 4
    assert proposal.source is None and proposal.calls[0].outcome == "timeout"
    assert len(server.requests) == 2 and proposal.calls[0].attempts == 2  # timeouts are retried


def test_budget_in_calls(server):
    server.script.extend([ok("no code"), ok(reply_with(GOOD)), ok(reply_with(GOOD))])
    p = proposer(server, budget_calls=2)
    assert propose(p).calls[0].outcome == "no_code"
    assert propose(p).source == GOOD
    spent = propose(p)
    assert spent.source is None and spent.error == "LLM budget spent: 2 of 2 calls made"
    assert spent.calls == [] and spent.tokens_in == 0
    assert len(server.requests) == 2


def test_budget_in_tokens(server):
    server.script.extend([ok(reply_with(GOOD), tokens=(100, 50)), ok(reply_with(GOOD))])
    p = proposer(server, budget_tokens=120)
    assert propose(p).source == GOOD
    spent = propose(p)
    assert spent.source is None and spent.error.startswith("LLM budget spent: 150 of 120 tokens")
    assert len(server.requests) == 1


def test_config_from_env(monkeypatch):
    for var in ("KERNELBAND_LLM_BASE_URL", "KERNELBAND_LLM_MODEL", "KERNELBAND_LLM_API_KEY",
                "OPENAI_BASE_URL", "OPENAI_API_KEY"):
        monkeypatch.delenv(var, raising=False)
    assert not LLMConfig.from_env().configured()
    monkeypatch.setenv("OPENAI_API_KEY", "sk-fallback")
    monkeypatch.setenv("OPENAI_BASE_URL", "https://fallback.example/v1")
    assert not LLMConfig.from_env().configured()  # no model
    monkeypatch.setenv("KERNELBAND_LLM_MODEL", "m")
    monkeypatch.setenv("KERNELBAND_LLM_API_KEY", "sk-own")
    config = LLMConfig.from_env(max_tokens=100)
    assert config.configured() and config.api_key == "sk-own" and config.max_tokens == 100
    assert config.base_url == "https://fallback.example/v1"
    assert "sk-own" not in repr(config)
    monkeypatch.delenv("OPENAI_API_KEY")
    monkeypatch.delenv("KERNELBAND_LLM_API_KEY")
    assert LLMConfig.from_env().configured()  # a local server may need no key
    assert LLMConfig.from_env(model="m2", base_url=None).configured() is False


def test_extract_code():
    text = ("Plan:\n```bash\nls -la /a/listing/longer/than/the/code\n```\n**Rationale:** fuse loads\n"
            "```\nx = 1\n```\nA short test:\n```python\nx\n```\n")
    assert extract_code(text) == ("x = 1\n", "fuse loads")
    assert extract_code("```python\ndef add(): pass\n") == (None, "")  # an unclosed block


def test_works_without_openai(monkeypatch):
    from kernelband.errors import UserError

    monkeypatch.setitem(sys.modules, "openai", None)  # `import openai` now fails
    with pytest.raises(UserError, match="openai package"):
        LLMProposer(LLMConfig(base_url="http://127.0.0.1:9/v1", model=MODEL))


def test_phi_summary_never_invents():
    assert phi_summary({}) == ""
    assert phi_summary({"l2_hit_rate": None, "dram_bw_pct": 50.0}).splitlines() == [
        "- dram_bw_pct: 50.0 %  (DRAM bandwidth used, of the device's peak; high means memory-bound)"]


# -- outcomes, time limits, duplicates ------------------------------------------------------------------------
def test_429_after_the_retries_is_rate_limited_not_a_plain_http_error(server):
    server.script.extend([status(429, {"error": {"message": "slow down"}}, {"retry-after-ms": "20"})] * 2)
    proposal = propose(proposer(server, max_retries=1))
    assert proposal.source is None and proposal.outcome == ProposalOutcome.RATE_LIMITED
    [call] = proposal.calls
    assert call.outcome == ProposalOutcome.RATE_LIMITED and call.attempts == 2 and "HTTP 429" in call.error


def slow_reply(server: Server, seconds: float):
    def reply(handler):
        server.stop.wait(seconds)
        send(handler, 200, json.dumps(completion(reply_with(GOOD))).encode())
    return reply


def test_the_live_view_shows_how_long_the_llm_has_been_out(server):
    from rich.console import Console

    from kernelband.cli.optimize import LiveView

    server.script.append(slow_reply(server, 1.5))
    p = proposer(server, timeout_s=10)
    view = LiveView("examples:vector_add", "greedy", "llm", 3, p.waiting_s)
    console = Console(width=120, record=True)

    def shown() -> str:
        console.print(view.render())
        return console.export_text()

    assert p.waiting_s() is None and "waiting for the LLM" not in shown()
    done = []
    worker = threading.Thread(target=lambda: done.append(propose(p)))
    worker.start()
    deadline = time.monotonic() + 5
    while not server.requests and time.monotonic() < deadline:
        time.sleep(0.02)
    time.sleep(1.1)
    assert p.waiting_s() >= 1.0 and "waiting for the LLM (1 s)" in shown()
    worker.join(10)
    assert done[0].source == GOOD and p.waiting_s() is None and "waiting for the LLM" not in shown()


def test_timeout_and_retries_from_the_environment(server, monkeypatch):
    monkeypatch.setenv("KERNELBAND_LLM_TIMEOUT", "0.4")
    monkeypatch.setenv("KERNELBAND_LLM_RETRIES", "0")
    config = LLMConfig.from_env(base_url=server.url, model=MODEL)
    assert (config.timeout_s, config.max_retries) == (0.4, 0)
    server.script.extend([slow_reply(server, 5)] * 3)
    proposal = LLMProposer(config).propose(Candidate(3, PARENT), STRATEGY, context())
    [call] = proposal.calls
    assert call.outcome == ProposalOutcome.TIMEOUT and call.attempts == 1 and len(server.requests) == 1
    assert call.latency_s < 2 and "no reply within 0.4 s" in call.error


def test_flags_win_over_the_environment_and_bad_values_are_one_line(server, monkeypatch):
    from kernelband.errors import UserError
    from kernelband.search.session import ProposerChoice, make_proposer

    monkeypatch.setenv("KERNELBAND_LLM_TIMEOUT", "300")
    monkeypatch.setenv("KERNELBAND_LLM_RETRIES", "9")
    p = make_proposer(ProposerChoice("llm", model=MODEL, base_url=server.url, timeout_s=0.4, max_retries=1))
    server.script.extend([slow_reply(server, 5)] * 3)
    [call] = p.propose(Candidate(3, PARENT), STRATEGY, context()).calls
    assert call.outcome == ProposalOutcome.TIMEOUT and call.attempts == 2 and len(server.requests) == 2
    with pytest.raises(UserError, match=r"^--llm-timeout must be a number of seconds above 0 \(got 0\)$"):
        make_proposer(ProposerChoice("llm", model=MODEL, base_url=server.url, timeout_s=0))
    with pytest.raises(UserError, match=r"^--llm-retries must be a whole number of retries, 0 or more"):
        make_proposer(ProposerChoice("llm", model=MODEL, base_url=server.url, max_retries=-1))
    monkeypatch.setenv("KERNELBAND_LLM_TIMEOUT", "soon")
    with pytest.raises(UserError, match=r"^KERNELBAND_LLM_TIMEOUT must be a number of seconds above 0 \(got 'soon'\)"):
        LLMConfig.from_env()


def test_a_reply_that_only_reformats_a_known_candidate_is_a_duplicate_and_its_tokens_count(server):
    from kernelband.search.core import normalized_hash

    reformatted = "# the same kernel, reformatted\n" + GOOD.replace("\n\n\n", "\n\n").replace("1024", "(1024)")
    assert reformatted != GOOD and normalized_hash(reformatted) == normalized_hash(GOOD)
    server.script.extend([ok(reply_with(reformatted))])
    proposal = propose(proposer(server), known={normalized_hash(PARENT): 0, normalized_hash(GOOD): 4})
    assert proposal.source is None and proposal.outcome == ProposalOutcome.DUPLICATE
    assert proposal.error == "the same code as candidate 4" and proposal.calls[0].outcome == "duplicate"
    assert (proposal.tokens_in, proposal.tokens_out) == (120, 80) and proposal.rationale == RATIONALE
