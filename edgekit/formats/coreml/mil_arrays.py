"""What every op of the NumPy MIL evaluator shares: its error, and float32 arithmetic on float
values (integers and booleans kept as they are). Its own module so that the op tables
(``evaluator.py``, ``evaluator_ops.py``) import it without importing each other."""

from __future__ import annotations

from typing import Any

import numpy as np

from ...errors import EdgekitError


class EvaluatorError(EdgekitError):
    default_hint = "this op is outside the evaluator's op set; CoreML numerics can only be checked on macOS"


def _f(x: Any) -> np.ndarray:
    array = np.asarray(x)
    return array.astype(np.float32) if array.dtype.kind == "f" else array
