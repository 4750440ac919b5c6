"""Run heavy build-side functions (TensorFlow, converters) in a child process.

TensorFlow's converter leaks memory on every call and can abort the process; running each
step in a fresh interpreter keeps the parent small and turns a crash into a clear error.

Protocol: the parent writes the keyword arguments as JSON, runs
``python -m edgekit.conversion.worker MODULE:FUNCTION REQUEST RESPONSE`` and reads the JSON result. An
``EdgekitError`` raised in the child is re-raised in the parent with the same class, message
and hint. Arrays travel as ``.npy`` paths inside the request.
"""

from __future__ import annotations

import importlib
import json
import logging
import re
import os
import subprocess
import sys
import threading
import time
import traceback
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, NoReturn, TypeVar

from ..errors import ERROR_CLASSES, OTHER_ROUTES, ConversionError, EdgekitError
from ..fsutil import temp_dir
from .messages import Message, request_and_report

R = TypeVar("R")

# Keep TensorFlow's C++ logging and oneDNN notices out of users' terminals.
_QUIET_ENV = {"TF_CPP_MIN_LOG_LEVEL": "3", "TF_ENABLE_ONEDNN_OPTS": "0", "ABSL_MIN_LOG_LEVEL": "3"}


log = logging.getLogger("edgekit.worker")
PROGRESS_ENV = "EDGEKIT_WORKER_PROGRESS"
_PARENT_ENV = "EDGEKIT_WORKER_PARENT"
TEMP_PREFIX = "edgekit-worker-"
# Seconds one child step may take when no timeout is given: far above any conversion of a model
# edgekit targets (minutes), short enough that a hung factory or converter ends the run.
DEFAULT_STEP_TIMEOUT_S = 1800.0
# A child that has written its answer gets this long to exit before it is killed.
EXIT_GRACE_S = 10.0
_PR_SET_PDEATHSIG = 1
# this thread's reused children while ``worker_reuse.reusing()`` is open (``reuse.pool``)
reuse = threading.local()


def die_with_parent(parent: int) -> Callable[[], None] | None:
    """A function for the child to run between fork and exec: the kernel then kills it when the
    parent dies (Linux). Everything it needs is resolved here, in the parent: importing in a
    forked child of a threaded process can deadlock."""
    if not sys.platform.startswith("linux"):
        return None  # the child's watchdog thread notices the parent's death instead
    try:
        import ctypes
        import signal

        prctl = ctypes.CDLL(None, use_errno=True).prctl
        kill = int(signal.SIGKILL)
    except (OSError, AttributeError):
        return None

    def setup() -> None:
        prctl(_PR_SET_PDEATHSIG, kill)
        if os.getppid() != parent:  # the parent died before prctl took effect
            os._exit(1)

    return setup


def watch_parent() -> None:
    """Child side, every platform: exit as soon as the parent process is gone (it was SIGKILLed)."""
    import threading

    expected = int(os.environ.get(_PARENT_ENV, "0") or 0)
    if not expected:
        return

    def watch() -> None:
        while True:
            time.sleep(0.5)
            if os.getppid() != expected:
                os._exit(1)

    threading.Thread(target=watch, name="edgekit-parent-watchdog", daemon=True).start()


SCRATCH_VARIABLES = ("TMPDIR", "TEMP", "TMP", "TORCHINDUCTOR_CACHE_DIR")  # set anew for every step


def scratch_env(folder: Path) -> dict[str, str]:
    """Point a child's temporary files into ``folder`` (inside edgekit's per-call temp dir, removed
    with it): converters leave caches there (torch's ``torchinductor_<user>/``, session files)
    that no later run would remove from the system temp folder."""
    folder.mkdir(parents=True, exist_ok=True)
    temp, cache = str(folder), str(folder / "torchinductor")
    return dict(zip(SCRATCH_VARIABLES, (temp, temp, temp, cache)))


