"""Build Keras MobileNetV2 224x224 (nothing downloaded) with real activations, and its data.

    python models/mobilenet_v2/build.py [--output DIR] [--samples N] [--train-samples M]

Writes DIR/mobilenet_v2.keras (14 MB: not committed), DIR/calibration.npz (N seeded synthetic
224x224 RGB uint8 images: smooth gradients plus noise) and DIR/eval.npz (held-out images with
class labels). The model has real MobileNetV2 structure and cost, so conversion time, size and
latency figures are representative, and its outputs carry signal:

- ``weights=None`` leaves BatchNorm at mean 0 / variance 1, which makes every activation tiny:
  the float model outputs ~1e-11 and its INT8 artifact outputs exactly 0 for every input. Here
  each BatchNorm's statistics are set from real inputs (one training-mode pass with momentum 0).
- The 10-class head is trained on the backbone's features for a task the images carry: the
  direction of the gradient (10 bins of 18 degrees). The float model is above chance on
  held-out images (about 25% against 10%): a random backbone's features differ little between
  images, so INT8 rounding stays visible (TFLite top-1 agreement about 58%). It is a speed and
  size reference, not an accuracy one.

``--task colour`` gives images whose class is their colour instead (ten well-separated colours
under a random gradient and noise): the random backbone's pooled features separate them with
wide margins, so INT8 keeps the decisions and the artifacts pass their gates, as
``scripts/bench_runtime.py`` needs for its INT8 speed figures.

Preprocessing is MobileNetV2's: pixels / 127.5 - 1, i.e. --scale 0.00392157 --mean 0.5 --std 0.5.
"""

from __future__ import annotations

import argparse
import os
from pathlib import Path

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")

import numpy as np  # noqa: E402

HERE = Path(__file__).resolve().parent
CLASSES = 10


def synthetic_images(count: int, size: int = 224, seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    """Gradient images and their class: the gradient's direction in 10 bins over 180 degrees."""
    rng = np.random.default_rng(seed)
    grid = np.linspace(0.0, 1.0, size, dtype=np.float32)
    images = np.empty((count, size, size, 3), np.uint8)
    labels = np.empty(count, np.int64)
    for i in range(count):
        labels[i] = rng.integers(CLASSES)
        angle = (labels[i] + rng.uniform(0.15, 0.85)) * np.pi / CLASSES
        ramp = np.cos(angle) * grid[None, :] + np.sin(angle) * grid[:, None]
        base = ramp[..., None] * rng.uniform(60, 200, 3) + rng.uniform(0, 55, 3)
        noise = rng.normal(0, rng.uniform(5, 30), (size, size, 3))
        images[i] = np.clip(base + noise, 0, 255).astype(np.uint8)
    return images, labels


# ten well-separated colours: the class of an image is its colour (under a random gradient and noise),
# which a random backbone's pooled features tell apart with wide margins (INT8 keeps the decisions)
PALETTE = np.array([[230, 40, 40], [40, 200, 60], [50, 70, 230], [235, 220, 50], [210, 60, 210],
                    [50, 210, 220], [245, 140, 30], [120, 120, 120], [140, 70, 30], [250, 250, 250]], np.float32)


def colour_images(count: int, size: int = 224, seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    grid = np.linspace(0.0, 1.0, size, dtype=np.float32)
    images = np.empty((count, size, size, 3), np.uint8)
    labels = rng.integers(len(PALETTE), size=count)
    for i in range(count):
        angle = rng.uniform(0, np.pi)
        ramp = 0.6 + 0.4 * (np.cos(angle) * grid[None, :] + np.sin(angle) * grid[:, None]) / 1.5
        base = ramp[..., None] * PALETTE[labels[i]]
        noise = rng.normal(0, rng.uniform(5, 20), (size, size, 3))
        images[i] = np.clip(base + noise, 0, 255).astype(np.uint8)
    return images, labels


def preprocess(images: np.ndarray) -> np.ndarray:
    return images.astype(np.float32) / 127.5 - 1.0


def set_batchnorm_statistics(model, images: np.ndarray) -> None:  # noqa: ANN001 - a Keras model
    """Every BatchNorm's moving mean/variance := the statistics of its input on ``images``."""
    import keras

    norms = [layer for layer in model.layers if isinstance(layer, keras.layers.BatchNormalization)]
    saved = [layer.momentum for layer in norms]
    for layer in norms:
        layer.momentum = 0.0  # the moving statistics become this batch's statistics
    model(preprocess(images), training=True)
    for layer, momentum in zip(norms, saved):
        layer.momentum = momentum


def train_head(model, images: np.ndarray, labels: np.ndarray) -> float:  # noqa: ANN001 - a Keras model
    """Fit the final Dense layer on the frozen backbone's features; returns training accuracy."""
    import keras

    head = model.layers[-1]
    backbone = keras.Model(model.inputs, model.layers[-2].output)
    features = np.concatenate([backbone.predict(preprocess(images[i : i + 32]), verbose=0)
                               for i in range(0, len(images), 32)])
    # Raw features, not standardized ones: dividing by a feature's tiny std would give it a huge
    # weight, and the INT8 model's rounding of that feature would then swing the logits.
    probe = keras.Sequential([keras.Input(features.shape[1:]), keras.layers.Dense(CLASSES, activation="softmax")])
    probe.compile(optimizer=keras.optimizers.Adam(0.01), loss="sparse_categorical_crossentropy", metrics=["accuracy"])
    history = probe.fit(features, labels, epochs=150, batch_size=64, verbose=0)
    head.set_weights(probe.layers[-1].get_weights())
    return float(history.history["accuracy"][-1])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--output", type=Path, default=HERE)
    parser.add_argument("--samples", type=int, default=100, help="calibration images")
    parser.add_argument("--train-samples", type=int, default=240, help="images the head is trained on")
    parser.add_argument("--eval-samples", type=int, default=60, help="held-out labelled images")
    parser.add_argument("--task", choices=("direction", "colour"), default="direction",
                        help="direction: the gradient's direction (weak margins: a size and speed reference); "
                             "colour: the image's colour (wide margins: INT8 keeps the decisions)")
    args = parser.parse_args()
    args.output.mkdir(parents=True, exist_ok=True)

    import keras

    keras.utils.set_random_seed(0)
    model = keras.applications.MobileNetV2(input_shape=(224, 224, 3), weights=None, classes=CLASSES)
    images = colour_images if args.task == "colour" else synthetic_images
    train_x, train_y = images(args.train_samples, seed=1)
    set_batchnorm_statistics(model, train_x[:64])
    train_accuracy = train_head(model, train_x, train_y)
    eval_x, eval_y = images(args.eval_samples, seed=2)
    predicted = np.concatenate([model.predict(preprocess(eval_x[i : i + 32]), verbose=0)
                                for i in range(0, len(eval_x), 32)]).argmax(axis=1)
    model.save(args.output / "mobilenet_v2.keras")
    calibration_x, _ = images(args.samples, seed=0)
    np.savez(args.output / "calibration.npz", x=calibration_x)
    np.savez(args.output / "eval.npz", x=eval_x, y=eval_y)
    print(f"wrote {args.output / 'mobilenet_v2.keras'}, calibration.npz and eval.npz "
          f"(head train accuracy {train_accuracy:.1%}, held-out float accuracy {np.mean(predicted == eval_y):.1%})")


if __name__ == "__main__":
    main()
