"""``manifest.validation`` as typed, frozen records: what was measured, on which data, and
whether each artifact passed its gates (the package's promise to whoever runs it).

One reader, ``ValidationRecord.from_dict``, takes every manifest edgekit has written (an older
one without a key gets its default: a package from before the gates existed passes), and
``to_dict`` writes the JSON the manifest has always held. NamedTuples: the runtime reads this
on every load, and they cost far less to define than dataclasses (and no ``from __future__
import annotations``: typing.NamedTuple compiles each string annotation on every start).
"""

from collections.abc import Mapping
from enum import Enum
from types import MappingProxyType
from typing import Any, NamedTuple


class Verdict(str, Enum):
    """What an artifact's validation came to, decided once when its package is assembled
    (``packaging/record.py``) and read by everything that says it: the summary lines, the Python
    result, the runtime's warnings, ``sign`` and ``export triton``. The values are the manifest's
    words (``verdict``, ``state``)."""

    PASSED = "passed"  # every gate met, on a sample that supports it
    REFUSED = "failed"  # a gate missed (kept only by --allow-accuracy-drop)
    NOT_DECIDABLE = "not decidable"  # every gate met, on too few samples to decide a pass
    UNVERIFIED = "not measured"  # built, and no runtime where it was built measured it

    @classmethod
    def of(cls, measured: bool, refused: bool, undecided: bool) -> "Verdict":
        """The verdict of a record: not measured, a refusal, a pass the sample cannot support, or a pass."""
        if not measured:
            return cls.UNVERIFIED
        if refused:
            return cls.REFUSED
        return cls.NOT_DECIDABLE if undecided else cls.PASSED

    @property
    def passed(self) -> "bool | None":
        """The manifest's ``passed``: true, false, or null (not measured, or not decided)."""
        return {Verdict.PASSED: True, Verdict.REFUSED: False}.get(self)


EMPTY: Mapping[str, Any] = MappingProxyType({})  # the records' empty default: shared, so read-only

class GateRecord(NamedTuple):
    """One gate an artifact failed, as its manifest keeps it: where (format, output, the rows of a
    joined quantity), why (``cause``, ``what``), the fixes it names and its margin under the floor."""

    what: str
    format: str = ""
    output: str | None = None  # None: the artifact as a whole (a --metric function)
    cause: str = ""
    fixes: tuple[str, ...] = ()
    saturated: bool = False
    channels: tuple[int, int] | None = None
    axis: int | None = None
    margin: float | None = None

    @classmethod
    def from_dict(cls, data: "Mapping[str, Any] | str") -> "GateRecord":
        if not isinstance(data, Mapping):  # a record from before gates were mappings: its words
            return cls(str(data))
        channels = data.get("channels")
        return cls(str(data.get("what", "")), str(data.get("format", "")), data.get("output"),
                   str(data.get("cause", "")), tuple(str(f) for f in data.get("fixes") or ()),
                   bool(data.get("saturated", False)),
                   tuple(int(c) for c in channels) if isinstance(channels, (list, tuple)) and len(channels) == 2 else None,
                   data.get("axis"), data.get("margin"))

    def to_dict(self) -> dict[str, Any]:
        found = self._asdict()
        found["fixes"] = list(self.fixes)
        found["channels"] = list(self.channels) if self.channels is not None else None
        return found


class Undecided(NamedTuple):
    """One gate a pass cannot be decided on: what it counted, and how many would decide it."""

    output: str | None
    gate: str  # the rate's name, or "samples" (the floor under every gate)
    have: int  # units counted
    needed: int  # units that would decide it
    unit: str
    samples_needed: int  # validation samples that would give ``needed`` units at this sample's rate

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> "Undecided":
        output = data.get("output")
        return cls(None if output is None else str(output), str(data.get("gate", "")), int(data.get("have") or 0),
                   int(data.get("needed") or 0), str(data.get("unit", "")), int(data.get("samples_needed") or 0))

    def to_dict(self) -> dict[str, Any]:
        return self._asdict()

    def text(self) -> str:
        """The gate in words, for the summary and the CLI's last line."""
        where = f"{self.output!r} " if self.output else ""
        if self.gate == "samples":
            return f"{self.have} validation samples are fewer than the {self.needed} any pass needs"
        return (f"{where}{self.gate} counts {self.have} {self.unit}; the gate allows one disagreement only from "
                f"{self.needed} on")

    def counted(self) -> str:
        """``GATE: HAVE UNIT, NEEDED needed``: what was counted against what would decide it."""
        return f"{self.gate}: {self.have} {self.unit}, {self.needed} needed"


