"""Which code ran: the git commit of the hardmix checkout a process imports, for ``results.json`` ``code``.

``{"commit": "<40 hex>", "dirty": bool}`` where hardmix is imported from a git checkout (``dirty``: the
checkout's tracked files differ from its commit; files git does not track are not counted), else
``{"commit": None, "dirty": None, "checkout": "not a git checkout", "version": "0.1.0"}``: an installed
wheel, a folder copied without its ``.git``, a checkout whose own top folder is not hardmix's (a wheel
installed inside another project's repository), or a machine without the ``git`` program. It never fails a
run: a git that cannot answer within a few seconds counts as none.

>>> code = code_provenance()
>>> sorted(code) in (["commit", "dirty"], ["checkout", "commit", "dirty", "version"])
True
>>> code["commit"] is None or len(code["commit"]) == 40
True
"""

from __future__ import annotations

import functools
import os
import subprocess
from pathlib import Path
from typing import Any

#: ``checkout`` of a record made from code that is not a git checkout.
NOT_A_CHECKOUT = "not a git checkout"

_TIMEOUT = 10.0


def _git(root: Path, *args: str) -> str | None:
    """``git -C root ARGS``'s standard output, or None where git is missing, fails or hangs."""
    env = {**os.environ, "GIT_OPTIONAL_LOCKS": "0", "LC_ALL": "C"}  # a status that writes no index lock
    try:
        done = subprocess.run(["git", "-C", str(root), *args], capture_output=True, text=True,
                              timeout=_TIMEOUT, env=env, check=False)
    except (OSError, subprocess.SubprocessError):
        return None
    return done.stdout if done.returncode == 0 else None


def package_root() -> Path:
    """The folder holding the ``hardmix`` package that runs (a checkout's top folder, or site-packages)."""
    import hardmix.version

    return Path(hardmix.version.__file__).resolve().parent.parent


def code_of(root: Path) -> dict[str, Any]:
    """The code provenance of the hardmix package under ``root`` (see the module)."""
    from hardmix.version import __version__

    fallback = {"commit": None, "dirty": None, "checkout": NOT_A_CHECKOUT, "version": __version__}
    if not (root / ".git").exists():  # a folder (a clone) or a file (a worktree): anything else is none
        return fallback
    top = _git(root, "rev-parse", "--show-toplevel")
    commit = _git(root, "rev-parse", "--verify", "HEAD")
    if top is None or commit is None or Path(top.strip()).resolve() != root.resolve():
        return fallback
    commit = commit.strip()
    if len(commit) != 40:
        return fallback
    status = _git(root, "status", "--porcelain", "--untracked-files=no")
    return {"commit": commit, "dirty": None if status is None else bool(status.strip())}


@functools.lru_cache(maxsize=1)
def code_provenance() -> dict[str, Any]:
    """:func:`code_of` the running hardmix, asked once per process."""
    return code_of(package_root())


def code_label(code: Any) -> str:
    """One short label of a record's ``code``: the commit's first 12 characters (``+dirty`` when its tree
    had changes), ``not a git checkout (0.1.0)``, or ``not recorded`` (a record older than ``code``).

    >>> code_label({"commit": "a" * 40, "dirty": True})
    'aaaaaaaaaaaa+dirty'
    >>> code_label(None)
    'not recorded'
    """
    if not isinstance(code, dict):
        return "not recorded"
    commit = code.get("commit")
    if not isinstance(commit, str):
        return f"{NOT_A_CHECKOUT} ({code.get('version', '?')})"
    return commit[:12] + ("+dirty" if code.get("dirty") else "")


__all__ = ["NOT_A_CHECKOUT", "code_label", "code_of", "code_provenance", "package_root"]
