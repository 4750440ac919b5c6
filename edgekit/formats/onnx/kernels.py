"""What decides ONNX Runtime's int8 kernels on this CPU, in words for the build line and the manifest.

Without VNNI (x86) or dot-product (ARM) instructions, ONNX Runtime's int8 GEMM adds pairs of u8*s8
products in 16-bit lanes (vpmaddubsw), which saturate; with them it does not.
"""

from __future__ import annotations

from ...machine.facts import DeviceFacts


def int8_kernel_features(facts: DeviceFacts | None = None) -> str:
    """The CPU's int8 dot-product support, e.g. "AMD EPYC 7B13 CPU with AVX2 and no VNNI"."""
    facts = facts or DeviceFacts.read()
    name = f"{' '.join(facts.cpu_model.split()[:3])} CPU" if facts.cpu_model else f"{facts.arch} CPU"
    flags = facts.cpu_flags
    vnni = sorted(f for f in flags if "vnni" in f)
    if vnni:
        return f"{name} with {', '.join(v.upper() for v in vnni)}"
    if "asimddp" in flags:
        return f"{name} with ARM dot-product (asimddp)"
    if "avx2" in flags:
        return f"{name} with AVX2 and no VNNI"
    if "asimd" in flags:
        return f"{name} with NEON and no dot-product"
    return f"{name} without int8 dot-product instructions"
