"""The bot's core loop: events in, engine, store, effects out.

A person's event is written to the store's inbox first (`receive`, before the
adapter answers the platform), then applied (`process`): run through the engine
under the session's lock, and stored with its effects (the outbox) and the inbox
mark in one transaction, so it is applied exactly once however the bot dies.
`drain` carries the outbox out through the chat adapter, the generator and the
job queue; `poll_jobs` turns runner heartbeats and results into events and
re-queues jobs whose runner died. Nothing lives only in memory: `recover` after a
restart applies what the inbox still holds and finishes what the outbox holds.
"""
from __future__ import annotations

import logging
import secrets
import sqlite3
import threading
import time
import traceback
from collections import defaultdict
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Callable, Protocol

from bot.config import Config
from bot.generators.interface import GenerationError, Generator, GenRequest, failed_verification
from bot.workflow import cards, engine, stages
from bot.workflow.cards import Card
from bot.workflow.drivers import Drivers
from bot.workflow.events import (PERSON_EVENTS, Effect, Event, Generated, GenerationFailed, JobFinished, JobLost,
                                 JobProgress, Start, person_event_from_dict, person_event_to_dict)
from bot.workflow.model import Session
from bot.workflow.store import Store

log = logging.getLogger("kernelbot.service")

MAX_EFFECT_TRIES = 5
INBOX_TELL_AFTER = 3        # failed tries at an inbox event before the person is told it waits


class Chat(Protocol):
    """What an adapter offers the service: post and update cards, send notices."""
    platform: str

    def post(self, s: Session, card: Card, key: str = "", retry: bool = False) -> str:
        """Post a card and return its message id. key: the post's own id, which the platform keeps
        with the message where it can; retry: an earlier try may have posted it without its id being
        recorded, so look for it (and its files) first and post only what is missing."""

    def open_thread(self, item: dict, key: str = "", retry: bool = False) -> tuple[str, str | None] | None:
        """For a start received without a thread: open one on the platform and return (its
        thread id, the platform message id of its root), or tell the person why not and
        return None. key and retry as for post: a retry first looks for the thread it opened."""

    def update(self, s: Session, message_id: str, card: Card) -> None: ...

    def notify(self, s: Session, text: str, user: str | None, key: str = "", retry: bool = False) -> None:
        """A notice in the session's thread, or to `user` only; key and retry as for post."""


class Ownership(Protocol):
    """Which sessions this process carries on, when several processes share a store."""

    def owns(self, session_id: str) -> bool: ...


class PlatformSessions:
    """A chat bot's sessions: every one of its platform."""

    def __init__(self, store: Store, platform: str) -> None:
        self.store, self.platform = store, platform

    def owns(self, session_id: str) -> bool:
        return self.store.platform_of(session_id) == self.platform


class Queue(Protocol):
    def enqueue(self, job: dict) -> None: ...

    def heartbeat(self, job_id: str) -> dict | None: ...

    def peek_result(self, job_id: str) -> dict | None: ...

    def pop_result(self, job_id: str) -> dict | None: ...

    def clear_heartbeat(self, job_id: str) -> None: ...

    def is_pending(self, job_id: str) -> bool: ...

    def runners(self, max_age_s: float) -> list[dict]: ...


