"""TensorFlow sources (build side): Keras ``.keras``/``.h5`` and TF SavedModel directories.

``detect`` runs in the parent and only looks at files. ``prepare`` and ``float_reference`` run
in a child process (``edgekit.conversion.worker``) because they import TensorFlow: every format converts
from the one SavedModel that ``prepare`` exports, and the float reference outputs come from
that same SavedModel.
"""

from __future__ import annotations

import zipfile
from pathlib import Path
from typing import Any

from ..conversion import forms
from ..errors import ModelSourceError
from ..conversion.forms import ModelForm
from .base import Source, first_line

_HDF5_MAGIC = b"\x89HDF\r\n\x1a\n"


def detect(model: Path) -> str | None:
    """``keras``, ``h5`` or ``saved_model`` for a TensorFlow model at ``model``; None if not one."""
    if model.is_dir():
        if (model / "saved_model.pb").is_file() or (model / "saved_model.pbtxt").is_file():
            return "saved_model"
        raise ModelSourceError(
            f"{model} is a directory but not a SavedModel (no saved_model.pb)",
            hint="pass the directory written by model.export(DIR) or tf.saved_model.save",
        )
    suffix = model.suffix.lower()
    if suffix == ".keras":
        if not zipfile.is_zipfile(model):
            raise ModelSourceError(
                f"{model} is not a Keras model (a .keras file is a zip archive; this one is not)",
                hint="save the model with model.save('model.keras')",
            )
        return "keras"
    if suffix in (".h5", ".hdf5"):
        with open(model, "rb") as handle:
            head = handle.read(8)
        if head != _HDF5_MAGIC:
            raise ModelSourceError(
                f"{model} is not a Keras model (not an HDF5 file)", hint="save the model with model.save('model.h5')"
            )
        return "h5"
    return None


# --- child-process side -------------------------------------------------------------------


def prepare(model_path: str, kind: str, export_dir: str, hints: dict[str, Any] | None = None) -> dict[str, Any]:
    """Load the model, export a SavedModel (Keras sources) and describe its signature."""
    from .base import refuse_batch_axes

    refuse_batch_axes(hints or {}, "Keras and SavedModel")
    if (hints or {}).get("fixed_inputs"):
        raise ModelSourceError(
            "--input NAME=VALUE (an input fixed to a constant) works for ONNX and PyTorch sources, not "
            f"{'Keras' if kind in ('keras', 'h5') else 'SavedModel'} models",
            hint="build the constant into the model (a Keras model whose input feeds a layer with the value), or "
                 "export the model to ONNX (tf2onnx) and package that with --input",
        )
    import tensorflow as tf

    info: dict[str, Any] = {"layers": [], "rescales": False, "versions": {"tensorflow": tf.__version__}, "recorded": {}}
    saved_model, model = model_path, None
    if kind in ("keras", "h5"):
        import keras

        info["versions"]["keras"] = keras.__version__
        try:
            # safe_mode: a Lambda layer's Python bytecode is refused, never run
            model = keras.models.load_model(model_path, compile=False, safe_mode=True)
        except Exception as exc:
            if "safe_mode" in str(exc) or "Lambda" in str(exc):
                raise ModelSourceError(
                    f"{model_path} contains a Lambda layer: its Python bytecode would run when loaded, and edgekit "
                    "does not run code from model files",
                    hint="replace the Lambda with a registered custom layer (keras.saving.register_keras_serializable) "
                         "or with built-in layers, and save the model again",
                ) from None
            raise ModelSourceError(
                f"cannot load {model_path} as a Keras model: {type(exc).__name__}: {first_line(exc)}",
                hint="check that it was saved by Keras (custom layers must be importable and registered)",
            ) from None
        info["layers"] = [layer.name for layer in _walk_layers(model)]
        info["rescales"] = _starts_with_rescaling(model)
        info["output_layers"] = _output_layers(model)
        info["output_structure"] = _output_structure(model)
        model.export(export_dir, format="tf_saved_model", verbose=False)
        saved_model = export_dir
    try:
        loaded = tf.saved_model.load(saved_model)
    except Exception as exc:
        raise ModelSourceError(
            f"TensorFlow {tf.__version__} cannot load the SavedModel {saved_model}: {type(exc).__name__}: "
            f"{first_line(exc)}",
            hint="it was probably saved by another TensorFlow version or with ops this one lacks: load it where it "
                 "was made and export ONNX from there (python -m tf2onnx.convert --saved-model DIR --output "
                 "model.onnx), then package model.onnx",
        ) from None
    signature = loaded.signatures.get("serving_default")
    if kind == "saved_model" and signature is not None and signature.captured_inputs:
        frozen = _frozen_copy(signature, export_dir)
        if frozen is not None:
            info["recorded"]["frozen_from"] = saved_model
            saved_model = frozen
            loaded = tf.saved_model.load(saved_model)
            signature = loaded.signatures["serving_default"]
    if signature is None:
        raise ModelSourceError(
            f"SavedModel {saved_model} has no 'serving_default' signature",
            hint="export it with model.export(DIR) or tf.saved_model.save(obj, DIR, signatures=...)",
        )
    _, kw_inputs = signature.structured_input_signature
    outputs = signature.structured_outputs
    info["saved_model"] = saved_model
    info["forms"] = _forms(model, signature, saved_model, model_path, export_dir)
    info["inputs"] = [_describe(name, spec) for name, spec in sorted(kw_inputs.items())]
    info["outputs"] = [_describe(name, spec) for name, spec in sorted(outputs.items())]
    if "output_layers" not in info:  # no Keras layers: --keep-float names an output by itself
        info["output_layers"] = {o["name"]: o["name"] for o in info["outputs"]}
    if "output_structure" not in info:  # no Keras layers: the graph itself says what the outputs are
        info["output_structure"] = _graph_structure(signature)
    quantized = _fake_quant_scheme(signature)
    if quantized:  # QAT with TensorFlow's fake-quant ops: TFLite's converter takes their ranges as given
        info["recorded"]["quantized"] = info["quantized"] = quantized
    return info


