"""The data a run needs, found before it starts: fetched where there is a network, else listed at once.

A task names the data paths its config reads (:meth:`hardmix.training.task.ConfigFacts.data_needs`: ``(config
key, path)`` pairs). :func:`ensure_data` finds those that are missing and that a registered data set
provides (``wiki/wiki1m-head-11914.txt`` -> ``wiki1m-head``; ``models/bert-mini-wiki-mlm`` -> its stand-in
``bert-mini``), and then either

- fetches them into the data root (``HARDMIX_DATA``, else the per-user default root) after one line that
  says what and how large (the sizes the servers announce), or
- when downloading is refused (``--no-download``, ``HARDMIX_OFFLINE=1``, several processes) or there is
  no network, raises one :class:`MissingDataError` that lists everything missing and both fixes: the exact
  ``hardmix data download ...`` and ``export HARDMIX_DATA=...``.

Paths that no data set provides (your own ImageNet folder, a Hub model name) are left to the task's own
checks. ``hardmix train`` and ``hardmix compare`` call this before any work.

Example:
    >>> import tempfile
    >>> root = tempfile.mkdtemp()
    >>> [(n.name, n.key) for n in missing_data([("data.train_file", "wiki/wiki1m-head-11914.txt"),
    ...                                          ("data.dataset", "/my/own/imagenet")], root)]
    [('wiki1m-head', 'data.train_file')]
"""

from __future__ import annotations

import os
import sys
import urllib.error
import urllib.request
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path

from hardmix.datasets.paths import ENV_VAR, default_data_root
from hardmix.datasets.sources import BASE_URL_ENV, DATASETS, SOURCES, provider_of
from hardmix.utils.offline import OFFLINE_ENV, offline, offline_reason


class MissingDataError(FileNotFoundError):
    """Data a run needs is missing and cannot be fetched now; the message lists it all and the fixes."""


@dataclass(frozen=True)
class Missing:
    """A data set a run needs and the root lacks: ``key`` and ``path`` say which config value asked."""

    name: str
    key: str
    path: str


def missing_data(needs: Iterable[tuple[str, str]], root: str | os.PathLike[str]) -> list[Missing]:
    """The registered data sets that ``needs`` (``(config key, path)`` pairs) ask for and ``root`` lacks,
    each once, in the order asked. A path that exists (from the working directory or under ``root``) is
    not missing; nor is a path that no data set provides, nor one whose stand-in is present."""
    root = Path(root)
    out: dict[str, Missing] = {}
    for key, path in needs:
        p = Path(path).expanduser()
        if p.is_absolute() or p.exists() or (root / p).exists():
            continue
        name = provider_of(p, anywhere=False)
        if name is None or name in out or (root / DATASETS[name].target).exists():
            continue
        out[name] = Missing(name, key, str(path))
    return list(out.values())


def _root_in_effect() -> Path:
    """The data root, refusing a ``HARDMIX_DATA`` that names no folder."""
    value = os.environ.get(ENV_VAR)
    if not value:
        return default_data_root()
    root = Path(value).expanduser()
    if not root.is_dir():
        what = "is not a folder" if root.exists() else "does not exist"
        raise MissingDataError(
            f"{ENV_VAR}={value} {what}: point it at your data folder, create it (`mkdir -p {value}`) to "
            f"download into it, or unset it to use the default root {default_data_root()}")
    return root


def _message(root: Path, missing: list[Missing], why: str) -> str:
    items = ", ".join(f"{m.name} ({DATASETS[m.name].target}" + ("" if m.path == DATASETS[m.name].target
                                                                else f", for {m.key}: {m.path}") + ")"
                      for m in missing)
    names = " ".join(m.name for m in missing)
    return (f"missing data under {root}: {items}; {why}. Fetch it with `hardmix data download {names}`"
            f", or, if it is in another folder, `export {ENV_VAR}=/path/to/that/folder`")


def _to_fetch(names: list[str], root: Path) -> list[str]:
    """The data sets to fetch for ``names``: their requirements first, those present skipped."""
    order: list[str] = []

    def visit(name: str) -> None:
        for dep in DATASETS[name].requires:
            visit(dep)
        if name not in order and not (root / DATASETS[name].target).exists():
            order.append(name)

    for n in names:
        visit(n)
    return order


