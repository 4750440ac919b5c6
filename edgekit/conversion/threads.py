"""How many threads the packager's converter children use: every core by default,
``EDGEKIT_THREADS=N`` caps them.

Why: a build machine that runs several packagings at once (a CI runner with one job per core, the
test suite's workers) otherwise gets a thread pool per core in each of them: TensorFlow's,
PyTorch's OpenMP pool and ONNX Runtime's, whose idle threads spin waiting for work while another
process needs the core. Capped, the same work takes less CPU (the suite's PyTorch and search tests
on 2 cores, one worker per core, their converters' pools already at one thread: the validation runs'
ONNX Runtime pools capped too, 188 s -> 169 s). Timing runs are not affected: they pin one thread
(``packaging/speed.py``), and a device run takes its own ``--threads``.
"""

from __future__ import annotations

import os

from ..errors import OptionError

ENV = "EDGEKIT_THREADS"

# what each library reads its thread count from when it starts (a converter child is fresh when the
# environment it would get changes, worker_reuse.py, so a changed cap never meets a started pool)
_NATIVE = ("OMP_NUM_THREADS", "MKL_NUM_THREADS", "OPENBLAS_NUM_THREADS", "TF_NUM_INTRAOP_THREADS",
           "TF_NUM_INTEROP_THREADS")


def cap() -> int | None:
    """The thread cap the environment asks for; None when every core may be used."""
    value = os.environ.get(ENV, "").strip()
    if not value:
        return None
    try:
        threads = int(value)
    except ValueError:
        threads = 0
    if threads < 1:
        raise OptionError(f"{ENV}={value!r} is not a thread count",
                          hint=f"set {ENV} to a whole number of threads of at least 1, or unset it to use every core")
    return threads


def child_env() -> dict[str, str]:
    """The native libraries' thread settings for a converter child under the cap (none without one);
    a library's own variable, where the environment sets it, is the more specific and stays."""
    threads = cap()
    if not threads:
        return {}
    return {name: os.environ.get(name) or str(threads) for name in _NATIVE}
