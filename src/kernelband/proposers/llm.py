"""The LLM proposer: asks any OpenAI-compatible chat endpoint to rewrite a kernel module along a strategy.

One proposal is one chat completion. The prompt (`kernelband.proposers.prompt`) carries the task, its input
shapes, the strategy, the parent's source, times and hardware profile, what was tried before and the beam's
reflection; the reply must hold one ```python block with the whole module. The code is checked (it parses, it
defines the entry function, it is not a candidate the run has already) before an evaluation is spent on it.

Retries are the official client's: on 408/409/429/5xx, connection errors and timeouts (`timeout_s` per
request) it retries up to `max_retries` times with exponential backoff, honouring `Retry-After` (seconds or an HTTP date) and
`retry-after-ms`. The budget in calls and tokens is hard: once spent, `propose` answers without calling.
Every call is recorded in `Proposal.calls` as an `LLMCall`; `waiting_s` says how long the oldest call in
flight has been out, so that a hung endpoint is visible in the live view.
"""

from __future__ import annotations

import ast
import os
import re
import threading
import time
from dataclasses import dataclass, field, replace

from kernelband import pyast
from kernelband.errors import SetupError, UserError
from kernelband.proposers.base import ProposerBase
from kernelband.proposers.prompt import build_messages
from kernelband.search.core import (
    Candidate,
    Context,
    LLMCall,
    Proposal,
    ProposalOutcome,
    Strategy,
    normalized_hash,
)

RATIONALE_CHARS = 400


@dataclass
class LLMConfig:
    base_url: str | None = None
    model: str | None = None
    api_key: str | None = field(default=None, repr=False)
    temperature: float = 1.0
    max_tokens: int = 8192
    timeout_s: float = 120.0
    max_retries: int = 4
    budget_calls: int | None = None
    budget_tokens: int | None = None  # prompt and reply tokens, summed over all calls

    @classmethod
    def from_env(cls, **overrides) -> LLMConfig:
        """KERNELBAND_LLM_BASE_URL / _MODEL / _API_KEY, else OPENAI_BASE_URL / OPENAI_API_KEY, and
        KERNELBAND_LLM_TIMEOUT / _RETRIES; `overrides` (any field) win over the environment."""
        env = os.environ.get
        config = cls(base_url=env("KERNELBAND_LLM_BASE_URL") or env("OPENAI_BASE_URL") or None,
                     model=env("KERNELBAND_LLM_MODEL") or None,
                     api_key=env("KERNELBAND_LLM_API_KEY") or env("OPENAI_API_KEY") or None)
        if env("KERNELBAND_LLM_TIMEOUT"):
            config.timeout_s = check_timeout(env("KERNELBAND_LLM_TIMEOUT"), "KERNELBAND_LLM_TIMEOUT")
        if env("KERNELBAND_LLM_RETRIES"):
            config.max_retries = check_retries(env("KERNELBAND_LLM_RETRIES"), "KERNELBAND_LLM_RETRIES")
        return replace(config, **overrides)

    def configured(self) -> bool:
        """A model, and somewhere to send it: a base URL (a local server may need no key) or an API key."""
        return bool(self.model) and bool(self.base_url or self.api_key)


def check_timeout(value, name: str) -> float:
    """`value` as seconds per request, or a one-line error that names `name` (the flag or variable)."""
    try:
        seconds = float(value)
    except (TypeError, ValueError):
        seconds = float("nan")
    if not seconds > 0 or seconds == float("inf"):
        raise UserError(f"{name} must be a number of seconds above 0 (got {value!r})")
    return seconds


def check_retries(value, name: str) -> int:
    """`value` as a count of retries, or a one-line error that names `name`."""
    try:
        retries = int(value)
    except (TypeError, ValueError):
        retries = -1
    if retries < 0:
        raise UserError(f"{name} must be a whole number of retries, 0 or more (got {value!r})")
    return retries


# -- the reply ----------------------------------------------------------------------------------------------
FENCE = re.compile(r"^[ \t]*```[ \t]*([\w+-]*)[^\n]*\n(.*?)^[ \t]*```", re.DOTALL | re.MULTILINE)
CODE_LANGUAGES = ("python", "py", "python3", "")
RATIONALE_LABEL = re.compile(r"^[*_#\s]*rationale[*_\s]*:[*_\s]*", re.IGNORECASE)


