"""Elementwise ops: arithmetic, comparisons, casts and activations."""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

from .graph import Args
from .registry import OPS, _dtype, _F, _torch, op


def _unary(function_name: str) -> Callable[[Args], Any]:
    return lambda a: getattr(_torch(), function_name)(a.t(0))


for _name, _function in {"Relu": "relu", "Sigmoid": "sigmoid", "Tanh": "tanh", "Exp": "exp", "Log": "log",
                         "Sqrt": "sqrt", "Reciprocal": "reciprocal", "Neg": "neg", "Abs": "abs", "Floor": "floor",
                         "Ceil": "ceil", "Round": "round", "Erf": "erf", "Sin": "sin", "Cos": "cos", "Sign": "sign",
                         "IsNaN": "isnan", "Not": "logical_not"}.items():
    OPS[_name] = _unary(_function)


@op("Identity")
def _identity(a: Args) -> Any:
    return a.t(0)


@op("Dropout")
def _dropout(a: Args) -> Any:  # inference: identity; the optional mask is all true
    x = a.t(0)
    return (x, _torch().ones_like(x, dtype=_torch().bool)) if len(a.node.outputs) > 1 else x


@op("Add")
def _add(a: Args) -> Any:
    return a.t(0) + a.t(1)


@op("Sub")
def _sub(a: Args) -> Any:
    return a.t(0) - a.t(1)


@op("Mul")
def _mul(a: Args) -> Any:
    return a.t(0) * a.t(1)


@op("Div")
def _div(a: Args) -> Any:
    x, y = a.t(0), a.t(1)
    if not x.is_floating_point() and not y.is_floating_point():  # ONNX integer division truncates
        return _torch().div(x, y, rounding_mode="trunc")
    return x / y


@op("Pow")
def _pow(a: Args) -> Any:
    exponent = a.number(1) if a.const(1) is not None and a.const(1).size == 1 else None
    if exponent == 2.0:
        x = a.t(0)
        return x * x
    if exponent == 0.5:
        return _torch().sqrt(a.t(0))
    x, y = a.t(0), a.t(1)
    return _torch().pow(x, y.to(x.dtype))


@op("Mod")
def _mod(a: Args) -> Any:
    return _torch().fmod(a.t(0), a.t(1)) if a.attr("fmod", 0) else _torch().remainder(a.t(0), a.t(1))


def _variadic(function_name: str) -> Callable[[Args], Any]:
    def run(a: Args) -> Any:
        result = a.t(0)
        for index in range(1, a.count()):
            result = getattr(_torch(), function_name)(result, a.t(index))
        return result

    return run


OPS["Max"] = _variadic("maximum")
OPS["Min"] = _variadic("minimum")
OPS["Sum"] = _variadic("add")


@op("Mean")
def _mean(a: Args) -> Any:
    return OPS["Sum"](a) / a.count()


for _name, _function in {"Equal": "eq", "Less": "lt", "Greater": "gt", "LessOrEqual": "le",
                         "GreaterOrEqual": "ge", "And": "logical_and", "Or": "logical_or",
                         "Xor": "logical_xor"}.items():
    OPS[_name] = (lambda f: lambda a: getattr(_torch(), f)(a.t(0), a.t(1)))(_function)


@op("Where")
def _where(a: Args) -> Any:
    return _torch().where(a.t(0), a.t(1), a.t(2))


@op("Cast")
def _cast(a: Args) -> Any:
    return a.t(0).to(_dtype(int(a.attr("to"))))


@op("CastLike")
def _cast_like(a: Args) -> Any:
    return a.t(0).to(a.t(1).dtype)


@op("LeakyRelu")
def _leaky_relu(a: Args) -> Any:
    return _F().leaky_relu(a.t(0), float(a.attr("alpha", 0.01)))


@op("Elu")
def _elu(a: Args) -> Any:
    return _F().elu(a.t(0), float(a.attr("alpha", 1.0)))


@op("Selu")
def _selu(a: Args) -> Any:
    alpha, gamma = float(a.attr("alpha", 1.67326319217681884765625)), float(a.attr("gamma", 1.05070102214813232421875))
    x = a.t(0)
    return gamma * _torch().where(x > 0, x, alpha * (_torch().exp(x) - 1))


@op("HardSigmoid")
def _hard_sigmoid(a: Args) -> Any:
    alpha, beta = float(a.attr("alpha", 0.2)), float(a.attr("beta", 0.5))
    if math.isclose(alpha, 1 / 6, rel_tol=1e-6) and beta == 0.5:
        return _F().hardsigmoid(a.t(0))
    return _torch().clamp(alpha * a.t(0) + beta, 0.0, 1.0)


@op("HardSwish")
def _hard_swish(a: Args) -> Any:
    return _F().hardswish(a.t(0))


@op("PRelu")
def _prelu(a: Args) -> Any:
    x, slope = a.t(0), a.t(1)
    return _torch().where(x >= 0, x, x * slope)


@op("Softplus")
def _softplus(a: Args) -> Any:
    return _F().softplus(a.t(0))


@op("Softsign")
def _softsign(a: Args) -> Any:
    return _F().softsign(a.t(0))


@op("Mish")
def _mish(a: Args) -> Any:
    return _F().mish(a.t(0))


@op("Gelu")
def _gelu(a: Args) -> Any:
    return _F().gelu(a.t(0), approximate=str(a.attr("approximate", "none")))


@op("Clip")
def _clip(a: Args) -> Any:
    x = a.t(0)
    if a.opset < 11:
        low, high = a.attr("min", None), a.attr("max", None)
    else:
        low = a.number(1) if a.has(1) else None
        high = a.number(2) if a.has(2) else None
        if (a.has(1) and low is None) or (a.has(2) and high is None):  # bounds computed from the data
            return _torch().clamp(x, a.t(1) if a.has(1) else None, a.t(2) if a.has(2) else None)
    if low == 0.0 and high == 6.0:
        return _F().relu6(x)
    if low == 0.0 and high is None:
        return _torch().relu(x)
    return _torch().clamp(x, low, high)
