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

    int8_ops: int = 0  # integer ops, the 16-bit ones included
    int8_weighted_ops: int = 0  # of those, ops with weights (convolutions, dense layers, matmuls)
    float_ops: list[dict[str, Any]] = field(default_factory=list)  # op, layer, tensor, tail
    int16_ops: list[dict[str, Any]] = field(default_factory=list)  # op, layer, tensor: 16-bit activations
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
        """``int8``; ``int8+float tail``; or the mixed precisions with how many layers are not
        int8 (``int8+int16 (3 layers)``, ``int8+float (2 layers)``, ``int8+int16+float (4 layers)``)."""
        if self.int8_ops and not self.inner and not self.int16_ops:
            return "int8+float tail" if self.float_ops else "int8"
        if not self.int8_ops:
            return "float"
        only_int16 = self.int8_ops <= len(self.int16_ops)  # every integer op is a 16-bit one: no int8 left
        parts = ([] if only_int16 else ["int8"]) + (["int16"] if self.int16_ops else []) + \
            (["float"] if self.inner else [])
        layers = {op["layer"] for op in self.int16_ops + self.inner}
        return f"{'+'.join(parts)} ({len(layers)} layer{'s' if len(layers) != 1 else ''})"

    def record(self) -> dict[str, Any]:
        """The manifest's ``details.precision``: counts a reader can check the label against."""
        total = self.int8_weight_bytes + self.float_weight_bytes
        return {
            "label": self.label,
            "ops": {"int8": self.int8_ops - len(self.int16_ops), "int16": len(self.int16_ops),
                    "float": len(self.float_ops), "float_tail": len(self.tail),
                    "integer_weighted": self.int8_weighted_ops},
            "int16_layers": sorted({op["layer"] for op in self.int16_ops}),
            "float_layers": sorted({op["layer"] for op in self.inner}),
            "weight_bytes": {"integer": self.int8_weight_bytes, "float": self.float_weight_bytes},
            "integer_weight_fraction": round(self.int8_weight_bytes / total, 4) if total else None,
            "float_tail_ops": sorted({op["op"] for op in self.tail}),
        }
