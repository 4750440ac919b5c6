"""ONNX sources (build side): a ``.onnx`` file, described with the ``onnx`` package.

Its float reference comes from ONNX Runtime. Formats that convert from TensorFlow (TFLite,
CoreML) cannot build from it yet; the ONNX format quantizes it directly.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from ..errors import ModelSourceError
from .base import Source, first_line


def detect(model: Path) -> str | None:
    return "onnx" if model.is_file() and model.suffix.lower() == ".onnx" else None


def prepare(model_path: str, kind: str, export_dir: str) -> dict[str, Any]:
    """Check and describe the ONNX model (nothing to export: formats read it as it is)."""
    return describe_onnx(model_path)


def describe_onnx(model_path: str) -> dict[str, Any]:
    import onnx

    try:
        model = onnx.load(model_path)
        onnx.checker.check_model(model)
    except Exception as exc:
        raise ModelSourceError(f"{model_path} is not a valid ONNX model: {first_line(exc)}") from None
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


def float_reference(prepared: dict[str, Any], inputs_npy: str, output_npy: str, batch_size: int = 64) -> None:
    """Outputs of the float ONNX model on ``inputs_npy``, saved to ``output_npy`` (first output)."""
    import numpy as np

    from ..formats.onnx.onnxruntime import OnnxRuntimeBackend

    backend = OnnxRuntimeBackend(prepared["onnx_model"])
    x = np.load(inputs_npy)
    outputs = [backend.run(x[i : i + batch_size])[0] for i in range(0, len(x), batch_size)]
    np.save(output_npy, np.concatenate(outputs).astype(np.float32))


SOURCE = Source(
    name="onnx",
    accepts=".onnx",
    detect=detect,
    prepare=prepare,
    float_reference=float_reference,
)
