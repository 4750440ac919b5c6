"""``edgekit.package()`` from the data a notebook holds: arrays and iterables, not files.

The packager reads files (every step runs in a child process), so data is written once into a
temporary folder (model objects: ``edgekit.sources.objects``):

* calibration or evaluation data as an array, an ``(x, y)`` pair, a dict of arrays by input
  name, or an iterable: a generator of samples, ``(x, y)`` pairs or dicts, a PyTorch
  ``DataLoader`` of batches, or TFLite-style lists of batched input arrays -> ``.npz``.

A batch or a sample is told apart by the model's input rank when it is known (a DataLoader
always yields batches); without it an iterable's items are samples.
"""

from __future__ import annotations

import sys
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

import numpy as np

from ..errors import DataError

MAX_SAMPLES = 100_000  # an endless generator is read this far


def is_path(value: Any) -> bool:
    return isinstance(value, (str, Path)) or hasattr(value, "__fspath__")


def data_file(data: Any, folder: Path, role: str, input_ranks: Mapping[str, int] | None = None) -> str:
    """Calibration or evaluation data written as ``.npz`` (``x``/``y``, or arrays by input name)."""
    if is_path(data):
        return str(data)
    arrays = collect_arrays(data, role, input_ranks or {})
    if not arrays:
        raise DataError(f"the {role} data is empty", hint="pass at least 100 samples")
    path = folder / f"{role}.npz"
    np.savez(path, **arrays)
    return str(path)


# --- data -----------------------------------------------------------------------------------


def _to_numpy(value: Any) -> Any:
    if hasattr(value, "detach") and hasattr(value, "cpu"):  # a torch tensor
        return value.detach().cpu().numpy()
    if hasattr(value, "numpy") and not isinstance(value, np.ndarray):  # a tf.Tensor
        return value.numpy()
    return value


def collect_arrays(data: Any, role: str, ranks: Mapping[str, int], limit: int = MAX_SAMPLES) -> dict[str, np.ndarray]:
    data = _to_numpy(data)
    # arrays are taken whole (they are finite, and the packager's --samples/--eval-samples choose
    # from them); only an iterable, which may never end, is read up to ``limit``, and says so
    if isinstance(data, np.ndarray):
        return {"x": data}
    if isinstance(data, tuple) and len(data) == 2 and all(isinstance(_to_numpy(v), np.ndarray) for v in data):
        x, y = (np.asarray(_to_numpy(v)) for v in data)
        if y.ndim == 1 and x.ndim >= 1 and len(x) == len(y):
            return {"x": x, "y": y}
    if isinstance(data, Mapping):
        return {str(k): np.asarray(_to_numpy(v)) for k, v in data.items()}
    if not isinstance(data, Iterable) or isinstance(data, (str, bytes)):
        raise DataError(f"the {role} data is a {type(data).__name__}",
                        hint="pass a path, an array, (x, y), a dict of arrays by input name, or an iterable of them")
    return _from_iterable(data, role, ranks, _is_data_loader(data), limit)


def _is_data_loader(data: Any) -> bool:
    torch = sys.modules.get("torch")
    return torch is not None and isinstance(data, torch.utils.data.DataLoader)


def _from_iterable(data: Iterable[Any], role: str, ranks: Mapping[str, int], batches: bool,
                   limit: int) -> dict[str, np.ndarray]:
    parts: dict[str, list[np.ndarray]] = {}
    count = 0
    for item in data:
        if count >= limit:
            import warnings

            warnings.warn(f"the {role} data yields more than {limit:,} samples: the first {limit:,} are used "
                          "(pass an array to use them all)", stacklevel=4)
            break
        item = _to_numpy(item)
        label = None
        if isinstance(item, (tuple, list)) and len(item) == 2 and _looks_like_labels(item[1]):
            item, label = _to_numpy(item[0]), np.asarray(_to_numpy(item[1]))
        if isinstance(item, list):  # TFLite's representative_dataset: a list of batched input arrays
            names = list(ranks) if len(ranks) == len(item) > 1 else [f"input_{i}" for i in range(len(item))]
            named = {(names[i] if len(item) > 1 else "x"): np.asarray(_to_numpy(v)) for i, v in enumerate(item)}
            batch = True
        elif isinstance(item, Mapping):
            named = {str(k): np.asarray(_to_numpy(v)) for k, v in item.items()}
            batch = batches or _is_batch(named, ranks)
        else:
            named = {"x": np.asarray(item)}
            batch = batches or _is_batch(named, ranks)
        if label is not None:
            batch = label.ndim == 1  # a label per sample of a batch, or one label for one sample
        if not batch:
            named = {k: v[None] for k, v in named.items()}
        if label is not None:
            named["y"] = label.reshape(-1)
        if parts and set(named) != set(parts):
            raise DataError(f"the {role} data's items name different inputs ({sorted(parts)} then {sorted(named)})")
        for key, value in named.items():
            parts.setdefault(key, []).append(value)
        count += len(next(iter(named.values())))
    try:
        return {key: np.concatenate(values)[:limit] for key, values in parts.items()}
    except ValueError as exc:
        raise DataError(f"the {role} data's items have different shapes ({exc})",
                        hint="yield samples (or batches) of one shape") from None


def _looks_like_labels(value: Any) -> bool:
    array = np.asarray(_to_numpy(value))
    return array.dtype.kind in "iu" and array.ndim <= 1


def _is_batch(named: dict[str, np.ndarray], ranks: Mapping[str, int]) -> bool:
    """An item is a batch when its rank is the model input's (batch axis included)."""
    for key, value in named.items():
        rank = ranks.get(key) if key in ranks else (next(iter(ranks.values())) if len(ranks) == 1 else None)
        if rank is not None:
            return value.ndim == rank
    return False
