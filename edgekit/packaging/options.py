"""What ``edgekit package`` is asked to do (``PackageOptions``) and what it made (``PackageResult``).

Every option is declared once, as its field (``declared``): the field's name is the Python
keyword, and its ``Declared`` record gives the command-line flag (and its other spellings), the
help (and so the command reference), how its text is read, the range a number must be in
(checked for the flag and the keyword alike) and the part of ``edgekit package --help`` it is
listed in. An option several flags make (the precision plan: ``--keep-float``,
``--int16-activations``, ``--precision-plan``) declares each as a ``Flag`` and how they combine
(``option_forms.py``). The CLI adds the flags and passes them on by reading the declarations: a
new option is one field and its reader. A field only Python passes says so (``python_only``).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping
from dataclasses import MISSING, Field, dataclass, field, fields
from pathlib import Path
from typing import Any, NamedTuple

from ..manifest import FailedFormat, Manifest
from ..comparison.metrics import OutputComparison
from ..conversion.worker import DEFAULT_STEP_TIMEOUT_S
from ..formats.plan import PrecisionPlan
from . import option_forms as forms


class Flag(NamedTuple):
    """One command-line flag of an option several flags make: its spellings, its part of the
    value (``key``, what ``Declared.combine`` reads), and how its text is read."""

    names: tuple[str, ...]
    key: str
    help: str | Callable[[], str]
    parse: Callable[[str], Any] | None = None
    repeat: bool = False  # given once per value (--keep-float a --keep-float b)
    choices: tuple[str, ...] | None = None
    metavar: str | None = None
    switch: bool = False  # a flag that takes no value: True when given


class Declared(NamedTuple):
    """How a packaging option reaches the command line (``PackageOptions``' field metadata)."""

    flag: str
    help: str | Callable[[], str]  # a callable: help naming what is registered (formats, kinds)
    group: str  # which part of `edgekit package --help`: formats, data, gates, output, input, build
    low: float | None = None  # a number's range, both ends included (None: not a number)
    high: float | None = None
    whole: bool = False  # a whole number
    metavar: str | None = None
    negatable: bool = False  # an on/off option with a --no- form (on by default, or None: decided later)
    show_default: bool = True  # the help names the default
    aliases: tuple[str, ...] = ()  # its other spellings (-c, -o)
    parse: Callable[[str], Any] | None = None  # how its text is read (None: as text)
    repeat: bool = False  # given once per value; ``combine`` makes the field's value of the list
    choices: tuple[str, ...] | Callable[[], tuple[str, ...]] | None = None
    required: bool = False
    flags: tuple[Flag, ...] = ()  # several flags make its value (``flag`` is the first of them)
    combine: Callable[[Mapping[str, Any]], Any] | None = None  # the flags' values (by Flag.key, "" alone) -> value

    def parts(self) -> tuple[Flag, ...]:
        """Its flags: the declared ones, or its one flag."""
        if self.flags:
            return self.flags
        return (Flag((self.flag, *self.aliases), "", self.help, self.parse, self.repeat,
                     self.choices() if callable(self.choices) else self.choices, self.metavar),)

    def value(self, given: Mapping[str, Any]) -> Any:
        """The field's value from its flags' values (by ``Flag.key``)."""
        return self.combine(given) if self.combine is not None else given[""]


def declared(default: Any, flag: str, help: str | Callable[[], str], group: str, *,
             default_factory: Callable[[], Any] | None = None, **how: Any) -> Any:
    """A ``PackageOptions`` field declared with its flag, help and range (``Declared``);
    ``default`` ``MISSING``: a required option."""
    metadata = {"declared": Declared(flag, help, group, **how)}
    if default_factory is not None:
        return field(default_factory=default_factory, metadata=metadata)
    if default is MISSING:
        return field(metadata=metadata)
    return field(default=default, metadata=metadata)


def declared_by(default_factory: Callable[[], Any], group: str, combine: Callable[[Mapping[str, Any]], Any],
                *flags: Flag) -> Any:
    """A ``PackageOptions`` field several flags make (each a ``Flag``), and how they combine."""
    first = flags[0]
    return field(default_factory=default_factory, metadata={"declared": Declared(
        first.names[0], first.help, group, flags=flags, combine=combine)})


def python_only(default: Any = None, why: str = "", default_factory: Callable[[], Any] | None = None) -> Any:
    """A field only the Python API passes (no flag), with why."""
    if default_factory is not None:
        return field(default_factory=default_factory, metadata={"python_only": why})
    return field(default=default, metadata={"python_only": why})


def declarations(group: str | None = None) -> Iterator[tuple[Field[Any], Declared]]:
    """Every declared option (in one help group), in field order."""
    for found in fields(PackageOptions):
        declaration = found.metadata.get("declared")
        if declaration is not None and (group is None or declaration.group == group):
            yield found, declaration


def _format_names() -> tuple[str, ...]:
    from ..formats import FORMATS

    return tuple(FORMATS)


def _kind_names() -> str:
    from ..kinds import kind_names

    return kind_names()


def _builds_help() -> str:
    from ..formats import FORMATS

    return "; ".join(h for f in FORMATS.values() if (h := f.device_rules.builds_help))


@dataclass(frozen=True)
class PackageOptions:
    """What ``edgekit package`` is asked to do; frozen: every stage reads the same request.
    Each format's own options are in ``format_options`` (``edgekit.formats.Format.options``)."""

    model: str = python_only(MISSING, "the command line's positional MODEL")
    calibration: str = declared(
        MISSING, "--calibration", "representative data: image folder (class sub-folders give labels), .npy/.npz "
        "(x, y), or module:function / file.py:function returning arrays", "data", aliases=("-c",), required=True,
        metavar="DATA")
    output_dir: str = declared(MISSING, "--output", "directory that receives NAME.edgekit/ (and NAME.ekpkg with "
                               "--archive)", "output", aliases=("-o",), required=True)
    # default [formats.DEFAULT_FORMAT]; "all" for every registered format
    formats: list[str] | None = declared(
        None, "--format", lambda: f"output format: {', '.join(_format_names())}; repeat for several, or 'all' "
        "(default: tflite; --target is its former name)", "formats", aliases=("-f", "-t", "--target"), repeat=True,
        choices=lambda: (*_format_names(), "all"), metavar="FORMAT", combine=forms.formats)
    eval: str | None = declared(None, "--eval", "held-out data to validate on (same forms; default: hold out 20%% of "
                                "--calibration)", "data", metavar="DATA", show_default=False)
    name: str | None = declared(None, "--name", "package name (default: the model file's name)", "output",
                                show_default=False)
    samples: int = declared(300, "--samples", "calibration samples to use (seeded choice)", "data", low=1,
                            high=10_000_000, whole=True)
    eval_samples: int | None = declared(None, "--eval-samples", "validate on at most this many samples", "data", low=1,
                                        high=10_000_000, whole=True, metavar="EVAL_SAMPLES", show_default=False)
    seed: int = declared(0, "--seed", "seed for sample selection", "data", low=0, high=2**32 - 1, whole=True)
    max_accuracy_drop: float = declared(1.0, "--max-accuracy-drop", "largest INT8 accuracy drop (percentage points) "
                                        "before packaging fails", "gates", low=0, high=100, metavar="PP")
    allow_accuracy_drop: bool = declared(False, "--allow-accuracy-drop", "keep the package even if a validation gate "
                                         "fails (recorded as failed in the manifest)", "gates")
    min_sqnr_db: float = declared(20.0, "--min-sqnr", "SQNR floor for every values output, and for each quantity "
                                  "joined into one output", "gates", low=0, high=200, metavar="DB")
    float_reference: str | None = declared(
        None, "--float-reference", "for a quantized model (QAT, a QDQ graph): the float model it was trained or "
        "quantized from (any source kind, the same input and output names); every artifact is judged against it "
        "too, by the same gates, and the quantized model itself is measured against it", "gates", metavar="MODEL",
        show_default=False)
    # output name ("" = the only one) -> kind
    output_kinds: dict[str, str] = declared(
        None, "--output-kind", lambda: "judge an output by this task instead of the kind inferred from the graph and "
        f"values (printed before building): {_kind_names()} (repeatable)", "gates", default_factory=dict,
        repeat=True, metavar="[OUTPUT=]KIND", combine=forms.output_kinds)
    metric: str | None = declared(None, "--metric", "your metric: called with (float_outputs, int8_outputs, labels), "
                                  "returns named numbers and optionally passed=True/False, which then decides the gate",
                                  "gates", metavar="MODULE:FUNCTION", show_default=False)
    # when a format fails its gates, search for a configuration that passes (the fixes its failures
    # name, then per-layer precision: packaging/search/); False: plain PTQ, a hard failure
    auto_fix: bool = declared(True, "--auto-fix", "when a format fails a gate, search for a build that passes: the "
                              "fixes the failure names (--reduce-range, percentile calibration, --keep-float of a "
                              "joining node), then the layers that cost the failing gate most at 16-bit activations "
                              "or float; judged on half the held-out samples, confirmed on the other half, recorded "
                              "in the manifest (default: on; --no-auto-fix: plain INT8, fail if a gate fails)",
                              "gates", negatable=True, show_default=False)
    # the search runs once per model on the INT8 simulation and every format builds its plan first
    # (packaging/simulation/); False: each format searches on its own artifacts alone
    simulate: bool = declared(True, "--simulate", "search the precision plan once per model on an INT8 simulation "
                              "(the float ONNX graph with the formats' int8 grid, a try one forward pass), then build "
                              "every format with that plan, each judged on its own artifact (default: on; "
                              "--no-simulate: each format searches on its own artifacts)", "gates", negatable=True,
                              show_default=False)
    # where plain INT8 fails in the simulation, its float graph equalized across layers first (a repair
    # that keeps every layer int8: simulation/equalize.py); False: the layer search alone
    equalize: bool = declared(True, "--equalize", "where plain INT8 fails in the simulation, try cross-layer "
                              "equalization first (convolution pairs rescaled, the float function unchanged; every "
                              "layer stays int8) and build it on every format whose model takes the scales exactly (default: on; "
                              "--no-equalize: the layer search alone)", "gates", negatable=True, show_default=False)
    # seconds for one format's whole search, its rebuild included; None: counted in builds (search/budget.py)
    search_budget_s: float | None = declared(
        None, "--search-budget", "seconds for one format's whole search, the rebuild of the plan it keeps included; a "
        "try starts only when the time left covers it (default: counted in builds, 16 per format, so the outcome is "
        "the same on a loaded machine; --time-limit still bounds the command)", "gates", low=0, high=7 * 24 * 3600,
        metavar="SECONDS", show_default=False)
    # with several formats, what the command aims to finish in: each format in turn may use what is
    # left less a minimum for each after it, and one past that is ended (conversion/deadline.py); 0: no limit
    time_limit_s: float = declared(
        600.0, "--time-limit", "with several formats: seconds the whole command aims to finish in, an outer bound: "
        "each format in turn may use what is left less 60 s for each format after it; a search is cut where it would "
        "run past that (said), and a format past it is ended, said and recorded as not built while the others are "
        "written (0: no limit; one format alone has only --timeout per step)", "build", low=0,
        high=7 * 24 * 3600, metavar="SECONDS")
    allow_float_ops: bool = declared_by(
        lambda: True, "gates", forms.float_ops,
        Flag(("--allow-float-ops",), "allow", "keep ops no INT8 kernel runs (a SQRT, a DIV of two activations) in "
             "float, each named in the manifest and the precision label (default)", switch=True),
        Flag(("--full-integer",), "full_integer", "refuse a TFLite artifact with float ops inside the network "
             "(integer-only accelerators: NPUs, Edge TPU) instead of keeping them in float", switch=True))
    force: bool = declared(False, "--force", "replace an existing package of the same name", "output")
    archive: bool = declared(False, "--archive", "also write the package as one NAME.ekpkg zip", "output")
    labels_file: str | None = declared(
        None, "--labels", "text file with one class label per line, in the model's output order; class folders of an "
        "image folder are numbered by these labels (by name), not alphabetically", "output", show_default=False)
    preprocessing: dict[str, Any] = declared_by(
        dict, "input", forms.preprocessing,
        Flag(("--scale",), "scale", "preprocessing: multiply raw values (e.g. 0.00392157 = 1/255)", float),
        Flag(("--mean",), "mean", "preprocessing: subtract after scaling, per channel", forms.numbers,
             metavar="M[,M,M]"),
        Flag(("--std",), "std", "preprocessing: divide after subtracting, per channel", forms.numbers,
             metavar="S[,S,S]"),
        Flag(("--color-order",), "color_order", "preprocessing: channel order images are fed in", str.upper,
             choices=("RGB", "BGR", "L")),
        Flag(("--resize",), "resize", "preprocessing: resize images (default: the model's input)", forms.height_width,
             metavar="HxW"),
        Flag(("--preprocessing",), "preset", "preprocessing preset for 0..255 pixels: 0..1 (x/255), -1..1 "
             "(x/127.5-1), imagenet (mean/std), raw; --scale/--mean/--std override its fields",
             choices=("0..1", "-1..1", "imagenet", "raw")))
    # per child step (loading, float reference, each conversion); None: the default
    timeout_s: float | None = declared(None, "--timeout", "seconds allowed per step run in a child process: loading "
                                       "the model (a file.py:factory included), the float reference, each conversion "
                                       "(default 1800)", "build", low=1, high=7 * 24 * 3600, metavar="TIMEOUT",
                                       show_default=False)
    allow_partial: bool = declared(False, "--allow-partial", "with several formats: exit 0 even if some fail (the "
                                   "package records what failed and why)", "build")
    # the layers leaving int8 (float, or 16-bit activations): --keep-float, --int16-activations, --precision-plan
    plan: PrecisionPlan = declared_by(
        PrecisionPlan, "build", forms.plan,
        Flag(("--keep-float",), "float", "keep this layer in float (repeatable; recorded in the manifest); see "
             "--explain for candidates. Honoured where the format's converter has per-layer control (`edgekit "
             "routes`); on another route it is refused before anything loads", repeat=True, metavar="LAYER"),
        Flag(("--int16-activations",), "int16", "give this layer 16-bit activations with 8-bit weights (int16x8: "
             "more accurate than int8, still integer; repeatable; recorded in the manifest). Honoured where the "
             "format's quantizer has it (`edgekit routes`); on another route it is refused before anything loads",
             repeat=True, metavar="LAYER"),
        Flag(("--precision-plan",), "file", "a precision plan to build (JSON: {\"layers\": {LAYER: \"int16\"|"
             "\"float\"}}, the \"precision_plan\" a package's manifest records for an artifact the search raised): "
             "the same as --keep-float/--int16-activations for each layer it names", metavar="FILE"))
    explain: bool = declared(False, "--explain", "report per-layer quantization error (worst layers by SQNR); on the "
                             "same routes as --keep-float", "build")
    sign_key: str | None = declared(None, "--sign", "sign manifest.json with this Ed25519 key (edgekit keys "
                                    "generate)", "build", metavar="KEY", show_default=False)
    targets: list[str] | None = python_only(None, "the former name of formats=, accepted for one release")
    # each format's own options by name (edgekit.formats.Format.options: --calibration-method, ...)
    format_options: dict[str, Any] = python_only(
        why="each format declares its own (Format.options); they are keywords of their own too",
        default_factory=dict)
    input_shapes: dict[str, list[int]] = declared(
        None, "--input-shape", "fix an input's dynamic dimensions, e.g. images=1x3x320x320 (repeatable)", "input",
        default_factory=dict, parse=forms.named_shape, repeat=True, metavar="NAME=DxDxD", combine=forms.shapes)
    # where a tensor's samples are: its batch axis, or None for a model with no batch axis (ONNX sources)
    batch_axes: dict[str, int | None] = declared(
        None, "--batch-axis", "the batch axis of an ONNX input or output where the graph does not say it: AXIS "
        "(a state [layers, N, hidden]: 1), or none for a model with no batch axis (one sample per call); "
        "repeatable; edgekit detects both when the graph names its dimensions or the data show it",
        "input", default_factory=dict, parse=forms.named_axis, repeat=True, metavar="NAME=AXIS|none",
        combine=forms.axes)
    # inputs folded into the model as constants (edgekit.sources.fixed_inputs.parse_value)
    fixed_inputs: dict[str, dict[str, Any]] = declared(
        None, "--input", "fix a model input that is not a batch of samples (a scalar sample rate, a recurrent state "
        "of zeros) to a number or a .npy tensor (one sample's value where an axis is another input's batch: repeated "
        "per sample); it is folded into every artifact as a constant and recorded in the manifest (repeatable; ONNX "
        "and PyTorch sources)", "input", default_factory=dict, repeat=True, metavar="NAME=VALUE",
        combine=forms.fixed_inputs)
    # the device profiles the package is for (formats read what their devices need); None: every known one
    profiles: list[str] | None = declared(
        None, "--profile", lambda: "device profile the package is for (repeatable; see `edgekit profiles`): decides "
        "which quantized builds are made beside each format's main one, as the profiles' [quantization] lists "
        f"({_builds_help()}); 'auto': this machine's (default: every known profile)", "input", repeat=True,
        metavar="PROFILE", combine=forms.names)
    # data files written from objects (edgekit.package() with arrays): path -> what to call them in messages
    data_names: dict[str, str] = python_only(why="the files edgekit.package() writes for in-memory data",
                                             default_factory=dict)
    # float fallback artifacts (each format's float model) next to the INT8 ones, for
    # devices where INT8 is slower; None: when the model is at most FLOAT_FALLBACK_MAX_MB
    also_float: bool | None = declared(
        None, "--also-float", "also package a validated float artifact per format (float16 TFLite and CoreML, float32 "
        "ONNX) for devices where INT8 is slower; `edgekit tune` measures which is faster (default: on for models up "
        "to 50 MB)", "gates", negatable=True, show_default=False)

    def __post_init__(self) -> None:
        if self.targets is not None and self.formats is not None and self.targets != self.formats:
            raise ValueError("pass formats= (targets= is its former name), not both")
        from ..formats import DEFAULT_FORMAT

        _check_forms(self)
        formats = list(self.formats or self.targets or [DEFAULT_FORMAT])
        object.__setattr__(self, "formats", formats)  # frozen: set once, here
        object.__setattr__(self, "targets", formats)
        check_numbers(self)

    @property
    def step_timeout_s(self) -> float:
        """Seconds each child step (loading the model, the float reference, a conversion) may take:
        a model whose factory blocks, or a converter that hangs, ends with an error, never waits forever."""
        return self.timeout_s or DEFAULT_STEP_TIMEOUT_S

    @classmethod
    def from_keywords(cls, **given: Any) -> PackageOptions:
        """The options from keywords, where a format's own option may be given by its name too
        (``edgekit.package(..., calibration_method="percentile")``)."""
        from ..formats import build_options

        own = {option.name for _, option in build_options()}
        format_options = {**given.pop("format_options", {}), **{k: given.pop(k) for k in list(given) if k in own}}
        flags = {k: given.pop(k) for k in PLAN_KEYWORDS if k in given}
        if flags:  # the plan's flags by their Python names, as one plan with plan= (a conflict refused)
            given["plan"] = _plan_from_keywords(given.get("plan"), flags)
        known = {f.name for f in fields(cls)} - {"format_options"}
        unknown = sorted(set(given) - known)
        if unknown:
            import difflib

            from ..errors import InputError

            close = [m for k in unknown for m in difflib.get_close_matches(k, sorted(known | own), n=1)]
            raise InputError(f"unknown option(s): {', '.join(unknown)}",
                             hint=(f"did you mean {', '.join(close)}? " if close else "")
                             + "the options are PackageOptions' fields and the formats' own options: "
                             + ", ".join(sorted(known | own)))
        return cls(**given, format_options=format_options)

    def options_for_formats(self) -> dict[str, Any]:
        """Every registered format's options: its default, then ``format_options``."""
        from ..formats import build_options

        values = {option.name: option.default for _, option in build_options()}
        unknown = set(self.format_options) - set(values)
        if unknown:
            from ..errors import EdgekitError

            raise EdgekitError(f"unknown format option(s): {', '.join(sorted(unknown))}",
                               hint="known: " + ", ".join(sorted(values)))
        options = {option.name: option for _, option in build_options()}
        for name, value in self.format_options.items():
            _check_format_option(options[name], value)
        return {**values, **self.format_options}


# --keep-float, --int16-activations and --precision-plan by their Python names: the same plan as plan=
PLAN_KEYWORDS = ("keep_float", "int16_activations", "precision_plan")


def _plan_from_keywords(plan: Any, flags: dict[str, Any]) -> PrecisionPlan:
    """``keep_float=``, ``int16_activations=`` (a layer or a list of them) and ``precision_plan=``
    (a plan file) with ``plan=``, as the command line combines its flags."""
    from ..errors import InputError

    def layers(name: str) -> list[str]:
        value = flags.get(name) or []
        value = [value] if isinstance(value, str) else value
        if not isinstance(value, (list, tuple)) or not all(isinstance(v, str) for v in value):
            raise InputError(f"{name}= must be a layer name or a list of them, got {flags.get(name)!r}")
        return list(value)

    if plan is not None and flags.get("precision_plan") is not None:
        raise InputError("plan= and precision_plan= both give a plan", hint="pass one of them")
    base = PrecisionPlan.given(plan if plan is not None else flags.get("precision_plan"), "plan=")
    return PrecisionPlan.from_flags(layers("keep_float"), layers("int16_activations"), base=base)


def _check_format_option(option: Any, value: Any) -> None:
    """A format's option from the Python API, held to the rule its flag has on the command line."""
    from ..errors import InputError

    if value is None:
        return
    if option.choices and value not in option.choices:
        raise InputError(f"{option.flag} ({option.name}=) must be one of {', '.join(option.choices)}, got {value!r}")
    if option.kind is bool and not isinstance(value, bool):
        raise InputError(f"{option.flag} ({option.name}=) is on or off: pass True or False, got {value!r}")
    if option.kind is int and (isinstance(value, bool) or not isinstance(value, int)
                               or (option.minimum is not None and value < option.minimum)):
        raise InputError(f"{option.flag} ({option.name}=) must be a whole number"
                         + (f" of at least {option.minimum}" if option.minimum is not None else "") + f", got {value!r}")


LIST_OPTIONS = ("formats", "targets", "profiles")  # each a list of names
MAPPING_OPTIONS = ("output_kinds", "preprocessing", "input_shapes", "fixed_inputs", "format_options", "data_names",
                   "batch_axes")


def _check_forms(options: PackageOptions) -> None:
    """Options from Python in the forms a user writes: one name for a list of one (a string is
    never iterated per character), a kind for the model's only output, a fixed input as a number,
    an array or a path; anything else one usage error naming the option."""
    from ..errors import InputError
    from ..sources.fixed_inputs import spec_from_python

    for name in LIST_OPTIONS:
        value = getattr(options, name)
        if isinstance(value, (str, Path)):
            object.__setattr__(options, name, [str(value)])
        elif value is not None and not (isinstance(value, (list, tuple))
                                        and all(isinstance(v, (str, Path)) for v in value)):
            raise InputError(f"{name}= must be a name or a list of names, got {value!r}")
        elif isinstance(value, tuple):
            object.__setattr__(options, name, list(value))
    if isinstance(options.output_kinds, str):
        object.__setattr__(options, "output_kinds", {"": options.output_kinds})
    if isinstance(options.preprocessing, str):  # a preset by name, as --preprocessing takes it
        object.__setattr__(options, "preprocessing", {"preset": options.preprocessing})
    for name in MAPPING_OPTIONS:
        if not isinstance(getattr(options, name), dict):
            raise InputError(f"{name}= must be a dict, got {getattr(options, name)!r}",
                             hint='e.g. fixed_inputs={"sample_rate": 16000}, input_shapes={"images": [1, 3, 320, 320]}')
    object.__setattr__(options, "fixed_inputs", {str(k): spec_from_python(str(k), v)
                                                 for k, v in options.fixed_inputs.items()})
    object.__setattr__(options, "plan", PrecisionPlan.given(options.plan))


def check_numbers(options: PackageOptions) -> None:
    """Each numeric option finite and in its declared range, else one usage error naming it: checked
    once here for the command line and the Python API alike (a NaN or an infinity would switch a gate
    off silently: every comparison with NaN is false)."""
    import math

    from ..errors import OptionError as InputError

    for found, declaration in declarations():
        if declaration.low is None or declaration.high is None:
            continue
        name, flag, low, high, whole = found.name, declaration.flag, declaration.low, declaration.high, declaration.whole
        optional = found.default is None
        value = getattr(options, name)
        if value is None and optional:
            continue
        number = isinstance(value, (int, float)) and not isinstance(value, bool)
        if number and whole and isinstance(value, float) and value.is_integer():
            value = int(value)  # 300.0 from a computation is the whole number it says
            object.__setattr__(options, name, value)
        ok = number and (not whole or isinstance(value, int)) and math.isfinite(value) and low <= value <= high
        if not ok:
            kind = "a whole number" if whole else "a finite number"
            raise InputError(f"{flag} ({name}=) must be {kind} from {low:g} to {high:g}, got {value!r}",
                             hint=f"pass {flag} {low:g}..{high:g}" + (" or leave it out" if optional else ""))


@dataclass
class PackageResult:
    path: Path
    manifest: Manifest
    archive: Path | None
    comparisons: dict[str, OutputComparison | None]
    warnings: list[str]
    failed: list[FailedFormat] = field(default_factory=list)  # requested formats the package does not hold

    @property
    def complete(self) -> bool:
        return not self.failed

    @property
    def verdicts(self) -> dict[str, str]:
        """Each artifact's verdict, one of five outcomes: "passed"; "refused: <first gate>" (kept only
        by --allow-accuracy-drop); "not decidable: <N> held-out samples would decide it (<gates>)";
        "built unverified: <why>" (no runtime here measured it); formats that did not build or were
        left out: "not built: <error>"."""
        found = {artifact.key: self.manifest.validation.artifact(artifact.key).outcome()
                 for artifact in self.manifest.artifacts}
        for entry in self.failed:
            found[entry.target] = f"not built: {entry.error}"
        for entry in self.manifest.left_out:
            found.setdefault(entry.format, f"not built: {entry.why}")
        return found

    def table(self, width: int = 120) -> str:
        """The validation table ``edgekit package`` prints, as text."""
        import io

        from rich.console import Console

        from .table import render

        buffer = io.StringIO()
        render(self.manifest, Console(file=buffer, width=width, force_terminal=False, color_system=None))
        return buffer.getvalue()

    def __repr__(self) -> str:
        verdicts = ", ".join(f"{key}: {verdict}" for key, verdict in self.verdicts.items())
        return f"PackageResult({str(self.path)!r}, {verdicts})"

    def __str__(self) -> str:
        lines = [f"package: {self.path}", *(f"  {k}: {v}" for k, v in self.verdicts.items())]
        return "\n".join(lines) + "\n" + self.table()

    def _repr_html_(self) -> str:
        """How a notebook shows the result: path, verdicts and the validation table."""
        from html import escape

        return f"<pre>{escape(str(self))}</pre>"
