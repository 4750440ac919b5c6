"""Inputs fixed to a constant at package time (``edgekit package --input NAME=VALUE``).

Some exported models take an input that is not a batch of samples: a scalar (a sample rate, a
threshold), a recurrent state the caller always starts at zero. edgekit feeds every input as
samples stacked on axis 0, so such an input is folded into the model as a constant, as model
optimizers do ("freezing" an input): the artifacts no longer have it, and the manifest records
the value (``source.fixed_inputs``).

A value is a number (filled to the input's shape) or a ``.npy`` file (the whole tensor). The
shape comes from the model, with ``--input-shape NAME=...`` for its unknown dimensions; in an
ONNX model a dimension named like another input's batch dimension follows that input's batch at
run time (a ``[layers, batch, hidden]`` state of zeros). PyTorch models are wrapped so the
value is passed on every call; a ``.pt2`` program's batch symbol is followed the same way.
"""

from __future__ import annotations

import math
import os
import tempfile
from pathlib import Path
from typing import Any

import numpy as np

from ..errors import DataError, ModelSourceError

ONNX_DTYPES = {1: np.float32, 10: np.float16, 11: np.float64, 2: np.uint8, 3: np.int8, 5: np.int16, 6: np.int32,
               7: np.int64, 9: np.bool_}


def parse_value(name: str, text: str) -> dict[str, Any]:
    """``--input NAME=VALUE``'s value, checked before any model loads: a finite number or a .npy file."""
    if text.lower().endswith(".npy"):
        path = Path(text)
        if not path.is_file():
            raise DataError(f"--input {name}={text}: {text} does not exist",
                            hint="give a number or an existing .npy file holding the whole tensor")
        try:
            value = np.load(path, allow_pickle=False)
        except (OSError, ValueError) as exc:
            raise DataError(f"--input {name}={text}: cannot read {text} as a .npy array ({exc})",
                            hint="save it with np.save") from None
        if value.dtype.kind not in "biuf" or (value.dtype.kind == "f" and not np.isfinite(value).all()):
            raise DataError(f"--input {name}={text}: the array is {value.dtype} with non-finite or non-numeric values",
                            hint="give finite numeric values")
        return {"npy": str(path.resolve()), "shape": list(value.shape), "dtype": str(value.dtype)}
    try:
        number = float(text)
    except ValueError:
        raise DataError(f"--input {name}={text}: {text!r} is neither a number nor a .npy file",
                        hint=f"e.g. --input {name}=16000 or --input {name}=state.npy") from None
    if not math.isfinite(number):
        raise DataError(f"--input {name}={text}: the value must be finite", hint="give a finite number")
    return {"number": number, "integral": float(number).is_integer() and "." not in text and "e" not in text.lower()}


def spec_from_python(name: str, value: Any) -> dict[str, Any]:
    """A fixed input given from Python (``edgekit.package(..., fixed_inputs={"gain": 2.0})``): a
    number, an array or tensor (its whole value), a path to a ``.npy`` file, or the command line's
    text; the same checks as ``--input NAME=VALUE``."""
    if isinstance(value, dict) and ("number" in value or "npy" in value):
        return dict(value)  # already read (the command line's parse_value)
    if isinstance(value, (str, os.PathLike)):
        return parse_value(name, os.fspath(value))
    if isinstance(value, (bool, int, float, np.number)):
        number = float(value)
        if not math.isfinite(number):
            raise DataError(f"fixed_inputs[{name!r}] must be finite, got {value!r}", hint="give a finite number")
        return {"number": number, "integral": isinstance(value, (bool, int, np.integer))}
    array = value.detach().cpu().numpy() if hasattr(value, "detach") else value
    array = array.numpy() if hasattr(array, "numpy") and not isinstance(array, np.ndarray) else array
    if isinstance(array, (np.ndarray, list, tuple)):
        try:
            array = np.asarray(array)
        except ValueError:
            array = np.asarray([], dtype=object)
        if array.dtype.kind not in "biuf" or (array.dtype.kind == "f" and not np.isfinite(array).all()):
            raise DataError(f"fixed_inputs[{name!r}] is an array of {array.dtype} with non-finite or non-numeric "
                            "values", hint="give finite numbers")
        if array.ndim == 0:
            return spec_from_python(name, array.item())
        handle, path = tempfile.mkstemp(prefix=f"edgekit-fixed-{os.getpid()}-", suffix=".npy", dir=_array_folder())
        with os.fdopen(handle, "wb") as file:
            np.save(file, array)
        return parse_value(name, path)
    raise DataError(f"fixed_inputs[{name!r}] is a {type(value).__name__}",
                    hint="give a number (2.0, 16000), an array or tensor with the whole value, or a path to a .npy file")