def extract_code(text: str) -> tuple[str | None, str]:
    """The longest ```python (or unlabelled) block, the last of equals, and the rationale: the text line
    before it."""
    blocks = [m for m in FENCE.finditer(text) if m.group(1).lower() in CODE_LANGUAGES]
    if not blocks:
        return None, ""
    best = max(reversed(blocks), key=lambda m: len(m.group(2)))
    before = [line.strip() for line in text[:best.start()].splitlines() if line.strip()]
    rationale = RATIONALE_LABEL.sub("", before[-1]).strip("*_ ") if before else ""
    return best.group(2), rationale[:RATIONALE_CHARS]


def defines(tree: ast.Module, name: str) -> bool:
    """Whether the module binds `name` at top level (a def, an assignment or an import)."""
    for node in tree.body:
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
            bound = [node.name]
        elif isinstance(node, ast.Assign):
            bound = [t.id for t in node.targets if isinstance(t, ast.Name)]
        elif isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name):
            bound = [node.target.id]
        elif isinstance(node, ast.Import | ast.ImportFrom):
            bound = [a.asname or a.name for a in node.names]
        else:
            continue
        if name in bound:
            return True
    return False


def judge_reply(text: str, finish_reason: str | None, context: Context
                ) -> tuple[str | None, str, ProposalOutcome, str]:
    """(source or None, rationale, outcome, error) for a reply's text."""
    if finish_reason == "length":
        return None, "", ProposalOutcome.TRUNCATED, "the reply was cut off at max_tokens"
    source, rationale = extract_code(text)
    if source is None:
        return None, "", ProposalOutcome.NO_CODE, "the reply has no ```python block"
    try:
        tree = pyast.parse(source)
    except SyntaxError as exc:
        return (None, rationale, ProposalOutcome.SYNTAX_ERROR,
                f"the code does not parse: line {exc.lineno}: {exc.msg}")
    if not defines(tree, context.entry):
        return (None, rationale, ProposalOutcome.MISSING_ENTRY,
                f"the code does not define the entry function {context.entry!r}")
    same = context.known.get(normalized_hash(source))
    if same is not None:
        return None, rationale, ProposalOutcome.DUPLICATE, f"the same code as candidate {same}"
    return source, rationale, ProposalOutcome.OK, ""


