"""PyTorch sources (build side): a ``torch.export`` program (``.pt2``), a TorchScript file
(``.pt``/``.pth``/``.ts``) or ``path/to/file.py:factory`` (a function returning an ``nn.Module``
with its weights).

``prepare`` (a converter child: it imports torch) loads the model, runs it once on an example
input to learn its outputs, and exports ONNX with a dynamic batch dimension: the dynamo exporter
where it works, the TorchScript exporter otherwise (which one is recorded). Formats convert from
that ONNX file. The float reference is the PyTorch model itself, never a conversion of it.

Example input shapes come from the program (``.pt2``), ``--input-shape NAME=...`` or the
calibration arrays; signed integer calibration arrays (token ids) give ``int64`` example inputs,
unsigned ones are pixels and give float inputs.
"""

from __future__ import annotations

import importlib.util
import inspect
import re
import zipfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from ..conversion import forms
from ..errors import ModelSourceError
from ..conversion.forms import ModelForm, flatten_outputs
from .base import Source, first_line

FACTORY = re.compile(r"^(?P<file>.+\.py):(?P<function>[A-Za-z_]\w*)$")
TORCHSCRIPT_SUFFIXES = (".pt", ".pth", ".ts", ".torchscript")
EXAMPLE_BATCH = 2  # the batch dimension is exported dynamic; 2 keeps exporters from specializing it to 1


def detect(model: Path) -> str | None:
    text = str(model)
    if FACTORY.match(text):
        return "torch_factory"
    suffix = model.suffix.lower()
    if suffix == ".pt2":
        if not zipfile.is_zipfile(model):
            raise ModelSourceError(f"{model} is not a torch.export program (a .pt2 file is a zip archive)",
                                   hint="save it with torch.export.save(torch.export.export(model, args), 'model.pt2')")
        return "torch_export"
    if suffix in TORCHSCRIPT_SUFFIXES:
        if not zipfile.is_zipfile(model):
            raise ModelSourceError(
                f"{model} is not a TorchScript file (a pickled state_dict or model cannot be loaded without its code)",
                hint="save it with torch.jit.save(torch.jit.trace(model, example), 'model.pt'), or pass "
                     "path/to/file.py:factory where factory() returns the nn.Module with its weights",
            )
        return "torchscript"
    return None


# --- child-process side -------------------------------------------------------------------


def prepare(model_path: str, kind: str, export_dir: str, hints: dict[str, Any] | None = None) -> dict[str, Any]:
    """Load the PyTorch model, learn its inputs and outputs, export float ONNX next to ``export_dir``."""
    import torch

    hints = hints or {}
    from .base import refuse_batch_axes

    refuse_batch_axes(hints, "PyTorch")
    fixed = hints.get("fixed_inputs") or {}
    module, names, program = _load(model_path, kind, fixed=fixed)
    static = _static_batch(program)
    # a program exported with a fixed batch (torch.export's default) keeps it: its graph may bake
    # the batch into reshapes; the runtime runs bigger batches in slices of it, as for TFLite
    example = _example_inputs(names, program, {} if static else hints)
    with torch.no_grad():
        produced = module(*example)
    outputs = _output_names(produced)
    onnx_path = str(Path(export_dir).with_name("torch_export.onnx"))
    # with fixed inputs the wrapper is exported (its constants inside), not the program itself
    exporter = _export_onnx(program if program is not None and not fixed else module, example, names, outputs,
                            onnx_path, static_batch=static is not None)
    from .onnx import describe_onnx

    info = describe_onnx(onnx_path)
    info.update({
        "torch_kind": kind,
        "source_model": model_path,
        "recorded": {"torch": torch.__version__, "onnx_exporter": exporter},
    })
    if info.get("quantized"):  # QAT (fake-quant modules, a PT2E program): exported as QDQ, its scheme recorded
        info["recorded"]["quantized"] = info["quantized"]
    # each output's layer: the exported graph's node writing it (``describe_onnx``), the name the
    # ONNX route keeps float and the op TFLite's converters write that output with; an output
    # the graph passes through from an input is its own layer
    info["output_layers"] = {name: info.get("output_layers", {}).get(name) or name for name in outputs}
    if fixed:
        from .fixed_inputs import record

        info["recorded"]["fixed_inputs"] = record(fixed)
        info["torch_fixed_inputs"] = fixed
    loadable = {"kind": kind, "fixed": fixed or None}
    info["forms"] = {form: ModelForm(form, model_path, loader=LOADER, arguments=loadable).to_dict()
                     for form in SOURCE.provides[kind] if form != forms.ONNX_GRAPH}
    # the ONNX export has the fixed inputs as constants already
    info["forms"][forms.ONNX_GRAPH] = ModelForm(forms.ONNX_GRAPH, onnx_path, via=exporter.split(",")[0]).to_dict()
    return info


