"""The Slack adapter with the real slack-bolt and slack_sdk against a loopback Slack
(tests/fakes/slack.py): signed HTTP requests and Socket Mode envelopes in, Web API
calls out. The runner is a recording queue the tests answer with realistic results."""
from __future__ import annotations

import json
import logging
import os
import sqlite3
import subprocess
import threading
import time
from pathlib import Path

import pytest

pytest.importorskip("slack_bolt", reason="the Slack adapter needs the slack extra")

from fakes.queue import MemoryQueue
from fakes.runner import BENCH, chart_png, run_job, wait_until
from fakes.slack import BOT_USER, FakeSlack, File

from bot import app as wiring
from bot.chat.commands import is_thumbs_up, reply_code
from bot.chat.slack import render as sb
from bot.chat.slack.app import assemble, build_app, http_server, slack_text
from bot.chat.slack.chat import SlackChat, web_client
from bot.config import Config
from bot.generators.offline import OfflineGenerator
from bot.workflow.cards import Card
from bot.workflow.messages import Messages
from bot.workflow.service import Service
from bot.workflow.store import Store

CHANNEL = "C0KERNELS1"
REQUESTER, TEAMMATE, LEAD = "U0DEV00001", "U0MATE0001", "U0LEAD0001"
REQUEST = "add two fp32 matrices of shape 4x8"
ROOT = Path(__file__).resolve().parent.parent


class Bot:
    """The bot as `kernelbot slack` wires it, on a test store and queue, talking to the fake."""

    def __init__(self, fake: FakeSlack, home: Path, mode: str, queue: MemoryQueue | None = None, **policy) -> None:
        self.fake, self.queue = fake, queue or MemoryQueue()
        self.cfg = Config(home=home, db_path=home / "kb.db", queue_url="", backend="cpu", **policy)
        self.store = Store(self.cfg.db_path)
        self.chat = SlackChat(web_client("xoxb-test", fake.api_url), Messages(self.store, "slack"))
        self.svc = Service(self.cfg, self.store, OfflineGenerator(), self.chat, lambda backend: self.queue)
        self.app = build_app(self.svc, self.chat, fake.signing_secret)
        self.server = self.socket = None
        if mode == "http":
            self.server = http_server(self.app, 0, "127.0.0.1")
            threading.Thread(target=self.server.serve_forever, args=(0.05,), daemon=True).start()
            fake.app_url = f"http://127.0.0.1:{self.server.server_port}/slack/events"
        else:
            from slack_bolt.adapter.socket_mode import SocketModeHandler
            fake.app_url = None
            self.socket = SocketModeHandler(self.app, "xapp-test")
            self.socket.connect()
            assert fake.socket_open.wait(5), "the Socket Mode client did not connect"

    def session(self):
        ids = self.store.session_ids()
        return self.store.load(ids[-1]) if ids else None

    def close(self) -> None:
        if self.server:
            self.server.shutdown()
            self.server.server_close()
        if self.socket:
            self.socket.close()             # slack_sdk's socket client waits out its 3 s receive timeout
        self.svc.shutdown()


@pytest.fixture
def fake():
    f = FakeSlack().start()
    yield f
    f.close()
    slow = [d for d in f.deliveries if d.seconds >= 3.0]
    assert not slow, f"Slack wants an answer within 3 s: {slow}"


@pytest.fixture
def make_bot(fake, tmp_path):
    bots = []

    def make(mode: str = "http", **kw) -> Bot:
        bots.append(Bot(fake, tmp_path, mode, **kw))
        return bots[-1]
    yield make
    for b in bots:
        b.close()


# ------------------------------------------------------------------ reading what the bot posted

def header(msg: dict) -> str:
    return next((b["text"]["text"] for b in msg.get("blocks") or [] if b["type"] == "header"), "")


def block_text(msg: dict) -> str:
    return json.dumps(msg.get("blocks") or []) + msg.get("text", "")


def card(bot: Bot, title: str) -> dict:
    """The message holding the card with this header, once it is posted and the bot knows it."""
    msg = bot.fake.find_message(lambda m: header(m) == title)
    wait_until(lambda: bot.chat.card_at(msg["channel"], msg["ts"]))
    return msg


