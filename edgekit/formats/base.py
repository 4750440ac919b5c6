"""What one output format is (``Format``) and the build options only it reads (``Option``).

A format (tflite, onnx, coreml, ...) is one folder below ``edgekit/formats/`` whose
``__init__.py`` defines ``FORMAT``: its name, the device backends that run its artifacts, the
pip extra that installs them, its KServe/Triton platform name, the suffix of a bare artifact
file, and a function returning its ``Builder``. The registry (``edgekit.formats``) finds every
folder by itself, so adding a format edits nothing else. The build side (``Builder`` and what
it reads and returns, in ``building.py``) is imported only when packaging: a device imports
``FORMAT`` and its backend, never the converters, and this module stays small because every
``python -m edgekit.run`` pays for importing it.

What a format converts from is a *form* of the model (``edgekit.conversion.forms``: a TensorFlow graph,
a float ONNX graph, a PyTorch module, ...), never the kind of file the user passed: which
source reaches which format is ``edgekit.routing.routes``'s table.

(Device profiles, the TOML files in the repository's top-level ``targets/``, are a different
thing: which format and backend a device prefers.)
"""

from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any, NamedTuple

if TYPE_CHECKING:
    from .backend import Backend
    from .building import Builder


class Option(NamedTuple):
    """A build option only one format reads: its command-line flag and its key in
    ``BuildContext.options`` (and ``PackageOptions.format_options``)."""

    name: str  # the key, e.g. "calibration_method"
    flag: str  # e.g. "--calibration-method"
    default: Any
    help: str
    choices: tuple[str, ...] = ()
    kind: type = str  # str, int or bool (a bool option is an on/off flag)
    minimum: int | None = None  # for int options
    metavar: str | None = None


EXPLAIN = "explain"  # a route's per-layer error report (--explain), beside the plan's precisions it builds


class Accepts(NamedTuple):
    """A form of the model this format converts from (``edgekit.conversion.forms``), and what its
    converter honours on it: the plan's precisions it builds per layer (``plan.FLOAT``,
    ``plan.INT16``) and ``EXPLAIN`` (``edgekit.routing.routes.ROUTE_OPTIONS`` keys)."""

    form: str
    honours: tuple[str, ...] = ()
    # ONNX op types (the vocabulary every source's description uses) the converter cannot convert
    # from this form: a model holding one is refused before any conversion starts (before loading
    # where the source can read its ops without loading: ONNX)
    cannot: tuple[str, ...] = ()
    max_inputs: int | None = None  # the most model inputs the converter takes from this form (None: any)
    # a PyTorch program's converter that can keep one traced op of a ``forward`` in float by its
    # torch.export name (``cat``), besides whole modules: a plan's op outside any module reaches it
    names_ops: bool = False
    # the layer names its converter takes on this form (``conversion.layer_names``: SCOPE, ONNX_NODE,
    # MODULE); a plan in the source's vocabulary reaches it through ``LayerNames.resolve``
    names: str = ""

    @property
    def name_kind(self) -> str:
        """``names``, or the kind its form is named in where the format declares none."""
        from ..conversion.forms import NAME_KIND

        return self.names or NAME_KIND[self.form]


class DeviceRules:
    """Which of a format's quantized builds a device runs, for a format that builds several (ONNX's
    INT8 schemes, one per CPU kind). The runtime, device profiles and benchmarks ask these rules
    and never name a build. The default: one quantized build, the format's own key."""

    default_builds: tuple = ()  # a device profile's builds of this format when it names none
    artifact_example = ""  # for --artifact's help: a build a device picks, e.g. "onnx-u8s7 on x86 without VNNI"
    builds_help = ""  # for --profile's help: the builds and the devices each is for

    def artifact_for_device(self, present: Any, facts: Any) -> "str | None":
        """The key of this format's build ``facts`` (a ``DeviceFacts``) runs among ``present``
        (keys that may run), or None: the format's own key."""
        return None

    def exact_key(self, name: str) -> str:
        """The artifact key of a name that loads one build exactly (``onnx-s8s8`` -> ``onnx``)."""
        return name

    def exact_name(self, key: str) -> str:
        """``exact_key``'s inverse: the name that loads exactly the build with this key (where the
        format's own name means this device's best build)."""
        return key

    def saturates(self, key: str, backend: str, facts: Any) -> bool:
        """Whether ``backend`` on this device runs the build ``key`` with arithmetic its verdict
        as quantized does not cover (kernels that saturate)."""
        return False

    def saturation_fix(self) -> str:
        """What to do when a build ``saturates`` here and the package has no better one."""
        return ""

    def profile_builds(self, value: Any, where: str) -> list:
        """A device profile's ``[quantization] FORMAT`` entry, checked: the builds its devices need."""
        from ..errors import EdgekitError

        raise EdgekitError(f"{where}: this format has one quantized build; [quantization] takes no entry for it")

    def describe_device(self, facts: Any) -> str:
        """What this device runs of the format, for ``edgekit profiles`` ("" when nothing to say)."""
        return ""


class Format(NamedTuple):
    """Everything edgekit knows about one output format, in one place. (A NamedTuple, and only
    the two annotations naming build-side classes are strings: the cold-start rules in
    docs/architecture.md.)"""

    name: str
    description: str
    builder: "Callable[[], Builder]"  # imports the build side only when called
    backends: "tuple[type[Backend], ...]"  # device runtimes for its artifacts, in order of preference
    extra: str  # what to install on a device to run it, e.g. "edgekit[tflite]"
    serving_platform: str  # KServe v2 / Triton "platform" of its artifacts
    bare_suffixes: tuple[str, ...] = ()  # a plain file with this suffix is runnable without a package
    options: tuple[Option, ...] = ()  # build options only this format reads
    accepts: tuple[Accepts, ...] = ()  # forms it converts from, in order of preference (edgekit.routing.routes)
    device_rules: DeviceRules = DeviceRules()  # which of its quantized builds a device runs
    # what `edgekit package` says of a built artifact from the details only this format writes
    # (its keys are the format's business: nothing outside the format reads them by name)
    notes: Callable[[Mapping[str, Any]], "tuple[BuildNote, ...]"] | None = None
    # top-level modules its converter imports beyond edgekit[package]'s, and the extra installing them:
    # a format whose converter is not installed is left out of `--format all`, and refused by name
    build_requires: tuple[str, ...] = ()
    build_extra: str = ""
    # the quantized sources it builds with their learned ranges, by scheme (``source.quantized``'s
    # format: "QDQ", "QOperator", "fake-quant"); for any other the format is refused rather than
    # quantizing the model a second time
    keeps_learned_ranges: tuple[str, ...] = ()


class BuildNote(NamedTuple):
    """One line `edgekit package` prints about an artifact: a note on stdout, a warning on stderr."""

    text: str
    warning: bool = False


def __getattr__(name: str) -> Any:
    """``Builder``, ``BuildContext`` and ``BuildResult`` live in ``building.py`` (the build side);
    importing them from here still works, at the cost of that import."""
    if name in ("Builder", "BuildContext", "BuildResult"):
        from . import building

        return getattr(building, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
