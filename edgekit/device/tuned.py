"""The choice ``edgekit tune`` stored for a package on this device, and when it still holds.

Read on every load that asks for nothing in particular, so it stays small (the measuring is
``edgekit.bench.tune``): a decision holds for one package (its manifest's digest), one device (OS,
architecture, board, CPU model, cores, GPU) and the runtime libraries it was measured with,
found by where they are installed and when, without importing them.
"""

from __future__ import annotations

import importlib.util
import json
import os
import time
from pathlib import Path
from typing import Any, NamedTuple

from ..machine import cache
from ..version import __version__
from .devices import DeviceFacts
from ..fsutil import sha256_hex
from ..logs import quiet
from ..manifest import Manifest

KIND = "tuned"


class Choice(NamedTuple):
    """An artifact x runtime x thread count (a NamedTuple: docs/architecture.md, cold start)."""

    artifact: str  # the artifact's key (tflite, onnx-float32, ...)
    backend: str
    threads: int

    def describe(self) -> str:
        return f"{self.artifact} on {self.backend}, {self.threads} thread{'s' if self.threads != 1 else ''}"


# --- identities a decision holds for ---------------------------------------------------------


def manifest_digest(root: Path) -> str:
    """The package's identity: its manifest lists every artifact's sha256."""
    return sha256_hex((root / "manifest.json").read_bytes())


def device_identity(facts: DeviceFacts) -> dict[str, Any]:
    """What makes one device's timings another's: OS, architecture, board, CPU model, cores, GPU."""
    return {"os": facts.os, "arch": facts.arch, "board": facts.device_tree_model, "tegra": facts.nv_tegra_release,
            "cuda": facts.cuda, "cores": facts.cpu_count, "cpu": facts.cpu_model or facts.arch}


def runtime_identity() -> dict[str, str]:
    """Each installed runtime library, by where it is and when it was installed (found without
    importing it: an upgrade rewrites its files)."""
    from ..formats import backends

    found = {}
    for backend in backends().values():
        for module in backend.libraries:
            try:
                spec = importlib.util.find_spec(module)
            except (ImportError, ValueError):
                spec = None
            if spec is None:
                continue
            origin = spec.origin or next(iter(spec.submodule_search_locations or []), "")
            try:
                stat = os.stat(origin)
            except OSError:
                continue
            found[module] = f"{origin}:{stat.st_size}:{stat.st_mtime_ns}"
    return found


# --- the stored decision ------------------------------------------------------------------------


def decision_path(digest: str) -> Path:
    return cache.entry_path(KIND, f"{digest}.json")


def tuned_choice(root: Path, manifest: Manifest, facts: DeviceFacts) -> Choice | None:
    """The decision ``edgekit tune`` stored for this package on this device with these runtimes,
    or None (with the reason logged) when there is none or it is stale."""
    path = decision_path(manifest_digest(root))
    try:
        record = json.loads(path.read_text())
    except FileNotFoundError:
        return None
    except (OSError, ValueError, RecursionError):
        _say("the tuned decision at %s cannot be read: ignored", path)
        return None
    stale = [what for what, now in (("device", device_identity(facts)), ("runtime libraries", runtime_identity()))
             if record.get(what.split()[0]) != now]
    if stale:
        _say("tuned decision for %s ignored: the %s changed since it was measured; run `edgekit tune` again",
             manifest.name, " and the ".join(stale))
        return None
    try:
        choice = Choice(**record["decision"])
    except (KeyError, TypeError):
        return None
    if choice.artifact not in {a.key for a in manifest.artifacts}:
        return None
    return choice


def store(root: Path, facts: DeviceFacts, choice: Choice, measured: dict[str, Any]) -> Path:
    from ..fsutil import write_text_atomic

    path = decision_path(manifest_digest(root))
    path.parent.mkdir(parents=True, exist_ok=True)
    record = {"decision": choice._asdict(), "device": device_identity(facts), "runtime": runtime_identity(),
              "edgekit_version": __version__, "created": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
              "measured": measured}
    write_text_atomic(path, json.dumps(record, indent=2) + "\n")
    return path


def forget(root: Path) -> bool:
    """Remove this package's tuned decision (``edgekit tune --reset``)."""
    path = decision_path(manifest_digest(root))
    existed = path.exists()
    path.unlink(missing_ok=True)
    return existed


def _say(message: str, *args: Any) -> None:
    log = quiet("edgekit.runtime")
    if log is not None:
        log.info(message, *args)
