"""The `ba-agent` command. Subcommands import what they need, so each starts fast."""

from __future__ import annotations

import argparse
import asyncio
import errno
import gc
import logging
import os
import socket
import sys
from typing import TYPE_CHECKING, Any, NoReturn

if TYPE_CHECKING:
    from gateway.config import Settings

# The settings and the start-up checks load pydantic and the core: imported on first call, after
# `main` has turned the cyclic collector off.


def load_settings(**overrides: Any) -> Settings:
    from gateway.config import load_settings as load

    return load(**overrides)


def verify_start_up(settings: Settings) -> None:
    from gateway.cli.startup_checks import verify_start_up as verify

    verify(settings)


def _configure_logging(settings: Settings) -> None:
    from gateway.logs import configure_logging

    quiet = [name for platform in settings.platforms for name in platform.quiet_loggers]
    configure_logging(settings.log_level, settings.log_format, settings.service_name, settings.environment, quiet)
    if settings.otel_endpoint:
        from agent_core.tracing import configure_tracing

        configure_tracing(settings.otel_endpoint, settings.otel_sample_rate, settings.service_name, settings.environment)


def _listening_socket(host: str, port: int) -> socket.socket:
    """Bind the service's port first, so a taken port stops start-up before anything runs."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        sock.bind((host, port))
    except OSError as exc:
        sock.close()
        reason = "is in use" if exc.errno == errno.EADDRINUSE else f"cannot be used ({exc.strerror})"
        from gateway.cli.startup_checks import StartupError

        raise StartupError(f"port {port} on {host} {reason}; set BA_PORT or --port") from None
    sock.listen(1024)
    sock.setblocking(False)
    return sock


def _serve(args: argparse.Namespace) -> int:
    overrides = {k: v for k, v in {"BA_HOST": args.host, "BA_PORT": args.port}.items() if v is not None}
    settings = load_settings(**overrides)
    sock = _listening_socket(settings.host, settings.port)
    _configure_logging(settings)
    verify_start_up(settings)
    # Before prometheus-client is imported: it picks multiprocess mode at import time.
    from gateway.service.metrics_dir import start_multiprocess, stop_multiprocess

    metrics_dir = start_multiprocess(settings.data_dir)

    from aiohttp import web

    from gateway.service.app import RUNNER_OPTIONS, create_app

    app = create_app(settings)

    async def freeze_start_up(_app: web.Application) -> None:
        # What start-up built lives as long as the process: keep it out of the cyclic
        # collector's scans. Only once the app has started: its start-up (migrations, pools,
        # worker processes) builds as much again, and a full pass over that stalled
        # acknowledgements by 100+ ms under load.
        gc.freeze()
        gc.enable()

    app.on_startup.append(freeze_start_up)  # after the app's own start-up
    print(f"BA-Agent Gateway listening on http://{settings.host}:{settings.port}", flush=True)
    try:
        web.run_app(app, sock=sock, print=None, **RUNNER_OPTIONS)
    finally:
        stop_multiprocess(metrics_dir)
    gc.unfreeze()  # let extension modules see their objects released at exit
    return 0


def _worker(args: argparse.Namespace) -> int:
    from gateway.service.worker import run_worker

    settings = load_settings()
    _configure_logging(settings)
    if not args.supervised:  # serve checked the sources before starting its workers
        verify_start_up(settings)
    gc.enable()  # a long-running process (see main)
    if args.supervised:
        # Beside its serve on the same machine, an answer (seconds of a model's stream) can
        # wait for the CPU; an acknowledgement cannot (the platform retries after 3 s). With
        # workers 10 steps nicer, the scheduler runs serve first whenever both are ready:
        # ingest bench, SQLite, 8 turns streaming: ack p99 4.8 -> 4.0 ms.
        os.nice(10)
    # Supervised, the first worker checks the model for serve; on its own, each worker does.
    check_model = args.check_model or not args.supervised
    asyncio.run(run_worker(settings, supervised=args.supervised, check_model=check_model))
    return 0


def _chat(_args: argparse.Namespace) -> int:
    from gateway.cli.chat import run_chat

    settings = load_settings()
    logging.basicConfig(level=logging.WARNING)
    verify_start_up(settings)
    gc.enable()  # a long-running process (see main)
    asyncio.run(run_chat(settings))
    return 0


def _db_upgrade(_args: argparse.Namespace) -> int:
    from gateway.migrate import upgrade

    settings = load_settings()
    revision = upgrade(settings.effective_database_url)
    print(f"database upgraded to revision {revision}")
    return 0


def _skills_list(_args: argparse.Namespace) -> int:
    from agent_core.skills.loader import load_skill_catalog

    catalog = load_skill_catalog(load_settings(platforms=()).skills_dir)
    for skill in catalog:
        flags = " (not model-invocable)" if skill.frontmatter.disable_model_invocation else ""
        print(f"{skill.name}{flags}\n    {skill.frontmatter.description}\n    {skill.directory}")
    for error in catalog.errors:
        print(f"ERROR {error}")
    return 1 if catalog.errors else 0


def _stats(args: argparse.Namespace) -> int:
    from gateway.cli.stats import UnknownThread, print_stats

    try:
        asyncio.run(print_stats(load_settings(), args.thread))
    except UnknownThread as exc:
        print(f"ba-agent: {exc}", file=sys.stderr)
        return 1
    return 0


def _threads(args: argparse.Namespace) -> int:
    from gateway.cli.stats import UnknownThread, print_threads

    try:
        asyncio.run(print_threads(load_settings(), args.limit))
    except UnknownThread as exc:
        print(f"ba-agent: {exc}", file=sys.stderr)
        return 1
    return 0


def _memory(args: argparse.Namespace) -> int:
    from agent_core.memory import MemoryScopeName, MemoryStore

    settings = load_settings()
    store = MemoryStore(settings.data_dir.resolve() / "memory")
    scope = MemoryScopeName.CHANNEL if args.channel else MemoryScopeName.USER if args.user else MemoryScopeName.WORKSPACE
    name = args.channel or args.user
    if args.memory_command == "show":
        print(store.show(args.platform, args.workspace, scope, name))
    elif args.set is not None:
        print(f"wrote {store.write(args.platform, args.workspace, scope, name, args.set)}")
    else:
        store.edit(args.platform, args.workspace, scope, name)
    return 0


def _tool_run(args: argparse.Namespace) -> int:
    from gateway.cli.tool_run import run_tool

    settings = load_settings(platforms=())  # answers no chat: no platform's settings to read
    verify_start_up(settings)
    run_as = (args.platform, args.user, args.channel)
    return asyncio.run(run_tool(settings, args.name, args.json, args.thread, run_as))


def _tool_list(args: argparse.Namespace) -> int:
    from gateway.cli.tool_run import list_tools

    return list_tools(load_settings(platforms=()), args.json)


def build_parser() -> argparse.ArgumentParser:
    from gateway.cli.audit import register as register_audit_commands
    from gateway.cli.catalog import register as register_catalog_commands
    from gateway.cli.feedback import register as register_feedback_commands
    from gateway.cli.metrics import register as register_metric_commands
    from gateway.cli.monitors import register as register_monitor_commands

    parser = argparse.ArgumentParser(prog="ba-agent", description="BA-Agent Gateway")
    commands = parser.add_subparsers(dest="command", required=True)

    serve = commands.add_parser("serve", help="run the gateway service")
    serve.add_argument("--host", help="listen address (default 127.0.0.1, or BA_HOST)")
    serve.add_argument("--port", type=int, help="listen port (default 8080, or BA_PORT)")
    serve.set_defaults(func=_serve)

    worker = commands.add_parser("worker", help="answer accepted events (no HTTP); serve starts its own")
    worker.add_argument("--supervised", action="store_true", help=argparse.SUPPRESS)
    worker.add_argument("--check-model", action="store_true", help=argparse.SUPPRESS)
    worker.set_defaults(func=_worker)

    chat = commands.add_parser("chat", help="chat with the agent in this terminal")
    chat.set_defaults(func=_chat)

    db = commands.add_parser("db", help="database maintenance")
    db_commands = db.add_subparsers(dest="db_command", required=True)
    db_upgrade = db_commands.add_parser("upgrade", help="apply database migrations")
    db_upgrade.set_defaults(func=_db_upgrade)

    skills = commands.add_parser("skills", help="skills")
    skills_commands = skills.add_subparsers(dest="skills_command", required=True)
    skills_list = skills_commands.add_parser("list", help="list loaded skills and load errors")
    skills_list.set_defaults(func=_skills_list)

    stats = commands.add_parser("stats", help="per-tool and per-model call statistics")
    stats.add_argument("--thread", help="only this conversation (thread id)")
    stats.set_defaults(func=_stats)

    threads = commands.add_parser("threads", help="recent conversations and their ids")
    threads.add_argument("--limit", type=int, default=20, help="how many (default 20)")
    threads.set_defaults(func=_threads)

    tool = commands.add_parser("tool", help="run agent tools outside a conversation")
    tool_commands = tool.add_subparsers(dest="tool_command", required=True)
    tool_run = tool_commands.add_parser("run", help="run one tool; prints its raw result as JSON")
    tool_run.add_argument("name", help="tool name, e.g. sql_query")
    tool_run.add_argument("--json", default="{}", help="the tool's input as a JSON object")
    tool_run.add_argument("--thread", default="cli", help="conversation whose workspace to use")
    tool_run.add_argument("--platform", help="run as a chat user of this platform (with --user)")
    tool_run.add_argument("--user", help="that user's id: the access policy applies as in their DM")
    tool_run.add_argument("--channel", help="…or as in this channel, whose audience then decides")
    tool_run.set_defaults(func=_tool_run, one_shot=True)
    tool_list = tool_commands.add_parser("list", help="the tools: names, what they do, input fields")
    tool_list.add_argument("--json", action="store_true", help="each tool's full input JSON schema")
    tool_list.set_defaults(func=_tool_list)

    memory = commands.add_parser("memory", help="show or edit the agent's memory files")
    memory_commands = memory.add_subparsers(dest="memory_command", required=True)
    for action in ("show", "edit"):
        sub = memory_commands.add_parser(action, help=f"{action} one memory scope")
        sub.add_argument("--platform", required=True, help="slack, feishu or console")
        sub.add_argument("--workspace", required=True, help="Slack team id / Feishu tenant key")
        who = sub.add_mutually_exclusive_group()
        who.add_argument("--channel", help="a channel's memory (default: the workspace's)")
        who.add_argument("--user", help="a user's memory (loaded only in their DMs)")
        if action == "edit":
            sub.add_argument("--set", help="replace the file with this text instead of opening $EDITOR")
        sub.set_defaults(func=_memory)
    register_metric_commands(commands)
    register_catalog_commands(commands)
    register_audit_commands(commands)
    register_monitor_commands(commands)
    register_feedback_commands(commands)
    return parser


def main(argv: list[str] | None = None) -> int:
    # Loading a command creates some hundred thousand long-lived objects (models, SQL grammars)
    # that the cyclic collector would otherwise scan again and again while they load: a third of
    # a short command's run time. So this module imports nothing heavy before this line, and
    # commands turn the collector back on once they are built (see `gateway.cli.tool_run`).
    gc.disable()
    # pydantic reads every installed distribution's metadata for plugins as it builds its
    # first model: a tenth of a short command's run. The service uses no pydantic plugin
    # (set the variable empty to have pydantic look for them anyway).
    os.environ.setdefault("PYDANTIC_DISABLE_PLUGINS", "__all__")
    from gateway.cli.startup_checks import StartupError
    from gateway.config import ConfigError

    args = build_parser().parse_args(argv)
    try:
        code: int = args.func(args)
    except ConfigError as exc:
        print(f"ba-agent: {exc}", file=sys.stderr)
        return 2
    except StartupError as exc:
        print(f"ba-agent: {exc}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        return 130
    except BrokenPipeError:
        return _reader_gone()
    if argv is None and getattr(args, "one_shot", False):  # the program itself, not a caller
        _leave(code)
    return code


def _reader_gone() -> int:
    """The reader of our output left (`| head`): stop quietly, as `cat` does. Output still
    buffered for the closed pipe is dropped, so the interpreter's final flush cannot raise a
    second BrokenPipeError at exit."""
    devnull = os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, sys.stdout.fileno())
    os.close(devnull)
    return 141  # 128 + SIGPIPE, what a shell reports for a command killed by it


def _leave(code: int) -> NoReturn:
    """End a finished one-shot command without the interpreter's teardown.

    The command has closed what it opened by now (DuckDB connections, the service database's
    engine, the event loop). What is left is the module graph start-up built, which teardown
    would take apart object by object, collector passes included: about 50 ms, a tenth of a
    `tool run` that scripts call in loops, for memory the operating system frees at exit anyway.
    """
    logging.shutdown()
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except (OSError, ValueError):  # a closed pipe (`| head`): nothing more to write to
            pass
    os._exit(code)

