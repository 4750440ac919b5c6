"""A model's INT8 simulation: its float ONNX graph with the INT8 formats' common grid applied in
float arithmetic (``graph.py``, run in a converter child), and the builder the search's tries use
(``builder.py``). ``SIMULATED_FORM`` is the form of the model it simulates; the shared search that
uses it is ``edgekit.packaging.search.shared_plan``. What the packaging side uses is exported
here, its one door: the builder (with the graph's ``LayerNames``) and the converter steps that fold, equalize and carry equalization to the source's own forms."""

from ..conversion.forms import ONNX_GRAPH as SIMULATED_FORM
from .builder import SimulatedBuilder
from .convert import EqualizeRequest, FoldRequest, equalize_graph, fold_graph
from .equalize_source import SourceEqualizeRequest, equalize_source_model, source_forms

__all__ = ["SIMULATED_FORM", "EqualizeRequest", "FoldRequest", "SimulatedBuilder", "SourceEqualizeRequest",
           "equalize_graph", "equalize_source_model", "fold_graph", "source_forms"]
