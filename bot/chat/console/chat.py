"""Console adapter, the embedded default: cards as plain text in the terminal.

Images cannot be shown in a terminal, so a card's chart is written under the
adapter's image directory and its path printed.
"""
from __future__ import annotations

import itertools
import sys
import textwrap
import threading
from pathlib import Path
from typing import TextIO

from bot.workflow.cards import ACTION_LABELS, Card, format_table
from bot.workflow.model import Session

CODE_PREVIEW_LINES = 30


class ConsoleChat:
    platform = "console"

    def __init__(self, out: TextIO = sys.stdout, image_dir: Path | None = None) -> None:
        self.out, self.image_dir = out, image_dir
        self._ids = itertools.count(1)
        self._last_status: dict[str, str] = {}
        self._lock = threading.Lock()

    def post(self, s: Session, card: Card, key: str = "", retry: bool = False) -> str:
        # A terminal keeps nothing to look up: a card cut off by a crash prints again.
        mid = f"m{next(self._ids)}"
        text = render(card, False, self._save_image(card))      # the first lines: `show` prints the rest
        self._write("\n" + text + "\n")
        self._last_status[mid] = card.status
        return mid

    def open_thread(self, item: dict, key: str = "", retry: bool = False) -> tuple[str, str | None]:
        return "", None         # the terminal is the thread

    def update(self, s: Session, message_id: str, card: Card) -> None:
        # Only the status line changes on an update (approval, job progress): print it once.
        if self._last_status.get(message_id) == card.status:
            return
        self._last_status[message_id] = card.status
        self._write(f"  · {card.title}: {card.status}\n")

    def notify(self, s: Session, text: str, user: str | None, key: str = "", retry: bool = False) -> None:
        to = f"(to {user}) " if user else ""
        self._write(f"  ! {to}{text}\n")

    def _save_image(self, card: Card) -> Path | None:
        if not card.image or not self.image_dir:
            return None
        self.image_dir.mkdir(parents=True, exist_ok=True)
        path = self.image_dir / (card.image_name or f"{card.session_id}.png")
        path.write_bytes(card.image)
        return path

    def _write(self, text: str) -> None:
        with self._lock:
            self.out.write(text)
            self.out.flush()


def render(card: Card, full_code: bool = True, image_path: Path | None = None) -> str:
    """A card as plain text: title, status, fields, table, code, notes, actions."""
    bar = "─" * 72
    lines = [bar, f"[{card.session_id}] {card.title}", f"status: {card.status}"]
    width = max((len(k) for k, _ in card.fields), default=0)
    for key, value in card.fields:
        lines.append(f"  {key.ljust(width)} : {_indent(value, width + 5)}")
    if card.table:
        lines += ["", *format_table(card.table)]
    if card.code:
        lines += ["", *_code_lines(card, full_code)]
    for note in card.notes:
        lines.append(textwrap.fill(f"note: {note}", 100, subsequent_indent="      "))
    if image_path:
        lines.append(f"chart: {image_path}")
    if card.actions:
        lines.append("actions: " + " · ".join(_action_hint(a) for a in card.actions))
    lines.append(bar)
    return "\n".join(lines)


def _code_lines(card: Card, full: bool) -> list[str]:
    code = card.code.rstrip("\n").splitlines()
    head = f"--- {card.code_filename or card.code_lang} ({len(code)} lines) ---"
    if not full and len(code) > CODE_PREVIEW_LINES:
        whole = f"`show {card.stage}` prints it whole" if card.stage else "`show` prints it whole"
        if card.stage and card.rev:
            whole += f", as does `kernelbot status {card.session_id} --show {card.stage}:{card.rev}`"
        return [head, *code[:CODE_PREVIEW_LINES], f"... {len(code) - CODE_PREVIEW_LINES} more lines: {whole}"]
    return [head, *code]


def _action_hint(action: str) -> str:
    keys = {"approve": "a", "correct": "c TEXT", "edit": "e", "regenerate": "r", "cancel": "x"}
    return f"{ACTION_LABELS[action]} [{keys[action]}]"


def _indent(value: str, n: int) -> str:
    return value.replace("\n", "\n" + " " * n)

