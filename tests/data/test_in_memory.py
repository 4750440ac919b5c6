"""``edgekit.package()`` from a notebook's objects: a PyTorch module with a DataLoader, an ONNX
ModelProto, and calibration as arrays, generators and DataLoaders; no files written by the user.
(An in-memory Keras model with a generator is the worked notebook, run by tests/test_docs.py.)

The cells run in the test process, as in a notebook's kernel: the model object lives where the
user made it, and its packaging uses the worker's warm converter children."""

from __future__ import annotations

import json
import textwrap

import numpy as np
import pytest

from edgekit.data.in_memory import data_file
from edgekit.sources.objects import model_file
from edgekit.errors import DataError, ModelSourceError
from tests.conftest import ROOT, exec_here

TRAINING = """
import json, sys, tempfile
import numpy as np
import edgekit
rng = np.random.default_rng(0)
x = rng.normal(size=(400, 16)).astype("float32")
y = (x @ rng.normal(size=(16, 4))).argmax(1)
out = tempfile.mkdtemp()
"""


def run_script(body: str) -> dict:
    """A notebook's cells, run in this test process (``exec_here``); what the last one printed."""
    printed = exec_here(TRAINING + textwrap.dedent(body), ROOT)
    return json.loads(printed.strip().splitlines()[-1])


@pytest.mark.slow
def test_an_in_memory_torch_module_with_arrays_and_a_dataloader():
    """Calibration as a numpy array (the module is traced with its first samples), held-out data
    as a DataLoader of (x, y) batches."""
    found = run_script("""
        import torch
        torch.manual_seed(0)

        class Net(torch.nn.Module):
            def __init__(self):
                super().__init__()
                self.a, self.b = torch.nn.Linear(16, 32), torch.nn.Linear(32, 4)

            def forward(self, x):
                return self.b(torch.relu(self.a(x)))

        net = Net()
        optimizer = torch.optim.Adam(net.parameters(), 1e-2)
        for _ in range(200):
            optimizer.zero_grad()
            torch.nn.functional.cross_entropy(net(torch.from_numpy(x)), torch.from_numpy(y)).backward()
            optimizer.step()
        held_out = torch.utils.data.DataLoader(
            torch.utils.data.TensorDataset(torch.from_numpy(x[300:]), torch.from_numpy(y[300:])), batch_size=32)
        result = edgekit.package(net, x[:300], out, eval=held_out, formats=["onnx"], profiles=["rpi5"],
                                 also_float=False)
        outputs = edgekit.load(result.path).predict(x[300:340])
        with torch.no_grad():
            expected = net(torch.from_numpy(x[300:340])).numpy()
        print(json.dumps({"name": result.manifest.name, "verdicts": result.verdicts,
                          "samples": result.manifest.validation.to_dict()["data"]["samples"],
                          "agree": float((outputs.argmax(1) == expected.argmax(1)).mean())}))
    """)
    assert found["name"] == "net" and found["verdicts"] == {"onnx": "passed"} and found["samples"] == 100
    assert found["agree"] >= 0.9


def test_data_objects_become_the_npz_the_packager_reads(tmp_path):
    x = np.arange(24, dtype=np.float32).reshape(6, 4)
    y = np.array([0, 1, 0, 1, 0, 1])

    def read(path):
        with np.load(path) as stored:
            return {k: stored[k] for k in stored.files}

    assert read(data_file(x, tmp_path, "calibration"))["x"].shape == (6, 4)
    pair = read(data_file((x, y), tmp_path, "eval"))
    assert pair["x"].shape == (6, 4) and pair["y"].tolist() == y.tolist()
    named = read(data_file({"tokens": x.astype(np.int64), "mask": x}, tmp_path, "calibration"))
    assert set(named) == {"tokens", "mask"}
    # samples, (sample, label) pairs, TFLite-style lists of batches, and batches told by the input's rank
    assert read(data_file((row for row in x), tmp_path, "calibration"))["x"].shape == (6, 4)
    labelled = read(data_file(((row, int(label)) for row, label in zip(x, y)), tmp_path, "calibration"))
    assert labelled["x"].shape == (6, 4) and labelled["y"].tolist() == y.tolist()
    assert read(data_file(([x[i:i + 2]] for i in range(0, 6, 2)), tmp_path, "calibration"))["x"].shape == (6, 4)
    batches = read(data_file((x[i:i + 3] for i in range(0, 6, 3)), tmp_path, "calibration", {"features": 2}))
    assert batches["x"].shape == (6, 4)
    assert data_file("data.npz", tmp_path, "calibration") == "data.npz"  # a path stays a path


