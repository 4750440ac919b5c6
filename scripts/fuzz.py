#!/usr/bin/env python
"""Fuzz edgekit's parsers of untrusted input; report cases run and failures.

    .venv/bin/python scripts/fuzz.py [--cases 100000] [--seed 0] [--output out/bench/fuzz.json]

Targets: the manifest parser, the .ekpkg reader (open_package), the KServe v2 request decoder
(JSON and binary extension), the benchmark report reader, names and paths in manifests (the
package then exported to a Triton repository and its artifacts resolved: nothing may be
written or read outside the output folder and the package), and gRPC ModelInferRequest bytes
(decoded as the server decodes them: INVALID_ARGUMENT or a 4xx status, never UNKNOWN or
INTERNAL). Inputs are seeded mutations of valid documents (byte flips, truncation, splices,
JSON node replacement) plus random bytes and hostile names.
The only acceptable outcome is a clear edgekit error (or a 4xx ProtocolError); any other
exception is a failure, and a case taking longer than --hang-seconds is reported as a hang.
Failures are printed with the input that caused them (saved under out/fuzz-failures/).
"""

from __future__ import annotations

import argparse
import io
import json
import random
import sys
import tempfile
import time
import traceback
import zipfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "scripts"))

from benchio import save_json  # noqa: E402

from edgekit.bench.report import ReportError, validate_report  # noqa: E402
from edgekit.errors import EdgekitError  # noqa: E402
from edgekit.manifest import Manifest  # noqa: E402
from edgekit.device.package_io import open_package  # noqa: E402
from edgekit.server.protocol import ProtocolError, parse_request  # noqa: E402

SCALARS = [None, True, False, 0, -1, 1, 2**63, -(2**63), 1e308, -1e-308, float("nan"), "", "x", "../x", "\0",
           "FP32", "int8", [], {}, [1, 2], {"a": 1}, "a" * 300]


def valid_manifest() -> dict:
    sys.path.insert(0, str(ROOT))
    from tests.test_manifest import _manifest

    return _manifest().to_dict()


def valid_report() -> dict:
    from tests.bench.test_report_compare import make_report

    return make_report()


def mutate_json(rng: random.Random, document):
    document = json.loads(json.dumps(document))
    nodes = []

    def walk(node):
        if isinstance(node, dict):
            for key in list(node):
                nodes.append((node, key))
                walk(node[key])
        elif isinstance(node, list):
            for i in range(len(node)):
                nodes.append((node, i))
                walk(node[i])

    walk(document)
    for _ in range(rng.randint(1, 3)):
        if not nodes:
            break
        parent, key = rng.choice(nodes)
        if isinstance(parent, dict) and key not in parent:
            continue  # removed by an earlier mutation of this round
        choice = rng.random()
        if choice < 0.7:
            parent[key] = rng.choice(SCALARS)
        elif choice < 0.85 and isinstance(parent, dict):
            parent.pop(key, None)
        else:
            parent[key] = [parent[key]] * rng.randint(0, 3)
    return document


def mutate_bytes(rng: random.Random, data: bytes) -> bytes:
    data = bytearray(data)
    for _ in range(rng.randint(1, 8)):
        op = rng.random()
        if not data:
            data += bytes(rng.randrange(256) for _ in range(rng.randint(1, 16)))
        elif op < 0.5:
            data[rng.randrange(len(data))] = rng.randrange(256)
        elif op < 0.7:
            del data[rng.randrange(len(data)):]
        elif op < 0.85:
            i = rng.randrange(len(data))
            data[i:i] = bytes(rng.randrange(256) for _ in range(rng.randint(1, 32)))
        else:
            i, j = sorted(rng.randrange(len(data)) for _ in range(2))
            data[i:j] = data[i:j][::-1]
    return bytes(data)


def case_manifest(rng, base):
    if rng.random() < 0.5:
        Manifest.from_dict(mutate_json(rng, base))
    else:
        Manifest.from_json(mutate_bytes(rng, json.dumps(base).encode()))


