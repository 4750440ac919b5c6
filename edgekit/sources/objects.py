"""``edgekit.package()`` from a model object a notebook holds, written where a source reads it.

The packager reads files (every conversion runs in a child process that opens the model), so an
object is written once into a temporary folder as a file one of the sources reads, as the
field's own converters take them:

* a ``keras.Model`` -> ``NAME.keras`` (``model.save``);
* a ``torch.nn.Module`` -> ``NAME.pt2`` (``torch.export``, the batch axis dynamic where the
  module allows it, else batch 1, which the packager then runs in slices), traced with the
  ``example_inputs`` given, else the first calibration samples, else zeros of ``input_shapes``;
* an ``onnx.ModelProto`` -> ``NAME.onnx`` (external data beyond 2 GiB).
"""

from __future__ import annotations

import sys
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import numpy as np

from ..errors import ModelSourceError
from ..names import slug


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
    training = {sub: sub.training for sub in module.modules()}  # the caller's module: put back as it was
    exported = None
    failures = []
    try:
        module.eval()
        for dynamic in (True, False):  # a dynamic batch axis where the module allows it, else batch 1
            try:
                shapes = _batch_dims(args, kwargs) if dynamic else None
                trace_args = args if dynamic else tuple(a[:1] for a in args)
                trace_kwargs = kwargs if dynamic else {k: v[:1] for k, v in kwargs.items()}
                exported = torch.export.export(module, trace_args, kwargs=trace_kwargs or None, dynamic_shapes=shapes)
                break
            except Exception as exc:  # torch.export says what it cannot trace; try the static batch
                failures.append(f"{type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''}")
    finally:
        for sub, mode in training.items():
            sub.training = mode
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
    from ..data.in_memory import collect_arrays, is_path  # the calibration data, as the packager reads it

    if calibration is not None and not is_path(calibration):
        arrays = collect_arrays(calibration, "calibration", {}, limit=2)
        named = {k: v for k, v in arrays.items() if k != "y"}
        takes = _forward_inputs(module)
        if takes is not None and len(named) > len(takes):  # (x, y, z) batches for a one-input module
            from ..errors import DataError

            raise DataError(f"the calibration data yields {len(named)} arrays per item; the module's forward() takes "
                            f"{len(takes)} input(s) ({', '.join(takes)})",
                            hint="yield a sample (or batch), (inputs, integer labels) pairs, a dict of arrays by input "
                                 "name, or a list with one array per forward() input")
        if list(named) == ["x"]:
            return (tensor(named["x"]),), {}
        if named:
            return (), {k: tensor(v) for k, v in named.items()}
    raise ModelSourceError("a torch.nn.Module needs example inputs to be traced",
                           hint="pass example_inputs=(tensor,) or input_shapes={'x': [1, 3, 224, 224]}, or "
                                "calibration as arrays (its first samples are used)")


def _forward_inputs(module: Any) -> list[str] | None:
    """The names of ``forward()``'s positional inputs; None when it takes ``*args``."""
    import inspect

    try:
        parameters = inspect.signature(module.forward).parameters.values()
    except (TypeError, ValueError):
        return None
    if any(p.kind is p.VAR_POSITIONAL for p in parameters):
        return None
    return [p.name for p in parameters if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)]


def _batch_dims(args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
    from torch.export import Dim

    batch = Dim("batch", min=1, max=4096)
    if kwargs:
        return {k: {0: batch} if v.dim() else None for k, v in kwargs.items()}
    return tuple({0: batch} if a.dim() else None for a in args)
