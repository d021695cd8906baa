"""The `kernelbot` command."""
from __future__ import annotations

import argparse
import getpass
import json
import logging
import os
import sys
import tempfile
from pathlib import Path

from bot.generators.hybrid import MODES
from bot.workflow.stages import STAGES
from runner.protocol import check_backend

GENERATOR_HELP = ("offline: the built-in generator; llm: the LLM endpoint (KERNELBOT_LLM_BASE_URL) for every stage; "
                  "hybrid: offline where it understands the request, else the LLM (default with an endpoint)")


def _backend(name: str) -> str:
    try:
        return check_backend(name)
    except ValueError as e:
        raise argparse.ArgumentTypeError(str(e)) from None


BACKEND_HELP = "runner backend: cpu, cuda or cuda-NAME (default: cuda if a GPU is visible)"


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="kernelbot", description="From 'I need a fast kernel for X' to a "
                                "reviewed, tested, benchmarked Triton kernel.")
    p.add_argument("-v", "--verbose", action="store_true", help="log what the bot does")
    p.add_argument("--version", action="version", version=f"kernelbot {_version()}")
    sub = p.add_subparsers(dest="command", required=True)

    chat = sub.add_parser("chat", help="the conversation in this terminal (embedded default)")
    chat.add_argument("--backend", type=_backend, help=BACKEND_HELP)
    chat.add_argument("--generator", choices=MODES, help=GENERATOR_HELP)

    run = sub.add_parser("run", help="one request through all six stages")
    run.add_argument("request", nargs="?", help='e.g. "relu(x + y) for fp16 4096x4096"; leave it out with --resume, '
                                                "or to continue the unfinished session of an earlier run into --out")
    run.add_argument("--resume", metavar="ID", help="continue this session (one whose run died) instead of starting one")
    run.add_argument("--yes", action="store_true", help="approve every stage as it is posted")
    run.add_argument("--out", type=Path, required=True, help="directory for the artifacts and report")
    run.add_argument("--backend", type=_backend, help=BACKEND_HELP)
    run.add_argument("--timeout", type=float, help="give up after this many seconds")
    run.add_argument("--generator", choices=MODES, help=GENERATOR_HELP)

    runner = sub.add_parser("runner", help="a runner process: takes jobs of one backend from the queue")
    runner.add_argument("--backend", type=_backend, required=True, help="the queue this runner serves: cpu, cuda or "
                                                                        "cuda-NAME (a host class, e.g. cuda-h200)")
    runner.add_argument("--queue", help="queue URL: sqlite:///PATH or redis://HOST:PORT/DB "
                                        "(default KERNELBOT_QUEUE_URL or the local SQLite queue)")
    pinned = runner.add_mutually_exclusive_group()
    pinned.add_argument("--gpu", type=int, help="the one GPU this runner pins (CUDA_VISIBLE_DEVICES)")
    pinned.add_argument("--gpus", help="a fleet: one runner per GPU, 'all' or indices such as 0,1,3, each "
                                       "restarted when it dies")

    verify = sub.add_parser("verify", help="run the trusted harness on files you bring")
    verify.add_argument("--spec", type=Path, required=True, help="the operator spec, spec.json (docs/CONTRACTS.md)")
    verify.add_argument("--reference", type=Path, required=True, help="the PyTorch ground truth, reference.py")
    verify.add_argument("--kernel", type=Path, required=True, help="the Triton kernel and launcher, kernel.py")
    verify.add_argument("--backend", type=_backend, help="where to check it: cpu (Triton's interpreter) or cuda "
                                                         "(default: cuda if a GPU is visible)")
    verify.add_argument("--json", action="store_true", help="print the result as JSON")

    slack = sub.add_parser("slack", help="the bot on Slack: Socket Mode, or an HTTP app with --http")
    slack.add_argument("--http", action="store_true", help="serve POST /slack/events (needs SLACK_SIGNING_SECRET)")
    slack.add_argument("--port", type=int, default=3000, help="HTTP port with --http (default 3000)")
    slack.add_argument("--backend", type=_backend, help=BACKEND_HELP)

    discord = sub.add_parser("discord", help="the bot on Discord: /kernel in your servers, a thread per session")
    discord.add_argument("--guild", type=int, action="append", default=[], metavar="ID",
                         help="a server (guild) id to sync /kernel to, at once; repeat for several "
                              "(default: globally, which Discord can take an hour to show)")
    discord.add_argument("--backend", type=_backend, help=BACKEND_HELP)

    bench = sub.add_parser("bench", help="the whole pipeline for every catalog operator on a GPU runner, "
                                         "one table and the performance targets")
    bench.add_argument("--out", type=Path, required=True, help="directory for each entry's run and the table")
    bench.add_argument("--only", help="comma-separated catalog entries (default: all): "
                                      "add,softmax,matmul,... (see bot/catalog.py)")
    bench.add_argument("--backend", type=_backend, default="cuda", help="the runner backend (default cuda)")
    bench.add_argument("--gpus", default=None, help="GPU indices to run entries on in parallel, one entry per GPU "
                                                    "at a time (default: CUDA_VISIBLE_DEVICES, else 0)")
    bench.add_argument("--timeout", type=float, default=1800, help="seconds per entry (default 1800)")
    bench.add_argument("--budget", type=float, help="seconds for the whole run: entries that would start later "
                                                    "are skipped, running ones are cancelled at the end")
    bench.add_argument("--grid", choices=["llm"], help="the entries over a grid of shapes instead of the catalog's "
                                                       "own: llm (hidden 2K-8K, vocabularies 32K-152K, 1-16K tokens, "
                                                       "decode and prefill matmuls; bf16) with issue 25's targets")
    bench.add_argument("--table-only", action="store_true", help="run nothing: the table and targets from the "
                                                                 "reports an earlier run left in --out")

    export = sub.add_parser("export", help="write a session's files and report into a directory, at any stage")
    export.add_argument("session", help="the session id (kernelbot status lists them)")
    export.add_argument("--out", type=Path, required=True, help="directory for the files (created if missing)")

    cancel = sub.add_parser("cancel", help="cancel a session (one whose run died, say)")
    cancel.add_argument("session", help="the session id (kernelbot status lists them)")

    status = sub.add_parser("status", help="sessions in the store, or one session in full")
    status.add_argument("session", nargs="?", help="one session in full (default: a line for every session)")
    status.add_argument("--show", metavar="STAGE:REV", help="with a session: print one revision in full, e.g. "
                                                            f"kernel:2; stages: {', '.join(STAGES)} (attempts of the "
                                                            "LLM's repair loop included)")
    return p