class Service:
    def __init__(self, cfg: Config, store: Store, generator: Generator, chat: Chat,
                 queue_for: Callable[[str], Queue], clock: Callable[[], float] = time.time) -> None:
        self.cfg, self.store, self.generator, self.chat = cfg, store, generator, chat
        self.queue_for, self.clock = queue_for, clock
        self._locks: dict[str, threading.RLock] = defaultdict(threading.RLock)
        self._locks_guard = threading.Lock()
        self._pool = ThreadPoolExecutor(max_workers=4, thread_name_prefix="generate")
        self._generating: set[int] = set()        # outbox ids whose generation is in flight
        self._failures: dict[int, int] = defaultdict(int)
        self._inbox_tries: dict[int, int] = defaultdict(int)   # failed tries per inbox event, this process
        self._vanished: dict[str, float] = {}     # queued job id -> when it was first seen gone from the queue
        self.listeners: list[Callable[[Session], None]] = []   # told after every transition
        # Which sessions this process carries on (effects, jobs): its platform's, by default; a
        # terminal command sets bot.workflow.drivers.Drivers, so commands sharing a home keep apart.
        self.sessions: Ownership = PlatformSessions(store, chat.platform)

    # ------------------------------------------------------------------ events

    def start(self, request: str, user: str, channel: str = "console", thread: str = "",
              backend: str | None = None, generator: str | None = None, event_key: str | None = None) -> Session:
        """Open a session for a request and ask for its spec (through the inbox, like any event)."""
        item = start_item(request, user, channel, thread, backend, generator)
        return self.submit(event_key, item)

    def dispatch(self, session_id: str, ev: Event, event_key: str | None = None) -> Session | None:
        """Apply one event. A person's goes through the inbox (event_key: the platform's id for
        it; a redelivery is ignored); the bot's own (generation, runner results) apply at once."""
        if type(ev).__name__ in PERSON_EVENTS:
            return self.submit(event_key, event_item(session_id, ev))
        return self._apply(session_id, ev, None)

    # ------------------------------------------------------------------ what adapters read

    def session(self, session_id: str) -> Session | None:
        return self.store.load(session_id)

    def status_card(self, s: Session) -> Card:
        """A session's status reply: where it stands, and the runners (GPUs and their load) of its
        backend, so a person sees whether anything will take its next job."""
        card = cards.summary_card(s)
        try:
            runners = self.queue_for(s.backend).runners(cards.RUNNER_SEEN_S)
        except Exception as e:         # the queue unreachable: the reply still comes, saying so
            card.fields.append(("runners", f"unknown: the queue did not answer ({type(e).__name__})"))
            return card
        card.fields.append(("runners", cards.runners_text(runners, s.backend)))
        return card

    def listed(self, status: str | None = None, channel: str | None = None,
               platform: str | None = None) -> list[Session]:
        """Sessions, oldest first, narrowed by status, channel and platform where given."""
        return list(self.store.sessions(self.store.session_ids(status=status, channel=channel, platform=platform)))

    def drive(self, out_dir: str = "") -> Drivers:
        """A terminal command carries on the console sessions it drives (exporting into out_dir),
        and any a dead command left, instead of every console session in the store."""
        self.sessions = Drivers(self.store, out_dir)
        return self.sessions

    # ------------------------------------------------------------------ the inbox

    def receive(self, event_key: str | None, item: dict) -> int | None:
        """Write a person's event to the inbox: call it before answering the platform. Returns
        its inbox id, or None for a redelivery of one received before."""
        return self.store.receive(self.chat.platform, event_key or f"local:{secrets.token_hex(8)}", item)

    def submit(self, event_key: str | None, item: dict) -> Session | None:
        """receive then process, where nothing waits on an answer in between."""
        inbox_id = self.receive(event_key, item)
        if inbox_id is None:
            return self.store.load(item["session"]) if item.get("session") else None
        return self.process(inbox_id)

    def inbox_done(self, inbox_id: int, outcome: str = "") -> None:
        """An inbox event the adapter could not carry further (the platform refused its thread)."""
        self.store.inbox_done(inbox_id, outcome)

    def note_opened(self, inbox_id: int, item: dict) -> None:
        """Record in the inbox what the adapter made before processing (the thread it opened)."""
        self.store.update_inbox_item(inbox_id, item)

    def process_acked(self, inbox_id: int) -> "Session | None | Kept":
        """process, for an adapter that has answered the platform already: a failed try (logged and
        counted by process) stays in the inbox for the recovery pass instead of raising into the
        platform's library, which would answer or log it as a failed request; KEPT says so."""
        try:
            return self.process(inbox_id)
        except Exception:
            return KEPT

    def process(self, inbox_id: int) -> Session | None:
        """Apply an inbox event exactly once; the session it changed (None when it has none)."""
        found = self.store.inbox_item(inbox_id)
        if found is None:
            return None
        item, outcome = found
        if outcome is not None:                     # applied already (a redelivery, or recovery's twin)
            return self.store.load(outcome) if outcome else None
        try:
            if item["op"] == "start":
                return self._open(inbox_id, item)
            return self._apply(item["session"], person_event_from_dict(item["event"]), inbox_id)
        except Exception as e:                      # the store or the chat failed: retried by recover()
            self._inbox_failed(inbox_id, item, e)
            raise

    def _inbox_failed(self, inbox_id: int, item: dict, error: Exception) -> None:
        """Count a failed try (in memory: the store may be what fails); the person is told once, at
        the INBOX_TELL_AFTER-th, that the event waits and why."""
        log.warning("inbox event %s not applied yet (%s); retried on the next recovery pass", inbox_id, error)
        self._inbox_tries[inbox_id] += 1
        try:
            self.store.inbox_failed(inbox_id, str(error))
        except Exception as e:                      # the store refuses this too
            log.warning("could not record the failed try at inbox event %s: %s", inbox_id, e)
        s = self.store.load(item["session"]) if item.get("session") else None
        if self._inbox_tries[inbox_id] == INBOX_TELL_AFTER and s is not None:
            try:
                self.chat.notify(s, f"kernelbot could not save your last action yet ({store_problem(error)}); "
                                    "it is kept and retried, nothing you did is lost.", item["event"].get("user"))
            except Exception as e:
                log.warning("could not tell session %s its event waits: %s", s.id, e)

    def _open(self, inbox_id: int, item: dict) -> Session | None:
        # One opener at a time per event: a recovery pass racing the first delivery must not open a
        # second thread, so the item is re-read under the lock before the platform is asked.
        with self._lock(f"inbox:{inbox_id}"):
            item, outcome = self.store.inbox_item(inbox_id)
            if outcome is not None:
                return self.process(inbox_id)
            if item.get("thread") is None:          # the adapter opens the thread on its platform first
                item = self._open_thread(inbox_id, item)
                if item is None:
                    return None
            s = Session(id=self._new_id(), request=item["request"], requester=item["user"],
                        platform=self.chat.platform, channel=item["channel"], thread=item["thread"],
                        backend=item.get("backend") or self.cfg.backend,
                        generator=item.get("generator") or self.generator.name, created_at=self.clock())
            effects = engine.handle(s, Start(item["request"], item["user"]), self.clock(), self.cfg.policy)
            self.sessions.owns(s.id)                # this process makes it, so it carries it on
            self.store.save(s, effects, inbox_id, root=item.get("root"))
        self.drain(s.id)
        self._tell_listeners(s)
        return s

    def _open_thread(self, inbox_id: int, item: dict) -> dict | None:
        """The item with the thread the adapter opened for it (None when it told the person why not)."""
        retry = bool(item.get("opening"))           # an earlier try may have opened it, unrecorded
        if not retry:
            item = {**item, "opening": True}
            self.store.update_inbox_item(inbox_id, item)
        opened = self.chat.open_thread(item, f"in{inbox_id}", retry)
        if opened is None:
            self.store.inbox_done(inbox_id, "")
            return None
        item = {**item, "thread": opened[0], "root": opened[1]}
        self.store.update_inbox_item(inbox_id, item)
        return item

    def _apply(self, session_id: str, ev: Event, inbox_id: int | None) -> Session | None:
        with self._lock(session_id):
            if inbox_id is not None and self.store.inbox_item(inbox_id)[1] is not None:
                return self.store.load(session_id)
            s = self.store.load(session_id)
            if s is None:
                if inbox_id is not None:
                    self.store.inbox_done(inbox_id, "")
                return None
            effects = engine.handle(s, ev, self.clock(), self.cfg.policy)
            self.store.save(s, effects, inbox_id)
            self.drain(session_id)
        self._tell_listeners(s)
        return s

    def _tell_listeners(self, s: Session) -> None:
        for listener in self.listeners:
            listener(s)

    def _lock(self, session_id: str) -> threading.RLock:
        with self._locks_guard:
            return self._locks[session_id]

    def _new_id(self) -> str:
        while True:
            sid = "k" + secrets.token_hex(3)
            if self.store.load(sid) is None:
                return sid

    # ------------------------------------------------------------------ effects

    def recover(self) -> None:
        """After a restart (and now and then): apply every inbox event received but not yet
        applied, then carry out every effect stored but not yet done."""
        for inbox_id in self.store.pending_inbox(self.chat.platform):
            item = (self.store.inbox_item(inbox_id) or ({}, None))[0]
            if item.get("session") and not self.sessions.owns(item["session"]):
                continue
            try:
                self.process(inbox_id)
            except Exception:                       # logged and counted by process; the next pass retries
                pass
        for sid in {sid for _, sid, _ in self.store.pending_effects()}:
            self.drain(sid)

    def drain(self, session_id: str) -> None:
        if not self.sessions.owns(session_id):      # another process carries it on
            return
        with self._lock(session_id):
            for effect_id, sid, effect in self.store.pending_effects(session_id):
                if effect_id in self._generating:
                    continue
                try:
                    self._execute(effect_id, sid, effect)
                except sqlite3.OperationalError as e:   # the store is locked or full: nothing failed, kept
                    log.warning("effect %s for %s waits for the store (%s); retried on the next pass",
                                effect.type, sid, store_problem(e))
                    break
                except Exception as e:             # an adapter or queue fault: retry on the next tick
                    self._failed_effect(effect_id, sid, effect, e)
                    break                          # keep effects in order

    def _failed_effect(self, effect_id: int, sid: str, effect: Effect, error: Exception) -> None:
        """Count a failed try; after MAX_EFFECT_TRIES the effect is dropped (where the store lets it be)."""
        self._failures[effect_id] += 1
        log.warning("effect %s for %s failed (%s/%s): %s", effect.type, sid, self._failures[effect_id],
                    MAX_EFFECT_TRIES, error)
        if self._failures[effect_id] < MAX_EFFECT_TRIES:
            return
        log.error("dropping effect %s for %s after %s tries", effect.to_dict(), sid, MAX_EFFECT_TRIES)
        try:
            self.store.effect_done(effect_id)
        except sqlite3.OperationalError as e:
            log.warning("effect %s for %s not dropped yet (%s); tried again on the next pass", effect.type, sid,
                        store_problem(e))

    def _execute(self, effect_id: int, sid: str, e: Effect) -> None:
        s = self.store.load(sid)
        if e.type == "generate":
            self._generating.add(effect_id)
            self._pool.submit(self._generate, effect_id, sid, e)
            return
        if e.type in POSTS:
            POSTS[e.type](self, s, e, self._post_key(effect_id))
        else:
            {"update_revision": self._update_revision, "enqueue": self._enqueue}[e.type](s, e)
        self.store.effect_done(effect_id)

    def _post_key(self, effect_id: int) -> PostKey:
        """The post's key, and whether an earlier try may have posted it without its id being recorded."""
        key, tries = self.store.effect_attempt(effect_id)
        return PostKey(key, tries > 0)

    def _post(self, s: Session, card: Card, key: "PostKey") -> str:
        return self.chat.post(s, card, key.key, key.retry)

    def _post_revision(self, s: Session, e: Effect, key: "PostKey") -> None:
        card = cards.revision_card(s, s.revision(e.stage, e.rev))
        mid = self.store.message_id(self.chat.platform, s.id, "revision", e.stage, e.rev)
        if mid:                                    # posted before a restart: refresh instead
            self.chat.update(s, mid, card)
            return
        mid = self._post(s, card, key)
        self.store.map_message(self.chat.platform, mid, s.id, "revision", e.stage, e.rev)

    def _update_revision(self, s: Session, e: Effect) -> None:
        mid = self.store.message_id(self.chat.platform, s.id, "revision", e.stage, e.rev)
        if mid:
            self.chat.update(s, mid, cards.revision_card(s, s.revision(e.stage, e.rev)))

    def _post_result(self, s: Session, e: Effect, key: "PostKey") -> None:
        if self.store.message_id(self.chat.platform, s.id, "result", job_id=e.job_id):
            return
        job = s.job(e.job_id)
        mid = self._post(s, cards.result_card(s, job), key)
        self.store.map_message(self.chat.platform, mid, s.id, "result", job.stage, job.rev, job.id)

    def _notice(self, s: Session, e: Effect, key: "PostKey") -> None:
        self.chat.notify(s, e.text, e.user, key.key, key.retry)

    def _post_summary(self, s: Session, e: Effect, key: "PostKey") -> None:
        mid = self._post(s, cards.summary_card(s), key)
        self.store.map_message(self.chat.platform, mid, s.id, "summary")

    def _enqueue(self, s: Session, e: Effect) -> None:
        job = s.job(e.job_id)
        if job.open:
            self.queue_for(job.backend).enqueue(job_payload(s, job, self.cfg.job_timeout_s))

    def _generate(self, effect_id: int, sid: str, e: Effect) -> None:
        try:
            s = self.store.load(sid)
            ev = self._run_generator(s, e)
            self.dispatch(sid, ev)
            self.store.effect_done(effect_id)
        finally:
            self._generating.discard(effect_id)
        self.drain(sid)

    def _run_generator(self, s: Session, e: Effect) -> Generated | GenerationFailed:
        if not s.generating or s.gen_token != e.token:
            return GenerationFailed(e.stage, e.token, "stale generation request")   # the engine drops it
        req = gen_request(s)
        req.progress = lambda line: self._progress(s, line)
        try:
            art = self.generator.generate(req)
        except GenerationError as err:
            return GenerationFailed(e.stage, e.token, str(err), err.usage, e.text)
        except Exception as err:                       # a generator bug must not kill the session
            log.error("generator crashed:\n%s", traceback.format_exc())
            return GenerationFailed(e.stage, e.token, f"the generator failed unexpectedly ({err!r})", {}, e.text)
        return Generated(e.stage, e.token, art.content, f"generator:{art.generator or self.generator.name}",
                         art.summary, art.notes, art.usage,
                         [{"content": a.content, "verdict": a.verdict} for a in art.attempts], e.text)

    def _progress(self, s: Session, line: str) -> None:
        """A line from a generation in flight; a chat fault loses the line, not the generation."""
        try:
            self.chat.notify(s, line, None)
        except Exception as e:
            log.warning("progress line for %s not shown: %s", s.id, e)

    # ------------------------------------------------------------------ runner

    def poll_jobs(self) -> None:
        """Results and heartbeats from the queue into the engine; re-queue dead runners' jobs."""
        for sid, job_id in self.store.open_jobs():
            if not self.sessions.owns(sid):
                continue
            job = self.store.load(sid).job(job_id)
            queue = self.queue_for(job.backend)
            result = queue.peek_result(job_id)
            if result is not None:
                self.dispatch(sid, JobFinished(job_id, result))
                queue.pop_result(job_id)
                queue.clear_heartbeat(job_id)
                continue
            hb = queue.heartbeat(job_id)
            if hb and hb.get("attempt", job.attempt) != job.attempt:
                hb = None                                   # a dead attempt's beat
            if hb and hb.get("state") == "abandoned":
                self.dispatch(sid, JobLost(job_id, f"the runner on {hb.get('host') or 'its host'} stopped mid-job"))
                queue.clear_heartbeat(job_id)
                continue
            if hb:
                self.dispatch(sid, JobProgress(job_id, hb.get("state", "running"), hb.get("detail", ""),
                                               hb.get("host", ""), hb.get("device", ""), hb.get("ts")))
            self._check_lost(sid, job_id, queue)

    def _check_lost(self, sid: str, job_id: str, queue: Queue) -> None:
        """A running job whose heartbeat stopped, or a queued job that left the queue without its
        runner ever reporting (killed right after taking it), is lost."""
        job = self.store.load(sid).job(job_id)
        now = self.clock()
        if job.status == "running" and job.hb_seen_at and now - job.hb_seen_at > self.cfg.stale_s:
            self.dispatch(sid, JobLost(job_id, f"no heartbeat from {job.host or 'the runner'} "
                                               f"for {now - job.hb_seen_at:.0f}s"))
        elif job.status == "queued" and not queue.is_pending(job_id):
            gone_since = self._vanished.setdefault(job_id, now)
            if now - gone_since > self.cfg.stale_s:
                self._vanished.pop(job_id)
                self.dispatch(sid, JobLost(job_id, "a runner took the job but never reported"))
        else:
            self._vanished.pop(job_id, None)

    def shutdown(self) -> None:
        self._pool.shutdown(wait=False, cancel_futures=True)


