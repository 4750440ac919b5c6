"""The equalization the simulation adopted, carried to the source's own model.

The simulation equalizes the float ONNX graph; the formats that convert that graph build it
equalized. The formats that convert the user's PyTorch program or Keras model (litert-torch,
ExecuTorch, TFLite through a SavedModel, Core ML) would otherwise build the model as given, and
miss the gate the equalized graph passes. Here the same per-channel scales are placed on the
source's parameters in a converter child (``simulation/equalize_source.py``), checked there to
leave the float function unchanged, and the equalized forms recorded in ``equalized["forms"]``
(original form -> equalized form), which ``Simulated.model_for`` hands to those formats. They
are made when the first format that converts a source form asks (``SourceForms``): a run of
``--format onnx`` loads no PyTorch or Keras model for them."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from ...errors import EdgekitError
from ...formats.building import BuildContext


def with_source_forms(record: dict[str, Any], described: Any, context: BuildContext, module_paths: dict[str, str],
                      progress: Any) -> dict[str, Any]:
    """``record`` (the adopted equalization) with ``forms``: each source form the simulated graph
    is not, equalized alike; a form whose model cannot take the scales exactly is left out, said."""
    from pathlib import Path

    from ...conversion import worker
    from ...simulation import SourceEqualizeRequest, equalize_source_model, source_forms

    if not record.get("scales_json"):
        return record
    sources = source_forms(described.forms, record["source"])
    carried: dict[str, Any] = {}
    for kind, forms in sources.items():
        folder = Path(context.workdir) / f"equalized-{kind}"
        folder.mkdir(parents=True, exist_ok=True)
        first = forms[0]
        try:
            report = worker.convert(equalize_source_model, SourceEqualizeRequest(
                form=first.to_dict(), scales_json=record["scales_json"], samples_npy=str(context.calibration_npy),
                output_dir=str(folder), module_paths=dict(module_paths), layer_names=tuple(context.layer_names)),
                what=f"cross-layer equalization of the {kind} model", timeout=context.timeout_s)
        except EdgekitError as exc:
            progress.warn(f"cross-layer equalization not carried to the {kind} model ({exc.message}): the formats "
                          "converting it build it as given")
            continue
        if report.why_not:
            progress.warn(f"cross-layer equalization not carried to the {kind} model ({report.why_not}): the "
                          "formats converting it build it as given")
            continue
        for form in forms:
            made = report.forms.get(form.form) or next(iter(report.forms.values()))
            carried[form.form] = {"from": form.to_dict(), "to": {**made, "form": form.form}}
        for name, made in report.forms.items():  # a Keras model's SavedModel too
            source = described.forms.get(name)
            if name not in carried and source is not None:
                carried[name] = {"from": source.to_dict(), "to": made}
        progress.say(f"INT8 simulation: cross-layer equalization carried to the {kind} model (outputs within "
                     f"{report.largest_difference:.0e} of its own): the formats converting it build it equalized")
    return {**record, "forms": carried} if carried else record


@dataclass
class SourceForms:
    """The adopted equalization's source forms, made once, when a format first asks for one."""

    record: dict[str, Any]
    described: Any
    context: BuildContext
    module_paths: dict[str, str]
    progress: Any
    made: dict[str, Any] | None = field(default=None)

    def get(self) -> dict[str, Any]:
        """Original form -> equalized form (``with_source_forms``), made on the first call."""
        if self.made is None:
            self.made = with_source_forms(self.record, self.described, self.context, self.module_paths,
                                          self.progress).get("forms") or {}
        return self.made

    def known(self) -> dict[str, Any]:
        """What ``get`` made so far (nothing before a format asked)."""
        return self.made or {}
