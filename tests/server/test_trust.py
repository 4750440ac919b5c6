"""Careless and hostile clients against the real `edgekit serve`: a client hanging up mid-body
is one debug line and a counted reason, undecodable gRPC bytes are INVALID_ARGUMENT, and a
request with both raw and typed tensor contents is refused."""

from __future__ import annotations

import re
import socket
import subprocess
import sys
import time

import httpx
import numpy as np
import pytest

from tests.conftest import ROOT, EVAL, load_npz

pytestmark = [pytest.mark.slow, pytest.mark.serial]
grpc = pytest.importorskip("grpc")

INFER = "/inference.GRPCInferenceService/ModelInfer"


@pytest.fixture(scope="module")
def served(digits_package):
    """`edgekit serve --grpc-port 0`: REST and gRPC ports, and the process (its stderr is read at the end)."""
    proc = subprocess.Popen([sys.executable, "-m", "edgekit.cli", "serve", str(digits_package), "--port", "0",
                             "--grpc-port", "0"], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=ROOT)
    line = proc.stdout.readline()
    match = re.search(r"http://127\.0\.0\.1:(\d+)/v2 .* gRPC on 127\.0\.0\.1:(\d+)", line)
    assert match, (line, proc.stderr.read() if proc.poll() is not None else "")
    yield proc, int(match.group(1)), int(match.group(2))
    if proc.poll() is None:
        proc.terminate()
        proc.wait(timeout=60)


def failures(port: int, reason: str) -> float:
    text = httpx.get(f"http://127.0.0.1:{port}/metrics").text
    found = re.search(r'nv_inference_request_failure(?:_total)?\{model="digits",reason="%s",version="1"\} (\S+)'
                      % reason, text)
    return float(found.group(1)) if found else 0.0


def call_raw(grpc_port: int, payload: bytes) -> grpc.RpcError:
    with grpc.insecure_channel(f"127.0.0.1:{grpc_port}") as channel:
        infer = channel.unary_unary(INFER, request_serializer=None, response_deserializer=None)
        with pytest.raises(grpc.RpcError) as raised:
            infer(payload, timeout=30)
    return raised.value


@pytest.mark.parametrize("payload", [b"\xff\xff\xff\xff", b"\x0a\x10digits", b"\x12" + b"\x80" * 12])
def test_undecodable_grpc_messages_are_invalid_argument(served, payload):
    """They were UNKNOWN "Unexpected <class 'DecodeError'>", the status of a server bug."""
    _, _, grpc_port = served
    error = call_raw(grpc_port, payload)
    assert error.code() == grpc.StatusCode.INVALID_ARGUMENT, (error.code(), error.details())
    assert "not a valid ModelInferRequest" in error.details()


def test_raw_and_typed_contents_together_are_refused(served):
    from edgekit.server.grpc_messages import messages

    _, _, grpc_port = served
    types = messages()
    request = types["ModelInferRequest"](model_name="digits")
    tensor = request.inputs.add(name="image", datatype="FP32", shape=[1, 8, 8, 1])
    tensor.contents.fp32_contents.extend([0.5] * 64)
    request.raw_input_contents.append(np.zeros(64, np.float32).tobytes())
    error = call_raw(grpc_port, request.SerializeToString())
    assert error.code() == grpc.StatusCode.INVALID_ARGUMENT and "send every tensor one way" in error.details()


# last: it ends the module's server to read its whole log
def test_clients_hanging_up_mid_body_are_counted_not_logged_as_internal_errors(served):
    """150 such clients once wrote 12,900 log lines: "internal error" and two tracebacks each."""
    proc, port, _ = served
    before = failures(port, "CLIENT_DISCONNECTED")
    for _ in range(20):
        with socket.create_connection(("127.0.0.1", port)) as conn:
            conn.sendall(b"POST /v2/models/digits/infer HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                         b"Content-Length: 5000\r\n\r\n" + b'{"inputs": [' + b" " * 100)
    deadline = time.monotonic() + 20
    while failures(port, "CLIENT_DISCONNECTED") < before + 20 and time.monotonic() < deadline:
        time.sleep(0.1)
    assert failures(port, "CLIENT_DISCONNECTED") == before + 20
    x, _ = load_npz(EVAL)
    body = {"inputs": [{"name": "image", "shape": [1, 8, 8, 1], "datatype": "FP32",
                        "data": (x[0].astype(np.float32) / 255).ravel().tolist()}]}
    assert httpx.post(f"http://127.0.0.1:{port}/v2/models/digits/infer", json=body).status_code == 200
    proc.terminate()
    proc.wait(timeout=60)
    log = proc.stderr.read()
    assert "internal error" not in log and "Traceback" not in log, log[-3000:]
