"""The code's shape: no import cycle among edgekit's modules, no function over 80 lines, the
formats and the packaging core kept apart (the route table joins them), one version."""

from __future__ import annotations

import ast
import functools
import re
import sys
import tomllib
from pathlib import Path

from tests.conftest import ROOT

PACKAGE = ROOT / "edgekit"
MAX_FUNCTION_LINES = 80


@functools.lru_cache(maxsize=None)
def _parsed(path: Path, mtime_ns: int) -> ast.Module:
    return ast.parse(path.read_text(), str(path))


def parsed(path: Path) -> ast.Module:
    """A module's syntax tree, parsed once per suite run (every rule here reads the same files;
    keyed by the file's modification time, so a file a finder test writes is read afresh)."""
    return _parsed(path, path.stat().st_mtime_ns)


def _modules(package: Path = PACKAGE) -> dict[str, Path]:
    found = {}
    for path in package.rglob("*.py"):
        parts = list(path.relative_to(package.parent).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts.pop()
        found[".".join(parts)] = path
    return found


def import_graph(package: Path = PACKAGE) -> dict[str, set[str]]:
    """Every edgekit module -> the edgekit modules it imports, at the top, inside a function or
    under ``if TYPE_CHECKING:`` (a lazy import that closes a cycle is still a cycle: it only moves
    the failure to run time; a type-checking one ties the two modules' meanings together)."""
    modules = _modules(package)
    graph: dict[str, set[str]] = {}
    for name, path in modules.items():
        tree = parsed(path)
        package = name if path.name == "__init__.py" else name.rpartition(".")[0]
        deps: set[str] = set()
        for node in ast.walk(tree):
            if node.__class__ not in (ast.Import, ast.ImportFrom):
                continue
            if isinstance(node, ast.Import):
                deps |= {a.name for a in node.names if a.name in modules}
                continue
            base = node.module or ""
            if node.level:
                anchor = package.split(".")[: len(package.split(".")) - (node.level - 1)]
                base = ".".join(anchor + ([node.module] if node.module else []))
            for alias in node.names:
                target = f"{base}.{alias.name}"
                deps.add(target if target in modules else base)
        graph[name] = {d for d in deps if d in modules and d != name}
    return graph


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected groups of more than one module (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        on_stack.add(node)
        for other in sorted(graph[node]):
            if other not in index:
                visit(other)
                low[node] = min(low[node], low[other])
            elif other in on_stack:
                low[node] = min(low[node], index[other])
        if low[node] == index[node]:
            group = []
            while True:
                member = stack.pop()
                on_stack.discard(member)
                group.append(member)
                if member == node:
                    break
            if len(group) > 1:
                found.append(sorted(group))

    for node in sorted(graph):
        if node not in index:
            visit(node)
    return found


def test_no_import_cycle_among_edgekit_modules():
    graph = import_graph()
    assert len(graph) > 100 and "edgekit.device.runtime" in graph["edgekit"]  # the walk sees lazy imports
    assert cycles(graph) == []


def test_the_cycle_finder_finds_a_cycle_through_a_lazy_import():
    graph = {"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}
    assert cycles(graph) == [["a", "b", "c"]]


def test_a_type_checking_import_closes_a_cycle(tmp_path):
    """``formats/building`` typed device profiles through ``if TYPE_CHECKING: from ..device.devices
    import Profile`` while ``device/devices`` imports the formats: a circle the walk skipped."""
    package = tmp_path / "pkg"
    package.mkdir()
    (package / "__init__.py").write_text("")
    (package / "a.py").write_text("from . import b\n")
    (package / "b.py").write_text("from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from .a import A\n")
    assert cycles(import_graph(package)) == [["pkg.a", "pkg.b"]]


def test_no_function_over_80_lines():
    long = []
    for path in sorted(PACKAGE.rglob("*.py")):
        for node in ast.walk(parsed(path)):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                lines = node.end_lineno - node.lineno + 1
                if lines > MAX_FUNCTION_LINES:
                    long.append(f"{path.relative_to(ROOT)}:{node.lineno} {node.name} ({lines} lines)")
    assert long == []


MAX_MODULE_LINES = 600


def test_no_module_over_600_lines():
    """A module past 600 lines holds more than one job (issue 75 split the child sides by job)."""
    long = [f"{path.relative_to(ROOT)} ({n} lines)" for path in sorted(PACKAGE.rglob("*.py"))
            if (n := len(path.read_text().splitlines())) > MAX_MODULE_LINES]
    assert long == []


# the search's own modules: its knobs are SearchSettings fields (one frozen value on the packaging
# context), never numbers scattered as module constants
SEARCH_MODULES = ("packaging/search",)
NOT_KNOBS = {"MARGIN_CAP"}  # how an exact half (SQNR inf) is written as a margin, not how the search runs


def test_the_search_knobs_are_one_settings_value():
    found = []
    for where in SEARCH_MODULES:
        root = PACKAGE / where
        for path in sorted(root.rglob("*.py") if root.is_dir() else [root]):
            for node in parsed(path).body:
                if isinstance(node, ast.Assign) and isinstance(node.value, ast.Constant) \
                        and isinstance(node.value.value, (int, float)) and not isinstance(node.value.value, bool):
                    names = [t.id for t in node.targets if isinstance(t, ast.Name) and t.id not in NOT_KNOBS]
                    found += [f"{path.relative_to(PACKAGE)}:{node.lineno} {n}" for n in names]
    assert found == []
    from edgekit.packaging.context import PackagingContext
    from edgekit.packaging.search_settings import SearchSettings

    assert PackagingContext.__dataclass_fields__["search"].type in ("SearchSettings", SearchSettings)


def test_the_packaging_side_enters_the_simulation_by_its_one_door():
    """``edgekit.simulation`` exports what packaging uses; its modules (the child-side graph, the
    converter steps) are its own business."""
    inside = sorted((a, b) for a, deps in import_graph().items() for b in deps
                    if a.startswith("edgekit.packaging") and b.startswith("edgekit.simulation."))
    assert inside == []


def test_the_search_returns_typed_trials():
    """Each try is a ``Trial`` from the search to the manifest's record (``to_dict`` at the end),
    never a mapping read by ``.get``: the format's search, the simulated rounds and the shared plan."""
    from edgekit.packaging.each_format import FormatOutcome
    from edgekit.packaging.search import search
    from edgekit.packaging.search.rounds import search_rounds
    from edgekit.packaging.search.shared_plan import Simulated

    from edgekit.packaging.search.rounds import Rounds

    assert search.__annotations__["return"] == "tuple[Candidate, tuple[Trial, ...]]"
    assert search_rounds.__annotations__["return"] == "Rounds" and "Trial" in str(Rounds.__annotations__["trials"])
    assert Simulated.__dataclass_fields__["trials"].type == FormatOutcome.__dataclass_fields__["fixes"].type \
        == "tuple[Trial, ...]"


def test_the_search_has_one_entry_point_and_counts_its_tries_in_the_budget():
    """``search(builder, first, run, mode)``: which search (its own, after the simulation, one
    simulated round) is the ``SearchMode`` its caller chose, not a mix of parameters; the builds
    it made are counted by its ``Budget``, so no builder keeps a try counter."""
    import inspect

    from edgekit.packaging.search import search
    from edgekit.packaging.search.budget import Budget
    from edgekit.simulation import SimulatedBuilder

    assert list(inspect.signature(search).parameters) == ["builder", "first", "run", "mode"]
    assert callable(Budget.builds)
    counters = [f"{p.relative_to(ROOT)}" for p in (PACKAGE / "simulation").rglob("*.py")
                if "self.builds" in p.read_text()]
    assert not counters and not hasattr(SimulatedBuilder("m.onnx", ["x"], ["y"]), "builds")


def test_judging_a_format_takes_its_first_build_the_search_mode_and_the_prediction_as_records():
    """``judge(builder, first, run, mode, prediction)``: the first build and what the simulation
    said of it are typed records, and which search follows a miss is the ``SearchMode`` its caller
    chose, not nine loose parameters."""
    import inspect

    from edgekit.packaging.each_format import FirstBuild, Prediction, judge

    assert list(inspect.signature(judge).parameters) == ["builder", "first", "run", "mode", "prediction"]
    assert FirstBuild._fields == ("context", "built", "comparison")
    assert Prediction._fields == ("built_whole", "passes_plain", "grid") and Prediction().simulated is None


def test_one_version():
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["version"]
    assert re.search(rf'__version__ = "{re.escape(project)}"', (PACKAGE / "version.py").read_text())


def _docstrings(tree: ast.Module) -> set[int]:
    return {id(node.body[0].value) for node in ast.walk(tree)
            if isinstance(node, (ast.Module, ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef))
            and node.body and isinstance(node.body[0], ast.Expr) and isinstance(node.body[0].value, ast.Constant)}


def _literal_occurrences(path: Path) -> list[tuple[int, str]]:
    """Every string constant of a module with its line, docstrings left out, each occurrence once."""
    tree = parsed(path)
    docstrings = _docstrings(tree)
    return [(node.lineno, node.value) for node in ast.walk(tree)
            if isinstance(node, ast.Constant) and isinstance(node.value, str) and id(node) not in docstrings]


def _names_and_literals(path: Path) -> tuple[set[str], set[str], set[str]]:
    """A module's identifiers, its string constants (docstrings left out: prose may name
    anything) and the modules it imports."""
    tree = parsed(path)
    docstrings = _docstrings(tree)
    names, literals, imported = set(), set(), set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Name):
            names.add(node.id)
        elif isinstance(node, ast.Attribute):
            names.add(node.attr)
        elif isinstance(node, (ast.FunctionDef, ast.ClassDef, ast.arg)):
            names.add(getattr(node, "name", None) or getattr(node, "arg", ""))
        elif isinstance(node, ast.Constant) and isinstance(node.value, str) and id(node) not in docstrings:
            literals.add(node.value)
        elif isinstance(node, ast.ImportFrom):
            imported.add("." * node.level + (node.module or ""))
        elif isinstance(node, ast.Import):
            imported |= {a.name for a in node.names}
    return names, literals, imported


def test_formats_never_ask_what_the_source_was():
    """Builders read the form their route produced (``BuildContext.model``): no source kind, no
    source module, no source fields."""
    from edgekit.formats import FORMATS
    from edgekit.formats.building import BuildContext
    from edgekit.sources import SOURCES

    kinds = {kind for source in SOURCES.values() for kind in source.provides} - set(FORMATS)
    assert kinds >= {"keras", "h5", "saved_model", "torch_export", "torchscript", "torch_factory"}
    assert not {"source_kind", "source_path", "saved_model", "onnx_model"} & set(BuildContext.__dataclass_fields__)
    for path in sorted((PACKAGE / "formats").rglob("*.py")):
        names, literals, imported = _names_and_literals(path)
        assert not literals & kinds, (path, literals & kinds)
        assert not any("sources" in module for module in imported), (path, imported)


def test_the_packaging_core_holds_no_format_names_or_format_options():
    from edgekit.formats import FORMATS, build_options

    format_words = set(FORMATS) | {"litert", "tf2onnx", "coremltools"}
    option_keys = {option.name for _, option in build_options()}
    for path in sorted((PACKAGE / "packaging").rglob("*.py")):
        names, literals, imported = _names_and_literals(path)
        assert not {v.lower() for v in literals} & format_words, (path, literals & format_words)
        assert not literals & option_keys and not names & option_keys, (path, (literals | names) & option_keys)
        assert not [n for n in names if any(re.search(rf"(^|_){w}(_|$)", n.lower()) for w in format_words)], path
        assert not [m for m in imported if re.search(r"formats\.(" + "|".join(FORMATS) + ")", m)], (path, imported)


def _format_words() -> set[str]:
    from edgekit.formats import FORMATS

    return set(FORMATS) | {"litert", "tf2onnx", "coremltools"}


def test_format_names_outside_the_formats_are_few():
    """String literals that are a format's (or its converter's) name, by the packaging core's
    rule, counted at every occurrence, in every module outside ``edgekit/formats/``: a choice that
    depends on the format belongs to the format (its ``Format`` fields, ``DeviceRules``)."""
    words = _format_words()
    found = [f"{path.relative_to(PACKAGE)}:{line}: {value}" for path in sorted(PACKAGE.rglob("*.py"))
             if PACKAGE / "formats" not in path.parents
             for line, value in _literal_occurrences(path) if value.lower() in words]
    assert len(found) <= 12, found


def test_no_module_outside_the_onnx_format_names_an_onnx_scheme():
    """ONNX's INT8 schemes (one build per CPU kind) are the ONNX format's business: devices, the
    runtime, the CLI and benchmarks ask its ``DeviceRules``."""
    from edgekit.formats.onnx.schemes import SCHEMES

    words = {s.name for s in SCHEMES.values()} | {s.variant for s in SCHEMES.values() if s.variant}
    pattern = re.compile(r"(^|[^a-z0-9])(" + "|".join(re.escape(w) for w in sorted(words)) + r")($|[^a-z0-9-])")
    for path in sorted(PACKAGE.rglob("*.py")):
        if PACKAGE / "formats" / "onnx" in path.parents:
            continue
        names, literals, _ = _names_and_literals(path)
        assert not [v for v in literals if pattern.search(v.lower())], (path, [v for v in literals if pattern.search(v)])
        assert not [n for n in names if re.search(r"(^|_)(s8s8|u8s8|u8s7)(_|$)", n.lower())], path


def _kind_comparisons(path: Path, names: set[str]) -> list[str]:
    """Comparisons of something called a kind with a kind's name (``kind == "classes"``,
    ``kind.kind in ("classes", "bins")``, ``kind.startswith("detections")``)."""
    tree = parsed(path)

    def named(node: ast.AST) -> bool:
        values = [node] if isinstance(node, ast.Constant) else list(getattr(node, "elts", []))
        return any(isinstance(v, ast.Constant) and isinstance(v.value, str)
                   and (v.value in names or v.value.split(":")[0] in {n.split(":")[0] for n in names if ":" in n})
                   for v in values)

    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Compare):
            sides = [node.left, *node.comparators]
            if any(named(s) for s in sides) and "kind" in ast.unparse(node).lower():
                found.append(ast.unparse(node))
        elif isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr == "startswith":
            if "kind" in ast.unparse(node.func.value).lower() and any(named(a) for a in node.args):
                found.append(ast.unparse(node))
    return found


def test_no_module_outside_the_kinds_compares_kind_names():
    """What an output kind means (its inference, its gate, how its numbers print) is its own
    module's business in ``edgekit/kinds/``; everything else asks the registry."""
    from edgekit.kinds import KINDS

    names = set(KINDS)
    for path in sorted(PACKAGE.rglob("*.py")):
        if PACKAGE / "kinds" in path.parents:
            continue
        assert not _kind_comparisons(path, names), (path, _kind_comparisons(path, names))


def test_the_kind_comparison_finder_finds_one(tmp_path):
    module = tmp_path / "m.py"
    module.write_text('def f(kind):\n    return kind.kind in ("classes", "bins") or kind.startswith("detections")\n')
    assert len(_kind_comparisons(module, {"classes", "bins", "detections:yolo"})) == 2


def test_one_module_reads_the_cpu_description():
    """``/proc/cpuinfo`` is read once, by ``DeviceFacts.read`` (below the test sysroot); the rest ask
    ``DeviceFacts`` for ``cpu_model``/``cpu_flags``. Scripts included."""
    readers = []
    for path in sorted([*PACKAGE.rglob("*.py"), *(ROOT / "scripts").glob("*.py")]):
        if any(v.rstrip("/").endswith("proc/cpuinfo") for v in _names_and_literals(path)[1]):
            readers.append(str(path.relative_to(ROOT)))
    assert readers == ["edgekit/machine/facts.py"], readers


def test_onnx_runtime_kernel_knowledge_stays_in_the_onnx_format():
    """Which CPUs' int8 kernels saturate in ONNX Runtime is the ONNX format's (``kernels.py``); the
    packaging core asks ``Builder.fused_kernels``."""
    for path in sorted(PACKAGE.rglob("*.py")):
        if PACKAGE / "formats" / "onnx" in path.parents:
            continue
        names = _names_and_literals(path)[0]
        assert "int8_kernel_features" not in names, path


def test_runtime_library_names_come_from_the_backends():
    """A list of runtime libraries (benchmark versions, report comparisons, fingerprints) is
    ``formats.runtime_libraries()``, the backends' own ``libraries``: no hand list outside the formats."""
    from edgekit.formats import runtime_libraries

    libraries = set(runtime_libraries())
    lists = []
    for path in sorted([*PACKAGE.rglob("*.py"), *(ROOT / "scripts").glob("*.py")]):
        if PACKAGE / "formats" in path.parents:
            continue
        for node in ast.walk(parsed(path)):
            if isinstance(node, (ast.Tuple, ast.List, ast.Set)):
                named = {e.value for e in node.elts if isinstance(e, ast.Constant) and e.value in libraries}
                if len(named) >= 2:
                    lists.append(f"{path.relative_to(ROOT)}:{node.lineno}: {sorted(named)}")
    assert not lists, lists


def _private_definitions(tree: ast.Module) -> set[str]:
    """Private names a module defines: its functions, classes and module names, and the
    attributes its code assigns to its own objects (``self._x = ...``)."""
    found = set()
    for node in ast.walk(tree):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            found.add(node.name)
        elif isinstance(node, ast.Name) and isinstance(node.ctx, ast.Store):
            found.add(node.id)
        elif isinstance(node, ast.Attribute) and isinstance(node.ctx, ast.Store) and isinstance(node.value, ast.Name) \
                and node.value.id in ("self", "cls"):
            found.add(node.attr)  # a store on another object (``mlmodel._mil_program = ...``) sets a library's own
    return {n for n in found if n.startswith("_") and not n.startswith("__")}


def private_reaches(package: Path) -> list[str]:
    """``x._name`` where ``_name`` is another edgekit module's private name (not this module's
    own, not ``self``'s/``cls``'s): a reach through a seam that should be public."""
    trees = {path: parsed(path) for path in sorted(package.rglob("*.py"))}
    own = {path: _private_definitions(tree) for path, tree in trees.items()}
    everywhere = set().union(*own.values())
    found = []
    for path, tree in trees.items():
        for node in ast.walk(tree):
            if not (isinstance(node, ast.Attribute) and node.attr.startswith("_") and not node.attr.startswith("__")):
                continue
            if isinstance(node.value, ast.Name) and node.value.id in ("self", "cls"):
                continue
            if node.attr in everywhere and node.attr not in own[path]:
                found.append(f"{path.relative_to(package.parent)}:{node.lineno}: {ast.unparse(node)}")
    return found


def test_no_module_reaches_into_another_modules_privates():
    """Seams between edgekit's parts are public (``Model.zeros`` for a stream's state, ``worker``'s
    child set-up for the reused worker); third-party privates (converters' internals) are the
    formats' business and not counted here."""
    assert private_reaches(PACKAGE) == []


def test_the_private_reach_finder_finds_one(tmp_path):
    package = tmp_path / "pkg"
    package.mkdir()
    (package / "a.py").write_text("class A:\n    def __init__(self):\n        self._ports = []\n")
    (package / "b.py").write_text("def f(model):\n    return model._ports\n")
    assert private_reaches(package) == ["pkg/b.py:2: model._ports"]


def test_no_record_shares_a_mutable_default():
    """A NamedTuple's ``= {}`` default is one dict shared by every record made without it: a write
    to one record's would change all of them. Defaults are immutable (``MappingProxyType``, tuples)
    or a dataclass ``default_factory``."""
    shared = []
    for path in sorted(PACKAGE.rglob("*.py")):
        for node in ast.walk(parsed(path)):
            if isinstance(node, ast.ClassDef):
                shared += [f"{path.relative_to(PACKAGE)}:{item.lineno}: {item.target.id}" for item in node.body
                           if isinstance(item, ast.AnnAssign) and isinstance(item.target, ast.Name)
                           and isinstance(item.value, (ast.Dict, ast.List, ast.Set))]
    assert not shared, shared


def _details_key_reads(path: Path) -> list[str]:
    """``x.details["key"]`` and ``x.details.get("key")``: an artifact detail read by its key."""
    found = []
    for node in ast.walk(parsed(path)):
        target = None
        if isinstance(node, ast.Subscript) and isinstance(node.slice, ast.Constant):
            target = node.value
        elif isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr == "get" \
                and node.args and isinstance(node.args[0], ast.Constant):
            target = node.func.value
        if isinstance(target, ast.Attribute) and target.attr == "details" or \
                isinstance(target, ast.BoolOp) and any(isinstance(v, ast.Attribute) and v.attr == "details"
                                                       for v in target.values):
            found.append(f"{path.relative_to(PACKAGE)}:{node.lineno}: {ast.unparse(node)}")
    return found


def test_artifact_details_are_read_through_their_types_outside_the_formats():
    """A format's details are its own (``Format.notes`` says them); what the packager, the search and
    the runtime read is ``Artifact.about`` (``ArtifactDetails``), typed in one place."""
    reads = [hit for path in sorted(PACKAGE.rglob("*.py")) if PACKAGE / "formats" not in path.parents
             and path.name != "manifest.py" for hit in _details_key_reads(path)]
    assert not reads, reads


def test_the_details_read_finder_finds_one(tmp_path, monkeypatch):
    monkeypatch.setattr(sys.modules[__name__], "PACKAGE", tmp_path)
    (tmp_path / "m.py").write_text('def f(a):\n    return (a.details or {}).get("route"), a.details["explain"]\n')
    assert sorted(h.split(": ", 1)[1] for h in _details_key_reads(tmp_path / "m.py")) == [
        "(a.details or {}).get('route')", "a.details['explain']"]


def test_every_packaging_option_is_declared_once():
    """Every ``PackageOptions`` field is declared once (its flags, help, how its text is read and
    how several flags combine) or says why only Python passes it; the declarations give `edgekit
    package` every flag it has (each flag lands under its field), and the parser's code names
    none of them: no flag is written by hand beside the declarations."""
    from dataclasses import fields

    from edgekit.cli.reference import edgekit_commands
    from edgekit.formats import build_options
    from edgekit.packaging import options
    from edgekit.packaging.options import PackageOptions, declarations

    package = dict(edgekit_commands())["edgekit package"]
    by_flag = {flag: action for action in package.actions for flag in action.option_strings}
    undeclared = [f.name for f in fields(PackageOptions) if "declared" not in f.metadata
                  and not f.metadata.get("python_only")]
    assert not undeclared, undeclared
    declared = list(declarations())
    assert len(declared) >= 30
    flags = set()
    for found, how in declared:
        for flag in how.parts() if not how.negatable else ():
            action = by_flag[flag.names[0]]
            assert action.dest.split(".")[0] == found.name, flag.names
            text = flag.help() if callable(flag.help) else flag.help
            assert text.replace("%%", "%")[:40] in " ".join(action.help.split())
            flags |= set(flag.names)
        flags.add(how.flag)
    own = {option.flag for _, option in build_options()}
    assert set(by_flag) - {"-h", "--help"} - own <= flags | {f"--no-{how.flag[2:]}" for _, how in declared}
    tree = ast.parse((PACKAGE / "cli" / "main.py").read_text())
    package_literals = {node.value for function in tree.body if isinstance(function, ast.FunctionDef)
                        and function.name.startswith(("_add_package", "_package")) for node in ast.walk(function)
                        if isinstance(node, ast.Constant) and isinstance(node.value, str)}
    assert len(package_literals) > 20  # the functions that build `edgekit package`'s parser were found
    assert not flags & package_literals, flags & package_literals
    assert not hasattr(options, "NUMERIC_OPTIONS")


def test_no_module_reads_argparse_private_tables():
    """argparse keeps its option table, groups and sub-commands in private attributes; edgekit's
    ``cliopts.ArgumentParser`` keeps what it declared (``actions``, ``flags``, ``groups``, ``commands``)."""
    private = {"_actions", "_action_groups", "_group_actions", "_SubParsersAction", "_option_string_actions",
               "_subparsers", "_defaults"}
    found = [f"{path.relative_to(PACKAGE)}:{node.lineno}: {node.attr}" for path in sorted(PACKAGE.rglob("*.py"))
             for node in ast.walk(parsed(path))
             if isinstance(node, ast.Attribute) and node.attr in private]
    assert not found, found


# what every side shares stays at the top; the rest lives in the room named for its job
TOP_LEVEL = {"__init__", "__main__", "errors", "fsutil", "logs", "manifest", "names", "progress", "registry",
             "run", "validation_record", "version"}
BUILD_SIDE_AND_COMMANDS = ("edgekit.packaging", "edgekit.sources", "edgekit.steps", "edgekit.conversion",
                           "edgekit.cli", "edgekit.server", "edgekit.export")


def test_the_top_level_holds_only_what_every_side_shares():
    """The device side is ``device/``, what converters run through is ``conversion/``, the commands
    are ``cli/`` (``edgekit/run.py`` only keeps ``python -m edgekit.run`` working)."""
    assert {path.stem for path in PACKAGE.glob("*.py")} == TOP_LEVEL
    assert len((PACKAGE / "run.py").read_text().splitlines()) <= 10


def test_the_device_side_imports_neither_the_build_side_nor_the_commands():
    graph = import_graph()
    device = [name for name in graph if name.startswith(("edgekit.device", "edgekit.machine"))]
    assert "edgekit.device.runtime" in device and "edgekit.machine.cache" in device
    reaches = {name: sorted(d for d in graph[name] if d.startswith(BUILD_SIDE_AND_COMMANDS)) for name in device}
    assert not {name: found for name, found in reaches.items() if found}


def test_the_formats_never_import_the_conversion_steps():
    """A format reads the form a route made (``conversion.forms``) and the converter library below
    both (``conversion.onnx_torch``), never a step's module: the route table alone joins them."""
    found = sorted(f"{name} -> {dep}" for name, deps in import_graph().items() if name.startswith("edgekit.formats")
                   for dep in deps if dep.startswith("edgekit.steps"))
    assert not found, found


FORMAT_FOLDERS = ("tflite", "onnx", "coreml", "executorch")


def test_each_format_is_split_at_the_process_boundary():
    """Each format: ``builder.py`` (parent side), ``convert.py`` (the converter child's steps) and
    ``backend.py`` (the device side); the builder imports no converter library at its top."""
    for name in FORMAT_FOLDERS:
        folder = PACKAGE / "formats" / name
        assert {"builder.py", "convert.py", "backend.py"} <= {p.name for p in folder.iterdir()}, name
        heavy = {"tensorflow", "torch", "coremltools", "onnxruntime", "executorch", "litert_quantizer"}
        top = [node for node in parsed(folder / "builder.py").body if isinstance(node, (ast.Import, ast.ImportFrom))]
        imported = {(n.module or "").split(".")[0] for n in top if isinstance(n, ast.ImportFrom) and n.level == 0}
        imported |= {a.name.split(".")[0] for n in top if isinstance(n, ast.Import) for a in n.names}
        assert not imported & heavy, (name, imported & heavy)


def _worker_calls(tree: ast.Module) -> list[tuple[str, ast.Call]]:
    return [(node.func.attr, node) for node in ast.walk(tree)
            if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)
            and isinstance(node.func.value, ast.Name) and node.func.value.id == "worker"]


