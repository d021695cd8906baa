"""The offline generator's catalog: one request per operator family, as a person would type it,
at the sizes issue 6 benchmarks (memory-bound ops at 8192x8192 and one odd size; matmul at 4096^3
and one odd size) and at small sizes for the CPU interpreter. `expression` is what the request
must parse to, so the catalog also pins the request parser."""
from __future__ import annotations

from dataclasses import dataclass

ALL_DTYPES = "fp16, bf16, fp32"
BIG = "8192x8192, 7919x6007"          # memory-bound: square power of two, and odd (both primes)
SMALL = "37x97, 5x7x11"
SMALL_LONG_ODD = "37x97, 3x1031, 5x7x11"    # row kernels: odd rows of 1024+ take the aligned kernel, and
                                            # norms' weights load whole vectors (tiles of 8+ elements a thread)


@dataclass(frozen=True)
class Entry:
    name: str
    words: str              # the request, with {shapes} and {dtypes}
    expression: str         # what it must parse to
    kind: str = "memory"    # memory-bound (judged on bandwidth) or "matmul" (judged against cuBLAS)
    big: str = BIG
    small: str = SMALL
    dtypes: str = ALL_DTYPES
    small_dtypes: str = "fp16, fp32"     # the interpreter computes bf16 wrongly

    def request(self, size: str = "big", dtypes: str | None = None) -> str:
        shapes = self.big if size == "big" else self.small
        dtypes = dtypes or (self.dtypes if size == "big" else self.small_dtypes)
        return self.words.format(shapes=shapes, dtypes=dtypes)


MATMUL_BIG = "4096x4096 by 4096x4096, 3001x2999 by 2999x3007"
MATMUL_SMALL = "33x70 by 70x45, 16x32 by 32x16"

ENTRIES: tuple[Entry, ...] = (
    Entry("add", "add two matrices on {shapes}, each in {dtypes}", "x + y"),
    Entry("swiglu", "silu(x) * y on {shapes}, each in {dtypes}", "silu(x) * y"),
    Entry("sum", "sum over the last dim on {shapes}, each in {dtypes}", "sum(x)", small=SMALL_LONG_ODD),
    Entry("mean_dim0", "mean over dim 0 on {shapes}, each in {dtypes}", "mean(x, dim=0)"),
    Entry("max", "max over the last dim on {shapes}, each in {dtypes}", "max(x)", small=SMALL_LONG_ODD),
    Entry("min_dim0", "min over dim 0 on {shapes}, each in {dtypes}", "min(x, dim=0)"),
    Entry("argmax", "argmax over the last dim on {shapes}, each in {dtypes}", "argmax(x, dim=-1)",
          small=SMALL_LONG_ODD),
    Entry("argmin_dim0", "argmin over dim 0 on {shapes}, each in {dtypes}", "argmin(x, dim=0)"),
    Entry("softmax", "softmax over the last dim on {shapes}, each in {dtypes}", "softmax(x)"),
    Entry("layernorm", "layernorm with weight and bias on {shapes}, each in {dtypes}",
          "layernorm(x, weight, bias, eps=1e-05)", small=SMALL_LONG_ODD),
    Entry("rmsnorm", "rmsnorm with weight on {shapes}, each in {dtypes}", "rmsnorm(x, weight, eps=1e-06)",
          small=SMALL_LONG_ODD),
    Entry("add_rmsnorm", "fused add + rmsnorm with weight on {shapes}, each in {dtypes}",
          "rmsnorm(x + residual, weight, eps=1e-06)", small=SMALL_LONG_ODD),
    Entry("cross_entropy", "cross entropy over the last dim of logits on {shapes}, each in {dtypes}",
          "cross_entropy(logits, target)", small=SMALL_LONG_ODD),
    Entry("matmul", "matmul {shapes}, each in {dtypes}", "a @ b", "matmul",
          MATMUL_BIG, MATMUL_SMALL, "fp16, bf16"),
    Entry("matmul_epilogue", "matmul with bias, gelu and residual, {shapes}, each in {dtypes}",
          "gelu(a @ b + bias) + residual", "matmul", MATMUL_BIG, MATMUL_SMALL, "fp16, bf16"),
    Entry("matmul_tf32", "matmul with tf32, {shapes}, in fp32", "matmul(a, b, tf32=True)", "matmul",
          MATMUL_BIG, MATMUL_SMALL, "fp32", "fp32"),
    Entry("bmm", "batched matmul {shapes}, each in {dtypes}", "a @ b", "matmul",
          "32x1024x1024 by 32x1024x1024, 7x999x1003 by 7x1003x997", "3x20x30 by 3x30x10", "fp16, bf16"),
)


def by_name(names: list[str] | None) -> list[Entry]:
    """The entries named (all when None); unknown names are an error that lists the known ones."""
    if not names:
        return list(ENTRIES)
    known = {e.name: e for e in ENTRIES}
    unknown = [n for n in names if n not in known]
    if unknown:
        raise ValueError(f"unknown catalog entries {unknown}; known: {', '.join(known)}")
    return [known[n] for n in names]
