"""The Discord adapter with the real discord.py client against a loopback Discord
(tests/fakes/discord.py): gateway dispatches in, REST calls out. The runner is a recording
queue the tests answer with realistic results."""
from __future__ import annotations

import json
import logging
import time
from pathlib import Path
from types import SimpleNamespace

import pytest

discord = pytest.importorskip("discord", reason="the Discord adapter needs the discord extra")

from discord.gateway import DiscordWebSocket
from fakes.discord import BOT_ID, CHANNEL, EPHEMERAL, GUILD, OTHER_CHANNEL, REVIEWER_ROLE, TOKEN, FakeDiscord
from fakes.queue import MemoryQueue
from fakes.runner import BENCH, chart_png, run_job, wait_until

from bot import cli
from bot.chat.commands import is_thumbs_up, parse_command
from bot.chat.discord import app as da
from bot.chat.discord import render as de
from bot.config import Config
from bot.generators.offline import OfflineGenerator
from bot.workflow.cards import Card
from bot.workflow.messages import Messages
from bot.workflow.service import Service
from bot.workflow.store import Store

REQUEST = "add two fp32 matrices of shape 4x8"
THUMBS_UP = "\N{THUMBS UP SIGN}"


class Bot:
    """The bot as `kernelbot discord` wires it, on a test store and queue, talking to the fake."""

    def __init__(self, fake: FakeDiscord, home: Path, approver_role: str = "", **policy) -> None:
        self.fake, self.queue = fake, MemoryQueue()
        self.cfg = Config(home=home, db_path=home / "kb.db", queue_url="", backend="cpu", **policy)
        self.store = Store(self.cfg.db_path)
        da.point_at(fake.api_url, fake.gateway_url)
        self.svc, self.client = da.connect(
            lambda chat: Service(self.cfg, self.store, OfflineGenerator(), chat, lambda backend: self.queue),
            Messages(self.store, "discord"), [int(GUILD)], approver_role, guild_ready_timeout=0.05)
        self.chat = self.client.bot.chat
        self.gateway = da.Gateway(self.client, TOKEN).start(10)

    def session(self):
        ids = self.store.session_ids()
        return self.store.load(ids[-1]) if ids else None

    def close(self) -> None:
        self.gateway.stop()
        self.svc.shutdown()


@pytest.fixture(autouse=True)
def discord_urls(monkeypatch):
    """point_at changes discord.py's process-wide URLs; each test gets them back afterwards."""
    monkeypatch.setattr(discord.http.Route, "BASE", discord.http.Route.BASE)
    monkeypatch.setattr(DiscordWebSocket, "DEFAULT_GATEWAY", DiscordWebSocket.DEFAULT_GATEWAY)


@pytest.fixture
def fake():
    f = FakeDiscord().start()
    yield f
    f.close()
    slow = [(i.id, i.answered_in) for i in f.interactions.values() if i.answered_in is None or i.answered_in >= 3.0]
    assert not slow, f"Discord wants every interaction answered within 3 s: {slow}"


@pytest.fixture
def make_bot(fake, tmp_path):
    bots = []

    def make(**kw) -> Bot:
        bots.append(Bot(fake, tmp_path, **kw))
        return bots[-1]
    yield make
    for b in bots:
        b.close()


# ------------------------------------------------------------------ reading what the bot posted

def title(msg: dict) -> str:
    return msg["embeds"][0].get("title", "") if msg.get("embeds") else ""


def shown(msg: dict) -> str:
    """Everything a person sees of a message: content, embeds, buttons, attachment names."""
    return msg["content"] + json.dumps(msg["embeds"]) + json.dumps(msg["components"]) + " ".join(
        a["filename"] for a in msg["attachments"])


def card(bot: Bot, heading: str) -> dict:
    """The message holding the card with this title, once it is posted and the bot knows it."""
    msg = bot.fake.find_message(lambda m: title(m) == heading)
    wait_until(lambda: bot.chat.card_at(int(msg["id"])))
    return msg


