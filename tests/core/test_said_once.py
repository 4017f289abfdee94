"""Each fact said once: the names below are defined in one module of ``hardmix/`` (its modalities
included; read with :mod:`ast`: a function, a class or a module-level assignment of that name), and the
comparison's grid stays apart from its local runner."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
PACKAGES = ("hardmix",)  # the core and its modalities, hardmix/text and hardmix/vision

#: name -> the one module that defines it.
ONCE = {
    "NEG_INF": "hardmix/ops/mixing.py",
    "cell_log": "hardmix/compare/grid.py",
    "process_alive": "hardmix/training/run_folder.py",
    "lock_holder": "hardmix/training/run_folder.py",
    "offline": "hardmix/utils/offline.py",
    "OFFLINE_ENV": "hardmix/utils/offline.py",
    # names that were defined twice, each merged into one module
    "set_aside": "hardmix/compare/runner.py",  # a cell's folder moved aside: corrupt, superseded, mismatched
    "tuning_table": "hardmix/compare/tuning.py",  # the tuning record; the report renders tuning_grid_table
    "tuning_grid_table": "hardmix/compare/tables.py",
    "alignment": "hardmix/ops/diagnostics.py",  # Wang and Isola's, for the diagnostics and label-free scores
    "uniformity": "hardmix/ops/diagnostics.py",
    "file_digest": "hardmix/training/fingerprint.py",  # a file's SHA-256; a download's checks: file_checksums
    "file_checksums": "hardmix/datasets/download.py",
    "machine": "hardmix/utils/machine.py",  # results.json's machine; summary.json's: host
    "host": "hardmix/utils/machine.py",
    "check_matching": "hardmix/training/checkpoint.py",  # one checkpoint module
    "load_matching": "hardmix/training/checkpoint.py",
    "load_checkpoint": "hardmix/training/checkpoint.py",
    "extract_archive": "hardmix/utils/confine.py",
    "load_config": "hardmix/config/loader.py",  # the one public config loader (and build_config)
    "build_config": "hardmix/config/loader.py",
    "check_old_keys": "hardmix/config/loader.py",
}
#: Former copies, gone for the one above (``strategy_class``: for ``build.py``'s lookup, ``_build``).
GONE = ("_alive", "RUN_OWN_FILES", "CHECKPOINT_NAME", "strategy_class",
        "build_task_config", "load_task_config")  # now build_config and load_config
#: Modules merged into another (hardmix/utils/checkpoint.py into hardmix/training/checkpoint.py).
GONE_MODULES = ("hardmix/utils/checkpoint.py",)


def definitions(source: str) -> set[str]:
    """The names a module defines: its functions and classes (at any depth) and its module-level
    assignments."""
    tree = ast.parse(source)
    kinds = (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)
    found = {node.name for node in ast.walk(tree) if isinstance(node, kinds)}
    for node in tree.body:
        targets = node.targets if isinstance(node, ast.Assign) else [node.target] if isinstance(
            node, ast.AnnAssign) else []
        found |= {t.id for t in targets if isinstance(t, ast.Name)}
    return found


def _defined_where() -> dict[str, list[str]]:
    where: dict[str, list[str]] = {}
    for package in PACKAGES:
        for path in sorted((REPO / package).rglob("*.py")):
            for name in definitions(path.read_text(encoding="utf-8")):
                where.setdefault(name, []).append(str(path.relative_to(REPO)))
    return where


def test_definitions_sees_functions_classes_and_module_constants() -> None:
    source = ("X = 1\nY: int = 2\n\n\ndef f():\n    Z = 3\n\n    def g():\n        pass\n\n\n"
              "class C:\n    W = 4\n")
    assert definitions(source) == {"X", "Y", "f", "g", "C"}


@pytest.mark.parametrize("name", sorted(ONCE))
def test_defined_once(name: str) -> None:
    assert _defined_where().get(name) == [ONCE[name]]


def test_the_former_copies_are_gone() -> None:
    where = _defined_where()
    assert not {name: where[name] for name in GONE if name in where}


def test_the_merged_modules_are_gone_and_no_two_modules_share_a_public_name() -> None:
    """A public name (not ``_private``) of a function, a class or a module constant is defined in one module
    of the core (``hardmix/`` less its modalities, whose config sections and command hooks are each
    modality's own by design)."""
    assert not [m for m in GONE_MODULES if (REPO / m).exists()]
    where = {name: [w for w in files if not w.startswith(("hardmix/text/", "hardmix/vision/"))]
             for name, files in _defined_where().items() if not name.startswith("_")}
    top: dict[str, set[str]] = {}  # (a name defined twice in one module: typing overloads)
    for path in sorted((REPO / "hardmix").rglob("*.py")):
        rel = str(path.relative_to(REPO))
        if rel.startswith(("hardmix/text/", "hardmix/vision/")):
            continue
        tree = ast.parse(path.read_text(encoding="utf-8"))
        for node in tree.body:
            names = [node.name] if isinstance(node, (ast.FunctionDef, ast.ClassDef)) else [
                t.id for t in getattr(node, "targets", []) if isinstance(t, ast.Name)]
            for name in names:
                if not name.startswith("_"):
                    top.setdefault(name, set()).add(rel)
    twice = {name: files for name, files in top.items() if len(files) > 1 and name not in ALLOWED_TWICE}
    assert not twice, twice
    assert where["set_aside"] == ["hardmix/compare/runner.py"]


#: Public names several core modules define on purpose: each command module's ``register`` and ``main``.
ALLOWED_TWICE = {"register", "main", "train"}  # train: hardmix.train, the lazy re-export


def test_the_grid_is_apart_from_the_runner() -> None:
    grid = REPO / "hardmix" / "compare" / "grid.py"
    assert len(grid.read_text(encoding="utf-8").splitlines()) < 400
    names = definitions(grid.read_text(encoding="utf-8"))
    assert not {"run_cells", "Progress", "discard_unkept", "describe_stop", "set_aside"} & names
    assert {"run_cells", "Progress"} <= definitions((grid.parent / "runner.py").read_text(encoding="utf-8"))


def test_a_config_s_strategy_list_is_built_and_checked_once(monkeypatch) -> None:
    """The strategy list is built and checked to compose once, when the config is read; the config's
    section and the loss take it as it is (a list made by hand is still checked by the loss)."""
    import hardmix.strategies.build as build
    from hardmix.losses.contrastive import ContrastiveLoss
    from hardmix.strategies import MixCSE, NoMixing
    from hardmix.training.api import load_config_for

    calls: list[int] = []
    real = build.BuiltStrategies.check_composition

    def counted(strategies):  # noqa: ANN001, ANN202
        calls.append(len(strategies))
        return real(strategies)

    monkeypatch.setattr(build.BuiltStrategies, "check_composition", counted)
    cfg = load_config_for("text", REPO / "configs/text/cpu_mixcse.yaml", ["loss.strategies=[{name: mixcse}]"])
    loss = ContrastiveLoss(cfg.loss.temperature, cfg.loss.strategies)
    assert calls == [1] and [type(s) for s in loss.strategies] == [MixCSE]
    ContrastiveLoss(0.05, [NoMixing(), MixCSE()])  # by hand: checked here
    assert calls == [1, 2]
