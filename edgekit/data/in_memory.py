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
    if (isinstance(data, tuple) and len(ranks) == len(data) > 1
            and all(isinstance(_to_numpy(v), np.ndarray) and np.ndim(_to_numpy(v)) == rank
                    for v, rank in zip(data, ranks.values()))):
        return {name: np.asarray(_to_numpy(v)) for name, v in zip(ranks, data)}  # one batched array per input
    if isinstance(data, tuple) and len(data) == 2 and all(isinstance(_to_numpy(v), np.ndarray) for v in data):
        x, y = (np.asarray(_to_numpy(v)) for v in data)
        if y.ndim == 1 and x.ndim >= 1 and len(x) > 1:
            _check_labels(y, role)
            if len(x) != len(y):
                raise DataError(f"the {role} data (x, y) has {len(x)} samples and {len(y)} labels",
                                hint="give one integer label per sample: y of length len(x)")
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
        if isinstance(item, (tuple, list)) and len(item) == 2 and _is_label(item[1], role):
            item, label = _to_numpy(item[0]), np.asarray(_to_numpy(item[1]))
        if isinstance(item, (list, tuple)):  # one array per model input (TFLite's representative_dataset)
            if ranks and len(item) != len(ranks) or (not ranks and isinstance(item, tuple) and not batches):
                raise DataError(
                    f"the {role} data yields {len(item)} arrays per item; the model has "
                    + (f"{len(ranks)} input(s) ({', '.join(ranks)})" if ranks else "inputs edgekit cannot see here"),
                    hint="yield a sample (or batch), (inputs, integer labels) pairs, a dict of arrays by input "
                         "name, or a list with one array per model input")
            names = list(ranks) if len(ranks) == len(item) > 1 else [f"input_{i}" for i in range(len(item))]
            named = {(names[i] if len(item) > 1 else "x"): _array(v, role) for i, v in enumerate(item)}
            batch = isinstance(item, list) or batches or _is_batch(named, ranks)
        elif isinstance(item, Mapping):
            named = {str(k): np.asarray(_to_numpy(v)) for k, v in item.items()}
            batch = batches or _is_batch(named, ranks)
        else:
            named = {"x": _array(item, role)}
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


def _is_label(value: Any, role: str) -> bool:
    """The second item of a pair is a label (an integer class index, or a batch of them); a label
    of another kind (a class name, a float target) is refused by name, not read as an input."""
    value = _to_numpy(value)
    if isinstance(value, (str, bytes)) or (isinstance(value, (list, tuple)) and value
                                           and all(isinstance(v, (str, bytes)) for v in value)):
        _check_labels(np.asarray(value), role)
    try:
        array = np.asarray(value)
    except ValueError:
        return False
    if array.ndim <= 1 and array.dtype.kind in "USO":
        _check_labels(array, role)
    return array.dtype.kind in "iu" and array.ndim <= 1


def _check_labels(y: np.ndarray, role: str) -> None:
    if y.dtype.kind not in "iu":
        example = y.reshape(-1)[:1].tolist()
        raise DataError(f"the {role} data's labels are {y.dtype} (e.g. {example}); edgekit takes integer class "
                        "indices", hint="map each class name to its index (labels.index(name)) and give the names "
                                        "in that order with labels_file= (--labels), or leave the labels out")


def _array(value: Any, role: str) -> np.ndarray:
    """One item as numbers, or one error naming what it is."""
    try:
        array = np.asarray(_to_numpy(value))
    except ValueError as exc:  # ragged nesting
        raise DataError(f"an item of the {role} data is not one array ({exc})",
                        hint="yield numpy arrays (or tensors) of one shape") from None
    if array.dtype.kind not in "biuf":
        raise DataError(f"an item of the {role} data is {array.dtype}, not numbers",
                        hint="yield numeric arrays; labels go second in (sample, integer label) pairs")
    return array


def _is_batch(named: dict[str, np.ndarray], ranks: Mapping[str, int]) -> bool:
    """An item is a batch when its rank is the model input's (batch axis included)."""
    for key, value in named.items():
        rank = ranks.get(key) if key in ranks else (next(iter(ranks.values())) if len(ranks) == 1 else None)
        if rank is not None:
            return value.ndim == rank
    return False
