"""`kernelbot chat`'s line handling with the real service, store and offline generator: a pasted
code block is one edit, action keys never become requests, `list` shows what a session computes."""
from __future__ import annotations

import io
import time
from contextlib import redirect_stdout

from fakes.queue import MemoryQueue

from bot.chat.console.chat import ConsoleChat
from bot.chat.console.repl import Repl
from bot.config import Config
from bot.generators.offline import OfflineGenerator
from bot.workflow.service import Service
from bot.workflow.store import Store


def make(tmp_path, typed: list[str]) -> tuple[Repl, io.StringIO]:
    cfg = Config(home=tmp_path, db_path=tmp_path / "kb.db", queue_url="", backend="cpu")
    out = io.StringIO()
    svc = Service(cfg, Store(cfg.db_path), OfflineGenerator(), ConsoleChat(out), lambda backend: MemoryQueue())
    lines = iter(typed)
    return Repl(svc, "dev", read=lambda prompt: next(lines)), out


def wait_for(pred, timeout=20.0):
    end = time.time() + timeout
    while time.time() < end and not pred():
        time.sleep(0.05)
    assert pred()


def test_a_pasted_block_is_one_edit_by_its_author(tmp_path):
    code = ["def relu(x):", "    return x.clamp_min(0)", "", "# mine"]
    repl, out = make(tmp_path, [*code, "```"])
    with redirect_stdout(io.StringIO()):
        repl.handle("relu(x) for fp32 8x8")
        wait_for(lambda: repl._session() and repl._session().latest("spec"))
        repl.handle("a")
        wait_for(lambda: repl._session().latest("reference"))
        repl.handle("```python")                      # the rest of the block comes line by line
    s = repl._session()
    latest = s.latest("reference")
    assert latest.rev == 2 and latest.author == "dev" and latest.content.strip() == "\n".join(code).strip()
    assert not s.feedback.get("reference"), "a pasted line became a correction"


def test_action_keys_never_start_a_session_and_list_shows_the_corrected_request(tmp_path):
    repl, out = make(tmp_path, [])
    shown = io.StringIO()
    with redirect_stdout(shown):
        for key in ("a", "x", "r", "c make it faster"):
            repl.handle(key)
        assert not repl.svc.store.session_ids()
        assert "no session is active" in shown.getvalue()
        repl.handle("relu(x) for fp32 8x8")
        wait_for(lambda: repl._session().latest("spec"))
        repl.handle("make it sigmoid(x) instead")
        wait_for(lambda: repl._session().latest("spec").rev == 2)
        repl.handle("list")
    listed = shown.getvalue().splitlines()[-1]
    assert repl._session().id in listed and "sigmoid(x)" in listed and "relu" not in listed, listed


def test_cards_show_their_first_lines_and_show_prints_a_file_whole(tmp_path):
    repl, out = make(tmp_path, [])
    shown = io.StringIO()
    with redirect_stdout(shown):
        repl.handle("relu(x) for fp32 8x8")
        for stage in ("spec", "reference", "reference_test"):
            wait_for(lambda: repl._session().latest(stage))
            if stage != "reference_test":
                repl.handle("a")
        repl.handle("show reference_test")
        repl.handle("show kernel:7")
    s = repl._session()
    test_file = s.latest("reference_test").content.rstrip("\n").splitlines()
    assert len(test_file) > 40, "the case needs a file longer than a card's preview"
    assert f"more lines: `show reference_test` prints it whole, as does `kernelbot status {s.id} --show " \
           "reference_test:1`" in out.getvalue()
    assert test_file[-1] not in out.getvalue(), "the card printed the whole file"
    assert test_file[-1] in shown.getvalue() and "no kernel:7 revision yet" in shown.getvalue()
