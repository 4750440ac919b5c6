#!/usr/bin/env python
"""Serving throughput: edgekit serve vs a naive server vs the runtime's offline batched ceiling.

    .venv/bin/python scripts/bench_server.py [--seconds 6] [--concurrency 1,8,32] [--output out/bench/bench_server.json]

Packages MobileNetV2 224 (a real-size image model, 3 MB JSON requests) and the digits model (a
tiny one) as INT8 ONNX, then for each on loopback, in one run:
* edgekit with KServe v2 JSON bodies (what curl, requests and most clients send) and with the
  binary tensor extension (what tritonclient sends): ``python -m edgekit.run PKG --serve``
  (dynamic batching);
* naive: one request at a time, JSON in and out, no batching (the common Flask pattern), on
  a raw ONNX Runtime session;
* offline ceiling: the same session running batches of ``--max-batch-size`` back to back;
* with ``--peers``: MLServer 1.7.1 (a custom ONNX Runtime runtime with adaptive batching, JSON)
  and PyTriton 0.7.0 (the real tritonserver, JSON and binary), with the same batch size and
  window, each from its own virtual environment created on first use.
A closed-loop client (N workers, each sending its next request when the last one returns;
request bodies pre-encoded) runs for ``--seconds`` per concurrency level, bounded in time and
count. Prints and saves JSON; compare ratios within the run.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import platform
import socket
import subprocess
import sys
import tempfile
import textwrap
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "scripts"))

from benchio import print_and_save, require_signal  # noqa: E402

NAIVE_SERVER = textwrap.dedent("""
    import json, sys
    from http.server import BaseHTTPRequestHandler, HTTPServer
    import numpy as np, onnxruntime as ort
    options = ort.SessionOptions(); options.intra_op_num_threads = int(sys.argv[3])
    session = ort.InferenceSession(sys.argv[1], options, providers=["CPUExecutionProvider"])
    name = session.get_inputs()[0].name
    class Handler(BaseHTTPRequestHandler):
        def do_POST(self):
            body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
            x = np.asarray(body["data"], dtype=np.float32).reshape(body["shape"])
            y = session.run(None, {name: x})[0]
            out = json.dumps({"data": y.reshape(-1).tolist()}).encode()
            self.send_response(200); self.send_header("Content-Length", str(len(out))); self.end_headers()
            self.wfile.write(out)
        def log_message(self, *args):
            pass
    HTTPServer(("127.0.0.1", int(sys.argv[2])), Handler).serve_forever()
""")


# Peer servers for --peers, each in its own virtual environment (edgekit.toolenv; created on first
# use): MLServer 1.7.1 needs uvloop<0.22 here, PyTriton 0.7.0 needs numpy<2. Never test dependencies.
MLSERVER_RUNTIME = textwrap.dedent("""
    import os
    import numpy as np, onnxruntime as ort
    from mlserver import MLModel
    from mlserver.codecs import NumpyCodec
    from mlserver.types import InferenceRequest, InferenceResponse

    class OnnxModel(MLModel):
        async def load(self):
            options = ort.SessionOptions(); options.intra_op_num_threads = int(os.environ["BENCH_THREADS"])
            self.session = ort.InferenceSession(os.environ["BENCH_MODEL"], options, providers=["CPUExecutionProvider"])
            self.input = self.session.get_inputs()[0].name
            self.output = os.environ["BENCH_OUTPUT"]
            return True

        async def predict(self, payload: InferenceRequest) -> InferenceResponse:
            x = NumpyCodec.decode_input(payload.inputs[0]).astype(np.float32)
            y = self.session.run(None, {self.input: x})[0]
            return InferenceResponse(model_name=self.name, outputs=[NumpyCodec.encode_output(self.output, y)])