def custom_id(msg: dict, action: str) -> str:
    return next(c["custom_id"] for row in msg["components"] for c in row["components"]
                if c["custom_id"].startswith(f"kb:{action}:"))


def click(fake: FakeDiscord, user: str, msg: dict, action: str) -> str:
    return fake.click(user, msg, custom_id(msg, action))


def ephemeral(fake: FakeDiscord, user: str, words: str) -> str:
    return fake.wait_for(lambda: next((t for t in fake.ephemerals(user) if words in t), None),
                         what=f"an ephemeral {words!r} to {user}")


def attachment(msg: dict, filename_end: str) -> dict:
    return next(a for a in msg["attachments"] if a["filename"].endswith(filename_end))


def start(bot: Bot, user: str, request: str = REQUEST) -> dict:
    """/kernel request:REQUEST; returns the spec card (its channel is the session's thread)."""
    bot.fake.slash(user, request=request)
    spec = card(bot, "1/6 Spec · r1")
    wait_until(lambda: bot.chat.session_in_thread(int(spec["channel_id"])))
    return spec


# ------------------------------------------------------------------ the whole workflow

def test_full_session_through_discord_payloads(make_bot, fake):
    bot = make_bot(four_eyes=True)
    dev, mate = fake.user("dev"), fake.user("mate")
    spec1 = start(bot, dev)
    thread = spec1["channel_id"]
    root = fake.messages[thread]                        # a thread started from a message takes its id
    assert root["channel_id"] == CHANNEL and f"<@{dev}> asked for a kernel" in root["content"]
    assert fake.channels[thread]["parent_id"] == CHANNEL and not root["flags"] & EPHEMERAL
    assert custom_id(spec1, "approve") == f"kb:approve:{bot.session().id}|spec|1"
    seen_before = json.loads(json.dumps(spec1))         # r1 as a reviewer's client still shows it

    # A plain reply in the thread corrects the current stage; the bot marks it seen.
    reply = fake.say(dev, "use shape 8x16 instead", thread)
    spec2 = card(bot, "1/6 Spec · r2")
    assert "8x16" in shown(spec2) and spec2["channel_id"] == thread
    assert not fake.messages[spec1["id"]]["components"], "r1 shows as superseded, without buttons"
    fake.wait_for(lambda: (reply["id"], BOT_ID, "\N{EYES}") in fake.reactions)

    # A button on the older revision says so, to the person who clicked only.
    click(fake, mate, seen_before, "approve")
    ephemeral(fake, mate, "no longer current")

    click(fake, mate, spec2, "approve")
    card(bot, "2/6 PyTorch reference · r1")

    # A reply holding a ```python block replaces the code; a thumbs-up (any skin tone) approves it.
    checked = bot.session().latest("reference").content + "# checked\n"
    fake.say(dev, f"here:\n```python\n{checked}```", thread)
    ref = card(bot, "2/6 PyTorch reference · r2")
    assert bot.session().latest("reference").content == checked
    fake.react(mate, ref, THUMBS_UP + "\N{EMOJI MODIFIER FITZPATRICK TYPE-4}")
    rtest = card(bot, "3/6 Reference test · r1")
    assert rtest["channel_id"] == thread

    # Approved execution stage: queued, then running on the runner's host and GPU, edited in place.
    click(fake, mate, rtest, "approve")
    run_job(bot.queue, bot.svc.poll_jobs, "reference_test")
    for state in ("queued for a cpu runner", "running on gpu-7 (NVIDIA H200): correctness 1/1"):
        fake.wait_for(lambda: fake.calls_to("PATCH", f"/messages/{rtest['id']}$",
                                            lambda c: state in json.dumps(c.body)), what=state)
    res = card(bot, "Reference test result · PASS")
    assert "at (3, 5): got 1.5, want 1.5" in shown(res) and "ok" in shown(res) and res["channel_id"] == thread

    # Kernel: request changes (modal), edit (modal), edit by a code block reply.
    k1 = card(bot, "4/6 Triton kernel · r1")
    click(fake, dev, k1, "correct")
    modal = fake.wait_for(lambda: fake.modals[-1:])[0]
    assert modal["custom_id"] == custom_id(k1, "correct")
    fake.submit(dev, modal, {"correct": "block size 128"})
    k2 = card(bot, "4/6 Triton kernel · r2")
    assert "block=128" in shown(k2)

    click(fake, dev, k2, "edit")
    edit = fake.wait_for(lambda: len(fake.modals) == 2 and fake.modals[-1])
    code = bot.session().latest("kernel").content
    # longer than one text box: in boxes of whole lines, which joined are the file
    boxes = {c["component"]["custom_id"]: c["component"]["value"] for c in edit["components"]}
    assert len(boxes) > 1 and "".join(boxes.values()) == code and all(v.endswith("\n") for v in boxes.values())
    assert [c["label"] for c in edit["components"]][:2] == [f"kernel.py, part {k} of {len(boxes)}" for k in (1, 2)]
    fake.submit(dev, edit, {"edit": "def broken(:\n"})
    ephemeral(fake, dev, "not valid Python")
    fake.submit(dev, edit, {**boxes, list(boxes)[-1]: list(boxes.values())[-1] + "# reviewed\n"})
    k3 = card(bot, "4/6 Triton kernel · r3")
    assert f"<@{dev}> (edit)" in shown(k3)

    # Longer code than a Discord message holds comes as an attached file.
    fake.say(dev, "tuned", thread, files={"kernel.py": f"{code}# tuned & reviewed\n".encode()})
    k4 = card(bot, "4/6 Triton kernel · r4")
    assert bot.session().latest("kernel").content == code + "# tuned & reviewed\n"

    # Four-eyes: the requester's approval of their own kernel is refused, to them only.
    click(fake, dev, k4, "approve")
    ephemeral(fake, dev, "Four-eyes review is on")
    fake.react(mate, k4)
    ktest = card(bot, "5/6 Kernel test · r1")
    fake.wait_for(lambda: f"<@{mate}> at" in shown(fake.messages[k4["id"]]), what="k4 shows its approver")

    click(fake, mate, ktest, "approve")
    run_job(bot.queue, bot.svc.poll_jobs, "kernel_test")
    bench = card(bot, "6/6 Benchmark · r1")
    click(fake, mate, bench, "approve")
    job = run_job(bot.queue, bot.svc.poll_jobs, "benchmark", chart_png_b64=chart_png(), **BENCH)
    assert set(job["kernels"]) == {"r1", "r2", "r3"}

    # The bench table in the result card, the chart attached and shown in the embed, then the summary.
    bres = card(bot, "Benchmark result · PASS")
    assert "speedup" in shown(bres) and "1.07x" in shown(bres)
    chart = attachment(bres, "-chart.png")
    assert fake.files[chart["id"]].startswith(b"\x89PNG")
    assert bres["embeds"][0]["image"]["url"] == f"attachment://{chart['filename']}"
    s = bot.session()
    card(bot, f"Session {s.id} · done")
    assert s.status == "done" and s.approval("benchmark", 1).approver == mate

    fake.slash(dev, action="export", session=s.id)
    export = fake.find_message(lambda m: s.id in m["content"] and len(m["attachments"]) > 3, channel_id=thread)
    files = {a["filename"]: fake.files[a["id"]] for a in export["attachments"]}
    assert {"kernel.py", "REPORT.md", "report.json", "chart.png"} <= set(files)
    assert files["kernel.py"].decode() == code + "# tuned & reviewed\n"
    ephemeral(fake, dev, f"Exported session `{s.id}`")
    wait_until(lambda: not bot.store.pending_effects())   # marked done just after the post


