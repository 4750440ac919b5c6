"""The KServe v2 REST server: Starlette routes over one dataplane of loaded models.

Transport (routes) and protocol logic (``protocol``), batching (``batcher``) and metrics
(``metrics``) are separate, in the shape of Seldon MLServer's dataplane. Models load and
warm up before ``/v2/health/ready`` turns true; shutdown stops accepting work and drains
what is queued.
"""

from __future__ import annotations

import asyncio
import contextlib
import errno
import json
import logging
import os
import signal
import threading
import time
from collections.abc import Iterator, Sequence
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import uvicorn
from prometheus_client import CONTENT_TYPE_LATEST, generate_latest
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from .. import __version__
from ..bench.report import ReportError
from ..errors import EdgekitError
from ..prediction_cache import PredictionCache
from ..runtime import Model
from .batcher import DynamicBatcher, Overloaded
from .metrics import ServerMetrics
from .protocol import HEADER_LENGTH, ProtocolError, datatype_of, encode_response, parse_request
from .reports import ReportStore

VERSION = "1"
log = logging.getLogger("edgekit.server")


@dataclass
class ServerOptions:
    max_batch_size: int = 8
    max_queue_delay_us: int = 500
    max_queue_size: int = 256
    max_body_bytes: int = 64 << 20
    reports_dir: str | None = None
    cache_predictions: bool = False
    drain_timeout_s: float = 30.0
    max_image_pixels: int = 25_000_000  # /infer/image: larger images are refused before decoding
    image_decoders: int = 2  # images decoded at once (off the event loop): bounds decode memory
    lameduck_s: float = 2.0  # on SIGTERM/SIGINT: keep answering (Connection: close) this long at most


@dataclass
class ServedModel:
    name: str
    model: Model
    batcher: DynamicBatcher | None = None
    cache: PredictionCache | None = None
    ready: bool = False
    sample_shape: tuple[int | None, ...] = field(default_factory=tuple)

    def metadata(self) -> dict[str, Any]:
        spec_in, spec_out = self.model.manifest.inputs[0], self.model.manifest.outputs[0]
        platform = {"tflite": "tflite", "onnx": "onnxruntime_onnx", "coreml": "coreml"}.get(self.model.artifact.target, "")
        return {
            "name": self.name,
            "versions": [VERSION],
            "platform": platform,
            "inputs": [{"name": spec_in.name, "datatype": "FP32", "shape": spec_in.shape}],
            "outputs": [{"name": spec_out.name, "datatype": "FP32", "shape": spec_out.shape}],
            "parameters": {"artifact": self.model.artifact.target, "precision": self.model.artifact.precision,
                           "labels": self.model.labels or []},
        }


def error(status: int, message: str) -> JSONResponse:
    return JSONResponse({"error": message}, status_code=status)


