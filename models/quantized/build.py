"""Reference quantized sources, built here in seconds (no download): what users bring when
post-training INT8 is not enough.

- ``qat_torch``: a small PyTorch CNN trained briefly with quantization-aware training (eager
  mode: fake-quant modules with per-channel symmetric int8 weights, int8 activations), exported
  to a QDQ ONNX graph by ``torch.onnx.export``, as TensorRT's and ONNX Runtime's QAT guides do.
- ``ort_excluded``: a float CNN quantized by ONNX Runtime's ``quantize_static`` (per-channel,
  S8S8 QDQ) with one layer excluded, so the graph keeps it in float: a mixed source.
- ``pt2e_qat``: the same CNN trained with PyTorch 2 export QAT (``prepare_qat_pt2e``, XNNPACK's
  quantizer) and saved as a ``torch.export`` program with its quantize/dequantize ops (``model.pt2``).
- ``fake_quant_keras``: a Keras CNN trained with TensorFlow's fake-quant ops (activations with
  learned ranges, per-channel symmetric narrow-range weights), exported as a SavedModel
  (``saved_model/``: its custom layers need no registration there), NHWC images.

Each ONNX folder gets ``model.onnx``, ``calibration.npz`` and ``eval.npz`` (8x8 one-channel images,
input ``image``, labels ``y``: which quadrant is the brightest), and for ``ort_excluded`` the
float model it was quantized from (``float.onnx``).

Each is stored trained in ``trained/`` with its data (``models/trained.py``): a build copies the
files while the recipe is unchanged (no TensorFlow or PyTorch import, no training: 15-18 s each
before) and trains otherwise; ``--store NAME`` trains and stores again after a recipe is edited.

    python models/quantized/build.py qat_torch --output DIR
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from trained import Store, main as trained_main  # noqa: E402  (models/trained.py)

TRAINED = Store(Path(__file__).resolve().parent / "trained")


def images(count: int, seed: int) -> tuple[np.ndarray, np.ndarray]:
    """8x8 noise images with one brighter quadrant; the label is that quadrant."""
    rng = np.random.default_rng(seed)
    x = rng.normal(0.0, 0.5, (count, 1, 8, 8)).astype(np.float32)
    y = rng.integers(0, 4, count)
    for i, q in enumerate(y):
        r, c = divmod(int(q), 2)
        x[i, 0, r * 4:(r + 1) * 4, c * 4:(c + 1) * 4] += 1.5
    return x, y.astype(np.int64)


def _net() -> object:
    import torch.nn as nn
    from torch.ao.quantization import DeQuantStub, QuantStub

    class Net(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.quant, self.dequant = QuantStub(), DeQuantStub()
            self.conv1, self.relu1 = nn.Conv2d(1, 8, 3, padding=1), nn.ReLU()
            self.conv2, self.relu2 = nn.Conv2d(8, 16, 3, stride=2, padding=1), nn.ReLU()
            self.pool, self.fc = nn.AdaptiveAvgPool2d(1), nn.Linear(16, 4)

        def forward(self, x):  # type: ignore[no-untyped-def]
            x = self.quant(x)
            x = self.relu2(self.conv2(self.relu1(self.conv1(x))))
            return self.dequant(self.fc(self.pool(x).flatten(1)))

    return Net()


def _train(model: object, x: np.ndarray, y: np.ndarray, steps: int) -> None:
    import torch

    inputs, targets = torch.from_numpy(x), torch.from_numpy(y)
    optimizer = torch.optim.Adam(model.parameters(), lr=0.02)  # type: ignore[attr-defined]
    for _ in range(steps):
        optimizer.zero_grad()
        loss = torch.nn.functional.cross_entropy(model(inputs), targets)  # type: ignore[operator]
        loss.backward()
        optimizer.step()


def qat_torch(folder: Path) -> None:
    """Float warm-up, then QAT with fake-quant modules, exported as QDQ ONNX."""
    import torch
    from torch.ao.quantization import (FakeQuantize, MovingAverageMinMaxObserver,
                                       MovingAveragePerChannelMinMaxObserver, QConfig)

    torch.manual_seed(0)
    x, y = images(800, 0)
    model = _net()
    _train(model.train(), x[:500], y[:500], 60)
    model.qconfig = QConfig(  # ONNX's QDQ takes (-128, 127) int8 ranges; per-channel symmetric weights
        activation=FakeQuantize.with_args(observer=MovingAverageMinMaxObserver, quant_min=-128, quant_max=127,
                                          dtype=torch.qint8),
        weight=FakeQuantize.with_args(observer=MovingAveragePerChannelMinMaxObserver, quant_min=-128, quant_max=127,
                                      dtype=torch.qint8, qscheme=torch.per_channel_symmetric, ch_axis=0))
    torch.ao.quantization.fuse_modules_qat(model, [["conv1", "relu1"], ["conv2", "relu2"]], inplace=True)
    torch.ao.quantization.prepare_qat(model, inplace=True)
    _train(model, x[:500], y[:500], 40)
    model.eval()
    model.apply(torch.ao.quantization.disable_observer)  # the learned ranges, frozen
    torch.onnx.export(model, torch.from_numpy(x[:1]), str(folder / "model.onnx"), input_names=["image"],
                      output_names=["logits"], dynamic_axes={"image": {0: "batch"}, "logits": {0: "batch"}},
                      opset_version=17, dynamo=False)
    np.savez(folder / "calibration.npz", image=x[500:650], y=y[500:650])
    np.savez(folder / "eval.npz", image=x[650:], y=y[650:])


def ort_excluded(folder: Path) -> None:
    """The float CNN quantized by ONNX Runtime (per-channel S8S8 QDQ) with conv2 left float."""
    import torch
    from onnxruntime.quantization import CalibrationDataReader, QuantFormat, QuantType, quantize_static

    torch.manual_seed(1)
    x, y = images(800, 1)
    model = _net()
    _train(model.train(), x[:500], y[:500], 80)
    model.eval()
    torch.onnx.export(model, torch.from_numpy(x[:1]), str(folder / "float.onnx"), input_names=["image"],
                      output_names=["logits"], dynamic_axes={"image": {0: "batch"}, "logits": {0: "batch"}},
                      opset_version=17, dynamo=False)
    rows = iter([{"image": x[i:i + 1]} for i in range(500, 600)])

    class Reader(CalibrationDataReader):
        def get_next(self):  # type: ignore[no-untyped-def]
            return next(rows, None)

    import onnx

    conv2 = next(n.name for n in onnx.load(str(folder / "float.onnx")).graph.node
                 if n.op_type == "Conv" and "conv2" in n.name)
    quantize_static(str(folder / "float.onnx"), str(folder / "model.onnx"), Reader(), quant_format=QuantFormat.QDQ,
                    activation_type=QuantType.QInt8, weight_type=QuantType.QInt8, per_channel=True,
                    nodes_to_exclude=[conv2])
    np.savez(folder / "calibration.npz", image=x[500:650], y=y[500:650])
    np.savez(folder / "eval.npz", image=x[650:], y=y[650:])


def fake_quant_keras(folder: Path) -> None:
    """Activations fake-quantized with trainable ranges, kernels per channel, trained briefly."""
    import os

    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
    import keras
    import tensorflow as tf

    keras.utils.set_random_seed(2)

    class FakeQuant(keras.layers.Layer):
        """TensorFlow's QAT op on activations, its range a trainable variable."""

        def __init__(self, low: float, high: float, **kwargs: object) -> None:
            super().__init__(**kwargs)
            self.low, self.high = low, high

        def build(self, shape: object) -> None:
            self.range_min = self.add_weight(shape=(), initializer=keras.initializers.Constant(self.low), name="min")
            self.range_max = self.add_weight(shape=(), initializer=keras.initializers.Constant(self.high), name="max")

        def call(self, x):  # type: ignore[no-untyped-def]
            return tf.quantization.fake_quant_with_min_max_vars(x, self.range_min, self.range_max, num_bits=8)

    class FakeQuantConv(keras.layers.Conv2D):
        """A convolution whose kernel is fake-quantized per output channel, symmetric (as TFLite's int8 weights)."""

        def call(self, x):  # type: ignore[no-untyped-def]
            peak = tf.reduce_max(tf.abs(self.kernel), [0, 1, 2])
            kernel = tf.quantization.fake_quant_with_min_max_vars_per_channel(self.kernel, -peak, peak, num_bits=8,
                                                                              narrow_range=True)
            return self.activation(tf.nn.conv2d(x, kernel, self.strides, self.padding.upper()) + self.bias)

    x, y = images(800, 2)
    x = x.transpose(0, 2, 3, 1)
    image = keras.Input((8, 8, 1), name="image")
    h = FakeQuant(-3.0, 4.0)(image)
    h = FakeQuant(0.0, 8.0)(FakeQuantConv(8, 3, padding="same", activation="relu")(h))
    h = FakeQuant(0.0, 8.0)(FakeQuantConv(16, 3, strides=2, padding="same", activation="relu")(h))
    logits = FakeQuant(-2.0, 2.0)(keras.layers.Dense(4)(keras.layers.GlobalAveragePooling2D()(h)))
    model = keras.Model(image, logits)
    model.compile("adam", keras.losses.SparseCategoricalCrossentropy(from_logits=True))
    model.fit(x[:500], y[:500], epochs=20, verbose=0)
    model.export(str(folder / "saved_model"), verbose=False)
    np.savez(folder / "calibration.npz", image=x[500:650], y=y[500:650])
    np.savez(folder / "eval.npz", image=x[650:], y=y[650:])


