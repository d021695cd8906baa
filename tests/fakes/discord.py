"""Discord on loopback, for tests, speaking Discord's wire formats so the real discord.py
client runs against it (`discord.http.Route.BASE` and `DiscordWebSocket.DEFAULT_GATEWAY`
point here).

Discord's side of the API: REST under /api/v10 (JSON and multipart bodies, every call
recorded): the bot user and application, command sync, channel messages with files,
threads, reactions, interaction callbacks and webhook follow-ups; and the gateway
websocket: HELLO, IDENTIFY -> READY and GUILD_CREATE, heartbeats ACKed, op 7 reconnect
requests, RESUME replaying what the client missed. Frames are plain JSON text, no zlib.
Discord's side towards the bot: INTERACTION_CREATE (slash command, button, modal submit),
MESSAGE_CREATE and MESSAGE_REACTION_ADD dispatches with the payloads Discord sends.
"""
from __future__ import annotations

import itertools
import json
import re
import threading
import time
from dataclasses import dataclass, field
from typing import Any, Callable
from urllib.parse import unquote

from aiohttp import WSMsgType, web
from fakes.loopback import LoopbackServer

API = "/api/v10"
EPHEMERAL, LOADING = 64, 128
_SNOWFLAKES = itertools.count(1_250_000_000_000_000_001)


def snowflake() -> str:
    return str(next(_SNOWFLAKES))


GUILD, APP_ID, BOT_ID, OWNER_ID = snowflake(), snowflake(), snowflake(), snowflake()
CHANNEL, OTHER_CHANNEL, REVIEWER_ROLE = snowflake(), snowflake(), snowflake()
TOKEN = "Bot.fake.token"


@dataclass
class Call:
    method: str
    path: str
    body: Any                                 # the JSON body, or a multipart request's payload_json
    files: dict[str, bytes]
    at: float


@dataclass
class Interaction:
    id: str
    token: str
    type: int
    channel_id: str
    user: str
    sent_at: float
    message_id: str | None = None                            # the message a button or modal came from
    responses: list[dict] = field(default_factory=list)      # callbacks: {"type", "data", "at"}
    original: str | None = None                              # the response message's id

    @property
    def answered_in(self) -> float | None:
        return self.responses[0]["at"] - self.sent_at if self.responses else None


def _now_iso() -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%S.000000+00:00", time.gmtime())


