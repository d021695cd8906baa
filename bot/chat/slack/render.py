"""Block Kit rendering of cards, notices and the two modals. Pure dicts: no Slack SDK.

Slack's limits shape the layout: a header holds 150 characters, a section 3000,
a section field 2000, a text input 3000, a message 50 blocks. Code longer than
CODE_INLINE_MAX goes up as a file just before the message, which shows a preview.
"""
from __future__ import annotations

import re

from bot.workflow import stages
from bot.workflow.cards import ACTION_LABELS, Card, format_table

PREFIX = "kernelbot_"                 # action ids and modal callback ids
HEADER_MAX, SECTION_MAX, FIELD_MAX, INPUT_MAX = 150, 3000, 2000, 3000
CODE_INLINE_MAX = 2500
PREVIEW_LINES = 20
FIELDS_PER_SECTION = 10
CONTEXT_ELEMENTS = 10

_USER_ID = re.compile(r"\b([UW][A-Z0-9]{8,})\b")
_BUTTON_STYLES = {"approve": "primary", "cancel": "danger"}


def escape(text: str) -> str:
    """Slack mrkdwn control characters; everything else is shown as is."""
    return text.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")


def mrkdwn(text: str) -> str:
    """Escaped text with Slack user ids turned into mentions (the engine names people by id)."""
    return _USER_ID.sub(r"<@\1>", escape(text))


def clip(text: str, n: int) -> str:
    return text if len(text) <= n else text[: n - 1] + "…"


def code_as_file(card: Card) -> bool:
    """True when the card's code is too long for a message and goes up as a file."""
    return bool(card.code) and len(card.code) > CODE_INLINE_MAX


def code_file_name(card: Card) -> str:
    return card.code_filename or f"{card.session_id}-{card.stage or 'log'}.txt"


def fallback_text(card: Card) -> str:
    """The notification text of a card (shown where blocks are not)."""
    return clip(f"{card.title}: {card.status}", SECTION_MAX)


def card_blocks(card: Card) -> list[dict]:
    """A card as Block Kit: header, status, fields, code, table, notes, buttons."""
    blocks = [{"type": "header", "text": _plain(clip(card.title, HEADER_MAX))},
              _section(f"*{mrkdwn(card.status)}*"),
              _context([f"session `{card.session_id}`"])]
    blocks += _field_sections(card.fields)
    if card.code:
        blocks += _code_blocks(card)
    if card.table:
        blocks.append(_section(_pre(format_table(card.table))))
    if card.notes:
        blocks.append(_context([mrkdwn(n) for n in card.notes[:CONTEXT_ELEMENTS]]))
    if card.image:
        blocks.append(_context([f"chart: `{escape(card.image_name or 'chart.png')}`, attached above"]))
    if card.actions:
        blocks.append({"type": "actions", "block_id": f"{PREFIX}actions",
                       "elements": [_button(a, card.action_value) for a in card.actions]})
    return blocks


def _field_sections(fields: list[tuple[str, str]]) -> list[dict]:
    texts = [clip(f"*{escape(k)}*\n{mrkdwn(v)}", FIELD_MAX) for k, v in fields]
    return [{"type": "section", "fields": [{"type": "mrkdwn", "text": t} for t in texts[i:i + FIELDS_PER_SECTION]]}
            for i in range(0, len(texts), FIELDS_PER_SECTION)]


def _code_blocks(card: Card) -> list[dict]:
    if not code_as_file(card):
        return [_section(_pre(card.code.rstrip("\n").splitlines()))]
    lines = card.code.rstrip("\n").splitlines()
    return [_section(_pre(lines[:PREVIEW_LINES])),
            _context([f"`{escape(code_file_name(card))}`: {len(lines)} lines; first {PREVIEW_LINES} shown, "
                      "the whole file is attached above"])]


def _pre(lines: list[str]) -> str:
    """Lines as a code block that fits a section, clipped at a line boundary."""
    body, budget = [], SECTION_MAX - 8 - 40
    for i, line in enumerate(lines):
        line = escape(line)
        if len(line) + 1 > budget:
            body.append(f"… {len(lines) - i} more lines")
            break
        body.append(line)
        budget -= len(line) + 1
    return "```\n" + "\n".join(body) + "\n```"


def _button(action: str, value: str) -> dict:
    button = {"type": "button", "action_id": PREFIX + action, "text": _plain(ACTION_LABELS[action]), "value": value}
    if action in _BUTTON_STYLES:
        button["style"] = _BUTTON_STYLES[action]
    if action == "cancel":
        button["confirm"] = {"title": _plain("Cancel this session?"), "text": _plain("Open jobs are abandoned."),
                             "confirm": _plain("Cancel session"), "deny": _plain("Keep going")}
    return button


def correction_modal(value: str, stage: str) -> dict:
    """Request changes: one text box; private_metadata carries the card's action value."""
    box = {"type": "plain_text_input", "action_id": "text", "multiline": True, "max_length": INPUT_MAX,
           "placeholder": _plain("e.g. use shape 8x16 instead, or block size 2048")}
    return _modal("correct", value, "Request changes", "Send",
                  [_input("text", f"What should change in {stages.label(stage)}?", box)])


def edit_modal(value: str, stage: str, content: str) -> dict:
    """Edit: the artifact in a text box, when it fits Slack's 3000-character input."""
    box = {"type": "plain_text_input", "action_id": "code", "multiline": True, "max_length": INPUT_MAX}
    blocks = []
    if len(content) <= INPUT_MAX:
        box["initial_value"] = content
    else:
        blocks.append(_context([f"`{stages.FILENAMES[stage]}` is longer than a Slack text box holds "
                                f"({len(content)} of {INPUT_MAX} characters): paste the whole new file here, or "
                                "reply in the thread with a ```python block"]))
    blocks.append(_input("code", stages.FILENAMES[stage], box))
    return _modal("edit", value, clip(f"Edit {stages.TITLES[stage]}", 24), "Save revision", blocks)


def modal_input(view: dict, block_id: str) -> str:
    """The text a person typed into one of our modals' inputs."""
    return (view.get("state", {}).get("values", {}).get(block_id, {}).get(block_id, {}).get("value")) or ""


def _modal(kind: str, value: str, title: str, submit: str, blocks: list[dict]) -> dict:
    return {"type": "modal", "callback_id": PREFIX + kind, "private_metadata": value, "title": _plain(title),
            "submit": _plain(submit), "close": _plain("Close"), "blocks": blocks}


def _input(block_id: str, label: str, element: dict) -> dict:
    return {"type": "input", "block_id": block_id, "label": _plain(label), "element": element}


def _section(text: str) -> dict:
    return {"type": "section", "text": {"type": "mrkdwn", "text": clip(text, SECTION_MAX)}}


def _context(texts: list[str]) -> dict:
    return {"type": "context", "elements": [{"type": "mrkdwn", "text": clip(t, SECTION_MAX)} for t in texts]}


def _plain(text: str) -> dict:
    return {"type": "plain_text", "text": text, "emoji": True}