def pt2e_qat(folder: Path) -> None:
    """QAT in PyTorch 2 export form: ``prepare_qat_pt2e`` with XNNPACK's quantizer (per-channel
    symmetric int8 weights, int8 activations), trained briefly, ``convert_pt2e``, saved as a
    ``torch.export`` program (``model.pt2``) holding quantize/dequantize ops; input ``x``."""
    import torch
    from executorch.backends.xnnpack.quantizer.xnnpack_quantizer import (XNNPACKQuantizer,
                                                                         get_symmetric_quantization_config)
    from torchao.quantization.pt2e.quantize_pt2e import convert_pt2e, prepare_qat_pt2e

    torch.manual_seed(3)
    x, y = images(800, 3)
    model = _plain_net()
    _train(model.train(), x[:500], y[:500], 60)
    example, batch = (torch.from_numpy(x[:2]),), torch.export.Dim("batch")
    graph = torch.export.export(model, example, dynamic_shapes=({0: batch},)).module()
    quantizer = XNNPACKQuantizer().set_global(get_symmetric_quantization_config(is_per_channel=True, is_qat=True))
    graph = prepare_qat_pt2e(graph, quantizer)
    _train(graph, x[:500], y[:500], 30)
    graph = convert_pt2e(graph)
    torch.export.save(torch.export.export(graph, example, dynamic_shapes=({0: batch},)), str(folder / "model.pt2"))
    np.savez(folder / "calibration.npz", x=x[500:650], y=y[500:650])
    np.savez(folder / "eval.npz", x=x[650:], y=y[650:])


