#!/usr/bin/env bash
# Create/reuse .venv, install edgekit with its dev extras, run the whole test suite.
# Extra arguments go to pytest (e.g. ./scripts/test.sh -m "not slow" -x).
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/_venv.sh dev
exec python -m pytest "$@"