def test_the_formats_read_their_converter_children_by_type():
    """A format (and the simulation, a builder too) sends a frozen request to its converter child
    and reads a frozen report by attribute (``worker.convert``): never keyword JSON in
    (``worker.call``) and a dict read by string key out. Every step it sends is
    ``step(request: Message) -> Message``."""
    import importlib

    from edgekit.conversion.messages import request_and_report

    untyped, steps = [], 0
    for path in [*(PACKAGE / "formats").rglob("*.py"), *(PACKAGE / "simulation").rglob("*.py")]:
        module = None
        for kind, call in _worker_calls(parsed(path)):
            if kind == "call":
                untyped.append(f"{path.relative_to(ROOT)}:{call.lineno}")
            if kind != "convert":
                continue
            module = module or importlib.import_module(
                ".".join(path.relative_to(ROOT).with_suffix("").parts).removesuffix(".__init__"))
            step = call.args[0]
            function = eval(ast.unparse(step), vars(module) | {"__builtins__": {}}) \
                if not isinstance(step, ast.Name) or step.id in vars(module) else None
            if function is None:  # imported inside the function: found by its name in the folder
                function = _step_in_folder(path.parent, step.id)
            request_and_report(function)  # raises for a step not of that shape
            steps += 1
    assert not untyped, untyped
    assert steps >= 15, steps  # each format's conversions (and the reads of what they wrote), the simulation's


