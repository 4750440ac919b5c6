"""What an artifact really computes in, counted from the artifact itself: ops and weights by
precision, and the *float tail* (float ops after the last integer op that only lead to the
outputs: a final softmax, sigmoid or normalisation, as other tools ship classifiers). Each
format reads its own files (``tflite/precision.py``, ``onnx/precision.py``); this is the record
they fill, its label shown in tables and its counts stored in the manifest (``details.precision``).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any


@dataclass
class Precision:
    """Counts read from one artifact; ``label`` is what tables and the manifest show."""

    int8_ops: int = 0
    float_ops: list[dict[str, Any]] = field(default_factory=list)  # op, layer, tensor, tail
    int8_weight_bytes: int = 0  # integer constants: int8 weights and their int32 biases
    float_weight_bytes: int = 0

    @property
    def tail(self) -> list[dict[str, Any]]:
        return [op for op in self.float_ops if op["tail"]]

    @property
    def inner(self) -> list[dict[str, Any]]:
        return [op for op in self.float_ops if not op["tail"]]

    @property
    def label(self) -> str:
        if not self.float_ops:
            return "int8"
        if not self.inner:
            return "int8+float tail"
        return "int8+float" if self.int8_ops else "float"

    def record(self) -> dict[str, Any]:
        """The manifest's ``details.precision``: counts a reader can check the label against."""
        total = self.int8_weight_bytes + self.float_weight_bytes
        return {
            "label": self.label,
            "ops": {"int8": self.int8_ops, "float": len(self.float_ops), "float_tail": len(self.tail)},
            "weight_bytes": {"integer": self.int8_weight_bytes, "float": self.float_weight_bytes},
            "integer_weight_fraction": round(self.int8_weight_bytes / total, 4) if total else None,
            "float_tail_ops": sorted({op["op"] for op in self.tail}),
        }
