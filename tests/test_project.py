"""Project metadata that users see when installing."""

from __future__ import annotations

import sys

from tests.conftest import ROOT

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover
    import tomli as tomllib


def test_license_is_an_spdx_string_so_setuptools_prints_no_deprecation_banner():
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())
    assert project["project"]["license"] == "Apache-2.0"
    assert any(r.startswith("setuptools>=77") for r in project["build-system"]["requires"])


def test_every_test_file_is_collected():
    """pytest skips folders named ``build`` by default, which once hid tests/build/ from every run."""
    import subprocess

    listed = subprocess.run([sys.executable, "-m", "pytest", "--collect-only", "-q", "-p", "no:cacheprovider"],
                            cwd=ROOT, capture_output=True, text=True, timeout=300)
    collected = {line.split("::")[0] for line in listed.stdout.splitlines() if "::" in line}
    on_disk = {str(p.relative_to(ROOT)) for p in (ROOT / "tests").rglob("test_*.py")}
    assert on_disk - collected == set(), listed.stdout[-2000:]


def test_every_script_starts_and_prints_its_usage():
    """A module moved inside edgekit must not leave a script importing it from the old place
    (bench_package.py once failed at its first line after the rooms were named)."""
    import subprocess

    scripts = sorted(p for p in (ROOT / "scripts").glob("*.py") if not p.name.startswith("_") and p.name != "benchio.py")
    assert scripts
    for script in scripts:
        result = subprocess.run([sys.executable, str(script), "--help"], capture_output=True, text=True, cwd=ROOT,
                                timeout=120)
        assert result.returncode == 0 and "usage" in result.stdout.lower(), (script.name, result.stderr[-1500:])