""")
PYTRITON_SERVER = textwrap.dedent("""
    import os, sys
    import numpy as np, onnxruntime as ort
    from pytriton.decorators import batch
    from pytriton.model_config import DynamicBatcher, ModelConfig, Tensor
    from pytriton.triton import Triton, TritonConfig

    model, name, output, port, threads, batch_size, delay_us = sys.argv[1:8]
    options = ort.SessionOptions(); options.intra_op_num_threads = int(threads)
    session = ort.InferenceSession(model, options, providers=["CPUExecutionProvider"])
    spec = session.get_inputs()[0]

    @batch
    def infer(**inputs):
        return {output: session.run(None, {spec.name: inputs[spec.name].astype(np.float32)})[0]}

    port = int(port)
    config = TritonConfig(http_port=port, grpc_port=port + 1, metrics_port=port + 2)
    with Triton(config=config) as triton:
        triton.bind(model_name=name, infer_func=infer,
                    inputs=[Tensor(name=spec.name, dtype=np.float32, shape=tuple(spec.shape[1:]))],
                    outputs=[Tensor(name=output, dtype=np.float32, shape=(-1,))],
                    config=ModelConfig(max_batch_size=int(batch_size),
                                       batcher=DynamicBatcher(max_queue_delay_microseconds=int(delay_us))))
        triton.serve()
""")


def peer_pythons() -> dict[str, str]:
    """The peers' interpreters, creating their environments on first use."""
    from edgekit import toolenv

    mlserver = toolenv.Tool("bench-mlserver", ("mlserver==1.7.1", "uvloop<0.22", "onnxruntime>=1.20"),
                            "the MLServer peer of scripts/bench_server.py --peers")
    pytriton = toolenv.Tool("bench-pytriton", ("nvidia-pytriton==0.7.0", "numpy<2", "onnxruntime>=1.20"),
                            "the PyTriton peer of scripts/bench_server.py --peers")
    return {"mlserver": toolenv.python_for(mlserver), "pytriton": toolenv.python_for(pytriton)}


def start_peers(pythons: dict[str, str], name: str, onnx_path: Path, output_name: str, args: argparse.Namespace,
                env: dict[str, str], work: Path) -> tuple[dict[str, subprocess.Popen], dict[str, int]]:
    """MLServer (custom ONNX Runtime runtime, adaptive batching) and PyTriton, with edgekit's batching."""
    import json as _json
    import sysconfig

    ports = {"mlserver": free_port(), "pytriton": free_port()}
    folder = work / f"mlserver-{name}"
    (folder / name).mkdir(parents=True, exist_ok=True)
    (folder / "runtime.py").write_text(MLSERVER_RUNTIME)
    (folder / "settings.json").write_text(_json.dumps({"http_port": ports["mlserver"], "grpc_port": free_port(),
                                                       "metrics_port": free_port(), "parallel_workers": 0}))
    (folder / name / "model-settings.json").write_text(_json.dumps({
        "name": name, "implementation": "runtime.OnnxModel", "max_batch_size": args.max_batch_size,
        "max_batch_time": args.max_queue_delay_us / 1e6}))
    peer_env = {**env, "BENCH_MODEL": str(onnx_path), "BENCH_OUTPUT": output_name, "BENCH_THREADS": str(args.threads),
                "LD_LIBRARY_PATH": sysconfig.get_config_var("LIBDIR") or "", "PYTHONPATH": str(folder)}
    servers = {
        "mlserver": subprocess.Popen([pythons["mlserver"], "-m", "mlserver.cli.main", "start", str(folder)],
                                     cwd=folder, env=peer_env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL),
        "pytriton": subprocess.Popen([pythons["pytriton"], "-c", PYTRITON_SERVER, str(onnx_path), name, output_name,
                                      str(ports["pytriton"]), str(args.threads), str(args.max_batch_size),
                                      str(args.max_queue_delay_us)],
                                     cwd=work, env=peer_env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL),
    }
    return servers, ports


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_ready(url: str, need_ok: bool = True, timeout: float = 120) -> None:
    """Until ``url`` answers (200 when ``need_ok``; any HTTP answer otherwise)."""
    import httpx

    deadline = time.time() + timeout
    while time.time() < deadline:
        try:
            if httpx.get(url, timeout=1).status_code == 200 or not need_ok:
                return
        except httpx.HTTPError:
            time.sleep(0.2)
    raise RuntimeError(f"{url} did not come up")


