"""Calibration/evaluation data sources and the preprocessing shared with the runtime.

Submodules are imported where used (``edgekit.data.sources``, ``edgekit.data.preprocessing``)
so the device path does not pay for the packaging-side data loaders.
"""
