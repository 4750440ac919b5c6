"""Model input names CoreML cannot take as they are.

coremltools renames an input whose name is a reserved word of the MIL language (``state``, the
type of stateful models) to ``NAME_workaround``. The package keeps the source's name: the
backend feeds CoreML's name and reports the source's, so no input is matched by a guess.
"""

from __future__ import annotations

RENAMED_SUFFIX = "_workaround"


def source_name(coreml_name: str) -> str:
    """The source's name of a CoreML model input (``state_workaround`` -> ``state``)."""
    return coreml_name[: -len(RENAMED_SUFFIX)] if coreml_name.endswith(RENAMED_SUFFIX) else coreml_name
