"""`kernelbot discord`: the discord.py client. Discord payloads become service calls.

Every interaction is answered first (Discord wants that within 3 seconds: a deferral, or
the modal a button opens), then dispatched in an executor, so the event loop never waits
on the service. Stage buttons are DynamicItems whose custom id carries the card's action
value, and modal submissions are read by custom id, so both work on messages posted
before a restart. Discord redelivers after a resume, so each interaction, reply and
reaction carries a key the store records once.
"""
from __future__ import annotations

import asyncio
import functools
import logging
import os
import re
import sqlite3
import tempfile
import threading
from pathlib import Path
from typing import Any, Awaitable, Callable, Literal, Optional, TypeVar

import discord
import yarl
from discord import app_commands
from discord.gateway import DiscordWebSocket

from bot.chat.commands import help_text, is_thumbs_up, parse_command, reply_code, reply_event
from bot.chat.discord import render as de
from bot.chat.discord.chat import PLATFORM, THREAD_NAME_MAX, DiscordChat
from bot.config import Config
from bot.workflow import cards, report, stages
from bot.workflow.events import Approve, Cancel, Correct, Edit, Event, Regenerate
from bot.workflow.messages import Messages
from bot.workflow.model import Session
from bot.workflow.service import Service, event_item, start_item, store_problem

log = logging.getLogger("kernelbot.discord")

HELP = (help_text("**", "/kernel request:") +
        "\nThe `action:` and `session:` options do the same as `list`, `status ID`, `cancel ID` and `export ID`.")
INPUT_MAX, MODAL_TITLE_MAX = 4000, 45
EDIT_PARTS = 5                          # text boxes a modal holds: a file up to 5 x INPUT_MAX is edited in one
CODE_FILE_MAX = 512 * 1024
CODE_FILES = (".py", ".json", ".txt")
MODAL_TIMEOUT_S = 30 * 60.0             # discord.py drops an abandoned modal object after this
SEEN = "\N{EYES}"                       # the reaction that tells a person their reply was taken
ALREADY_ANSWERED = 40060                # Discord's error code for a second answer to one interaction
NOT_OURS = "That button or form does not belong to a kernelbot session (or its data is damaged); nothing was done."
_MENTION = re.compile(r"<@!?(\d+)>")
T = TypeVar("T")


# What the invite asks for (README, Discord): threads from messages, cards with files, reactions, /kernel.
PERMISSIONS = discord.Permissions(view_channel=True, send_messages=True, send_messages_in_threads=True,
                                  create_public_threads=True, read_message_history=True, add_reactions=True,
                                  attach_files=True, embed_links=True, use_application_commands=True)


def invite_url(application_id: int) -> str:
    return discord.utils.oauth_url(application_id, permissions=PERMISSIONS, scopes=("bot", "applications.commands"))


def intents() -> discord.Intents:
    """Guilds (channels, threads, roles), guild messages with their content (privileged), reactions."""
    wanted = discord.Intents.none()
    wanted.guilds = wanted.guild_messages = wanted.message_content = wanted.guild_reactions = True
    return wanted


def discord_text(content: str, bot_id: int | None) -> str:
    """What a person typed: the bot's mention removed, other mentions as bare user ids (cards
    render ids as mentions again)."""
    return _MENTION.sub(lambda m: "" if int(m.group(1)) == bot_id else m.group(1), content).strip()


def point_at(api_url: str | None, gateway_url: str | None) -> None:
    """Send discord.py's REST calls and its gateway connection elsewhere (a proxy, or a test's fake)."""
    if api_url:
        discord.http.Route.BASE = api_url.rstrip("/")
    if gateway_url:
        DiscordWebSocket.DEFAULT_GATEWAY = yarl.URL(gateway_url)


# ------------------------------------------------------------------ components

class CardButton(discord.ui.DynamicItem[discord.ui.Button], template=de.CUSTOM_ID):
    """A stage button. discord.py rebuilds it from any message's custom id, before or after a restart."""

    def __init__(self, spec: de.Button) -> None:
        super().__init__(discord.ui.Button(label=spec.label, custom_id=spec.custom_id,
                                           style=getattr(discord.ButtonStyle, spec.style)))

    @classmethod
    async def from_custom_id(cls, interaction: discord.Interaction, item: discord.ui.Button,
                             match: re.Match[str], /) -> CardButton:
        return cls(de.Button(item.label or "", item.custom_id or "", item.style.name))

    async def callback(self, interaction: discord.Interaction) -> None:
        await interaction.client.bot.on_button(interaction, self.custom_id)


