"""Run heavy build-side functions (TensorFlow, converters) in a child process.

TensorFlow's converter leaks memory on every call and can abort the process; running each
step in a fresh interpreter keeps the parent small and turns a crash into a clear error.

Protocol: the parent writes the keyword arguments as JSON, runs
``python -m edgekit.worker MODULE:FUNCTION REQUEST RESPONSE`` and reads the JSON result. An
``EdgekitError`` raised in the child is re-raised in the parent with the same class, message
and hint. Arrays travel as ``.npy`` paths inside the request.
"""

from __future__ import annotations

import importlib
import json
import os
import subprocess
import sys
import tempfile
import traceback
from pathlib import Path
from typing import Any

from .errors import ERROR_CLASSES, ConversionError, EdgekitError

# Keep TensorFlow's C++ logging and oneDNN notices out of users' terminals.
_QUIET_ENV = {"TF_CPP_MIN_LOG_LEVEL": "3", "TF_ENABLE_ONEDNN_OPTS": "0", "ABSL_MIN_LOG_LEVEL": "3"}


def call(target: str, what: str, timeout: float | None = None, **kwargs: Any) -> Any:
    """Run ``target`` ("module:function") with ``kwargs`` in a child and return its result.

    ``what`` names the step in error messages ("TFLite conversion").
    """
    with tempfile.TemporaryDirectory(prefix="edgekit-worker-") as tmp:
        request = Path(tmp) / "request.json"
        response = Path(tmp) / "response.json"
        request.write_text(json.dumps(kwargs))
        env = {**os.environ, **_QUIET_ENV}
        try:
            proc = subprocess.run(
                [sys.executable, "-m", "edgekit.worker", target, str(request), str(response)],
                env=env,
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                timeout=timeout,
                check=False,
            )
        except subprocess.TimeoutExpired:
            raise ConversionError(f"{what} did not finish within {timeout:.0f} s") from None
        if response.exists():
            result = json.loads(response.read_text())
            if "error" in result:
                err = result["error"]
                cls = ERROR_CLASSES.get(err.get("type", ""), ConversionError)
                raised = cls(err["message"], hint=err.get("hint"))
                raised.child_traceback = err.get("traceback", "")  # type: ignore[attr-defined]
                raise raised
            return result.get("result")
        tail = _tail(proc.stderr.decode(errors="replace"))
        how = f"was killed by signal {-proc.returncode}" if proc.returncode < 0 else f"exited with {proc.returncode}"
        raise ConversionError(
            f"{what} crashed: the converter process {how}" + (f"\n{tail}" if tail else ""),
            hint="rerun with --debug for the full log; if it is out of memory, lower --samples",
        )


def _tail(text: str, lines: int = 15) -> str:
    kept = [line for line in text.splitlines() if line.strip() and not line.startswith(("W0000", "I0000"))]
    return "\n".join(kept[-lines:])


def _main(argv: list[str]) -> int:
    target, request_path, response_path = argv
    kwargs = json.loads(Path(request_path).read_text())
    module_name, _, function_name = target.partition(":")
    try:
        function = getattr(importlib.import_module(module_name), function_name)
        payload: dict[str, Any] = {"result": function(**kwargs)}
        code = 0
    except EdgekitError as exc:
        payload = {
            "error": {
                "type": type(exc).__name__,
                "message": exc.message,
                "hint": exc.hint,
                "traceback": traceback.format_exc(),
            }
        }
        code = 1
    except Exception as exc:  # unexpected: keep the child's traceback for --debug
        payload = {
            "error": {
                "type": "ConversionError",
                "message": f"{type(exc).__name__}: {exc}",
                "hint": "rerun with --debug for the converter's traceback",
                "traceback": traceback.format_exc(),
            }
        }
        code = 1
    Path(response_path).write_text(json.dumps(payload))
    return code


if __name__ == "__main__":
    sys.exit(_main(sys.argv[1:]))
