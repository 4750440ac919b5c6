"""What each output is, and so how it is judged: inferred from the graph, then from the values.

Kinds and their gates (``tasks.py``):

- ``classes``: class scores (a softmax, labels, or rows of probabilities): top-1 agreement with
  float, accuracy with labels;
- ``bins``: per-bin probabilities (a sigmoid over ordered bins: pitch, angle, age; at least 16
  bins, most rows with one peak): argmax peak (CREPE-style weighted mean around the argmax)
  within one bin of float's, and the peak's height within 0.1 of float's;
- ``multilabel``: independent sigmoid yes/no labels (the float values mostly near 0 or 1):
  per-label decisions at 0.5 agree with float's, overall and label by label;
- ``detections:yolo`` / ``detections:yolov5``: boxes joined to sigmoid scores by a Concat:
  detection recall, precision and class agreement against float;
- ``segmentation``: per-pixel class scores (softmax over a class axis, or a sigmoid map): IoU;
- ``embedding``: L2-normalised vectors: cosine;
- ``values``: anything else: SQNR.

Structure comes from ``structure.py`` (the source's graph); values decide only where the graph
says nothing (rows of probabilities summing to 1, unit-norm rows). ``--output-kind`` always wins.
Slices that carry different quantities (``groups``) come from the Concat that forms the output,
on its real axis; adjacent parts of one op and one magnitude are one group.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any

import numpy as np

MAGNITUDE_RATIO = 10.0  # parts of one op whose value ranges differ more than this are different quantities
UNIT_NORM_TOLERANCE = 1e-3  # rows whose L2 norm is 1 within this: a normalised embedding
MIN_EMBEDDING_DIM = 8
# sigmoid units are ordered bins (pitch, angle, age) only with this many units, most rows peaked:
# a few sigmoid units make the peak rule vacuous (3 "bins" are always within one bin)
MIN_BINS = 16
MIN_PEAKED_ROWS = 0.5
# sigmoid units are yes/no labels when the float model decides: most values below 0.2 or above 0.8
DECISIVE = 0.8
MIN_DECISIVE = 0.75


@dataclass(frozen=True)
class Group:
    """A slice ``start:stop`` of the output along ``OutputKind.groups_axis`` holding one quantity."""

    start: int
    stop: int
    op: str  # sigmoid | softmax | l2norm | values | constant

    @property
    def what(self) -> str:
        return {"sigmoid": "sigmoid", "softmax": "softmax", "values": "value", "constant": "constant",
                "l2norm": "normalised"}.get(self.op, self.op)


@dataclass(frozen=True)
class OutputKind:
    """One output's kind, the axis its task reads, where that came from, and its groups."""

    output: str
    kind: str  # classes | bins | multilabel | detections:yolo | detections:yolov5 | segmentation | embedding | values
    axis: int | None  # the class / bin / box-attribute / embedding axis
    evidence: str
    source: str  # graph | values | labels | --output-kind | none
    groups: tuple[Group, ...] = ()
    groups_axis: int | None = None
    joined_by: str | None = None  # the node joining the groups: what --keep-float names first
    threshold: float | None = None  # detections, multilabel: the score threshold (--output-kind ...:0.3)

    @property
    def spec(self) -> str:
        return self.kind if self.threshold is None else f"{self.kind}:{self.threshold:g}"

    def describe(self) -> str:
        return f"{self.output}: {self.kind}, {self.evidence}"

    def to_dict(self) -> dict[str, Any]:
        found = asdict(self)
        found["groups"] = [asdict(g) for g in self.groups]
        return found

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> OutputKind:
        groups = tuple(Group(**g) for g in data.get("groups") or ())
        return cls(**{**data, "groups": groups})


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
        from .tasks import parse_kind

        kind, threshold = parse_kind(given)
        return OutputKind(name, kind, _given_axis(kind, reference, structure, groups_axis), "as --output-kind says",
                          "--output-kind", threshold=threshold, **common)
    if labelled:
        return OutputKind(name, "classes", reference.ndim - 1, "class labels belong to it", "labels", **common)
    found = _from_structure(name, reference, structure, groups, groups_axis)
    if found is not None:
        return OutputKind(**{**common, **found})
    return _from_values(name, reference, common)


def _given_axis(kind: str, reference: np.ndarray, structure: dict[str, Any], groups_axis: int | None) -> int | None:
    if kind.startswith("detections"):
        return groups_axis if groups_axis is not None else None
    if kind in ("segmentation", "classes", "bins", "multilabel") and structure.get("op") in ("softmax",):
        return structure.get("axis")
    if kind == "segmentation" and reference.ndim == 4:
        return 1 if reference.shape[1] < reference.shape[3] else 3
    return reference.ndim - 1 if reference.ndim >= 2 else None


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


