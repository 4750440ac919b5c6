"""``edgekit.load(source).predict(x)``: the device-side entry point.

Device path: imports numpy, Pillow and one runtime library, never TensorFlow. ``load`` resolves
the source (package directory, ``.ekpkg``, URL, or a bare ``.tflite``/``.onnx``), picks the
device profile (detected, or named), chooses the first artifact/backend pair the profile
prefers that this device can run, verifies the artifact's sha256, builds the interpreter or
session once, warms it up, and returns a ``Model``. ``predict`` applies the manifest's
preprocessing and returns float outputs.
"""

from __future__ import annotations

import hashlib
import logging
import math
import os
import re
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from . import __version__, cache
from .formats import FORMATS, Backend, Format, backends, format_for_file, format_of_backend, get_backend
from .data.preprocessing import check_finite, conform, load_input
from .devices import DeviceFacts, Profile, detect, get_profile
from .errors import BackendUnavailableError, EdgekitError, InputError, InputRangeWarning, PackageError
from .fsutil import sha256_file
from .manifest import Artifact, Manifest, TensorSpec
from .package_io import open_package, unpacked_exists, verified_artifact_path

if TYPE_CHECKING:
    from .prediction_cache import PredictionCache

log = logging.getLogger("edgekit.runtime")
_URL = re.compile(r"^(https?|file)://", re.IGNORECASE)


