"""A catalog entry: a request as a person would type it, with {shapes} and {dtypes}, at the sizes
the catalog benchmark runs (memory-bound ops at 8192x8192 and one odd size; matmul at 4096^3 and
one odd size) and at small sizes for the CPU interpreter. Each family lists its own (ENTRIES)."""
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
    kind: str = "memory"    # memory-bound (judged on bandwidth), "matmul" (judged against cuBLAS) or "compute"
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
