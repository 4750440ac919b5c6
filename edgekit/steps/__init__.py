"""The registry of conversion steps: one form of the model into another (``edgekit.conversion.forms``), for a
format that does not convert from what the source provides.

Every module in this folder (but ``base``) that defines ``CONVERSIONS`` (a tuple of ``Conversion``)
declares steps, each with what it cannot convert (ONNX op types, refused when the model is described,
before any conversion); they are found by themselves (``STEPS``), so a new step is one new module.
``edgekit.routing.routes`` joins sources, steps and formats into the route table. Sub-folders hold converters
(``onnx_torch/``), imported only when a step runs.

- ``tf2onnx`` (``tf2onnx.py``): a TensorFlow graph to a float ONNX graph, tf2onnx in its own process;
- ``onnx-to-torch`` (``onnx_to_torch.py``, converter in ``onnx_torch/``): a float ONNX graph rebuilt
  as a PyTorch module, for the formats whose converters take PyTorch (litert-torch, coremltools'
  PyTorch frontend).
"""

from __future__ import annotations

import os

from ..registry import Registry, discover, gather
from .base import Conversion, StepContext

STEPS: Registry[Conversion] = gather(Registry("conversion step"),
                                     discover(__name__, os.path.dirname(__file__), folders=False, skip=("base",)),
                                     "CONVERSIONS", Conversion, lambda step: step.key)

__all__ = ["STEPS", "Conversion", "StepContext"]
