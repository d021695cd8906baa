"""The service's Chat on Discord: cards and notices become messages in a session's thread.

The service calls from its own threads while discord.py lives on one event loop: every
call is scheduled on that loop and waited for (the service maps the message id it gets
back to the stage). A notice for one person is private only as the follow-up of an
interaction of theirs, so the adapter hands the chat each person's latest interaction per
session; without one that is still valid, the notice is said in the thread with a mention.

If a session's thread is deleted, the next post opens a new thread in its channel and the
session carries on there; the move is recorded in the store (a "root" message), so it survives
a restart and replies in the new thread reach the session.
"""
from __future__ import annotations

import asyncio
import io
import logging
import threading
import time
from pathlib import Path
from typing import Any, Awaitable, Callable, TypeVar

import discord

from bot.chat.discord import render as de
from bot.workflow.cards import Card
from bot.workflow.messages import Messages
from bot.workflow.model import Session

log = logging.getLogger("kernelbot.discord")

PLATFORM = "discord"
CALL_TIMEOUT_S = 120.0                # rate limits are waited out inside discord.py
INTERACTION_TTL_S = 14 * 60.0         # interaction tokens are valid for 15 minutes
THREAD_NAME_MAX = 100
UNKNOWN_CHANNEL = 10003               # Discord's error code for a channel (or thread) that is gone
NONCE_MAX = 25                        # Discord's limit on a nonce's length
FIND_IN_LAST = 100                    # messages of a thread a retried post looks through (one page)
T = TypeVar("T")
ViewFactory = Callable[[list[de.Button]], "discord.ui.View | None"]


class ChannelUnavailable(Exception):
    """Discord refuses to post in the session's thread; the effect stays in the outbox and is retried."""


def _files(attachments: list[de.Attachment]) -> list[discord.File]:
    return [discord.File(io.BytesIO(a.data), filename=a.filename) for a in attachments]


def _mention_only(user: str | None) -> discord.AllowedMentions:
    """Notices name people by mention; only the person a notice is for gets pinged."""
    if user and user.isdigit():
        return discord.AllowedMentions(everyone=False, roles=False, users=[discord.Object(int(user))])
    return discord.AllowedMentions.none()


