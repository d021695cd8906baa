"""The bot killed right after Slack got its answer: `kernelbot slack --http` as a real process
against the loopback Slack (tests/fakes/slack.py), an approval clicked, the bot SIGKILLed 0-30 ms
after the 200, then started again on the same store. Every other trial another process holds the
store's write lock for half a second while the click arrives (a bot that answered Slack before
writing anything would be killed with nothing written). Each approval must be applied exactly
once, and the card it leads to posted exactly once. Three trials run in the regular suite;
`python3 dev.py test -m soak` runs KERNELBOT_CRASH_TRIALS (default 20)."""
from __future__ import annotations

import json
import os
import random
import signal
import socket
import sqlite3
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

pytest.importorskip("slack_bolt", reason="the Slack adapter needs the slack extra")

from fakes.runner import wait_until
from fakes.slack import FakeSlack

from bot import slack_blocks as sb
from bot.store import Store
from runner.queue import JobQueue

ROOT = Path(__file__).resolve().parent.parent
USER, MATE = "U0DEV00001", "U0MATE0001"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class BotProcess:
    """`kernelbot slack --http` on its own port, logging to a file."""

    def __init__(self, fake: FakeSlack, home: Path, n: int) -> None:
        port = free_port()
        self.log = home / f"bot-{n}.log"
        env = {**os.environ, "KERNELBOT_HOME": str(home), "KERNELBOT_BACKEND": "cpu", "SLACK_BOT_TOKEN": "xoxb-test",
               "SLACK_SIGNING_SECRET": fake.signing_secret, "KERNELBOT_SLACK_API_URL": fake.api_url,
               "PYTHONUNBUFFERED": "1"}
        self.proc = subprocess.Popen([sys.executable, "-m", "bot.cli", "slack", "--http", "--port", str(port)],
                                     cwd=ROOT, env=env, stdout=open(self.log, "w"), stderr=subprocess.STDOUT)
        wait_until(lambda: "over HTTP" in self.log.read_text() or self.proc.poll() is not None, timeout=120)
        assert self.proc.poll() is None, self.log.read_text()[-3000:]
        fake.app_url = f"http://127.0.0.1:{port}/slack/events"

    def kill(self) -> None:
        self.proc.send_signal(signal.SIGKILL)
        self.proc.wait()


def header(msg: dict) -> str:
    return next((b["text"]["text"] for b in msg.get("blocks") or [] if b["type"] == "header"), "")


def cards_in(fake: FakeSlack, thread: str, title: str) -> list[dict]:
    return [m for m in list(fake.messages.values()) if m.get("thread_ts") == thread and header(m) == title]


def approve_button(msg: dict) -> dict:
    value = next(e["value"] for b in msg["blocks"] if b["type"] == "actions" for e in b["elements"]
                 if e["action_id"] == sb.PREFIX + "approve")
    return {"value": value, "ts": msg["ts"]}


def spec_card(fake: FakeSlack, request: str) -> dict:
    assert fake.deliver("command", fake.command(request, USER)).status == 200
    root = fake.find_message(lambda m: request in m.get("text", "") and not m.get("thread_ts"), timeout=60)
    return fake.find_message(lambda m: m.get("thread_ts") == root["ts"] and header(m) == "1/6 Spec · r1", timeout=60)


def right_after(n: int) -> float:
    return [0, 0, 10, 20, 30][n % 5] + random.uniform(0, 5)


def anywhere(n: int) -> float:
    """Up to 0.6 s after the answer: while it generates the next stage, posts its card, maps it."""
    return random.uniform(0, 600)


def run_trials(tmp_path: Path, trials: int, delay_ms=right_after, kill_starts: bool = False) -> list[str]:
    """Each trial: a new session, its spec approved, the bot killed delay_ms(n) after the ack; with
    kill_starts, every third trial kills it after the /kernel command instead. The problems found."""
    home = tmp_path / "home"
    home.mkdir()
    # A runner that says it is alive, so the bot starts none (these trials never reach a job).
    JobQueue(f"sqlite:///{home / 'queue.db'}", "cpu").put_runner_alive({"ts": time.time() + 86400, "host": "test"})
    fake = FakeSlack().start()
    problems: list[str] = []
    try:
        bot = BotProcess(fake, home, 0)
        for n in range(trials):
            request = f"add two fp32 tensors of shape {n + 2}x8"
            if kill_starts and n % 3 == 2:
                bot = start_then_kill(fake, bot, home, request, n)
                problems += check_start(fake, home, request, n)
                continue
            spec = spec_card(fake, request)
            button = approve_button(spec)
            delay = delay_ms(n)
            click = fake.button(MATE, spec["channel"], button["ts"], sb.PREFIX + "approve", button["value"])
            delivered = click_then_kill(fake, bot, click, delay, home / "kernelbot.db" if n % 2 == 0 else None)
            assert delivered.status == 200, delivered
            bot = BotProcess(fake, home, n + 1)
            problems += check_trial(fake, home, spec, n, delay)
        bot.kill()
    finally:
        fake.close()
    return problems


