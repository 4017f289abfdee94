"""Data on a fresh machine: the registry of real sources, a resumable verified downloader, the
preparation of each data set into the layout hardmix reads, and ``hardmix data download|list|check``.

See ``docs/data.md``. Modules: :mod:`~hardmix.datasets.sources` (every URL and checksum),
:mod:`~hardmix.datasets.download` (HTTP with range requests), :mod:`~hardmix.datasets.records`
(checksums recorded at first download, manifests), :mod:`~hardmix.datasets.layout` (what each data set
must hold), ``prepare_text``/``prepare_images``/``prepare_models`` and :mod:`~hardmix.datasets.manager`.
"""

from __future__ import annotations

from hardmix.datasets.download import DataDownloadError, download_file
from hardmix.datasets.manager import DataCheckError, check, download, inventory
from hardmix.datasets.sources import DATASETS, SOURCES, DataSet, Source

__all__ = ["DATASETS", "SOURCES", "DataCheckError", "DataDownloadError", "DataSet", "Source", "check",
           "download", "download_file", "inventory"]
