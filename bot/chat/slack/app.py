"""`kernelbot slack`: the Bolt app. Slack payloads become service calls.

Every person's event is written to the store's inbox before Slack gets its answer
(within its 3 seconds), then applied: a bot killed right after the answer applies
it on restart, once. Commands, buttons and modals are written in their listener
before ack(); events, which Bolt acknowledges before their listener runs, are
written by a middleware (`intake`) that runs before that. Slack redelivers, so
each carries a key the inbox records once. Socket Mode needs no public URL;
`--http` serves /slack/events and checks request signatures.
"""
from __future__ import annotations

import logging
import os
import re
import sqlite3
import tempfile
from pathlib import Path
from socketserver import ThreadingMixIn
from wsgiref.simple_server import WSGIRequestHandler, WSGIServer, make_server

from slack_bolt import App, BoltRequest, BoltResponse
from slack_bolt.adapter.wsgi import SlackRequestHandler
from slack_bolt.adapter.wsgi.http_request import WsgiHttpRequest

from bot.chat.commands import help_text, is_thumbs_up, parse_command, reply_code, reply_event
from bot.chat.slack import render as sb
from bot.chat.slack.chat import PLATFORM, SlackChat, message_id, web_client
from bot.config import Config
from bot.workflow import cards, report, stages
from bot.workflow.engine import validate_artifact
from bot.workflow.events import Approve, Cancel, Correct, Edit, Event, Regenerate
from bot.workflow.model import Session
from bot.workflow.service import Service, event_item, start_item, store_problem

log = logging.getLogger("kernelbot.slack")

COMMAND = "/kernel"
_MENTION = re.compile(r"<@([UW][A-Z0-9]+)(?:\|[^>]*)?>")
_SLACK_ESCAPES = (("&lt;", "<"), ("&gt;", ">"), ("&amp;", "&"))

HELP = help_text("*", f"{COMMAND} ", "; mentioning me with a request does the same")


def slack_text(text: str, bot_user: str | None = None) -> str:
    """What a person typed: the bot's mention removed, other mentions as bare user ids (cards
    render ids as mentions again), Slack's escapes undone."""
    text = _MENTION.sub(lambda m: "" if m.group(1) == bot_user else m.group(1), text)
    for escaped, plain in _SLACK_ESCAPES:
        text = text.replace(escaped, plain)
    return text.strip()