# ------------------------------------------------------------------ reconnects and restarts

def test_reconnect_mid_session_loses_nothing_and_handles_nothing_twice(make_bot, fake):
    bot = make_bot()
    dev, mate = fake.user("dev"), fake.user("mate")
    spec = start(bot, dev)
    thread = spec["channel_id"]
    mark = fake.seq
    fake.say(dev, "use shape 8x16 instead", thread)
    spec2 = card(bot, "1/6 Spec · r2")
    approve = click(fake, mate, spec2, "approve")
    ref = card(bot, "2/6 PyTorch reference · r1")
    session_id = bot.client.ws.session_id

    # Op 7, then a thumbs-up while the bot reconnects. The RESUME replays everything since before the
    # correction: what the bot missed (the thumbs-up), and what it had handled already.
    fake.reconnect(replay_after=mark)
    fake.react(mate, ref)
    assert fake.connected.wait(10), "the bot did not resume"
    card(bot, "3/6 Reference test · r1")
    assert len(fake.identified) == 1 and fake.resumed[-1]["session_id"] == session_id
    assert fake.resumed[-1]["seq"] > mark
    time.sleep(0.3)                                     # give a wrongly repeated event time to show
    # The replayed click is in the inbox already: it is neither applied nor answered again.
    assert len(fake.calls_to("POST", f"/interactions/{approve}/")) == 1
    assert len(fake.interactions[approve].responses) == 1
    s = bot.session()
    assert [r.rev for r in s.revisions_of("spec")] == [1, 2] and s.feedback["spec"] == ["use shape 8x16 instead"]
    assert [(a.stage, a.approver) for a in s.approvals] == [("spec", mate), ("reference", mate)]
    assert len([m for m in fake.channel_messages(thread) if "asked for changes" in m["content"]]) == 1
    assert not bot.store.pending_effects() and fake.heartbeats >= 2


