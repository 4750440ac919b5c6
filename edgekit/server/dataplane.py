"""The server's protocol logic, free of HTTP: model lookup, readiness, input validation (once),
the prediction cache, batching and metrics. REST endpoints (``app.py``) and gRPC (``grpc_app.py``)
call it.

In the shape of Seldon MLServer's dataplane. Every failure of a model route leaves here as a
``ProtocolError`` with its HTTP status, counted in the failure metrics under the model's name;
a bug is logged with its traceback and becomes a 500 that says so.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from typing import Any, TypeVar

import numpy as np

from ..version import __version__
from ..errors import EdgekitError
from ..device.prediction_cache import PredictionCache
from ..device.runtime import Model
from .batcher import Arrival, DynamicBatcher, Overloaded
from .metrics import ServerMetrics
from .protocol import ProtocolError, datatype_of, encode_response, parse_request

VERSION = "1"
# Bodies and responses above this size are decoded/encoded in a worker thread, so the event loop
# keeps accepting, batching and answering while a large JSON document is parsed; smaller ones are
# handled inline (a thread hop costs more than they take).
OFF_LOOP_BYTES = 64 << 10
log = logging.getLogger("edgekit.server")
T = TypeVar("T")
# the most samples one request may carry, in batches of --max-batch-size (the batcher splits them)
REQUEST_BATCHES = 64
_REASONS = {400: "BAD_REQUEST", 413: "TOO_LARGE", 499: "CLIENT_DISCONNECTED", 503: "OVERLOADED"}


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
    grpc_port: int | None = None  # KServe v2 gRPC on this port too (0 picks a free one); None: REST only
    grpc_host: str = "127.0.0.1"
    workers: int = 1  # server processes sharing the port (each its own GIL, batcher and model session)
    allow_failed_artifact: bool = False  # serve an artifact that failed its validation gate


@dataclass
class ServedModel:
    name: str
    model: Model
    batcher: DynamicBatcher | None = None
    ready: bool = False

    def metadata(self) -> dict[str, Any]:
        from ..formats import FORMATS

        manifest = self.model.manifest
        fmt = FORMATS.get(self.model.artifact.format)
        return {
            "name": self.name,
            "versions": [VERSION],
            "platform": fmt.serving_platform if fmt is not None else "",
            "inputs": [{"name": s.name, "datatype": _datatype(s.dtype), "shape": s.shape} for s in manifest.inputs],
            "outputs": [{"name": s.name, "datatype": _datatype(s.dtype), "shape": s.shape} for s in manifest.outputs],
            "parameters": {"artifact": self.model.artifact.key, "precision": self.model.artifact.precision,
                           "labels": self.model.labels or []},
        }


class DataPlane:
    """Everything the server does for a request, given the request's decoded parts."""

    def __init__(self, models: Sequence[Model], options: ServerOptions, metrics: ServerMetrics | None = None) -> None:
        self.options = options
        self.metrics = metrics or ServerMetrics()
        self.accepting = True
        self.draining = False  # after SIGTERM: still answering, no longer ready
        self.served: dict[str, ServedModel] = {}
        for model in models:
            name = model.manifest.name
            if name in self.served:
                raise EdgekitError(f"two models are named {name!r}", hint="serve packages with different names")
            if options.cache_predictions and model.prediction_cache is None:
                model.prediction_cache = PredictionCache(max_entries=4096)
            self.served[name] = ServedModel(name, model)
        self._decoders = asyncio.Semaphore(options.image_decoders)

    # --- lifecycle --------------------------------------------------------------------------

    def start(self) -> None:
        """Start each model's batcher (models are loaded and warmed up by edgekit.load already)."""
        for entry in self.served.values():
            entry.batcher = DynamicBatcher(
                entry.model.run_checked, self.options.max_batch_size, self.options.max_queue_delay_us,
                self.options.max_queue_size, self.metrics.observer(entry.name), name=entry.name,
            )
            entry.batcher.start()
            entry.ready = True

    async def stop(self) -> None:
        """Stop accepting, answer what is queued, release the models."""
        self.accepting = False
        for entry in self.served.values():
            entry.ready = False
        batchers = [e.batcher for e in self.served.values() if e.batcher]
        await asyncio.gather(*(b.drain(self.options.drain_timeout_s) for b in batchers))
        for entry in self.served.values():
            if entry.batcher:
                await entry.batcher.stop()
            entry.model.close()

    # --- health and metadata ----------------------------------------------------------------

    def server_metadata(self) -> dict[str, Any]:
        return {"name": "edgekit", "version": __version__,
                "extensions": ["binary_tensor_data", "model_repository_metadata"]}

    def ready(self) -> bool:
        return self.accepting and not self.draining and all(e.ready for e in self.served.values())

    def lookup(self, name: str, version: str | None = None) -> ServedModel:
        if name not in self.served or (version is not None and version != VERSION):
            raise ProtocolError(404, f"unknown model {name!r}" + (f" version {version!r}" if version else ""))
        return self.served[name]

    def model_ready(self, name: str, version: str | None = None) -> bool:
        return self.lookup(name, version).ready and not self.draining

    # --- inference --------------------------------------------------------------------------

    def arrival(self, name: str) -> Arrival | contextlib.nullcontext[None]:
        """Announce a request for ``name`` before its body is read: a batch forming meanwhile
        waits for it (within the window). Use as a context manager around reading and ``infer``."""
        entry = self.served.get(name)
        if entry is None or entry.batcher is None:
            return contextlib.nullcontext()
        return entry.batcher.arrival()

    async def infer(self, name: str, version: str | None, body: bytes,
                    header_length: str | None, arrival: Arrival | None = None) -> tuple[bytes, dict[str, str]]:
        """A KServe v2 inference request's body in, the response body and headers out."""
        entry = self.lookup(name, version)

        def decode() -> tuple[Any, list[np.ndarray]]:
            parsed = parse_request(body, header_length)
            return parsed, self.validate(entry, parsed.inputs)

        async def handle() -> tuple[bytes, dict[str, str]]:
            parsed, feeds = await asyncio.to_thread(decode) if len(body) > OFF_LOOP_BYTES else decode()
            outputs = await self.run(entry, feeds, arrival)
            named = {name: y.astype(np.float32) if y.dtype.kind == "f" else y
                     for name, y in zip(entry.model.output_names, outputs)}
            if sum(y.nbytes for y in named.values()) > OFF_LOOP_BYTES // 4:  # ~4 JSON bytes per byte of floats
                return await asyncio.to_thread(encode_response, entry.name, VERSION, parsed, named)
            return encode_response(entry.name, VERSION, parsed, named)

        return await self._counted(entry, handle)

    async def infer_tensors(self, name: str, version: str | None,
                            decode: Callable[[], dict[str, np.ndarray]]) -> dict[str, np.ndarray]:
        """For transports that decode their own tensors (gRPC): ``decode()`` gives the request's
        tensors by name; validation, cache, batching and metrics are those of ``infer``."""
        entry = self.lookup(name, version)

        async def handle() -> dict[str, np.ndarray]:
            outputs = await self.run(entry, self.validate(entry, decode()))
            return {name: y.astype(np.float32) if y.dtype.kind == "f" else y
                    for name, y in zip(entry.model.output_names, outputs)}

        return await self._counted(entry, handle)

    async def infer_image(self, name: str, body: bytes, arrival: Arrival | None = None) -> dict[str, Any]:
        """An image file's bytes in (decoded off the event loop), outputs and top-5 labels out."""
        entry = self.lookup(name)

        async def handle() -> dict[str, Any]:
            if len(entry.model.input_names) != 1:
                raise ProtocolError(400, f"model {entry.name!r} has {len(entry.model.input_names)} inputs; "
                                         "send tensors to /infer instead of an image")
            async with self._decoders:  # decoding allocates width x height x 3 bytes: a few at a time
                x = await asyncio.to_thread(decode_upload, entry, body, self.options.max_image_pixels)
            outputs = [y[0] for y in await self.run(entry, self.checked(entry, x), arrival)]
            answer: dict[str, Any] = {
                "model_name": entry.name, "model_version": VERSION,
                "outputs": [{"name": name, "datatype": datatype_of(y.dtype), "shape": list(y.shape),
                             "data": y.reshape(-1).tolist()} for name, y in zip(entry.model.output_names, outputs)],
            }
            if len(outputs) == 1:  # one output: its best classes
                labels = entry.model.labels
                flat = outputs[0].reshape(-1)
                answer["top_k"] = [{"label": labels[i] if labels else str(int(i)), "index": int(i),
                                    "score": float(flat[i])} for i in np.argsort(flat)[::-1][:5]]
            return answer

        return await self._counted(entry, handle)

    def validate(self, entry: ServedModel, inputs: dict[str, np.ndarray]) -> list[np.ndarray]:
        """The request's tensors checked once (names, datatypes, shapes, size, values) for the batcher."""
        specs = entry.model.manifest.inputs
        expected = [s.name for s in specs]
        if sorted(inputs) != sorted(expected):
            if len(expected) == 1:
                raise ProtocolError(400, f"model {entry.name!r} takes one input named {expected[0]!r}, "
                                         f"got {list(inputs)}")
            raise ProtocolError(400, f"model {entry.name!r} takes inputs {expected}, got {list(inputs)}")
        for spec in specs:
            x = inputs[spec.name]
            _check_datatype(spec.name, spec.dtype, x)
            shape = tuple(None if d == -1 else d for d in spec.shape[1:])
            if x.ndim != len(shape) + 1 or any(e is not None and e != s for s, e in zip(x.shape[1:], shape)) \
                    or not len(x):
                want = ["N", *("?" if d is None else d for d in shape)]
                raise ProtocolError(400, f"input {spec.name!r} has shape {list(x.shape)}; expected {want}")
            most = self.options.max_batch_size * REQUEST_BATCHES
            if len(x) > most:
                raise ProtocolError(413, f"{len(x)} samples in one request: this server takes at most {most} "
                                         f"({REQUEST_BATCHES} batches of --max-batch-size "
                                         f"{self.options.max_batch_size}); split the request")
        given = {n: (a.astype(np.float32, copy=False) if a.dtype.kind == "f" else a) for n, a in inputs.items()}
        return self.checked(entry, given)

    @staticmethod
    def checked(entry: ServedModel, x: Any) -> list[np.ndarray]:
        try:
            return entry.model.check_input(x)
        except EdgekitError as exc:
            raise ProtocolError(400, exc.message) from None

    async def run(self, entry: ServedModel, x: list[np.ndarray], arrival: Arrival | None = None) -> list[np.ndarray]:
        """Checked inputs through the cache and the model's batcher: every output, manifest order."""
        if not entry.ready or not self.accepting or entry.batcher is None:
            raise ProtocolError(503, f"model {entry.name!r} is not ready")
        found = entry.model.cached(x)
        cache = entry.model.prediction_cache
        if cache is not None:  # set, not a callback: multiprocess metrics (--workers) read stored values
            self.metrics.cache_hits.labels(model=entry.name, version=VERSION).set(cache.hits)
            self.metrics.cache_misses.labels(model=entry.name, version=VERSION).set(cache.misses)
        if found is not None:
            return found
        try:
            y = await entry.batcher.submit(x, arrival)
        except Overloaded as exc:
            raise ProtocolError(503, f"model {entry.name!r} is overloaded: {exc}; retry later") from None
        except EdgekitError as exc:
            raise ProtocolError(400, exc.message) from None
        except Exception as exc:  # the model raised: this request fails, the server keeps serving
            raise ProtocolError(500, f"inference failed: {type(exc).__name__}: {exc}") from None
        entry.model.remember(x, y)
        return y

    async def _counted(self, entry: ServedModel, handle: Callable[[], Awaitable[T]]) -> T:
        """Run a model route's work; count its success or failure under the model's name."""
        try:
            result = await handle()
        except ProtocolError as exc:
            self.metrics.failure.labels(model=entry.name, version=VERSION,
                                        reason=_REASONS.get(exc.status, "OTHER")).inc()
            raise
        except Exception:
            log.exception("internal error serving model %s", entry.name)
            self.metrics.failure.labels(model=entry.name, version=VERSION, reason="OTHER").inc()
            raise ProtocolError(500, "internal server error (the server log has the traceback)") from None
        self.metrics.success.labels(model=entry.name, version=VERSION).inc()
        return result

    def count_failure(self, name: str | None, status: int) -> None:
        """A failure before the dataplane took the request (e.g. a body over the limit)."""
        if name in self.served:
            self.metrics.failure.labels(model=name, version=VERSION, reason=_REASONS.get(status, "OTHER")).inc()


def _check_datatype(name: str, dtype: str, x: np.ndarray) -> None:
    """The request's datatype against the input's, as the model's metadata lists it: a float input
    takes FP32 (or FP16, widened exactly), never FP64, whose values would be rounded and can overflow
    FP32; an integer input takes integers whose values its type holds."""
    if dtype in ("float32", "float16", "float64"):
        if x.dtype not in (np.float32, np.float16):
            raise ProtocolError(400, f"input {name!r} is FP32; got {datatype_of(x.dtype)}: send FP32 (the model's "
                                     "metadata lists each input's datatype)")
        return
    if x.dtype.kind not in "iu":
        raise ProtocolError(400, f"input {name!r} takes integers ({_datatype(dtype)}), got {datatype_of(x.dtype)}")
    info = np.iinfo(np.dtype(dtype)) if np.dtype(dtype).kind in "iu" else None
    if info is not None and x.size and (int(x.min()) < info.min or int(x.max()) > info.max):
        raise ProtocolError(400, f"input {name!r} is {_datatype(dtype)}: values {int(x.min())}..{int(x.max())} "
                                 f"do not fit it")


def _datatype(dtype: str) -> str:
    try:
        return datatype_of(np.dtype(dtype))
    except TypeError:
        return "FP32"


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
