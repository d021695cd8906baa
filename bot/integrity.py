"""The integrity checks of generated files, as the bot applies them before anything runs: a kernel
from the LLM or a person's edit (check, an alias of runner.integrity.check_kernel), a reference
(check_reference) and a generated or edited test (check_test).

The rules live in runner.integrity, by allow-list, so the bot and the runner's harness hold every
file to the same definition; docs/INTEGRITY.md states them for people.
"""
from __future__ import annotations

from runner.integrity import Violation, check_kernel, check_reference, check_test
from runner.integrity import report as _report

__all__ = ["Violation", "check", "check_kernel", "check_reference", "check_test", "check_stage", "report"]


def check(source: str, entry: str | None = None) -> list[Violation]:
    """Every rule kernel.py breaks, in line order; empty when it passes. entry: the spec's name
    (the launcher); None takes the last module-level function that is not @triton.jit."""
    return check_kernel(source, entry)


def check_stage(stage: str, source: str, entry: str | None = None) -> list[Violation]:
    """The violations of a stage's artifact (kernel, reference or a test); [] for other stages."""
    if stage == "kernel":
        return check_kernel(source, entry)
    if stage == "reference":
        return check_reference(source, entry)
    if stage in ("reference_test", "kernel_test"):
        return check_test(source)
    return []


def report(violations: list[Violation], file: str = "kernel.py", limit: int = 12) -> str:
    """The violations for people and for the model: one line each, after what the rules want."""
    return _report(violations, file, limit)