class Model:
    """A loaded package artifact, ready to predict."""

    def __init__(
        self,
        root: Path,
        manifest: Manifest,
        artifact: Artifact,
        backend: Backend,
        profile: Profile,
        prediction_cache: PredictionCache | None = None,
    ) -> None:
        self.root = root
        self.manifest = manifest
        self.artifact = artifact
        self.backend = backend
        self.profile = profile
        self.prediction_cache = prediction_cache
        spec = manifest.inputs[0]
        self._sample_shape = tuple(None if d == -1 else d for d in spec.shape[1:])
        self._preprocessing = spec.preprocessing
        self._expected = expected_range(spec, backend)
        self._closed = False
        self.out_of_range_calls = 0  # predictions whose inputs lay far outside the expected range

    @property
    def labels(self) -> list[str] | None:
        return self.manifest.labels

    def predict(self, inputs: Any, raw: bool = False) -> np.ndarray:
        """Outputs for one input or a list of inputs (image paths, PIL images, arrays).

        Images and integer arrays get the manifest's preprocessing; float arrays are taken as
        already preprocessed model inputs. Returns float32 outputs with a batch axis.
        """
        return self.predict_tensor(self.preprocess(inputs), raw=raw)

    def preprocess(self, inputs: Any) -> np.ndarray:
        """The model-ready float32 batch for ``inputs`` (what ``predict`` feeds the runtime)."""
        if isinstance(inputs, (list, tuple)):
            if not inputs:
                raise InputError("no inputs given", hint="pass at least one image or array")
            return np.concatenate([self._load(item) for item in inputs])
        return self._load(inputs)

    def _load(self, item: Any) -> np.ndarray:
        native = self.backend.inputs[0].dtype if self._preprocessing is None else None
        return load_input(item, self._preprocessing, self._sample_shape, native=native)

    def predict_tensor(self, x: np.ndarray, raw: bool = False) -> np.ndarray:
        """Outputs for a preprocessed float32 batch shaped like the model input, or for a batch
        already quantized to the artifact's input dtype (fed unchanged)."""
        x = self.check_input(x)
        if self.prediction_cache is None:
            return self.run_checked(x, raw)
        found = self.cached(x, raw)
        if found is None:
            found = self.run_checked(x, raw)
            self.remember(x, found, raw)
        return found

    def check_input(self, x: Any) -> np.ndarray:
        """The batch as the backend takes it, after every check a prediction needs (shape, dtype,
        NaN/Inf, range): callers that check once (the server) then call ``run_checked``."""
        if self._closed:
            raise EdgekitError(f"model {self.manifest.name!r} was closed", hint="load it again with edgekit.load()")
        native = self.backend.inputs[0].dtype
        if not isinstance(x, np.ndarray) or (x.dtype.kind != "f" and x.dtype != native):
            raise InputError(
                f"expected a float32 (or {native}) array, got {getattr(x, 'dtype', type(x).__name__)}",
                hint="use predict() for images and raw pixel arrays",
            )
        x = conform(x, self._sample_shape, "input")
        if x.dtype != native or x.dtype.kind == "f":
            self._check_values(x)
        return x if x.dtype == native else x.astype(np.float32, copy=False)

    def run_checked(self, x: np.ndarray, raw: bool = False) -> np.ndarray:
        """The first output for a batch that passed ``check_input``."""
        if self._closed:
            raise EdgekitError(f"model {self.manifest.name!r} was closed", hint="load it again with edgekit.load()")
        return self.backend.run(x, raw=raw)[0]

    def cached(self, x: np.ndarray, raw: bool = False) -> np.ndarray | None:
        """Outputs remembered for exactly this input (None without a prediction cache, or on a miss)."""
        if self.prediction_cache is None:
            return None
        return self.prediction_cache.get(self._cache_key(x, raw))

    def remember(self, x: np.ndarray, y: np.ndarray, raw: bool = False) -> None:
        if self.prediction_cache is not None:
            self.prediction_cache.put(self._cache_key(x, raw), y)

    def _cache_key(self, x: np.ndarray, raw: bool) -> str:
        assert self.prediction_cache is not None
        return self.prediction_cache.key(f"{self.artifact.sha256}:{raw}", x)

    def _check_values(self, x: np.ndarray) -> None:
        """NaN/Inf are refused; values far outside the expected range are said out loud (one pass each)."""
        if not x.size:
            raise InputError("input is empty", hint="pass at least one sample")
        low, high = float(x.min()), float(x.max())
        if not (math.isfinite(low) and math.isfinite(high)):
            check_finite(x, "input", error=InputError,
                         hint="replace the NaN/Inf values: they have no INT8 value and the outputs would be meaningless")
        if self._expected is None:
            return
        lo, hi, origin = self._expected
        margin = RANGE_MARGIN * max(hi - lo, 1e-6)
        if low >= lo - margin and high <= hi + margin:
            return
        self.out_of_range_calls += 1
        if self.out_of_range_calls > 1:
            return  # said once per loaded model; out_of_range_calls keeps counting
        import warnings

        warnings.warn(InputRangeWarning(
            f"input values range {low:.4g}..{high:.4g} but {self.manifest.name!r} expects about {lo:.4g}..{hi:.4g} "
            f"({origin}); outputs for inputs this far outside are unreliable. "
            + _range_advice(self._preprocessing, low, high, lo, hi)
        ), stacklevel=3)

    def close(self) -> None:
        self._closed = True
        self.backend.close()
        if self.prediction_cache is not None:
            self.prediction_cache.close()

    def __enter__(self) -> Model:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


RANGE_MARGIN = 0.25  # beyond the expected range by more than this fraction of its width: "far outside"


def expected_range(spec: TensorSpec, backend: Backend) -> tuple[float, float, str] | None:
    """The input range the model was calibrated on: the manifest's record, else what an INT8
    input tensor can represent (bare .tflite files), else unknown."""
    if spec.range is not None:
        return float(spec.range[0]), float(spec.range[1]), "the range of its calibration data"
    info = backend.inputs[0]
    if info.quantized:
        limits = np.iinfo(info.dtype)
        low, high = (limits.min - info.zero_point) * info.scale, (limits.max - info.zero_point) * info.scale
        return float(low), float(high), f"what its {info.dtype} input quantization represents"
    return None