def _step_in_folder(folder: Path, name: str):
    import importlib

    for path in folder.glob("*.py"):
        module = importlib.import_module(".".join(path.relative_to(ROOT).with_suffix("").parts))
        if hasattr(module, name):
            return getattr(module, name)
    raise AssertionError(f"no step {name} in {folder}")


PLAN_WORDS = {"keep_float", "int16_layers"}
PLAN_MODULES = {"edgekit/formats/plan.py", "edgekit/manifest.py"}


def test_the_precision_plan_is_one_typed_field():
    """The layers leaving int8 are one ``PrecisionPlan`` (``BuildContext.plan``, the request a
    child gets, ``PackageOptions.plan``): no module names a ``keep_float`` or ``int16_layers``
    variable, field, argument or attribute but the plan module and the manifest reader."""
    found = []
    for path in PACKAGE.rglob("*.py"):
        where = str(path.relative_to(ROOT))
        if where in PLAN_MODULES:
            continue
        for node in ast.walk(parsed(path)):
            name = (node.id if isinstance(node, ast.Name) else node.attr if isinstance(node, ast.Attribute)
                    else node.arg if isinstance(node, (ast.arg, ast.keyword)) else None)
            if name in PLAN_WORDS:
                found.append(f"{where}:{node.lineno} {name}")
    assert not found, found


