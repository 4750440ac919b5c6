"""The route table: every source kind reaches every built-in format by a declared route, and an
option a route cannot honour is refused before anything loads, naming the routes that can."""

from __future__ import annotations

import time

import pytest

from edgekit.conversion import forms
from edgekit.routing import routes
from edgekit.errors import RouteError
from edgekit.formats import FORMATS, Accepts, Format
from edgekit.sources import SOURCES
from tests.conftest import CALIBRATION, DIGITS_MODEL, EVAL, ROOT, run_cli


def test_every_source_kind_reaches_every_built_in_format():
    table = routes.table()
    kinds = {kind for source in SOURCES.values() for kind in source.provides}
    assert kinds == {"keras", "h5", "saved_model", "onnx", "torch_export", "torch_factory", "torchscript"}
    assert {(r.source_kind, r.format) for r in table} == {(k, f) for k in kinds for f in FORMATS}
    by_pair = {(r.source_kind, r.format): r for r in table}
    assert by_pair["keras", "onnx"].describe() == "keras -> tf2onnx -> onnx-graph -> onnx"
    assert by_pair["torchscript", "tflite"].describe() == "torchscript -> onnx-to-torch -> torch-program -> tflite"
    assert by_pair["keras", "coreml"].form == forms.KERAS_MODEL and not by_pair["keras", "coreml"].steps


def test_routes_follow_the_formats_order_of_preference():
    source = next(s for s in SOURCES.values() if "torch_export" in s.provides)
    either = Format("x", "", lambda: None, (), "", "", accepts=(Accepts(forms.TF_GRAPH), Accepts(forms.ONNX_GRAPH)))
    assert routes.route(source, "torch_export", either).form == forms.ONNX_GRAPH  # the first it can reach
    nothing = Format("y", "", lambda: None, (), "", "", accepts=(Accepts(forms.KERAS_MODEL),))
    assert routes.route(source, "torch_export", nothing) is None
    with pytest.raises(RouteError, match="no route converts a torch_export model to y") as refused:
        routes.plan(source, "torch_export", [FORMATS["onnx"], nothing], {})
    assert "package it for onnx" in refused.value.hint


@pytest.mark.parametrize("option, able", [("explain", "tflite --format onnx --format executorch"),
                                          ("int16", "tflite --format onnx")])
def test_an_option_a_route_cannot_honour_is_refused_with_the_routes_that_can(option, able):
    keras = next(s for s in SOURCES.values() if "keras" in s.provides)
    with pytest.raises(RouteError) as refused:
        routes.plan(keras, "keras", FORMATS.values(), {option: True})
    flag = routes.ROUTE_OPTIONS[option]
    assert f"{flag} is not honoured by the route" in refused.value.message
    assert "keras -> keras-model -> coreml" in refused.value.message
    assert "keras -> tf-graph -> tflite" in refused.value.hint
    assert f"with {flag} (--format {able})" in refused.value.hint
    planned = routes.plan(keras, "keras", [FORMATS[name] for name in able.split(" --format ")], {option: True})
    assert all(option in r.honours for r in planned.values())
    assert routes.plan(keras, "keras", FORMATS.values(), {option: False})  # not asked: every route


@pytest.mark.parametrize("option", ["float", "int16", "explain"])
def test_every_tflite_route_has_per_layer_precision(option):
    """LiteRT Quantizer on the float conversion: the litert-torch routes (PyTorch and ONNX
    sources) honour --keep-float, --int16-activations and --explain, as TensorFlow's does."""
    for source in SOURCES.values():
        for kind in source.provides:
            route = routes.route(source, kind, FORMATS["tflite"])
            if route is not None:
                assert option in route.honours, route.describe()
    onnx_source = next(s for s in SOURCES.values() if "onnx" in s.provides)
    with pytest.raises(RouteError, match="onnx -> onnx-to-torch -> torch-module -> coreml"):
        routes.plan(onnx_source, "onnx", FORMATS.values(), {option: True})


def test_keep_float_reaches_every_format_from_keras_and_tensorflow_graphs_but_not_traced_pytorch_coreml():
    for source in SOURCES.values():
        for kind in source.provides:
            for fmt in FORMATS.values():
                route = routes.route(source, kind, fmt)
                if route is None:
                    continue
                honoured = "float" in route.honours
                assert honoured == (route.form != forms.TORCH_MODULE), route.describe()


