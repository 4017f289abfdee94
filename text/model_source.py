"""Where a text backbone comes from: a local Hugging Face folder, or a Hub name (cached or downloaded).

Everything that can fail does so before any model is loaded, with one sentence naming the key and where
it looked (``model.name_or_path``).
"""

from __future__ import annotations

import os
import socket
from pathlib import Path

from hardmix.paths import ENV_VAR, data_root, resolve_data_path
from hardmix.text.model import quiet_transformers


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


def resolve_model(name: str) -> tuple[str, bool]:
    """Where to load the backbone from: ``(path or Hub name, local files only)``.

    A local folder (from the working directory, else under ``HARDMIX_DATA``) wins; otherwise ``name`` is a
    Hub name, used from the local cache if it is there, else downloaded. Offline (``HF_HUB_OFFLINE`` set,
    or the Hub unreachable) a Hub name that is not cached fails at once, saying so.
    """
    p = resolve_data_path(name)
    if p.is_dir():
        return str(p), True
    root = data_root(required=False)
    looked = f"{Path.cwd()}" + (f" and {ENV_VAR}={root}" if root else f" ({ENV_VAR} is not set)")
    if _is_path_like(name):
        raise ModelNotFoundError(f"model.name_or_path: {name} is not a model folder (looked in {looked})")
    from transformers import AutoConfig

    try:
        with quiet_transformers():
            AutoConfig.from_pretrained(name, local_files_only=True)
        return name, True
    except (OSError, ValueError):
        pass
    offline = any(os.environ.get(v, "").lower() in ("1", "true", "yes", "on")
                  for v in ("HF_HUB_OFFLINE", "TRANSFORMERS_OFFLINE"))
    if offline or not _hub_reachable():
        why = "offline mode is set (HF_HUB_OFFLINE)" if offline else "the Hugging Face Hub cannot be reached"
        raise ModelNotFoundError(
            f"model.name_or_path: {name!r} is not a local folder (looked in {looked}), not in the Hugging "
            f"Face cache, and {why}: download the model where there is a network and point "
            "model.name_or_path at its folder")
    return name, False


__all__ = ["ModelNotFoundError", "resolve_model"]
