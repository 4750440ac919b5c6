"""Build a ResNet-18-style Keras CNN at 224x224 (nothing downloaded) with real activations, and its data.

    python models/resnet_style/build.py [--output DIR] [--samples N] [--train-samples M]

Writes DIR/resnet_style.keras (about 45 MB: not committed), DIR/calibration.npz and DIR/eval.npz:
synthetic images whose class is their colour (ten well-separated colours under a random
gradient and noise), which the random backbone's pooled features separate with wide margins. The network is ResNet-18's: a 7x7/2 stem and max pool, four stages of two basic
blocks (3x3 convolutions, BatchNorm, ReLU, identity or 1x1/2 projection shortcuts) at 64, 128,
256 and 512 channels, global average pooling and a 10-class softmax. Dense 3x3 convolutions and
residual Adds are where int8 kernels should pay most on CPUs, unlike MobileNetV2's depthwise
ones. BatchNorm statistics come from real inputs and the head is trained on the backbone's
features (``models/mobilenet_v2``'s helpers), so the INT8 outputs carry signal and its
decisions survive INT8. A speed reference
(scripts/bench_runtime.py), not an accuracy one.

Preprocessing: pixels / 127.5 - 1 (--scale 0.00392157 --mean 0.5 --std 0.5).
"""

from __future__ import annotations

import argparse
import importlib.util
import os
from pathlib import Path

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")

import numpy as np  # noqa: E402

HERE = Path(__file__).resolve().parent


def _mobilenet_build():  # noqa: ANN202 - the sibling recipe's module (its images, BatchNorm and head helpers)
    spec = importlib.util.spec_from_file_location("mobilenet_build", HERE.parent / "mobilenet_v2" / "build.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def resnet18_style(classes: int):  # noqa: ANN201 - a Keras model
    import keras
    from keras import layers

    def block(x, filters: int, stride: int):  # noqa: ANN001, ANN202
        shortcut = x
        y = layers.Conv2D(filters, 3, strides=stride, padding="same", use_bias=False)(x)
        y = layers.ReLU()(layers.BatchNormalization()(y))
        y = layers.BatchNormalization()(layers.Conv2D(filters, 3, padding="same", use_bias=False)(y))
        if stride != 1 or shortcut.shape[-1] != filters:
            shortcut = layers.Conv2D(filters, 1, strides=stride, use_bias=False)(shortcut)
            shortcut = layers.BatchNormalization()(shortcut)
        return layers.ReLU()(layers.Add()([y, shortcut]))

    image = keras.Input((224, 224, 3), name="image")
    x = layers.Conv2D(64, 7, strides=2, padding="same", use_bias=False)(image)
    x = layers.ReLU()(layers.BatchNormalization()(x))
    x = layers.MaxPooling2D(3, strides=2, padding="same")(x)
    for filters, stride in ((64, 1), (128, 2), (256, 2), (512, 2)):
        x = block(x, filters, stride)
        x = block(x, filters, 1)
    x = layers.GlobalAveragePooling2D()(x)
    return keras.Model(image, layers.Dense(classes, activation="softmax", name="scores")(x), name="resnet_style")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--output", type=Path, default=HERE / "build")
    parser.add_argument("--samples", type=int, default=100, help="calibration images")
    parser.add_argument("--train-samples", type=int, default=240, help="images the head is trained on")
    parser.add_argument("--eval-samples", type=int, default=60, help="held-out labelled images")
    args = parser.parse_args()
    args.output.mkdir(parents=True, exist_ok=True)

    import keras

    recipe = _mobilenet_build()
    keras.utils.set_random_seed(0)
    model = resnet18_style(recipe.CLASSES)
    train_x, train_y = recipe.colour_images(args.train_samples, seed=1)
    recipe.set_batchnorm_statistics(model, train_x[:64])
    train_accuracy = recipe.train_head(model, train_x, train_y)
    eval_x, eval_y = recipe.colour_images(args.eval_samples, seed=2)
    predicted = np.concatenate([model.predict(recipe.preprocess(eval_x[i : i + 32]), verbose=0)
                                for i in range(0, len(eval_x), 32)]).argmax(axis=1)
    model.save(args.output / "resnet_style.keras")
    calibration_x, _ = recipe.colour_images(args.samples, seed=0)
    np.savez(args.output / "calibration.npz", x=calibration_x)
    np.savez(args.output / "eval.npz", x=eval_x, y=eval_y)
    print(f"wrote {args.output / 'resnet_style.keras'}, calibration.npz and eval.npz "
          f"(head train accuracy {train_accuracy:.1%}, held-out float accuracy {np.mean(predicted == eval_y):.1%})")


if __name__ == "__main__":
    main()
