"""One converter child for a run of similar steps (a search's tries), instead of one per step.

A child per step keeps TensorFlow's leaks and crashes out of the parent, but every start imports
TensorFlow or ONNX Runtime again: 2-3 s, most of a search try on a small model. Inside
``reusing()``, ``worker.call`` hands each step to a long-lived child (one per interpreter, per
thread) that runs it as a fresh child would: its own scratch folder, working directory and
progress file, the same request and response files. The child is replaced after ``MAX_STEPS``
steps or once it holds more than ``MAX_CHILD_RSS`` bytes (the converter's per-call leak stays
bounded), after a crash and after a timeout. A step asked under another environment than the
child's (a block held open across calls, as the test suite holds one per process, still runs each
step under its caller's settings) gets a child started under it; the child of the settings before
is kept beside it (``KEPT_PER_INTERPRETER``), so a caller that changes its environment for a while
and then restores it finds its converters still imported.
Outside ``reusing()`` every step still gets its own child.
"""

from __future__ import annotations

import json
import logging
import os
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

from . import worker

log = logging.getLogger("edgekit.worker")
MAX_STEPS = 4096  # steps one child runs before it is replaced. Memory is bounded by MAX_CHILD_RSS (TensorFlow's
# converter leaks per call: ~10 MB per packaging run of ~20 steps, measured); the count bounds the rest a long-lived
# child may gather. At 24 a search replaced its child every 15 s; at 64 every third packaging run re-imported its
# converters (10-15 s each); at 256 a child that had built 16 PyTorch packages (every format, each artifact run
# counted as a step) in 2 minutes was replaced holding 1.1 GB, well under MAX_CHILD_RSS. One packaging run takes
# tens to a few hundred steps (most of them artifact runs of a few milliseconds); at 1024 a block held for a whole
# test session (about 2,600 steps per process) re-imported its converters twice per process
KEPT_PER_INTERPRETER = 2  # children kept per interpreter under different settings (the least recently used ends)
MAX_CHILD_RSS = 2 * 2**30  # a child holding more memory than this after a step is replaced (Linux: /proc)


@contextmanager
def reusing() -> Iterator[None]:
    """Within this block, this thread's ``worker.call`` steps share children; they end with it."""
    if getattr(worker.reuse, "pool", None) is not None:  # nested: the outer block owns the children
        yield
        return
    pool = worker.reuse.pool = _Pool()
    try:
        yield
    finally:
        worker.reuse.pool = None
        pool.close()


class _Pool:
    """This thread's reused children: per interpreter, one per environment a step asked under, the
    ``KEPT_PER_INTERPRETER`` most recently used of them."""

    def __init__(self) -> None:
        # (interpreter, settings) -> child, least recently used first
        self.children: dict[tuple[str, str], _Child] = {}

    def child_for(self, python: str | None) -> _Child:
        """The reused child for ``python`` under the environment a fresh child would get now, started
        now if there is none or it cannot take another step."""
        interpreter = python or sys.executable
        env = worker.child_env(python)
        key = (interpreter, json.dumps(_settings(env), sort_keys=True))
        child = self.children.pop(key, None)
        if child is not None and not child.usable():
            child.close()
            child = None
        if child is None:
            same = [k for k in self.children if k[0] == interpreter]
            for old in same[:max(0, len(same) - KEPT_PER_INTERPRETER + 1)]:
                self.children.pop(old).close()
            child = _Child(python, env)
        self.children[key] = child  # now the most recently used
        return child

    def close(self) -> None:
        for child in self.children.values():
            child.close()
        self.children.clear()


