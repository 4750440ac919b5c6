"""Blocks the search raises whole before single layers, and the budget that bounds it all."""

from __future__ import annotations

import math

from edgekit.packaging.search.blocks import blocks
from edgekit.packaging.search.budget import Budget
from edgekit.packaging.search_settings import DEFAULT_SETTINGS

YOLO = ["/model.0/conv/Conv", "/model.1/conv/Conv", "/model.2/cv1/conv/Conv", "/model.2/m.0/cv1/conv/Conv",
        "/model.2/m.0/cv2/conv/Conv", "/model.9/cv1/conv/Conv", "/model.22/cv2.0/cv2.0.0/conv/Conv",
        "/model.22/cv2.0/cv2.0.2/Conv", "/model.22/cv3.0/cv3.0.0/conv/Conv", "/model.22/cv3.0/cv3.0.2/Conv",
        "/model.22/Concat", "/model.22/Sigmoid"]


def test_a_detection_head_is_one_block_by_its_scope():
    worst = ["/model.22/Concat", "/model.22/cv3.0/cv3.0.2/Conv", "/model.22/Sigmoid"]
    found = blocks(worst, YOLO)
    names = [b.name for b in found]
    assert names[0] == "the 3 worst layers"
    head = next(b for b in found if b.name == "scope model/22")
    assert set(head.layers) == {layer for layer in YOLO if layer.startswith("/model.22/")}
    assert "scope model/22/cv3" in names  # the class branch of the head, smaller
    assert "the 3 layers nearest the inputs" in names
    # the 3 (and 6) layers nearest the outputs are the worst set (and the head): one try each, not two
    assert not any("nearest the outputs" in name for name in names)


def test_an_attention_block_and_a_recurrent_cell_group_by_scope():
    layers = ["embed", "block_0/attn/q", "block_0/attn/k", "block_0/attn/softmax", "block_0/mlp/fc1",
              "block_1/attn/q", "block_1/attn/k", "block_1/attn/softmax", "block_1/mlp/fc1", "lstm/cell/ih",
              "lstm/cell/hh", "head"]
    found = {b.name: set(b.layers) for b in blocks(["block_1/attn/softmax", "lstm/cell/hh"], layers)}
    assert found["scope block_1/attn"] == {"block_1/attn/q", "block_1/attn/k", "block_1/attn/softmax"}
    assert found["scope lstm"] == {"lstm/cell/ih", "lstm/cell/hh"}
    assert "scope block_0" not in found  # holds none of the worst layers


def test_no_blocks_for_one_layer_and_no_duplicates():
    assert blocks(["a"], ["a"]) == []
    found = blocks(["a", "b"], ["a", "b", "c", "d"])
    assert len({frozenset(b.layers) for b in found}) == len(found)


def test_the_default_budget_is_counted_in_builds_and_keeps_room_for_the_rebuild():
    """The same tries on a quiet and on a loaded machine: the default counts builds; seconds bound
    it only when asked (--search-budget) or when --time-limit would be passed (then said)."""
    auto = Budget.for_search(None, 100.0)
    assert auto.max_tries == DEFAULT_SETTINGS.tries and math.isinf(auto.seconds) and "builds" in auto.describe()
    for _ in range(DEFAULT_SETTINGS.tries):
        assert auto.allows_try()
        auto.record(500.0)  # however slow the machine, the count decides
    assert not auto.allows_try() and not auto.limit_bound and auto.to_dict()["seconds"] is None
    cut = Budget.for_search(None, 100.0).within_share(300.0, 100.0)  # --time-limit leaves 100 s after the rest
    assert cut.seconds == 100.0 and cut.limited and "--time-limit" in cut.why
    cut.record(60.0)
    assert not cut.allows_try() and cut.limit_bound and "--time-limit ended it" in cut.ended_by()
    assert Budget.for_search(None, 100.0).within_share(None, 100.0).seconds == math.inf
    report = Budget(seconds=100.0, rebuild_s=30.0)
    report.record(12.0, typical=False)  # the per-layer report: more than a try, less than the plain build
    assert report.typical_try() == 12.0 and report.tries == []
    assert Budget.for_search(20.0, 100.0).seconds == 20.0
    budget = Budget(seconds=30.0, rebuild_s=10.0)
    assert budget.allows_try()  # 10 s for a try (no try yet: the plain build's time) + 10 s rebuild
    budget.record(15.0)
    budget.started -= 15.0  # as if that try took its 15 s
    assert not budget.allows_try()  # 15 + 10 > 30 - spent
    assert budget.to_dict()["tries"] == 1
