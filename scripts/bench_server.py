#!/usr/bin/env python
"""Serving throughput: edgekit serve vs a naive server vs the runtime's offline batched ceiling.

    .venv/bin/python scripts/bench_server.py [--seconds 6] [--concurrency 1,8,32] [--layouts 1x2,2x1]
        [--peers] [--output out/bench/bench_server.json]

Packages MobileNetV2 224 (a real-size image model, 3 MB JSON requests) and the digits model (a
tiny one) as INT8 ONNX, then for each on loopback, in one run:
* edgekit with KServe v2 JSON bodies (what curl, requests and most clients send), with the
  binary tensor extension (what tritonclient sends) and over gRPC: ``python -m edgekit.run PKG
  --serve`` (dynamic batching);
* naive: one request at a time, JSON in and out, no batching (the common Flask pattern), on
  a raw ONNX Runtime session;
* offline ceiling: one session with ``--threads`` threads running batches of
  ``--max-batch-size`` back to back;
* with ``--peers``: MLServer 1.7.1 (a custom ONNX Runtime runtime with adaptive batching, JSON)
  and PyTriton 0.7.0 (the real tritonserver, JSON, binary and gRPC), with the same batch size
  and window, each from its own virtual environment created on first use.
Every server runs in each ``--layouts`` entry PxT (P processes or model instances of T threads,
P*T = --threads): edgekit ``--workers P --threads T``, MLServer ``parallel_workers`` P,
PyTriton P model instances; comparisons take each server's best layout per level.
A closed-loop client (N workers, each sending its next request when the last one returns;
request bodies pre-encoded; one connection per worker) runs for ``--seconds`` per target and
concurrency level, all targets interleaved, bounded in time and count. Prints and saves JSON;
compare ratios within the run.
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


# Peer servers for --peers, each in its own virtual environment (edgekit.conversion.toolenv; created on first
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

    model, name, output, port, threads, batch_size, delay_us, instances = sys.argv[1:9]
    options = ort.SessionOptions(); options.intra_op_num_threads = int(threads)
    sessions = [ort.InferenceSession(model, options, providers=["CPUExecutionProvider"]) for _ in range(int(instances))]
    spec = sessions[0].get_inputs()[0]

    def instance(session):
        @batch
        def infer(**inputs):
            return {output: session.run(None, {spec.name: inputs[spec.name].astype(np.float32)})[0]}
        return infer

    port = int(port)
    config = TritonConfig(http_port=port, grpc_port=port + 1, metrics_port=port + 2)
    with Triton(config=config) as triton:
        triton.bind(model_name=name, infer_func=[instance(s) for s in sessions],
                    inputs=[Tensor(name=spec.name, dtype=np.float32, shape=tuple(spec.shape[1:]))],
                    outputs=[Tensor(name=output, dtype=np.float32, shape=(-1,))],
                    config=ModelConfig(max_batch_size=int(batch_size),
                                       batcher=DynamicBatcher(max_queue_delay_microseconds=int(delay_us))))
        triton.serve()
""")


def peer_pythons() -> dict[str, str]:
    """The peers' interpreters, creating their environments on first use."""
    from edgekit.conversion import toolenv

    mlserver = toolenv.Tool("bench-mlserver", ("mlserver==1.7.1", "uvloop<0.22", "onnxruntime>=1.20"),
                            "the MLServer peer of scripts/bench_server.py --peers")
    pytriton = toolenv.Tool("bench-pytriton", ("nvidia-pytriton==0.7.0", "numpy<2", "onnxruntime>=1.20"),
                            "the PyTriton peer of scripts/bench_server.py --peers")
    return {"mlserver": toolenv.python_for(mlserver), "pytriton": toolenv.python_for(pytriton)}


