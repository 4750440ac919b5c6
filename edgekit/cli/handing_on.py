"""Handing a package on: signing keys, ``sign``, ``verify`` and ``export triton``; a package whose verdict
is not a pass is said before it is signed or exported."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

from .commands import command, group, with_default
from .options import at_least


def add_keys(commands: Any) -> None:
    keys_commands = group(commands, "keys", "signing keys for packages (Ed25519)")
    generate = command(keys_commands, "generate", _keys_generate,
                       "write a private KEY (mode 0600) and its public KEY.pub (give KEY.pub to devices)")
    generate.add_argument("key", type=Path, help="where to write the private key")
    generate.add_argument("--force", action="store_true", help="overwrite an existing key")
    sign = command(commands, "sign", _sign, "sign PACKAGE (a NAME.edgekit directory or NAME.ekpkg) with KEY")
    sign.add_argument("package", type=Path)
    sign.add_argument("--key", required=True, type=Path, help="Ed25519 private key")
    verify = command(commands, "verify", _verify,
                     "check PACKAGE's signature and every artifact's sha256 against its manifest")
    verify.add_argument("package")
    verify.add_argument("--trusted-keys", type=Path, default=None,
                        help="folder of trusted KEY.pub files (default: accept any valid signature)")
    verify.add_argument("--allow-unsigned", action="store_true", help="check the artifacts of an unsigned package")


def _keys_generate(args: argparse.Namespace) -> None:
    from ..device.signing import generate_keys

    private, public, kid = generate_keys(args.key, args.force)
    print(f"private key: {private}\npublic key:  {public}\nkey id: {kid}")


def _verdict_warning(package: Any, doing: str) -> None:
    """A package whose verdict is not a pass (not decidable, failed and kept, not measured) is said
    before it is signed or handed on: the signature vouches for its bytes, not for a pass."""
    from ..device.package_io import open_package
    from ..validation_record import Verdict

    _, manifest = open_package(package)
    state = manifest.validation.state
    if state is Verdict.PASSED:
        return
    why = {Verdict.NOT_DECIDABLE: "its gates were met on too few held-out samples to decide a pass",
           Verdict.REFUSED: "it failed its gates and was kept with --allow-accuracy-drop",
           Verdict.UNVERIFIED: "none of its artifacts could be measured where it was built"}[state]
    print(f"warning: {doing} a package whose verdict is {state.value.upper()} ({why}; manifest validation.state: "
          f"{state.value!r}); measure it before shipping: python -m edgekit.run {package} --eval DATA", file=sys.stderr)


def _sign(args: argparse.Namespace) -> None:
    from ..device.package_io import sign_package

    _verdict_warning(args.package, "signing")
    print(f"signed {args.package} with key {sign_package(args.package, args.key)}")


def _verify(args: argparse.Namespace) -> None:
    from ..device.package_io import verify_package

    for line in verify_package(args.package, str(args.trusted_keys) if args.trusted_keys else None,
                               args.allow_unsigned):
        print(line)


def add_export(commands: Any) -> None:
    export_commands = group(commands, "export", "hand a package to other serving systems")
    p = command(export_commands, "triton", _export_triton,
                "write PACKAGE as a Triton model repository entry",
                "Write PACKAGE as a Triton model repository entry: config.pbtxt + 1/model.onnx for Triton's "
                "onnxruntime backend, or config.pbtxt + 1/model.py + 1/package/ for its Python backend.")
    p.add_argument("package")
    p.add_argument("--output", "-o", required=True, type=Path, help="Triton model repository directory")
    p.add_argument("--max-batch-size", type=at_least(1), default=8, help=with_default("Triton's max_batch_size", 8))
    p.add_argument("--max-queue-delay-us", type=at_least(0), default=500,
                   help=with_default("Triton's dynamic batching delay, microseconds", 500))
    p.add_argument("--instances", type=at_least(1), default=1, help=with_default("model instances", 1))
    p.add_argument("--gpu", action="store_true", help="KIND_GPU instances with the TensorRT accelerator (INT8)")
    p.add_argument("--kserve", dest="kserve_uri", default=None, metavar="STORAGE_URI",
                   help="also write a KServe InferenceService manifest serving the repository from STORAGE_URI")
    p.add_argument("--backend", choices=["onnxruntime", "python"], default="onnxruntime",
                   help=with_default("onnxruntime: Triton runs the ONNX artifact; python: Triton's Python backend runs the "
                                     "package with edgekit's runtime (any artifact)", "onnxruntime"))
    p.add_argument("--artifact", default=None, help="--backend python: the artifact to run (default: the best here)")
    p.add_argument("--threads", type=at_least(1), default=None, help="--backend python: runtime threads")
    p.add_argument("--python-path", default=None, metavar="DIRS",
                   help="--backend python: where edgekit is installed if the backend's Python lacks it (e.g. a "
                        "venv's site-packages; os.pathsep-separated)")
    p.add_argument("--force", action="store_true", help="replace an existing model directory")


def _export_triton(args: argparse.Namespace) -> None:
    from ..export.triton import export_triton

    _verdict_warning(args.package, "exporting")

    path = export_triton(args.package, str(args.output), args.max_batch_size, args.gpu, args.instances,
                         args.max_queue_delay_us, args.kserve_uri, args.force, backend=args.backend,
                         artifact=args.artifact, threads=args.threads, python_path=args.python_path)
    print(f"triton model: {path}")
    if args.kserve_uri:
        print(f"kserve: {args.output / (path.name + '.inferenceservice.yaml')}")