def call(
    function: Callable[..., Any],
    what: str,
    timeout: float | None = DEFAULT_STEP_TIMEOUT_S,
    on_progress: Callable[[int, int], None] | None = None,
    python: str | None = None,
    **kwargs: Any,
) -> Any:
    """Run the module-level ``function`` with ``kwargs`` (JSON values) in a child; its result.

    ``python``: another interpreter (a converter's own environment, ``edgekit.conversion.toolenv``); the
    child then imports edgekit from this installation.

    Passed by reference, so a rename is caught where it is written, not at run time in a child.
    ``what`` names the step in error messages ("TFLite conversion"); ``on_progress(done,
    total)`` receives what the child reports with ``report_progress``.
    """
    from .deadline import bound

    target = reference(function)
    timeout = bound(timeout)  # a format's share of --time-limit ends its steps too (deadline.py)
    log.debug("child process: %s (%s)", target, what)
    with temp_dir(TEMP_PREFIX) as tmp:
        request = Path(tmp) / "request.json"
        response = Path(tmp) / "response.json"
        progress = Path(tmp) / "progress"
        request.write_text(json.dumps(kwargs))
        pool = getattr(reuse, "pool", None)  # set by worker_reuse.reusing()
        reused = pool.child_for(python) if pool is not None else None
        if reused is not None:
            child_stderr = reused.run(target, what, Path(tmp), request, response, progress, timeout, on_progress)
            return _result(response, child_stderr, what, reused.exit_description())
        env = child_env(python)
        env.update({**scratch_env(Path(tmp) / "tmp"), PROGRESS_ENV: str(progress)})
        with open(Path(tmp) / "stderr", "w+b") as stderr:
            proc = subprocess.Popen(
                [python or sys.executable, "-m", "edgekit.conversion.worker", target, str(request), str(response)],
                env=env,
                cwd=tmp,  # converters drop scratch files in the working directory (ORT's sym_shape_infer_temp.onnx)
                stdout=subprocess.DEVNULL,
                stderr=stderr,
                preexec_fn=die_with_parent(os.getpid()),
            )
            _wait(proc, timeout, what, progress, on_progress, response)
            stderr.seek(0)
            child_stderr = stderr.read().decode(errors="replace")
        return _result(response, child_stderr, what, exit_description(proc.returncode))


def convert(function: Callable[[Any], R], request: Message, what: str,
            timeout: float | None = DEFAULT_STEP_TIMEOUT_S, on_progress: Callable[[int, int], None] | None = None,
            python: str | None = None) -> R:
    """A format's converter step ``function(request) -> report`` in a child: the request and the
    report are frozen ``Message`` dataclasses (``messages.py``), JSON only on the way across."""
    request_type, report_type = request_and_report(function)
    if not isinstance(request, request_type):
        raise TypeError(f"{reference(function)} takes a {request_type.__name__}, got {type(request).__name__}")
    answer = call(converter_step, what, timeout=timeout, on_progress=on_progress, python=python,
                  step=reference(function), request=request.to_json())
    return report_type.from_json(answer)  # type: ignore[return-value]


def converter_step(step: str, request: dict[str, Any]) -> dict[str, Any]:
    """Child side of ``convert``: the request rebuilt as its type, the step run, its report as JSON."""
    function = resolve(step)
    request_type, report_type = request_and_report(function)
    report = function(request_type.from_json(request))
    if not isinstance(report, report_type):
        raise TypeError(f"{step} returned {type(report).__name__}, not its {report_type.__name__}")
    return report.to_json()


def exit_description(code: int) -> str:
    """How a child ended, e.g. ``was killed by signal 11 (SIGSEGV)``."""
    if code >= 0:
        return f"exited with {code}"
    import signal

    try:
        name = f" ({signal.Signals(-code).name})"
    except ValueError:
        name = ""
    return f"was killed by signal {-code}{name}"


