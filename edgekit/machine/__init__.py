"""The machine edgekit runs on, below every side that asks about it: its facts (``facts.py``:
the CPU, its int8 features, a GPU) and the local cache (``cache.py``: verified packages;
``compiled_cache.py``: runtimes' compiled models). The formats' backends and builders, the
runtime and the benchmarks all stand above it."""
