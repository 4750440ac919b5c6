"""``python -m edgekit.run``: the device command, kept at this name (its body is ``edgekit.cli.run``)."""

import sys

from .cli.run import main

if __name__ == "__main__":
    sys.exit(main())
