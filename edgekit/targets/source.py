"""The trained model being packaged (build side): Keras ``.keras``/``.h5``, a TF SavedModel or ONNX.

``detect_format`` runs in the parent and only looks at files. ``prepare`` and
``float_reference`` run in a child process (``edgekit.worker``) because they import
TensorFlow: every target converts from the one SavedModel that ``prepare`` exports, and the
float reference outputs come from that same SavedModel. An ONNX source is described with the
``onnx`` package and its float reference comes from ONNX Runtime; only the ONNX target can
build from it for now.
"""

from __future__ import annotations

import os
import zipfile
from pathlib import Path
from typing import Any

from ..errors import ModelSourceError

_HDF5_MAGIC = b"\x89HDF\r\n\x1a\n"
_LATER = {".tflite": "TFLite", ".pt": "PyTorch", ".pth": "PyTorch", ".mlpackage": "CoreML"}


def detect_format(path: str | os.PathLike[str]) -> str:
    """``keras``, ``h5``, ``saved_model`` or ``onnx``; a clear error for anything else."""
    model = Path(path)
    if not model.exists():
        raise ModelSourceError(
            f"model {model} does not exist", hint="pass a .keras or .h5 file or a SavedModel directory"
        )
    if model.suffix.lower() in _LATER:
        raise ModelSourceError(
            f"{_LATER[model.suffix.lower()]} models ({model.name}) are not supported as a source yet",
            hint="export the model from its framework as a Keras .keras file or a TF SavedModel",
        )
    if model.is_dir():
        if (model / "saved_model.pb").is_file() or (model / "saved_model.pbtxt").is_file():
            return "saved_model"
        raise ModelSourceError(
            f"{model} is a directory but not a SavedModel (no saved_model.pb)",
            hint="pass the directory written by model.export(DIR) or tf.saved_model.save",
        )
    if not os.access(model, os.R_OK):
        raise ModelSourceError(f"model {model} is not readable", hint="check the file's permissions")
    try:
        with open(model, "rb") as handle:
            head = handle.read(8)
    except OSError as exc:
        raise ModelSourceError(f"model {model} cannot be read ({exc.strerror})") from None
    suffix = model.suffix.lower()
    if suffix == ".onnx":
        return "onnx"
    if suffix == ".keras":
        if not zipfile.is_zipfile(model):
            raise ModelSourceError(
                f"{model} is not a Keras model (a .keras file is a zip archive; this one is not)",
                hint="save the model with model.save('model.keras')",
            )
        return "keras"
    if suffix in (".h5", ".hdf5"):
        if head != _HDF5_MAGIC:
            raise ModelSourceError(
                f"{model} is not a Keras model (not an HDF5 file)", hint="save the model with model.save('model.h5')"
            )
        return "h5"
    raise ModelSourceError(
        f"{model} is not a model edgekit can read (expected .keras, .h5 or a SavedModel directory)",
        hint="save the model with model.save('model.keras') or model.export(DIR)",
    )


# --- child-process side -------------------------------------------------------------------


def prepare(model_path: str, fmt: str, export_dir: str) -> dict[str, Any]:
    """Load the model, export a SavedModel (Keras sources) and describe its signature."""
    if fmt == "onnx":
        return describe_onnx(model_path)
    import tensorflow as tf

    info: dict[str, Any] = {"layers": [], "rescales": False, "tensorflow": tf.__version__}
    saved_model = model_path
    if fmt in ("keras", "h5"):
        import keras

        info["keras"] = keras.__version__
        try:
            model = keras.models.load_model(model_path, compile=False)
        except Exception as exc:
            raise ModelSourceError(
                f"cannot load {model_path} as a Keras model: {type(exc).__name__}: {_first_line(exc)}",
                hint="check that it was saved by Keras (custom layers must be importable and registered)",
            ) from None
        info["layers"] = [layer.name for layer in _walk_layers(model)]
        info["rescales"] = _starts_with_rescaling(model)
        model.export(export_dir, format="tf_saved_model", verbose=False)
        saved_model = export_dir
    try:
        loaded = tf.saved_model.load(saved_model)
    except Exception as exc:
        raise ModelSourceError(
            f"cannot load SavedModel {saved_model}: {type(exc).__name__}: {_first_line(exc)}"
        ) from None
    signature = loaded.signatures.get("serving_default")
    if signature is None:
        raise ModelSourceError(
            f"SavedModel {saved_model} has no 'serving_default' signature",
            hint="export it with model.export(DIR) or tf.saved_model.save(obj, DIR, signatures=...)",
        )
    _, kw_inputs = signature.structured_input_signature
    outputs = signature.structured_outputs
    info["saved_model"] = saved_model
    info["inputs"] = [_describe(name, spec) for name, spec in sorted(kw_inputs.items())]
    info["outputs"] = [_describe(name, spec) for name, spec in sorted(outputs.items())]
    return info


