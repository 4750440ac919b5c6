"""One value every packaging stage after the float reference reads, instead of the same seven
parameters passed by hand through each: the prepared samples, the float model's outputs on them,
the staging tree the package is written into, how artifacts are judged, the options, the layer
behind each output and the progress printer. Measuring and gating an artifact are its methods,
so every stage measures and gates the same way."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import numpy as np

from ..conversion.layer_names import LayerNames
from ..formats.building import Builder, BuildContext, BuildResult
from ..progress import Progress
from ..manifest import LeftOut
from .data import PreparedData
from .gates import GateFailure, Remedies, check
from .options import PackageOptions
from .search_settings import DEFAULT_SETTINGS, SearchSettings
from .validate import Judging, Measured, compared, measure


@dataclass(frozen=True)
class PackagingContext:
    data: PreparedData
    reference: dict[str, np.ndarray]  # the float model's outputs on ``data``'s validation samples
    staged: Path  # the package being written (published by rename at the end)
    progress: Progress
    judging: Judging
    options: PackageOptions
    producers: dict[str, str]  # output name -> the layer computing it (for --keep-float)
    setup_s: float = 0.0  # the command's time before the first format was built (loading, data, float reference)
    # a quantized source's float model on the same samples (--float-reference): every artifact is
    # judged against it as well as against the source
    float_model: dict[str, np.ndarray] | None = None
    # formats ``--format all`` left out because this machine cannot build them: format, why, extra
    left_out: tuple[LeftOut, ...] = ()
    # plan layer -> its relative compute (simulation/costs.py), where the simulation read the float
    # graph: the search weighs a layer by what leaving it in float costs, not by one per layer
    layer_costs: Mapping[str, float] = field(default_factory=dict)
    # (writer, reader, elements) per tensor between two plan layers (simulation/costs.layer_links):
    # a float layer among int8 ones also costs converting those tensors
    layer_links: tuple[tuple[str, str, float], ...] = ()
    # the model's layer vocabulary, where the simulation read its ONNX form: what records a plan
    # built in a converter's names (ONNX nodes) in the source's (``LayerNames.in_source``)
    layer_names: LayerNames = field(default_factory=LayerNames)
    search: SearchSettings = DEFAULT_SETTINGS  # every knob of the search

    def on(self, data: PreparedData, reference: dict[str, np.ndarray]) -> PackagingContext:
        """The same run judged on other samples (the search's half of them). The search never runs
        on a quantized source, the only one with a float model beside it: that is not carried over
        (it would not be aligned with the other samples)."""
        return replace(self, data=data, reference=reference, float_model=None)

    def measure(self, built: BuildResult, builder: Builder, context: BuildContext, **how: Any) -> Measured | None:
        """The artifact against the float reference, in the arithmetic its builder judges it by."""
        if "quantized" not in how:
            how["as_quantized"] = builder.judged_as_quantized(context)
        measured = measure(built, builder, self.staged, self.data, self.reference, self.judging, **how)
        if measured is None or self.float_model is None or measured.candidate is None:
            return measured
        return replace(measured, against_float=compared(self.float_model, measured.candidate, self.data, self.judging))

    def check(self, key: str, measured: Measured | None, remedies: Remedies = Remedies()) -> list[GateFailure]:
        """The gates an artifact fails (none when it was not measured here); against the float
        model too where there is one, those failures named so."""
        if measured is None:
            return []
        failures = check(key, measured, self.options.min_sqnr_db, self.producers, self.judging.kinds, remedies)
        if measured.against_float is not None:
            failures += [replace(f, cause=f"float_reference_{f.cause}", what=f"against the float reference "
                                 f"({self.options.float_reference}): {f.what}")
                         for f in check(key, measured.against_float, self.options.min_sqnr_db, self.producers,
                                        self.judging.kinds, remedies)]
        return failures