def _fake_quant_scheme(signature: Any) -> dict[str, Any] | None:
    """TensorFlow's fake-quant ops in the signature's graph (its functions included): the scheme a
    QAT model was trained in, or None."""
    graph = signature.graph.as_graph_def()
    nodes = [*graph.node, *(n for function in graph.library.function for n in function.node_def)]
    fake = [n for n in nodes if n.op.startswith("FakeQuantWithMinMax")]
    if not fake:
        return None
    ops = sorted({n.op for n in fake})
    channel = [n for n in fake if n.op.endswith("PerChannel")]
    return {"format": "fake-quant", "ops": {op: sum(n.op == op for n in fake) for op in ops},
            "bits": sorted({int(n.attr["num_bits"].i or 8) for n in fake}),
            "per_channel_tensors": len(channel), "narrow_range": any(n.attr["narrow_range"].b for n in fake)}


TF_PASS_THROUGH = {"Identity", "IdentityN", "Cast", "StopGradient"}
TF_PART_PASS_THROUGH = TF_PASS_THROUGH | {"Reshape", "Transpose", "Squeeze", "ExpandDims", "StridedSlice", "Split",
                                          "SplitV", "Slice"}


def _graph_structure(signature: Any) -> dict[str, dict[str, Any]]:
    """Each output's structure (``edgekit.comparison.structure``'s form) from the TensorFlow graph,
    with the variables folded in so the layers' ops are visible (not a StatefulPartitionedCall)."""
    try:
        from tensorflow.python.framework.convert_to_constants import convert_variables_to_constants_v2

        frozen = convert_variables_to_constants_v2(signature)
        names = sorted(signature.structured_outputs)  # the frozen function's outputs, in flattened (key) order
        return {str(name): _tf_walk(tensor) for name, tensor in zip(names, frozen.outputs)}
    except Exception:  # a graph that cannot be frozen or read: no structure, the values decide
        return {}


def _tf_walk(tensor: Any) -> dict[str, Any]:
    """The output's structure. Node names are left out: a frozen graph's op names are not what
    --keep-float accepts for a SavedModel (the output's own name is)."""
    rank = tensor.shape.rank or 0
    axes = list(range(rank))
    for _ in range(12):
        op = tensor.op
        if op.type in TF_PASS_THROUGH and op.inputs:
            tensor = op.inputs[0]
            continue
        if op.type == "Transpose" and len(op.inputs) == 2:
            perm = _tf_constant(op.inputs[1])
            if perm is None or len(perm) != len(axes):
                break
            moved = [0] * len(axes)
            for out_axis, in_axis in enumerate(perm):
                moved[int(in_axis)] = axes[out_axis]
            axes, tensor = moved, op.inputs[0]
            continue
        if op.type in ("Softmax", "LogSoftmax"):
            return {"op": "softmax", "axis": axes[-1] if axes else None, "node": None}
        if op.type == "Sigmoid":
            return {"op": "sigmoid", "axis": None, "node": None}
        if op.type == "ConcatV2" and axes:
            axis = _tf_constant(op.inputs[-1])
            if axis is None:
                break
            axis = int(axis) % len(axes)
            parts = [{"size": t.shape[axis] if t.shape.rank == len(axes) else None, "op": _tf_part(t)}
                     for t in op.inputs[:-1]]
            return {"op": "concat", "axis": axes[axis], "node": None, "parts": parts}
        break
    return {"op": "values", "axis": None, "node": None}