LOADER = f"{__name__}:load_module"


def load_module(model_path: str, example: dict[str, Any] | None = None, kind: str = "",
                fixed: dict[str, Any] | None = None, submodules: bool = False) -> tuple[Any, list[str]]:
    """The loader of this source's PyTorch forms (``edgekit.conversion.forms.load_module``): the module in
    eval mode, wrapped so that ``fixed`` inputs get their values, and its other input names
    (``example`` is part of the loaders' protocol; a PyTorch model needs none to load).
    ``submodules``: a ``torch.export`` program keeps its submodules (``_with_submodules``)."""
    module, names, _ = _load(model_path, kind, fixed=fixed, submodules=submodules)
    return module, names


def float_reference(prepared: dict[str, Any], inputs_npz: str, output_npz: str, batch_size: int = 64) -> None:
    """Every output of the PyTorch model itself on ``inputs_npz``, saved by output name."""
    import numpy as np
    import torch

    module, names, program = _load(prepared["source_model"], prepared["torch_kind"],
                                   fixed=prepared.get("torch_fixed_inputs"))
    static = _static_batch(program)
    batch_size = static or batch_size
    outputs = [o["name"] for o in prepared["outputs"]]
    with np.load(inputs_npz) as stored:
        inputs = {name: stored[name] for name in stored.files}
    total = len(next(iter(inputs.values())))
    chunks: dict[str, list[Any]] = {name: [] for name in outputs}
    with torch.no_grad():
        for start in range(0, total, batch_size):
            parts = [inputs[n][start : start + batch_size] for n in names]
            rows = len(parts[0])
            if static and rows < static:  # a fixed-batch program: the last slice padded, the padding dropped
                parts = [np.concatenate([p, np.repeat(p[-1:], static - rows, axis=0)]) for p in parts]
            args = [torch.from_numpy(np.ascontiguousarray(p)) for p in parts]
            produced = flatten_outputs(module(*args))
            for name, value in zip(outputs, produced):
                chunks[name].append(value.detach().float().numpy()[:rows])
    np.savez(output_npz, **{name: np.concatenate(parts) for name, parts in chunks.items()})


def _load(model_path: str, kind: str, fixed: dict[str, Any] | None = None,
          submodules: bool = False) -> tuple[Any, list[str], Any]:
    """The callable model, its input names, and the torch.export program when there is one.
    ``fixed`` (``--input NAME=VALUE``) wraps the model so those inputs get their values; the names
    returned are the others. (An ONNX graph becomes a module through ``onnx_torch.load_module``.)"""
    module, names, program = _load_model(model_path, kind, submodules)
    if not fixed:
        return module, names, program
    from .fixed_inputs import torch_fixed

    wrapped, kept = torch_fixed(module, names, program, fixed,
                                {n: s["given_shape"] for n, s in fixed.items() if "given_shape" in s})
    return wrapped, kept, program


