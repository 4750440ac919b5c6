"""Preprocessing shared by the packager and the runtime, so both compute the same model input.

Only numpy and Pillow: this module is on the device path.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from ..errors import DataError, EdgekitError, InputError
from ..manifest import Preprocessing

IMAGE_SUFFIXES = frozenset({".jpg", ".jpeg", ".png", ".bmp", ".gif", ".webp", ".tif", ".tiff", ".ppm", ".pgm"})

if TYPE_CHECKING:
    from PIL import Image

_RESAMPLE = ("nearest", "bilinear", "bicubic", "lanczos")
_FROM_MODEL = "model starts with a Rescaling/Normalization layer"
# Largest image edgekit decodes (pixels). Decoding allocates width x height x channels bytes before
# any resize: a 530 KB PNG of 13000x13000 pixels needs 500 MB. EDGEKIT_MAX_IMAGE_PIXELS overrides it.
DEFAULT_MAX_IMAGE_PIXELS = 50_000_000


def max_image_pixels() -> int:
    value = os.environ.get("EDGEKIT_MAX_IMAGE_PIXELS", "")
    return int(value) if value.isdigit() and int(value) > 0 else DEFAULT_MAX_IMAGE_PIXELS


def _is_pil_image(item: Any) -> bool:
    """Without importing Pillow (its import is paid only when images are used)."""
    return any(cls.__module__.startswith("PIL.") and cls.__name__ == "Image" for cls in type(item).__mro__)


def decode_image(
    source: str | os.PathLike[str] | Image.Image,
    size: tuple[int, int] | None,
    color_order: str,
    method: str = "bilinear",
) -> np.ndarray:
    """Decode (and resize to ``size`` = (height, width)) an image into a uint8 HWC array.

    Images larger than ``max_image_pixels()`` are refused before their pixels are decoded;
    16-bit images are scaled to 8 bits over their full range (not clipped at 255).
    """
    from PIL import Image, UnidentifiedImageError

    try:
        image = source if isinstance(source, Image.Image) else open_image(source)
        image.load()
    except FileNotFoundError:
        raise DataError(f"image {source} does not exist", hint="check the path") from None
    except IsADirectoryError:
        raise DataError(f"image {source} is a directory", hint="pass image files") from None
    except Image.DecompressionBombError as exc:
        raise DataError(f"image {source} is too large to decode ({exc})",
                        hint="downscale the image, or raise EDGEKIT_MAX_IMAGE_PIXELS") from None
    except (UnidentifiedImageError, OSError, ValueError, SyntaxError, EOFError) as exc:
        raise DataError(
            f"cannot read image {source}: {exc}", hint="remove or replace the unreadable file"
        ) from None
    image = _to_8bit(image, source)
    image = image.convert("L" if color_order == "L" else "RGB")
    if size is not None and (image.height, image.width) != tuple(size):
        resample = Image.Resampling[method.upper()] if method in _RESAMPLE else Image.Resampling.BILINEAR
        image = image.resize((size[1], size[0]), resample)
    array = np.asarray(image, dtype=np.uint8)
    if color_order == "L":
        return array[..., None]
    if color_order == "BGR":
        return np.ascontiguousarray(array[..., ::-1])
    return array


def open_image(source: Any, limit: int | None = None, name: Any = None) -> Image.Image:
    """Open an image lazily (header only) and refuse it, by its declared size, before any pixel
    is decoded. Pillow's own decompression-bomb limit is set to the same number for ``load``."""
    from PIL import Image

    limit = limit or max_image_pixels()
    Image.MAX_IMAGE_PIXELS = None  # reading the header allocates nothing; edgekit's check below names the size
    try:
        image = Image.open(source)
    finally:
        Image.MAX_IMAGE_PIXELS = limit
    check_image_size(image, name if name is not None else source, limit)
    return image


def check_image_size(image: Image.Image, source: Any, limit: int | None = None) -> None:
    """Refuse an image whose decoded pixels would exceed the limit (read from its header only)."""
    limit = limit or max_image_pixels()
    width, height = image.size
    if width * height > limit:
        raise DataError(
            f"image {source} is {width}x{height} ({width * height / 1e6:.0f} megapixels), more than the "
            f"{limit / 1e6:.0f}-megapixel limit",
            hint="downscale the image before passing it, or raise EDGEKIT_MAX_IMAGE_PIXELS",
        )


