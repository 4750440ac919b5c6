#!/usr/bin/env bash
# Create/reuse .venv, install edgekit with its dev extras, run the whole test suite.
# Without arguments: every test not marked serial on 3 workers (pytest-xdist), then the serial
# ones (timings and signals) alone. Extra arguments go to one plain pytest run instead
# (e.g. ./scripts/test.sh -m "not slow" -x).
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/_venv.sh dev
if [ "$#" -gt 0 ]; then
  exec python -m pytest "$@"
fi
# 3 workers on 2 cores: a worker waiting for a shared build another worker makes, a server or a timeout
# leaves its core to the others (measured on the 2-core machine: 1.88 cores busy against 1.72 with 2 workers;
# 7 GB of memory at the peak). worksteal: a worker that runs out of tests takes queued ones from the
# others, so the long packaging tests do not leave one worker busy while the others idle at the end
# the packages and models built once for the tests (tests/conftest.py built_once) serve both runs
EDGEKIT_TEST_SHARED_BUILDS="$(mktemp -d "${TMPDIR:-/tmp}/edgekit-test-builds-XXXXXX")"
export EDGEKIT_TEST_SHARED_BUILDS
# litert-torch's own environment (edgekit/conversion/toolenv.py: about 2.5 minutes of pip on a new
# machine), created beside the first tests rather than by the first test that needs it, which
# held its worker, and every worker reaching such a test, until pip ended; a no-op once it exists
python -m edgekit.conversion.toolenv litert-torch >"$EDGEKIT_TEST_SHARED_BUILDS/toolenv.log" 2>&1 &
toolenv_pid=$!
trap 'kill "$toolenv_pid" 2>/dev/null; rm -rf "$EDGEKIT_TEST_SHARED_BUILDS"' EXIT
# --durations: the slowest tests of each part, so a run's log shows where the suite's time goes
python -m pytest -n "${EDGEKIT_TEST_WORKERS:-3}" --dist worksteal -m "not serial" --durations=25
python -m pytest -m serial --durations=5