def test_a_learned_source_is_a_typed_field_never_detected_again():
    """Whether the source is quantized is said once (``SourceDescription.precision``, then
    ``BuildContext.source_precision``): no builder reads a file to find it out again, and no
    option key carries it."""
    found = []
    for path in (PACKAGE / "formats").rglob("*.py"):
        text = path.read_text()
        for word in ("is_quantized_graph", 'option("quantized_source"'):
            if word in text:
                found.append(f"{path.relative_to(ROOT)}: {word}")
    for path in PACKAGE.rglob("*.py"):
        if '"quantized_source":' in path.read_text() and "formats/onnx" not in str(path):
            found.append(f"{path.relative_to(ROOT)}: quantized_source as an option key")
    assert not found, found


def test_the_verdict_is_one_type_decided_once():
    """An artifact's verdict is a ``Verdict`` decided once, where the package's record is made
    (``packaging/record.py``; the manifest reader derives one only for a record written before
    verdicts), and read as that type: no module compares a verdict or a state with its words."""
    deciders, by_words = [], []
    for path in PACKAGE.rglob("*.py"):
        where = str(path.relative_to(ROOT))
        for node in ast.walk(parsed(path)):
            if isinstance(node, ast.Call) and ast.unparse(node.func) == "Verdict.of" and where not in (
                    "edgekit/packaging/record.py", "edgekit/validation_record.py"):
                deciders.append(f"{where}:{node.lineno}")
            if isinstance(node, ast.Compare) and "bench/" not in where:
                sides = [node.left, *node.comparators]
                named = any(isinstance(n, ast.Attribute) and n.attr in ("verdict", "state") for n in sides)
                words = any(isinstance(n, ast.Constant) and isinstance(n.value, str) for n in sides)
                if named and words:
                    by_words.append(f"{where}:{node.lineno} {ast.unparse(node)}")
    assert not deciders, deciders
    assert not by_words, by_words


