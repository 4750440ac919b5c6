"""CoreML target: an ML program ``coreml/model.int8.mlpackage`` with int8 weights.

``coremltools.convert`` turns the Keras model (in memory; a SavedModel source goes through
``source="tensorflow"``) into an ML program for iOS 17 / macOS 14 (the first targets that run
int8 weight dequantization and activation quantization ops). Weights are quantized with
``linear_quantize_weights``: per-channel, symmetric int8, every weight (no size threshold).

Activation calibration needs CoreML prediction, which only macOS has. On macOS the
activations are calibrated with ``linear_quantize_activations`` on the shared calibration
samples (W8A8); elsewhere the package gets the weight-only INT8 model and the manifest says
``activations: float16`` and why. Either way the saved package is checked structurally:
it loads, its input/output match the manifest, and every conv/linear weight is int8.
"""

from __future__ import annotations

import sys
import time
from pathlib import Path
from typing import Any

import numpy as np

from .. import worker
from ..errors import ConversionError, ModelSourceError
from ..fsutil import sha256_tree, tree_bytes
from ..manifest import Artifact, QuantParams
from .base import BuildContext, Target

ARTIFACT_PATH = "coreml/model.int8.mlpackage"
DEPLOYMENT_TARGET = "iOS17"
_WEIGHT_OPS = {"conv": "weight", "conv_transpose": "weight", "linear": "weight", "matmul": "y"}
_DEQUANTIZE_OPS = {"constexpr_affine_dequantize", "constexpr_blockwise_shift_scale"}
LINUX_ACTIVATIONS_REASON = (
    "activation calibration runs CoreML prediction, which exists only on macOS; "
    "weights are int8, activations stay float16"
)


class CoreMLTarget(Target):
    name = "coreml"
    description = "CoreML ML program (.mlpackage) with int8 weights: iPhone, iPad, Mac"
    backend = "coreml"

    def build(self, context: BuildContext) -> Artifact:
        if context.source_format == "onnx":
            raise ModelSourceError(
                "CoreML from an ONNX source is not supported yet",
                hint="package the Keras/SavedModel source for CoreML, or use --target onnx",
            )
        output = context.package_dir / ARTIFACT_PATH
        output.parent.mkdir(parents=True, exist_ok=True)
        info = worker.call(
            "edgekit.targets.coreml:convert",
            what="CoreML conversion",
            timeout=context.timeout_s,
            on_progress=context.on_progress,
            source_path=context.source_path,
            source_format=context.source_format,
            saved_model=context.saved_model,
            output=str(output),
            calibration_npy=context.calibration_npy,
        )
        return Artifact(
            target=self.name,
            path=ARTIFACT_PATH,
            sha256=sha256_tree(output),
            bytes=tree_bytes(output),
            precision="int8 weights" if info["activations"] != "int8" else "int8",
            inputs=[QuantParams(name=n, dtype="float32") for n in info["inputs"]],
            outputs=[QuantParams(name=n, dtype="float32") for n in info["outputs"]],
            converter={
                "tool": "coremltools.convert + coremltools.optimize.coreml",
                "coremltools": info["coremltools"],
                "minimum_deployment_target": DEPLOYMENT_TARGET,
                "weights": "int8 per-channel symmetric (linear_quantize_weights)",
                "seconds": info["seconds"],
            },
            details={
                "activations": info["activations"],
                "activations_reason": info["activations_reason"],
                "batch": 1,
                "structure": info["structure"],
            },
        )


# --- child-process side -------------------------------------------------------------------


