"""Per-job work directories, named for the process that made them, so that a runner starting
up removes what a killed runner (or its judge, or a killed `kernelbot verify`) left behind, and
never what a live process is using."""
from __future__ import annotations

import os
import re
import shutil
import tempfile
from pathlib import Path

JOB_PREFIX = "kernelbot-job-"
STAGING_PREFIX = "kernelbot-sandbox-"
_OWNER = re.compile(rf"^(?:{JOB_PREFIX}|{STAGING_PREFIX})(\d+)-")


def job_dir(job_id: str) -> tempfile.TemporaryDirectory:
    """The job's directory, removed when the job ends (and by sweep() if this process dies first)."""
    safe = re.sub(r"[^A-Za-z0-9_.]", "_", job_id)[:40]
    return tempfile.TemporaryDirectory(prefix=f"{JOB_PREFIX}{os.getpid()}-{safe}-")


def staging_dir() -> str:
    """A directory for the sandbox's staged binds, owned by this process (see sweep)."""
    return tempfile.mkdtemp(prefix=f"{STAGING_PREFIX}{os.getpid()}-", dir="/tmp")


def remove_staging(path: str, entries: list[str]) -> None:
    """Each entry alone, never recursively (were a bind seen there, a recursive delete would
    empty what it shows), then the directory."""
    for entry in entries:
        try:
            os.rmdir(entry) if os.path.isdir(entry) else os.unlink(entry)
        except OSError:
            pass
    try:
        os.rmdir(path)
    except OSError:
        pass


def sweep(roots: tuple[str, ...] | None = None) -> list[str]:
    """Remove the job and staging directories whose owning process is gone; the paths removed."""
    removed = []
    for root in roots or tuple(dict.fromkeys((tempfile.gettempdir(), "/tmp"))):
        for entry in sorted(Path(root).glob("kernelbot-*")):
            owner = _OWNER.match(entry.name)
            if owner is None or process_alive(int(owner.group(1))) or not entry.is_dir() or entry.is_symlink():
                continue
            if entry.name.startswith(JOB_PREFIX):
                shutil.rmtree(entry, ignore_errors=True)
            else:
                remove_staging(str(entry), [str(p) for p in entry.iterdir()])
            removed.append(str(entry))
    return removed


def process_alive(pid: int) -> bool:
    """Whether pid is a live process on this host. Any process counts (a command such as `kernelbot
    verify` runs jobs in its own process): a pid reused by another program only delays the sweep."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True
