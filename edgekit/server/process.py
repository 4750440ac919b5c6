"""What one serving process does: bind the port, load the packages, run uvicorn with a
lame-duck drain on SIGTERM/SIGINT. ``launch.py`` chooses between this and worker processes
(``workers.py``); the REST endpoints themselves are ``app.py``.
"""

from __future__ import annotations

import contextlib
import errno
import logging
import os
import signal
import threading
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Any

import uvicorn

from ..errors import EdgekitError
from .app import DrainState, create_app
from .dataplane import ServerOptions

log = logging.getLogger("edgekit.server")


@dataclass
class Launch:
    """What each server process loads and how: the arguments of ``serve``."""

    sources: list[str]
    options: ServerOptions
    artifact: str | None = None
    backend: str | None = None
    threads: int | None = None
    profile: str = "auto"
    require_signature: bool | None = None
    trusted_keys: str | None = None


def serve_here(launch: Launch, sock: Any, on_ready: Any) -> None:
    """Load the models and serve ``sock`` in this process; ``on_ready(names, grpc_port)`` once ready."""
    from ..device.runtime import load

    models = [load(source, artifact=launch.artifact, backend=launch.backend, threads=launch.threads,
                   profile=launch.profile, require_signature=launch.require_signature,
                   trusted_keys=launch.trusted_keys, spin=False,
                   allow_failed=launch.options.allow_failed_artifact)
              for source in launch.sources]  # spin=False: the cores are shared with request decoding
    app = create_app(models, launch.options)
    app.state.on_ready = lambda: on_ready(list(app.state.served), app.state.grpc_port)
    debug = os.environ.get("EDGEKIT_DEBUG") == "1"
    config = uvicorn.Config(app, log_level="debug" if debug else "warning",
                            timeout_graceful_shutdown=int(launch.options.drain_timeout_s))
    _GracefulServer(config, app.state.drain, launch.options.lameduck_s).run(sockets=[sock])


def serving_line(names: Sequence[str], sock: Any, grpc_port: int | None, detail: str = "") -> str:
    bound_host, bound_port = sock.getsockname()[:2]
    shown = f"[{bound_host}]" if ":" in str(bound_host) else bound_host
    return (f"serving {', '.join(names)} on http://{shown}:{bound_port}/v2 (KServe v2; metrics at /metrics)"
            + (f" and gRPC on {shown}:{grpc_port}" if grpc_port else "") + detail)


def bind_socket(host: str, port: int, reuse_port: bool = False, listen: bool = True) -> Any:
    """A listening socket on ``host:port`` (0 picks a free port), or one clear error.

    ``reuse_port``: several sockets of this user share the port and the kernel spreads new
    connections over the listening ones (SO_REUSEPORT); ``listen=False`` only reserves it."""
    import socket

    try:
        family, kind, proto, _, address = socket.getaddrinfo(
            host, port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE)[0]
    except (socket.gaierror, UnicodeError, OverflowError) as exc:
        raise EdgekitError(f"cannot listen on {host}:{port}: {exc}",
                           hint="pass --host as an address of this machine (127.0.0.1, 0.0.0.0 or ::)") from None
    sock = socket.socket(family, kind, proto)
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        if reuse_port:
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT, 1)
        sock.bind(address)
        if listen:
            sock.listen(2048)
    except OSError as exc:
        sock.close()
        if exc.errno == errno.EADDRINUSE:
            raise EdgekitError(f"port {port} on {host} is already in use",
                               hint="stop the program using it, or pass another --port") from None
        if exc.errno in (errno.EACCES, errno.EPERM):
            raise EdgekitError(f"not allowed to listen on port {port} on {host} ({exc.strerror})",
                               hint="use a port above 1023, or run with the needed privileges") from None
        raise EdgekitError(f"cannot listen on {host}:{port}: {exc.strerror}",
                           hint="pass --host as an address of this machine") from None
    sock.set_inheritable(True)
    return sock


class _GracefulServer(uvicorn.Server):
    """uvicorn's server with a lame-duck phase before its shutdown, and exit 0 on SIGTERM/SIGINT
    (uvicorn re-raises the signal after shutting down, which ends the process with 143)."""

    def __init__(self, config: uvicorn.Config, drain: DrainState, lameduck_s: float) -> None:
        super().__init__(config)
        self.drain = drain
        self.lameduck_s = lameduck_s
        self.draining_since: float | None = None

    def handle_exit(self, sig: int, frame: Any) -> None:
        if self.draining_since is None:
            self.draining_since = time.monotonic()
            self.drain.begin()
            log.warning("received %s: draining (readiness 503, Connection: close) before shutdown",
                        signal.Signals(sig).name)
        elif sig == signal.SIGINT:
            self.force_exit = True  # a second Ctrl-C: stop waiting

    async def on_tick(self, counter: int) -> bool:
        if self.draining_since is not None and not self.should_exit:
            waited = time.monotonic() - self.draining_since
            if waited >= self.lameduck_s or (waited >= 0.2 and not self.server_state.connections):
                self.should_exit = True
        return await super().on_tick(counter)

    @contextlib.contextmanager
    def capture_signals(self) -> Iterator[None]:
        if threading.current_thread() is not threading.main_thread():
            yield
            return
        original = {sig: signal.signal(sig, self.handle_exit) for sig in (signal.SIGINT, signal.SIGTERM)}
        try:
            yield
        finally:
            for sig, handler in original.items():
                signal.signal(sig, handler)