def _to_8bit(image: Image.Image, source: Any) -> Image.Image:
    """16-bit and 32-bit integer images scaled to 0..255 (Pillow's convert would clip them at 255)."""
    from PIL import Image

    if image.mode.startswith("I;16") or image.mode == "I":
        values = np.asarray(image, dtype=np.float64)
        if values.size and (values.min() < 0 or values.max() > 65535):
            raise DataError(f"image {source} holds {image.mode} values outside 0..65535",
                            hint="save it as an 8- or 16-bit image, or pass the array as .npy")
        return Image.fromarray(np.rint(values * (255.0 / 65535.0)).astype(np.uint8), mode="L")
    if image.mode == "F":
        raise DataError(f"image {source} holds floating-point pixels: edgekit cannot tell their range",
                        hint="save it as an 8- or 16-bit image, or pass the preprocessed array as .npy")
    return image


def to_layout(images: np.ndarray, spec: Preprocessing) -> np.ndarray:
    """Decoded NHWC images in the model's layout (NCHW models get channels first)."""
    return np.ascontiguousarray(images.transpose(0, 3, 1, 2)) if spec.layout == "NCHW" else images


def normalize(raw: np.ndarray, spec: Preprocessing) -> np.ndarray:
    """``(raw * scale - mean) / std`` in float32, per channel (last axis, or axis 1 for NCHW)."""
    x = raw.astype(np.float32, copy=False) * np.float32(spec.scale)
    mean = np.asarray(spec.mean, dtype=np.float32)
    std = np.asarray(spec.std, dtype=np.float32)
    if mean.size > 1 or std.size > 1:
        channel_axis = 1 if spec.layout == "NCHW" and x.ndim == 4 else -1
        channels = x.shape[channel_axis]
        if (mean.size not in (1, channels)) or (std.size not in (1, channels)):
            raise InputError(
                f"preprocessing has {mean.size} mean / {std.size} std values for {channels} channels",
                hint="give one value, or one per channel",
            )
        if channel_axis == 1:
            mean, std = mean.reshape(-1, 1, 1), std.reshape(-1, 1, 1)
    if mean.any():
        x = x - mean
    if (std != 1).any():
        x = x / std
    return x


def conform(x: np.ndarray, sample_shape: tuple[int | None, ...], what: str) -> np.ndarray:
    """Check a batch against the model's per-sample shape, adding a missing channel axis of 1.

    ``None`` in ``sample_shape`` accepts any size there.
    """
    if x.ndim == len(sample_shape) + 1 and _matches(x.shape[1:], sample_shape):
        return x  # the common case, first
    if x.ndim == len(sample_shape) and _matches(x.shape, sample_shape):
        x = x[None]  # a single sample
    if x.ndim == len(sample_shape) and sample_shape[-1] == 1 and _matches(x.shape[1:], sample_shape[:-1]):
        x = x[..., None]
    if x.ndim == len(sample_shape) + 2 and x.shape[1] == 1 and _matches(x.shape[2:], sample_shape):
        x = x[:, 0]  # samples stored as (N, 1, ...) batches of one
    if x.ndim != len(sample_shape) + 1 or not _matches(x.shape[1:], sample_shape):
        expected = "(N, " + ", ".join("?" if d is None else str(d) for d in sample_shape) + ")"
        raise DataError(
            f"{what} has shape {tuple(x.shape)}; the model expects {expected}",
            hint="reshape the data to the model's input (image files and uint8 (N, H, W, C) pixel arrays are "
                 "resized to it)",
        )
    return x