def _with_submodules(program: Any) -> Any:
    """The program as a module that keeps the model's submodules (``torch.export.unflatten``):
    converters that name ops by the module that computed them (litert-torch) then name layers
    (``conv1``, ``act1``), not the whole model. Only where asked: re-exported, it lowers some ops
    differently (coremltools then sees an LSTM unrolled). ``program.module()`` (one flat graph) where the
    program does not unflatten."""
    import torch

    try:
        return torch.export.unflatten(program)
    except Exception:  # noqa: BLE001 - any program runs flat; only its layer names are coarser
        return program.module()


def _load_model(model_path: str, kind: str, submodules: bool = False) -> tuple[Any, list[str], Any]:
    import torch

    try:
        if kind == "torch_export":
            _register_quantized_ops()
            with _weights_only_unpickling(model_path):
                program = torch.export.load(model_path)
            names = [str(n) for n in program.graph_signature.user_inputs]
            return (_with_submodules(program) if submodules else program.module()), names, program
        if kind == "torchscript":
            module = torch.jit.load(model_path, map_location="cpu").eval()
            names = [a.name for a in module.forward.schema.arguments[1:]]  # [0] is self
            return module, names, None
        match = FACTORY.match(model_path)
        assert match is not None
        module = _call_factory(match["file"], match["function"])
        names = [p.name for p in inspect.signature(module.forward).parameters.values()
                 if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)]
        return module, names, None
    except ModelSourceError:
        raise
    except Exception as exc:
        raise ModelSourceError(f"cannot load {model_path} as a PyTorch model: {type(exc).__name__}: {first_line(exc)}",
                               hint="save a torch.export program (.pt2), a TorchScript file, or pass "
                                    "path/to/file.py:factory") from None


def _register_quantized_ops() -> None:
    """A program quantized with PT2E (``convert_pt2e``, QAT or not) calls the
    ``quantized_decomposed`` quantize/dequantize ops, which ``torch.export.load`` resolves only
    once their library is registered: PyTorch registers it on import of this module."""
    try:
        import torch.ao.quantization.fx._decomposed  # noqa: F401 - registers quantized_decomposed
    except ImportError:  # a PyTorch without it: such a program fails to load, named by the loader
        pass


@contextmanager
def _weights_only_unpickling(model_path: str) -> Iterator[None]:
    """Load a ``.pt2`` without running code from it: every pickle inside (weights, constants,
    sample inputs) is read by PyTorch's restricted ``weights_only`` unpickler, and plain pickled
    Python objects are refused. ``torch.export.load`` itself falls back to the full unpickler
    (``weights_only=False``) when the restricted one fails, which runs whatever a tampered
    archive's ``__reduce__`` names."""
    import pickle

    import torch

    original_load = torch.load

    def restricted_load(*args: Any, **kwargs: Any) -> Any:
        kwargs["weights_only"] = True
        try:
            return original_load(*args, **kwargs)
        except pickle.UnpicklingError as exc:
            raise ModelSourceError(
                f"{model_path} holds pickled Python objects that could run code when loaded; edgekit loads only "
                f"tensors and plain values from a .pt2 ({first_line(exc)})",
                hint="re-save it from the model's own code with torch.export.save (tensors only), or pass "
                     "path/to/file.py:factory if you trust that code",
            ) from None

    def refuse(*args: Any, **kwargs: Any) -> Any:
        raise ModelSourceError(f"{model_path} holds a pickled Python object among its constants; edgekit does not "
                               "unpickle objects from model files (that can run code)",
                               hint="pass path/to/file.py:factory if you trust the model's code")

    from torch.export.pt2_archive import _package

    original_pickle = _package.pickle
    shim = type("RestrictedPickle", (), {"loads": staticmethod(refuse), "load": staticmethod(refuse),
                                         "dumps": pickle.dumps, "dump": pickle.dump})
    torch.load, _package.pickle = restricted_load, shim  # type: ignore[assignment]
    try:
        yield
    finally:
        torch.load, _package.pickle = original_load, original_pickle  # type: ignore[assignment]