class FakeDiscord(LoopbackServer):
    def __init__(self) -> None:
        super().__init__("fake-discord")
        self.calls: list[Call] = []
        self.users: dict[str, dict] = {BOT_ID: {"id": BOT_ID, "username": "kernelbot", "global_name": None,
                                                "discriminator": "0", "avatar": None, "bot": True}}
        self.member_roles: dict[str, list[str]] = {BOT_ID: []}
        self.roles = [_role(GUILD, "@everyone", 0), _role(REVIEWER_ROLE, "kernel-reviewers", 1)]
        self.channels: dict[str, dict] = {c["id"]: c for c in (_text_channel(CHANNEL, "kernels"),
                                                               _text_channel(OTHER_CHANNEL, "random"))}
        self.deleted: dict[str, dict] = {}                       # threads deleted, by id
        self.messages: dict[str, dict] = {}
        self.files: dict[str, bytes] = {}                        # attachment id -> the bytes uploaded
        self.reactions: list[tuple[str, str, str]] = []          # (message id, user id, emoji)
        self.interactions: dict[str, Interaction] = {}
        self.commands: dict[str, list[dict]] = {}                # guild id ("global") -> synced commands
        self.identified: list[dict] = []                         # IDENTIFY payloads
        self.resumed: list[dict] = []                            # RESUME payloads
        self.heartbeats = 0
        self.nonce_window_s = 300.0                              # how long Discord enforces a nonce (minutes)
        self._made_at: dict[str, float] = {}                     # message id -> when it was made
        self.connected = threading.Event()                       # a session is up on the socket
        self._faults: list[tuple[str, re.Pattern, int, dict, dict, bool]] = []
        self._changed = threading.Condition()
        self._ws: web.WebSocketResponse | None = None
        self._session_id: str | None = None
        self._seq = 0
        self._sent: list[dict] = []                              # every dispatch of this session, in order
        self._replay_after: int | None = None

    @property
    def api_url(self) -> str:
        return f"{self.url}{API}"

    @property
    def gateway_url(self) -> str:
        return f"ws://127.0.0.1:{self.port}/gateway"

    def routes(self, app: web.Application) -> None:
        app.router.add_get("/gateway", self._gateway)
        app.router.add_get("/cdn/{aid}/{name}", self._cdn)
        app.router.add_route("*", API + "/{path:.*}", self._rest)

    # ------------------------------------------------------------------ people and places

    def user(self, name: str, roles: tuple[str, ...] = ()) -> str:
        """A guild member; returns their user id."""
        uid = snowflake()
        self.users[uid] = {"id": uid, "username": name, "global_name": name.title(), "discriminator": "0",
                           "avatar": None}
        self.member_roles[uid] = list(roles)
        return uid

    def member(self, uid: str, with_user: bool = True) -> dict:
        m = {"roles": self.member_roles[uid], "joined_at": _now_iso(), "deaf": False, "mute": False, "flags": 0,
             "pending": False, "nick": None, "avatar": None}
        return {**m, "user": self.users[uid]} if with_user else m

    def channel_messages(self, channel_id: str) -> list[dict]:
        """What everyone sees in a channel or thread, oldest first (ephemeral messages left out)."""
        with self._changed:
            return [m for m in self.messages.values() if m["channel_id"] == channel_id
                    and not m["flags"] & EPHEMERAL]

    # ------------------------------------------------------------------ what the bot called

    def calls_to(self, method: str, path: str = "", pred: Callable[[Call], bool] = lambda c: True) -> list[Call]:
        """Calls whose method matches and whose path matches the regex `path`."""
        with self._changed:
            return [c for c in self.calls if c.method == method and re.search(path, c.path) and pred(c)]

    def wait_for(self, pred: Callable[[], Any], timeout: float = 10.0, what: str = "condition") -> Any:
        """pred()'s first truthy value, waiting for REST calls and gateway traffic to bring it."""
        with self._changed:
            value = self._changed.wait_for(pred, timeout)
            assert value, f"{what} not met in {timeout} s; calls so far: {[(c.method, c.path) for c in self.calls]}"
            return value

    def find_message(self, pred: Callable[[dict], bool], channel_id: str | None = None, timeout: float = 10.0) -> dict:
        def found():
            return next((m for m in list(self.messages.values()) if (channel_id is None or m["channel_id"] ==
                                                                     channel_id) and pred(m)), None)
        return self.wait_for(found, timeout, "a message matching")

    def ephemerals(self, user: str) -> list[str]:
        """What the bot told `user` privately: ephemeral callbacks and follow-ups of their interactions."""
        with self._changed:
            return [m["content"] for m in self.messages.values()
                    if m["flags"] & EPHEMERAL and m.get("_for") == user and m["content"]]

    def fail(self, method: str, path: str, status: int, body: dict | None = None, retry_after: float | None = None,
             times: int = 1, after_doing_it: bool = False) -> None:
        """The next `times` calls matching answer with this error (429s carry retry_after as Discord sends it;
        status 0: the connection is cut instead of answered). after_doing_it: the call is carried out first
        (a message posted); only its answer is lost."""
        headers = {}
        if retry_after is not None:
            body = {"message": "You are being rate limited.", "retry_after": retry_after, "global": False}
            headers = {"Retry-After": str(retry_after), "Via": "1.1 google", "X-RateLimit-Scope": "user"}
        self._faults += [(method, re.compile(path), status, body or {"message": "error", "code": 0}, headers,
                          after_doing_it)] * times

    def clear_faults(self) -> None:
        with self._changed:
            self._faults.clear()

    def delete_thread(self, thread_id: str) -> None:
        """Someone deletes a thread: it and its messages are gone, and Discord says THREAD_DELETE."""
        with self._changed:
            thread = self.channels.pop(thread_id)
            self.deleted[thread_id] = thread            # an interaction already on its way still names it
            for mid in [mid for mid, m in self.messages.items() if m["channel_id"] == thread_id]:
                del self.messages[mid]
        self._dispatch("THREAD_DELETE", {"id": thread_id, "guild_id": GUILD, "parent_id": thread["parent_id"],
                                         "type": thread["type"]})

    # ------------------------------------------------------------------ Discord -> bot

    def slash(self, user: str, channel_id: str = CHANNEL, **options: str) -> str:
        """/kernel with options (request=..., action=..., session=...); returns the interaction id."""
        data = {"id": self._command_id(), "name": "kernel", "type": 1, "guild_id": GUILD,
                "options": [{"name": k, "type": 3, "value": v} for k, v in options.items()]}
        return self._interact(2, user, channel_id, data)

    def click(self, user: str, message: dict, custom_id: str) -> str:
        """A click on a button of a message, as the person saw it (the message comes along, as from Discord)."""
        assert any(c.get("custom_id") == custom_id for row in message["components"] for c in row["components"]), \
            f"no button {custom_id} on that message"
        return self._interact(3, user, message["channel_id"], {"custom_id": custom_id, "component_type": 2},
                              message=message)

    def submit(self, user: str, modal: dict, values: dict[str, str]) -> str:
        """Submitting a modal the bot opened; values maps each text input's custom id to the typed text."""
        components = [{"type": 18, "id": i + 1, "component": {"type": 4, "id": i + 2, "custom_id": k, "value": v}}
                      for i, (k, v) in enumerate(values.items())]
        origin = self.interactions[modal["interaction"]]
        extra = {"message": self.messages[modal["message"]]} if modal.get("message") else {}
        return self._interact(5, user, origin.channel_id, {"custom_id": modal["custom_id"], "components": components},
                              **extra)

    def say(self, user: str, content: str, channel_id: str, files: dict[str, bytes] | None = None) -> dict:
        """A person posts in a channel or thread, with files attached: the MESSAGE_CREATE Discord sends."""
        with self._changed:
            msg = self._message(channel_id, self.users[user], content, files=files)
        self._dispatch("MESSAGE_CREATE", {**msg, "guild_id": GUILD, "member": self.member(user, with_user=False)})
        return msg

    def react(self, user: str, message: dict, emoji: str = "\N{THUMBS UP SIGN}") -> None:
        self._dispatch("MESSAGE_REACTION_ADD", self._reaction(user, message, emoji))

    @property
    def seq(self) -> int:
        """The sequence number of the last dispatch sent."""
        return self._seq

    def reconnect(self, replay_after: int | None = None) -> None:
        """Op 7: the bot must reconnect and resume. Dispatches sent meanwhile wait for the RESUME, which
        replays what the bot missed; with replay_after, everything after that sequence number (what the
        bot already had too: Discord may redeliver)."""
        self._replay_after = replay_after
        self.connected.clear()
        self._run(self._reconnect())

    @property
    def modals(self) -> list[dict]:
        """Modals the bot opened: the callback data plus the interaction and message they came from."""
        with self._changed:
            return [{**r["data"], "interaction": i.id, "message": i.message_id}
                    for i in self.interactions.values() for r in i.responses if r["type"] == 9]

    def _interact(self, itype: int, user: str, channel_id: str, data: dict, **extra: Any) -> str:
        iid = snowflake()
        token = f"itok-{iid}"
        payload = {"id": iid, "application_id": APP_ID, "type": itype, "data": data, "guild_id": GUILD,
                   "channel_id": channel_id, "channel": self.channels.get(channel_id) or self.deleted[channel_id],
                   "member": {**self.member(user), "permissions": "2248473465835073"}, "token": token, "version": 1,
                   "app_permissions": "2248473465835073", "locale": "en-US", "guild_locale": "en-US",
                   "entitlements": [], "authorizing_integration_owners": {"0": GUILD}, "context": 0,
                   "attachment_size_limit": 10 * 1024 * 1024, **extra}
        with self._changed:
            self.interactions[iid] = Interaction(iid, token, itype, channel_id, user, time.monotonic(),
                                                 extra["message"]["id"] if "message" in extra else None)
        self._dispatch("INTERACTION_CREATE", payload)
        return iid

    def _dispatch(self, event: str, data: dict) -> None:
        self._run(self._send_dispatch(event, data))

    # ------------------------------------------------------------------ the gateway

    async def _gateway(self, request: web.Request) -> web.WebSocketResponse:
        ws = web.WebSocketResponse(autoping=True)
        await ws.prepare(request)
        await ws.send_json({"op": 10, "d": {"heartbeat_interval": 41250}, "s": None, "t": None})
        async for msg in ws:
            if msg.type == WSMsgType.TEXT:
                await self._on_frame(ws, json.loads(msg.data))
        if self._ws is ws:
            self._ws = None
            self.connected.clear()
        return ws

    async def _on_frame(self, ws: web.WebSocketResponse, frame: dict) -> None:
        op, d = frame.get("op"), frame.get("d")
        if op == 1:
            with self._changed:
                self.heartbeats += 1
                self._changed.notify_all()
            await ws.send_json({"op": 11, "d": None, "s": None, "t": None})
        elif op == 2:
            await self._identify(ws, d)
        elif op == 6:
            await self._resume(ws, d)

    async def _identify(self, ws: web.WebSocketResponse, d: dict) -> None:
        if d.get("token") != TOKEN:
            await ws.close(code=4004, message=b"Authentication failed.")
            return
        with self._changed:
            self.identified.append(d)
        self._ws, self._session_id, self._seq, self._sent = ws, snowflake(), 0, []
        await self._send_dispatch("READY", {
            "v": 10, "user": self.users[BOT_ID], "guilds": [{"id": GUILD, "unavailable": True}],
            "session_id": self._session_id, "resume_gateway_url": self.gateway_url, "private_channels": [],
            "relationships": [], "presences": [], "application": {"id": APP_ID, "flags": 0}})
        await self._send_dispatch("GUILD_CREATE", self._guild())
        self.connected.set()

    async def _resume(self, ws: web.WebSocketResponse, d: dict) -> None:
        with self._changed:
            self.resumed.append(d)
        if d.get("session_id") != self._session_id or d.get("token") != TOKEN:
            await ws.send_json({"op": 9, "d": False, "s": None, "t": None})    # invalid session: identify again
            return
        after = min(d["seq"], self._replay_after) if self._replay_after is not None else d["seq"]
        self._ws, self._replay_after = ws, None
        for frame in [f for f in self._sent if f["s"] > after]:
            await ws.send_json(frame)
        await self._send_dispatch("RESUMED", {})
        self.connected.set()

    async def _reconnect(self) -> None:
        ws, self._ws = self._ws, None                   # what comes next waits for the RESUME
        await ws.send_json({"op": 7, "d": None, "s": None, "t": None})

    async def _send_dispatch(self, event: str, data: dict) -> None:
        self._seq += 1
        frame = json.loads(json.dumps({"op": 0, "t": event, "s": self._seq, "d": data}))   # as sent, for replays
        self._sent.append(frame)
        if self._ws is not None and not self._ws.closed:
            await self._ws.send_json(frame)

    def _guild(self) -> dict:
        return {"id": GUILD, "name": "Kernel Lab", "unavailable": False, "owner_id": OWNER_ID, "member_count": 3,
                "large": False, "features": [], "emojis": [], "stickers": [], "roles": self.roles,
                "channels": [c for c in self.channels.values() if c["type"] == 0],
                "threads": [c for c in self.channels.values() if c["type"] == 11],
                "members": [self.member(BOT_ID)], "presences": [], "voice_states": [], "premium_tier": 0,
                "preferred_locale": "en-US", "joined_at": _now_iso(), "verification_level": 0,
                "default_message_notifications": 0, "explicit_content_filter": 0, "mfa_level": 0, "nsfw_level": 0,
                "afk_timeout": 300, "system_channel_flags": 0, "icon": None, "banner": None, "splash": None}

    # ------------------------------------------------------------------ REST

    async def _cdn(self, request: web.Request) -> web.Response:
        data = self.files.get(request.match_info["aid"])
        return web.Response(body=data) if data is not None else web.Response(status=404)

    async def _rest(self, request: web.Request) -> web.Response:
        method, path = request.method, "/" + request.match_info["path"]
        body, files = await _read_body(request)
        if method == "GET":
            body = dict(request.query)                       # a GET's parameters stand in for its body
        with self._changed:
            self.calls.append(Call(method, path, body, files, time.monotonic()))
            fault = next((f for f in self._faults if f[0] == method and f[1].search(path)), None)
            if fault:
                self._faults.remove(fault)
                if fault[5]:
                    self._route(method, path, body, files, request.headers.get("Authorization", ""))
                self._changed.notify_all()
                if fault[2] == 0:
                    request.transport.close()
                    return web.Response(status=500)
                return _json(fault[3], fault[2], fault[4])
            answer = self._route(method, path, body, files, request.headers.get("Authorization", ""))
            self._changed.notify_all()
        status, payload = answer if isinstance(answer, tuple) else (200, answer)
        if status == 204:
            return web.Response(status=204)
        return _json(payload, status)

    def _route(self, method: str, path: str, body: Any, files: dict[str, bytes], auth: str):
        for pattern, handler in self._routes():
            m = re.fullmatch(pattern, f"{method} {path}")
            if m:
                open_route = path.startswith(("/interactions/", "/webhooks/"))
                if not open_route and auth != f"Bot {TOKEN}":
                    return 401, {"message": "401: Unauthorized", "code": 0}
                return handler(body, files, *m.groups())
        return 404, {"message": "404: Not Found", "code": 0}

    def _routes(self) -> list[tuple[str, Callable]]:
        return [
            (r"GET /users/@me", lambda b, f: self.users[BOT_ID]),
            (r"GET /oauth2/applications/@me", lambda b, f: self._application()),
            (r"GET /gateway(?:/bot)?", lambda b, f: {"url": self.gateway_url, "shards": 1, "session_start_limit": {
                "total": 1000, "remaining": 999, "reset_after": 0, "max_concurrency": 1}}),
            (r"PUT /applications/\d+(?:/guilds/(\d+))?/commands", self._sync_commands),
            (r"GET /channels/(\d+)", lambda b, f, cid: self.channels.get(cid) or (404, _unknown("Channel", 10003))),
            (r"POST /channels/(\d+)/messages", self._post_message),
            (r"GET /channels/(\d+)/messages", self._history),
            (r"PATCH /channels/(\d+)/messages/(\d+)", self._edit_message),
            (r"POST /channels/(\d+)/messages/(\d+)/threads", self._start_thread),
            (r"PUT /channels/(\d+)/messages/(\d+)/reactions/([^/]+)/@me", self._add_reaction),
            (r"POST /interactions/(\d+)/([^/]+)/callback", self._callback),
            (r"(?:GET|PATCH) /webhooks/\d+/([^/]+)/messages/@original", self._original),
            (r"POST /webhooks/\d+/([^/]+)", self._followup),
        ]

    def _application(self) -> dict:
        return {"id": APP_ID, "name": "kernelbot", "icon": None, "description": "", "rpc_origins": [],
                "bot_public": True, "bot_require_code_grant": False, "owner": self.users[BOT_ID], "summary": "",
                "verify_key": "0" * 64, "team": None, "flags": 0, "interactions_endpoint_url": None}

    def _sync_commands(self, body: list[dict], files, guild: str | None) -> list[dict]:
        synced = [{**c, "id": snowflake(), "application_id": APP_ID, "version": "1", "type": c.get("type", 1),
                   "default_member_permissions": None, **({"guild_id": guild} if guild else {})} for c in body]
        self.commands[guild or "global"] = synced
        return synced

    def _command_id(self) -> str:
        synced = self.commands.get(GUILD) or self.commands.get("global")
        return synced[0]["id"] if synced else snowflake()

    def _post_message(self, body: dict, files: dict[str, bytes], cid: str):
        if cid not in self.channels:
            return 404, _unknown("Channel", 10003)
        nonce = body.get("nonce") if body.get("enforce_nonce") else None
        recent = time.time() - self.nonce_window_s
        repeat = next((m for m in self.messages.values() if nonce and m.get("nonce") == nonce
                       and m["channel_id"] == cid and m["author"]["id"] == BOT_ID
                       and self._made_at[m["id"]] >= recent), None)
        if repeat is not None:            # Discord: an enforced nonce seen recently returns that message
            return repeat
        msg = self._message(cid, self.users[BOT_ID], body.get("content") or "", body, files,
                            **({"nonce": nonce} if nonce else {}))
        self._queue_dispatch("MESSAGE_CREATE", {**msg, "guild_id": GUILD, "member": self.member(BOT_ID, False)})
        return msg

    def _history(self, query: dict, files, cid: str):
        """A channel's messages, newest first: `limit` of them (at most 100), older than `before`."""
        if cid not in self.channels:
            return 404, _unknown("Channel", 10003)
        before = int(query.get("before") or 1 << 63)
        found = sorted((m for m in self.messages.values() if m["channel_id"] == cid and int(m["id"]) < before),
                       key=lambda m: int(m["id"]), reverse=True)
        return [{k: v for k, v in m.items() if k != "nonce"} for m in found[:min(int(query.get("limit", 50)), 100)]]

    def _edit_message(self, body: dict, files, cid: str, mid: str):
        msg = self.messages.get(mid)
        if msg is None or msg["channel_id"] != cid:
            return 404, _unknown("Message", 10008)
        self._apply(msg, body, files)
        return msg

    def _start_thread(self, body: dict, files, cid: str, mid: str):
        if mid not in self.messages:
            return 404, _unknown("Message", 10008)
        thread = {"id": mid, "type": 11, "guild_id": GUILD, "parent_id": cid, "owner_id": BOT_ID,
                  "name": body["name"], "rate_limit_per_user": 0, "message_count": 0, "member_count": 1,
                  "last_message_id": None, "flags": 0, "total_message_sent": 0,
                  "thread_metadata": {"archived": False, "auto_archive_duration": body.get("auto_archive_duration",
                                                                                         4320),
                                      "archive_timestamp": _now_iso(), "locked": False}}
        self.channels[mid] = thread                     # a thread started from a message takes its id
        self.messages[mid]["thread"] = thread
        self._queue_dispatch("THREAD_CREATE", {**thread, "newly_created": True})
        return thread

    def _add_reaction(self, body, files, cid: str, mid: str, emoji: str):
        self.reactions.append((mid, BOT_ID, unquote(emoji)))
        self._queue_dispatch("MESSAGE_REACTION_ADD", self._reaction(BOT_ID, self.messages[mid], unquote(emoji)))
        return 204, None

    def _callback(self, body: dict, files: dict[str, bytes], iid: str, token: str):
        i = self.interactions.get(iid)
        if i is None or i.token != token:
            return 404, _unknown("Interaction", 10062)
        if i.responses:
            return 400, {"message": "Interaction has already been acknowledged.", "code": 40060}
        rtype, data = body["type"], body.get("data") or {}
        i.responses.append({"type": rtype, "data": data, "at": time.monotonic()})
        resource = None
        if rtype in (4, 5):                             # a message now, or "thinking…" until it is edited
            flags = (data.get("flags") or 0) | (LOADING if rtype == 5 else 0)
            msg = self._message(i.channel_id, self.users[BOT_ID], data.get("content") or "", {**data, "flags": flags},
                                files, _for=i.user)
            i.original = msg["id"]
            resource = {"type": rtype, "message": msg}
        return {"interaction": {"id": iid, "type": i.type, "response_message_id": i.original,
                                "response_message_loading": rtype == 5,
                                "response_message_ephemeral": bool(resource and resource["message"]["flags"] &
                                                                   EPHEMERAL)},
                **({"resource": resource} if resource else {})}

    def _original(self, body: dict | None, files, token: str):
        i = next((i for i in self.interactions.values() if i.token == token), None)
        if i is None or i.original is None:
            return 404, _unknown("Message", 10008)
        msg = self.messages[i.original]
        if body is not None:
            msg["flags"] &= ~LOADING
            self._apply(msg, body, files)
        return msg

    def _followup(self, body: dict, files, token: str):
        i = next((i for i in self.interactions.values() if i.token == token), None)
        if i is None or not i.responses:
            return 404, _unknown("Webhook", 10015)
        return self._message(i.channel_id, self.users[BOT_ID], body.get("content") or "", body, files, _for=i.user)

    # ------------------------------------------------------------------ payloads

    def _message(self, cid: str, author: dict, content: str, body: dict | None = None,
                 files: dict[str, bytes] | None = None, **extra: Any) -> dict:
        msg = {"id": snowflake(), "channel_id": cid, "author": author, "content": content, "timestamp": _now_iso(),
               "edited_timestamp": None, "tts": False, "mention_everyone": False, "mentions": [], "mention_roles": [],
               "attachments": [], "embeds": [], "components": [], "pinned": False, "type": 0, "flags": 0, **extra}
        self._apply(msg, body or {}, files or {})
        self.messages[msg["id"]] = msg
        self._made_at[msg["id"]] = time.time()
        return msg

    def _apply(self, msg: dict, body: dict, files: dict[str, bytes]) -> None:
        """A create or edit body onto a message: content, embeds, components, flags, attachments."""
        for key in ("content", "embeds", "components", "flags"):
            if key in body:
                msg[key] = body[key] if body[key] is not None else ([] if key != "content" else "")
        if files or "attachments" in body:
            kept = [a for a in msg["attachments"] if any(str(b.get("id")) == a["id"]
                                                         for b in body.get("attachments", []))]
            for name, data in files.items():
                aid = snowflake()
                self.files[aid] = bytes(data)
                url = f"{self.url}/cdn/{aid}/{name}"
                kept.append({"id": aid, "filename": name, "size": len(data), "content_type": "application/octet-stream",
                             "url": url, "proxy_url": url})
            msg["attachments"] = kept

    def _reaction(self, user: str, message: dict, emoji: str) -> dict:
        return {"user_id": user, "channel_id": message["channel_id"], "message_id": message["id"], "guild_id": GUILD,
                "member": self.member(user), "emoji": {"id": None, "name": emoji}, "burst": False, "type": 0,
                "message_author_id": message["author"]["id"]}

    def _queue_dispatch(self, event: str, data: dict) -> None:
        """A dispatch caused by a REST call, sent after the REST answer (called on the fake's loop)."""
        self._loop.create_task(self._send_dispatch(event, data))


