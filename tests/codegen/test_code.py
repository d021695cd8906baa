"""The code builder (bot.codegen.code): blocks indent what is added inside them, and long calls wrap."""
from __future__ import annotations

import ast

from bot.codegen.code import Code, body_text, indented, jit_source, wrap


def test_blocks_indent_what_is_added_inside_them():
    code = Code()("x = 1")
    with code.block("for i in range(3):"):
        code("x += i")
        with code.block("if x > 2:"):
            code.extend(["y = x", "break"])
    code("z = x")
    assert code.lines == ["x = 1", "for i in range(3):", "    x += i", "    if x > 2:", "        y = x",
                          "        break", "z = x"]
    ast.parse(code.text())
    assert indented(["a", "b"], 2) == ["        a", "        b"]
    assert body_text(["a", "b"]) == "    a\n    b\n"


def test_a_long_call_wraps_within_100_columns_and_still_parses():
    args = [f"argument_number_{i}" for i in range(12)]
    text = wrap("result = some_function", args, "    ")
    assert all(len(line) <= 100 for line in text.splitlines()) and len(text.splitlines()) > 1
    ast.parse("def f():\n" + text + "\n")
    assert wrap("f", ["a", "b"], "") == "f(a, b)"


def test_a_jit_function_is_its_decorator_signature_comment_and_body():
    source = jit_source("_k", ["x_ptr", "BLOCK: tl.constexpr"], ["x = 1", "return x"], "    # why\n")
    assert source == "@triton.jit\ndef _k(x_ptr, BLOCK: tl.constexpr):\n    # why\n    x = 1\n    return x\n"