def _tf_part(tensor: Any) -> str:
    for _ in range(12):
        op = tensor.op
        if op.type in TF_PART_PASS_THROUGH and op.inputs:
            tensor = op.inputs[0]
            continue
        return {"Sigmoid": "sigmoid", "Softmax": "softmax", "Const": "constant"}.get(op.type, "values")
    return "values"


def _tf_constant(tensor: Any) -> Any:
    """The value of a constant tensor (an axis, a permutation), else None."""
    from tensorflow.python.framework import tensor_util

    if tensor.op.type != "Const":
        return None
    value = tensor_util.MakeNdarray(tensor.op.get_attr("value"))
    return value.tolist()


def _forms(model: Any, signature: Any, saved_model: str, model_path: str, export_dir: str) -> dict[str, Any]:
    """The forms the source provides: the SavedModel (with its copy at batch 1 where TensorFlow's
    converter needs one), and a Keras model's own file."""
    if model is None:
        return {forms.TF_GRAPH: ModelForm(forms.TF_GRAPH, saved_model).to_dict()}
    static = _static_batch_copy(model, signature, export_dir)
    return {forms.TF_GRAPH: ModelForm(forms.TF_GRAPH, saved_model, arguments={
        forms.STATIC_BATCH_GRAPH: static} if static else {}).to_dict(),
        forms.KERAS_MODEL: ModelForm(forms.KERAS_MODEL, model_path).to_dict()}


def _static_batch_copy(model: Any, signature: Any, export_dir: str) -> str | None:
    """The Keras model traced at batch 1 with its variables folded into constants, as a SavedModel
    beside the first, where the graph holds TensorList ops (a recurrent layer's steps, masked
    ones too): TensorFlow's converter lowers those to TFLite loops only at a static shape, and
    fails on the batch-free signature (``TensorListReserve``). None for other graphs, or where
    the model cannot be traced so (the batch-free SavedModel is then the only one)."""
    if not _holds_tensor_lists(signature):
        return None
    import numpy as np
    import tensorflow as tf

    specs = signature.structured_input_signature[1]
    names = [t.name.split(":")[0] for t in model.inputs]
    outputs = sorted(signature.structured_outputs)
    if sorted(names) != sorted(specs) or any(specs[n].shape.rank is None or specs[n].shape.rank == 0 for n in names):
        return None

    @tf.function(input_signature=[tf.TensorSpec((1, *specs[n].shape[1:]), specs[n].dtype, name=n) for n in names])
    def serve(*args: Any) -> dict[str, Any]:
        produced = tf.nest.flatten(model(list(args) if len(args) > 1 else args[0], training=False))
        return {name: produced[int(name.rsplit("_", 1)[1])] for name in outputs}

    try:
        if any(not (o.startswith("output_") and o.rsplit("_", 1)[1].isdigit()) for o in outputs):
            return None  # outputs named otherwise than Keras's export names them: their order is unknown here
        traced = serve.get_concrete_function()
        sample = {n: tf.zeros((1, *specs[n].shape[1:]), specs[n].dtype) for n in names}
        expected, got = signature(**sample), traced(*[sample[n] for n in names])
        # equal NaNs are equal: zeros are a fully masked sequence, whose average over no steps is 0/0
        if any(not np.allclose(np.asarray(expected[o], np.float32), np.asarray(got[o], np.float32), atol=1e-4,
                               equal_nan=True) for o in outputs):
            return None
        static_specs = {n: tf.TensorSpec((1, *specs[n].shape[1:]), specs[n].dtype, name=n) for n in names}
        return _frozen_copy(traced, str(Path(export_dir).with_name(Path(export_dir).name + "_batch1")),
                            names, static_specs)
    except Exception:  # a second form for one route's converter, never a requirement
        return None