class _Child:
    """A ``python -m edgekit.conversion.worker_reuse`` process: one JSON line per step on its stdin."""

    def __init__(self, python: str | None, env: dict[str, str]) -> None:
        # named with the parent's pid, as ``fsutil.temp_dir`` names its folders: a later run removes it
        # when that parent was killed before it could
        self._folder = Path(tempfile.mkdtemp(prefix=f"{worker.TEMP_PREFIX}{os.getpid()}-reused-"))
        self._stderr = open(self._folder / "stderr", "w+b")  # noqa: SIM115 - kept open for the child's life
        self.proc = subprocess.Popen(
            [python or sys.executable, "-m", "edgekit.conversion.worker_reuse"],
            env=env, cwd=self._folder, stdin=subprocess.PIPE, stdout=subprocess.DEVNULL,
            stderr=self._stderr, preexec_fn=worker.die_with_parent(os.getpid()),
        )
        self.steps = 0
        log.debug("reused child process %d started", self.proc.pid)

    def usable(self) -> bool:
        return self.proc.poll() is None and self.steps < MAX_STEPS and self.resident_bytes() <= MAX_CHILD_RSS

    def resident_bytes(self) -> int:
        """The child's resident memory (0 where /proc does not say: no other platform is watched)."""
        try:
            pages = int(Path(f"/proc/{self.proc.pid}/statm").read_text().split()[1])
        except (OSError, ValueError, IndexError):
            return 0
        return pages * os.sysconf("SC_PAGE_SIZE")

    def exit_description(self) -> str:
        code = self.proc.poll()
        if code is None:
            return "stopped answering"
        return worker.exit_description(code)

    def run(self, target: str, what: str, folder: Path, request: Path, response: Path, progress: Path,
            timeout: float | None, on_progress: Callable[[int, int], None] | None) -> str:
        """Send one step and wait for its response (or the child's end); the child's stderr of this step."""
        self.steps += 1
        offset = self._stderr_size()
        step = {"target": target, "request": str(request), "response": str(response), "progress": str(progress),
                "cwd": str(folder), "scratch": str(folder / "tmp")}
        try:
            assert self.proc.stdin is not None
            self.proc.stdin.write((json.dumps(step) + "\n").encode())
            self.proc.stdin.flush()
        except OSError:
            pass  # it died between steps: reported below as a crash, and replaced at the next step
        else:
            self._await(response, what, progress, timeout, on_progress)
        return self._stderr_since(offset)

    def _await(self, response: Path, what: str, progress: Path, timeout: float | None,
               on_progress: Callable[[int, int], None] | None) -> None:
        deadline = None if timeout is None else time.monotonic() + timeout
        last = ""
        pause = 0.002  # most steps (reading or running an artifact) answer within milliseconds
        try:
            while not response.exists():
                if self.proc.poll() is not None:
                    return
                if deadline is not None and time.monotonic() > deadline:
                    self.close(busy=True)
                    raise worker.timed_out(what, timeout)
                time.sleep(pause)
                pause = min(pause * 1.5, 0.05)
                last = worker.forward_progress(progress, last, on_progress)
        except BaseException:
            self.close(busy=True)  # interrupted: never leave a converter running behind
            raise

    def _stderr_size(self) -> int:
        try:
            return (self._folder / "stderr").stat().st_size
        except OSError:
            return 0

    def _stderr_since(self, offset: int) -> str:
        try:
            with open(self._folder / "stderr", "rb") as handle:
                handle.seek(offset)
                return handle.read().decode(errors="replace")
        except OSError:
            return ""

    def close(self, busy: bool = False) -> None:
        """End the child (it exits when its stdin closes; killed if it does not) and remove its folder.
        ``busy``: it is inside a step (past its deadline, or the caller was interrupted) and would
        not read its stdin before the grace period ends: killed at once, as a fresh child is."""
        if busy and self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()
        if self.proc.poll() is None:
            try:
                assert self.proc.stdin is not None
                self.proc.stdin.close()
                self.proc.wait(timeout=worker.EXIT_GRACE_S)
            except (OSError, subprocess.TimeoutExpired):
                self.proc.kill()
                self.proc.wait()
        self._stderr.close()
        shutil.rmtree(self._folder, ignore_errors=True)


def _settings(env: dict[str, str]) -> dict[str, str]:
    """A child's environment less what no step reads from it: pytest's per-test marker (it names the
    running test), the temporary folders each step is given anew (``worker.scratch_env``) and what a
    library's import sets from the installation alone. A caller that changes those alone, as torch
    does when it sets its inductor cache folder in the parent, keeps its child and its imports."""
    return {name: value for name, value in env.items() if name not in _PER_STEP and name not in _DERIVED}


_PER_STEP = frozenset({"PYTEST_CURRENT_TEST", *worker.SCRATCH_VARIABLES})
# set in the parent by an import, from the installed packages: the child's own import sets the same
# (ExecuTorch's runtime points OPENVINO_LIB_PATH at the installed openvino's library when unset)
_DERIVED = frozenset({"OPENVINO_LIB_PATH"})


def serve() -> int:
    """Child side: run each step read from stdin as ``worker.answer`` would in a fresh child, until
    stdin closes."""
    home = os.getcwd()
    for line in sys.stdin:
        if not line.strip():
            continue
        step = json.loads(line)
        os.environ.update(worker.scratch_env(Path(step["scratch"])))
        os.environ[worker.PROGRESS_ENV] = step["progress"]
        tempfile.tempdir = None  # read TMPDIR again: this step's scratch folder
        os.chdir(step["cwd"])
        try:
            worker.answer(step["target"], Path(step["request"]), Path(step["response"]))
        finally:
            os.chdir(home)  # the step's folder is removed after it (and a working directory blocks that on Windows)
    return 0


if __name__ == "__main__":
    worker.watch_parent()
    worker.exit_now(serve())
