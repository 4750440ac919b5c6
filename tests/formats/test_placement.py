"""Where each configuration's ops ran, read from the real runtimes (LiteRT, ONNX Runtime, OpenVINO)."""

from __future__ import annotations

import pytest

from edgekit.formats.onnx.backend import OnnxRuntimeBackend
from edgekit.formats.placement import fell_back
from edgekit.formats.tflite.backend import LiteRTBackend, open_interpreter
from tests.conftest import digits_tflite


def _op_count(path) -> int:
    return len(open_interpreter(str(path), with_delegates=False)._get_ops_details())


def test_litert_with_xnnpack_counts_its_partitions(digits_package):
    path = digits_tflite(digits_package)
    placement = LiteRTBackend(str(path)).placement()
    assert placement["partitions"] >= 1 and placement["ops"] == _op_count(path)
    assert placement["by_target"]["XNNPACK"] >= placement["ops"] - 2  # the convolutions and dense layers
    left = placement["by_target"].get("LiteRT kernels (CPU)", 0)
    assert sum(placement["not_delegated"].values()) == left
    # XNNPACK is LiteRT's default, not an accelerator asked for: what it leaves is no fallback
    assert placement["requested"] == [] and placement["fallback_ops"] == 0 and fell_back(placement) is None


def test_an_external_delegate_that_does_not_load_is_a_fallback(digits_package):
    backend = LiteRTBackend(str(digits_tflite(digits_package)), delegate="libedgetpu-missing.so.1")
    placement = backend.placement()
    assert placement["requested"] == ["libedgetpu-missing.so.1"] and placement["missing"] == ["libedgetpu-missing.so.1"]
    assert "libedgetpu-missing.so.1 is not active" in fell_back(placement)


def test_litert_without_xnnpack_runs_everything_on_its_kernels(digits_package):
    path = digits_tflite(digits_package)
    backend = LiteRTBackend(str(path), xnnpack=False)
    placement = backend.placement()
    assert placement["partitions"] == 0 and placement["requested"] == [] and placement["fallback_ops"] == 0
    assert placement["by_target"] == {"LiteRT kernels (CPU)": _op_count(path)}
    assert backend.describe()["delegate"] == "none (LiteRT kernels)" and fell_back(placement) is None


def test_litert_profile_turns_xnnpack_off():
    assert LiteRTBackend.profile_options({"xnnpack": False}, lambda key: None) == {"xnnpack": False}
    assert LiteRTBackend.profile_options({}, lambda key: None) == {}


def test_onnxruntime_cpu_provider_places_every_node_on_the_cpu(digits_all_package):
    path = digits_all_package / "onnx" / "model.int8.onnx"
    placement = OnnxRuntimeBackend(str(path)).placement()
    assert placement["by_target"] == {"CPUExecutionProvider": placement["ops"]} and placement["ops"] >= 5
    assert placement["requested"] == [] and placement["fallback_ops"] == 0 and fell_back(placement) is None


def test_a_requested_provider_this_build_lacks_is_a_fallback(digits_all_package):
    path = digits_all_package / "onnx" / "model.int8.onnx"
    backend = OnnxRuntimeBackend(str(path), providers=["CUDAExecutionProvider", "CPUExecutionProvider"])
    placement = backend.placement()
    assert placement["requested"] == ["CUDAExecutionProvider"] and placement["missing"] == ["CUDAExecutionProvider"]
    assert placement["fallback_ops"] > 0 and "Shape" not in placement["fallback"]
    assert "CUDAExecutionProvider is not active" in fell_back(placement)
    assert backend.describe()["requested_providers"] == ["CUDAExecutionProvider", "CPUExecutionProvider"]


def test_openvino_reports_runtime_precision_per_layer(digits_all_package):
    pytest.importorskip("openvino")
    from edgekit.formats.onnx.openvino import OpenVINOBackend

    placement = OpenVINOBackend(str(digits_all_package / "onnx" / "model.int8.onnx")).placement()
    assert placement["by_target"] == {"CPU": placement["ops"]} and placement["requested"] == []
    assert sum(placement["precisions"].values()) == placement["ops"]
    assert placement["precisions"].get("i8", 0) + placement["precisions"].get("u8", 0) > 0  # int8 kernels ran


def test_executorch_placement_reads_the_program_without_importing_the_compiler(digits_all_package):
    """The program reader lives in ``executorch.exir``, whose package import is the whole compiler
    (torch.export, dynamo, torchao: 4-8 s on a device, each sweep's and card's first ExecuTorch
    configuration paid it). Read in a fresh process: the counts, no compiler, and a later import of
    the real ``executorch.exir`` still whole."""
    import json

    from tests.conftest import run_python

    program = digits_all_package / "executorch" / "model.int8.pte"
    out = run_python(f"""
        import json, sys
        from edgekit.formats.executorch.backend import ExecuTorchBackend
        with ExecuTorchBackend({str(program)!r}, threads=1) as backend:
            placement = backend.placement()
        loaded = sorted(name for name in ("torch._dynamo", "executorch.exir") if name in sys.modules)
        import executorch.exir
        print(json.dumps({{"placement": placement, "loaded": loaded,
                          "compiler": hasattr(executorch.exir, "to_edge_transform_and_lower")}}))
    """)
    result = json.loads(out.strip().splitlines()[-1])
    assert result["loaded"] == [], result["loaded"]
    assert result["placement"]["by_target"].get("XNNPACK partitions", 0) >= 1, result["placement"]
    assert result["compiler"]
