"""KServe v2 over gRPC (``--grpc-port``) with the real ``tritonclient.grpc`` client: health,
metadata, inference equal to REST and to the runtime, batching across both transports, and
errors with the gRPC status matching REST's."""

from __future__ import annotations

import concurrent.futures

import numpy as np
import pytest

import edgekit
from edgekit.server.app import ServerOptions
from tests.conftest import EVAL, load_npz
from tests.server.conftest import free_port, running

grpcclient = pytest.importorskip("tritonclient.grpc")
from tritonclient.utils import InferenceServerException  # noqa: E402

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def both(digits_all_package):
    model = edgekit.load(digits_all_package, artifact="onnx")
    port = free_port()
    options = ServerOptions(max_batch_size=8, max_queue_delay_us=2000, grpc_port=port, max_body_bytes=1 << 20)
    with running([model], options) as (url, app):
        yield url, grpcclient.InferenceServerClient(f"127.0.0.1:{port}"), app


def digits(n: int) -> np.ndarray:
    x, _ = load_npz(EVAL)
    return x[:n].astype(np.float32) / 255


def infer(client, x, name="digits"):
    tensor = grpcclient.InferInput("image", list(x.shape), "FP32")
    tensor.set_data_from_numpy(x)
    return client.infer(name, [tensor], outputs=[grpcclient.InferRequestedOutput("output_0")], request_id="g1")


def test_health_and_metadata(both):
    _, client, _ = both
    assert client.is_server_live() and client.is_server_ready()
    assert client.is_model_ready("digits") and client.get_server_metadata().name == "edgekit"
    meta = client.get_model_metadata("digits")
    assert [(t.name, t.datatype, list(t.shape)) for t in meta.inputs] == [("image", "FP32", [-1, 8, 8, 1])]
    assert list(meta.outputs[0].shape) == [-1, 10]


def test_inference_equals_rest_and_the_runtime(both):
    url, client, app = both
    x = digits(5)
    result = infer(client, x)
    got = result.as_numpy("output_0")
    assert result.get_response().id == "g1" and got.shape == (5, 10)
    with edgekit.load(app.state.served["digits"].model.root, artifact="onnx") as local:
        np.testing.assert_allclose(got, local.predict_tensor(x), atol=1e-6)
    import tritonclient.http as httpclient

    rest_input = httpclient.InferInput("image", list(x.shape), "FP32")
    rest_input.set_data_from_numpy(x)
    rest = httpclient.InferenceServerClient(url.removeprefix("http://")).infer("digits", [rest_input])
    np.testing.assert_array_equal(got, rest.as_numpy("output_0"))


def test_concurrent_grpc_requests_are_batched_and_counted(digits_all_package):
    """16 clients at once share batches. The server waits 50 ms for a batch to fill (the shared
    fixture's 2 ms let a loaded machine space every arrival past it: 33 executions for 32 requests)."""
    model = edgekit.load(digits_all_package, artifact="onnx")
    port = free_port()
    options = ServerOptions(max_batch_size=8, max_queue_delay_us=50_000, grpc_port=port, max_body_bytes=1 << 20)
    with running([model], options) as (_, app):
        _batched_and_counted(grpcclient.InferenceServerClient(f"127.0.0.1:{port}"), app)


def _batched_and_counted(client, app) -> None:
    metrics = app.state.metrics

    def counted():
        return (metrics.inference_count.labels(model="digits", version="1")._value.get(),
                metrics.exec_count.labels(model="digits", version="1")._value.get())

    inferences, executions = counted()
    x = digits(32)
    with concurrent.futures.ThreadPoolExecutor(16) as pool:
        results = list(pool.map(lambda i: infer(client, x[i : i + 1]).as_numpy("output_0"), range(32)))
    np.testing.assert_allclose(np.concatenate(results), infer(client, x).as_numpy("output_0"), atol=1e-6)
    after_inferences, after_executions = counted()
    assert after_inferences - inferences >= 64
    assert after_executions - executions < 33  # several gRPC requests shared a batch


@pytest.mark.parametrize("change, status, message", [
    ({"name": "nope"}, "StatusCode.NOT_FOUND", "unknown model 'nope'"),
    ({"shape": [1, 7, 8, 1]}, "StatusCode.INVALID_ARGUMENT", "expected ['N', 8, 8, 1]"),
    ({"input": "wrong"}, "StatusCode.INVALID_ARGUMENT", "takes one input named 'image'"),
    ({"datatype": "INT32"}, "StatusCode.INVALID_ARGUMENT", "is FP32; got INT32"),
    ({"datatype": "FP64"}, "StatusCode.INVALID_ARGUMENT", "is FP32; got FP64"),  # was taken, rounded, silently
])
def test_errors_carry_the_rest_message_and_a_matching_status(both, change, status, message):
    _, client, _ = both
    shape = change.get("shape", [1, 8, 8, 1])
    datatype = change.get("datatype", "FP32")
    tensor = grpcclient.InferInput(change.get("input", "image"), shape, datatype)
    tensor.set_data_from_numpy(np.zeros(shape, {"FP32": np.float32, "FP64": np.float64}.get(datatype, np.int32)))
    with pytest.raises(InferenceServerException) as raised:
        client.infer(change.get("name", "digits"), [tensor])
    assert raised.value.status() == status and message in raised.value.message()


def test_the_messages_match_tritonclients_own_descriptors():
    """Field names, numbers, types and nesting of every message edgekit builds in code equal
    those of the proto tritonclient was generated from: the wire format cannot drift."""
    import tritonclient.grpc.service_pb2 as theirs

    from edgekit.server.grpc_messages import _MESSAGES, messages

    def fields(descriptor):
        return {(f.name, f.number, f.type, f.message_type.full_name if f.message_type else None)
                for f in descriptor.fields}

    for path, message in messages().items():
        descriptor = theirs.DESCRIPTOR.message_types_by_name[path.split(".")[0]]
        for part in path.split(".")[1:]:
            descriptor = descriptor.nested_types_by_name[part]
        assert fields(message.DESCRIPTOR) <= fields(descriptor), path
    assert set(_MESSAGES) >= {"ModelInferRequest", "ModelInferResponse", "InferTensorContents"}
