"""ExecuTorch: ``.pte`` programs lowered to XNNPACK (PT2E static INT8), for PyTorch's own
on-device runtime.

The conversion (``convert``, child side) runs in edgekit's own environment (ExecuTorch 1.5.1
works with edgekit's torch pin); the device backend (``backend``) needs ExecuTorch's runtime,
which imports torch (``edgekit[executorch]``).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from ...conversion import forms
from ..base import Accepts, EXPLAIN, Format
from ..plan import FLOAT
from .backend import ExecuTorchBackend
from .notes import build_notes

if TYPE_CHECKING:
    from ..building import Builder


def _builder() -> Builder:
    from .builder import ExecuTorchBuilder

    return ExecuTorchBuilder()


FORMAT = Format(
    name="executorch",
    description="ExecuTorch program (.pte) lowered to XNNPACK, static INT8: Android, iOS, Raspberry Pi, Linux",
    builder=_builder,
    backends=(ExecuTorchBackend,),
    extra="edgekit[executorch]",
    serving_platform="executorch",
    bare_suffixes=(".pte",),
    # PT2E with the XNNPACK quantizer: a layer kept in float gets no annotation; XNNPACK has no
    # 16-bit activations; the per-layer report compares PT2E's quantized graph with its float one
    # a PyTorch QAT module goes through its QDQ export, whose pairs are lowered as given
    accepts=(Accepts(forms.TORCH_PROGRAM, honours=(FLOAT, EXPLAIN),
                     cannot=forms.QUANTIZED_OPS, names_ops=True),),
    notes=build_notes,
    keeps_learned_ranges=("QDQ",),  # the QDQ graph's pairs lowered to XNNPACK as given (convert_executorch_kept)
    build_requires=("executorch", "torch"),
    build_extra="edgekit[executorch]",
)
