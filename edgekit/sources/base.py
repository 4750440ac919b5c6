"""What a model source is: how edgekit recognises it, loads it and runs its float reference.

A source (TensorFlow/Keras, ONNX, ...) is one module below ``edgekit/sources/`` defining
``SOURCE``. ``detect`` runs in the parent and only looks at files; ``prepare`` and
``float_reference`` run in a converter child (``edgekit.conversion.worker``) because they import the
framework. ``prepare`` returns a JSON description every later step reads: ``inputs`` and
``outputs`` (name, shape with -1 for dynamic dimensions, dtype), ``layers`` (names, for error
messages), ``rescales`` (the model normalizes its own input), ``forms``: each form the
kind provides (``provides``; ``edgekit.conversion.forms.ModelForm.to_dict``), which ``edgekit.routing.routes``
hands to the formats, and what the manifest keeps: ``recorded`` (facts about the model for its
``source`` record: exporter, fixed inputs, rewrites) and ``versions`` (the frameworks that loaded
it), whatever keys the source gives.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ..errors import ModelSourceError, first_line

__all__ = ["Source", "first_line"]


@dataclass(frozen=True)
class Source:
    name: str
    accepts: str  # what a user passes, for messages: ".keras, .h5 or a SavedModel directory"
    detect: Callable[[Path], str | None]  # the kind of model at path ("keras", "onnx", ...), or None if not ours
    prepare: Callable[..., dict[str, Any]]  # child: (model_path, kind, export_dir) -> description
    # child: (prepared, inputs_npy, output_npy) -> writes the outputs; None: an ONNX graph
    # (``prepared["onnx_model"]``), run by the ONNX format's runtime (``routing.float_reference``)
    float_reference: Callable[..., None] | None
    # kind -> the forms (edgekit.conversion.forms) its prepare() describes under "forms": what formats convert from
    provides: dict[str, tuple[str, ...]] = field(default_factory=dict)
    # kind -> what code loading that kind runs (printed before loading; see README "Security model")
    runs_code: dict[str, str] = field(default_factory=dict)
    # parent, cheap: {"op_types": [...], "inputs": [names]} read without loading the model, so a
    # route limit (an op a converter lacks, too many inputs) refuses before anything loads; None
    # where the model cannot be read that way (or the file is damaged: loading says how)
    peek: Callable[[Path], dict[str, Any] | None] | None = None


def refuse_batch_axes(hints: dict[str, Any], kind: str) -> None:
    """``--batch-axis`` rewrites an ONNX graph's edge; other sources are refused by name."""
    if hints.get("batch_axes"):
        raise ModelSourceError(f"--batch-axis works for ONNX sources, not {kind} models",
                               hint="export the model batch-first, or export it to ONNX and package that with "
                                    "--batch-axis")