def case_request(rng, _):
    binary = rng.random() < 0.5
    tensor = {"name": "image", "shape": [1, 4], "datatype": "FP32"}
    if binary:
        tensor["parameters"] = {"binary_data_size": 16}
    else:
        tensor["data"] = [0.5, 1.0, 2.0, 3.0]
    document = mutate_json(rng, {"inputs": [tensor], "outputs": [{"name": "y", "parameters": {"binary_data": True}}]})
    header = json.dumps(document).encode()
    body = header + (b"\x00" * 16 if binary else b"")
    if rng.random() < 0.3:
        body = mutate_bytes(rng, body)
    length = str(len(header)) if binary and rng.random() < 0.8 else rng.choice([None, "-1", "abc", "999999", "0"])
    try:
        parse_request(body, length)
    except ProtocolError as exc:
        if not 400 <= exc.status < 500:
            raise AssertionError(f"status {exc.status}") from None


def case_report(rng, base):
    validate_report(mutate_json(rng, base), "fuzz.json")


def case_archive(rng, base, workdir: Path):
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w", compression=rng.choice([zipfile.ZIP_STORED, zipfile.ZIP_DEFLATED])) as archive:
        manifest = mutate_json(rng, base) if rng.random() < 0.5 else base
        archive.writestr("manifest.json", json.dumps(manifest))
        for _ in range(rng.randint(0, 3)):
            name = rng.choice(["tflite/model.int8.tflite", "../escape", "/abs", "a/b", "manifest.json", "x" * 50])
            archive.writestr(name, bytes(rng.randrange(256) for _ in range(rng.randint(0, 64))))
    data = buffer.getvalue()
    if rng.random() < 0.7:
        data = mutate_bytes(rng, data)
    path = workdir / f"case{rng.randrange(10**9)}.ekpkg"
    path.write_bytes(data)
    try:
        open_package(path)
    finally:
        path.unlink(missing_ok=True)


HOSTILE_NAMES = ["../victim", "..", ".", "/etc/passwd", "a/../../b", "..\\x", "x\0y", ".hidden", "a\nb", "~root",
                 "C:\\Windows", "%2e%2e%2fx", "con", "a" * 200, "\u202e", "digits/../..", "digits/.", "", " "]


def hostile_name(rng: random.Random) -> str:
    if rng.random() < 0.6:
        return rng.choice(HOSTILE_NAMES)
    alphabet = "ab./\\\0-_~:\n%" + "\u00e9\u202e"
    return "".join(rng.choice(alphabet) for _ in range(rng.randint(0, 12)))


def snapshot(folder: Path) -> set[str]:
    return {str(p.relative_to(folder)) for p in folder.rglob("*")}


def case_manifest_names(rng, base, workdir: Path):
    """Hostile names and paths in a manifest on disk: it is refused, or exported and resolved
    without a file appearing outside ``repo/`` or a path resolving outside the package."""
    import shutil

    from edgekit.export.triton import _write_model
    from edgekit.device.package_io import open_package, verified_artifact_path

    document = json.loads(json.dumps(base))
    for _ in range(rng.randint(1, 3)):
        where = rng.random()
        if where < 0.5:
            document["name"] = hostile_name(rng)
        elif where < 0.8:
            document["artifacts"][0]["path"] = hostile_name(rng)
        else:
            document["outputs"][0]["name"] = hostile_name(rng)
    sandbox = workdir / f"sandbox{rng.randrange(10**9)}"
    package, repo = sandbox / "pkg.edgekit", sandbox / "out" / "repo"
    package.mkdir(parents=True)
    (package / "manifest.json").write_text(json.dumps(document))
    before = snapshot(sandbox)
    try:
        root, manifest = open_package(package)
        for artifact in manifest.artifacts:
            try:
                path = verified_artifact_path(root, artifact)
            except EdgekitError:
                continue
            if not Path(path).resolve().is_relative_to(root.resolve()):
                raise AssertionError(f"artifact path {artifact.path!r} resolves outside the package")
        _write_model(repo, manifest, True, lambda version: "", None, False)
    finally:
        after = snapshot(sandbox)
        outside = {p for p in after - before if not p.startswith("out/repo") and p != "out"}
        escaped = [p for p in (workdir.parent.iterdir() if workdir.parent.exists() else []) if "victim" in p.name]
        shutil.rmtree(sandbox, ignore_errors=True)
        if outside or escaped:
            raise AssertionError(f"written outside the output folder: {sorted(outside) or escaped}")