class SlackBot:
    """The listeners. The only state is in the store; this object can be rebuilt at any time."""

    def __init__(self, svc: Service, chat: SlackChat) -> None:
        self.svc, self.chat = svc, chat

    def register(self, app: App) -> None:
        app.use(self.intake)
        app.command(COMMAND)(self.on_command)
        app.event("app_mention")(self.on_mention)
        app.event("message")(self.on_taken_in)
        app.event("reaction_added")(self.on_taken_in)
        app.action(re.compile(f"^{sb.PREFIX}(approve|regenerate|cancel)$"))(self.on_button)
        app.action(f"{sb.PREFIX}correct")(self.on_open_correct)
        app.action(f"{sb.PREFIX}edit")(self.on_open_edit)
        app.view(f"{sb.PREFIX}correct")(self.on_correct_submitted)
        app.view(f"{sb.PREFIX}edit")(self.on_edit_submitted)

    # ------------------------------------------------------------------ /kernel

    def on_command(self, ack, command: dict, respond) -> None:
        verb, arg = parse_command(command.get("text", ""))
        if verb == "help":
            ack(HELP)
        elif verb == "list":
            ack(self._list(command.get("channel_id", "")))
        elif verb != "start":
            s = self.svc.session(arg) if arg else None
            if s is None:
                ack(f"No session `{sb.escape(arg)}`. `{COMMAND} list` shows this channel's open sessions."
                    if arg else f"Usage: `{COMMAND} {verb} ID`; `{COMMAND} list` shows the ids.")
                return
            {"status": self._status, "cancel": self._cancel, "export": self._export}[verb](ack, respond, command, s)
        else:
            self._start_from_command(ack, command)

    def _list(self, channel: str) -> str:
        lines = [f"`{s.id}` · {stages.label(s.stage)} · <@{s.requester}> · {sb.escape(sb.clip(s.request, 80))}"
                 for s in self.svc.listed(status="active", channel=channel, platform=PLATFORM)]
        return "\n".join(lines) or "No open sessions in this channel."

    def _status(self, ack, respond, command: dict, s: Session) -> None:
        card = self.svc.status_card(s)
        ack(text=sb.fallback_text(card), blocks=sb.card_blocks(card))

    def _cancel(self, ack, respond, command: dict, s: Session) -> None:
        item = event_item(s.id, Cancel(command["user_id"]))
        inbox = self._receive(f"command:{command.get('trigger_id')}", item, ack)
        if inbox:
            self.svc.process_acked(inbox)

    def _export(self, ack, respond, command: dict, s: Session) -> None:
        ack(f"Exporting session `{s.id}` into its thread.")
        with tempfile.TemporaryDirectory() as tmp:
            paths = report.export(s, Path(tmp))
            chart = " and the chart" if any(p.name == "chart.png" for p in paths) else ""
            try:
                self.chat.upload(s, [{"file": str(p), "filename": p.name, "title": p.name} for p in paths],
                                 comment=f"Session `{s.id}` ({s.status}): artifacts, report.json, REPORT.md{chart}")
            except Exception as e:                      # ChannelUnavailable or a Slack API error
                respond(f"The export of `{s.id}` could not be uploaded: {e}")

    def _start_from_command(self, ack, command: dict) -> None:
        user, channel, request = command["user_id"], command["channel_id"], command.get("text", "").strip()
        item = start_item(request, user, channel, None, response_url=command.get("response_url"),
                          announce=f"<@{user}> asked for a kernel: {sb.escape(request)}\n"
                                   "Each stage is posted in this thread for review.")
        inbox = self._receive(f"command:{command.get('trigger_id')}", item, ack)
        if inbox:
            self.svc.process_acked(inbox)        # opens the thread (SlackChat.open_thread), then the session

    def _receive(self, key: str, item: dict, ack, tell=None) -> int | None:
        """Write to the inbox, then ack; a store that refuses is said (in the ack, or by tell(text)
        after it), and nothing is done. None also for a redelivery (already in the inbox)."""
        try:
            inbox = self.svc.receive(key, item)
        except sqlite3.Error as e:
            log.error("inbox write refused for %s: %s", key, e)
            refused = f"{store_problem(e)}; nothing was done. Please try again in a moment."
            if tell is None:
                ack(refused)
            else:
                ack()
                tell(refused)
            return None
        ack()
        return inbox

    # ------------------------------------------------------------------ events (acked by Bolt)

    def intake(self, body: dict, context: dict, next) -> None:
        """Middleware: an event that means something to a session goes into the inbox before Bolt
        acknowledges it. A store that refuses raises, so Slack gets an error and redelivers."""
        if body.get("type") == "event_callback":
            event = body.get("event") or {}
            item = self._event_item(event, context.get("bot_user_id"))
            if item is not None:
                try:
                    context["kernelbot_inbox"] = self.svc.receive(body.get("event_id") or None, item)
                except sqlite3.Error as e:
                    self._tell_event(event, f"{store_problem(e)}. Slack sends this again shortly; if it still "
                                            "fails, say it again once the bot host is fixed.")
                    raise
        next()

    def _tell_event(self, event: dict, text: str) -> None:
        item = event.get("item") or {}
        channel = event.get("channel") or item.get("channel")
        try:
            self.chat.tell(channel, event.get("user", ""), text, event.get("thread_ts") or item.get("ts"))
        except Exception as e:                              # told nothing: Slack's retry still comes
            log.warning("could not tell %s that an event was not saved: %s", event.get("user"), e)

    def _event_item(self, event: dict, bot_user: str | None) -> dict | None:
        kind = event.get("type")
        if kind == "app_mention":
            return self._mention_item(event, bot_user)
        if kind == "message":
            return self._reply_item(event, bot_user)
        if kind == "reaction_added":
            return self._reaction_item(event)
        return None

    def _mention_item(self, event: dict, bot_user: str | None) -> dict | None:
        channel, thread = event.get("channel", ""), event.get("thread_ts")
        if not channel or self.chat.session_in_thread(channel, thread):
            return None                                     # a reply in a session: a message event has it
        request = slack_text(event.get("text", ""), bot_user)
        if request.lower() in ("", "help"):
            return None
        root = thread or event.get("ts", "")
        return start_item(request, event.get("user", ""), channel, root, root=message_id(channel, root))

    def _reply_item(self, event: dict, bot_user: str | None) -> dict | None:
        thread = event.get("thread_ts")
        person = event.get("subtype") in (None, "thread_broadcast") and not event.get("bot_id")
        if not person or thread in (None, event.get("ts")):
            return None                                     # edits, deletions, bots, top-level chatter
        sid = self.chat.session_in_thread(event.get("channel", ""), thread)
        s = self.svc.session(sid) if sid else None
        if s is None or not s.active:                       # talk after the session ended is just talk
            return None
        return event_item(s.id, reply_event(s, event.get("user", ""), slack_text(event.get("text", ""), bot_user)))

    def _reaction_item(self, event: dict) -> dict | None:
        item = event.get("item") or {}
        if item.get("type") != "message" or not is_thumbs_up(event.get("reaction", "")):
            return None
        card = self.chat.card_at(item.get("channel", ""), item.get("ts", ""))
        if not card or card["kind"] != "revision":
            return None
        return event_item(card["session_id"], Approve(card["stage"], card["rev"], event.get("user", "")))

    def on_mention(self, event: dict, context: dict) -> None:
        if context.get("kernelbot_inbox"):
            self.svc.process_acked(context["kernelbot_inbox"])
            return
        request = slack_text(event.get("text", ""), context.get("bot_user_id"))
        in_session = self.chat.session_in_thread(event.get("channel", ""), event.get("thread_ts"))
        if event.get("channel") and not in_session and request.lower() in ("", "help"):
            self.chat.tell(event["channel"], event.get("user", ""), HELP, event.get("thread_ts"))

    def on_taken_in(self, context: dict) -> None:
        """A reply or a reaction: intake has put it in the inbox if it meant something to a session."""
        if context.get("kernelbot_inbox"):
            self.svc.process_acked(context["kernelbot_inbox"])

    # ------------------------------------------------------------------ buttons and modals

    def on_button(self, ack, body: dict, action: dict) -> None:
        ref = self._button_ref(body, action)
        if ref is None:
            ack()
            return
        sid, stage, rev = ref
        user = body["user"]["id"]
        kind = action["action_id"].removeprefix(sb.PREFIX)
        ev = Cancel(user) if kind == "cancel" else (Approve if kind == "approve" else Regenerate)(stage, rev, user)
        key = ":".join(["action", action.get("action_ts", ""), body.get("container", {}).get("message_ts", ""),
                        action["action_id"], user])
        self._dispatch(sid, ev, key, body, ack)

    def on_open_correct(self, ack, body: dict, action: dict) -> None:
        ack()
        ref = self._button_ref(body, action)
        if ref:
            self.chat.open_modal(body["trigger_id"], sb.correction_modal(action["value"], ref[1]))

    def on_open_edit(self, ack, body: dict, action: dict) -> None:
        ack()
        ref = self._button_ref(body, action)
        s = self._session_or_tell(ref[0], body) if ref else None
        rev = s.revision(ref[1], ref[2]) if s else None
        if rev:
            self.chat.open_modal(body["trigger_id"], sb.edit_modal(action["value"], rev.stage, rev.content))

    def on_correct_submitted(self, ack, body: dict, view: dict) -> None:
        ref = self._modal_ref(view)
        if ref is None:
            ack()
            return
        self._dispatch(ref[0], Correct(ref[1], ref[2], body["user"]["id"], sb.modal_input(view, "text")),
                       f"view:{view.get('id')}", body, ack)

    def on_edit_submitted(self, ack, body: dict, view: dict) -> None:
        ref = self._modal_ref(view)
        typed = sb.modal_input(view, "code")
        content = reply_code(typed) or typed
        problem = validate_artifact(ref[1], content) if ref else None
        if problem:                                         # shown in the modal, which stays open
            ack(response_action="errors", errors={"code": sb.clip(problem, 150)})
            return
        if ref is None:
            ack()
            return
        self._dispatch(ref[0], Edit(ref[1], ref[2], body["user"]["id"], content), f"view:{view.get('id')}", body, ack)

    def _button_ref(self, body: dict, action: dict) -> tuple[str, str, int] | None:
        try:
            return cards.parse_action_value(action.get("value", ""))
        except ValueError:
            self._tell(body, "That button does not belong to a kernelbot session (or its data is damaged); "
                             "nothing was done.")
            return None

    @staticmethod
    def _modal_ref(view: dict) -> tuple[str, str, int] | None:
        try:
            return cards.parse_action_value(view.get("private_metadata", ""))
        except ValueError:
            log.warning("modal %s carries no kernelbot card reference; ignored", view.get("id"))
            return None

    def _dispatch(self, sid: str, ev: Event, key: str, body: dict, ack) -> None:
        """Into the inbox, ack, then apply. A store that refuses is told to the person, privately."""
        inbox = self._receive(key, event_item(sid, ev), ack, lambda text: self._tell(body, text))
        if inbox and self.svc.process_acked(inbox) is None:
            self._unknown(sid, body)

    def _session_or_tell(self, sid: str, body: dict) -> Session | None:
        s = self.svc.session(sid)
        if s is None:
            self._unknown(sid, body)
        return s

    def _unknown(self, sid: str, body: dict) -> None:
        self._tell(body, f"Session `{sid}` is not in this bot's store (another installation started it, or the "
                         "store was reset); nothing was done.")

    def _tell(self, body: dict, text: str) -> None:
        channel = (body.get("channel") or {}).get("id") or (body.get("container") or {}).get("channel_id")
        user = (body.get("user") or {}).get("id")
        if channel and user:
            self.chat.tell(channel, user, text, (body.get("container") or {}).get("thread_ts"))
        else:
            log.warning("cannot answer %s (no channel or user in the payload): %s", body.get("type"), text)