def _plain_net() -> object:
    """The reference CNN without eager mode's quant stubs (PT2E places its own quantize ops)."""
    import torch.nn as nn

    class Net(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.conv1, self.relu1 = nn.Conv2d(1, 8, 3, padding=1), nn.ReLU()
            self.conv2, self.relu2 = nn.Conv2d(8, 16, 3, stride=2, padding=1), nn.ReLU()
            self.pool, self.fc = nn.AdaptiveAvgPool2d(1), nn.Linear(16, 4)

        def forward(self, x):  # type: ignore[no-untyped-def]
            return self.fc(self.pool(self.relu2(self.conv2(self.relu1(self.conv1(x))))).flatten(1))

    return Net()


# each recipe's files, stored trained (their data included: the splits the recipe drew)
STORED = {"qat_torch": (["model.onnx", "calibration.npz", "eval.npz"], qat_torch),
          "pt2e_qat": (["model.pt2", "calibration.npz", "eval.npz"], pt2e_qat),
          "ort_excluded": (["model.onnx", "float.onnx", "calibration.npz", "eval.npz"], ort_excluded),
          "fake_quant_keras": (["saved_model", "calibration.npz", "eval.npz"], fake_quant_keras)}


def _builder(name: str) -> Callable[[Path], Path]:
    """NAME's build into ``OUTPUT/NAME/``: its stored files while its recipe is unchanged."""

    def build(out: Path) -> Path:
        folder = out / name
        folder.mkdir(parents=True, exist_ok=True)
        files, train = STORED[name]
        TRAINED.build(name, files, train, folder)
        return folder

    return build


BUILDERS = {name: _builder(name) for name in STORED}


if __name__ == "__main__":
    trained_main(__doc__.split("\n\n")[0], BUILDERS, STORED, TRAINED)
