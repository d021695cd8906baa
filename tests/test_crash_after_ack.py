"""The bot killed right after Slack got its answer: `kernelbot slack --http` as a real process
against the loopback Slack (tests/fakes/slack.py), an approval clicked, the bot SIGKILLed 0-30 ms
after the 200, then started again on the same store. Every other trial another process holds the
store's write lock for half a second while the click arrives (a bot that answered Slack before
writing anything would be killed with nothing written). Each approval must be applied exactly
once, and the card it leads to posted exactly once; the same on Discord, where some trials kill the
bot after it deferred a /kernel command (before its thread exists). Three trials run in the regular suite;
`python3 dev.py test -m soak` runs KERNELBOT_CRASH_TRIALS (default 20)."""
from __future__ import annotations

import json
import os
import random
import signal
import sqlite3
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

pytest.importorskip("slack_bolt", reason="the Slack adapter needs the slack extra")

from fakes.real_runner import free_port
from fakes.runner import wait_until
from fakes.slack import FakeSlack

from bot.chat.slack import render as sb
from bot.workflow.store import Store
from runner.queue import JobQueue

ROOT = Path(__file__).resolve().parent.parent
USER, MATE = "U0DEV00001", "U0MATE0001"


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


def bot_home(tmp_path: Path) -> Path:
    """KERNELBOT_HOME for the bot processes, with a runner that says it is alive, so the bot starts
    none (these trials never reach a job)."""
    home = tmp_path / "home"
    home.mkdir()
    JobQueue(f"sqlite:///{home / 'queue.db'}", "cpu").put_runner_alive({"ts": time.time() + 86400, "host": "test",
                                                                "runner": "test/pid1"})
    return home


def right_after(n: int) -> float:
    return [0, 0, 10, 20, 30][n % 5] + random.uniform(0, 5)


def anywhere(n: int) -> float:
    """Up to 0.6 s after the answer: while it generates the next stage, posts its card, maps it."""
    return random.uniform(0, 600)


def run_trials(tmp_path: Path, trials: int, delay_ms=right_after, kill_starts: bool = False) -> list[str]:
    """Each trial: a new session, its spec approved, the bot killed delay_ms(n) after the ack; with
    kill_starts, every third trial kills it after the /kernel command instead. The problems found."""
    home = bot_home(tmp_path)
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


# ------------------------------------------------------------------ the same on Discord

class DiscordBotProcess:
    """`kernelbot discord` against the loopback Discord (tests/fakes/discord.py)."""

    def __init__(self, fake, home: Path, n: int) -> None:
        from fakes.discord import GUILD, TOKEN
        self.log = home / f"discord-{n}.log"
        env = {**os.environ, "KERNELBOT_HOME": str(home), "KERNELBOT_BACKEND": "cpu", "DISCORD_TOKEN": TOKEN,
               "KERNELBOT_DISCORD_API_URL": fake.api_url, "KERNELBOT_DISCORD_GATEWAY_URL": fake.gateway_url,
               "PYTHONUNBUFFERED": "1"}
        self.proc = subprocess.Popen([sys.executable, "-m", "bot.cli", "discord", "--guild", GUILD], cwd=ROOT, env=env,
                                     stdout=open(self.log, "w"), stderr=subprocess.STDOUT)
        wait_until(lambda: "kernelbot on Discord" in self.log.read_text() or self.proc.poll() is not None, timeout=120)
        assert self.proc.poll() is None, self.log.read_text()[-3000:]

    def kill(self) -> None:
        self.proc.send_signal(signal.SIGKILL)
        self.proc.wait()


def embed_title(msg: dict) -> str:
    return msg["embeds"][0].get("title", "") if msg.get("embeds") else ""


