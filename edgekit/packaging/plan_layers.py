"""A user's precision plan (``--keep-float``, ``--int16-activations``, ``--precision-plan``) names
layers the model has: checked as soon as the model is described, before the simulation or any
format runs. Otherwise a misspelt layer was found by the first converter that looked, minutes
later, after the simulation had said every format builds the plan."""

from __future__ import annotations

import difflib

from ..conversion import forms
from ..conversion.layer_names import in_layer
from ..errors import OptionError
from ..formats.plan import FLAGS, PrecisionPlan
from ..sources.description import SourceDescription


def check_plan_layers(plan: PrecisionPlan, described: SourceDescription) -> None:
    """Refuse plan layers that name nothing in the source. A name passes when it is a layer or
    node of the source, a scope holding some (``/model.0``), or a converted node inside one
    (``model/conv1/BiasAdd``, as another format's report lists it). Sources that list no layers
    (PyTorch programs, SavedModels) or leave nodes unnamed are not checked here: each route
    checks them in its own names, and so do PyTorch sources, whose routes name a layer by module
    (``c2``, ``c2 (Conv2d)``) or by the node of their ONNX export."""
    layers = [layer for layer in described.layers if layer]
    if (not plan.layers or not layers or len(layers) < len(described.layers)
            or forms.TORCH_PROGRAM in described.forms or forms.TORCH_MODULE in described.forms):
        return
    # an output's name stands for the layer computing it (the search's fix for a joined output)
    known = layers + list(described.output_names) + [str(x) for x in described.output_layers.values()]
    unknown = [layer for layer in plan.layers if not _names_something(layer, known)]
    if not unknown:
        return
    flags = sorted({FLAGS.get(plan.precision(layer), "--precision-plan") for layer in unknown})
    near = sorted({match for layer in unknown for match in difflib.get_close_matches(layer, layers, n=3)})
    raise OptionError(f"{' / '.join(flags)}: the model has no layer {', '.join(repr(x) for x in unknown)}",
                      hint=(f"did you mean {', '.join(near)}? " if near else "")
                      + "name layers as the model defines them (`edgekit package ... --explain` lists them)")


def _names_something(layer: str, known: list[str]) -> bool:
    return any(name == layer or in_layer(name, layer) or in_layer(layer, name) for name in known)
