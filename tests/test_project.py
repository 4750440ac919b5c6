"""Project metadata that users see when installing."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from tests.conftest import ROOT

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover
    import tomli as tomllib


def test_license_is_an_spdx_string_so_setuptools_prints_no_deprecation_banner():
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())
    assert project["project"]["license"] == "Apache-2.0"
    assert any(r.startswith("setuptools>=77") for r in project["build-system"]["requires"])


def _hidden_test_files(config: pytest.Config, tests: Path) -> list[str]:
    """The test files under ``tests`` pytest's own collection rules would not collect: the ignore
    hooks (``norecursedirs``, ``collect_ignore``, virtualenvs) asked of every folder on the way to
    each file and of the file, and the file name patterns."""
    from _pytest.pathlib import fnmatch_ex

    patterns = config.getini("python_files")
    hidden = []
    for path in sorted(tests.rglob("test_*.py")):
        relative = path.relative_to(tests)
        for step in [*reversed(relative.parents), relative][1:]:  # tests/ itself is where collection starts
            if config.hook.pytest_ignore_collect(collection_path=tests / step, config=config):
                hidden.append(f"{relative} (at {step})")
                break
        if not any(fnmatch_ex(pattern, path) for pattern in patterns):
            hidden.append(f"{relative} (matches none of {patterns})")
    return hidden


def test_every_test_file_is_collected(pytestconfig):
    """pytest skips folders named ``build`` by default, which once hid tests/build/ from every run.
    Asked of pytest's collection rules in this process (a ``--collect-only`` child took 25 s)."""
    assert pytestconfig.getini("testpaths") == ["tests"]
    assert _hidden_test_files(pytestconfig, ROOT / "tests") == []


def test_a_test_folder_pytest_skips_by_default_is_found(pytestconfig, tmp_path):
    for folder in ("build", "formats"):
        (tmp_path / folder).mkdir()
        (tmp_path / folder / "test_one.py").write_text("def test_one():\n    pass\n")
    assert _hidden_test_files(pytestconfig, tmp_path) == ["build/test_one.py (at build)"]


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


def _build_module(folder: str):  # noqa: ANN202
    import importlib.util

    spec = importlib.util.spec_from_file_location(f"{folder}_build", ROOT / "models" / folder / "build.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # the fingerprint reads the recipes' module by name
    spec.loader.exec_module(module)
    return module


def test_every_stored_reference_model_was_trained_by_its_recipe_as_it_is_now():
    """A build copies a stored model only while its recipe is unchanged and trains it otherwise:
    an edited recipe left unstored would cost every test run its training again, silently."""
    for folder in ("verdict", "attention", "quantized"):
        module = _build_module(folder)
        for name, (files, train) in module.STORED.items():
            assert module.TRAINED.current(name, files, train), (
                f"models/{folder}: {name}'s recipe changed since it was stored: "
                f"python models/{folder}/build.py --store {name}")


def test_a_recipe_fingerprint_follows_the_helpers_and_constants_it_uses(tmp_path):
    sys.path.insert(0, str(ROOT / "models"))
    from trained import Store, fingerprint

    recipe = '''
from pathlib import Path
SIZE = {size}

def samples():
    return list(range({count}))

def unrelated():
    return {other}

def train(folder: Path) -> None:
    (folder / "model.txt").write_text(str(samples()[:SIZE]))
'''

    def load(size: int, count: int, other: int):  # noqa: ANN202
        path = tmp_path / f"recipe_{size}_{count}_{other}.py"
        path.write_text(recipe.format(size=size, count=count, other=other))
        import importlib.util

        spec = importlib.util.spec_from_file_location(path.stem, path)
        module = importlib.util.module_from_spec(spec)
        sys.modules[spec.name] = module
        spec.loader.exec_module(module)
        return module.train

    base = fingerprint(load(3, 10, 0))
    assert fingerprint(load(3, 10, 1)) == base  # a function the recipe never names
    assert fingerprint(load(4, 10, 0)) != base  # a constant it reads
    assert fingerprint(load(3, 11, 0)) != base  # a helper it calls

    store = Store(tmp_path / "trained")
    train = load(3, 10, 0)
    store.store("toy", ["model.txt"], train)
    assert store.current("toy", ["model.txt"], train)
    assert not store.current("toy", ["model.txt"], load(4, 10, 0))
    out = tmp_path / "out"
    out.mkdir()
    store.build("toy", ["model.txt"], train, out)
    assert (out / "model.txt").read_text() == "[0, 1, 2]"


def test_the_test_scripts_exit_trap_keeps_a_green_runs_status_when_its_background_job_has_ended(tmp_path):
    """scripts/test.sh's EXIT trap stops the background job it started; under ``set -e`` a
    ``kill`` of a job that already ended made every green run exit 1 (CI read it as failed)."""
    import re
    import subprocess

    text = (ROOT / "scripts" / "test.sh").read_text()
    traps = re.findall(r"^trap '(.*)' EXIT$", text, flags=re.MULTILINE)
    assert traps, "scripts/test.sh sets no EXIT trap"
    ended = subprocess.Popen(["true"])
    ended.wait()
    shared = tmp_path / "shared"
    shared.mkdir()
    script = (f"set -euo pipefail\ntoolenv_pid={ended.pid}\nEDGEKIT_TEST_SHARED_BUILDS={shared}\n"
              f"trap '{traps[0]}' EXIT\ntrue\n")
    result = subprocess.run(["bash", "-c", script], capture_output=True, text=True)
    assert result.returncode == 0, result.stderr
    assert not shared.exists()
