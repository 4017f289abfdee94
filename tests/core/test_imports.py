"""The core's import structure, read from the source of every module under ``hardmix/``: no import cycle
between its parts nor between its modules, the strategies import no loss or trainer, no strategy imports
another (the math they share lives in ``hardmix.ops.mixing`` and ``hardmix.ops.debiased``, which import no
strategy), no private name crosses a module.

A part is a subpackage (``hardmix.strategies``, ``hardmix.ops``) or a top-level module (``hardmix.cli``).
The package root (``hardmix/__init__.py``: ``__version__`` and the lazy ``hardmix.train`` facade) is not a
part: Python imports it before any of its submodules, and its imports are not counted. Every import
statement counts: at module level, inside functions, under ``if TYPE_CHECKING``. The walk is generic:
parts added later (``hardmix/training/``, ``hardmix/datasets/``) are covered without a change here.
"""

from __future__ import annotations

import ast
from pathlib import Path

import hardmix

ROOT = Path(hardmix.__file__).resolve().parent


def _module_name(path: Path) -> str:
    parts = ("hardmix", *path.relative_to(ROOT).with_suffix("").parts)
    return ".".join(parts[:-1]) if parts[-1] == "__init__" else ".".join(parts)


def _modules() -> dict[str, Path]:
    return {_module_name(p): p for p in sorted(ROOT.rglob("*.py"))}


def _imports(name: str, path: Path) -> list[tuple[str, list[str], int]]:
    """``(imported module, imported names, line)`` for every import statement of the module ``name``
    (relative imports resolved)."""
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    found = []
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            found += [(alias.name, [], node.lineno) for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package.split(".")[: len(package.split(".")) - node.level + 1]
                base = ".".join([*anchor, base] if base else anchor)
            found.append((base, [alias.name for alias in node.names], node.lineno))
    return found


def _part(module: str) -> str | None:
    """The part of the core that ``module`` belongs to (None outside ``hardmix``, and for the root)."""
    pieces = module.split(".")
    if pieces[0] != "hardmix" or len(pieces) == 1:
        return None
    return f"hardmix.{pieces[1]}"


def _part_graph() -> dict[str, dict[str, list[str]]]:
    """part -> imported part -> where ('module:line'), for imports between different parts."""
    modules = _modules()
    known = set(modules)
    graph: dict[str, dict[str, list[str]]] = {}
    for name, path in modules.items():
        source = _part(name)
        if source is None:  # the package root
            continue
        graph.setdefault(source, {})
        for target, names, line in _imports(name, path):
            targets = [target]
            if target == "hardmix":  # ``from hardmix import mixing``: the submodule is the part
                targets = [f"hardmix.{n}" for n in names if f"hardmix.{n}" in known] or targets
            for t in targets:
                part = _part(t)
                if part is not None and part != source:
                    graph[source].setdefault(part, []).append(f"{name}:{line}")
    return graph


def _find_cycle(graph: dict[str, dict[str, list[str]]]) -> list[str] | None:
    """A cycle of parts as a list ``[a, b, ..., a]``, or None."""
    state: dict[str, int] = {}  # 1: on the current path, 2: done
    path: list[str] = []

    def visit(node: str) -> list[str] | None:
        state[node] = 1
        path.append(node)
        for nxt in sorted(graph.get(node, {})):
            if state.get(nxt) == 1:
                return path[path.index(nxt) :] + [nxt]
            if nxt not in state and (cycle := visit(nxt)):
                return cycle
        path.pop()
        state[node] = 2
        return None

    for start in sorted(graph):
        if start not in state and (cycle := visit(start)):
            return cycle
    return None


def test_cycle_finder_finds_a_cycle_and_accepts_a_tree() -> None:
    assert _find_cycle({"a": {"b": []}, "b": {"c": []}, "c": {"a": []}}) == ["a", "b", "c", "a"]
    assert _find_cycle({"a": {"b": [], "c": []}, "b": {"c": []}, "c": {}}) is None


def test_import_reader_sees_imports_inside_functions_and_relative_ones(tmp_path: Path) -> None:
    module = tmp_path / "m.py"
    module.write_text("def f():\n    from hardmix.losses import x\n\nfrom . import sibling\n")
    found = _imports("hardmix.strategies.m", module)
    assert ("hardmix.losses", ["x"], 2) in found
    assert ("hardmix.strategies", ["sibling"], 4) in found


def test_no_import_cycle_between_the_parts_of_the_core() -> None:
    graph = _part_graph()
    assert {"hardmix.losses", "hardmix.strategies", "hardmix.ops"} <= set(graph)
    cycle = _find_cycle(graph)
    if cycle:
        where = [f"{a} -> {b} ({', '.join(graph[a][b])})" for a, b in zip(cycle, cycle[1:])]
        raise AssertionError("import cycle between parts of the core: " + "; ".join(where))


def test_strategies_import_no_loss_and_no_trainer() -> None:
    imported = _part_graph()["hardmix.strategies"]
    assert not {"hardmix.losses", "hardmix.training"} & set(imported), imported


def test_the_shared_math_imports_no_strategy_no_loss_and_no_trainer() -> None:
    graph = _part_graph()
    upward = {"hardmix.strategies", "hardmix.losses", "hardmix.training"} & set(graph["hardmix.ops"])
    assert not upward, graph["hardmix.ops"]


def _strategy_modules() -> set[str]:
    """The modules under ``hardmix/strategies/`` that register a strategy (a class decorated with
    ``register_strategy``); the base, the schedules and the specs do not."""
    found = set()
    for name, path in _modules().items():
        if not name.startswith("hardmix.strategies."):
            continue
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ClassDef) and any(
                isinstance(d, ast.Name) and d.id == "register_strategy" for d in node.decorator_list
            ):
                found.add(name)
    return found


