"""The package format: ``manifest.json`` as dataclasses, with a schema version.

A package is a directory ``NAME.edgekit/`` (or the same tree zipped as ``NAME.ekpkg``) holding
``manifest.json`` and one artifact per target. The manifest binds every artifact by sha256,
records the preprocessing the runtime must repeat, the IO quantization of each artifact, the
calibration that produced it and the validation measured against the float model.

Reading is strict about what the runtime depends on (types, shapes, paths, hashes) and
tolerant of extra keys, so a newer writer's additions never break an older reader. A manifest
with a newer ``schema_version`` than this reader knows is refused with a clear message.
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Mapping
from dataclasses import asdict, dataclass, field, replace
from pathlib import PurePosixPath
from typing import Any, NamedTuple

from .errors import PackageError
from .names import check_name
from .validation_record import ValidationRecord

SCHEMA_VERSION = 1
MANIFEST_NAME = "manifest.json"

_SHA256 = re.compile(r"^[0-9a-f]{64}$")


@dataclass
class Preprocessing:
    """How a raw input (decoded image or array) becomes the model's float input.

    ``model_input = (raw * scale - mean) / std``, per channel, after resizing images to
    ``resize`` (height, width) and ordering channels as ``color_order``.
    """

    resize: list[int] | None = None
    scale: float = 1.0
    mean: list[float] = field(default_factory=lambda: [0.0])
    std: list[float] = field(default_factory=lambda: [1.0])
    color_order: str = "RGB"  # RGB, BGR or L (grayscale)
    resize_method: str = "bilinear"
    layout: str = "NHWC"  # where channels go: NHWC (TensorFlow) or NCHW (typical ONNX)
    inferred_from: str = ""

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Preprocessing:
        _require_type(data, dict, "preprocessing")
        resize = data.get("resize")
        if resize is not None and (
            not isinstance(resize, list) or len(resize) != 2 or not all(_is_pos_int(v) for v in resize)
        ):
            raise PackageError(f"manifest: preprocessing.resize must be [height, width], got {resize!r}")
        scale = data.get("scale", 1.0)
        mean = data.get("mean", [0.0])
        std = data.get("std", [1.0])
        if not _is_number(scale):
            raise PackageError(f"manifest: preprocessing.scale must be a number, got {scale!r}")
        for key, value in (("mean", mean), ("std", std)):
            if not isinstance(value, list) or not value or not all(_is_number(v) for v in value):
                raise PackageError(f"manifest: preprocessing.{key} must be a list of numbers, got {value!r}")
        if any(v == 0 for v in std):
            raise PackageError("manifest: preprocessing.std must not contain 0")
        color_order = data.get("color_order", "RGB")
        if color_order not in ("RGB", "BGR", "L"):
            raise PackageError(f"manifest: preprocessing.color_order must be RGB, BGR or L, got {color_order!r}")
        layout = data.get("layout", "NHWC")
        if layout not in ("NHWC", "NCHW"):
            raise PackageError(f"manifest: preprocessing.layout must be NHWC or NCHW, got {layout!r}")
        return cls(
            layout=layout,
            resize=list(resize) if resize else None,
            scale=float(scale),
            mean=[float(v) for v in mean],
            std=[float(v) for v in std],
            color_order=color_order,
            resize_method=str(data.get("resize_method", "bilinear")),
            inferred_from=str(data.get("inferred_from", "")),
        )


class TensorSpec(NamedTuple):
    """One model input or output as the package describes it (a NamedTuple: docs/architecture.md,
    cold start)."""

    name: str
    shape: list[int]  # -1 for a dynamic dimension (the batch)
    dtype: str = "float32"
    layout: str | None = None  # "NHWC" for images
    preprocessing: Preprocessing | None = None
    labels: list[str] | None = None
    # [min, max] of the calibration data as the model sees it (after preprocessing): the runtime
    # warns when inputs fall far outside it. Absent in packages from before it was recorded.
    range: list[float] | None = None
    role: str | None = None  # inputs: "image", "integer" (token ids, indices) or "values" (audio, features)

    @classmethod
    def from_dict(cls, data: dict[str, Any], where: str) -> TensorSpec:
        _require_type(data, dict, where)
        name = data.get("name")
        shape = data.get("shape")
        if not isinstance(name, str) or not name:
            raise PackageError(f"manifest: {where}.name must be a non-empty string")
        if not isinstance(shape, list) or not all(isinstance(v, int) and v >= -1 and v != 0 for v in shape):
            raise PackageError(f"manifest: {where}.shape must be a list of positive ints or -1, got {shape!r}")
        labels = data.get("labels")
        if labels is not None and (not isinstance(labels, list) or not all(isinstance(v, str) for v in labels)):
            raise PackageError(f"manifest: {where}.labels must be a list of strings")
        if labels is not None and any("\n" in v or "\r" in v or "\0" in v for v in labels):
            raise PackageError(f"manifest: {where}.labels contains a line break or NUL (labels.txt has one per line)",
                               hint="the package was made or edited by hand: rebuild it with `edgekit package`")
        pre = data.get("preprocessing")
        value_range = data.get("range")
        if value_range is not None and (
            not isinstance(value_range, list) or len(value_range) != 2 or not all(_is_number(v) for v in value_range)
            or not math.isfinite(float(value_range[0])) or not math.isfinite(float(value_range[1]))
            or float(value_range[0]) > float(value_range[1])
        ):
            raise PackageError(f"manifest: {where}.range must be [min, max] numbers, got {value_range!r}")
        role = data.get("role")
        if role is not None and role not in ("image", "integer", "values"):
            raise PackageError(f"manifest: {where}.role must be image, integer or values, got {role!r}")
        return cls(
            role=role,
            range=[float(v) for v in value_range] if value_range is not None else None,
            name=name,
            shape=list(shape),
            dtype=str(data.get("dtype", "float32")),
            layout=data.get("layout"),
            preprocessing=Preprocessing.from_dict(pre) if pre is not None else None,
            labels=list(labels) if labels is not None else None,
        )


class QuantParams(NamedTuple):
    """How an artifact's IO tensor maps to float: ``real = (q - zero_point) * scale``."""

    name: str
    dtype: str
    scale: float = 0.0
    zero_point: int = 0

    @classmethod
    def from_dict(cls, data: dict[str, Any], where: str) -> QuantParams:
        _require_type(data, dict, where)
        try:
            return cls(
                name=str(data["name"]),
                dtype=str(data["dtype"]),
                scale=float(data.get("scale", 0.0)),
                zero_point=int(data.get("zero_point", 0)),
            )
        except (KeyError, TypeError, ValueError) as exc:
            raise PackageError(f"manifest: {where} is malformed ({exc})") from None