def uploaded(fake: FakeSlack, filename_end: str) -> File:
    """The file whose name ends so, once its upload is complete."""
    return wait_until(lambda: next((f for f in fake.files if f.filename.endswith(filename_end)), None))


def button_value(msg: dict, action: str) -> str:
    return next(e["value"] for b in msg["blocks"] if b["type"] == "actions" for e in b["elements"]
                if e["action_id"] == sb.PREFIX + action)


def click(fake: FakeSlack, user: str, msg: dict, action: str, value: str | None = None):
    return fake.deliver("interactive", fake.button(user, msg["channel"], msg["ts"], sb.PREFIX + action,
                                                   value or button_value(msg, action)))


def ephemeral(fake: FakeSlack, user: str, words: str, count: int = 1):
    return fake.wait_for("chat.postEphemeral", lambda c: c.args["user"] == user and words in c.args["text"],
                         count=count)


def start(bot: Bot, user: str = REQUESTER, request: str = REQUEST) -> dict:
    """/kernel REQUEST; returns the spec card (its thread_ts is the session's thread)."""
    assert bot.fake.deliver("command", bot.fake.command(request, user)).status == 200
    spec = card(bot, "1/6 Spec · r1")
    wait_until(lambda: bot.chat.session_in_thread(CHANNEL, spec["thread_ts"]))
    return spec


# ------------------------------------------------------------------ the whole workflow