def test_buttons_and_forms_from_before_a_restart_still_work(make_bot, fake):
    bot = make_bot()
    dev, mate = fake.user("dev"), fake.user("mate")
    spec = start(bot, dev)
    click(fake, dev, spec, "correct")
    modal = fake.wait_for(lambda: fake.modals[-1:])[0]

    bot.close()
    restarted = make_bot()                              # a new process on the same store
    click(fake, mate, spec, "approve")                  # a button posted by the first process
    ref = card(restarted, "2/6 PyTorch reference · r1")
    assert ref["channel_id"] == spec["channel_id"]
    fake.submit(dev, modal, {"correct": "use shape 8x16 instead"})   # a form opened before the restart
    ephemeral(fake, dev, "no longer current")
    fake.react(mate, ref)
    card(restarted, "3/6 Reference test · r1")


def test_deleted_thread_moves_the_session_to_a_new_thread(make_bot, fake):
    bot = make_bot()
    dev, mate = fake.user("dev"), fake.user("mate")
    spec = start(bot, dev)
    fake.delete_thread(spec["channel_id"])
    click(fake, mate, spec, "approve")                  # a click that was on its way: the card is gone
    ref = card(bot, "2/6 PyTorch reference · r1")
    moved = fake.messages[ref["channel_id"]]            # a thread started from a message takes its id
    assert ref["channel_id"] != spec["channel_id"] and moved["channel_id"] == CHANNEL
    assert "was deleted; it continues in the thread below" in moved["content"]

    bot.close()
    bot = make_bot()                                    # the move survives a restart
    edited = bot.session().latest("reference").content + "# checked\n"
    fake.say(dev, f"```python\n{edited}```", ref["channel_id"])
    assert card(bot, "2/6 PyTorch reference · r2")["channel_id"] == ref["channel_id"]
    assert bot.session().latest("reference").content == edited
    fake.slash(dev, action="list")                      # commands point at the new thread
    ephemeral(fake, dev, f"<#{ref['channel_id']}>")


# ------------------------------------------------------------------ commands and team review