# The folders from the bottom up (docs/architecture.md, "Layers"): each imports only those before
# it, the top-level modules (errors, manifest, ...) anyway; nothing runs against it.
LAYERS = ("kinds", "data", "machine", "comparison", "conversion", "steps", "sources", "formats", "simulation", "routing",
          "device", "bench", "packaging", "export", "server", "cli")


def test_the_folders_stand_in_their_layer_order():
    rank = {name: i for i, name in enumerate(LAYERS)}
    folders = {p.name for p in PACKAGE.iterdir() if p.is_dir() and (p / "__init__.py").exists()}
    assert folders == set(LAYERS), f"a folder without its place in LAYERS: {sorted(folders ^ set(LAYERS))}"

    def folder(module: str) -> str | None:
        parts = module.split(".")
        return parts[1] if len(parts) > 1 and parts[1] in rank else None

    against = sorted((a, b) for a, deps in import_graph().items() for b in deps
                     if folder(a) and folder(b) and rank[folder(b)] > rank[folder(a)])
    assert against == []


NAMES_OWNER = "edgekit/conversion/layer_names.py"
# where layer names come from (torch.onnx's module record, torch.export's module stack), the traced-op
# prefix, and the translators the code had before one owner held them
NAME_SOURCES = {"pkg.torch.onnx.name_scopes", "nn_module_stack", "op:"}
TRANSLATORS = {"layer_of", "in_layer", "layer_of_node", "module_paths", "original_names", "plan_names", "attribute_name",
               "converts_torch_program", "onnx_module_paths", "traced_modules", "module_paths_of_node"}