@pytest.mark.parametrize("mode", ["http", "socket"])
def test_full_session_through_slack_payloads(make_bot, fake, mode):
    bot = make_bot(mode, four_eyes=True)
    spec1 = start(bot)
    thread = spec1["thread_ts"]
    root = fake.messages[(CHANNEL, thread)]
    assert f"<@{REQUESTER}> asked for a kernel" in root["text"] and "thread_ts" not in root
    stale_approve = button_value(spec1, "approve")

    # A plain reply in the thread corrects the current stage.
    fake.deliver("event", fake.message(REQUESTER, "use shape 8x16 instead", thread_ts=thread))
    spec2 = card(bot, "1/6 Spec · r2")
    assert "8x16" in block_text(spec2) and spec2["thread_ts"] == thread
    assert "actions" not in block_text(fake.messages[(CHANNEL, spec1["ts"])]), "r1 shows as superseded"

    # A button on the older revision says so, to the person who clicked only.
    click(fake, TEAMMATE, spec1, "approve", stale_approve)
    ephemeral(fake, TEAMMATE, "no longer current")

    click(fake, TEAMMATE, spec2, "approve")
    ref = card(bot, "2/6 PyTorch reference · r1")
    fake.deliver("event", fake.reaction(TEAMMATE, "+1::skin-tone-3", CHANNEL, ref["ts"]))
    rtest = card(bot, "3/6 Reference test · r1")
    upload = uploaded(fake, "test_reference.py")
    assert upload.thread_ts == thread and upload.data.decode() == bot.session().latest("reference_test").content
    assert "attached above" in block_text(rtest)

    # Approved execution stage: queued, then running on the runner's host and GPU, updated in place.
    click(fake, TEAMMATE, rtest, "approve")
    run_job(bot.queue, bot.svc.poll_jobs, "reference_test")
    for state in ("queued for a cpu runner", "running on gpu-7 (NVIDIA H200): correctness 1/1"):
        fake.wait_for("chat.update", lambda c: c.args["ts"] == rtest["ts"] and state in block_text(c.args))
    res = card(bot, "Reference test result · PASS")
    assert "at (3, 5): got 1.5, want 1.5" in block_text(res) and res["thread_ts"] == thread

    # Kernel: request changes (modal), edit (modal), edit by a code block reply.
    k1 = card(bot, "4/6 Triton kernel · r1")
    click(fake, REQUESTER, k1, "correct")
    modal = fake.wait_for("views.open").args["view"]
    view_id = next(v for v in fake.views if fake.views[v]["callback_id"] == modal["callback_id"])
    fake.deliver("interactive", fake.view_submission(REQUESTER, view_id, {"text": "block size 128"}))
    k2 = card(bot, "4/6 Triton kernel · r2")
    assert "block=128" in block_text(k2)

    click(fake, REQUESTER, k2, "edit")
    edit_view = fake.wait_for("views.open", count=2).args["view"]
    code = bot.session().latest("kernel").content
    if len(code) <= sb.INPUT_MAX:
        assert edit_view["blocks"][-1]["element"]["initial_value"] == code
    else:   # a kernel with its tuning block outgrows Slack's text box: the modal says how to edit it
        assert "longer than a Slack text box holds" in json.dumps(edit_view["blocks"][0])
    view_id = max(fake.views)
    refused = fake.deliver("interactive", fake.view_submission(REQUESTER, view_id, {"code": "def broken(:\n"}))
    assert refused.body["response_action"] == "errors" and "not valid Python" in refused.body["errors"]["code"]
    fake.deliver("interactive", fake.view_submission(REQUESTER, view_id, {"code": code + "# reviewed\n"}))
    k3 = card(bot, "4/6 Triton kernel · r3")
    assert f"<@{REQUESTER}> (edit)" in block_text(k3)

    fake.deliver("event", fake.message(REQUESTER, f"```{code}# tuned &amp; reviewed\n```", thread_ts=thread))
    k4 = card(bot, "4/6 Triton kernel · r4")
    assert bot.session().latest("kernel").content == code + "# tuned & reviewed\n"

    # Four-eyes: the requester's thumbs-up on their own kernel is refused, to them only.
    fake.deliver("event", fake.reaction(REQUESTER, "thumbsup", CHANNEL, k4["ts"]))
    ephemeral(fake, REQUESTER, "Four-eyes review is on")
    fake.deliver("event", fake.reaction(TEAMMATE, "thumbsup", CHANNEL, k4["ts"]))
    ktest = card(bot, "5/6 Kernel test · r1")
    assert f"approved by*\\n<@{TEAMMATE}>" in block_text(fake.messages[(CHANNEL, k4["ts"])])

    click(fake, TEAMMATE, ktest, "approve")
    run_job(bot.queue, bot.svc.poll_jobs, "kernel_test")
    bench = card(bot, "6/6 Benchmark · r1")
    click(fake, TEAMMATE, bench, "approve")
    job = run_job(bot.queue, bot.svc.poll_jobs, "benchmark", chart_png_b64=chart_png(), **BENCH)
    assert set(job["kernels"]) == {"r1", "r2", "r3"}

    # The bench table in the result card, the chart as a PNG file in the thread, then the summary.
    bres = card(bot, "Benchmark result · PASS")
    assert "speedup" in block_text(bres) and "1.07x" in block_text(bres)
    chart = uploaded(fake, "-chart.png")
    assert chart.data.startswith(b"\x89PNG") and chart.thread_ts == thread
    s = bot.session()
    card(bot, f"Session {s.id} · done")
    assert s.status == "done" and s.approval("benchmark", 1).approver == TEAMMATE

    fake.deliver("command", fake.command(f"export {s.id}", REQUESTER))
    wait_until(lambda: {"kernel.py", "REPORT.md", "report.json", "chart.png"} <= {f.filename for f in fake.files})
    exported = {f.filename: f for f in fake.files if f.comment and s.id in f.comment}
    assert exported["kernel.py"].data.decode() == code + "# tuned & reviewed\n"
    assert exported["chart.png"].thread_ts == thread
    wait_until(lambda: not bot.store.pending_effects())   # marked done just after the post


# ------------------------------------------------------------------ commands, mentions, team review

