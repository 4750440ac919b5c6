"""Model input names that are no Python identifier, through litert-torch and back.

litert-torch names a TFLite signature's inputs after the keyword arguments of the module's
``forward``, and torch.export writes them into generated Python code: an ONNX input named as TF
exports name theirs (``serving_default_audio:0``, ``input.1``) made ``SyntaxError: invalid syntax
(<eval_with_key>.16, line 5)``. The converter gets identifiers; the written model's signature
then gets the model's own names back, which the runtime feeds by.
"""

from __future__ import annotations

import keyword
import os
import re
from collections.abc import Iterable, Mapping
from pathlib import Path


def identifiers(names: Iterable[str]) -> dict[str, str]:
    """Each name -> a distinct Python identifier for it (the name itself where it is one)."""
    found: dict[str, str] = {}
    taken: set[str] = set()
    for name in names:
        ident = name if name.isidentifier() and not keyword.iskeyword(name) else \
            re.sub(r"\W", "_", name).strip("_") or "input"
        if ident[0].isdigit() or keyword.iskeyword(ident):
            ident = f"input_{ident}"
        base, count = ident, 1
        while ident in taken:
            count += 1
            ident = f"{base}_{count}"
        taken.add(ident)
        found[name] = ident
    return found


def restore(path: str, renamed: Mapping[str, str]) -> None:
    """Rename the signature inputs of the model at ``path`` from identifiers back to the model's
    names (``renamed``: name -> identifier); untouched when every name was an identifier."""
    back = {ident: name for name, ident in renamed.items() if ident != name}
    if not back:
        return
    from ai_edge_litert.tools import flatbuffer_utils

    model = flatbuffer_utils.read_model(path)
    for signature in model.signatureDefs or []:
        for tensor in signature.inputs or []:
            key = tensor.name.decode() if isinstance(tensor.name, bytes) else str(tensor.name)
            if key in back:
                tensor.name = back[key]
    staged = Path(f"{path}.renamed")
    flatbuffer_utils.write_model(model, str(staged))
    os.replace(staged, path)