def test_an_option_on_a_route_without_it_is_refused_before_the_model_loads(tmp_path, capsys):
    started = time.perf_counter()
    code, out, err = run_cli(capsys, "package", DIGITS_MODEL, "--format", "all", "--calibration", CALIBRATION,
                             "--eval", EVAL, "-o", tmp_path / "out", "--int16-activations", "block1_dw")
    assert code == 1 and "Traceback" not in err
    # neither CoreML's route nor ExecuTorch's (XNNPACK has no 16-bit activations) runs them
    assert "--int16-activations is not honoured by the routes keras -> keras-model -> coreml; " in err
    assert "-> torch-program -> executorch" in err
    assert "--format tflite --format onnx" in err
    assert "Loading" not in out + err and time.perf_counter() - started < 20  # nothing loaded, nothing converted
    assert not (tmp_path / "out").exists()


def test_routes_command_lists_the_table(capsys):
    code, out, _ = run_cli(capsys, "routes")
    assert code == 0
    assert "onnx -> onnx-to-torch -> torch-module -> coreml" in out
    lines = [line for line in out.splitlines() if line.startswith("keras -> tf-graph -> tflite")]
    assert lines and "--keep-float, --int16-activations, --explain" in lines[0]
    torch_lines = [line for line in out.splitlines() if line.startswith("onnx -> onnx-to-torch -> torch-program -> tflite")]
    assert torch_lines and "--keep-float, --int16-activations, --explain" in torch_lines[0]


def test_the_docs_routes_table_is_the_route_table():
    text = (ROOT / "docs" / "formats.md").read_text()
    for route in routes.table():
        assert f"`{route.describe()}`" in text, route.describe()


def test_two_steps_are_preferred_only_where_no_shorter_route_exists_and_otherwise_the_last_fallback():
    """ExecuTorch takes PyTorch programs alone: a Keras model reaches it through tf2onnx, then the
    ONNX -> PyTorch rebuild. A format with a shorter route builds on that first (each step is a
    conversion that can lose the model); the two-step route is its last fallback, for a model its
    own converter fails on (TF's converter and coremltools on a masked bidirectional GRU)."""
    keras = next(s for s in SOURCES.values() if "keras" in s.provides)
    (two,) = routes.routes(keras, "keras", FORMATS["executorch"])
    assert [step.name for step in two.steps] == ["tf2onnx", "onnx-to-torch"] and two.form == forms.TORCH_PROGRAM
    assert two.describe() == "keras -> tf2onnx -> onnx-graph -> onnx-to-torch -> torch-program -> executorch"
    for name in ("tflite", "coreml"):
        found = routes.routes(keras, "keras", FORMATS[name])
        assert all(len(r.steps) <= 1 for r in found[:-1]), name
        assert found[-1].describe().startswith("keras -> tf2onnx -> onnx-graph -> onnx-to-torch"), name
        assert routes.route(keras, "keras", FORMATS[name]).steps == (), name
    assert [len(r.steps) for r in routes.routes(keras, "keras", FORMATS["onnx"])] == [1]


def _parameter_sets(function) -> list[tuple[str, ...]]:
    """A parametrized test's parameter sets, each value as text."""
    sets = []
    for mark in getattr(function, "pytestmark", []):
        if mark.name == "parametrize":
            for values in mark.args[1]:
                values = values if isinstance(values, (tuple, list)) else (values,)
                sets.append(tuple(str(v) for value in values for v in (value if isinstance(value, (tuple, list))
                                                                       else (value,))))
    return sets


def test_the_route_matrix_names_one_end_to_end_package_for_every_route():
    """Every (source kind, format) of the route table has its end-to-end test in
    ``tests/routing/route_matrix.py``, which exists and packages all four formats in one run."""
    import importlib
    import inspect
    import re

    from tests.routing.route_matrix import FORMATS as MATRIX_FORMATS, ROUTE_MATRIX
    from tests.tour import tour_commands

    assert set(ROUTE_MATRIX) == {(r.source_kind, r.format) for r in routes.table()}
    assert set(MATRIX_FORMATS) == set(FORMATS)
    for (kind, fmt), cell in ROUTE_MATRIX.items():
        function = getattr(importlib.import_module(cell.module), cell.test, None)
        assert callable(function), (kind, fmt, cell)
        if cell.module == "tests.test_readme_tour":  # the tour's first command builds what it runs
            assert "--format all" in tour_commands()[0]
            continue
        (values,) = [v for v in _parameter_sets(function) if v[0].startswith(cell.parameter)]
        source = inspect.getsource(function)
        every = "all" in values or set(MATRIX_FORMATS) <= set(values) or re.search(r'"--format",\s*"all"', source)
        assert every, (kind, cell)