def test_mention_starts_in_its_thread_and_commands_answer(make_bot, fake):
    bot = make_bot("socket")
    mention = fake.mention(REQUESTER, REQUEST)
    fake.deliver("event", mention)
    spec = card(bot, "1/6 Spec · r1")
    assert spec["thread_ts"] == mention["event"]["ts"]
    sid = bot.session().id

    assert "/kernel list" in fake.deliver("command", fake.command("help", REQUESTER)).body["text"]
    assert sid in fake.deliver("command", fake.command("list", REQUESTER)).body["text"]
    status = fake.deliver("command", fake.command(f"status {sid}", REQUESTER)).body
    assert header(status) == f"Session {sid} · active"
    assert "No session `knope`" in fake.deliver("command", fake.command("status knope", REQUESTER)).body["text"]
    assert "Usage: `/kernel export ID`" in fake.deliver("command", fake.command("export", REQUESTER)).body["text"]

    fake.deliver("command", fake.command(f"cancel {sid}", TEAMMATE))
    fake.wait_for("chat.postMessage", lambda c: c.args.get("text") == f"Session {sid} cancelled by <@{TEAMMATE}>.")
    card(bot, f"Session {sid} · cancelled")
    assert fake.deliver("command", fake.command("list", TEAMMATE)).body["text"] == "No open sessions in this channel."
    fake.deliver("event", fake.message(TEAMMATE, "thanks, nice work", thread_ts=spec["thread_ts"]))
    click(fake, REQUESTER, spec, "approve")
    ephemeral(fake, REQUESTER, "is cancelled")
    assert not fake.calls_to("chat.postEphemeral", lambda c: c.args["user"] == TEAMMATE), "talk after the end is ignored"


def test_approver_list_refuses_others_privately_and_card_shows_approver(make_bot, fake):
    bot = make_bot(approvers=frozenset({LEAD}))
    spec = start(bot)
    click(fake, TEAMMATE, spec, "regenerate")           # anyone may regenerate or correct
    spec2 = card(bot, "1/6 Spec · r2")
    click(fake, TEAMMATE, spec2, "approve")
    ephemeral(fake, TEAMMATE, "not on this team's approver list")
    fake.deliver("event", fake.message(TEAMMATE, f"<@{BOT_USER}> lgtm", thread_ts=spec["thread_ts"]))
    ephemeral(fake, TEAMMATE, "not on this team's approver list", count=2)
    assert not bot.session().approvals and not fake.calls_to("chat.postMessage", lambda c: "lgtm" in str(c.args))

    click(fake, LEAD, spec2, "approve")
    fake.wait_for("chat.update", lambda c: c.args["ts"] == spec2["ts"] and f"<@{LEAD}> at" in block_text(c.args))
    ref = card(bot, "2/6 PyTorch reference · r1")
    click(fake, LEAD, ref, "cancel")
    card(bot, f"Session {bot.session().id} · cancelled")


# ------------------------------------------------------------------ redelivery and restarts

def test_redelivered_events_and_actions_are_handled_once_also_after_restart(make_bot, fake, tmp_path):
    bot = make_bot()
    spec = start(bot)
    reply = fake.message(REQUESTER, "use shape 8x16 instead", thread_ts=spec["thread_ts"])
    fake.deliver("event", reply)
    card(bot, "1/6 Spec · r2")
    fake.deliver("event", reply, retry=1)
    spec2 = fake.find_message(lambda m: header(m) == "1/6 Spec · r2")
    approve = fake.button(TEAMMATE, CHANNEL, spec2["ts"], sb.PREFIX + "approve", button_value(spec2, "approve"))
    fake.deliver("interactive", approve)
    card(bot, "2/6 PyTorch reference · r1")
    fake.deliver("interactive", approve)

    bot.close()
    restarted = make_bot()                              # a new process on the same store
    restarted.svc.recover()
    fake.deliver("event", reply, retry=2)
    fake.deliver("interactive", approve)
    time.sleep(0.3)
    s = restarted.session()
    assert len(s.revisions_of("spec")) == 2 and len(s.approvals) == 1
    assert not fake.calls_to("chat.postEphemeral"), "a redelivery is dropped silently, not refused"
    assert fake.deliver("command", fake.command(f"status {s.id}", REQUESTER)).status == 200


# ------------------------------------------------------------------ bad input and Slack faults