def test_kernel_command_answers_privately_and_manages_sessions(make_bot, fake):
    bot = make_bot()
    dev, mate = fake.user("dev"), fake.user("mate")
    spec = start(bot, dev)
    thread, sid = spec["channel_id"], bot.session().id

    fake.slash(dev, request="help")
    ephemeral(fake, dev, "`/kernel request:list` open sessions in this channel")
    fake.slash(dev, action="list")
    ephemeral(fake, dev, f"`{sid}` · 1/6 Spec · <@{dev}> · <#{thread}>")
    fake.slash(dev, request=f"status {sid}")
    fake.find_message(lambda m: m["flags"] & EPHEMERAL and title(m) == f"Session {sid} · active")
    fake.slash(dev, request="status knope")
    ephemeral(fake, dev, "No session `knope`")
    fake.slash(dev, action="export")
    ephemeral(fake, dev, "Usage: `/kernel request:export ID`")
    fake.slash(dev, channel_id=thread, request=REQUEST)
    ephemeral(fake, dev, "Run `/kernel` in a server's text channel")

    fake.slash(mate, action="cancel", session=sid)
    fake.find_message(lambda m: m["content"] == f"Session {sid} cancelled by <@{mate}>.", channel_id=thread)
    card(bot, f"Session {sid} · cancelled")
    ephemeral(fake, mate, f"Session `{sid}` is cancelled")
    fake.slash(mate, action="list")
    ephemeral(fake, mate, "No open sessions in this channel.")

    said = len(fake.channel_messages(thread))
    fake.say(mate, "thanks, nice work", thread)        # talk after the end is just talk
    click(fake, dev, spec, "approve")
    ephemeral(fake, dev, "is cancelled")
    assert len(fake.channel_messages(thread)) == said + 1 and not [r for r in fake.reactions if r[2] == "\N{EYES}"]
    assert len(bot.store.session_ids()) == 1


def test_approver_role_refuses_others_privately(make_bot, fake):
    bot = make_bot(approver_role="Kernel-Reviewers")
    dev, mate, lead = fake.user("dev"), fake.user("mate"), fake.user("lead", roles=(REVIEWER_ROLE,))
    spec = start(bot, dev)
    click(fake, mate, spec, "regenerate")              # anyone may regenerate or correct
    spec2 = card(bot, "1/6 Spec · r2")
    click(fake, mate, spec2, "approve")
    ephemeral(fake, mate, "Only members with the `Kernel-Reviewers` role may approve")
    fake.react(mate, spec2)                             # after a click of theirs: privately again
    fake.say(mate, f"<@{BOT_ID}> lgtm", spec["channel_id"])
    fake.wait_for(lambda: len([t for t in fake.ephemerals(mate) if "Only members" in t]) == 3)
    stranger = fake.user("stranger")
    fake.react(stranger, spec2)                         # no interaction to answer: a mention in the thread
    fake.find_message(lambda m: m["content"].startswith(f"<@{stranger}> Only members"), channel_id=spec["channel_id"])
    assert not bot.session().approvals

    click(fake, lead, spec2, "approve")
    card(bot, "2/6 PyTorch reference · r1")
    assert bot.session().approval("spec", 2).approver == lead
    by_id = da.DiscordBot(bot.svc, bot.chat, REVIEWER_ROLE)           # the role may be named by its id too
    reviewer = SimpleNamespace(roles=[SimpleNamespace(id=int(REVIEWER_ROLE), name="kernel-reviewers")])
    assert by_id.may_approve(reviewer)
    assert not by_id.may_approve(SimpleNamespace(roles=[])) and not by_id.may_approve(None)


# ------------------------------------------------------------------ bad input and Discord faults

