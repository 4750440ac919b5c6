"""How a quantized artifact's outputs compare with the float model's: the numbers every gate reads
(``metrics``), what the graph says each output is made of (``structure``, for the kinds' inference)
and the user's own ``--metric`` (``user_metric``). Nothing here quantizes: each format calibrates
and quantizes in its own build."""

from .metrics import OutputComparison, compare_outputs

__all__ = ["OutputComparison", "compare_outputs"]
