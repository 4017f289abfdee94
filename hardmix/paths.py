"""The data root: where hardmix finds evaluation data, corpora, images and models.

The root is the environment variable ``HARDMIX_DATA`` (layout as in the shared data README:
``senteval/``, ``wiki/``, ``images/``, ``models/``). Relative paths in configs resolve against it.
"""

from __future__ import annotations

import os
from pathlib import Path

ENV_VAR = "HARDMIX_DATA"


class DataRootError(FileNotFoundError):
    """The data root is not set or does not exist."""


def data_root(required: bool = True) -> Path | None:
    """Return the data root from ``HARDMIX_DATA``.

    Args:
        required: raise :class:`DataRootError` when the variable is unset or the folder is missing;
            otherwise return None in that case.
    """
    value = os.environ.get(ENV_VAR)
    if not value:
        if required:
            raise DataRootError(
                f"{ENV_VAR} is not set: point it at the data folder (with senteval/, wiki/, images/, models/)"
            )
        return None
    root = Path(value).expanduser()
    if not root.is_dir():
        if required:
            raise DataRootError(f"{ENV_VAR}={value} is not a directory")
        return None
    return root


def resolve_data_path(path: str | os.PathLike[str], must_exist: bool = False) -> Path:
    """Resolve ``path``: absolute paths and paths that exist from the working directory stay as they
    are; other relative paths are taken under the data root.

    Args:
        path: a file or folder path.
        must_exist: raise FileNotFoundError naming both candidates when neither exists.
    """
    p = Path(path).expanduser()
    if p.is_absolute() or p.exists():
        if must_exist and not p.exists():
            raise FileNotFoundError(f"{p} does not exist")
        return p
    root = data_root(required=False)
    if root is not None and (root / p).exists():
        return root / p
    if must_exist:
        where = f" or under {ENV_VAR}={root}" if root is not None else f" ({ENV_VAR} is not set)"
        raise FileNotFoundError(f"{path} was found neither relative to {Path.cwd()}{where}")
    return (root / p) if root is not None else p
