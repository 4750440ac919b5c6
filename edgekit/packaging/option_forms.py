"""The text forms of packaging options and how several flags make one option's value.

Each reader here is named by an option's declaration (``options.py``): the command line gives it
what the user typed, checked before any model loads; a bad value is one usage error naming the
flag (exit 2), as argparse's own.
"""

from __future__ import annotations

import argparse
from collections.abc import Mapping
from typing import Any

from ..errors import EdgekitError, OptionError


def numbers(text: str) -> list[float]:
    """Comma-separated numbers (``--mean 0.485,0.456,0.406``)."""
    try:
        values = [float(v) for v in text.split(",") if v.strip()]
    except ValueError:
        values = []
    if not values:
        raise argparse.ArgumentTypeError(f"expected comma-separated numbers, got {text!r}")
    return values


def height_width(text: str) -> list[int]:
    """``HxW`` (``--resize 224x224``)."""
    try:
        height, width = (int(v) for v in text.lower().split("x"))
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected HEIGHTxWIDTH such as 224x224, got {text!r}") from None
    return [height, width]


def named_shape(text: str) -> tuple[str, list[int]]:
    """``NAME=DxDxD`` (``--input-shape images=1x3x320x320``)."""
    name, sep, dims = text.partition("=")
    try:
        shape = [int(d) for d in dims.lower().split("x")]
    except ValueError:
        shape = []
    if not sep or not name or not shape or any(d < 1 for d in shape):
        raise argparse.ArgumentTypeError(f"expected NAME=DxDxD such as images=1x3x320x320, got {text!r}")
    return name, shape


def named_axis(text: str) -> tuple[str, int | None]:
    """``NAME=AXIS`` or ``NAME=none`` (``--batch-axis state=1``, ``--batch-axis frames=none``)."""
    name, sep, axis = text.partition("=")
    if sep and name and axis.strip().lower() == "none":
        return name, None
    if not sep or not name or not axis.strip().isdigit():
        raise argparse.ArgumentTypeError(f"expected NAME=AXIS or NAME=none such as state=1, got {text!r}")
    return name, int(axis)


def axes(given: Mapping[str, Any]) -> dict[str, int | None]:
    return dict(given[""] or [])


def formats(given: Mapping[str, Any]) -> list[str] | None:
    """``--format`` repeated: each once, in the order given (None: the default format)."""
    return list(dict.fromkeys(given[""])) if given[""] else None


def shapes(given: Mapping[str, Any]) -> dict[str, list[int]]:
    return dict(given[""] or [])


def names(given: Mapping[str, Any]) -> list[str] | None:
    return list(given[""]) if given[""] else None


def output_kinds(given: Mapping[str, Any]) -> dict[str, str]:
    """``--output-kind OUTPUT=KIND`` or a bare ``KIND`` (the model's only output)."""
    from ..kinds import parse_kind

    kinds: dict[str, str] = {}
    for text in given[""] or []:
        name, _, kind = text.rpartition("=")
        try:
            parse_kind(kind)
        except EdgekitError as exc:
            raise OptionError(f"argument --output-kind: {exc.message}; {exc.hint}") from None
        if name in kinds:
            raise OptionError(f"argument --output-kind: output {name or '(the only one)'} is given two kinds")
        kinds[name] = kind
    return kinds


def fixed_inputs(given: Mapping[str, Any]) -> dict[str, dict[str, Any]]:
    """``--input NAME=VALUE``, each value read and checked before any model loads."""
    from ..sources.fixed_inputs import parse_value

    fixed: dict[str, dict[str, Any]] = {}
    for text in given[""] or []:
        name, sep, value = text.partition("=")
        if not sep or not name or not value:
            raise OptionError(f"argument --input: expected NAME=VALUE such as sample_rate=16000 or h0=state.npy, "
                              f"got {text!r}")
        if name in fixed:
            raise OptionError(f"argument --input: {name!r} is given twice")
        fixed[name] = parse_value(name, value)
    return fixed


def float_ops(given: Mapping[str, Any]) -> bool:
    """``--full-integer`` refuses float ops inside a network; ``--allow-float-ops`` (the default) keeps them."""
    return not given["full_integer"]


def preprocessing(given: Mapping[str, Any]) -> dict[str, Any]:
    """The preprocessing flags as one record (a preset's fields overridden by the ones given)."""
    return {key: given[key] for key in ("scale", "mean", "std", "color_order", "resize", "preset")}


def plan(given: Mapping[str, Any]) -> Any:
    """``--keep-float``, ``--int16-activations`` and ``--precision-plan FILE`` as one plan."""
    from ..formats.plan import PrecisionPlan

    return PrecisionPlan.from_flags(given["float"] or (), given["int16"] or (), given["file"])
