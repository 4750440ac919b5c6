"""``python -m edgekit.run SOURCE --input FILE ...``: predict on this device.

Device path: numpy and one runtime library (Pillow only for images); never TensorFlow. The
command line uses argparse rather than click so a cold start costs little more than the
runtime library's own import. ``edgekit run`` forwards here.
"""

from __future__ import annotations

import argparse
import io
import json
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from .options import (ArgumentParser, HelpFormatter, add_load_options, between, number_list, positive_int,
                      refuse_mixed_modes, thread_counts)
from .tools import EXIT_STATUS_HELP, guarded, split_debug

PROG = "python -m edgekit.run"
MAX_RUNS = 10_000_000  # steady-state samples: a day of a 10 ms model; beyond it a typo, never a measurement


def parser(prog: str = PROG) -> argparse.ArgumentParser:
    p = ArgumentParser(
        prog=prog, formatter_class=HelpFormatter,
        description="Load SOURCE and predict on each --input. SOURCE: a NAME.edgekit directory, a NAME.ekpkg, "
        "an http(s):// or file:// URL to an .ekpkg (fetched once into the cache), or a plain .tflite/.onnx "
        "file (inputs as .npy/.json arrays).", epilog=EXIT_STATUS_HELP,
    )
    p.add_argument("source", help="package directory, .ekpkg, URL, .tflite or .onnx")
    p.add_argument("--input", "-i", dest="inputs", action="append", type=Path, metavar="FILE",
                   help="image, folder of images, .npy or .json array (uint8 (N, H, W, C) pixels are resized like "
                        "images); repeat for a batch (with --bench: the end-to-end input). "
                        "A model with several inputs: NAME=FILE per input, or .npz files with one array per input")
    add_load_options(p)
    p.add_argument("--stream", action="store_true",
                   help="run the frames of each input file in order (axis 0), feeding each call's state outputs "
                        "back into its state inputs (a VAD, a keyword spotter, a streaming encoder)")
    p.add_argument("--state", action="append", default=[], metavar="INPUT=OUTPUT",
                   help="with --stream: the output that carries state input INPUT to the next call (default: "
                        "found by name: state/stateN, h0/hn, state_in/state_out)")
    p.add_argument("--top-k", type=positive_int, default=5, help="labels to print per input (default 5)")
    p.add_argument("--raw", action="store_true", help="return the artifact's native (int8) outputs")
    p.add_argument("--output", "-o", type=Path, default=None, help="write outputs to .npy (one output), .npz (one array per output) or .json")
    p.add_argument("--cache-predictions", action="store_true",
                   help="reuse outputs for inputs seen before (SQLite in the cache dir); prints hits/misses")
    p.add_argument("--refresh", action="store_true", help="fetch a URL source again even if it is cached")
    p.add_argument("--verbose", "-v", action="store_true", help="say which profile, artifact and runtime were chosen")
    p.add_argument("--serve", action="store_true", help="serve SOURCE over KServe v2 instead of predicting")
    from .serve import add_server_options

    add_server_options(p)
    tuning = p.group("tuning (--tune)")
    tuning.add_argument("--tune", action="store_true",
                        help="measure every artifact x runtime x thread count this device runs (among those that "
                             "passed the package's gates) and remember the fastest for later loads; with --input, "
                             "--bench or --serve: only when no tuned choice holds yet, then carry on")
    tuning.add_argument("--tune-threads", type=thread_counts, default=None, metavar="1,2,4",
                        help="thread counts to try (default: 1, 2, 4, ... up to the cores)")
    tuning.add_argument("--tune-artifacts", type=lambda text: [t for t in text.split(",") if t], default=None,
                        metavar="onnx,onnx-float32", help="only consider these artifacts (default: every one)")
    tuning.add_argument("--tune-seconds", type=_non_negative_float, default=1.0,
                        help="measuring time per round of candidates, at least (default 1)")
    tuning.add_argument("--tune-report", type=Path, default=None,
                        help="also write the measurements as a benchmark report (edgekit compare reads it)")
    tuning.add_argument("--forget-tuned", action="store_true", help="remove the tuned choice for SOURCE and exit")
    _add_bench_options(p.group("benchmark (--bench)"))
    return p


