"""One measurement of a starting encoder for every run that starts from it (``hardmix train ...
--start-cache DIR``; ``hardmix compare`` gives its cells ``DIR/start_cache``).

The runs of a comparison often start from the same encoder: every text cell loads the same pretrained model
(the seed draws only the projection head, which the evaluated encoder leaves out), and every vision cell of
one seed builds the same untrained network whatever its strategy. Scoring that encoder once per run repeats
the same numbers: with a cache folder, the first run of a *start key* measures it (holding a lock, so that
another run of the key waits instead of measuring it too) and writes it atomically to
``DIR/<key>.json``; the others read it, as ``results.json`` then records (``start.shared_from``).

The key is the digest of what decides the start and its scores: the config's ``model``, ``data`` and
``eval`` sections, ``train.precision`` and ``train.device``, the seed where the task's untrained encoder
depends on it (:attr:`~hardmix.training.task.Task.start_depends_on_seed`), the digests of the run's inputs
(model files, evaluation sets) and data, and the code that measures (hardmix's version and commit). A file
whose key differs, or that cannot be read, is measured again and replaced.
"""

from __future__ import annotations

import contextlib
import datetime
import hashlib
import json
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

from hardmix.utils.confine import makedirs, open_for_write, write_text
from hardmix.utils.provenance import code_provenance
from hardmix.version import __version__

#: The config sections (dotted keys for single values) that decide a starting encoder and its scoring.
START_SECTIONS = ("model", "data", "eval", "train.precision")


def start_part(config: dict[str, Any], seed: int | None, sections: tuple[str, ...] = START_SECTIONS
               ) -> dict[str, Any]:
    """The values of ``sections`` in a plain config (and ``train.seed``: ``seed``, unless None).

    >>> start_part({"model": {"width": 8}, "train": {"precision": "fp32", "lr": 0.1}}, None)
    {'model': {'width': 8}, 'data': None, 'eval': None, 'train.precision': 'fp32'}
    """
    part: dict[str, Any] = {}
    for key in sections:
        section, _, leaf = key.partition(".")
        value = config.get(section)
        part[key] = (value or {}).get(leaf) if leaf and isinstance(value, dict) else value
    if seed is not None:
        part["train.seed"] = seed
    return part


def digest(part: dict[str, Any]) -> str:
    """The sha256 of a JSON-able dict, keys sorted."""
    return hashlib.sha256(json.dumps(part, sort_keys=True, default=str).encode()).hexdigest()


def shared_start_key(config: dict[str, Any], seed: int | None, inputs: str | None,
                     data: dict[str, Any] | None) -> str:
    """The start key of a run (see the module's docstring): ``seed`` None where the start does not depend
    on it; ``inputs`` and ``data`` the run's input digest and data fingerprint.

    >>> a = shared_start_key({"model": {"width": 8}, "loss": {"temperature": 0.2}}, 1, None, None)
    >>> a == shared_start_key({"model": {"width": 8}, "loss": {"temperature": 0.1}}, 1, None, None)
    True
    >>> a == shared_start_key({"model": {"width": 8}}, 2, None, None)
    False
    """
    part = start_part(config, seed, (*START_SECTIONS, "train.device"))
    code = code_provenance()
    return digest({**part, "inputs": inputs, "data": data, "hardmix": __version__,
                   "commit": code.get("commit"), "dirty": code.get("dirty")})


#: The suffix of the file a run holds locked while it measures a key's start.
MEASURING = ".measuring"


@contextlib.contextmanager
def _locked(path: Path, root: Path) -> Iterator[None]:
    """Hold an exclusive lock on ``path`` (created inside ``root``) where the platform has ``fcntl``;
    released when the process ends, however it ends."""
    try:
        import fcntl
    except ImportError:  # no advisory locks: two runs of a key may both measure it, the last file stays
        yield
        return
    with open_for_write(path, root, "ab") as f:
        fcntl.flock(f.fileno(), fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(f.fileno(), fcntl.LOCK_UN)


def read_shared(path: Path, key: str) -> dict[str, Any] | None:
    """The start kept in ``path`` if it is one of ``key``, else None."""
    try:
        entry = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    if not isinstance(entry, dict) or entry.get("key") != key:
        return None
    start = entry.get("start")
    return start if isinstance(start, dict) and isinstance(start.get("scores"), dict) else None


def shared_or_measured(folder: Path, key: str, measure: Callable[[], dict[str, Any]], metric: str,
                       say: Callable[[str], None]) -> dict[str, Any]:
    """The start of ``key`` kept in ``folder``, or ``measure()``'s, then kept there for the next run.

    Returns the engine's start entry; a shared one carries ``shared_from`` (the file it was read from), its
    ``seconds`` are this run's (reading it, waiting for the lock included), and it is said in one line with
    its ``metric``.
    """
    t0 = time.perf_counter()
    makedirs(folder, folder)
    path = folder / f"{key[:16]}.json"
    with _locked(folder / f"{key[:16]}{MEASURING}", folder):
        start = read_shared(path, key)
        if start is not None:
            shown = start["scores"].get(metric)
            value = f"{shown:.2f}" if isinstance(shown, (int, float)) else "not measured"
            say(f"the starting encoder: {metric} {value} (shared: measured by an earlier run, {path})")
            return {**start, "seconds": round(time.perf_counter() - t0, 3), "shared_from": str(path)}
        start = measure()
        entry = {"key": key, "date": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d"),
                 "code": code_provenance(), "start": start}
        write_text(json.dumps(entry, indent=2) + "\n", path, folder)
        return start


__all__ = ["MEASURING", "START_SECTIONS", "digest", "read_shared", "shared_or_measured", "shared_start_key",
           "start_part"]
