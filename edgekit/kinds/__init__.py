"""The registry of output kinds: what each output is, and so how it is judged.

Every module in this folder (but ``base``) defines a ``Kind`` and registers it with
``@register``; they are found by themselves, so a new kind is one new module. Inference asks
the kinds in their ``order``: first what the graph says (``Kind.from_graph``: the op that makes
the output, a Concat's parts), then what the float values say (``Kind.from_values``); labels make
an output the kind that takes them; ``--output-kind`` always wins. Slices that carry different
quantities (``groups``) come from the Concat that forms the output, on its real axis; adjacent
parts of one op and one magnitude are one group.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from typing import Any

import numpy as np

from ..errors import EdgekitError
from ..registry import Registry, discover
from .base import Graph, Group, Kind, OutputKind, TaskResult

MAGNITUDE_RATIO = 10.0  # parts of one op whose value ranges differ more than this are different quantities

KINDS: Registry[Kind] = Registry("output kind")


def register(kind: type[Kind] | Kind) -> Any:
    """Add a kind (a class, as a decorator, or an instance); its name must be new."""
    instance = kind() if isinstance(kind, type) else kind
    KINDS.add(instance.name, instance)
    return kind


def ordered() -> list[Kind]:
    return sorted(KINDS.values(), key=lambda k: (k.order, k.name))


def kind_names() -> str:
    """Every kind as ``--output-kind`` takes it: ``classes, ..., detections:yolo[:THRESHOLD], ...``."""
    return ", ".join(f"{k.name}{'[:THRESHOLD]' if k.default_threshold is not None else ''}" for k in ordered())


def kind_help() -> str:
    """Every kind as ``--output-kind`` takes it, with how it is judged."""
    return ", ".join(f"{k.name}{'[:THRESHOLD]' if k.default_threshold is not None else ''} ({k.help})"
                     for k in ordered())


def parse_kind(spec: str) -> tuple[str, float | None]:
    """``detections:yolo:0.3`` -> ("detections:yolo", 0.3); refuses unknown kinds."""
    spec = spec.strip()
    if spec in KINDS:
        return spec, None
    name, _, text = spec.rpartition(":")
    kind = KINDS.get(name)
    if kind is None:
        raise EdgekitError(f"unknown output kind {spec!r}", hint=f"use one of: {kind_help()}")
    if kind.default_threshold is None:
        raise EdgekitError(f"--output-kind {spec}: {name} takes no score threshold", hint=f"write {name}")
    try:
        threshold = float(text)
    except ValueError:
        raise EdgekitError(f"--output-kind {spec}: {text!r} is not a score threshold",
                           hint=f"e.g. {name}:{kind.default_threshold:g}") from None
    if not 0 < threshold < 1:  # NaN fails this too
        raise EdgekitError(f"--output-kind {spec}: the score threshold must be between 0 and 1")
    return name, threshold


def resolve_kinds(specs: Mapping[str, str], outputs: list[str],
                  shapes: Mapping[str, list[int]] | None = None) -> dict[str, str]:
    """``--output-kind`` values by output name; a bare KIND applies to a one-output model. Checked
    against the outputs' ranks before anything is built."""
    resolved = {}
    for name, spec in specs.items():
        kind, _ = parse_kind(spec)
        if name == "":
            if len(outputs) != 1:
                raise EdgekitError(f"--output-kind {spec}: the model has {len(outputs)} outputs ({', '.join(outputs)})",
                                   hint="name the output: --output-kind OUTPUT=KIND")
            name = outputs[0]
        if name not in outputs:
            raise EdgekitError(f"--output-kind {name}={spec}: the model has no output {name!r}",
                               hint=f"its outputs: {', '.join(outputs)}")
        rank = len((shapes or {}).get(name, []))
        problem = KINDS[kind].rank_error(rank) if rank else None
        if problem:
            raise EdgekitError(f"--output-kind {spec}: output {name!r} has rank {rank}, {problem[0]}", hint=problem[1])
        resolved[name] = spec
    return resolved