def card_ref(custom_id: str) -> tuple[str, str, str, int] | None:
    """(action, session, stage, rev) from a button's or form's custom id; None for anyone else's or a
    damaged one."""
    m = de.CUSTOM_ID.fullmatch(custom_id)
    try:
        return (m["action"], *cards.parse_action_value(m["value"])) if m else None
    except ValueError:
        return None


def card_view(buttons: list[de.Button]) -> discord.ui.View | None:
    if not buttons:
        return None
    view = discord.ui.View(timeout=None)
    for spec in buttons:
        view.add_item(CardButton(spec))
    return view


def _modal(custom_id: str, boxes: list[tuple[str, str, dict]], title: str) -> discord.ui.Modal:
    """Text boxes (custom id, label, TextInput options), under the custom id of the button that opened
    it (kb:correct:… or kb:edit:…). Submissions are read in DiscordBot.on_modal by that id, not by this
    object (which a restart forgets)."""
    modal = discord.ui.Modal(title=de.clip(title, MODAL_TITLE_MAX), custom_id=custom_id, timeout=MODAL_TIMEOUT_S)
    for box, label, options in boxes:
        modal.add_item(discord.ui.Label(text=de.clip(label, MODAL_TITLE_MAX), component=discord.ui.TextInput(
            custom_id=box, style=discord.TextStyle.paragraph, max_length=INPUT_MAX, **options)))
    return modal


def correction_modal(custom_id: str, stage: str) -> discord.ui.Modal:
    return _modal(custom_id, [("correct", f"What should change in {stages.label(stage)}?",
                               {"placeholder": "e.g. use shape 8x16 instead, or block size 2048"})], "Request changes")


def edit_parts(content: str) -> list[str]:
    """content in pieces a text box holds, each ending at a line's end where one is near; joined
    they are content again. More than EDIT_PARTS pieces: the file is attached instead."""
    parts = []
    while len(content) > INPUT_MAX:
        cut = content.rfind("\n", 0, INPUT_MAX) + 1 or INPUT_MAX
        parts.append(content[:cut])
        content = content[cut:]
    return parts + [content]


def edit_box(k: int) -> str:
    return "edit" if k == 0 else f"edit_{k + 1}"


def edit_modal(custom_id: str, stage: str, content: str) -> discord.ui.Modal:
    parts, name = edit_parts(content), stages.FILENAMES[stage]
    boxes = [(edit_box(k), name if len(parts) == 1 else f"{name}, part {k + 1} of {len(parts)}",
              {"default": part, "required": k == 0}) for k, part in enumerate(parts)]
    return _modal(custom_id, boxes, f"Edit {stages.TITLES[stage]}")


def modal_value(components: list[dict], custom_id: str) -> str | None:
    """The text typed into one input of a submitted modal (inputs sit in action rows or labels)."""
    for c in components:
        inner = c.get("components") or ([c["component"]] if "component" in c else [])
        if c.get("custom_id") == custom_id and "value" in c:
            return c["value"] or ""
        found = modal_value(inner, custom_id) if inner else None
        if found is not None:
            return found
    return None


# ------------------------------------------------------------------ the listeners

