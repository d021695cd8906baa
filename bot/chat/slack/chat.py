"""The service's Chat on Slack: cards and notices become Web API calls in a session's thread.

A session lives in the thread under its root message. If that thread is deleted,
the next post opens a new root in the channel and the session carries on there;
the move is recorded in the store (a "root" message), so it survives a restart
and replies in the new thread reach the session.
"""
from __future__ import annotations

import logging
from dataclasses import dataclass, field
from typing import Callable, TypeVar

from slack_sdk import WebClient
from slack_sdk.errors import SlackApiError
from slack_sdk.http_retry import RetryHandler
from slack_sdk.http_retry.builtin_handlers import (ConnectionErrorRetryHandler, RateLimitErrorRetryHandler,
                                                   ServerErrorRetryHandler)

from bot.chat.slack import render as sb
from bot.workflow.cards import Card
from bot.workflow.messages import Messages
from bot.workflow.model import Session

log = logging.getLogger("kernelbot.slack")

PLATFORM = "slack"
POST_EVENT = "kernelbot_post"       # the metadata event type each card carries, with its post key
DEFAULT_API_URL = "https://slack.com/api/"
ROOT_FIND_IN_LAST = 100     # a retried /kernel looks for its root among the channel's latest messages
THREAD_GONE = frozenset({"thread_not_found", "message_not_found"})
CHANNEL_GONE = frozenset({"channel_not_found", "not_in_channel", "is_archived"})
T = TypeVar("T")


class ChannelUnavailable(Exception):
    """The bot cannot post in the session's channel; the effect stays in the outbox and is retried."""


# A call that makes a message, retried after an answer that was lost, could make it twice: it is
# retried by the service's outbox instead, which first looks for the message (SlackChat._thread_posts).
POSTS_ONCE = ("chat.postMessage",)


def _not_for_posts(handler: type[RetryHandler]) -> type[RetryHandler]:
    class Handler(handler):
        def _can_retry(self, *, state, request, response=None, error=None) -> bool:
            if request.url.rstrip("/").endswith(POSTS_ONCE):
                return False
            return super()._can_retry(state=state, request=request, response=response, error=error)
    return Handler


def web_client(token: str, base_url: str | None = None) -> WebClient:
    """A WebClient that waits out rate limits (Retry-After: nothing was done) and retries connection
    and 5xx errors, except on calls that post (POSTS_ONCE)."""
    retries = [_not_for_posts(ConnectionErrorRetryHandler)(), RateLimitErrorRetryHandler(max_retry_count=3),
               _not_for_posts(ServerErrorRetryHandler)(max_retry_count=2)]
    return WebClient(token=token, base_url=(base_url or DEFAULT_API_URL).rstrip("/") + "/", retry_handlers=retries)


def message_id(channel: str, ts: str) -> str:
    """Slack's ts is unique only within a channel, so a message id carries both."""
    return f"{channel}:{ts}"


def split_message_id(mid: str) -> tuple[str, str]:
    channel, _, ts = mid.partition(":")
    return channel, ts


def slack_error(e: SlackApiError) -> str:
    return str(e.response.get("error", "")) if e.response is not None else ""


def transient(e: SlackApiError) -> bool:
    """A 5xx or rate limit (worth retrying), not a refusal Slack answered for good."""
    status = getattr(e.response, "status_code", 200) if e.response is not None else 500
    return status >= 500 or status == 429


