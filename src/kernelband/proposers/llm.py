"""The LLM proposer: asks any OpenAI-compatible chat endpoint to rewrite a kernel module along a strategy.

One proposal is one chat completion. The prompt carries the task, the parent's source, the strategy, the
parent's hardware profile phi, what the lineage tried before and the beam's reflection; the reply must hold
one ```python block with the whole module. The code is checked (it parses, it defines the entry function)
before an evaluation is spent on it.

Retries are the official client's: on 408/409/429/5xx, connection errors and timeouts it retries up to
`max_retries` times with exponential backoff, honouring `Retry-After` (seconds or an HTTP date) and
`retry-after-ms`. The budget in calls and tokens is hard: once spent, `propose` answers without calling.
Every call is recorded in `Proposal.calls`.
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
from kernelband.evaluation.records import PHI_KEYS
from kernelband.proposers.base import ProposerBase
from kernelband.search.core import Attempt, Candidate, Context, Proposal, Strategy

# What each phi feature means, for the prompt: (unit, meaning).
PHI_MEANINGS = {
    "l2_hit_rate": ("%", "share of L2 requests served from L2; low means little reuse between blocks"),
    "dram_bw_pct": ("%", "DRAM bandwidth used, of the device's peak; high means memory-bound"),
    "sm_throughput_pct": ("%", "SM compute throughput, of the peak; high means compute-bound"),
    "warp_execution_efficiency": ("%", "active threads per executed warp instruction; low means divergence "
                                       "or masked-off lanes"),
    "achieved_occupancy": ("%", "warps resident on an SM, of the maximum; low leaves latency unhidden"),
    "registers_per_thread": ("", "registers per thread; many limit occupancy"),
    "shared_bank_conflicts": ("", "shared-memory bank conflicts, counted; each one serialises an access"),
    "global_load_coalescing_pct": ("%", "bytes used of each global-load sector; low: uncoalesced"),
    "tensor_core_util_pct": ("%", "tensor-core pipe activity, of the peak"),
}
ERROR_LINES = 6  # lines of an earlier attempt's error text shown in the prompt (its end, where the cause is)
ERROR_LINE_CHARS = 200
RATIONALE_CHARS = 400

SYSTEM_PROMPT = """\
You are an expert in writing fast Triton GPU kernels. You are given a Python module holding Triton kernels \
and an entry function, and one optimization strategy to apply. Rewrite the module so that the entry \
function gets faster on the GPU while returning the same results as before, for every input shape.

Rules:
- Keep the entry function's name and signature; the module must be complete and importable on its own.
- Compute the results with Triton kernels on the GPU: do not call the reference implementation, do not \
cache results between calls, do not special-case the benchmark's inputs.
- Write only the module: no tests, no benchmarks, no example usage.

Reply format: first one line `Rationale: <what you changed and why it should be faster>`, then exactly one \
```python fenced block holding the complete module. Nothing after the block."""


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
        """KERNELBAND_LLM_BASE_URL / _MODEL / _API_KEY, else OPENAI_BASE_URL / OPENAI_API_KEY; `overrides`
        (any field) win over the environment."""
        env = os.environ.get
        config = cls(base_url=env("KERNELBAND_LLM_BASE_URL") or env("OPENAI_BASE_URL") or None,
                     model=env("KERNELBAND_LLM_MODEL") or None,
                     api_key=env("KERNELBAND_LLM_API_KEY") or env("OPENAI_API_KEY") or None)
        return replace(config, **overrides)

    def configured(self) -> bool:
        """A model, and somewhere to send it: a base URL (a local server may need no key) or an API key."""
        return bool(self.model) and bool(self.base_url or self.api_key)


# -- the prompt ---------------------------------------------------------------------------------------------
def phi_summary(phi: dict[str, float | None]) -> str:
    """One line per phi feature: its value and what it means; "not measured" where nothing measured it."""
    lines = []
    for key in (*PHI_KEYS, *(k for k in phi if k not in PHI_KEYS)):
        unit, meaning = PHI_MEANINGS.get(key, ("", ""))
        value = phi.get(key)
        if value is None:
            shown = "not measured"
        elif unit == "%":
            shown = f"{value:.1f} %"
        else:
            shown = f"{value:g}"
        lines.append(f"- {key}: {shown}" + (f"  ({meaning})" if meaning else ""))
    return "\n".join(lines)


def trim_error(text: str) -> str:
    """The last few lines of an error text, each cut to a readable length."""
    lines = [line.rstrip() for line in text.strip().splitlines() if line.strip()][-ERROR_LINES:]
    cut = ERROR_LINE_CHARS
    return "\n".join(line if len(line) <= cut else line[:cut] + " ..." for line in lines)


def history_summary(history: list[Attempt]) -> str:
    if not history:
        return "Nothing yet: this is the first attempt on this kernel."
    parts = []
    for i, attempt in enumerate(history, 1):
        line = f"{i}. strategy {attempt.strategy}: {attempt.outcome}"
        if attempt.speedup is not None:
            line += f", speedup {attempt.speedup:.3f}x over the starting kernel"
        if attempt.detail:
            line += f" ({attempt.detail})"
        if attempt.error:
            line += "\n   error:\n" + "\n".join("     " + e for e in trim_error(attempt.error).splitlines())
        parts.append(line)
    return "\n".join(parts)


def build_messages(parent: Candidate, strategy: Strategy, context: Context) -> list[dict]:
    task = f"Name: {context.task_name}\nEntry function: {context.entry}"
    if context.description:
        task += f"\nDescription: {context.description}"
    current = "Current kernel"
    if parent.speedup is not None:
        current += f" ({parent.speedup:.3f}x the speed of the starting kernel)"
    sections = [
        ("Task", task),
        ("Strategy to apply", f"{strategy.name} (targets {strategy.target}): {strategy.description}"),
        ("Hardware profile of the current kernel", phi_summary(context.phi)),
        ("What was tried before on this lineage, oldest first", history_summary(context.history)),
    ]
    if context.reflection:
        sections.append(("Reflection on the last attempts", context.reflection.strip()))
    sections.append((current, f"```python\n{parent.source.rstrip()}\n```"))
    sections.append(("Your reply", f"One line `Rationale: ...`, then exactly one ```python block with the "
                                   f"complete rewritten module, which must define `{context.entry}`."))
    user = "\n\n".join(f"## {title}\n{body}" for title, body in sections)
    return [{"role": "system", "content": SYSTEM_PROMPT}, {"role": "user", "content": user}]


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


