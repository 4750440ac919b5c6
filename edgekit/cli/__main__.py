"""``python -m edgekit.cli``: the ``edgekit`` command."""

from .main import main

main()
