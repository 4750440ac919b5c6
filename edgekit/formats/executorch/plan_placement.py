"""Where a precision plan's layers are in a PyTorch program (child side): module paths, ONNX node
names on a module rebuilt from ONNX, traced ops of a forward. The names come from the model's
``LayerNames``; this module only looks them up on the loaded module."""

from __future__ import annotations

from typing import Any

from ...conversion.layer_names import LayerNames, attribute_name
from ...errors import ConversionError


def plan_names_of_form(model: dict[str, Any], layer_names: list[str] | None) -> dict[str, str]:
    """Module path -> the plan's layer name on a module rebuilt from ONNX (``LayerNames.attributes``);
    empty on a PyTorch program, whose module paths are its layer names."""
    from ...conversion.forms import ONNX_REBUILD_LOADER, ModelForm

    form = ModelForm.from_dict(model)
    if form.loader != ONNX_REBUILD_LOADER:
        return {}
    import onnx

    nodes = [node.name for node in onnx.load(form.path, load_external_data=False).graph.node]
    return LayerNames(tuple(layer_names or ())).attributes(nodes)


def module_paths_of(module: Any, layers: list[str], named: dict[str, str]) -> tuple[list[str], list[str]]:
    """The module paths of each layer to keep in float: the module itself, or on a module rebuilt
    from ONNX every submodule whose node belongs to it (``named``: path -> the plan's name; a Keras
    layer is several nodes); then the names that are no module, taken as traced ops of a
    ``forward`` (``cat``: torch.export's node name), checked once the program is exported."""
    modules = dict(module.named_modules()) if hasattr(module, "named_modules") else {}
    paths, ops = [], []
    for name in layers:
        found = [name] if name in modules else [path for path, layer in named.items()
                                                if layer == name and path in modules]
        if not found and attribute_name(name) in modules:
            found = [attribute_name(name)]
        paths += found
        if not found:
            ops.append(name)
    return paths, ops


def refuse_unknown_ops(exported: Any, ops: list[str]) -> None:
    """A name kept in float that is neither a module nor a traced op of the program, by name."""
    traced = {node.name for node in exported.graph_module.graph.nodes if node.op == "call_function"}
    unknown = [name for name in ops if name not in traced]
    if unknown:
        raise ConversionError(f"ExecuTorch: no module or traced op named {', '.join(unknown)} in this PyTorch model",
                              hint="name layers by their module path (as --explain lists them), or an op of a "
                                   "forward by its torch.export name (cat, linear_1)")