_ARRAYS: list[str] = []


def _array_folder() -> str:
    """A folder for arrays given from Python, removed when the process ends."""
    if not _ARRAYS:
        import atexit
        import shutil

        _ARRAYS.append(tempfile.mkdtemp(prefix="edgekit-fixed-inputs-"))
        atexit.register(shutil.rmtree, _ARRAYS[0], True)
    return _ARRAYS[0]


def value_array(spec: dict[str, Any], dtype: Any, shape: list[int]) -> np.ndarray:
    """The constant for a fully known ``shape`` and the input's ``dtype``."""
    if "npy" in spec:
        value = np.load(spec["npy"], allow_pickle=False)
        if list(value.shape) != list(shape):
            raise DataError(f"the array for a fixed input has shape {list(value.shape)}; the model's input is {shape}",
                            hint="save the whole tensor the model takes (every dimension, the batch included)")
        return value.astype(dtype)
    return np.full(shape, spec["number"], dtype=dtype)


def record(fixed: dict[str, dict[str, Any]]) -> dict[str, Any]:
    """What the manifest says about each fixed input."""
    return {name: ({"value": spec["number"]} if "number" in spec else {"file": Path(spec["npy"]).name,
                                                                      "shape": spec["shape"]})
            for name, spec in fixed.items()}


# --- ONNX ---------------------------------------------------------------------------------


def freeze_onnx(source: str, destination: str, fixed: dict[str, dict[str, Any]],
                input_shapes: dict[str, list[int]]) -> None:
    """A copy of the ONNX model at ``source`` with each input in ``fixed`` made a constant."""
    import onnx
    from onnx import helper, numpy_helper

    model = onnx.load(source)
    graph = model.graph
    initializers = {i.name for i in graph.initializer}
    inputs = {v.name: v for v in graph.input if v.name not in initializers}
    _known_names(fixed, list(inputs))
    kept = [v for v in inputs.values() if v.name not in fixed]
    if not kept:
        raise ModelSourceError("every input of the model would be fixed: nothing would be left to feed samples to",
                               hint="fix only the inputs that are not samples (a sample rate, a state)")
    batch_dims = {}  # a dimension name of a kept input -> (input name, axis): what a fixed input's dimension can follow
    for value in kept:
        for axis, dim in enumerate(value.type.tensor_type.shape.dim):
            if dim.HasField("dim_param") and dim.dim_param not in batch_dims:
                batch_dims[dim.dim_param] = (value.name, axis)
    nodes = []
    for name, spec in fixed.items():
        tensor_type = inputs[name].type.tensor_type
        dtype = ONNX_DTYPES.get(tensor_type.elem_type)
        if dtype is None:
            raise ModelSourceError(f"input {name!r} has ONNX element type {tensor_type.elem_type}, which edgekit "
                                   "cannot fill", hint="fix it inside the model and re-export")
        dims = _onnx_dims(name, tensor_type, spec, input_shapes.get(name), batch_dims)
        graph.input.remove(inputs[name])
        if all(isinstance(d, int) for d in dims):
            graph.initializer.append(numpy_helper.from_array(value_array(spec, dtype, list(dims)), name))
            continue
        # a dimension that follows another input's batch: Expand(value, [fixed..., Shape(x)[axis], ...]);
        # a number is a scalar, a .npy one sample's tensor (size 1 on the batch axis), repeated per sample
        parts = []
        for position, dim in enumerate(dims):
            part = f"{name}__fixed_dim{position}"
            if isinstance(dim, int):
                graph.initializer.append(numpy_helper.from_array(np.array([dim], dtype=np.int64), part))
            else:
                follow, axis = dim
                nodes += [helper.make_node("Shape", [follow], [f"{part}_shape"]),
                          helper.make_node("Gather", [f"{part}_shape", f"{part}_axis"], [part], axis=0)]
                graph.initializer.append(numpy_helper.from_array(np.array([axis], dtype=np.int64), f"{part}_axis"))
            parts.append(part)
        value = (np.load(spec["npy"], allow_pickle=False).astype(dtype) if "npy" in spec
                 else np.array(spec["number"], dtype=dtype))
        graph.initializer.append(numpy_helper.from_array(value, f"{name}__fixed_value"))
        nodes += [helper.make_node("Concat", parts, [f"{name}__fixed_shape"], axis=0),
                  helper.make_node("Expand", [f"{name}__fixed_value", f"{name}__fixed_shape"], [name])]
    for node in reversed(nodes):
        graph.node.insert(0, node)
    onnx.checker.check_model(model)
    onnx.save(model, destination)