def _from_structure(name: str, reference: np.ndarray, structure: dict[str, Any], groups: tuple[Group, ...],
                    groups_axis: int | None) -> dict[str, Any] | None:
    op, axis, rank = structure.get("op"), structure.get("axis"), reference.ndim
    node = structure.get("node") or "the output"
    shape = list(reference.shape)
    if op == "concat" and len(groups) > 1 and groups_axis is not None:
        detection = _detection(name, structure, groups, groups_axis, rank, shape)
        if detection is not None:
            return detection
        listed = ", ".join(f"rows {g.start}..{g.stop - 1} ({g.what})" for g in groups)
        return {"output": name, "kind": "values", "axis": None, "source": "graph",
                "evidence": f"Concat(axis={groups_axis}) of {len(groups)} quantities: {listed}; each judged by SQNR"}
    if op == "softmax" and axis is None and rank == 2:  # a softmax before a flatten: classes on axis 1
        axis = 1
    if op == "softmax" and axis is not None and rank >= 2:
        if rank == 4 and axis in (1, 3):
            return {"output": name, "kind": "segmentation", "axis": axis, "source": "graph",
                    "evidence": f"{_shape(shape)}, Softmax over axis {axis} ({shape[axis]} classes per pixel) at {node}"}
        return {"output": name, "kind": "classes", "axis": axis, "source": "graph",
                "evidence": f"{_shape(shape)}, Softmax over axis {axis} ({shape[axis]} classes) at {node}"}
    if op == "sigmoid" and rank >= 2:
        if rank == 4:
            channel = 1 if shape[1] <= shape[3] else 3
            return {"output": name, "kind": "segmentation", "axis": channel, "source": "graph",
                    "evidence": f"{_shape(shape)}, Sigmoid map ({shape[channel]} mask channel(s) on axis {channel}, "
                                f"each pixel foreground at >= 0.5) at {node}"}
        if shape[-1] == 1:
            return {"output": name, "kind": "classes", "axis": rank - 1, "source": "graph",
                    "evidence": f"{_shape(shape)}, one Sigmoid probability (a yes/no decision at 0.5) at {node}"}
        return _sigmoid_units(name, reference, shape, rank, node)
    if op == "l2norm" and rank == 2 and shape[1] >= 2:
        return {"output": name, "kind": "embedding", "axis": 1, "source": "graph",
                "evidence": f"{_shape(shape)}, L2-normalised vectors at {node}"}
    return None


def _sigmoid_units(name: str, reference: np.ndarray, shape: list[int], rank: int, node: str) -> dict[str, Any]:
    """Several sigmoid units: ordered bins only with the evidence (many units, one peak per row,
    as a pitch or angle head gives); else independent yes/no labels when the float model's
    values are decisions (near 0 or 1), else plain values (a regression squashed into 0..1)."""
    units = shape[-1]
    peaked = _single_peak_fraction(reference)
    if units >= MIN_BINS and peaked >= MIN_PEAKED_ROWS:
        return {"output": name, "kind": "bins", "axis": rank - 1, "source": "graph",
                "evidence": f"{_shape(shape)}, Sigmoid over {units} ordered bins on axis {rank - 1} at {node} "
                            f"({100 * peaked:.0f}% of samples have one peak)"}
    decisive = float(np.mean((reference <= 1 - DECISIVE) | (reference >= DECISIVE))) if reference.size else 0.0
    why = (f"{units} units (bins need >= {MIN_BINS})" if units < MIN_BINS
           else f"{100 * peaked:.0f}% of samples have one peak (bins need {100 * MIN_PEAKED_ROWS:.0f}%)")
    if decisive >= MIN_DECISIVE:
        return {"output": name, "kind": "multilabel", "axis": rank - 1, "source": "graph",
                "evidence": f"{_shape(shape)}, Sigmoid over {units} independent labels at {node} ({why}; "
                            f"{100 * decisive:.0f}% of the float values are decisions near 0 or 1): each label "
                            f"yes at >= 0.5"}
    return {"output": name, "kind": "values", "axis": None, "source": "graph",
            "evidence": f"{_shape(shape)}, Sigmoid over {units} units at {node} ({why}; only {100 * decisive:.0f}% "
                        "of the float values are near 0 or 1: not yes/no labels): judged by SQNR "
                        "(--output-kind multilabel or bins names its task)"}


