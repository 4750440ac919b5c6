"""The written ML program checked and read (child side): it loads, its inputs and outputs are the
manifest's, every conv/linear weight is int8, its activation quantize ops are counted; the ops of
each source layer (for --keep-float and the per-layer report)."""

from __future__ import annotations

import re
from typing import Any

from ...conversion.layer_names import in_layer
from ...errors import ConversionError
from .names import source_name

WEIGHT_OPS = {"conv": "weight", "conv_transpose": "weight", "linear": "weight", "matmul": "y"}
INLINE_WEIGHT_LIMIT = 10  # coremltools' should_use_weight_file: smaller consts stay inline, uncompressed
_DEQUANTIZE_OPS = {"constexpr_affine_dequantize", "constexpr_blockwise_shift_scale"}
_CONSTANT_OPS = {"const"} | _DEQUANTIZE_OPS
_CONSTANT_PRESERVING = {"cast", "transpose", "reshape", "expand_dims", "squeeze"}  # constant in, constant out


def _is_constant(source: Any, produced_by: dict[str, Any]) -> bool:
    """Whether an op argument is a constant (a weight), following casts and reshapes back to it;
    a graph input (``source`` None) or any computed value is an activation."""
    for _ in range(8):
        if source is None:
            return False
        if source.type in _CONSTANT_OPS:
            return True
        if source.type not in _CONSTANT_PRESERVING or "x" not in source.inputs:
            return False
        source = produced_by.get(source.inputs["x"].arguments[0].name)
    return False


def check_structure(path: str, input_shapes: dict[str, tuple[int, ...]] | tuple[int, ...],
                    kept: set[str] = frozenset()) -> dict[str, Any]:
    """The saved package loads, has one input of the expected shape, and int8 weights only (but
    for the ops in ``kept``, the --keep-float layers, whose weights are float16 by request)."""
    from .tools import coremltools

    ct = coremltools()
    from coremltools.proto import MIL_pb2

    model = ct.models.MLModel(path, skip_model_load=True)
    spec = model.get_spec()
    if not spec.HasField("mlProgram"):
        raise ConversionError(f"{path} is not an ML program")
    features = list(spec.description.input)
    if not isinstance(input_shapes, dict):  # one input's expected shape
        if len(features) != 1:
            raise ConversionError(f"CoreML model has {len(features)} inputs, expected 1")
        input_shapes = {features[0].name: tuple(input_shapes)}
    for feature in features:
        shape = tuple(int(d) for d in feature.type.multiArrayType.shape)
        expected = input_shapes.get(feature.name) or input_shapes.get(source_name(feature.name))
        if expected is None and len(features) == 1:
            expected = next(iter(input_shapes.values()))
        if expected is None or shape != tuple(expected):
            raise ConversionError(f"CoreML input {feature.name} has shape {shape}, expected {expected}")
    function = spec.mlProgram.functions["main"]
    operations = function.block_specializations[function.opset].operations
    produced_by = {out.name: op for op in operations for out in op.outputs}
    weight_ops = int8_weights = 0
    float_weights: list[str] = []
    kept_weights: list[str] = []
    inline_weights: list[str] = []
    for op in operations:
        argument = WEIGHT_OPS.get(op.type)
        if argument is None or argument not in op.inputs:
            continue
        source = produced_by.get(op.inputs[argument].arguments[0].name)
        if not _is_constant(source, produced_by):
            continue  # a product of two activations (attention's Q.K and scores.V): no weight to compress
        weight_ops += 1
        if source is not None and source.type in _DEQUANTIZE_OPS:
            data = source.attributes.get("quantized_data") or source.attributes.get("data")
            if data is not None and data.type.tensorType.dataType == MIL_pb2.INT8:
                int8_weights += 1
                continue
        if op.outputs[0].name in kept:
            kept_weights.append(op.outputs[0].name)
            continue
        if source is not None and source.type == "const" and 0 < _element_count(source) < INLINE_WEIGHT_LIMIT:
            inline_weights.append(op.outputs[0].name)  # coremltools stores these inline, never compressed
            continue
        float_weights.append(op.outputs[0].name)
    if float_weights:
        raise ConversionError(f"CoreML weights left in float for: {', '.join(float_weights[:5])}")
    int8_activations = sum(
        1 for op in operations if op.type == "quantize"
        and _string_attr(op, produced_by, "output_dtype") in ("int8", "uint8")
    )
    return {
        "int8_activation_quantize_ops": int8_activations,
        "loads": True,
        "spec_version": spec.specificationVersion,
        "input": {"name": feature.name, "shape": list(shape)},
        "outputs": [o.name for o in spec.description.output],
        "weight_ops": weight_ops,
        "int8_weight_ops": int8_weights,
        # weights of fewer than 10 values: coremltools keeps them inline in float16 by design
        "inline_float16_weight_ops": inline_weights,
        "float16_weight_ops_kept": kept_weights,  # --keep-float layers
        "ops": sorted({op.type for op in operations}),
    }


