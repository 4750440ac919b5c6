"""A model's INT8 simulation: its float ONNX graph with the INT8 formats' common grid applied in
float arithmetic (``graph.py``, run in a converter child), and the builder the search's tries use
(``builder.py``). ``SIMULATED_FORM`` is the form of the model it simulates; the shared search that
uses it is ``edgekit.packaging.shared_plan``."""

from ..conversion.forms import ONNX_GRAPH as SIMULATED_FORM
from .builder import SimulatedBuilder

__all__ = ["SIMULATED_FORM", "SimulatedBuilder"]
