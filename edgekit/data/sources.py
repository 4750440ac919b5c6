"""Calibration and evaluation data: an image folder, ``.npy``/``.npz`` arrays, or ``module:function``.

Opening a source is cheap and validates what can be checked without the model (exists, not
empty, readable format). ``load`` then decodes only the selected samples, so a large image
folder costs what ``--samples`` asks for, not its full size.
"""

from __future__ import annotations

from collections import Counter

import hashlib
import importlib
import importlib.util
import sys
import zipfile
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from ..errors import DataError
from .preprocessing import IMAGE_SUFFIXES, array_file_problem, decode_image

MAX_GENERATED_SAMPLES = 100_000


@dataclass
class RawBatch:
    """Selected samples before preprocessing: images already decoded and resized.

    ``x`` is one array, or (for a model with several inputs) a dict of arrays by input name.
    """

    x: Any
    y: np.ndarray | None
    sha256: str
    names: list[str] = field(default_factory=list)  # where each sample came from: "row 150", an image path


@dataclass
class DataSource:
    description: str
    kind: str  # "images" or "arrays"
    count: int
    labels: list[str] | None = None
    _files: list[Path] = field(default_factory=list, repr=False)
    _x: np.ndarray | None = field(default=None, repr=False)
    _y: np.ndarray | None = field(default=None, repr=False)
    named: dict[str, np.ndarray] = field(default_factory=dict, repr=False)  # arrays by model input name
    # data passed from Python (edgekit.package(calibration={...})): a dict's keys are input names,
    # so a key the model does not have is a mistake, not a file's arbitrary array name
    from_python: bool = False
    # what was done to the arrays' layout when they were read (an array batched on another axis)
    notes: tuple[str, ...] = ()
    moved_axes: dict[str, int] = field(default_factory=dict)  # array -> the axis its samples were on

    @property
    def names(self) -> list[str]:
        """Input names the data gives arrays for (empty: one unnamed array, or images)."""
        return list(self.named)

    @property
    def has_targets(self) -> bool:
        return self._y is not None or (self.kind == "images" and self.labels is not None)

    @property
    def dtype(self) -> np.dtype:
        if self.kind == "images":
            return np.dtype(np.uint8)
        return self._x.dtype if self._x is not None else next(iter(self.named.values())).dtype

    @property
    def arrays(self) -> dict[str, np.ndarray]:
        """The raw arrays by input name (``""``: one unnamed array); empty for image folders."""
        return dict(self.named) if self.named else ({"": self._x} if self._x is not None else {})

    @property
    def sample_shape(self) -> tuple[int, ...] | None:
        return None if self._x is None else tuple(self._x.shape[1:])

    def in_class_order(self, labels: list[str], where: str) -> None:
        """Number an image folder's classes by ``labels`` (the model's output order), by name.

        Class folders are found in alphabetical order; the model's outputs are in the order it was
        trained with. Class indices follow the labels, so accuracy is measured against the class the
        model means. Folders and labels that do not name the same classes are an error.
        """
        if self.kind != "images" or self.labels is None:
            return
        folders, wanted = set(self.labels), list(labels)
        if folders != set(wanted) or len(set(wanted)) != len(wanted):
            unknown = sorted(folders - set(wanted))
            absent = [label for label in wanted if label not in folders]
            repeated = sorted({label for label in wanted if wanted.count(label) > 1})
            details = "; ".join(part for part in (
                f"folders without a label: {', '.join(unknown[:8])}" if unknown else "",
                f"labels without a folder: {', '.join(absent[:8])}" if absent else "",
                f"labels given twice: {', '.join(repeated[:8])}" if repeated else "") if part)
            raise DataError(f"the class folders of {self.description} do not match {where} ({details})",
                            hint="name each class folder exactly as its label (one label per line, in the model's "
                                 "output order)")
        self.labels = wanted

    def select(self, n: int | None, seed: int, exclude: Sequence[int] = ()) -> np.ndarray:
        """Deterministic (seeded) choice of up to ``n`` sample indices, skipping ``exclude``."""
        order = np.random.default_rng(seed).permutation(self.count)
        if len(exclude):
            order = order[~np.isin(order, np.asarray(exclude))]
        return np.sort(order if n is None else order[:n])

    def check_readable(self, indices: np.ndarray) -> None:
        """Open every selected image's header and check its data (cheap: no resize, no model)."""
        if self.kind != "images":
            return
        from PIL import Image, UnidentifiedImageError

        from .preprocessing import open_image

        for i in indices:
            path = self._files[int(i)]
            try:
                with open_image(path) as image:
                    image.verify()
            except DataError:
                raise
            except (UnidentifiedImageError, OSError, ValueError, SyntaxError, EOFError,
                    Image.DecompressionBombError) as exc:
                raise DataError(f"cannot read image {path}: {exc}",
                                hint=f"remove or replace the unreadable file in {self.description}") from None

    def load(self, indices: np.ndarray, image_size: tuple[int, int] | None, color_order: str) -> RawBatch:
        digest = hashlib.sha256()
        if self.kind == "images":
            images = []
            targets = []
            for i in indices:
                path = self._files[int(i)]
                images.append(decode_image(path, image_size, color_order, "bilinear"))
                digest.update(path.read_bytes())
                if self.labels is not None:
                    targets.append(self.labels.index(path.parent.name))
            x = np.stack(images)
            y = np.asarray(targets, dtype=np.int64) if self.labels is not None else None
            names = [str(self._files[int(i)]) for i in indices]
        else:
            y = None if self._y is None else np.asarray(self._y[indices])
            arrays = {"x": self._x} if self._x is not None else self.named
            picked = {name: np.ascontiguousarray(a[indices]) for name, a in arrays.items()}
            for name, a in picked.items():
                digest.update(name.encode() + str(a.dtype).encode() + str(a.shape).encode())
                digest.update(a.tobytes())
            x = picked["x"] if self._x is not None else picked
            names = [f"row {int(i)} of {self.description}" for i in indices]
        if y is not None:
            digest.update(np.ascontiguousarray(y).tobytes())
        return RawBatch(x=x, y=y, sha256=digest.hexdigest(), names=names)


