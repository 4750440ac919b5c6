"""``edgekit.package()`` from what a notebook holds: a model object and arrays, not files.

The packager reads files (every conversion runs in a child process that opens the model), so
objects are written once into a temporary folder in the formats edgekit already reads, as the
field's own converters take them (``coremltools.convert(traced)``, ``litert_torch.convert(module,
sample_args)``):

* a ``keras.Model`` -> ``NAME.keras`` (``model.save``);
* a ``torch.nn.Module`` -> ``NAME.pt2`` (``torch.export``, the batch axis dynamic where the
  module allows it, else batch 1, which the packager then runs in slices), traced with the
  ``example_inputs`` given, else the first calibration samples, else zeros of ``input_shapes``;
* an ``onnx.ModelProto`` -> ``NAME.onnx`` (external data beyond 2 GiB);
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

from ..errors import DataError, ModelSourceError
from ..names import slug

MAX_SAMPLES = 100_000  # an endless generator is read this far


def is_path(value: Any) -> bool:
    return isinstance(value, (str, Path)) or hasattr(value, "__fspath__")


def model_file(model: Any, folder: Path, name: str | None, example_inputs: Any = None,
               input_shapes: Mapping[str, list[int]] | None = None, calibration: Any = None) -> tuple[str, str]:
    """The model written where the packager reads it: (path, default package name)."""
    if _is_keras(model):
        base = slug(name or getattr(model, "name", "") or "model")
        path = folder / f"{base}.keras"
        try:
            model.save(path)
        except Exception as exc:  # the user's model: say what Keras refused
            raise ModelSourceError(f"the Keras model could not be saved for packaging ({type(exc).__name__}: {exc})",
                                   hint="save it yourself (model.save('model.keras')) and pass the path") from exc
        return str(path), base
    if _is_torch_module(model):
        base = slug(name or type(model).__name__.lower())
        return _export_torch(model, folder / f"{base}.pt2", example_inputs, input_shapes, calibration), base
    if _is_onnx_model(model):
        import onnx

        base = slug(name or model.graph.name or "model")
        path = folder / f"{base}.onnx"
        large = model.ByteSize() > (2 << 30) - (1 << 20)
        onnx.save_model(model, str(path), save_as_external_data=large, location=f"{base}.onnx.data" if large else None)
        return str(path), base
    raise ModelSourceError(
        f"edgekit.package() got a {type(model).__module__}.{type(model).__qualname__}",
        hint="pass a path (.keras, .h5, SavedModel folder, .onnx, .pt2, .pt, file.py:factory), a keras.Model, "
             "a torch.nn.Module (with example_inputs) or an onnx.ModelProto")


def data_file(data: Any, folder: Path, role: str, input_ranks: Mapping[str, int] | None = None) -> str:
    """Calibration or evaluation data written as ``.npz`` (``x``/``y``, or arrays by input name)."""
    if is_path(data):
        return str(data)
    arrays = _collect(data, role, input_ranks or {})
    if not arrays:
        raise DataError(f"the {role} data is empty", hint="pass at least 100 samples")
    path = folder / f"{role}.npz"
    np.savez(path, **arrays)
    return str(path)


def input_ranks(model: Any) -> dict[str, int]:
    """Each input's rank with its batch axis, where the object says it (else empty)."""
    try:
        if _is_keras(model):
            return {str(getattr(t, "name", i)): len(t.shape) for i, t in enumerate(model.inputs)}
        if _is_onnx_model(model):
            initializers = {i.name for i in model.graph.initializer}
            return {i.name: len(i.type.tensor_type.shape.dim) for i in model.graph.input if i.name not in initializers}
    except (AttributeError, TypeError, ValueError):
        pass
    return {}


# --- models ---------------------------------------------------------------------------------


def _is_keras(model: Any) -> bool:
    module = type(model).__module__.split(".")[0]
    return module in ("keras", "tf_keras", "tensorflow") and hasattr(model, "save") and hasattr(model, "inputs")


def _is_torch_module(model: Any) -> bool:
    torch = sys.modules.get("torch")
    return torch is not None and isinstance(model, torch.nn.Module)


def _is_onnx_model(model: Any) -> bool:
    onnx = sys.modules.get("onnx")
    return onnx is not None and isinstance(model, onnx.ModelProto)