def _holds_tensor_lists(signature: Any) -> bool:
    """Whether the signature's graph (its functions included) holds TensorList ops."""
    graph = signature.graph.as_graph_def()
    nodes = [node.op for node in graph.node] + [node.op for f in graph.library.function for node in f.node_def]
    return any(op.startswith("TensorList") for op in nodes)


def _frozen_copy(signature: Any, export_dir: str, names: list[str] | None = None,
                 specs: dict[str, Any] | None = None) -> str | None:
    """The serving signature with its variables folded into constants, saved as a new SavedModel.

    A SavedModel written by ``tf.saved_model.save(keras_model)`` reads its weights through
    resource variables that TFLite's calibration cannot resolve (``READ_VARIABLE ... variable !=
    nullptr``), and its op names are wrapped in ``StatefulPartitionedCall`` scopes. The frozen
    copy converts, and keeps the layer scopes (``model/dense/MatMul``) that ``--explain`` and
    ``--keep-float`` name. None when the graph cannot be frozen (the original is used).
    """
    import tensorflow as tf
    from tensorflow.python.framework.convert_to_constants import convert_variables_to_constants_v2

    try:
        frozen = convert_variables_to_constants_v2(signature)
        specs = specs or signature.structured_input_signature[1]
        names = names or sorted(specs)  # the order ``signature`` takes its inputs in
        outputs = sorted(signature.structured_outputs)

        @tf.function(input_signature=[tf.TensorSpec(specs[n].shape, specs[n].dtype, name=n) for n in names])
        def serve(*args: Any) -> dict[str, Any]:
            return dict(zip(outputs, frozen(*args)))

        module = tf.Module()
        module.serve = serve
        target = str(Path(export_dir).with_name(Path(export_dir).name + "_frozen"))
        tf.saved_model.save(module, target, signatures={"serving_default": serve.get_concrete_function()})
        return target
    except Exception:  # freezing is an improvement, never a requirement
        return None


def float_reference(prepared: dict[str, Any], inputs_npz: str, output_npz: str, batch_size: int = 64) -> None:
    """Every output of the float SavedModel on ``inputs_npz`` (one array per input name), saved to
    ``output_npz`` by output name. A model exported with a fixed batch size runs in slices of it."""
    import numpy as np
    import tensorflow as tf

    signature = tf.saved_model.load(prepared["saved_model"]).signatures["serving_default"]
    specs = signature.structured_input_signature[1]
    with np.load(inputs_npz) as stored:
        inputs = {name: stored[name] for name in specs}
    fixed = {spec.shape[0] for spec in specs.values() if spec.shape.rank and spec.shape[0] is not None}
    padded = len(fixed) == 1  # exported with a fixed batch size: every call gets exactly that many
    step = next(iter(fixed)) if padded else batch_size
    total = len(next(iter(inputs.values())))
    chunks: dict[str, list[Any]] = {}
    for start in range(0, total, step):
        part = {name: x[start : start + step] for name, x in inputs.items()}
        n = len(next(iter(part.values())))
        if n < step and padded:
            part = {k: np.concatenate([v, np.repeat(v[-1:], step - n, axis=0)]) for k, v in part.items()}
        result = signature(**{name: tf.constant(x, dtype=specs[name].dtype) for name, x in part.items()})
        for name in sorted(result):
            chunks.setdefault(name, []).append(result[name].numpy()[:n])
    np.savez(output_npz, **{name: np.concatenate(parts) for name, parts in chunks.items()})


def _output_layers(model: Any) -> dict[str, str]:
    """The Keras layer computing each output, by the name ``model.export`` gives the output: the
    dict key for dict outputs, ``output_N`` for a list or one tensor."""
    import keras

    try:
        structure = model.output
    except AttributeError:  # a Sequential model saved before it was ever called: only `outputs` is set
        structure = model.outputs
    if isinstance(structure, dict):
        named = structure.items()
    else:
        named = ((f"output_{i}", t) for i, t in enumerate(keras.tree.flatten(structure)))
    found = {}
    for name, tensor in named:
        history = getattr(tensor, "_keras_history", None)
        operation = getattr(history, "operation", None)
        if operation is not None:
            found[str(name)] = operation.name
    return found


def _named_outputs(model: Any) -> list[tuple[str, Any]]:
    """(name ``model.export`` gives the output, its Keras tensor)."""
    import keras

    try:
        structure = model.output
    except AttributeError:
        structure = model.outputs
    if isinstance(structure, dict):
        return [(str(k), v) for k, v in structure.items()]
    return [(f"output_{i}", t) for i, t in enumerate(keras.tree.flatten(structure))]


