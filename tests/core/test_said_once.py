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
}
#: Former copies, gone for the one above (``strategy_class``: for ``build.py``'s lookup, ``_build``).
GONE = ("_alive", "RUN_OWN_FILES", "CHECKPOINT_NAME", "strategy_class")


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


def test_the_grid_is_apart_from_the_runner() -> None:
    grid = REPO / "hardmix" / "compare" / "grid.py"
    assert len(grid.read_text(encoding="utf-8").splitlines()) < 400
    names = definitions(grid.read_text(encoding="utf-8"))
    assert not {"run_cells", "Progress", "discard_unkept", "describe_stop", "set_aside"} & names
    assert {"run_cells", "Progress"} <= definitions((grid.parent / "runner.py").read_text(encoding="utf-8"))


def test_a_config_s_strategy_list_is_built_and_checked_once(monkeypatch) -> None:
    """The strategy list is built and checked to compose once, when the config is read; the config's
    section and the loss take it as it is (a list made by hand is still checked by the loss)."""
    import hardmix.losses.contrastive as contrastive
    import hardmix.strategies.build as build
    from hardmix.losses.contrastive import ContrastiveLoss
    from hardmix.strategies import MixCSE, NoMixing
    from hardmix.training.api import load_config_for

    calls: list[int] = []
    real = build.check_composition

    def counted(strategies):  # noqa: ANN001, ANN202
        calls.append(len(strategies))
        return real(strategies)

    monkeypatch.setattr(build, "check_composition", counted)
    monkeypatch.setattr(contrastive, "check_composition", counted)
    cfg = load_config_for("text", REPO / "configs/text/cpu_mixcse.yaml", ["loss.strategies=[{name: mixcse}]"])
    loss = ContrastiveLoss(cfg.loss.temperature, cfg.loss.strategies)
    assert calls == [1] and [type(s) for s in loss.strategies] == [MixCSE]
    ContrastiveLoss(0.05, [NoMixing(), MixCSE()])  # by hand: checked here
    assert calls == [1, 2]