def _strategy_imports_of_strategies(modules: dict[str, Path], strategies: set[str]) -> list[str]:
    """``'a imports b (line)'`` for every import of a strategy module by another one (``from
    hardmix.strategies import mochi`` and ``from hardmix.strategies.mochi import x`` alike)."""
    offences = []
    for name in sorted(strategies):
        for target, names, line in _imports(name, modules[name]):
            targets = {target, *(f"{target}.{n}" for n in names)}
            offences += [f"{name} imports {t} (line {line})" for t in sorted(targets & strategies - {name})]
    return offences


def test_strategy_finder_sees_the_registered_strategies() -> None:
    strategies = _strategy_modules()
    assert {"hardmix.strategies.mixcse", "hardmix.strategies.mochi", "hardmix.strategies.none"} <= strategies
    assert not {"hardmix.strategies.base", "hardmix.strategies.schedule"} & strategies


def test_no_strategy_imports_another_strategy() -> None:
    offences = _strategy_imports_of_strategies(_modules(), _strategy_modules())
    assert not offences, offences


def test_a_strategy_importing_another_is_found(tmp_path: Path) -> None:
    module = tmp_path / "copycat.py"
    module.write_text("from hardmix.strategies.mochi import MoCHi\nfrom hardmix.strategies import mixcse\n")
    modules = {**_modules(), "hardmix.strategies.copycat": module}
    strategies = {"hardmix.strategies.copycat", "hardmix.strategies.mochi", "hardmix.strategies.mixcse"}
    assert _strategy_imports_of_strategies(modules, strategies) == [
        "hardmix.strategies.copycat imports hardmix.strategies.mochi (line 1)",
        "hardmix.strategies.copycat imports hardmix.strategies.mixcse (line 2)",
    ]


def _module_graph(modules: dict[str, Path] | None = None) -> dict[str, dict[str, list[str]]]:
    """module -> imported hardmix module -> lines, for every import statement of the module: at module
    level, inside a function or a class body, under ``if TYPE_CHECKING`` (:func:`_imports` walks the whole
    module). A function-local import is no way out of a cycle: it only moves the failure to the call that
    runs it, and the two modules still cannot be read, tested or moved one without the other."""
    modules = _modules() if modules is None else modules
    graph: dict[str, dict[str, list[str]]] = {}
    for name, path in modules.items():
        edges = graph.setdefault(name, {})
        for base, names, line in _imports(name, path):
            # ``from hardmix.datasets import download``: the submodule is what is imported
            targets = [f"{base}.{n}" if f"{base}.{n}" in modules else base for n in names] or [base]
            for target in targets:
                if target in modules and target != name and str(line) not in edges.get(target, []):
                    edges.setdefault(target, []).append(str(line))
    return graph


def test_the_module_graph_counts_imports_inside_functions(tmp_path: Path) -> None:
    module = tmp_path / "late.py"
    module.write_text("import os\n\n\ndef f():\n    from hardmix.datasets import download\n    return os\n")
    graph = _module_graph({**_modules(), "hardmix.datasets.late": module})
    assert graph["hardmix.datasets.late"] == {"hardmix.datasets.download": ["5"]}
    assert "hardmix.datasets.manager" in _module_graph()["hardmix.datasets.needs"]  # inside ensure_data


def test_no_import_cycle_between_the_modules_of_the_core() -> None:
    graph = _module_graph()
    assert "hardmix.ops.mixing" in graph["hardmix.strategies.mochi"]
    cycle = _find_cycle(graph)
    if cycle:
        where = [f"{a} -> {b} (line {', '.join(graph[a][b])})" for a, b in zip(cycle, cycle[1:])]
        raise AssertionError("import cycle between modules of the core: " + "; ".join(where))


def _private_uses() -> set[str]:
    """Every ``module uses other.module._name`` of the modules under ``hardmix/``."""
    modules = _modules()
    offences = set()
    for name, path in modules.items():
        aliases: dict[str, str] = {}  # local name -> hardmix module it refers to
        for target, names, _ in _imports(name, path):
            if not target.startswith("hardmix") or target == name:
                continue
            for imported in names:
                if f"{target}.{imported}" in modules:
                    aliases[imported] = f"{target}.{imported}"
                elif imported.startswith("_") and not imported.startswith("__"):
                    offences.add(f"{name} uses {target}.{imported}")
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Import):
                for alias in node.names:
                    if alias.asname and alias.name.startswith("hardmix"):
                        aliases[alias.asname] = alias.name
            if (
                isinstance(node, ast.Attribute)
                and isinstance(node.value, ast.Name)
                and node.value.id in aliases
                and node.attr.startswith("_")
                and not node.attr.startswith("__")
            ):
                offences.add(f"{name} uses {aliases[node.value.id]}.{node.attr}")
    return offences


def test_no_private_name_is_used_outside_its_module() -> None:
    offences = _private_uses()
    assert not offences, sorted(offences)