class DiscordBot:
    """The listeners. The only state is in the store; this object can be rebuilt at any time."""

    def __init__(self, svc: Service, chat: DiscordChat, approver_role: str = "") -> None:
        self.svc, self.chat, self.approver_role = svc, chat, approver_role.strip()

    # ------------------------------------------------------------------ /kernel

    async def on_command(self, interaction: discord.Interaction, request: str, action: str | None,
                         session: str) -> None:
        verb, arg = (action, (session or request).strip()) if action else parse_command(request)
        if verb == "start":
            await self._start(interaction, arg)
            return
        s = await self._call(self.svc.session, arg) if arg and verb == "cancel" else None
        if s is not None:                               # into the inbox before Discord is answered
            await self._cancel(interaction, s)
            return
        if not await self._ack(interaction, ephemeral=True, thinking=True):
            return
        if verb == "help":
            await interaction.edit_original_response(content=HELP)
        elif verb == "list":
            await interaction.edit_original_response(content=await self._call(self._list, _parent_id(interaction)))
        else:
            s = await self._call(self.svc.session, arg) if arg else None
            if s is None:
                await interaction.edit_original_response(content=(
                    f"No session `{de.text(arg)}`. `/kernel request:list` shows this channel's open sessions."
                    if arg else f"Usage: `/kernel request:{verb} ID`; `/kernel request:list` shows the ids."))
                return
            await {"status": self._status, "export": self._export}[verb](interaction, s)

    def _list(self, channel_id: int) -> str:
        lines = [f"`{s.id}` · {stages.label(s.stage)} · <@{s.requester}> · <#{self.chat.thread_id(s)}> · "
                 f"{de.text(de.clip(s.request, 80))}"
                 for s in self.svc.listed(status="active", channel=str(channel_id), platform=PLATFORM)]
        return de.clip("\n".join(lines), de.CONTENT_MAX) or "No open sessions in this channel."

    async def _status(self, interaction: discord.Interaction, s: Session) -> None:
        embed = de.render(self.svc.status_card(s)).embed
        await interaction.edit_original_response(content=f"<#{self.chat.thread_id(s)}>",
                                                 embed=discord.Embed.from_dict(embed))

    async def _cancel(self, interaction: discord.Interaction, s: Session) -> None:
        s = await self._submit(interaction, s.id, Cancel(str(interaction.user.id)), ephemeral=True, thinking=True)
        if s is not None:
            await interaction.edit_original_response(
                content=f"Session `{s.id}` is {s.status}; its thread: <#{self.chat.thread_id(s)}>")

    async def _export(self, interaction: discord.Interaction, s: Session) -> None:
        with tempfile.TemporaryDirectory() as tmp:
            paths = await self._call(report.export, s, Path(tmp))
            chart = " and the chart" if any(p.name == "chart.png" for p in paths) else ""
            comment = f"Session `{s.id}` ({s.status}): artifacts, report.json, REPORT.md{chart}"
            try:
                await self.chat.upload(s, paths, comment)
            except discord.HTTPException as e:
                await interaction.edit_original_response(content=f"The export of `{s.id}` could not be uploaded: "
                                                                 f"{e.status} {e.text}")
                return
        await interaction.edit_original_response(
            content=f"Exported session `{s.id}` into <#{self.chat.thread_id(s)}>.")

    async def _start(self, interaction: discord.Interaction, request: str) -> None:
        if not isinstance(interaction.channel, discord.TextChannel):
            await _respond(interaction.response.send_message(
                "Run `/kernel` in a server's text channel: each session opens its own thread there.", ephemeral=True))
            return
        user = str(interaction.user.id)
        item = start_item(request, user, str(interaction.channel.id), None)
        inbox = await self._receive(interaction, item)
        if inbox is None or not await self._ack(interaction, thinking=True):
            return
        root = await interaction.edit_original_response(content=de.notice(
            f"{user} asked for a kernel: {request}\nEach stage is posted in the thread below for review."))
        try:
            thread = await root.create_thread(name=de.clip(request, THREAD_NAME_MAX), auto_archive_duration=10080)
        except discord.HTTPException as e:
            await self._call(self.svc.inbox_done, inbox, "")
            await interaction.edit_original_response(content=(
                f"I could not open a thread here ({e.status} {e.text}). Give me Create Public Threads and Send "
                "Messages in Threads in this channel, then run the command again."))
            return
        opened = {**item, "thread": str(thread.id), "root": str(thread.id)}
        await self._call(self.svc.note_opened, inbox, opened)
        await self._call(self.svc.process_acked, inbox)

    async def _receive(self, interaction: discord.Interaction, item: dict) -> int | None:
        """The interaction into the inbox, before Discord gets its answer; a store that refuses is
        said to the person, and nothing is done. None also for a redelivery."""
        try:
            return await self._call(self.svc.receive, f"interaction:{interaction.id}", item)
        except sqlite3.Error as e:
            log.error("inbox write refused for interaction %s: %s", interaction.id, e)
            await _respond(interaction.response.send_message(
                f"{store_problem(e)}; nothing was done. Please try again in a moment.", ephemeral=True))
            return None

    # ------------------------------------------------------------------ buttons and modals

    async def on_button(self, interaction: discord.Interaction, custom_id: str) -> None:
        ref = card_ref(custom_id)
        if ref is None:
            await _respond(interaction.response.send_message(NOT_OURS, ephemeral=True))
            return
        action, sid, stage, rev = ref
        if action in ("correct", "edit"):
            await self._open_modal(interaction, custom_id, ref)
            return
        user = str(interaction.user.id)
        if action == "approve" and not self.may_approve(interaction.user):
            if await self._ack(interaction, sid):
                await interaction.followup.send(self.role_refusal(), ephemeral=True)
            return
        ev = Cancel(user) if action == "cancel" else (Approve if action == "approve" else Regenerate)(stage, rev, user)
        await self._submit(interaction, sid, ev)

    async def _open_modal(self, interaction: discord.Interaction, custom_id: str,
                          ref: tuple[str, str, str, int]) -> None:
        action, sid, stage, rev = ref
        if action == "correct":
            await _respond(interaction.response.send_modal(correction_modal(custom_id, stage)))
            return
        s = await self._call(self.svc.session, sid)
        revision = s.revision(stage, rev) if s else None
        if revision is None:
            await _respond(interaction.response.send_message(_unknown(sid), ephemeral=True))
        elif len(edit_parts(revision.content)) > EDIT_PARTS:
            await _respond(interaction.response.send_message(
                f"`{stages.FILENAMES[stage]}` is longer than a Discord form holds ({len(revision.content)} "
                f"characters; {EDIT_PARTS} boxes of {INPUT_MAX}): reply in the thread with the new "
                f"`{stages.FILENAMES[stage]}` attached.", ephemeral=True))
        else:
            await _respond(interaction.response.send_modal(edit_modal(custom_id, stage, revision.content)))

    async def on_interaction(self, interaction: discord.Interaction) -> None:
        """Modal submissions, and buttons no DynamicItem claims (discord.py would leave them unanswered)."""
        custom_id = (interaction.data or {}).get("custom_id", "")
        if interaction.type is discord.InteractionType.modal_submit:
            await self.on_modal(interaction, custom_id)
        elif interaction.type is discord.InteractionType.component and not de.CUSTOM_ID.fullmatch(custom_id):
            await _respond(interaction.response.send_message(NOT_OURS, ephemeral=True))

    async def on_modal(self, interaction: discord.Interaction, custom_id: str) -> None:
        ref = card_ref(custom_id)
        if ref is None or ref[0] not in ("correct", "edit"):
            await _respond(interaction.response.send_message(NOT_OURS, ephemeral=True))
            return
        action, sid, stage, rev = ref
        boxes = [action] if action == "correct" else [edit_box(k) for k in range(EDIT_PARTS)]
        typed = "".join(modal_value(interaction.data.get("components", []), box) or "" for box in boxes)
        user = str(interaction.user.id)
        if action == "correct":
            ev: Event = Correct(stage, rev, user, typed)
        else:
            ev = Edit(stage, rev, user, reply_code(typed) or typed)
        await self._submit(interaction, sid, ev)

    async def _ack(self, interaction: discord.Interaction, sid: str | None = None, **defer: Any) -> bool:
        """Defer (Discord's 3 seconds), and remember the interaction for private notices in session sid.
        False for a redelivery Discord already had an answer to: its first delivery was handled."""
        if not await _respond(interaction.response.defer(**defer)):
            return False
        if sid:
            self.chat.answering(sid, str(interaction.user.id), interaction)
        return True

    async def _submit(self, interaction: discord.Interaction, sid: str, ev: Event, **defer: Any) -> Session | None:
        """Into the inbox, answer Discord (defer), then apply; the session, or None when it is not
        applied here (a store that refused, a redelivery, an unknown session: each said)."""
        inbox = await self._receive(interaction, event_item(sid, ev))
        if inbox is None or not await self._ack(interaction, sid, **defer):
            return None
        s = await self._call(self.svc.process_acked, inbox)
        if s is None:
            await interaction.followup.send(_unknown(sid), ephemeral=True)
        return s if isinstance(s, Session) else None

    # ------------------------------------------------------------------ thread replies and reactions

    async def on_message(self, message: discord.Message) -> None:
        if message.author.bot or message.guild is None:
            return
        s = await self._call(self._active_session_in, message.channel.id)
        if s is None:
            return                                      # not a session's thread, or talk after the session ended
        user = str(message.author.id)
        ev = reply_event(s, user, await self._reply_text(message))
        if isinstance(ev, Approve) and not self.may_approve(message.author):
            await self.chat.say(s, self.role_refusal(), user)
            return
        await self._dispatch(s.id, ev, f"message:{message.id}")
        if not isinstance(ev, Approve):
            await _react(message, SEEN)

    async def _reply_text(self, message: discord.Message) -> str:
        """What a reply says; a code file attached to it becomes a fenced block (Discord caps what people
        type at 2000 characters, so longer code comes as a file)."""
        text = discord_text(message.content, self.chat.client.user.id)
        attached = next((a for a in message.attachments if a.filename.endswith(CODE_FILES)), None)
        if attached is None or attached.size > CODE_FILE_MAX or reply_code(text) is not None:
            return text
        code = (await attached.read()).decode("utf-8", "replace")
        return f"{text}\n```\n{code.rstrip()}\n```"

    def _active_session_in(self, channel_id: int) -> Session | None:
        sid = self.chat.session_in_thread(channel_id)
        s = self.svc.session(sid) if sid else None
        return s if s is not None and s.active else None

    async def on_reaction(self, payload: discord.RawReactionActionEvent) -> None:
        name = payload.emoji.name or ""
        if payload.user_id == self.chat.client.user.id or not is_thumbs_up(name):
            return
        card = await self._call(self.chat.card_at, payload.message_id)
        if not card or card["kind"] != "revision":
            return
        user = str(payload.user_id)
        if not self.may_approve(payload.member):
            s = await self._call(self.svc.session, card["session_id"])
            await self.chat.say(s, self.role_refusal(), user)
            return
        await self._dispatch(card["session_id"], Approve(card["stage"], card["rev"], user),
                             f"reaction:{payload.message_id}:{user}:{name}")

    # ------------------------------------------------------------------ approvers

    def may_approve(self, member: discord.abc.User | None) -> bool:
        """With KERNELBOT_DISCORD_APPROVER_ROLE set, only members holding that role (by name or id)."""
        if not self.approver_role:
            return True
        want = self.approver_role.lower()
        return any(str(r.id) == want or r.name.lower() == want for r in getattr(member, "roles", None) or [])

    def role_refusal(self) -> str:
        return (f"Only members with the `{self.approver_role}` role may approve (KERNELBOT_DISCORD_APPROVER_ROLE), "
                "so your approval was not recorded.")

    # ------------------------------------------------------------------ off the event loop

    async def _dispatch(self, sid: str, ev: Event, key: str) -> Session | None:
        return await self._call(functools.partial(self.svc.dispatch, event_key=key), sid, ev)

    @staticmethod
    async def _call(fn: Callable[..., T], *args: Any) -> T:
        """fn(*args) in the loop's executor: the service and the store block."""
        return await asyncio.get_running_loop().run_in_executor(None, fn, *args)