def test_layer_names_have_one_translator():
    """Layer names have one owner (``conversion/layer_names.py``): no other module reads where
    names come from, defines a translator of its own, matches a scope by its own pattern, or
    chooses a route's names by testing its form; a plan reaches a route only through
    ``LayerNames.resolve`` with the route's declared name kind."""
    found = []
    for path in PACKAGE.rglob("*.py"):
        where = str(path.relative_to(ROOT))
        if where == NAMES_OWNER:
            continue
        for node in ast.walk(parsed(path)):
            if isinstance(node, ast.Constant) and isinstance(node.value, str) and (
                    node.value in NAME_SOURCES or r"(_\d+)?" in node.value):
                found.append(f"{where}:{node.lineno} reads names itself: {node.value!r}")
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and node.name in TRANSLATORS:
                found.append(f"{where}:{node.lineno} defines a translator: {node.name}")
            if isinstance(node, ast.Name) and node.id == "OP_PREFIX":
                found.append(f"{where}:{node.lineno} uses OP_PREFIX")
            if isinstance(node, ast.Compare) and "route.form" in ast.unparse(node) and "TORCH_PROGRAM" in ast.unparse(node):
                found.append(f"{where}:{node.lineno} chooses names by the route's form: {ast.unparse(node)}")
    assert not found, found
    resolving = [str(p.relative_to(ROOT)) for p in PACKAGE.rglob("*.py")
                 if any(isinstance(n, ast.Attribute) and n.attr == "resolve" and "names" in ast.unparse(n.value)
                        for n in ast.walk(parsed(p)))]
    assert "edgekit/packaging/search/shared_plan.py" in resolving and "edgekit/formats/onnx/convert.py" in resolving