def samples_to_decide(found: "tuple[Undecided, ...] | list[Undecided]") -> int:
    """Validation samples that would decide every one of ``found``."""
    return max((u.samples_needed for u in found), default=0)


# what an artifact record holds besides measured/reason/passed: the summary comparison's numbers
# (sqnr_db, cosine, top1_agreement, accuracy, ...) and the per-output, task, quantization and
# conversion details, kept as measured
_ARTIFACT_LISTS = ("gates", "notes", "auto_fix", "undecided", "verdict")


class DataRecord(NamedTuple):
    """The samples artifacts were judged on."""

    source: str = ""
    split: str = ""  # held-out calibration samples | calibration samples | evaluation data
    samples: int | None = None
    minimum_for_a_verdict: int | None = None
    sha256: str = ""
    labeled: bool = False

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> "DataRecord":
        return cls(str(data.get("source", "")), str(data.get("split", "")), data.get("samples"),
                   data.get("minimum_for_a_verdict"), str(data.get("sha256", "")), bool(data.get("labeled", False)))

    def to_dict(self) -> dict[str, Any]:
        return self._asdict()


class MeasuredRecord(NamedTuple):
    """One artifact's numbers against the float model, as the manifest records them: the summary
    comparison (the worst output's: ``sqnr_db``, ``cosine``, ``top1_agreement``, ``accuracy``...),
    each output's where there are several, each output's task metrics, the user's ``--metric``,
    how and where it was judged, and the same numbers measured otherwise (as quantized without
    this CPU's fused kernels, on this CPU, the format's float conversion, against a quantized
    source's float model). A comparison's and a task's own records stay as written."""

    summary: Mapping[str, Any] = EMPTY  # the summary comparison's numbers (and any other top-level number)
    # (None: the record holds no such entry; a record read and written again keeps what it held)
    outputs: Mapping[str, Mapping[str, Any]] | None = None  # output -> its comparison, where there are several
    tasks: Mapping[str, Mapping[str, Any]] | None = None  # output -> its task metrics, verdict and evidence
    metric: Mapping[str, Any] | None = None  # the --metric function's result
    measured_by: str | None = None
    judged_by: str | None = None
    quantization: Mapping[str, Any] | None = None  # as quantized: the QDQ graph without int8 kernel fusion
    on_this_cpu: Mapping[str, Any] | None = None  # this CPU's fused int8 kernels, where judged as quantized
    float_conversion: Mapping[str, Any] | None = None  # the format's float model against the source
    against_float_reference: "MeasuredRecord | None" = None  # a quantized source's float model (--float-reference)

    # in the order the packager writes them (``packaging/record.measured_record``)
    _NAMED = ("outputs", "measured_by", "tasks", "metric", "quantization", "judged_by", "on_this_cpu",
              "against_float_reference", "float_conversion")

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> "MeasuredRecord":
        against = data.get("against_float_reference")
        return cls(
            summary={k: v for k, v in data.items() if k not in cls._NAMED},
            outputs=data.get("outputs"), tasks=data.get("tasks"), metric=data.get("metric"),
            measured_by=data.get("measured_by"), judged_by=data.get("judged_by"),
            quantization=data.get("quantization"), on_this_cpu=data.get("on_this_cpu"),
            float_conversion=data.get("float_conversion"),
            against_float_reference=cls.from_dict(against) if isinstance(against, Mapping) else against)

    def to_dict(self) -> dict[str, Any]:
        found: dict[str, Any] = dict(self.summary)
        for name in self._NAMED:
            value = getattr(self, name)
            if value is not None:
                found[name] = value.to_dict() if isinstance(value, MeasuredRecord) else \
                    dict(value) if isinstance(value, Mapping) else value
        return found

    def __bool__(self) -> bool:
        return bool(self.summary) or any(getattr(self, name) is not None for name in self._NAMED)

    def number(self, key: str) -> Any:
        """A number of the summary comparison (``sqnr_db``, ``accuracy``, ``accuracy_drop_pp``)."""
        return self.summary.get(key)

    @property
    def sqnr_db(self) -> float | None:
        return self.summary.get("sqnr_db")

    @property
    def accuracy(self) -> float | None:
        return self.summary.get("accuracy")

    @property
    def top1_agreement(self) -> float | None:
        return self.summary.get("top1_agreement")

    @property
    def cosine(self) -> float | None:
        return self.summary.get("cosine")

    @property
    def accuracy_drop_pp(self) -> float | None:
        return self.summary.get("accuracy_drop_pp")

    def per_output(self) -> Mapping[str, Mapping[str, Any]]:
        """Each output's comparison; the summary alone (under "") for a one-output model."""
        return self.outputs or {"": self.summary}

    def task_records(self) -> Mapping[str, Mapping[str, Any]]:
        """Each output's task metrics (empty where none was judged by its task)."""
        return self.tasks or {}