def convert(
    source_path: str, source_format: str, saved_model: str | None, output: str, calibration_npy: str
) -> dict[str, Any]:
    import coremltools as ct
    import coremltools.optimize.coreml as cto

    samples = np.load(calibration_npy, mmap_mode="r")
    started = time.perf_counter()
    if source_format in ("keras", "h5"):
        import keras

        model: Any = keras.models.load_model(source_path, compile=False)
        source: dict[str, Any] = {}
        input_name = model.inputs[0].name
    else:  # a SavedModel has several concrete functions; coremltools takes the serving one
        import tensorflow as tf

        loaded = tf.saved_model.load(saved_model or source_path)
        model, source, input_name = [loaded.signatures["serving_default"]], {"source": "tensorflow"}, None
    shape = (1, *samples.shape[1:])
    inputs = [ct.TensorType(name=input_name, shape=shape, dtype=np.float32)] if input_name else [
        ct.TensorType(shape=shape, dtype=np.float32)
    ]
    try:
        mlmodel = ct.convert(
            model,
            convert_to="mlprogram",
            minimum_deployment_target=getattr(ct.target, DEPLOYMENT_TARGET),
            inputs=inputs,
            outputs=[ct.TensorType(dtype=np.float32)],  # iOS 16+ would default to float16 IO
            **source,
        )
    except Exception as exc:
        raise _explain(exc) from None

    activations, reason = "float16", LINUX_ACTIVATIONS_REASON
    if sys.platform == "darwin":  # CoreML prediction exists: calibrate activations too (W8A8)
        name = mlmodel.get_spec().description.input[0].name
        data = [{name: np.asarray(samples[i : i + 1], dtype=np.float32)} for i in range(len(samples))]
        config = cto.OptimizationConfig(
            global_config=cto.experimental.OpActivationLinearQuantizerConfig(mode="linear_symmetric")
        )
        mlmodel = cto.experimental.linear_quantize_activations(mlmodel, config, data)
        activations, reason = "int8", "calibrated with coremltools linear_quantize_activations on macOS"
    weights = cto.OptimizationConfig(
        global_config=cto.OpLinearQuantizerConfig(
            mode="linear_symmetric", dtype="int8", granularity="per_channel", weight_threshold=0
        )
    )
    mlmodel = cto.linear_quantize_weights(mlmodel, config=weights)
    mlmodel.save(output)
    worker.report_progress(len(samples), len(samples))
    structure = check_structure(output, shape)
    spec = mlmodel.get_spec()
    return {
        "coremltools": ct.__version__,
        "seconds": round(time.perf_counter() - started, 3),
        "activations": activations,
        "activations_reason": reason,
        "structure": structure,
        "inputs": [i.name for i in spec.description.input],
        "outputs": [o.name for o in spec.description.output],
    }


def check_structure(path: str, input_shape: tuple[int, ...]) -> dict[str, Any]:
    """The saved package loads, has one input of the expected shape, and int8 weights only."""
    import coremltools as ct
    from coremltools.proto import MIL_pb2

    model = ct.models.MLModel(path, skip_model_load=True)
    spec = model.get_spec()
    if not spec.HasField("mlProgram"):
        raise ConversionError(f"{path} is not an ML program")
    (feature,) = spec.description.input
    shape = tuple(int(d) for d in feature.type.multiArrayType.shape)
    if shape != tuple(input_shape):
        raise ConversionError(f"CoreML input {feature.name} has shape {shape}, expected {tuple(input_shape)}")
    function = spec.mlProgram.functions["main"]
    operations = function.block_specializations[function.opset].operations
    produced_by = {out.name: op for op in operations for out in op.outputs}
    weight_ops = int8_weights = 0
    float_weights = []
    for op in operations:
        argument = _WEIGHT_OPS.get(op.type)
        if argument is None or argument not in op.inputs:
            continue
        weight_ops += 1
        source = produced_by.get(op.inputs[argument].arguments[0].name)
        if source is not None and source.type in _DEQUANTIZE_OPS:
            data = source.attributes.get("quantized_data") or source.attributes.get("data")
            if data is not None and data.type.tensorType.dataType == MIL_pb2.INT8:
                int8_weights += 1
                continue
        float_weights.append(op.outputs[0].name)
    if float_weights:
        raise ConversionError(f"CoreML weights left in float for: {', '.join(float_weights[:5])}")
    return {
        "loads": True,
        "spec_version": spec.specificationVersion,
        "input": {"name": feature.name, "shape": list(shape)},
        "outputs": [o.name for o in spec.description.output],
        "weight_ops": weight_ops,
        "int8_weight_ops": int8_weights,
        "ops": sorted({op.type for op in operations}),
    }


def _explain(exc: Exception) -> Exception:
    text = str(exc).strip()
    first = text.splitlines()[0] if text else type(exc).__name__
    if "not implemented" in text.lower() or "unsupported" in text.lower():
        return ConversionError(
            f"coremltools cannot convert this model: {first}",
            hint="replace the unsupported layer, or package without --target coreml",
        )
    return ConversionError(f"coremltools conversion failed: {type(exc).__name__}: {first}")