class Kept:
    """An inbox event whose try failed after its ack: kept, and applied by a later recovery pass."""


KEPT = Kept()


@dataclass(frozen=True)
class PostKey:
    key: str            # the post's own id on the platform (Slack message metadata, Discord's nonce)
    retry: bool         # an earlier try may have posted it


POSTS = {"post_revision": Service._post_revision, "post_result": Service._post_result,
         "post_summary": Service._post_summary, "notice": Service._notice}


def start_item(request: str, user: str, channel: str, thread: str | None, backend: str | None = None,
               generator: str | None = None, **platform) -> dict:
    """The inbox item of a new request. thread None: the adapter opens it (Chat.open_thread);
    platform: what the adapter needs to do that (the text of the thread's first message, say)."""
    return {"op": "start", "request": request, "user": user, "channel": channel, "thread": thread,
            "backend": backend, "generator": generator, **platform}


def event_item(session_id: str, ev: Event) -> dict:
    return {"op": "event", "session": session_id, "event": person_event_to_dict(ev)}


def store_problem(error: Exception) -> str:
    """What a person is told when the store refused a write."""
    text = str(error)
    if "disk is full" in text or "No space left" in text:
        return "cannot save: disk full on the bot host"
    if "locked" in text:
        return "cannot save: the bot's store is locked by another process"
    return f"cannot save: {text[:200]}"


