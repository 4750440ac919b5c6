#!/usr/bin/env bash
# Create/reuse .venv, install edgekit with its dev extras, run the whole test suite.
# Without arguments: every test not marked serial on 2 workers (pytest-xdist), then the serial
# ones (timings and signals) alone. Extra arguments go to one plain pytest run instead
# (e.g. ./scripts/test.sh -m "not slow" -x).
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/_venv.sh dev
# the tests byte-compiled, and pytest's rewritten test modules cached for the next process that
# collects them (PYTHONDONTWRITEBYTECODE, where a machine sets it, made every worker rewrite all
# of them again: 4 s of each collection)
python -m compileall -q -j 0 tests >/dev/null 2>&1 || true
unset PYTHONDONTWRITEBYTECODE
if [ "$#" -gt 0 ]; then
  exec python -m pytest "$@"
fi
# One worker per core: a third worker on 2 cores kept them busier but did more work (the same fresh
# clone in one hour: 21 min 28 s and 41.6 CPU-minutes with 3 workers, 20 min 25 s and 35.9 with 2:
# its converters' thread pools contend). worksteal: a worker that runs out of tests takes queued ones
# from the others, so the long packaging tests do not leave one worker busy while the others idle
# the packages and models built once for the tests (tests/conftest.py built_once) serve both runs
EDGEKIT_TEST_SHARED_BUILDS="$(mktemp -d "${TMPDIR:-/tmp}/edgekit-test-builds-XXXXXX")"
export EDGEKIT_TEST_SHARED_BUILDS
# litert-torch's own environment (edgekit/conversion/toolenv.py: about 2.5 minutes of pip on a new
# machine), created beside the first tests rather than by the first test that needs it, which
# held its worker, and every worker reaching such a test, until pip ended; a no-op once it exists
python -m edgekit.conversion.toolenv litert-torch >"$EDGEKIT_TEST_SHARED_BUILDS/toolenv.log" 2>&1 &
toolenv_pid=$!
# the job has usually ended by then: a failed kill must not turn a green run's exit status into 1
trap 'kill "$toolenv_pid" 2>/dev/null || true; rm -rf "$EDGEKIT_TEST_SHARED_BUILDS"' EXIT
# --durations: the slowest tests of each part, so a run's log shows where the suite's time goes
python -m pytest -n "${EDGEKIT_TEST_WORKERS:-2}" --dist worksteal -m "not serial" --durations=25
python -m pytest -m serial --durations=5