_GENERIC_NAME = re.compile(r"^[a-z_]+?_\d+(_cast_fp\d+)?$")  # an op a MIL pass renamed: conv_0_cast_fp16


def layer_ops(mlmodel: Any, layers: list[str], layer_names: list[str]) -> dict[str, list[str]]:
    """The ML program's compute ops of each --keep-float layer, by name: ops named after the
    layer's scope (coremltools writes a TensorFlow scope's '/' as '_': ``model_1_conv2_1_BiasAdd``),
    and ops a pass renamed (``conv_0``) whose results go only to that layer's ops. A layer with no
    op is refused by name, never ignored. A layer folded into the next one's op (a Conv and its
    BatchNorm) is that op."""
    if not layers:
        return {}
    from ...errors import EdgekitError

    operations = [op for op in mlmodel._mil_program.functions["main"].operations if op.op_type != "const"]
    known = [re.sub(r"[^0-9A-Za-z]", "_", name) for name in layer_names]

    def named_after(op_name: str, layer: str) -> bool:
        return in_layer(op_name, layer, separator="_")

    def folded_into(layer: str) -> str | None:
        """The next layer, when ``layer`` has no op of its own and the next one's op computes it
        (coremltools folds a Conv and the BatchNorm after it into one conv named after the BatchNorm)."""
        if layer not in layer_names:
            return None
        following = layer_names[layer_names.index(layer) + 1:layer_names.index(layer) + 2]
        if not following:
            return None
        scope = re.sub(r"[^0-9A-Za-z]", "_", following[0])
        weighted = [op for op in operations if named_after(op.name, scope) and op.op_type in WEIGHT_OPS]
        return scope if weighted else None

    found: dict[str, list[str]] = {}
    for layer in layers:
        scope = re.sub(r"[^0-9A-Za-z]", "_", layer)
        if not any(named_after(op.name, scope) for op in operations):
            scope = folded_into(layer) or scope
        members = {op.name for op in operations if named_after(op.name, scope)}
        grew = bool(members)
        while grew:  # renamed ops that feed only this layer's ops belong to it
            grew = False
            for op in operations:
                if op.name in members or not _GENERIC_NAME.match(op.name) or any(named_after(op.name, k)
                                                                                   for k in known):
                    continue
                children = [child for out in op.outputs for child in out.child_ops]
                if children and all(child.name in members for child in children):
                    members.add(op.name)
                    grew = True
        found[layer] = sorted(members)
    missing = [layer for layer, names in found.items() if not names]
    if missing:
        raise EdgekitError(f"--keep-float: no CoreML ops belong to layer(s) {', '.join(missing)}",
                           hint="use layer names as the model defines them (TensorFlow scopes; a traced PyTorch "
                                "module's ops carry no layer names, so that route takes no --keep-float)")
    return found


def weighted_layers(mlmodel: Any, layer_names: list[str]) -> list[str]:
    """The source's layers with a weighted op of their own in the ML program (conv, linear,
    matmul), in the source's order: what ``--keep-float`` can raise here."""
    from ...errors import EdgekitError

    weighted = {op.name for op in mlmodel._mil_program.functions["main"].operations if op.op_type in WEIGHT_OPS}
    found = []
    for layer in layer_names:
        try:
            members = layer_ops(mlmodel, [layer], layer_names)[layer]
        except EdgekitError:  # no op of its own (an input, a reshape folded away)
            continue
        if weighted & set(members):
            found.append(layer)
    return found


def _element_count(const_op: Any) -> int:
    """Values in a const op's output tensor (0 when its shape is not static)."""
    dimensions = const_op.outputs[0].type.tensorType.dimensions
    count = 1
    for dimension in dimensions:
        if not dimension.HasField("constant"):
            return 0
        count *= dimension.constant.size
    return count


def _string_attr(op: Any, produced_by: dict[str, Any], name: str) -> str:
    """A string parameter of an op, given inline or by a const op."""
    if name not in op.inputs:
        return ""
    source = produced_by.get(op.inputs[name].arguments[0].name)
    value = source.attributes.get("val") if source is not None else None
    if value is None:
        return ""
    strings = value.immediateValue.tensor.strings.values
    return strings[0] if strings else ""


def spec_inputs(mlmodel: Any) -> list[str]:
    """The ML program's input names, in its own order."""
    return [i.name for i in mlmodel.get_spec().description.input]