def test_bad_objects_are_clear_errors(tmp_path):
    with pytest.raises(DataError, match="the calibration data is empty"):
        data_file(iter([]), tmp_path, "calibration")
    with pytest.raises(DataError, match="different shapes"):
        data_file(iter([np.zeros(3), np.zeros(4)]), tmp_path, "calibration")
    with pytest.raises(DataError, match="is a int"):
        data_file(7, tmp_path, "calibration")
    with pytest.raises(ModelSourceError, match="edgekit.package\\(\\) got a builtins.dict") as info:
        model_file({"weights": 1}, tmp_path, None)
    assert "torch.nn.Module" in info.value.hint


def test_an_onnx_model_proto_is_written_with_its_graph_name(tmp_path):
    onnx = pytest.importorskip("onnx")
    from onnx import TensorProto, helper

    graph = helper.make_graph([helper.make_node("Relu", ["x"], ["y"])], "relu_net",
                              [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", 4])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["batch", 4])])
    path, name = model_file(helper.make_model(graph), tmp_path, None)
    assert name == "relu_net" and onnx.load(path).graph.node[0].op_type == "Relu"


def test_bad_values_in_data_objects_are_named_as_the_user_passed_them(tmp_path):
    """A NaN in an array handed to edgekit.package() is named by the argument it came in, never
    by the temporary file it was written to."""
    pytest.importorskip("onnx")
    from onnx import TensorProto, helper

    import edgekit

    graph = helper.make_graph([helper.make_node("Relu", ["x"], ["y"])], "relu_net",
                              [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", 4])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["batch", 4])])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    x = np.random.default_rng(0).normal(size=(200, 4)).astype(np.float32)
    broken = x.copy()
    broken[:, 1] = np.nan
    with pytest.raises(DataError) as refused:
        edgekit.package(model, broken, tmp_path / "a", formats=["onnx"])
    assert "calibration data edgekit.package(calibration=...) contains" in refused.value.message
    assert "edgekit-objects" not in refused.value.message
    with pytest.raises(DataError) as refused:
        edgekit.package(model, x, tmp_path / "b", eval=broken[:60], formats=["onnx"])
    assert "evaluation data edgekit.package(eval=...) contains" in refused.value.message
    assert "row 0 of edgekit.package(eval=...)" in refused.value.message


def test_packaging_a_torch_module_leaves_its_training_state_as_the_caller_had_it(tmp_path):
    """The module is exported in eval mode; the caller's object was left in eval mode (a
    notebook that went on training then trained with dropout and batch statistics off)."""
    torch = pytest.importorskip("torch")

    class Net(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.body = torch.nn.Sequential(torch.nn.Linear(16, 8), torch.nn.BatchNorm1d(8), torch.nn.Dropout(0.2))
            self.head = torch.nn.Linear(8, 4)

        def forward(self, x):
            return self.head(self.body(x))

    net = Net()
    net.train()
    net.head.eval()  # a mixed state, as a fine-tuning loop with a frozen head leaves it
    before = {name: sub.training for name, sub in net.named_modules()}
    path, _ = model_file(net, tmp_path, None, calibration=np.zeros((4, 16), np.float32))
    assert path.endswith(".pt2") and {name: sub.training for name, sub in net.named_modules()} == before


def test_arrays_are_taken_whole_and_a_capped_generator_says_so(tmp_path):
    """An eval array of 200,000 samples was silently cut to 100,000."""
    from edgekit.data.in_memory import collect_arrays

    big = np.zeros((200_000, 2), np.float32)
    assert len(collect_arrays(big, "evaluation", {})["x"]) == 200_000
    assert len(collect_arrays((big, np.zeros(200_000, np.int64)), "evaluation", {})["y"]) == 200_000

    def endless():
        while True:
            yield np.zeros(2, np.float32)

    with pytest.warns(UserWarning, match="first 50 are used"):
        assert len(collect_arrays(endless(), "calibration", {}, limit=50)["x"]) == 50


def test_a_pair_whose_labels_do_not_match_the_samples_names_both_counts(tmp_path):
    """(x, y) with y one short was read as a generator of two items: "items have different shapes"."""
    x = np.zeros((6, 4), np.float32)
    with pytest.raises(DataError, match=r"\(x, y\) has 6 samples and 5 labels"):
        data_file((x, np.zeros(5, np.int64)), tmp_path, "calibration")


def test_string_labels_are_refused_by_name_with_the_mapping_to_indices(tmp_path):
    """A generator of (sample, "cat") pairs raised numpy's own ValueError."""
    pairs = ((np.zeros(4, np.float32), name) for name in ["cat", "dog"] * 3)
    with pytest.raises(DataError, match="labels are <U3 \\(e.g. \\['cat'\\]\\); edgekit takes integer") as refused:
        data_file(pairs, tmp_path, "calibration")
    assert "labels.index(name)" in refused.value.hint
    with pytest.raises(DataError, match="labels are"):
        data_file((np.zeros((6, 4), np.float32), np.array(["a"] * 6)), tmp_path, "calibration")


def test_items_with_more_arrays_than_the_model_has_inputs_are_refused_by_count(tmp_path):
    """A DataLoader of (x, y, z) batches for a one-input model was read as three inputs."""
    torch = pytest.importorskip("torch")
    from torch.utils.data import DataLoader, TensorDataset

    dataset = TensorDataset(torch.zeros(12, 4), torch.zeros(12, dtype=torch.long), torch.zeros(12))
    with pytest.raises(DataError, match=r"yields 3 arrays per item; the model has 1 input\(s\) \(x\)"):
        data_file(DataLoader(dataset, batch_size=4), tmp_path, "calibration", {"x": 2})
    with pytest.raises(DataError, match="yields 3 arrays per item"):
        data_file(((np.zeros(4), 1, 2.0) for _ in range(3)), tmp_path, "calibration")


def test_a_tuple_of_one_array_per_input_is_named_by_the_inputs(tmp_path):
    """(tokens, mask) of one shape for a two-input model was joined as 2N samples of one input."""
    tokens, mask = np.ones((5, 7), np.int64), np.zeros((5, 7), np.int64)
    with np.load(data_file((tokens, mask), tmp_path, "calibration", {"tokens": 2, "mask": 2})) as stored:
        assert stored["tokens"].sum() == 35 and stored["mask"].sum() == 0


def test_a_dict_keyed_by_a_name_the_model_lacks_is_refused(tmp_path):
    """A dict {"image": ...} for a model whose only input is "x" was fed silently; extra keys too."""
    pytest.importorskip("onnx")
    from onnx import TensorProto, helper

    import edgekit

    graph = helper.make_graph([helper.make_node("Relu", ["x"], ["y"])], "relu_net",
                              [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", 4])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["batch", 4])])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    x = np.random.default_rng(0).normal(size=(200, 4)).astype(np.float32)
    with pytest.raises(DataError, match="gives an array for 'image'; the model's only input is 'x'"):
        edgekit.package(model, {"image": x}, tmp_path / "a", formats=["onnx"])
    assert not (tmp_path / "a").exists()


def test_python_options_in_the_forms_users_write_are_read_or_named(tmp_path):
    """A string for a list option was iterated per character; an unknown keyword was a bare TypeError;
    fixed_inputs={"gain": 2.0} was a bare TypeError."""
    from edgekit.errors import InputError
    from edgekit.packaging import PackageOptions

    options = PackageOptions.from_keywords(model="m.onnx", calibration="c.npy", output_dir=str(tmp_path),
                                           formats="onnx", plan={"conv1": "float"}, profiles="rpi4",
                                           output_kinds="classes",
                                           fixed_inputs={"gain": 2.0, "rate": 16000, "h0": np.ones((1, 1, 8)),
                                                         "text": "3"})
    assert options.formats == ["onnx"] and options.plan.floats == ("conv1",) and options.profiles == ["rpi4"]
    assert options.output_kinds == {"": "classes"}
    assert options.fixed_inputs["gain"] == {"number": 2.0, "integral": False}
    assert options.fixed_inputs["rate"]["integral"] and options.fixed_inputs["text"]["number"] == 3.0
    assert np.load(options.fixed_inputs["h0"]["npy"]).shape == (1, 1, 8)
    with pytest.raises(InputError, match="unknown option\\(s\\): sample") as refused:
        PackageOptions.from_keywords(model="m", calibration="c", output_dir=".", sample=10)
    assert "did you mean samples" in refused.value.hint
    with pytest.raises(DataError, match=r"fixed_inputs\['gain'\] must be finite"):
        PackageOptions.from_keywords(model="m", calibration="c", output_dir=".", fixed_inputs={"gain": float("nan")})
    with pytest.raises(DataError, match=r"fixed_inputs\['gain'\] is a object"):
        PackageOptions.from_keywords(model="m", calibration="c", output_dir=".", fixed_inputs={"gain": object()})
    with pytest.raises(InputError, match="plan= must be a PrecisionPlan, a dict"):
        PackageOptions.from_keywords(model="m", calibration="c", output_dir=".", plan=3)
    with pytest.raises(InputError, match="precision must be one of int8, int16, float"):
        PackageOptions.from_keywords(model="m", calibration="c", output_dir=".", plan={"conv1": "fp16"})