class FailedFormat(NamedTuple):
    """A requested format the package does not hold: it failed to build, was ended at its share
    of the time, or was refused by its gates and left out (``--allow-partial``); what it failed
    with and the fix. ``search``: the tries of a refused artifact's search, kept with it."""

    target: str  # the format's name ("target" is the manifest key's former name, still written)
    error: str
    hint: str = ""
    search: tuple[Mapping[str, Any], ...] = ()

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> FailedFormat:
        return cls(str(data.get("format", data.get("target", ""))), str(data.get("error", "")),
                   str(data.get("hint") or ""), tuple(dict(t) for t in data.get("search") or () if isinstance(t, Mapping)))

    def to_dict(self) -> dict[str, Any]:
        return {"format": self.target, "target": self.target, "error": self.error, "hint": self.hint,
                **({"search": [dict(t) for t in self.search]} if self.search else {})}


class LeftOut(NamedTuple):
    """A format ``--format all`` left out because the building machine cannot build it: its
    name, why (the converter that is missing), and the extra that brings it."""

    format: str
    why: str
    extra: str = ""

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> LeftOut:
        return cls(str(data.get("format", "")), str(data.get("why", "")), str(data.get("extra") or ""))

    def to_dict(self) -> dict[str, str]:
        return {"format": self.format, "why": self.why, "extra": self.extra}