def _onnx_dims(name: str, tensor_type: Any, spec: dict[str, Any], given: list[int] | None,
               batch_dims: dict[str, tuple[str, int]]) -> list[Any]:
    """Each dimension of a fixed input: a size, or (input, axis) to follow at run time."""
    model_dims = list(tensor_type.shape.dim)
    if "npy" in spec:
        return _npy_dims(name, model_dims, spec["shape"], batch_dims)
    if given is not None and len(given) != len(model_dims):
        raise DataError(f"--input-shape for {name!r} has {len(given)} dimensions; the model's input has "
                        f"{len(model_dims)}", hint="give every dimension")
    dims: list[Any] = []
    for axis, dim in enumerate(model_dims):
        if dim.HasField("dim_value") and dim.dim_value > 0:
            dims.append(int(dim.dim_value))
        elif given is not None:
            dims.append(int(given[axis]))
        elif dim.HasField("dim_param") and dim.dim_param in batch_dims:
            dims.append(batch_dims[dim.dim_param])
        else:
            label = f"{dim.dim_param!r}" if dim.HasField("dim_param") else "unnamed"
            raise DataError(
                f"--input {name}=...: dimension {axis} of the input ({label}) has no known size",
                hint=f"give its shape with --input-shape {name}=...(every dimension), or a .npy file with the tensor",
            )
    return dims


def _npy_dims(name: str, model_dims: list[Any], shape: list[int],
              batch_dims: dict[str, tuple[str, int]]) -> list[Any]:
    """A ``.npy`` value's dimensions against the model input's: equal where the model fixes a
    size; on a dimension that follows another input's batch, size 1 (one sample's value, repeated
    for every sample at run time) — a whole batch saved there would only run at that batch."""
    if len(shape) != len(model_dims):
        raise DataError(f"--input {name}=...npy has {len(shape)} dimensions {shape}; the model's input has "
                        f"{len(model_dims)}", hint="save the whole tensor the model takes, every dimension included")
    dims: list[Any] = []
    for axis, (dim, size) in enumerate(zip(model_dims, shape)):
        if dim.HasField("dim_value") and dim.dim_value > 0 and dim.dim_value != size:
            raise DataError(f"--input {name}=...npy has size {size} on axis {axis}; the model's input has "
                            f"{dim.dim_value} there (the array's shape {shape})",
                            hint="save the tensor in the shape the model takes")
        if dim.HasField("dim_param") and dim.dim_param in batch_dims:
            follow = batch_dims[dim.dim_param]
            if size != 1:
                raise DataError(
                    f"--input {name}=...npy has size {size} on axis {axis}, which is the batch of input "
                    f"{follow[0]!r} ({dim.dim_param!r}): the package would only run batches of {size}",
                    hint=f"save one sample's value (size 1 on axis {axis}); edgekit repeats it for every sample")
            dims.append(follow)
        else:
            dims.append(int(size))
    return dims


def _known_names(fixed: dict[str, Any], names: list[str]) -> None:
    unknown = [n for n in fixed if n not in names]
    if unknown:
        raise DataError(f"--input names {unknown}, which is not an input of the model (its inputs: {names})",
                        hint="use the model's input names")


# --- PyTorch ------------------------------------------------------------------------------


def torch_fixed(module: Any, names: list[str], program: Any, fixed: dict[str, dict[str, Any]],
                input_shapes: dict[str, list[int]]) -> tuple[Any, list[str]]:
    """``module`` wrapped so every fixed input gets its value; the input names left to feed."""
    import torch

    _known_names(fixed, names)
    kept = [n for n in names if n not in fixed]
    if not kept:
        raise ModelSourceError("every input of the model would be fixed: nothing would be left to feed samples to",
                               hint="fix only the inputs that are not samples (a sample rate, a state)")
    described = _program_inputs(program, names)
    scalar_types = _scalar_arguments(module, names)
    makers = {}
    for name in fixed:
        makers[name] = _torch_maker(name, fixed[name], described.get(name), scalar_types.get(name),
                                    input_shapes.get(name), kept, described)

    class FixedInputs(torch.nn.Module):
        """The source model with its fixed inputs passed as constants."""

        def __init__(self) -> None:
            super().__init__()
            self.inner = module

        def train(self, mode: bool = True) -> "FixedInputs":
            self.training = mode  # a torch.export program's module refuses train(); the source is in eval mode
            return self

        def forward(self, *args: Any) -> Any:
            given = dict(zip(kept, args))
            return self.inner(*[given[n] if n in given else makers[n](given) for n in names])

    return FixedInputs().eval(), kept


