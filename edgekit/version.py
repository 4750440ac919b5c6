"""edgekit's version, in a module of its own so that any module can read it without importing
the package's public API (which imports the packager and the runtime)."""

__version__ = "0.1.0"  # the same as pyproject.toml's (tests/test_structure.py checks)
