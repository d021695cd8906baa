"""Wiring: a Service from a Config and a chat adapter, plus the local runner the
embedded default starts when none is alive."""
from __future__ import annotations

import logging
import os
import subprocess
import sys
import threading
import time
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Callable, Iterator

from bot.config import Config
from bot.generators.interface import Generator
from bot.workflow.messages import Messages
from bot.workflow.service import Chat, Service
from bot.workflow.store import Store
from runner import users as runner_users

if TYPE_CHECKING:
    from runner.queue import JobQueue

log = logging.getLogger("kernelbot.app")

RUNNER_ALIVE_S = 15.0
POLL_S, RECOVER_S = 0.5, 30.0


def make_generator(cfg: Config, queue_for: Callable[[str], JobQueue] | None = None) -> Generator:
    """The offline generator, or with an LLM endpoint configured, offline and LLM behind the session's
    choice (hybrid by default). queue_for: the runners' queues, for the LLM's verify-and-repair loop."""
    from bot.generators.hybrid import MODES, HybridGenerator
    from bot.generators.offline import OfflineGenerator
    if cfg.generator not in MODES:
        raise SystemExit(f"generator {cfg.generator!r} (KERNELBOT_GENERATOR or --generator) is not one of "
                         f"{', '.join(MODES)}")
    if cfg.llm is None:
        if cfg.generator != "offline":
            raise SystemExit(f"the {cfg.generator} generator needs an OpenAI-compatible endpoint: set "
                             "KERNELBOT_LLM_BASE_URL and KERNELBOT_LLM_MODEL (see README, LLM generation)")
        return OfflineGenerator()
    from bot.generators.llm import LLMGenerator
    from bot.generators.llm_client import LLMClient
    from bot.generators.verifier import QueueVerifier
    try:
        client = LLMClient(cfg.llm)
    except ImportError:
        raise SystemExit("KERNELBOT_LLM_BASE_URL is set but the openai package is not installed: "
                         "pip install 'kernelbot[llm]'") from None
    verify = QueueVerifier(queue_for, cfg.llm.verify_timeout_s, RUNNER_ALIVE_S) if queue_for else None
    return HybridGenerator(OfflineGenerator(), LLMGenerator(client, verify, cfg.llm.rounds), cfg.generator)


def messages(cfg: Config, platform: str) -> Messages:
    """The platform's message records in the configured store, for its chat adapter."""
    return Messages(Store(cfg.db_path), platform)


def make_service(cfg: Config, chat: Chat) -> Service:
    from runner.queue import JobQueue
    queues: dict[str, JobQueue] = {}
    lock = threading.Lock()

    def queue_for(backend: str) -> JobQueue:
        with lock:
            if backend not in queues:
                queues[backend] = JobQueue(cfg.queue_url, backend)
            return queues[backend]

    store = Store(cfg.db_path)
    return Service(cfg, store, make_generator(cfg, queue_for), chat, queue_for)


class LocalRunner:
    """A runner process a command started because none was alive. Commands sharing a home share
    it: each that uses it is one of its users (runner.users), and it stops once none is alive."""

    def __init__(self, cfg: Config, backend: str) -> None:
        self.cfg, self.backend = cfg, backend
        self.proc: subprocess.Popen | None = None
        self.log_path = cfg.home / f"runner-{backend}.log"
        self.users = cfg.home / f"runner-{backend}.users"
        self._joined = False

    def ensure(self, svc: Service, out=sys.stdout) -> None:
        if not self._joined:
            runner_users.join(self.users)
            self._joined = True
        queue = svc.queue_for(self.backend)
        if queue.runner_alive(RUNNER_ALIVE_S) or (self.proc and self.proc.poll() is None):
            return
        self._check_runner_deps()
        self.log_path.parent.mkdir(parents=True, exist_ok=True)
        out.write(f"No {self.backend} runner is alive: starting one (log: {self.log_path})\n")
        from runner import sandbox  # the runner's own probe: bubblewrap, or why jobs will be refused
        isolation = sandbox.isolation()
        out.write(f"  generated code runs under {isolation.tool} (docs/INTEGRITY.md)\n" if isolation.available
                  else f"  {isolation.summary()}\n")
        env = {**os.environ, "KERNELBOT_HEARTBEAT_S": str(self.cfg.heartbeat_s)}
        with open(self.log_path, "ab") as log:
            # A session of its own, so a Ctrl-C meant for this command does not stop a runner
            # another command uses; it stops once no user is alive, however they ended.
            self.proc = subprocess.Popen(
                [sys.executable, "-m", "runner.worker", "--backend", self.backend, "--queue", self.cfg.queue_url,
                 "--users", str(self.users)],
                stdout=log, stderr=subprocess.STDOUT, env=env, cwd=str(Path(__file__).resolve().parent.parent),
                start_new_session=True)
        deadline = time.time() + 120
        while not queue.runner_alive(RUNNER_ALIVE_S):
            if self.proc.poll() is not None:
                raise SystemExit(f"the local runner exited with code {self.proc.returncode}; see {self.log_path}")
            if time.time() > deadline:
                raise SystemExit(f"the local runner did not report in within 120 s; see {self.log_path}")
            time.sleep(0.2)

    @staticmethod
    def _check_runner_deps() -> None:
        import importlib.util
        missing = [m for m in ("torch", "triton", "matplotlib") if importlib.util.find_spec(m) is None]
        if missing:
            raise SystemExit(f"no runner is alive and this host cannot start one (missing {', '.join(missing)}): "
                             "install kernelbot[runner], or start `kernelbot runner --backend NAME` on a GPU host")

    def stop(self) -> None:
        """This command is done with the runner: stop it now if it is ours and nobody else uses it."""
        runner_users.leave(self.users)
        if self.proc and self.proc.poll() is None and not runner_users.alive(self.users):
            self.proc.terminate()
            try:
                self.proc.wait(15)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()


def keep_polling(svc: Service, stop: threading.Event, runner: LocalRunner | None = None) -> None:
    """Runner results and heartbeats into the chat; now and then retry effects the chat refused.
    With a local runner: start it again when a job waits and no runner is alive any more."""
    last_recover = time.monotonic()
    while not stop.wait(POLL_S):
        try:
            svc.poll_jobs()
            if runner and svc.store.open_jobs():
                runner.ensure(svc)
            if time.monotonic() - last_recover > RECOVER_S:
                svc.recover()
                last_recover = time.monotonic()
        except (Exception, SystemExit):                 # keep polling; the store still holds everything
            log.exception("polling the runner failed")


@contextmanager
def serving(cfg: Config, svc: Service) -> Iterator[None]:
    """Around a chat adapter's main loop: a local runner when none is alive and this host can run
    one, the outbox finished, runner results polled into the chat; all stopped on the way out."""
    runner: LocalRunner | None = LocalRunner(cfg, cfg.backend)
    try:
        runner.ensure(svc)
    except SystemExit as e:                             # a bot-only host: jobs wait for a remote runner
        log.warning("%s; jobs wait in the queue until a %s runner starts", e, cfg.backend)
        runner = None
    svc.recover()
    stop = threading.Event()
    poller = threading.Thread(target=keep_polling, args=(svc, stop, runner), daemon=True, name="poll")
    poller.start()
    try:
        yield
    finally:
        stop.set()
        poller.join(10)                                 # let a poll in flight finish before the pool stops
        svc.shutdown()
        if runner:
            runner.stop()