def _announced_size(url: str, timeout: float) -> int | None:
    """The length a server announces for ``url`` (a HEAD request, redirects followed); None when it
    announces none or refuses HEAD. URLError (no network) propagates."""
    req = urllib.request.Request(url, method="HEAD", headers={"User-Agent": "hardmix-data/1",
                                                               "Accept-Encoding": "identity"})
    try:
        with urllib.request.urlopen(req, timeout=timeout) as resp:
            length = resp.headers.get("Content-Length")
    except urllib.error.HTTPError:
        return None
    return int(length) if length and length.isdigit() else None


def _fmt(n: int) -> str:
    if n >= 2**30:
        return f"{n / 2**30:.1f} GB"
    return f"{n / 2**20:.0f} MB" if n >= 2**20 else f"{n / 2**10:.0f} KB"


def ensure_data(
    needs: Iterable[tuple[str, str]],
    download_allowed: bool = True,
    base_url: str | None = None,
    progress: bool = True,
    say: Callable[[str], None] | None = None,
    timeout: float = 10.0,
) -> list[str]:
    """Make sure the registered data that ``needs`` asks for is under the data root.

    Args:
        needs: ``(config key, path)`` pairs (:meth:`~hardmix.training.task.ConfigFacts.data_needs`).
        download_allowed: False (``--no-download``, several processes): never fetch; list what is missing.
        base_url: a mirror (default: ``HARDMIX_DATA_BASE_URL``, else the official URLs).
        progress: download progress bars.
        say: where the one line announcing a download goes (default: stderr).
        timeout: seconds to wait for a server before calling the network unreachable.

    Returns:
        The data sets fetched (empty when nothing was missing).

    Raises:
        MissingDataError: one line listing every missing data set and both fixes, or naming a
            ``HARDMIX_DATA`` that is no folder.
    """
    needs = list(needs)
    if not needs:
        return []
    root = _root_in_effect()
    missing = missing_data(needs, root)
    if not missing:
        return []
    reason = offline_reason()
    if not download_allowed or reason is not None:
        why = f"downloading is off ({reason or '--no-download'})"
        raise MissingDataError(_message(root, missing, why))
    base_url = base_url or os.environ.get(BASE_URL_ENV) or None
    names = _to_fetch([m.name for m in missing], root)
    sizes: list[int | None] = []
    try:
        for name in names:
            for key in DATASETS[name].sources:
                src = SOURCES[key]
                sizes.append(src.size if src.size is not None and not base_url
                             else _announced_size(src.url_for(base_url), timeout))
    except (urllib.error.URLError, OSError) as e:
        cause = e.reason if isinstance(e, urllib.error.URLError) else e
        raise MissingDataError(_message(root, missing, f"there is no network ({cause})")) from None
    known = sum(s for s in sizes if s is not None)
    size = _fmt(known) + (" and more" if None in sizes else "") if sizes else "nothing to fetch"
    (say or (lambda line: print(line, file=sys.stderr, flush=True)))(
        f"hardmix: fetching {', '.join(names)} ({size}) into {root}; --no-download or {OFFLINE_ENV}=1 "
        "refuses")
    from hardmix.datasets.manager import download

    download(names, root=root, base_url=base_url, progress=progress)
    return names


def ensure_for_config(task: str, config: str, overrides: list[str], download_allowed: bool = True) -> None:
    """:func:`ensure_data` for the data a task's config reads (a config that does not load is left to
    the command's own validation)."""
    from hardmix.training.api import load_config_for, resolve_task
    from hardmix.utils.errors import ConfigError

    try:
        task_cls = resolve_task(task)
        cfg = load_config_for(task_cls, config, overrides)
    except (ConfigError, OSError, ValueError):
        return
    ensure_data(task_cls.about(cfg).data_needs(), download_allowed=download_allowed)


def ensure_for_spec(spec: object, download_allowed: bool = True) -> None:
    """:func:`ensure_data` for every task of a comparison spec at once (one line, one download, or one
    message listing all that is missing)."""
    from hardmix.training.api import load_config_for, resolve_task
    from hardmix.utils.errors import ConfigError

    needs: list[tuple[str, str]] = []
    for task in spec.tasks.values():  # type: ignore[attr-defined]
        try:
            task_cls = resolve_task(task.task)
            cfg = load_config_for(task_cls, task.config, list(task.overrides))
        except (ConfigError, OSError, ValueError):
            continue  # the grid names the fault
        needs += [(f"tasks.{task.name}: {key}", path) for key, path in task_cls.about(cfg).data_needs()]
    ensure_data(needs, download_allowed=download_allowed)


__all__ = ["OFFLINE_ENV", "Missing", "MissingDataError", "ensure_data", "ensure_for_config",
           "ensure_for_spec", "missing_data", "offline"]