class ArtifactRecord(NamedTuple):
    """One artifact against the float model."""

    measured: bool = True
    reason: str = ""  # why it was not measured
    verdict: Verdict = Verdict.PASSED
    metrics: MeasuredRecord = MeasuredRecord()  # what was measured (the summary comparison, outputs, tasks, ...)
    gates: tuple[GateRecord, ...] = ()  # each failed gate
    notes: tuple[str, ...] = ()
    auto_fix: tuple[Mapping[str, Any], ...] = ()  # --auto-fix attempts
    # the gates a pass could not be decided on (too few samples): output, gate, have, needed, ...
    undecided: tuple[Undecided, ...] = ()
    recorded: bool = True  # False: a record written before verdicts (measured: its gates passed), kept as it was

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> "ArtifactRecord":
        known = ("measured", "reason", "passed", *_ARTIFACT_LISTS)
        measured = data.get("measured") is not False
        undecided = tuple(Undecided.from_dict(u) for u in data.get("undecided") or () if isinstance(u, Mapping))
        recorded = "passed" in data or "verdict" in data or bool(undecided)
        verdict = Verdict(data["verdict"]) if data.get("verdict") in Verdict._value2member_map_ else \
            Verdict.of(measured, data.get("passed") is False, bool(undecided))
        return cls(
            measured=measured, reason=str(data.get("reason", "")), verdict=verdict,
            metrics=MeasuredRecord.from_dict({k: v for k, v in data.items() if k not in known}),
            gates=tuple(GateRecord.from_dict(g) for g in data.get("gates") or ()),
            notes=tuple(str(n) for n in data.get("notes") or ()), auto_fix=tuple(data.get("auto_fix") or ()),
            undecided=undecided, recorded=recorded or not measured,
        )

    def to_dict(self) -> dict[str, Any]:
        if not self.measured:
            return {"measured": False, "reason": self.reason}
        found: dict[str, Any] = {"measured": True, **self.metrics.to_dict(), "gates": [g.to_dict() for g in self.gates]}
        if self.recorded:  # an older record without a verdict stays as it was
            found["passed"] = self.passed
            found["verdict"] = self.verdict.value
        if self.undecided:
            found["undecided"] = [u.to_dict() for u in self.undecided]
        if self.notes:
            found["notes"] = list(self.notes)
        if self.auto_fix:
            found["auto_fix"] = [dict(a) for a in self.auto_fix]
        return found

    @property
    def passed(self) -> "bool | None":
        """The manifest's ``passed`` (null for a record written before verdicts)."""
        return self.verdict.passed if self.recorded else None

    @property
    def failed(self) -> bool:
        return self.verdict is Verdict.REFUSED

    @property
    def decided(self) -> bool:
        """False when its gates' numbers met their floors on a sample too small to support a pass."""
        return self.verdict is not Verdict.NOT_DECIDABLE

    def outcome(self) -> str:
        """The verdict in words, as ``PackageResult.verdicts`` gives it: "passed", "refused: <first
        gate>", "not decidable: <N> held-out samples would decide it (<gates>)" or "built
        unverified: <why>"."""
        if self.verdict is Verdict.UNVERIFIED:
            return f"built unverified: {self.reason or 'no runtime here measured it'}"
        if self.verdict is Verdict.REFUSED:
            return f"refused: {(self.failed_gates() or ['validation'])[0]}"
        if self.verdict is Verdict.NOT_DECIDABLE:
            needed = samples_to_decide(self.undecided)
            gates = "; ".join(u.counted() for u in self.undecided)
            return f"not decidable: {needed} held-out samples would decide it ({gates})"
        return "passed"

    def failed_gates(self) -> list[str] | None:
        """What it failed when validated (kept by --allow-accuracy-drop); None when it passed or
        was not measured."""
        if not self.failed:
            return None
        return [g.what for g in self.gates] or ["validation"]

    def get(self, key: str, default: Any = None) -> Any:
        """A measured number or detail by its manifest key (``sqnr_db``, ``accuracy``, ``outputs``), as
        the manifest writes it (for scripts reading records; edgekit reads ``metrics``' fields)."""
        return self.metrics.to_dict().get(key, default)