def check_finite(
    x: np.ndarray,
    what: str,
    names: Sequence[str] | None = None,
    hint: str = "drop or repair those samples before calibrating",
    error: type[EdgekitError] = DataError,
) -> None:
    """Refuse NaN/Inf. ``names[i]`` says where sample ``i`` came from (a file row, an image path)."""
    if x.dtype.kind == "f" and not np.isfinite(x).all():
        bad = ~np.isfinite(x)
        if bad.any():
            where = np.argwhere(bad.reshape(x.shape[0], -1).any(axis=1)).ravel()
            first = names[int(where[0])] if names is not None else f"sample {int(where[0])}"
            raise error(
                f"{what} contains {int(bad.sum())} NaN/Inf values (first in {first}, "
                f"{len(where)} sample{'s' if len(where) != 1 else ''} affected)",
                hint=hint,
            )


def infer_preprocessing(
    input_shape: list[int],
    data_dtype: np.dtype,
    model_rescales: bool,
    overrides: dict[str, Any],
) -> Preprocessing:
    """Preprocessing from the model's input and the data, with user overrides on top.

    Rules: images (rank-4 NHWC, or NCHW as ONNX models often are; 1 or 3 channels) are resized to the model's height and
    width; a model that starts with a Rescaling/Normalization layer gets raw pixel values;
    otherwise integer (uint8) data is scaled to [0, 1], and float data is passed unchanged.
    """
    channels_first = len(input_shape) == 4 and input_shape[1] in (1, 3) and input_shape[-1] not in (1, 3)
    image_like = len(input_shape) == 4 and (channels_first or input_shape[-1] in (1, 3))
    resize = None
    color_order = "RGB"
    if image_like:
        if channels_first:
            height, width, channels = input_shape[2], input_shape[3], input_shape[1]
        else:
            height, width, channels = input_shape[1], input_shape[2], input_shape[3]
        if height > 0 and width > 0:
            resize = [int(height), int(width)]
        color_order = "L" if channels == 1 else "RGB"
    if model_rescales:
        scale, reason = 1.0, _FROM_MODEL + ": raw values in"
    elif data_dtype.kind in "iu":
        scale, reason = 1.0 / 255.0, f"{data_dtype} data and no Rescaling layer in the model: scaled to [0, 1]"
    else:
        scale, reason = 1.0, "float data passed to the model unchanged"
    spec = Preprocessing(
        resize=resize, scale=scale, color_order=color_order, layout="NCHW" if channels_first else "NHWC",
        inferred_from=reason,
    )
    given = {k: v for k, v in overrides.items() if v is not None}
    preset = given.pop("preset", None)
    if preset is not None:
        if preset not in PRESETS:
            raise DataError(f"unknown --preprocessing preset {preset!r}", hint="choose one of: " + ", ".join(PRESETS))
        given = {**PRESETS[preset], **given}
    if given:
        flags = sorted(k for k, v in overrides.items() if v is not None and k != "preset")
        spec.inferred_from += "; set by options: " + ", ".join(([f"--preprocessing {preset}"] if preset else []) + flags)
    if "scale" in given:
        spec.scale = float(given["scale"])
    if "mean" in given:
        spec.mean = [float(v) for v in given["mean"]]
    if "std" in given:
        if any(float(v) == 0 for v in given["std"]):
            raise DataError("--std must not contain 0")
        spec.std = [float(v) for v in given["std"]]
    if "color_order" in given:
        spec.color_order = str(given["color_order"]).upper()
    if "resize" in given:
        spec.resize = [int(v) for v in given["resize"]]
    return spec


# --preprocessing NAME: the normalizations models are commonly trained with (pixels 0..255 in).
PRESETS: dict[str, dict[str, Any]] = {
    "0..1": {"scale": 1 / 255, "mean": [0.0], "std": [1.0]},
    "-1..1": {"scale": 1 / 255, "mean": [0.5], "std": [0.5]},
    "imagenet": {"scale": 1 / 255, "mean": [0.485, 0.456, 0.406], "std": [0.229, 0.224, 0.225]},
    "raw": {"scale": 1.0, "mean": [0.0], "std": [1.0]},
}


def from_model(spec: Preprocessing) -> bool:
    """Whether the model normalizes its own input (a Rescaling/Normalization layer first)."""
    return spec.inferred_from.startswith(_FROM_MODEL)