# ------------------------------------------------------------------ running it

def build_app(svc: Service, chat: SlackChat, signing_secret: str = "") -> App:
    """The Bolt app on the chat's WebClient (so KERNELBOT_SLACK_API_URL applies to Bolt's calls too)."""
    app = App(client=chat.client, signing_secret=signing_secret, logger=log)
    SlackBot(svc, chat).register(app)
    return app


class _ThreadingWSGIServer(ThreadingMixIn, WSGIServer):
    daemon_threads = True


class _LoggingHandler(WSGIRequestHandler):
    def log_message(self, fmt: str, *args) -> None:
        log.debug("http: " + fmt, *args)


class _SlackEndpoint(SlackRequestHandler):
    """Bolt's WSGI handler, answering 400 to a body it cannot parse (Bolt parses before it verifies)."""

    def dispatch(self, request: WsgiHttpRequest) -> BoltResponse:
        try:
            bolt_request = BoltRequest(body=request.get_body(), query=request.query_string,
                                       headers=request.get_headers())
        except ValueError as e:
            log.warning("malformed request body ignored: %s", e)
            return BoltResponse(status=400, body="malformed payload")
        return self.app.dispatch(bolt_request)


def http_server(app: App, port: int, host: str = "0.0.0.0") -> WSGIServer:
    """Serves POST /slack/events; Bolt verifies each request's signature (401 when it is wrong)."""
    return make_server(host, port, _SlackEndpoint(app, path="/slack/events"),
                       server_class=_ThreadingWSGIServer, handler_class=_LoggingHandler)


