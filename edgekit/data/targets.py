"""Class targets checked against the classifier they label: packaging and the device's accuracy
measurement (``edgekit card --eval``, ``--bench --eval``) refuse the same file with the same words."""

from __future__ import annotations

from typing import Any

from ..errors import DataError


def check_class_targets(y: Any, classes: int) -> None:
    """Refuse targets outside ``0..classes-1``: an accuracy over them would be 0%, not a measurement."""
    if y is None or classes in (-1, 1) or not getattr(y, "size", 0):
        return
    low, high = int(y.min()), int(y.max())
    if low < 0 or high >= classes:
        raise DataError(f"class targets range {low}..{high} but the model outputs {classes} classes",
                        hint="y must hold class indices 0..classes-1 in the model's output order")
