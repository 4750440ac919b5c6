"""``--metric module:function``: the user's own task metric, called with the float and INT8
outputs (and labels) of every validation sample; it returns named numbers and may gate the
package with ``passed``. The built-in task metrics belong to the output kinds (``edgekit.kinds``)."""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from typing import Any

import numpy as np

from ..errors import EdgekitError
from ..kinds.base import TaskResult


def load_metric(spec: str) -> Callable[..., Any]:
    """The user's metric function (``module:function`` or ``path/to/file.py:function``)."""
    from ..data.sources import _resolve_callable

    module, sep, function = spec.rpartition(":")
    if not sep or not module or not function:
        raise EdgekitError(f"--metric {spec}: expected module:function or path/to/file.py:function")
    return _resolve_callable(module, function, spec, "metric", label=f"--metric {spec}")


def run_metric(spec: str, function: Callable[..., Any], reference: dict[str, np.ndarray],
               candidate: dict[str, np.ndarray], labels: np.ndarray | None) -> TaskResult:
    """Call ``function(float_outputs, int8_outputs, labels)``; it returns named numbers and may add
    ``passed`` (a bool) to gate the package."""
    try:
        returned = function({k: v.copy() for k, v in reference.items()}, {k: v.copy() for k, v in candidate.items()},
                            None if labels is None else labels.copy())
    except Exception as exc:  # the user's code: say what it raised
        raise EdgekitError(f"--metric {spec} raised {type(exc).__name__}: {exc}",
                           hint="it is called as function(float_outputs, int8_outputs, labels) with dicts of "
                                "arrays by output name, and labels or None") from exc
    if not isinstance(returned, Mapping):
        raise EdgekitError(f"--metric {spec} returned {type(returned).__name__}, not a dict of named numbers",
                           hint='return e.g. {"recall": 0.97, "passed": True}')
    passed = returned.get("passed")
    if passed is not None and not isinstance(passed, (bool, np.bool_)):
        raise EdgekitError(f"--metric {spec}: 'passed' is {passed!r}, not True or False")
    values = {}
    for key, value in returned.items():
        if key == "passed":
            continue
        try:
            number = float(value)
        except (TypeError, ValueError):
            raise EdgekitError(f"--metric {spec}: {key!r} is {type(value).__name__}, not a number") from None
        if math.isnan(number):
            raise EdgekitError(f"--metric {spec}: {key!r} is NaN", hint="return a number for every name")
        values[str(key)] = number
    return TaskResult(f"metric {spec}", values, None if passed is None else bool(passed),
                      f"{spec} decides (its 'passed')" if passed is not None else "reported, not gated")