def main(argv: list[str] | None = None) -> int:
    try:
        return _main(argv)
    except BrokenPipeError:             # `kernelbot status | head`: the reader is gone, and that is fine
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 0


def _main(argv: list[str] | None) -> int:
    args = _parser().parse_args(argv)
    if getattr(args, "show", None) and not args.session:
        _parser().error("--show needs a session: kernelbot status SESSION --show kernel:2")
    logging.basicConfig(level=logging.INFO if args.verbose else logging.WARNING,
                        format="%(asctime)s %(name)s %(levelname)s %(message)s")
    from bot.config import Config
    cfg = Config.from_env(backend=getattr(args, "backend", None), generator=getattr(args, "generator", None))
    commands = {"chat": _chat, "run": _run, "runner": _runner, "verify": _verify, "status": _status, "cancel": _cancel,
                "slack": _slack, "discord": _discord, "bench": _bench, "export": _export}
    return commands[args.command](args, cfg)


def _chat(args, cfg) -> int:
    from bot.chat.console.repl import chat
    return chat(cfg)


def _run(args, cfg) -> int:
    from bot.chat.console.autorun import run
    problem = _unwritable(args.out)
    if problem:
        print(f"kernelbot run: --out {args.out}: {problem}", file=sys.stderr)
        return 2
    return run(args.request, args.out, cfg, yes=args.yes, timeout_s=args.timeout, resume=args.resume)


