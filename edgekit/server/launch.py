"""``edgekit serve``'s entry point: one process, or several sharing the port (``workers.py``).

Kept apart from ``process.py`` (what one serving process does) so that the workers, which run
``process.serve_here`` themselves, and this choice do not import each other.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace

from .dataplane import ServerOptions
from .process import Launch, bind_socket, serve_here, serving_line


def serve(sources: Sequence[str], host: str = "127.0.0.1", port: int = 8000, options: ServerOptions | None = None,
          artifact: str | None = None, backend: str | None = None, threads: int | None = None,
          profile: str = "auto", require_signature: bool | None = None, trusted_keys: str | None = None) -> None:
    """Load every package, bind the port, then serve until SIGTERM/SIGINT.

    Shutdown is graceful on both signals: readiness turns 503, responses carry ``Connection:
    close`` for up to ``lameduck_s`` (keep-alive clients go away cleanly), then new connections
    stop, in-flight requests finish and the queues drain. The process then exits 0. With
    ``options.workers`` > 1, that many processes serve the port (``workers.py``).
    """
    options = options or ServerOptions()
    several = options.workers > 1  # then each worker listens on its own SO_REUSEPORT socket (workers.py)
    sock = bind_socket(host, port, reuse_port=several, listen=not several)  # a port in use fails here, first
    if options.grpc_port:  # the same check for the gRPC port (bound for real once serving)
        bind_socket(host, options.grpc_port).close()
    options = replace(options, grpc_host=host)  # the caller's options stay as they were
    launch = Launch(list(sources), options, artifact, backend, threads, profile, require_signature, trusted_keys)
    try:
        if options.workers > 1:
            from .workers import serve_workers  # multiprocessing only when asked for

            serve_workers(launch, sock)
        else:
            serve_here(launch, sock, lambda names, grpc_port: print(serving_line(names, sock, grpc_port), flush=True))
    finally:
        sock.close()
