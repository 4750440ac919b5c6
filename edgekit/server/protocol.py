"""KServe v2 (Open Inference Protocol) request/response encoding, JSON and binary tensor data.

A request body is JSON, or JSON followed by raw tensor bytes when the
``Inference-Header-Content-Length`` header says how long the JSON part is (the binary data
extension Triton and tritonclient use). Every malformed request becomes a ``ProtocolError``
with the HTTP status to answer.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

import numpy as np

DATATYPES = {
    "BOOL": np.bool_, "UINT8": np.uint8, "UINT16": np.uint16, "UINT32": np.uint32, "UINT64": np.uint64,
    "INT8": np.int8, "INT16": np.int16, "INT32": np.int32, "INT64": np.int64,
    "FP16": np.float16, "FP32": np.float32, "FP64": np.float64,
}
NAMES = {np.dtype(v): k for k, v in DATATYPES.items()}
HEADER_LENGTH = "inference-header-content-length"


class ProtocolError(Exception):
    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status
        self.message = message


@dataclass
class InferRequest:
    id: str | None
    inputs: dict[str, np.ndarray]
    outputs: list[dict[str, Any]] = field(default_factory=list)
    binary_outputs: bool = False


def datatype_of(dtype: np.dtype) -> str:
    return NAMES.get(np.dtype(dtype), "FP32")


def parse_request(body: bytes, header_length: str | None) -> InferRequest:
    """Decode untrusted bytes: the only possible failure is a 4xx ProtocolError."""
    try:
        return _parse_request(body, header_length)
    except ProtocolError:
        raise
    except RecursionError:
        raise ProtocolError(400, "request JSON is nested too deeply") from None
    except (TypeError, ValueError, AttributeError, KeyError, IndexError, OverflowError, MemoryError) as exc:
        raise ProtocolError(400, f"malformed request ({type(exc).__name__}: {exc})") from None


def _parse_request(body: bytes, header_length: str | None) -> InferRequest:
    if header_length is not None:
        try:
            json_length = int(header_length)
        except ValueError:
            raise ProtocolError(400, "Inference-Header-Content-Length is not an integer") from None
        if not 0 < json_length <= len(body):
            raise ProtocolError(400, f"Inference-Header-Content-Length {json_length} does not fit the {len(body)}-byte body")
        header, binary = body[:json_length], body[json_length:]
    else:
        header, binary = body, b""
    try:
        data = json.loads(header)
    except (ValueError, UnicodeDecodeError) as exc:
        raise ProtocolError(400, f"request body is not valid JSON ({exc})") from None
    if not isinstance(data, dict) or not isinstance(data.get("inputs"), list) or not data["inputs"]:
        raise ProtocolError(400, "request must be a JSON object with a non-empty 'inputs' list")
    inputs: dict[str, np.ndarray] = {}
    offset = 0
    for i, tensor in enumerate(data["inputs"]):
        if not isinstance(tensor, dict):
            raise ProtocolError(400, f"inputs[{i}] must be an object")
        name, shape, datatype = tensor.get("name"), tensor.get("shape"), tensor.get("datatype")
        if not isinstance(name, str) or not isinstance(shape, list) or not all(
            isinstance(d, int) and not isinstance(d, bool) and d >= 0 for d in shape
        ):
            raise ProtocolError(400, f"inputs[{i}] needs 'name' and a 'shape' of non-negative integers")
        if datatype not in DATATYPES:
            raise ProtocolError(400, f"input {name!r}: unsupported datatype {datatype!r} (use one of {', '.join(DATATYPES)})")
        dtype = np.dtype(DATATYPES[datatype])
        count = int(np.prod(shape)) if shape else 1
        parameters = tensor.get("parameters") or {}
        if "binary_data_size" in parameters:
            size = parameters["binary_data_size"]
            if not isinstance(size, int) or size != count * dtype.itemsize or offset + size > len(binary):
                raise ProtocolError(400, f"input {name!r}: binary_data_size {size} does not match shape {shape} "
                                         f"of {datatype} or the bytes sent")
            array = np.frombuffer(binary, dtype=dtype, count=count, offset=offset).reshape(shape)
            offset += size
        else:
            values = tensor.get("data")
            if values is None:
                raise ProtocolError(400, f"input {name!r} has no 'data' (and no binary_data_size)")
            try:
                array = np.asarray(values, dtype=dtype)
            except (TypeError, ValueError):
                raise ProtocolError(400, f"input {name!r}: data is not a list of {datatype} numbers") from None
            if array.size != count:
                raise ProtocolError(400, f"input {name!r}: {array.size} values for shape {shape}")
            array = array.reshape(shape)
        inputs[name] = array
    if offset != len(binary):
        raise ProtocolError(400, f"{len(binary) - offset} bytes of binary data are not claimed by any input")
    requested = data.get("outputs") or []
    params = data.get("parameters") or {}
    binary_outputs = bool(params.get("binary_data_output")) or any(
        isinstance(o, dict) and (o.get("parameters") or {}).get("binary_data") for o in requested
    )
    return InferRequest(id=data.get("id"), inputs=inputs, outputs=[o for o in requested if isinstance(o, dict)],
                        binary_outputs=binary_outputs)


def encode_response(model: str, version: str, request: InferRequest, outputs: dict[str, np.ndarray]) -> tuple[bytes, dict[str, str]]:
    """JSON response, or JSON + binary output data when the client asked for binary outputs."""
    wanted = [o["name"] for o in request.outputs if "name" in o] or list(outputs)
    tensors = []
    chunks = []
    for name in wanted:
        if name not in outputs:
            raise ProtocolError(400, f"unknown output {name!r} (model outputs: {', '.join(outputs)})")
        array = np.ascontiguousarray(outputs[name])
        entry: dict[str, Any] = {"name": name, "datatype": datatype_of(array.dtype), "shape": list(array.shape)}
        binary = request.binary_outputs and _binary_requested(request, name)
        if binary:
            raw = array.tobytes()
            entry["parameters"] = {"binary_data_size": len(raw)}
            chunks.append(raw)
        else:
            entry["data"] = array.reshape(-1).tolist()
        tensors.append(entry)
    document: dict[str, Any] = {"model_name": model, "model_version": version, "outputs": tensors}
    if request.id is not None:
        document["id"] = request.id
    header = json.dumps(document).encode()
    if not chunks:
        return header, {"content-type": "application/json"}
    return header + b"".join(chunks), {"content-type": "application/octet-stream",
                                       "inference-header-content-length": str(len(header))}


def _binary_requested(request: InferRequest, name: str) -> bool:
    for output in request.outputs:
        if output.get("name") == name:
            return bool((output.get("parameters") or {}).get("binary_data", True))
    return True
