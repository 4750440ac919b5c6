"""``python -m edgekit.run``: the device command, kept at this name (its body is ``edgekit.cli.run``)."""

from .cli.run import main
from .cli.tools import finish

if __name__ == "__main__":
    finish(main())