def _parent_id(interaction: discord.Interaction) -> int:
    """The text channel a command came from, also when it was typed in a session's thread."""
    channel = interaction.channel
    return getattr(channel, "parent_id", None) or interaction.channel_id


async def _respond(answer: Awaitable[Any]) -> bool:
    """Await an interaction's answer; False when Discord had one already (a redelivery after a resume)."""
    try:
        await answer
    except discord.HTTPException as e:
        if e.code != ALREADY_ANSWERED:
            raise
        log.info("an interaction was answered before (redelivered after a resume); not handling it again")
        return False
    return True


def _unknown(sid: str) -> str:
    return (f"Session `{sid}` is not in this bot's store (another installation started it, or the store was "
            "reset); nothing was done.")


async def _react(message: discord.Message, emoji: str) -> None:
    try:
        await message.add_reaction(emoji)
    except discord.HTTPException as e:                  # no Add Reactions permission: the reply still counted
        log.info("could not react to message %s: %s", message.id, e)


# ------------------------------------------------------------------ the client

def kernel_command(bot: DiscordBot) -> app_commands.Command:
    @app_commands.command(name="kernel", description="Request a reviewed, tested, benchmarked Triton kernel")
    @app_commands.guild_only()
    @app_commands.describe(request="e.g. relu(x + y) for fp16 4096x4096; or list, status ID, cancel ID, export ID",
                           action="manage sessions instead of starting one", session="the session id (kXXXXXX)")
    async def kernel(interaction: discord.Interaction, request: Optional[str] = None,
                     action: Optional[Literal["list", "status", "cancel", "export", "help"]] = None,
                     session: Optional[str] = None) -> None:
        await bot.on_command(interaction, request or "", action, session or "")
    return kernel