def create_app(models: Sequence[Model], options: ServerOptions | None = None) -> Starlette:
    options = options or ServerOptions()
    metrics = ServerMetrics()
    served: dict[str, ServedModel] = {}
    for model in models:
        name = model.manifest.name
        if name in served:
            raise EdgekitError(f"two models are named {name!r}", hint="serve packages with different names")
        shape = tuple(None if d == -1 else d for d in model.manifest.inputs[0].shape[1:])
        served[name] = ServedModel(name, model, sample_shape=shape,
                                   cache=PredictionCache(max_entries=4096) if options.cache_predictions else None)
    store = ReportStore(options.reports_dir) if options.reports_dir else None
    accepting = {"value": True, "draining": False}  # draining: after SIGTERM, still answering, not ready
    decoders = asyncio.Semaphore(options.image_decoders)

    @asynccontextmanager
    async def lifespan(app: Starlette):
        for entry in served.values():
            entry.batcher = DynamicBatcher(
                entry.model.predict_tensor, options.max_batch_size, options.max_queue_delay_us,
                options.max_queue_size, metrics.observer(entry.name), name=entry.name,
            )
            entry.batcher.start()
            if entry.cache is not None:
                metrics.cache_hits.labels(model=entry.name, version=VERSION).set_function(lambda c=entry.cache: c.hits)
                metrics.cache_misses.labels(model=entry.name, version=VERSION).set_function(lambda c=entry.cache: c.misses)
            entry.ready = True  # loaded and warmed up by edgekit.load before the server starts
        if app.state.on_ready is not None:
            app.state.on_ready()
        yield
        accepting["value"] = False
        for entry in served.values():
            entry.ready = False
        await asyncio.gather(*(e.batcher.drain(options.drain_timeout_s) for e in served.values() if e.batcher))
        for entry in served.values():
            if entry.batcher:
                await entry.batcher.stop()
            entry.model.close()

    def lookup(request: Request) -> ServedModel:
        name = request.path_params["name"]
        version = request.path_params.get("version")
        if name not in served or (version is not None and version != VERSION):
            raise ProtocolError(404, f"unknown model {name!r}" + (f" version {version!r}" if version else ""))
        return served[name]

    async def server_metadata(request: Request) -> Response:
        return JSONResponse({"name": "edgekit", "version": __version__,
                             "extensions": ["binary_tensor_data", "model_repository_metadata"]})

    async def live(request: Request) -> Response:
        return JSONResponse({"live": True})

    async def ready(request: Request) -> Response:
        is_ready = accepting["value"] and not accepting["draining"] and all(e.ready for e in served.values())
        return JSONResponse({"ready": is_ready}, status_code=200 if is_ready else 503)

    async def model_metadata(request: Request) -> Response:
        try:
            return JSONResponse(lookup(request).metadata())
        except ProtocolError as exc:
            return error(exc.status, exc.message)

    async def model_ready(request: Request) -> Response:
        try:
            entry = lookup(request)
        except ProtocolError as exc:
            return error(exc.status, exc.message)
        is_ready = entry.ready and not accepting["draining"]
        return JSONResponse({"name": entry.name, "ready": is_ready}, status_code=200 if is_ready else 503)

    async def read_body(request: Request) -> bytes:
        declared = request.headers.get("content-length")
        if declared is not None and declared.isdigit() and int(declared) > options.max_body_bytes:
            raise ProtocolError(413, f"request body of {declared} bytes exceeds the {options.max_body_bytes}-byte limit")
        chunks, size = [], 0
        async for chunk in request.stream():
            size += len(chunk)
            if size > options.max_body_bytes:
                raise ProtocolError(413, f"request body exceeds the {options.max_body_bytes}-byte limit")
            chunks.append(chunk)
        return b"".join(chunks)

    async def run_model(entry: ServedModel, x: np.ndarray) -> np.ndarray:
        if not entry.ready or not accepting["value"] or entry.batcher is None:
            raise ProtocolError(503, f"model {entry.name!r} is not ready")
        key = entry.cache.key(entry.model.artifact.sha256, x) if entry.cache is not None else None
        if key is not None:
            found = entry.cache.get(key)
            if found is not None:
                return found
        try:
            y = await entry.batcher.submit(x)
        except Overloaded as exc:
            raise ProtocolError(503, f"model {entry.name!r} is overloaded: {exc}; retry later") from None
        except EdgekitError as exc:
            raise ProtocolError(400, exc.message) from None
        except Exception as exc:  # the model raised: this batch fails, the server keeps serving
            raise ProtocolError(500, f"inference failed: {type(exc).__name__}: {exc}") from None
        if key is not None:
            entry.cache.put(key, y)
        return y

    def failure(entry_name: str | None, exc: ProtocolError) -> Response:
        if entry_name is not None:
            reason = {400: "BAD_REQUEST", 413: "TOO_LARGE", 503: "OVERLOADED"}.get(exc.status, "OTHER")
            metrics.failure.labels(model=entry_name, version=VERSION, reason=reason).inc()
        return error(exc.status, exc.message)

    async def infer(request: Request) -> Response:
        entry_name = None
        try:
            entry = lookup(request)
            entry_name = entry.name
            body = await read_body(request)
            parsed = parse_request(body, request.headers.get(HEADER_LENGTH))
            x = validate_input(entry, parsed.inputs)
            y = await run_model(entry, x)
            name = entry.model.manifest.outputs[0].name
            content, headers = encode_response(entry.name, VERSION, parsed, {name: y.astype(np.float32)})
        except ProtocolError as exc:
            return failure(entry_name, exc)
        except Exception:  # a bug: answer 500, log the traceback, count it
            return internal_failure(entry_name, request)
        metrics.success.labels(model=entry.name, version=VERSION).inc()
        return Response(content, headers=headers)

    async def infer_image(request: Request) -> Response:
        entry_name = None
        try:
            entry = lookup(request)
            entry_name = entry.name
            body = await read_body(request)
            async with decoders:  # decoding allocates width x height x 3 bytes: a few at a time, off the loop
                x = await asyncio.to_thread(decode_upload, entry, body, options.max_image_pixels)
            y = (await run_model(entry, x))[0]
        except ProtocolError as exc:
            return failure(entry_name, exc)
        except Exception:  # a bug: answer 500, log the traceback, count it
            return internal_failure(entry_name, request)
        metrics.success.labels(model=entry.name, version=VERSION).inc()
        labels = entry.model.labels
        flat = y.reshape(-1)
        order = np.argsort(flat)[::-1][:5]
        return JSONResponse({
            "model_name": entry.name, "model_version": VERSION,
            "outputs": [{"name": entry.model.manifest.outputs[0].name, "datatype": "FP32", "shape": list(y.shape),
                         "data": flat.tolist()}],
            "top_k": [{"label": labels[i] if labels else str(int(i)), "index": int(i), "score": float(flat[i])}
                      for i in order],
        })

    def internal_failure(entry_name: str | None, request: Request) -> Response:
        log.exception("internal error answering %s %s", request.method, request.url.path)
        if entry_name is not None:
            metrics.failure.labels(model=entry_name, version=VERSION, reason="OTHER").inc()
        return error(500, "internal server error (the server log has the traceback)")

    def validate_input(entry: ServedModel, inputs: dict[str, np.ndarray]) -> np.ndarray:
        expected = entry.model.manifest.inputs[0].name
        if list(inputs) != [expected]:
            raise ProtocolError(400, f"model {entry.name!r} takes one input named {expected!r}, got {list(inputs)}")
        x = inputs[expected]
        if x.dtype not in (np.float32, np.float16, np.float64):
            raise ProtocolError(400, f"input {expected!r} must be FP32, got {datatype_of(x.dtype)}")
        shape = entry.sample_shape
        if x.ndim != len(shape) + 1 or any(e is not None and e != s for s, e in zip(x.shape[1:], shape)) or not len(x):
            want = ["N", *("?" if d is None else d for d in shape)]
            raise ProtocolError(400, f"input {expected!r} has shape {list(x.shape)}; expected {want}")
        if len(x) > options.max_batch_size * 64:
            raise ProtocolError(413, f"{len(x)} samples in one request is more than this server accepts")
        x = x.astype(np.float32, copy=False)
        if not np.isfinite(x).all():
            raise ProtocolError(400, f"input {expected!r} contains NaN or Inf")
        return x

    async def prometheus(request: Request) -> Response:
        return Response(generate_latest(metrics.registry), headers={"content-type": CONTENT_TYPE_LATEST})

    async def post_report(request: Request) -> Response:
        if store is None:
            return error(404, "report collection is off (start the server with --reports-dir DIR)")
        try:
            body = await read_body(request)
            report = json.loads(body)
            report_id = store.add(report)
        except ProtocolError as exc:
            return error(exc.status, exc.message)
        except RecursionError:
            return error(400, "report JSON is nested too deeply")
        except (ValueError, UnicodeDecodeError):
            return error(400, "report is not valid JSON")
        except ReportError as exc:
            return error(400, exc.message)
        return JSONResponse({"id": report_id}, status_code=201)

    async def list_reports(request: Request) -> Response:
        if store is None:
            return error(404, "report collection is off (start the server with --reports-dir DIR)")
        return JSONResponse({"reports": store.list()})

    async def get_report(request: Request) -> Response:
        if store is None:
            return error(404, "report collection is off (start the server with --reports-dir DIR)")
        try:
            return JSONResponse(store.get(request.path_params["report_id"]))
        except (FileNotFoundError, ReportError):
            return error(404, f"unknown report {request.path_params['report_id']!r}")

    routes = [
        Route("/v2", server_metadata),
        Route("/v2/health/live", live),
        Route("/v2/health/ready", ready),
        Route("/v2/models/{name}", model_metadata),
        Route("/v2/models/{name}/versions/{version}", model_metadata),
        Route("/v2/models/{name}/ready", model_ready),
        Route("/v2/models/{name}/versions/{version}/ready", model_ready),
        Route("/v2/models/{name}/infer", infer, methods=["POST"]),
        Route("/v2/models/{name}/versions/{version}/infer", infer, methods=["POST"]),
        Route("/v2/models/{name}/infer/image", infer_image, methods=["POST"]),
        Route("/metrics", prometheus),
        Route("/v2/reports", post_report, methods=["POST"]),
        Route("/v2/reports", list_reports, methods=["GET"]),
        Route("/v2/reports/{report_id}", get_report),
    ]
    app = Starlette(routes=routes, lifespan=lifespan)
    app.state.served = served
    app.state.metrics = metrics
    app.state.accepting = accepting
    app.state.on_ready = None  # set by serve(): says "serving" once every model is ready
    app.add_middleware(_CloseWhenDraining, accepting=accepting)
    return app


