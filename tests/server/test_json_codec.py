"""The KServe v2 JSON codec on its own: tensor data read straight into NumPy (flat or nested,
every datatype), integers out of range and non-numbers refused, responses written from NumPy."""

from __future__ import annotations

import json

import numpy as np
import orjson
import pytest

from edgekit.server.protocol import InferRequest, ProtocolError, encode_response, parse_request


def request(data, datatype="FP32", shape=None):
    shape = shape if shape is not None else [len(data)]
    return json.dumps({"inputs": [{"name": "x", "shape": shape, "datatype": datatype, "data": data}]}).encode()


def test_a_large_float_request_decodes_exactly_as_the_json_module_does():
    x = np.random.default_rng(0).standard_normal((2, 32, 32, 3)).astype(np.float32)
    body = request(x.reshape(-1).tolist(), shape=list(x.shape))
    decoded = parse_request(body, None).inputs["x"]
    expected = np.asarray(json.loads(body)["inputs"][0]["data"], np.float32).reshape(x.shape)
    assert decoded.dtype == np.float32 and np.array_equal(decoded, expected) and np.array_equal(decoded, x)


@pytest.mark.parametrize("datatype, values", [
    ("FP32", [[1.5, 2], [3, -4.25]]), ("FP16", [[0.5, 1], [2, 3]]), ("FP64", [[1e300, 2], [3, 4]]),
    ("INT8", [[-128, 127], [0, 1]]), ("UINT8", [[0, 255], [1, 2]]), ("INT64", [[-(2**63), 2**63 - 1], [0, 1]]),
    ("UINT64", [[0, 2**64 - 1], [1, 2]]), ("BOOL", [[True, False], [False, True]]),
])
def test_nested_data_of_every_datatype(datatype, values):
    from edgekit.server.protocol import DATATYPES

    decoded = parse_request(request(values, datatype, [2, 2]), None).inputs["x"]
    assert decoded.dtype == np.dtype(DATATYPES[datatype]) and decoded.shape == (2, 2)
    assert np.array_equal(decoded, np.asarray(values, dtype=DATATYPES[datatype]))


@pytest.mark.parametrize("datatype, values, message", [
    ("INT8", [1, 300], "INT8 data hold values outside int8's range"),
    ("FP32", [1e300, 2], "FP32 data hold values outside float32's range"),
    ("UINT8", [-1, 2], "not a list of UINT8 numbers"),
    ("INT32", [1.5, 2], "not a list of INT32 numbers"),
    ("FP32", [1, "two"], "not a list of FP32 numbers"),
    ("FP32", [1, None], "not a list of FP32 numbers"),
    ("FP32", [1, 2, 3], "3 values for shape [2]"),
])
def test_values_that_do_not_fit_the_datatype_are_refused(datatype, values, message):
    with pytest.raises(ProtocolError, match=message.replace("[", r"\[").replace("]", r"\]")) as raised:
        parse_request(request(values, datatype, [2]), None)
    assert raised.value.status == 400


@pytest.mark.parametrize("body, message", [
    (b'{"inputs": [1, 2', "not valid JSON"),
    (b"\xff\xfe", "not valid JSON"),
    (b"[" * 5000 + b"]" * 5000, "nested too deeply"),
    (b'"inputs"', "non-empty 'inputs' list"),
    (b'{"inputs": [{"name": "x", "shape": [1], "datatype": "FP32", "data": [1]}], "outputs": 3}', "'outputs' must"),
])
def test_malformed_documents_are_400s(body, message):
    with pytest.raises(ProtocolError, match=message) as raised:
        parse_request(body, None)
    assert raised.value.status == 400


def test_responses_are_written_from_numpy_and_non_finite_values_become_null():
    parsed = InferRequest(id="r1", inputs={}, outputs=[])
    y = np.array([[0.25, np.nan, np.inf]], np.float32)
    body, headers = encode_response("m", "1", parsed, {"y": y, "k": np.array([[3]], np.int64),
                                                       "h": np.array([0.5], np.float16)})
    document = orjson.loads(body)
    assert headers["content-type"] == "application/json" and document["id"] == "r1"
    outputs = {o["name"]: o for o in document["outputs"]}
    assert outputs["y"] == {"name": "y", "datatype": "FP32", "shape": [1, 3], "data": [0.25, None, None]}
    assert outputs["k"]["data"] == [3] and outputs["k"]["datatype"] == "INT64"
    assert outputs["h"]["data"] == [0.5] and outputs["h"]["datatype"] == "FP16"