def _range_advice(pre: Any, low: float, high: float, lo: float, hi: float) -> str:
    if pre is None:
        if high > 2 * max(abs(hi), 1.0) and high <= 255 and low >= 0:
            return "Raw 0..255 pixels? Normalize them as the model was trained (e.g. x / 255), or package the model."
        return "Preprocess the input as the model was trained."
    return (f"The package's preprocessing is {describe_preprocessing(pre)}; pass images or raw uint8 arrays and "
            "edgekit applies it, or pass float arrays already preprocessed that way.")


def describe_preprocessing(pre: Any) -> str:
    return f"x * {pre.scale:.6g}, minus mean {pre.mean}, divided by std {pre.std}"


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
) -> Model:
    """Load a package with the best artifact this device can run.

    ``artifact`` (tflite, onnx, coreml) and ``backend`` (litert, onnxruntime, coreml) narrow
    the choice; ``profile`` is a device profile name, a Profile, or "auto" to detect one.
    ``timings`` (a dict) receives the load phases in seconds and whether the cache was hit.
    ``require_signature`` (or the profile's ``require_signature``) refuses packages not signed
    by one of the keys in ``trusted_keys`` (a folder of ``*.pub`` files).
    """
    clock = _Phases(timings)
    facts = DeviceFacts.read()
    chosen_profile = _profile(profile, facts)
    clock.lap("profile_s")
    text = os.fspath(source)
    path = cache.fetch(text) if _URL.match(text) else Path(text)
    bare = format_for_file(path) if path.is_file() else None
    if bare is not None:
        return _load_bare(path, bare, backend, threads, chosen_profile, facts, prediction_cache)
    if path.is_file() and timings is not None:  # hashing the archive twice only when asked to report it
        clock.note("cache_hit", unpacked_exists(path))
    root, manifest = open_package(path)
    _check_signature(root, chosen_profile, require_signature, trusted_keys)
    entry, backend_cls = choose(manifest, chosen_profile, artifact, backend)
    clock.lap("open_package_s")
    try:
        artifact_path = verified_artifact_path(root, entry)
    except PackageError:
        if not path.is_file():
            raise
        cache.remove(root)  # a cached unpacked copy went bad: unpack the archive again
        root, manifest = open_package(path)
        artifact_path = verified_artifact_path(root, entry)
    clock.lap("verify_s")
    runtime = _create(backend_cls, artifact_path, entry.sha256, chosen_profile, facts, threads)
    log.debug("loaded %s: profile %s, artifact %s, backend %s", manifest.name, chosen_profile.name, entry.target,
             runtime.describe())
    clock.lap("create_runtime_s")
    if warmup:
        runtime.warmup()
        clock.lap("warmup_s")
    return Model(root, manifest, entry, runtime, chosen_profile, prediction_cache)


def _check_signature(root: Path, profile: Profile, require: bool | None, trusted: Any) -> None:
    required = profile.require_signature if require is None else require
    trusted = trusted or profile.trusted_keys or None
    if not required and trusted is None:
        return
    from .signing import trusted_keys, verify_signature

    if trusted is None:
        from .errors import EdgekitError

        raise EdgekitError("--require-signature needs --trusted-keys DIR (the public keys you trust)",
                           hint="pass --trusted-keys DIR, or set trusted_keys in the device profile")
    verify_signature(root, trusted_keys(trusted))


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
    present = {a.target: a for a in manifest.artifacts}
    known = backends()
    order = [pair for pair in profile.prefer if pair[0] in present and pair[1] in known]
    for name in present:
        fmt = FORMATS.get(name)
        order += [(name, b.name) for b in (fmt.backends if fmt else ()) if (name, b.name) not in order]
    return [(present[f], known[b]) for f, b in order]


def runnable(manifest: Manifest, profile: Profile) -> list[tuple[Artifact, type[Backend]]]:
    """The pairs this device has a runtime library for (first: what ``load`` picks)."""
    return [(a, b) for a, b in candidates(manifest, profile) if b.available()]


