# Sourced by the set-up scripts: create or reuse .venv and install edgekit with the given extras.
# Reinstalls only when pyproject.toml or the extras change (a stamp file records what was installed).
# EDGEKIT_VENV names another environment folder (CI runs the demo in a fresh one holding only its extras).
set -euo pipefail
extras="$1"
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
venv="${EDGEKIT_VENV:-$root/.venv}"
python_bin="${PYTHON:-}"
if [ -z "$python_bin" ]; then
  for candidate in python3.11 python3 python; do
    if command -v "$candidate" >/dev/null 2>&1; then python_bin="$candidate"; break; fi
  done
fi
[ -n "$python_bin" ] || { echo "error: Python 3.10+ (3.11 recommended) is required" >&2; exit 1; }
if [ ! -x "$venv/bin/python" ]; then
  echo "creating $venv with $("$python_bin" --version 2>&1)" >&2
  "$python_bin" -m venv "$venv"
fi
stamp="$venv/.edgekit-installed"
want="$(cat "$root/pyproject.toml" | sha256sum | cut -d' ' -f1) $extras"
if [ ! -f "$stamp" ] || [ "$(cat "$stamp")" != "$want" ]; then
  echo "installing edgekit[$extras] into $venv (first run downloads TensorFlow: a few minutes)" >&2
  "$venv/bin/python" -m pip install --quiet --disable-pip-version-check --upgrade pip
  # --no-compile, then compileall on every core: pip byte-compiles file by file on one core (a fresh
  # dev venv: 132 s with pip's compile, 48 + 29 s so). As under pip, a file written for a newer
  # Python than this one does not compile and is skipped (PyTorch ships one). The libraries' own test
  # folders (a fifth of the files, none imported by a conversion or a run) are left out: 31 -> 23 s
  "$venv/bin/python" -m pip install --quiet --disable-pip-version-check --no-compile -e "$root[$extras]"
  "$venv/bin/python" -m compileall -q -j 0 -x '/tests/' \
    "$("$venv/bin/python" -c 'import sysconfig; print(sysconfig.get_path("purelib"))')" >/dev/null 2>&1 || true
  echo "$want" > "$stamp"
fi
# the checkout's own modules too (an editable install is not byte-compiled, and where
# PYTHONDONTWRITEBYTECODE is set every process compiles them anew: 0.2 s of each command's start);
# a no-op for files unchanged since
"$venv/bin/python" -m compileall -q -j 0 "$root/edgekit" >/dev/null 2>&1 || true
export PATH="$venv/bin:$PATH"
export TF_CPP_MIN_LOG_LEVEL=3
