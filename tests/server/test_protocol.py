"""KServe v2 protocol with the real tritonclient.http client, and every error status over raw HTTP."""

from __future__ import annotations

import asyncio
import io
import json

import httpx
import numpy as np
import pytest
import tritonclient.http as triton
from PIL import Image

import edgekit
from edgekit.server.app import ServerOptions
from tests.bench.test_report_compare import make_report
from tests.conftest import EVAL, load_npz
from tests.server.conftest import running

pytestmark = pytest.mark.slow


def client(url: str) -> triton.InferenceServerClient:
    return triton.InferenceServerClient(url.removeprefix("http://"), concurrency=4)


def digits(n: int) -> tuple[np.ndarray, np.ndarray]:
    x, y = load_npz(EVAL)
    return (x[:n].astype(np.float32) / 255), y[:n]


def test_health_and_metadata_with_tritonclient(server):
    url, _, _ = server
    c = client(url)
    assert c.is_server_live() and c.is_server_ready()
    assert c.is_model_ready("digits") and not c.is_model_ready("nope")
    meta = c.get_model_metadata("digits")
    assert meta["inputs"] == [{"name": "image", "datatype": "FP32", "shape": [-1, 8, 8, 1]}]
    assert meta["outputs"][0]["shape"] == [-1, 10]
    assert c.get_server_metadata()["name"] == "edgekit"
    assert c.get_model_metadata("digits", model_version="1")["name"] == "digits"


@pytest.mark.parametrize("binary", [False, True])
def test_infer_json_and_binary_with_tritonclient(server, binary):
    url, _, _ = server
    x, y = digits(6)
    tensor = triton.InferInput("image", list(x.shape), "FP32")
    tensor.set_data_from_numpy(x, binary_data=binary)
    output = triton.InferRequestedOutput("output_0", binary_data=binary)
    result = client(url).infer("digits", [tensor], outputs=[output], request_id="r1")
    probabilities = result.as_numpy("output_0")
    assert probabilities.shape == (6, 10)
    assert (probabilities.argmax(axis=1) == y).mean() >= 5 / 6
    assert result.get_response()["id"] == "r1"
    with edgekit.load(server[1].state.served["digits"].model.root, artifact="onnx") as local:
        np.testing.assert_allclose(probabilities, local.predict_tensor(x), atol=1e-6)


def test_concurrent_requests_are_batched_and_counted(server):
    url, app, _ = server
    x, _ = digits(32)

    async def burst():
        async with httpx.AsyncClient(base_url=url, timeout=30) as http:
            bodies = [{"inputs": [{"name": "image", "shape": [1, 8, 8, 1], "datatype": "FP32",
                                   "data": (x[i] + 1e-3 * i).reshape(-1).tolist()}]} for i in range(32)]
            return await asyncio.gather(*(http.post("/v2/models/digits/infer", json=b) for b in bodies))

    responses = asyncio.run(burst())
    assert all(r.status_code == 200 for r in responses)
    metrics = httpx.get(f"{url}/metrics").text
    inferences = _metric(metrics, "nv_inference_count")
    executions = _metric(metrics, "nv_inference_exec_count")
    assert inferences >= 32 and executions < inferences  # several requests shared a batch
    assert "edgekit_batch_size_bucket" in metrics and "nv_inference_queue_duration_us" in metrics


def _metric(text: str, name: str) -> float:
    for line in text.splitlines():
        if line.startswith(name + "{") and 'model="digits"' in line:
            return float(line.rsplit(" ", 1)[1])
    raise AssertionError(f"{name} not found")


def test_prediction_cache_counts_hits(server):
    url, _, _ = server
    body = {"inputs": [{"name": "image", "shape": [1, 8, 8, 1], "datatype": "FP32", "data": [0.25] * 64}]}
    before = _metric(httpx.get(f"{url}/metrics").text, "nv_cache_num_hits_per_model")
    for _ in range(3):
        assert httpx.post(f"{url}/v2/models/digits/infer", json=body).status_code == 200
    after = _metric(httpx.get(f"{url}/metrics").text, "nv_cache_num_hits_per_model")
    assert after - before >= 2


def test_image_upload_applies_the_manifest_preprocessing(server):
    url, _, _ = server
    x, y = load_npz(EVAL)
    buffer = io.BytesIO()
    Image.fromarray(x[0, ..., 0], mode="L").save(buffer, format="PNG")
    response = httpx.post(f"{url}/v2/models/digits/infer/image", content=buffer.getvalue(),
                          headers={"content-type": "image/png"})
    assert response.status_code == 200, response.text
    assert response.json()["top_k"][0]["label"] == str(y[0])
    bad = httpx.post(f"{url}/v2/models/digits/infer/image", content=b"not an image")
    assert bad.status_code == 400 and "not an image" in bad.json()["error"]


