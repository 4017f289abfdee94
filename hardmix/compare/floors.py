"""What the exact sign-flip test can say of a comparison from its spec alone, before anything runs: per
task, its family of comparisons, its seeds and the smallest Holm-adjusted p they allow
(:func:`exact_floors`), said on stderr before the cells run and refused with ``--strict`` where no exact
verdict is possible.
"""

from __future__ import annotations

import sys
from typing import Any

from hardmix.compare.spec import CompareSpec
from hardmix.compare.stats import ALPHA, exact_floor
from hardmix.utils.errors import ConfigError


def exact_floors(spec: CompareSpec, alpha: float = ALPHA) -> dict[str, dict[str, Any]]:
    """What the exact sign-flip test can say, from the spec alone: per task with a comparison, its family of
    m comparisons (every strategy of the task but the baseline), its n seeds, the smallest
    ``p_exact_holm`` they allow (``floor``, m x 2 / 2^n) and the seeds an exact verdict at ``alpha`` needs
    (:func:`hardmix.compare.stats.exact_floor`)."""
    out = {}
    for task in spec.tasks.values():
        m = sum(s != spec.baseline for s in task.strategies or spec.strategies)
        n = len(task.seeds or spec.seeds)  # validated: the task's own seeds, or the spec's
        if m:
            floor, needed = exact_floor(m, n, alpha)
            out[task.name] = {"comparisons": m, "seeds": n, "floor": floor, "seeds_needed": needed}
    return out


def floor_line(task: str, f: dict[str, Any], alpha: float = ALPHA) -> str:
    """One task's :func:`exact_floors` in words.

    >>> floor_line("vision", {"comparisons": 2, "seeds": 5, "floor": 0.125, "seeds_needed": 7})
    'tasks.vision: 2 comparisons x 5 seeds: smallest p_exact_holm 2 x 2/2^5 = 0.125 >= 0.05; an exact \
verdict needs >= 7 seeds'
    """
    m, n = f["comparisons"], f["seeds"]
    below = "<" if f["floor"] < alpha else ">="
    return (f"tasks.{task}: {m} comparison{'s' if m != 1 else ''} x {n} seeds: smallest p_exact_holm "
            f"{m} x 2/2^{n} = {f['floor']:.3g} {below} {alpha}; an exact verdict needs >= "
            f"{f['seeds_needed']} seeds")


def check_exact_floors(floors: dict[str, dict], strict: bool) -> None:
    """With ``--strict``, refuse the first task whose exact test cannot reach a verdict
    (:func:`exact_floors`), naming it and the numbers."""
    for task, f in floors.items():
        if strict and f["floor"] >= ALPHA:
            raise ConfigError(f"--strict: {floor_line(task, f)}: no exact verdict is possible, refused "
                              "before anything runs (give the task more seeds or fewer comparisons, or drop "
                              "--strict)")


def print_exact_floors(floors: dict[str, dict]) -> None:
    """One line per task on stderr: the exact test's floor and the seeds it needs; a warning where no
    exact verdict is possible."""
    for task, f in floors.items():
        warn = "warning: " if f["floor"] >= ALPHA else ""
        print(f"hardmix: {warn}exact test, {floor_line(task, f)}", file=sys.stderr)


__all__ = ["check_exact_floors", "exact_floors", "floor_line", "print_exact_floors"]
