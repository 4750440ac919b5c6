"""ONNX INT8 schemes, and which one a device's CPU runs fast and without saturating.

ONNX Runtime's int8 kernels differ by CPU. On ARM (dot-product or not) and on x86 CPUs with
VNNI, S8S8 (signed activations and weights, 8-bit) runs fused int8 kernels and keeps full
weight precision. On x86 CPUs without VNNI the u8 x s8 multiply (``vpmaddubsw``) adds pairs of
products in 16-bit lanes, which saturate, and ONNX Runtime turns S8 activations into U8 before
fusing, leaving ops it cannot convert in float; U8S8 with 7-bit (``reduce_range``) per-channel
weights fuses everything and cannot saturate there.

A device profile lists the schemes its devices may need (``[quantization] onnx = [...]``); the
packager builds one ONNX artifact per scheme the requested profiles need (``onnx`` for S8S8,
``onnx-u8s8`` for the other), each validated; the runtime picks the one for its own CPU.
"""

from __future__ import annotations

from dataclasses import dataclass

X86 = ("x86_64", "amd64", "AMD64", "i686", "i386")


@dataclass(frozen=True)
class Scheme:
    name: str
    activations: str  # "s8" or "u8"
    reduce_range: bool  # 7-bit weights
    variant: str  # the artifact key's suffix: "" for the format's main artifact ("onnx"), else "onnx-VARIANT"
    why: str

    @property
    def artifact_key(self) -> str:
        return f"onnx-{self.variant}" if self.variant else "onnx"


S8S8 = Scheme("s8s8", "s8", False, "", "ARM, and x86 with VNNI: fused signed int8 kernels, 8-bit weights")
U8S8_REDUCED = Scheme("u8s8-reduce-range", "u8", True, "u8s8",
                      "x86 without VNNI: u8 x s8 kernels with 7-bit weights fuse fully and cannot saturate")
SCHEMES = {s.name: s for s in (S8S8, U8S8_REDUCED)}
DEFAULT = S8S8


def scheme_for_cpu(arch: str, flags: set[str] | frozenset[str]) -> Scheme:
    """The scheme this CPU runs best: U8S8 with reduced range on x86 without VNNI, else S8S8."""
    if arch in X86 and not any("vnni" in f or f == "amx_int8" for f in flags):
        return U8S8_REDUCED
    return S8S8


def schemes_named(names: list[str], where: str) -> list[Scheme]:
    """Scheme names from a profile, checked: an unknown one is the profile's error."""
    from ..errors import EdgekitError

    unknown = [n for n in names if n not in SCHEMES]
    if unknown:
        raise EdgekitError(f"{where}: unknown ONNX INT8 scheme(s) {unknown}",
                           hint=f"use {', '.join(SCHEMES)}")
    return [SCHEMES[n] for n in names]