KERAS_PASS_THROUGH = {"Identity", "Activation:linear", "Dropout", "InputLayer"}
KERAS_PART_PASS_THROUGH = KERAS_PASS_THROUGH | {"Reshape", "Permute", "Flatten", "Cropping1D", "Cropping2D"}


def _output_structure(model: Any) -> dict[str, dict[str, Any]]:
    """Each output's structure as ``edgekit.comparison.structure`` describes it, from the Keras layers
    (a functional model; anything else gives no structure and the values decide)."""
    found = {}
    for name, tensor in _named_outputs(model):
        try:
            found[name] = _keras_walk(tensor)
        except Exception:  # an unusual layer graph: no structure, never a failed package
            continue
    return found


def _keras_op(tensor: Any) -> tuple[Any, str, list[Any]]:
    """The operation making ``tensor``, its kind (class name, with the activation of a layer that has
    one), and the tensors it reads."""
    history = getattr(tensor, "_keras_history", None)
    operation = getattr(history, "operation", None)
    if operation is None:
        return None, "", []
    kind = type(operation).__name__
    activation = getattr(operation, "activation", None)
    if activation is not None and kind != "Activation" or kind == "Activation":
        kind = f"{kind}:{getattr(activation, '__name__', '')}"
    if hasattr(operation, "outputs") and hasattr(operation, "layers"):  # a nested model: walk into it
        inner = operation.outputs[history.tensor_index]
        return _keras_op(inner) if inner is not tensor else (operation, kind, [])
    nodes = getattr(operation, "_inbound_nodes", [])
    inputs = list(nodes[history.node_index].input_tensors) if len(nodes) > history.node_index else []
    return operation, kind, inputs


def _keras_kind(kind: str) -> str | None:
    base, _, activation = kind.partition(":")
    if base in ("Softmax",) or activation == "softmax":
        return "softmax"
    if base in ("Sigmoid",) or activation in ("sigmoid", "hard_sigmoid"):
        return "sigmoid"
    if base in ("UnitNormalization", "Normalize"):
        return "l2norm"
    return None


def _keras_walk(tensor: Any) -> dict[str, Any]:
    rank = len(tensor.shape)
    for _ in range(12):
        operation, kind, inputs = _keras_op(tensor)
        if operation is None:
            break
        if kind.split(":")[0] in KERAS_PASS_THROUGH or kind in KERAS_PASS_THROUGH:
            if not inputs:
                break
            tensor = inputs[0]
            continue
        op = _keras_kind(kind)
        if op is not None:
            axis = getattr(operation, "axis", -1)
            axis = axis[0] if isinstance(axis, (list, tuple)) and len(axis) == 1 else axis
            axis = int(axis) % rank if isinstance(axis, int) and rank else None
            return {"op": op, "axis": axis if op != "sigmoid" else None, "node": operation.name}
        if kind.split(":")[0] == "Concatenate" and rank:
            axis = int(getattr(operation, "axis", -1)) % rank
            parts = [{"size": None if t.shape[axis] is None else int(t.shape[axis]), "op": _keras_part(t)}
                     for t in inputs]
            return {"op": "concat", "axis": axis, "node": operation.name, "parts": parts}
        return {"op": "values", "axis": None, "node": operation.name}
    return {"op": "values", "axis": None, "node": None}


def _keras_part(tensor: Any) -> str:
    for _ in range(12):
        operation, kind, inputs = _keras_op(tensor)
        if operation is None:
            return "values"
        if (kind.split(":")[0] in KERAS_PART_PASS_THROUGH or kind in KERAS_PART_PASS_THROUGH) and inputs:
            tensor = inputs[0]
            continue
        return _keras_kind(kind) or "values"
    return "values"


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


SOURCE = Source(
    name="tensorflow",
    accepts=".keras, .h5 or a SavedModel directory",
    detect=detect,
    prepare=prepare,
    float_reference=float_reference,
    provides={"keras": (forms.KERAS_MODEL, forms.TF_GRAPH), "h5": (forms.KERAS_MODEL, forms.TF_GRAPH),
              "saved_model": (forms.TF_GRAPH,)},
    runs_code={"saved_model": "runs the TensorFlow graph saved in it (graph ops can read and write files)"},
)
