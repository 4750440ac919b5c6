"""SavedModel sources written by ``tf.saved_model.save(keras_model)``: they convert (their
variables are frozen first), and ``--explain`` names layers that ``--keep-float`` accepts."""

from __future__ import annotations

import json

import numpy as np
import pytest

from tests.conftest import edgekit_cli, run_tf

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def saved_model(tmp_path_factory):
    root = tmp_path_factory.mktemp("savedmodel")
    run_tf(f"""
        import keras, tensorflow as tf
        keras.utils.set_random_seed(0)
        image = keras.Input((16, 16, 3), name="image")
        d = keras.layers.GlobalAveragePooling2D()(keras.layers.Conv2D(8, 3, activation="relu")(image))
        boxes = keras.layers.Rescaling(300.0)(keras.layers.Dense(4, activation="sigmoid")(d))
        scores = keras.layers.Dense(3, activation="softmax")(d)
        model = keras.Model(image, keras.layers.Concatenate(name="detections")([boxes, scores]))
        tf.saved_model.save(model, {str(root / "detector")!r})  # not model.export: variables stay resources
    """)
    np.save(root / "images.npy", np.random.default_rng(0).uniform(0, 1, (120, 16, 16, 3)).astype(np.float32))
    return root


def test_a_saved_model_with_resource_variables_converts_and_explains_with_usable_names(saved_model):
    out = saved_model / "out"
    result = edgekit_cli("package", saved_model / "detector", "-c", saved_model / "images.npy", "--format", "tflite",
                         "--format", "onnx", "--explain", "--auto-fix", "--no-simulate", "-o", out, "--force")
    assert result.returncode == 0, result.stderr[-3000:]  # TFLite calibration failed on READ_VARIABLE before
    manifest = json.loads((out / "detector.edgekit" / "manifest.json").read_text())
    rows = next(a for a in manifest["artifacts"] if a["format"] == "tflite")["details"]["explain"]
    layers = {row["layer"] for row in rows}
    assert not any("PartitionedCall" in layer or layer.startswith("functional") for layer in layers), layers
    assert "output_0" in layers  # the concatenation computing the output, named by the output
    # the collapsed score block was fixed by raising the output's op (16-bit activations first, then float)
    for fmt in ("tflite", "onnx"):
        record = manifest["validation"]["artifacts"][fmt]
        assert record["auto_fix"][0]["change"] == "--int16-activations output_0" and record["passed"], record
        kept = [t["change"] for t in record["auto_fix"] if t["kept"] and not t.get("stage")]
        assert kept and kept[0] in ("--int16-activations output_0", "--keep-float output_0"), record
    # a layer the report names is one --keep-float takes
    softmax = next(row["layer"] for row in rows if row["op"] == "SOFTMAX")
    kept = edgekit_cli("package", saved_model / "detector", "-c", saved_model / "images.npy", "--keep-float",
                       softmax, "--keep-float", "output_0", "-o", out, "--force")
    assert kept.returncode == 0, kept.stderr[-3000:]
    assert f"SOFTMAX ({softmax})" in kept.stdout


def test_a_jax_style_one_hot_saved_model_ships_tflite_with_its_one_hot_in_float(tmp_path):
    """A jax2tf-style SavedModel: int32 tokens -> tf.one_hot -> dense layers with a [1, N] bias.
    TFLite's ONE_HOT takes no quantized operand: it stays float (named in the artifact) instead
    of failing the format, and the ONNX build quantizes (its Gemm bias flattened to 1-D)."""
    run_tf(f"""
        import numpy as np, tensorflow as tf
        rng = np.random.default_rng(0)
        w1 = tf.constant(rng.normal(0, 0.3, (128, 32)).astype(np.float32))
        w2 = tf.constant(rng.normal(0, 0.3, (32, 4)).astype(np.float32))
        b2 = tf.constant(rng.normal(0, 0.1, (1, 4)).astype(np.float32))
        class M(tf.Module):
            @tf.function(input_signature=[tf.TensorSpec([None, 24], tf.int32, name="tokens")])
            def __call__(self, tokens):
                counts = tf.reduce_sum(tf.one_hot(tokens, 128, dtype=tf.float32), axis=1)
                return {{"probabilities": tf.nn.softmax(tf.matmul(tf.nn.relu(tf.matmul(counts, w1)), w2) + b2)}}
        m = M()
        tf.saved_model.save(m, {str(tmp_path / "sm")!r}, signatures={{"serving_default": m.__call__}})
        np.savez({str(tmp_path / "tokens.npz")!r}, tokens=rng.integers(32, 96, (200, 24)).astype(np.int32))
    """)
    result = edgekit_cli("package", tmp_path / "sm", "--format", "tflite", "--format", "onnx", "-c",
                         tmp_path / "tokens.npz", "--no-also-float", "-o", tmp_path / "out", "--name", "onehot")
    assert result.returncode == 0, result.stderr[-3000:]
    manifest = json.loads((tmp_path / "out" / "onehot.edgekit" / "manifest.json").read_text())
    tflite = next(a for a in manifest["artifacts"] if a["format"] == "tflite")
    # ONE_HOT float in any case; the search may raise layers too (16-bit activations first): int8+int16+float
    assert "ONE_HOT" in {op["op"] for op in tflite["float_ops"]}
    assert tflite["precision"].startswith("int8+") and "float" in tflite["precision"]
    assert all(m["passed"] for m in manifest["validation"]["artifacts"].values())
