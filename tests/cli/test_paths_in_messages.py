"""Messages name the user's files as they typed them, not as the sources resolved them."""

from tests.conftest import edgekit_cli


def test_an_error_names_a_file_below_the_working_directory_relative_to_it(tmp_path):
    """The ONNX source resolves its path: the error read ``/home/me/project/bad.onnx is not a
    valid ONNX model`` for a user who typed ``bad.onnx``."""
    (tmp_path / "bad.onnx").write_text("not a model")
    import numpy as np

    np.save(tmp_path / "data.npy", np.zeros((4, 3), np.float32))
    result = edgekit_cli("package", "bad.onnx", "--format", "onnx", "-c", "data.npy", "-o", "out", cwd=tmp_path)
    assert result.returncode != 0
    assert "error: bad.onnx is not a valid ONNX model" in result.stderr, result.stderr
    assert str(tmp_path) not in result.stderr
