"""The KServe v2 REST server: Starlette routes over one dataplane of loaded models.

Transport (routes) and protocol logic (``protocol``), batching (``batcher``) and metrics
(``metrics``) are separate, in the shape of Seldon MLServer's dataplane. Models load and
warm up before ``/v2/health/ready`` turns true; shutdown stops accepting work and drains
what is queued.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Sequence
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from typing import Any

import numpy as np
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


@dataclass
class ServerOptions:
    max_batch_size: int = 8
    max_queue_delay_us: int = 500
    max_queue_size: int = 256
    max_body_bytes: int = 64 << 20
    reports_dir: str | None = None
    cache_predictions: bool = False
    drain_timeout_s: float = 30.0


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
    accepting = {"value": True}

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
        is_ready = accepting["value"] and all(e.ready for e in served.values())
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
        return JSONResponse({"name": entry.name, "ready": entry.ready}, status_code=200 if entry.ready else 503)

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
        metrics.success.labels(model=entry.name, version=VERSION).inc()
        return Response(content, headers=headers)

    async def infer_image(request: Request) -> Response:
        entry_name = None
        try:
            entry = lookup(request)
            entry_name = entry.name
            body = await read_body(request)
            import io

            from PIL import Image, UnidentifiedImageError

            try:
                image = Image.open(io.BytesIO(body))
                image.load()
            except (UnidentifiedImageError, OSError, ValueError):
                raise ProtocolError(400, "request body is not an image (send the image file's bytes)") from None
            try:
                x = entry.model.preprocess(image)
            except EdgekitError as exc:
                raise ProtocolError(400, exc.message) from None
            y = (await run_model(entry, x))[0]
        except ProtocolError as exc:
            return failure(entry_name, exc)
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
    return app


def serve(sources: Sequence[str], host: str = "127.0.0.1", port: int = 8000, options: ServerOptions | None = None,
          artifact: str | None = None, backend: str | None = None, threads: int | None = None,
          profile: str = "auto", require_signature: bool | None = None, trusted_keys: str | None = None) -> None:
    """Load every package, then serve them until interrupted (graceful shutdown drains the queues)."""
    import uvicorn

    from ..runtime import load

    models = [load(source, artifact=artifact, backend=backend, threads=threads, profile=profile,
                   require_signature=require_signature, trusted_keys=trusted_keys) for source in sources]
    app = create_app(models, options)
    names = ", ".join(app.state.served)
    print(f"serving {names} on http://{host}:{port}/v2 (KServe v2; metrics at /metrics)", flush=True)
    uvicorn.run(app, host=host, port=port, log_level="warning", timeout_graceful_shutdown=int(
        (options or ServerOptions()).drain_timeout_s))