def open_data(spec: str, role: str = "calibration", description: str | None = None) -> DataSource:
    """Open DATA given on the command line; ``role`` only names it in error messages, and
    ``description`` (a ``.npz`` written from an object the user passed) says what it is instead
    of its temporary path."""
    path = Path(spec)
    if path.is_dir():
        return _open_image_folder(path, role)
    if path.is_file():
        if path.suffix == ".npy":
            return _open_arrays(_load_npy(path, role), None, None, f"{path}", role)
        if path.suffix == ".npz":
            source = _open_npz(path, role, description)
            source.from_python = description is not None
            return source
        if path.suffix.lower() in IMAGE_SUFFIXES:
            raise DataError(
                f"{role} data {spec} is a single image",
                hint="pass a folder of images (class sub-folders give labels), or a .npy/.npz array file",
            )
        raise DataError(
            f"{role} data {spec}: unsupported file type {path.suffix!r}",
            hint="use an image folder, a .npy/.npz file (arrays 'x' and optional 'y'), or module:function",
        )
    if ":" in spec and not path.exists():
        return _open_callable(spec, role)
    raise DataError(
        f"{role} data {spec} does not exist",
        hint="pass an image folder, a .npy/.npz file, or module:function returning arrays",
    )


def _open_image_folder(root: Path, role: str) -> DataSource:
    files = sorted(p for p in root.rglob("*") if p.is_file() and p.suffix.lower() in IMAGE_SUFFIXES)
    if not files:
        raise DataError(
            f"{role} folder {root} contains no images ({', '.join(sorted(IMAGE_SUFFIXES))})",
            hint="point --" + ("calibration" if role == "calibration" else "eval") + " at a folder with images",
        )
    parents = {p.parent for p in files}
    labels = None
    if all(p.parent.parent == root for p in files) and len(parents) >= 2:
        labels = sorted(p.name for p in parents)
    return DataSource(description=str(root), kind="images", count=len(files), labels=labels, _files=files)


def _load_npy(path: Path, role: str) -> np.ndarray:
    if path.stat().st_size == 0:
        raise DataError(f"{role} file {path} is empty (0 bytes)", hint="save the samples with numpy.save(path, x)")
    try:
        return np.load(path, mmap_mode="r", allow_pickle=False)
    except (ValueError, OSError, EOFError) as exc:  # EOFError would otherwise reach click as "aborted"
        raise DataError(f"{role} file {path} is not a readable .npy array ({array_file_problem(exc)})",
                        hint="save numbers (no objects) with numpy.save(path, x)") from None


