"""The run folder's names are said once, in :mod:`hardmix.training.run_folder`: every other module of
``hardmix/`` (its modalities included) imports them (``CONFIG``, ``METRICS``, ``CHECKPOINT``, ``RESULTS``,
``TENSORBOARD``, ``LOCK``, ``BEST``) instead of typing ``"checkpoint.pt"`` again.

The check reads the source with :mod:`ast`: a string constant equal to one of those names (a folder's
also with its trailing ``/``) outside ``run_folder.py`` fails. Not counted: docstrings (they describe the
folder), comments (not in the tree), and a constant used as a mapping key (``row["best"]``, ``{"best":
...}``): a key of a record, not a file's name. A name that is another thing's own (a Hugging Face model
folder's ``config.json``, vision's ``backbone.pt``) is not a run folder's name and is not looked for.
"""

from __future__ import annotations

import ast
from pathlib import Path

from hardmix.training import run_folder

REPO = Path(__file__).resolve().parents[2]
PACKAGES = ("hardmix",)  # the core and its modalities, hardmix/text and hardmix/vision
OWNER = REPO / "hardmix" / "training" / "run_folder.py"
FOLDERS = (run_folder.TENSORBOARD, run_folder.BEST)
NAMES = frozenset({run_folder.CONFIG, run_folder.METRICS, run_folder.CHECKPOINT, run_folder.RESULTS,
                   run_folder.LOCK, *FOLDERS, *(f"{name}/" for name in FOLDERS)})


def _docstrings(tree: ast.AST) -> set[int]:
    """The ids of the docstring constants of a module and of its classes and functions."""
    found = set()
    for node in ast.walk(tree):
        if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)) and node.body:
            first = node.body[0]
            if isinstance(first, ast.Expr) and isinstance(first.value, ast.Constant) \
                    and isinstance(first.value.value, str):
                found.add(id(first.value))
    return found


def _keys(tree: ast.AST) -> set[int]:
    """The ids of the constants used as mapping keys: ``d["k"]`` and ``{"k": v}``."""
    found = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Subscript) and isinstance(node.slice, ast.Constant):
            found.add(id(node.slice))
        elif isinstance(node, ast.Dict):
            found.update(id(k) for k in node.keys if isinstance(k, ast.Constant))
    return found


def run_folder_names(source: str, filename: str = "<source>") -> list[str]:
    """``'line: "name"'`` for every string constant of ``source`` equal to a run folder's name, docstrings
    and mapping keys aside."""
    tree = ast.parse(source, filename)
    skip = _docstrings(tree) | _keys(tree)
    found = [node for node in ast.walk(tree) if isinstance(node, ast.Constant) and isinstance(node.value, str)
             and node.value in NAMES and id(node) not in skip]
    found.sort(key=lambda node: (node.lineno, node.col_offset))
    return [f"{node.lineno}: {node.value!r}" for node in found]


def _sources() -> list[Path]:
    return sorted(p for package in PACKAGES for p in (REPO / package).rglob("*.py"))


def test_the_reader_finds_a_name_in_code_and_not_in_a_docstring_a_comment_or_a_key() -> None:
    source = '''"""RUN/checkpoint.pt"""
import os


def f(run, row):
    """Reads "metrics.jsonl"."""
    # writes "results.json"
    x = row["best"] or {"best": 1}
    return os.path.join(run, "checkpoint.pt"), run / "best", f"{run / 'tensorboard'}", ("best/", x)
'''
    assert run_folder_names(source) == ["9: 'checkpoint.pt'", "9: 'best'", "9: 'tensorboard'", "9: 'best/'"]


def test_the_walk_reads_every_package() -> None:
    sources = _sources()
    assert OWNER in sources
    for package in PACKAGES:
        assert any(p.is_relative_to(REPO / package) for p in sources), package


def test_the_run_folder_names_are_typed_only_in_run_folder_py() -> None:
    typed = {}
    for path in _sources():
        if path == OWNER:
            continue
        found = run_folder_names(path.read_text(encoding="utf-8"), str(path))
        if found:
            typed[str(path.relative_to(REPO))] = found
    assert not typed, (f"a run folder's name typed again (import it from hardmix.training.run_folder): "
                       f"{typed}")


def test_run_folder_py_declares_every_name() -> None:
    found = {node.value for node in ast.walk(ast.parse(OWNER.read_text(encoding="utf-8")))
             if isinstance(node, ast.Constant) and isinstance(node.value, str)}
    assert NAMES - {f"{name}/" for name in FOLDERS} <= found
