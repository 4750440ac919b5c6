"""The KServe v2 REST transport: thin Starlette routes over one ``DataPlane``.

Routes read the request, call the dataplane and write its answer; a ``ProtocolError`` becomes
``{"error": ...}`` with its status through one exception handler, anything else a logged 500.
Starting and stopping a server (port, drain, worker processes) is ``launch.py`` (one process or workers)/``process.py`` (one serving process).
"""

from __future__ import annotations

import json
import logging
from collections.abc import AsyncIterator, Sequence
from contextlib import asynccontextmanager
from dataclasses import dataclass
from typing import Any

from prometheus_client import CONTENT_TYPE_LATEST
from starlette.applications import Starlette
from starlette.requests import ClientDisconnect, Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from ..bench.report import ReportError
from ..device.runtime import Model
from .dataplane import VERSION, DataPlane, ServedModel, ServerOptions
from .protocol import CLIENT_CLOSED, HEADER_LENGTH, ProtocolError
from .reports import ReportStore

log = logging.getLogger("edgekit.server")
__all__ = ["VERSION", "DataPlane", "ServedModel", "ServerOptions", "create_app"]


def error(status: int, message: str) -> JSONResponse:
    return JSONResponse({"error": message}, status_code=status)


def create_app(models: Sequence[Model], options: ServerOptions | None = None) -> Starlette:
    """Thin KServe v2 REST endpoints over one ``DataPlane``."""
    options = options or ServerOptions()
    plane = DataPlane(models, options)
    endpoints = RestEndpoints(plane, options)

    @asynccontextmanager
    async def lifespan(app: Starlette) -> AsyncIterator[None]:
        plane.start()
        grpc_server = None
        if options.grpc_port is not None:  # gRPC shares this event loop, the dataplane and its batchers
            from .grpc_app import GrpcServer

            grpc_server = GrpcServer(plane, options.grpc_host, options.grpc_port, options.max_body_bytes)
            await grpc_server.start()
            app.state.grpc_port = grpc_server.port
        if app.state.on_ready is not None:
            app.state.on_ready()
        yield
        if grpc_server is not None:
            await grpc_server.stop(options.drain_timeout_s)
        await plane.stop()

    app = Starlette(routes=endpoints.routes(), lifespan=lifespan,
                    exception_handlers={ProtocolError: _protocol_error, Exception: _internal_error})
    app.state.plane = plane
    app.state.served = plane.served
    app.state.metrics = plane.metrics
    app.state.drain = DrainState(plane)
    app.state.on_ready = None  # set by serve(): says "serving" once every model is ready
    app.state.grpc_port = None  # the bound gRPC port once serving (--grpc-port 0 picks one)
    app.add_middleware(_CloseWhenDraining, plane=plane)
    return app


