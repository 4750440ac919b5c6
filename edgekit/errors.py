"""Every user-facing failure of edgekit, each with a hint that says how to fix it.

The CLI prints ``error: MESSAGE`` and ``  fix: HINT`` and exits with ``exit_code``; a traceback
appears only with ``--debug``. Errors raised inside a conversion subprocess travel back to the
parent by class name (see ``edgekit.conversion.worker``), so every class here must be constructible as
``cls(message, hint=...)``.
"""

from __future__ import annotations


class EdgekitError(Exception):
    """Base class: a problem the user can act on."""

    exit_code = 1
    default_hint = ""

    def __init__(self, message: str, hint: str | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.hint = hint if hint is not None else self.default_hint

    def __str__(self) -> str:
        return self.message

    def render(self) -> str:
        text = f"error: {self.message}"
        if self.hint:
            text += f"\n  fix: {self.hint}"
        return text


class ModelSourceError(EdgekitError):
    """The model to package is missing, unreadable or not a model edgekit can read."""

    default_hint = ("pass a Keras .keras/.h5 file, a TF SavedModel directory, an .onnx file, or a PyTorch .pt2, "
                    "TorchScript .pt or file.py:factory")


class DataError(EdgekitError):
    """Calibration or evaluation data is missing, empty, malformed or inconsistent."""

    default_hint = "pass an image folder, a .npy/.npz file (x, optional y) or module:function, shaped like the model input"


class OutputExistsError(EdgekitError):
    default_hint = "choose another -o/--name, or pass --force to replace it"


class ConversionError(EdgekitError):
    """A converter failed (or crashed) while building an artifact."""

    default_hint = "rerun with --debug to see the converter's log"


class TimeShareError(ConversionError):
    """A format ran past its share of the command's time (``--time-limit``) and was ended, so the
    other formats are still built and written (``edgekit.conversion.deadline``)."""

    default_hint = ("raise --time-limit SECONDS (0: no limit), or package this format alone (--format NAME), which "
                    "gives it the whole time")


class UnsupportedOpError(ConversionError):
    default_hint = (
        "leave out --full-integer to keep these ops in float (recorded in the manifest), "
        "or replace the layer with an INT8-capable one"
    )


# A hint naming no format: the packager puts the routes from this model that avoid the failing
# converter in its place (``routes.other_routes``), from the route table, never a hard-coded list.
OTHER_ROUTES = "package it for a format whose route avoids this converter (edgekit routes)"


class RouteError(EdgekitError):
    """No conversion route takes this kind of model to a requested format, or a route cannot
    honour an option given (``edgekit.routing.routes``); said before anything loads."""

    default_hint = "see `edgekit routes` for how each kind of model reaches each format"


class AccuracyDropError(EdgekitError):
    default_hint = (
        "calibrate with more representative data (--calibration, --samples), "
        "raise --max-accuracy-drop, or keep the package anyway with --allow-accuracy-drop"
    )


class PartialPackageError(EdgekitError):
    """Some targets of a multi-target package failed; the package holds the others."""

    def __init__(self, message: str, hint: str | None = None, result: object = None) -> None:
        super().__init__(message, hint)
        self.result = result


class PackageError(EdgekitError):
    """A package is missing, corrupt, tampered with, or from an unsupported schema version."""

    default_hint = "copy the package again from its source, or rebuild it with `edgekit package`"


class BackendUnavailableError(EdgekitError):
    """No installed runtime library can run the package's artifacts."""

    default_hint = "pip install 'edgekit[tflite]' (LiteRT) on this device"


class InputError(DataError):
    """An input given to a loaded model has the wrong shape, dtype or values (data, at predict time)."""

    default_hint = "pass images, or arrays shaped like the model input (see inputs in manifest.json)"


class OptionError(InputError):
    """A packaging option out of its range, or two options that contradict each other: a usage
    error (exit 2, as argparse's own), from the command line and the Python API alike."""

    exit_code = 2
    default_hint = "see edgekit package --help"


class StorageError(EdgekitError):
    """A file could not be written or read because of the disk: full, read-only, or no permission."""

    default_hint = "free space on that disk or choose a writable location"


class ResourceError(EdgekitError):
    """The machine ran out of threads, processes, memory or file handles: its state, not a bug."""

    default_hint = "close other programs (or raise the limit) and rerun; lower --samples or --threads if edgekit used it"


class CacheWarning(UserWarning):
    """The local cache cannot be used (full, read-only): edgekit runs without it and says so."""


class FailedArtifactWarning(UserWarning):
    """The artifact chosen failed its validation gate when it was packaged (kept by --allow-accuracy-drop)."""


class UnmeasuredArtifactWarning(UserWarning):
    """The artifact chosen was never compared with the float model (nothing where it was packaged
    could run it): it has no verdict."""


class UndecidedArtifactWarning(UserWarning):
    """The artifact chosen met its gates on too few validation samples to decide them (its
    manifest says ``verdict: not decidable``): a pass was never established."""


class KernelArithmeticWarning(UserWarning):
    """The artifact chosen was validated as quantized (for devices whose int8 kernels compute it
    exactly), and this CPU's fused int8 kernels may not: its outputs here may be less accurate."""


class InputRangeWarning(UserWarning):
    """Input values lie far outside the range the model was calibrated on (INT8 inputs saturate there)."""


ERROR_CLASSES: dict[str, type[EdgekitError]] = {
    cls.__name__: cls
    for cls in (
        EdgekitError,
        ModelSourceError,
        DataError,
        OutputExistsError,
        PartialPackageError,
        ConversionError,
        UnsupportedOpError,
        AccuracyDropError,
        PackageError,
        BackendUnavailableError,
        InputError,
        StorageError,
        ResourceError,
    )
}

_RESOURCE_ERRNOS = {
    11: "the machine is out of threads or processes (EAGAIN)",  # EAGAIN: fork/pthread_create refused
    12: "the machine is out of memory (ENOMEM)",
    23: "the system is out of file handles (ENFILE)",
    24: "this process has too many open files (EMFILE)",
}


def _extras_by_module() -> dict[str, str]:
    """The extra of edgekit's own distribution that installs each library, by import name (read
    from the installed metadata: ``tensorflow-cpu; extra == "package"`` -> tensorflow: package)."""
    import re
    from importlib import metadata

    try:
        requirements = metadata.requires("edgekit") or []
    except metadata.PackageNotFoundError:
        return {}
    found: dict[str, str] = {}
    for requirement in requirements:
        extra = re.search(r"extra\s*==\s*['\"]([^'\"]+)['\"]", requirement)
        name = re.split(r"[\s<>=!~;\[(]", requirement.strip(), maxsplit=1)[0].lower().replace("-", "_")
        if extra and name != "edgekit":
            found.setdefault(name.removesuffix("_cpu"), extra.group(1))
    return found


def missing_module_error(exc: BaseException) -> EdgekitError | None:
    """A library edgekit needs that is not installed, as the extra that installs it; None for
    anything else (a module of the user's own, say)."""
    if not isinstance(exc, ModuleNotFoundError) or not exc.name:
        return None
    top = exc.name.split(".")[0]
    extra = _extras_by_module().get(top.lower())
    if extra is None:
        return None
    return EdgekitError(f"{top} is not installed in this environment, and this step needs it",
                        hint=f"pip install 'edgekit[{extra}]'")


def resource_error(exc: BaseException) -> ResourceError | None:
    """A ``ResourceError`` naming the exhausted resource, when ``exc`` is one (EAGAIN from a
    starved machine once read ``internal error: BlockingIOError``)."""
    if isinstance(exc, MemoryError):
        return ResourceError("the machine is out of memory (MemoryError)",
                             hint="close other programs or lower --samples (or --threads), then rerun")
    if isinstance(exc, OSError) and exc.errno in _RESOURCE_ERRNOS:
        what = f" while starting {exc.filename}" if exc.filename else ""
        return ResourceError(f"{_RESOURCE_ERRNOS[exc.errno]}{what}: {exc.strerror or exc}")
    if isinstance(exc, RuntimeError) and "can't start new thread" in str(exc):
        return ResourceError(f"the machine is out of threads ({exc})")
    return None

_STORAGE_ERRNOS = {
    28: "no space left on the device",  # ENOSPC
    122: "disk quota exceeded",  # EDQUOT
    30: "the file system is read-only",  # EROFS
    13: "permission denied",  # EACCES
    1: "operation not permitted",  # EPERM
}


def storage_error(exc: OSError, action: str = "write") -> StorageError | None:
    """A ``StorageError`` naming the path and the cause, when ``exc`` is a disk/permission failure."""
    reason = _STORAGE_ERRNOS.get(exc.errno or 0)
    if reason is None:
        return None
    where = exc.filename or "a file"
    if exc.errno in (28, 30, 122) and exc.filename2:
        # a copy (shutil.copyfile's sendfile, shutil.move across disks) names its source first and its
        # destination second; only the destination is written, so only its disk can be full or read-only
        where = exc.filename2
    if exc.errno in (28, 122):
        hint = f"free space on the disk holding {where}, or write somewhere else"
    else:
        hint = f"choose a location you can {action}, or fix the permissions of {where}"
    return StorageError(f"cannot {action} {where}: {reason}", hint=hint)



def first_line(exc: BaseException) -> str:
    """An exception's first line: what an error message quotes of a library's failure."""
    text = str(exc).strip()
    return text.splitlines()[0] if text else ""
