"""The precision plan: which layers leave the default int8, and to what.

One type for what ``--keep-float``, ``--int16-activations``, ``--precision-plan FILE``, the
search and the manifest all say: layer -> ``int16`` (16-bit activations, 8-bit weights: TFLite
int16x8, ONNX 16-bit QDQ) or ``float``; a layer not named stays ``int8``. Every route that
honours per-layer precision (``Accepts.honours``) builds it; the search edits only the plan; the
manifest records the plan of each artifact; a user saves one and passes it again (like LiteRT
Quantizer recipes and coremltools' ``OptimizationConfig``)."""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

INT8, INT16, FLOAT = "int8", "int16", "float"
PRECISIONS = (INT8, INT16, FLOAT)
SCHEMA = "edgekit.precision-plan/1"
FLAGS = {FLOAT: "--keep-float", INT16: "--int16-activations"}


@dataclass(frozen=True)
class PrecisionPlan:
    """Layer -> precision, for the layers that are not int8, in the order they were raised."""

    layers: Mapping[str, str] = field(default_factory=dict)

    def __post_init__(self) -> None:
        wrong = {layer: p for layer, p in self.layers.items() if p not in PRECISIONS}
        if wrong:
            raise ValueError(f"precision must be one of {', '.join(PRECISIONS)}: {wrong}")
        object.__setattr__(self, "layers", {k: v for k, v in self.layers.items() if v != INT8})

    @classmethod
    def of(cls, floats: Iterable[str] = (), int16: Iterable[str] = ()) -> PrecisionPlan:
        """From the flags (a layer named in both is float: the higher precision wins)."""
        return cls({**{layer: INT16 for layer in int16}, **{layer: FLOAT for layer in floats}})

    @property
    def floats(self) -> tuple[str, ...]:
        """The layers kept in float (``--keep-float``)."""
        return tuple(layer for layer, p in self.layers.items() if p == FLOAT)

    @property
    def int16(self) -> tuple[str, ...]:
        return tuple(layer for layer, p in self.layers.items() if p == INT16)

    def __bool__(self) -> bool:
        return bool(self.layers)

    def __len__(self) -> int:
        return len(self.layers)

    def __contains__(self, layer: object) -> bool:
        return layer in self.layers

    def precision(self, layer: str) -> str:
        return self.layers.get(layer, INT8)

    def raised(self, layers: Iterable[str], precision: str) -> PrecisionPlan:
        """This plan with ``layers`` at ``precision`` (``int8`` puts them back)."""
        changed = dict(self.layers)
        for layer in layers:
            changed.pop(layer, None)
            changed[layer] = precision
        return PrecisionPlan(changed)

    def without(self, layers: Iterable[str]) -> PrecisionPlan:
        gone = set(layers)
        return PrecisionPlan({k: v for k, v in self.layers.items() if k not in gone})

    def edited(self, layer: str, precision: str) -> PrecisionPlan | None:
        """This plan with ``layer`` raised to ``precision``; None when that changes nothing, or
        would lower it (a float layer is never given 16-bit activations): a search's plan edit."""
        if self.precision(layer) == precision or (precision == INT16 and self.precision(layer) == FLOAT):
            return None
        return self.raised([layer], precision)

    def record(self) -> dict[str, list[str]]:
        """The plan as an artifact's details record it (the manifest's ``keep_float`` and
        ``int16_layers``, which ``ArtifactDetails`` reads back)."""
        return {"keep_float": list(self.floats), "int16_layers": list(self.int16)}

    def describe(self) -> str:
        """As flags, e.g. ``--keep-float conv2 --int16-activations conv1`` (``plain int8`` when empty)."""
        parts = [f"{FLAGS[p]} {' '.join(layers)}" for p in (FLOAT, INT16)
                 if (layers := [k for k, v in self.layers.items() if v == p])]
        return " ".join(parts) or "plain int8"

    def to_dict(self) -> dict[str, Any]:
        return {"schema": SCHEMA, "default": INT8, "layers": dict(self.layers)}

    @classmethod
    def from_dict(cls, data: Mapping[str, Any], where: str = "precision plan") -> PrecisionPlan:
        from ..errors import InputError

        if not isinstance(data, Mapping) or not isinstance(data.get("layers"), Mapping):
            raise InputError(f"{where}: not a precision plan (expected {{\"layers\": {{LAYER: int8|int16|float}}}})",
                             hint="use the plan a package records (manifest: precision_plan), or see docs/validation.md")
        if data.get("default", INT8) != INT8:
            raise InputError(f"{where}: default precision {data.get('default')!r} is not supported (int8 only)",
                             hint="name the layers that leave int8; every other layer is int8")
        try:
            return cls({str(k): str(v) for k, v in data["layers"].items()})
        except ValueError as exc:
            raise InputError(f"{where}: {exc}", hint="each layer's precision is int8, int16 or float") from None

    @classmethod
    def load(cls, path: str | Path) -> PrecisionPlan:
        from ..errors import InputError

        try:
            data = json.loads(Path(path).read_text())
        except RecursionError:  # nested deeper than Python's parser goes: not a plan either
            raise InputError(f"cannot read the precision plan {path}: its JSON is nested too deeply",
                             hint="pass a JSON file like a package's recorded plan (docs/validation.md)") from None
        except (OSError, ValueError) as exc:
            raise InputError(f"cannot read the precision plan {path}: {exc}",
                             hint="pass a JSON file like a package's recorded plan (docs/validation.md)") from None
        return cls.from_dict(data, str(path))

    @classmethod
    def from_flags(cls, floats: Iterable[str] = (), int16: Iterable[str] = (),
                   file: str | Path | None = None, base: PrecisionPlan | None = None) -> PrecisionPlan:
        """The plan ``--keep-float``, ``--int16-activations`` and ``--precision-plan FILE`` say
        together. A layer named by both flags is refused (float and 16-bit activations cannot both
        hold), and so is a flag that gives a layer of the file another precision: the build would
        not be what the plan file says."""
        from ..errors import OptionError

        floats, int16 = list(floats), list(int16)
        both = sorted(set(floats) & set(int16))
        if both:
            raise OptionError(f"{FLAGS[FLOAT]} and {FLAGS[INT16]} both name {', '.join(both)}: a layer is either "
                              "float or int16-activation INT8, not both",
                              hint="name each layer in one of the two options")
        given_in = "the file" if file is not None else "plan="
        base = cls.load(file) if file is not None else base or cls()
        conflicts = sorted(f"{layer} ({FLAGS[precision]}; {given_in} says {base.precision(layer)})"
                           for precision, layers in ((FLOAT, floats), (INT16, int16)) for layer in layers
                           if layer in base.layers and base.precision(layer) != precision)
        if conflicts:
            raise OptionError(f"{f'--precision-plan {file}' if file is not None else 'plan='} and the flags disagree "
                              f"on {', '.join(conflicts)}",
                              hint="give each layer's precision once: edit the plan file, or drop the flag")
        return base.raised(int16, INT16).raised(floats, FLOAT)

    @classmethod
    def given(cls, value: Any, where: str = "plan=") -> PrecisionPlan:
        """A plan as Python passes one: a plan, a mapping of layer -> precision (or a recorded
        plan), or the path of a plan file."""
        from ..errors import InputError

        if isinstance(value, PrecisionPlan):
            return value
        if value is None:
            return cls()
        if isinstance(value, (str, Path)):
            return cls.load(value)
        if isinstance(value, Mapping):
            return cls.from_dict(value if "layers" in value else {"layers": value}, where)
        raise InputError(f"{where} must be a PrecisionPlan, a dict of layer -> int8|int16|float, or a plan file, "
                         f"got {value!r}", hint='e.g. plan={"conv3": "float", "conv1": "int16"}')

    def save(self, path: str | Path) -> None:
        from ..fsutil import write_text_atomic

        write_text_atomic(path, json.dumps(self.to_dict(), indent=2) + "\n")
