"""How a comparison starts a cell's process: the command (this interpreter, ``python -P -m hardmix``) and
its environment (the threads, and the comparison's own hardmix first on ``PYTHONPATH``), the same for the
local runner (:mod:`hardmix.compare.runner`) and SLURM jobs (:mod:`hardmix.compare.launcher`)."""

from __future__ import annotations

import os
import site
import sys
import sysconfig
from pathlib import Path

from hardmix.utils.provenance import package_root


def interpreter_command(command: list[str]) -> list[str]:
    """``command`` (``hardmix ...``) run by this interpreter, without the working folder on ``sys.path``.

    ``python -m hardmix`` puts the working folder first on ``sys.path``: run from a clone with hardmix
    installed (not editable), it would import the clone's ``hardmix/`` instead of the installed one (another
    version's code, which the cells' records would not name), or fail where it does not import. ``-P``
    (Python 3.11+) leaves it out; on 3.10 the same is done by hand.

    >>> interpreter_command(["hardmix", "train", "text", "c.yaml"])[-3:]
    ['train', 'text', 'c.yaml']
    """
    if sys.version_info >= (3, 11):
        return [sys.executable, "-P", "-m", "hardmix", *command[1:]]
    runner = "import sys; del sys.path[0]; from hardmix.cli import main; sys.exit(main())"
    return [sys.executable, "-c", runner, *command[1:]]


def _site_dirs() -> set[Path]:
    dirs = [*site.getsitepackages(), site.getusersitepackages(),
            sysconfig.get_paths()["purelib"], sysconfig.get_paths()["platlib"]]
    return {Path(d).resolve() for d in dirs if d}


def cell_env(threads: int | None = None, base: dict[str, str] | None = None,
             root: Path | None = None) -> dict[str, str]:
    """The environment of a cell's ``hardmix train`` process: ``base`` (this process's by default), with
    ``OMP_NUM_THREADS`` set to ``threads`` and the folder of the hardmix this process runs (``root``, by
    default :func:`hardmix.utils.provenance.package_root`) first on ``PYTHONPATH``, so that a cell runs the
    comparison's own code. Run as ``python -m hardmix`` from a clone that is not installed, the cells would
    otherwise fail to import hardmix (``-P`` leaves the working folder off their ``sys.path``), and beside an
    installed copy they would run that copy. Where this process's hardmix is itself installed in a
    site-packages folder, ``PYTHONPATH`` is left as it is (a site folder ahead of the standard library would
    change more than hardmix).

    >>> env = cell_env(2, base={"PYTHONPATH": "/opt/extra"}, root=Path("/src/clone"))
    >>> env["OMP_NUM_THREADS"], env["PYTHONPATH"].split(os.pathsep)
    ('2', ['/src/clone', '/opt/extra'])
    """
    env = dict(os.environ if base is None else base)
    if threads:
        env["OMP_NUM_THREADS"] = str(threads)
    root = (root or package_root()).resolve()
    if root not in _site_dirs():
        rest = [p for p in env.get("PYTHONPATH", "").split(os.pathsep) if p and Path(p).resolve() != root]
        env["PYTHONPATH"] = os.pathsep.join([str(root), *rest])
    return env


__all__ = ["cell_env", "interpreter_command"]