def test_bad_signature_or_old_timestamp_is_401_and_changes_nothing(make_bot, fake):
    bot = make_bot()
    assert fake.deliver("command", fake.command(REQUEST, REQUESTER), signature="v0=" + "0" * 64).status == 401
    assert fake.deliver("command", fake.command(REQUEST, REQUESTER), timestamp=int(time.time()) - 3600).status == 401
    assert fake.deliver("command", fake.command(REQUEST, REQUESTER), secret="wrong-secret").status == 401
    assert bot.store.session_ids() == [] and [c.method for c in fake.calls] == ["auth.test"]


def test_malformed_payloads_and_unknown_sessions_get_clear_answers(make_bot, fake):
    bot = make_bot()
    spec = start(bot)
    assert fake.deliver("interactive", {}, raw=b"payload=%7Bnot+json").status == 400
    click(fake, TEAMMATE, spec, "approve", value="garbage")
    ephemeral(fake, TEAMMATE, "does not belong to a kernelbot session")
    click(fake, TEAMMATE, spec, "approve", value="kdeadbe|spec|1")
    ephemeral(fake, TEAMMATE, "Session `kdeadbe` is not in this bot's store")
    click(fake, TEAMMATE, spec, "edit", value="kdeadbe|kernel|3")
    ephemeral(fake, TEAMMATE, "Session `kdeadbe` is not in this bot's store")
    for event in ({"type": "reaction_added"}, {"type": "message", "channel": CHANNEL},
                  {"type": "app_mention", "user": REQUESTER}):
        assert fake.deliver("event", fake.event(event)).status == 200
    fake.deliver("event", fake.reaction(TEAMMATE, "+1", CHANNEL, "1.000000"))            # not a card
    fake.deliver("event", fake.message(TEAMMATE, "hi", thread_ts="2.000000"))           # not a session's thread
    fake.deliver("event", fake.reaction(TEAMMATE, "eyes", CHANNEL, spec["ts"]))          # not a thumbs-up
    time.sleep(0.2)
    s = bot.session()
    assert s.stage == "spec" and not s.approvals and len(s.revisions) == 1 and s.active


def test_deleted_thread_moves_the_session_to_a_new_thread(make_bot, fake):
    bot = make_bot()
    spec = start(bot)
    approve = fake.button(TEAMMATE, CHANNEL, spec["ts"], sb.PREFIX + "approve", button_value(spec, "approve"))
    fake.delete_thread(CHANNEL, spec["thread_ts"])
    fake.deliver("interactive", approve)                # the spec card is gone: its update is skipped
    ref = card(bot, "2/6 PyTorch reference · r1")
    moved = fake.messages[(CHANNEL, ref["thread_ts"])]
    assert ref["thread_ts"] != spec["thread_ts"] and "was deleted" in moved["text"] and "thread_ts" not in moved

    bot.close()
    bot = make_bot()                                    # the move survives a restart
    edited = bot.session().latest("reference").content + "# checked\n"
    fake.deliver("event", fake.message(REQUESTER, f"```python\n{edited}```", thread_ts=ref["thread_ts"]))
    assert card(bot, "2/6 PyTorch reference · r2")["thread_ts"] == ref["thread_ts"]
    assert bot.session().latest("reference").content == edited
    # The card is on Slack a moment before its outbox entry is marked done.
    wait_until(lambda: not bot.store.pending_effects())


