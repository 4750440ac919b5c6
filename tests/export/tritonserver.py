"""A real ``tritonserver`` for tests: the binary and Python backend bundled in the nvidia-pytriton
wheel (Triton 2.51), fetched once from the package registry and unpacked into a cache folder.

The wheel is only unpacked, never installed: PyTriton itself requires numpy<2, which edgekit's
environment does not have, and only the server binary and its Python backend are needed.
Facts this works around, each checked here:
* the backend's stub for this Python version must sit in ``backends/python``;
* the stub embeds the interpreter's ``libpython`` (``LD_LIBRARY_PATH``), ignores ``PYTHONPATH``
  and imports NumPy before any model code; built against NumPy 1.x, it returns empty outputs
  ("output tensor shape does not match size") under NumPy 2. Its ``sys.path`` starts with the
  working directory, so the server runs in a folder holding numpy<2;
* Triton refuses to reuse a workspace: each server gets fresh ports and its own process.
"""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import sys
import sysconfig
import time
import zipfile
from contextlib import contextmanager
from pathlib import Path

import httpx

WHEEL = "nvidia-pytriton==0.7.0"


def _cache() -> Path:
    root = os.environ.get("EDGEKIT_TOOLENV_DIR")
    if root:
        return Path(root)
    from platformdirs import user_cache_dir

    return Path(user_cache_dir("edgekit", appauthor=False)) / "toolenvs"


def tritonserver_home() -> tuple[Path, Path] | str:
    """(server folder, numpy<2 folder), fetched on first use; or why it cannot be had here."""
    from filelock import FileLock

    python = f"{sys.version_info[0]}.{sys.version_info[1]}"
    home = _cache() / f"tritonserver-2.51-py{python}"
    ready = home / ".ready"
    server = home / "pytriton" / "tritonserver"
    numpy1 = home / "numpy1"
    if ready.is_file():
        return server, numpy1
    home.parent.mkdir(parents=True, exist_ok=True)
    with FileLock(str(home) + ".lock"):
        if ready.is_file():
            return server, numpy1
        shutil.rmtree(home, ignore_errors=True)
        download = home / "download"
        pip = [sys.executable, "-m", "pip", "--disable-pip-version-check", "--quiet"]
        fetched = subprocess.run([*pip, "download", "--no-deps", WHEEL, "-d", str(download)],
                                 capture_output=True, text=True, timeout=900)
        if fetched.returncode != 0:
            return f"the {WHEEL} wheel cannot be downloaded here: {fetched.stderr.strip()[-300:]}"
        wheel = next(download.glob("*.whl"), None)
        if wheel is None:
            return f"pip downloaded no {WHEEL} wheel for this platform"
        with zipfile.ZipFile(wheel) as archive:
            archive.extractall(home)
        stub = server / "python_backend_stubs" / python / "triton_python_backend_stub"
        if not stub.is_file():
            return f"the wheel has no Python backend stub for Python {python}"
        shutil.copy2(stub, server / "backends" / "python" / stub.name)
        for binary in (server / "bin" / "tritonserver", server / "backends" / "python" / stub.name):
            binary.chmod(0o755)
        installed = subprocess.run([*pip, "install", "--target", str(numpy1), "numpy<2"],
                                   capture_output=True, text=True, timeout=900)
        if installed.returncode != 0:
            return f"numpy<2 for the Python backend cannot be installed: {installed.stderr.strip()[-300:]}"
        shutil.rmtree(download, ignore_errors=True)
        ready.write_text(WHEEL + "\n")
    return server, numpy1


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@contextmanager
def running_tritonserver(repository: Path, log: Path):
    """A tritonserver on ``repository``; yields its HTTP address once every model is ready."""
    found = tritonserver_home()
    if isinstance(found, str):
        import pytest

        pytest.skip(found)
    server, numpy1 = found
    http, grpc, metrics = _free_port(), _free_port(), _free_port()
    libdir = sysconfig.get_config_var("LIBDIR") or ""
    env = {**os.environ, "LD_LIBRARY_PATH": os.pathsep.join(p for p in (libdir, os.environ.get("LD_LIBRARY_PATH"))
                                                            if p)}
    with log.open("w") as out:
        process = subprocess.Popen(
            [str(server / "bin" / "tritonserver"), "--model-repository", str(repository),
             "--backend-directory", str(server / "backends"), "--http-port", str(http), "--grpc-port", str(grpc),
             "--metrics-port", str(metrics), "--exit-timeout-secs", "5"],
            cwd=numpy1, env=env, stdout=out, stderr=subprocess.STDOUT)
    try:
        deadline = time.time() + 120
        while time.time() < deadline:
            if process.poll() is not None:
                raise RuntimeError(f"tritonserver exited with {process.returncode}:\n{log.read_text()[-3000:]}")
            try:
                if httpx.get(f"http://127.0.0.1:{http}/v2/health/ready", timeout=1).status_code == 200:
                    break
            except httpx.HTTPError:
                pass
            time.sleep(0.3)
        else:
            raise RuntimeError(f"tritonserver did not become ready:\n{log.read_text()[-3000:]}")
        yield f"127.0.0.1:{http}"
    finally:
        process.terminate()
        try:
            process.wait(timeout=30)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()