# -- the proposer -------------------------------------------------------------------------------------------
class LLMProposer(ProposerBase):
    name = "llm"
    uses_profile = True  # the prompt summarises φ

    def __init__(self, config: LLMConfig):
        try:
            import openai
        except ImportError as exc:
            raise UserError("the LLM proposer needs the openai package: pip install openai") from exc
        if not config.model:
            raise UserError("the LLM proposer needs a model (KERNELBAND_LLM_MODEL or --model)")
        self.config = config
        self._openai = openai
        self._local = threading.local()  # HTTP requests of the current thread's call, retries included
        self._client = openai.OpenAI(
            base_url=config.base_url, api_key=config.api_key or "EMPTY", timeout=config.timeout_s,
            max_retries=config.max_retries,
            http_client=openai.DefaultHttpxClient(event_hooks={"request": [self._count_request],
                                                               "response": [self._heard]}))
        self._lock = threading.Lock()
        self._out: dict[int, float] = {}  # calls in flight: their thread -> when they started (perf_counter)
        self.calls = 0
        self.tokens = 0
        # Whether the endpoint ever answered (any HTTP response), and whether a call ever succeeded: until
        # then, a refused connection, a refused key or an unknown path or model is a set-up mistake that
        # every call would repeat, so the run stops with a one-line error instead (`_misconfigured`).
        self.answered = False
        self.succeeded = False

    def _count_request(self, _request) -> None:
        self._local.requests = getattr(self._local, "requests", 0) + 1

    def _heard(self, _response) -> None:
        self.answered = True

    def _misconfigured(self, exc) -> SetupError | None:
        """The error to stop the run with, when `exc` says the endpoint is set up wrong (not a passing failure:
        once a call has gone through, the same errors are recorded like any other)."""
        openai, where = self._openai, self.config.base_url or "the default OpenAI endpoint"
        if isinstance(exc, openai.APITimeoutError) or self.succeeded:
            return None
        if isinstance(exc, openai.APIConnectionError) and not self.answered:
            cause = _short(str(exc.__cause__ or exc), 160)
            return SetupError(f"cannot reach the LLM endpoint at {where}: {cause}; check --base-url "
                              "(KERNELBAND_LLM_BASE_URL)")
        code = getattr(exc, "status_code", None)
        if code in (401, 403):
            return SetupError(f"the LLM endpoint at {where} refused the API key (HTTP {code}); check "
                              "KERNELBAND_LLM_API_KEY (or OPENAI_API_KEY)")
        if code == 404:
            return SetupError(f"the LLM endpoint at {where} answered HTTP 404 for model {self.config.model!r}; "
                              "check --model and that --base-url is the API's root (often ending in /v1)")
        return None

    def _failure(self, exc) -> tuple[ProposalOutcome, str]:
        """(outcome, error) of a call the endpoint failed, after the retries."""
        if isinstance(exc, self._openai.APITimeoutError):
            return ProposalOutcome.TIMEOUT, f"no reply within {self.config.timeout_s:g} s"
        if isinstance(exc, self._openai.APIStatusError):
            outcome = ProposalOutcome.RATE_LIMITED if exc.status_code == 429 else ProposalOutcome.HTTP_ERROR
            return outcome, f"HTTP {exc.status_code}: {_short(exc.message)}"
        return ProposalOutcome.HTTP_ERROR, f"connection failed: {_short(str(exc.__cause__ or exc))}"

    def waiting_s(self) -> float | None:
        """How long the oldest call in flight has been out, in seconds; None while none is."""
        with self._lock:
            started = min(self._out.values(), default=None)
        return None if started is None else time.perf_counter() - started

    def applicable(self, parent: Candidate, strategy: Strategy) -> bool:
        return True

    def budget_spent(self) -> str:
        """Why no more calls may be made, or "" while the budget lasts."""
        c = self.config
        if c.budget_calls is not None and self.calls >= c.budget_calls:
            return f"{self.calls} of {c.budget_calls} calls made"
        if c.budget_tokens is not None and self.tokens >= c.budget_tokens:
            return f"{self.tokens} of {c.budget_tokens} tokens used"
        return ""

    def propose(self, parent: Candidate, strategy: Strategy, context: Context) -> Proposal:
        with self._lock:  # proposals run in parallel: reserve the call before making it
            spent = self.budget_spent()
            if not spent:
                self.calls += 1
        if spent:
            # No call, no record: the loop then treats the arm as having nothing to propose.
            return Proposal(source=None, error=f"LLM budget spent: {spent}")
        call, text, finish_reason = self._call(build_messages(parent, strategy, context), context.seed)
        with self._lock:
            self.tokens += call.tokens_in + call.tokens_out
        source, rationale = None, ""
        if call.outcome == ProposalOutcome.OK:
            source, rationale, call.outcome, call.error = judge_reply(text, finish_reason, context)
        return Proposal(source=source, rationale=rationale, tokens_in=call.tokens_in, tokens_out=call.tokens_out,
                        error=call.error, calls=[call], outcome=call.outcome)

    def _call(self, messages: list[dict], seed: int) -> tuple[LLMCall, str, str | None]:
        """One chat completion, retries included: (the call's record, the reply's text, its finish reason).
        The record's outcome is OK when the endpoint answered, else the failure's."""
        me = threading.get_ident()
        started = time.perf_counter()
        with self._lock:
            self._out[me] = started
        try:
            return self._complete(messages, seed, started)
        finally:
            with self._lock:
                self._out.pop(me, None)

    def _complete(self, messages: list[dict], seed: int, started: float) -> tuple[LLMCall, str, str | None]:
        openai = self._openai
        call = LLMCall(model=self.config.model)
        text, finish_reason = "", None
        self._local.requests = 0
        try:
            completion = self._client.chat.completions.create(
                model=self.config.model, messages=messages, temperature=self.config.temperature,
                max_tokens=self.config.max_tokens, seed=seed)
            choice = completion.choices[0]
            text, finish_reason = choice.message.content or "", choice.finish_reason
            if completion.usage is not None:
                call.tokens_in = completion.usage.prompt_tokens or 0
                call.tokens_out = completion.usage.completion_tokens or 0
            self.succeeded = True
        except (openai.APIStatusError, openai.APIConnectionError) as exc:
            if (fatal := self._misconfigured(exc)) is not None:
                raise fatal from None
            call.outcome, call.error = self._failure(exc)
        except (openai.OpenAIError, ValueError, AttributeError, IndexError, TypeError) as exc:
            # A body that is not a chat completion: cut-off JSON, no choices, not JSON at all.
            call.outcome = ProposalOutcome.HTTP_ERROR
            call.error = f"unreadable reply: {type(exc).__name__}: {_short(str(exc))}"
        call.latency_s = round(time.perf_counter() - started, 3)
        call.attempts = self._local.requests
        return call, text, finish_reason


def _short(text: str, limit: int = 300) -> str:
    """`text` on one line, cut to `limit` characters."""
    text = " ".join(text.split())
    return text if len(text) <= limit else text[:limit] + " ..."
