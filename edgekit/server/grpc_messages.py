"""The KServe v2 gRPC messages (``inference.GRPCInferenceService``, the Open Inference Protocol's
``grpc_predict_v2.proto``), built as protobuf descriptors in code.

Why no generated ``_pb2`` module: generated code is tied to the protobuf runtime version it was
generated for, and edgekit shares its environment with TensorFlow, coremltools and ONNX, which
move protobuf between majors. Descriptors built here work with any protobuf >= 4.21. Names and
field numbers are those of the published proto (Triton's ``grpc_service.proto`` is a superset),
so ``tritonclient.grpc`` and KServe clients talk to it unchanged; a test checks every field
against tritonclient's own descriptors.
"""

from __future__ import annotations

from functools import cache
from typing import Any

PACKAGE = "inference"
SERVICE = f"{PACKAGE}.GRPCInferenceService"

# (name, number, type, repeated, message type or None); types are FieldDescriptorProto's names
_PARAMETERS = ("parameters", "map:InferParameter")
_MESSAGES: dict[str, list[tuple]] = {
    "ServerLiveRequest": [],
    "ServerLiveResponse": [("live", 1, "bool")],
    "ServerReadyRequest": [],
    "ServerReadyResponse": [("ready", 1, "bool")],
    "ModelReadyRequest": [("name", 1, "string"), ("version", 2, "string")],
    "ModelReadyResponse": [("ready", 1, "bool")],
    "ServerMetadataRequest": [],
    "ServerMetadataResponse": [("name", 1, "string"), ("version", 2, "string"), ("extensions", 3, "string*")],
    "ModelMetadataRequest": [("name", 1, "string"), ("version", 2, "string")],
    "ModelMetadataResponse.TensorMetadata": [("name", 1, "string"), ("datatype", 2, "string"),
                                             ("shape", 3, "int64*")],
    "ModelMetadataResponse": [("name", 1, "string"), ("versions", 2, "string*"), ("platform", 3, "string"),
                              ("inputs", 4, ".ModelMetadataResponse.TensorMetadata*"),
                              ("outputs", 5, ".ModelMetadataResponse.TensorMetadata*")],
    "InferParameter": [("bool_param", 1, "bool?"), ("int64_param", 2, "int64?"), ("string_param", 3, "string?"),
                       ("double_param", 4, "double?"), ("uint64_param", 5, "uint64?")],
    "InferTensorContents": [("bool_contents", 1, "bool*"), ("int_contents", 2, "int32*"),
                            ("int64_contents", 3, "int64*"), ("uint_contents", 4, "uint32*"),
                            ("uint64_contents", 5, "uint64*"), ("fp32_contents", 6, "float*"),
                            ("fp64_contents", 7, "double*"), ("bytes_contents", 8, "bytes*")],
    "ModelInferRequest.InferInputTensor": [("name", 1, "string"), ("datatype", 2, "string"), ("shape", 3, "int64*"),
                                           (*_PARAMETERS, 4), ("contents", 5, ".InferTensorContents")],
    "ModelInferRequest.InferRequestedOutputTensor": [("name", 1, "string"), (*_PARAMETERS, 2)],
    "ModelInferRequest": [("model_name", 1, "string"), ("model_version", 2, "string"), ("id", 3, "string"),
                          (*_PARAMETERS, 4), ("inputs", 5, ".ModelInferRequest.InferInputTensor*"),
                          ("outputs", 6, ".ModelInferRequest.InferRequestedOutputTensor*"),
                          ("raw_input_contents", 7, "bytes*")],
    "ModelInferResponse.InferOutputTensor": [("name", 1, "string"), ("datatype", 2, "string"), ("shape", 3, "int64*"),
                                             (*_PARAMETERS, 4), ("contents", 5, ".InferTensorContents")],
    "ModelInferResponse": [("model_name", 1, "string"), ("model_version", 2, "string"), ("id", 3, "string"),
                           (*_PARAMETERS, 4), ("outputs", 5, ".ModelInferResponse.InferOutputTensor*"),
                           ("raw_output_contents", 6, "bytes*")],
}
# rpc name -> (request, response)
METHODS = {name: (f"{name}Request", f"{name}Response")
           for name in ("ServerLive", "ServerReady", "ModelReady", "ServerMetadata", "ModelMetadata", "ModelInfer")}


