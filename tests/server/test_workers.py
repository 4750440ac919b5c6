"""``--workers N``: several server processes on one port, metrics summed over them, a dead worker
replaced, a start-up failure reported once, and a graceful exit 0."""

from __future__ import annotations

import asyncio
import re
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import httpx
import numpy as np
import pytest

import edgekit
from tests.conftest import EVAL, ROOT, edgekit_cli, load_npz

pytestmark = pytest.mark.slow


def start(package: Path, *extra: str) -> tuple[subprocess.Popen, str, str]:
    proc = subprocess.Popen([sys.executable, "-m", "edgekit.cli", "serve", str(package), "--port", "0",
                             "--workers", "2", *extra], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            cwd=ROOT)
    line = proc.stdout.readline()
    match = re.search(r"serving digits on (http://127\.0\.0\.1:\d+)/v2.*by 2 workers x (\d+) thread", line)
    assert match, (line, proc.stderr.read() if proc.poll() is not None else "")
    return proc, match.group(1), line


def workers_of(proc: subprocess.Popen) -> list[int]:
    """The server's live worker processes; a child reaped between listing and reading is not one."""
    children = Path(f"/proc/{proc.pid}/task/{proc.pid}/children").read_text().split()
    return [int(pid) for pid in children if "spawn_main" in command_line(int(pid))]


def command_line(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/cmdline").read_text()
    except (FileNotFoundError, ProcessLookupError):  # exited (a killed worker being reaped)
        return ""


def metric(url: str, name: str) -> float:
    match = re.search(name + r'\{model="digits",version="1"\} (\S+)', httpx.get(f"{url}/metrics").text)
    return float(match.group(1)) if match else 0.0


def send(url: str, x: np.ndarray) -> list[np.ndarray]:
    """Each sample on its own connection (so both workers take some), at most 8 at once."""

    async def all_of() -> list[httpx.Response]:
        gate = asyncio.Semaphore(8)

        async def one(sample: np.ndarray) -> httpx.Response:
            async with gate, httpx.AsyncClient(timeout=30) as http:
                return await http.post(f"{url}/v2/models/digits/infer", json={"inputs": [{
                    "name": "image", "shape": [1, *sample.shape], "datatype": "FP32",
                    "data": sample.reshape(-1).tolist()}]})

        return await asyncio.gather(*(one(sample) for sample in x))

    responses = asyncio.run(all_of())
    assert all(r.status_code == 200 for r in responses), [r.text for r in responses if r.status_code != 200]
    return [np.asarray(r.json()["outputs"][0]["data"], np.float32) for r in responses]


@pytest.mark.serial
def test_two_workers_answer_like_the_runtime_sum_their_metrics_and_replace_a_dead_one(digits_all_package):
    x = load_npz(EVAL)[0][:40].astype(np.float32) / 255
    with edgekit.load(digits_all_package, artifact="onnx") as model:
        expected = model.predict_tensor(x)
    proc, url, line = start(digits_all_package, "--artifact", "onnx", "--grpc-port", "0")
    try:
        assert "gRPC on 127.0.0.1:" in line
        assert len(workers_of(proc)) == 2
        answers = send(url, x)
        assert np.allclose(np.stack(answers), expected.reshape(len(x), -1), atol=1e-5)  # no sample misaligned
        for _ in range(4):  # whichever worker answers /metrics, it shows both workers' counts
            assert metric(url, "nv_inference_request_success") == len(x)

        victim = workers_of(proc)[0]
        subprocess.run(["kill", "-9", str(victim)], check=True)
        deadline = time.time() + 60
        while time.time() < deadline and (victim in workers_of(proc) or len(workers_of(proc)) < 2):
            time.sleep(0.2)
        survivors = workers_of(proc)
        assert len(survivors) == 2 and victim not in survivors
        deadline = time.time() + 60
        while time.time() < deadline:  # the replacement loads its model, the other serves meanwhile
            send(url, x[:8])
            if metric(url, "nv_inference_request_success") >= len(x) + 8:
                break
        assert metric(url, "nv_inference_request_success") >= len(x) + 8  # the dead worker's counts kept
    finally:
        proc.send_signal(signal.SIGTERM)
        code = proc.wait(timeout=90)
    stderr = proc.stderr.read()
    assert code == 0, stderr[-3000:]
    assert "was killed by SIGKILL; starting a new one" in stderr and "Traceback" not in stderr


def test_a_package_every_worker_refuses_is_one_error_and_nothing_serves(digits_package, tmp_path):
    copy = tmp_path / "digits.edgekit"
    shutil.copytree(digits_package, copy)
    for artifact in copy.glob("*/model.*"):  # whichever artifact the server picks, it is the damaged one
        data = bytearray(artifact.read_bytes())
        data[len(data) // 2] ^= 0xFF
        artifact.write_bytes(bytes(data))
    result = edgekit_cli("serve", copy, "--port", "0", "--workers", "2", timeout=120)
    assert result.returncode == 1 and "serving" not in result.stdout, result.stderr[-3000:]
    errors = [line for line in result.stderr.splitlines() if line.startswith("error: ")]
    assert len(errors) == 1 and "does not match the manifest" in errors[0], result.stderr[-3000:]
    assert "Traceback" not in result.stderr and "internal error" not in result.stderr


def test_workers_must_be_at_least_one(digits_package):
    result = edgekit_cli("serve", digits_package, "--workers", "0", timeout=60)
    assert result.returncode == 2 and "must be at least 1" in result.stderr


def test_a_port_in_use_is_one_error_with_workers_too(digits_package):
    import socket

    from tests.conftest import assert_user_error

    with socket.socket() as taken:  # another program's listening socket (no SO_REUSEPORT)
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        result = edgekit_cli("serve", digits_package, "--port", port, "--workers", "2", timeout=60)
    assert_user_error(result, f"port {port} on 127.0.0.1 is already in use", "another --port")
    assert "serving" not in result.stdout