def _env(name: str, why: str) -> str:
    value = os.environ.get(name, "")
    if not value:
        raise SystemExit(f"kernelbot slack: set {name} ({why}); see 'Slack' in README.md")
    return value


def assemble(cfg: Config, http: bool) -> tuple[Service, App, str]:
    """The service and Bolt app from the environment's Slack credentials, plus the app-level
    token Socket Mode connects with (empty over HTTP)."""
    from bot.app import make_service, messages
    token = _env("SLACK_BOT_TOKEN", "the bot token, xoxb-...")
    secret = _env("SLACK_SIGNING_SECRET", "the app's signing secret") if http else ""
    app_token = "" if http else _env("SLACK_APP_TOKEN", "an app-level token with connections:write, xapp-...")
    chat = SlackChat(web_client(token, os.environ.get("KERNELBOT_SLACK_API_URL")), messages(cfg, PLATFORM))
    svc = make_service(cfg, chat)
    return svc, build_app(svc, chat, secret), app_token


def main(cfg: Config, http: bool = False, port: int = 3000) -> int:
    """Run the bot on Slack until interrupted: Socket Mode, or HTTP on `port` with `http`."""
    from bot.app import serving
    svc, app, app_token = assemble(cfg, http)
    try:
        with serving(cfg, svc):
            if http:
                server = http_server(app, port)
                print(f"kernelbot on Slack over HTTP: POST http://0.0.0.0:{port}/slack/events", flush=True)
                server.serve_forever()
            else:
                from slack_bolt.adapter.socket_mode import SocketModeHandler
                print("kernelbot on Slack in Socket Mode", flush=True)
                SocketModeHandler(app, app_token).start()
    except KeyboardInterrupt:
        pass
    return 0
