"""The one owner of layer names: what a precision plan's names mean in each converter's vocabulary.

A plan speaks the source's vocabulary end to end: a Keras layer (``conv2``), an ONNX node of the
source (``/conv/Conv``, ``Conv_3`` where the graph left it unnamed), a PyTorch module path
(``encoder.0.attn``), or a node of the simulated graph every format shares. Converters take other
names (``Accepts.names``):

* ``SCOPE``: converted ops named under the source's scopes (TF and LiteRT: ``model/conv2_1/Conv2D``,
  fused names joined by ``;``; tf2onnx keeps them in ONNX node names) -- a layer matches its scope;
* ``ONNX_NODE``: the nodes of an ONNX graph; where the graph was exported from PyTorch, each node
  records the module it came from (``pkg.torch.onnx.name_scopes``), so a module names its nodes;
* ``MODULE``: a PyTorch module path, or a traced op of a ``forward`` (``cat``) where the converter
  keeps one by name (``Accepts.names_ops``); a module rebuilt from ONNX names each submodule after
  its node (``attribute_name``).

``LayerNames`` is built once per model (from the source's layers and the ONNX form's module
record) and ``LayerNames.resolve(plan, kind)`` is the only translation of a plan; ``in_source``
groups a converter's names back under the source's for the manifest's record. The rest of the
module are the matching rules the formats read their artifacts back with. Below the steps, the
formats and the simulation, which all name layers this way.

A PyTorch source lists no layers of its own: its plans name modules (``encoder.0.attn``) and a
``forward``'s own ops by their traced names (``cat``), and so does the simulation searching its
ONNX form (``plan_layer``), so the plan every format builds and the manifest records is the one
its user would write."""

from __future__ import annotations

import ast
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from functools import cached_property
from typing import Any

# the name kinds a converter takes (``formats.base.Accepts.names``)
SCOPE = "scope"
ONNX_NODE = "onnx-node"
MODULE = "module"
NAME_KINDS = (SCOPE, ONNX_NODE, MODULE)

OP_PREFIX = "op:"  # a traced op outside any module, in ``LayerNames.module_paths``
TORCH_SCOPES = "pkg.torch.onnx.name_scopes"  # the node metadata torch.onnx.export writes: module path, then op

_WRAPPER = re.compile(r"(Stateful)?PartitionedCall(_\d+)?|Func|input|_\d+")
_RESERVED = {"forward", "steps", "constants", "input_names", "output_names", "example_outputs", "training",
             "step_modules", "loop_modules"}


