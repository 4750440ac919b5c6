"""A source's ``prepare`` and float reference as typed child steps (``worker.convert``): the
packager's children take a ``Message`` like every converter step. Light on purpose: a child
imports this module, not the packager."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from ..conversion import worker
from ..conversion.messages import Message


@dataclass(frozen=True)
class LoadRequest(Message):
    """Load a model with its source's ``prepare`` (a reference the child imports)."""

    prepare: str
    model_path: str
    kind: str
    export_dir: str
    hints: dict[str, Any]


@dataclass(frozen=True)
class Loaded(Message):
    """What the source's ``prepare`` said of the model (``SourceDescription``'s dict)."""

    described: Any


def load_in_child(request: LoadRequest) -> Loaded:
    """Child side of ``load_source``."""
    prepare = worker.resolve(request.prepare)
    return Loaded(prepare(model_path=request.model_path, kind=request.kind, export_dir=request.export_dir,
                          hints=request.hints))


@dataclass(frozen=True)
class ReferenceRequest(Message):
    """Write the float model's outputs on the samples in ``inputs_npz`` into ``output_npz``, with the
    source's runner (a reference the child imports) on what its ``prepare`` described."""

    runner: str
    prepared: Any
    inputs_npz: str
    output_npz: str


@dataclass(frozen=True)
class ReferenceWritten(Message):
    """Where the float outputs were written."""

    output_npz: str


def reference_in_child(request: ReferenceRequest) -> ReferenceWritten:
    """Child side of ``float_reference``."""
    worker.resolve(request.runner)(prepared=request.prepared, inputs_npz=request.inputs_npz,
                                   output_npz=request.output_npz)
    return ReferenceWritten(request.output_npz)
