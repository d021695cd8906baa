"""Writing Python source: an indented code builder, calls wrapped at 100 columns, @triton.jit
functions, and text made safe for generated docstrings."""
from __future__ import annotations

from contextlib import contextmanager
from typing import Iterable, Iterator


class Code:
    """Lines of code at a current indent: `code(line, ...)` adds lines, `with code.block(head):`
    adds the head and indents what is added inside, `code.extend(lines)` adds lines at the indent."""

    def __init__(self, depth: int = 0):
        self.lines: list[str] = []
        self.depth = depth

    def __call__(self, *lines: str) -> "Code":
        self.lines += ["    " * self.depth + line for line in lines]
        return self

    def extend(self, lines: Iterable[str]) -> "Code":
        return self(*lines)

    def text(self) -> str:
        """The lines, each ending in a newline."""
        return "".join(line + "\n" for line in self.lines)

    @contextmanager
    def block(self, head: str) -> Iterator["Code"]:
        self(head)
        self.depth += 1
        try:
            yield self
        finally:
            self.depth -= 1


def indented(lines: Iterable[str], depth: int = 1) -> list[str]:
    """lines, each indented `depth` levels deeper."""
    return Code(depth).extend(lines).lines


def body_text(lines: Iterable[str], depth: int = 1) -> str:
    """A function body's text: lines indented `depth` levels, each ending in a newline."""
    return Code(depth).extend(lines).text()


def wrap(head: str, args: list[str], indent: str) -> str:
    """`head(args)` on one line when it fits in 100 columns, else with the args wrapped below."""
    line = f"{indent}{head}({', '.join(args)})"
    if len(line) <= 100:
        return line
    lines, current = [], indent + "    "
    for arg in args:
        if len(current) + len(arg) + 2 > 100 and current.strip():
            lines.append(current.rstrip())
            current = indent + "    "
        current += arg + ", "
    return "\n".join([f"{indent}{head}(", *lines, current.rstrip(), f"{indent})"])


def launch(kernel: str, grid: str, args: list[str], indent: str) -> str:
    """The launch `kernel[grid](args)`, written as the lean launch every kernel.py carries
    (runner/lean_launch.py: Triton's own launch path costs more than a small kernel's GPU time)."""
    return wrap("_launch", [kernel, grid, *args], indent)


def jit_source(name: str, params: list[str], lines: list[str], comment: str = "") -> str:
    """A @triton.jit function: its signature, a comment block (lines ending in newlines), the body."""
    return (f"@triton.jit\n{wrap(f'def {name}', params, '')}:\n{comment}"
            + body_text(lines))


def doc_text(text: str) -> str:
    """Text that is safe inside a generated docstring: one line, no quote characters to close it."""
    return " ".join(str(text).split()).replace("\\", "/").replace('"', "'")
