"""The OpenAI-compatible chat client: messages in, one answer and its token usage out.

Any endpoint that speaks POST /v1/chat/completions works: OpenAI, DeepSeek, vLLM, SGLang,
Ollama. What a retry can fix is retried here, at most `retries` times: a timeout, a lost
connection, 408/409/429 and 5xx (waiting as long as Retry-After asks, else doubling from
one second), and a 200 whose body is not a chat completion (a proxy's error page). Anything
else, or running out of retries, raises LLMError with a message saying what went wrong and
what to change. The openai package is imported lazily, so the offline generator needs none.
"""
from __future__ import annotations

import email.utils
import logging
import re
import time
from dataclasses import dataclass
from typing import Callable

log = logging.getLogger("kernelbot.llm")

RETRY_STATUS = frozenset({408, 409, 429})
MAX_WAIT_S = 120.0           # a longer Retry-After is reported instead of waited out
BACKOFF_CAP_S = 30.0
FENCE = re.compile(r"```[ \t]*([\w+.-]*)[^\n]*\n(.*?)\n[ \t]*```", re.S)


@dataclass(frozen=True)
class LLMSettings:
    base_url: str                    # e.g. https://api.openai.com/v1, http://localhost:11434/v1 (Ollama)
    model: str
    api_key: str = ""                # local servers (vLLM, SGLang, Ollama) accept any
    timeout_s: float = 180.0         # per request
    retries: int = 4                 # per request, for timeouts, 429 and 5xx
    rounds: int = 5                  # verify-and-repair rounds for a kernel
    max_tokens: int | None = None    # sent only when set: some models reject max_tokens
    verify_timeout_s: float = 600.0  # how long one kernel check on a runner may take


class LLMError(Exception):
    """The endpoint gave no usable answer; the message is for people."""


@dataclass
class Reply:
    text: str
    finish_reason: str
    usage: dict[str, int]


class _NotACompletion(Exception):
    pass


class LLMClient:
    def __init__(self, settings: LLMSettings, sleep: Callable[[float], None] = time.sleep) -> None:
        import openai  # lazily: only a bot that talks to an LLM needs the package
        self.settings, self._sleep, self._openai = settings, sleep, openai
        # max_retries=0: retries happen here, so each one is logged and Retry-After is capped
        self._client = openai.OpenAI(base_url=settings.base_url, api_key=settings.api_key or "unused",
                                     timeout=settings.timeout_s, max_retries=0)

    def complete(self, messages: list[dict[str, str]]) -> Reply:
        """One chat completion, retried where a retry can help; raises LLMError otherwise."""
        s = self.settings
        extra = {"max_tokens": s.max_tokens} if s.max_tokens else {}
        attempt = 0
        while True:
            try:
                return _reply(self._client.chat.completions.create(model=s.model, messages=messages, **extra))
            except (self._openai.APIError, _NotACompletion) as e:
                problem, wait = self._problem(e, attempt)
            if attempt == s.retries:
                raise LLMError(f"the LLM endpoint {s.base_url} failed {s.retries + 1} times; last: {problem}")
            if wait > MAX_WAIT_S:
                raise LLMError(f"the LLM endpoint {s.base_url} asks to wait {wait:.0f} s ({problem}); "
                               "try again later")
            attempt += 1
            log.warning("LLM request failed (%s); retry %s/%s in %.1f s", problem, attempt, s.retries, wait)
            self._sleep(wait)

    def _problem(self, e: Exception, attempt: int) -> tuple[str, float]:
        """(what went wrong, seconds to wait before retrying); raises LLMError when a retry cannot help."""
        openai, s = self._openai, self.settings
        backoff = min(2.0 ** attempt, BACKOFF_CAP_S)
        if isinstance(e, openai.APITimeoutError):
            return f"no answer within {s.timeout_s:.0f} s (KERNELBOT_LLM_TIMEOUT_S)", backoff
        if isinstance(e, openai.APIConnectionError):
            return f"cannot connect ({e.__cause__ or e})", backoff
        if isinstance(e, _NotACompletion):
            return str(e), backoff
        if isinstance(e, openai.APIStatusError):
            if e.status_code in RETRY_STATUS or e.status_code >= 500:
                wait = retry_after(e.response.headers)
                return f"HTTP {e.status_code}: {_message(e)}", backoff if wait is None else wait
            raise LLMError(_refusal(e, s)) from None
        return f"{type(e).__name__}: {e}", backoff


def _reply(raw) -> Reply:
    choices = getattr(raw, "choices", None)
    if not choices:
        text = raw if isinstance(raw, str) else repr(raw)
        raise _NotACompletion(f"the answer was not a chat completion: {text[:120]!r}")
    choice = choices[0]
    usage = {"requests": 1}
    if getattr(raw, "usage", None):
        for key in ("prompt_tokens", "completion_tokens", "total_tokens"):
            usage[key] = int(getattr(raw.usage, key, 0) or 0)
    return Reply(choice.message.content or "", choice.finish_reason or "", usage)


def retry_after(headers) -> float | None:
    """Seconds the server asks to wait: retry-after-ms, or Retry-After in seconds or as an HTTP date."""
    ms = headers.get("retry-after-ms")
    if ms:
        try:
            return float(ms) / 1000
        except ValueError:
            pass
    value = headers.get("retry-after")
    if not value:
        return None
    try:
        return max(float(value), 0.0)
    except ValueError:
        pass
    try:
        when = email.utils.parsedate_to_datetime(value)
    except (TypeError, ValueError):
        return None
    return max(when.timestamp() - time.time(), 0.0)


def _message(e) -> str:
    body = e.body if isinstance(e.body, dict) else {}
    inner = body.get("error") if isinstance(body.get("error"), dict) else body
    return str(inner.get("message") or e.message)[:300]


def _refusal(e, s: LLMSettings) -> str:
    status = e.status_code
    if status in (401, 403):
        return (f"the LLM endpoint refused the API key (HTTP {status}: {_message(e)}); "
                "set KERNELBOT_LLM_API_KEY to a valid key")
    if status == 404:
        return (f"the LLM endpoint has no model {s.model!r} or no chat completions at {s.base_url} (HTTP 404: "
                f"{_message(e)}); check KERNELBOT_LLM_MODEL and KERNELBOT_LLM_BASE_URL (usually ending in /v1)")
    return f"the LLM endpoint rejected the request (HTTP {status}: {_message(e)})"


def add_usage(total: dict[str, int], more: dict[str, int]) -> None:
    for key, value in more.items():
        total[key] = total.get(key, 0) + value


def code_block(text: str, langs: tuple[str, ...]) -> str | None:
    """The longest closed ``` block tagged with one of langs, else the longest untagged one.
    None when there is none (an unclosed block is a truncated answer)."""
    blocks = [(tag.lower(), body) for tag, body in FENCE.findall(text)]
    for wanted in (lambda tag: tag in langs, lambda tag: tag == ""):
        bodies = [body for tag, body in blocks if wanted(tag)]
        if bodies:
            return max(bodies, key=len).strip("\n") + "\n"
    return None