def card_parser(prog: str = "edgekit card") -> ArgumentParser:
    """``edgekit card``'s own options: the benchmark's, with ``-o DIR`` for the cards; predicting,
    serving, tuning and streaming are not a card's and are not offered."""
    p = ArgumentParser(
        prog=prog, formatter_class=HelpFormatter,
        description="Benchmark SOURCE on this device and write a latency card per artifact into -o DIR (Markdown and "
        "JSON), the benchmark report beside them; --eval DATA adds accuracy measured on the device.",
        epilog=EXIT_STATUS_HELP)
    p.add_argument("source", help="package directory, .ekpkg, URL, .tflite or .onnx")
    p.add_argument("--input", "-i", dest="inputs", action="append", type=Path, metavar="FILE",
                   help="the end-to-end sample (image, .npy or .json array)")
    add_load_options(p)
    _add_bench_options(p.group("benchmark"), card=True)
    return p


def _add_bench_options(bench: Any, card: bool = False) -> None:
    """The benchmark's options; ``card``: as ``edgekit card`` takes them (``-o DIR`` names the card
    folder, the benchmark is implied)."""
    if card:
        bench.add_argument("--output", "-o", dest="card", type=Path, default=Path("."), metavar="DIR",
                           help="folder for the cards and the benchmark report (default: the current directory)")
    else:
        bench.add_argument("--bench", action="store_true", help="benchmark instead of predicting; writes a JSON report")
    bench.add_argument("--runs", type=between(1, MAX_RUNS, "for longer runs use --sustained DURATION"), default=100,
                       help=f"steady-state samples at least (default 100, at most {MAX_RUNS:,})")
    bench.add_argument("--warmup", type=_non_negative, default=10, help="warm-up runs (default 10)")
    bench.add_argument("--min-seconds", type=_non_negative_float, default=2.0,
                       help="keep measuring until this much time has passed too (default 2)")
    bench.add_argument("--batch", type=positive_int, default=1, help="batch size for throughput (default 1)")
    bench.add_argument("--sweep", action="store_true",
                       help="every artifact this device runs x --sweep-threads x --sweep-batch, interleaved")
    bench.add_argument("--sweep-threads", type=thread_counts, default=None, metavar="1,2,4",
                       help="thread counts for --sweep (default: the profile's)")
    bench.add_argument("--sweep-batch", type=_int_list, default=None, metavar="1,8", help="batch sizes for --sweep")
    bench.add_argument("--eval", default=None, metavar="DATA", help="measure accuracy on the device on this data")
    bench.add_argument("--report", type=Path, default=None,
                       help="report path (default: NAME.HOST.bench.json in the " + ("-o folder" if card else
                            "current directory (with --card: in its folder)") + "; the path is printed)")
    bench.add_argument("--csv", type=Path, default=None, help="also write the summary as CSV")
    bench.add_argument("--device-name", default=None, help="name for this device in reports (default: hostname)")
    bench.add_argument("--push", default=None, metavar="URL", help="POST the report to an edgekit server")
    bench.add_argument("--sustained", type=_duration, default=None, metavar="DURATION",
                       help="measure for this long (90s, 10m, 1h) in windows: latency over time, first vs last "
                            "minute p50 and a throttling verdict (replaces --runs/--min-seconds)")
    bench.add_argument("--window", type=_window, default=None, metavar="DURATION",
                       help="window length of a --sustained run, in seconds or with units like --sustained (2, 2s, "
                            "1m; default: about 60 windows, 0.5-30 s each); at most half the run")
    bench.add_argument("--fail-on-fallback", action="store_true",
                       help="exit 3 when a requested delegate or execution provider is not active or left ops to "
                            "the CPU (the report says which)")
    bench.add_argument("--no-launch", action="store_true",
                       help="skip timing a new process's load and first inference (empty, then warm caches)")
    if not card:
        bench.add_argument("--card", type=Path, default=None, metavar="DIR",
                           help="also write a latency card per artifact into DIR (Markdown and JSON; without "
                                "--artifact or --sweep: the artifact this device runs and its float fallback, for the "
                                "speed-up)")
    bench.add_argument("--store", action="store_true",
                       help="with --card: also store the cards in the package (cards/, listed in its manifest, one "
                            "per device and artifact); a signed package needs --sign KEY")
    bench.add_argument("--sign", type=Path, default=None, metavar="KEY",
                       help="with --store: sign the package again with this Ed25519 private key")
    bench.add_argument("--single-stream", action="store_true",
                       help="MLPerf's single-stream rule: at least 1024 queries and 60 s per configuration, the p90 "
                            "the headline (raises --runs and --min-seconds to them)")
    bench.add_argument("--cv-warn", type=_non_negative_float, default=0.05,
                       help="warn when the p50's 95%% confidence interval is wider than this fraction of the p50: "
                            "differences of that size cannot then be told apart (default 0.05)")


