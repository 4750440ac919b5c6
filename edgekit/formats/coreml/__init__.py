"""CoreML: ML program ``.mlpackage`` (W8A8, or int8 weights) for iPhone, iPad and Mac."""

from __future__ import annotations

from typing import TYPE_CHECKING

from ...conversion import forms
from ..base import Accepts, Format, Option
from ..plan import FLOAT
from .backend import CoreMLBackend
from .notes import build_notes

if TYPE_CHECKING:
    from ..building import Builder


def _builder() -> Builder:
    from .builder import CoreMLBuilderKeepingRanges

    return CoreMLBuilderKeepingRanges()


FORMAT = Format(
    name="coreml",
    description="CoreML ML program (.mlpackage) with int8 weights: iPhone, iPad, Mac",
    builder=_builder,
    backends=(CoreMLBackend,),
    extra="coremltools (macOS)",
    serving_platform="coreml",
    options=(
        Option("coreml_activations", "--coreml-activations", "int8", choices=("int8", "float16"),
               help="CoreML activations: int8 (W8A8, calibrated; on Linux with edgekit's MIL evaluator) or float16."),
    ),
    # coremltools; op names carry a TensorFlow scope (a Keras layer), not a traced PyTorch module's path
    # edgekit's CoreML conversion of Keras and TensorFlow graphs takes one input (batch 1): a model
    # with several is refused up front; a traced PyTorch module takes each of its inputs by name
    accepts=(Accepts(forms.KERAS_MODEL, honours=(FLOAT,), max_inputs=1),
             # a PyTorch QAT module through its QDQ export, never traced as it is (its fake-quant
             # modules); a QDQ graph's pairs become Core ML's quantize ops (learned.py)
             Accepts(forms.TORCH_MODULE, cannot=forms.QUANTIZED_OPS),
             Accepts(forms.TF_GRAPH, honours=(FLOAT,), max_inputs=1)),
    notes=build_notes,
    keeps_learned_ranges=("QDQ",),  # through coremltools' torch.export frontend (learned.py)
)
