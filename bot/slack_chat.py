"""The service's Chat on Slack: cards and notices become Web API calls in a session's thread.

A session lives in the thread under its root message. If that thread is deleted,
the next post opens a new root in the channel and the session carries on there;
the move is recorded in the store (a "root" message), so it survives a restart
and replies in the new thread reach the session.
"""
from __future__ import annotations

import logging
from typing import Callable, TypeVar

from slack_sdk import WebClient
from slack_sdk.errors import SlackApiError
from slack_sdk.http_retry import RetryHandler
from slack_sdk.http_retry.builtin_handlers import (ConnectionErrorRetryHandler, RateLimitErrorRetryHandler,
                                                    ServerErrorRetryHandler)

from bot import slack_blocks as sb
from bot.cards import Card
from bot.model import Session
from bot.store import Store

log = logging.getLogger("kernelbot.slack")

PLATFORM = "slack"
POST_EVENT = "kernelbot_post"       # the metadata event type each card carries, with its post key
DEFAULT_API_URL = "https://slack.com/api/"
THREAD_GONE = frozenset({"thread_not_found", "message_not_found"})
CHANNEL_GONE = frozenset({"channel_not_found", "not_in_channel", "is_archived"})
T = TypeVar("T")


class ChannelUnavailable(Exception):
    """The bot cannot post in the session's channel; the effect stays in the outbox and is retried."""


# A call that makes a message, retried after an answer that was lost, could make it twice: it is
# retried by the service's outbox instead, which first looks for the message (SlackChat.find_post).
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


class SlackChat:
    platform = PLATFORM

    def __init__(self, client: WebClient, store: Store) -> None:
        self.client, self.store = client, store

    # ------------------------------------------------------------------ Chat

    def post(self, s: Session, card: Card, key: str = "") -> str:
        # Files first: the card with its buttons stays the newest message of the thread, and the
        # service maps it to its stage the moment this returns.
        files = []
        if sb.code_as_file(card):
            files.append({"content": card.code, "filename": sb.code_file_name(card),
                          "title": f"{card.title}: {sb.code_file_name(card)}"})
        if card.image:
            files.append({"content": card.image, "filename": card.image_name or "chart.png", "title": card.title})
        if files:
            self.upload(s, files)
        # The key rides in the message's metadata, so find_post can tell whether a post cut short by
        # a crash reached Slack.
        metadata = {"event_type": POST_EVENT, "event_payload": {"key": key}} if key else None
        return message_id(s.channel, self._post(s, text=sb.fallback_text(card), blocks=sb.card_blocks(card),
                                                metadata=metadata))

    def find_post(self, s: Session, key: str) -> str | None:
        """The card posted with this key in the session's thread, from the thread's own history."""
        cursor = None
        while True:
            page = self.client.conversations_replies(channel=s.channel, ts=self.thread(s), cursor=cursor,
                                                     include_all_metadata=True, limit=200)
            for m in page.get("messages", []):
                meta = m.get("metadata") or {}
                if meta.get("event_type") == POST_EVENT and (meta.get("event_payload") or {}).get("key") == key:
                    return message_id(s.channel, m["ts"])
            cursor = (page.get("response_metadata") or {}).get("next_cursor")
            if not cursor:
                return None

    def open_thread(self, item: dict) -> tuple[str, str] | None:
        """A root message for a /kernel request; the person is told through the command's
        response URL when Slack refuses it."""
        try:
            ts = self.post_root(item["channel"], item["announce"])
        except SlackApiError as e:
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

    def notify(self, s: Session, text: str, user: str | None) -> None:
        if user:
            try:
                self.tell(s.channel, user, text, self.thread(s))
                return
            except SlackApiError as e:                  # e.g. user_not_in_channel: say it in the thread instead
                log.info("session %s: ephemeral to %s refused (%s)", s.id, user, slack_error(e))
                text = f"{user}: {text}"
        self._post(s, text=sb.mrkdwn(text))

    # ------------------------------------------------------------------ beyond the Chat protocol

    def tell(self, channel: str, user: str, text: str, thread: str | None = None) -> None:
        """A message only `user` sees (refusals, stale buttons, command answers)."""
        self.client.chat_postEphemeral(channel=channel, user=user, text=sb.mrkdwn(text), thread_ts=thread)

    def upload(self, s: Session, files: list[dict], comment: str | None = None) -> None:
        self._in_thread(s, lambda thread: self.client.files_upload_v2(
            file_uploads=files, channel=s.channel, thread_ts=thread, initial_comment=comment))

    def open_modal(self, trigger_id: str, view: dict) -> None:
        self.client.views_open(trigger_id=trigger_id, view=view)

    def post_root(self, channel: str, text: str) -> str:
        """A new top-level message in channel; its thread will hold a session. Returns its ts."""
        return self.client.chat_postMessage(channel=channel, text=text)["ts"]

    def map_root(self, session_id: str, channel: str, ts: str) -> None:
        self.store.map_message(PLATFORM, message_id(channel, ts), session_id, "root")

    def thread(self, s: Session) -> str:
        """The ts of the thread a session lives in now (the latest root mapped for it)."""
        mid = self.store.message_id(PLATFORM, s.id, "root")
        return split_message_id(mid)[1] if mid else s.thread

    def session_in_thread(self, channel: str, thread_ts: str | None) -> str | None:
        row = self.store.message(PLATFORM, message_id(channel, thread_ts)) if thread_ts else None
        return row["session_id"] if row and row["kind"] == "root" else None

    def card_at(self, channel: str, ts: str) -> dict | None:
        """The store's record of the card posted as this message: session, kind, stage, rev."""
        return self.store.message(PLATFORM, message_id(channel, ts))

    # ------------------------------------------------------------------ internals

    def _post(self, s: Session, **message) -> str:
        return self._in_thread(s, lambda thread: self.client.chat_postMessage(
            channel=s.channel, thread_ts=thread, **message))["ts"]

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
