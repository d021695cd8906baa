"""Code generation: what every operator family's lowering writes its files with. The expression
writer (bot.codegen.expr), the name allocator (names), the indented code builder and line
wrapping (code), the kernel file's layout, tuning block and launcher head (kernel_file), the
shared kernel templates (row_kernel, dim_kernel) and the fixed Triton helpers, kept as real .py
files (triton_math.py) that the tests import and lint and kernel.py files carry by name (fixed).
Nothing here knows an operator: the families in bot.ops supply the math."""
