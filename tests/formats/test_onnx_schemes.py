"""ONNX INT8 schemes: chosen per device profile when packaging, per CPU features when running."""

from __future__ import annotations

import json

import pytest

import edgekit
from edgekit.device.devices import SYSROOT_ENV, Profile, load_profiles
from edgekit.errors import EdgekitError, KernelArithmeticWarning
from edgekit.formats.onnx.schemes import S8S8, U8S8, U8S8_REDUCED, scheme_for_cpu, schemes_for_cpu
from tests.conftest import CALIBRATION, DIGITS_MODEL, EVAL, run_cli


@pytest.mark.parametrize("arch, flags, expected", [
    ("x86_64", {"avx2", "fma"}, U8S8_REDUCED),  # no VNNI: u8 x s8 in 16-bit lanes saturates; 7-bit weights
    ("x86_64", {"avx2", "avx512f", "avx512_vnni"}, U8S8),  # ONNX Runtime's x86 kernels are u8 x s8
    ("x86_64", {"avx2", "avx_vnni"}, U8S8),
    ("x86_64", {"avx2", "amx_int8"}, U8S8),
    ("aarch64", {"asimd", "asimddp"}, S8S8),
    ("aarch64", {"asimd"}, S8S8),  # ARM without dot product: ONNX Runtime's S8S8 kernels, no saturation path
    ("arm64", set(), S8S8),
])
def test_the_scheme_follows_the_cpu_features(arch, flags, expected):
    assert scheme_for_cpu(arch, frozenset(flags)) is expected


def test_a_cpu_runs_the_schemes_it_computes_correctly_fastest_first():
    assert schemes_for_cpu("x86_64", frozenset({"avx2", "avx512_vnni"})) == [U8S8, U8S8_REDUCED, S8S8]
    assert schemes_for_cpu("x86_64", frozenset({"avx2"})) == [U8S8_REDUCED, S8S8]  # 8-bit weights could saturate
    assert schemes_for_cpu("aarch64", frozenset({"asimddp"})) == [S8S8]


def test_profiles_say_which_schemes_their_devices_need(tmp_path):
    profiles = load_profiles()
    assert profiles["x86-cpu"].builds("onnx") == ["u8s8", "u8s8-reduce-range"]
    assert profiles["rpi5"].builds("onnx") == ["s8s8"]
    bad = tmp_path / "odd.toml"
    bad.write_text('name = "odd"\n[quantization]\nonnx = ["s4s4"]\n')
    with pytest.raises(EdgekitError, match=r"unknown ONNX INT8 scheme\(s\) \['s4s4'\]"):
        Profile.from_file(bad)


def test_every_known_profile_gets_every_onnx_scheme_each_validated(digits_all_package):
    manifest = json.loads((digits_all_package / "manifest.json").read_text())
    onnx = {a.get("variant", ""): a for a in manifest["artifacts"] if a["format"] == "onnx" and a["precision"] != "float32"}
    assert set(onnx) == {"", "u8s8", "u8s7"}
    assert onnx[""]["converter"]["activation_type"] == "s8" and onnx[""]["converter"]["reduce_range"] is False
    for variant, reduce_range in (("u8s8", False), ("u8s7", True)):
        built = onnx[variant]
        assert built["path"] == f"onnx/model.int8-{variant}.onnx" and built["companions"] == []  # .ort: ARM builds
        assert built["converter"]["activation_type"] == "u8" and built["converter"]["reduce_range"] is reduce_range
        assert manifest["validation"]["artifacts"][f"onnx-{variant}"]["passed"] is True
        # what the variant is for: every compute op an int8 kernel after ONNX Runtime's x86 optimization
        assert built["details"]["runtime_graph"]["int8_fraction"] == 1.0 or "x86" not in built["details"][
            "runtime_graph"]["cpu"]


def test_a_package_for_arm_devices_builds_s8s8_only(tmp_path, capsys):
    code, _, err = run_cli(capsys, "package", str(DIGITS_MODEL), "-c", str(CALIBRATION), "--eval", str(EVAL),
                           "--format", "onnx", "--profile", "rpi5", "--profile", "jetson-orin-nano",
                           "--no-also-float", "-o", str(tmp_path))
    assert code == 0, err
    manifest = json.loads((tmp_path / "digits.edgekit" / "manifest.json").read_text())
    assert [a.get("variant", "") for a in manifest["artifacts"]] == [""]
    code, _, err = run_cli(capsys, "package", str(DIGITS_MODEL), "-c", str(CALIBRATION), "--format", "onnx",
                           "--profile", "pi-zero", "-o", str(tmp_path / "other"))
    assert code == 1 and "unknown device profile 'pi-zero'" in err


