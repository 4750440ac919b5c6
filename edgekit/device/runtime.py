"""``edgekit.load(source).predict(x)``: the device-side entry point.

Device path: imports numpy, Pillow and one runtime library, never TensorFlow. ``load`` resolves
the source (package directory, ``.ekpkg``, URL, or a bare ``.tflite``/``.onnx``), picks the
device profile (detected, or named), chooses the first artifact/backend pair the profile
prefers that this device can run, verifies the artifact's sha256, builds the interpreter or
session once, warms it up, and returns a ``Model``. ``predict`` applies the manifest's
preprocessing and returns float outputs.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ..machine import cache
from ..version import __version__
from .devices import DeviceFacts, Profile, check_threads, resolve_profile, runtime_threads
from ..errors import BackendUnavailableError, EdgekitError, PackageError
from ..formats import DEFAULT_FORMAT, FORMATS, Backend, Format, backends, format_for_file, format_of_backend, get_backend
from ..fsutil import sha256_file, sha256_hex
from ..logs import quiet
from ..manifest import Artifact, Manifest, SpeedEntry, TensorSpec
from .model import Model
from .package_io import local_path, open_package, unpacked_exists, verified_artifact_path

__all__ = ["Model", "choose", "load", "runnable"]

if TYPE_CHECKING:
    from .prediction_cache import PredictionCache



def load(
    source: str | os.PathLike[str],
    artifact: str | None = None,
    backend: str | None = None,
    threads: int | None = None,
    profile: str | Profile | None = "auto",
    prediction_cache: PredictionCache | None = None,
    warmup: bool = True,
    timings: dict[str, Any] | None = None,
    require_signature: bool | None = None,
    trusted_keys: str | os.PathLike[str] | None = None,
    spin: bool = True,
    allow_failed: bool = True,
) -> Model:
    """Load a package with the best artifact this device can run.

    ``artifact`` (tflite, onnx, coreml) and ``backend`` (litert, onnxruntime, coreml) narrow
    the choice; ``profile`` is a device profile name, a Profile, or "auto" to detect one.
    ``timings`` (a dict) receives the load phases in seconds and whether the cache was hit.
    ``require_signature`` (or the profile's ``require_signature``) refuses packages not signed
    by one of the keys in ``trusted_keys`` (a folder of ``*.pub`` files).
    ``spin=False`` lets the runtime's worker threads sleep between runs instead of spinning
    (ONNX Runtime's default): right for a server, whose request decoding needs the same cores.
    An artifact that failed its validation gate (kept by ``--allow-accuracy-drop``) is chosen only
    when asked for or when nothing else runs here; it loads with a ``FailedArtifactWarning``, or
    is refused with ``allow_failed=False``.
    """
    clock = _Phases(timings)
    facts = DeviceFacts.read()
    if threads is not None:
        check_threads(threads, "threads", facts.cpu_count)
    chosen_profile = resolve_profile(profile, facts)
    clock.lap("profile_s")
    text = os.fspath(source)
    path = local_path(text)
    bare = format_for_file(path) if path.is_file() else None
    if bare is not None:
        return _load_bare(path, bare, backend, threads, chosen_profile, facts, prediction_cache, spin)
    if path.is_file() and timings is not None:  # hashing the archive twice only when asked to report it
        clock.note("cache_hit", unpacked_exists(path))
    root, manifest = open_package(path)
    signed = _check_signature(root, chosen_profile, require_signature, trusted_keys)
    entry, backend_cls, tuned_threads = _choose_for_device(root, manifest, chosen_profile, facts, artifact, backend)
    _say_verdict(manifest, entry, allow_failed)
    _say_arithmetic(manifest, entry, backend_cls, facts)
    threads = threads or tuned_threads
    clock.lap("open_package_s")
    try:
        artifact_path = verified_artifact_path(root, entry, use_stamps=not signed)
    except PackageError:
        if not path.is_file():
            raise
        cache.remove(root)  # a cached unpacked copy went bad: unpack the archive again
        root, manifest = open_package(path)
        artifact_path = verified_artifact_path(root, entry, use_stamps=not signed)
    clock.lap("verify_s")
    runtime = _create(backend_cls, artifact_path, entry.sha256, chosen_profile, facts, threads, spin)
    log = quiet("edgekit.runtime")
    if log is not None:
        log.debug("loaded %s: profile %s, artifact %s, backend %s", manifest.name, chosen_profile.name, entry.key,
                  runtime.describe())
    clock.lap("create_runtime_s")
    if warmup:
        runtime.warmup()
        clock.lap("warmup_s")
    return Model(root, manifest, entry, runtime, chosen_profile, prediction_cache)


def _choose_for_device(root: Path, manifest: Manifest, profile: Profile, facts: DeviceFacts, artifact: str | None,
                       backend: str | None) -> tuple[Artifact, type[Backend], int | None]:
    """What ``edgekit tune`` measured fastest here (when nothing is asked for and the profile
    lets it), else the profile's order; and the tuned thread count, if any."""
    if artifact is None and backend is None and profile.use_tuned:
        from .tuned import tuned_choice

        tuned = tuned_choice(root, manifest, facts)
        if tuned is not None:
            from ..formats import exact_name

            try:  # the build edgekit tune measured, exactly
                entry, backend_cls = choose(manifest, profile, exact_name(tuned.artifact), tuned.backend)
            except EdgekitError:  # its runtime is gone: tuned_choice saw the change; the default then
                pass
            else:
                log = quiet("edgekit.runtime")
                if log is not None:
                    log.info("%s: using the choice edgekit tune measured fastest on this device: %s", manifest.name,
                             tuned.describe())
                return entry, backend_cls, tuned.threads
    entry, backend_cls = choose(manifest, profile, artifact, backend)
    log = quiet("edgekit.runtime")
    if log is not None and artifact is None and backend is None:
        log.info("%s: running %s", manifest.name, why_chosen(manifest, profile, entry, backend_cls.name))
    return entry, backend_cls, None


def verdict_holds_here(manifest: Manifest, key: str, backend: str, facts: DeviceFacts | None = None) -> bool:
    """Whether an artifact's validation covers the arithmetic this device runs it with: not for a
    build judged as quantized (for devices that compute it exactly) that ``backend`` would run here
    on int8 kernels which saturate (the format's ``DeviceRules``: ONNX Runtime on x86 without VNNI,
    8-bit weights)."""
    judged = manifest.validation.artifact(key).metrics.judged_by or ""
    fmt = FORMATS.get(manifest.artifact(key).format)
    if not judged.startswith("as quantized") or fmt is None:
        return True
    return not fmt.device_rules.saturates(key, backend, facts or DeviceFacts.read())


def _say_arithmetic(manifest: Manifest, entry: Artifact, backend_cls: type[Backend], facts: DeviceFacts) -> None:
    """An artifact whose verdict does not cover this CPU's kernels is said out loud when it loads."""
    if verdict_holds_here(manifest, entry.key, backend_cls.name, facts):
        return
    import warnings

    from ..errors import KernelArithmeticWarning

    mine = _for_this_cpu(manifest).get(entry.format)
    fix = (f"run {mine}, the package's build for this CPU (--artifact {entry.format})" if mine and mine != entry.key
           else FORMATS[entry.format].device_rules.saturation_fix())
    warnings.warn(KernelArithmeticWarning(
        f"artifact {entry.key!r} of package {manifest.name!r} was validated as quantized for other devices; this "
        f"CPU's int8 kernels (x86 without VNNI) can saturate on it and lose accuracy: {fix}"), stacklevel=3)


def _say_verdict(manifest: Manifest, entry: Artifact, allow_failed: bool) -> None:
    """An artifact that failed its gate, or was never measured, is never loaded silently."""
    from ..validation_record import Verdict, samples_to_decide

    record = manifest.validation.artifact(entry.key)
    if record.verdict is Verdict.UNVERIFIED:
        import warnings

        from ..errors import UnmeasuredArtifactWarning

        warnings.warn(UnmeasuredArtifactWarning(
            f"artifact {entry.key!r} of package {manifest.name!r} was not measured against the float model when it "
            f"was packaged ({record.reason or 'no runtime for it there'}): it has no verdict; check its outputs on "
            "your data (--eval)"), stacklevel=3)
        return
    if record.verdict is Verdict.NOT_DECIDABLE:
        import warnings

        from ..errors import UndecidedArtifactWarning

        counts = "; ".join(f"{u.gate} on {u.have} {u.unit}, {u.needed} needed" for u in record.undecided)
        needed = samples_to_decide(record.undecided)
        warnings.warn(UndecidedArtifactWarning(
            f"artifact {entry.key!r} of package {manifest.name!r} met its gates on too few validation samples to "
            f"decide them ({counts}): its accuracy against the float model is not established; repackage with "
            f"--eval holding {needed}+ samples, or check its outputs on your data (--eval)"), stacklevel=3)
        return
    if record.verdict is Verdict.PASSED:
        return
    failed = record.failed_gates() or ["validation"]
    what = f"artifact {entry.key!r} of package {manifest.name!r} failed validation when it was packaged: {failed[0]}"
    if not allow_failed:
        raise PackageError(what, hint="serve an artifact that passed (--artifact), repackage it without --no-auto-fix (the search), or pass "
                                      "--allow-failed-artifact to serve it anyway")
    import warnings

    from ..errors import FailedArtifactWarning

    warnings.warn(FailedArtifactWarning(what + " (its outputs may differ from the float model's)"), stacklevel=3)


def _check_signature(root: Path, profile: Profile, require: bool | None, trusted: Any) -> bool:
    """Verify the package's signature when required or keys are given; whether it was."""
    required = profile.require_signature if require is None else require
    trusted = trusted or profile.trusted_keys or None
    if not required and trusted is None:
        return False
    from .signing import trusted_keys, verify_signature

    if trusted is None:
        from ..errors import EdgekitError

        raise EdgekitError("--require-signature needs --trusted-keys DIR (the public keys you trust)",
                           hint="pass --trusted-keys DIR, or set trusted_keys in the device profile")
    verify_signature(root, trusted_keys(trusted))
    return True


class _Phases:
    """Records elapsed time per load phase into a caller's dict (or does nothing)."""

    def __init__(self, sink: dict[str, Any] | None) -> None:
        import time

        self.sink = sink
        self._time = time.perf_counter
        self._last = self._time()

    def lap(self, name: str) -> None:
        now = self._time()
        if self.sink is not None:
            self.sink[name] = now - self._last
        self._last = now

    def note(self, name: str, value: Any) -> None:
        if self.sink is not None:
            self.sink[name] = value


def candidates(manifest: Manifest, profile: Profile) -> list[tuple[Artifact, type[Backend]]]:
    """Every (artifact, backend) pair of the package, in the profile's order of preference."""
    present = {a.key: a for a in manifest.artifacts}
    known = backends()
    mine = _for_this_cpu(manifest)  # a format's name -> the build this CPU runs better (ONNX's schemes)
    order = [(mine.get(f, f), b) for f, b in profile.prefer if mine.get(f, f) in present and b in known]
    quantized_first = [a for a in manifest.artifacts if not a.is_float] + [a for a in manifest.artifacts if a.is_float]
    for preferred, backend in profile.prefer:  # a format the profile prefers: its float fallback in the same place
        order += [(a.key, backend) for a in quantized_first if a.is_float and a.format == preferred
                  and backend in known and (a.key, backend) not in order]
    for entry in quantized_first:
        fmt = FORMATS.get(entry.format)
        order += [(entry.key, b.name) for b in (fmt.backends if fmt else ()) if (entry.key, b.name) not in order]
    order = _float_before_slower_mixed(order, present)
    measured = [(e.artifact, e.backend) for e in measured_here(manifest, profile)
                if e.artifact in present and e.backend in known and manifest.failed_gates(e.artifact) is None]
    order = measured + [pair for pair in order if pair not in measured]  # measured on a CPU like this one first
    # artifacts that failed their gate (kept by --allow-accuracy-drop) only after every one that passed
    order.sort(key=lambda pair: manifest.failed_gates(pair[0]) is not None)
    return [(present[f], known[b]) for f, b in order]


def measured_here(manifest: Manifest, profile: Profile) -> list[SpeedEntry]:
    """The package's passing artifacts in the order they ran when it was made on a CPU of this
    kind (``Manifest.speed``), when the profile is this device's own (detected, or generic) and
    lets measurements decide (``use_tuned``); empty otherwise. A profile named for another device
    (``--profile gpu-server`` here) keeps its own order."""
    facts = DeviceFacts.read()
    if not profile.use_tuned or not (profile.name == "generic" or profile.match(facts)[0]):
        return []
    return manifest.speed_order(facts.cpu_kind())


def why_chosen(manifest: Manifest, profile: Profile, entry: Artifact, backend: str) -> str:
    """Why the default choice is this pair, in words for ``-v``: the package's measured order on
    this CPU kind, or the device profile's order (and why no measurement applies)."""
    facts = DeviceFacts.read()
    order = measured_here(manifest, profile)
    if order:
        mine = next((e for e in order if e.artifact == entry.key and e.backend == backend), None)
        if mine is not None:
            others = ", ".join(f"{e.artifact} {e.ms:.3g} ms" for e in order if e is not mine)
            rank = "the fastest" if mine is order[0] else "the fastest this device can run"
            return (f"{entry.key} on {backend} is {rank} passing artifact measured on this CPU kind when the package "
                    f"was made ({mine.ms:.3g} ms, batch 1, 1 thread; then {others or 'nothing else'})")
    kinds = list(manifest.speed.get("by_cpu_kind", {}))
    reason = ("its passing artifacts were measured on this CPU kind, but the profile was named for another device "
              "or ignores measured orders (use_tuned = false)" if facts.cpu_kind() in kinds
              else f"the package was timed on another CPU kind ({kinds[0]}), not this one ({facts.cpu_kind()})"
              if kinds else "the package records no measured order (one artifact, or none timed)")
    return (f"{entry.key} on {backend} comes first in device profile {profile.name!r}'s order of preference "
            f"({reason}; `edgekit tune` measures on this device)")


# a mixed artifact must beat its float fallback by this factor where it was timed, or the float runs
# (a 1.00x INT8 build has its int8 accuracy cost for nothing; 5% covers the timing's noise)
FASTER_THAN_FLOAT = 1.05


def _float_before_slower_mixed(order: list[tuple[str, str]], present: dict[str, Artifact]) -> list[tuple[str, str]]:
    """A mixed artifact measured no faster than its float fallback (``FASTER_THAN_FLOAT``) on a
    CPU of this kind when it was packaged (``details.speed_vs_float``) comes after that fallback."""
    if not any(a.about.speed_vs_float for a in present.values()):
        return order  # nothing timed at packaging: no device facts to read
    arch = DeviceFacts.read().arch
    moved = list(order)
    for key, artifact in present.items():
        speed = artifact.about.speed_vs_float or {}
        fallback = speed.get("float_artifact")
        speedup = speed.get("speedup")
        if fallback not in present or not isinstance(speedup, (int, float)) or speedup >= FASTER_THAN_FLOAT \
                or speed.get("arch") != arch:
            continue
        slow = [pair for pair in moved if pair[0] == key]
        if not slow:
            continue
        first = moved.index(slow[0])
        faster = [pair for pair in moved if pair[0] == fallback and moved.index(pair) > first]
        moved = [pair for pair in moved if pair not in faster]
        moved[first:first] = faster
    return _other_int8_before_slow(moved, present, arch)


def _other_int8_before_slow(order: list[tuple[str, str]], present: dict[str, Artifact],
                            arch: str) -> list[tuple[str, str]]:
    """Where a format's INT8 was measured slower than its float fallback on this CPU kind, another
    format's INT8 artifact not measured slower runs before that pair: a package whose preferred
    format only runs fast in float still runs the INT8 it has that is faster (a plain int8 build
    is, and a mixed one timed faster). The order among everything else stays the profile's."""
    slow: set[str] = set()
    for key, artifact in present.items():
        speed = artifact.about.speed_vs_float or {}
        speedup = speed.get("speedup")
        if isinstance(speedup, (int, float)) and speedup < FASTER_THAN_FLOAT and speed.get("arch") == arch:
            # its format's other builds carry the same plan (ONNX's scheme variants): slow alike
            slow |= {a.key for a in present.values() if a.format == artifact.format} | {key}
    if not slow:
        return order
    positions = [i for i, (key, _) in enumerate(order) if key in slow]
    first = positions[0]
    ahead = [pair for pair in order[first:] if pair[0] not in slow and pair[0] in present
             and not present[pair[0]].is_float]
    rest = [pair for pair in order[first:] if pair not in ahead]
    return order[:first] + ahead + rest


def _for_this_cpu(manifest: Manifest) -> dict[str, str]:
    """Each format's quantized build for this device (its ``DeviceRules``), where the package has
    one that passed its gates: a profile's format name means that build here."""
    from .devices import DeviceFacts
    from ..formats import device_artifacts

    usable = {a.key for a in manifest.artifacts if a.key == a.format or manifest.failed_gates(a.key) is None}
    return device_artifacts(usable, DeviceFacts.read())


def runnable(manifest: Manifest, profile: Profile) -> list[tuple[Artifact, type[Backend]]]:
    """The pairs this device has a runtime library for (first: what ``load`` picks)."""
    return [(a, b) for a, b in candidates(manifest, profile) if b.available()]


def choose(
    manifest: Manifest, profile: Profile, artifact: str | None = None, backend: str | None = None
) -> tuple[Artifact, type[Backend]]:
    """The first (artifact, backend) pair, in the profile's order, that this device can run."""
    if artifact is not None:
        from ..formats import exact_key

        if artifact in FORMATS:  # a format's name: the best artifact of that format for this device
            artifact = _for_this_cpu(manifest).get(artifact, artifact)
        # a scheme's own name for the main build (onnx-s8s8); a format's name: its quantized artifact;
        # a clear error if the package lacks it
        asked = artifact
        present = [a.key for a in manifest.artifacts]
        if exact_key(artifact) not in present and artifact.split("-")[0] not in FORMATS:
            raise PackageError(f"package {manifest.name!r} has no {artifact} artifact, and {artifact.split('-')[0]!r} "
                               "is no format", hint="pass --artifact with one of its artifacts: " + ", ".join(present))
        found = manifest.artifact(exact_key(artifact))
        artifact = found.key
        if asked in FORMATS and found.is_float:  # its INT8 build is not in the package: said, never silent
            _say_float_instead(manifest, asked, found.key)
    if backend is not None:
        get_backend(backend)
    wanted = [(a, b) for a, b in candidates(manifest, profile)
              if artifact in (None, a.key) and backend in (None, b.name)]
    for entry, backend_cls in wanted:
        if backend_cls.available():
            return entry, backend_cls
    missing = [f"{a.key} needs {b.name} ({_extra(b)})" for a, b in wanted]
    narrowed = " ".join(x for x in (artifact, backend) if x)
    present = ", ".join(a.key for a in manifest.artifacts)
    detail = "; ".join(missing) or f"no {narrowed + ' ' if narrowed else ''}artifact among: {present}"
    here = [f.name for f in FORMATS.values() if any(b.available() for b in f.backends)]
    if backend is not None and not wanted:  # the backend asked for runs none of this package's artifacts
        runs = sorted({b.name for _, b in candidates(manifest, profile) if b.available()})
        usable = "" if get_backend(backend).available() else f"; {backend} is not available on this machine"
        raise BackendUnavailableError(
            f"backend {backend} runs none of the artifacts of package {manifest.name!r} ({present}){usable}",
            hint=("leave out --backend, or pass one that runs them here: " + ", ".join(runs)) if runs
            else "leave out --backend")
    raise BackendUnavailableError(
        f"no installed runtime can run package {manifest.name!r} ({detail})",
        hint=(
            f"install {' or '.join(sorted({_extra(b) for _, b in wanted}))} on this device"
            if wanted
            else "package it for a format this device runs: --format " + (" or ".join(here) or DEFAULT_FORMAT)
        ),
    )


def _say_float_instead(manifest: Manifest, fmt: str, key: str) -> None:
    import warnings

    from ..errors import FailedArtifactWarning

    refused = next((f for f in manifest.failed if f.target == fmt), None)
    why = f"its INT8 artifact was left out when it was packaged ({refused.error})" if refused \
        else "the package holds no INT8 artifact of it"
    warnings.warn(FailedArtifactWarning(
        f"--artifact {fmt}: {why}; running the float fallback {key} instead (ask for it by name to silence this)"),
        stacklevel=4)


def _extra(backend_cls: type[Backend]) -> str:
    return format_of_backend(backend_cls.name).extra


def default_threads(profile: str | Profile | None = "auto") -> int:
    """The runtime threads ``load`` uses on this device when none are given."""
    facts = DeviceFacts.read()
    return runtime_threads(resolve_profile(profile, facts), facts)


def _create(
    backend_cls: type[Backend], path: Path, sha256: str, profile: Profile, facts: DeviceFacts, threads: int | None,
    spin: bool = True,
) -> Backend:
    def cache_dir(key: str) -> Path | None:
        return _compiled_dir(sha256, backend_cls, key, facts)

    options = backend_cls.profile_options(profile.section(backend_cls.name), cache_dir)
    return backend_cls(str(path), threads=runtime_threads(profile, facts, threads), spin=spin, **options)


def _compiled_dir(sha256: str, backend_cls: type[Backend], key: str, facts: DeviceFacts) -> Path | None:
    """Compiled artifacts are valid for one artifact x device x runtime version x ``key`` (e.g. providers).

    None when the cache cannot be written: the model then runs without a compiled copy.
    """
    digest = sha256_hex(
        f"{sha256}|{backend_cls.available()}|{facts.arch}|{facts.device_tree_model}|{key}|{__version__}".encode()
    )[:32]
    directory = cache.entry_path("compiled", digest)
    try:
        directory.mkdir(parents=True, exist_ok=True)
        if not os.access(directory, os.W_OK):
            raise PermissionError(13, "Permission denied", str(directory))
    except OSError as exc:
        import warnings

        from ..errors import CacheWarning, storage_error

        found = storage_error(exc)
        warnings.warn(CacheWarning(
            f"the cache at {cache.cache_root()} cannot be used ({found.message if found else exc}; "
            f"{cache.describe_space(cache.cache_root())}): running without a compiled-model cache"
        ), stacklevel=2)
        return None
    cache.touch(directory)
    return directory


def _load_bare(
    path: Path,
    fmt: Format,
    backend: str | None,
    threads: int | None,
    profile: Profile,
    facts: DeviceFacts,
    prediction_cache: PredictionCache | None,
    spin: bool = True,
    allow_failed: bool = True,
) -> Model:
    """A plain artifact file (``.tflite``, ``.onnx``): no manifest, so no preprocessing and no labels."""
    digest = sha256_file(path)
    usable = [b for b in fmt.backends if backend in (None, b.name) and b.available()]
    if not usable:
        raise BackendUnavailableError(f"no installed runtime can run {path.name}", hint=f"pip install '{fmt.extra}'")
    runtime = _create(usable[0], path, digest, profile, facts, threads, spin)
    runtime.warmup()
    def describe(infos: list[Any]) -> list[TensorSpec]:
        return [TensorSpec(name=t.name, shape=list(t.shape),
                           dtype="float32" if t.quantized or t.dtype.kind == "f" else str(t.dtype)) for t in infos]

    entry = Artifact(format=fmt.name, path=path.name, sha256=digest, bytes=path.stat().st_size, precision="unknown")
    manifest = Manifest(
        name=path.stem, edgekit_version="", created="", source={"format": fmt.name, "file": path.name},
        inputs=describe(runtime.inputs), outputs=describe(runtime.outputs), artifacts=[entry],
    )
    return Model(path.parent, manifest, entry, runtime, profile, prediction_cache)
