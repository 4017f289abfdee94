"""Offline means offline: ``HARDMIX_OFFLINE=1`` and ``--no-download`` reach every library hardmix calls.

hardmix's own downloader refuses when :func:`offline_reason` names a reason. The libraries it calls have
switches of their own, read once: ``huggingface_hub`` reads ``HF_HUB_OFFLINE`` (or
``TRANSFORMERS_OFFLINE``) when it is imported, and without it even a ``local_files_only=True`` load asks
the Hub for its list of agents. :func:`libraries_offline` therefore sets those variables in the process
(so what is imported later reads them, and the processes it starts inherit them) and the value the Hub
client already holds, for as long as a command runs.

``--no-download`` is a flag of one command; :data:`NO_DOWNLOAD_ENV` carries it to the processes that
command starts (a comparison's cells), which then refuse to download as well.

Example:
    >>> import os
    >>> saved = {k: os.environ.pop(k, None) for k in (OFFLINE_ENV, NO_DOWNLOAD_ENV, *LIBRARY_OFFLINE_ENV)}
    >>> offline_reason() is None
    True
    >>> with libraries_offline(no_download=True) as reason:
    ...     reason, os.environ["HF_HUB_OFFLINE"], os.environ["TRANSFORMERS_OFFLINE"]
    ('--no-download', '1', '1')
    >>> offline_reason(), "HF_HUB_OFFLINE" in os.environ
    (None, False)
    >>> os.environ.update({k: v for k, v in saved.items() if v is not None})
"""

from __future__ import annotations

import contextlib
import os
import sys
from collections.abc import Iterator
from typing import Any

#: Set to 1 (or true, yes, on) to never download: a missing data set is an error that lists them all,
#: a Hub model name must be in the local cache, and no connection is attempted.
OFFLINE_ENV = "HARDMIX_OFFLINE"
#: Set by ``--no-download`` for the command's own process and the processes it starts.
NO_DOWNLOAD_ENV = "HARDMIX_NO_DOWNLOAD"
#: The switches of the libraries hardmix calls (the Hugging Face Hub client, transformers, datasets).
LIBRARY_OFFLINE_ENV = ("HF_HUB_OFFLINE", "TRANSFORMERS_OFFLINE", "HF_DATASETS_OFFLINE")

_TRUE = ("1", "true", "yes", "on")


def _is_set(name: str) -> bool:
    return os.environ.get(name, "").strip().lower() in _TRUE


def offline() -> bool:
    """``HARDMIX_OFFLINE`` is set to a true value."""
    return _is_set(OFFLINE_ENV)


def offline_reason() -> str | None:
    """Why hardmix may not download (``HARDMIX_OFFLINE=1``, ``--no-download``), or None when it may."""
    if offline():
        return f"{OFFLINE_ENV}=1"
    if _is_set(NO_DOWNLOAD_ENV):
        return "--no-download"
    return None


def hub_offline_reason() -> str | None:
    """Why no Hugging Face Hub connection may be made: :func:`offline_reason`, else a library's own
    offline variable that is set (``HF_HUB_OFFLINE=1``), else None."""
    reason = offline_reason()
    if reason is not None:
        return reason
    return next((f"{name}=1" for name in LIBRARY_OFFLINE_ENV if _is_set(name)), None)


def _hub_constants() -> Any:
    """``huggingface_hub.constants`` when it is already imported (it read the environment then), else
    None (Any: the module's attributes are the library's, read and set by name)."""
    return sys.modules.get("huggingface_hub.constants")


@contextlib.contextmanager
def libraries_offline(no_download: bool = False) -> Iterator[str | None]:
    """While the block runs, when hardmix may not download (:func:`offline_reason`, or ``no_download``,
    which sets :data:`NO_DOWNLOAD_ENV`): every library's offline variable is set in the environment and
    an already imported Hub client is switched offline. Everything is restored afterwards. Yields the
    reason (None: online, nothing changed)."""
    saved = {name: os.environ.get(name) for name in (NO_DOWNLOAD_ENV, *LIBRARY_OFFLINE_ENV)}
    if no_download:
        os.environ[NO_DOWNLOAD_ENV] = "1"
    reason = offline_reason()
    constants = _hub_constants()
    held = getattr(constants, "HF_HUB_OFFLINE", None)
    if reason is not None:
        for name in LIBRARY_OFFLINE_ENV:
            os.environ[name] = "1"
        if constants is not None:
            constants.HF_HUB_OFFLINE = True
    try:
        yield reason
    finally:
        for name, value in saved.items():
            if value is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = value
        now = _hub_constants()
        if reason is not None and now is not None:
            # imported inside the block: it read the offline environment, which is gone now
            now.HF_HUB_OFFLINE = held if now is constants else _is_set("HF_HUB_OFFLINE") or \
                _is_set("TRANSFORMERS_OFFLINE")


__all__ = ["LIBRARY_OFFLINE_ENV", "NO_DOWNLOAD_ENV", "OFFLINE_ENV", "hub_offline_reason", "libraries_offline",
           "offline", "offline_reason"]