def valid_grpc_request() -> bytes:
    import numpy as np

    from edgekit.server.grpc_messages import messages

    request = messages()["ModelInferRequest"](model_name="digits", id="r1")
    request.inputs.add(name="image", datatype="FP32", shape=[1, 4])
    request.raw_input_contents.append(np.arange(4, dtype=np.float32).tobytes())
    typed = request.inputs.add(name="mask", datatype="INT32", shape=[1, 2])
    typed.contents.int_contents.extend([1, 2])
    request.outputs.add(name="y")
    return request.SerializeToString()


def case_grpc(rng, base: bytes):
    """Bytes as the gRPC server receives them: decoded, then the tensors read. Undecodable is
    INVALID_ARGUMENT and a ProtocolError must be 4xx; anything else would reach clients as
    UNKNOWN or INTERNAL."""
    from edgekit.server.grpc_app import Undecodable, _decoder, decode_inputs
    from edgekit.server.grpc_messages import messages

    data = mutate_bytes(rng, base) if rng.random() < 0.9 else bytes(rng.randrange(256) for _ in range(64))
    request = _decoder(messages()["ModelInferRequest"])(data)
    if isinstance(request, Undecodable):
        return
    try:
        decode_inputs(request)
    except ProtocolError as exc:
        if not 400 <= exc.status < 500:
            raise AssertionError(f"status {exc.status}") from None


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--cases", type=int, default=100_000, help="total cases, split over the targets")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--hang-seconds", type=float, default=2.0)
    parser.add_argument("--output", type=Path, default=ROOT / "out" / "bench" / "fuzz.json")
    args = parser.parse_args()
    expected = (EdgekitError, ReportError)
    results = {}
    failures = []
    with tempfile.TemporaryDirectory(prefix="edgekit-fuzz-") as tmp:
        import os

        os.environ["EDGEKIT_CACHE_DIR"] = str(Path(tmp) / "cache")
        targets = {
            "manifest": (case_manifest, valid_manifest()),
            "kserve_request": (case_request, None),
            "report": (case_report, valid_report()),
            "ekpkg": (lambda rng, base: case_archive(rng, base, Path(tmp)), valid_manifest()),
            "manifest_names": (lambda rng, base: case_manifest_names(rng, base, Path(tmp) / "names"),
                               valid_manifest()),
            "grpc_request": (case_grpc, valid_grpc_request()),
        }
        per_target = args.cases // len(targets)
        for name, (case, base) in targets.items():
            rng = random.Random(f"{args.seed}-{name}")
            counts = {"cases": 0, "rejected": 0, "accepted": 0, "failures": 0, "hangs": 0}
            started = time.perf_counter()
            for i in range(per_target):
                state = rng.getstate()
                t0 = time.perf_counter()
                try:
                    case(rng, base)
                    counts["accepted"] += 1
                except expected:
                    counts["rejected"] += 1
                except Exception as exc:  # a finding
                    counts["failures"] += 1
                    failures.append({"target": name, "case": i, "error": f"{type(exc).__name__}: {exc}",
                                     "traceback": traceback.format_exc(), "rng_state": repr(state)[:200]})
                if time.perf_counter() - t0 > args.hang_seconds:
                    counts["hangs"] += 1
                counts["cases"] += 1
            counts["seconds"] = round(time.perf_counter() - started, 1)
            results[name] = counts
            print(f"{name}: {counts}", flush=True)
    total = {k: sum(r[k] for r in results.values()) for k in ("cases", "failures", "hangs")}
    report = {"fuzz": "edgekit parsers", "seed": args.seed, "total": total, "targets": results, "failures": failures[:50]}
    save_json(report, args.output)
    print(json.dumps(total))
    for failure in failures[:10]:
        print(f"FAILURE {failure['target']} #{failure['case']}: {failure['error']}\n{failure['traceback']}")
    sys.exit(1 if total["failures"] or total["hangs"] else 0)


if __name__ == "__main__":
    main()