def test_unknown_buttons_stray_messages_and_reactions_change_nothing(make_bot, fake):
    bot = make_bot()
    dev, mate = fake.user("dev"), fake.user("mate")
    spec = start(bot, dev)
    foreign = {**spec, "components": [{"type": 1, "components": [
        {"type": 2, "style": 1, "label": label, "custom_id": cid} for label, cid in
        (("Vote", "poll:yes"), ("Approve", "kb:approve:garbage"), ("Approve", "kb:approve:kdeadbe|spec|1"),
         ("Edit", "kb:edit:kdeadbe|kernel|3"))]}]}
    for cid in ("poll:yes", "kb:approve:garbage"):
        fake.click(mate, foreign, cid)
    fake.wait_for(lambda: len([t for t in fake.ephemerals(mate) if "does not belong" in t]) == 2)
    for cid in ("kb:approve:kdeadbe|spec|1", "kb:edit:kdeadbe|kernel|3"):
        fake.click(mate, foreign, cid)
    fake.wait_for(lambda: len([t for t in fake.ephemerals(mate) if "Session `kdeadbe` is not in" in t]) == 2)

    before = len(fake.calls)
    fake.say(mate, "use shape 8x16 instead", OTHER_CHANNEL)             # not a session's thread
    fake.say(mate, "use shape 8x16 instead", CHANNEL)                   # the channel, not the thread
    fake.react(mate, spec, "\N{EYES}")                                  # not a thumbs-up
    fake.react(mate, fake.messages[spec["channel_id"]])                 # the root message is not a card
    time.sleep(0.3)
    assert fake.calls[before:] == [] and not bot.store.pending_effects()
    s = bot.session()
    assert s.stage == "spec" and not s.approvals and len(s.revisions) == 1 and s.active


def test_rate_limits_are_waited_out_and_refusals_explained(make_bot, fake, caplog):
    bot = make_bot()
    dev = fake.user("dev")
    fake.fail("POST", r"/channels/\d+/messages$", 429, retry_after=0.2)
    spec = start(bot, dev)
    posts = fake.calls_to("POST", r"/channels/\d+/messages$")
    assert posts[0].body == posts[1].body and posts[1].at - posts[0].at >= 0.2

    # Discord refuses a post in the thread: the session and the effect are kept, and retried later
    # (the polling loop recovers now and then; here at once).
    fake.fail("POST", rf"/channels/{spec['channel_id']}/messages$", 403, {"message": "Missing Permissions",
                                                                         "code": 50013})
    with caplog.at_level(logging.WARNING, logger="kernelbot.service"):
        fake.say(dev, "use shape 8x16 instead", spec["channel_id"])
        wait_until(lambda: "give the bot View Channel, Send Messages in Threads" in caplog.text)
    assert bot.store.pending_effects() and bot.session().feedback["spec"] == ["use shape 8x16 instead"]
    bot.svc.recover()
    card(bot, "1/6 Spec · r2")
    wait_until(lambda: not bot.store.pending_effects())

    # No permission to open threads: said in place of the root message; no session is started.
    fake.fail("POST", r"/threads$", 403, {"message": "Missing Permissions", "code": 50013})
    fake.slash(dev, request=REQUEST)
    fake.find_message(lambda m: m["content"].startswith("I could not open a thread here (403 Missing Permissions)"))
    assert len(bot.store.session_ids()) == 1


def test_a_card_whose_answer_was_lost_is_not_posted_twice(make_bot, fake):
    bot = make_bot()
    dev, mate = fake.user("dev"), fake.user("mate")
    spec = start(bot, dev)
    # Discord makes the next card but its answer is lost (a 500): discord.py sends the post again, with
    # the same enforced nonce, and Discord answers with the message it already made.
    fake.fail("POST", rf"/channels/{spec['channel_id']}/messages$", 500, after_doing_it=True)
    click(fake, mate, spec, "approve")
    ref = card(bot, "2/6 PyTorch reference · r1")
    wait_until(lambda: not bot.store.pending_effects())
    assert len([m for m in fake.channel_messages(spec["channel_id"]) if title(m) == "2/6 PyTorch reference · r1"]) == 1
    assert len(fake.calls_to("POST", rf"/channels/{spec['channel_id']}/messages$",
                             lambda c: (c.body or {}).get("nonce"))) >= 2
    assert bot.chat.card_at(int(ref["id"]))


