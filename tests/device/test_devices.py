"""Device detection against fake /proc and /etc roots, profile files, and provider fallback."""

from __future__ import annotations

import numpy as np
import pytest

from edgekit.formats.onnx.backend import (
    OnnxRuntimeBackend,
    _with_engine_cache,
    choose_providers,
    providers_from_profile,
)
from edgekit.device.devices import DeviceFacts, Profile, detect, get_profile, load_profiles, profile_dirs
from edgekit.errors import EdgekitError
from tests.conftest import ROOT, run_cli


def fake_root(tmp_path, model: str | None = None, tegra: bool = False, nvidia: bool = False):
    if model is not None:
        (tmp_path / "proc/device-tree").mkdir(parents=True)
        (tmp_path / "proc/device-tree/model").write_bytes(model.encode() + b"\x00")
    if tegra:
        (tmp_path / "etc").mkdir(parents=True)
        (tmp_path / "etc/nv_tegra_release").write_text("# R36 (release), REVISION: 4.0, GCID: 1, BOARD: generic\n")
    if nvidia:
        (tmp_path / "proc/driver/nvidia").mkdir(parents=True)
        (tmp_path / "proc/driver/nvidia/version").write_text("NVRM version: NVIDIA UNIX x86_64 Kernel Module 550\n")
    return tmp_path


def facts_on(root, arch: str, os_name: str = "linux") -> DeviceFacts:
    return DeviceFacts.read(root)._replace(arch=arch, os=os_name)


@pytest.mark.parametrize(
    "model, tegra, nvidia, arch, expected",
    [
        ("Raspberry Pi 4 Model B Rev 1.5", False, False, "aarch64", "rpi4"),
        ("Raspberry Pi 5 Model B Rev 1.0", False, False, "aarch64", "rpi5"),
        ("NVIDIA Jetson Orin Nano Developer Kit", True, False, "aarch64", "jetson-orin-nano"),
        ("Jetson AGX Orin Developer Kit", True, False, "aarch64", "jetson-agx-orin"),
        (None, False, True, "x86_64", "gpu-server"),
        (None, False, False, "x86_64", "x86-cpu"),
    ],
)
def test_profiles_detect_their_devices(tmp_path, model, tegra, nvidia, arch, expected):
    facts = facts_on(fake_root(tmp_path, model, tegra, nvidia), arch)
    assert detect(facts).name == expected


def test_apple_silicon_and_unknown_devices(tmp_path):
    assert detect(facts_on(tmp_path, "arm64", "darwin")).name == "macos-arm"
    unknown = detect(facts_on(tmp_path, "riscv64"))
    assert unknown.name == "generic" and ("tflite", "litert") in unknown.prefer


def test_match_explains_each_rule(tmp_path):
    facts = facts_on(fake_root(tmp_path, "Raspberry Pi 4 Model B"), "aarch64")
    matched, reasons = get_profile("rpi5").match(facts)
    assert not matched
    assert any(r.startswith("yes: arch aarch64") for r in reasons)
    assert any(r.startswith("no: device-tree model 'Raspberry Pi 4 Model B'") for r in reasons)


def test_a_user_adds_a_profile_without_touching_code(tmp_path, monkeypatch):
    profiles = tmp_path / "profiles"
    profiles.mkdir()
    (profiles / "beagle.toml").write_text(
        'name = "beagley-ai"\npriority = 70\n[detect]\narch = ["aarch64"]\ndevice_tree_model = ["BeagleY-AI"]\n'
        '[runtime]\nprefer = [{ artifact = "onnx", backend = "onnxruntime" }]\nthreads = 4\n'
    )
    monkeypatch.setenv("EDGEKIT_PROFILES", str(profiles))
    assert profiles in profile_dirs()
    facts = facts_on(fake_root(tmp_path / "root", "BeagleBoard.org BeagleY-AI"), "aarch64")
    chosen = detect(facts)
    assert chosen.name == "beagley-ai" and chosen.prefer == [("onnx", "onnxruntime")] and chosen.threads == 4


