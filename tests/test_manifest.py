import json

import pytest

from edgekit.errors import PackageError
from edgekit.manifest import SCHEMA_VERSION, Artifact, Manifest, Preprocessing, QuantParams, TensorSpec


def _manifest() -> Manifest:
    return Manifest(
        name="m",
        edgekit_version="0.1.0",
        created="2026-01-01T00:00:00+00:00",
        source={"format": "keras", "sha256": "0" * 64},
        inputs=[TensorSpec("image", [-1, 8, 8, 1], layout="NHWC", preprocessing=Preprocessing(resize=[8, 8]))],
        outputs=[TensorSpec("output_0", [-1, 10], labels=[str(i) for i in range(10)])],
        artifacts=[
            Artifact(
                "tflite", "tflite/model.int8.tflite", "a" * 64, 10,
                inputs=[QuantParams("in", "int8", 0.0039, -128)], outputs=[QuantParams("out", "int8", 0.0039, -128)],
            )
        ],
        validation={"artifacts": {"tflite": {"sqnr_db": float("inf")}}},
    )


def test_round_trip_keeps_everything_the_runtime_needs():
    manifest = _manifest()
    again = Manifest.from_json(manifest.to_json())
    assert again.to_dict() == Manifest.from_json(again.to_json()).to_dict()
    assert again.inputs[0].preprocessing == manifest.inputs[0].preprocessing
    assert again.artifacts[0].inputs[0].zero_point == -128
    assert again.labels == manifest.labels


def test_non_finite_measurements_are_written_as_strict_json_null():
    data = json.loads(_manifest().to_json())
    assert data["validation"]["artifacts"]["tflite"]["sqnr_db"] is None


def test_newer_schema_is_refused_with_upgrade_hint():
    data = _manifest().to_dict()
    data["schema_version"] = SCHEMA_VERSION + 1
    with pytest.raises(PackageError, match="newer than this edgekit") as info:
        Manifest.from_dict(data)
    assert "upgrade" in info.value.hint


def test_unknown_keys_are_tolerated():
    data = _manifest().to_dict()
    data["future_field"] = {"x": 1}
    data["artifacts"][0]["future"] = True
    assert Manifest.from_dict(data).name == "m"


@pytest.mark.parametrize(
    "path", ["../evil.tflite", "/etc/passwd", "a/../../b", "", "./x", "a\\b"]
)
def test_artifact_paths_must_stay_inside_the_package(path):
    data = _manifest().to_dict()
    data["artifacts"][0]["path"] = path
    with pytest.raises(PackageError, match="relative path inside the package"):
        Manifest.from_dict(data)


@pytest.mark.parametrize(
    "mutate, message",
    [
        (lambda d: d["artifacts"][0].update(sha256="xyz"), "sha256"),
        (lambda d: d["inputs"][0].update(shape=[0, 8]), "shape"),
        (lambda d: d.update(artifacts=[]), "artifacts must be a non-empty list"),
        (lambda d: d["inputs"][0]["preprocessing"].update(std=[0.0]), "std must not contain 0"),
        (lambda d: d.pop("schema_version"), "schema_version"),
    ],
)
def test_malformed_manifests_name_the_problem(mutate, message):
    data = _manifest().to_dict()
    mutate(data)
    with pytest.raises(PackageError, match=message):
        Manifest.from_dict(data)


def test_invalid_json_is_a_package_error():
    with pytest.raises(PackageError, match="not valid JSON"):
        Manifest.from_json(b"{not json")