def test_a_card_posted_before_its_answer_was_cut_is_found_after_the_nonce_expired(make_bot, fake):
    bot = make_bot()
    dev, mate = fake.user("dev"), fake.user("mate")
    spec = start(bot, dev)
    # Discord makes the card, the connection drops before its answer, and the retry comes after
    # Discord stopped enforcing the nonce: the bot finds the card in the thread instead of posting it again.
    fake.nonce_window_s = 0.0
    fake.fail("POST", rf"/channels/{spec['channel_id']}/messages$", 0, after_doing_it=True)
    click(fake, mate, spec, "approve")
    wait_until(lambda: bot.store.pending_effects() or fake.calls_to("GET", rf"/channels/{spec['channel_id']}/messages$"))
    bot.svc.recover()                                   # unless a second drain of the session retried at once
    ref = card(bot, "2/6 PyTorch reference · r1")
    assert len([m for m in fake.channel_messages(spec["channel_id"]) if title(m) == "2/6 PyTorch reference · r1"]) == 1
    assert fake.calls_to("GET", rf"/channels/{spec['channel_id']}/messages$")
    click(fake, mate, ref, "approve")                   # the card found is the live one
    card(bot, "3/6 Reference test · r1")


# ------------------------------------------------------------------ rendering, parsing, setup

def test_embeds_respect_discord_limits():
    code = "\n".join(f"x{i} = a * b_c  # ``` {'y' * 60}" for i in range(400))
    c = Card(title="T" * 300, status=f"approved by {BOT_ID} " + "s" * 600, session_id="k1",
             fields=[(f"f{i}", "v" * 2500) for i in range(30)], code=code, code_filename="kernel.py",
             code_lang="python", table=[["a", "b"]] + [["1", "2" * 50]] * 200, notes=["n"] * 15,
             actions=("approve", "correct", "edit", "regenerate", "cancel"), stage="kernel", rev=2, image=b"\x89PNG",
             image_name="k1-chart.png")
    r = de.render(c)
    e = r.embed
    assert len(e["title"]) == 256 and len(e["description"]) <= 4096 and len(e["fields"]) <= 25
    assert all(len(f["name"]) <= 256 and len(f["value"]) <= 1024 for f in e["fields"])
    total = len(e["title"]) + len(e["description"]) + len(e["footer"]["text"]) + sum(
        len(f["name"]) + len(f["value"]) for f in e["fields"])
    assert total <= 6000 and e["description"].count("```") % 2 == 0
    assert f"<@{BOT_ID}>" in e["description"] and e["image"]["url"] == "attachment://k1-chart.png"
    assert [a.filename for a in r.files] == ["k1-kernel-table.txt", "kernel.py", "k1-chart.png"]
    assert r.files[1].data.decode() == code + "\n" and "the whole file is attached" in e["description"]
    assert [b.label for b in r.buttons] == ["Approve", "Request changes", "Edit", "Regenerate", "Cancel"]
    assert all(len(b.custom_id) <= 100 and de.CUSTOM_ID.fullmatch(b.custom_id) for b in r.buttons)
    small = de.render(Card(title="2/6 PyTorch reference · r1", status="waiting for review", session_id="k1",
                           code="def f(x):\n    return x * 2\n", code_lang="python", stage="reference", rev=1))
    assert small.files == [] and "```python\ndef f(x):\n    return x * 2\n```" in small.embed["description"]
    assert de.notice(f"{BOT_ID} asked for *bold* changes") == f"<@{BOT_ID}> asked for \\*bold\\* changes"


def test_reply_reaction_command_and_form_parsing():
    assert all(is_thumbs_up(n) for n in (THUMBS_UP, THUMBS_UP + "\N{EMOJI MODIFIER FITZPATRICK TYPE-6}", "+1"))
    assert not any(is_thumbs_up(n) for n in ("\N{THUMBS DOWN SIGN}", "\N{EYES}", "thumbsdown"))
    assert parse_command("") == ("help", "") and parse_command("list") == ("list", "")
    assert parse_command("status  k1a2b3") == ("status", "k1a2b3")
    assert parse_command("list mine") == ("start", "list mine")
    assert parse_command(REQUEST) == ("start", REQUEST)
    someone = BOT_ID[:-1] + "7"
    assert da.discord_text(f"<@{BOT_ID}> ask <@!{someone}> about it", int(BOT_ID)) == f"ask {someone} about it"
    form = [{"type": 1, "components": [{"type": 4, "custom_id": "other", "value": "x"}]},
            {"type": 18, "component": {"type": 4, "custom_id": "edit", "value": "def f(): pass"}}]
    assert da.modal_value(form, "edit") == "def f(): pass" and da.modal_value(form, "correct") is None


