"""The one translator of layer names: a plan in the source's vocabulary, resolved into each kind of
name a converter takes, with what it cannot name said rather than dropped."""

from __future__ import annotations

import onnx
import pytest
from onnx import TensorProto, helper

from edgekit.conversion.layer_names import (MODULE, ONNX_NODE, SCOPE, LayerNames, attribute_name, in_layer,
                                            onnx_module_paths, read_back, stable_node_name)

TORCH_EXPORT = LayerNames(module_paths={"node_conv2d": "stem.0", "node_relu": "stem.2", "node_conv2d_1": "block.0",
                                        "node_add": "op:add", "node_mean": ""})


def test_a_pytorch_module_names_the_onnx_nodes_exported_from_it():
    own, unplaced = TORCH_EXPORT.resolve({"stem": "float", "block.0": "int16"}, ONNX_NODE)
    assert own == {"node_conv2d": "float", "node_relu": "float", "node_conv2d_1": "int16"} and not unplaced
    # a node names itself; a name no module holds goes to the converter as given (a scope, a Keras layer)
    assert TORCH_EXPORT.resolve({"node_add": "float", "dense_1": "float"}, ONNX_NODE)[0] == {
        "node_add": "float", "dense_1": "float"}


def test_an_onnx_node_becomes_its_module_and_an_op_of_a_forward_only_where_the_converter_names_ops():
    plan = {"node_conv2d": "float", "node_add": "float", "node_mean": "float"}
    own, unplaced = TORCH_EXPORT.resolve(plan, MODULE)
    assert own == {"stem.0": "float"} and unplaced == ["node_add", "node_mean"]
    own, unplaced = TORCH_EXPORT.resolve(plan, MODULE, names_ops=True)
    assert own == {"stem.0": "float", "add": "float"} and unplaced == ["node_mean"]
    # the user's own module path on a PyTorch source stays what it is
    assert TORCH_EXPORT.resolve({"block": "float"}, MODULE) == ({"block": "float"}, [])


def test_scopes_pass_as_given_and_match_the_converted_names():
    assert LayerNames(("conv2",)).resolve({"conv2": "float"}, SCOPE) == ({"conv2": "float"}, [])
    assert in_layer("model/conv2_1/Conv2D;model/conv2_1/BiasAdd", "conv2")
    assert not in_layer("model/conv21/Conv2D", "conv2")
    assert in_layer("model_1_conv2_1_BiasAdd", "conv2", separator="_")  # Core ML writes scopes with '_'
    with pytest.raises(ValueError, match="unknown layer name kind"):
        LayerNames().resolve({"x": "float"}, "tflite")


def test_a_pytorch_sources_plan_names_modules_and_ops_on_every_route():
    """A PyTorch source lists no layers of its own: the simulation names each node by its module
    (or a forward's op by its traced name), and that plan reaches the ONNX converter as the nodes
    exported from them and a PyTorch converter as they are; an op reaches only a converter that
    keeps one by name, and a node the export recorded no module for stays a node."""
    assert TORCH_EXPORT.by_module and not LayerNames(("conv",), TORCH_EXPORT.module_paths).by_module
    assert [TORCH_EXPORT.plan_layer(n) for n in TORCH_EXPORT.module_paths] == ["stem.0", "stem.2", "block.0", "add",
                                                                               "node_mean"]
    plan = {"stem.0": "float", "add": "float", "node_mean": "float"}
    assert TORCH_EXPORT.resolve(plan, ONNX_NODE) == ({"node_conv2d": "float", "node_add": "float",
                                                      "node_mean": "float"}, [])
    assert TORCH_EXPORT.resolve(plan, MODULE) == ({"stem.0": "float"}, ["add", "node_mean"])
    assert TORCH_EXPORT.resolve(plan, MODULE, names_ops=True) == ({"stem.0": "float", "add": "float"}, ["node_mean"])
    assert LayerNames(("conv",)).plan_layer("conv") == "conv"  # a source naming its layers keeps them
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [1])
    relu = helper.make_node("Relu", ["x"], ["y"], name="node_relu")
    relu.metadata_props.add(key="pkg.torch.onnx.name_scopes", value="['', 'block', 'relu']")
    model = helper.make_model(helper.make_graph([relu], "g", [x], [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1])]))
    assert LayerNames.for_plan(model, ()).plan_layer("node_relu") == "block"
    assert LayerNames.for_plan(model, ("node_relu",)).plan_layer("node_relu") == "node_relu"  # an ONNX source's node


