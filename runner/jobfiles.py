"""The job directory shared by the worker (writes it) and the sandboxed harness (reads it):
the job's files by name, the harness's config, and the harness's result."""
from __future__ import annotations

import json
import os
import re
import stat
from pathlib import Path

CONFIG = "harness_config.json"
RESULT = "harness_result.json"
MAX_JSON = 64 * 2**20
_SAFE_NAME = re.compile(r"[A-Za-z0-9_][A-Za-z0-9_.-]*")
_SAFE_LABEL = re.compile(r"[A-Za-z0-9_]+")


def kernel_file(version: str) -> str:
    """'kernel' -> 'kernel.py'; 'kernel@r2' -> 'kernel_r2.py'."""
    return "kernel.py" if version == "kernel" else f"kernel_{version.removeprefix('kernel@')}.py"


def check_name(name: str) -> str:
    """A plain file name inside the job directory: no path separators, no dot files."""
    if not isinstance(name, str) or not _SAFE_NAME.fullmatch(name) or name in (CONFIG, RESULT):
        raise ValueError(f"file name {name!r} is not allowed; use plain names like kernel.py")
    return name


def check_label(label: str) -> str:
    """A kernel revision label such as 'r3'."""
    if not isinstance(label, str) or not _SAFE_LABEL.fullmatch(label):
        raise ValueError(f"kernel revision label {label!r} is not allowed; use labels like r3")
    return label


def write_files(jobdir: Path, files: dict[str, str]) -> None:
    jobdir.mkdir(parents=True, exist_ok=True)
    for name, text in files.items():
        (jobdir / check_name(name)).write_text(text)


def write_json(path: Path, data: dict) -> None:
    """Atomic (write then rename), so a reader never sees half a file, even if the writer dies."""
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(json.dumps(data, indent=1))
    os.replace(tmp, path)


def read_json(path: Path, max_bytes: int = MAX_JSON) -> dict | None:
    """The JSON object in path, or None when it is missing, not a plain file (a FIFO, a symlink, a
    device), over max_bytes, or not JSON: whatever is there, reading it neither blocks nor floods."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
    except OSError:
        return None
    try:
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode) or info.st_size > max_bytes:
            return None
        data = os.read(fd, max_bytes + 1)
    finally:
        os.close(fd)
    try:
        value = json.loads(data) if len(data) <= max_bytes else None
    except ValueError:
        return None
    return value if isinstance(value, dict) else None