@pytest.mark.parametrize("body, status, message", [
    (b"{not json", 400, "not valid JSON"),
    (json.dumps({"inputs": []}).encode(), 400, "non-empty 'inputs'"),
    (json.dumps({"inputs": [{"name": "wrong", "shape": [1, 8, 8, 1], "datatype": "FP32", "data": [0] * 64}]}).encode(),
     400, "takes one input named 'image'"),
    (json.dumps({"inputs": [{"name": "image", "shape": [1, 7, 8, 1], "datatype": "FP32", "data": [0] * 56}]}).encode(),
     400, "expected ['N', 8, 8, 1]"),
    (json.dumps({"inputs": [{"name": "image", "shape": [1, 8, 8, 1], "datatype": "INT32", "data": [0] * 64}]}).encode(),
     400, "is FP32; got INT32"),
    (json.dumps({"inputs": [{"name": "image", "shape": [1, 8, 8, 1], "datatype": "FP64", "data": [0] * 64}]}).encode(),
     400, "is FP32; got FP64"),
    (json.dumps({"inputs": [{"name": "image", "shape": [1, 8, 8, 1], "datatype": "FP32", "data": [1e300] * 64}]}).encode(),
     400, "outside float32's range"),
    (json.dumps({"inputs": [{"name": "image", "shape": [1, 8, 8, 1], "datatype": "FP32", "data": [0] * 10}]}).encode(),
     400, "10 values for shape"),
    (json.dumps({"inputs": [{"name": "image", "shape": [1, 8, 8, 1], "datatype": "STRING", "data": []}]}).encode(),
     400, "unsupported datatype"),
])
def test_bad_requests_get_400_with_a_message(server, body, status, message):
    url, _, _ = server
    response = httpx.post(f"{url}/v2/models/digits/infer", content=body)
    assert response.status_code == status and message in response.json()["error"], response.text


def test_unknown_model_oversize_body_and_binary_mismatch(server):
    url, _, _ = server
    body = {"inputs": [{"name": "image", "shape": [1, 8, 8, 1], "datatype": "FP32", "data": [0] * 64}]}
    assert httpx.post(f"{url}/v2/models/nope/infer", json=body).status_code == 404
    assert httpx.post(f"{url}/v2/models/digits/versions/7/infer", json=body).status_code == 404
    assert httpx.get(f"{url}/v2/models/nope").json()["error"].startswith("unknown model")
    huge = httpx.post(f"{url}/v2/models/digits/infer", content=b"x" * (2 << 20))
    assert huge.status_code == 413 and "exceeds" in huge.json()["error"]
    header = json.dumps({"inputs": [{"name": "image", "shape": [1, 8, 8, 1], "datatype": "FP32",
                                     "parameters": {"binary_data_size": 256}}]}).encode()
    short = httpx.post(f"{url}/v2/models/digits/infer", content=header + b"\0" * 100,
                       headers={"Inference-Header-Content-Length": str(len(header))})
    assert short.status_code == 400 and "binary_data_size" in short.json()["error"]


def test_reports_are_collected_and_listed(server):
    url, _, reports = server
    report = make_report("pi5")
    from edgekit.bench.report import push

    assert push(report, f"{url}/v2/reports") == 201
    listed = httpx.get(f"{url}/v2/reports").json()["reports"]
    assert len(listed) == 1 and listed[0]["device"] == "pi5"
    assert httpx.get(f"{url}/v2/reports/{listed[0]['id']}").json()["model"]["name"] == "digits"
    bad = httpx.post(f"{url}/v2/reports", json={"hello": 1})
    assert bad.status_code == 400 and "not an edgekit benchmark report" in bad.json()["error"]
    from edgekit.bench.compare import compare

    assert compare([str(reports)]).rows  # the stored folder is what `edgekit compare` reads


def test_overload_gives_only_503s_and_answers_every_accepted_request(digits_all_package):
    model = edgekit.load(digits_all_package, artifact="onnx")
    slow_run = model.predict_tensor

    def slow(x):
        import time

        time.sleep(0.05)
        return slow_run(x)

    model.predict_tensor = slow  # a slow model to fill the small queue
    with running([model], ServerOptions(max_batch_size=2, max_queue_delay_us=0, max_queue_size=2)) as (url, _):
        body = {"inputs": [{"name": "image", "shape": [1, 8, 8, 1], "datatype": "FP32", "data": [0.5] * 64}]}

        async def flood():
            async with httpx.AsyncClient(base_url=url, timeout=60) as http:
                return await asyncio.gather(*(http.post("/v2/models/digits/infer", json=body) for _ in range(60)))

        responses = asyncio.run(flood())
        codes = [r.status_code for r in responses]
        assert set(codes) <= {200, 503} and codes.count(503) > 0 and codes.count(200) >= 2
        assert all("overloaded" in r.json()["error"] for r in responses if r.status_code == 503)
        assert all(len(r.json()["outputs"][0]["data"]) == 10 for r in responses if r.status_code == 200)
        assert httpx.post(f"{url}/v2/models/digits/infer", json=body, timeout=30).status_code == 200


