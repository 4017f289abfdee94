"""The data root: where hardmix finds evaluation data, corpora, images and models.

The root is the environment variable ``HARDMIX_DATA`` when it is set, else a per-user folder,
``$XDG_CACHE_HOME/hardmix/data`` (``~/.cache/hardmix/data`` when ``XDG_CACHE_HOME`` is unset), which is
also where ``hardmix data download`` puts data by default. Layout: ``senteval/``, ``wiki/``, ``images/``,
``models/`` (see ``docs/data.md``). Relative paths in configs resolve against it.

Example:
    >>> import os
    >>> str(default_data_root()).endswith(os.path.join("hardmix", "data"))
    True
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Literal, overload

ENV_VAR = "HARDMIX_DATA"


class DataRootError(FileNotFoundError):
    """The data root does not exist (``HARDMIX_DATA`` names no folder, or the default root is absent)."""


def default_data_root() -> Path:
    """The per-user data root used when ``HARDMIX_DATA`` is unset: ``$XDG_CACHE_HOME/hardmix/data``,
    else ``~/.cache/hardmix/data`` (it may not exist yet)."""
    cache = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(cache).expanduser() / "hardmix" / "data"


def _not_a_folder(path: Path) -> str:
    return "is not a directory (it is a file)" if path.exists() else "does not exist"


@overload
def data_root(required: Literal[True] = True) -> Path: ...
@overload
def data_root(required: bool) -> Path | None: ...
def data_root(required: bool = True) -> Path | None:
    """Return the data root: ``HARDMIX_DATA`` when set, else :func:`default_data_root`.

    Args:
        required: raise :class:`DataRootError` when the folder does not exist; otherwise return None in
            that case.
    """
    value = os.environ.get(ENV_VAR)
    if value:
        root = Path(value).expanduser()
        if not root.is_dir():
            if required:
                raise DataRootError(f"{ENV_VAR}={value} {_not_a_folder(root)}: point it at the data folder "
                                    f"or unset it to use {default_data_root()}")
            return None
        return root
    root = default_data_root()
    if not root.is_dir():
        if required:
            raise DataRootError(
                f"no data root: {ENV_VAR} is not set and the default root {root} does not exist; fetch data "
                f"with `hardmix data download NAME` (`hardmix data list` names them) or set {ENV_VAR}")
        return None
    return root


def data_root_path() -> Path:
    """The data root's path even when it does not exist yet (to name a missing data set under it):
    ``HARDMIX_DATA`` (which must then be a folder: :class:`DataRootError` otherwise), else
    :func:`default_data_root`."""
    if os.environ.get(ENV_VAR):
        return data_root(required=True)
    return default_data_root()


def download_root(root: str | os.PathLike[str] | None = None) -> Path:
    """Where ``hardmix data download`` writes: ``root`` when given, else ``HARDMIX_DATA`` when set, else
    :func:`default_data_root` (created if missing)."""
    if root is not None:
        return Path(root).expanduser()
    value = os.environ.get(ENV_VAR)
    return Path(value).expanduser() if value else default_data_root()


def missing_hint(path: str | os.PathLike[str]) -> str:
    """``"; fetch it with `hardmix data download NAME`"`` when a registered data set provides ``path``
    (a path relative to the data root, or under it), else ``""``."""
    from hardmix.datasets.sources import download_command_for

    command = download_command_for(path)
    return f"; fetch it with `{command}`" if command else ""


def resolve_data_path(path: str | os.PathLike[str], must_exist: bool = False) -> Path:
    """Resolve ``path``: absolute paths and paths that exist from the working directory stay as they
    are; other relative paths are taken under the data root.

    Args:
        path: a file or folder path.
        must_exist: raise FileNotFoundError naming both candidates (and the ``hardmix data download``
            command that fetches a registered data set) when neither exists.
    """
    p = Path(path).expanduser()
    if p.is_absolute() or p.exists():
        if must_exist and not p.exists():
            raise FileNotFoundError(f"{p} does not exist{missing_hint(p)}")
        return p
    root = data_root(required=False)
    if root is not None and (root / p).exists():
        return root / p
    if must_exist:
        if root is not None:
            where = f" or under the data root {root}"
        elif os.environ.get(ENV_VAR):
            value = os.environ[ENV_VAR]
            where = (f" ({ENV_VAR}={value} {_not_a_folder(Path(value).expanduser())}: point it at the "
                     "data folder)")
        else:
            where = f" (no data root: {ENV_VAR} is not set and {default_data_root()} does not exist)"
        raise FileNotFoundError(f"{path} was found neither relative to {Path.cwd()}{where}{missing_hint(p)}")
    return (root / p) if root is not None else p
