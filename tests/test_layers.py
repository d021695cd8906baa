"""The layers of docs/ARCHITECTURE.md, read from the imports themselves: chat -> workflow ->
generators -> the offline compiler -> operator families -> code generation, adapters never
touching the store, the runner never importing bot, and runner.queue never importing the runner
that consumes it."""
from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
ORDER = ("chat", "workflow", "generators", "compiler", "ops", "codegen")   # each may import only those after it
WIRING = {"bot.app", "bot.cli", "bot.config", "bot.catalog_bench"}
# Imports against the arrow, each with its reason (docs/ARCHITECTURE.md).
EXCEPTIONS = {
    "bot.workflow.stages": "the stage vocabulary every layer speaks; it imports nothing",
    "bot.generators.interface": "the request reader and the families' words raise GenerationError, which "
                                "names what a request lacks",
    "bot.ops.node": "the IR tree itself, which code generation writes from; it imports nothing of bot",
}


def module_name(path: Path) -> str:
    return ".".join(path.relative_to(ROOT).with_suffix("").parts).removesuffix(".__init__")


def layer(module: str) -> str:
    parts = module.split(".")
    return parts[1] if len(parts) > 2 and parts[1] in ORDER else "compiler"


def imports(path: Path) -> set[str]:
    """Every module path's import names (`from a.b import c` gives a.b.c, and a.b unless it is a package)."""
    found = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            found |= {a.name for a in node.names}
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            package = (ROOT / Path(*node.module.split("."))).is_dir()
            found |= ({node.module} - ({node.module} if package else set())) | {f"{node.module}.{a.name}" for a in node.names}
    return found


def sources(package: str) -> list[Path]:
    return sorted((ROOT / package).rglob("*.py"))


@pytest.mark.parametrize("path", sources("bot"), ids=lambda p: module_name(p))
def test_bot_imports_go_one_way(path):
    module = module_name(path)
    if module in WIRING or module == "bot":
        return
    mine = ORDER.index(layer(module))
    against = sorted(name for name in imports(path) if name.startswith("bot.") and name not in WIRING and _is_module(name)
                     and ORDER.index(layer(name)) < mine and name not in EXCEPTIONS)
    assert not against, f"{module} ({layer(module)}) imports {against}, which sit above it"


@pytest.mark.parametrize("path", sources("bot/chat"), ids=lambda p: module_name(p))
def test_chat_adapters_never_touch_the_store(path):
    assert "bot.workflow.store" not in imports(path), f"{module_name(path)} imports the store"
    platform = module_name(path).split(".")[2] if path.parent.name != "chat" else None
    siblings = {name.split(".")[2] for name in imports(path)
                if name.startswith("bot.chat.") and len(name.split(".")) > 3}
    assert siblings <= {platform, "commands"}, f"{module_name(path)} imports another platform's adapter: {siblings}"


@pytest.mark.parametrize("path", sources("runner"), ids=lambda p: module_name(p))
def test_the_runner_never_imports_bot(path):
    assert not {n for n in imports(path) if n == "bot" or n.startswith("bot.")}


def test_the_queue_never_imports_the_runner_that_consumes_it():
    assert not imports(ROOT / "runner" / "queue.py") & {"runner.worker", "runner.harness"}


def _is_module(name: str) -> bool:
    """Whether an import name is a bot module (not a name imported from one)."""
    return (ROOT / Path(*name.split("."))).with_suffix(".py").exists() or (ROOT / Path(*name.split("."))).is_dir()
