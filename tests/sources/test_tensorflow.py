"""Keras sources the way users save them."""

from __future__ import annotations

import numpy as np
import pytest

import edgekit
from tests.conftest import run_tf

pytestmark = pytest.mark.slow


def test_a_sequential_model_saved_before_it_was_ever_called_packages(tmp_path):
    """Keras 3 leaves ``model.output`` undefined on such a model (only ``outputs`` is set)."""
    run_tf(f"""
        import keras, numpy as np
        keras.utils.set_random_seed(0)
        model = keras.Sequential([keras.Input((16,)), keras.layers.Dense(32, activation="relu"),
                                  keras.layers.Dense(4, activation="softmax", name="scores")])
        # trained for a moment (the class is the largest of the first four features): a trained
        # model's margins, not the near-ties of random weights that INT8 rightly flips
        x = np.random.default_rng(0).normal(0, 1, (120, 16)).astype(np.float32)
        model.compile(keras.optimizers.Adam(1e-2), "sparse_categorical_crossentropy")
        model.fit(x, x[:, :4].argmax(1), epochs=60, verbose=0)
        model.save({str(tmp_path / "seq.keras")!r})
    """)
    x = np.random.default_rng(0).normal(0, 1, (200, 16)).astype(np.float32)  # 100 held out: the gate can decide
    np.savez(tmp_path / "calibration.npz", x=x)
    built = edgekit.package(str(tmp_path / "seq.keras"), str(tmp_path / "calibration.npz"), str(tmp_path / "out"),
                            formats=["tflite"], also_float=False)
    assert built.manifest.validation.to_dict()["artifacts"]["tflite"]["passed"]
    assert built.manifest.validation.to_dict()["kinds"]["output_0"]["kind"] == "classes"  # the Softmax, from the layers
    with edgekit.load(built.path) as model:
        assert model.predict_tensor(x[:3]).shape == (3, 4)


def test_a_masked_lstm_with_a_pooled_head_gets_its_graph_at_batch_1(tmp_path):
    """Masking(0) + LSTM, a tag per step and a level from the pooled steps: the check of the batch-1
    graph against the SavedModel ran on zeros, a fully masked sequence whose pooled average is 0/0,
    and NaN never equals NaN, so no batch-1 graph was made and TFLite took the slow unrolled route."""
    run_tf(f"""
        import keras
        from edgekit.conversion import forms
        from edgekit.sources.tensorflow import prepare
        signal = keras.Input((12, 4), name="signal")
        steps = keras.layers.LSTM(6, return_sequences=True)(keras.layers.Masking(0.0)(signal))
        model = keras.Model(signal, [keras.layers.Dense(3, activation="softmax", name="tags")(steps),
                                     keras.layers.Dense(1, name="level")(keras.layers.GlobalAveragePooling1D()(steps))])
        model.save({str(tmp_path / "tagger.keras")!r})
        info = prepare({str(tmp_path / "tagger.keras")!r}, "keras", {str(tmp_path / "export")!r})
        assert info["forms"][forms.TF_GRAPH]["arguments"][forms.STATIC_BATCH_GRAPH], info["forms"]
    """)
