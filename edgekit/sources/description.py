"""What a source's ``prepare`` says about the model, as typed records the packager reads.

``prepare`` runs in a converter child and returns JSON (``Source.prepare``); the packager reads it
once, here (``SourceDescription.from_dict``), instead of by key across its stages. The JSON
itself goes back unchanged to the source's own ``float_reference`` (``raw``).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, NamedTuple

from ..errors import EdgekitError
from ..conversion.forms import TORCH_MODULE, TORCH_PROGRAM, ModelForm
from ..conversion.source_precision import SourcePrecision



class TensorDescription(NamedTuple):
    """One model input or output: its name, its shape (-1 for a dynamic dimension), its dtype,
    and the names of its dimensions where the graph has them (ONNX ``dim_param``)."""

    name: str
    shape: tuple[int, ...]
    dtype: str
    dim_names: tuple[str, ...] = ()

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> TensorDescription:
        return cls(str(data["name"]), tuple(int(d) for d in data["shape"]), str(data["dtype"]),
                   tuple(str(n) for n in data.get("dim_names") or ()))


@dataclass(frozen=True)
class SourceDescription:
    inputs: tuple[TensorDescription, ...]
    outputs: tuple[TensorDescription, ...]
    layers: tuple[str, ...] = ()  # layer (or node) names, for error messages and --keep-float
    op_types: tuple[str, ...] = ()  # the ONNX op types of the model, where a description has them
    rescales: bool = False  # the model normalizes its own input (a Rescaling layer)
    forms: Mapping[str, ModelForm] = field(default_factory=dict)  # edgekit.conversion.forms: what formats convert from
    output_layers: Mapping[str, str] = field(default_factory=dict)  # output -> the layer computing it
    output_structure: Mapping[str, Any] = field(default_factory=dict)  # output -> what it is made of
    # what the source says about the model for the manifest's "source" (its exporter, fixed inputs,
    # rewrites, ...) and "versions" (the frameworks that loaded it): whatever keys the source gives
    recorded: Mapping[str, Any] = field(default_factory=dict)
    versions: Mapping[str, str] = field(default_factory=dict)
    raw: Mapping[str, Any] = field(default_factory=dict)  # the JSON, for the source's own child steps

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> SourceDescription:
        try:
            return cls(
                inputs=tuple(TensorDescription.from_dict(t) for t in data["inputs"]),
                outputs=tuple(TensorDescription.from_dict(t) for t in data["outputs"]),
                layers=tuple(str(n) for n in data.get("layers") or ()),
                op_types=tuple(str(n) for n in data.get("op_types") or ()),
                rescales=bool(data.get("rescales", False)),
                forms={name: ModelForm.from_dict(form) for name, form in (data.get("forms") or {}).items()},
                output_layers=dict(data.get("output_layers") or {}),
                output_structure=dict(data.get("output_structure") or {}),
                recorded=dict(data.get("recorded") or {}),
                versions={str(k): str(v) for k, v in (data.get("versions") or {}).items()},
                raw=dict(data),
            )
        except (KeyError, TypeError, ValueError) as exc:
            raise EdgekitError(f"the model source described the model incompletely ({type(exc).__name__}: {exc})",
                               hint="report this model: its source's prepare() must give inputs and outputs "
                                    "with name, shape and dtype") from None

    @property
    def precision(self) -> SourcePrecision:
        """Float, or learned with its scheme (what the source recorded under ``quantized``)."""
        return SourcePrecision.of(self.recorded.get("quantized"))

    @property
    def plan_layers(self) -> tuple[str, ...]:
        """The layers a precision plan names: the source's own, none for a PyTorch model (its
        ``layers`` are its ONNX export's nodes): its plans name its modules and a forward's ops,
        read from that export's record (``LayerNames.by_module``), as its user would write them."""
        return () if TORCH_PROGRAM in self.forms or TORCH_MODULE in self.forms else self.layers

    @property
    def output_names(self) -> list[str]:
        return [o.name for o in self.outputs]
