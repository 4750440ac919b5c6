"""What precision the user's model computes in, said once where the source describes it.

A float source has every range chosen here, from calibration data. A *learned* source (QAT
fake-quant, a PT2E program, another tool's QDQ graph) carries its own scales and zero points:
every format keeps them as given and none chooses a range again (no calibration fix, no scheme
variant, no per-layer move). The packager reads this from the source's description
(``SourceDescription.precision``) and each builder from ``BuildContext.source_precision``;
nothing detects it again from a file.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any


@dataclass(frozen=True)
class SourcePrecision:
    """Float, or learned with the scheme the source records (``manifest.source.quantized``)."""

    learned: bool = False
    scheme: Mapping[str, Any] = field(default_factory=dict)

    @classmethod
    def of(cls, recorded: Any) -> SourcePrecision:
        """From what a source records under ``quantized`` (its scheme, ``True``, or nothing)."""
        if not recorded:
            return FLOAT_SOURCE
        return cls(True, dict(recorded) if isinstance(recorded, Mapping) else {})

    @property
    def label(self) -> str:
        return "learned" if self.learned else "float"


FLOAT_SOURCE = SourcePrecision()