def describe_onnx(model_path: str) -> dict[str, Any]:
    import onnx

    try:
        model = onnx.load(model_path)
        onnx.checker.check_model(model)
    except Exception as exc:
        raise ModelSourceError(f"{model_path} is not a valid ONNX model: {_first_line(exc)}") from None
    initializers = {i.name for i in model.graph.initializer}
    elem = {1: "float32", 10: "float16", 2: "uint8", 3: "int8", 6: "int32", 7: "int64"}

    def describe(value: Any) -> dict[str, Any]:
        tensor = value.type.tensor_type
        shape = [d.dim_value if d.HasField("dim_value") else -1 for d in tensor.shape.dim]
        return {"name": value.name, "shape": shape, "dtype": elem.get(tensor.elem_type, str(tensor.elem_type))}

    return {
        "saved_model": None,
        "onnx_model": model_path,
        "layers": [n.name for n in model.graph.node],
        "rescales": False,
        "onnx_opset": next((o.version for o in model.opset_import if o.domain in ("", "ai.onnx")), 0),
        "inputs": [describe(v) for v in model.graph.input if v.name not in initializers],
        "outputs": [describe(v) for v in model.graph.output],
    }


def float_reference(
    saved_model: str | None, inputs_npy: str, output_npy: str, batch_size: int = 64, onnx_model: str | None = None
) -> None:
    """Outputs of the float model on ``inputs_npy``, saved to ``output_npy`` (first output)."""
    import numpy as np

    if onnx_model is not None:
        from ..backends.onnxruntime import OnnxRuntimeBackend

        backend = OnnxRuntimeBackend(onnx_model)
        x = np.load(inputs_npy)
        outputs = [backend.run(x[i : i + batch_size])[0] for i in range(0, len(x), batch_size)]
        np.save(output_npy, np.concatenate(outputs).astype(np.float32))
        return
    import tensorflow as tf

    signature = tf.saved_model.load(saved_model).signatures["serving_default"]
    (input_name,) = signature.structured_input_signature[1].keys()
    output_name = sorted(signature.structured_outputs)[0]
    x = np.load(inputs_npy)
    chunks = []
    for start in range(0, len(x), batch_size):
        result = signature(**{input_name: tf.constant(x[start : start + batch_size])})
        chunks.append(result[output_name].numpy())
    np.save(output_npy, np.concatenate(chunks).astype(np.float32))


def _describe(name: str, spec: Any) -> dict[str, Any]:
    shape = [-1 if d is None else int(d) for d in spec.shape.as_list()]
    return {"name": name, "shape": shape, "dtype": spec.dtype.name}


def _walk_layers(model: Any) -> list[Any]:
    found = []
    for layer in getattr(model, "layers", []):
        found.append(layer)
        found.extend(_walk_layers(layer))
    return found


def _starts_with_rescaling(model: Any) -> bool:
    layers = [layer for layer in getattr(model, "layers", []) if type(layer).__name__ != "InputLayer"]
    if not layers:
        return False
    first = layers[0]
    if type(first).__name__ in ("Rescaling", "Normalization"):
        return True
    return _starts_with_rescaling(first) if hasattr(first, "layers") else False


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip()
    return text.splitlines()[0] if text else ""