def gen_request(s: Session) -> GenRequest:
    """What the generator needs for the session's current stage."""
    earlier = stages.STAGES[: stages.STAGES.index(s.stage)]
    approved = {st: rev.content for st in earlier if (rev := s.approved(st))}
    latest = s.latest(s.stage)
    return GenRequest(stage=s.stage, request=s.request, approved=approved,
                      feedback=list(s.feedback.get(s.stage, [])), previous=latest.content if latest else None,
                      failure=s.failure, attempt=s.attempt, backend=s.backend, generator=s.generator)


def job_payload(s: Session, job, timeout_s: float) -> dict:
    """The plain-JSON job a runner executes: the approved files by name."""
    files = {stages.FILENAMES[st]: rev.content for st in ("spec", "reference", "kernel")
             if (rev := s.approved(st))}
    files[stages.FILENAMES[job.stage]] = s.revision(job.stage, job.rev).content
    payload = {"job_id": job.id, "session_id": s.id, "kind": job.kind, "backend": job.backend,
               "attempt": job.attempt, "timeout_s": timeout_s, "files": files}
    if job.kind == "benchmark":
        payload["kernels"] = kernel_versions(s)
    return payload


def kernel_versions(s: Session) -> dict[str, str]:
    """Every distinct kernel revision other than the approved one, by label 'rN'; not the attempts
    a generator discarded, nor a revision posted as failing its verification (neither is run)."""
    approved = s.approved("kernel")
    seen = {approved.sha} if approved else set()
    out = {}
    for rev in s.revisions_of("kernel"):
        if rev.sha not in seen and rev.origin != "attempt" and not failed_verification(rev.summary):
            seen.add(rev.sha)
            out[f"r{rev.rev}"] = rev.content
    return out
