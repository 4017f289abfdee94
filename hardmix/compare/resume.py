"""Resuming and growing a comparison (``hardmix compare --resume``): what a spec may change from the
comparison's saved copy (``DIR/spec.yaml``), only additions of seeds, strategies and values of a tuning
grid's knobs (:func:`spec_differences`, refused otherwise by :func:`check_extension`); the precision that
copy records (:func:`use_recorded_precision`); each growth disclosed in ``DIR/growth.json``
(:func:`record_growth`, :func:`read_growth`); and the temporary files a killed comparison left
(:func:`remove_leftovers`).
"""

from __future__ import annotations

import datetime
import json
import sys
from pathlib import Path
from typing import Any

from hardmix.compare.folder import GROWTH, PLOTS_FOLDER, SPEC_COPY, SUMMARY_JSON
from hardmix.compare.spec import CompareSpec
from hardmix.config.loader import config_fields, load_yaml
from hardmix.training.run_folder import process_alive
from hardmix.utils.confine import remove_stale_temporaries, say_removed, write_text
from hardmix.utils.errors import ConfigError

# What may change between a comparison's runs of ``--resume``: seeds and strategies may be added (only the
# new cells run), how many cells run at once, where the folder is and how cells are launched. Contrasts and
# arm_differences are what is reported, not what runs; auto_precision is recorded in the comparison's spec
# copy by hardmix (a spec that sets it otherwise is refused by ``hardmix compare``, naming it).
FREE_KEYS = ("jobs", "output", "launcher", "contrasts", "auto_precision", "arm_differences")


#: The spec's keys, in the order :func:`spec_differences` reports them.
SPEC_KEYS = tuple(f.name for f in config_fields(CompareSpec))


def _names_in(spec: dict[str, Any]) -> set[str]:
    """Every name a spec's strategies answer to in ``strategy_args``: their spec names and the registered
    names of their entries."""
    names: set[str] = set()
    for name, entries in (spec.get("strategies") or {}).items():
        names.add(name)
        for e in entries if isinstance(entries, list) else []:
            if isinstance(e, dict) and "name" in e:
                names.add(e["name"])
    return names


