"""TFLite target: full-integer INT8 ``tflite/model.int8.tflite``.

Converts the exported SavedModel with ``TFLiteConverter.from_saved_model`` (the path that
works for Keras 3 with TensorFlow 2.20/2.21), ``TFLITE_BUILTINS_INT8`` only, int8 input and
output, calibrated with the representative dataset. The converter silently leaves ops it
cannot quantize in float (DEQUANTIZE -> op -> QUANTIZE), so the result is inspected with the
LiteRT interpreter and any float op is reported by op and layer name.
"""

from __future__ import annotations

import re
import time
from pathlib import Path
from typing import Any

import numpy as np

from .. import worker
from ..errors import UnsupportedOpError
from ..fsutil import sha256_file
from ..manifest import Artifact, QuantParams
from .base import BuildContext, Target

ARTIFACT_PATH = "tflite/model.int8.tflite"
_NOT_FLOAT_OPS = {"QUANTIZE", "DEQUANTIZE", "DELEGATE"}
_FLOAT_TYPES = {np.dtype(np.float32), np.dtype(np.float16), np.dtype(np.float64)}


class TFLiteTarget(Target):
    name = "tflite"
    description = "full-integer INT8 TFLite (LiteRT): Android, Raspberry Pi, Linux, microcontrollers"
    backend = "litert"

    def build(self, context: BuildContext) -> Artifact:
        output = context.package_dir / ARTIFACT_PATH
        output.parent.mkdir(parents=True, exist_ok=True)
        info = worker.call(
            "edgekit.targets.tflite:convert",
            what="TFLite conversion",
            timeout=context.timeout_s,
            on_progress=context.on_progress,
            saved_model=context.saved_model,
            calibration_npy=context.calibration_npy,
            output=str(output),
            quantize=True,
            allow_float_ops=context.allow_float_ops,
        )
        float_ops = find_float_ops(str(output), context.layer_names)
        if float_ops and not context.allow_float_ops:
            listed = ", ".join(f"{op['op']} (layer {op['layer']})" for op in float_ops[:8])
            more = f" and {len(float_ops) - 8} more" if len(float_ops) > 8 else ""
            raise UnsupportedOpError(f"TFLite cannot run these ops in INT8: {listed}{more}")
        inputs, outputs = io_quantization(str(output))
        return Artifact(
            target=self.name,
            path=ARTIFACT_PATH,
            sha256=sha256_file(output),
            bytes=output.stat().st_size,
            precision="int8" if not float_ops else "int8+float",
            inputs=inputs,
            outputs=outputs,
            float_ops=float_ops,
            converter={
                "tool": "tensorflow.lite.TFLiteConverter.from_saved_model",
                "tensorflow": info["tensorflow"],
                "ops": info["ops"],
                "calibration_method": "minmax",
                "seconds": info["seconds"],
            },
        )


def io_quantization(path: str) -> tuple[list[QuantParams], list[QuantParams]]:
    from ..backends.litert import LiteRTBackend

    backend = LiteRTBackend(path)
    try:
        convert = lambda t: QuantParams(t.name, str(t.dtype), t.scale, t.zero_point)  # noqa: E731
        return [convert(t) for t in backend.inputs], [convert(t) for t in backend.outputs]
    finally:
        backend.close()


def find_float_ops(path: str, layer_names: list[str]) -> list[dict[str, str]]:
    """Ops of a TFLite model that compute in float, with the layer each comes from."""
    from ..backends.litert import open_interpreter

    interpreter = open_interpreter(path, with_delegates=False)
    names = {d["index"]: d["name"] for d in interpreter.get_tensor_details()}
    found: list[dict[str, str]] = []
    for op in interpreter._get_ops_details():  # the public API has no op list
        if op["op_name"] in _NOT_FLOAT_OPS:
            continue
        types = [np.dtype(t) for t in list(op.get("operand_types", [])) + list(op.get("result_types", []))]
        if any(t in _FLOAT_TYPES for t in types):
            tensor = names.get(int(op["outputs"][0]), "") if len(op["outputs"]) else ""
            found.append({"op": op["op_name"], "layer": layer_of(tensor, layer_names), "tensor": tensor})
    return found


def layer_of(tensor_name: str, layer_names: list[str]) -> str:
    """The Keras layer a converted tensor came from (TF adds ``_1`` suffixes to layer scopes)."""
    known = set(layer_names)
    parts = tensor_name.split(";")[0].split("/")
    for part in parts[1:] + parts[:1]:
        if part in known:
            return part
        base = re.sub(r"_\d+$", "", part)
        if base in known:
            return base
    return parts[1] if len(parts) > 2 else tensor_name


# --- child-process side -------------------------------------------------------------------


def convert(
    saved_model: str, calibration_npy: str, output: str, quantize: bool = True, allow_float_ops: bool = False
) -> dict[str, Any]:
    """Run TFLiteConverter (float, or full-integer INT8 calibrated on ``calibration_npy``)."""
    import tensorflow as tf

    converter = tf.lite.TFLiteConverter.from_saved_model(saved_model)
    ops = "TFLITE_BUILTINS"
    if quantize:
        samples = np.load(calibration_npy, mmap_mode="r")

        def representative_dataset():  # one sample per step, as the converter expects
            total = len(samples)
            for i in range(total):
                if i % 10 == 0:
                    worker.report_progress(i, total)
                yield [np.asarray(samples[i : i + 1], dtype=np.float32)]
            worker.report_progress(total, total)

        converter.optimizations = [tf.lite.Optimize.DEFAULT]
        converter.representative_dataset = representative_dataset
        supported = [tf.lite.OpsSet.TFLITE_BUILTINS_INT8]
        if allow_float_ops:
            supported.append(tf.lite.OpsSet.TFLITE_BUILTINS)
        converter.target_spec.supported_ops = supported
        converter.inference_input_type = tf.int8
        converter.inference_output_type = tf.int8
        ops = "+".join(s.name for s in supported)
    started = time.perf_counter()
    try:
        model = converter.convert()
    except Exception as exc:
        raise _explain(exc) from None
    seconds = time.perf_counter() - started
    Path(output).write_bytes(model)
    return {"tensorflow": tf.__version__, "ops": ops, "seconds": round(seconds, 3)}


def _explain(exc: Exception) -> Exception:
    """Turn the converter's MLIR dump into one line naming the ops (and layers) it refused."""
    text = str(exc)
    ops = sorted(set(re.findall(r"'(tf\.\w+)' op is neither a custom op nor a flex op", text)))
    if ops:
        layers = sorted(set(re.findall(r'loc\(.*?"[^"/]*?/?([^"/]+)/[^"/]+@', text)))
        where = f" (in {', '.join(layers[:5])})" if layers else ""
        return UnsupportedOpError(
            f"TFLite has no builtin kernel for {', '.join(ops)}{where}",
            hint="replace the layer with TFLite-supported ops (see the TFLite op compatibility list)",
        )
    from ..errors import ConversionError

    first = next((line for line in text.splitlines() if "error" in line.lower()), text.splitlines()[0] if text else "")
    return ConversionError(f"TFLite converter failed: {first.strip()}")
