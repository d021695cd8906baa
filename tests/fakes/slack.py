"""Slack on loopback, for tests, speaking Slack's wire formats so the real slack_sdk
and slack-bolt clients run against it.

Slack's side of the API: the Web API under /api/METHOD (JSON or form bodies, bearer
tokens; every call recorded), the file upload URLs files.getUploadURLExternal hands
out, response_url endpoints, and a Socket Mode websocket (apps.connections.open
returns a ws://127.0.0.1 URL; the socket sends hello, then envelopes, and waits for
acks). Slack's side towards the app: signed HTTP requests into /slack/events, or
envelopes over the socket, with the payloads Slack sends for slash commands,
events, buttons and modal submissions.
"""
from __future__ import annotations

import asyncio
import hashlib
import hmac
import itertools
import json
import threading
import time
import urllib.error
import urllib.parse
import urllib.request
from dataclasses import dataclass
from typing import Any, Callable

from aiohttp import WSMsgType, web
from fakes.loopback import LoopbackServer

TEAM, APP_ID, BOT_USER, BOT_ID = "T0TEAM0001", "A0KBOT0001", "U0KBOT0001", "B0KBOT0001"
_JSON_FIELDS = ("blocks", "view", "files", "attachments", "metadata")


@dataclass
class Call:
    method: str
    args: dict
    token: str


@dataclass
class File:
    id: str
    title: str
    filename: str
    data: bytes
    channel: str
    thread_ts: str | None
    comment: str | None


@dataclass
class Delivery:
    """What the app answered to one request or envelope, and how long it took."""
    status: int
    body: Any
    seconds: float