def spec_differences(old: dict[str, Any], new: dict[str, Any]) -> list[str]:
    """The keys of a comparison spec that changed in a way ``--resume`` cannot continue: everything except
    added seeds, added strategies (a new name, or a new name in a task's ``strategies``, with its own
    ``strategy_args`` and ``tune.grid`` entries), values added to a strategy's ``tune.grid`` knobs
    (:func:`grid_grows`), ``jobs`` and ``output``.

    >>> old = {"seeds": [1, 2], "strategies": {"none": [{"name": "none"}]}, "tasks": {"t": {"score": "a"}}}
    >>> spec_differences(old, {**old, "seeds": [1, 2, 3], "jobs": 2})
    []
    >>> spec_differences(old, {**old, "seeds": [1], "tasks": {"t": {"score": "b"}}})
    ['seeds (seed 2 removed)', 'tasks.t.score']

    A task may be given more seeds than the spec's, not fewer:

    >>> spec_differences(old, {**old, "tasks": {"t": {"score": "a", "seeds": [1, 2, 3]}}})
    []
    >>> spec_differences(old, {**old, "tasks": {"t": {"score": "a", "seeds": [2, 3]}}})
    ['tasks.t.seeds (seed 1 removed)']

    A strategy added with its task arguments extends the comparison; arguments for one it had do not:

    >>> added = {**old, "strategies": {**old["strategies"], "synco": [{"name": "synco"}]}}
    >>> def task_args(args):
    ...     return {**added, "tasks": {"t": {"score": "a", "strategy_args": args}}}
    >>> spec_differences(old, task_args({"synco": {"n_hard": 8}}))
    []
    >>> spec_differences(old, task_args({"none": {"x": 1}}))
    ['tasks.t.strategy_args']

    The baseline never changes silently: a spec without ``baseline:`` compares with its first strategy,
    so a strategy added in front of it is refused:

    >>> spec_differences(old, {**old, "strategies": {"synco": [{"name": "synco"}], **old["strategies"]}})
    ['baseline (was none, now synco)']

    So do a new strategy's config overrides (``strategy_set``), not those of one it had:

    >>> spec_differences(old, {**added, "strategy_set": {"synco": {"train.lr": 0.1}}})
    []
    >>> spec_differences(old, {**added, "strategy_set": {"none": {"train.lr": 0.1}}})
    ['strategy_set.none']
    """
    changed: list[str] = []
    old_names = _names_in(old)

    def baseline(spec: dict[str, Any]) -> Any:  # a spec without baseline: compares with its first strategy
        return spec.get("baseline", next(iter(spec.get("strategies") or {}), None))

    if baseline(old) != baseline(new):  # never silently, e.g. by a strategy added in front
        changed.append(f"baseline (was {baseline(old)}, now {baseline(new)})")
    for key in sorted(set(old) | set(new), key=lambda k: (SPEC_KEYS + (k,)).index(k)):
        if key in FREE_KEYS or key == "baseline":  # the effective baseline is compared above
            continue
        a, b = old.get(key), new.get(key)
        if key == "seeds" and isinstance(a, list) and isinstance(b, list):
            gone = [s for s in a if s not in b]
            if gone:
                changed.append(f"seeds (seed {gone[0]} removed)")
        elif key == "strategies" and isinstance(a, dict) and isinstance(b, dict):
            for name in a:
                if name not in b:
                    changed.append(f"strategies.{name} (removed)")
                elif a[name] != b[name]:
                    changed.append(f"strategies.{name}")
        elif key == "strategy_set" and isinstance(a or {}, dict) and isinstance(b or {}, dict):
            old_strategies = old.get("strategies") or {}
            for name in sorted(set(a or {}) | set(b or {})):
                if name in old_strategies and (a or {}).get(name) != (b or {}).get(name):
                    changed.append(f"strategy_set.{name}")
        elif key == "tasks" and isinstance(a, dict) and isinstance(b, dict):
            for name in sorted(set(a) | set(b), key=lambda n: list({**a, **b}).index(n)):
                ta, tb = a.get(name), b.get(name)
                if not isinstance(ta, dict) or not isinstance(tb, dict):
                    changed.append(f"tasks.{name} ({'added' if ta is None else 'removed'})")
                    continue
                for k in sorted(set(ta) | set(tb)):
                    va, vb = ta.get(k), tb.get(k)
                    if k == "seeds":  # the task's own seeds, or the spec's: seeds may be added, not removed
                        va, vb = ta.get(k, old.get("seeds")), tb.get(k, new.get("seeds"))
                        if not isinstance(va, list) or not isinstance(vb, list):
                            changed.append(f"tasks.{name}.seeds")
                        elif any(s not in vb for s in va):
                            gone = next(s for s in va if s not in vb)
                            changed.append(f"tasks.{name}.seeds (seed {gone} removed)")
                        continue
                    if k == "strategy_args" and isinstance(vb, dict) and isinstance(va or {}, dict):
                        va = {**(va or {}), **{n: v for n, v in vb.items() if n not in old_names}}
                    if k == "strategies" and isinstance(va, list) and isinstance(vb, list):
                        if any(s not in vb for s in va):
                            changed.append(f"tasks.{name}.strategies (a strategy removed)")
                    elif va != vb:
                        changed.append(f"tasks.{name}.{k}")
        elif key == "tune" and isinstance(a, dict) and isinstance(b, dict):
            grid_a, grid_b = a.get("grid") or {}, b.get("grid") or {}
            added = {n for n in grid_b if n not in grid_a and n not in (old.get("strategies") or {})}
            kept = {**b, "grid": {n: grid_a[n] if n in grid_a and grid_grows(grid_a[n], grid_b[n]) else v
                                  for n, v in grid_b.items() if n not in added}}
            changed += [f"tune.{k}" for k in sorted(set(a) | set(kept)) if a.get(k) != kept.get(k)]
        elif a != b:
            changed.append(key)
    return changed


def grid_grows(old: Any, new: Any) -> bool:
    """Whether grid ``new`` is grid ``old`` with values added to its knobs (the same knobs, every old value
    kept): what ``--resume`` continues, running only the new points.

    >>> grid_grows({"mixcse.lam": [0.1, 0.2]}, {"mixcse.lam": [0.05, 0.1, 0.2]})
    True
    >>> grid_grows({"mixcse.lam": [0.1, 0.2]}, {"mixcse.lam": [0.05, 0.2]})
    False
    >>> grid_grows({"mixcse.lam": [0.1]}, {"mixcse.lam": [0.1], "train.lr": [1e-5]})
    False
    """
    old, new = old or {}, new or {}
    if not isinstance(old, dict) or not isinstance(new, dict) or set(old) != set(new):
        return False
    return all(isinstance(new[k], list) and isinstance(v, list) and all(x in new[k] for x in v)
               for k, v in old.items())