def _call_factory(file: str, function: str) -> Any:
    import torch

    path = Path(file)
    if not path.is_file():
        raise ModelSourceError(f"model factory file {file} does not exist", hint="pass path/to/file.py:factory")
    spec = importlib.util.spec_from_file_location(f"edgekit_model_{path.stem}", path)
    assert spec is not None and spec.loader is not None
    code = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(code)
    factory = getattr(code, function, None)
    if not callable(factory):
        raise ModelSourceError(f"{file} has no function {function!r}", hint="define def factory() -> nn.Module")
    module = factory()
    if not isinstance(module, torch.nn.Module):
        raise ModelSourceError(f"{file}:{function}() returned {type(module).__name__}, not a torch.nn.Module",
                               hint="return the model with its weights loaded")
    return frozen_fake_quant(module.eval())


def frozen_fake_quant(module: Any) -> Any:
    """A module trained with eager-mode QAT, its learned ranges frozen: each fake-quant module's
    observer is disabled (enabled, every input run through the model would move the ranges,
    even in eval mode, and the reference would drift as it is measured), and the fused
    observer-and-fake-quant modules of PyTorch's default QAT configs compute the plain fake-quant
    op their ranges specify (the fused op has no ONNX export). A float module is returned as it is."""
    import types

    from torch.ao.quantization import FakeQuantize, FakeQuantizeBase
    from torch.ao.quantization.fake_quantize import FusedMovingAvgObsFakeQuantize

    for child in module.modules():
        if isinstance(child, FakeQuantizeBase):
            child.disable_observer()
        if isinstance(child, FusedMovingAvgObsFakeQuantize):
            child.forward = types.MethodType(FakeQuantize.forward, child)
    return module


def _example_inputs(names: list[str], program: Any, hints: dict[str, Any]) -> list[Any]:
    """One example tensor per input: --input-shape, else the calibration arrays' sample shape
    (batch EXAMPLE_BATCH), else the program's own shapes."""
    import torch

    shapes: dict[str, list[int]] = dict(hints.get("input_shapes") or {})
    samples: dict[str, list[int]] = dict(hints.get("sample_shapes") or {})
    dtypes: dict[str, str] = dict(hints.get("sample_dtypes") or {})
    if "" in samples and len(names) == 1:
        samples[names[0]] = samples.pop("")
        if "" in dtypes:
            dtypes[names[0]] = dtypes.pop("")
    found = []
    for name in names:
        if name in shapes:
            shape = list(shapes[name])
        elif name in samples:
            shape = [EXAMPLE_BATCH, *samples[name]]
        elif program is not None:
            shape = _program_shape(program, name)
        else:
            raise ModelSourceError(
                f"the PyTorch model's input {name!r} has no known shape",
                hint=f"pass --input-shape {name}=2x3x224x224 (any batch size), or calibrate with arrays "
                     "(.npy/.npz) whose samples have the model's shape",
            )
        integer = dtypes.get(name, "float32").startswith("int")  # token ids; uint8/uint16 are pixels
        found.append(torch.zeros(shape, dtype=torch.int64) if integer else torch.rand(shape))
    return found


def _static_batch(program: Any) -> int | None:
    """The batch size a torch.export program was exported with, when its first dimension is
    fixed (``torch.export.export(model, (x,))`` without ``dynamic_shapes``); None when dynamic."""
    if program is None:
        return None
    user = {str(u) for u in program.graph_signature.user_inputs}
    dims = [node.meta["val"].shape[0] for node in program.graph.nodes
            if node.op == "placeholder" and node.name in user and getattr(node.meta.get("val"), "ndim", 0) > 0]
    if dims and all(isinstance(d, int) for d in dims):
        return int(dims[0])
    return None