def test_rate_limit_is_waited_out_and_channel_errors_are_explained(make_bot, fake, caplog, monkeypatch):
    bot = make_bot()
    fake.fail("chat.postMessage", "ratelimited", status=429, retry_after=1)
    spec = start(bot)
    assert fake.calls_to("chat.postMessage")[0].args == fake.calls_to("chat.postMessage")[1].args

    fake.deliver("command", fake.command(REQUEST, REQUESTER, channel="C0GONE0001"))
    answer = fake.wait_for("response_url")
    assert "could not post in this channel (channel_not_found)" in answer.args["text"]
    assert len(bot.store.session_ids()) == 1

    # An ephemeral Slack refuses (the person left the channel) is said in the thread instead.
    fake.fail("chat.postEphemeral", "user_not_in_channel")
    click(fake, TEAMMATE, spec, "approve", value=button_value(spec, "approve").replace("|1", "|7"))
    fake.wait_for("chat.postMessage", lambda c: c.args.get("text", "").startswith(f"<@{TEAMMATE}>: That card is"))

    # Mid-session: Slack refuses a post. The session and the effect are kept, and the bot's
    # polling loop retries effects now and then (every 30 s; here at once).
    fake.fail("chat.postMessage", "not_in_channel")
    with caplog.at_level(logging.WARNING, logger="kernelbot.service"):
        fake.deliver("event", fake.message(REQUESTER, "use shape 8x16 instead", thread_ts=spec["thread_ts"]))
        wait_until(lambda: "invite the bot to the channel (/invite @kernelbot)" in caplog.text)
    s = bot.session()
    assert s.feedback["spec"] == ["use shape 8x16 instead"] and bot.store.pending_effects()
    monkeypatch.setattr(wiring, "RECOVER_S", 0.0)
    stop = threading.Event()
    threading.Thread(target=wiring.keep_polling, args=(bot.svc, stop), daemon=True).start()
    try:
        card(bot, "1/6 Spec · r2")
        wait_until(lambda: not bot.store.pending_effects())
    finally:
        stop.set()


def test_a_locked_store_is_said_to_the_person_and_reads_still_answer(make_bot, fake):
    bot = make_bot()
    spec = start(bot)
    holder = sqlite3.connect(bot.cfg.db_path, isolation_level=None)
    holder.execute("BEGIN IMMEDIATE")                  # another process holds the write lock
    try:
        listed = fake.deliver("command", fake.command("list", REQUESTER))
        assert listed.seconds < 1.0 and bot.session().id in json.dumps(listed.body)
        assert click(fake, TEAMMATE, spec, "approve").status == 200
        ephemeral(fake, TEAMMATE, "cannot save: the bot's store is locked by another process; nothing was done")
    finally:
        holder.execute("ROLLBACK")
        holder.close()
    assert not bot.session().approvals
    click(fake, TEAMMATE, spec, "approve")             # the person tries again, as told
    card(bot, "2/6 PyTorch reference · r1")
    assert len(bot.session().approvals) == 1


def test_a_card_whose_answer_was_lost_is_found_not_posted_again(make_bot, fake):
    bot = make_bot()
    spec = start(bot)
    # Slack posts the next card but its answer is lost (a 500): the outbox keeps the effect, and on
    # its retry the bot finds the card by the key in its metadata instead of posting a second one.
    fake.fail("chat.postMessage", "internal_error", status=500, after_doing_it=True)
    click(fake, TEAMMATE, spec, "approve")
    ref = fake.find_message(lambda m: header(m) == "2/6 PyTorch reference · r1")
    # Its retry may come at once, from a second drain of the session (the click's own, racing the
    # generator's), or from the polling loop's retry pass, called here.
    wait_until(lambda: bot.store.pending_effects() or bot.chat.card_at(ref["channel"], ref["ts"]))
    bot.svc.recover()
    wait_until(lambda: bot.chat.card_at(ref["channel"], ref["ts"]))
    assert len([m for m in fake.messages.values() if header(m) == "2/6 PyTorch reference · r1"]) == 1
    assert fake.calls_to("conversations.replies")
    click(fake, TEAMMATE, ref, "approve")               # the card found is the live one
    card(bot, "3/6 Reference test · r1")


def test_a_card_retried_after_its_files_went_up_does_not_upload_them_again(make_bot, fake):
    bot = make_bot()
    click(fake, TEAMMATE, start(bot), "approve")
    ref = card(bot, "2/6 PyTorch reference · r1")
    # The reference test's file goes up, then Slack refuses the card itself (a 500 before doing it).
    fake.fail("chat.postMessage", "internal_error", status=500)
    click(fake, TEAMMATE, ref, "approve")
    uploaded(fake, "test_reference.py")
    wait_until(lambda: bot.store.pending_effects()
               or any(header(m) == "3/6 Reference test · r1" for m in list(fake.messages.values())))
    bot.svc.recover()
    card(bot, "3/6 Reference test · r1")
    assert len([f for f in fake.files if f.filename.endswith("test_reference.py")]) == 1


