"""Shared node histories: the same provenance records as PyTorch's own, built without copies."""

from __future__ import annotations

import torch
import torch.fx.traceback as fx_traceback

from edgekit.conversion.torch_provenance import share_provenance


class _Small(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.conv = torch.nn.Conv2d(1, 4, 3)
        self.norm = torch.nn.LayerNorm(6)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.nn.functional.gelu(self.norm(self.conv(x))).softmax(-1)


def _histories() -> list[dict]:
    """Every node's provenance after export and two rounds of decomposition (passes over passes)."""
    program = torch.export.export(_Small().eval(), (torch.ones(1, 1, 8, 8),))
    program = program.run_decompositions().run_decompositions()
    return [[source.to_dict() for source in node.meta.get("from_node", [])] for node in program.graph.nodes]


def test_shared_histories_record_what_pytorchs_copies_record():
    installed = fx_traceback.NodeSource.__init__
    pytorchs = getattr(installed, "pytorch_init", installed)  # this process may have installed it already
    try:
        fx_traceback.NodeSource.__init__ = pytorchs
        copied = _histories()
        assert share_provenance()
        assert fx_traceback.NodeSource.__init__.pytorch_init is pytorchs
        shared = _histories()
    finally:
        fx_traceback.NodeSource.__init__ = installed
    assert any(copied), "the passes recorded no history: nothing was compared"
    # graph ids are the ids of graph objects, different in each export; the rest is identical
    assert _without_ids(shared) == _without_ids(copied)


def test_a_shared_history_is_not_copied():
    assert share_provenance()
    graph = torch.fx.Graph()
    first, second = graph.placeholder("x"), graph.placeholder("y")
    first.meta["from_node"] = [fx_traceback.NodeSource(second, "inner")]
    made = fx_traceback.NodeSource(first, "outer")
    assert made.from_node[0] is first.meta["from_node"][0]
    assert made.from_node is not first.meta["from_node"]  # its own list: appending to one leaves the other


def _without_ids(histories: list) -> list:
    def strip(record: dict) -> dict:
        return {**{k: v for k, v in record.items() if k != "graph_id"},
                "from_node": [strip(inner) for inner in record["from_node"]]}

    return [[strip(record) for record in node] for node in histories]
