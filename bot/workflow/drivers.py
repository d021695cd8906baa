"""Which terminal process drives a console session. Terminal commands (`kernelbot run`, `kernelbot
chat`) sharing one KERNELBOT_HOME share one store; each carries out the effects and polls the jobs
of its own sessions only, so none prints another's cards or makes revisions for it. A session
whose driver is gone (killed, closed) is taken over by the next command that meets it."""
from __future__ import annotations

import logging
import os
import socket
import threading
import time
from pathlib import Path

from bot.workflow.store import Store
from runner import workdirs

log = logging.getLogger("kernelbot.drivers")

HOST = socket.gethostname()
DRIVER_EVERY_S = 5.0        # how often a command refreshes the records of the sessions it drives
DRIVER_FRESH_S = 30.0       # a record older than this belongs to a command that is gone


def driver_alive(record: dict | None) -> bool:
    """Whether the command of a driver record still drives its session."""
    if record is None or time.time() - record["seen_at"] > DRIVER_FRESH_S:
        return False
    return record["host"] != HOST or workdirs.process_alive(record["pid"])


class Drivers:
    """This process's claim on console sessions (the service's Ownership), kept fresh by a thread
    of its own while the command waits on a person or a runner."""

    def __init__(self, store: Store, out_dir: str = "") -> None:
        # absolute: `kernelbot status` names it in its --resume hint, from wherever it is run
        self.store, self.out_dir, self.pid = store, str(Path(out_dir).resolve()) if out_dir else "", os.getpid()
        self.mine: set[str] = set()
        self._stop = threading.Event()
        threading.Thread(target=self._keep_fresh, daemon=True, name="drivers").start()

    def stop(self) -> None:
        self._stop.set()

    def record(self, session_id: str) -> dict | None:
        """Who drives the session, as last recorded: pid, host, out_dir, seen_at."""
        return self.store.driver(session_id)

    def left_in(self) -> list[dict]:
        """The driver records of sessions exported into this command's out_dir, newest first."""
        return self.store.driven_into(self.out_dir)

    def take(self, session_id: str) -> None:
        """Drive this session from now on (one this command started or resumes)."""
        self.store.drive(session_id, self.pid, HOST, self.out_dir)
        self.mine.add(session_id)

    def owns(self, session_id: str) -> bool:
        """Whether this process carries the session on: it drives it, or takes it over because
        nobody does (a console session whose command died)."""
        if session_id in self.mine:
            return True
        if self.store.platform_of(session_id) not in ("console", None):      # None: one being made here
            return False
        if self._driven_by_another(self.store.driver(session_id)):
            return False                            # read first: no write lock on every poll of it
        if self._claim(session_id):
            self.mine.add(session_id)
            return True
        return False

    def _claim(self, session_id: str) -> bool:
        return self.store.claim(session_id, self.pid, HOST, self.out_dir, self._driven_by_another)

    def _driven_by_another(self, record: dict | None) -> bool:
        """Whether a driver record names another process that still drives its session."""
        return record is not None and (record["pid"], record["host"]) != (self.pid, HOST) and driver_alive(record)

    def _keep_fresh(self) -> None:
        while not self._stop.wait(DRIVER_EVERY_S):
            try:
                self.refresh()
            except Exception as e:                  # a locked or full store: the next round retries
                log.warning("could not refresh this command's driver records: %s", e)

    def refresh(self) -> None:
        """Renew this process's records; forget sessions that ended or were taken over meanwhile."""
        for sid in list(self.mine):
            s = self.store.load(sid)
            if s is None or not s.active or not self._claim(sid):
                self.mine.discard(sid)