class RestEndpoints:
    """One method per route: read the request, ask the dataplane, write its answer."""

    def __init__(self, plane: DataPlane, options: ServerOptions) -> None:
        self.plane = plane
        self.options = options
        self.store = ReportStore(options.reports_dir) if options.reports_dir else None

    def routes(self) -> list[Route]:
        return [
            Route("/v2", self.server_metadata),
            Route("/v2/health/live", self.live),
            Route("/v2/health/ready", self.ready),
            Route("/v2/models/{name}", self.model_metadata),
            Route("/v2/models/{name}/versions/{version}", self.model_metadata),
            Route("/v2/models/{name}/ready", self.model_ready),
            Route("/v2/models/{name}/versions/{version}/ready", self.model_ready),
            Route("/v2/models/{name}/infer", self.infer, methods=["POST"]),
            Route("/v2/models/{name}/versions/{version}/infer", self.infer, methods=["POST"]),
            Route("/v2/models/{name}/infer/image", self.infer_image, methods=["POST"]),
            Route("/metrics", self.prometheus),
            Route("/v2/reports", self.post_report, methods=["POST"]),
            Route("/v2/reports", self.list_reports, methods=["GET"]),
            Route("/v2/reports/{report_id}", self.get_report),
        ]

    async def read_body(self, request: Request) -> bytes:
        declared = request.headers.get("content-length")
        limit = self.options.max_body_bytes
        if declared is not None and declared.isdigit() and int(declared) > limit:
            raise ProtocolError(413, f"request body of {declared} bytes exceeds the {limit}-byte limit")
        chunks, size = [], 0
        try:
            async for chunk in request.stream():
                size += len(chunk)
                if size > limit:
                    raise ProtocolError(413, f"request body exceeds the {limit}-byte limit")
                chunks.append(chunk)
        except ClientDisconnect:  # the client hung up mid-body: its choice, not a server failure
            raise ProtocolError(CLIENT_CLOSED, "the client disconnected before sending the whole body") from None
        return b"".join(chunks)

    async def model_body(self, request: Request) -> bytes:
        try:
            return await self.read_body(request)
        except ProtocolError as exc:
            self.plane.count_failure(request.path_params.get("name"), exc.status)
            raise

    async def server_metadata(self, request: Request) -> Response:
        return JSONResponse(self.plane.server_metadata())

    async def live(self, request: Request) -> Response:
        return JSONResponse({"live": True})

    async def ready(self, request: Request) -> Response:
        is_ready = self.plane.ready()
        return JSONResponse({"ready": is_ready}, status_code=200 if is_ready else 503)

    async def model_metadata(self, request: Request) -> Response:
        entry = self.plane.lookup(request.path_params["name"], request.path_params.get("version"))
        return JSONResponse(entry.metadata())

    async def model_ready(self, request: Request) -> Response:
        name, version = request.path_params["name"], request.path_params.get("version")
        is_ready = self.plane.model_ready(name, version)
        return JSONResponse({"name": name, "ready": is_ready}, status_code=200 if is_ready else 503)

    async def infer(self, request: Request) -> Response:
        name = request.path_params["name"]
        with self.plane.arrival(name) as arrival:  # announced before the body is read
            body = await self.model_body(request)
            content, headers = await self.plane.infer(name, request.path_params.get("version"), body,
                                                      request.headers.get(HEADER_LENGTH), arrival)
        return Response(content, headers=headers)

    async def infer_image(self, request: Request) -> Response:
        name = request.path_params["name"]
        with self.plane.arrival(name) as arrival:
            body = await self.model_body(request)
            return JSONResponse(await self.plane.infer_image(name, body, arrival))

    async def prometheus(self, request: Request) -> Response:
        return Response(self.plane.metrics.exposition(), headers={"content-type": CONTENT_TYPE_LATEST})

    def reports(self) -> ReportStore:
        if self.store is None:
            raise ProtocolError(404, "report collection is off (start the server with --reports-dir DIR)")
        return self.store

    async def post_report(self, request: Request) -> Response:
        collection = self.reports()
        body = await self.read_body(request)
        try:
            report = json.loads(body)
        except RecursionError:
            raise ProtocolError(400, "report JSON is nested too deeply") from None
        except (ValueError, UnicodeDecodeError):
            raise ProtocolError(400, "report is not valid JSON") from None
        try:
            return JSONResponse({"id": collection.add(report)}, status_code=201)
        except ReportError as exc:
            raise ProtocolError(400, exc.message) from None

    async def list_reports(self, request: Request) -> Response:
        return JSONResponse({"reports": self.reports().list()})

    async def get_report(self, request: Request) -> Response:
        try:
            return JSONResponse(self.reports().get(request.path_params["report_id"]))
        except (FileNotFoundError, ReportError):
            raise ProtocolError(404, f"unknown report {request.path_params['report_id']!r}") from None


async def _protocol_error(request: Request, exc: Exception) -> Response:
    assert isinstance(exc, ProtocolError)
    if exc.status == CLIENT_CLOSED:  # nobody is there to read an answer: one debug line
        log.debug("%s %s: %s", request.method, request.url.path, exc.message)
    return error(exc.status, exc.message)


async def _internal_error(request: Request, exc: Exception) -> Response:
    log.error("internal error answering %s %s", request.method, request.url.path, exc_info=exc)
    return error(500, "internal server error (the server log has the traceback)")


@dataclass
class DrainState:
    """What the signal handler flips: the dataplane stops being ready while it keeps answering."""

    plane: DataPlane

    def begin(self) -> None:
        self.plane.draining = True


class _CloseWhenDraining:
    """While the server drains (after SIGTERM/SIGINT), every response carries ``Connection: close``
    so keep-alive clients close their connections themselves instead of being reset."""

    def __init__(self, app: Any, plane: DataPlane) -> None:
        self.app = app
        self.plane = plane

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        if scope["type"] != "http" or (self.plane.accepting and not self.plane.draining):
            await self.app(scope, receive, send)
            return

        async def closing(message: dict[str, Any]) -> None:
            if message["type"] == "http.response.start":
                headers = [(k, v) for k, v in message.get("headers", []) if k.lower() != b"connection"]
                message = {**message, "headers": [*headers, (b"connection", b"close")]}
            await send(message)

        await self.app(scope, receive, closing)