def start_peers(pythons: dict[str, str], name: str, onnx_path: Path, output_name: str, args: argparse.Namespace,
                env: dict[str, str], work: Path, layout: tuple[int, int]) -> tuple[dict[str, subprocess.Popen],
                                                                                    dict[str, int]]:
    """MLServer (custom ONNX Runtime runtime, adaptive batching) and PyTriton, with edgekit's batching,
    in ``layout`` (processes or instances, threads each)."""
    import json as _json
    import sysconfig

    processes, threads = layout
    ports = {"mlserver": free_port(), "pytriton": free_port_pair()}
    folder = work / f"mlserver-{name}-{processes}x{threads}"
    (folder / name).mkdir(parents=True, exist_ok=True)
    (folder / "runtime.py").write_text(MLSERVER_RUNTIME)
    (folder / "settings.json").write_text(_json.dumps({  # parallel_workers 0: inference in the server process
        "http_port": ports["mlserver"], "grpc_port": free_port(), "metrics_port": free_port(),
        "parallel_workers": processes if processes > 1 else 0}))
    (folder / name / "model-settings.json").write_text(_json.dumps({
        "name": name, "implementation": "runtime.OnnxModel", "max_batch_size": args.max_batch_size,
        "max_batch_time": args.max_queue_delay_us / 1e6}))
    peer_env = {**env, "BENCH_MODEL": str(onnx_path), "BENCH_OUTPUT": output_name, "BENCH_THREADS": str(threads),
                "LD_LIBRARY_PATH": sysconfig.get_config_var("LIBDIR") or "", "PYTHONPATH": str(folder)}
    servers = {
        "mlserver": subprocess.Popen([pythons["mlserver"], "-m", "mlserver.cli.main", "start", str(folder)],
                                     cwd=folder, env=peer_env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL),
        "pytriton": subprocess.Popen([pythons["pytriton"], "-c", PYTRITON_SERVER, str(onnx_path), name, output_name,
                                      str(ports["pytriton"]), str(threads), str(args.max_batch_size),
                                      str(args.max_queue_delay_us), str(processes)],
                                     cwd=work, env=peer_env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL),
    }
    return servers, ports


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def free_port_pair() -> int:
    """A free port whose next two are free too (PyTriton's HTTP, gRPC and metrics ports)."""
    for _ in range(100):
        port = free_port()
        try:
            for offset in (1, 2):
                with socket.socket() as s:
                    s.bind(("127.0.0.1", port + offset))
            return port
        except OSError:
            continue
    raise RuntimeError("no three consecutive free ports")


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
    return _summary(concurrency, latencies, errors, time.perf_counter() - started)


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


CEILING_RUN = textwrap.dedent("""
    import sys, time
    import numpy as np, onnxruntime as ort
    model, sample, batch, threads, seconds = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4]), float(sys.argv[5])
    options = ort.SessionOptions(); options.intra_op_num_threads = threads
    session = ort.InferenceSession(model, options, providers=["CPUExecutionProvider"])
    x = np.repeat(np.load(sample), batch, axis=0)
    name = session.get_inputs()[0].name
    for _ in range(3):
        session.run(None, {name: x})
    count, started = 0, time.perf_counter()
    while time.perf_counter() - started < seconds:
        session.run(None, {name: x})
        count += batch
    print(count / (time.perf_counter() - started))
""")


def offline_ceiling(model_path: Path, sample: np.ndarray, batch: int, layout: tuple[int, int], seconds: float,
                    env: dict[str, str]) -> dict:
    """Batches of ``batch`` samples back to back, no server: P processes at once, each one
    session of T threads (``layout``), throughputs summed. What serving could reach at best."""
    processes, threads = layout
    with tempfile.TemporaryDirectory() as tmp:
        saved = Path(tmp) / "sample.npy"
        np.save(saved, sample)
        runs = [subprocess.Popen([sys.executable, "-c", CEILING_RUN, str(model_path), str(saved), str(batch),
                                  str(threads), str(seconds)], stdout=subprocess.PIPE, text=True, env=env)
                for _ in range(processes)]
        total = sum(float(run.communicate()[0].strip().splitlines()[-1]) for run in runs)
    return {"batch": batch, "layout": f"{processes}x{threads}", "throughput_per_s": round(total, 2)}


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


GRPC_METHOD = "/inference.GRPCInferenceService/ModelInfer"


def grpc_request(model_name: str, input_name: str, output_name: str, x: np.ndarray) -> bytes:
    """A KServe v2 ModelInfer request with the tensor as raw bytes (what tritonclient.grpc sends)."""
    from edgekit.server.grpc_messages import messages

    request = messages()["ModelInferRequest"](model_name=model_name)
    tensor = request.inputs.add()
    tensor.name, tensor.datatype = input_name, "FP32"
    tensor.shape.extend(x.shape)
    request.outputs.add().name = output_name
    request.raw_input_contents.append(x.tobytes())
    return request.SerializeToString()


def grpc_channel(address: str, aio: bool = True):  # noqa: ANN201 - a grpc channel
    import grpc

    options = [("grpc.max_receive_message_length", 64 << 20), ("grpc.max_send_message_length", 64 << 20),
               ("grpc.use_local_subchannel_pool", 1)]  # one connection per channel, as one per HTTP worker
    return (grpc.aio if aio else grpc).insecure_channel(address, options=options)


