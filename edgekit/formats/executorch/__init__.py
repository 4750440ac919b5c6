"""ExecuTorch: ``.pte`` programs lowered to XNNPACK (PT2E static INT8), for PyTorch's own
on-device runtime.

The conversion (``convert``, child side) and the device backend (``backend``) are here; the
format is registered (``FORMAT``) once its builder joins them to the packaging run's
validation, search and manifest.
"""