class KernelClient(discord.Client):
    def __init__(self, bot: DiscordBot | None = None, guild_ids: list[int] = (), **options: Any) -> None:
        super().__init__(intents=intents(), allowed_mentions=discord.AllowedMentions.none(), **options)
        self.bot, self.guild_ids = bot, list(guild_ids)
        self.tree = app_commands.CommandTree(self)
        self.connected = threading.Event()

    async def setup_hook(self) -> None:
        self.add_dynamic_items(CardButton)
        guilds = [discord.Object(g) for g in self.guild_ids]
        self.tree.add_command(kernel_command(self.bot), guilds=guilds or discord.utils.MISSING)
        for guild in guilds:                            # guild commands show up at once
            await self.tree.sync(guild=guild)
        if not guilds:                                  # global commands can take an hour to appear
            await self.tree.sync()

    async def on_ready(self) -> None:
        log.info("connected to Discord as %s in %d guild(s)", self.user, len(self.guilds))
        self.connected.set()

    async def on_message(self, message: discord.Message) -> None:
        await self.bot.on_message(message)

    async def on_raw_reaction_add(self, payload: discord.RawReactionActionEvent) -> None:
        await self.bot.on_reaction(payload)

    async def on_interaction(self, interaction: discord.Interaction) -> None:
        await self.bot.on_interaction(interaction)