def _export_torch(module: Any, path: Path, example_inputs: Any, input_shapes: Mapping[str, list[int]] | None,
                  calibration: Any) -> str:
    import torch

    args, kwargs = _torch_examples(module, example_inputs, input_shapes, calibration)
    module = module.eval()
    exported = None
    failures = []
    for dynamic in (True, False):  # a dynamic batch axis where the module allows it, else batch 1
        try:
            shapes = _batch_dims(args, kwargs) if dynamic else None
            trace_args = args if dynamic else tuple(a[:1] for a in args)
            trace_kwargs = kwargs if dynamic else {k: v[:1] for k, v in kwargs.items()}
            exported = torch.export.export(module, trace_args, kwargs=trace_kwargs or None, dynamic_shapes=shapes)
            break
        except Exception as exc:  # torch.export says what it cannot trace; try the static batch
            failures.append(f"{type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''}")
    if exported is None:
        raise ModelSourceError(f"torch.export cannot trace the module ({failures[-1]})",
                               hint="export it yourself (torch.export.export + torch.export.save) and pass the .pt2, "
                                    "or give example_inputs that match forward()")
    torch.export.save(exported, str(path))
    return str(path)


def _torch_examples(module: Any, example_inputs: Any, input_shapes: Mapping[str, list[int]] | None,
                    calibration: Any) -> tuple[tuple[Any, ...], dict[str, Any]]:
    """Positional and keyword example tensors with a batch of 2 (so the batch axis can be dynamic)."""
    import torch

    def tensor(value: Any) -> Any:
        t = value if isinstance(value, torch.Tensor) else torch.from_numpy(np.ascontiguousarray(value))
        return t.float() if t.dtype == torch.float64 else t

    if example_inputs is not None:
        if isinstance(example_inputs, Mapping):
            return (), {k: tensor(v) for k, v in example_inputs.items()}
        if isinstance(example_inputs, (tuple, list)):
            return tuple(tensor(v) for v in example_inputs), {}
        return (tensor(example_inputs),), {}
    if input_shapes:
        zeros = {k: torch.zeros([2 if i == 0 else d for i, d in enumerate(shape)]) for k, shape in input_shapes.items()}
        return ((next(iter(zeros.values())),), {}) if len(zeros) == 1 else ((), zeros)
    if calibration is not None and not is_path(calibration):
        arrays = _collect(calibration, "calibration", {}, limit=2)
        named = {k: v for k, v in arrays.items() if k != "y"}
        if list(named) == ["x"]:
            return (tensor(named["x"]),), {}
        if named:
            return (), {k: tensor(v) for k, v in named.items()}
    raise ModelSourceError("a torch.nn.Module needs example inputs to be traced",
                           hint="pass example_inputs=(tensor,) or input_shapes={'x': [1, 3, 224, 224]}, or "
                                "calibration as arrays (its first samples are used)")


def _batch_dims(args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
    from torch.export import Dim

    batch = Dim("batch", min=1, max=4096)
    if kwargs:
        return {k: {0: batch} if v.dim() else None for k, v in kwargs.items()}
    return tuple({0: batch} if a.dim() else None for a in args)


# --- data -----------------------------------------------------------------------------------


def _to_numpy(value: Any) -> Any:
    if hasattr(value, "detach") and hasattr(value, "cpu"):  # a torch tensor
        return value.detach().cpu().numpy()
    if hasattr(value, "numpy") and not isinstance(value, np.ndarray):  # a tf.Tensor
        return value.numpy()
    return value


def _collect(data: Any, role: str, ranks: Mapping[str, int], limit: int = MAX_SAMPLES) -> dict[str, np.ndarray]:
    data = _to_numpy(data)
    if isinstance(data, np.ndarray):
        return {"x": data[:limit]}
    if isinstance(data, tuple) and len(data) == 2 and all(isinstance(_to_numpy(v), np.ndarray) for v in data):
        x, y = (np.asarray(_to_numpy(v)) for v in data)
        if y.ndim == 1 and x.ndim >= 1 and len(x) == len(y):
            return {"x": x[:limit], "y": y[:limit]}
    if isinstance(data, Mapping):
        return {str(k): np.asarray(_to_numpy(v))[:limit] for k, v in data.items()}
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
