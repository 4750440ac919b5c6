"""ONNX sources (build side): a ``.onnx`` file, described with the ``onnx`` package.

Its float reference comes from ONNX Runtime. A graph already quantized (QDQ from QAT or another
tool, ``quantized.py``) is its own reference, run as given: the ONNX format ships it with its
learned ranges, and the routes that would rebuild it as a float model refuse it.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from ..conversion import forms
from ..errors import ModelSourceError
from ..conversion.forms import ModelForm
from .base import Source, first_line
from ..conversion.quantized import quantization_scheme


def detect(model: Path) -> str | None:
    return "onnx" if model.is_file() and model.suffix.lower() == ".onnx" else None


def prepare(model_path: str, kind: str, export_dir: str, hints: dict[str, Any] | None = None) -> dict[str, Any]:
    """Check and describe the ONNX model (nothing to export: formats read it as it is, or a copy
    with the ``--input NAME=VALUE`` inputs made constants)."""
    fixed = (hints or {}).get("fixed_inputs") or {}
    describe_onnx(model_path)  # the source itself is checked first: its errors name it
    current, recorded = model_path, {}
    if fixed:
        from .fixed_inputs import freeze_onnx, record

        current = str(Path(export_dir).with_name("fixed_inputs.onnx"))
        freeze_onnx(model_path, current, fixed, {n: s["given_shape"] for n, s in fixed.items() if "given_shape" in s})
        recorded["fixed_inputs"] = record(fixed)
    from .onnx_rewrite import rewrite

    rewritten = str(Path(export_dir).with_name("rewritten.onnx"))
    changes = rewrite(current, rewritten, (hints or {}).get("sample_shapes"), (hints or {}).get("batch_axes"))
    if changes is not None:
        current = rewritten
        recorded["rewrites"] = changes
    described = describe_onnx(current)
    if described.get("quantized"):  # the manifest's source.quantized: the scheme the source was trained or tuned in
        recorded["quantized"] = described["quantized"]
    if current == model_path:
        return {**described, "recorded": recorded}
    return {**described, "converted_model": current, "recorded": recorded}


PEEK_MAX_BYTES = 256 * 2**20  # a bigger graph file (weights inside) is read in the describing child only


def peek(model_path: Path) -> dict[str, Any] | None:
    """The graph's op types and inputs, read without weights or checks (``Source.peek``), in the
    parent: only for a file small enough not to matter to its memory."""
    try:
        if Path(model_path).stat().st_size > PEEK_MAX_BYTES:
            return None
    except OSError:
        return None
    try:
        import onnx

        model = onnx.load(str(model_path), load_external_data=False)
    except Exception:  # not installed, or damaged: the description says what is wrong
        return None
    initializers = {i.name for i in model.graph.initializer}
    return {"op_types": sorted({n.op_type for n in model.graph.node}),
            "inputs": [v.name for v in model.graph.input if v.name not in initializers]}


def describe_onnx(model_path: str) -> dict[str, Any]:
    import onnx

    try:
        # the structure only: external weights (model.onnx.data) stay on disk, so a model over
        # protobuf's 2 GiB limit is described too; the checker reads the file by path for the same reason
        model = onnx.load(model_path, load_external_data=False)
        onnx.checker.check_model(model_path)
    except Exception as exc:
        raise ModelSourceError(
            f"{model_path} is not a valid ONNX model: {first_line(exc)}",
            hint="check that the file is complete and that its external weights file (if it has one, e.g. "
                 "model.onnx.data) is beside it; re-export it (torch.onnx.export, tf2onnx) if it is damaged",
        ) from None
    initializers = {i.name for i in model.graph.initializer}
    elem = {1: "float32", 10: "float16", 2: "uint8", 3: "int8", 6: "int32", 7: "int64"}

    def describe(value: Any) -> dict[str, Any]:
        tensor = value.type.tensor_type
        shape = [d.dim_value if d.HasField("dim_value") else -1 for d in tensor.shape.dim]
        described = {"name": value.name, "shape": shape, "dtype": elem.get(tensor.elem_type, str(tensor.elem_type))}
        names = [d.dim_param if d.HasField("dim_param") else "" for d in tensor.shape.dim]
        if any(names):  # symbolic dimensions: which axis of each input is the batch
            described["dim_names"] = names
        return described

    return {
        "saved_model": None,
        "onnx_model": model_path,
        "forms": {forms.ONNX_GRAPH: ModelForm(forms.ONNX_GRAPH, model_path).to_dict()},
        "layers": [n.name for n in model.graph.node],
        "op_types": sorted({n.op_type for n in model.graph.node}),  # what route limits are checked against
        "rescales": False,
        "onnx_opset": next((o.version for o in model.opset_import if o.domain in ("", "ai.onnx")), 0),
        "inputs": [describe(v) for v in model.graph.input if v.name not in initializers],
        "outputs": [describe(v) for v in model.graph.output],
        # the node computing each output: what --keep-float (and --auto-fix) names to keep it in float
        "output_layers": _output_layers(model),
        # what each output is made of (softmax, sigmoid, a Concat of parts): how it will be judged
        "output_structure": _structure(model),
        # a graph already quantized (QAT, another tool): its scheme; None for a float graph
        "quantized": quantization_scheme(model),
    }


def _structure(model: Any) -> dict[str, Any]:
    from ..comparison.structure import describe_onnx_outputs

    try:
        return describe_onnx_outputs(model)
    except Exception:  # structure sharpens the verdict; its absence leaves the values to decide
        return {}


SOURCE = Source(
    name="onnx",
    accepts=".onnx",
    detect=detect,
    prepare=prepare,
    float_reference=None,  # the ONNX format's runtime runs it (routing.float_reference)
    provides={"onnx": (forms.ONNX_GRAPH,)},
    peek=peek,
)


def _output_layers(model: Any) -> dict[str, str]:
    """Each output's computing node, looked through a QDQ graph's pair to the layer it quantizes
    (a converter writes that layer's op with the output's name)."""
    produced_by = {out: node for node in model.graph.node for out in node.output}
    found = {}
    for output in model.graph.output:
        node = produced_by.get(output.name)
        while node is not None and node.op_type in ("DequantizeLinear", "QuantizeLinear") \
                and node.input and node.input[0] in produced_by:
            node = produced_by[node.input[0]]
        if node is not None and node.name:
            found[output.name] = node.name
    return found
