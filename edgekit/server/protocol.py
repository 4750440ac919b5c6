"""KServe v2 (Open Inference Protocol) request/response encoding, JSON and binary tensor data.

A request body is JSON, or JSON followed by raw tensor bytes when the
``Inference-Header-Content-Length`` header says how long the JSON part is (the binary data
extension Triton and tritonclient use). Every malformed request becomes a ``ProtocolError``
with the HTTP status to answer.

Request JSON is parsed with simdjson (pysimdjson), and each tensor's ``data`` array goes from
the parsed document straight into a NumPy buffer (``as_buffer``) without a Python float per
value: a 3 MB MobileNetV2 request decodes in about 4 ms instead of 90 ms with the json module
(13 ms with orjson and ``np.asarray``). Responses are written with orjson, output arrays
straight from NumPy (``OPT_SERIALIZE_NUMPY``); non-finite values, which JSON cannot carry, are
written as ``null``.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np
import orjson
import simdjson

DATATYPES = {
    "BOOL": np.bool_, "UINT8": np.uint8, "UINT16": np.uint16, "UINT32": np.uint32, "UINT64": np.uint64,
    "INT8": np.int8, "INT16": np.int16, "INT32": np.int32, "INT64": np.int64,
    "FP16": np.float16, "FP32": np.float32, "FP64": np.float64,
}
NAMES = {np.dtype(v): k for k, v in DATATYPES.items()}
HEADER_LENGTH = "inference-header-content-length"


# The status a request gets when its client hung up before sending it whole (nginx's 499): no
# one reads the answer; the code names the failure in metrics and logs.
CLIENT_CLOSED = 499


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
    data = _parse_json(header)
    if not isinstance(data, simdjson.Object) or not isinstance(data.get("inputs"), simdjson.Array) \
            or not len(data["inputs"]):
        raise ProtocolError(400, "request must be a JSON object with a non-empty 'inputs' list")
    inputs: dict[str, np.ndarray] = {}
    offset = 0
    for i, tensor in enumerate(data["inputs"]):
        if not isinstance(tensor, simdjson.Object):
            raise ProtocolError(400, f"inputs[{i}] must be an object")
        name, shape, datatype = (_plain(tensor.get(key)) for key in ("name", "shape", "datatype"))
        if not isinstance(name, str) or not isinstance(shape, list) or not all(
            isinstance(d, int) and not isinstance(d, bool) and d >= 0 for d in shape
        ):
            raise ProtocolError(400, f"inputs[{i}] needs 'name' and a 'shape' of non-negative integers")
        if datatype not in DATATYPES:
            raise ProtocolError(400, f"input {name!r}: unsupported datatype {datatype!r} (use one of {', '.join(DATATYPES)})")
        dtype = np.dtype(DATATYPES[datatype])
        count = int(np.prod(shape)) if shape else 1
        parameters = _plain(tensor.get("parameters")) or {}
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
                array = _numbers(values, dtype)
            except OverflowError as exc:
                raise ProtocolError(400, f"input {name!r}: {datatype} data hold {exc}") from None
            except (TypeError, ValueError):
                raise ProtocolError(400, f"input {name!r}: data is not a list of {datatype} numbers") from None
            if array.size != count:
                raise ProtocolError(400, f"input {name!r}: {array.size} values for shape {shape}")
            array = array.reshape(shape)
        inputs[name] = array
    if offset != len(binary):
        raise ProtocolError(400, f"{len(binary) - offset} bytes of binary data are not claimed by any input")
    requested = _plain(data.get("outputs")) or []
    params = _plain(data.get("parameters")) or {}
    if not isinstance(requested, list) or not isinstance(params, dict):
        raise ProtocolError(400, "'outputs' must be a list and 'parameters' an object")
    binary_outputs = bool(params.get("binary_data_output")) or any(
        isinstance(o, dict) and (o.get("parameters") or {}).get("binary_data") for o in requested
    )
    return InferRequest(id=_plain(data.get("id")), inputs=inputs, outputs=[o for o in requested if isinstance(o, dict)],
                        binary_outputs=binary_outputs)


def _parse_json(header: bytes) -> Any:
    """The request's JSON document (a fresh parser per request: a simdjson parser's documents
    must not outlive its next parse, and requests are decoded on several threads)."""
    try:
        return simdjson.Parser().parse(header)
    except RuntimeError:  # DEPTH_ERROR
        raise ProtocolError(400, "request JSON is nested too deeply") from None
    except (ValueError, UnicodeDecodeError) as exc:
        raise ProtocolError(400, f"request body is not valid JSON ({str(exc).splitlines()[0]})") from None


def _plain(value: Any) -> Any:
    """A parsed JSON value as Python objects (for everything but tensor data)."""
    if isinstance(value, simdjson.Object):
        return value.as_dict()
    if isinstance(value, simdjson.Array):
        return value.as_list()
    return value


_BUFFER_TYPES = {"f": ("d", np.float64), "i": ("i", np.int64), "u": ("u", np.uint64)}


def _numbers(values: Any, dtype: np.dtype) -> np.ndarray:
    """A JSON array of numbers (nested row-major or flat) as a flat array of ``dtype``, read
    straight from the parsed document; integers out of the datatype's range are refused."""
    if not isinstance(values, simdjson.Array) or dtype.kind not in _BUFFER_TYPES:
        return np.asarray(_plain(values), dtype=dtype).reshape(-1)  # BOOL, or a bare scalar
    of_type, wide = _BUFFER_TYPES[dtype.kind]
    read = np.frombuffer(values.as_buffer(of_type=of_type), dtype=wide)
    if dtype.kind in "iu" and read.size:
        limits = np.iinfo(dtype)
        if read.min() < limits.min or read.max() > limits.max:
            raise OverflowError(f"values outside {dtype}'s range")
    if dtype.kind == "f" and dtype != wide and read.size:  # FP32/FP16 from JSON's doubles: no silent inf
        largest = float(np.finfo(dtype).max)  # JSON numbers are finite: two reductions, no copy (a hot path)
        if float(read.max()) > largest or float(read.min()) < -largest:
            raise OverflowError(f"values outside {dtype}'s range (at most {largest:.4g} in magnitude)")
    return read.astype(dtype)


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
            flat = array.reshape(-1)
            entry["data"] = flat.astype(np.float32) if flat.dtype == np.float16 else flat  # orjson writes NumPy
        tensors.append(entry)
    document: dict[str, Any] = {"model_name": model, "model_version": version, "outputs": tensors}
    if request.id is not None:
        document["id"] = request.id
    header = orjson.dumps(document, option=orjson.OPT_SERIALIZE_NUMPY)
    if not chunks:
        return header, {"content-type": "application/json"}
    return header + b"".join(chunks), {"content-type": "application/octet-stream",
                                       "inference-header-content-length": str(len(header))}


def _binary_requested(request: InferRequest, name: str) -> bool:
    for output in request.outputs:
        if output.get("name") == name:
            return bool((output.get("parameters") or {}).get("binary_data", True))
    return True