class ArtifactDetails(NamedTuple):
    """The entries of ``Artifact.details`` read outside the format that wrote them, typed: what
    every format's build records for the search (its precision record, the layers with weights it
    can keep in float, its per-layer report) and what the packager adds (the route it took when
    the preferred one could not convert, its speed against the float fallback, the precision plan
    kept). Every other key is its format's own: ``Format.notes`` reads those."""

    precision: Mapping[str, Any]  # the precision record: ops, integer_weighted, float_layers, ...
    weighted_layers: tuple[str, ...]  # layers with weights, input to output (routes with no per-layer report)
    explain: tuple[Mapping[str, Any], ...]  # the per-layer report's rows: layer, op, sqnr_db, tensor
    route: Mapping[str, Any] | None  # {"used", "preferred", "why"}: a fallback route
    speed_vs_float: Mapping[str, Any] | None  # mixed vs float median latency where it was packaged
    precision_plan: Mapping[str, Any] | None  # the plan kept: {"layers": {layer: int16|float}, ...}
    # the shared search's plan this artifact was built with first: simulated and real margins (the gap)
    simulation: Mapping[str, Any] | None = None
    # the float graph it was built from was equalized across layers first (a repair that keeps
    # every layer int8): the pairs rescaled and the largest factor
    equalized: Mapping[str, Any] | None = None

    @classmethod
    def of(cls, details: Mapping[str, Any] | None) -> ArtifactDetails:
        details = details or {}
        return cls(dict(details.get("precision") or {}), tuple(details.get("weighted_layers") or ()),
                   tuple(details.get("explain") or ()), details.get("route"), details.get("speed_vs_float"),
                   details.get("precision_plan"), details.get("simulation"), details.get("equalized"))


@dataclass
class Artifact:
    """One file (or folder) of the package that a runtime runs, and what was recorded about it."""

    format: str  # tflite, onnx, ... (the manifest key "format"; "target" is its former name, still written)
    path: str
    sha256: str
    bytes: int
    precision: str = "int8"
    inputs: list[QuantParams] = field(default_factory=list)
    outputs: list[QuantParams] = field(default_factory=list)
    float_ops: list[dict[str, str]] = field(default_factory=list)
    converter: dict[str, Any] = field(default_factory=dict)
    companions: list[dict[str, Any]] = field(default_factory=list)  # extra files: path, sha256, bytes, role
    details: dict[str, Any] = field(default_factory=dict)  # target-specific records
    # another build of the format's quantized artifact for other devices (ONNX "u8s8": its INT8 scheme)
    variant: str = ""

    @classmethod
    def from_dict(cls, data: dict[str, Any], where: str) -> Artifact:
        _require_type(data, dict, where)
        target = data.get("format", data.get("target"))  # "target" is the key's former name, still written
        path, digest, size = data.get("path"), data.get("sha256"), data.get("bytes")
        if not isinstance(target, str) or not target:
            raise PackageError(f"manifest: {where}.format must be a non-empty string")
        if not isinstance(path, str) or not _is_safe_relative(path):
            raise PackageError(f"manifest: {where}.path must be a relative path inside the package, got {path!r}")
        if not isinstance(digest, str) or not _SHA256.match(digest):
            raise PackageError(f"manifest: {where}.sha256 must be 64 lowercase hex digits")
        if not isinstance(size, int) or size < 0:
            raise PackageError(f"manifest: {where}.bytes must be a non-negative int")
        io = data.get("io", {})
        _require_type(io, dict, f"{where}.io")
        companions = data.get("companions", [])
        _require_type(companions, list, f"{where}.companions")
        for i, companion in enumerate(companions):
            _require_type(companion, dict, f"{where}.companions[{i}]")
            if not isinstance(companion.get("path"), str) or not _is_safe_relative(companion["path"]):
                raise PackageError(f"manifest: {where}.companions[{i}].path must be a relative path inside the package")
            if not isinstance(companion.get("sha256"), str) or not _SHA256.match(companion["sha256"]):
                raise PackageError(f"manifest: {where}.companions[{i}].sha256 must be 64 lowercase hex digits")
        variant = data.get("variant", "")
        if not isinstance(variant, str) or (variant and not re.fullmatch(r"[a-z0-9][a-z0-9_]{0,30}", variant)):
            raise PackageError(f"manifest: {where}.variant must be a short lowercase name, got {variant!r}")
        return cls(
            variant=variant,
            format=target,
            path=path,
            sha256=digest,
            bytes=size,
            precision=str(data.get("precision", "int8")),
            inputs=[QuantParams.from_dict(q, f"{where}.io.inputs[{i}]") for i, q in enumerate(io.get("inputs", []))],
            outputs=[QuantParams.from_dict(q, f"{where}.io.outputs[{i}]") for i, q in enumerate(io.get("outputs", []))],
            float_ops=list(data.get("float_ops", [])),
            converter=dict(data.get("converter", {})),
            companions=list(companions),
            details=dict(data.get("details", {})),
        )

    @property
    def target(self) -> str:
        """The artifact's format: the attribute's former name, for code written against it."""
        return self.format

    @property
    def is_float(self) -> bool:
        """A float fallback (``--also-float``) next to the format's quantized artifact; a format
        whose only artifact is float (no quantizer) is not one and keeps the format's name."""
        return bool(self.converter.get("float_fallback_for"))

    @property
    def key(self) -> str:
        """How the package names this artifact: the format for the quantized one (``tflite``),
        format and precision for a float fallback (``tflite-float16``, ``onnx-float32``), format and
        variant for another quantized build (``onnx-u8s8``)."""
        if self.is_float:
            return f"{self.format}-{self.precision}"
        return f"{self.format}-{self.variant}" if self.variant else self.format

    @property
    def about(self) -> ArtifactDetails:
        """The details edgekit reads outside the format that wrote them, typed."""
        return ArtifactDetails.of(self.details)

    def with_details(self, **added: Any) -> Artifact:
        """This artifact with ``added`` recorded in its details (``ArtifactDetails``' packager fields)."""
        unknown = set(added) - set(ArtifactDetails._fields)
        if unknown:
            raise ValueError(f"{sorted(unknown)} are not ArtifactDetails fields")
        return replace(self, details={**self.details, **added})

    def to_dict(self) -> dict[str, Any]:
        return {
            "format": self.format,
            "target": self.format,  # for readers from before "format" (edgekit 0.1)
            "path": self.path,
            "sha256": self.sha256,
            "bytes": self.bytes,
            "precision": self.precision,
            **({"variant": self.variant} if self.variant else {}),
            "io": {"inputs": [q._asdict() for q in self.inputs], "outputs": [q._asdict() for q in self.outputs]},
            "float_ops": self.float_ops,
            "converter": self.converter,
            "companions": self.companions,
            "details": self.details,
        }