def child_env(python: str | None) -> dict[str, str]:
    """The environment of a converter child: quiet native logging, the parent's pid for its
    watchdog, native thread pools under ``EDGEKIT_THREADS`` (threads.py), and this installation of
    edgekit on the path of another interpreter."""
    from . import threads

    env = {**os.environ, **_QUIET_ENV, **threads.child_env(), _PARENT_ENV: str(os.getpid())}
    # a converter child is the isolation ExecuTorch's first load needs on a device: it loads directly
    env["EDGEKIT_EXECUTORCH_VERIFYING"] = "1"
    if python is not None:
        here = str(Path(__file__).resolve().parents[2])  # the folder holding edgekit/
        env["PYTHONPATH"] = os.pathsep.join(p for p in (here, os.environ.get("PYTHONPATH", "")) if p)
    return env


def _result(response: Path, child_stderr: str, what: str, how: str) -> Any:
    """The child's answer, its error raised here as the same edgekit error, or a crash named."""
    if response.exists():
        result = json.loads(response.read_text())
        if "error" in result:
            err = result["error"]
            cls = ERROR_CLASSES.get(err.get("type", ""), ConversionError)
            message, hint = with_native_cause(err["message"], err.get("hint"), child_stderr, cls)
            raised = cls(message, hint=hint)
            raised.child_traceback = err.get("traceback", "")  # type: ignore[attr-defined]
            raised.child_log = child_stderr  # type: ignore[attr-defined]
            raise raised
        return result.get("result")
    tail = _tail(child_stderr)
    raise ConversionError(
        f"{what} crashed: the converter process {how}" + (f"\n{tail}" if tail else ""),
        hint="rerun with --debug for the full log; if it is out of memory, lower --samples",
    )


def resolve(ref: str) -> Any:
    """The module-level function or class a ``reference`` names (imported here, in the child)."""
    module_name, _, name = ref.partition(":")
    return getattr(importlib.import_module(module_name), name)


def reference(function: Callable[..., Any]) -> str:
    """"module:function" for a function (or class) the child can import by name."""
    qualname = getattr(function, "__qualname__", "")
    module = getattr(function, "__module__", "")
    if not module or not qualname or "." in qualname or "<" in qualname:
        raise TypeError(f"worker.call needs a module-level function, got {function!r}")
    return f"{module}:{qualname}"


@dataclass(frozen=True)
class ModuleRequest(Message):
    """A converter's command line: ``python -m MODULE ARGUMENTS``."""

    module: str
    arguments: tuple[str, ...]


@dataclass(frozen=True)
class ModuleRun(Message):
    """How a converter's command line ended: its exit code and everything it said."""

    returncode: int
    output: str


def run_module(module: str, arguments: list[str], what: str,
               timeout: float | None = DEFAULT_STEP_TIMEOUT_S) -> ModuleRun:
    """A converter's command line (``python -m MODULE ARGUMENTS``: tf2onnx, ORT's tools) in a
    converter child, the run's reused one where there is one (its imports already made): its exit
    code (``returncode``) and everything it said (``output``: stdout, stderr and its log records),
    for the caller to explain a failure. A deadline gives a clear error, as for any step."""
    return convert(module_main, ModuleRequest(module, tuple(arguments)), what, timeout=timeout)