NO_RECORD = ArtifactRecord(recorded=False)  # an artifact a record does not list (an older manifest's)


def _package_verdict(data: Mapping[str, Any]) -> Verdict:
    """A stored package verdict, from its ``passed`` (null: nothing measured) and its ``state`` (a
    null ``passed`` whose state is "not decidable": a pass the sample cannot support)."""
    if data.get("state") == Verdict.NOT_DECIDABLE.value and data.get("passed") is None:
        return Verdict.NOT_DECIDABLE
    if "passed" in data and data["passed"] is None:
        return Verdict.UNVERIFIED
    return Verdict.REFUSED if data.get("passed", True) is False else Verdict.PASSED


class ValidationRecord(NamedTuple):
    kinds: Mapping[str, Mapping[str, Any]] = EMPTY  # output -> how it is judged, with the evidence
    notes: tuple[str, ...] = ()
    data: DataRecord = DataRecord()
    float_accuracy: float | None = None
    max_accuracy_drop_pp: float | None = None
    min_sqnr_db: float | None = None
    # the package's verdict (the manifest's ``state``, and ``passed``: true, false, or null where nothing
    # was measured or a pass the sample cannot support is not decided)
    verdict: Verdict = Verdict.PASSED
    artifacts: Mapping[str, ArtifactRecord] = EMPTY

    @classmethod
    def from_dict(cls, data: Mapping[str, Any] | None) -> "ValidationRecord":
        data = data or {}
        return cls(
            kinds=dict(data.get("kinds") or {}), notes=tuple(str(n) for n in data.get("notes") or ()),
            data=DataRecord.from_dict(data.get("data") or {}),
            float_accuracy=(data.get("float") or {}).get("accuracy"),
            max_accuracy_drop_pp=data.get("max_accuracy_drop_pp"), min_sqnr_db=data.get("min_sqnr_db"),
            verdict=_package_verdict(data),
            artifacts={key: ArtifactRecord.from_dict(record) for key, record in (data.get("artifacts") or {}).items()},
        )

    def to_dict(self) -> dict[str, Any]:
        if self == ValidationRecord():
            return {}
        found: dict[str, Any] = {"kinds": {k: dict(v) for k, v in self.kinds.items()}}
        if self.notes:
            found["notes"] = list(self.notes)
        found.update({
            "data": self.data.to_dict(),
            "float": {"accuracy": self.float_accuracy},
            "max_accuracy_drop_pp": self.max_accuracy_drop_pp,
            "min_sqnr_db": self.min_sqnr_db,
            "passed": self.passed,
            "state": self.state.value,
            "artifacts": {key: record.to_dict() for key, record in self.artifacts.items()},
        })
        return found

    @property
    def state(self) -> Verdict:
        """The package's verdict: a package none of whose artifacts could be run where it was built
        has none (not measured), and one whose passes rest on too few samples has none yet (not
        decidable); each says so rather than passing."""
        return self.verdict

    @property
    def passed(self) -> bool | None:
        """The manifest's ``passed``: true, false, or null (not measured, or not decided)."""
        return self.verdict.passed

    def artifact(self, key: str) -> "ArtifactRecord":
        """The record of an artifact; an empty one (passed, nothing measured) when there is none."""
        return self.artifacts.get(key, NO_RECORD)

    def with_auto_fix(self, attempts: Mapping[str, list[dict[str, Any]]]) -> "ValidationRecord":
        """The record with each artifact's --auto-fix attempts added."""
        changed = {key: record._replace(auto_fix=tuple(attempts[key])) if attempts.get(key) else record
                   for key, record in self.artifacts.items()}
        return self._replace(artifacts=changed)