def test_bad_profile_files_are_clear_errors(tmp_path):
    (tmp_path / "broken.toml").write_text("name = [unclosed")
    with pytest.raises(EdgekitError, match="not valid TOML"):
        load_profiles([tmp_path])
    (tmp_path / "broken.toml").write_text('name = "x"\n[runtime]\nprefer = [{ artifact = "tflite" }]\n')
    with pytest.raises(EdgekitError, match="needs artifact and backend"):
        load_profiles([tmp_path])
    with pytest.raises(EdgekitError, match="unknown device profile 'nope'"):
        get_profile("nope")


def test_every_shipped_profile_loads():
    shipped = load_profiles([ROOT / "targets"])
    assert {"rpi4", "rpi5", "jetson-orin-nano", "jetson-agx-orin", "x86-cpu", "gpu-server", "macos-arm"} <= set(shipped)
    for profile in shipped.values():
        assert profile.prefer, profile.name


def test_gpu_providers_fall_back_to_cpu_when_cuda_is_absent(tmp_path):
    profile = get_profile("gpu-server")
    wanted = providers_from_profile(profile.section("onnxruntime"))
    assert [p[0] if isinstance(p, tuple) else p for p in wanted][:2] == [
        "TensorrtExecutionProvider", "CUDAExecutionProvider"]
    assert choose_providers(wanted, ["CPUExecutionProvider"]) == ["CPUExecutionProvider"]
    on_gpu = choose_providers(wanted, ["TensorrtExecutionProvider", "CUDAExecutionProvider", "CPUExecutionProvider"])
    assert [p[0] if isinstance(p, tuple) else p for p in on_gpu] == [
        "TensorrtExecutionProvider", "CUDAExecutionProvider", "CPUExecutionProvider"]
    trt = _with_engine_cache(on_gpu[0], tmp_path)
    assert trt[1]["trt_engine_cache_enable"] is True and trt[1]["trt_engine_cache_path"].startswith(str(tmp_path))
    assert trt[1]["trt_int8_enable"] is True  # the profile's own options are kept


def test_gpu_profile_session_really_runs_on_cpu_here(tmp_path):
    """A real ONNX Runtime session built from the gpu-server profile on a machine without CUDA."""
    import onnx
    from onnx import TensorProto, helper

    graph = helper.make_graph(
        [helper.make_node("Relu", ["x"], ["y"])], "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [None, 4])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [None, 4])],
    )
    path = tmp_path / "relu.onnx"
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=9), path)
    backend = OnnxRuntimeBackend(str(path), providers=providers_from_profile(get_profile("gpu-server").section("onnxruntime")), compiled_dir=str(tmp_path / "c"))
    assert backend.active_providers == ["CPUExecutionProvider"]
    assert np.array_equal(backend.run(np.array([[-1, 2, -3, 4]], np.float32))[0], [[0, 2, 0, 4]])
    again = OnnxRuntimeBackend(str(path), providers=["CPUExecutionProvider"], compiled_dir=str(tmp_path / "c"))
    assert again.optimized_from_cache  # the optimized model was cached for this device


def test_targets_command_says_what_matches_and_why(tmp_path, capsys):
    code, out, _ = run_cli(capsys, "targets", "--root", str(fake_root(tmp_path, nvidia=True)))
    assert code == 0
    assert "NVIDIA driver yes" in out
    assert "selected: gpu-server" in out or "selected:" in out
    assert "yes: NVIDIA driver present" in out
    for name in ("rpi4", "rpi5", "jetson-orin-nano", "jetson-agx-orin", "x86-cpu", "gpu-server", "macos-arm"):
        assert name in out


def test_a_runtime_gets_the_asked_threads_else_the_profiles_lowered_to_this_devices_limit(caplog):
    from edgekit.device.devices import runtime_threads

    two_cores = DeviceFacts(os="linux", arch="aarch64", cpu_count=2)
    big = Profile(name="big", threads=64)  # written for a bigger machine
    assert runtime_threads(Profile(name="all"), two_cores) == 2  # 0: every core
    assert runtime_threads(big, two_cores, asked=3) == 3
    with caplog.at_level("WARNING", logger="edgekit.runtime"):
        assert runtime_threads(big, two_cores) == 8  # 4 per core at most
    assert "64 threads is more than this device runs well (2 cores); using 8" in caplog.text
