"""coremltools, imported without the integrations edgekit never asks it for.

coremltools probes its optional libraries when it is imported (``coremltools._deps``):
scikit-learn for its sklearn converters, ExecuTorch for its EXIR frontend (which then imports
``executorch.exir`` and parses its edge-dialect YAML), torchao for the int4 weight-packed ops of
torchao-quantized PyTorch models (edgekit converts float models to CoreML: a quantized source's
learned ranges go to TFLite and ONNX only). ``edgekit[executorch]`` installs all three, and the
probe cost every process that imports coremltools (each CoreML conversion and validation child)
about 8.5 s. They are hidden from that probe only: they stay importable afterwards, and
coremltools' TensorFlow and PyTorch frontends, which edgekit uses, are probed as before.

Its MIL pass pipeline is run with the program validated once before and once after the pipeline
(and after dead-code elimination, where coremltools checks the ops' scope information), not after
each of its ~90 passes, and without formatting the whole program for a debug log that is off: the
same passes in the same order give the same program, and a third of a conversion's time went to
those checks (``validated_once``)."""

from __future__ import annotations

import sys
from types import ModuleType

NEVER_USED = ("sklearn", "executorch", "torchao")  # sklearn converters, EXIR frontend, int4 packed weights


def coremltools() -> ModuleType:
    """The ``coremltools`` module (imported once per process)."""
    if "coremltools" in sys.modules:
        return sys.modules["coremltools"]
    hidden = [name for name in NEVER_USED if name not in sys.modules]
    for name in hidden:
        sys.modules[name] = None  # type: ignore[assignment]  # an import of it raises ImportError
    try:
        import coremltools as ct
    finally:
        for name in hidden:
            if name in sys.modules and sys.modules[name] is None:
                del sys.modules[name]
    validated_once()
    return ct


def validated_once() -> None:
    """coremltools' ``PassPipelineManager.apply_pipeline`` with its checks at the pipeline's ends
    (coremltools 9 validates the program after every pass and formats it for a debug log whether
    that log is on or not). Left as it is on a release whose pipeline was not checked."""
    from coremltools.converters.mil.mil.passes import pass_pipeline

    manager = pass_pipeline.PassPipelineManager
    if getattr(manager, "edgekit_validated_once", False) or not hasattr(manager, "apply_pipeline"):
        return
    registry, logger = pass_pipeline.PASS_REGISTRY, pass_pipeline.logger

    def apply_pipeline(prog, pipeline):  # noqa: ANN001, ANN202 - coremltools' own signature
        if pipeline is None:
            raise ValueError("The pass_pipeline cannot be None.")
        pipeline.validate()
        prog.validate()
        for name in pipeline.passes:
            graph_pass = registry[name]
            graph_pass.set_options(pipeline.get_options(name))
            try:
                graph_pass(prog)
            except Exception:
                logger.error(f"\n\nERROR - '{name}' graph pass produces the following error:\n")
                raise
            if name == "common::dead_code_elimination":  # where coremltools checks the scope information
                prog.validate(check_essential_scope=True)
        prog.validate()

    manager.coremltools_apply_pipeline = manager.apply_pipeline  # coremltools' own, for a comparison
    manager.apply_pipeline = staticmethod(apply_pipeline)
    manager.edgekit_validated_once = True
