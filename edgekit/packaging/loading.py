"""Loading the model in a converter child (its source's ``prepare``) and running it on the
validation samples (its ``float_reference``): what the packager measures every artifact against.
Shared by the model being packaged and a quantized model's ``--float-reference``."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from ..conversion import worker
from ..errors import EdgekitError
from ..progress import Progress
from ..sources import Source
from ..sources.child_steps import LoadRequest, ReferenceRequest, load_in_child, reference_in_child
from ..sources.description import SourceDescription
from .data import PreparedData
from .options import PackageOptions
from ..routing.float_reference import reference_runner


@dataclass(frozen=True)
class LoadedSource:
    source: Source
    kind: str
    described: SourceDescription  # what the source's prepare() said of the model


def load_source(source: Source, kind: str, options: PackageOptions, work: Path, progress: Progress,
                hints: dict[str, Any] | None = None) -> LoadedSource:
    model = str(Path(options.model).resolve())
    if kind == "torch_factory":  # file.py:factory: resolve the file, keep the function
        file, _, function = options.model.rpartition(":")
        model = f"{Path(file).resolve()}:{function}"
    runs = source.runs_code.get(kind)
    if runs:  # said before anything loads: the user decides whether they trust the file
        progress.warn(f"loading {options.model} {runs}; package only models from sources you trust "
                      "(README: Security model)")
    with progress.step(f"Loading {kind} model {options.model}"):
        described = worker.convert(load_in_child, LoadRequest(
            prepare=worker.reference(source.prepare), model_path=model, kind=kind,
            export_dir=str(work / "saved_model"), hints=dict(hints or {})),
            what="loading the model", timeout=options.step_timeout_s).described
    return LoadedSource(source, kind, SourceDescription.from_dict(described))


def float_reference(loaded: LoadedSource, data: PreparedData, work: Path, progress: Progress,
                    timeout_s: float | None = None) -> dict[str, np.ndarray]:
    """Every output of the float model on the validation samples, by output name."""
    inputs, outputs = work / "eval_inputs.npz", work / "reference.npz"
    np.savez(inputs, **data.evaluation)
    with progress.step(f"Float reference outputs on {data.evaluation_count} samples"):
        worker.convert(reference_in_child, ReferenceRequest(
            runner=worker.reference(reference_runner(loaded.source)), prepared=loaded.described.raw,
            inputs_npz=str(inputs), output_npz=str(outputs)), what="running the float model", timeout=timeout_s)
    with np.load(outputs) as stored:
        found = {name: stored[name].astype(np.float32) for name in stored.files}
    expected = loaded.described.output_names
    if sorted(found) != sorted(expected):
        raise EdgekitError(f"the float model returned outputs {sorted(found)}, not the described {expected}",
                           hint="report this model: its signature and its outputs disagree")
    return {name: found[name] for name in expected}
