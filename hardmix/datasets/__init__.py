"""Data on a fresh machine: the registry of real sources, a resumable verified downloader, the
preparation of each data set into the layout hardmix reads, and ``hardmix data download|list|check``.

See ``docs/data.md``. Modules: :mod:`~hardmix.data_sources` (every URL and checksum),
:mod:`~hardmix.datasets.download` (HTTP with range requests), :mod:`~hardmix.datasets.records`
(checksums recorded at first download, manifests), :mod:`~hardmix.datasets.layout` (what each data set
must hold), ``prepare_text``/``prepare_images``/``prepare_models`` and :mod:`~hardmix.datasets.manager`.
"""

from __future__ import annotations

from typing import Any

from hardmix.data_sources import DATASETS, SOURCES, DataSet, Source

#: Names imported on first use (the manager loads torch through the checkpoint writer: ``hardmix --help``
#: imports this package and must stay light).
_LAZY = {"DataDownloadError": "download", "download_file": "download", "DataCheckError": "manager",
         "check": "manager", "download": "manager", "inventory": "manager"}


def __getattr__(name: str) -> Any:
    if name in _LAZY:
        import importlib

        return getattr(importlib.import_module(f"hardmix.datasets.{_LAZY[name]}"), name)
    raise AttributeError(f"module 'hardmix.datasets' has no attribute {name!r}")


__all__ = ["DATASETS", "SOURCES", "DataCheckError", "DataDownloadError", "DataSet", "Source", "check",
           "download", "download_file", "inventory"]