def test_assemble_reads_discord_settings_from_the_environment(fake, tmp_path, monkeypatch):
    cfg = Config(home=tmp_path, db_path=tmp_path / "kb.db", queue_url=f"sqlite:///{tmp_path / 'q.db'}", backend="cpu")
    monkeypatch.delenv("DISCORD_TOKEN", raising=False)
    with pytest.raises(SystemExit, match="DISCORD_TOKEN"):
        da.assemble(cfg, [int(GUILD)])
    for name, value in (("DISCORD_TOKEN", TOKEN), ("KERNELBOT_DISCORD_API_URL", fake.api_url + "/"),
                        ("KERNELBOT_DISCORD_GATEWAY_URL", fake.gateway_url),
                        ("KERNELBOT_DISCORD_APPROVER_ROLE", "kernel-reviewers")):
        monkeypatch.setenv(name, value)
    svc, client, token = da.assemble(cfg, [int(GUILD)], guild_ready_timeout=0.05)
    gateway = da.Gateway(client, token).start(10)
    try:
        assert discord.http.Route.BASE == fake.api_url and client.bot.approver_role == "kernel-reviewers"
        intents = discord.Intents(fake.identified[0]["intents"])
        assert intents.guilds and intents.guild_messages and intents.message_content and intents.guild_reactions
        assert not intents.members and not intents.presences
        assert [c["name"] for c in fake.commands[GUILD]] == ["kernel"] and "global" not in fake.commands
        assert {o["name"] for o in fake.commands[GUILD][0]["options"]} == {"request", "action", "session"}
        assert fake.wait_for(lambda: fake.heartbeats >= 1, what="a heartbeat")
    finally:
        gateway.stop()
        svc.shutdown()
    monkeypatch.setenv("DISCORD_TOKEN", "wrong")
    svc, client, token = da.assemble(cfg, [])
    with pytest.raises(SystemExit, match="could not connect to Discord"):
        da.Gateway(client, token).start(10)
    svc.shutdown()


def test_readme_names_what_the_bot_needs():
    readme = (Path(__file__).resolve().parent.parent / "README.md").read_text()
    section = readme[readme.index("## Discord"):readme.index("## Configuration")]
    assert da.invite_url(1).replace("client_id=1", "client_id=APPLICATION_ID") in section
    for needed in ("Message Content Intent", "guild messages", "guild message reactions", "Send Messages in Threads",
                   "Create Public Threads", "Use Application Commands", "DISCORD_TOKEN", "KERNELBOT_DISCORD_API_URL",
                   "KERNELBOT_DISCORD_GATEWAY_URL", "KERNELBOT_DISCORD_APPROVER_ROLE", "KERNELBOT_FOUR_EYES"):
        assert needed in section, needed


def test_cli_wires_the_discord_command(monkeypatch):
    seen = {}
    monkeypatch.setattr(da, "main", lambda cfg, guild_ids: seen.update(cfg=cfg, guilds=guild_ids) or 0)
    assert cli.main(["discord", "--guild", "11", "--guild", "22", "--backend", "cpu"]) == 0
    assert seen["guilds"] == [11, 22] and seen["cfg"].backend == "cpu"


def test_a_long_file_is_edited_in_boxes_of_whole_lines():
    text = "".join(f"line {i} " + "x" * (i % 97) + "\n" for i in range(600))
    parts = da.edit_parts(text)
    assert len(parts) > 1 and "".join(parts) == text
    assert all(len(p) <= da.INPUT_MAX and p.endswith("\n") for p in parts)
    assert da.edit_parts("y" * 9000) == ["y" * 4000, "y" * 4000, "y" * 1000]     # no line end: cut at the limit