class _CloseWhenDraining:
    """While the server drains (after SIGTERM/SIGINT), every response carries ``Connection: close``
    so keep-alive clients close their connections themselves instead of being reset."""

    def __init__(self, app: Any, accepting: dict[str, Any]) -> None:
        self.app = app
        self.accepting = accepting

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        if scope["type"] != "http" or (self.accepting["value"] and not self.accepting["draining"]):
            await self.app(scope, receive, send)
            return

        async def closing(message: dict[str, Any]) -> None:
            if message["type"] == "http.response.start":
                headers = [(k, v) for k, v in message.get("headers", []) if k.lower() != b"connection"]
                message = {**message, "headers": [*headers, (b"connection", b"close")]}
            await send(message)

        await self.app(scope, receive, closing)


def decode_upload(entry: ServedModel, body: bytes, max_pixels: int) -> np.ndarray:
    """An uploaded image as the model's input batch (runs in a worker thread)."""
    import io

    from PIL import Image, UnidentifiedImageError

    from ..data.preprocessing import open_image

    try:
        image = open_image(io.BytesIO(body), max_pixels, name="upload")
        image.load()
    except EdgekitError as exc:  # larger than this server decodes
        raise ProtocolError(400, f"{exc.message}; downscale it first") from None
    except Image.DecompressionBombError:
        raise ProtocolError(400, "image is too large to decode; downscale it first") from None
    except (UnidentifiedImageError, OSError, ValueError, SyntaxError, EOFError):
        raise ProtocolError(400, "request body is not an image (send the image file's bytes)") from None
    try:
        return entry.model.preprocess(image)
    except EdgekitError as exc:
        raise ProtocolError(400, exc.message) from None


