"""``python -m edgekit.run SOURCE --input FILE ...``: predict on this device.

Device path: numpy, Pillow and one runtime library; never TensorFlow.
"""

from __future__ import annotations

import io
import json
import sys
from pathlib import Path

import click
import numpy as np

from .clitools import invoke


@click.command("run")
@click.argument("source")
@click.option("--input", "-i", "inputs", multiple=True, required=True, type=click.Path(path_type=Path),
              help="Image, .npy or .json array; repeat for a batch.")
@click.option("--target", "profile", default="auto", show_default=True,
              help="Device profile (see `edgekit targets`), or auto to detect this device.")
@click.option("--artifact", type=click.Choice(["tflite", "onnx", "coreml"]), default=None,
              help="Artifact to run. Default: the profile's first choice this device can run.")
@click.option("--backend", type=click.Choice(["litert", "onnxruntime", "coreml"]), default=None,
              help="Runtime to use. Default: the profile's first choice that is installed.")
@click.option("--threads", type=click.IntRange(min=1), default=None, help="Runtime threads (default: the profile's).")
@click.option("--top-k", type=click.IntRange(min=1), default=5, show_default=True,
              help="Labels to print per input when the package has labels.")
@click.option("--raw", is_flag=True, help="Return the artifact's native (int8) outputs, not dequantized floats.")
@click.option("--output", "-o", type=click.Path(path_type=Path), default=None,
              help="Write outputs to a .npy or .json file instead of printing them.")
@click.option("--cache-predictions", is_flag=True,
              help="Reuse outputs for inputs seen before (SQLite in the cache dir); prints hits/misses.")
@click.option("--refresh", is_flag=True, help="Fetch a URL source again even if it is cached.")
@click.option("--verbose", "-v", is_flag=True, help="Say which profile, artifact and runtime were chosen.")
def run_command(source: str, inputs: tuple[Path, ...], profile: str, artifact: str | None, backend: str | None,
                threads: int | None, top_k: int, raw: bool, output: Path | None, cache_predictions: bool,
                refresh: bool, verbose: bool) -> None:
    """Load SOURCE and predict on each --input.

    SOURCE: a NAME.edgekit directory, a NAME.ekpkg, an http(s):// or file:// URL to an .ekpkg
    (fetched once into the cache), or a plain .tflite/.onnx file (inputs as .npy/.json arrays).
    """
    from . import cache
    from .fsutil import write_bytes_atomic, write_text_atomic
    from .prediction_cache import PredictionCache
    from .runtime import load

    if refresh and "://" in source:
        cache.fetch(source, refresh=True)
    predictions = PredictionCache(sqlite_path=cache.cache_root() / "predictions.sqlite") if cache_predictions else None
    with load(source, artifact=artifact, backend=backend, threads=threads, profile=profile,
              prediction_cache=predictions) as model:
        if verbose:
            chosen = {"profile": model.profile.name, "artifact": model.artifact.target, **model.backend.describe()}
            click.echo("using " + ", ".join(f"{k}={v}" for k, v in chosen.items()), err=True)
        outputs = model.predict(list(inputs), raw=raw)
        labels = model.labels
        stats = predictions.stats() if predictions else None
    if stats:
        click.echo(f"prediction cache: {stats['hits']} hits, {stats['misses']} misses", err=True)
    if output is not None:
        if output.suffix == ".npy":
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