@dataclass
class Manifest:
    """The package's ``manifest.json``: the model's inputs and outputs, its artifacts, and how it
    was calibrated and validated."""

    name: str
    edgekit_version: str
    created: str
    source: dict[str, Any]
    inputs: list[TensorSpec]
    outputs: list[TensorSpec]
    artifacts: list[Artifact]
    calibration: dict[str, Any] = field(default_factory=dict)
    validation: ValidationRecord = ValidationRecord()
    versions: dict[str, str] = field(default_factory=dict)
    failed: list[FailedFormat] = field(default_factory=list)  # requested formats the package does not hold
    left_out: list[LeftOut] = field(default_factory=list)  # formats --format all left out: not buildable there
    # latency cards measured on devices (``edgekit card --store``): device, artifact, path and
    # sha256 of the card's JSON and Markdown under cards/, bound by the manifest (and its signature)
    cards: list[dict[str, str]] = field(default_factory=list)
    # every passing artifact timed side by side where it was packaged, per CPU kind
    # (``packaging/ranking.py``): the runtime on a CPU of that kind runs the fastest by default
    speed: dict[str, Any] = field(default_factory=dict)
    schema_version: int = SCHEMA_VERSION

    def artifact(self, name: str) -> Artifact:
        """The artifact named ``name`` (its key: ``tflite``, ``onnx-float32``); a format's name
        alone is its quantized artifact, or its float one when the package has only that."""
        for artifact in self.artifacts:
            if artifact.key == name:
                return artifact
        for artifact in self.artifacts:
            if artifact.format == name:
                return artifact
        available = ", ".join(a.key for a in self.artifacts) or "none"
        fmt = name.split("-")[0]
        raise PackageError(
            f"package {self.name!r} has no {name} artifact (it has: {available})",
            hint="repackage with --format " + fmt + (" --also-float" if "-float" in name else ""),
        )

    def failed_gates(self, key: str) -> list[str] | None:
        """What an artifact failed when it was validated (kept by --allow-accuracy-drop); None when
        it passed or was not measured."""
        return self.validation.artifact(key).failed_gates()

    def speed_order(self, cpu_kind: str) -> list[SpeedEntry]:
        """The passing artifacts measured fastest first on a CPU of this kind (empty when the
        package was not timed on one), each with the backend it was timed on."""
        measured = self.speed.get("by_cpu_kind", {}).get(cpu_kind) or {}
        return [SpeedEntry(str(e["artifact"]), str(e["backend"]), float(e["ms"]), str(e.get("precision", "")))
                for e in measured.get("order", [])]

    @property
    def labels(self) -> list[str] | None:
        """The class labels (of the one output that has them)."""
        return next((o.labels for o in self.outputs if o.labels is not None), None)

    def to_dict(self) -> dict[str, Any]:
        return {
            "schema_version": self.schema_version,
            "name": self.name,
            "edgekit_version": self.edgekit_version,
            "created": self.created,
            "source": self.source,
            "inputs": [_spec_to_dict(s) for s in self.inputs],
            "outputs": [_spec_to_dict(s) for s in self.outputs],
            "artifacts": [a.to_dict() for a in self.artifacts],
            "calibration": self.calibration,
            "validation": self.validation.to_dict(),
            "versions": self.versions,
            "failed": [f.to_dict() for f in self.failed],
            **({"left_out": [f.to_dict() for f in self.left_out]} if self.left_out else {}),
            **({"cards": self.cards} if self.cards else {}),
            **({"speed": self.speed} if self.speed else {}),
        }

    def to_json(self) -> str:
        return json.dumps(_finite(self.to_dict()), indent=2, allow_nan=False) + "\n"

    @classmethod
    def from_dict(cls, data: Any) -> Manifest:
        """Parse untrusted data: the only possible failure is a PackageError naming the problem."""
        try:
            return cls._from_dict(data)
        except PackageError:
            raise
        except (TypeError, ValueError, AttributeError, KeyError, IndexError, OverflowError) as exc:
            raise PackageError(f"manifest is malformed ({type(exc).__name__}: {exc})") from None

    @classmethod
    def _from_dict(cls, data: Any) -> Manifest:
        _require_type(data, dict, "manifest")
        version = data.get("schema_version")
        if not isinstance(version, int) or isinstance(version, bool):
            raise PackageError("manifest: schema_version is missing or not an integer")
        if version > SCHEMA_VERSION:
            raise PackageError(
                f"manifest schema_version {version} is newer than this edgekit understands ({SCHEMA_VERSION})",
                hint="upgrade edgekit on this device (pip install -U edgekit)",
            )
        if version < 1:
            raise PackageError(f"manifest: unknown schema_version {version}")
        name = check_name(data.get("name"), "manifest: package name", PackageError,
                          hint="the package was made or edited by hand: rebuild it with `edgekit package`")
        for key in ("inputs", "outputs", "artifacts"):
            if not isinstance(data.get(key), list) or not data[key]:
                raise PackageError(f"manifest: {key} must be a non-empty list")
        for key in ("source", "calibration", "validation", "versions"):
            _require_type(data.get(key, {}), dict, f"manifest.{key}")
        return cls(
            schema_version=version,
            name=name,
            edgekit_version=str(data.get("edgekit_version", "")),
            created=str(data.get("created", "")),
            source=dict(data.get("source", {})),
            inputs=[TensorSpec.from_dict(s, f"inputs[{i}]") for i, s in enumerate(data["inputs"])],
            outputs=[TensorSpec.from_dict(s, f"outputs[{i}]") for i, s in enumerate(data["outputs"])],
            artifacts=[Artifact.from_dict(a, f"artifacts[{i}]") for i, a in enumerate(data["artifacts"])],
            calibration=dict(data.get("calibration", {})),
            validation=_validation(data.get("validation")),
            versions={str(k): str(v) for k, v in dict(data.get("versions", {})).items()},
            failed=[FailedFormat.from_dict(f) for f in data.get("failed", []) if isinstance(f, dict)],
            left_out=[LeftOut.from_dict(f) for f in data.get("left_out", []) if isinstance(f, dict)],
            cards=_cards(data.get("cards", [])),
            speed=_speed(data.get("speed", {})),
        )

    @classmethod
    def from_json(cls, text: str | bytes) -> Manifest:
        try:
            data = json.loads(text)
        except RecursionError:  # a manifest nested thousands deep: tampered, never written by edgekit
            raise PackageError("manifest.json is nested too deeply to be a manifest",
                               hint="the package is corrupt or was tampered with: copy or rebuild it") from None
        except (ValueError, UnicodeDecodeError) as exc:
            raise PackageError(
                f"manifest.json is not valid JSON ({exc})", hint="the package is corrupt: copy or rebuild it"
            ) from None
        return cls.from_dict(data)