def _duration(text: str) -> float:
    from ..bench.sustained import parse_duration
    from ..errors import EdgekitError

    try:
        return parse_duration(text)
    except EdgekitError as exc:
        raise argparse.ArgumentTypeError(f"{exc.message}; {exc.hint}") from None


def _window(text: str) -> float:
    from ..bench.sustained import seconds_in
    from ..errors import EdgekitError

    try:
        return seconds_in(text, "--window")
    except EdgekitError as exc:
        raise argparse.ArgumentTypeError(f"{exc.message}; {exc.hint}") from None


def _non_negative(text: str) -> int:
    value = int(text)
    if value < 0:
        raise argparse.ArgumentTypeError("must not be negative")
    return value


def _non_negative_float(text: str) -> float:
    import math

    value = float(text)
    if not math.isfinite(value):  # nan compares false with everything: it would switch the option off
        raise argparse.ArgumentTypeError(f"must be a finite number, got {text}")
    if value < 0:
        raise argparse.ArgumentTypeError(f"must not be negative, got {text}")
    return value


_int_list = number_list(int, "integers", minimum=1)


def execute(args: argparse.Namespace) -> int:
    from ..machine import cache
    from ..device.prediction_cache import PredictionCache
    from ..device.runtime import load

    if args.output is not None:
        from ..fsutil import ensure_writable

        ensure_writable(args.output, "--output file")
    named = _named_inputs(args.inputs)
    missing = [str(path) for _, path in named if not path.exists()]
    if missing:  # before loading the model: a typo should not cost a model load
        from ..errors import InputError

        raise InputError(f"input file(s) not found: {', '.join(missing)}", hint="check the --input paths")
    if args.refresh and "://" in args.source:
        cache.fetch(args.source, refresh=True)
    predictions = None
    if args.cache_predictions:
        predictions = PredictionCache(sqlite_path=cache.cache_root() / "predictions.sqlite")
    with load(args.source, artifact=args.artifact, backend=args.backend, threads=args.threads,
              profile=args.profile, prediction_cache=predictions, require_signature=args.require_signature,
              trusted_keys=args.trusted_keys, warmup=False) as model:  # one prediction: a warm-up run is waste
        if args.verbose:
            chosen = {"profile": model.profile.name, "artifact": model.artifact.key, **model.backend.describe()}
            print("using " + ", ".join(f"{k}={v}" for k, v in chosen.items()), file=sys.stderr)
        names, rows = (stream_rows(model, named, args.state) if args.stream
                       else predict_rows(model, named, args.raw))
        labels, output_names = model.labels, model.output_names
        classes = _argmax_outputs(model.manifest.validation.kinds) if not labels and not args.raw else set()
        stats = predictions.stats() if predictions else None
    if stats:
        print(f"prediction cache: {stats['hits']} hits, {stats['misses']} misses", file=sys.stderr)
    if args.output is not None:
        write_outputs(args.output, names, rows, output_names)
        print(f"wrote {len(rows)} output rows ({', '.join(names[:3])}{', ...' if len(names) > 3 else ''}) to "
              f"{args.output}", file=sys.stderr)
        return 0
    print("\n".join(format_rows(names, rows, labels, args.top_k, args.raw, classes)))
    return 0


