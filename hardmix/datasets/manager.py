"""``download``, ``inventory`` and ``check``: the data sets of the registry under a data root.

:func:`download` fetches each named data set (and those it is derived from) through
:func:`hardmix.datasets.download.download_file`, prepares it in a temporary path beside its target,
checks its layout, renames it into place and records its manifest. A data set already present is
checked and left alone (a second call does nothing). Sources are fetched into
``<root>/.hardmix/downloads/`` and deleted once prepared (``keep_archives`` keeps them).
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from hardmix.datasets import layout, prepare_images, prepare_models, prepare_text
from hardmix.datasets.download import DataDownloadError, download_file, file_checksums
from hardmix.datasets.paths import download_root
from hardmix.datasets.records import (
    downloads_dir,
    hash_tree,
    read_manifest,
    record_checksum,
    recorded_checksum,
    records_dir,
    verify_files,
    write_manifest,
)
from hardmix.datasets.sources import (
    BASE_URL_ENV,
    BERT_MINI_HUB,
    DATASETS,
    SOURCES,
    STAND_INS,
    WIKI1M_HEAD_LINES,
    DataSet,
    Source,
)
from hardmix.utils.confine import makedirs, remove_written, replace


class DataCheckError(ValueError):
    """A data set is present but does not pass its check (layout or recorded checksums)."""


@dataclass(frozen=True)
class Outcome:
    """What :func:`download` did for one data set: ``action`` is ``"downloaded"`` or ``"present"``."""

    name: str
    path: Path
    action: str


def fetch_source(
    root: Path, src: Source, base_url: str | None = None, progress: bool = True
) -> tuple[Path, dict[str, Any] | None]:
    """Download one source into the downloads folder, verified by its published checksum, else by the
    SHA-256 recorded at its first download; a source neither verifies is fetched whole in one transfer
    (a partial file of it is never resumed), and only then is its SHA-256 recorded. A file kept in the
    downloads folder is used only when one of those checksums verifies it: a kept file that nothing can
    verify (no checksum published, none recorded yet) is fetched again, and its SHA-256 recorded.

    Returns:
        (the file, the record to keep when this was the first download of a source without a published
        checksum: ``{"sha256", "size", "url"}``, kept by the caller once the data set passed its checks;
        else None).
    """
    dest = downloads_dir(root) / src.key
    recorded = recorded_checksum(root, src.key)
    sha256 = src.sha256 or (recorded["sha256"] if recorded and not src.md5 else None)
    size = src.size if src.size is not None else (recorded["size"] if recorded else None)
    verified = bool(src.md5 or sha256)  # else only its length checks it: never used nor resumed from
    if dest.is_file():  # kept from an earlier call (or placed there by hand)
        have = file_checksums(dest)
        if verified and (src.md5 in (None, have.md5)) and (sha256 in (None, have.sha256)) \
                and size in (None, have.size):
            return dest, None
        remove_written(dest, root)
    url = src.url_for(base_url)
    digest = download_file(url, dest, md5=src.md5, sha256=sha256, size=size, progress=progress,
                           resume=verified, root=root)  # no link between the data root and the file
    if not src.md5 and not src.sha256 and recorded is None:
        return dest, {"sha256": digest.sha256, "size": digest.size, "url": url}
    return dest, None


def _build(ds: DataSet, files: dict[str, Path], out: Path, work: Path, root: Path, progress: bool) -> None:
    """Prepare data set ``ds`` at ``out`` from its downloaded ``files`` (or from what it requires)."""
    def first() -> Path:  # the one downloaded file, for the sets made from one
        return next(iter(files.values()))

    builders: dict[str, Callable[[], object]] = {
        "senteval": lambda: prepare_text.prepare_senteval(first(), out, work, root),
        "wiki1m": lambda: prepare_text.place_file(first(), out, root),
        "imagenet100-classes": lambda: prepare_text.place_file(first(), out, root),
        "enwiki-100k": lambda: prepare_text.derive_head(root / DATASETS["wiki1m"].target, out, root=root),
        "wiki1m-head": lambda: prepare_text.derive_head(root / DATASETS["wiki1m"].target, out,
                                                        WIKI1M_HEAD_LINES, compress=False, root=root),
        "cifar10": lambda: prepare_images.prepare_cifar10(first(), out, work, ds.members, root, progress),
        "imagenette": lambda: prepare_images.prepare_imagenette(first(), out, work, root),
        "imagenette-64": lambda: prepare_images.derive_resized(root / DATASETS["imagenette"].target, out,
                                                               root, progress=progress),
        "bert-mini": lambda: prepare_models.prepare_model_files(files, out, BERT_MINI_HUB, root),
    }
    if ds.name not in builders:
        raise ValueError(f"no preparation for data set {ds.name!r}")
    builders[ds.name]()


def check_dataset(root: Path, ds: DataSet) -> list[str]:
    """Problems of a present data set: its layout, and the files against its manifest when hardmix
    prepared it."""
    target = root / ds.target
    problems = layout.check_layout(ds.name, target)
    manifest = read_manifest(root, ds.name)
    if manifest and not problems:
        problems += verify_files(target, manifest["files"])
    if not problems:
        problems += content_problems(ds.name, target)
    return problems


def content_problems(name: str, path: Path) -> list[str]:
    """What the registered tasks' own loaders refuse in data set ``name`` at ``path``
    (:meth:`hardmix.training.task.ConfigFacts.data_problems`): the content check that training and evaluation
    make, made by ``hardmix data check`` too. A task that cannot be loaded here says nothing."""
    from hardmix.training.registry import available_tasks, load_task

    problems: list[str] = []
    for task in available_tasks():
        try:
            cls = load_task(task)
        except Exception:  # noqa: BLE001 (a broken plug-in task: its own commands name the fault)
            continue
        problems += [p for p in cls.facts_class.data_problems(name, path) if p not in problems]
    return problems


def download(
    names: Iterable[str],
    root: str | os.PathLike[str] | None = None,
    base_url: str | None = None,
    progress: bool = True,
    keep_archives: bool = False,
    datasets: Mapping[str, DataSet] = DATASETS,
    sources: Mapping[str, Source] = SOURCES,
) -> list[Outcome]:
    """Fetch and prepare data sets under the data root.

    Args:
        names: data set names (see :data:`hardmix.datasets.sources.DATASETS`); their requirements come
            first.
        root: the data root (default: ``HARDMIX_DATA``, else the per-user default root).
        base_url: a mirror holding each source under its key (default: ``HARDMIX_DATA_BASE_URL``, else
            the official URLs).
        progress: tqdm progress bars.
        keep_archives: keep the downloaded archives in ``<root>/.hardmix/downloads``.
        datasets, sources: the registry (tests and mirrors may substitute entries).

    Returns:
        One :class:`Outcome` per data set, in the order handled.

    Raises:
        DataDownloadError, DataCheckError, ValueError: one line naming the data set, path or URL.
    """
    root = download_root(root)
    base_url = base_url or os.environ.get(BASE_URL_ENV) or None
    order: list[DataSet] = []

    def visit(name: str) -> None:
        if name not in datasets:
            raise ValueError(f"unknown data set {name!r}; known: {', '.join(datasets)} (`hardmix data list`)")
        for dep in datasets[name].requires:
            visit(dep)
        if datasets[name] not in order:
            order.append(datasets[name])

    for n in names:
        visit(n)
    from hardmix.training.run_folder import RunLock

    # one download at a time; the lock confined to the data root (never through a link at .hardmix)
    lock = RunLock(records_dir(root), what="a download into this data root", root=root)
    lock.acquire()
    try:
        return _download_each(order, root, base_url, progress, keep_archives, sources)
    finally:
        lock.release()


def _download_each(order: list[DataSet], root: Path, base_url: str | None, progress: bool,
                   keep_archives: bool, sources: Mapping[str, Source]) -> list[Outcome]:
    outcomes = []
    for ds in order:
        target = root / ds.target
        if target.exists():
            problems = check_dataset(root, ds)
            if problems:
                raise DataCheckError(f"{ds.name}: {target} is present but fails its check ({problems[0]}); "
                                     f"delete it and run `hardmix data download {ds.name}` again")
            outcomes.append(Outcome(ds.name, target, "present"))
            continue
        fetched = {key: fetch_source(root, sources[key], base_url, progress) for key in ds.sources}
        files = {key: path for key, (path, _) in fetched.items()}
        tmp = target.with_name(f".tmp.{target.name}")
        work = downloads_dir(root) / f"{ds.name}.work"
        for p in (tmp, work):
            remove_written(p, root)
        makedirs(target.parent, root)
        makedirs(work, root)
        try:
            _build(ds, files, tmp, work, root, progress)
            problems = layout.check_layout(ds.name, tmp)
            if problems:
                raise DataCheckError(f"{ds.name}: the prepared data does not have the expected layout "
                                     f"({problems[0]}); is the source still the official one?")
            replace(tmp, target, root)
        finally:
            remove_written(tmp, root)
            remove_written(work, root)
        for key, (_, first) in fetched.items():  # a first download's checksum, once the data passed
            if first is not None:
                record_checksum(root, key, str(first["url"]), str(first["sha256"]), int(first["size"]))
        write_manifest(root, ds.name, {
            "name": ds.name, "target": ds.target,
            "prepared": datetime.now(timezone.utc).isoformat(timespec="seconds"),
            "sources": {k: sources[k].url_for(base_url) for k in ds.sources},
            "files": hash_tree(target),
        })
        if not keep_archives:
            for path in files.values():
                remove_written(path, root)
        outcomes.append(Outcome(ds.name, target, "downloaded"))
    return outcomes


@dataclass(frozen=True)
class Entry:
    """One line of :func:`inventory`: a data set, or (``stand_in`` set) a folder that configs read which no
    download provides, and the data set that stands in for it where it is absent."""

    name: str
    path: Path
    present: bool
    size: int
    recorded: bool
    description: str
    stand_in: str | None = None


def _size(path: Path) -> int:
    if path.is_file():
        return path.stat().st_size
    return sum(f.stat().st_size for f in path.rglob("*") if f.is_file()) if path.is_dir() else 0


def inventory(root: str | os.PathLike[str] | None = None,
              datasets: Mapping[str, DataSet] = DATASETS) -> list[Entry]:
    """Every registered data set: its path under the root, whether it is present, its size on disk and
    whether hardmix recorded its checksums (prepared it); then every folder that configs read which no
    download provides (:data:`~hardmix.datasets.sources.STAND_INS`)."""
    root = download_root(root)
    out = []
    for ds in datasets.values():
        path = root / ds.target
        out.append(Entry(ds.name, path, path.exists(), _size(path), read_manifest(root, ds.name) is not None,
                         ds.description))
    for target, stand_in in STAND_INS.items():
        path = root / target
        out.append(Entry(Path(target).name, path, path.exists(), _size(path), False,
                         f"the CPU text configs' model (the project's machines only); where absent, "
                         f"`{stand_in}` stands in for it", stand_in=stand_in))
    return out


def check(names: Iterable[str] = (), root: str | os.PathLike[str] | None = None,
          datasets: Mapping[str, DataSet] = DATASETS) -> dict[str, list[str]]:
    """``{name: problems}`` for the named data sets (default: every present one); an absent named data set
    is one problem."""
    root = download_root(root)
    names = list(names) or [n for n, ds in datasets.items() if (root / ds.target).exists()]
    out: dict[str, list[str]] = {}
    for name in names:
        if name not in datasets:
            raise ValueError(f"unknown data set {name!r}; known: {', '.join(datasets)}")
        ds = datasets[name]
        if not (root / ds.target).exists():
            out[name] = [f"{root / ds.target}: missing; fetch it with `hardmix data download {name}`"]
        else:
            out[name] = check_dataset(root, ds)
    return out


def provenance(path: str | os.PathLike[str]) -> dict[str, object] | None:
    """Which registered data set a resolved data path belongs to and where it came from, for a results
    record: ``{"dataset", "root", "origin": "hardmix download" | "laid out by hand", "prepared",
    "sources"}``, or None when ``path`` is no registered data set's (or inside one).

    Example:
        >>> provenance("/nowhere/at/all") is None
        True
    """
    p = Path(path).resolve()
    for ds in DATASETS.values():
        parts = Path(ds.target).parts
        for i in range(len(p.parts) - len(parts), 0, -1):
            if p.parts[i:i + len(parts)] == parts:
                root = Path(*p.parts[:i])
                manifest = read_manifest(root, ds.name)
                return {"dataset": ds.name, "root": str(root),
                        "origin": "hardmix download" if manifest else "laid out by hand",
                        "prepared": manifest.get("prepared") if manifest else None,
                        "sources": manifest.get("sources") if manifest else None}
    return None


__all__ = ["DataCheckError", "DataDownloadError", "Entry", "Outcome", "check", "download", "fetch_source",
           "inventory", "provenance"]
