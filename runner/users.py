"""The commands that share a runner one of them started on this host. Each command that uses it
leaves a file named by its pid in the runner's users directory; the runner serves while any of
them is alive (`--users DIR`), so no command stops a runner another still needs, and a runner
every user of which died (however it died) stops by itself."""
from __future__ import annotations

import os
from pathlib import Path

from runner.workdirs import process_alive


def join(users: Path) -> None:
    users.mkdir(parents=True, exist_ok=True)
    (users / str(os.getpid())).touch()


def leave(users: Path) -> None:
    (users / str(os.getpid())).unlink(missing_ok=True)


def alive(users: Path) -> list[int]:
    """The pids of the live users; files of dead ones are removed on the way."""
    pids = []
    for entry in users.glob("*") if users.is_dir() else []:
        if not entry.name.isdigit():
            continue
        if process_alive(int(entry.name)):
            pids.append(int(entry.name))
        else:
            entry.unlink(missing_ok=True)
    return pids
