"""Compile every catalog kernel for an H100/H200 (sm_90) without a GPU: `python tests/sm90_compile.py
[ENTRY ...]`, or `--serve` to read entry names from stdin, one a line, answering each as it is done.

The CPU interpreter runs kernels as NumPy and never compiles them, so it misses what only Triton's
compiler rejects (a loop-carried value that changes shape, an op the GPU path lacks) and what only
the GPU would run out of (shared memory). Here each generated launcher runs on CPU tensors for
every case x dtype x config of its catalog entry (small sizes), but every `kernel[grid](...)` is
compiled with Triton's real pipeline for sm_90, down to a cubin by the bundled ptxas, instead of
launched. Prints one JSON line per entry: kernels compiled, the most shared memory any needs,
whether the PTX has NaN-keeping min/max (torch's semantics), how many aligned kernels (odd rows)
compiled, which kernels load whole vectors anywhere, and the first error. Must run without
TRITON_INTERPRET (tests/test_sm90_compile.py starts it so). Triton's own compile cache
(~/.triton/cache, or TRITON_CACHE_DIR) keeps every cubin, so a second pass over unchanged kernels
takes seconds instead of minutes.
"""
from __future__ import annotations

import importlib.util
import json
import re
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import triton  # noqa: E402
from triton.backends.compiler import GPUTarget  # noqa: E402
from triton.compiler import ASTSource, make_backend  # noqa: E402
from triton.runtime.jit import JITFunction, create_function_from_signature  # noqa: E402

from bot import catalog  # noqa: E402
from bot.ops import registry  # noqa: E402
from bot.ops.entry import MATMUL_BIG, MATMUL_SMALL, Entry  # noqa: E402
from bot.request import parse_request  # noqa: E402
from bot.spec import parse_expression  # noqa: E402
from runner import inputs, protocol  # noqa: E402

TARGET = GPUTarget("cuda", 90, 32)
compiled: list[tuple[str, int, str]] = []   # (name, shared-memory bytes, PTX) of each kernel compiled
VECTOR_LOAD = re.compile(r"ld\.global(\.\w+)*\.v[24]\.|cp\.async\.cg\.shared\.global")   # 8 or 16 bytes


def compile_instead(self: JITFunction, *args, grid, warmup, **kwargs):
    """Stands in for JITFunction.run: binds and specializes the launch's arguments as a launch on
    the GPU would (integers divisible by 16, 16-byte aligned pointers: what lets loads vectorize),
    then compiles for TARGET instead of launching."""
    backend = make_backend(TARGET)
    binder = create_function_from_signature(self.signature, self.params, backend)
    bound, specialization, options = binder(*args, **kwargs)
    options, signature, constants, attrs = self._pack_args(backend, kwargs, bound, specialization, options)
    kernel = triton.compile(ASTSource(self, signature, constants, attrs), target=TARGET, options=options.__dict__)
    compiled.append((self.__name__, kernel.metadata.shared, kernel.asm["ptx"]))


# Matmul entries compile at one aligned size besides their small ones: the small shapes shrink the
# tiles, and only full-size tiles show what an epilogue's layout changes and a TMA store add to the
# operand stages' shared memory. TF32 with an epilogue is no catalog entry but a spec like any.
BIG_TILES = {"bmm": "2x512x512 by 2x512x512", "conv2d_3x3": "2x2x64x64",    # a convolution: 64 x 64 positions
             "conv2d_1x1": "2x2x64x64"}
# float16 and bfloat16 convolutions of 16 or more channels and several taps read x channels-last
# (the catalog's small convolutions have 2 channels)
CONV_CHANNELS_LAST = Entry("conv2d_3x3_channels_last", "conv2d 3x3 with 32 output channels and padding 1 on {shapes}, "
                           "each in {dtypes}", "conv2d(x, w, padding=1)", "compute", small="1x32x8x8, 2x32x5x7",
                           dtypes="fp16, bf16")
MATMUL_EPILOGUE_TF32 = Entry(
    "matmul_epilogue_tf32", "matmul with tf32, bias, gelu and residual, {shapes}, in {dtypes}",
    "gelu(matmul(a, b, tf32=True) + bias) + residual", "matmul", MATMUL_BIG, MATMUL_SMALL, "fp32", "fp32")


def check_entry(entry: Entry, workdir: Path) -> dict:
    dtypes = entry.dtypes
    shapes = entry.small
    if entry.kind == "matmul":
        shapes += ", " + BIG_TILES.get(entry.name, "512x512 by 512x512")
    spec, _ = parse_request(entry.words.format(shapes=shapes, dtypes=dtypes))
    path = workdir / f"kernel_{entry.name}.py"
    path.write_text(registry.kernel_source(spec, parse_expression(spec), {}))
    module_spec = importlib.util.spec_from_file_location(path.stem, path)
    module = importlib.util.module_from_spec(module_spec)
    sys.modules[path.stem] = module
    module_spec.loader.exec_module(module)
    launch, start, error = getattr(module, spec["name"]), len(compiled), ""
    try:
        for case in protocol.cases(spec):
            for variant in protocol.dtype_variants(spec):
                args = inputs.make_inputs(spec, case, variant, 0, "cpu")
                for config in module.CONFIGS:
                    launch(*args, config=config)
    except Exception as e:
        error = f"{type(e).__name__}: {e}"[:2000]
    done = compiled[start:]
    return {"entry": entry.name, "kernels": len(done), "max_shared": max((k[1] for k in done), default=0),
            "nan_min_max": any(op in k[2] for k in done for op in ("max.NaN", "min.NaN")),
            "aligned_kernels": sum(name.endswith("_aligned_kernel") for name, _, _ in done),
            "vectorized": sorted({name for name, _, ptx in done if VECTOR_LOAD.search(ptx)}),
            "error": error}


def main(args: list[str]) -> None:
    JITFunction.run = compile_instead
    known = {e.name: e for e in (*catalog.ENTRIES, MATMUL_EPILOGUE_TF32, CONV_CHANNELS_LAST)}
    names = (line.strip() for line in sys.stdin) if args == ["--serve"] else args or known
    with tempfile.TemporaryDirectory() as tmp:
        for name in names:
            if name not in known:
                print(json.dumps({"entry": name, "error": f"no catalog entry named {name!r}"}), flush=True)
                continue
            print(json.dumps(check_entry(known[name], Path(tmp))), flush=True)


if __name__ == "__main__":
    main(sys.argv[1:])
