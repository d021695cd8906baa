"""The OpenAI-compatible client (bot.generators.llm_client) against a loopback endpoint, with the real openai
client on the wire: answers, token usage, retries with Retry-After, faults it cannot fix."""
from __future__ import annotations

import pytest
from fakes.openai_server import Answer, code, error, fake_openai, garbage, reply  # noqa: F401

from bot.generators.llm_client import LLMClient, LLMError, LLMSettings, code_block, retry_after

HELLO = [{"role": "user", "content": "hello"}]


def client(server, sleeps: list[float], **settings) -> LLMClient:
    s = LLMSettings(base_url=server.url, model="fake-model", api_key="sk-test", **{"timeout_s": 5.0, **settings})
    return LLMClient(s, sleep=sleeps.append)


def test_answer_text_finish_reason_and_usage(fake_openai):
    fake_openai.script(reply("hi there", prompt_tokens=12, completion_tokens=3))
    r = client(fake_openai, []).complete(HELLO)
    assert (r.text, r.finish_reason) == ("hi there", "stop")
    assert r.usage == {"requests": 1, "prompt_tokens": 12, "completion_tokens": 3, "total_tokens": 15}
    sent = fake_openai.requests[0]
    assert sent["model"] == "fake-model" and sent["messages"] == HELLO and "max_tokens" not in sent
    assert fake_openai.headers[0]["Authorization"] == "Bearer sk-test"


def test_429_waits_as_long_as_retry_after_says_then_succeeds(fake_openai):
    fake_openai.script(error(429, "rate limited", **{"Retry-After": "7"}), reply("done"))
    sleeps: list[float] = []
    assert client(fake_openai, sleeps).complete(HELLO).text == "done"
    assert sleeps == [7.0] and len(fake_openai.requests) == 2


def test_5xx_backs_off_exponentially_without_retry_after(fake_openai):
    fake_openai.script(error(503), error(502), reply("ok"))
    sleeps: list[float] = []
    assert client(fake_openai, sleeps).complete(HELLO).text == "ok"
    assert sleeps == [1.0, 2.0]


def test_retry_after_longer_than_the_cap_is_reported_not_waited(fake_openai):
    fake_openai.script(error(429, "quota", **{"Retry-After": "3600"}))
    with pytest.raises(LLMError, match="asks to wait 3600 s"):
        client(fake_openai, []).complete(HELLO)


def test_garbage_body_is_retried_then_reported(fake_openai):
    fake_openai.script(garbage(), garbage())
    sleeps: list[float] = []
    with pytest.raises(LLMError) as e:
        client(fake_openai, sleeps, retries=1).complete(HELLO)
    assert "failed 2 times" in str(e.value) and "not a chat completion" in str(e.value)
    assert "502 Bad Gateway" in str(e.value) and len(sleeps) == 1


def test_timeout_is_retried(fake_openai):
    fake_openai.script(Answer(delay_s=2.0, body="late"), reply("on time"))
    sleeps: list[float] = []
    assert client(fake_openai, sleeps, timeout_s=0.5).complete(HELLO).text == "on time"
    assert len(sleeps) == 1


def test_wrong_key_and_unknown_model_say_what_to_set(fake_openai):
    fake_openai.script(error(401, "Incorrect API key"), error(404, "model 'nope' not found"))
    with pytest.raises(LLMError, match="KERNELBOT_LLM_API_KEY"):
        client(fake_openai, []).complete(HELLO)
    with pytest.raises(LLMError, match="KERNELBOT_LLM_MODEL"):
        client(fake_openai, []).complete(HELLO)
    assert len(fake_openai.requests) == 2                     # neither was retried


def test_unreachable_endpoint_is_reported_after_retries():
    s = LLMSettings(base_url="http://127.0.0.1:9/v1", model="m", timeout_s=2.0, retries=1)
    with pytest.raises(LLMError, match="cannot connect"):
        LLMClient(s, sleep=lambda _: None).complete(HELLO)


def test_empty_content_comes_back_empty(fake_openai):
    fake_openai.script(reply(None))
    assert client(fake_openai, []).complete(HELLO).text == ""


def test_code_block_prefers_the_language_then_the_longest():
    text = "see\n```python\nshort = 1\n```\nand\n```python\nlonger = 2\nmore = 3\n```\n```json\n{}\n```"
    assert code_block(text, ("python",)) == "longer = 2\nmore = 3\n"
    assert code_block(text, ("json",)) == "{}\n"
    assert code_block("```\nx = 1\n```", ("python",)) == "x = 1\n"
    assert code_block("```python\nx = 1\n", ("python",)) is None          # cut off: never closed
    assert code_block(code("python", "y = 2").body["choices"][0]["message"]["content"], ("py", "python")) == "y = 2\n"


def test_retry_after_forms():
    assert retry_after({"retry-after-ms": "250"}) == 0.25
    assert retry_after({"retry-after": "3"}) == 3.0
    assert retry_after({"retry-after": "Wed, 21 Oct 2015 07:28:00 GMT"}) == 0.0     # in the past
    assert retry_after({"retry-after": "soon"}) is None
    assert retry_after({}) is None
