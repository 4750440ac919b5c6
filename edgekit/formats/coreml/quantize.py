"""W8A8 on an ML program (child side): int8 weights per channel by coremltools; activation ranges
by coremltools' calibration on macOS, by edgekit's NumPy MIL evaluator on Linux, fed to the same
coremltools compression passes."""

from __future__ import annotations

import sys
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import numpy as np

from ...conversion import worker
from .structure import spec_inputs


def quantize_activations(mlmodel: Any, samples: Any, mode: str,
                         kept: set[str] = frozenset()) -> tuple[Any, str, str, dict[str, Any]]:
    """W8A8 where activations can be calibrated here: (model, activations, why, calibration record);
    the ops in ``kept`` (--keep-float layers) get no quantize/dequantize pair."""
    import coremltools.optimize.coreml as cto

    if mode == "float16":
        return mlmodel, "float16", "--coreml-activations float16: weights int8, activations float16", {}
    names = spec_inputs(mlmodel)
    data = [{name: np.asarray(samples[name][i : i + 1], dtype=np.float32) for name in names}
            for i in range(len(samples))]
    config = cto.OptimizationConfig(
        global_config=cto.experimental.OpActivationLinearQuantizerConfig(mode="linear_symmetric"),
        op_name_configs={op: None for op in kept},
    )
    if sys.platform == "darwin":  # CoreML prediction exists: coremltools' own calibration (W8A8)
        with running_ranges():
            mlmodel = cto.experimental.linear_quantize_activations(mlmodel, config, data)
        return mlmodel, "int8", "calibrated with coremltools linear_quantize_activations on macOS", {
            "method": "minmax (coremltools linear_quantize_activations, CoreML prediction)", "samples": len(data)}
    from .evaluator import (
        EvaluatorError,  # Linux: the same passes, fed statistics from edgekit's MIL evaluator
    )

    try:
        mlmodel, stats = calibrate_activations_on_linux(mlmodel, data, config)
    except EvaluatorError as exc:  # an op outside the evaluator: weights-only INT8, said plainly
        return mlmodel, "float16", (
            f"activations not calibrated on Linux ({exc.message}); weights are int8, activations float16"), {}
    return mlmodel, "int8", (
        "calibrated on Linux: activation ranges from edgekit's NumPy MIL evaluator, quantize/dequantize "
        "pairs inserted by coremltools' own linear_quantize_activations passes"
    ), {"method": "minmax (edgekit MIL evaluator) + coremltools compression passes", "samples": len(data),
        "tensors": len(stats), "ranges": {k: [round(v["rmin"], 6), round(v["rmax"], 6)] for k, v in stats.items()}}


def quantize_weights(mlmodel: Any, kept: set[str] = frozenset()) -> Any:
    """Every weight int8, per channel; the weights of the ops in ``kept`` stay float16."""
    import coremltools.optimize.coreml as cto

    weights = cto.OptimizationConfig(
        global_config=cto.OpLinearQuantizerConfig(
            mode="linear_symmetric", dtype="int8", granularity="per_channel", weight_threshold=0
        ),
        op_name_configs={op: None for op in kept},
    )
    return cto.linear_quantize_weights(mlmodel, config=weights)


