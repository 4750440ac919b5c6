"""A real edgekit server (uvicorn on loopback) for protocol and reliability tests."""

from __future__ import annotations

import socket
import threading
import time
from contextlib import contextmanager

import httpx
import pytest
import uvicorn

import edgekit
from edgekit.server.app import ServerOptions, create_app


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@contextmanager
def running(models, options: ServerOptions):
    app = create_app(models, options)
    port = free_port()
    server = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=port, log_level="error"))
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    url = f"http://127.0.0.1:{port}"
    deadline = time.time() + 30
    while time.time() < deadline:
        try:
            if httpx.get(f"{url}/v2/health/ready", timeout=1).status_code == 200:
                break
        except httpx.HTTPError:
            time.sleep(0.05)
    else:
        raise RuntimeError("server did not become ready")
    try:
        yield url, app
    finally:
        server.should_exit = True
        thread.join(timeout=30)


@pytest.fixture(scope="module")
def server(digits_all_package, tmp_path_factory):
    model = edgekit.load(digits_all_package, artifact="onnx")
    reports = tmp_path_factory.mktemp("reports")
    with running([model], ServerOptions(max_batch_size=8, max_queue_delay_us=2000, reports_dir=str(reports),
                                        max_body_bytes=1 << 20, cache_predictions=True)) as (url, app):
        yield url, app, reports
