"""The route matrix: for every source kind x format of the route table, the one test that packages a
real model of that kind for that format end to end (converted, validated against the source,
run by that format's runtime or evaluator).

A feature test builds the formats its feature touches; that every route converts, validates and
runs is this table's job, once per cell. A new source kind or format adds its row or column here
(``tests/routing/test_routes.py`` fails until it does).
"""

from __future__ import annotations

from typing import NamedTuple


class Cell(NamedTuple):
    """The end-to-end test of a route: its module, its function, and for a parametrized test the
    first value of the parameter set that packages this route."""

    module: str
    test: str
    parameter: str = ""


_TOUR = Cell("tests.test_readme_tour", "test_every_tour_command_runs_as_written")  # digits.keras --format all
_H5 = Cell("tests.formats.test_tflite", "test_h5_and_saved_model_sources_package_for_every_format_like_keras", "h5")
_SAVED_MODEL = Cell("tests.formats.test_tflite", "test_h5_and_saved_model_sources_package_for_every_format_like_keras",
                    "saved_model")
_ONNX = Cell("tests.packaging.test_attention_models", "test_attention_classifiers_ship_every_format_and_match_their_source",
             "text_encoder")
_PROGRAM = Cell("tests.packaging.test_attention_models",
                "test_attention_classifiers_ship_every_format_and_match_their_source", "vit")
_FACTORY = Cell("tests.sources.test_pytorch", "test_a_scalar_tensor_input_fixed_with_input_name_value_reaches_every_format",
                "factory")
_TORCHSCRIPT = Cell("tests.sources.test_pytorch", "test_export_programs_and_torchscript_files_package_with_a_dynamic_batch",
                    "residual_ts.pt")

FORMATS = ("tflite", "onnx", "coreml", "executorch")
ROWS = {"keras": _TOUR, "h5": _H5, "saved_model": _SAVED_MODEL, "onnx": _ONNX, "torch_export": _PROGRAM,
        "torch_factory": _FACTORY, "torchscript": _TORCHSCRIPT}

# (source kind, format) -> its end-to-end test; each row's test packages all four formats in one run
ROUTE_MATRIX: dict[tuple[str, str], Cell] = {(kind, fmt): cell for kind, cell in ROWS.items() for fmt in FORMATS}
