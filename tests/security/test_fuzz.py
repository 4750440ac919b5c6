"""Property tests: bad bytes into every parser give a clear edgekit error (or a 4xx), nothing else."""

from __future__ import annotations

import io
import json
import zipfile

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from edgekit.bench.report import ReportError, validate_report
from edgekit.errors import EdgekitError, PackageError
from edgekit.manifest import Manifest
from edgekit.server.protocol import ProtocolError, parse_request
from tests.bench.test_report_compare import make_report
from tests.test_manifest import _manifest

json_values = st.recursive(
    st.none() | st.booleans() | st.integers(-2**40, 2**40) | st.floats(allow_nan=True) | st.text(max_size=8),
    lambda children: st.lists(children, max_size=4) | st.dictionaries(st.text(max_size=8), children, max_size=4),
    max_leaves=20,
)
FUZZ = settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])


def mutate(document, path_choice, value):
    """Replace one node of a JSON document (chosen by an index into its nodes) with ``value``."""
    nodes = []

    def walk(node):
        if isinstance(node, dict):
            for key in node:
                nodes.append((node, key))
                walk(node[key])
        elif isinstance(node, list):
            for i in range(len(node)):
                nodes.append((node, i))
                walk(node[i])

    walk(document)
    if nodes:
        parent, key = nodes[path_choice % len(nodes)]
        parent[key] = value
    return document


@FUZZ
@given(st.binary(max_size=400))
def test_manifest_parser_on_random_bytes(data):
    try:
        Manifest.from_json(data)
    except PackageError:
        pass


@FUZZ
@given(st.integers(0, 10_000), json_values)
def test_manifest_parser_on_mutated_manifests(where, value):
    document = mutate(_manifest().to_dict(), where, value)
    try:
        Manifest.from_dict(document)
    except PackageError:
        pass


@FUZZ
@given(st.binary(max_size=600), st.one_of(st.none(), st.text(max_size=6)))
def test_kserve_decoder_on_random_bytes(body, header):
    try:
        parse_request(body, header)
    except ProtocolError as exc:
        assert 400 <= exc.status < 500


@FUZZ
@given(st.integers(0, 1000), json_values, st.booleans())
def test_kserve_decoder_on_mutated_requests(where, value, binary):
    tensor = {"name": "image", "shape": [1, 2], "datatype": "FP32"}
    if binary:
        tensor["parameters"] = {"binary_data_size": 8}
    else:
        tensor["data"] = [1.0, 2.0]
    document = mutate({"id": "x", "inputs": [tensor], "outputs": [{"name": "y"}]}, where, value)
    header = json.dumps(document).encode()
    body = header + (b"\0" * 8 if binary else b"")
    try:
        parse_request(body, str(len(header)) if binary else None)
    except ProtocolError as exc:
        assert 400 <= exc.status < 500


@FUZZ
@given(st.integers(0, 5000), json_values)
def test_report_reader_on_mutated_reports(where, value):
    document = mutate(make_report(), where, value)
    try:
        validate_report(document, "fuzzed.json")
    except ReportError:
        pass


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture])
@given(st.lists(st.tuples(st.text(st.characters(blacklist_characters="\x00/", blacklist_categories=("Cs",)), min_size=1, max_size=12),
                          st.binary(max_size=64)), max_size=5),
       st.integers(0, 400), st.binary(max_size=8))
def test_ekpkg_reader_on_random_and_damaged_archives(tmp_path_factory, members, cut, noise):
    from edgekit.device.package_io import open_package

    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w") as archive:
        for name, data in members:
            archive.writestr(name, data)
        archive.writestr("manifest.json", _manifest().to_json())
    raw = buffer.getvalue()
    damaged = raw[:cut] + noise + raw[cut + len(noise):] if noise else raw
    path = tmp_path_factory.mktemp("fuzz") / "p.ekpkg"
    path.write_bytes(damaged)
    try:
        open_package(path)
    except EdgekitError:
        pass
