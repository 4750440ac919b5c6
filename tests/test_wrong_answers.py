"""Wrong answers and misleading messages found by trying edgekit as a new user and as an adversary
would: each case names the problem, exits with the documented status, and never guesses."""

from __future__ import annotations

import json
import shutil
import warnings
from dataclasses import replace

import numpy as np
import pytest

from edgekit.errors import FailedArtifactWarning, OptionError, missing_module_error
from edgekit.formats.plan import PrecisionPlan
from tests.conftest import CALIBRATION, DIGITS_MODEL, device_cli, edgekit_cli


def test_a_layer_both_kept_float_and_given_int16_is_a_usage_error():
    with pytest.raises(OptionError, match="both name dense") as caught:
        PrecisionPlan.from_flags(floats=["dense"], int16=["dense", "conv"])
    assert caught.value.exit_code == 2
    result = edgekit_cli("package", DIGITS_MODEL, "-c", CALIBRATION, "-o", "/tmp/never", "--keep-float", "block1_dw",
                         "--int16-activations", "block1_dw")
    assert result.returncode == 2 and "--keep-float and --int16-activations both name block1_dw" in result.stderr
    assert "Traceback" not in result.stderr


def test_an_out_of_range_search_budget_is_a_usage_error():
    result = edgekit_cli("package", DIGITS_MODEL, "-c", CALIBRATION, "-o", "/tmp/never", "--search-budget", "1e12")
    assert result.returncode == 2 and "--search-budget" in result.stderr and "Traceback" not in result.stderr


def test_a_manifest_nested_200000_deep_is_a_corrupt_package_not_an_internal_error(digits_package, tmp_path):
    package = tmp_path / "deep.edgekit"
    shutil.copytree(digits_package, package)
    (package / "manifest.json").write_text('{"a": ' + "[" * 200_000 + "]" * 200_000 + "}")
    for run in (lambda: device_cli(package, "--input", CALIBRATION), lambda: edgekit_cli("verify", package)):
        result = run()
        assert result.returncode == 1, result.stderr[-2000:]
        assert "nested too deeply" in result.stderr and "RecursionError" not in result.stderr
        assert "internal error" not in result.stderr


def test_window_takes_units_and_must_leave_two_windows(digits_package):
    result = device_cli(digits_package, "--bench", "--sustained", "10s", "--window", "8s")
    assert result.returncode == 2 and "longer than half the --sustained run" in result.stderr
    result = device_cli(digits_package, "--bench", "--sustained", "10s", "--window", "zz")
    assert result.returncode == 2 and "--window 'zz' is not a duration" in result.stderr
    from edgekit.bench.sustained import seconds_in

    assert seconds_in("2s") == 2 and seconds_in("1m") == 60 and seconds_in("2.5") == 2.5


def test_top_k_on_an_unlabelled_classifier_prints_the_top_classes_not_the_vector():
    from edgekit.cli.run import format_rows

    scores = np.array([0.1, 0.7, 0.05, 0.15], np.float32)
    (line,) = format_rows(["x.npy"], [{"probs": scores}], None, 1, False, {"probs"})
    assert line == "x.npy: class 1 0.700"
    (line,) = format_rows(["x.npy"], [{"values": scores}], None, 1, False, set())  # not class scores: the values
    assert "[" in line


def test_run_takes_the_x_y_npz_layout_that_eval_takes(digits_package, tmp_path):
    with np.load(str(DIGITS_MODEL.parent / "data" / "eval.npz")) as data:
        np.savez(tmp_path / "set.npz", x=data["x"][:3], y=data["y"][:3])
    result = device_cli(digits_package, "--input", tmp_path / "set.npz", "--top-k", "1")
    assert result.returncode == 0, result.stderr
    assert len([line for line in result.stdout.splitlines() if line.startswith(str(tmp_path / "set.npz"))]) == 3


def test_a_missing_library_names_the_extra_that_installs_it():
    error = missing_module_error(ModuleNotFoundError("No module named 'torch'", name="torch"))
    assert error is not None and "pip install 'edgekit[torch]'" in error.hint
    assert missing_module_error(ModuleNotFoundError("No module named 'mine'", name="mine")) is None


def test_a_dataloader_of_three_arrays_for_a_one_input_module_is_a_data_error(tmp_path):
    torch = pytest.importorskip("torch")
    import edgekit
    from edgekit.errors import DataError

    module = torch.nn.Sequential(torch.nn.Flatten(), torch.nn.Linear(16, 3))
    data = torch.utils.data.TensorDataset(torch.rand(40, 1, 4, 4), torch.randint(0, 3, (40,)), torch.rand(40, 2))
    loader = torch.utils.data.DataLoader(data, batch_size=8)
    with pytest.raises(DataError, match="yields 3 arrays per item; the module's forward\\(\\) takes 1 input"):
        edgekit.package(module, loader, str(tmp_path), formats=["onnx"])


