"""The converter children themselves are under test here: each test starts outside the suite's
shared block of reused children (``tests/conftest.py::_warm_converters``), as a packaging run
outside the suite would."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from edgekit.conversion import worker


@pytest.fixture(autouse=True)
def _own_children() -> Iterator[None]:
    shared = getattr(worker.reuse, "pool", None)
    worker.reuse.pool = None
    try:
        yield
    finally:
        worker.reuse.pool = shared
