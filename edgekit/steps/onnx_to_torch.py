"""The ``onnx-to-torch`` step: a float ONNX graph rebuilt as a PyTorch module (``onnx_torch/``), for the
formats whose converters take PyTorch (litert-torch, coremltools' PyTorch frontend). A QDQ graph
is rebuilt as the float graph it simulates (``conversion.quantized.strip_qdq``): a format that
carries the learned ranges into its own quantizer takes it (TFLite); the others refuse quantized
ops in their ``Accepts``. Declared here, apart from the converter, so that reading the route table
never imports it."""

from __future__ import annotations

from collections.abc import Callable

from ..conversion import forms
from ..conversion.forms import ModelForm
from ..conversion.layer_names import ONNX_NODE
from .base import Conversion, StepContext


LOADER = forms.ONNX_REBUILD_LOADER  # what loads a module rebuilt from an ONNX graph


def onnx_to_torch(produces: str) -> Callable[[ModelForm, StepContext], ModelForm]:
    """ONNX -> a PyTorch module rebuilt from the graph (``onnx_torch``), loaded by the converter
    that needs it: nothing runs until then."""

    def step(form: ModelForm, context: StepContext) -> ModelForm:
        return ModelForm(produces, form.path, loader=LOADER,
                         via="edgekit ONNX -> PyTorch module")

    return step


# edgekit's ONNX -> PyTorch converter unrolls GRU and LSTM into linear layers and gates
# (onnx_torch/recurrent.py); it has no plain RNN
UNROLLED = ("LSTM", "GRU")
UNROLLED_CANNOT = tuple(op for op in forms.RECURRENT_OPS if op not in UNROLLED)
# a QDQ graph becomes the float graph it simulates, its ranges read apart (``strip_qdq``): the
# converter after this step never sees a QuantizeLinear
REWRITTEN = UNROLLED + forms.QDQ_OPS

CONVERSIONS = (
    Conversion("onnx-to-torch", forms.ONNX_GRAPH, forms.TORCH_PROGRAM, onnx_to_torch(forms.TORCH_PROGRAM),
               UNROLLED_CANNOT, REWRITTEN, names=ONNX_NODE),
    Conversion("onnx-to-torch", forms.ONNX_GRAPH, forms.TORCH_MODULE, onnx_to_torch(forms.TORCH_MODULE),
               UNROLLED_CANNOT, REWRITTEN, names=ONNX_NODE),
)