def _program_shape(program: Any, name: str) -> list[int]:
    value = next(n for n in program.graph.nodes if n.op == "placeholder" and n.name == name).meta.get("val")
    return [int(d) if isinstance(d, int) else EXAMPLE_BATCH for d in value.shape]


def _output_names(produced: Any) -> list[str]:
    """``output`` for one tensor, ``output_N`` for a tuple or list, the keys of a dict."""
    if isinstance(produced, dict):
        return [str(k) for k in produced]
    flat = flatten_outputs(produced)
    return ["output"] if len(flat) == 1 and not isinstance(produced, (list, tuple)) else \
        [f"output_{i}" for i in range(len(flat))]


def _export_onnx(model: Any, example: list[Any], inputs: list[str], outputs: list[str], path: str,
                 static_batch: bool = False) -> str:
    """ONNX with a dynamic batch dimension (a fixed-batch program keeps its batch): the dynamo
    exporter, else the TorchScript exporter."""
    import torch

    first_error = ""
    scripted = isinstance(model, torch.nn.Module) and any(isinstance(m, torch.jit.ScriptModule) for m in model.modules())
    if not scripted:
        try:
            batch = torch.export.Dim("batch", min=1, max=4096)
            fixed_batch = static_batch or isinstance(model, torch.export.ExportedProgram)
            dynamic = None if fixed_batch else tuple({0: batch} for _ in example)
            torch.onnx.export(model, tuple(example), path, dynamo=True, input_names=inputs, output_names=outputs,
                              dynamic_shapes=dynamic, verbose=False)
            return f"torch.onnx.export(dynamo=True), torch {torch.__version__}"
        except Exception as exc:  # not every model exports with dynamo: fall back, keep the reason
            first_error = f"{type(exc).__name__}: {first_line(exc)}"[:300]
    module = model.module() if isinstance(model, torch.export.ExportedProgram) else model
    if scripted and not isinstance(module, torch.jit.ScriptModule):
        # a wrapper around a TorchScript model (--input NAME=VALUE): the exporter cannot trace into a
        # ScriptModule it did not start from, so the wrapper is traced first
        module = torch.jit.trace(module, tuple(example), check_trace=False)
    static = static_batch or (isinstance(model, torch.export.ExportedProgram) and _static_batch(model) is not None)
    try:
        torch.onnx.export(module, tuple(example), path, dynamo=False, opset_version=17, input_names=inputs,
                          output_names=outputs,
                          dynamic_axes=None if static else {n: {0: "batch"} for n in inputs + outputs})
    except Exception as exc:
        raise ModelSourceError(
            f"PyTorch could not export the model to ONNX: {type(exc).__name__}: {first_line(exc)}"
            + (f" (the dynamo exporter failed first: {first_error})" if first_error else ""),
            hint="check that the model runs in eval mode on the example shape; see torch.onnx's documentation",
        ) from None
    reason = f" (dynamo exporter failed: {first_error})" if first_error else ""
    return f"torch.onnx.export(dynamo=False), torch {torch.__version__}{reason}"


SOURCE = Source(
    name="torch",
    accepts=".pt2 (torch.export), a TorchScript .pt, or file.py:factory",
    detect=detect,
    prepare=prepare,
    float_reference=float_reference,
    # torch.export cannot export a ScriptModule: TorchScript reaches litert-torch through its ONNX export
    provides={"torch_export": (forms.TORCH_PROGRAM, forms.TORCH_MODULE, forms.ONNX_GRAPH),
              "torch_factory": (forms.TORCH_PROGRAM, forms.TORCH_MODULE, forms.ONNX_GRAPH),
              "torchscript": (forms.TORCH_MODULE, forms.ONNX_GRAPH)},
    runs_code={
        "torch_factory": "runs that file's Python code (the factory and everything it imports) to build the model",
        "torchscript": "runs the TorchScript code saved in it (TorchScript operators, not arbitrary Python)",
    },
)