def _json(payload: Any, status: int = 200, headers: dict | None = None) -> web.Response:
    # discord.py reads a body as JSON only when the content type is exactly application/json
    return web.Response(body=json.dumps(payload).encode(), status=status,
                        headers={**(headers or {}), "Content-Type": "application/json"})


def _unknown(what: str, code: int) -> dict:
    return {"message": f"Unknown {what}", "code": code}


def _role(rid: str, name: str, position: int) -> dict:
    return {"id": rid, "name": name, "color": 0, "hoist": False, "position": position, "permissions": "1024",
            "managed": False, "mentionable": False, "flags": 0}


def _text_channel(cid: str, name: str) -> dict:
    return {"id": cid, "type": 0, "guild_id": GUILD, "name": name, "position": 0, "permission_overwrites": [],
            "nsfw": False, "parent_id": None, "topic": None, "last_message_id": None, "rate_limit_per_user": 0}


async def _read_body(request: web.Request) -> tuple[Any, dict[str, bytes]]:
    """A JSON body, or a multipart one: payload_json plus files[n] parts (by file name)."""
    if request.content_type.startswith("multipart/"):
        body, files = None, {}
        reader = await request.multipart()
        async for part in reader:
            if part.name == "payload_json":
                body = json.loads(await part.text())
            else:
                files[part.filename] = await part.read()
        return body or {}, files
    raw = await request.read()
    return (json.loads(raw) if raw else None), {}
