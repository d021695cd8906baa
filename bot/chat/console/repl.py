"""`kernelbot chat`: the conversation in the terminal.

Type a request to start a session. On the current stage card: `a` approves,
`c TEXT` (or any plain line) asks for changes, `e` pastes a new revision (end
with a line holding only `.`), ```python ... ``` pasted directly also edits,
`r` regenerates, `x` cancels. A background thread polls the runner and shows
progress while jobs run.
"""
from __future__ import annotations

import getpass
import json
import time
from typing import Callable

from bot.app import make_service, serving
from bot.chat.commands import code_block
from bot.chat.console.chat import ConsoleChat, render
from bot.config import Config
from bot.workflow import cards, stages
from bot.workflow.events import Approve, Cancel, Correct, Edit, Regenerate
from bot.workflow.service import Service

HELP = """commands:
  <request>        start a session (when none is active), e.g. relu(x + y) for fp16 4096x4096
  a | approve      approve the current stage (also: y, +1, 👍)
  c TEXT           request changes; a plain line while a session is active does the same
  e | edit         paste a new revision, end with a line holding only '.'
  ```python ...``` a pasted code block replaces the current artifact
  r | regenerate   regenerate the current stage
  x | cancel       cancel the session
  show [STAGE[:N]]  the current card (or a stage's latest, or revision N) with its files whole
  status           the session summary
  list             sessions in this store            switch ID   make ID the current session
  new REQUEST      start another session             help | quit"""

APPROVE_WORDS = {"a", "approve", "y", "yes", "+1", "👍", "lgtm"}
# Keys that act on a session's current stage: never a request, even with no session to act on.
ACTION_WORDS = APPROVE_WORDS | {"c", "correct", "e", "edit", "r", "regenerate", "x", "cancel"}
class Repl:
    def __init__(self, svc: Service, user: str, read: Callable[[str], str] = input) -> None:
        self.svc, self.user, self.read = svc, user, read
        self.current: str | None = None

    def handle(self, line: str) -> bool:
        """Act on one line; False when the person wants to quit."""
        line = line.strip()
        if not line:
            return True
        if line.startswith("```") and line.count("```") == 1:
            line = self._rest_of_block(line)
        verb, _, arg = line.partition(" ")
        verb = verb.lower()
        if verb in ("quit", "exit", "q"):
            return False
        simple = {"help": lambda: print(HELP), "list": self._list, "status": self._status, "show": self._show}
        if verb in simple and not arg:
            simple[verb]()
        elif verb == "show":
            self._show(arg.strip())
        elif verb == "switch":
            self._switch(arg.strip())
        elif verb in ACTION_WORDS and self._session() is None:
            print(f"'{verb}' acts on a session's current stage, and no session is active: type a request to start "
                  "one, 'list' to see them, or 'switch ID'")
        elif verb == "new" or self._session() is None:
            self._start(arg if verb == "new" else line)
        else:
            self._act(verb, arg, line)
        return True

    def _act(self, verb: str, arg: str, line: str) -> None:
        s = self._session()
        rev = s.latest(s.stage)
        ref = (s.stage, rev.rev if rev else 0)
        block = code_block(line)
        if verb in APPROVE_WORDS and not arg:
            self.svc.dispatch(s.id, Approve(*ref, self.user))
        elif verb in ("r", "regenerate") and not arg:
            self.svc.dispatch(s.id, Regenerate(*ref, self.user))
        elif verb in ("x", "cancel") and not arg:
            self.svc.dispatch(s.id, Cancel(self.user))
        elif verb in ("e", "edit") and not arg:
            self.svc.dispatch(s.id, Edit(*ref, self.user, self._read_block()))
        elif block is not None:
            self.svc.dispatch(s.id, Edit(*ref, self.user, block))
        elif verb in ("c", "correct"):
            self.svc.dispatch(s.id, Correct(*ref, self.user, arg))
        else:
            self.svc.dispatch(s.id, Correct(*ref, self.user, line))

    def _rest_of_block(self, first: str) -> str:
        """A pasted ``` block arrives line by line: read to its closing fence, so it is one input."""
        lines = [first]
        while True:
            try:
                line = self.read("")
            except EOFError:
                break
            lines.append(line)
            if "```" in line:
                break
        return "\n".join(lines)

    def _read_block(self) -> str:
        print("paste the new revision; end with a line holding only '.'")
        lines = []
        while (line := self.read("")) != ".":
            lines.append(line)
        text = "\n".join(lines)
        return code_block(text) or text

    def _start(self, request: str) -> None:
        s = self.svc.start(request, self.user)
        self.current = s.id
        print(f"session {s.id} started; type 'help' for commands")

    def _session(self):
        if self.current:
            s = self.svc.session(self.current)
            if s and s.active:
                return s
        return None

    def _switch(self, sid: str) -> None:
        if self.svc.session(sid) is None:
            print(f"no session {sid!r}; 'list' shows them")
            return
        self.current = sid
        self._show()

    def _list(self) -> None:
        for s in self.svc.listed():
            mark = "*" if s.id == self.current else " "
            print(f"{mark} {s.id}  {s.status:<9} {stages.label(s.stage):<22} {computes(s)[:60]}")

    def _status(self) -> None:
        s = self.svc.session(self.current) if self.current else None
        print(render(self.svc.status_card(s)) if s else "no session yet; type a request")

    def _show(self, which: str = "") -> None:
        """A revision in full: the current stage's latest, a stage's latest ('kernel'), or 'kernel:2'."""
        s = self.svc.session(self.current) if self.current else None
        if s is None:
            print("no session yet; type a request")
            return
        stage, _, n = (which or s.stage).partition(":")
        if stage not in stages.STAGES or (n and not n.isdigit()):
            print(f"show what? a stage ({', '.join(stages.STAGES)}), optionally with a revision: kernel:2")
            return
        rev = s.revision(stage, int(n)) if n else s.latest(stage)
        print(render(cards.revision_card(s, rev)) if rev else f"no {which or stage} revision yet")


def computes(s) -> str:
    """What a session now computes: its latest spec's description (corrections included), else its request."""
    spec = s.latest("spec")
    try:
        return json.loads(spec.content).get("description") or s.request if spec else s.request
    except (ValueError, AttributeError):
        return s.request


def chat(cfg: Config) -> int:
    svc = make_service(cfg, ConsoleChat(image_dir=cfg.home / "charts"))
    svc.drive()             # its own sessions, and any a dead command left
    with serving(cfg, svc):
        repl = Repl(svc, getpass.getuser() or "you")
        print(f"kernelbot chat · backend {cfg.backend} · store {cfg.db_path}\n{HELP}")
        try:
            while repl.handle(input("kernelbot> ")):
                time.sleep(0.05)
        except (EOFError, KeyboardInterrupt):
            print()
    return 0