def infer(name: str, reference: np.ndarray, structure: dict[str, Any] | None, labelled: bool = False,
          given: str | None = None) -> OutputKind:
    """The kind of output ``name`` from ``--output-kind`` (``given``), labels, its graph
    ``structure`` and its float values on the validation samples (``reference``, batch first)."""
    structure = structure or {}
    groups, groups_axis = _groups(reference, structure)
    joiner = (structure.get("levels") or {}).get("node") or structure.get("node")
    common = {"groups": groups if len(groups) > 1 else (), "groups_axis": groups_axis if len(groups) > 1 else None,
              "joined_by": joiner if len(groups) > 1 else None}
    if given is not None:
        kind, threshold = parse_kind(given)
        return OutputKind(name, kind, KINDS[kind].given_axis(reference, structure, groups_axis),
                          "as --output-kind says", "--output-kind", threshold=threshold, **common)
    labels = next((k for k in ordered() if k.takes_labels), None)
    if labelled and labels is not None:
        return OutputKind(name, labels.name, reference.ndim - 1, "class labels belong to it", "labels", **common)
    graph = Graph(name, reference, structure, groups, groups_axis)
    for kind in ordered():
        found = kind.from_graph(graph)
        if found is not None:
            return OutputKind(**{**common, "output": name, "source": "graph", **found})
    for kind in ordered():
        inferred = kind.from_values(name, reference, common)
        if inferred is not None:
            return inferred
    raise EdgekitError(f"output {name!r}: no output kind claims it", hint="give --output-kind")


def evaluate(spec: str, reference: np.ndarray, candidate: np.ndarray, targets: np.ndarray | None,
             max_accuracy_drop_pp: float, axis: int | None = None) -> TaskResult | None:
    """The task metric of one output kind; None for a kind judged by SQNR alone. ``axis``: the
    axis its task reads (default: the last)."""
    name, threshold = parse_kind(spec)
    kind = KINDS[name]
    return kind.evaluate(reference, candidate, targets, max_accuracy_drop_pp, axis,
                         threshold if threshold is not None else kind.default_threshold)


def show_value(key: str, value: float | None) -> str:
    """A task metric's number as the table and the error line print it (fractions as percent)."""
    if value is None:
        return "n/a"
    if key.endswith("_pp"):
        return f"{value:.2f} pp"
    kinds = KINDS.values()
    if "cosine" in key or any(key in k.fine for k in kinds):
        return f"{value:.4f}"
    if any(key in k.counts for k in kinds):
        return f"{value:.0f}"
    if not any(key in k.plain for k in kinds) and 0 <= value <= 1:
        return f"{100 * value:.1f}%"
    return f"{value:.4g}"


def argmax_decides(kind: OutputKind | None) -> bool:
    """Whether argmax over the kind's axis is its decision (top-1 agreement means something)."""
    return kind is not None and kind.kind in KINDS and KINDS[kind.kind].argmax_decides


def _groups(reference: np.ndarray, structure: dict[str, Any]) -> tuple[tuple[Group, ...], int | None]:
    """The Concat's parts as groups along its axis; adjacent parts of one op and magnitude merge."""
    if structure.get("op") != "concat" or structure.get("axis") is None or not structure.get("parts"):
        return (), None
    axis = int(structure["axis"])
    if axis <= 0 or axis >= reference.ndim:  # joined along the batch, or an axis the output no longer has
        return (), None
    sizes = [p.get("size") for p in structure["parts"]]
    total = reference.shape[axis]
    unknown = [i for i, s in enumerate(sizes) if s is None]
    if len(unknown) == 1:
        sizes[unknown[0]] = total - sum(s for s in sizes if s is not None)
    if any(s is None or s < 0 for s in sizes) or sum(sizes) != total:
        return (), None
    parts, start = [], 0
    for size, part in zip(sizes, structure["parts"]):
        if size:
            parts.append(Group(start, start + size, str(part.get("op") or "values")))
        start += size
    merged: list[Group] = []
    for part in parts:
        if merged and merged[-1].op == part.op and _same_magnitude(reference, axis, merged[-1], part):
            merged[-1] = Group(merged[-1].start, part.stop, part.op)
        else:
            merged.append(part)
    return tuple(merged), axis


def _same_magnitude(reference: np.ndarray, axis: int, a: Group, b: Group) -> bool:
    ra = float(np.max(np.abs(np.take(reference, range(a.start, a.stop), axis=axis)), initial=0))
    rb = float(np.max(np.abs(np.take(reference, range(b.start, b.stop), axis=axis)), initial=0))
    low, high = sorted((max(ra, 1e-12), max(rb, 1e-12)))
    return high / low <= MAGNITUDE_RATIO


for _module in discover(__name__, os.path.dirname(__file__), folders=False, skip=("base",)):
    pass  # importing a kind's module registers it (@register)

__all__ = ["KINDS", "Group", "Kind", "OutputKind", "TaskResult", "evaluate", "infer", "kind_help", "kind_names", "ordered",
           "parse_kind", "register", "resolve_kinds", "show_value"]
