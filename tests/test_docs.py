"""The documentation: a README that fits on a screen, a site that builds strictly, a command
reference that names every option, and a notebook that runs."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from edgekit.cli.reference import option_strings, render
from tests.conftest import ROOT, exec_here

REFERENCE = ROOT / "docs" / "reference" / "cli.md"


def test_the_readme_starts_with_the_two_setup_commands_and_fits_on_a_screen():
    lines = (ROOT / "README.md").read_text().splitlines()
    assert len(lines) <= 250
    commands = [line.split("#")[0].strip() for line in lines[:6] if line.startswith("./scripts/")]
    assert commands == ["./scripts/demo.sh", "./scripts/test.sh"]


def test_the_command_reference_is_generated_and_names_every_option():
    text = REFERENCE.read_text()
    assert text == render(), "docs/reference/cli.md is stale: run python -m edgekit.cli.reference"
    missing = sorted(option for option in option_strings() if option not in text)
    assert not missing, f"options missing from the reference: {missing}"
    assert {"--calibration", "--fail-on-regression", "--margin", "--grpc-port", "--sweep-threads"} <= option_strings()


def test_the_site_builds_strictly(tmp_path):
    result = subprocess.run([sys.executable, "-m", "mkdocs", "build", "--strict", "-d", str(tmp_path / "site")],
                            cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stderr[-3000:]
    assert (tmp_path / "site" / "reference" / "cli" / "index.html").is_file()


@pytest.mark.slow
def test_the_notebook_runs(tmp_path):
    """The worked example: an in-memory Keras model, a generator of samples as calibration and
    (x, y) arrays as held-out data, packaged for TFLite and ONNX and run with the device runtime."""
    notebook = json.loads((ROOT / "docs" / "notebook.ipynb").read_text())
    cells = ["".join(cell["source"]) for cell in notebook["cells"] if cell["cell_type"] == "code"]
    # a bare last expression is the cell's displayed value, as in a notebook
    script = "\n\n".join(f"_value = None\nexec(compile({cell!r}, 'cell-{i}', 'exec'))" for i, cell in enumerate(cells))
    script += ("\nprint(repr(result))\nprint(result._repr_html_()[:5])\nprint('NAME:' + result.manifest.name)"
               "\nprint('TABLE:' + str('SQNR' in result.table()))")
    printed = exec_here(script, tmp_path)
    assert "tflite: passed" in printed and "onnx: passed" in printed and "<pre>" in printed
    assert "INT8 accuracy on the device runtime:" in printed
    assert "NAME:notebook_classifier" in printed and "TABLE:True" in printed
    accuracy = float(printed.split("INT8 accuracy on the device runtime:")[1].split()[0])
    assert accuracy >= 0.8


def test_every_report_a_documented_compare_reads_is_made_by_an_earlier_command():
    """The tutorial compared this-device.bench.json with other-device.bench.json, which no
    command made: every report file or folder `edgekit compare` reads in the docs is written by
    an earlier `--report`, `edgekit card -o` or `--store`, `edgekit cards add` (or copied back from a device
    with scp) in the same page."""
    import re
    import shlex

    pages = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
    checked = 0
    for page in pages:
        made: list[str] = []
        for block in re.findall(r"```(?:bash|sh)?\n(.*?)```", page.read_text(), flags=re.S):
            for line in block.replace("\\\n", " ").splitlines():
                text = line.split(" #")[0].replace("[", " ").replace("]", " ")
                try:
                    words = shlex.split(text)
                except ValueError:  # a quote that closes on another line (python -c "...")
                    words = text.split()
                made += [words[i + 1] for i, w in enumerate(words[:-1]) if w in ("--report", "--card")]
                made += [words[i + 1] for i, w in enumerate(words[:-1]) if words[:2] == ["edgekit", "card"]
                         and w in ("-o", "--output")]  # latency cards, which compare tables too
                if words[:2] == ["edgekit", "card"] and "--store" in words or words[:3] == ["edgekit", "cards", "add"]:
                    made.append(words[3 if words[1] == "cards" else 2])  # a package holding cards
                made += [w.split(":", 1)[1] for w in words[1:-1] if words[0] == "scp" and ":" in w]
                if words[:2] != ["edgekit", "compare"]:
                    continue
                for source in [w for w in words[2:] if not w.startswith("-")][:_positionals(words)]:
                    checked += 1
                    produced = any(m == source or (source.endswith("/") and m.startswith(source)) for m in made)
                    assert produced, f"{page.name}: `{line.strip()}` reads {source}, which no earlier command writes"
    assert checked >= 4


def _positionals(words: list[str]) -> int:
    """How many leading non-option words after `edgekit compare` are report paths (the rest are
    option values such as --html's file)."""
    count = 0
    for word in words[2:]:
        if word.startswith("-"):
            break
        count += 1
    return count