async def closed_loop_grpc(address: str, body: bytes, concurrency: int, seconds: float, max_requests: int) -> dict:
    """``closed_loop`` over gRPC: pre-serialized requests, one channel per worker, bytes in and out."""
    import grpc

    latencies: list[float] = []
    errors = 0
    stop = time.perf_counter() + seconds

    async def worker() -> None:
        nonlocal errors
        async with grpc_channel(address) as channel:
            call = channel.unary_unary(GRPC_METHOD)
            while time.perf_counter() < stop and len(latencies) + errors < max_requests:
                start = time.perf_counter()
                try:
                    await call(body, timeout=60)
                    latencies.append(time.perf_counter() - start)
                except grpc.RpcError:
                    errors += 1

    started = time.perf_counter()
    await asyncio.gather(*(worker() for _ in range(concurrency)))
    return _summary(concurrency, latencies, errors, time.perf_counter() - started)


def _summary(concurrency: int, latencies: list[float], errors: int, elapsed: float) -> dict:
    ms = np.asarray(latencies) * 1e3
    return {
        "concurrency": concurrency, "requests": len(latencies), "errors": errors, "seconds": round(elapsed, 3),
        "throughput_per_s": round(len(latencies) / elapsed, 2),
        "p50_ms": round(float(np.percentile(ms, 50)), 3) if len(ms) else None,
        "p99_ms": round(float(np.percentile(ms, 99)), 3) if len(ms) else None,
    }


def grpc_answer(address: str, body: bytes) -> np.ndarray:
    from edgekit.server.grpc_messages import messages

    with grpc_channel(address, aio=False) as channel:
        reply = messages()["ModelInferResponse"].FromString(channel.unary_unary(GRPC_METHOD)(body, timeout=60))
    return np.frombuffer(reply.raw_output_contents[0], np.float32).reshape(list(reply.outputs[0].shape))


def parse_layouts(text: str, threads: int) -> list[tuple[int, int]]:
    layouts = []
    for item in text.split(","):
        processes, _, each = item.partition("x")
        layout = (int(processes), int(each))
        if layout[0] * layout[1] != threads:
            raise SystemExit(f"layout {item}: {layout[0]} x {layout[1]} threads is not --threads {threads}")
        layouts.append(layout)
    return layouts


