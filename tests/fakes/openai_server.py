"""An OpenAI-compatible chat-completions endpoint on loopback, for tests: the real `openai`
client talks to it over HTTP. Each test scripts the answers, one per request, in order
(a completion, an error status with headers, a garbage body, a slow answer), and reads
back every request it received, so it can check what reached the model.
"""
from __future__ import annotations

import asyncio
import itertools
import json
import threading
from dataclasses import dataclass, field
from typing import Callable

import pytest
from aiohttp import web

from fakes.loopback import LoopbackServer


@dataclass
class Answer:
    status: int = 200
    body: dict | str = ""                          # a dict is sent as JSON, a str as text/plain
    headers: dict[str, str] = field(default_factory=dict)
    delay_s: float = 0.0                           # wait this long first (a timeout on the client side)


def reply(content: str | None, finish_reason: str = "stop", prompt_tokens: int = 100,
          completion_tokens: int = 50) -> Answer:
    """A chat completion whose one choice says `content`."""
    return Answer(body={
        "id": "chatcmpl-fake", "object": "chat.completion", "created": 1700000000, "model": "fake-model",
        "choices": [{"index": 0, "finish_reason": finish_reason,
                     "message": {"role": "assistant", "content": content}}],
        "usage": {"prompt_tokens": prompt_tokens, "completion_tokens": completion_tokens,
                  "total_tokens": prompt_tokens + completion_tokens}})


def code(lang: str, text: str, before: str = "Here it is.") -> Answer:
    """A completion holding one fenced code block."""
    return reply(f"{before}\n\n```{lang}\n{text.strip()}\n```\n")


def error(status: int, message: str = "try again later", **headers: str) -> Answer:
    """An error answer in OpenAI's error shape, e.g. error(429, **{"Retry-After": "1"})."""
    return Answer(status=status, body={"error": {"message": message, "type": "server_error", "code": None}},
                  headers=headers)


def garbage() -> Answer:
    """A 200 whose body is not JSON at all (a proxy's HTML page)."""
    return Answer(body="<html><body>502 Bad Gateway</body></html>")


class FakeOpenAI(LoopbackServer):
    def __init__(self) -> None:
        super().__init__("fake-openai")
        self.requests: list[dict] = []             # the JSON bodies received, in order
        self.headers: list[dict[str, str]] = []
        self._script: list[Answer | Callable[[dict], Answer]] = []
        self._lock = threading.Lock()
        self._ids = itertools.count(1)

    def routes(self, app: web.Application) -> None:
        app.router.add_post("/v1/chat/completions", self._completions)

    @property
    def url(self) -> str:
        """The base URL a client is configured with (KERNELBOT_LLM_BASE_URL)."""
        return f"http://127.0.0.1:{self.port}/v1"

    def script(self, *answers: Answer | Callable[[dict], Answer]) -> None:
        """Queue answers for the next requests; a callable gets the request body and returns one."""
        with self._lock:
            self._script.extend(answers)

    @property
    def remaining(self) -> int:
        with self._lock:
            return len(self._script)

    def user_text(self, i: int) -> str:
        """Everything request i said to the model, messages joined."""
        return "\n".join(str(m.get("content")) for m in self.requests[i]["messages"])

    async def _completions(self, request: web.Request) -> web.Response:
        body = await request.json()
        with self._lock:
            self.requests.append(body)
            self.headers.append(dict(request.headers))
            step = self._script.pop(0) if self._script else error(500, "fake OpenAI: the test scripted no more answers")
        answer = step(body) if callable(step) else step
        if answer.delay_s:
            await asyncio.sleep(answer.delay_s)
        headers = {"x-request-id": f"req-{next(self._ids)}", **answer.headers}
        if isinstance(answer.body, dict):
            return web.Response(status=answer.status, text=json.dumps(answer.body), headers=headers,
                                content_type="application/json")
        return web.Response(status=answer.status, text=answer.body, headers=headers, content_type="text/plain")


@pytest.fixture
def fake_openai():
    """A started FakeOpenAI, closed after the test. Import it into a test module to use it."""
    server = FakeOpenAI().start()
    yield server
    server.close()