def judge_reply(text: str, finish_reason: str | None, entry: str) -> tuple[str | None, str, str, str]:
    """(source or None, rationale, outcome, error) for a reply's text."""
    if finish_reason == "length":
        return None, "", "truncated", "the reply was cut off at max_tokens"
    source, rationale = extract_code(text)
    if source is None:
        return None, "", "no_code", "the reply has no ```python block"
    try:
        tree = pyast.parse(source)
    except SyntaxError as exc:
        return None, rationale, "syntax_error", f"the code does not parse: line {exc.lineno}: {exc.msg}"
    if not defines(tree, entry):
        return None, rationale, "missing_entry", f"the code does not define the entry function {entry!r}"
    return source, rationale, "ok", ""


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

    def _failure(self, exc) -> tuple[str, str]:
        """(outcome, error) of a call the endpoint failed: "timeout" or "http_error"."""
        if isinstance(exc, self._openai.APITimeoutError):
            return "timeout", f"no reply within {self.config.timeout_s:g} s"
        if isinstance(exc, self._openai.APIStatusError):
            return "http_error", f"HTTP {exc.status_code}: {_short(exc.message)}"
        return "http_error", f"connection failed: {_short(str(exc.__cause__ or exc))}"

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
            self.tokens += call["tokens_in"] + call["tokens_out"]
        source, rationale = None, ""
        if call["outcome"] == "ok":
            source, rationale, outcome, error = judge_reply(text, finish_reason, context.entry)
            call.update(outcome=outcome, error=error)
        return Proposal(source=source, rationale=rationale, tokens_in=call["tokens_in"],
                        tokens_out=call["tokens_out"], error=call["error"], calls=[call])

    def _call(self, messages: list[dict], seed: int) -> tuple[dict, str, str | None]:
        """One chat completion, retries included: (the call's record, the reply's text, its finish reason).
        The record's outcome is "ok" when the endpoint answered, else "timeout" or "http_error"."""
        openai = self._openai
        call = {"model": self.config.model, "tokens_in": 0, "tokens_out": 0, "latency_s": 0.0,
                "outcome": "ok", "error": ""}
        text, finish_reason = "", None
        self._local.requests = 0
        started = time.perf_counter()
        try:
            completion = self._client.chat.completions.create(
                model=self.config.model, messages=messages, temperature=self.config.temperature,
                max_tokens=self.config.max_tokens, seed=seed)
            choice = completion.choices[0]
            text, finish_reason = choice.message.content or "", choice.finish_reason
            if completion.usage is not None:
                call["tokens_in"] = completion.usage.prompt_tokens or 0
                call["tokens_out"] = completion.usage.completion_tokens or 0
            self.succeeded = True
        except (openai.APIStatusError, openai.APIConnectionError) as exc:
            if (fatal := self._misconfigured(exc)) is not None:
                raise fatal from None
            call["outcome"], call["error"] = self._failure(exc)
        except (openai.OpenAIError, ValueError, AttributeError, IndexError, TypeError) as exc:
            # A body that is not a chat completion: cut-off JSON, no choices, not JSON at all.
            call["outcome"] = "http_error"
            call["error"] = f"unreadable reply: {type(exc).__name__}: {_short(str(exc))}"
        call["latency_s"] = round(time.perf_counter() - started, 3)
        call["attempts"] = self._local.requests
        return call, text, finish_reason


def _short(text: str, limit: int = 300) -> str:
    """`text` on one line, cut to `limit` characters."""
    text = " ".join(text.split())
    return text if len(text) <= limit else text[:limit] + " ..."
