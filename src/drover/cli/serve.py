"""``drover serve``: the HTTP API and web page under uvicorn, turns that outlive their clients.

It prints ``drover serve: listening on http://HOST:PORT`` once it accepts connections (with
``--port 0`` the port the system chose). SIGTERM or Ctrl-C stops it cleanly: every running turn
is interrupted — its work recorded, the turn ``interrupted`` and resumable by the next message
— the event streams end after the turns' terminal events, and then the server exits 0.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import os
import signal
import socket
import sys
from types import FrameType

import uvicorn

from drover.cli import serve_pool
from drover.cli.build import cli_agent
from drover.cluster import takeover
from drover.cluster.shared import DEFAULT_LEASE, Shared, is_shared
from drover.config.settings import Config, domain_entry, load_config
from drover.errors import ConfigError
from drover.journal.protocol import Store
from drover.journal.retention import Policy, keep
from drover.providers.base import Provider
from drover.providers.client_env import check_client_environment
from drover.providers.factory import server_config
from drover.runtime.hub import Hub
from drover.server import gc_settings, webhooks
from drover.server.app import create_app
from drover.server.config import ServerSettings
from drover.server.service import DEFAULT_PERMISSION_TIMEOUT, Service
from drover.telemetry.metrics import Metrics
from drover.tools.sandbox_proxy import local_names


def add_serve_options(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--host", default="127.0.0.1", help="address to listen on (127.0.0.1)")
    parser.add_argument("--port", type=int, default=8000, help="port (8000; 0: any free one)")
    parser.add_argument(
        "--token",
        action="append",
        default=[],
        help="accepted bearer token, repeatable (env DROVER_TOKEN, comma-separated; none); "
        "required beyond loopback and with --sandbox-network",
    )
    parser.add_argument(
        "--permission-timeout",
        type=float,
        default=DEFAULT_PERMISSION_TIMEOUT,
        help="seconds a permission request waits with no client connected, then is denied "
        "(%(default)s)",
    )
    parser.add_argument(
        "--heartbeat",
        type=float,
        default=15.0,
        help="seconds between keep-alive pings on an event stream (%(default)s)",
    )
    parser.add_argument(
        "--max-body",
        type=int,
        default=1024 * 1024,
        help="largest request body accepted, in bytes (%(default)s)",
    )
    parser.add_argument(
        "--allowed-host",
        action="append",
        default=[],
        metavar="NAME",
        help="a host name clients reach the server by (their Host header), repeatable; "
        "loopback names and the --host address are always allowed, any other gets 421 "
        "(none; required beyond loopback)",
    )
    parser.add_argument(
        "--cors-origin",
        action="append",
        default=[],
        metavar="ORIGIN",
        help="http(s)://host[:port] of another web page allowed to call the API, repeatable; "
        "requests from any other page are refused (none)",
    )
    scale = parser.add_argument_group("several processes (with --db postgresql://…)")
    scale.add_argument(
        "--redis",
        default=None,
        help="redis:// URL carrying live events between processes (env DROVER_REDIS); "
        "without it they follow the journal's log",
    )
    scale.add_argument(
        "--lease",
        type=float,
        default=None,
        help=f"seconds a turn's lease lasts without renewal before another process takes the "
        f"turn over (env DROVER_LEASE; {DEFAULT_LEASE:g})",
    )
    parser.add_argument(
        "--takeover",
        choices=("resume", "end"),
        default="resume",
        help="what the server does with a turn a dead process left running (found at start "
        "and every few seconds): end it interrupted and resume it (default), or only end it",
    )
    # Seconds between two looks for dead processes' turns (tests stretch it).
    parser.add_argument("--takeover-interval", type=float, default=None, help=argparse.SUPPRESS)
    scale.add_argument(
        "--workers",
        type=int,
        default=1,
        help="start N server processes sharing the port (SO_REUSEPORT; needs PostgreSQL)",
    )
    scale.add_argument("--reuse-port", action="store_true", help=argparse.SUPPRESS)
    hooks = parser.add_argument_group("webhooks (a turn's end, POSTed signed; see README)")
    hooks.add_argument(
        "--webhook",
        metavar="URL",
        default=None,
        help="http(s) URL told of every turn's end (env DROVER_WEBHOOK; none)",
    )
    hooks.add_argument(
        "--webhook-secret",
        metavar="SECRET",
        default=None,
        help=f"key of the HMAC-SHA256 signature of each delivery (env {webhooks.SECRET_ENV}); "
        "required with --webhook or --webhook-origin",
    )
    hooks.add_argument(
        "--webhook-origin",
        action="append",
        default=[],
        metavar="ORIGIN",
        help="http(s)://host[:port] a posted message may name as its own webhook, repeatable "
        "(--webhook's origin always may; no other)",
    )
    # Seconds before the first retry of a failed delivery (tests shorten it).
    hooks.add_argument("--webhook-backoff", type=float, default=None, help=argparse.SUPPRESS)


def webhooks_from(args: argparse.Namespace) -> tuple[webhooks.Targets | None, str]:
    """Where this server's turns may announce their end (None: nowhere), and the secret."""
    url = args.webhook or os.environ.get("DROVER_WEBHOOK") or None
    secret = args.webhook_secret or os.environ.get(webhooks.SECRET_ENV) or ""
    if url is None and not args.webhook_origin:
        return None, secret
    if not secret:
        raise ConfigError(
            f"webhooks are signed: give a secret (--webhook-secret or {webhooks.SECRET_ENV})"
        )
    if args.webhook_backoff is not None and not args.webhook_backoff > 0:
        raise ConfigError("--webhook-backoff must be positive")
    return webhooks.Targets(url, args.webhook_origin), secret