def module_main(request: ModuleRequest) -> ModuleRun:
    """Child side of ``run_module``: the module run as ``__main__`` with ``sys.argv`` set, what it
    writes to sys.stdout/sys.stderr and what it logs at INFO and above kept (a handler of our own on
    the root logger: a logging set-up that a previous step's run left stays out of this one)."""
    import contextlib
    import io
    import runpy
    import traceback

    said = io.StringIO()
    handler = logging.StreamHandler(said)
    handler.setFormatter(logging.Formatter("%(name)s - %(levelname)s - %(message)s"))
    root = logging.getLogger()
    level = root.level
    root.addHandler(handler)  # before the tool's logging.basicConfig, which then adds none of its own
    root.setLevel(logging.INFO)
    module = request.module
    argv, sys.argv = sys.argv, [module, *request.arguments]
    code = 0
    try:
        with contextlib.redirect_stdout(said), contextlib.redirect_stderr(said):
            runpy.run_module(module, run_name="__main__", alter_sys=True)
    except SystemExit as exc:
        code = exc.code if isinstance(exc.code, int) else (0 if exc.code is None else 1)
    except Exception:  # as its command line would end: the traceback's last line names the cause
        code = 1
        said.write(traceback.format_exc())
    finally:
        sys.argv = argv
        root.removeHandler(handler)
        root.setLevel(level)
    return ModuleRun(returncode=code, output=said.getvalue())


def _wait(
    proc: subprocess.Popen[bytes],
    timeout: float | None,
    what: str,
    progress: Path,
    on_progress: Callable[[int, int], None] | None,
    response: Path | None = None,
) -> None:
    """Until the child exits, ``timeout`` passes (an error), or the child has answered and then
    not exited within ``EXIT_GRACE_S`` (it is ended: some converters leave threads that never stop)."""
    deadline = None if timeout is None else time.monotonic() + timeout
    answered_at: float | None = None
    last = ""
    try:
        while True:
            try:
                proc.wait(timeout=0.25)
                return
            except subprocess.TimeoutExpired:
                pass
            if response is not None and answered_at is None and response.exists():
                answered_at = time.monotonic()
            if answered_at is not None and time.monotonic() - answered_at > EXIT_GRACE_S:
                log.debug("%s answered but did not exit within %.0f s: ended", what, EXIT_GRACE_S)
                proc.kill()
                proc.wait()
                return
            if deadline is not None and time.monotonic() > deadline:
                proc.kill()
                proc.wait()
                raise timed_out(what, timeout)
            last = forward_progress(progress, last, on_progress)
    except BaseException:
        if proc.poll() is None:  # interrupted: never leave a converter running behind
            proc.kill()
            proc.wait()
        raise


def timed_out(what: str, timeout: float | None) -> ConversionError:
    """The error for a child step ended at its deadline (the format's share's, when that ended it)."""
    from . import deadline

    if deadline.past():
        return deadline.ended()
    return ConversionError(
        f"{what} did not finish within {timeout or 0:.0f} s (the child process was ended)",
        hint="raise --timeout if it only needs longer; a model factory or converter that waits on "
             "input, the network or a lock never finishes",
    )


def forward_progress(progress: Path, last: str, on_progress: Callable[[int, int], None] | None) -> str:
    """Parent side: hand what the child last reported (``report_progress``) to ``on_progress``
    when it changed; the text read, to compare with next time."""
    if on_progress is None:
        return last
    try:
        text = progress.read_text()
    except OSError:
        return last
    if text and text != last and " " in text:
        done, total = text.split()
        on_progress(int(done), int(total))
        return text
    return last


def report_progress(done: int, total: int) -> None:
    """Child side: tell the parent how far a long step is (cheap; throttle in the caller)."""
    path = os.environ.get(PROGRESS_ENV)
    if path:
        tmp = f"{path}.tmp"
        with open(tmp, "w") as handle:
            handle.write(f"{done} {total}")
        os.replace(tmp, path)


_MLIR_ERROR = re.compile(r"^(?:loc\((?P<loc>.*)\)|[^:]*):\s*error:\s*(?P<reason>.+)$")


def native_cause(log: str) -> str | None:
    """The first real error a converter wrote on its native stderr: an MLIR diagnostic
    (``loc(...): error: 'tfl.concatenation' op ...``, located by op name) or an ``Error:`` line."""
    for line in log.splitlines():
        match = _MLIR_ERROR.match(line.strip())
        if match:
            where = re.findall(r'"([^"@]+)(?:@[^"]*)?"', match.group("loc") or "")
            op = next((w for w in reversed(where) if "/" in w), where[-1] if where else "")
            return (f"{op.rstrip(':')}: " if op else "") + match.group("reason").strip()
    for line in log.splitlines():
        text = line.strip()
        if re.match(r"^[A-Za-z_.]*(Error|Exception):\s*\S", text) and "Warning" not in text:
            return text
    return None