def _named_inputs(inputs: list[Path]) -> list[tuple[str | None, Path]]:
    """``-i FILE`` or ``-i NAME=FILE`` (one input of a model with several, by name)."""
    named: list[tuple[str | None, Path]] = []
    for item in inputs:
        text = str(item)
        name, sep, rest = text.partition("=")
        if sep and name and "/" not in name and not item.exists():
            named.append((name, Path(rest)))
        else:
            named.append((None, item))
    return named


def predict_rows(model: Any, named: list[tuple[str | None, Path]], raw: bool) -> tuple[list[str], list[dict]]:
    """One row per sample: its name (``FILE`` or ``FILE[i]``) and every output, by name.

    A one-input model takes each ``-i`` on its own (a .npy may hold many samples; images may
    differ in size). A model with several inputs takes ``-i NAME=FILE`` for each input (one set),
    or ``-i FILE.npz`` holding one array per input name (each file a set).
    """
    from ..errors import InputError

    sets: list[tuple[str, Any]] = []
    if len(model.input_names) == 1:
        given = {name for name, _ in named if name is not None}
        if given - set(model.input_names):  # a NAME= that is not this input: never fed to it as more samples
            model.check_input_names({name: None for name in given | set(model.input_names)})
        from ..data.preprocessing import image_files

        files = [file for _, path in named for file in (image_files(path) if path.is_dir() else [path])]
        sets = [(str(path), _one_input_npz(path, model.input_names[0]) if path.suffix == ".npz" else str(path))
                for path in files]  # a folder: each of its files, named
    elif named and all(name is not None for name, _ in named):
        sets = [(" ".join(f"{n}={p}" for n, p in named), {n: str(p) for n, p in named})]
    else:
        for name, path in named:
            if name is not None or path.suffix != ".npz":
                raise InputError(f"this model has inputs {model.input_names}: pass -i NAME=FILE for each, "
                                 "or .npz files with one array per input name", hint="e.g. -i tokens=ids.npy -i mask=m.npy")
            arrays = read_npz(path)  # "y" and "labels" beside the inputs: --eval's layout
            sets.append((str(path), {k: v for k, v in arrays.items() if k not in ("y", "labels") or k in model.input_names}))
    names: list[str] = []
    rows: list[dict] = []
    for label, value in sets:
        outputs = model.predict_all(value, raw=raw)
        count = len(next(iter(outputs.values())))
        names += [label] if count == 1 else [f"{label}[{i}]" for i in range(count)]
        rows += [{k: v[i] for k, v in outputs.items()} for i in range(count)]
    return names, rows


def stream_rows(model: Any, named: list[tuple[str | None, Path]], specs: list[str]) -> tuple[list[str], list[dict]]:
    """``--stream``: the frames of the input files (``-i FILE.npz`` by input name, or ``-i NAME=FILE``)
    in order, state carried from each call to the next; one row per frame."""
    from ..device.streaming import find_pairs, parse_pairs

    frames: dict[str, Any] = {}
    for name, path in named:
        if name is None and path.suffix == ".npz":
            frames.update(read_npz(path))
        else:
            from ..data.preprocessing import read_array_file

            frames[name or model.input_names[0]] = read_array_file(path)
    pairs = (parse_pairs(specs, model.input_names, model.output_names) if specs
             else find_pairs(model.input_names, model.output_names))
    given = {k: v for k, v in frames.items() if k in pairs}  # a state in the file: its starting value
    stream = model.stream(pairs or None, initial=given or None)
    data = {k: v for k, v in frames.items() if k in stream.frame_inputs}
    outputs = stream.run(data)
    total = len(next(iter(outputs.values())))
    return [f"frame {i}" for i in range(total)], [{k: v[i] for k, v in outputs.items()} for i in range(total)]


