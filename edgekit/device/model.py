"""A loaded artifact with named inputs and outputs: ``Model.predict``.

A model has N inputs and M outputs, each named in the manifest; the backend's tensors are
matched to them by name (never by position, unless there is exactly one), and a mismatch is
refused instead of guessed. What ``predict`` returns:

* a single-output model: the output array (batch axis first), as before;
* a model with several outputs: a dict ``{output name: array}`` holding every output.

``predict_all`` always returns the dict, for code that handles any model. Inputs: a
single-input model takes an image path, PIL image, array or a list of them (a batch); a model
with several inputs takes a mapping ``{input name: value}``. Images and integer arrays for an
image input get the manifest's preprocessing; float arrays are taken as preprocessed; integer
inputs that are not images (token ids, indices) are passed through unchanged.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any, NamedTuple

import numpy as np

from ..data.preprocessing import check_finite, conform, load_input
from ..errors import EdgekitError, InputError, InputRangeWarning, PackageError
from ..formats import Backend, TensorInfo
from ..manifest import Artifact, Manifest, Preprocessing, TensorSpec

if TYPE_CHECKING:
    from .devices import Profile
    from .prediction_cache import PredictionCache

RANGE_MARGIN = 0.25  # beyond the expected range by more than this fraction of its width: "far outside"
_NAN_HINT = "replace the NaN/Inf values: they have no INT8 value and the outputs would be meaningless"


class _Port(NamedTuple):
    """One model input: its manifest spec and the backend tensor it feeds."""

    spec: TensorSpec
    tensor: TensorInfo
    sample_shape: tuple[int | None, ...]
    expected: tuple[float, float, str] | None

    @property
    def preprocessing(self) -> Preprocessing | None:
        return self.spec.preprocessing

    @property
    def integer(self) -> bool:
        """Token ids, indices, byte features: integer values passed through unquantized."""
        return self.tensor.dtype.kind in "iub" and not self.tensor.quantized


class Model:
    """A loaded package artifact, ready to predict."""

    def __init__(
        self,
        root: Path,
        manifest: Manifest,
        artifact: Artifact,
        backend: Backend,
        profile: Profile,
        prediction_cache: PredictionCache | None = None,
    ) -> None:
        self.root = root
        self.manifest = manifest
        self.artifact = artifact
        self.backend = backend
        self.profile = profile
        self.prediction_cache = prediction_cache
        in_order = align([s.name for s in manifest.inputs], [t.name for t in backend.inputs], "input", artifact)
        self._ports = [_port(manifest.inputs[i], backend.inputs[j]) for j, i in enumerate(in_order)]
        # for each manifest output, the backend output holding it (``align`` maps the other way: the
        # two agree only where the reordering is its own inverse, a swap of two)
        self._out_order = in_manifest_order(
            align([s.name for s in manifest.outputs], [t.name for t in backend.outputs], "output", artifact))
        self._closed = False
        self.out_of_range_calls = 0  # predictions whose inputs lay far outside the expected range

    @property
    def labels(self) -> list[str] | None:
        return self.manifest.labels

    @property
    def input_names(self) -> list[str]:
        return [s.name for s in self.manifest.inputs]

    @property
    def output_names(self) -> list[str]:
        return [s.name for s in self.manifest.outputs]

    # --- predicting -------------------------------------------------------------------------

    def predict(self, inputs: Any, raw: bool = False) -> np.ndarray | dict[str, np.ndarray]:
        """Outputs for one input or a batch: the array of a single-output model, else a dict of
        every output by name (see the module's docstring)."""
        return self._shape_result(self.predict_all(inputs, raw))

    def predict_all(self, inputs: Any, raw: bool = False) -> dict[str, np.ndarray]:
        """Every output, by name, for any model."""
        return self._run_all(self.preprocess(inputs), raw)

    def stream(self, pairs: Mapping[str, str] | None = None, initial: Mapping[str, Any] | None = None) -> Any:
        """A ``Stream``: calls in order with each state output fed back to its input
        (``edgekit.device.streaming``); ``pairs`` names them (input -> output) where names do not."""
        from .streaming import Stream

        return Stream(self, pairs, initial)

    def zeros(self, name: str) -> np.ndarray:
        """One sample of zeros for input ``name`` (batch 1, an unknown dimension 1), in the dtype
        ``predict`` takes for it (float for a float or quantized input): a stream's initial state."""
        port = next((p for p in self._ports if p.spec.name == name), None)
        if port is None:
            raise InputError(f"{name!r} is not an input of this model ({', '.join(self.input_names)})")
        shape = [1] + [int(d) if d is not None and d > 0 else 1 for d in port.sample_shape]
        return np.zeros(shape, dtype=np.float32 if port.tensor.dtype.kind == "f" or port.tensor.quantized
                        else port.tensor.dtype)

    def predict_tensor(self, x: Any, raw: bool = False) -> np.ndarray | dict[str, np.ndarray]:
        """Outputs for preprocessed batches: an array (one input) or a mapping by input name;
        arrays already in an INT8 artifact's input dtype are fed unchanged."""
        return self._shape_result(self._run_all(x, raw))

    def preprocess(self, inputs: Any) -> Any:
        """The model-ready batch(es) ``predict`` feeds: an array for a one-input model, else a dict."""
        if isinstance(inputs, Mapping):  # by input name, whatever the number of inputs
            self.check_input_names(inputs)
            loaded = {p.spec.name: self._load(p, inputs[p.spec.name]) for p in self._ports}
            return loaded if len(self._ports) > 1 else next(iter(loaded.values()))
        if len(self._ports) == 1:
            return self._load(self._ports[0], inputs)
        if not isinstance(inputs, Mapping):
            raise InputError(f"this model has {len(self._ports)} inputs ({', '.join(self.input_names)})",
                             hint="pass a mapping {input name: value}")
        self.check_input_names(inputs)
        return {p.spec.name: self._load(p, inputs[p.spec.name]) for p in self._ports}

    def _load(self, port: _Port, value: Any) -> np.ndarray:
        if isinstance(value, (list, tuple)) and not _is_nested_numbers(value):
            if not value:
                raise InputError("no inputs given", hint="pass at least one image or array")
            return np.concatenate([self._load(port, item) for item in value])
        native = port.tensor.dtype if (port.preprocessing is None or port.integer) else None
        spec = None if port.integer else port.preprocessing
        return load_input(value, spec, port.sample_shape, native=native)

    def _run_all(self, x: Any, raw: bool) -> dict[str, np.ndarray]:
        feeds = self.check_input(x)
        found = self.cached(feeds, raw)
        if found is None:
            found = self.run_checked(feeds, raw)
            self.remember(feeds, found, raw)
        return dict(zip(self.output_names, found))

    def _shape_result(self, outputs: dict[str, np.ndarray]) -> np.ndarray | dict[str, np.ndarray]:
        return next(iter(outputs.values())) if len(outputs) == 1 else outputs

    # --- checked path (the server checks once, then batches run_checked) -------------------

    def check_input(self, x: Any) -> list[np.ndarray]:
        """One checked array per backend input (shape, dtype, NaN/Inf, range): callers that check
        once (the server) then call ``run_checked``."""
        self._check_open()
        if isinstance(x, Mapping):
            self.check_input_names(x)
            given = [x[p.spec.name] for p in self._ports]
        elif len(self._ports) == 1:
            given = [x]
        elif isinstance(x, (list, tuple)) and len(x) == len(self._ports):
            given = list(x)  # already in backend order (the server's batches)
        else:
            raise InputError(f"this model has {len(self._ports)} inputs ({', '.join(self.input_names)})",
                             hint="pass a mapping {input name: array}")
        scalar = next((p.spec.name for p in self._ports if len(p.spec.shape) == 0), None)
        if scalar is not None:  # said plainly: "different numbers of samples" would blame the data
            raise InputError(
                f"model input {scalar!r} is a scalar (rank 0): edgekit runs every input as a batch of samples on "
                "axis 0 and cannot feed a scalar",
                hint=f"package it with its value fixed (edgekit package MODEL --input {scalar}=VALUE), or re-export "
                     "the model with a batch axis on it (shape [N, 1])",
            )
        feeds = [self._check_one(port, value) for port, value in zip(self._ports, given)]
        if len({len(f) for f in feeds}) > 1:
            raise InputError(f"the inputs hold different numbers of samples ({[len(f) for f in feeds]})",
                             hint="give every input the same batch size")
        return feeds

    def _check_one(self, port: _Port, x: Any) -> np.ndarray:
        name = port.spec.name
        native = port.tensor.dtype
        if not isinstance(x, np.ndarray):
            raise InputError(f"input {name!r}: expected an array, got {type(x).__name__}",
                             hint="use predict() for images and raw pixel arrays")
        if port.integer:
            if x.dtype.kind == "f" and (not np.isfinite(x).all() or np.any(np.rint(x) != x)):
                raise InputError(f"input {name!r} takes {native} values (token ids, indices); got fractional floats",
                                 hint=f"pass integer arrays for {name!r}")
            return conform(x, port.sample_shape, f"input {name!r}").astype(native, copy=False)
        if x.dtype.kind != "f" and x.dtype != native:
            raise InputError(
                f"input {name!r}: expected a float32 (or {native}) array, got {x.dtype}",
                hint="use predict() for images and raw pixel arrays",
            )
        x = conform(x, port.sample_shape, f"input {name!r}")
        if x.dtype != native or x.dtype.kind == "f":
            self._check_values(port, x)
        return x if x.dtype == native else x.astype(np.float32, copy=False)

    def run_checked(self, feeds: list[np.ndarray], raw: bool = False) -> list[np.ndarray]:
        """Every output, in manifest order, for batches that passed ``check_input``."""
        self._check_open()
        outputs = self.backend.run(feeds, raw=raw)
        return [outputs[j] for j in self._out_order]

    def _check_open(self) -> None:
        if self._closed:
            raise EdgekitError(f"model {self.manifest.name!r} was closed", hint="load it again with edgekit.load()")

    def check_input_names(self, given: Mapping[str, Any]) -> None:
        """The names given are exactly the model's inputs; a fixed (packaged-in) input is named as such."""
        missing = [n for n in self.input_names if n not in given]
        extra = [n for n in given if n not in self.input_names]
        fixed = self.manifest.source.get("fixed_inputs") or {}
        folded = [n for n in extra if n in fixed]
        if folded:  # packaged with --input NAME=VALUE: the value is inside every artifact
            name = folded[0]
            value = fixed[name].get("value", fixed[name].get("file"))
            raise InputError(f"input {name!r} was fixed to {value:g} when this package was made (edgekit package "
                             f"--input {name}=...); it is part of the model now" if isinstance(value, float) else
                             f"input {name!r} was fixed to the tensor in {value} when this package was made; it is "
                             "part of the model now",
                             hint=f"pass only {self.input_names}; to use another value, package the model again with "
                                  f"--input {name}=VALUE")
        if missing or extra:
            raise InputError(
                f"inputs {sorted(given)} do not match the model's inputs {self.input_names}"
                + (f" (missing {missing})" if missing else "") + (f" (unknown {extra})" if extra else ""),
                hint="pass one value per model input, by name",
            )

    # --- prediction cache -------------------------------------------------------------------

    def cached(self, feeds: list[np.ndarray], raw: bool = False) -> list[np.ndarray] | None:
        """Outputs remembered for exactly these inputs (None without a prediction cache, or on a miss)."""
        if self.prediction_cache is None:
            return None
        return self.prediction_cache.get(self._cache_key(feeds, raw))

    def remember(self, feeds: list[np.ndarray], outputs: list[np.ndarray], raw: bool = False) -> None:
        if self.prediction_cache is not None:
            self.prediction_cache.put(self._cache_key(feeds, raw), outputs)

    def _cache_key(self, feeds: list[np.ndarray], raw: bool) -> str:
        assert self.prediction_cache is not None
        return self.prediction_cache.key(f"{self.artifact.sha256}:{raw}", feeds)

    # --- the range check --------------------------------------------------------------------

    def _check_values(self, port: _Port, x: np.ndarray) -> None:
        """NaN/Inf are refused; values far outside the expected range are said out loud (one pass each)."""
        name = "input" if len(self._ports) == 1 else f"input {port.spec.name!r}"
        if not x.size:
            raise InputError(f"{name} is empty", hint="pass at least one sample")
        low, high = float(x.min()), float(x.max())
        if not (math.isfinite(low) and math.isfinite(high)):
            check_finite(x, name, error=InputError, hint=_NAN_HINT)
        if port.expected is None:
            return
        lo, hi, origin = port.expected
        margin = RANGE_MARGIN * max(hi - lo, 1e-6)
        if low >= lo - margin and high <= hi + margin:
            return
        self.out_of_range_calls += 1
        if self.out_of_range_calls > 1:
            return  # said once per loaded model; out_of_range_calls keeps counting
        import warnings

        warnings.warn(InputRangeWarning(
            f"{name} values range {low:.4g}..{high:.4g} but {self.manifest.name!r} expects about {lo:.4g}..{hi:.4g} "
            f"({origin}); outputs for inputs this far outside are unreliable. "
            + _range_advice(port.preprocessing, x, low, high, hi)
        ), stacklevel=4)

    def close(self) -> None:
        self._closed = True
        self.backend.close()
        if self.prediction_cache is not None:
            self.prediction_cache.close()

    def __enter__(self) -> Model:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def align(wanted: list[str], found: list[str], what: str, artifact: Artifact) -> list[int]:
    """For each of the artifact's tensors, the index of the manifest tensor with its name.

    One tensor on each side needs no names; otherwise every name must match, or the package is
    refused: feeding or reporting tensors in a guessed order would be a silent wrong answer.
    """
    if len(wanted) == len(found) == 1:
        return [0]
    if sorted(wanted) != sorted(found):
        raise PackageError(
            f"the {artifact.format} artifact's {what}s {found} do not match the manifest's {wanted}",
            hint="rebuild the package with this edgekit version",
        )
    return [wanted.index(name) for name in found]


def in_manifest_order(order: list[int]) -> list[int]:
    """``align``'s result (for each artifact tensor, its manifest index) turned around: for each
    manifest tensor, the index of the artifact tensor that holds it."""
    found = [0] * len(order)
    for j, i in enumerate(order):
        found[i] = j
    return found


def _port(spec: TensorSpec, tensor: TensorInfo) -> _Port:
    shape = tuple(None if d == -1 else d for d in spec.shape[1:])
    return _Port(spec, tensor, shape, expected_range(spec, tensor))


def expected_range(spec: TensorSpec, info: TensorInfo) -> tuple[float, float, str] | None:
    """The input range the model was calibrated on: the manifest's record, else what an INT8
    input tensor can represent (bare .tflite files), else unknown."""
    if spec.range is not None:
        return float(spec.range[0]), float(spec.range[1]), "the range of its calibration data"
    if info.quantized:
        limits = np.iinfo(info.dtype)
        low, high = (limits.min - info.zero_point) * info.scale, (limits.max - info.zero_point) * info.scale
        return float(low), float(high), f"what its {info.dtype} input quantization represents"
    return None


def _range_advice(pre: Preprocessing | None, x: np.ndarray, low: float, high: float, hi: float) -> str:
    """What to do about an input far outside its range: the pixel advice only for pixel-like
    values (whole numbers 0..255), never for a spectrogram or features."""
    if pre is None or not pre.resize:
        sample = x.reshape(-1)[:: max(1, x.size // 100_000)]
        pixels = high > 2 * max(abs(hi), 1.0) and high <= 255 and low >= 0 and np.mean(sample == np.rint(sample)) >= 0.99
        if pixels and pre is None:
            return "Raw 0..255 pixels? Normalize them as the model was trained (e.g. x / 255), or package the model."
        if pre is None:
            return "Preprocess the input as the model was trained."
        return (f"The package feeds this input as {describe_preprocessing(pre)}: pass values preprocessed as the "
                "calibration data was (the same features, units and scale).")
    return (f"The package's preprocessing is {describe_preprocessing(pre)}; pass images or raw uint8 arrays and "
            "edgekit applies it, or pass float arrays already preprocessed that way.")


def describe_preprocessing(pre: Preprocessing) -> str:
    return f"x * {pre.scale:.6g}, minus mean {pre.mean}, divided by std {pre.std}"


def _is_nested_numbers(value: list | tuple) -> bool:
    """A nested list of numbers is one array (a JSON-like literal), not a list of inputs."""
    first = value[0] if value else None
    while isinstance(first, (list, tuple)):
        first = first[0] if first else None
    return isinstance(first, (int, float, np.number)) and not isinstance(first, bool)
