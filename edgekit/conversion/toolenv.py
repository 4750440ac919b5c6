"""Converters whose pins conflict with edgekit's own run in a virtual environment of their own.

litert-torch (PyTorch -> LiteRT) pins ``typing-extensions<4.13`` through xdsl, while coremltools
needs a newer one, and it brings jax and transformers with it: it cannot share edgekit's
environment. ``python_for(TOOL)`` creates the tool's environment on first use (pinned
requirements, one ``pip install``; about a minute), keyed by the requirements and the Python
version, and returns its interpreter; converter children then run there (``worker.call(...,
python=...)``) with edgekit importable from this checkout. A half-created environment is never
used: it is marked ready only after pip succeeded, and a file lock serializes concurrent runs.

Location: ``EDGEKIT_TOOLENV_DIR``, else ``<user cache>/edgekit/toolenvs``.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from ..errors import ConversionError


@dataclass(frozen=True)
class Tool:
    name: str
    requirements: tuple[str, ...]
    why: str  # said when the environment is created


# torch stays at the build machine's local CPU wheel (any looser pin pulls GB of CUDA packages);
# ai-edge-litert 2.3 is what litert-torch 0.10 requires and what edgekit's runtime uses; onnx reads
# ONNX sources (edgekit.conversion.onnx_torch), at the version the build environment has.
LITERT_TORCH = Tool(
    name="litert-torch",
    requirements=("litert-torch==0.10.0", "torch==2.13.0", "ai-edge-litert>=2.3,<2.4", "numpy>=1.26",
                  "onnx==1.23.2"),
    why="PyTorch and ONNX -> TFLite (LiteRT) conversion with static INT8 (PT2E) quantization",
)


def root() -> Path:
    override = os.environ.get("EDGEKIT_TOOLENV_DIR")
    if override:
        return Path(override)
    from platformdirs import user_cache_dir

    return Path(user_cache_dir("edgekit", appauthor=False)) / "toolenvs"


def home_of(tool: Tool) -> Path:
    """The tool's environment folder, keyed by its requirements and this Python's version."""
    key = hashlib.sha256(f"{sys.version_info[:2]} {' '.join(tool.requirements)}".encode()).hexdigest()[:12]
    return root() / f"{tool.name}-py{sys.version_info[0]}{sys.version_info[1]}-{key}"


def python_for(tool: Tool, say: Callable[[str], None] = print) -> str:
    """The tool environment's interpreter, creating the environment on first use."""
    from filelock import FileLock

    home = home_of(tool)
    python = home / "bin" / "python"
    ready = home / ".edgekit-ready"
    if ready.is_file():
        return str(python)
    home.parent.mkdir(parents=True, exist_ok=True)
    with FileLock(str(home) + ".lock"):
        if ready.is_file():  # another run created it while this one waited
            return str(python)
        shutil.rmtree(home, ignore_errors=True)  # a half-created one from a killed run
        say(f"creating the {tool.name} environment for {tool.why} (first use, about a minute): {home}")
        _run([sys.executable, "-m", "venv", str(home)], tool, "creating the virtual environment")
        _run([str(python), "-m", "pip", "install", "--quiet", "--disable-pip-version-check", "--no-compile",
              *tool.requirements], tool, "installing " + " ".join(tool.requirements))
        _compile_on_every_core(python)
        ready.write_text(" ".join(tool.requirements) + "\n")
    return str(python)


def _compile_on_every_core(python: Path) -> None:
    """Byte-compile what pip installed, on every core at once (pip compiles file by file on one: a
    minute of the environment's creation). As under pip, a file that does not compile (written for a
    newer Python) is skipped, and a failure here only leaves imports to compile what they load. The
    libraries' own ``tests/`` folders are left out: no conversion imports them."""
    try:
        site = subprocess.run([str(python), "-c", "import sysconfig; print(sysconfig.get_path('purelib'))"],
                              capture_output=True, text=True, timeout=60).stdout.strip()
        if site:
            subprocess.run([str(python), "-m", "compileall", "-q", "-j", "0", "-x", "/tests/", site], capture_output=True,
                           timeout=1800)
    except (OSError, subprocess.TimeoutExpired):
        pass


def _run(argv: list[str], tool: Tool, what: str) -> None:
    try:
        done = subprocess.run(argv, capture_output=True, text=True, timeout=1800)
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise ConversionError(f"the {tool.name} environment could not be created ({what}: {exc})",
                              hint="check the disk and the package index, or set EDGEKIT_TOOLENV_DIR") from None
    if done.returncode != 0:
        tail = " | ".join((done.stderr or done.stdout).strip().splitlines()[-3:])
        raise ConversionError(f"the {tool.name} environment could not be created ({what}: {tail})",
                              hint="check that pip can reach the package index, or set EDGEKIT_TOOLENV_DIR "
                                   "to a writable disk; --debug shows the converter log")


TOOLS = {LITERT_TORCH.name: LITERT_TORCH}


def main(argv: list[str]) -> int:
    """``python -m edgekit.conversion.toolenv NAME...``: create these tools' environments now
    (scripts/test.sh starts it beside the suite, so no test waits on pip); its interpreter per tool."""
    for name in argv:
        if name not in TOOLS:
            print(f"error: no converter environment named {name!r} (known: {', '.join(TOOLS)})", file=sys.stderr)
            return 2
        try:
            print(f"{name}: {python_for(TOOLS[name])}")
        except ConversionError as failed:
            print(f"error: {failed.message}", file=sys.stderr)
            return 1
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