@dataclass(frozen=True)
class LayerNames:
    """A model's layer vocabulary: the source's layers (Keras layers, ONNX nodes; empty where the
    source lists none, a PyTorch program's modules being its names) and, where its ONNX form was
    exported from PyTorch, each ONNX node's module (``""``: a node with no module recorded)."""

    layers: tuple[str, ...] = ()
    module_paths: Mapping[str, str] = field(default_factory=dict)

    @classmethod
    def of_onnx(cls, model: Any, layers: Iterable[str] = ()) -> LayerNames:
        """The names of an ONNX graph (a loaded ``ModelProto``): its nodes' modules read from the
        metadata ``torch.onnx.export`` writes; none for graphs of other exporters."""
        return cls(tuple(layers), onnx_module_paths(model))

    @property
    def by_module(self) -> bool:
        """Whether plans name this model's layers by PyTorch module: a source listing no layers
        of its own whose ONNX form recorded the module of each node (a PyTorch program)."""
        return not self.layers and any(self.module_paths.values())

    @cached_property
    def traced_ops(self) -> frozenset[str]:
        """The ops written in a ``forward`` itself, by their traced names (``cat``, ``add_1``)."""
        return frozenset(path.removeprefix(OP_PREFIX) for path in self.module_paths.values()
                         if path.startswith(OP_PREFIX))

    @classmethod
    def for_plan(cls, model: Any, layers: Iterable[str]) -> LayerNames:
        """A graph's names as a plan speaks them: the source's ``layers``, or where it lists none
        (a PyTorch program) the modules its ONNX export recorded; the record is read only then,
        not on every simulated try of a model whose layers are its own."""
        layers = tuple(layers)
        return cls(layers) if layers else cls.of_onnx(model)

    # --- the translation -------------------------------------------------------------------

    def resolve(self, plan: Mapping[str, str], kind: str, names_ops: bool = False) -> tuple[dict[str, str], list[str]]:
        """``plan`` (name -> precision, in the source's vocabulary) in the names a converter of
        ``kind`` takes, and the plan's names it cannot take (unplaced: said, never dropped
        silently). ``names_ops``: a ``MODULE`` converter that keeps a traced op by name."""
        if kind not in NAME_KINDS:
            raise ValueError(f"unknown layer name kind {kind!r} (one of {', '.join(NAME_KINDS)})")
        own: dict[str, str] = {}
        unplaced: list[str] = []
        for name, precision in plan.items():
            names = self._in(name, kind, names_ops)
            if not names:
                unplaced.append(name)
            for found in names:
                own.setdefault(found, precision)
        return own, unplaced

    def _in(self, name: str, kind: str, names_ops: bool) -> list[str]:
        if kind == MODULE:
            if name not in self.module_paths:  # a module path or a traced op (the plan's names on a PyTorch source)
                return [] if name in self.traced_ops and not names_ops else [name]
            path = self.module_paths[name]
            if not path or (path.startswith(OP_PREFIX) and not names_ops):
                return []
            return [path.removeprefix(OP_PREFIX)]
        if kind == ONNX_NODE and name not in self.module_paths:
            op = OP_PREFIX + name
            nodes = [node for node, path in self.module_paths.items()
                     if path == op or (path and not path.startswith(OP_PREFIX) and within(path, name))]
            return nodes or [name]  # a Keras layer, a scope: the converter matches nodes by it
        return [name]

    def in_source(self, plan: Mapping[str, str]) -> dict[str, tuple[str, ...]]:
        """A plan in a converter's names (``resolve``'s result: ONNX nodes of a PyTorch source)
        grouped back under the source's: each module or traced op whose every node the plan holds
        at one precision by its own name, any other entry as it is. Resolving the source's names
        gives the same nodes again, so the manifest records one vocabulary and a later run that
        takes the record builds the same artifact. Source name -> the plan entries it stands for."""
        found: dict[str, tuple[str, ...]] = {}
        for name, precision in plan.items():
            path = self.module_paths.get(name, "") if self.by_module else ""
            source = path.removeprefix(OP_PREFIX)
            if source in found:
                continue
            nodes = self._in(source, ONNX_NODE, True) if source else []
            if nodes and all(plan.get(node) == precision for node in nodes):
                found[source] = tuple(nodes)
            else:
                found.setdefault(name, (name,))
        return found

    def resolve_costs(self, costs: Mapping[str, float], links: Iterable[tuple[str, str, float]],
                      kind: str) -> tuple[dict[str, float], tuple[tuple[str, str, float], ...]]:
        """Per-layer costs and the tensors between layers (elements) in ``kind``'s names, so a
        format's own search weighs its layers too: a module weighs the nodes it became, a link
        inside one name is no link; what ``kind`` cannot name is left out."""
        found: dict[str, float] = {}
        for name, value in costs.items():
            for own in self._in(name, kind, names_ops=True)[:1]:
                found[own] = found.get(own, 0.0) + value
        joined: dict[tuple[str, str], float] = {}
        for a, b, elements in links:
            pair = (next(iter(self._in(a, kind, True)), ""), next(iter(self._in(b, kind, True)), ""))
            if all(pair) and pair[0] != pair[1]:
                joined[pair] = joined.get(pair, 0.0) + elements
        return found, tuple((a, b, e) for (a, b), e in joined.items())

    # --- reading converted names back ------------------------------------------------------

    def layer_of(self, name: str) -> str:
        """The source layer a converted op or tensor came from (TF adds ``_1`` suffixes to layer
        scopes); without a layer list (a SavedModel) the scope just above the op."""
        return layer_of(name, self.layers)

    def plan_layer(self, node: str) -> str:
        """The plan's name for a node of the simulated graph: its module or traced op where the
        source is a PyTorch program (the node itself where its export recorded neither), the node
        itself where the source names its nodes (an ONNX source) or lists no layers, else the layer
        it came from; "" when it belongs to none (no plan could name it)."""
        if self.by_module:
            return self.module_paths.get(node, "").removeprefix(OP_PREFIX) or node
        if not self.layers or node in self.layers:
            return node
        found = layer_of(node, self.layers)
        return found if found in self.layers else ""

    def module_of(self, node: str) -> str:
        """The module (or ``op:``-prefixed traced op) an ONNX node was exported from; "" if none."""
        return self.module_paths.get(node, "")

    def attributes(self, node_names: Iterable[str]) -> dict[str, str]:
        """Submodule name of a module rebuilt from ONNX -> the plan's name for it: the node itself
        where the source names its nodes, else the layer it came from (``model/conv2/Conv2D`` ->
        ``conv2``), so a plan in the source's vocabulary reaches every submodule of its layer."""
        known = set(self.layers)
        found: dict[str, str] = {}
        for node in node_names:
            layer = node if not known or node in known else layer_of(node, self.layers)
            found.setdefault(attribute_name(node), layer if layer in known else node)
        return found

    def original(self, attribute: str) -> str:
        """The source's name of a rebuilt submodule (its ONNX node), or ``attribute`` itself."""
        return original_names(self.layers).get(attribute, attribute)


# --- the rules ------------------------------------------------------------------------------


