"""Calibration/evaluation data sources and the preprocessing shared with the runtime."""

from .preprocessing import check_finite, conform, decode_image, infer_preprocessing, load_input, normalize
from .sources import DataSource, RawBatch, open_data

__all__ = [
    "DataSource",
    "RawBatch",
    "check_finite",
    "conform",
    "decode_image",
    "infer_preprocessing",
    "load_input",
    "normalize",
    "open_data",
]