def bench_model(label: str, package: Path, x: np.ndarray, args: argparse.Namespace, env: dict[str, str],
                levels: list[int], peers: dict[str, str] | None = None) -> dict:
    """edgekit (JSON, binary and gRPC) in every layout, the naive server and, with ``peers``,
    MLServer and PyTriton in every layout, on one package, all targets interleaved per level."""
    import edgekit

    # the ONNX build this CPU runs (onnx-u8s7 without VNNI): edgekit, the naive server, the offline
    # ceiling and the peers all run this one file
    with edgekit.load(package, artifact="onnx") as model:
        input_name, output_name = model.manifest.inputs[0].name, model.manifest.outputs[0].name
        onnx_path, served = package / model.artifact.path, model.artifact.key
    served = "onnx-s8s8" if served == "onnx" else served  # exactly that build
    model_name = package.name.split(".")[0]
    bodies = kserve_bodies(input_name, output_name, x)
    grpc_body = grpc_request(model_name, input_name, output_name, x)
    naive_body = json.dumps({"shape": list(x.shape), "data": x.reshape(-1).tolist()}).encode()
    layouts = parse_layouts(args.layouts, args.threads)
    # the ceilings first, on a quiet machine (servers shutting down would still use the cores)
    ceilings = {f"{p}x{t}": offline_ceiling(onnx_path, x, args.max_batch_size, (p, t), args.seconds, env)
                for p, t in layouts}
    ceiling = ceilings[f"1x{args.threads}"] if f"1x{args.threads}" in ceilings else offline_ceiling(
        onnx_path, x, args.max_batch_size, (1, args.threads), args.seconds, env)
    naive_port = free_port()
    servers = {"naive": subprocess.Popen(
        [sys.executable, "-c", NAIVE_SERVER, str(onnx_path), str(naive_port), str(args.threads)],
        env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)}
    targets: dict[str, tuple] = {"naive_json": ("http", f"http://127.0.0.1:{naive_port}/infer", naive_body,
                                                {"content-type": "application/json"})}
    ready_urls = [(f"http://127.0.0.1:{naive_port}/", False, 120)]
    peer_work = Path(tempfile.mkdtemp(prefix="edgekit-bench-peers-")) if peers else None
    try:
        for processes, threads in layouts:
            tag = f"{processes}x{threads}"
            port, grpc_port = free_port(), free_port()
            servers[f"edgekit@{tag}"] = subprocess.Popen(
                [sys.executable, "-m", "edgekit.run", str(package), "--serve", "--artifact", served, "--port", str(port),
                 "--grpc-port", str(grpc_port), "--workers", str(processes), "--threads", str(threads),
                 "--max-batch-size", str(args.max_batch_size), "--max-queue-delay-us", str(args.max_queue_delay_us),
                 "--max-queue-size", "1024",
                 # a speed reference packaged with --allow-accuracy-drop: serve it whatever its gate said
                 "--allow-failed-artifact"], env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, cwd=ROOT)
            infer = f"http://127.0.0.1:{port}/v2/models/{model_name}/infer"
            targets.update({f"edgekit_json@{tag}": ("http", infer, *bodies["json"]),
                            f"edgekit_binary@{tag}": ("http", infer, *bodies["binary"]),
                            f"edgekit_grpc@{tag}": ("grpc", f"127.0.0.1:{grpc_port}", grpc_body, {})})
            ready_urls.append((f"http://127.0.0.1:{port}/v2/health/ready", True, 120))
            if peers:
                started, peer_ports = start_peers(peers, model_name, onnx_path, output_name, args, env, peer_work,
                                                  (processes, threads))
                servers.update({f"{name}@{tag}": proc for name, proc in started.items()})
                triton_infer = f"http://127.0.0.1:{peer_ports['pytriton']}/v2/models/{model_name}/infer"
                mlserver = f"http://127.0.0.1:{peer_ports['mlserver']}/v2/models/{model_name}"
                targets.update({
                    f"mlserver_json@{tag}": ("http", f"{mlserver}/infer", *bodies["json"]),
                    f"pytriton_json@{tag}": ("http", triton_infer, *bodies["json"]),
                    f"pytriton_binary@{tag}": ("http", triton_infer, *bodies["binary"]),
                    f"pytriton_grpc@{tag}": ("grpc", f"127.0.0.1:{peer_ports['pytriton'] + 1}", grpc_body, {}),
                })
                ready_urls += [(f"{mlserver}/ready", True, 300), (triton_infer.removesuffix("/infer") + "/ready", True, 300)]
        results = run_targets(targets, ready_urls, onnx_path, x, levels, args)
    finally:
        for proc in servers.values():
            proc.terminate()
        for proc in servers.values():
            try:
                proc.wait(timeout=60)
            except subprocess.TimeoutExpired:
                proc.kill()
    return {"model": label, "request_bytes": {**{k: len(v[0]) for k, v in bodies.items()}, "grpc": len(grpc_body)},
            "offline_ceiling": ceiling, "offline_ceiling_by_layout": ceilings,
            "layouts": [f"{p}x{t}" for p, t in layouts], **results,
            "comparison": compare(results, levels, ceiling["throughput_per_s"], ceilings, bool(peers), args.threads)}


def run_targets(targets: dict[str, tuple], ready_urls: list[tuple[str, bool, float]], onnx_path: Path,
                x: np.ndarray, levels: list[int], args: argparse.Namespace) -> dict[str, list[dict]]:
    """Check every target answers what ONNX Runtime answers, then time them, interleaved per level."""
    import onnxruntime as ort

    for url, need_ok, timeout in ready_urls:
        wait_ready(url, need_ok=need_ok, timeout=timeout)
    session = ort.InferenceSession(str(onnx_path), providers=["CPUExecutionProvider"])
    expected = session.run(None, {session.get_inputs()[0].name: x})[0]
    for name, (kind, address, body, headers) in targets.items():
        got = grpc_answer(address, body) if kind == "grpc" else answer_of(address, body, headers)
        if got.size != expected.size or not np.allclose(got.reshape(expected.shape), expected, atol=1e-4):
            raise SystemExit(f"{name} answered differently from ONNX Runtime run directly")
    results: dict[str, list[dict]] = {name: [] for name in targets}
    for level in levels:
        order = list(targets) if level % 2 == 0 else list(targets)[::-1]  # alternate the order
        for name in order:
            kind, address, body, headers = targets[name]
            run = (closed_loop_grpc(address, body, level, args.seconds, args.max_requests) if kind == "grpc"
                   else closed_loop(address, body, headers, level, args.seconds, args.max_requests))
            results[name].append(asyncio.run(run))
    return results