def _cpuinfo(tmp_path, flags: str):
    root = tmp_path / f"root-{flags.replace(' ', '-')}"
    (root / "proc").mkdir(parents=True, exist_ok=True)  # the same CPU may be faked twice in one test
    (root / "proc" / "cpuinfo").write_text(f"processor\t: 0\nmodel name\t: Test CPU\nflags\t\t: {flags}\n")
    return root


def test_the_runtime_runs_the_scheme_built_for_its_cpu(digits_all_package, tmp_path, monkeypatch):
    import platform

    if platform.machine() not in ("x86_64", "AMD64"):
        pytest.skip("the x86 scheme choice is checked on x86 (the CPU architecture is not faked)")
    monkeypatch.setenv(SYSROOT_ENV, str(_cpuinfo(tmp_path, "fpu sse2 avx2 fma")))
    with edgekit.load(digits_all_package, backend="onnxruntime", profile="x86-cpu") as model:
        assert model.artifact.key == "onnx-u8s7"
    monkeypatch.setenv(SYSROOT_ENV, str(_cpuinfo(tmp_path, "fpu sse2 avx2 fma avx512f avx512_vnni")))
    with edgekit.load(digits_all_package, backend="onnxruntime", profile="x86-cpu") as model:
        assert model.artifact.key == "onnx-u8s8"
    # --artifact onnx: the best ONNX artifact for this CPU (it ran the S8S8 build, which a CPU without
    # VNNI runs on saturating kernels); the main build's own scheme name addresses it exactly
    with edgekit.load(digits_all_package, artifact="onnx", profile="x86-cpu") as model:
        assert model.artifact.key == "onnx-u8s8"
    monkeypatch.setenv(SYSROOT_ENV, str(_cpuinfo(tmp_path, "fpu sse2 avx2 fma")))
    with edgekit.load(digits_all_package, artifact="onnx", profile="x86-cpu") as model:
        assert model.artifact.key == "onnx-u8s7"
    with pytest.warns(KernelArithmeticWarning, match="validated as quantized for other devices.*run onnx-u8s7"):
        with edgekit.load(digits_all_package, artifact="onnx-s8s8", backend="onnxruntime", profile="x86-cpu") as model:
            assert model.artifact.key == "onnx"
    with edgekit.load(digits_all_package, artifact="onnx-u8s7", profile="x86-cpu") as model:  # an exact key
        assert model.artifact.key == "onnx-u8s7"


def test_the_schemes_a_package_needs_come_from_its_profiles():
    from edgekit.device.devices import detect
    from edgekit.formats.onnx.schemes import schemes_for_profiles
    from edgekit.packaging import device_profiles

    def onnx_schemes(names):
        return schemes_for_profiles(device_profiles(names))

    assert onnx_schemes(["rpi5", "jetson-orin-nano"]) == ["s8s8"]
    assert onnx_schemes(["rpi5", "x86-cpu"]) == ["s8s8", "u8s8", "u8s8-reduce-range"]
    assert onnx_schemes(None) == ["s8s8", "u8s8", "u8s8-reduce-range"]  # every known profile
    assert onnx_schemes(["auto"]) == detect().builds("onnx")  # this machine's profile


def test_tune_never_picks_a_build_whose_verdict_this_cpus_kernels_break(digits_all_package, tmp_path, monkeypatch):
    """onnx-u8s8 is judged as quantized (for VNNI CPUs); on a CPU without VNNI ONNX Runtime runs it on
    saturating kernels: fast, and not what was validated. Tuning there must not consider it."""
    import platform

    from edgekit.device.devices import get_profile
    from edgekit.manifest import Manifest
    from edgekit.device.runtime import verdict_holds_here
    from edgekit.bench.tune import candidates

    if platform.machine() not in ("x86_64", "AMD64"):
        pytest.skip("the x86 scheme choice is checked on x86 (the CPU architecture is not faked)")
    manifest = Manifest.from_json((digits_all_package / "manifest.json").read_bytes())
    judged = {a.key: manifest.validation.artifact(a.key).metrics.judged_by or "" for a in manifest.artifacts}
    as_quantized = [k for k, j in judged.items() if str(j).startswith("as quantized")]
    assert "onnx" in as_quantized  # S8S8 is always for other devices here: u8s8 or u8s7 is this CPU's
    monkeypatch.setenv(SYSROOT_ENV, str(_cpuinfo(tmp_path, "fpu sse2 avx2 fma")))
    saturating = [k for k in as_quantized if k != "onnx-u8s7"]  # 7-bit weights cannot saturate
    for key in as_quantized:
        assert verdict_holds_here(manifest, key, "onnxruntime") is (key not in saturating), key
        assert verdict_holds_here(manifest, key, "openvino")  # OpenVINO's kernels do not saturate
    found = {(c.artifact, c.backend) for c in candidates(manifest, get_profile("x86-cpu"), [1])}
    assert not {(k, "onnxruntime") for k in saturating} & found
    assert ("tflite", "litert") in found