def _export(args, cfg) -> int:
    from bot.workflow import report
    from bot.workflow.store import Store
    s = Store(cfg.db_path).load(args.session)
    if s is None:
        print(f"kernelbot export: no session {args.session!r} in {cfg.db_path}; `kernelbot status` lists them",
              file=sys.stderr)
        return 1
    problem = _unwritable(args.out)
    if problem:
        print(f"kernelbot export: --out {args.out}: {problem}", file=sys.stderr)
        return 2
    for path in report.export(s, args.out):
        print(path)
    print(f"session {s.id} ({s.status}, at {s.stage}): approved revisions, else the latest, and the report")
    return 0


def _unwritable(out: Path) -> str:
    """Why the artifacts could not be written into out, checked before any work ('' when they can):
    the directory is made now, and a file written in it."""
    if out.exists() and not out.is_dir():
        return "is a file, not a directory; name a directory (it is created if missing)"
    try:
        out.mkdir(parents=True, exist_ok=True)
        with tempfile.TemporaryFile(dir=out):
            pass
    except OSError as e:
        return f"cannot be created or written ({e.strerror or e}); name a directory you can write"
    return ""


def _version() -> str:
    from importlib.metadata import PackageNotFoundError, version
    try:
        return version("kernelbot")
    except PackageNotFoundError:
        return "(not installed)"


def _bench(args, cfg) -> int:
    from bot import bench_grid, catalog, catalog_bench
    names = args.only.split(",") if args.only else None
    try:
        entries = bench_grid.entries(args.grid, names) if args.grid else catalog.by_name(names)
    except ValueError as e:
        print(f"kernelbot bench: {e}", file=sys.stderr)
        return 2
    gpus = (args.gpus or os.environ.get("CUDA_VISIBLE_DEVICES") or "0").split(",")
    grid = {"targets_of": bench_grid.targets, "stem": f"grid-{args.grid}"} if args.grid else {}
    return catalog_bench.main(entries, args.out, args.backend, [g.strip() for g in gpus if g.strip()], args.timeout,
                              args.table_only, args.budget, **grid)


def _slack(args, cfg) -> int:
    from bot.chat.slack.app import main as slack_main
    return slack_main(cfg, http=args.http, port=args.port)


def _discord(args, cfg) -> int:
    from bot.chat.discord.app import main as discord_main
    return discord_main(cfg, args.guild)


def _runner(args, cfg) -> int:
    if args.gpus is not None:
        from runner.fleet import FleetError, supervise
        try:
            return supervise(args.backend, args.queue or cfg.queue_url, args.gpus, heartbeat_s=cfg.heartbeat_s)
        except FleetError as e:
            print(f"kernelbot runner: {e}", file=sys.stderr)
            return 2
    from runner.worker import serve
    serve(args.backend, args.queue or cfg.queue_url, gpu=args.gpu, heartbeat_s=cfg.heartbeat_s)
    return 0


def _verify(args, cfg) -> int:
    from runner.verify import format_result, verify
    for path in (args.spec, args.reference, args.kernel):
        if not path.is_file():
            print(f"kernelbot verify: {path} is not a file", file=sys.stderr)
            return 2
    print(f"checking {args.kernel} against {args.reference} on {cfg.backend} (the trusted harness, sandboxed) ...",
          file=sys.stderr, flush=True)
    result = verify(args.spec, args.reference, args.kernel, cfg.backend, progress=_progress_printer())
    print(json.dumps(result, indent=2) if args.json else format_result(result))
    return 0 if result.get("status") == "pass" else 1