def _open_npz(path: Path, role: str, description: str | None = None) -> DataSource:
    try:
        with np.load(path, allow_pickle=False) as archive:
            arrays = {k: archive[k] for k in archive.files}
    except (ValueError, OSError, EOFError, KeyError, zipfile.BadZipFile) as exc:
        raise DataError(f"{role} file {path} is not a readable .npz archive ({array_file_problem(exc)})",
                        hint="save numbers (no objects) with numpy.savez(path, x=x, y=y)") from None
    labels = None
    if "labels" in arrays:
        labels = [str(v) for v in arrays["labels"].tolist()]
    named = {k: v for k, v in arrays.items() if k not in ("y", "labels")}
    if list(named) != ["x"]:  # arrays by input name (one of them may be an input called x: never dropped)
        if not named:
            raise DataError(
                f"{role} file {path} has no input arrays (it has: {', '.join(arrays) or 'nothing'})",
                hint="save inputs as x (and integer class targets as y): np.savez(path, x=x, y=y), or one "
                     "array per model input name: np.savez(path, tokens=..., mask=...)",
            )
        return open_named(named, arrays.get("y"), labels, description or str(path), role)
    return _open_arrays(arrays["x"], arrays.get("y"), labels, description or str(path), role)


def open_named(named: dict[str, Any], y: Any, labels: list[str] | None, description: str, role: str) -> DataSource:
    """Data for a model with several inputs: one array per input name, the same number of samples."""
    arrays = {name: np.asarray(a) for name, a in named.items()}
    arrays, notes, moved = _samples_first(arrays, description, role)
    # each array: numbers, a batch, not empty; y checked once, against the common sample count
    checked = [_open_arrays(a, y if i == 0 else None, labels, f"{description} ({name})", role)
               for i, (name, a) in enumerate(arrays.items())]
    return DataSource(description=description, kind="arrays", count=checked[0].count, labels=labels,
                      _y=checked[0]._y, named=arrays, notes=notes, moved_axes=moved)


def _samples_first(arrays: dict[str, np.ndarray], description: str,
                   role: str) -> tuple[dict[str, np.ndarray], tuple[str, ...], dict[str, int]]:
    """Every array with its samples on axis 0. An array given in its model's own layout, samples on
    another axis (a recurrent state ``[layers, N, hidden]``), is moved batch-first, as edgekit feeds
    it, and that is said; one where no single axis holds the others' sample count is refused,
    naming the axes."""
    counts = {name: int(a.shape[0]) if a.ndim else 0 for name, a in arrays.items()}
    if len(set(counts.values())) <= 1:
        return arrays, (), {}
    ranked = Counter(counts.values()).most_common()
    common = ranked[0][0]
    if len(ranked) > 1 and ranked[1][1] == ranked[0][1]:
        common = max(counts.values())  # as many arrays one way as the other: the larger count is the samples
    moved, notes, axes_of = dict(arrays), [], {}
    for name, array in arrays.items():
        if counts[name] == common:
            continue
        axes = [axis for axis in range(1, array.ndim) if array.shape[axis] == common]
        if len(axes) != 1:
            raise DataError(f"{role} data {description}: the arrays hold different numbers of samples {counts}, and "
                            f"no single axis of {name!r} {tuple(array.shape)} holds {common} samples",
                            hint="give every input array its samples on one axis, the first (batch-first) or the "
                                 "model's own batch axis")
        moved[name] = np.moveaxis(array, axes[0], 0)
        axes_of[name] = axes[0]
        notes.append(f"{role} data {description}: array {name!r} {tuple(array.shape)} holds its {common} samples on "
                     f"axis {axes[0]} (the model's own layout): fed batch-first as {tuple(moved[name].shape)}")
    return moved, tuple(notes), axes_of