class Gateway:
    """The client on an event loop in a thread of its own, so the service's threads can call into it."""

    def __init__(self, client: KernelClient, token: str) -> None:
        self.client, self.token = client, token
        self.error: BaseException | None = None
        self._thread = threading.Thread(target=self._run, daemon=True, name="discord")

    def start(self, timeout: float = 60.0) -> Gateway:
        """Log in, sync the commands, connect; return once the guilds are loaded."""
        self._thread.start()
        while not self.client.connected.wait(0.05):
            if not self._thread.is_alive() or (timeout := timeout - 0.05) <= 0:
                raise SystemExit(f"kernelbot discord: could not connect to Discord ({self.error!r}); check "
                                 "DISCORD_TOKEN and the intents in 'Discord' in README.md")
        return self

    def _run(self) -> None:
        try:
            asyncio.run(self._serve())
        except Exception as e:                          # LoginFailure, PrivilegedIntentsRequired, no network
            self.error = e
            log.error("the Discord client stopped: %r", e)

    async def _serve(self) -> None:
        async with self.client:                         # closes the client's HTTP session however start ends
            await self.client.start(self.token)

    def wait(self) -> None:
        """Until the client stops (or Ctrl-C in the main thread)."""
        while self._thread.is_alive():
            self._thread.join(0.5)

    def stop(self) -> None:
        if self._thread.is_alive() and not self.client.is_closed():
            asyncio.run_coroutine_threadsafe(self.client.close(), self.client.loop)
        self._thread.join(30)                           # start() returns once the client is closed


# ------------------------------------------------------------------ running it

def connect(svc_for: Callable[[DiscordChat], Service], messages: Messages, guild_ids: list[int], approver_role: str = "",
            **options: Any) -> tuple[Service, KernelClient]:
    """The client, its chat and the service on it, wired together."""
    client = KernelClient(guild_ids=guild_ids, **options)
    chat = DiscordChat(client, messages, card_view)
    svc = svc_for(chat)
    client.bot = DiscordBot(svc, chat, approver_role)
    return svc, client


def assemble(cfg: Config, guild_ids: list[int], **options: Any) -> tuple[Service, KernelClient, str]:
    """The service and client from the environment: DISCORD_TOKEN, the approver role, the URLs."""
    from bot.app import make_service, messages
    token = os.environ.get("DISCORD_TOKEN", "").strip()
    if not token:
        raise SystemExit("kernelbot discord: set DISCORD_TOKEN (the bot token); see 'Discord' in README.md")
    point_at(os.environ.get("KERNELBOT_DISCORD_API_URL"), os.environ.get("KERNELBOT_DISCORD_GATEWAY_URL"))
    svc, client = connect(lambda chat: make_service(cfg, chat), messages(cfg, PLATFORM), guild_ids,
                          os.environ.get("KERNELBOT_DISCORD_APPROVER_ROLE", ""), **options)
    return svc, client, token


def main(cfg: Config, guild_ids: list[int]) -> int:
    """Run the bot on Discord until interrupted; /kernel is synced to guild_ids (else globally)."""
    from bot.app import serving
    svc, client, token = assemble(cfg, guild_ids)
    gateway = Gateway(client, token).start()
    print(f"kernelbot on Discord as {client.user} in {len(client.guilds)} server(s); invite it to another with "
          f"{invite_url(client.application_id)}", flush=True)
    try:
        with serving(cfg, svc):
            gateway.wait()
    except KeyboardInterrupt:
        pass
    finally:
        gateway.stop()
    return 0