def test_a_plan_built_in_onnx_nodes_is_recorded_in_the_sources_names():
    """What an ONNX artifact of a PyTorch source was built with goes back under the modules and
    ops whose every node it holds at one precision; a module it holds only part of keeps its
    nodes' names, so resolving the record builds the same nodes."""
    built, _ = TORCH_EXPORT.resolve({"stem": "float", "add": "int16"}, ONNX_NODE)
    assert TORCH_EXPORT.in_source(built) == {"stem.0": ("node_conv2d",), "stem.2": ("node_relu",),
                                             "add": ("node_add",)}
    partial = {"node_conv2d": "float", "node_relu": "int16", "node_conv2d_1": "float", "node_mean": "float"}
    grouped = TORCH_EXPORT.in_source(partial)
    assert list(grouped) == ["stem.0", "stem.2", "block.0", "node_mean"]
    two = LayerNames(module_paths={"a": "attn", "b": "attn", "c": "head"})
    assert two.in_source({"a": "float", "c": "float"}) == {"a": ("a",), "head": ("c",)}  # attn only in part
    assert two.resolve({"a": "float", "head": "float"}, ONNX_NODE)[0] == {"a": "float", "c": "float"}
    assert LayerNames(("conv2",)).in_source({"conv2": "float"}) == {"conv2": ("conv2",)}  # Keras: as it is


def test_costs_follow_the_names_they_become():
    costs, links = TORCH_EXPORT.resolve_costs({"node_conv2d": 9.0, "node_relu": 1.0, "node_add": 2.0},
                                              [("node_conv2d", "node_relu", 4.0), ("node_relu", "node_add", 4.0)],
                                              MODULE)
    assert costs == {"stem.0": 9.0, "stem.2": 1.0, "add": 2.0}
    assert links == (("stem.0", "stem.2", 4.0), ("stem.2", "add", 4.0))


def test_plan_layers_and_rebuilt_submodules_read_back_in_the_sources_names():
    keras = LayerNames(("conv2", "dense"))
    assert keras.plan_layer("model/conv2_1/Conv2D") == "conv2" and keras.plan_layer("model/flatten/Reshape") == ""
    assert LayerNames().plan_layer("/conv/Conv") == "/conv/Conv"  # no layer list: the node is the layer
    assert keras.attributes(["model/conv2/Conv2D", "model/dense/MatMul"]) == {
        "model_conv2_Conv2D": "conv2", "model_dense_MatMul": "dense"}
    onnx_source = LayerNames(("/conv/Conv", "forward"))
    assert onnx_source.original(attribute_name("/conv/Conv")) == "/conv/Conv"
    assert attribute_name("forward") == "forward_" and attribute_name("3x") == "n3x"


def test_a_torch_export_records_its_modules_and_unnamed_nodes_get_stable_names():
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [1])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, [1])
    relu = helper.make_node("Relu", ["x"], ["r"], name="node_relu")
    relu.metadata_props.add(key="pkg.torch.onnx.name_scopes", value="['', 'block', 'relu']")
    neg = helper.make_node("Neg", ["r"], ["y"], name="node_neg")
    neg.metadata_props.add(key="pkg.torch.onnx.name_scopes", value="['', 'neg']")
    graph = helper.make_graph([relu, neg], "g", [x], [y])
    assert onnx_module_paths(helper.make_model(graph)) == {"node_relu": "block", "node_neg": "op:neg"}
    plain = helper.make_graph([helper.make_node("Relu", ["x"], ["y"])], "g", [x], [y])
    assert onnx_module_paths(helper.make_model(plain)) == {}  # another exporter: no modules
    assert stable_node_name("Relu", 0) == "Relu_0"

    from edgekit.sources.onnx_rewrite import name_nodes

    model = helper.make_model(plain)
    assert name_nodes(model) == 1 and model.graph.node[0].name == "Relu_0"
    onnx.checker.check_model(model)


def test_a_plan_is_read_back_from_what_the_artifact_holds_and_a_miss_is_kept():
    """A layer kept in float lands where an op of it is float in the artifact: by its layer, a
    module below it, or its scope in a fused tensor name (TF and LiteRT name a fused op after its
    last layer); 16-bit activations land on int16 or float ops; a layer no op
    of which is out of int8 is a miss (a converter fused it into an int8 neighbour)."""
    held = [("float", "block2_dw_relu6", "m_1/block2_dw_relu6_1/Relu6;m_1/block2_dw_1/depthwise"),
            ("float", "down.0", "aten_convolution_default"),
            ("float", "head", "m_head_1_MatMul_cast_fp16"),
            ("int16", "mix", "")]
    plan = {"block2_dw": "float", "down": "float", "head": "float", "mix": "int16", "block3_pw_relu6": "float",
            "block2": "float"}
    found = read_back(plan, held)
    assert found.landed == ("block2_dw", "down", "head", "mix")
    assert found.missed == ("block3_pw_relu6", "block2")  # "block2" is no scope of "block2_dw"
    assert read_back({"mix": "float"}, held).missed == ("mix",)  # 16-bit is not float
    assert read_back({"head": "int16"}, held).landed == ("head",)  # float holds more than asked
    assert found.record() == {"landed": list(found.landed), "missed": list(found.missed)}