def serve(sources: Sequence[str], host: str = "127.0.0.1", port: int = 8000, options: ServerOptions | None = None,
          artifact: str | None = None, backend: str | None = None, threads: int | None = None,
          profile: str = "auto", require_signature: bool | None = None, trusted_keys: str | None = None) -> None:
    """Load every package, bind the port, then serve until SIGTERM/SIGINT.

    Shutdown is graceful on both signals: readiness turns 503, responses carry ``Connection:
    close`` for up to ``lameduck_s`` (keep-alive clients go away cleanly), then new connections
    stop, in-flight requests finish and the queues drain. The process then exits 0.
    """
    from ..runtime import load

    options = options or ServerOptions()
    sock = bind_socket(host, port)  # a port in use fails here, before any model loads
    try:
        models = [load(source, artifact=artifact, backend=backend, threads=threads, profile=profile,
                       require_signature=require_signature, trusted_keys=trusted_keys) for source in sources]
        app = create_app(models, options)
        bound_host, bound_port = sock.getsockname()[:2]
        shown = f"[{bound_host}]" if ":" in str(bound_host) else bound_host
        names = ", ".join(app.state.served)
        app.state.on_ready = lambda: print(
            f"serving {names} on http://{shown}:{bound_port}/v2 (KServe v2; metrics at /metrics)", flush=True)
        debug = os.environ.get("EDGEKIT_DEBUG") == "1"
        config = uvicorn.Config(app, log_level="debug" if debug else "warning",
                                timeout_graceful_shutdown=int(options.drain_timeout_s))
        _GracefulServer(config, app.state.accepting, options.lameduck_s).run(sockets=[sock])
    finally:
        sock.close()


def bind_socket(host: str, port: int) -> Any:
    """A listening socket on ``host:port`` (0 picks a free port), or one clear error."""
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
        sock.bind(address)
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

    def __init__(self, config: uvicorn.Config, accepting: dict[str, Any], lameduck_s: float) -> None:
        super().__init__(config)
        self.accepting = accepting
        self.lameduck_s = lameduck_s
        self.draining_since: float | None = None

    def handle_exit(self, sig: int, frame: Any) -> None:
        if self.draining_since is None:
            self.draining_since = time.monotonic()
            self.accepting["draining"] = True
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