def choose(
    manifest: Manifest, profile: Profile, artifact: str | None = None, backend: str | None = None
) -> tuple[Artifact, type[Backend]]:
    """The first (artifact, backend) pair, in the profile's order, that this device can run."""
    if artifact is not None:
        manifest.artifact(artifact)  # a clear error if the package lacks it
    if backend is not None:
        get_backend(backend)
    wanted = [(a, b) for a, b in candidates(manifest, profile)
              if artifact in (None, a.target) and backend in (None, b.name)]
    for entry, backend_cls in wanted:
        if backend_cls.available():
            return entry, backend_cls
    missing = [f"{a.target} needs {b.name} ({_extra(b)})" for a, b in wanted]
    narrowed = " ".join(x for x in (artifact, backend) if x)
    present = ", ".join(a.target for a in manifest.artifacts)
    detail = "; ".join(missing) or f"no {narrowed + ' ' if narrowed else ''}artifact among: {present}"
    here = [f.name for f in FORMATS.values() if any(b.available() for b in f.backends)]
    raise BackendUnavailableError(
        f"no installed runtime can run package {manifest.name!r} ({detail})",
        hint=(
            f"install {' or '.join(sorted({_extra(b) for _, b in wanted}))} on this device"
            if wanted
            else "package it for a format this device runs: --format " + (" or ".join(here) or "tflite")
        ),
    )


def _extra(backend_cls: type[Backend]) -> str:
    return format_of_backend(backend_cls.name).extra


def _profile(profile: str | Profile | None, facts: DeviceFacts) -> Profile:
    if isinstance(profile, Profile):
        return profile
    if profile in (None, "auto"):
        return detect(facts)
    return get_profile(profile)


def _create(
    backend_cls: type[Backend], path: Path, sha256: str, profile: Profile, facts: DeviceFacts, threads: int | None
) -> Backend:
    def cache_dir(key: str) -> Path | None:
        return _compiled_dir(sha256, backend_cls, key, facts)

    options = backend_cls.profile_options(profile.section(backend_cls.name), cache_dir)
    return backend_cls(str(path), threads=threads or profile.resolved_threads(facts), **options)


def _compiled_dir(sha256: str, backend_cls: type[Backend], key: str, facts: DeviceFacts) -> Path | None:
    """Compiled artifacts are valid for one artifact x device x runtime version x ``key`` (e.g. providers).

    None when the cache cannot be written: the model then runs without a compiled copy.
    """
    digest = hashlib.sha256(
        f"{sha256}|{backend_cls.available()}|{facts.arch}|{facts.device_tree_model}|{key}|{__version__}".encode()
    ).hexdigest()[:32]
    directory = cache.entry_path("compiled", digest)
    try:
        directory.mkdir(parents=True, exist_ok=True)
        if not os.access(directory, os.W_OK):
            raise PermissionError(13, "Permission denied", str(directory))
    except OSError as exc:
        import warnings

        from .errors import CacheWarning, storage_error

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
) -> Model:
    """A plain artifact file (``.tflite``, ``.onnx``): no manifest, so no preprocessing and no labels."""
    digest = sha256_file(path)
    usable = [b for b in fmt.backends if backend in (None, b.name) and b.available()]
    if not usable:
        raise BackendUnavailableError(f"no installed runtime can run {path.name}", hint=f"pip install '{fmt.extra}'")
    runtime = _create(usable[0], path, digest, profile, facts, threads)
    runtime.warmup()
    describe = lambda infos: [TensorSpec(name=t.name, shape=list(t.shape), dtype="float32") for t in infos]  # noqa: E731
    entry = Artifact(target=fmt.name, path=path.name, sha256=digest, bytes=path.stat().st_size, precision="unknown")
    manifest = Manifest(
        name=path.stem, edgekit_version="", created="", source={"format": fmt.name, "file": path.name},
        inputs=describe(runtime.inputs), outputs=describe(runtime.outputs), artifacts=[entry],
    )
    return Model(path.parent, manifest, entry, runtime, profile, prediction_cache)
