"""Recurrent layers: ONNX GRU and LSTM, unrolled over the (fixed) sequence length.

Each step is ``F.linear`` of the input and of the hidden state with the layer's weight
matrices, then the gates, with the ONNX specification's equations, gate orders (GRU: z, r, h;
LSTM: i, o, f, c), directions and layouts. The default activations only (sigmoid, tanh); a
``clip``, peepholes or per-sample sequence lengths are refused by name.
"""

from __future__ import annotations

from typing import Any

from ...errors import ConversionError, OTHER_ROUTES
from .graph import Args
from .registry import _F, _torch, op


def _refuse(a: Args, what: str) -> None:
    raise ConversionError(f"ONNX node {a.node.name} ({a.node.op}): {what} is not supported",
                          hint=f"export the layer with default activations and no clip, or {OTHER_ROUTES}")


def _checked(a: Args, gates: int) -> tuple[Any, int, int, bool]:
    """The input sequence-first [T, N, in], the directions, hidden size and whether batch-first."""
    activations = a.attr("activations")
    defaults = (["Sigmoid", "Tanh"] if gates == 3 else ["Sigmoid", "Tanh", "Tanh"])
    if activations is not None and [str(x) for x in activations] not in (defaults, defaults * 2):
        _refuse(a, f"activations {list(activations)}")
    if a.attr("clip") is not None:
        _refuse(a, "a cell clip")
    if a.has(4) and a.const(4) is None:
        _refuse(a, "per-sample sequence lengths computed from the data")
    if a.has(4):
        lengths = a.const(4)
        x = a.t(0)
        steps = int(x.shape[1 if a.attr("layout", 0) else 0])
        if (lengths != steps).any():
            _refuse(a, "sequence lengths shorter than the sequence")
    batch_first = bool(a.attr("layout", 0))
    x = a.t(0)
    if batch_first:
        x = x.transpose(0, 1)
    directions = 2 if str(a.attr("direction", "forward")) == "bidirectional" else 1
    return x, directions, int(a.attr("hidden_size")), batch_first


def _initial(a: Args, index: int, directions: int, batch: int, hidden: int, batch_first: bool) -> Any:
    if a.has(index):
        value = a.t(index)
        return value.transpose(0, 1) if batch_first else value
    return _torch().zeros(directions, batch, hidden, dtype=a.t(0).dtype)


def _outputs(a: Args, sequences: list[Any], finals: list[list[Any]], batch_first: bool) -> list[Any]:
    torch = _torch()
    y = torch.stack(sequences, dim=0)  # [T, dirs, N, hidden]
    states = [torch.stack(f, dim=0) for f in finals]  # [dirs, N, hidden] each
    if batch_first:
        y = y.permute(2, 0, 1, 3)
        states = [s.transpose(0, 1) for s in states]
    return [y, *states][:len(a.node.outputs)]


def _order(steps: int, direction: int, reverse_only: bool) -> range:
    backwards = direction == 1 or reverse_only
    return range(steps - 1, -1, -1) if backwards else range(steps)


@op("GRU")
def _gru(a: Args) -> list[Any]:
    torch, F = _torch(), _F()
    x, directions, hidden, batch_first = _checked(a, 3)
    steps, batch = int(x.shape[0]), int(x.shape[1])
    w, r = a.t(1), a.t(2)
    b = a.t(3) if a.has(3) else None
    h0 = _initial(a, 5, directions, batch, hidden, batch_first)
    before_reset = bool(a.attr("linear_before_reset", 0))
    reverse_only = str(a.attr("direction", "forward")) == "reverse"
    per_direction, finals = [], []
    for d in range(directions):
        wb, rb = (b[d, :3 * hidden], b[d, 3 * hidden:]) if b is not None else (None, None)
        h = h0[d]
        outputs: list[Any] = [None] * steps
        for t in _order(steps, d, reverse_only):
            gx = F.linear(x[t], w[d], wb)
            xz, xr, xh = gx.split(hidden, dim=-1)
            rz, rr, rh = r[d].split(hidden, dim=0)
            bz, br, bh = rb.split(hidden) if rb is not None else (None, None, None)
            z = torch.sigmoid(xz + F.linear(h, rz, bz))
            reset = torch.sigmoid(xr + F.linear(h, rr, br))
            if before_reset:
                candidate = torch.tanh(xh + reset * F.linear(h, rh, bh))
            else:
                candidate = torch.tanh(xh + F.linear(reset * h, rh, bh))
            h = (1 - z) * candidate + z * h
            outputs[t] = h
        per_direction.append(outputs)
        finals.append(h)
    sequences = [torch.stack([per_direction[d][t] for d in range(directions)], dim=0) for t in range(steps)]
    return _outputs(a, sequences, [finals], batch_first)


@op("LSTM")
def _lstm(a: Args) -> list[Any]:
    torch, F = _torch(), _F()
    x, directions, hidden, batch_first = _checked(a, 4)
    if a.has(7):
        _refuse(a, "peephole weights")
    if a.attr("input_forget", 0):
        _refuse(a, "coupled input and forget gates (input_forget)")
    steps, batch = int(x.shape[0]), int(x.shape[1])
    w, r = a.t(1), a.t(2)
    b = a.t(3) if a.has(3) else None
    h0 = _initial(a, 5, directions, batch, hidden, batch_first)
    c0 = _initial(a, 6, directions, batch, hidden, batch_first)
    reverse_only = str(a.attr("direction", "forward")) == "reverse"
    per_direction, final_h, final_c = [], [], []
    for d in range(directions):
        bias = b[d, :4 * hidden] + b[d, 4 * hidden:] if b is not None else None
        h, c = h0[d], c0[d]
        outputs: list[Any] = [None] * steps
        for t in _order(steps, d, reverse_only):
            gates = F.linear(x[t], w[d], bias) + F.linear(h, r[d])
            i, o, f, g = gates.split(hidden, dim=-1)
            c = torch.sigmoid(f) * c + torch.sigmoid(i) * torch.tanh(g)
            h = torch.sigmoid(o) * torch.tanh(c)
            outputs[t] = h
        per_direction.append(outputs)
        final_h.append(h)
        final_c.append(c)
    sequences = [torch.stack([per_direction[d][t] for d in range(directions)], dim=0) for t in range(steps)]
    return _outputs(a, sequences, [final_h, final_c], batch_first)
