"""Streaming: a stateful model run frame by frame, each call's state outputs fed back as the
next call's state inputs (a VAD's ``state`` -> ``stateN``, an RNN's ``h0`` -> ``hn``).

Which output feeds which input: ``--state INPUT=OUTPUT`` (``Model.stream(pairs=...)``), or
found by name: an input and an output whose names are the same once the usual markers are
taken off (``in``/``out``, ``0``/``n``, ``N``, ``prev``/``next``, ``past``/``present``):
``state``/``stateN``, ``h0``/``hn``, ``state_in``/``state_out``. A pair must have the same
shape on every call (checked on the first). States start at zero unless given.

Runs one frame per call (batch 1), as a streaming device does; the outputs of every frame are
stacked along axis 0 in order.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

import numpy as np

from ..errors import InputError

_MARKERS = {"in", "out", "input", "output", "new", "next", "prev", "previous", "past", "present", "cur",
            "current", "old", "n", "0", "1", "t", "tm1", "updated"}


def _stem(name: str) -> str:
    """A name without the markers state pairs differ by: ``stateN`` -> ``state``, ``h0`` -> ``h``."""
    text = re.sub(r"(?<=[a-z])(N|0|n)$", "", name)  # stateN, h0, hn: a one-letter marker at the end
    text = re.sub(r"[:.]\d+$", "", text)  # exporters' ``state.1``
    parts = [p for p in re.split(r"[_\-./:\s]+", text.lower()) if p]
    kept = [p for p in parts if p not in _MARKERS]
    return "_".join(kept) or text.lower()


def find_pairs(input_names: list[str], output_names: list[str]) -> dict[str, str]:
    """State input -> the output that carries it to the next call, by name (one output each)."""
    pairs: dict[str, str] = {}
    for name in input_names:
        stem = _stem(name)
        matches = [o for o in output_names if o != name and _stem(o) == stem and o not in pairs.values()]
        if len(matches) == 1:
            pairs[name] = matches[0]
    return pairs


def parse_pairs(specs: list[str], input_names: list[str], output_names: list[str]) -> dict[str, str]:
    """``--state INPUT=OUTPUT`` values, checked against the model's names."""
    pairs: dict[str, str] = {}
    for spec in specs:
        name, sep, output = spec.partition("=")
        if not sep or not name or not output:
            raise InputError(f"--state {spec}: expected INPUT=OUTPUT", hint="e.g. --state state=stateN")
        if name not in input_names:
            raise InputError(f"--state {spec}: the model has no input {name!r}", hint=f"its inputs: {', '.join(input_names)}")
        if output not in output_names:
            raise InputError(f"--state {spec}: the model has no output {output!r}",
                             hint=f"its outputs: {', '.join(output_names)}")
        pairs[name] = output
    return pairs


def _frames_array(name: str, given: Any) -> np.ndarray:
    """One input's frames as an array with frames on axis 0, or one clear error (a ragged list, a
    scalar: numpy's own errors say neither which input nor what to give)."""
    try:
        array = np.asarray(given)
    except (ValueError, TypeError) as exc:
        raise InputError(f"stream frames for input {name!r} are not a rectangular array ({str(exc).splitlines()[0][:120]})",
                         hint="give every frame the same shape, stacked on axis 0") from None
    if array.ndim == 0:
        raise InputError(f"stream frames for input {name!r} are a single value, not frames on axis 0",
                         hint="give an array of frames, e.g. shape [frames, ...]")
    return array


class Stream:
    """A model's calls in order, with state carried from each call to the next."""

    def __init__(self, model: Any, pairs: Mapping[str, str] | None = None,
                 initial: Mapping[str, Any] | None = None) -> None:
        self.model = model
        found = dict(pairs) if pairs else find_pairs(model.input_names, model.output_names)
        if not found:
            raise InputError(
                f"no state to carry: no output of this model ({', '.join(model.output_names)}) pairs with an input "
                f"({', '.join(model.input_names)}) by name",
                hint="name the pairs: --state INPUT=OUTPUT (Model.stream(pairs={'state': 'stateN'}))")
        self.pairs = found
        self.frame_inputs = [n for n in model.input_names if n not in found]
        if not self.frame_inputs:
            raise InputError("every input of this model is a state: nothing to stream",
                             hint="name only the state inputs with --state")
        self._initial = {k: np.asarray(v) for k, v in (initial or {}).items()}
        unknown = sorted(set(self._initial) - set(found))
        if unknown:
            raise InputError(f"initial state for {unknown}, which are not state inputs ({', '.join(found)})")
        self.state: dict[str, np.ndarray] = {}
        self.reset()

    def reset(self) -> None:
        """States back to their initial values (zeros unless given)."""
        self.state = {}
        for name in self.pairs:
            if name in self._initial:
                self.state[name] = self._initial[name]
                continue
            self.state[name] = self.model.zeros(name)

    def step(self, frame: Any) -> dict[str, np.ndarray]:
        """One call: ``frame`` (an array for a one-frame-input model, else by input name) with the
        current state; returns every output and keeps the state outputs for the next call."""
        feeds = dict(frame) if isinstance(frame, Mapping) else {self.frame_inputs[0]: frame}
        extra = sorted(set(feeds) - set(self.frame_inputs))
        if extra:
            raise InputError(f"stream frames have input(s) {extra}, which are states or not inputs",
                             hint=f"frames carry {', '.join(self.frame_inputs)}; states are fed back")
        outputs = self.model.predict_all({**feeds, **self.state})
        for name, output in self.pairs.items():
            value = np.asarray(outputs[output])
            if value.shape != self.state[name].shape:
                raise InputError(f"state output {output!r} has shape {list(value.shape)}, its input {name!r} takes "
                                 f"{list(self.state[name].shape)}: they are not a state pair",
                                 hint="name the pairs: --state INPUT=OUTPUT")
            self.state[name] = value
        return outputs

    def run(self, frames: Mapping[str, Any]) -> dict[str, np.ndarray]:
        """Every frame in order (axis 0 of each frame input's array), outputs stacked along axis 0."""
        missing = [n for n in self.frame_inputs if n not in frames]
        if missing:
            raise InputError(f"stream data has no frames for input(s) {missing}",
                             hint=f"give arrays named {', '.join(self.frame_inputs)}, frames on axis 0")
        frames = {n: _frames_array(n, frames[n]) for n in self.frame_inputs}
        counts = {len(frames[n]) for n in self.frame_inputs}
        if len(counts) != 1:
            raise InputError(f"stream inputs have different frame counts: "
                             f"{ {n: len(np.asarray(frames[n])) for n in self.frame_inputs} }")
        total = counts.pop()
        if not total:
            raise InputError("the stream has no frames")
        steps = [self.step({n: np.asarray(frames[n])[i:i + 1] for n in self.frame_inputs}) for i in range(total)]
        return {name: np.concatenate([s[name] for s in steps]) for name in self.model.output_names}