def _one_input_npz(path: Path, name: str) -> Any:
    """The array of a one-input model's ``.npz``: the one named after the input, ``x`` (the layout
    ``--eval`` and ``--calibration`` take, ``y`` holding labels and ``labels`` the class names), or
    its only array."""
    from ..errors import InputError

    arrays = read_npz(path)
    if name in arrays:
        return arrays[name]
    if "x" in arrays and set(arrays) <= {"x", "y", "labels"}:
        return arrays["x"]
    if len(arrays) == 1:
        return next(iter(arrays.values()))
    raise InputError(f"{path} holds arrays {list(arrays)}, none named after the model's input {name!r}",
                     hint=f"name the array {name!r}, or pass it as a .npy file")


def read_npz(path: Path) -> dict[str, Any]:
    """Every array of an input ``.npz``, with one clear error for every way it can be bad."""
    import zipfile

    import numpy as np

    from ..data.preprocessing import array_file_problem
    from ..errors import InputError

    try:
        with np.load(path, allow_pickle=False) as arrays:
            return {k: arrays[k] for k in arrays.files}
    except (ValueError, OSError, EOFError, KeyError, zipfile.BadZipFile) as exc:
        raise InputError(f"input {path} is not a readable .npz archive ({array_file_problem(exc)})",
                         hint="save numbers (no objects) with numpy.savez(path, NAME=array)") from None


def write_outputs(path: Path, names: list[str], rows: list[dict], output_names: list[str]) -> None:
    """``.npy`` (one output), ``.npz`` (one array per output), or ``.json`` (rows named per sample)."""
    import numpy as np

    from ..errors import InputError
    from ..fsutil import write_bytes_atomic, write_text_atomic

    def stacked(name: str) -> Any:
        if len({row[name].shape for row in rows}) != 1:
            raise InputError(f"output {name!r} differs in shape between inputs and cannot be stacked",
                             hint="write --output FILE.json instead")
        return np.stack([row[name] for row in rows])

    suffix = path.suffix.lower()
    if suffix == ".npy":
        if len(output_names) != 1:
            raise InputError(f"the model has {len(output_names)} outputs ({', '.join(output_names)}); "
                             ".npy holds one array", hint="write --output FILE.npz (one array per output) or .json")
        buffer = io.BytesIO()
        np.save(buffer, stacked(output_names[0]))
        write_bytes_atomic(path, buffer.getvalue())
    elif suffix == ".npz":
        buffer = io.BytesIO()
        np.savez(buffer, **{name: stacked(name) for name in output_names})
        write_bytes_atomic(path, buffer.getvalue())
    elif len(output_names) == 1:  # JSON, as before: one list per sample
        write_text_atomic(path, json.dumps([row[output_names[0]].tolist() for row in rows]) + "\n")
    else:
        document = [{"input": n, "outputs": {k: v.tolist() for k, v in row.items()}} for n, row in zip(names, rows)]
        write_text_atomic(path, json.dumps(document) + "\n")


def _argmax_outputs(kinds: Any) -> set[str]:
    """The outputs whose kind decides by argmax (class scores), as the package recorded them; the
    kinds registry is imported only here, for a package without labels."""
    from ..kinds import OutputKind, argmax_decides

    found = set()
    for name, recorded in kinds.items():
        try:
            if argmax_decides(OutputKind.from_dict(dict(recorded))):
                found.add(name)
        except (TypeError, ValueError):  # a kind written by another version: print the values
            continue
    return found


