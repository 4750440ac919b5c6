"""A quantized source (a QDQ graph: QAT, another tool) as an ML program with its learned ranges.

The graph is rebuilt as a PyTorch module whose QuantizeLinear / DequantizeLinear pairs are
PyTorch's quantize ops (``conversion.onnx_torch`` with ``keep_qdq``), exported at batch 1 and converted
by coremltools' torch.export frontend: each activation pair becomes a Core ML ``quantize`` /
``dequantize`` with the source's scale and zero point, each int8 weight behind its dequantize a
``constexpr_affine_dequantize`` with the learned int8 values and scales. Nothing is calibrated
and no compression pass runs: the ranges are the source's, read back from the saved program and
counted against the source's pairs. Core ML stores a scale in float16 (the ML program's compute
precision), the one rounding it adds.
"""

from __future__ import annotations

import time
from typing import Any

import numpy as np

from ...conversion import worker
from ...conversion.forms import ModelForm
from ...errors import ConversionError, OTHER_ROUTES, first_line
from .convert import DEPLOYMENT_TARGET, CoreMLReport, CoreMLRequest, _evaluate_final, _Samples, renamed
from .structure import WEIGHT_OPS, check_structure, spec_inputs
from .names import source_name

KEPT_TOOL = "coremltools.convert (torch.export frontend) of the source's quantize/dequantize pairs (its learned ranges)"


def is_kept_qdq(form: ModelForm) -> bool:
    """Whether a learned source's route form is its QDQ graph rebuilt as a PyTorch module (the
    route rebuilds ONNX; a Keras or PyTorch QAT model traced as it is goes its own way)."""
    from ...conversion.forms import ONNX_REBUILD_LOADER as LOADER

    return form.loader == LOADER


def convert_kept(request: CoreMLRequest) -> CoreMLReport:
    """Child side: the QDQ graph as an ML program with its own pairs; what was carried, checked."""
    from .tools import coremltools

    ct = coremltools()
    form, output = request.model, request.output
    samples = _Samples(request.calibration_npy)
    started = time.perf_counter()
    mlmodel = _program(form, samples, list(request.output_names))
    mlmodel.save(output)
    worker.report_progress(1, 1)
    floats = _float_weight_ops(mlmodel)
    structure = check_structure(output, samples.shapes(spec_inputs(mlmodel)), set(floats))
    carried = carried_ranges(form.path, mlmodel)
    evaluated, not_evaluated = _evaluate_final(output, request.eval_npy, request.eval_output_npy)
    spec = mlmodel.get_spec()
    return CoreMLReport(coremltools=ct.__version__, seconds=round(time.perf_counter() - started, 3),
                        structure=structure, learned_ranges=carried, float_weight_ops=tuple(floats),
                        evaluated_by=evaluated, not_evaluated=not_evaluated or "",
                        activations="int8", activations_reason="the source's learned ranges, never calibrated",
                        inputs=tuple(source_name(i.name) for i in spec.description.input),
                        outputs=tuple(o.name for o in spec.description.output))


def _program(form: ModelForm, samples: Any, output_names: list[str]) -> Any:
    """The rebuilt module (pairs kept) through torch.export at batch 1, inputs and outputs named
    as the source's."""
    import torch

    from ...conversion.onnx_torch import input_names, load
    from .tools import coremltools

    ct = coremltools()
    names = input_names(form.path)
    example = {n: np.ascontiguousarray(samples[n][:1] if samples.named else samples.only()[:1]) for n in names}
    try:
        module = load(form.path, example, keep_qdq=True).eval()
        with torch.no_grad():
            program = torch.export.export(module, tuple(torch.from_numpy(example[n]) for n in names))
        mlmodel = ct.convert(program.run_decompositions({}), convert_to="mlprogram",
                             minimum_deployment_target=getattr(ct.target, DEPLOYMENT_TARGET))
    except ConversionError:
        raise
    except Exception as exc:
        raise ConversionError(f"coremltools cannot convert this quantized graph with its pairs: "
                              f"{type(exc).__name__}: {first_line(exc)[:300]}", hint=OTHER_ROUTES) from None
    return renamed(mlmodel, names, output_names)


def _float_weight_ops(mlmodel: Any) -> list[str]:
    """The weighted ops whose weight is not an int8 constant behind a dequantize: the layers the
    source left float (their weights stay float16, labelled)."""
    from .evaluator import load_program_from_model

    operations = list(load_program_from_model(mlmodel).functions["main"].operations)
    found = []
    for op in operations:
        argument = WEIGHT_OPS.get(op.op_type)
        weight = op.inputs.get(argument) if argument else None
        if weight is None or weight.op is None:
            continue
        if weight.op.op_type == "const" or (weight.op.op_type == "cast" and weight.op.inputs["x"].op is not None
                                             and weight.op.inputs["x"].op.op_type == "const"):
            found.append(op.outputs[0].name)
    return found


def carried_ranges(source: str, mlmodel: Any) -> dict[str, Any]:
    """Each learned activation range of the source (scale, zero point) found on a quantize op of
    the program, compared as int8 (a uint8 pair is the same values with its zero point moved by
    128) within float16's rounding; weights counted likewise."""
    import onnx

    from ...conversion.quantized import float_weighted_nodes, matched_ranges, strip_qdq, weight_scales
    from .evaluator import load_program_from_model

    graph = onnx.load(source)
    weights, left_float = weight_scales(graph), float_weighted_nodes(graph)
    learned = strip_qdq(graph)
    program = load_program_from_model(mlmodel).functions["main"]
    pairs = []
    for op in program.operations:
        if op.op_type != "quantize":
            continue
        scale = float(np.asarray(op.inputs["scale"].val).reshape(-1)[0])
        zero = op.inputs.get("zero_point")
        point = int(np.asarray(zero.val).reshape(-1)[0]) if zero is not None else 0
        signed = str(op.inputs["output_dtype"].val) == "int8"
        pairs.append((scale, point if signed else point - 128))
    carried, missing = matched_ranges(learned, pairs, rtol=1e-3)  # float16 scales: 11 bits of mantissa
    dequantized = sum(1 for op in program.operations if op.op_type == "constexpr_affine_dequantize")
    return {"carried": carried, "not_found": missing, "quantize_ops": len(pairs),
            "weights": {"learned": len(weights), "int8_constants": dequantized}, "float_layers": left_float}