def start_then_kill(fake: FakeSlack, bot: BotProcess, home: Path, request: str, n: int) -> BotProcess:
    assert fake.deliver("command", fake.command(request, USER)).status == 200
    time.sleep(random.uniform(0, 0.4))
    bot.kill()
    return BotProcess(fake, home, n + 1)


def check_start(fake: FakeSlack, home: Path, request: str, n: int) -> list[str]:
    """A /kernel request cut off by a kill: one root, one session, one spec card."""
    def roots() -> list[dict]:
        return [m for m in list(fake.messages.values()) if request in m.get("text", "") and not m.get("thread_ts")]

    try:
        wait_until(lambda: roots() and cards_in(fake, roots()[0]["ts"], "1/6 Spec · r1"), timeout=60)
    except AssertionError:
        return [f"trial {n} (killed after the command): the request was lost"]
    time.sleep(0.5)
    store = Store(home / "kernelbot.db")
    sessions = [sid for sid in store.session_ids() if store.load(sid).request == request]
    found = [f"trial {n}: {len(roots())} root messages"] if len(roots()) != 1 else []
    found += [f"trial {n}: {len(sessions)} sessions"] if len(sessions) != 1 else []
    posted = len(cards_in(fake, roots()[0]["ts"], "1/6 Spec · r1"))
    return found + ([f"trial {n}: the spec card was posted {posted} times"] if posted != 1 else [])


def click_then_kill(fake: FakeSlack, bot: BotProcess, click: dict, delay_ms: float, locked: Path | None):
    """Deliver the click and kill the bot delay_ms after Slack's 200; with locked, the store's write
    lock is held by this process from before the click until half a second after it."""
    answers = []

    def deliver() -> None:
        answers.append(fake.deliver("interactive", click))
        time.sleep(delay_ms / 1000)
        bot.kill()

    holder = sqlite3.connect(locked, isolation_level=None) if locked else None
    if holder:
        holder.execute("BEGIN IMMEDIATE")
    clicking = threading.Thread(target=deliver)
    clicking.start()
    if holder:
        time.sleep(0.5)
        holder.execute("ROLLBACK")
        holder.close()
    clicking.join()
    return answers[0]


def check_trial(fake: FakeSlack, home: Path, spec: dict, n: int, delay_ms: float) -> list[str]:
    store = Store(home / "kernelbot.db")
    sid = json.loads(json.dumps(store.message("slack", f"{spec['channel']}:{spec['thread_ts']}")))["session_id"]
    try:
        wait_until(lambda: store.load(sid).stage == "reference" and cards_in(fake, spec["thread_ts"],
                                                                            "2/6 PyTorch reference · r1"), timeout=60)
    except AssertionError:
        return [f"trial {n} ({delay_ms:.0f} ms): the approval was lost (stage {store.load(sid).stage})"]
    time.sleep(0.5)                                        # a duplicate would show by now
    s = store.load(sid)
    found = []
    if len([a for a in s.approvals if a.stage == "spec"]) != 1:
        found.append(f"trial {n} ({delay_ms:.0f} ms): {len(s.approvals)} approvals of the spec")
    posted = len(cards_in(fake, spec["thread_ts"], "2/6 PyTorch reference · r1"))
    if posted != 1:
        found.append(f"trial {n} ({delay_ms:.0f} ms): the reference card was posted {posted} times")
    return found


def test_an_approval_acked_just_before_the_bot_is_killed_is_applied_once(tmp_path):
    assert run_trials(tmp_path, 3) == []


@pytest.mark.soak
def test_many_kills_right_after_the_ack_lose_nothing_and_repeat_nothing(tmp_path):
    trials = int(os.environ.get("KERNELBOT_CRASH_TRIALS", 20))
    assert run_trials(tmp_path, trials) == []


@pytest.mark.soak
def test_many_kills_at_random_points_lose_nothing_and_repeat_nothing(tmp_path):
    trials = int(os.environ.get("KERNELBOT_CRASH_TRIALS", 20))
    assert run_trials(tmp_path, trials, anywhere, kill_starts=True) == []