def test_asking_for_a_format_whose_int8_was_refused_says_it_runs_the_float_fallback(digits_all_package):
    from edgekit.device.devices import get_profile
    from edgekit.manifest import FailedFormat, Manifest
    from edgekit.device.runtime import choose

    manifest = Manifest.from_json((digits_all_package / "manifest.json").read_bytes())
    assert any(a.key == "onnx-float32" for a in manifest.artifacts)
    refused = replace(manifest, artifacts=[a for a in manifest.artifacts if a.format != "onnx" or a.is_float],
                      failed=[FailedFormat("onnx", "INT8 validation failed: top-1 80%")])
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        entry, _ = choose(refused, get_profile("x86-cpu"), "onnx")
    assert entry.key == "onnx-float32"
    said = [str(w.message) for w in caught if issubclass(w.category, FailedArtifactWarning)]
    assert said and "left out when it was packaged (INT8 validation failed: top-1 80%)" in said[0]


def test_an_undecided_package_exits_4_and_warns_when_it_loads(tmp_path):
    with np.load(str(CALIBRATION)) as data:
        np.savez(tmp_path / "few.npz", x=data["x"][:18], y=data["y"][:18])
    result = edgekit_cli("package", DIGITS_MODEL, "-c", CALIBRATION, "--eval", tmp_path / "few.npz", "-o", tmp_path,
                         "--format", "tflite", "--no-also-float")
    assert result.returncode == 4, result.stderr[-3000:]
    assert "not decidable" in result.stderr and "100 held-out samples would decide it" in result.stderr
    validation = json.loads((tmp_path / "digits.edgekit" / "manifest.json").read_text())["validation"]
    assert validation["passed"] is None and validation["state"] == "not decidable"
    record = validation["artifacts"]["tflite"]
    assert record["passed"] is None and record["verdict"] == "not decidable"
    assert record["tasks"]["probabilities"]["evidence"][0]["n"] == 18 if "probabilities" in record.get("tasks", {}) \
        else record["undecided"][0]["have"] == 18
    loaded = device_cli(tmp_path / "digits.edgekit", "--input", tmp_path / "few.npz", "--top-k", "1")
    assert loaded.returncode == 0 and "too few validation samples to decide" in loaded.stderr
    assert "passes (" not in result.stdout and "meets its floor, NOT DECIDABLE on this sample" in result.stdout
    # signed or handed to Triton, its state is said
    assert edgekit_cli("keys", "generate", tmp_path / "keys" / "k").returncode == 0
    signed = edgekit_cli("sign", tmp_path / "digits.edgekit", "--key", tmp_path / "keys" / "k")
    assert signed.returncode == 0 and "warning: signing a package whose verdict is NOT DECIDABLE" in signed.stderr
    exported = edgekit_cli("export", "triton", tmp_path / "digits.edgekit", "-o", tmp_path / "repo", "--backend", "python")
    assert exported.returncode == 0 and "warning: exporting a package whose verdict is NOT DECIDABLE" in exported.stderr


def test_an_onnx_build_with_no_int8_op_is_labelled_float_said_and_not_copied_per_scheme(tmp_path):
    import onnx
    from onnx import TensorProto, helper

    graph = helper.make_graph([helper.make_node("Sin", ["x"], ["s"], name="sin"),
                               helper.make_node("Cos", ["s"], ["y"], name="cos")], "wave",
                              [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", 8])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["N", 8])])
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), tmp_path / "wave.onnx")
    np.save(tmp_path / "x.npy", np.random.default_rng(0).normal(size=(200, 8)).astype(np.float32))
    result = edgekit_cli("package", tmp_path / "wave.onnx", "-c", tmp_path / "x.npy", "--format", "onnx",
                         "-o", tmp_path / "out", "--no-also-float")
    assert result.returncode == 0, result.stderr[-3000:]
    assert "note: onnx: ONNX Runtime's quantizer left no op in INT8 (float ops: Cos, Sin)" in result.stdout
    manifest = json.loads((tmp_path / "out" / "wave.edgekit" / "manifest.json").read_text())
    assert [(a["path"], a["precision"]) for a in manifest["artifacts"]] == [("onnx/model.int8.onnx", "float")]
    assert "identical copy" in result.stderr  # the scheme variants are left out, said once each