def with_native_cause(message: str, hint: str | None, log: str, cls: type[EdgekitError]) -> tuple[str, str | None]:
    """The child's message and hint, completed with the native cause when the message does not
    carry it already (TensorFlow's converter raises with an empty message and prints the reason in
    C++), and a fix that matches that cause."""
    if not issubclass(cls, ConversionError):
        return message, hint
    cause = native_cause(log)
    if cause is None or cause in message:
        return message, hint
    return f"{message.rstrip().rstrip(':')}: {cause}", _fix_for(cause) or hint


def _fix_for(cause: str) -> str | None:
    if "same scale constraint" in cause:
        path = cause.split(":", 1)[0].split("/")
        layer = re.sub(r"_\d+$", "", path[1]) if len(path) > 2 else "LAYER"
        return (f"keep that layer in float: --keep-float {layer} (recorded in the manifest), or give its inputs "
                "similar value ranges")
    return None


def _tail(text: str, lines: int = 15) -> str:
    kept = [line for line in text.splitlines() if line.strip() and not line.startswith(("W0000", "I0000"))]
    return "\n".join(kept[-lines:])


def _main(argv: list[str]) -> int:
    watch_parent()
    target, request_path, response_path = argv
    return answer(target, Path(request_path), Path(response_path))


def exit_now(code: int) -> NoReturn:
    """End a child that has answered without the interpreter's teardown: TensorFlow's, PyTorch's
    and coremltools' exit handlers took 3-4 s of every packaging run, and nothing the parent reads
    is written by them (responses and artifacts are complete files before this)."""
    logging.shutdown()
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except (OSError, ValueError):
            pass
    os._exit(code)


def _converter_failure(exc: BaseException) -> str:
    """A converter library's own exception in edgekit's words: which library raised it, and its
    message (a bare ``KeyError: 'const_66'`` says neither)."""
    library = ""
    frame = exc.__traceback__
    while frame is not None:
        module = str(frame.tb_frame.f_globals.get("__name__", ""))
        if module and not module.startswith(("edgekit", "__main__")):
            library = module.split(".")[0]
        frame = frame.tb_next
    text = str(exc).strip().splitlines()[0][:300] if str(exc).strip() else ""
    where = f"{library} raised" if library else "the conversion raised"
    return f"{where} {type(exc).__name__}" + (f": {text}" if text else "")


def answer(target: str, request_path: Path, response_path: Path) -> int:
    """Child side: run ``target`` with the request's keyword arguments; write the response
    (result or error) where the parent looks for it. 0 when it succeeded."""
    kwargs = json.loads(request_path.read_text())
    try:
        function = resolve(target)
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
    except Exception as exc:  # a full disk or an exhausted machine is named; anything else keeps its traceback
        from ..errors import resource_error, storage_error

        from ..errors import missing_module_error

        found = (storage_error(exc) if isinstance(exc, OSError) else None) or resource_error(exc) \
            or missing_module_error(exc)
        payload = {
            "error": {
                "type": type(found).__name__ if found else "ConversionError",
                "message": found.message if found else _converter_failure(exc),
                "hint": found.hint if found else f"{OTHER_ROUTES}; rerun with --debug for the converter's traceback "
                                                 "and report it with the model",
                "traceback": traceback.format_exc(),
            }
        }
        code = 1
    partial = Path(str(response_path) + ".partial")
    partial.write_text(json.dumps(payload))
    os.replace(partial, response_path)  # the parent takes a response that exists as complete
    return code


if __name__ == "__main__":
    exit_now(_main(sys.argv[1:]))