def test_a_notice_whose_answer_was_lost_is_said_once(make_bot, fake):
    bot = make_bot()
    spec = start(bot)
    fake.fail("chat.postMessage", "internal_error", status=500, after_doing_it=True)
    fake.deliver("event", fake.message(REQUESTER, "use shape 8x16 instead", thread_ts=spec["thread_ts"]))
    wait_until(lambda: bot.store.pending_effects() or bot.session().latest("spec").rev == 2)
    bot.svc.recover()
    card(bot, "1/6 Spec · r2")
    said = [m for m in fake.messages.values() if "asked for changes" in m.get("text", "")]
    assert len(said) == 1 and said[0]["thread_ts"] == spec["thread_ts"]


def test_a_request_whose_thread_root_answer_was_lost_opens_one_thread(make_bot, fake):
    bot = make_bot()
    # Slack posts the /kernel request's root message but its answer is lost: the request stays in
    # the inbox, and its retry finds that root by its key in the channel instead of posting another.
    fake.fail("chat.postMessage", "internal_error", status=500, after_doing_it=True)
    assert fake.deliver("command", fake.command(REQUEST, REQUESTER)).status == 200
    wait_until(lambda: bot.store.pending_inbox())
    bot.svc.recover()
    spec = card(bot, "1/6 Spec · r1")
    roots = [m for m in fake.messages.values() if "asked for a kernel" in m.get("text", "") and "thread_ts" not in m]
    assert len(roots) == 1 and spec["thread_ts"] == roots[0]["ts"]
    assert bot.chat.session_in_thread(CHANNEL, roots[0]["ts"]) == bot.session().id


def test_a_recovery_pass_racing_a_requests_first_post_opens_one_thread(make_bot, fake):
    bot = make_bot()
    # The first post of the request's root is slow and its answer lost; a recovery pass that runs
    # meanwhile must wait for it and then find that root, not post a second one.
    fake.fail("chat.postMessage", "internal_error", status=500, after_doing_it=True, delay=1.0)
    assert fake.deliver("command", fake.command(REQUEST, REQUESTER)).status == 200
    fake.wait_for("chat.postMessage")
    bot.svc.recover()
    spec = card(bot, "1/6 Spec · r1")
    fake.settle()
    roots = [m for m in fake.messages.values() if "asked for a kernel" in m.get("text", "") and "thread_ts" not in m]
    assert len(roots) == 1 and spec["thread_ts"] == roots[0]["ts"]


@pytest.fixture
def small_disk(tmp_path):
    """A 4 MiB tmpfs for the bot's home (root only: skipped where mount is refused)."""
    disk = tmp_path / "disk"
    disk.mkdir()
    if subprocess.run(["mount", "-t", "tmpfs", "-o", "size=4m", "tmpfs", str(disk)], capture_output=True).returncode:
        pytest.skip("cannot mount a tmpfs here (needs root): the full-disk case runs in CI, as root")
    yield disk
    subprocess.run(["umount", "-l", str(disk)])


def fill(disk: Path) -> Path:
    filler = disk / "filler"
    with open(filler, "wb", buffering=0) as f:          # unbuffered: nothing left to flush on close
        try:
            while True:
                f.write(b"\0" * 65536)
        except OSError:
            pass
    return filler


def test_a_full_disk_is_said_and_the_redelivered_event_applies(fake, small_disk):
    bot = Bot(fake, small_disk, "http")
    try:
        spec = start(bot)
        filler = fill(small_disk)
        reply = fake.message(REQUESTER, "use shape 8x16 instead", thread_ts=spec["thread_ts"])
        assert fake.deliver("event", reply).status >= 500     # not acknowledged: Slack will send it again
        ephemeral(fake, REQUESTER, "cannot save: disk full on the bot host")
        os.unlink(filler)
        assert fake.deliver("event", reply, retry=1).status == 200
        card(bot, "1/6 Spec · r2")
        assert bot.session().feedback["spec"] == ["use shape 8x16 instead"]
    finally:
        bot.close()