def test_qdq_pairs_around_layers_that_all_compute_in_float_ship_the_float_model_labelled_so(tmp_path):
    """A Gemm whose bias is an input (here fixed with --input h0=...) stays float in ONNX Runtime's
    quantizer, which still writes Q/DQ pairs around it: quantization noise without an int8 kernel.
    The float model ships instead, labelled float, exact, with a summary line."""
    import onnx
    from onnx import TensorProto, helper, numpy_helper

    rng = np.random.default_rng(0)
    graph = helper.make_graph(
        [helper.make_node("Gemm", ["x", "W", "h0"], ["s"], name="gx"), helper.make_node("Tanh", ["s"], ["y"], name="t")],
        "cell", [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", 8]),
                 helper.make_tensor_value_info("h0", TensorProto.FLOAT, ["N", 16])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["N", 16])],
        [numpy_helper.from_array((rng.normal(size=(8, 16)) * 0.3).astype(np.float32), "W")])
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), tmp_path / "cell.onnx")
    np.save(tmp_path / "x.npy", rng.normal(size=(200, 8)).astype(np.float32))
    np.save(tmp_path / "h0.npy", (rng.normal(size=(1, 16)) * 0.1).astype(np.float32))
    result = edgekit_cli("package", tmp_path / "cell.onnx", "-c", tmp_path / "x.npy", "--input",
                         f"h0={tmp_path / 'h0.npy'}", "--format", "onnx", "--no-also-float", "-o", tmp_path / "out")
    assert result.returncode == 0, result.stderr[-3000:]
    manifest = json.loads((tmp_path / "out" / "cell.edgekit" / "manifest.json").read_text())
    (artifact,) = manifest["artifacts"]
    assert artifact["precision"] == "float"
    shipped = onnx.load(str(tmp_path / "out" / "cell.edgekit" / artifact["path"]))
    assert not {n.op_type for n in shipped.graph.node} & {"QuantizeLinear", "DequantizeLinear"}
    assert manifest["validation"]["artifacts"]["onnx"]["sqnr_db"] is None  # exact: the float model itself
    assert "onnx: shipped float; exact" in result.stdout
    assert "output tail in float after the last INT8 op" not in result.stdout


# --- messages that misled: each one line, each said right ---------------------------------------


def test_refused_int8_without_fallbacks_says_none_was_built_not_that_none_passed():
    from types import SimpleNamespace

    from edgekit.packaging.each_format import ship_now

    refused = SimpleNamespace(name="tflite", built=SimpleNamespace(), failures=(), context=None, comparison=None)
    assert "no float fallback was built (--no-also-float" in ship_now([refused])
    assert "passed either" not in ship_now([refused])


def test_a_quantized_sources_refusal_names_no_calibration_fix():
    from edgekit.packaging.gates import GateFailure, failure_hint, failure_message

    failure = GateFailure(format="tflite", output="logits", cause="top1", what="top-1 agreement 90% < 99%",
                          fixes=(), margin=-0.09)
    hint = failure_hint({"tflite": set()}, {"tflite": 0}, [], False, quantized_source=True)
    assert "already quantized" in hint and "calibration data unlike" not in hint and "--float-reference" in hint
    assert "(fix:" not in failure_message([failure], None, quantized_source=True)


def test_an_op_the_onnx_rebuild_lacks_is_not_blamed_on_two_formats_only():
    from edgekit.errors import ConversionError
    from edgekit.conversion.onnx_torch import _refuse_unsupported
    from edgekit.conversion.onnx_torch.graph import Node

    with pytest.raises(ConversionError) as caught:
        _refuse_unsupported([Node(op="NoSuchOp", name="n", inputs=[], outputs=[], attrs={}, opset=17)], [""])
    assert "TFLite, CoreML and ExecuTorch" in caught.value.message and "NoSuchOp" in caught.value.message


def test_every_exit_status_is_in_the_help_the_reference_and_the_readme():
    from tests.conftest import ROOT

    for text in (edgekit_cli("--help").stdout, device_cli("--help").stdout, edgekit_cli("package", "--help").stdout,
                 (ROOT / "docs/reference/cli.md").read_text(), (ROOT / "README.md").read_text()):
        flat = " ".join(text.split()).replace("`", "")
        for status in ("2 a usage error", "3 --fail-on-fallback", "4 a package written", "5 a package written",
                       "70 an internal error", "130 interrupted", "143 terminated"):
            assert status in flat.replace("4 package written", "4 a package written").replace(
                "5 package written", "5 a package written"), status
        assert "first of 2, 1, 4, 5 wins" in flat


def test_a_card_for_an_artifact_the_package_lacks_is_refused_in_one_sentence(digits_package):
    from edgekit.bench.package_cards import _check_belongs
    from edgekit.errors import PackageError
    from edgekit.manifest import Manifest

    manifest = Manifest.from_json((digits_package / "manifest.json").read_bytes())
    card = {"model": {"name": manifest.name}, "artifact": {"key": "onnx", "sha256": "0" * 64}}
    with pytest.raises(PackageError) as caught:
        _check_belongs(card, manifest, digits_package)
    assert caught.value.message == "the card of digits · onnx cannot be stored: package 'digits' has no artifact 'onnx'"


def test_the_tour_writes_its_signing_key_where_git_ignores_it():
    import subprocess

    from tests.conftest import ROOT

    assert "edgekit keys generate keys/mykey" in (ROOT / "README.md").read_text()
    ignored = subprocess.run(["git", "check-ignore", "-q", "keys/mykey"], cwd=ROOT)
    assert ignored.returncode == 0