class _Connection:
    """A minimal keep-alive HTTP/1.1 client on asyncio streams: the load generator shares the
    machine with the servers, so it must spend as little CPU per request as possible."""

    def __init__(self, host: str, port: int) -> None:
        self.host, self.port = host, port
        self.reader: asyncio.StreamReader | None = None
        self.writer: asyncio.StreamWriter | None = None

    async def post(self, request: bytes) -> int:
        if self.writer is None:
            self.reader, self.writer = await asyncio.open_connection(self.host, self.port)
        assert self.reader is not None
        self.writer.write(request)
        status_line = await self.reader.readline()
        if not status_line:
            raise ConnectionError("connection closed")
        length, close = 0, status_line.startswith(b"HTTP/1.0")  # HTTP/1.0 servers close after each response
        while True:
            line = await self.reader.readline()
            if line in (b"\r\n", b""):
                break
            key, _, value = line.decode("latin-1").partition(":")
            if key.lower() == "content-length":
                length = int(value)
            elif key.lower() == "connection" and value.strip().lower() == "close":
                close = True
        await self.reader.readexactly(length)
        if close:
            self.writer.close()
            self.writer = None
        return int(status_line.split()[1])


async def closed_loop(url: str, body: bytes, headers: dict[str, str], concurrency: int, seconds: float,
                      max_requests: int) -> dict:
    from urllib.parse import urlsplit

    parts = urlsplit(url)
    head = f"POST {parts.path} HTTP/1.1\r\nHost: {parts.hostname}\r\nContent-Length: {len(body)}\r\n"
    head += "".join(f"{k}: {v}\r\n" for k, v in headers.items()) + "\r\n"
    request = head.encode() + body
    latencies: list[float] = []
    errors = 0
    stop = time.perf_counter() + seconds

    async def worker() -> None:
        nonlocal errors
        connection = _Connection(parts.hostname or "127.0.0.1", parts.port or 80)
        while time.perf_counter() < stop and len(latencies) + errors < max_requests:
            start = time.perf_counter()
            try:
                ok = await asyncio.wait_for(connection.post(request), 60) == 200
            except (OSError, ConnectionError, asyncio.TimeoutError, asyncio.IncompleteReadError, ValueError):
                ok = False
                connection = _Connection(parts.hostname or "127.0.0.1", parts.port or 80)
            if ok:
                latencies.append(time.perf_counter() - start)
            else:
                errors += 1

    started = time.perf_counter()
    await asyncio.gather(*(worker() for _ in range(concurrency)))
    elapsed = time.perf_counter() - started
    ms = np.asarray(latencies) * 1e3
    return {
        "concurrency": concurrency, "requests": len(latencies), "errors": errors, "seconds": round(elapsed, 3),
        "throughput_per_s": round(len(latencies) / elapsed, 2),
        "p50_ms": round(float(np.percentile(ms, 50)), 3) if len(ms) else None,
        "p99_ms": round(float(np.percentile(ms, 99)), 3) if len(ms) else None,
    }


def answer_of(url: str, body: bytes, headers: dict[str, str]) -> np.ndarray:
    """The first output of one response (KServe v2 JSON or binary, or the naive server's JSON)."""
    import httpx

    from edgekit.server.protocol import HEADER_LENGTH

    response = httpx.post(url, content=body, headers=headers, timeout=60)
    response.raise_for_status()
    length = response.headers.get(HEADER_LENGTH)
    header = json.loads(response.content[: int(length)] if length else response.content)
    if "outputs" not in header:
        return np.asarray(header["data"], np.float32)
    output = header["outputs"][0]
    if length:
        return np.frombuffer(response.content[int(length):], np.float32).reshape(output["shape"])
    return np.asarray(output["data"], np.float32).reshape(output["shape"])


def offline_ceiling(model_path: Path, sample: np.ndarray, batch: int, threads: int, seconds: float) -> dict:
    """Batches of ``batch`` samples back to back on one session: what serving could reach at best."""
    import onnxruntime as ort

    options = ort.SessionOptions()
    options.intra_op_num_threads = threads
    session = ort.InferenceSession(str(model_path), options, providers=["CPUExecutionProvider"])
    name = session.get_inputs()[0].name
    x = np.repeat(sample, batch, axis=0)
    for _ in range(3):
        session.run(None, {name: x})
    count, started = 0, time.perf_counter()
    while time.perf_counter() - started < seconds:
        session.run(None, {name: x})
        count += batch
    return {"batch": batch, "throughput_per_s": round(count / (time.perf_counter() - started), 2)}


