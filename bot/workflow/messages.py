"""What a chat adapter may know of the store: one platform's messages that stand for a session
(the root its thread hangs from, the cards posted in it), recorded so they survive a restart."""
from __future__ import annotations

from bot.workflow.store import Store


class Messages:
    def __init__(self, store: Store, platform: str) -> None:
        self.store, self.platform = store, platform

    def record_root(self, message_id: str, session_id: str) -> None:
        """The session's thread hangs from this message (its /kernel post, or a thread moved to)."""
        self.store.map_message(self.platform, message_id, session_id, "root")

    def root(self, session_id: str) -> str | None:
        return self.store.message_id(self.platform, session_id, "root")

    def card(self, message_id: str) -> dict | None:
        """The record of what was posted as this message: session, kind, stage, rev."""
        return self.store.message(self.platform, message_id)