def is_guess(spec: Preprocessing) -> bool:
    """Whether nothing but edgekit's rules chose this preprocessing (no model layer, no flag)."""
    return "set by options" not in spec.inferred_from and not spec.inferred_from.startswith(_FROM_MODEL)


def describe(spec: Preprocessing) -> str:
    """One line a person can check: the arithmetic, the size and the channel order."""
    parts = [f"x * {spec.scale:.6g}"]
    if any(spec.mean):
        parts.append(f"- mean {spec.mean}")
    if any(v != 1 for v in spec.std):
        parts.append(f"/ std {spec.std}")
    if spec.resize:
        parts.append(f"after resizing to {spec.resize[0]}x{spec.resize[1]} ({spec.color_order}, {spec.layout})")
    return " ".join(parts)


def load_input(
    item: Any, spec: Preprocessing | None, sample_shape: tuple[int | None, ...], native: np.dtype | None = None
) -> np.ndarray:
    """One runtime input (image path, PIL image, .npy path or array) as a float32 batch.

    ``native``: a bare model's integer input dtype; arrays already in it are its quantized
    values and are fed unchanged (a uint8-input .tflite takes raw pixels that way).
    """
    if isinstance(item, (str, os.PathLike)) and Path(item).is_dir():  # a folder of images: each, in name order
        return np.concatenate([load_input(file, spec, sample_shape, native) for file in image_files(Path(item))])
    if _is_pil_image(item) or (
        isinstance(item, (str, os.PathLike)) and Path(item).suffix.lower() not in (".npy", ".json")
    ):
        if spec is None:
            raise InputError("this model has no image preprocessing in its manifest", hint="pass a .npy array")
        size = tuple(spec.resize) if spec.resize else None
        raw = decode_image(item, size, spec.color_order, spec.resize_method)  # type: ignore[arg-type]
        return conform(normalize(to_layout(raw[None], spec), spec), sample_shape, f"image {item}")
    if isinstance(item, (str, os.PathLike)):
        array = read_array_file(Path(item))
        what = f"input {item}"
    else:
        try:
            array = np.asarray(item)
        except ValueError as exc:  # ragged nested lists
            raise InputError(f"input is not a rectangular array ({exc})",
                             hint="every sample must have the same shape") from None
        what = "input"
    if array.dtype.kind not in "uif":
        raise InputError(f"{what} has dtype {array.dtype}; expected numbers", hint="pass uint8 or float arrays")
    if array.size == 0:
        raise InputError(f"{what} is empty (shape {tuple(array.shape)})", hint="pass at least one sample")
    check_finite(array if array.ndim > 1 else array[None], what, error=InputError,
                 hint="replace the NaN/Inf values: they have no INT8 value and the outputs would be meaningless")
    pixels = raw_pixel_images(array, spec, sample_shape)
    if pixels is not None:  # uint8 (N, H, W, C) images: resized and laid out as image files are
        return conform(normalize(to_layout(pixels, spec), spec), sample_shape, what)  # type: ignore[arg-type]
    if array.dtype.kind in "iu" and spec is not None:
        array = normalize(array, spec)  # raw pixels: apply the manifest's preprocessing
    elif native is not None and native.kind in "iu" and array.dtype == native:
        return conform(array, sample_shape, what)
    return conform(array.astype(np.float32, copy=False), sample_shape, what)


def raw_pixel_images(array: np.ndarray, spec: Preprocessing | None,
                     sample_shape: tuple[int | None, ...]) -> np.ndarray | None:
    """``array`` as decoded NHWC images the model's size and colours, when it is uint8 pixels in
    (N, H, W, C) or (H, W, C) order (C 1, 3 or 4) for an image model and not already the model's
    own shape; else None (fed as it is, and a shape that fits nothing is refused by name: a 2-D
    array is not guessed to be an image)."""
    if spec is None or spec.resize is None or array.dtype != np.uint8 or array.ndim not in (3, 4):
        return None
    ready = (array.ndim == len(sample_shape) + 1 and _matches(array.shape[1:], sample_shape)) or (
        array.ndim == len(sample_shape) and _matches(array.shape, sample_shape))
    if ready or array.shape[-1] not in (1, 3, 4):
        return None  # the model's shape already, or channels first / not images: conform names the shape
    images = array if array.ndim == 4 else array[None]  # a batch (N, H, W, C), or one (H, W, C) image
    from PIL import Image

    size = tuple(spec.resize)
    decoded = [decode_image(Image.fromarray(image[..., 0] if image.ndim == 3 and image.shape[-1] == 1 else image),
                            size, spec.color_order, spec.resize_method)  # type: ignore[arg-type]
               for image in images]
    return np.stack(decoded)


