"""Where a text backbone comes from: a local Hugging Face folder, or a Hub name (cached or downloaded).

Everything that can fail does so before any model is loaded, with one sentence naming the key and where
it looked (``model.name_or_path``).

The CPU configs' ``models/bert-mini-wiki-mlm`` exists only in the shared data of the project's own
machines; where it is absent, its public stand-in of the same shape, Google's BERT-mini
(``google/bert_uncased_L-4_H-256_A-4``: 4 layers, hidden 256), is used instead: the copy that
``hardmix data download bert-mini`` put under the data root, else the Hub's (cached or reachable), with
one warning line naming the model loaded.
"""

from __future__ import annotations

import logging
import os
import socket
from pathlib import Path

from hardmix.datasets.paths import data_root, resolve_data_path
from hardmix.datasets.sources import BERT_MINI_HUB, DATASETS
from hardmix.text.model import quiet_transformers
from hardmix.utils.offline import hub_offline_reason, libraries_offline

log = logging.getLogger(__name__)

#: Local model folders of the configs that have a public stand-in: name -> (data set, Hub name).
STAND_INS = {"models/bert-mini-wiki-mlm": ("bert-mini", BERT_MINI_HUB)}


class ModelNotFoundError(FileNotFoundError):
    """The backbone is neither a local folder nor reachable on the Hugging Face Hub."""


def _is_path_like(name: str) -> bool:
    return name.startswith((".", "/", "~")) or name.endswith(("/", os.sep)) or name.count("/") > 1 \
        or os.sep != "/" and os.sep in name


def _hub_reachable(timeout: float = 3.0) -> bool:
    from urllib.parse import urlparse

    host = urlparse(os.environ.get("HF_ENDPOINT", "https://huggingface.co")).hostname or "huggingface.co"
    try:
        socket.create_connection((host, 443), timeout=timeout).close()
        return True
    except OSError:
        return False


def model_positions(source: str, local_only: bool = True) -> int | None:
    """The number of token positions of a model (``max_position_embeddings`` of its config), or None when
    its config does not say (or cannot be read without loading the model)."""
    import json

    config = Path(source) / "config.json"
    try:
        if config.is_file():
            data = json.loads(config.read_text(encoding="utf-8"))
        else:
            from transformers import AutoConfig

            with libraries_offline():
                data = AutoConfig.from_pretrained(source, local_files_only=local_only).to_dict()
    except Exception:  # noqa: BLE001 (no config to read: loading the model will name the problem)
        return None
    value = data.get("max_position_embeddings")
    return int(value) if isinstance(value, int) and value > 0 else None


def resolve_model(name: str) -> tuple[str, bool]:
    """Where to load the backbone from: ``(path or Hub name, local files only)``.

    A local folder (from the working directory, else under the data root) wins; a missing folder with a
    public stand-in (:data:`STAND_INS`) gives the stand-in; otherwise ``name`` is a Hub name, used from
    the local cache if it is there (the folder of its snapshot: :func:`hub_snapshot`), else downloaded
    (a run then fingerprints the snapshot it downloaded). Offline (``HF_HUB_OFFLINE`` set,
    or the Hub unreachable) a Hub name that is not cached fails at once, saying so.
    """
    if not name.strip():
        raise ModelNotFoundError("model.name_or_path: empty; name a model folder or a Hugging Face Hub name "
                                 "(e.g. bert-base-uncased)")
    p = resolve_data_path(name)
    if p.is_dir():
        return str(p), True
    root = data_root(required=False)
    looked = f"{Path.cwd()}" + (f" and the data root {root}" if root else " (no data root)")
    if name.strip("/") in STAND_INS:
        return _stand_in(name.strip("/"), looked)
    if _is_path_like(name):
        raise ModelNotFoundError(f"model.name_or_path: {name} is not a model folder (looked in {looked})")
    return _hub(name, looked)


def _stand_in(name: str, looked: str) -> tuple[str, bool]:
    """The public stand-in of a missing local model: the downloaded copy, else the Hub's."""
    dataset, hub = STAND_INS[name]
    root = data_root(required=False)
    local = root / DATASETS[dataset].target if root is not None else None
    if local is not None and (local / "config.json").is_file():
        log.warning("model: %s is not here; loading its public stand-in %s from %s", name, hub, local)
        return str(local), True
    cached, why = _hub_status(hub)
    if why is not None:
        raise ModelNotFoundError(
            f"model.name_or_path: {name} is not a local folder (looked in {looked}) and its public stand-in "
            f"{hub} is not downloaded ({why}): fetch it with `hardmix data download {dataset}` where there "
            "is a network")
    log.warning("model: %s is not here; loading its public stand-in %s from the Hugging Face Hub", name, hub)
    return _cached(hub, cached)


def _hub_status(name: str) -> tuple[bool, str | None]:
    """(in the local Hugging Face cache, why it cannot be fetched: None when it is cached or the Hub is
    reachable)."""
    from transformers import AutoConfig

    try:
        with libraries_offline(), quiet_transformers():  # the cache only: even the Hub client's agent check
            AutoConfig.from_pretrained(name, local_files_only=True)
        return True, None
    except (OSError, ValueError):
        pass
    offline = hub_offline_reason()
    if offline is not None:  # no connection is attempted, not even the reachability check
        return False, f"offline mode is set ({offline})"
    if not _hub_reachable():
        return False, "the Hugging Face Hub cannot be reached"
    return False, None


def hub_snapshot(name: str) -> Path | None:
    """The folder of the Hugging Face cache's snapshot that a Hub name resolves to now (its ``main``
    revision: the files ``from_pretrained`` loads, offline), or None when it is not cached. Read from the
    cache only (its ``config.json``): no connection, nothing written."""
    from huggingface_hub import try_to_load_from_cache

    try:
        found = try_to_load_from_cache(name, "config.json")
    except (OSError, ValueError):  # not a Hub name at all
        return None
    return Path(found).parent if isinstance(found, str) and Path(found).parent.is_dir() else None


def _cached(name: str, cached: bool) -> tuple[str, bool]:
    """A Hub name that is cached: the folder of its snapshot, loaded (and fingerprinted) as a local
    folder; else the name, which loading downloads."""
    snapshot = hub_snapshot(name) if cached else None
    return (str(snapshot), True) if snapshot is not None else (name, cached)


def _hub(name: str, looked: str) -> tuple[str, bool]:
    """A Hub name: from the local cache (the folder of its snapshot), else downloadable when the Hub is
    reachable."""
    cached, why = _hub_status(name)
    if why is not None:
        raise ModelNotFoundError(
            f"model.name_or_path: {name!r} is not a local folder (looked in {looked}), not in the Hugging "
            f"Face cache, and {why}: download the model where there is a network and point "
            "model.name_or_path at its folder")
    return _cached(name, cached)


__all__ = ["ModelNotFoundError", "hub_snapshot", "resolve_model"]