def settings_from(args: argparse.Namespace, config: Config) -> ServerSettings:
    tokens = list(args.token)
    tokens += os.environ.get("DROVER_TOKEN", "").split(",")
    if args.permission_timeout <= 0 or args.heartbeat <= 0 or args.max_body <= 0:
        raise ConfigError("--permission-timeout, --heartbeat and --max-body must be positive")
    domains = [*config.sandbox_allow_domains, *map(domain_entry, args.sandbox_allow_domain)]
    home = local_names(domains)
    if home and not any(t.strip() for t in tokens):
        # The sandbox's proxy takes a name the allow-list gives exactly to this machine.
        raise ConfigError(
            f"the sandbox's allowed domain {home[0]} lets commands reach this server: pass "
            "--token or set DROVER_TOKEN"
        )
    return ServerSettings.build(
        host=args.host,
        port=args.port,
        tokens=tokens,
        allowed_hosts=args.allowed_host,
        cors_origins=args.cors_origin,
        # The flag or the config file's [sandbox] network: either lets commands reach us.
        sandbox_network=args.sandbox_network or config.sandbox_network,
        max_body=args.max_body,
        heartbeat=args.heartbeat,
    )


def _bind(host: str, port: int, *, reuse_port: bool = False) -> socket.socket:
    try:
        family, kind, proto, _, address = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)[0]
        sock = socket.socket(family, kind, proto)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        if reuse_port:
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT, 1)
        sock.bind(address)
    except OSError as exc:
        raise ConfigError(f"cannot listen on {host}:{port}: {exc.strerror or exc}") from None
    sock.listen(2048)
    sock.setblocking(False)
    return sock


class _Server(uvicorn.Server):
    """Stops in order on the first signal: turns interrupted and recorded, streams ended,
    then uvicorn's own shutdown (a second signal forces it)."""

    def __init__(self, config: uvicorn.Config, service: Service, hub: Hub) -> None:
        super().__init__(config)
        self._service = service
        self._hub = hub
        self._loop: asyncio.AbstractEventLoop | None = None
        self._stopping: asyncio.Task[None] | None = None
        self._signalled = False

    async def serve(self, sockets: list[socket.socket] | None = None) -> None:
        self._loop = asyncio.get_running_loop()
        await super().serve(sockets)

    def handle_exit(self, sig: int, frame: FrameType | None) -> None:
        if self._signalled or self._loop is None:
            super().handle_exit(sig, frame)
            return
        self._signalled = True
        self._loop.call_soon_threadsafe(self._begin_stop, sig)

    def _begin_stop(self, sig: int) -> None:
        assert self._loop is not None
        self._stopping = self._loop.create_task(self._stop(sig))

    async def _stop(self, sig: int) -> None:
        try:
            name = signal.Signals(sig).name
            await self._service.shutdown(f"interrupted: drover serve stopped ({name})")
        finally:
            self._hub.close()
            super().handle_exit(sig, None)
            # Stopped cleanly: exit 0 instead of uvicorn re-raising the signal at the end.
            self._captured_signals.clear()


def lease_from(args: argparse.Namespace) -> float:
    raw = args.lease if args.lease is not None else os.environ.get("DROVER_LEASE")
    try:
        lease = DEFAULT_LEASE if raw is None or raw == "" else float(raw)
    except ValueError:
        raise ConfigError(f"DROVER_LEASE is not a number of seconds: {raw!r}") from None
    if not lease > 0:
        raise ConfigError("--lease must be positive")
    return lease