class DiscordChat:
    platform = PLATFORM

    def __init__(self, client: discord.Client, messages: Messages, view_for: ViewFactory) -> None:
        self.client, self.messages, self.view_for = client, messages, view_for
        self._interactions: dict[tuple[str, str], tuple[discord.Interaction, float]] = {}
        self._lock = threading.Lock()

    # ------------------------------------------------------------------ Chat (from the service's threads)

    def post(self, s: Session, card: Card, key: str = "", retry: bool = False) -> str:
        return self._run(s, self._post, s, card, key, retry)

    def open_thread(self, item: dict, key: str = "", retry: bool = False) -> tuple[str, str] | None:
        """A thread for a /kernel request whose own answer never opened one (the bot died first):
        a new message in its channel, and a thread under it. (A retry cut off between the two
        makes a second message; no thread is made twice.)"""
        return self._run_for(f"the request of {item['user']}", self._open_thread, item)

    async def _open_thread(self, item: dict) -> tuple[str, str]:
        channel = self.client.get_channel(int(item["channel"])) or await self.client.fetch_channel(int(item["channel"]))
        root = await channel.send(de.notice(f"{item['user']} asked for a kernel: {item['request']}\nEach stage is "
                                            "posted in the thread below for review."),
                                  allowed_mentions=discord.AllowedMentions.none())
        thread = await root.create_thread(name=de.clip(item["request"], THREAD_NAME_MAX), auto_archive_duration=10080)
        return str(thread.id), str(thread.id)

    def update(self, s: Session, message_id: str, card: Card) -> None:
        self._run(s, self._update, s, message_id, card)

    def notify(self, s: Session, text: str, user: str | None, key: str = "", retry: bool = False) -> None:
        # Deduplicated by its nonce alone (within Discord's few minutes): a notice has no title to find it by.
        self._run(s, self.say, s, text, user, key)

    # ------------------------------------------------------------------ on the event loop

    async def say(self, s: Session, text: str, user: str | None = None, key: str = "") -> None:
        """A notice in the session's thread; for `user` only, when an interaction of theirs allows it."""
        interaction = self._interaction(s.id, user) if user else None
        if interaction is not None:
            try:
                await interaction.followup.send(de.notice(text), ephemeral=True)
                return
            except discord.HTTPException as e:       # the token expired early or the interaction is gone
                log.info("session %s: ephemeral to %s refused (%s); saying it in the thread", s.id, user, e)
        content = f"<@{user}> {text}" if user else text
        await self._in_thread(s, lambda t: t.send(de.notice(content), allowed_mentions=_mention_only(user),
                                                  **_nonce(key)))

    async def upload(self, s: Session, paths: list[Path], comment: str) -> None:
        """Files into the session's thread, in one message (export)."""
        await self._in_thread(s, lambda t: t.send(de.clip(comment, de.CONTENT_MAX),
                                                  allowed_mentions=discord.AllowedMentions.none(),
                                                  files=[discord.File(p, filename=p.name) for p in paths]))

    async def _post(self, s: Session, card: Card, key: str = "", retry: bool = False) -> str:
        # A nonce makes Discord answer a repeat of this post within its few minutes with the message
        # already made (discord.py sends it enforced); after longer, a retry finds the card in the thread.
        r = de.render(card)
        found = await self._find_card(s, r.embed) if retry else None
        if found:
            return found
        msg = await self._in_thread(s, lambda t: t.send(embed=discord.Embed.from_dict(r.embed), files=_files(r.files),
                                                        view=self.view_for(r.buttons), **_nonce(key)))
        return str(msg.id)

    async def _find_card(self, s: Session, embed: dict) -> str | None:
        """The bot's message in the session's thread showing this card (its title and footer name the
        session, stage and revision or job, which no other card of the session shares), if any."""
        try:
            async for m in self.thread(s).history(limit=FIND_IN_LAST):
                e = m.embeds[0] if m.embeds else None
                if m.author.id == self.client.user.id and e and e.title == embed["title"] \
                        and e.footer.text == embed["footer"]["text"]:
                    return str(m.id)
        except discord.NotFound:                         # the thread is gone: nothing of it to find
            pass
        return None

    async def _in_thread(self, s: Session, send: Callable[[discord.abc.Messageable], Awaitable[T]]) -> T:
        """send(the session's thread); if Discord says the thread is gone, open a new one and send there."""
        try:
            return await send(self.thread(s))
        except discord.NotFound as e:
            if e.code != UNKNOWN_CHANNEL:
                raise
        log.warning("session %s: its thread %s is gone; continuing in a new thread", s.id, self.thread_id(s))
        channel = self.client.get_channel(int(s.channel)) or await self.client.fetch_channel(int(s.channel))
        root = await channel.send(de.notice(f"The thread of kernelbot session `{s.id}` was deleted; it continues in "
                                            f"the thread below. Request: {s.request}"),
                                  allowed_mentions=discord.AllowedMentions.none())
        thread = await root.create_thread(name=de.clip(s.request, THREAD_NAME_MAX), auto_archive_duration=10080)
        self.map_root(s.id, thread.id)
        return await send(thread)

    async def _update(self, s: Session, message_id: str, card: Card) -> None:
        r = de.render(card)                            # attachments stay as posted; only embed and buttons change
        try:
            await self.thread(s).get_partial_message(int(message_id)).edit(
                embed=discord.Embed.from_dict(r.embed), view=self.view_for(r.buttons))
        except discord.NotFound:
            log.info("session %s: card %s was deleted in Discord; not refreshing it", s.id, message_id)

    # ------------------------------------------------------------------ sessions, threads, interactions

    def thread_id(self, s: Session) -> str:
        """The thread a session lives in now: the latest root mapped for it."""
        return self.messages.root(s.id) or s.thread

    def thread(self, s: Session) -> discord.PartialMessageable:
        return self.client.get_partial_messageable(int(self.thread_id(s)), type=discord.ChannelType.public_thread)

    def answering(self, session_id: str, user: str, interaction: discord.Interaction) -> None:
        """Remember the interaction a person just made in a session, for private notices to them."""
        with self._lock:
            self._interactions[(session_id, user)] = (interaction, time.monotonic() + INTERACTION_TTL_S)

    def _interaction(self, session_id: str, user: str) -> discord.Interaction | None:
        now = time.monotonic()
        with self._lock:
            for key in [k for k, (_, until) in self._interactions.items() if until < now]:
                del self._interactions[key]
            found = self._interactions.get((session_id, user))
        return found[0] if found else None

    def map_root(self, session_id: str, thread_id: int) -> None:
        self.messages.record_root(str(thread_id), session_id)

    def session_in_thread(self, channel_id: int) -> str | None:
        row = self.messages.card(str(channel_id))
        return row["session_id"] if row and row["kind"] == "root" else None

    def card_at(self, message_id: int) -> dict | None:
        """The store's record of the card posted as this message: session, kind, stage, rev."""
        return self.messages.card(str(message_id))

    # ------------------------------------------------------------------ the bridge

    def _run(self, s: Session, fn: Callable[..., Awaitable[T]], *args: Any) -> T:
        """fn(*args) on the client's loop, waited for from this (service) thread."""
        return self._run_for(f"thread {s.thread} of session {s.id}", fn, *args)

    def _run_for(self, where: str, fn: Callable[..., Awaitable[T]], *args: Any) -> T:
        loop = self.client.loop
        if _running_loop() is loop:
            raise RuntimeError("DiscordChat's blocking calls must run off the event loop (use an executor)")
        try:
            return asyncio.run_coroutine_threadsafe(fn(*args), loop).result(CALL_TIMEOUT_S)
        except (discord.Forbidden, discord.NotFound) as e:
            raise ChannelUnavailable(
                f"Discord refuses to post in {where} ({e.status} {e.text}): give the bot "
                "View Channel, Send Messages in Threads, Embed Links and Attach Files there, or unarchive the thread. "
                "The session is kept; the message is retried on the next event or recovery pass.") from e


def _running_loop() -> asyncio.AbstractEventLoop | None:
    try:
        return asyncio.get_running_loop()
    except RuntimeError:
        return None


def _nonce(key: str) -> dict:
    return {"nonce": key[:NONCE_MAX]} if key else {}
