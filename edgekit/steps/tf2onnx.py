"""The ``tf2onnx`` step: a TensorFlow graph (SavedModel) to a float ONNX graph, with tf2onnx's
command line run in a converter child (the run's reused one, where TensorFlow is already
imported), once per packaging run; a failure names the ops tf2onnx could not convert."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

from ..conversion import forms
from ..errors import ConversionError, EdgekitError, UnsupportedOpError
from ..conversion.forms import ModelForm
from .base import Conversion

TF2ONNX_OPSET = 17  # what tf2onnx writes (the ONNX format quantizes opset 13 and later)


def tf2onnx(form: ModelForm, context: Any) -> ModelForm:
    """SavedModel -> float ONNX (the result and tf2onnx's version stay in the workdir)."""
    from ..conversion import worker

    output = Path(context.workdir) / "model.float.onnx"
    version_file = output.with_suffix(".tf2onnx-version")
    if not (output.exists() and version_file.exists()):
        arguments = ["--saved-model", form.path, "--tag", "serve", "--signature_def", "serving_default",
                     "--opset", str(TF2ONNX_OPSET), "--output", str(output)]
        ran = worker.run_module("tf2onnx.convert", arguments, "tf2onnx conversion", context.timeout_s)
        # tf2onnx exits 0 even when it leaves ops it cannot convert in the graph: read its log too
        if ran.returncode != 0 or not output.exists() or "Unsupported ops:" in ran.output:
            raise explain_tf2onnx_failure(ran.output, list(context.layer_names))
        match = re.search(r"tf2onnx=([\w.]+)", ran.output)
        version_file.write_text(match.group(1) if match else "")
    version = version_file.read_text()
    return ModelForm(forms.ONNX_GRAPH, str(output), via=f"tf2onnx {version}".strip())


CONVERSIONS = (Conversion("tf2onnx", forms.TF_GRAPH, forms.ONNX_GRAPH, tf2onnx),)


def explain_tf2onnx_failure(log: str, layer_names: list[str] | None = None) -> EdgekitError:
    from ..conversion.layer_names import layer_of

    if "No module named tf2onnx" in log:
        return ConversionError("tf2onnx is not installed", hint="pip install 'edgekit[package]'")
    ops = re.findall(r"Tensorflow op \[([^\]]+)\] is not supported", log)
    counted = re.search(r"Unsupported ops: Counter\(\{(.*?)\}\)", log)
    if ops or counted:
        names = sorted({op.split(": ")[-1] for op in ops} | set(re.findall(r"'(\w+)'", counted.group(1) if counted else "")))
        paths = [op.split(": ")[0] for op in ops]
        layers = sorted({layer_of("/".join(p.split("/")[1:]), layer_names or []) for p in paths if "/" in p})
        where = f" (in {', '.join(layers[:5])})" if layers else ""
        return UnsupportedOpError(
            f"tf2onnx cannot convert op(s) {', '.join(names)}{where} to ONNX opset {TF2ONNX_OPSET}",
            hint="replace the layer with ONNX-convertible ops; other targets are not affected",
        )
    lines = [line for line in log.splitlines() if "ERROR" in line or "Error" in line]
    detail = lines[-1].strip() if lines else (log.strip().splitlines() or ["no output"])[-1]
    return ConversionError(f"tf2onnx failed: {detail}")
