"""``edgekit serve``'s entry point (``server/launch.py``) hands each process its own options."""

from __future__ import annotations

from edgekit.server import launch
from edgekit.server.dataplane import ServerOptions


def test_serve_leaves_the_callers_options_as_they_were(monkeypatch):
    seen = []
    monkeypatch.setattr(launch, "serve_here", lambda how, sock, say: seen.append(how))
    options = ServerOptions()
    launch.serve(["unused.edgekit"], host="0.0.0.0", port=0, options=options)
    assert seen and seen[0].options.grpc_host == "0.0.0.0"  # the process serves gRPC on the host asked for
    assert options.grpc_host == "127.0.0.1"  # the caller's object is not written into
