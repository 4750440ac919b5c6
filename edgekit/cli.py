"""The ``edgekit`` command line: ``package`` (build side) and ``run`` (device side)."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import click

from . import __version__
from .clitools import float_list, invoke


@click.group(context_settings={"help_option_names": ["-h", "--help"], "max_content_width": 100})
@click.version_option(__version__, prog_name="edgekit")
@click.option("--debug", is_flag=True, help="Show full tracebacks (also EDGEKIT_DEBUG=1).")
def cli(debug: bool) -> None:
    """Package trained models as calibrated INT8 artifacts and run them on edge devices.

    \b
    edgekit package model.keras --format tflite --calibration data/ -o dist/
    edgekit run dist/model.edgekit --input cat.jpg
    """


def _format_names() -> list[str]:
    from .formats import FORMATS

    return list(FORMATS) + ["all"]


def _resize(text: str | None) -> list[int] | None:
    if text is None:
        return None
    try:
        height, width = (int(v) for v in text.lower().split("x"))
    except ValueError:
        raise click.BadParameter(f"expected HEIGHTxWIDTH such as 224x224, got {text!r}") from None
    return [height, width]


def _input_shapes(values: tuple[str, ...]) -> dict[str, list[int]]:
    shapes = {}
    for text in values:
        name, sep, dims = text.partition("=")
        try:
            shape = [int(d) for d in dims.lower().split("x")]
        except ValueError:
            shape = []
        if not sep or not name or not shape or any(d < 1 for d in shape):
            raise click.BadParameter(f"expected NAME=DxDxD such as images=1x3x320x320, got {text!r}",
                                     param_hint="--input-shape")
        shapes[name] = shape
    return shapes


def _fixed_inputs(values: tuple[str, ...]) -> dict[str, dict[str, object]]:
    """``--input NAME=VALUE``, each value read and checked before any model loads."""
    from .sources.fixed_inputs import parse_value

    fixed: dict[str, dict[str, object]] = {}
    for text in values:
        name, sep, value = text.partition("=")
        if not sep or not name or not value:
            raise click.BadParameter(f"expected NAME=VALUE such as sample_rate=16000 or h0=state.npy, got {text!r}",
                                     param_hint="--input")
        if name in fixed:
            raise click.BadParameter(f"{name!r} is given twice", param_hint="--input")
        fixed[name] = parse_value(name, value)
    return fixed


def _output_kinds(values: tuple[str, ...]) -> dict[str, str]:
    """``OUTPUT=KIND`` or a bare ``KIND`` (the model's only output), checked before any model loads."""
    from .errors import EdgekitError
    from .quantize.tasks import parse_kind

    kinds: dict[str, str] = {}
    for text in values:
        name, sep, kind = text.rpartition("=")
        try:
            parse_kind(kind)
        except EdgekitError as exc:
            raise click.BadParameter(f"{exc.message}; {exc.hint}", param_hint="--output-kind") from None
        if name in kinds:
            raise click.BadParameter(f"output {name or '(the only one)'} is given two kinds", param_hint="--output-kind")
        kinds[name] = kind
    return kinds


def format_build_options(command: Any) -> Any:
    """Each registered format's own build options (``Format.options``) as flags of `edgekit package`."""
    from .formats import build_options

    for _, option in reversed(build_options()):
        kwargs: dict[str, Any] = {"help": option.help, "default": option.default}
        if option.kind is bool:
            kwargs["is_flag"] = True
        elif option.choices:
            kwargs.update(type=click.Choice(list(option.choices)), show_default=True)
        elif option.kind is int:
            kwargs.update(type=click.IntRange(min=option.minimum), metavar=option.metavar or "N")
        command = click.option(option.flag, option.name, **kwargs)(command)
    return command


@cli.command("package")
@click.argument("model", type=click.Path(path_type=Path))
@click.option("--format", "--target", "-f", "-t", "formats", multiple=True, default=("tflite",), show_default=True,
              type=click.Choice(_format_names()),
              help="Output format; repeat for several, or 'all'. (--target is its former name.)")
@click.option("--calibration", "-c", required=True, metavar="DATA",
              help="Representative data: image folder (class sub-folders give labels), .npy/.npz (x, y), "
                   "or module:function / file.py:function returning arrays.")
@click.option("--eval", "eval_data", metavar="DATA", default=None,
              help="Held-out data to validate on (same forms). Default: hold out 20% of --calibration.")
@click.option("--samples", type=int, default=300, show_default=True, help="Calibration samples to use (seeded choice).")
@click.option("--eval-samples", type=click.IntRange(min=1), default=None, help="Validate on at most this many samples.")
@click.option("--seed", type=int, default=0, show_default=True, help="Seed for sample selection.")
@click.option("--max-accuracy-drop", type=click.FloatRange(min=0), default=1.0, show_default=True, metavar="PP",
              help="Largest INT8 accuracy drop (percentage points) before packaging fails.")
@click.option("--allow-accuracy-drop", is_flag=True,
              help="Keep the package even if a validation gate fails (recorded as failed in the manifest).")
@click.option("--min-sqnr", "min_sqnr_db", type=float, default=20.0, show_default=True, metavar="DB",
              help="SQNR floor for every values output, and for each quantity joined into one output.")
@click.option("--output-kind", "output_kinds", multiple=True, metavar="[OUTPUT=]KIND",
              help="Judge an output by this task instead of the kind inferred from the graph and values (printed "
                   "before building): classes, bins, segmentation, detections:yolo[:THRESHOLD], "
                   "detections:yolov5[:THRESHOLD], embedding or values (repeatable).")
@click.option("--metric", default=None, metavar="MODULE:FUNCTION",
              help="Your metric: called with (float_outputs, int8_outputs, labels), returns named numbers and "
                   "optionally passed=True/False, which then decides the gate.")
@click.option("--auto-fix", is_flag=True,
              help="When a gate fails, rebuild with the fixes it names (--keep-float, --reduce-range, percentile "
                   "calibration), keep what helps, record it.")
@click.option("--allow-float-ops", is_flag=True,
              help="Keep ops that cannot be INT8 in float (recorded in the manifest) instead of failing.")
@click.option("--also-float/--no-also-float", "also_float", default=None,
              help="Also package a validated float artifact per format (float16 TFLite and CoreML, float32 ONNX) "
                   "for devices where INT8 is slower; `edgekit tune` measures which is faster. "
                   "Default: on for models up to 50 MB.")
@click.option("--name", default=None, help="Package name. Default: the model file's name.")
@click.option("--output", "-o", "output_dir", required=True, type=click.Path(path_type=Path),
              help="Directory that receives NAME.edgekit/ (and NAME.ekpkg with --archive).")
@click.option("--force", is_flag=True, help="Replace an existing package of the same name.")
@click.option("--archive", is_flag=True, help="Also write the package as one NAME.ekpkg zip.")
@click.option("--labels", "labels_file", type=click.Path(path_type=Path), default=None,
              help="Text file with one class label per line, in the model's output order; class folders of an "
                   "image folder are numbered by these labels (by name), not alphabetically.")
@click.option("--scale", type=float, default=None, help="Preprocessing: multiply raw values (e.g. 0.00392157 = 1/255).")
@click.option("--mean", default=None, metavar="M[,M,M]", help="Preprocessing: subtract after scaling, per channel.")
@click.option("--std", default=None, metavar="S[,S,S]", help="Preprocessing: divide after subtracting, per channel.")
@click.option("--color-order", type=click.Choice(["RGB", "BGR", "L"], case_sensitive=False), default=None,
              help="Preprocessing: channel order images are fed in.")
@click.option("--resize", default=None, metavar="HxW", help="Preprocessing: resize images (default: the model's input).")
@click.option("--preprocessing", "preset", type=click.Choice(["0..1", "-1..1", "imagenet", "raw"]), default=None,
              help="Preprocessing preset for 0..255 pixels: 0..1 (x/255), -1..1 (x/127.5-1), imagenet (mean/std), "
                   "raw; --scale/--mean/--std override its fields.")
@click.option("--input-shape", "input_shapes", multiple=True, metavar="NAME=DxDxD",
              help="Fix an input's dynamic dimensions, e.g. images=1x3x320x320 (repeatable).")
@click.option("--profile", "profiles", multiple=True, metavar="PROFILE",
              help="Device profile the package is for (repeatable; see `edgekit profiles`): decides which ONNX "
                   "INT8 schemes are built beside S8S8 (onnx, for ARM and TensorRT): U8S8 for x86 with VNNI "
                   "(onnx-u8s8), U8S8 with 7-bit weights for x86 without (onnx-u8s7). Default: every known profile.")
@click.option("--input", "fixed_inputs", multiple=True, metavar="NAME=VALUE",
              help="Fix a model input that is not a batch of samples (a scalar sample rate, a recurrent state of "
                   "zeros) to a number or a .npy tensor; it is folded into every artifact as a constant and "
                   "recorded in the manifest (repeatable; ONNX and PyTorch sources).")
@click.option("--timeout", type=click.FloatRange(min=1), default=None,
              help="Seconds allowed per step run in a child process: loading the model (a file.py:factory "
                   "included), the float reference, each conversion (default 1800).")
@click.option("--allow-partial", is_flag=True,
              help="With several targets: exit 0 even if some fail (the package records what failed and why).")
@click.option("--keep-float", "keep_float", multiple=True, metavar="LAYER",
              help="Keep this layer in float (repeatable; recorded in the manifest). See --explain for candidates. "
                   "Read by the TFLite route from Keras/SavedModel and by ONNX; CoreML and TFLite from "
                   "ONNX/PyTorch sources ignore it for now.")
@click.option("--explain", is_flag=True, help="Report per-layer quantization error (worst layers by SQNR).")
@click.option("--sign", "sign_key", type=click.Path(path_type=Path), default=None, metavar="KEY",
              help="Sign manifest.json with this Ed25519 key (edgekit keys generate).")
@format_build_options
def package_command(model: Path, formats: tuple[str, ...], calibration: str, eval_data: str | None, samples: int,
                    eval_samples: int | None, seed: int, max_accuracy_drop: float, allow_accuracy_drop: bool,
                    min_sqnr_db: float, output_kinds: tuple[str, ...], metric: str | None, auto_fix: bool,
                    allow_float_ops: bool, name: str | None, output_dir: Path, force: bool, archive: bool,
                    labels_file: Path | None, scale: float | None, mean: str | None, std: str | None,
                    color_order: str | None, resize: str | None, timeout: float | None, allow_partial: bool,
                    keep_float: tuple[str, ...], explain: bool, sign_key: Path | None, preset: str | None,
                    input_shapes: tuple[str, ...], fixed_inputs: tuple[str, ...], profiles: tuple[str, ...],
                    also_float: bool | None,
                    **format_values: object) -> None:
    """Convert MODEL into a validated INT8 package for every --format.

    MODEL: Keras .keras/.h5, a TF SavedModel directory, .onnx, or PyTorch (.pt2 from torch.export,
    a TorchScript .pt, or file.py:factory returning an nn.Module); each reaches tflite, onnx and
    coreml (routes: docs/formats.md).

    Every artifact is calibrated on --calibration, then checked against the float model on
    held-out data; the measured accuracy, top-1 agreement, cosine similarity and SQNR are
    printed and recorded in the package's manifest.json.
    """
    from .build import PackageOptions, build_package, partial_error
    from .formats import expand_formats
    from .progress import Progress
    from .validation_table import render, render_explanations

    options = PackageOptions(
        model=str(model), calibration=calibration, output_dir=str(output_dir), formats=expand_formats(list(formats)),
        eval=eval_data,
        name=name, samples=samples, eval_samples=eval_samples, seed=seed, max_accuracy_drop=max_accuracy_drop,
        allow_accuracy_drop=allow_accuracy_drop, allow_float_ops=allow_float_ops, force=force, archive=archive,
        min_sqnr_db=min_sqnr_db, output_kinds=_output_kinds(output_kinds), metric=metric, auto_fix=auto_fix,
        labels_file=str(labels_file) if labels_file else None, timeout_s=timeout, allow_partial=allow_partial,
        keep_float=list(keep_float), explain=explain, sign_key=str(sign_key) if sign_key else None,
        format_options=dict(format_values), input_shapes=_input_shapes(input_shapes), also_float=also_float,
        fixed_inputs=_fixed_inputs(fixed_inputs), profiles=list(profiles) or None,
        preprocessing={"scale": scale, "mean": float_list(mean), "std": float_list(std),
                       "color_order": color_order.upper() if color_order else None, "resize": _resize(resize),
                       "preset": preset},
    )
    result = build_package(options, Progress())
    render(result.manifest)
    if explain:
        render_explanations(result.manifest)
    for artifact in result.manifest.artifacts:
        for companion, reason in (artifact.details.get("companions_failed") or {}).items():
            click.echo(f"warning: {artifact.key}: {companion} was not written ({reason}); the artifact itself "
                       "passed and is in the package", err=True)
        reason = str(artifact.details.get("activations_reason") or "")
        if artifact.details.get("activations") == "float16" and not reason.startswith("--coreml-activations"):
            click.echo(f"note: {artifact.key}: {reason}")  # weights-only INT8, and why: said, not only recorded
        graph = artifact.details.get("runtime_graph") or {}
        if graph.get("float_ops") and (graph.get("int8_fraction") or 0) < 0.5:  # "INT8" that mostly runs in float
            kinds = ", ".join(f"{op} x{n}" for op, n in sorted(graph["float_op_types"].items(), key=lambda i: -i[1])[:4])
            click.echo(f"note: {artifact.key}: after ONNX Runtime's graph optimization on this CPU ({graph['cpu']}), "
                       f"{graph['float_ops']} of {graph['float_ops'] + graph['int8_ops']} compute ops run in float "
                       f"({kinds}); `edgekit tune` on the device measures whether it beats float there")
        tail = [op for op in artifact.float_ops if op.get("tail")]
        inner = [op for op in artifact.float_ops if not op.get("tail")]
        if inner:
            ops = ", ".join(sorted({f"{op['op']} ({op['layer']})" for op in inner}))
            click.echo(f"note: {artifact.key} keeps these ops in float: {ops}")
        if tail:
            ops = ", ".join(sorted({f"{op['op']} ({op['layer']})" for op in tail}))
            click.echo(f"note: {artifact.key} computes its output tail in float after the last INT8 op: {ops} "
                       "(as ONNX Runtime and CoreML run it; the label says int8+float tail)")
    click.echo(f"package: {result.path}")
    if result.archive:
        click.echo(f"archive: {result.archive}")
    if not result.manifest.validation.get("passed", True):
        click.echo("warning: validation failed (see above); the package was kept because of --allow-accuracy-drop "
                   "and its manifest says passed: false", err=True)
    if result.failed and not allow_partial:
        raise partial_error(result)


@cli.command("run", add_help_option=False,
             context_settings={"ignore_unknown_options": True, "allow_extra_args": True})
@click.argument("args", nargs=-1, type=click.UNPROCESSED)
def run_command(args: tuple[str, ...]) -> int:
    """Predict on this device: same as `python -m edgekit.run` (see `edgekit run --help`)."""
    from .run import main as run_main

    return run_main(list(args), prog="edgekit run")


@cli.command("bench", add_help_option=False,
             context_settings={"ignore_unknown_options": True, "allow_extra_args": True})
@click.argument("args", nargs=-1, type=click.UNPROCESSED)
def bench_command(args: tuple[str, ...]) -> int:
    """Benchmark on this device: same as `python -m edgekit.run SOURCE --bench` (see `edgekit bench --help`)."""
    from .run import main as run_main

    return run_main([*args, "--bench"], prog="edgekit bench")


@cli.command("tune", add_help_option=False,
             context_settings={"ignore_unknown_options": True, "allow_extra_args": True})
@click.argument("args", nargs=-1, type=click.UNPROCESSED)
def tune_command(args: tuple[str, ...]) -> int:
    """Measure which artifact, runtime and thread count is fastest here and remember it (see `edgekit tune --help`)."""
    from .run import main as run_main

    return run_main([*args, "--tune"], prog="edgekit tune")


@cli.command("serve", add_help_option=False,
             context_settings={"ignore_unknown_options": True, "allow_extra_args": True})
@click.argument("args", nargs=-1, type=click.UNPROCESSED)
def serve_command(args: tuple[str, ...]) -> int:
    """Serve packages over KServe v2 with dynamic batching (see `edgekit serve --help`)."""
    from .server.cli import main as serve_main

    return serve_main(list(args))


@cli.command("compare")
@click.argument("reports", nargs=-1, required=True)
@click.option("--baseline", default=None, help="Report file name (without .json) or device name to compare against. "
              "Default: the first report.")
@click.option("--html", "html_path", type=click.Path(path_type=Path), default=None,
              help="Write a self-contained HTML report with charts.")
@click.option("--markdown", is_flag=True, help="Print the table as Markdown.")
@click.option("--csv", "csv_path", type=click.Path(path_type=Path), default=None, help="Write the summary as CSV.")
@click.option("--margin", type=click.FloatRange(min=0), default=5.0, show_default=True, metavar="PCT",
              help="Equivalence margin: a difference is stated only when it is significant (bootstrap 95% CI of "
                   "the ratio of medians, from the raw samples) and larger than PCT percent.")
@click.option("--fail-on-regression", type=click.FloatRange(min=0), default=None, metavar="PCT",
              help="Exit 1 if any configuration is significantly slower than the baseline by more than PCT percent "
                   "(PCT is then the margin).")
@click.option("--strict", is_flag=True, help="Fail on files that are not readable reports instead of skipping them.")
@click.option("--allow-different-models", is_flag=True, help="Compare reports of different models.")
def compare_command(reports: tuple[str, ...], baseline: str | None, html_path: Path | None, markdown: bool,
                    csv_path: Path | None, margin: float, fail_on_regression: float | None, strict: bool,
                    allow_different_models: bool) -> int:
    """Compare benchmark REPORTS (files or folders of them) across devices, formats and precisions."""
    from rich.console import Console
    from rich.table import Table

    from .bench.compare import HEADERS, compare, matrix, matrix_cell, table_rows
    from .bench.compare import markdown as to_markdown
    from .fsutil import write_text_atomic

    from .fsutil import ensure_writable

    for path, what in ((html_path, "HTML report"), (csv_path, "CSV")):
        if path is not None:
            ensure_writable(path, what)
    threshold = margin if fail_on_regression is None else fail_on_regression
    comparison = compare(list(reports), baseline, threshold, strict, allow_different_models)
    for skipped in comparison.skipped:
        click.echo(f"warning: skipped {skipped}", err=True)
    if markdown:
        click.echo(to_markdown(comparison), nl=False)
    else:
        console = Console(width=None if Console().is_terminal else 160)
        table = Table(title=f"baseline: {comparison.baseline}", title_justify="left")
        for header in HEADERS:
            table.add_column(header, justify="left" if header in ("device", "artifact", "backend", "precision") else "right")
        for cells in table_rows(comparison):
            table.add_row(*cells)
        console.print(table)
        grid = matrix(comparison)
        if len(grid.devices) > 1:
            across = Table(title="p50 per configuration and device (speedup vs baseline)", title_justify="left")
            across.add_column("configuration")
            for device in grid.devices:
                across.add_column(device, justify="right")
            for config in grid.configs:
                across.add_row(config, *(matrix_cell(comparison, grid.cells.get((config, d))) for d in grid.devices))
            console.print(across)
    if csv_path:
        from .bench.report import read_report, to_csv
        from .bench.compare import gather

        found, _ = gather(list(reports), strict)
        write_text_atomic(csv_path, to_csv([r for _, r in found]))
        click.echo(f"csv: {csv_path}")
    if html_path:
        from .bench.html import render as render_html

        write_text_atomic(html_path, render_html(comparison))
        click.echo(f"html: {html_path}")
    if fail_on_regression is not None and comparison.regressions:
        for row in comparison.regressions:
            v = row.verdict
            click.echo(f"REGRESSION: {row.label} is {100 * (v['ratio'] - 1):.1f}% slower than {v['baseline']} "
                       f"(95% CI {100 * (v['ci_low'] - 1):.1f}% to {100 * (v['ci_high'] - 1):.1f}%)", err=True)
        return 1
    return 0


@cli.group("keys")
def keys_group() -> None:
    """Signing keys for packages (Ed25519)."""


@keys_group.command("generate")
@click.argument("key", type=click.Path(path_type=Path))
@click.option("--force", is_flag=True, help="Overwrite an existing key.")
def keys_generate(key: Path, force: bool) -> None:
    """Write a private KEY (mode 0600) and its public KEY.pub (give KEY.pub to devices)."""
    from .signing import generate_keys

    private, public, kid = generate_keys(key, force)
    click.echo(f"private key: {private}\npublic key:  {public}\nkey id: {kid}")


@cli.command("sign")
@click.argument("package", type=click.Path(path_type=Path))
@click.option("--key", required=True, type=click.Path(path_type=Path), help="Ed25519 private key.")
def sign_command(package: Path, key: Path) -> None:
    """Sign PACKAGE (a NAME.edgekit directory or NAME.ekpkg) with KEY."""
    from .package_io import sign_package

    click.echo(f"signed {package} with key {sign_package(package, key)}")


@cli.command("verify")
@click.argument("package")
@click.option("--trusted-keys", type=click.Path(path_type=Path), default=None,
              help="Folder of trusted KEY.pub files (default: accept any valid signature).")
@click.option("--allow-unsigned", is_flag=True, help="Check the artifacts of an unsigned package.")
def verify_command(package: str, trusted_keys: Path | None, allow_unsigned: bool) -> None:
    """Check PACKAGE's signature and every artifact's sha256 against its manifest."""
    from .package_io import verify_package

    for line in verify_package(package, str(trusted_keys) if trusted_keys else None, allow_unsigned):
        click.echo(line)


@cli.group("export")
def export_group() -> None:
    """Hand a package to other serving systems."""


@export_group.command("triton")
@click.argument("package")
@click.option("--output", "-o", required=True, type=click.Path(path_type=Path), help="Triton model repository directory.")
@click.option("--max-batch-size", type=click.IntRange(min=1), default=8, show_default=True)
@click.option("--max-queue-delay-us", type=click.IntRange(min=0), default=500, show_default=True)
@click.option("--instances", type=click.IntRange(min=1), default=1, show_default=True, help="Model instances.")
@click.option("--gpu", is_flag=True, help="KIND_GPU instances with the TensorRT accelerator (INT8).")
@click.option("--kserve", "kserve_uri", default=None, metavar="STORAGE_URI",
              help="Also write a KServe InferenceService manifest serving the repository from STORAGE_URI.")
@click.option("--backend", type=click.Choice(["onnxruntime", "python"]), default="onnxruntime", show_default=True,
              help="onnxruntime: Triton runs the ONNX artifact; python: Triton's Python backend runs the package "
                   "with edgekit's runtime (any artifact).")
@click.option("--artifact", default=None, help="--backend python: the artifact to run (default: the best here).")
@click.option("--threads", type=click.IntRange(min=1), default=None, help="--backend python: runtime threads.")
@click.option("--python-path", default=None, metavar="DIRS",
              help="--backend python: where edgekit is installed if the backend's Python lacks it "
                   "(e.g. a venv's site-packages; os.pathsep-separated).")
@click.option("--force", is_flag=True, help="Replace an existing model directory.")
def export_triton_command(package: str, output: Path, max_batch_size: int, max_queue_delay_us: int, instances: int,
                          gpu: bool, kserve_uri: str | None, backend: str, artifact: str | None, threads: int | None,
                          python_path: str | None, force: bool) -> None:
    """Write PACKAGE as a Triton model repository entry: config.pbtxt + 1/model.onnx for Triton's
    onnxruntime backend, or config.pbtxt + 1/model.py + 1/package/ for its Python backend."""
    from .export.triton import export_triton

    path = export_triton(package, str(output), max_batch_size, gpu, instances, max_queue_delay_us, kserve_uri, force,
                         backend=backend, artifact=artifact, threads=threads, python_path=python_path)
    click.echo(f"triton model: {path}")
    if kserve_uri:
        click.echo(f"kserve: {output / (path.name + '.inferenceservice.yaml')}")


@cli.command("profiles")
@click.option("--root", default=None, help="Read device facts below this directory instead of / (for testing).")
def profiles_command(root: str | None) -> None:
    """List device profiles, which one matches this machine, and why; then the formats and runtimes here."""
    from .devices import DeviceFacts, detect, load_profiles, profile_dirs
    from .formats.onnx.schemes import schemes_for_cpu

    facts = DeviceFacts.read(root)
    profiles = load_profiles()
    chosen = detect(facts, profiles)
    click.echo(f"this machine: {facts.os}/{facts.arch}, {facts.cpu_count} cores, "
               f"device-tree model {facts.device_tree_model or '(none)'}, "
               f"Jetson {'yes' if facts.nv_tegra_release else 'no'}, NVIDIA driver {'yes' if facts.cuda else 'no'}, "
               f"ONNX INT8 artifacts run here in order: "
               f"{', '.join(s.artifact_key for s in schemes_for_cpu(facts.arch, facts.cpu_flags))}")
    for profile in sorted(profiles.values(), key=lambda p: (-p.priority, p.name)):
        matched, reasons = profile.match(facts)
        mark = "*" if profile.name == chosen.name else ("+" if matched else " ")
        prefer = ", ".join(f"{a}/{b}" for a, b in profile.prefer)
        click.echo(f"{mark} {profile.name:<18} priority {profile.priority:<3} {profile.description}")
        click.echo(f"    prefers {prefer}; threads {profile.threads or 'all'}; ONNX INT8 schemes "
                   f"{', '.join(profile.onnx_schemes)}; {profile.path}")
        for reason in reasons:
            click.echo(f"    {reason}")
    click.echo(f"selected: {chosen.name}" + ("" if chosen.name in profiles else f" ({chosen.description})"))
    click.echo("profiles are read from: " + ", ".join(str(d) for d in profile_dirs()))
    from .formats import FORMATS

    click.echo("formats:")
    for fmt in FORMATS.values():
        runtimes = ", ".join(f"{b.name} ({b.available() or 'not installed: ' + fmt.extra})" for b in fmt.backends)
        click.echo(f"  {fmt.name:<8} {fmt.description}; runs on {runtimes}")


@cli.command("targets", hidden=True)
@click.option("--root", default=None, help="Read device facts below this directory instead of / (for testing).")
@click.pass_context
def targets_command(ctx: click.Context, root: str | None) -> None:
    """The former name of `edgekit profiles`."""
    ctx.invoke(profiles_command, root=root)


@cli.group("cache")
def cache_group() -> None:
    """Inspect and manage the local cache (EDGEKIT_CACHE_DIR)."""


@cache_group.command("ls")
def cache_ls() -> None:
    """List cache entries, least recently used first."""
    import time

    from . import cache

    found = sorted(cache.entries(), key=lambda e: e.last_used)
    for entry in found:
        age = time.time() - entry.last_used
        click.echo(f"{entry.kind:<9} {entry.key[:40]:<40} {entry.bytes / 1024:>10.1f} KiB  used {age / 60:.0f} min ago")
    total = sum(e.bytes for e in found)
    click.echo(f"{len(found)} entries, {total / (1 << 20):.1f} MiB of {cache.max_bytes() / (1 << 20):.0f} MiB "
               f"in {cache.cache_root()}")


@cache_group.command("verify")
def cache_verify() -> None:
    """Check every entry's checksums; remove the ones that fail (they are rebuilt on next use)."""
    from .cache_verify import verify_all

    bad = verify_all()
    for entry, problem in bad:
        click.echo(f"removed {entry.kind}/{entry.key}: {problem}")
    click.echo(f"{len(bad)} bad entries removed" if bad else "all entries verified")


@cache_group.command("clear")
def cache_clear() -> None:
    """Remove every cache entry."""
    from . import cache

    click.echo(f"removed {cache.clear()} entries from {cache.cache_root()}")


def main() -> None:
    sys.exit(invoke(cli))


if __name__ == "__main__":
    main()
