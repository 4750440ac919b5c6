"""Accuracy comparison of quantized artifacts against the float model."""

from .metrics import OutputComparison, compare_outputs

__all__ = ["OutputComparison", "compare_outputs"]
