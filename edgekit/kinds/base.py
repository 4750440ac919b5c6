"""What an output kind is (``Kind``), what inferring one yields (``OutputKind``) and what judging
one yields (``TaskResult``).

A kind is one module in ``edgekit/kinds/`` holding a ``Kind`` subclass registered with
``@register`` (``edgekit.kinds``): its inference rules (from the graph, from the float values),
its gate (``evaluate``: the task metric, its floor and its margin), how its numbers print, and
what ``--output-kind`` accepts for it. The packager, the gates, the tables and the CLI ask the
registry; none of them names a kind.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass
from typing import Any, NamedTuple

import numpy as np

BINARY_THRESHOLD = 0.5  # a sigmoid probability (or a mask pixel) is "yes" at 0.5


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
    kind: str  # a registered kind's name (edgekit.kinds.KINDS)
    axis: int | None  # the class / bin / box-attribute / embedding axis
    evidence: str
    source: str  # graph | values | labels | --output-kind | none
    groups: tuple[Group, ...] = ()
    groups_axis: int | None = None
    joined_by: str | None = None  # the node joining the groups: what --keep-float names first
    threshold: float | None = None  # a kind that takes one: the score threshold (--output-kind KIND:0.3)

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


Z_95 = 1.959963984540054  # the two-sided 95% normal quantile (Wilson's interval)


@dataclass(frozen=True)
class Rate:
    """The evidence behind one rate gate: ``k`` of ``n`` units (samples, rows, boxes, label
    decisions) agree, against a ``floor``. ``tolerance`` is the share of units the gate allows to
    disagree (``1 - floor`` for an agreement gate; the accuracy drop for an accuracy gate whose
    floor is float's own accuracy minus it). A gate is *decidable* on ``n`` units only when it
    allows at least one disagreement there: a 99% gate on 18 samples passes at 18/18 and fails at
    17/18, so the sample cannot tell 99% from 94% (docs/validation.md, "How much evidence")."""

    name: str  # the value it backs in TaskResult.values (top1_agreement, recall, ...)
    k: int
    n: int
    floor: float
    tolerance: float
    unit: str = "samples"  # what is counted: samples | rows | float boxes | INT8 boxes | label decisions | lines

    @property
    def value(self) -> float:
        return self.k / self.n if self.n else 1.0

    @property
    def passed(self) -> bool:
        return self.value >= self.floor - 1e-12

    @property
    def needed(self) -> int | None:
        """The fewest units on which the gate allows one disagreement; None: it allows none at any
        size (``--max-accuracy-drop 0`` asks for exact agreement, which any sample can refute)."""
        if self.tolerance <= 1e-12:
            return None
        return int(math.ceil(1 / self.tolerance - 1e-9))

    @property
    def decidable(self) -> bool:
        return self.needed is None or self.n >= self.needed

    @property
    def interval(self) -> tuple[float, float]:
        """Wilson's 95% score interval of the rate (good at k = n, where the normal one collapses)."""
        return wilson(self.k, self.n)

    def to_dict(self) -> dict[str, Any]:
        low, high = self.interval
        return {"name": self.name, "k": self.k, "n": self.n, "unit": self.unit, "value": round(self.value, 6),
                "ci95": [round(low, 6), round(high, 6)], "floor": round(self.floor, 6),
                "needed": self.needed, "decidable": self.decidable}

    def text(self) -> str:
        low, high = self.interval
        return f"{self.k}/{self.n} {self.unit} (95% CI {100 * low:.1f}-{100 * high:.1f}%)"


def wilson(k: int, n: int, z: float = Z_95) -> tuple[float, float]:
    """Wilson's score interval for ``k`` successes in ``n`` trials; (0, 1) for ``n == 0``."""
    if n <= 0:
        return 0.0, 1.0
    p = k / n
    denominator = 1 + z * z / n
    centre = (p + z * z / (2 * n)) / denominator
    half = z * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n)) / denominator
    return max(0.0, centre - half), min(1.0, centre + half)


def agreement(name: str, agree: Any, floor: float, unit: str = "samples") -> Rate:
    """The rate of True in ``agree`` (an array of per-unit agreements) against ``floor``."""
    flat = np.asarray(agree, dtype=bool).reshape(-1)
    return Rate(name, int(flat.sum()), int(flat.size), floor, 1 - floor, unit)


