"""Opt-in autotuning for an exported kernel, on shapes its TUNED table does not hold: the first call
on a new (shapes, dtypes) key times every config of the kernel's CONFIGS on the call's own inputs,
keeps the fastest whose output matches the default config's, and stores it in a JSON file on disk,
so later calls and later processes launch with it at once (the way triton.autotune's cache and
FlagGems' tuning files work). Shipped beside kernel.py in the export as autotune.py:

    import kernel, autotune
    op = autotune.autotuned(kernel)          # or autotuned(kernel, cache_dir="/path")
    y = op(x, w)                             # tunes once per new shape and dtype, then reuses

The cache file is named for the kernel's source, so an edited kernel never reads another's choices.
kernel.py itself stays free of file and clock access: the runner's judge runs it sandboxed and
times it itself; this wrapper is for the team that imports the exported kernel.
"""
from __future__ import annotations

import hashlib
import inspect
import json
import os
import tempfile
import time
import warnings
from pathlib import Path
from types import ModuleType
from typing import Callable

DEFAULT_DIR = Path(os.environ.get("KERNELBOT_AUTOTUNE_DIR", Path.home() / ".cache" / "kernelbot"))


def autotuned(kernel: ModuleType, cache_dir: str | os.PathLike | None = None,
              timer: Callable[[Callable[[], object]], float] | None = None) -> Callable:
    """kernel's launcher (the function named for its spec), autotuned per new input key; timer(fn)
    gives fn's time (default: triton.testing.do_bench on a GPU, the wall clock of a few calls
    elsewhere)."""
    launcher = getattr(kernel, _launcher_name(kernel))
    path = Path(cache_dir or DEFAULT_DIR) / f"{launcher.__name__}-{_digest(kernel)}.json"
    chosen = _read(path)
    clock = timer or _time

    def call(*tensors):
        key = kernel.tuning_key(tensors)
        if key in kernel.TUNED:                       # the benchmark stage measured this case
            return launcher(*tensors)
        if key not in chosen:
            chosen[key] = _fastest(launcher, kernel.CONFIGS, tensors, clock)
            _write(path, key, chosen[key])
        return launcher(*tensors, config=chosen[key])

    call.__name__, call.__doc__ = launcher.__name__, launcher.__doc__
    return call


def _launcher_name(kernel: ModuleType) -> str:
    # The one public function defined in kernel.py that takes config= (the launcher).
    names = [n for n, f in vars(kernel).items() if inspect.isfunction(f) and not n.startswith("_")
             and f.__module__ == kernel.__name__ and "config" in inspect.signature(f).parameters]
    if len(names) != 1:
        raise ValueError(f"{kernel.__name__} has launchers {names}; expected one function taking config=")
    return names[0]


def _digest(kernel: ModuleType) -> str:
    return hashlib.sha256(inspect.getsource(kernel).encode()).hexdigest()[:16]


def _fastest(launcher: Callable, configs: list[dict], tensors: tuple, clock: Callable) -> dict:
    """The fastest config whose output matches the default's (a config the shape cannot take, or
    that computes otherwise, is left out)."""
    import torch
    want = launcher(*tensors)
    timed = []
    for config in configs:
        try:
            got = launcher(*tensors, config=config)
        except Exception:               # a config this shape cannot take (the launcher says why)
            continue
        if torch.allclose(got.double(), want.double(), rtol=1e-3, atol=1e-3, equal_nan=True):
            timed.append((clock(lambda c=config: launcher(*tensors, config=c)), config))
    if not timed:
        raise RuntimeError("no config of CONFIGS ran and matched the default's output on these inputs")
    return min(timed, key=lambda t: t[0])[1]


def _time(fn: Callable[[], object]) -> float:
    import torch
    if torch.cuda.is_available():
        from triton.testing import do_bench
        return do_bench(fn)
    fn()
    start = time.perf_counter()
    for _ in range(3):
        fn()
    return (time.perf_counter() - start) / 3


def _read(path: Path) -> dict[str, dict]:
    try:
        data = json.loads(path.read_text())
    except FileNotFoundError:
        return {}
    except (OSError, ValueError) as e:
        warnings.warn(f"autotune cache {path} unreadable ({e}); tuning again")
        return {}
    return {k: v for k, v in data.items() if isinstance(k, str) and isinstance(v, dict)} if isinstance(data, dict) else {}


def _write(path: Path, key: str, config: dict) -> None:
    """Add key's config to the file, merged with what other processes wrote, replaced atomically."""
    path.parent.mkdir(parents=True, exist_ok=True)
    data = {**_read(path), key: config}
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=path.name, suffix=".tmp")
    with os.fdopen(fd, "w") as f:
        json.dump(data, f, indent=1, sort_keys=True)
    os.replace(tmp, path)