def _normalise(field: tuple) -> tuple[str, int, str]:
    """(name, number, spec) whatever way the table wrote it: parameters maps put the number last."""
    if len(field) == 3 and isinstance(field[1], int):
        return field
    name, spec, number = field
    return name, number, spec


def _file_descriptor() -> Any:
    from google.protobuf import descriptor_pb2

    FieldProto = descriptor_pb2.FieldDescriptorProto
    scalar = {"bool": FieldProto.TYPE_BOOL, "string": FieldProto.TYPE_STRING, "int64": FieldProto.TYPE_INT64,
              "uint64": FieldProto.TYPE_UINT64, "int32": FieldProto.TYPE_INT32, "uint32": FieldProto.TYPE_UINT32,
              "float": FieldProto.TYPE_FLOAT, "double": FieldProto.TYPE_DOUBLE, "bytes": FieldProto.TYPE_BYTES}
    file = descriptor_pb2.FileDescriptorProto(name="edgekit/grpc_predict_v2.proto", package=PACKAGE,
                                              syntax="proto3")
    made: dict[str, Any] = {}
    for path in sorted(_MESSAGES, key=lambda p: p.count(".")):  # a message before the ones nested in it
        fields = _MESSAGES[path]
        parent, _, leaf = path.rpartition(".")
        message = (made[parent].nested_type if parent else file.message_type).add(name=leaf)
        made[path] = message
        for field in fields:
            name, number, spec = _normalise(field)
            entry = message.field.add(name=name, number=number, json_name=_camel(name))
            entry.label = FieldProto.LABEL_REPEATED if spec.endswith("*") or spec.startswith("map:") \
                else FieldProto.LABEL_OPTIONAL
            kind = spec.rstrip("*?")
            if spec.endswith("?"):  # a member of the message's one oneof
                if not message.oneof_decl:
                    message.oneof_decl.add(name="parameter_choice")
                entry.oneof_index = 0
            if kind.startswith("map:"):  # map<string, VALUE>: a nested entry message, as protoc writes it
                entry_name = f"{_pascal(name)}Entry"
                map_entry = message.nested_type.add(name=entry_name)
                map_entry.options.map_entry = True
                map_entry.field.add(name="key", number=1, type=FieldProto.TYPE_STRING,
                                    label=FieldProto.LABEL_OPTIONAL, json_name="key")
                map_entry.field.add(name="value", number=2, type=FieldProto.TYPE_MESSAGE,
                                    label=FieldProto.LABEL_OPTIONAL, json_name="value",
                                    type_name=f".{PACKAGE}.{kind[4:]}")
                entry.type = FieldProto.TYPE_MESSAGE
                entry.type_name = f".{PACKAGE}.{path}.{entry_name}"
            elif kind.startswith("."):
                entry.type = FieldProto.TYPE_MESSAGE
                entry.type_name = f".{PACKAGE}{kind}"
            else:
                entry.type = scalar[kind]
    service = file.service.add(name="GRPCInferenceService")
    for method, (request, response) in METHODS.items():
        service.method.add(name=method, input_type=f".{PACKAGE}.{request}", output_type=f".{PACKAGE}.{response}")
    return file


def _camel(name: str) -> str:
    head, *rest = name.split("_")
    return head + "".join(part.title() for part in rest)


def _pascal(name: str) -> str:
    return "".join(part.title() for part in name.split("_"))


@cache
def messages() -> dict[str, type]:
    """Message classes by name (``"ModelInferRequest"``, ``"ModelInferRequest.InferInputTensor"``, ...)."""
    from google.protobuf import descriptor_pool, message_factory

    pool = descriptor_pool.DescriptorPool()
    pool.Add(_file_descriptor())
    return {path: message_factory.GetMessageClass(pool.FindMessageTypeByName(f"{PACKAGE}.{path}"))
            for path in _MESSAGES}