def test_a_model_that_raises_fails_its_batch_and_the_server_keeps_serving(digits_all_package):
    model = edgekit.load(digits_all_package, artifact="onnx")
    real = model.run_checked  # what the batcher runs, after the dataplane checked the input once
    calls = {"n": 0}

    def flaky(x, raw=False):
        calls["n"] += 1
        if calls["n"] == 1:
            raise RuntimeError("accelerator fell over")
        return real(x, raw)

    model.run_checked = flaky
    with running([model], ServerOptions(max_batch_size=4, max_queue_delay_us=0)) as (url, _):
        body = {"inputs": [{"name": "image", "shape": [1, 8, 8, 1], "datatype": "FP32", "data": [0.5] * 64}]}
        first = httpx.post(f"{url}/v2/models/digits/infer", json=body)
        assert first.status_code == 500 and "accelerator fell over" in first.json()["error"]
        assert httpx.post(f"{url}/v2/models/digits/infer", json=body).status_code == 200
        metrics = httpx.get(f"{url}/metrics").text
        assert 'nv_inference_request_failure{model="digits",reason="OTHER",version="1"} 1.0' in metrics


def test_one_failing_request_does_not_fail_the_others_in_its_batch(digits_all_package):
    """A batch of 4 requests in which one makes the model raise: the other 3 are answered."""
    model = edgekit.load(digits_all_package, artifact="onnx")
    real = model.run_checked

    def picky(x, raw=False):
        if np.any(x[0] == 0.125):  # the poisoned request's value (x: one array per input)
            raise RuntimeError("cannot run this one")
        return real(x, raw)

    model.run_checked = picky
    with running([model], ServerOptions(max_batch_size=4, max_queue_delay_us=200_000)) as (url, app):
        def body(value):
            return {"inputs": [{"name": "image", "shape": [1, 8, 8, 1], "datatype": "FP32", "data": [value] * 64}]}

        async def send_all():
            async with httpx.AsyncClient() as http:
                return await asyncio.gather(*(http.post(f"{url}/v2/models/digits/infer", json=body(v))
                                              for v in (0.25, 0.125, 0.5, 0.75)))

        responses = asyncio.run(send_all())
    assert [r.status_code for r in responses] == [200, 500, 200, 200]
    assert "cannot run this one" in responses[1].json()["error"]


def test_the_dataplane_answers_without_http(digits_all_package):
    """Lookup, validation, batching and metrics work on decoded requests, no transport involved."""
    from edgekit.server.dataplane import DataPlane
    from edgekit.server.protocol import ProtocolError

    plane = DataPlane([edgekit.load(digits_all_package, artifact="onnx")], ServerOptions(cache_predictions=True))
    x, _ = digits(2)
    body = json.dumps({"inputs": [{"name": "image", "shape": list(x.shape), "datatype": "FP32",
                                   "data": x.ravel().tolist()}]}).encode()

    async def scenario():
        plane.start()
        content, _ = await plane.infer("digits", None, body, None)
        again, _ = await plane.infer("digits", "1", body, None)
        with pytest.raises(ProtocolError) as missing:
            await plane.infer("nope", None, body, None)
        await plane.stop()
        return content, again, missing.value

    content, again, missing = asyncio.run(scenario())
    outputs = json.loads(content)["outputs"][0]
    assert outputs["shape"] == [2, 10] and content == again
    assert missing.status == 404
    assert plane.served["digits"].model.prediction_cache.hits == 1  # one cache, keyed once


def test_every_served_model_has_its_counters_at_zero_before_its_first_request():
    """As Triton: a dashboard's rate() and a before/after reading need the series from the start."""
    from edgekit.server.metrics import ServerMetrics

    metrics = ServerMetrics()
    metrics.observer("fresh")
    text = metrics.exposition().decode()
    for name in ("nv_cache_num_hits_per_model", "nv_inference_request_success", "nv_inference_count"):
        assert f'{name}{{model="fresh",version="1"}} 0.0' in text, name


def test_a_request_over_the_sample_limit_names_the_limit(server):
    """It was refused as "more than this server accepts", the limit unnamed."""
    url, _, _ = server
    body = {"inputs": [{"name": "image", "shape": [8 * 64 + 1, 8, 8, 1], "datatype": "FP32",
                        "data": [0] * ((8 * 64 + 1) * 64)}]}
    response = httpx.post(f"{url}/v2/models/digits/infer", json=body)
    assert response.status_code == 413, response.text
    assert "takes at most 512 (64 batches of --max-batch-size 8)" in response.json()["error"]
