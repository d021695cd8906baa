"""Discord rendering of cards and notices: embed dicts, attachments and button specs. Pure:
no discord.py.

Discord's limits shape the layout: a title holds 256 characters, a description 4096, a
field 1024 (25 fields), an embed 6000 in all, a message 2000, a custom id 100. The status,
the table and the code go in the description while they fit; what does not fit goes as
an attached file, with a preview and a line saying so.
"""
from __future__ import annotations

import re
from dataclasses import dataclass, field

from bot.workflow.cards import ACTION_LABELS, ACTIONS, Card, format_table

TITLE_MAX, DESCRIPTION_MAX, FIELD_NAME_MAX, FIELD_MAX, FIELDS_MAX = 256, 4096, 256, 1024, 25
EMBED_MAX, CONTENT_MAX, FOOTER_MAX, STATUS_MAX = 6000, 2000, 100, 500
FIELDS_BUDGET = 1800                  # what the fields may take of the 6000
# The table and the code get what the embed has left in the worst case, so whether code goes
# as a file never changes when a card is updated (an edit keeps the attachments it was posted with).
BLOCKS_ROOM = EMBED_MAX - TITLE_MAX - FOOTER_MAX - FIELDS_BUDGET - STATUS_MAX - 50    # 50: the '… more' field
PREVIEW_LINES = 15

# Buttons carry the card's action value: kb:ACTION:SESSION|STAGE|REV (at most 100 characters).
CUSTOM_ID = re.compile(rf"kb:(?P<action>{'|'.join(ACTIONS)}):(?P<value>[^:]{{1,80}})")
_STYLES = {"approve": "success", "correct": "primary", "cancel": "danger"}
_SNOWFLAKE = re.compile(r"(?<![\w<@#&])(\d{17,20})(?![\w>])")
_MARKDOWN = re.compile(r"([\\*_~`|])")
_COLOURS = {"fail": 0xE74C3C, "pass": 0x2ECC71, "busy": 0xF1C40F, "review": 0x5865F2, "idle": 0x95A5A6}


@dataclass(frozen=True)
class Attachment:
    filename: str
    data: bytes


@dataclass(frozen=True)
class Button:
    label: str
    custom_id: str
    style: str                        # a discord.ButtonStyle name


@dataclass
class Rendered:
    embed: dict
    files: list[Attachment] = field(default_factory=list)
    buttons: list[Button] = field(default_factory=list)


def clip(text: str, n: int) -> str:
    return text if len(text) <= n else text[: n - 1] + "…"


def text(value: str) -> str:
    """Plain text for a description, field or message: markdown escaped, Discord user ids as
    mentions (the engine names people by id)."""
    return _SNOWFLAKE.sub(r"<@\1>", _MARKDOWN.sub(r"\\\1", value))


def notice(value: str) -> str:
    return clip(text(value), CONTENT_MAX)


def custom_id(action: str, value: str) -> str:
    return f"kb:{action}:{value}"


def render(card: Card) -> Rendered:
    """A card as one embed (title, status, table, code, fields, notes, chart), its attachments and buttons."""
    footer = f"session {card.session_id}" + (f" · job {card.job_id}" if card.job_id else "")
    out = Rendered(embed={"title": clip(card.title, TITLE_MAX), "color": colour(card),
                          "footer": {"text": clip(footer, FOOTER_MAX)}})
    out.embed["fields"] = _fields(card)
    out.embed["description"] = _description(card, out.files)
    if card.image:
        name = card.image_name or "chart.png"
        out.files.append(Attachment(name, card.image))
        out.embed["image"] = {"url": f"attachment://{name}"}
    out.buttons = [Button(ACTION_LABELS[a], custom_id(a, card.action_value), _STYLES.get(a, "secondary"))
                   for a in card.actions]
    return out


def colour(card: Card) -> int:
    words = f"{card.title} {card.status}".lower()
    if "fail" in words or "error" in words:
        return _COLOURS["fail"]
    if "pass" in words or card.status.startswith("approved") or card.status == "done":
        return _COLOURS["pass"]
    if "queued" in words or "running" in words:
        return _COLOURS["busy"]
    return _COLOURS["review"] if card.actions else _COLOURS["idle"]


def _fields(card: Card) -> list[dict]:
    fields, budget = [], FIELDS_BUDGET
    items = [(k, v) for k, v in card.fields]
    if card.notes:
        items.append(("notes", "\n".join(f"• {n}" for n in card.notes)))
    for i, (name, value) in enumerate(items):
        f = {"name": clip(name, FIELD_NAME_MAX), "value": clip(text(value), FIELD_MAX) or "-",
             "inline": len(value) <= 40}
        last_slot = len(fields) == FIELDS_MAX - 1 and i < len(items) - 1
        if last_slot or len(f["name"]) + len(f["value"]) > budget:
            fields.append({"name": "…", "value": f"{len(items) - i} more not shown", "inline": False})
            break
        fields.append(f)
        budget -= len(f["name"]) + len(f["value"])
    return fields


def _description(card: Card, files: list[Attachment]) -> str:
    parts = [f"**{clip(text(card.status), STATUS_MAX - 4)}**"]
    room = BLOCKS_ROOM
    if card.table:
        name = f"{card.session_id}-{card.stage or 'result'}-table.txt"
        block = _fit(format_table(card.table), "", name, room - 1, files)
        parts.append(block)
        room -= len(block) + 1
    if card.code:
        name = card.code_filename or f"{card.session_id}-{card.stage or 'log'}.txt"
        parts.append(_fit(card.code.rstrip("\n").splitlines(), card.code_lang, name, room - 1, files))
    return "\n".join(parts)


def _fit(lines: list[str], lang: str, filename: str, room: int, files: list[Attachment]) -> str:
    """Lines as a code block when it fits in room; else the whole as an attachment and a preview."""
    whole = _block(lines, lang)
    if len(whole) <= room:
        return whole
    files.append(Attachment(filename, ("\n".join(lines) + "\n").encode()))
    for n in range(min(PREVIEW_LINES, len(lines)), -1, -1):
        shown = f"first {n} shown; " if n else ""
        note = f"`{filename}`: {len(lines)} lines, {shown}the whole file is attached"
        block = (_block([clip(line, 200) for line in lines[:n]], lang) + "\n" if n else "") + note
        if len(block) <= room:
            return block
    return ""


def _block(lines: list[str], lang: str) -> str:
    body = "\n".join(lines).replace("```", "``\u200b`")     # a fence inside the code would end the block
    return f"```{lang}\n{body}\n```"