def kserve_bodies(input_name: str, output_name: str, x: np.ndarray) -> dict[str, tuple[bytes, dict[str, str]]]:
    """The same request as KServe v2 JSON (what curl and requests send) and with the binary
    tensor extension (what tritonclient sends)."""
    from edgekit.server.protocol import HEADER_LENGTH

    json_body = json.dumps({"inputs": [{"name": input_name, "shape": list(x.shape), "datatype": "FP32",
                                        "data": x.reshape(-1).tolist()}]}).encode()
    header = json.dumps({"inputs": [{"name": input_name, "shape": list(x.shape), "datatype": "FP32",
                                     "parameters": {"binary_data_size": x.nbytes}}],
                         "outputs": [{"name": output_name, "parameters": {"binary_data": True}}]}).encode()
    return {
        "json": (json_body, {"content-type": "application/json"}),
        "binary": (header + x.tobytes(), {HEADER_LENGTH: str(len(header)), "content-type": "application/octet-stream"}),
    }


def bench_model(label: str, package: Path, x: np.ndarray, args: argparse.Namespace, env: dict[str, str],
                levels: list[int], peers: dict[str, str] | None = None) -> dict:
    """edgekit (JSON and binary bodies), the naive server and, with ``peers``, MLServer and PyTriton
    on one package, interleaved per level."""
    import edgekit

    onnx_path = package / "onnx" / "model.int8.onnx"
    with edgekit.load(package, artifact="onnx") as model:
        input_name, output_name = model.manifest.inputs[0].name, model.manifest.outputs[0].name
    bodies = kserve_bodies(input_name, output_name, x)
    naive_body = json.dumps({"shape": list(x.shape), "data": x.reshape(-1).tolist()}).encode()
    ports = {"edgekit": free_port(), "naive": free_port()}
    servers = {
        "edgekit": subprocess.Popen(
            [sys.executable, "-m", "edgekit.run", str(package), "--serve", "--artifact", "onnx", "--port",
             str(ports["edgekit"]), "--threads", str(args.threads), "--max-batch-size", str(args.max_batch_size),
             "--max-queue-delay-us", str(args.max_queue_delay_us), "--max-queue-size", "1024"],
            env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, cwd=ROOT),
        "naive": subprocess.Popen(
            [sys.executable, "-c", NAIVE_SERVER, str(onnx_path), str(ports["naive"]), str(args.threads)],
            env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL),
    }
    model_name = package.name.split(".")[0]
    infer = f"http://127.0.0.1:{ports['edgekit']}/v2/models/{model_name}/infer"
    targets = {
        "edgekit_json": (infer, *bodies["json"]),
        "edgekit_binary": (infer, *bodies["binary"]),
        "naive_json": (f"http://127.0.0.1:{ports['naive']}/infer", naive_body, {"content-type": "application/json"}),
    }
    if peers:
        started, peer_ports = start_peers(peers, model_name, onnx_path, output_name, args, env,
                                          Path(tempfile.mkdtemp(prefix="edgekit-bench-peers-")))
        servers.update(started)
        triton_infer = f"http://127.0.0.1:{peer_ports['pytriton']}/v2/models/{model_name}/infer"
        targets.update({
            "mlserver_json": (f"http://127.0.0.1:{peer_ports['mlserver']}/v2/models/{model_name}/infer",
                              *bodies["json"]),
            "pytriton_json": (triton_infer, *bodies["json"]),
            "pytriton_binary": (triton_infer, *bodies["binary"]),
        })
    results: dict[str, list[dict]] = {name: [] for name in targets}
    try:
        wait_ready(f"http://127.0.0.1:{ports['edgekit']}/v2/health/ready")
        wait_ready(f"http://127.0.0.1:{ports['naive']}/", need_ok=False)
        if peers:
            wait_ready(f"http://127.0.0.1:{peer_ports['mlserver']}/v2/models/{model_name}/ready", timeout=300)
            wait_ready(f"http://127.0.0.1:{peer_ports['pytriton']}/v2/models/{model_name}/ready", timeout=300)
        import onnxruntime as ort

        expected = ort.InferenceSession(str(onnx_path), providers=["CPUExecutionProvider"]).run(
            None, {ort.InferenceSession(str(onnx_path)).get_inputs()[0].name: x})[0]
        for name, (url, body, headers) in targets.items():  # every server answers what ONNX Runtime answers
            got = answer_of(url, body, headers)
            if got.size != expected.size or not np.allclose(got.reshape(expected.shape), expected, atol=1e-4):
                raise SystemExit(f"{name} answered differently from ONNX Runtime run directly")
        for level in levels:
            order = list(targets) if level % 2 == 0 else list(targets)[::-1]  # alternate the order
            for name in order:
                url, body, headers = targets[name]
                results[name].append(asyncio.run(closed_loop(url, body, headers, level, args.seconds,
                                                             args.max_requests)))
    finally:
        for proc in servers.values():
            proc.terminate()
            proc.wait(timeout=30)
    ceiling = offline_ceiling(onnx_path, x, args.max_batch_size, args.threads, args.seconds)
    comparison = []
    for i, level in enumerate(levels):
        row = {"concurrency": level}
        naive = results["naive_json"][i]["throughput_per_s"]
        for name in ("edgekit_json", "edgekit_binary"):
            ours = results[name][i]["throughput_per_s"]
            row[f"{name}_vs_naive"] = round(ours / max(naive, 1e-9), 2)
            row[f"{name}_share_of_offline_ceiling"] = round(ours / ceiling["throughput_per_s"], 3)
        if peers:  # same body kind against the better peer
            json_peer = max(results["mlserver_json"][i]["throughput_per_s"], results["pytriton_json"][i]["throughput_per_s"])
            row["edgekit_json_vs_better_peer_json"] = round(results["edgekit_json"][i]["throughput_per_s"]
                                                            / max(json_peer, 1e-9), 2)
            row["edgekit_binary_vs_pytriton_binary"] = round(results["edgekit_binary"][i]["throughput_per_s"]
                                                             / max(results["pytriton_binary"][i]["throughput_per_s"], 1e-9), 2)
        comparison.append(row)
    return {"model": label, "request_bytes": {k: len(v[0]) for k, v in bodies.items()},
            "offline_ceiling": ceiling, **results, "comparison": comparison}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=6.0, help="per concurrency level and server")
    parser.add_argument("--max-requests", type=int, default=5000, help="per level and server (a bound)")
    parser.add_argument("--concurrency", default="1,8,32")
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--max-batch-size", type=int, default=8)
    parser.add_argument("--max-queue-delay-us", type=int, default=2000)
    parser.add_argument("--output", type=Path, default=ROOT / "out" / "bench" / "bench_server.json")
    parser.add_argument("--peers", action="store_true",
                        help="also MLServer 1.7.1 and PyTriton 0.7.0 (their environments are created on first use)")
    args = parser.parse_args()
    levels = [int(v) for v in args.concurrency.split(",")]

    import edgekit

    peers = peer_pythons() if args.peers else None

    env = {**os.environ, "TF_CPP_MIN_LOG_LEVEL": "3"}
    models = []
    with tempfile.TemporaryDirectory(prefix="edgekit-bench-server-") as tmp:
        work = Path(tmp)
        env["EDGEKIT_CACHE_DIR"] = str(work / "cache")
        subprocess.run([sys.executable, str(ROOT / "models/mobilenet_v2/build.py"), "--output", str(work),
                        "--samples", "60"], check=True, stdout=subprocess.DEVNULL, env=env)
        built = edgekit.package(str(work / "mobilenet_v2.keras"), str(work / "calibration.npz"), str(work / "pkg"),
                                formats=["onnx"], samples=50, eval_samples=10,
                                preprocessing={"scale": 1 / 255, "mean": [0.5], "std": [0.5]},
                                allow_accuracy_drop=True)  # a speed reference: gates recorded, not required
        require_signal(built.manifest)
        digits = ROOT / "models" / "digits"
        tiny = edgekit.package(str(digits / "digits.keras"), str(digits / "data" / "calibration.npz"),
                               str(work / "tiny"), formats=["onnx"])
        rng = np.random.default_rng(1)
        models.append(bench_model("MobileNetV2 224 INT8 (ONNX QDQ)", built.path,
                                  rng.uniform(-1, 1, (1, 224, 224, 3)).astype(np.float32), args, env, levels, peers))
        models.append(bench_model("digits 8x8 INT8 (ONNX QDQ)", tiny.path,
                                  rng.uniform(0, 1, (1, 8, 8, 1)).astype(np.float32), args, env, levels, peers))
    report = {
        "benchmark": "bench_server",
        "runtime": "onnxruntime CPU",
        "machine": {"platform": platform.platform(), "cpus": os.cpu_count()},
        "settings": vars(args) | {"output": str(args.output)},
        "models": models,
    }
    print_and_save(report, args.output)


if __name__ == "__main__":
    main()