class SlackChat:
    platform = PLATFORM

    def __init__(self, client: WebClient, messages: Messages) -> None:
        self.client, self.messages = client, messages

    # ------------------------------------------------------------------ Chat

    def post(self, s: Session, card: Card, key: str = "", retry: bool = False) -> str:
        # Files first: the card with its buttons stays the newest message of the thread, and the
        # service maps it to its stage the moment this returns.
        seen = self._thread_posts(s) if retry else ThreadPosts()
        if key in seen.keys:
            return seen.keys[key]
        files = [f for f in card_files(card) if (f["title"], _size(f["content"])) not in seen.files]
        if files:
            self.upload(s, files)
        return self._post(s, key, text=sb.fallback_text(card), blocks=sb.card_blocks(card))

    def _thread_posts(self, s: Session) -> "ThreadPosts":
        """What the bot has in the session's thread: its keyed messages (a post cut short by a crash
        that reached Slack) and the files bots shared there, by title and size."""
        seen, cursor = ThreadPosts(), None
        while True:
            page = self.client.conversations_replies(channel=s.channel, ts=self.thread(s), cursor=cursor,
                                                     include_all_metadata=True, limit=200)
            for m in page.get("messages", []):
                if _key_of(m):
                    seen.keys[_key_of(m)] = message_id(s.channel, m["ts"])
                if m.get("bot_id"):
                    seen.files |= {(f.get("title"), f.get("size")) for f in m.get("files") or []}
            cursor = (page.get("response_metadata") or {}).get("next_cursor")
            if not cursor:
                return seen

    def open_thread(self, item: dict, key: str = "", retry: bool = False) -> tuple[str, str] | None:
        """A root message for a /kernel request (after a try that may have posted it, the one found
        by its key in the channel's latest messages); the person is told through the command's
        response URL when Slack refuses it."""
        try:
            ts = (self._find_root(item["channel"], key) if retry else None) or \
                self.post_root(item["channel"], item["announce"], key)
        except SlackApiError as e:
            if transient(e):                            # Slack's own fault: the inbox keeps the request and retries
                raise
            self.answer(item.get("response_url"), f"I could not post in this channel ({slack_error(e)}). Invite me "
                                                  "with `/invite @kernelbot`, then run the command again.")
            return None
        return ts, message_id(item["channel"], ts)

    def answer(self, response_url: str | None, text: str) -> None:
        """A private answer to a slash command, through its response URL (valid for 30 minutes)."""
        if not response_url:
            log.warning("no response URL to answer with: %s", text)
            return
        from slack_sdk.webhook import WebhookClient
        WebhookClient(response_url).send(text=text, response_type="ephemeral")

    def update(self, s: Session, message_id: str, card: Card) -> None:
        channel, ts = split_message_id(message_id)
        try:
            self.client.chat_update(channel=channel, ts=ts, text=sb.fallback_text(card), blocks=sb.card_blocks(card))
        except SlackApiError as e:
            if slack_error(e) not in THREAD_GONE:
                raise self._explain(e, s) from e
            log.info("session %s: card %s was deleted in Slack; not refreshing it", s.id, message_id)

    def notify(self, s: Session, text: str, user: str | None, key: str = "", retry: bool = False) -> None:
        if user:
            try:                                        # ephemeral: Slack keeps no copy, so a retry may repeat it
                self.tell(s.channel, user, text, self.thread(s))
                return
            except SlackApiError as e:                  # e.g. user_not_in_channel: say it in the thread instead
                log.info("session %s: ephemeral to %s refused (%s)", s.id, user, slack_error(e))
                text = f"{user}: {text}"
        if not (retry and key in self._thread_posts(s).keys):
            self._post(s, key, text=sb.mrkdwn(text))

    # ------------------------------------------------------------------ beyond the Chat protocol

    def tell(self, channel: str, user: str, text: str, thread: str | None = None) -> None:
        """A message only `user` sees (refusals, stale buttons, command answers)."""
        self.client.chat_postEphemeral(channel=channel, user=user, text=sb.mrkdwn(text), thread_ts=thread)

    def upload(self, s: Session, files: list[dict], comment: str | None = None) -> None:
        self._in_thread(s, lambda thread: self.client.files_upload_v2(
            file_uploads=files, channel=s.channel, thread_ts=thread, initial_comment=comment))

    def open_modal(self, trigger_id: str, view: dict) -> None:
        self.client.views_open(trigger_id=trigger_id, view=view)

    def post_root(self, channel: str, text: str, key: str = "") -> str:
        """A new top-level message in channel; its thread will hold a session. Returns its ts."""
        return self.client.chat_postMessage(channel=channel, text=text, metadata=_metadata(key))["ts"]

    def _find_root(self, channel: str, key: str) -> str | None:
        page = self.client.conversations_history(channel=channel, include_all_metadata=True, limit=ROOT_FIND_IN_LAST)
        return next((m["ts"] for m in page.get("messages", []) if _key_of(m) == key), None)

    def map_root(self, session_id: str, channel: str, ts: str) -> None:
        self.messages.record_root(message_id(channel, ts), session_id)

    def thread(self, s: Session) -> str:
        """The ts of the thread a session lives in now (the latest root mapped for it)."""
        mid = self.messages.root(s.id)
        return split_message_id(mid)[1] if mid else s.thread

    def session_in_thread(self, channel: str, thread_ts: str | None) -> str | None:
        row = self.messages.card(message_id(channel, thread_ts)) if thread_ts else None
        return row["session_id"] if row and row["kind"] == "root" else None

    def card_at(self, channel: str, ts: str) -> dict | None:
        """The store's record of the card posted as this message: session, kind, stage, rev."""
        return self.messages.card(message_id(channel, ts))

    # ------------------------------------------------------------------ internals

    def _post(self, s: Session, key: str, **message) -> str:
        """A message in the session's thread; its key rides in the message's metadata, so a retry
        can tell whether a post cut short by a crash reached Slack (_thread_posts)."""
        ts = self._in_thread(s, lambda thread: self.client.chat_postMessage(
            channel=s.channel, thread_ts=thread, metadata=_metadata(key), **message))["ts"]
        return message_id(s.channel, ts)

    def _in_thread(self, s: Session, call: Callable[[str], T]) -> T:
        """call(thread ts) in the session's thread; if Slack says the thread is gone, open a new one."""
        try:
            return call(self.thread(s))
        except SlackApiError as e:
            if slack_error(e) not in THREAD_GONE:
                raise self._explain(e, s) from e
        log.warning("session %s: its thread in %s is gone; continuing in a new thread", s.id, s.channel)
        root = self.post_root(s.channel, f"The thread of kernelbot session `{s.id}` was deleted; it continues "
                                         f"in this thread. Request: {sb.escape(s.request)}")
        self.map_root(s.id, s.channel, root)
        return call(root)

    @staticmethod
    def _explain(e: SlackApiError, s: Session) -> Exception:
        if slack_error(e) in CHANNEL_GONE:
            return ChannelUnavailable(
                f"Slack refuses to post in channel {s.channel} for session {s.id} ({slack_error(e)}): invite the "
                "bot to the channel (/invite @kernelbot) or unarchive it. The session is kept; the message is "
                "retried on the next event or recovery pass.")
        return e


@dataclass
class ThreadPosts:
    keys: dict[str, str] = field(default_factory=dict)                 # post key -> message id
    files: set[tuple[str, int]] = field(default_factory=set)           # (title, size) of files shared


def card_files(card: Card) -> list[dict]:
    """The files a card goes up with: its code when too long for a message, its chart."""
    files = []
    if sb.code_as_file(card):
        files.append({"content": card.code, "filename": sb.code_file_name(card),
                      "title": f"{card.title}: {sb.code_file_name(card)}"})
    if card.image:
        files.append({"content": card.image, "filename": card.image_name or "chart.png", "title": card.title})
    return files


def _metadata(key: str) -> dict | None:
    return {"event_type": POST_EVENT, "event_payload": {"key": key}} if key else None


def _key_of(message: dict) -> str | None:
    """The post key a message of the bot's carries in its metadata, if any."""
    meta = message.get("metadata") or {}
    return (meta.get("event_payload") or {}).get("key") if meta.get("event_type") == POST_EVENT else None


def _size(content: str | bytes) -> int:
    return len(content.encode() if isinstance(content, str) else content)