def test_every_route_declares_the_layer_names_its_converter_takes():
    from edgekit.conversion.layer_names import MODULE, NAME_KINDS, ONNX_NODE
    from edgekit.routing import routes

    table = routes.table()
    assert table and all(route.names in NAME_KINDS for route in table)
    by = {(r.source_kind, r.format, r.steps[-1].name if r.steps else ""): r.names for r in table}
    assert by[("torch_export", "executorch", "")] == MODULE  # the program itself, by module
    assert by[("onnx", "executorch", "onnx-to-torch")] == ONNX_NODE  # the rebuild's submodules are ONNX nodes


def test_measurement_is_typed_across_the_child_boundary_and_in_the_record():
    """The packager's own children (loading the model, its float reference, running and timing
    artifacts) go through ``worker.convert`` with ``Message``s like every converter step; no
    kwargs-JSON call is left outside the worker. An artifact's numbers are a ``MeasuredRecord`` and
    the package's verdict one ``Verdict`` field, not a ``passed`` + ``decided`` pair."""
    from edgekit.validation_record import ArtifactRecord, MeasuredRecord, ValidationRecord, Verdict

    calls = [f"{p.relative_to(ROOT)}:{n.lineno}" for p in PACKAGE.rglob("*.py")
             if p.name != "worker.py" for n in ast.walk(parsed(p))
             if isinstance(n, ast.Call) and ast.unparse(n.func) == "worker.call"]
    assert not calls, calls
    assert "verdict" in ValidationRecord._fields and not {"passed", "decided"} & set(ValidationRecord._fields)
    assert ValidationRecord.__annotations__["verdict"] is Verdict
    assert ArtifactRecord.__annotations__["metrics"] is MeasuredRecord


def test_the_onnx_builder_leaves_graph_work_to_its_children():
    """The ONNX builder (parent side) never loads an ONNX graph: its precision read-back, the float
    model put in a build's place and the float fallback's whole file are child steps."""
    tree = parsed(PACKAGE / "formats" / "onnx" / "builder.py")
    loads = [ast.unparse(n) for n in ast.walk(tree) if isinstance(n, (ast.Import, ast.ImportFrom))
             and any(a.name == "onnx" for a in n.names)]
    loads += [ast.unparse(n) for n in ast.walk(tree) if isinstance(n, ast.Call) and ast.unparse(n.func) == "onnx.load"]
    assert not loads, loads