def image_files(folder: Path) -> list[Path]:
    """The images and array files in a folder given as an input, in name order."""
    files = sorted(p for p in folder.rglob("*") if p.is_file()
                   and (p.suffix.lower() in IMAGE_SUFFIXES or p.suffix.lower() in (".npy", ".json")))
    if not files:
        raise InputError(f"input folder {folder} holds no images or .npy/.json arrays",
                         hint="pass image files, a folder of them, or .npy arrays")
    return files


def read_array_file(path: Path) -> np.ndarray:
    """A ``.npy`` or ``.json`` array file, with one clear error for every way it can be bad."""
    try:
        if path.suffix.lower() == ".json":
            import json

            try:
                data = json.loads(path.read_bytes())
            except RecursionError:
                raise InputError(f"input {path} is nested too deeply to be an array",
                                 hint="write the array with json.dump(array.tolist(), file)") from None
            except ValueError as exc:
                raise InputError(f"input {path} is not valid JSON ({exc})",
                                 hint="write the array with json.dump(array.tolist(), file)") from None
            try:
                return np.asarray(data)
            except (ValueError, TypeError) as exc:
                raise InputError(f"input {path} is not a rectangular array of numbers ({exc})",
                                 hint="every sample must have the same shape and hold only numbers") from None
        _check_npy_size(path)
        return np.load(path, allow_pickle=False)
    except InputError:
        raise
    except IsADirectoryError:
        raise InputError(f"input {path} is a directory", hint="pass .npy/.json files or images") from None
    except (ValueError, EOFError, OSError) as exc:
        from ..errors import storage_error

        disk = storage_error(exc, "read") if isinstance(exc, OSError) else None
        if disk is not None:
            raise disk from None
        raise InputError(f"input {path} is not a readable array file ({array_file_problem(exc)})",
                         hint="save arrays with numpy.save (numbers only, no objects) or as JSON lists") from None


def array_file_problem(exc: BaseException) -> str:
    """What is wrong with an array file, in edgekit's words: numpy's own message for an object array
    advises ``allow_pickle=True``, which would run code from the file; edgekit never does that."""
    if "allow_pickle" in str(exc) or "Python objects" in str(exc):
        return "it holds Python objects (an object array), which edgekit does not unpickle: a file can run code so"
    return f"{type(exc).__name__}: {exc}"


def _check_npy_size(path: Path) -> None:
    """A ``.npy`` whose header promises more bytes than the file holds (truncated, or a corrupt
    header) is refused as such; loading it asks for the header's size in memory and fails as if the
    machine were out of memory."""
    import math

    fmt = np.lib.format
    with open(path, "rb") as file:
        version = fmt.read_magic(file)
        if version not in ((1, 0), (2, 0)):  # a newer header: numpy's own reading judges it
            return
        shape, _, dtype = (fmt.read_array_header_1_0 if version == (1, 0) else fmt.read_array_header_2_0)(file)
        held = path.stat().st_size - file.tell()
    needed = math.prod(shape) * dtype.itemsize
    if not dtype.hasobject and needed > held:  # an object array is numpy's to refuse (array_file_problem)
        raise InputError(f"input {path} is not a readable array file: its header says shape {list(shape)} of "
                         f"{dtype} ({needed} bytes), the file holds {held} (truncated or corrupt)",
                         hint="save the array again with numpy.save (numbers only, no objects)")


def _matches(shape: tuple[int, ...], expected: tuple[int | None, ...]) -> bool:
    return len(shape) == len(expected) and all(e is None or e == s for s, e in zip(shape, expected))
