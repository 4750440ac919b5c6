"""Train the digits reference model: a small depthwise-separable CNN (batch norm, ReLU6).

    python models/digits/train.py            # writes models/digits/digits.keras (~10 s on 2 cores)

Input: 8x8x1 float in [0, 1] (the packager infers scale 1/255 from the uint8 data, since the
model has no Rescaling layer). Output: softmax over the 10 digits.
"""

from __future__ import annotations

import argparse
import os
from pathlib import Path

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")

import numpy as np  # noqa: E402

HERE = Path(__file__).resolve().parent


def build_model():
    import keras
    from keras import layers

    def conv_bn(x, filters, kernel, stride=1, name=""):
        x = layers.Conv2D(filters, kernel, strides=stride, padding="same", use_bias=False, name=f"{name}_conv")(x)
        x = layers.BatchNormalization(name=f"{name}_bn")(x)
        return layers.ReLU(6.0, name=f"{name}_relu6")(x)

    def separable(x, filters, stride, name):
        x = layers.DepthwiseConv2D(3, strides=stride, padding="same", use_bias=False, name=f"{name}_dw")(x)
        x = layers.BatchNormalization(name=f"{name}_dw_bn")(x)
        x = layers.ReLU(6.0, name=f"{name}_dw_relu6")(x)
        return conv_bn(x, filters, 1, name=f"{name}_pw")

    inputs = keras.Input((8, 8, 1), name="image")
    x = conv_bn(inputs, 16, 3, name="stem")
    x = separable(x, 32, 1, "block1")
    x = separable(x, 64, 2, "block2")
    x = separable(x, 64, 1, "block3")
    x = layers.GlobalAveragePooling2D(name="pool")(x)
    x = layers.Dropout(0.2, name="dropout")(x)
    outputs = layers.Dense(10, activation="softmax", name="probabilities")(x)
    return keras.Model(inputs, outputs, name="digits")


def load(split: str) -> tuple[np.ndarray, np.ndarray]:
    with np.load(HERE / "data" / f"{split}.npz") as data:
        return data["x"].astype(np.float32) / 255.0, data["y"]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--epochs", type=int, default=60)
    parser.add_argument("--output", type=Path, default=HERE / "digits.keras")
    args = parser.parse_args()

    import keras

    keras.utils.set_random_seed(0)
    x_train, y_train = load("train")
    x_eval, y_eval = load("eval")
    model = build_model()
    model.compile(
        optimizer=keras.optimizers.Adam(3e-3),
        loss="sparse_categorical_crossentropy",
        metrics=["accuracy"],
    )
    model.fit(x_train, y_train, epochs=args.epochs, batch_size=32, verbose=0, validation_data=(x_eval, y_eval))
    _, accuracy = model.evaluate(x_eval, y_eval, verbose=0)
    model.save(args.output)
    print(f"eval accuracy {accuracy:.4f}; saved {args.output} ({args.output.stat().st_size / 1024:.0f} KiB)")


if __name__ == "__main__":
    main()