def _open_arrays(
    x: np.ndarray, y: np.ndarray | None, labels: list[str] | None, description: str, role: str
) -> DataSource:
    if x.dtype.kind not in "uif":
        raise DataError(
            f"{role} data {description} has dtype {x.dtype}; expected numbers (uint8 images or float arrays)",
            hint="convert it with x.astype(np.float32) or x.astype(np.uint8)",
        )
    if x.ndim < 2:
        raise DataError(
            f"{role} data {description} has shape {tuple(x.shape)}; expected a batch (N, ...) of samples",
            hint="stack samples along a first batch axis",
        )
    if x.shape[0] == 0:
        raise DataError(f"{role} data {description} is empty (0 samples)", hint="provide at least 100 samples")
    if y is not None:
        y = np.asarray(y)
        if y.ndim != 1 or y.shape[0] != x.shape[0]:
            raise DataError(
                f"{role} data {description}: y has shape {tuple(y.shape)} but x has {x.shape[0]} samples",
                hint="y must be one integer class index per sample",
            )
        if y.dtype.kind not in "iu":
            raise DataError(f"{role} data {description}: y must hold integer class indices, got {y.dtype}")
    return DataSource(description=description, kind="arrays", count=int(x.shape[0]), labels=labels, _x=x, _y=y)


def _open_callable(spec: str, role: str) -> DataSource:
    module_name, _, func_name = spec.rpartition(":")
    function = _resolve_callable(module_name, func_name, spec, role)
    try:
        produced = function()
    except Exception as exc:  # the user's code: report what it raised
        raise DataError(f"{role} data {spec} raised {type(exc).__name__}: {exc}") from exc
    if isinstance(produced, dict):  # one array per model input name (several inputs)
        y = produced.get("y")
        return open_named({k: v for k, v in produced.items() if k != "y"}, y, None, spec, role)
    xs, ys = _materialize(produced, spec, role)
    if not xs:
        raise DataError(f"{role} data {spec} produced no samples", hint="make it return or yield arrays")
    try:
        x = np.stack([np.asarray(v) for v in xs])
    except ValueError:
        shapes = sorted({tuple(np.shape(v)) for v in xs})[:4]
        raise DataError(f"{role} data {spec} yielded samples of different shapes: {shapes}") from None
    y = np.asarray(ys) if ys else None
    return _open_arrays(x, y, None, spec, role)


def _resolve_callable(module_name: str, func_name: str, spec: str, role: str, label: str | None = None) -> Any:
    """The user's function ``module:function`` or ``file.py:function``; errors start with ``label``."""
    label = label or f"{role} data {spec}"
    try:
        if module_name.endswith(".py"):
            file = Path(module_name)
            if not file.is_file():
                raise DataError(f"{label}: {file} does not exist")
            loaded = importlib.util.spec_from_file_location(f"edgekit_data_{file.stem}", file)
            assert loaded is not None and loaded.loader is not None
            module = importlib.util.module_from_spec(loaded)
            loaded.loader.exec_module(module)
        else:
            if "" not in sys.path and str(Path.cwd()) not in sys.path:
                sys.path.insert(0, str(Path.cwd()))
            module = importlib.import_module(module_name)
    except DataError:
        raise
    except Exception as exc:
        raise DataError(
            f"{label}: cannot import {module_name} ({type(exc).__name__}: {exc})",
            hint="use module:function for an importable module, or path/to/file.py:function",
        ) from exc
    function = getattr(module, func_name, None)
    if not callable(function):
        raise DataError(f"{label}: {module_name} has no function {func_name!r}")
    return function


def _materialize(produced: Any, spec: str, role: str) -> tuple[list[Any], list[int]]:
    """Accept ``(x, y)`` arrays, an array of samples, or an iterable of samples or ``(x, y)`` pairs."""
    if isinstance(produced, tuple) and len(produced) == 2 and all(isinstance(v, np.ndarray) for v in produced):
        x, y = produced
        if x.ndim >= 2 and y.ndim == 1:
            return list(x), [int(v) for v in y]
    if isinstance(produced, np.ndarray):
        return list(produced), []
    if not isinstance(produced, Iterable):
        raise DataError(f"{role} data {spec} returned {type(produced).__name__}, not arrays or an iterable of arrays")
    xs: list[Any] = []
    ys: list[int] = []
    for item in produced:
        if len(xs) >= MAX_GENERATED_SAMPLES:
            break
        if isinstance(item, tuple) and len(item) == 2:
            xs.append(item[0])
            ys.append(int(item[1]))
        else:
            xs.append(item)
    if ys and len(ys) != len(xs):
        raise DataError(f"{role} data {spec} mixes (x, y) pairs with bare samples")
    return xs, ys