def _torch_maker(name: str, spec: dict[str, Any], described: tuple[Any, list[Any]] | None, scalar_type: str | None,
                 given: list[int] | None, kept: list[str], program_inputs: dict[str, tuple[Any, list[Any]]]) -> Any:
    import torch

    if scalar_type in ("int", "float", "bool"):  # a Python number argument (TorchScript int/float)
        if "npy" in spec:
            raise DataError(f"--input {name}=...npy: the model takes a {scalar_type} there, not a tensor",
                            hint=f"give a number, e.g. --input {name}=16000")
        number = {"int": int, "float": float, "bool": bool}[scalar_type](spec["number"])
        return lambda given_inputs: number
    if described is not None:
        dtype, shape = described
    else:
        dtype = torch.int64 if spec.get("integral") and given is None and "npy" not in spec else torch.float32
        dtype = _torch_dtype(spec["dtype"]) if "npy" in spec else dtype
        shape = list(given) if given is not None else (list(spec["shape"]) if "npy" in spec else [])
    if "npy" in spec and len(shape) != len(spec["shape"]):
        raise DataError(f"--input {name}=...npy has {len(spec['shape'])} dimensions {spec['shape']}; the model's "
                        f"input has {len(shape)}", hint="save the whole tensor the model takes, every dimension included")
    follow = {}  # axis -> (kept input, axis) for a program's symbolic dimension
    sizes = []
    for axis, dim in enumerate(shape):
        if isinstance(dim, int):
            sizes.append(dim)
            continue
        source = next(((other, other_axis) for other in kept if other in program_inputs
                       for other_axis, other_dim in enumerate(program_inputs[other][1]) if str(other_dim) == str(dim)),
                      None)
        if "npy" in spec:
            if source is not None and spec["shape"][axis] != 1:
                raise DataError(
                    f"--input {name}=...npy has size {spec['shape'][axis]} on axis {axis}, which is the batch of "
                    f"input {source[0]!r}: the package would only run batches of {spec['shape'][axis]}",
                    hint=f"save one sample's value (size 1 on axis {axis}); edgekit repeats it for every sample")
            if source is not None:
                follow[axis] = source
            continue
        if given is not None:
            sizes.append(int(given[axis]))
        elif source is None:
            raise DataError(f"--input {name}=...: dimension {axis} of the input ({dim}) has no known size",
                            hint=f"give its shape with --input-shape {name}=...(every dimension), or a .npy file")
        else:
            sizes.append(1)
            follow[axis] = source
    if "npy" in spec:
        value = torch.from_numpy(np.load(spec["npy"], allow_pickle=False)).to(dtype)
        if not follow:
            return lambda given_inputs: value

        def repeated(given_inputs: dict[str, Any]) -> Any:  # one sample's value, for each sample of the batch
            size = list(value.shape)
            for axis, (other, other_axis) in follow.items():
                size[axis] = given_inputs[other].shape[other_axis]
            return value.expand(size)

        return repeated
    number = spec["number"]
    if not follow:  # one constant tensor, as for a file: exported as a constant, not a ``full`` op (a
        value = torch.full(sizes, number, dtype=dtype)  # 0-d ``full`` inside an XNNPACK partition fails its
        return lambda given_inputs: value  # layout pass: ChannelsLastTaggedReshapePass indexes the 0-d value)

    def make(given_inputs: dict[str, Any]) -> Any:
        size = list(sizes)
        for axis, (other, other_axis) in follow.items():
            size[axis] = given_inputs[other].shape[other_axis]
        return torch.full(size, number, dtype=dtype)

    return make


def _program_inputs(program: Any, names: list[str]) -> dict[str, tuple[Any, list[Any]]]:
    """A torch.export program's dtype and shape (ints, or symbols for dynamic dimensions) per input."""
    if program is None:
        return {}
    placeholders = [n for n in program.graph.nodes if n.op == "placeholder"
                    and n.name in {str(u) for u in program.graph_signature.user_inputs}]
    found = {}
    for name, node in zip(names, placeholders):
        value = node.meta.get("val")
        if value is not None and hasattr(value, "shape"):
            found[name] = (value.dtype, [int(d) if isinstance(d, int) else d for d in value.shape])
    return found


def _scalar_arguments(module: Any, names: list[str]) -> dict[str, str]:
    """TorchScript arguments typed ``int``/``float``/``bool`` (a number, not a tensor)."""
    schema = getattr(getattr(module, "forward", None), "schema", None)
    if schema is None:
        return {}
    return {a.name: str(a.type) for a in schema.arguments[1:] if str(a.type) in ("int", "float", "bool")}


def _torch_dtype(name: str) -> Any:
    import torch

    return getattr(torch, name)