# ------------------------------------------------------------------ rendering, parsing, setup

def test_blocks_respect_slack_limits():
    code = "\n".join(f"x{i} = a < b & c  # {'y' * 60}" for i in range(400))
    c = Card(title="T" * 300, status=f"approved by {LEAD}", session_id="k1", fields=[(f"f{i}", "v" * 2500)
             for i in range(13)], code=code, code_filename="kernel.py", table=[["a", "b"]] + [["1", "2" * 50]] * 200,
             notes=["n"] * 15, actions=("approve", "cancel"), stage="kernel", rev=2)
    blocks = sb.card_blocks(c)
    assert len(blocks) <= 50 and len(blocks[0]["text"]["text"]) == 150 and sb.code_as_file(c)
    texts = [b["text"]["text"] for b in blocks if b["type"] == "section" and "text" in b]
    assert all(len(t) <= 3000 for t in texts) and all(t.count("```") % 2 == 0 for t in texts)
    assert f"<@{LEAD}>" in texts[0] and "a &lt; b &amp; c" in json.dumps(blocks)
    assert all(len(f["text"]) <= 2000 for b in blocks for f in b.get("fields", []))
    assert all(len(b["fields"]) <= 10 for b in blocks if "fields" in b)
    assert all(len(b["elements"]) <= 10 for b in blocks if b["type"] == "context")
    long_edit = sb.edit_modal("k1|kernel|2", "kernel", code)
    assert "initial_value" not in long_edit["blocks"][-1]["element"] and len(long_edit["title"]["text"]) <= 24


def test_reply_and_reaction_parsing():
    assert all(is_thumbs_up(n) for n in ("+1", "thumbsup", "+1::skin-tone-3", ":thumbsup::skin-tone-6:"))
    assert not any(is_thumbs_up(n) for n in ("-1", "eyes", "thumbsdown"))
    assert reply_code("new version:\n```python\ndef f(x):\n    return x\n```") == "def f(x):\n    return x\n"
    assert reply_code("```def f(x):\n    return x```") == "def f(x):\n    return x\n"
    assert reply_code("please make it faster") is None
    assert slack_text(f"<@{BOT_USER}> ask <@{LEAD}|lead> &amp; use x &lt; 0", BOT_USER) == f"ask {LEAD} & use x < 0"


def test_manifest_declares_what_the_app_listens_to():
    manifest = (ROOT / "slack_manifest.yaml").read_text()
    for needed in ("command: /kernel", "interactivity:", "is_enabled: true", "socket_mode_enabled: true",
                   "app_mentions:read", "channels:history", "chat:write", "commands", "files:write",
                   "reactions:read", "app_mention", "message.channels", "message.groups", "reaction_added"):
        assert needed in manifest, needed


def test_assemble_reads_slack_settings_from_the_environment(fake, tmp_path, monkeypatch):
    cfg = Config(home=tmp_path, db_path=tmp_path / "kb.db", queue_url=f"sqlite:///{tmp_path / 'q.db'}", backend="cpu")
    monkeypatch.delenv("SLACK_BOT_TOKEN", raising=False)
    with pytest.raises(SystemExit, match="SLACK_BOT_TOKEN"):
        assemble(cfg, http=False)
    monkeypatch.setenv("SLACK_BOT_TOKEN", "xoxb-from-env")
    monkeypatch.setenv("SLACK_APP_TOKEN", "xapp-from-env")
    monkeypatch.setenv("KERNELBOT_SLACK_API_URL", fake.api_url.rstrip("/"))
    svc, app, app_token = assemble(cfg, http=False)
    svc.shutdown()
    assert app_token == "xapp-from-env" and fake.calls_to("auth.test")[0].token == "xoxb-from-env"
    monkeypatch.delenv("SLACK_SIGNING_SECRET", raising=False)
    with pytest.raises(SystemExit, match="SLACK_SIGNING_SECRET"):
        assemble(cfg, http=True)
