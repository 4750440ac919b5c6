"""``python -m edgekit.run PACKAGE --input FILE ...``: predict on this device.

Device path: numpy, Pillow and one runtime library; never TensorFlow.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import click
import numpy as np

from .clitools import invoke


@click.command("run")
@click.argument("package", type=click.Path(path_type=Path))
@click.option("--input", "-i", "inputs", multiple=True, required=True, type=click.Path(path_type=Path),
              help="Image, .npy or .json array; repeat for a batch.")
@click.option("--target", default=None, help="Artifact to run (tflite). Default: the best one this device can run.")
@click.option("--backend", default=None, help="Runtime to use (litert). Default: the best installed one.")
@click.option("--threads", type=click.IntRange(min=1), default=None, help="Runtime threads.")
@click.option("--top-k", type=click.IntRange(min=1), default=5, show_default=True,
              help="Labels to print per input when the package has labels.")
@click.option("--raw", is_flag=True, help="Return the artifact's native (int8) outputs, not dequantized floats.")
@click.option("--output", "-o", type=click.Path(path_type=Path), default=None,
              help="Write outputs to a .npy or .json file instead of printing them.")
def run_command(package: Path, inputs: tuple[Path, ...], target: str | None, backend: str | None,
                threads: int | None, top_k: int, raw: bool, output: Path | None) -> None:
    """Load PACKAGE (a NAME.edgekit directory or NAME.ekpkg) and predict on each --input."""
    from .fsutil import write_bytes_atomic, write_text_atomic
    from .runtime import load

    with load(package, target=target, backend=backend, threads=threads) as model:
        outputs = model.predict(list(inputs), raw=raw)
        labels = model.labels
    if output is not None:
        if output.suffix == ".npy":
            import io

            buffer = io.BytesIO()
            np.save(buffer, outputs)
            write_bytes_atomic(output, buffer.getvalue())
        else:
            write_text_atomic(output, json.dumps(outputs.tolist()) + "\n")
        return
    for item, row in zip(inputs, outputs):
        if labels and row.ndim == 1 and not raw:
            best = np.argsort(row)[::-1][:top_k]
            ranked = ", ".join(f"{labels[i]} {row[i]:.3f}" for i in best)
            click.echo(f"{item}: {ranked}")
        else:
            click.echo(f"{item}: {np.array2string(row, precision=4, max_line_width=120)}")


def main() -> None:
    sys.exit(invoke(run_command, prog_name="python -m edgekit.run"))


if __name__ == "__main__":
    main()
