"""The KServe v2 gRPC transport (``--grpc-port``): thin handlers over the same ``DataPlane`` as
REST, so both share the batcher, the cache, validation, metrics and error statuses.

It runs on the REST server's event loop (``grpc.aio``), started and stopped by the app's
lifespan. Tensors arrive as ``raw_input_contents`` (what tritonclient sends) or typed
``contents``; outputs go back as ``raw_output_contents``. A ``ProtocolError`` becomes the gRPC
status matching its HTTP one (400 -> INVALID_ARGUMENT, 404 -> NOT_FOUND, 503 -> UNAVAILABLE...).
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable
from typing import Any

import numpy as np

from .dataplane import VERSION, DataPlane
from .grpc_messages import METHODS, SERVICE, messages
from .protocol import DATATYPES, ProtocolError, datatype_of

log = logging.getLogger("edgekit.server")

# which InferTensorContents field carries each datatype
_CONTENTS = {"BOOL": "bool_contents", "INT8": "int_contents", "INT16": "int_contents", "INT32": "int_contents",
             "INT64": "int64_contents", "UINT8": "uint_contents", "UINT16": "uint_contents",
             "UINT32": "uint_contents", "UINT64": "uint64_contents", "FP32": "fp32_contents",
             "FP64": "fp64_contents"}


def _status(http: int) -> Any:
    import grpc

    return {400: grpc.StatusCode.INVALID_ARGUMENT, 404: grpc.StatusCode.NOT_FOUND,
            413: grpc.StatusCode.RESOURCE_EXHAUSTED, 503: grpc.StatusCode.UNAVAILABLE}.get(
        http, grpc.StatusCode.INTERNAL)


class InferenceService:
    """One method per rpc of ``inference.GRPCInferenceService``."""

    def __init__(self, plane: DataPlane) -> None:
        self.plane = plane
        self.types = messages()

    async def ServerLive(self, request: Any, context: Any) -> Any:
        return self.types["ServerLiveResponse"](live=True)

    async def ServerReady(self, request: Any, context: Any) -> Any:
        return self.types["ServerReadyResponse"](ready=self.plane.ready())

    async def ModelReady(self, request: Any, context: Any) -> Any:
        return self.types["ModelReadyResponse"](ready=self.plane.model_ready(request.name, request.version or None))

    async def ServerMetadata(self, request: Any, context: Any) -> Any:
        found = self.plane.server_metadata()
        return self.types["ServerMetadataResponse"](name=found["name"], version=found["version"],
                                                    extensions=found["extensions"])

    async def ModelMetadata(self, request: Any, context: Any) -> Any:
        found = self.plane.lookup(request.name, request.version or None).metadata()
        tensor = self.types["ModelMetadataResponse.TensorMetadata"]
        return self.types["ModelMetadataResponse"](
            name=found["name"], versions=found["versions"], platform=found["platform"],
            inputs=[tensor(name=t["name"], datatype=t["datatype"], shape=t["shape"]) for t in found["inputs"]],
            outputs=[tensor(name=t["name"], datatype=t["datatype"], shape=t["shape"]) for t in found["outputs"]])

    async def ModelInfer(self, request: Any, context: Any) -> Any:
        name, version = request.model_name, request.model_version or None
        outputs = await self.plane.infer_tensors(name, version, lambda: decode_inputs(request))
        wanted = [o.name for o in request.outputs] or list(outputs)
        response = self.types["ModelInferResponse"](model_name=name, model_version=VERSION, id=request.id)
        for output in wanted:
            if output not in outputs:
                raise ProtocolError(400, f"unknown output {output!r} (model outputs: {', '.join(outputs)})")
            array = np.ascontiguousarray(outputs[output])
            response.outputs.add(name=output, datatype=datatype_of(array.dtype), shape=list(array.shape))
            response.raw_output_contents.append(array.tobytes())
        return response


def decode_inputs(request: Any) -> dict[str, np.ndarray]:
    """A ModelInferRequest's tensors by name, from raw bytes or typed contents; never guessed."""
    raw = list(request.raw_input_contents)
    if raw and len(raw) != len(request.inputs):
        raise ProtocolError(400, f"{len(raw)} raw_input_contents for {len(request.inputs)} inputs")
    if raw:
        typed = [t.name for t in request.inputs if t.contents.ListFields()]
        if typed:  # which values are meant? the protocol allows one or the other, never both
            raise ProtocolError(400, f"input {typed[0]!r} has typed contents and the request also has "
                                     "raw_input_contents: send every tensor one way")
    inputs: dict[str, np.ndarray] = {}
    for index, tensor in enumerate(request.inputs):
        if tensor.datatype not in DATATYPES:
            raise ProtocolError(400, f"input {tensor.name!r}: unsupported datatype {tensor.datatype!r} "
                                     f"(use one of {', '.join(DATATYPES)})")
        if tensor.name in inputs:
            raise ProtocolError(400, f"input {tensor.name!r} is given twice")
        dtype = np.dtype(DATATYPES[tensor.datatype])
        shape = [int(d) for d in tensor.shape]
        if any(d < 0 for d in shape):
            raise ProtocolError(400, f"input {tensor.name!r}: shape {shape} has negative dimensions")
        count = int(np.prod(shape)) if shape else 1
        if raw:
            if len(raw[index]) != count * dtype.itemsize:
                raise ProtocolError(400, f"input {tensor.name!r}: {len(raw[index])} bytes for shape {shape} "
                                         f"of {tensor.datatype}")
            array = np.frombuffer(raw[index], dtype=dtype)
        else:
            values = getattr(tensor.contents, _CONTENTS.get(tensor.datatype, "fp32_contents"))
            if tensor.datatype == "FP16":
                raise ProtocolError(400, f"input {tensor.name!r}: FP16 travels as raw_input_contents")
            array = np.asarray(values, dtype=np.float64 if dtype.kind == "f" else None).astype(dtype)
            if array.size != count:
                raise ProtocolError(400, f"input {tensor.name!r}: {array.size} values for shape {shape}")
        inputs[tensor.name] = array.reshape(shape)
    if not inputs:
        raise ProtocolError(400, "the request has no inputs")
    return inputs