def calibrate_activations_on_linux(mlmodel: Any, data: list[dict[str, np.ndarray]], config: Any) -> tuple[Any, dict]:
    """``linear_quantize_activations`` without CoreML prediction.

    coremltools gathers per-tensor min/max by running the model with CoreML (macOS only), then
    applies its compression passes. Here the same statistics come from edgekit's NumPy MIL
    evaluator and feed the very same passes, so the result is what macOS would produce from
    the same ranges.
    """
    from collections import defaultdict

    from coremltools import _SPECIFICATION_VERSION_IOS_17
    from coremltools.converters.mil.frontend.milproto import load as milproto_load
    from coremltools.converters.mil.mil.passes.graph_pass import PassOption
    from coremltools.converters.mil.mil.passes.pass_registry import PASS_REGISTRY
    from coremltools.models import utils as model_utils
    from coremltools.optimize.coreml.experimental._model_debugger import ModelDebugger
    from coremltools.optimize.coreml.experimental._post_training_quantization import (
        _adjust_concat_surrounding_activation_stats,
    )

    from .evaluator import Evaluator, EvaluatorError, load_program_from_model

    debugger = ModelDebugger(mlmodel)
    outputs = {o.name for o in mlmodel.get_spec().description.output}
    wanted = set(debugger.get_intermediate_output_names(lambda op: op.spec.type != "const")) - outputs
    stats: dict[str, dict[str, float]] = defaultdict(dict)
    evaluator = Evaluator(load_program_from_model(mlmodel))
    def observe(name: str, value: Any) -> None:  # float activations only: indices and masks are never quantized
        if name in wanted and np.asarray(value).dtype.kind == "f":
            track_range(name, value, stats)

    from coremltools.proto import FeatureTypes_pb2

    integer_inputs = [f.name for f in mlmodel.get_spec().description.input
                      if f.type.multiArrayType.dataType == FeatureTypes_pb2.ArrayFeatureType.INT32]
    if integer_inputs:  # coremltools' activation passes quantize what follows every input: not indices
        raise EvaluatorError(f"integer input(s) {', '.join(integer_inputs)}: coremltools' activation passes "
                             "would quantize them")
    for i, sample in enumerate(data):
        for name, value in sample.items():
            track_range(name, value, stats)
        evaluator.run(sample, observe=observe)
        if i % 10 == 0:
            worker.report_progress(i, len(data))
    _adjust_concat_surrounding_activation_stats(debugger._get_concat_op_info(), stats)
    stats = {k: {"rmin": float(v["rmin"]), "rmax": float(v["rmax"])} for k, v in stats.items()}
    passes = []
    for name in ("compression::insert_prefix_quantize_dequantize_pair", "compression::insert_suffix_quantize_dequantize_pair"):
        graph_pass = PASS_REGISTRY[name]
        graph_pass.set_options([PassOption("config", config)])
        graph_pass.set_options([PassOption("activation_stats", stats)])
        passes.append(graph_pass)
    passes.append(PASS_REGISTRY["common::dequantize_quantize_pair_elimination"])
    quantized = model_utils._apply_graph_pass(
        mlmodel, passes, spec_version=_SPECIFICATION_VERSION_IOS_17, pymil_load_func=milproto_load.load,
        skip_model_load=True,
    )
    return quantized, stats


def track_range(name: str, value: Any, stats: dict[str, dict[str, float]]) -> None:
    """The running min/max of a tensor over every calibration sample. (coremltools'
    ``_update_tensor_range`` overwrites the range with each sample's before comparing, so it keeps
    the last sample's only: a dense layer's output range then came from one sample, and INT8
    clipped everything larger, 8 dB SQNR on a plain MatMul.)"""
    array = np.asarray(value)
    if array.size == 0:
        return
    low, high = float(np.min(array)), float(np.max(array))
    seen = stats.get(name)
    if seen and "rmin" in seen:
        low, high = min(low, seen["rmin"]), max(high, seen["rmax"])
    stats[name] = {"rmin": low, "rmax": high}


@contextmanager
def running_ranges() -> Iterator[None]:
    """coremltools' own calibration (macOS) with ``track_range`` in place of its two range
    updates, which keep only the last sample's min/max."""
    from coremltools.optimize.coreml.experimental import (
        _model_debugger,
        _post_training_quantization,
    )

    saved = (_post_training_quantization._update_tensor_range, _model_debugger.ModelDebugger.record_intermediate_output)
    _post_training_quantization._update_tensor_range = track_range
    _model_debugger.ModelDebugger.record_intermediate_output = staticmethod(
        lambda value, name, stats: track_range(name, value, stats))
    try:
        yield
    finally:
        _post_training_quantization._update_tensor_range = saved[0]
        _model_debugger.ModelDebugger.record_intermediate_output = staticmethod(saved[1])