def compare(results: dict[str, list[dict]], levels: list[int], ceiling: float, ceilings: dict[str, dict],
            peers: bool, threads: int) -> list[dict]:
    """Per level and body kind: edgekit's best layout, its ratio to the naive server, its share of
    the one-session ceiling and of its layout's ceiling; with peers, the better peer sending the
    same kind of body in the one-process layout (how the peers are usually run) and in its best
    layout."""

    def best(server: str, kind: str, i: int, layout: str | None = None) -> tuple[float, str]:
        found = [(runs[i]["throughput_per_s"], name.split("@")[1]) for name, runs in results.items()
                 if name.startswith(f"{server}_{kind}@") and (layout is None or name.endswith(f"@{layout}"))]
        return max(found) if found else (0.0, "")

    def better_peer(kind: str, i: int, layout: str | None) -> tuple[str, float]:
        rivals = {name: best(name, kind, i, layout) for name in (("mlserver", "pytriton") if kind == "json"
                                                                  else ("pytriton",))}
        rival, (theirs, their_layout) = max(rivals.items(), key=lambda item: item[1][0])
        return f"{rival}@{their_layout}", theirs

    rows = []
    for i, level in enumerate(levels):
        row: dict = {"concurrency": level}
        naive = results["naive_json"][i]["throughput_per_s"]
        for kind in ("json", "binary", "grpc"):
            ours, layout = best("edgekit", kind, i)
            entry = {"req_per_s": ours, "layout": layout, "vs_naive": round(ours / max(naive, 1e-9), 2),
                     "share_of_offline_ceiling": round(ours / ceiling, 3),
                     "share_of_layout_ceiling": round(ours / ceilings[layout]["throughput_per_s"], 3)}
            if peers:
                for key, peer_layout in (("one_process", f"1x{threads}"), ("any_layout", None)):
                    name, theirs = better_peer(kind, i, peer_layout)
                    entry[f"better_peer_{key}"] = {"peer": name, "req_per_s": theirs,
                                                   "edgekit_ratio": round(ours / max(theirs, 1e-9), 2)}
            row[f"edgekit_{kind}"] = entry
        rows.append(row)
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=6.0, help="per concurrency level and server")
    parser.add_argument("--max-requests", type=int, default=5000, help="per level and server (a bound)")
    parser.add_argument("--concurrency", default="1,8,32")
    parser.add_argument("--threads", type=int, default=2, help="inference threads per server, in all")
    parser.add_argument("--layouts", default="1x2,2x1",
                        help="PxT: P processes (or model instances) of T threads, P*T = --threads")
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
        # the colour task (as bench_runtime.py and bench_package.py): decisions with wide margins, so
        # every ONNX scheme build carries the float model's answers on every CPU kind (a random
        # backbone validated on 10 samples gave top-1 agreement 0.1 on the onnx-u8s7 build)
        subprocess.run([sys.executable, str(ROOT / "models/mobilenet_v2/build.py"), "--output", str(work),
                        "--samples", "60", "--eval-samples", "60", "--task", "colour"], check=True,
                       stdout=subprocess.DEVNULL, env=env)
        built = edgekit.package(str(work / "mobilenet_v2.keras"), str(work / "calibration.npz"), str(work / "pkg"),
                                eval=str(work / "eval.npz"), formats=["onnx"], samples=60,
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
    print_table(models)


def print_table(models: list[dict]) -> None:
    """The comparison, one line per model, clients and body kind."""
    for model in models:
        layouts = ", ".join(f"{k} {v['throughput_per_s']}/s" for k, v in model["offline_ceiling_by_layout"].items())
        print(f"\n{model['model']}: offline ceiling (batch {model['offline_ceiling']['batch']}) {layouts}")
        print(f"{'clients':>7}  {'body':<6} {'edgekit req/s':>18} {'ceiling':>8} {'(layout)':>8}"
              f" {'better peer, one process':>30} {'ratio':>6} {'better peer, any layout':>30} {'ratio':>6}")
        for row in model["comparison"]:
            for kind in ("json", "binary", "grpc"):
                ours = row[f"edgekit_{kind}"]
                line = (f"{row['concurrency']:>7}  {kind:<6} {ours['req_per_s']:>11.1f} ({ours['layout']})"
                        f" {ours['share_of_offline_ceiling']:>8.0%} {ours['share_of_layout_ceiling']:>8.0%}")
                for key in ("one_process", "any_layout"):
                    peer = ours.get(f"better_peer_{key}")
                    if peer:
                        line += f" {peer['req_per_s']:>12.1f} {peer['peer']:>17} {peer['edgekit_ratio']:>5.2f}x"
                print(line)


if __name__ == "__main__":
    main()