class FakeSlack(LoopbackServer):
    def __init__(self, channels: tuple[str, ...] = ("C0KERNELS1",)) -> None:
        super().__init__("fake-slack")
        self.channels = set(channels)
        self.calls: list[Call] = []
        self.messages: dict[tuple[str, str], dict] = {}        # (channel, ts) -> message
        self.files: list[File] = []
        self.views: dict[str, dict] = {}
        self.deliveries: list[Delivery] = []
        self._uploads: dict[str, dict] = {}                     # file_id -> {"filename", "length", "data"}
        self._faults: list[tuple[str, int, dict, dict, bool, float]] = []
        self._ids = itertools.count(1)
        self._in_flight = 0                                     # Web API calls not answered yet
        self._changed = threading.Condition()
        self._acks: dict[str, asyncio.Future] = {}
        self._ws: web.WebSocketResponse | None = None
        self.socket_open = threading.Event()
        self.app_url: str | None = None                         # set: deliver over HTTP, else the socket
        self.signing_secret = "fake-signing-secret"

    @property
    def api_url(self) -> str:
        return f"{self.url}/api/"

    def routes(self, app: web.Application) -> None:
        app.router.add_post("/api/{method}", self._api)
        app.router.add_post("/upload/v1/{file_id}", self._upload)
        app.router.add_post("/response/{rid}", self._response_url)
        app.router.add_get("/link/", self._socket)

    # ------------------------------------------------------------------ what the app called

    def calls_to(self, method: str, pred: Callable[[Call], bool] = lambda c: True) -> list[Call]:
        with self._changed:
            return [c for c in self.calls if c.method == method and pred(c)]

    def wait_for(self, method: str, pred: Callable[[Call], bool] = lambda c: True, timeout: float = 10.0,
                 count: int = 1) -> Call:
        """The count-th call to method matching pred, waiting for it to happen."""
        with self._changed:
            ok = self._changed.wait_for(lambda: len(self.calls_to(method, pred)) >= count, timeout)
            assert ok, f"no {count} call(s) to {method} matching; calls so far: {[c.method for c in self.calls]}"
            return self.calls_to(method, pred)[count - 1]

    def find_message(self, pred: Callable[[dict], bool], timeout: float = 10.0) -> dict:
        """The first message in Slack matching pred, waiting for it to be posted."""
        def found() -> dict | None:
            return next((m for m in self.messages.values() if pred(m)), None)
        with self._changed:
            assert self._changed.wait_for(found, timeout), "no such message was posted"
            return found()

    def settle(self, timeout: float = 10.0) -> None:
        """Wait until every Web API call made so far has been answered."""
        with self._changed:
            assert self._changed.wait_for(lambda: self._in_flight == 0, timeout), "Web API calls still in flight"

    def fail(self, method: str, error: str, status: int = 200, retry_after: int | None = None,
             times: int = 1, after_doing_it: bool = False, delay: float = 0.0) -> None:
        """The next `times` calls to method answer with this error (429 + Retry-After for rate limits).
        after_doing_it: the call is carried out first (a message posted), and only its answer is the
        error, as when Slack's response is lost on the way. delay: seconds the call waits on arrival,
        before anything is done (a slow Slack, for races with other calls)."""
        headers = {"Retry-After": str(retry_after)} if retry_after is not None else {}
        self._faults += [(method, status, {"ok": False, "error": error}, headers, after_doing_it, delay)] * times

    def delete_thread(self, channel: str, ts: str) -> None:
        for key, msg in list(self.messages.items()):
            if key == (channel, ts) or (key[0] == channel and msg.get("thread_ts") == ts):
                del self.messages[key]

    # ------------------------------------------------------------------ the Web API

    async def _api(self, request: web.Request) -> web.Response:
        method = request.match_info["method"]
        args = await _body_args(request)
        token = request.headers.get("Authorization", "").removeprefix("Bearer ")
        with self._changed:
            self.calls.append(Call(method, args, token))
            fault = next((f for f in self._faults if f[0] == method), None)
            if fault:
                self._faults.remove(fault)
            self._in_flight += 1
            self._changed.notify_all()
        if fault and fault[5]:
            await asyncio.sleep(fault[5])
        with self._changed:
            self._in_flight -= 1
            if fault:
                if fault[4]:
                    getattr(self, "_" + method.replace(".", "_"))(args, token)
                body, status, headers = fault[2], fault[1], fault[3]
            elif not token:
                body, status, headers = {"ok": False, "error": "not_authed"}, 200, {}
            else:
                handler = getattr(self, "_" + method.replace(".", "_"), None)
                body, status, headers = (handler(args, token) if handler else {"ok": True}), 200, {}
            self._changed.notify_all()
        return web.json_response(body, status=status, headers=headers)

    def _next(self, prefix: str) -> str:
        return f"{prefix}{next(self._ids):08d}"

    def _ts(self) -> str:
        n = next(self._ids)
        return f"{1700000000 + n}.{n:06d}"

    def _auth_test(self, args: dict, token: str) -> dict:
        return {"ok": True, "url": "https://kernels.slack.com/", "team": "kernels", "user": "kernelbot",
                "team_id": TEAM, "user_id": BOT_USER, "bot_id": BOT_ID, "is_enterprise_install": False}

    def _chat_postMessage(self, args: dict, token: str) -> dict:
        channel, thread = args.get("channel"), args.get("thread_ts")
        if channel not in self.channels:
            return {"ok": False, "error": "channel_not_found"}
        if thread and (channel, thread) not in self.messages:
            return {"ok": False, "error": "thread_not_found"}
        extra = {"metadata": args["metadata"]} if args.get("metadata") else {}
        msg = self._add_message(channel, BOT_USER, args.get("text", ""), thread, blocks=args.get("blocks"),
                                bot_id=BOT_ID, **extra)
        return {"ok": True, "channel": channel, "ts": msg["ts"], "message": msg}

    def _conversations_replies(self, args: dict, token: str) -> dict:
        """The thread's messages, oldest first, in pages of `limit`; metadata only when asked for."""
        channel, ts = args.get("channel"), args.get("ts")
        if (channel, ts) not in self.messages:
            return {"ok": False, "error": "thread_not_found"}
        thread = [m for (c, _), m in sorted(self.messages.items(), key=lambda kv: float(kv[0][1]))
                  if c == channel and (m["ts"] == ts or m.get("thread_ts") == ts)]
        start, limit = int(args.get("cursor") or 0), int(args.get("limit") or 1000)
        with_meta = str(args.get("include_all_metadata")).lower() in ("1", "true")
        page = [m if with_meta else {k: v for k, v in m.items() if k != "metadata"}
                for m in thread[start:start + limit]]
        more = start + limit < len(thread)
        return {"ok": True, "messages": page, "has_more": more,
                "response_metadata": {"next_cursor": str(start + limit) if more else ""}}

    def _conversations_history(self, args: dict, token: str) -> dict:
        """The channel's top-level messages, newest first, `limit` of them; metadata only when asked for."""
        channel = args.get("channel")
        if channel not in self.channels:
            return {"ok": False, "error": "channel_not_found"}
        top = [m for (c, _), m in sorted(self.messages.items(), key=lambda kv: -float(kv[0][1]))
               if c == channel and m.get("thread_ts", m["ts"]) == m["ts"]][:int(args.get("limit") or 100)]
        with_meta = str(args.get("include_all_metadata")).lower() in ("1", "true")
        return {"ok": True, "messages": [m if with_meta else {k: v for k, v in m.items() if k != "metadata"}
                                         for m in top], "has_more": False}

    def _chat_update(self, args: dict, token: str) -> dict:
        key = (args.get("channel"), args.get("ts"))
        if key not in self.messages:
            return {"ok": False, "error": "message_not_found"}
        self.messages[key].update(text=args.get("text", ""), blocks=args.get("blocks"))
        return {"ok": True, "channel": key[0], "ts": key[1], "text": args.get("text", "")}

    def _chat_postEphemeral(self, args: dict, token: str) -> dict:
        if args.get("channel") not in self.channels:
            return {"ok": False, "error": "channel_not_found"}
        return {"ok": True, "message_ts": self._ts()}

    def _views_open(self, args: dict, token: str) -> dict:
        if not args.get("trigger_id"):
            return {"ok": False, "error": "invalid_trigger_id"}
        view = {**args["view"], "id": self._next("V"), "hash": self._next("h"), "team_id": TEAM}
        self.views[view["id"]] = view
        return {"ok": True, "view": view}

    def _files_getUploadURLExternal(self, args: dict, token: str) -> dict:
        file_id = self._next("F")
        self._uploads[file_id] = {"filename": args["filename"], "length": int(args["length"]), "data": None}
        return {"ok": True, "upload_url": f"{self.url}/upload/v1/{file_id}", "file_id": file_id}

    def _files_completeUploadExternal(self, args: dict, token: str) -> dict:
        channel, thread = args.get("channel_id"), args.get("thread_ts")
        if channel and channel not in self.channels:
            return {"ok": False, "error": "channel_not_found"}
        if thread and (channel, thread) not in self.messages:
            return {"ok": False, "error": "thread_not_found"}
        done = []
        for f in args["files"]:
            up = self._uploads.pop(f["id"], None)
            if not up or up["data"] is None or len(up["data"]) != up["length"]:
                return {"ok": False, "error": "file_upload_not_completed"}
            self.files.append(File(f["id"], f.get("title", ""), up["filename"], up["data"], channel, thread,
                                   args.get("initial_comment")))
            done.append({"id": f["id"], "title": f.get("title", ""), "name": up["filename"], "size": up["length"]})
        if channel:                         # Slack shares the files as one message of the bot's
            self._add_message(channel, BOT_USER, args.get("initial_comment") or "", thread, bot_id=BOT_ID,
                              files=done, upload=True)
        return {"ok": True, "files": done}

    def _apps_connections_open(self, args: dict, token: str) -> dict:
        if not token.startswith("xapp-"):
            return {"ok": False, "error": "not_allowed_token_type"}
        return {"ok": True, "url": f"ws://127.0.0.1:{self.port}/link/?ticket={self._next('t')}&app_id={APP_ID}"}

    async def _upload(self, request: web.Request) -> web.Response:
        up = self._uploads.get(request.match_info["file_id"])
        if up is None:
            return web.Response(status=404, text="unknown upload")
        up["data"] = await request.read()
        return web.Response(text=f"OK - {len(up['data'])}")

    async def _response_url(self, request: web.Request) -> web.Response:
        with self._changed:
            self.calls.append(Call("response_url", await request.json(), ""))
            self._changed.notify_all()
        return web.Response(text="ok")

    def _add_message(self, channel: str, user: str, text: str, thread: str | None, **extra) -> dict:
        msg = {"type": "message", "channel": channel, "user": user, "text": text, "ts": self._ts(), **extra}
        if thread:
            msg["thread_ts"] = thread
        self.messages[(channel, msg["ts"])] = msg
        return msg

    # ------------------------------------------------------------------ Socket Mode

    async def _socket(self, request: web.Request) -> web.WebSocketResponse:
        ws = web.WebSocketResponse(autoping=True)
        await ws.prepare(request)
        self._ws = ws
        await ws.send_json({"type": "hello", "num_connections": 1, "connection_info": {"app_id": APP_ID},
                            "debug_info": {"host": "fake-slack", "approximate_connection_time": 3600}})
        self.socket_open.set()
        async for msg in ws:
            if msg.type == WSMsgType.TEXT:
                ack = json.loads(msg.data)
                fut = self._acks.pop(ack.get("envelope_id"), None)
                if fut and not fut.done():
                    fut.set_result(ack)
        self.socket_open.clear()
        return ws

    async def _envelope(self, kind: str, payload: dict, timeout: float) -> dict:
        envelope_id = self._next("env-")
        fut = self._loop.create_future()
        self._acks[envelope_id] = fut
        await self._ws.send_json({"envelope_id": envelope_id, "type": kind, "payload": payload,
                                  "accepts_response_payload": kind != "events_api", "retry_attempt": 0,
                                  "retry_reason": ""})
        return await asyncio.wait_for(fut, timeout)

    # ------------------------------------------------------------------ Slack -> app

    def deliver(self, kind: str, payload: dict, **http) -> Delivery:
        """Send a slash command ('command'), an event ('event') or an interaction ('interactive') to
        the app: over HTTP when app_url is set, else as a Socket Mode envelope. Records how long the
        app took to acknowledge."""
        start = time.monotonic()
        if self.app_url:
            status, body = self._post_signed(kind, payload, **http)
        else:
            envelope = {"command": "slash_commands", "event": "events_api", "interactive": "interactive"}[kind]
            status, body = 200, self._run(self._envelope(envelope, payload, 5.0), 6.0).get("payload")
        delivery = Delivery(status, body, time.monotonic() - start)
        self.deliveries.append(delivery)
        return delivery

    def _post_signed(self, kind: str, payload: dict, timestamp: int | None = None, signature: str | None = None,
                     secret: str | None = None, retry: int = 0, raw: bytes | None = None) -> tuple[int, Any]:
        if kind == "event":
            body, ctype = json.dumps(payload).encode(), "application/json"
        else:
            form = payload if kind == "command" else {"payload": json.dumps(payload)}
            body, ctype = urllib.parse.urlencode(form).encode(), "application/x-www-form-urlencoded"
        body = raw if raw is not None else body
        ts = str(timestamp if timestamp is not None else int(time.time()))
        headers = {"Content-Type": ctype, "X-Slack-Request-Timestamp": ts,
                   "X-Slack-Signature": signature or sign(secret or self.signing_secret, ts, body)}
        if retry:
            headers.update({"X-Slack-Retry-Num": str(retry), "X-Slack-Retry-Reason": "http_timeout"})
        req = urllib.request.Request(self.app_url, data=body, headers=headers, method="POST")
        try:
            with urllib.request.urlopen(req, timeout=10) as resp:
                status, text = resp.status, resp.read().decode()
        except urllib.error.HTTPError as e:
            status, text = e.code, e.read().decode()
        try:
            return status, json.loads(text) if text else None
        except json.JSONDecodeError:
            return status, text

    # ------------------------------------------------------------------ Slack's payloads

    def command(self, text: str, user: str, channel: str = "C0KERNELS1") -> dict:
        return {"token": "legacy", "team_id": TEAM, "team_domain": "kernels", "channel_id": channel,
                "channel_name": "kernels", "user_id": user, "user_name": user.lower(), "command": "/kernel",
                "text": text, "api_app_id": APP_ID, "is_enterprise_install": "false",
                "response_url": f"{self.url}/response/{self._next('r')}", "trigger_id": self._next("trig.")}

    def event(self, event: dict) -> dict:
        return {"token": "legacy", "team_id": TEAM, "api_app_id": APP_ID, "event": event, "type": "event_callback",
                "event_id": self._next("Ev"), "event_time": int(time.time()), "event_context": self._next("ctx"),
                "authorizations": [{"team_id": TEAM, "user_id": BOT_USER, "is_bot": True,
                                    "is_enterprise_install": False}], "is_ext_shared_channel": False}

    def message(self, user: str, text: str, thread_ts: str | None = None, channel: str = "C0KERNELS1") -> dict:
        """A person posts text (in a thread when thread_ts): the message event Slack sends for it."""
        msg = self._add_message(channel, user, text, thread_ts, team=TEAM)
        return self.event({**msg, "event_ts": msg["ts"], "channel_type": "channel"})

    def mention(self, user: str, text: str, channel: str = "C0KERNELS1") -> dict:
        msg = self._add_message(channel, user, f"<@{BOT_USER}> {text}", None, team=TEAM)
        return self.event({**msg, "type": "app_mention", "event_ts": msg["ts"]})

    def reaction(self, user: str, name: str, channel: str, ts: str) -> dict:
        return self.event({"type": "reaction_added", "user": user, "reaction": name, "item_user": BOT_USER,
                           "item": {"type": "message", "channel": channel, "ts": ts}, "event_ts": self._ts()})

    def button(self, user: str, channel: str, message_ts: str, action_id: str, value: str) -> dict:
        """A click on a button of a message the bot posted (the message's blocks come along, as in Slack)."""
        msg = self.messages.get((channel, message_ts), {})
        return {"type": "block_actions", "user": {"id": user, "username": user.lower(), "team_id": TEAM},
                "api_app_id": APP_ID, "token": "legacy", "trigger_id": self._next("trig."),
                "team": {"id": TEAM, "domain": "kernels"}, "enterprise": None, "is_enterprise_install": False,
                "container": {"type": "message", "message_ts": message_ts, "channel_id": channel,
                              "is_ephemeral": False, "thread_ts": msg.get("thread_ts")},
                "channel": {"id": channel, "name": "kernels"}, "message": msg,
                "response_url": f"{self.url}/response/{self._next('r')}",
                "actions": [{"action_id": action_id, "block_id": "kernelbot_actions", "value": value,
                             "type": "button", "text": {"type": "plain_text", "text": action_id},
                             "action_ts": f"{time.time():.6f}"}]}

    def view_submission(self, user: str, view_id: str, values: dict[str, str]) -> dict:
        """Submitting a modal the app opened; values maps block_id (== action_id) to the typed text."""
        view = self.views[view_id]
        state = {b: {b: {"type": "plain_text_input", "value": v}} for b, v in values.items()}
        return {"type": "view_submission", "team": {"id": TEAM, "domain": "kernels"},
                "user": {"id": user, "username": user.lower(), "team_id": TEAM}, "api_app_id": APP_ID,
                "token": "legacy", "trigger_id": self._next("trig."),
                "view": {**view, "state": {"values": state}}, "response_urls": [], "is_enterprise_install": False}


def sign(secret: str, timestamp: str, body: bytes) -> str:
    """Slack's request signature: v0=HMAC-SHA256(secret, 'v0:' + timestamp + ':' + body)."""
    base = b"v0:" + timestamp.encode() + b":" + body
    return "v0=" + hmac.new(secret.encode(), base, hashlib.sha256).hexdigest()


async def _body_args(request: web.Request) -> dict:
    if request.content_type == "application/json":
        args = await request.json()
    else:
        args = dict(await request.post())
    for key in _JSON_FIELDS:
        if isinstance(args.get(key), str):
            args[key] = json.loads(args[key])
    return args