class Undecodable:
    """What the deserializer hands on for bytes that are not the rpc's message: the handler
    answers INVALID_ARGUMENT (grpc itself would answer UNKNOWN, as for a server bug)."""

    def __init__(self, message_type: str, exc: Exception) -> None:
        self.reason = f"the request is not a valid {message_type} message ({type(exc).__name__}: {exc})"


def _decoder(message_class: Any) -> Callable[[bytes], Any]:
    from google.protobuf.message import DecodeError

    def decode(data: bytes) -> Any:
        try:
            return message_class.FromString(data)
        except (DecodeError, ValueError, RecursionError) as exc:
            return Undecodable(message_class.DESCRIPTOR.name, exc)

    return decode


def _handler(method: Callable[[Any, Any], Awaitable[Any]]) -> Callable[[Any, Any], Awaitable[Any]]:
    """Turn ProtocolErrors (and bugs) into gRPC statuses with the same messages REST gives."""

    async def handle(request: Any, context: Any) -> Any:
        if isinstance(request, Undecodable):
            log.debug("gRPC %s: %s", method.__name__, request.reason)
            await context.abort(_status(400), request.reason)
        try:
            return await method(request, context)
        except ProtocolError as exc:
            await context.abort(_status(exc.status), exc.message)
        except Exception:
            log.exception("internal error answering gRPC %s", method.__name__)
            await context.abort(_status(500), "internal server error (the server log has the traceback)")

    return handle


class GrpcServer:
    """A ``grpc.aio`` server for the dataplane, on a port of its own."""

    def __init__(self, plane: DataPlane, host: str, port: int, max_message_bytes: int) -> None:
        import grpc

        self.server = grpc.aio.server(options=[("grpc.max_receive_message_length", max_message_bytes),
                                               ("grpc.max_send_message_length", max_message_bytes)])
        service = InferenceService(plane)
        types = service.types
        handlers = {
            name: grpc.unary_unary_rpc_method_handler(
                _handler(getattr(service, name)),
                request_deserializer=_decoder(types[request]),
                response_serializer=types[response].SerializeToString,
            )
            for name, (request, response) in METHODS.items()
        }
        self.server.add_generic_rpc_handlers((grpc.method_handlers_generic_handler(SERVICE, handlers),))
        address = f"[{host}]:{port}" if ":" in host else f"{host}:{port}"
        self.port = self.server.add_insecure_port(address)
        if self.port == 0:
            from ..errors import EdgekitError

            raise EdgekitError(f"cannot listen for gRPC on {address}",
                               hint="the port is in use or not allowed: pass another --grpc-port")

    async def start(self) -> None:
        await self.server.start()

    async def stop(self, grace_s: float) -> None:
        await self.server.stop(grace_s)