@dataclass(frozen=True)
class TaskResult:
    """One task metric on one output: named numbers, whether they pass, and the rule they met."""

    task: str
    values: dict[str, float]
    passed: bool | None  # None: the metric reports numbers only
    rule: str
    # how far the gated numbers are above their floors (the worst one; negative: failing). What
    # the search compares between attempts: a rebuild is kept only when this improves.
    margin: float | None = None
    # the counts behind every gated rate (k of n, 95% interval, whether n can decide the gate)
    evidence: tuple[Rate, ...] = ()

    @property
    def undecidable(self) -> tuple[Rate, ...]:
        """The gated rates whose sample is too small to decide them (said only of a pass: a rate
        below its floor is refused whatever the sample)."""
        return tuple(r for r in self.evidence if not r.decidable)

    def to_dict(self) -> dict[str, Any]:
        found = asdict(self)
        found["evidence"] = [r.to_dict() for r in self.evidence]
        return found


class Graph(NamedTuple):
    """What the source's graph says of one output (``comparison.structure``), with its float values."""

    name: str
    reference: np.ndarray  # the float model's values on the validation samples, batch first
    structure: dict[str, Any]  # {"op": softmax | sigmoid | l2norm | concat | values, "axis", "node", ...}
    groups: tuple[Group, ...]  # a Concat's quantities along groups_axis (more than one: joined quantities)
    groups_axis: int | None

    @property
    def op(self) -> str | None:
        return self.structure.get("op")

    @property
    def node(self) -> str:
        return self.structure.get("node") or "the output"

    @property
    def shape(self) -> list[int]:
        return list(self.reference.shape)


class Kind:
    """One output kind. Subclasses set ``name`` and ``help`` and override what applies."""

    name = ""
    help = ""  # for --output-kind's help: what it is and how it is judged
    order = 50  # rules are asked in this order (lower first); the catch-all ``values`` is last
    default_threshold: float | None = None  # a kind that takes ``KIND:THRESHOLD`` (a score threshold)
    takes_labels = False  # labels (--labels, an ImageFolder's classes) make an output this kind
    argmax_decides = False  # argmax over its axis is the decision (the top-1 column of the tables)
    counts: tuple[str, ...] = ()  # its numbers printed as whole counts
    fine: tuple[str, ...] = ()  # its numbers printed with 4 decimals
    plain: tuple[str, ...] = ()  # its numbers printed as they are (thresholds)
    counts_units = False  # its gate is rates of counted units (TaskResult.evidence: k of n)

    def from_graph(self, graph: Graph) -> dict[str, Any] | None:
        """The kind from the graph's evidence: ``OutputKind`` fields (kind, axis, evidence,
        source), or None when the graph does not say this kind."""
        return None

    def from_values(self, name: str, reference: np.ndarray, common: dict[str, Any]) -> OutputKind | None:
        """The kind from the float values alone, where the graph said nothing."""
        return None

    def given_axis(self, reference: np.ndarray, structure: dict[str, Any], groups_axis: int | None) -> int | None:
        """The axis the task reads when ``--output-kind`` names this kind."""
        return last_axis(reference)

    def rank_error(self, rank: int) -> tuple[str, str] | None:
        """Why an output of this rank cannot be this kind, and the fix (said before anything is
        built), or None."""
        return None

    def evaluate(self, reference: np.ndarray, candidate: np.ndarray, targets: np.ndarray | None,
                 max_accuracy_drop_pp: float, axis: int | None, threshold: float | None) -> TaskResult | None:
        """The task metric on INT8 outputs against float's; None: judged by SQNR alone."""
        return None


def last_axis(reference: np.ndarray) -> int | None:
    return reference.ndim - 1 if reference.ndim >= 2 else None


def softmax_axis_or_last(reference: np.ndarray, structure: dict[str, Any]) -> int | None:
    """A Softmax's own axis where the graph has one, else the last."""
    if structure.get("op") == "softmax":
        return structure.get("axis")
    return last_axis(reference)


def rows(array: np.ndarray, axis: int | None) -> np.ndarray:
    """The array with ``axis`` (default: the last) moved last and every other position as a row."""
    axis = array.ndim - 1 if axis is None else axis % array.ndim
    moved = np.moveaxis(array, axis, -1)
    return moved.reshape(-1, moved.shape[-1])


def shape_text(shape: list[int]) -> str:
    return "[N, " + ", ".join(str(d) for d in shape[1:]) + "]"
