"""Reference models stored trained beside their recipes, so a build copies them instead of training.

A recipe is a training function ``train(folder)`` that writes the model's files into ``folder``.
Its fingerprint hashes the function's source and everything of its module that it names,
transitively (the data helpers it calls, the constants it reads): a build uses the stored files
only while the fingerprint recorded with them is the recipe's current one, and trains otherwise.
``models/*/build.py --store NAME`` trains and stores again after a recipe is edited, and
``tests/test_project.py`` fails while a stored model's recipe has changed since it was stored.
"""

from __future__ import annotations

import argparse
import hashlib
import inspect
import json
import os
import shutil
import sys
import tempfile
import types
from collections.abc import Callable, Sequence
from pathlib import Path

Recipe = Callable[[Path], None]
ONE_THREAD = ("OMP_NUM_THREADS", "TF_NUM_INTRAOP_THREADS", "TF_NUM_INTEROP_THREADS")


def fingerprint(train: Recipe) -> str:
    """A hash of ``train``'s source and of the functions, classes and constants of its module that
    it names, directly or through them."""
    module = sys.modules[train.__module__]
    seen: set[str] = set()
    parts: list[str] = []

    def visit(name: str) -> None:
        if name in seen or name.startswith("__") or not hasattr(module, name):
            return  # dunders: a class body names __name__, which is "__main__" when the script runs
        seen.add(name)
        value = getattr(module, name)
        if isinstance(value, (types.FunctionType, type)):
            if getattr(value, "__module__", None) != module.__name__:
                return  # imported (Path, Callable): not part of the recipe
            parts.append(inspect.getsource(value))
            codes = [value.__code__] if isinstance(value, types.FunctionType) else []
            while codes:
                code = codes.pop()
                for named in code.co_names:
                    visit(named)
                codes.extend(c for c in code.co_consts if isinstance(c, types.CodeType))
        elif isinstance(value, (int, float, str, tuple, list, dict)):
            parts.append(f"{name} = {value!r}")

    visit(train.__name__)
    return hashlib.sha256("\n".join(parts).encode()).hexdigest()


class Store:
    """``folder/NAME/`` holds NAME's trained files; ``folder/recipes.json`` their fingerprints."""

    def __init__(self, folder: Path) -> None:
        self.folder = folder
        self.recipes_file = folder / "recipes.json"

    def recipes(self) -> dict[str, str]:
        return json.loads(self.recipes_file.read_text()) if self.recipes_file.is_file() else {}

    def current(self, name: str, files: Sequence[str], train: Recipe) -> bool:
        """Whether NAME's stored files (or folders, a SavedModel) are all there and were trained by
        ``train`` as it is now."""
        return (all((self.folder / name / f).exists() for f in files)
                and self.recipes().get(name) == fingerprint(train))

    def build(self, name: str, files: Sequence[str], train: Recipe, folder: Path) -> None:
        """NAME's ``files`` in ``folder``: copied from the store while current, else trained now."""
        if self.current(name, files, train):
            for file in files:
                if (self.folder / name / file).is_dir():
                    shutil.copytree(self.folder / name / file, folder / file, dirs_exist_ok=True)
                else:
                    shutil.copyfile(self.folder / name / file, folder / file)
        else:
            train(folder)

    def store(self, name: str, files: Sequence[str], train: Recipe) -> Path:
        """Train NAME now and keep its ``files`` with the recipe's fingerprint (replacing the old)."""
        self.folder.mkdir(parents=True, exist_ok=True)
        staged = Path(tempfile.mkdtemp(prefix=f".{name}-", dir=self.folder))
        try:
            train(staged)
            for file in os.listdir(staged):
                if file not in files:
                    if (staged / file).is_dir():
                        shutil.rmtree(staged / file)
                    else:
                        os.remove(staged / file)
            missing = [f for f in files if not (staged / f).exists()]
            if missing:
                raise RuntimeError(f"{name}'s recipe wrote no {', '.join(missing)}")
            shutil.rmtree(self.folder / name, ignore_errors=True)
            os.replace(staged, self.folder / name)
        finally:
            shutil.rmtree(staged, ignore_errors=True)
        recipes = {**self.recipes(), name: fingerprint(train)}
        self.recipes_file.write_text(json.dumps(dict(sorted(recipes.items())), indent=1) + "\n")
        return self.folder / name


def main(description: str, builders: dict[str, Callable[[Path], Path]],
         stored: dict[str, tuple[list[str], Recipe]], store: Store) -> None:
    """A ``build.py``'s command line: ``NAME ... --output DIR`` builds, ``NAME ... --store`` trains
    and stores."""
    parser = argparse.ArgumentParser(description=description)
    parser.add_argument("names", nargs="+", choices=sorted(builders))
    target = parser.add_mutually_exclusive_group(required=True)
    target.add_argument("--output", type=Path, help="build each NAME into OUTPUT/NAME/")
    target.add_argument("--store", action="store_true",
                        help="train each NAME's model again and store it in trained/ (after editing its recipe)")
    args = parser.parse_args()
    if args.store:  # one thread: the same weights wherever they are stored (sums in another order differ)
        os.environ.update({name: "1" for name in ONE_THREAD})
    for name in args.names:
        if args.store:
            if name not in stored:
                parser.error(f"{name} is built in seconds and is not stored; stored: {', '.join(sorted(stored))}")
            print(store.store(name, *stored[name]))
        else:
            print(builders[name](args.output))
