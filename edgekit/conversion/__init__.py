"""What conversions run through: the forms a model takes (forms.py) and the route table joining
sources, steps and formats (routes.py); the child processes every converter runs in (worker.py,
worker_reuse.py) and converters' own environments (toolenv.py)."""