def _housekeeping(
    store: Store, config: Config, secret: str, owner: str, args: argparse.Namespace
) -> list[asyncio.Task[None]]:
    """The server's periodic work besides takeover: delivering the webhook outbox (whenever
    a secret is known: deliveries a previous process left are sent too) and pruning on the
    ``[retention]`` schedule."""
    loop = asyncio.get_running_loop()
    tasks = []
    if secret:
        backoff = args.webhook_backoff or webhooks.BACKOFF
        deliverer = webhooks.Deliverer(store, secret, owner, backoff=backoff)
        tasks.append(loop.create_task(deliverer.run()))
    if config.retention_older_than is not None:
        policy = Policy(
            older_than=config.retention_older_than, keep_last=config.retention_keep_last
        )
        tasks.append(loop.create_task(keep(store, policy, config.retention_every)))
    return tasks


async def run_serve(args: argparse.Namespace, *, provider: Provider | None = None) -> int:
    """Serve until stopped; ``provider`` replaces the one ``--model`` names (benchmarks; it is
    closed at the end)."""
    try:
        return await _serve(args, provider)
    finally:
        if provider is not None:
            await provider.aclose()


async def _serve(args: argparse.Namespace, provider: Provider | None) -> int:
    drover_config = server_config(load_config())
    settings = settings_from(args, drover_config)
    if args.workers != 1 and provider is None:
        serve_pool.check(args)
        lease_from(args)
        # (said once here, not by every worker as it starts)
        check_client_environment(drover_config.http_client or "httpx")
        return await serve_pool.run_pool(args, sys.argv[1:])
    lease = lease_from(args)
    targets, secret = webhooks_from(args)
    redis_url = args.redis or os.environ.get("DROVER_REDIS") or None
    hub = Hub()
    metrics = Metrics()
    metrics.watch_sse_clients(hub.subscribers)
    # A server runs commands for whoever holds a token: never without a sandbox, unless the
    # operator said --sandbox off.
    opened = cli_agent(
        args,
        provider=provider,
        config=drover_config,
        metrics=metrics,
        require_sandbox=True,
        lease_seconds=lease,
    )
    async with opened as agent:
        runner = agent.runner
        metrics.watch_running_turns(runner.running_count)
        runner.webhook = None if targets is None else targets.default
        shared = (
            Shared.open(agent.store, runner.owner, hub, redis_url)
            if is_shared(agent.store)
            else None
        )
        if redis_url and shared is None:
            raise ConfigError("--redis needs a shared journal: --db postgresql://…")
        service = Service(
            agent=agent,
            hub=hub,
            permission_timeout=args.permission_timeout,
            running_elsewhere=None if shared is None else shared.running_turn,
            send_control=None if shared is None else shared.relay.control,
            relay=None if shared is None else shared.relay,
            running_anywhere=None if shared is None else shared.running_turns,
            metrics=metrics,
            webhooks=targets,
        )
        app = create_app(service, settings)
        json_logs = (args.log_format or drover_config.log_format) == "json"
        config = uvicorn.Config(
            app,
            # JSON logs: uvicorn's records go to the root logger's JSON handler.
            log_config=None if json_logs else uvicorn.config.LOGGING_CONFIG,
            log_level="warning",
            lifespan="off",
            timeout_graceful_shutdown=5,
            access_log=False,
        )
        sock = _bind(settings.host, settings.port, reuse_port=args.reuse_port)
        host, port = sock.getsockname()[:2]
        shown = f"[{host}]" if ":" in host else host
        server = _Server(config, service, hub)
        resume = service.resume if args.takeover == "resume" else None
        interval = args.takeover_interval or min(lease / 3, takeover.MAX_WATCH_INTERVAL)
        watching: asyncio.Task[None] | None = None
        helpers: list[asyncio.Task[None]] = []
        try:
            if shared is not None:
                await shared.start(service.on_control)
            # What a previous process left is ended (and resumed) before clients come.
            await takeover.sweep(runner.recover, resume, service.run_waiting)
            watching = asyncio.get_running_loop().create_task(
                takeover.watch(
                    runner.recover,
                    resume,
                    interval=interval,
                    first=False,
                    waiting=service.run_waiting,
                )
            )
            helpers = _housekeeping(agent.store, drover_config, secret, runner.owner, args)
            if agent.sandbox is not None:
                print(f"drover serve: bash {agent.sandbox.describe()}", file=sys.stderr, flush=True)
            client = drover_config.http_client or "httpx"
            print(f"drover serve: model API through {client}", file=sys.stderr, flush=True)
            if shared is not None:
                print(f"drover serve: {shared.describe()}", file=sys.stderr, flush=True)
            print(f"drover serve: listening on http://{shown}:{port}", flush=True)
            gc_settings.settle()
            await server.serve(sockets=[sock])
        finally:
            for task in [*helpers, *([] if watching is None else [watching])]:
                task.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await task
            with contextlib.suppress(Exception):
                await service.shutdown()
            if shared is not None:
                await shared.close()
            sock.close()
    print("drover serve: stopped", file=sys.stderr, flush=True)
    return 0