def _progress_printer():
    """A progress callback: each new line on stderr (stdout stays the result), with the time so far."""
    import time
    start, last = time.monotonic(), [""]

    def show(line: str) -> None:
        if line != last[0]:
            last[0] = line
            print(f"  [{time.monotonic() - start:4.0f} s] {line}", file=sys.stderr, flush=True)
    return show


def _status(args, cfg) -> int:
    from bot.chat.console.chat import render
    from bot.workflow import cards
    from bot.workflow.cards import format_table
    from bot.workflow.store import Store
    store = Store(cfg.db_path)
    if args.session:
        s = store.load(args.session)
        if s is None:
            print(f"no session {args.session!r} in {cfg.db_path}", file=sys.stderr)
            return 1
        if args.show:
            return _show_revision(s, args.show)
        print(render(cards.summary_card(s)) + _driver_note(store, s))
        print("\n".join(format_table(_revision_rows(s))))
        return 0
    sessions = store.sessions(store.session_ids())
    for s in sessions:
        tokens = f"  {s.usage['total_tokens']} tokens" if s.usage.get("total_tokens") else ""
        print(f"{s.id}  {s.status:<9} {s.stage:<15} {s.request[:70]}{tokens}{_driver_note(store, s)}")
    print("\n".join(runner_lines(cfg.queue_url, {"cpu", "cuda", *(s.backend for s in sessions)})))
    return 0


def runner_lines(queue_url: str, backends: set[str]) -> list[str]:
    """The runners alive on the queue, per backend: host, GPU, device, and the job each runs."""
    from bot.workflow.cards import RUNNER_SEEN_S, runner_line
    from runner.queue import JobQueue
    lines = [f"runner {backend:<6} {runner_line(r)}" for backend in sorted(backends)
             for r in sorted(JobQueue(queue_url, backend).runners(RUNNER_SEEN_S), key=lambda r: r.get("runner", ""))]
    return lines or ["no runner alive on the queue"]


def _cancel(args, cfg) -> int:
    from bot.app import make_service
    from bot.chat.console.chat import ConsoleChat
    from bot.workflow.events import Cancel
    svc = make_service(cfg, ConsoleChat())
    try:
        s = svc.store.load(args.session)
        if s is None or not s.active:
            print(f"kernelbot cancel: {'no session ' + repr(args.session) if s is None else f'session {s.id} is ' + s.status}"
                  "; `kernelbot status` lists the sessions", file=sys.stderr)
            return 1
        s = svc.dispatch(s.id, Cancel(getpass.getuser() or "you"))
        print(f"session {s.id}: {s.status}")
        return 0
    finally:
        svc.shutdown()


def _driver_note(store, s) -> str:
    """For an active session a `kernelbot run` drove: whether that run is gone, and what to do."""
    from bot.workflow.drivers import driver_alive
    record = store.driver(s.id) if s.active else None
    if record is None:
        return ""
    if driver_alive(record):
        return f"  (driven by pid {record['pid']} on {record['host']})"
    return (f"  (its run died: `kernelbot run --resume {s.id} --out {record['out_dir']}` continues it, "
            f"`kernelbot cancel {s.id}` ends it)")


def _revision_rows(s) -> list[list[str]]:
    from bot.generators.interface import VERIFICATION
    from bot.workflow import stages
    rows = [["stage", "rev", "origin", "author", "verification"]]
    for r in s.revisions:
        rows.append([stages.label(r.stage), f"r{r.rev}", r.origin, r.author, r.summary.get(VERIFICATION, "")[:90]])
    return rows


def _show_revision(s, which: str) -> int:
    from bot.chat.console.chat import render
    from bot.workflow import cards
    stage, _, rev = which.partition(":")
    r = s.revision(stage, int(rev)) if rev.isdigit() else None
    if r is None:
        print(f"no revision {which!r} in session {s.id}; `kernelbot status {s.id}` lists them (e.g. kernel:2)",
              file=sys.stderr)
        return 1
    print(render(cards.revision_card(s, r)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
