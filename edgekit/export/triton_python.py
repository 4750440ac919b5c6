"""``edgekit export triton --backend python``: a Triton model whose Python-backend ``model.py``
runs the package with edgekit's own runtime, so any package (TFLite, ONNX; whichever artifact
the serving machine runs best) scales out on Triton, not only packages with an ONNX artifact.

The repository holds ``NAME/config.pbtxt`` (backend "python", every input and output, dynamic
batching), ``NAME/1/model.py`` and the package itself in ``NAME/1/package/``. Triton's Python
backend must find ``edgekit`` and a runtime library: install ``edgekit[onnx]`` (or
``[tflite]``) into the Python the backend embeds, or pass ``--python-path`` (a virtual
environment's site-packages; the backend's interpreter ignores ``PYTHONPATH``, which model.py
therefore reads itself).
"""

from __future__ import annotations

MODEL_PY = '''"""Triton Python-backend model written by `edgekit export triton --backend python`.

Runs the edgekit package in ./package with edgekit's runtime. Triton's dynamic batcher hands
execute() several requests: their inputs are checked one by one (a bad request fails alone),
run as one batch, and each request gets its own rows of every output, by name.
"""

import json
import os
import sys

import numpy as np
import triton_python_backend_utils as pb_utils


def _extend_path(parameters):
    """Directories holding edgekit and its runtime, ahead of the backend's own: the config's
    python_path, then PYTHONPATH (the backend's embedded interpreter ignores the variable). Their
    .pth files count too, as in a site-packages (editable installs live there)."""
    import site

    for entry in (os.environ.get("PYTHONPATH", ""), parameters.get("python_path", "")):
        for folder in reversed([p for p in entry.split(os.pathsep) if p]):
            if folder not in sys.path:
                sys.path.insert(0, folder)
                site.addsitedir(folder)


class TritonPythonModel:
    def initialize(self, args):
        config = json.loads(args["model_config"])
        parameters = {k: v.get("string_value", "") for k, v in config.get("parameters", {}).items()}
        _extend_path(parameters)
        import edgekit

        package = os.path.join(args["model_repository"], args["model_version"], "package")
        threads = parameters.get("threads")
        self.model = edgekit.load(package, artifact=parameters.get("artifact") or None,
                                  threads=int(threads) if threads else None)
        self.inputs = list(self.model.input_names)
        self.outputs = list(self.model.output_names)

    def execute(self, requests):
        responses = [None] * len(requests)
        accepted = []
        for index, request in enumerate(requests):
            try:
                feeds = {}
                for name in self.inputs:
                    tensor = pb_utils.get_input_tensor_by_name(request, name)
                    if tensor is None:
                        raise ValueError(f"missing input {name!r}")
                    feeds[name] = tensor.as_numpy()
                accepted.append((index, self.model.check_input(feeds)))
            except Exception as exc:  # this request's inputs are wrong: it fails alone
                responses[index] = pb_utils.InferenceResponse(error=pb_utils.TritonError(str(exc)))
        if not accepted:
            return responses
        batch = [np.concatenate([checked[k] for _, checked in accepted]) for k in range(len(self.inputs))]
        try:
            outputs = self.model.run_checked(batch)
        except Exception as exc:  # the model raised: every request of this batch gets the error
            for index, _ in accepted:
                responses[index] = pb_utils.InferenceResponse(error=pb_utils.TritonError(str(exc)))
            return responses
        start = 0
        for index, checked in accepted:
            rows = len(checked[0])
            # a copy, not a view: the backend reads the whole buffer behind an array
            tensors = [pb_utils.Tensor(name, np.array(y[start:start + rows], copy=True))
                       for name, y in zip(self.outputs, outputs)]
            responses[index] = pb_utils.InferenceResponse(output_tensors=tensors)
            start += rows
        return responses

    def finalize(self):
        self.model.close()
'''
