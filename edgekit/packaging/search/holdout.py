"""The search's held-out split: tries are judged on one half of the validation samples, and the
configuration the search keeps must also pass on the other half, which no try was judged on.

A search that picks among many builds by their numbers on the same samples it reports would
overfit those samples (a layer set that happens to fix 3 of 200 decisions); the unseen half is
what says the configuration holds. The halves interleave (even rows, odd rows), so each keeps
the data's order and mix of classes.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any

import numpy as np

from ..data import PreparedData
from ..search_settings import DEFAULT_SETTINGS


@dataclass(frozen=True)
class Halves:
    search: PreparedData
    search_reference: dict[str, np.ndarray]
    unseen: PreparedData
    unseen_reference: dict[str, np.ndarray]


def split(data: PreparedData, reference: dict[str, np.ndarray],
          min_samples: int = DEFAULT_SETTINGS.min_holdout_samples) -> Halves | None:
    """The two halves, or None when there are fewer than ``min_samples`` (halves too small to
    judge: the search then uses every sample, and says so)."""
    count = data.evaluation_count
    if count < min_samples:
        return None
    rows = np.arange(count)
    even, odd = rows[0::2], rows[1::2]
    return Halves(_subset(data, even), {k: v[even] for k, v in reference.items()},
                  _subset(data, odd), {k: v[odd] for k, v in reference.items()})


def _subset(data: PreparedData, rows: np.ndarray) -> PreparedData:
    raw = data.evaluation_raw
    x: Any = {k: v[rows] for k, v in raw.x.items()} if isinstance(raw.x, dict) else \
        (raw.x[rows] if raw.x is not None and hasattr(raw.x, "__getitem__") else raw.x)
    subset_raw = replace(raw, x=x, y=None if raw.y is None else raw.y[rows],
                         names=[raw.names[i] for i in rows] if len(raw.names) == data.evaluation_count else raw.names)
    return replace(data, evaluation={k: v[rows] for k, v in data.evaluation.items()}, evaluation_raw=subset_raw,
                   rows=tuple(int(r) for r in rows))
