"""What ``edgekit package`` is asked to do (``PackageOptions``) and what it made (``PackageResult``)."""

from __future__ import annotations

from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Any

from ..manifest import Manifest
from ..quantize.metrics import OutputComparison
from ..worker import DEFAULT_STEP_TIMEOUT_S


@dataclass(frozen=True)
class PackageOptions:
    """What ``edgekit package`` is asked to do; frozen: every stage reads the same request.
    Each format's own options are in ``format_options`` (``edgekit.formats.Format.options``)."""

    model: str
    calibration: str
    output_dir: str
    formats: list[str] | None = None  # default [formats.DEFAULT_FORMAT]; "all" for every registered format
    eval: str | None = None
    name: str | None = None
    samples: int = 300
    eval_samples: int | None = None
    seed: int = 0
    max_accuracy_drop: float = 1.0
    allow_accuracy_drop: bool = False
    min_sqnr_db: float = 20.0  # floor for values outputs and for each quantity joined into one output
    output_kinds: dict[str, str] = field(default_factory=dict)  # output name ("" = the only one) -> kind
    metric: str | None = None  # module:function judging float vs INT8 outputs
    # when a format fails its gates, search for a configuration that passes (the fixes its failures
    # name, then per-layer precision: packaging/search/); False: plain PTQ, a hard failure
    auto_fix: bool = True
    # seconds for one format's whole search, its rebuild included; None: 3x the plain build (search/budget.py)
    search_budget_s: float | None = None
    allow_float_ops: bool = True  # False: --full-integer
    force: bool = False
    archive: bool = False
    labels_file: str | None = None
    preprocessing: dict[str, Any] = field(default_factory=dict)  # scale, mean, std, color_order, resize
    timeout_s: float | None = None  # per child step (loading, float reference, each conversion); None: the default
    allow_partial: bool = False  # with several formats: keep the package if some of them fail
    keep_float: list[str] = field(default_factory=list)  # layers to keep in float
    int16_layers: list[str] = field(default_factory=list)  # layers given 16-bit activations (int16x8)
    explain: bool = False  # per-layer quantization error report
    sign_key: str | None = None  # Ed25519 private key: sign manifest.json
    targets: list[str] | None = None  # the former name of `formats`, accepted for one release
    # each format's own options by name (edgekit.formats.Format.options: --calibration-method, ...)
    format_options: dict[str, Any] = field(default_factory=dict)
    input_shapes: dict[str, list[int]] = field(default_factory=dict)  # --input-shape NAME=1x3x320x320
    # --input NAME=VALUE: inputs folded into the model as constants (edgekit.sources.fixed_inputs.parse_value)
    fixed_inputs: dict[str, dict[str, Any]] = field(default_factory=dict)
    # --profile: the device profiles the package is for (formats read what their devices need); None: every known one
    profiles: list[str] | None = None
    # data files written from objects (edgekit.package() with arrays): path -> what to call them in messages
    data_names: dict[str, str] = field(default_factory=dict)
    # float fallback artifacts (each format's float model) next to the INT8 ones, for
    # devices where INT8 is slower; None: when the model is at most FLOAT_FALLBACK_MAX_MB
    also_float: bool | None = None

    def __post_init__(self) -> None:
        if self.targets is not None and self.formats is not None and self.targets != self.formats:
            raise ValueError("pass formats= (targets= is its former name), not both")
        from ..formats import DEFAULT_FORMAT

        _check_forms(self)
        formats = list(self.formats or self.targets or [DEFAULT_FORMAT])
        object.__setattr__(self, "formats", formats)  # frozen: set once, here
        object.__setattr__(self, "targets", formats)
        check_numbers(self)
        check_layers(self)

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


LIST_OPTIONS = ("formats", "targets", "keep_float", "int16_layers", "profiles")  # each a list of names
MAPPING_OPTIONS = ("output_kinds", "preprocessing", "input_shapes", "fixed_inputs", "format_options", "data_names")


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
    for name in MAPPING_OPTIONS:
        if not isinstance(getattr(options, name), dict):
            raise InputError(f"{name}= must be a dict, got {getattr(options, name)!r}",
                             hint='e.g. fixed_inputs={"sample_rate": 16000}, input_shapes={"images": [1, 3, 320, 320]}')
    object.__setattr__(options, "fixed_inputs", {str(k): spec_from_python(str(k), v)
                                                 for k, v in options.fixed_inputs.items()})


# Every numeric option, checked once here for the command line and the Python API alike: a NaN or
# an infinity would switch a gate off silently (every comparison with NaN is false).
# field -> (flag, lowest, highest, whole number, may be None)
NUMERIC_OPTIONS: dict[str, tuple[str, float, float, bool, bool]] = {
    "samples": ("--samples", 1, 10_000_000, True, False),
    "eval_samples": ("--eval-samples", 1, 10_000_000, True, True),
    "seed": ("--seed", 0, 2**32 - 1, True, False),
    "max_accuracy_drop": ("--max-accuracy-drop", 0, 100, False, False),
    "min_sqnr_db": ("--min-sqnr", 0, 200, False, False),
    "timeout_s": ("--timeout", 1, 7 * 24 * 3600, False, True),
    "search_budget_s": ("--search-budget", 0, 7 * 24 * 3600, False, True),
}


def check_layers(options: PackageOptions) -> None:
    """A layer is kept in float or given 16-bit activations, never both: the two precisions
    cannot both hold, and the one a format happened to apply would be recorded beside the other."""
    from ..errors import OptionError

    both = sorted(set(options.keep_float or ()) & set(options.int16_layers or ()))
    if both:
        raise OptionError(f"--keep-float and --int16-activations both name {', '.join(both)}: a layer is either float "
                          "or int16-activation INT8, not both",
                          hint="name each layer in one of the two options")


def check_numbers(options: PackageOptions) -> None:
    """Each numeric option finite and in its range, else one usage error naming it."""
    import math

    from ..errors import OptionError as InputError

    for name, (flag, low, high, whole, optional) in NUMERIC_OPTIONS.items():
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
    failed: list[dict[str, str]] = field(default_factory=list)  # formats that did not build: format, error, hint

    @property
    def complete(self) -> bool:
        return not self.failed

    @property
    def verdicts(self) -> dict[str, str]:
        """Each artifact's verdict: "passed", "FAILED: <first gate>", or "not measured: <why>";
        formats that did not build: "not built: <error>"."""
        found = {}
        for artifact in self.manifest.artifacts:
            record = self.manifest.validation.artifact(artifact.key)
            failed = record.failed_gates()
            if not record.measured:
                found[artifact.key] = f"not measured: {record.reason or 'no runtime here'}"
            else:
                found[artifact.key] = "passed" if failed is None else f"FAILED: {failed[0]}"
        for entry in self.failed:
            found[entry["target"]] = f"not built: {entry['error']}"
        return found

    def table(self, width: int = 120) -> str:
        """The validation table ``edgekit package`` prints, as text."""
        import io

        from rich.console import Console

        from ..validation_table import render

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