def check_extension(saved: Path, raw: dict) -> None:
    """Refuse a spec that differs from the comparison's saved one other than by added seeds, strategies or
    values of a tuning grid's knobs (naming what changed)."""
    old = load_yaml(saved)
    changed = spec_differences(old if isinstance(old, dict) else {}, raw)
    if changed:
        raise ConfigError(
            f"--resume: the spec differs from the comparison's ({saved}) in {', '.join(changed)}; only "
            "seeds, strategies and values of tune.grid's knobs may be added to a comparison: restore the "
            "rest, or choose another --output"
        )


def use_recorded_precision(spec: CompareSpec, saved: Path) -> None:
    """The precision the comparison's spec copy records for each task whose cells leave
    ``train.precision: auto`` (``auto_precision``): used as it is, never resolved again here (the cells may
    have run on another machine). A spec that sets another one for a task is refused."""
    old = load_yaml(saved)
    recorded = old.get("auto_precision") if isinstance(old, dict) else None
    if recorded is None:
        return
    if not isinstance(recorded, dict) or any(v not in ("fp32", "bf16") for v in recorded.values()):
        raise ConfigError(f"{saved}: auto_precision: expected task -> fp32 or bf16, got {recorded!r}; "
                          "restore the comparison's spec copy, or choose another --output")
    for task, value in (spec.auto_precision or {}).items():
        if recorded.get(task, value) != value:
            raise ConfigError(f"auto_precision.{task}: {value}, but this comparison's {task} cells run "
                              f"{recorded[task]} (recorded in {saved}); leave it out of the spec, or choose "
                              "another --output")
    spec.auto_precision = {**recorded, **(spec.auto_precision or {})}


def spec_additions(old: Any, new: Any, where: str = "") -> list[str]:
    """What ``new`` adds to ``old`` (a spec ``--resume`` accepted: only additions), one item per place:
    ``seeds: 6, 7``, ``tasks.vision.seeds: 6``, ``strategies: dcl``, ``tune.grid.mixcse.lam: 0.4``.

    >>> spec_additions({"seeds": [1, 2], "strategies": {"none": 1}},
    ...                {"seeds": [1, 2, 3], "strategies": {"none": 1, "dcl": 2}})
    ['seeds: 3', 'strategies: dcl']
    """
    if isinstance(old, dict) and isinstance(new, dict):
        out = []
        added = [k for k in new if k not in old]
        if added and where:
            out.append(f"{where}: {', '.join(map(str, added))}")
        for k in new:
            if k in old:
                out += spec_additions(old[k], new[k], f"{where}.{k}" if where else str(k))
            elif not where:
                out.append(f"{k}: added")
        return out
    if isinstance(old, list) and isinstance(new, list):
        added = [v for v in new if v not in old]
        return [f"{where}: {', '.join(map(str, added))}"] if added else []
    return []


def record_growth(out: Path, raw: dict) -> dict | None:
    """Append to ``OUT/growth.json`` what this ``--resume`` adds to the comparison's saved spec, with the
    date and whether its results had been seen (a ``summary.json`` was written before it); None when it
    adds nothing (or the comparison is new)."""
    saved = out / SPEC_COPY
    if not saved.is_file():
        return None
    old = load_yaml(saved)
    added = spec_additions(old if isinstance(old, dict) else {},
                           {k: v for k, v in raw.items() if k != "auto_precision"})
    if not added:
        return None
    entry = {"date": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC"),
             "added": added, "after_results": (out / SUMMARY_JSON).is_file()}
    path = out / GROWTH
    try:
        before = json.loads(path.read_text(encoding="utf-8")) if path.is_file() else []
    except (OSError, ValueError):
        before = []
    write_text(json.dumps([*(before if isinstance(before, list) else []), entry], indent=2) + "\n", path, out)
    return entry


def read_growth(out: Path) -> list[dict]:
    """The comparison's growths (``OUT/growth.json``; empty where it never grew)."""
    try:
        growth = json.loads((out / GROWTH).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return []
    return growth if isinstance(growth, list) else []


def remove_leftovers(out: Path) -> None:
    """The temporary files a killed comparison left in its folder and its plots' (a summary, a plot cut
    short): removed, and said (the comparison's lock is held: no one else writes there)."""
    for folder in (out, out / PLOTS_FOLDER):
        if folder.is_dir() and not folder.is_symlink():
            note = say_removed(remove_stale_temporaries(folder, out, process_alive, held=True), str(folder))
            if note:
                print(f"hardmix: {note}", file=sys.stderr)


__all__ = [
    "FREE_KEYS", "SPEC_KEYS", "check_extension", "grid_grows", "read_growth", "record_growth",
    "remove_leftovers", "spec_additions", "spec_differences", "use_recorded_precision",
]
