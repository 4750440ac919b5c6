"""The commands: ``edgekit`` (main.py), ``python -m edgekit.run`` (run.py), the options they share
(options.py), one error line per failure (tools.py), the validation table they print and the
generated command reference (reference.py)."""