def _spec_to_dict(spec: TensorSpec) -> dict[str, Any]:
    data: dict[str, Any] = {"name": spec.name, "shape": spec.shape, "dtype": spec.dtype}
    if spec.layout:
        data["layout"] = spec.layout
    if spec.preprocessing is not None:
        pre = asdict(spec.preprocessing)
        if spec.role in ("values", "integer"):  # not an image: no resize, colour order or layout
            pre = {k: v for k, v in pre.items() if k in ("scale", "mean", "std", "inferred_from")}
        data["preprocessing"] = pre
    if spec.role is not None:
        data["role"] = spec.role
    if spec.labels is not None:
        data["labels"] = spec.labels
    if spec.range is not None:
        data["range"] = spec.range
    return data


def _finite(value: Any) -> Any:
    """Strict JSON has no NaN/Infinity: such measurements are written as null."""
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if isinstance(value, dict):
        return {k: _finite(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_finite(v) for v in value]
    return value


def _require_type(value: Any, kind: type, where: str) -> None:
    if not isinstance(value, kind):
        raise PackageError(f"manifest: {where} must be a {kind.__name__}, got {type(value).__name__}")


def _is_number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and value == value


def _is_pos_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and value > 0


def _is_safe_relative(path: str) -> bool:
    if not path or "\\" in path or "\0" in path:
        return False
    pure = PurePosixPath(path)
    canonical = str(pure) == path  # no "./", "//" or trailing "/" spellings of the same file
    return canonical and not pure.is_absolute() and ".." not in pure.parts


class SpeedEntry(NamedTuple):
    """One artifact of a package's measured order (``Manifest.speed_order``)."""

    artifact: str
    backend: str
    ms: float
    precision: str = ""


def _speed(data: Any) -> dict[str, Any]:
    """The measured orders: per CPU kind, a list of artifact, backend and a latency in ms."""
    _require_type(data, dict, "manifest.speed")
    kinds = data.get("by_cpu_kind", {})
    _require_type(kinds, dict, "manifest.speed.by_cpu_kind")
    for kind, measured in kinds.items():
        where = f"manifest.speed.by_cpu_kind[{kind!r}]"
        _require_type(measured, dict, where)
        _require_type(measured.get("order", []), list, f"{where}.order")
        for i, entry in enumerate(measured.get("order", [])):
            _require_type(entry, dict, f"{where}.order[{i}]")
            if not isinstance(entry.get("artifact"), str) or not isinstance(entry.get("backend"), str) \
                    or not _is_number(entry.get("ms")):
                raise PackageError(f"{where}.order[{i}] must give artifact and backend as strings and ms as a number")
    return dict(data)


CARD_ENTRY_KEYS = ("device", "artifact", "created", "path", "sha256", "markdown", "markdown_sha256")


def _cards(data: Any) -> list[dict[str, str]]:
    """The stored cards' entries: strings, safe relative paths under cards/, sha256 digests."""
    _require_type(data, list, "manifest.cards")
    found = []
    for i, entry in enumerate(data):
        where = f"manifest.cards[{i}]"
        _require_type(entry, dict, where)
        if any(not isinstance(entry.get(key), str) for key in CARD_ENTRY_KEYS):
            raise PackageError(f"{where} must give {', '.join(CARD_ENTRY_KEYS)} as strings")
        for path, digest in (("path", "sha256"), ("markdown", "markdown_sha256")):
            if not _is_safe_relative(entry[path]) or not entry[path].startswith("cards/"):
                raise PackageError(f"{where}.{path} {entry[path]!r} is not a path under cards/")
            if not _SHA256.match(entry[digest]):
                raise PackageError(f"{where}.{digest} is not a sha256 digest")
        found.append({key: entry[key] for key in CARD_ENTRY_KEYS})
    return found


def _validation(data: Any) -> ValidationRecord:
    try:
        return ValidationRecord.from_dict(data)
    except (AttributeError, TypeError, ValueError):
        raise PackageError("manifest.validation is malformed: the package is corrupt or was edited by hand",
                           hint="rebuild it with `edgekit package`") from None