def discord_trials(tmp_path: Path, trials: int, delay_ms=right_after, kill_starts: bool = False) -> list[str]:
    """Each trial: a /kernel session, its spec approved by a button, the bot killed delay_ms(n) after
    it answered the click (the defer); restarted, it must apply the approval once. With kill_starts,
    every third trial kills it after it deferred the /kernel command instead."""
    pytest.importorskip("discord", reason="the Discord adapter needs the discord extra")
    from fakes.discord import FakeDiscord
    home = bot_home(tmp_path)
    fake = FakeDiscord().start()
    problems: list[str] = []
    try:
        bot = DiscordBotProcess(fake, home, 0)
        dev, mate = fake.user("dev"), fake.user("mate")
        seen: set[str] = set()                             # the threads of earlier trials
        for n in range(trials):
            if kill_starts and n % 3 == 2:
                bot = discord_start_then_kill(fake, bot, home, dev, f"add two fp32 tensors of shape {n + 2}x8", n)
                problems += check_discord_start(fake, home, f"add two fp32 tensors of shape {n + 2}x8", n)
                continue
            fake.slash(dev, request=f"add two fp32 tensors of shape {n + 2}x8")
            spec = fake.find_message(lambda m: embed_title(m) == "1/6 Spec · r1" and m["components"]
                                     and m["channel_id"] not in seen, timeout=60)
            seen.add(spec["channel_id"])
            approve = next(c["custom_id"] for row in spec["components"] for c in row["components"]
                           if c["custom_id"].startswith("kb:approve:"))
            wait_until(lambda: Store(home / "kernelbot.db").message("discord", spec["id"]), timeout=30)
            clicked = fake.click(mate, spec, approve)
            wait_until(lambda: fake.interactions[clicked].responses, timeout=10)
            delay = delay_ms(n)
            time.sleep(delay / 1000)
            bot.kill()
            bot = DiscordBotProcess(fake, home, n + 1)
            problems += check_discord_trial(fake, home, spec["channel_id"], n, delay)
        bot.kill()
    finally:
        fake.close()
    return problems


def discord_start_then_kill(fake, bot: DiscordBotProcess, home: Path, user: str, request: str, n: int):
    """The bot killed after it deferred /kernel; on even trials Discord holds back the thread (500s,
    which discord.py retries for seconds), so the kill lands before the session has a thread."""
    hold_thread = n % 2 == 0
    if hold_thread:
        fake.fail("POST", r"/channels/\d+/messages/\d+/threads$", 500, times=5)
    asked = fake.slash(user, request=request)
    wait_until(lambda: fake.interactions[asked].responses, timeout=10)      # deferred: Discord shows "thinking"
    time.sleep(random.uniform(0, 0.4))
    bot.kill()
    if hold_thread:
        assert not [c for c in list(fake.channels.values()) if c.get("name") == request]
        fake.clear_faults()
    return DiscordBotProcess(fake, home, n + 1)


def check_discord_start(fake, home: Path, request: str, n: int) -> list[str]:
    """A /kernel request cut off by a kill: one session, in one thread, with one spec card."""
    store = Store(home / "kernelbot.db")

    def sessions() -> list:
        return [s for s in store.sessions(store.session_ids()) if s.request == request]

    try:
        wait_until(lambda: sessions() and cards_of(fake, store.message_id("discord", sessions()[0].id, "root")
                                                   or sessions()[0].thread, "1/6 Spec · r1"), timeout=60)
    except AssertionError:
        return [f"discord trial {n} (killed after the command): the request was lost"]
    time.sleep(0.5)
    threads = [c for c in list(fake.channels.values()) if c.get("type") == 11 and c.get("name") == request]
    specs = [m for t in threads for m in cards_of(fake, t["id"], "1/6 Spec · r1")]
    found = [f"discord trial {n}: {len(sessions())} sessions"] if len(sessions()) != 1 else []
    found += [f"discord trial {n}: {len(threads)} threads"] if len(threads) != 1 else []
    return found + ([f"discord trial {n}: the spec card was posted {len(specs)} times"] if len(specs) != 1 else [])


def cards_of(fake, thread: str, title: str) -> list[dict]:
    return [m for m in fake.channel_messages(thread) if embed_title(m) == title]


def check_discord_trial(fake, home: Path, thread: str, n: int, delay_ms: float) -> list[str]:
    store = Store(home / "kernelbot.db")
    sid = store.message("discord", thread)["session_id"]
    try:
        wait_until(lambda: store.load(sid).stage == "reference" and cards_of(fake, thread, "2/6 PyTorch reference · r1"),
                   timeout=60)
    except AssertionError:
        return [f"discord trial {n} ({delay_ms:.0f} ms): the approval was lost (stage {store.load(sid).stage})"]
    time.sleep(0.5)
    s, posted = store.load(sid), len(cards_of(fake, thread, "2/6 PyTorch reference · r1"))
    found = [f"discord trial {n}: {len(s.approvals)} approvals"] if len(s.approvals) != 1 else []
    return found + ([f"discord trial {n}: the reference card was posted {posted} times"] if posted != 1 else [])


def test_a_discord_click_answered_just_before_the_bot_is_killed_is_applied_once(tmp_path):
    assert discord_trials(tmp_path, 3, kill_starts=True) == []


@pytest.mark.soak
def test_many_discord_kills_after_the_answer_lose_nothing_and_repeat_nothing(tmp_path):
    assert discord_trials(tmp_path, int(os.environ.get("KERNELBOT_CRASH_TRIALS", 20)), anywhere, kill_starts=True) == []