def _single_peak_fraction(reference: np.ndarray) -> float:
    """The share of rows whose mass lies mostly around their argmax (one peak, as ordered bins give)."""
    if reference.ndim < 2 or not reference.size:
        return 0.0
    from .tasks import PEAK_HALF_WIDTH  # the bins judging reads a peak within this many bins

    rows = np.clip(reference.reshape(-1, reference.shape[-1]).astype(np.float64), 0, None)
    width = max(2 * PEAK_HALF_WIDTH, rows.shape[1] // 20)
    index = np.arange(rows.shape[1])
    near = np.abs(index[None, :] - rows.argmax(axis=1)[:, None]) <= width
    total = rows.sum(axis=1)
    inside = np.where(near, rows, 0).sum(axis=1)
    return float(np.mean(inside >= 0.5 * np.where(total > 0, total, np.inf)))


def _detection(name: str, structure: dict[str, Any], groups: tuple[Group, ...], axis: int, rank: int,
               shape: list[int]) -> dict[str, Any] | None:
    """Box rows first (4 of them, not a sigmoid), then sigmoid/softmax score rows: YOLO's head.
    An objectness row of its own before the class rows: YOLOv5's."""
    if rank not in (2, 3) or groups[0].op in ("sigmoid", "softmax"):
        return None
    box = groups[0]
    rest = groups[1:]
    if box.stop != 4 or not rest or any(g.op not in ("sigmoid", "softmax") for g in rest):
        return None
    raw = [p for p in structure["parts"] if p.get("size")]
    sizes = [int(p["size"]) for p in raw]
    boxes_end = 0
    i = 0
    while i < len(sizes) and boxes_end < 4:
        boxes_end += sizes[i]
        i += 1
    score_parts = sizes[i:]
    levels = structure.get("levels")
    # an objectness row of its own, or YOLOv5/v7's export: per-level [box | sigmoid(obj + classes)]
    # tensors joined on the anchor axis (YOLOv8 joins boxes and classes once, with no objectness)
    v5 = (len(score_parts) == 2 and score_parts[0] == 1 and score_parts[1] >= 1) or (
        levels is not None and len(score_parts) == 1 and score_parts[0] >= 2)
    kind = "detections:yolov5" if v5 else "detections:yolo"
    scores = shape[axis] - 4
    if rank == 3:
        layout = f"[N, {shape[axis]}, A]" if axis == 1 else f"[N, A, {shape[axis]}]"
    else:
        layout = f"[N, {shape[axis]}] (one box per sample)"
    what = f"1 objectness row and {scores - 1} class rows" if v5 else f"{scores} {rest[0].op} rows"
    evidence = f"YOLO{'v5' if v5 else ''} layout {layout}, from Concat(axis={axis}) of 4 box rows and {what}"
    if levels is not None:
        evidence += f", {levels['count']} levels joined on axis {levels['axis']} by {levels['node']}"
    return {"output": name, "kind": kind, "axis": axis, "source": "graph", "evidence": evidence}


def _from_values(name: str, reference: np.ndarray, common: dict[str, Any]) -> OutputKind:
    """No graph evidence: probabilities that sum to 1 on an axis, or unit-norm rows; else values."""
    shape = list(reference.shape)
    if reference.size and reference.ndim >= 2:
        for axis in ([reference.ndim - 1] + ([1] if reference.ndim == 4 else [])):
            if shape[axis] >= 2 and _sums_to_one(reference, axis):
                if reference.ndim == 4:
                    return OutputKind(name, "segmentation", axis, f"{_shape(shape)}, values 0..1 summing to 1 over "
                                      f"axis {axis} (per-pixel class probabilities)", "values", **common)
                return OutputKind(name, "classes", axis, f"{_shape(shape)}, rows of probabilities summing to 1 "
                                  f"over axis {axis} ({shape[axis]} classes)", "values", **common)
        if reference.ndim == 2 and shape[1] >= MIN_EMBEDDING_DIM:
            norms = np.linalg.norm(reference.astype(np.float64), axis=1)
            if len(norms) and np.all(np.abs(norms - 1) <= UNIT_NORM_TOLERANCE):
                return OutputKind(name, "embedding", 1, f"{_shape(shape)}, every row has L2 norm 1 (normalised "
                                  "vectors)", "values", **common)
    if common.get("groups"):
        listed = ", ".join(f"rows {g.start}..{g.stop - 1} ({g.what})" for g in common["groups"])
        return OutputKind(name, "values", None, f"Concat(axis={common['groups_axis']}) of {listed}; each judged by "
                          "SQNR", "graph", **common)
    return OutputKind(name, "values", None, f"{_shape(shape)}, no softmax, sigmoid, normalisation or labels: judged "
                      "by SQNR (--output-kind or --labels name its task)", "none", **common)


def _sums_to_one(reference: np.ndarray, axis: int) -> bool:
    values = reference.astype(np.float64)
    if values.min() < 0 or values.max() > 1 + 1e-6:
        return False
    return bool(np.allclose(values.sum(axis=axis), 1.0, atol=1e-2))


def _shape(shape: list[int]) -> str:
    return "[N, " + ", ".join(str(d) for d in shape[1:]) + "]"