def layer_of(tensor_name: str, layer_names: Iterable[str]) -> str:
    """The Keras layer a converted tensor came from (TF adds ``_1`` suffixes to layer scopes)."""
    known = set(layer_names)
    parts = tensor_name.split(";")[0].split("/")
    for part in parts[1:] + parts[:1]:
        if part in known:
            return part
        base = re.sub(r"_\d+$", "", part)
        if base in known:
            return base
    # no layer list (a SavedModel): the scope just above the op, below the call wrappers
    scopes = [p for p in parts[:-1] if not _WRAPPER.fullmatch(p)]
    return scopes[-1] if len(scopes) >= 2 else (scopes[0] if scopes else tensor_name)


def in_layer(node_name: str, layer: str, separator: str = "/") -> bool:
    """Whether a converted node (``model/LAYER_1/op``, fused names joined by ';') comes from
    ``layer``. ``separator``: what the converter writes between scopes (Core ML writes ``_``)."""
    sep = re.escape(separator)
    pattern = re.compile(rf"(^|{sep}){re.escape(layer)}(_\d+)?({sep}|$)")
    return node_name == layer or any(pattern.search(part) for part in node_name.split(";"))


def within(path: str, module: str) -> bool:
    """Whether module ``path`` is ``module`` or below it (``down.0`` is within ``down``)."""
    return path == module or path.startswith(module + ".")


def inside(path: str, modules: set[str] | frozenset[str]) -> bool:
    """Whether module ``path`` is one of ``modules`` or below one: its prefixes looked up, not the
    modules scanned (an unrolled loop has thousands, a graph tens of thousands of nodes)."""
    parts = path.split(".")
    return any(".".join(parts[:end]) in modules for end in range(1, len(parts) + 1))


def traced_modules(node: Any) -> list[str]:
    """The module paths a ``torch.export`` graph node was traced inside (its ``nn_module_stack``)."""
    return [str(entry[0]) for entry in (node.meta.get("nn_module_stack") or {}).values()]


def onnx_module_paths(model: Any) -> dict[str, str]:
    """ONNX node -> the PyTorch module it was exported from (``conv1``, ``encoder.0.attn``), or for
    an op written in a ``forward`` itself its traced name prefixed ``op:`` (``op:cat``), ``""`` for
    a node with no record; empty for a graph no PyTorch exporter wrote."""
    found: dict[str, str] = {}
    for node in model.graph.node:
        scopes = next((p.value for p in node.metadata_props if p.key == TORCH_SCOPES), None)
        path = ""
        if scopes is not None:
            try:
                parts = [str(p) for p in ast.literal_eval(scopes)]
            except (ValueError, SyntaxError):
                parts = []
            dotted = ".".join(p for p in parts[1:-1] if p)
            path = dotted or (f"{OP_PREFIX}{parts[-1]}" if len(parts) >= 2 else "")
        found[node.name] = path
    return found if any(found.values()) else {}


def attribute_name(node_name: str) -> str:
    """An ONNX node name as a Python attribute (``/conv/Conv`` -> ``conv_Conv``): the name of its
    step's submodule in the module rebuilt from ONNX."""
    name = re.sub(r"\W+", "_", node_name).strip("_") or "node"
    if name[0].isdigit():
        name = f"n{name}"
    return f"{name}_" if name in _RESERVED or name.startswith(("const_", "derived_")) else name


def original_names(node_names: Iterable[str]) -> dict[str, str]:
    """Attribute name -> ONNX node name, for every node (the first where two share one)."""
    found: dict[str, str] = {}
    for name in node_names:
        found.setdefault(attribute_name(name), name)
    return found


def stable_node_name(op_type: str, index: int) -> str:
    """The name an unnamed ONNX node gets when the graph is read: its op type and position, so
    the same graph names it the same in every run and a plan can name it."""
    return f"{op_type}_{index}"


@dataclass(frozen=True)
class PlanReadBack:
    """Which entries of the plan an artifact was built with it holds at their precision or higher
    (read from the artifact itself), and which it does not: a miss is said, never assumed away."""

    landed: tuple[str, ...]
    missed: tuple[str, ...]

    def record(self) -> dict[str, list[str]]:
        return {"landed": list(self.landed), "missed": list(self.missed)}


_RAISED = {"float": ("float",), "int16": ("int16", "float")}  # a plan's precision, and what satisfies it


def read_back(plan: Mapping[str, str], held: Iterable[tuple[str, str, str]]) -> PlanReadBack:
    """``plan`` (name -> precision, in the names the artifact was built with) against what the
    artifact holds out of int8: ``(precision, layer, tensor)`` read from it. An entry landed when
    an op at its precision or higher belongs to it: by its layer (the entry, or a module below it)
    or by its tensor's scopes (TF and LiteRT name a fused op after its last layer, the others in
    the tensor's name joined by ``;``)."""
    held = list(held)
    landed, missed = [], []
    for name, precision in plan.items():
        ok = _RAISED.get(precision, (precision,))
        hit = any(p in ok and (within(layer, name) or bool(tensor and in_layer(tensor, name)))
                  for p, layer, tensor in held)
        (landed if hit else missed).append(name)
    return PlanReadBack(tuple(landed), tuple(missed))
