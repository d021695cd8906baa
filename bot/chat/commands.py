"""What people type and react in a chat, read the same way on every platform: the /kernel
verbs, thumbs-up reactions, and thread replies (an approve word, a code block that edits,
else a correction). Adapters turn their payloads into plain text and emoji names first."""
from __future__ import annotations

import re

from bot.workflow.events import Approve, Correct, Edit, Event
from bot.workflow.model import Session

THUMBS_UP = frozenset({"+1", "thumbsup", "\N{THUMBS UP SIGN}"})
APPROVE_REPLIES = frozenset({"approve", "approved", "lgtm"})
SESSION_VERBS = ("status", "cancel", "export")      # verbs that take a session id
_SKIN_TONES = "".join(chr(c) for c in range(0x1F3FB, 0x1F400)) + "\uFE0F"
_ANY_FENCE = re.compile(r"```(?:(?:python|py|json)[ \t]*\n)?(.*?)```", re.S)
FENCE = re.compile(r"```(?:python|py|json)?\s*\n(.*?)```", re.S)


def code_block(text: str) -> str | None:
    """The content of the first ``` fenced block in text, if any."""
    m = FENCE.search(text)
    return m.group(1) if m else None


def is_thumbs_up(name: str) -> bool:
    """'+1', 'thumbsup' or the emoji itself, with or without a skin tone ('+1::skin-tone-3', '👍🏽')
    or colons."""
    return name.strip(":").split("::")[0].rstrip(_SKIN_TONES) in THUMBS_UP


def reply_code(text: str) -> str | None:
    """A fenced block in a reply; chat composers often put code right after the fence."""
    block = code_block(text)
    if block is not None:
        return block
    m = _ANY_FENCE.search(text)
    return m.group(1).strip("\n") + "\n" if m else None


def reply_event(s: Session, user: str, text: str) -> Event:
    """A thread reply acts on the current stage: a code block edits, a thumbs-up approves, else corrects."""
    latest = s.latest(s.stage)
    ref = (s.stage, latest.rev if latest else 0)
    code = reply_code(text)
    if code is not None:
        return Edit(*ref, user, code)
    if text.lower() in APPROVE_REPLIES or is_thumbs_up(text):
        return Approve(*ref, user)
    return Correct(*ref, user, text)


def parse_command(text: str) -> tuple[str, str]:
    """/kernel's text as (verb, argument): ('help', ''), ('list', ''), ('status' | 'cancel' | 'export',
    session id) or ('start', the request)."""
    verb, _, arg = text.strip().partition(" ")
    verb, arg = verb.lower(), arg.strip()
    if verb in ("", "help"):
        return "help", ""
    if verb == "list" and not arg:
        return "list", ""
    if verb in SESSION_VERBS:
        return verb, arg
    return "start", text.strip()


def help_text(bold: str, start: str, aside: str = "") -> str:
    """The help, in a platform's markup: `bold` is its bold marker, `start` how /kernel takes a
    request there ('/kernel ' on Slack, '/kernel request:' on Discord)."""
    return (f"{bold}kernelbot{bold} takes a kernel request to a reviewed, tested, benchmarked Triton kernel, "
            "one stage at a time.\n"
            f"`{start}REQUEST` starts a session in a new thread, e.g. `{start}softmax over the last dim of a "
            f"1024x4096 fp32 tensor`{aside}.\n"
            f"`{start}list` open sessions in this channel · `{start}status ID` · `{start}cancel ID` · "
            f"`{start}export ID` (the files, report and chart, into the session's thread)\n"
            "In a session's thread: use the buttons, or react :+1: to approve a stage; a reply asks for changes; "
            "a reply holding a fenced code block (three backticks) replaces the current code.")
