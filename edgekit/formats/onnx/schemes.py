"""ONNX INT8 schemes, and which one a device's CPU runs fast and without saturating.

ONNX Runtime's int8 kernels differ by CPU. On ARM, S8S8 (signed activations and weights) runs
fused int8 kernels. On x86 ONNX Runtime's kernels are u8 x s8 (what VNNI's ``vpdpbusd`` and
AVX2's ``vpmaddubsw`` multiply): an S8S8 graph is turned into U8S8 first and ops it cannot
convert stay in float (measured on an AVX-512 VNNI EPYC: 19 of 31 compute ops of a ResNet-18
left in float, 1.25x float's speed, against 3.3x for U8S8). Without VNNI, ``vpmaddubsw`` adds
pairs of u8 x s8 products in 16-bit lanes, which saturate with 8-bit weights: 7-bit weights
(``reduce_range``) cannot.

So: ``s8s8`` for ARM (and TensorRT/CUDA, which take symmetric int8), ``u8s8`` for x86 with VNNI
(or AMX), ``u8s8-reduce-range`` for x86 without. A device profile lists the schemes its devices
may need (``[quantization] onnx = [...]``); the packager builds one ONNX artifact per scheme the
requested profiles need (``onnx`` is S8S8, ``onnx-u8s8`` and ``onnx-u8s7`` the others), each
validated; the runtime runs the best one the package has for its own CPU.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any, NamedTuple

X86 = ("x86_64", "amd64", "AMD64", "i686", "i386")


class Scheme(NamedTuple):
    name: str
    activations: str  # "s8" or "u8"
    reduce_range: bool  # 7-bit weights
    variant: str  # the artifact key's suffix: "" for the format's main artifact ("onnx"), else "onnx-VARIANT"
    why: str

    @property
    def artifact_key(self) -> str:
        return f"onnx-{self.variant}" if self.variant else "onnx"


S8S8 = Scheme("s8s8", "s8", False, "", "ARM, TensorRT/CUDA: signed int8 activations and weights")
U8S8 = Scheme("u8s8", "u8", False, "u8s8", "x86 with VNNI/AMX: ONNX Runtime's native u8 x s8 kernels, 8-bit weights")
U8S8_REDUCED = Scheme("u8s8-reduce-range", "u8", True, "u8s7",
                      "x86 without VNNI: u8 x s8 kernels with 7-bit weights, which cannot saturate 16-bit lanes")
SCHEMES = {s.name: s for s in (S8S8, U8S8, U8S8_REDUCED)}
DEFAULT = S8S8


def has_vnni(flags: set[str] | frozenset[str]) -> bool:
    return any("vnni" in f or f == "amx_int8" for f in flags)


def schemes_for_cpu(arch: str, flags: set[str] | frozenset[str]) -> list[Scheme]:
    """The schemes this CPU runs correctly, fastest first: on x86 with VNNI U8S8 (7-bit weights
    are correct too, one bit less precise), on x86 without VNNI only 7-bit U8S8 (8-bit weights
    can saturate), then S8S8, which runs everywhere."""
    if arch in X86:
        return [U8S8, U8S8_REDUCED, S8S8] if has_vnni(flags) else [U8S8_REDUCED, S8S8]
    return [S8S8]


def scheme_for_cpu(arch: str, flags: set[str] | frozenset[str]) -> Scheme:
    """The scheme to build for this CPU."""
    return schemes_for_cpu(arch, flags)[0]


def schemes_for_profiles(profiles: Iterable[Any]) -> list[str]:
    """The scheme names the package's device profiles need (their ``[quantization] onnx``), in
    first-seen order."""
    return list(dict.fromkeys(scheme for profile in profiles for scheme in profile.builds("onnx")))


def schemes_named(names: list[str], where: str) -> list[Scheme]:
    """Scheme names from a profile, checked: an unknown one is the profile's error."""
    from ...errors import EdgekitError

    unknown = [n for n in names if n not in SCHEMES]
    if unknown:
        raise EdgekitError(f"{where}: unknown ONNX INT8 scheme(s) {unknown}",
                           hint=f"use {', '.join(SCHEMES)}")
    return [SCHEMES[n] for n in names]


def artifact_for_cpu(present: Iterable[str], arch: str, flags: set[str] | frozenset[str],
                     cuda: bool = False) -> str | None:
    """The ONNX artifact key a device runs among ``present`` (keys that may be run): its CPU's
    best scheme the package has; the main ``onnx`` artifact on GPUs (TensorRT and CUDA take S8S8
    QDQ) and wherever no variant of this CPU's schemes is there."""
    keys = set(present)
    if cuda:
        return DEFAULT.artifact_key if DEFAULT.artifact_key in keys else None
    return next((s.artifact_key for s in schemes_for_cpu(arch, flags) if s.artifact_key in keys), None)


def exact_key(name: str) -> str:
    """An artifact name with the main build's scheme spelled out (``onnx-s8s8``) as its key
    (``onnx``): ``--artifact onnx`` means the best ONNX artifact for this CPU, this names one build."""
    return DEFAULT.artifact_key if name == f"{DEFAULT.artifact_key}-{DEFAULT.name}" else name


def exact_name(key: str) -> str:
    """The name that loads exactly the build with this artifact key (``exact_key``'s inverse): what
    code that iterates a manifest's keys passes, since ``onnx`` alone means this CPU's best build."""
    return f"{DEFAULT.artifact_key}-{DEFAULT.name}" if key == DEFAULT.artifact_key else key


def saturates(artifact_key: str, arch: str, flags: set[str] | frozenset[str]) -> bool:
    """Whether this CPU's fused u8 x s8 kernels can saturate on an artifact of this key: x86
    without VNNI, on any build with 8-bit weights (every scheme but 7-bit U8S8)."""
    return arch in X86 and not has_vnni(flags) and artifact_key != U8S8_REDUCED.artifact_key