def format_rows(names: list[str], rows: list[dict], labels: list[str] | None, top_k: int, raw: bool,
                classes: set[str] = frozenset()) -> list[str]:
    """One line per input: the top ``top_k`` classes of a labelled output, or of an unlabelled one
    the package judged as class scores (``classes``: their output names), by index; else the values."""
    import numpy as np

    lines = []
    for item, row in zip(names, rows):
        if len(row) == 1:
            name, value = next(iter(row.items()))
            if labels and value.ndim == 1 and not raw:
                best = np.argsort(value)[::-1][:top_k]
                lines.append(f"{item}: " + ", ".join(f"{labels[i]} {value[i]:.3f}" for i in best))
            elif name in classes and value.ndim == 1 and value.size > 1 and not raw:
                best = np.argsort(value)[::-1][:top_k]
                lines.append(f"{item}: " + ", ".join(f"class {i} {value[i]:.3f}" for i in best))
            else:
                lines.append(f"{item}: {np.array2string(value, precision=4, max_line_width=120)}")
            continue
        lines.append(f"{item}:")
        lines += [f"  {name}: {np.array2string(value, precision=4, max_line_width=120, threshold=64)}"
                  for name, value in row.items()]
    return lines


def main(argv: Sequence[str] | None = None, prog: str = PROG) -> int:
    args_list, debug = split_debug(argv)
    cli = parser(prog)
    args = cli.parse_args(args_list)
    verbose = bool(getattr(args, "verbose", False))  # INFO diagnostics and the runtimes' own load messages
    refuse_mixed_modes(cli, args, _modes(cli))
    if args.forget_tuned or (args.tune and not (args.inputs or args.bench or args.serve)):
        return guarded(lambda: tune_command(args), debug, verbose)
    if args.tune:
        code = guarded(lambda: tune_command(args, only_if_untuned=True), debug, verbose)
        if code:
            return code
    if args.serve:
        return guarded(lambda: _serve(args), debug, verbose)
    if not args.bench and not args.inputs:
        cli.error("the following arguments are required: --input/-i (or pass --bench or --serve)")
    if args.bench and args.inputs and len(args.inputs) > 1:
        cli.error("--bench takes at most one --input (the end-to-end sample)")
    if args.window is not None and args.sustained is None:
        cli.error("--window sets the windows of a --sustained run: pass --sustained DURATION too")
    if args.window is not None and args.window > args.sustained / 2:
        cli.error(f"--window {args.window:g} s is longer than half the --sustained run ({args.sustained:g} s): a run "
                  "needs at least two windows to show a trend; give a shorter --window")
    return guarded(lambda: run_bench(args) if args.bench else execute(args), debug, verbose)


def _modes(cli: ArgumentParser) -> dict[str, list[str]]:
    """Which options each mode reads alone (the group titles are where they are declared)."""
    groups = cli.groups
    return {
        "predict": ["top_k", "raw", "output"],
        "--bench": [d for d in groups["benchmark (--bench)"] if d not in ("bench", "inputs")],
        "--serve": [d for d in groups["server (--serve)"]],
    }


def _serve(args: argparse.Namespace) -> int:
    from .serve import options_from

    options = options_from(args)  # names the server extra if it is missing
    from ..server.launch import serve

    serve([args.source], args.host, args.port, options, args.artifact, args.backend, args.threads,
          args.profile, args.require_signature, args.trusted_keys)
    return 0


def tune_command(args: argparse.Namespace, only_if_untuned: bool = False) -> int:
    """``--tune`` / ``edgekit tune``: measure, decide, remember, and print what was decided."""
    from ..bench.tune import print_tuning, resolve_package, tune, tuned_for
    from ..device.tuned import forget

    root, manifest = resolve_package(args.source)
    if args.forget_tuned:
        print(f"{'removed' if forget(root) else 'there was no'} tuned choice for {manifest.name}", file=sys.stderr)
        return 0
    if only_if_untuned and tuned_for(root, manifest, args.profile) is not None:
        return 0
    report = tune(str(root), min_seconds=args.tune_seconds, threads=args.tune_threads, profile=args.profile,
                  artifacts=args.tune_artifacts)
    print_tuning(report)
    if args.tune_report is not None:
        from ..bench.report import write_report

        print(f"wrote {write_report(report, args.tune_report)}", file=sys.stderr)
    return 0


def run_bench(args: argparse.Namespace) -> int:
    from ..bench.cli import run_bench as bench_main

    return bench_main(args)


if __name__ == "__main__":
    sys.exit(main())
