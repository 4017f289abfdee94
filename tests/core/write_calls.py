"""The rule of ``tests/core/test_write_gate.py``: every call that creates, appends to, replaces or deletes a
file, found by reading the code (``ast``).

A call counts as a write when it is

- ``open`` / ``io.open`` / ``os.fdopen`` / ``gzip.open`` / ``bz2.open`` / ``lzma.open`` / ``codecs.open``
  with a mode holding ``w``, ``a``, ``x`` or ``+`` (or a mode that is not a string constant), and
  ``X.open(mode)`` on any other object (``Path.open``) the same way;
- a method of :data:`WRITE_METHODS` on any object (``path.write_text``, ``path.unlink``, ``fig.savefig``,
  ``model.save_pretrained``, ``tar.extractall``, ...), and ``X.replace(one)`` / ``X.rename(one)`` with one
  positional argument and no keyword (``Path.replace``: ``str.replace`` takes two);
- a function of :data:`WRITE_FUNCTIONS`, found through the module's imports (``import numpy as np`` makes
  ``np.save`` ``numpy.save``; ``from shutil import rmtree`` makes ``rmtree`` ``shutil.rmtree``), every
  function of ``shutil`` but the few that read only, ``os.open`` with any flag but ``O_RDONLY``,
  ``tarfile.open`` / ``zipfile.ZipFile`` in a write mode, ``yaml.dump`` / ``yaml.safe_dump`` given a stream.
"""

from __future__ import annotations

import ast
from dataclasses import dataclass
from pathlib import Path

#: Methods that write whatever object they are called on.
WRITE_METHODS = frozenset({
    "write_text", "write_bytes", "touch", "mkdir", "unlink", "rmdir", "symlink_to", "hardlink_to",
    "link_to", "savefig", "save_pretrained", "extractall", "extract", "tofile", "to_csv", "to_json",
    "to_parquet", "save_file", "save",
})

#: Functions that write, by their full name.
WRITE_FUNCTIONS = frozenset({
    "torch.save", "torch.jit.save", "numpy.save", "numpy.savez", "numpy.savez_compressed", "numpy.savetxt",
    "numpy.memmap", "numpy.lib.format.open_memmap",
    "os.replace", "os.rename", "os.renames", "os.remove", "os.unlink", "os.rmdir", "os.removedirs",
    "os.makedirs", "os.mkdir", "os.mkfifo", "os.symlink", "os.link", "os.truncate",
    "pathlib.Path.touch", "tempfile.mkstemp", "tempfile.mkdtemp", "tempfile.NamedTemporaryFile",
    "tempfile.TemporaryDirectory", "tempfile.TemporaryFile", "tempfile.SpooledTemporaryFile",
    "matplotlib.pyplot.savefig", "safetensors.torch.save_file", "safetensors.numpy.save_file",
    "torch.utils.tensorboard.SummaryWriter", "tensorboardX.SummaryWriter", "urllib.request.urlretrieve",
    "logging.FileHandler", "logging.handlers.RotatingFileHandler", "huggingface_hub.snapshot_download",
    "huggingface_hub.hf_hub_download",
})

#: ``shutil`` functions that write nothing (every other one does).
SHUTIL_READ_ONLY = frozenset({"shutil.disk_usage", "shutil.which", "shutil.get_terminal_size",
                              "shutil.copyfileobj", "shutil.get_archive_formats",
                              "shutil.get_unpack_formats"})

_OPENERS = {"open": 1, "io.open": 1, "os.fdopen": 1, "gzip.open": 1, "bz2.open": 1, "lzma.open": 1,
            "codecs.open": 1, "tarfile.open": 1, "zipfile.ZipFile": 1, "tarfile.TarFile": 1}


@dataclass(frozen=True)
class WriteCall:
    """One write call: where it is and what it calls."""

    file: str
    line: int
    what: str

    def __str__(self) -> str:
        return f"{self.file}:{self.line}: {self.what}"


def _imports(tree: ast.AST) -> dict[str, str]:
    """Local name -> full name, from every import of the module (inside functions too)."""
    names: dict[str, str] = {}
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for a in node.names:
                if a.asname:
                    names[a.asname] = a.name
                else:
                    names[a.name.split(".")[0]] = a.name.split(".")[0]
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            for a in node.names:
                names[a.asname or a.name] = f"{node.module}.{a.name}"
    return names


def _dotted(node: ast.AST) -> list[str] | None:
    """``a.b.c`` as ``["a", "b", "c"]``; None when the chain does not start at a name."""
    parts: list[str] = []
    while isinstance(node, ast.Attribute):
        parts.append(node.attr)
        node = node.value
    if isinstance(node, ast.Name):
        return [node.id, *reversed(parts)]
    return None


def _full_name(func: ast.AST, imports: dict[str, str]) -> str | None:
    """The full name of a called function reached through an import (None for a method of a value)."""
    parts = _dotted(func)
    if parts is None:
        return None
    if parts[0] in imports:
        return ".".join([imports[parts[0]], *parts[1:]])
    if len(parts) == 1 and parts[0] == "open":
        return "open"
    return None


def _mode(call: ast.Call, position: int) -> ast.AST | None:
    """The ``mode`` argument of an opener (keyword ``mode``, else the positional one at ``position``)."""
    for kw in call.keywords:
        if kw.arg == "mode":
            return kw.value
    return call.args[position] if len(call.args) > position else None


def _writes_with(mode: ast.AST | None, default: str = "r") -> bool:
    """Whether a mode argument opens for writing; a mode that is not a constant counts as writing."""
    if mode is None:
        value = default
    elif isinstance(mode, ast.Constant) and isinstance(mode.value, str):
        value = mode.value
    else:
        return True
    return any(c in value for c in "wax+")


def _os_open_writes(call: ast.Call) -> bool:
    """``os.open(path, flags)`` writes unless its flags are ``os.O_RDONLY`` alone."""
    flags = call.args[1] if len(call.args) > 1 else next((k.value for k in call.keywords if k.arg == "flags"),
                                                          None)
    return not (flags is not None and _dotted(flags) in (["os", "O_RDONLY"],))


def _what(call: ast.Call, imports: dict[str, str]) -> str | None:
    """What a call writes with, or None when it writes nothing."""
    name = _full_name(call.func, imports)
    if name is not None:
        if name in _OPENERS:
            return name if _writes_with(_mode(call, _OPENERS[name])) else None
        if name == "os.open":
            return name if _os_open_writes(call) else None
        if name in ("yaml.dump", "yaml.safe_dump", "yaml.dump_all", "yaml.safe_dump_all"):
            stream = len(call.args) > 1 or any(k.arg == "stream" for k in call.keywords)
            return f"{name} to a stream" if stream else None
        if name in WRITE_FUNCTIONS or (name.startswith("shutil.") and name not in SHUTIL_READ_ONLY):
            return name
        if name.rsplit(".", 1)[-1] in WRITE_METHODS and not name.startswith("hardmix."):
            return name  # a library's function named as a writing method (``plt.savefig``)
        return None
    if not isinstance(call.func, ast.Attribute):
        return None
    attr = call.func.attr
    if attr in WRITE_METHODS:
        return f".{attr}()"
    if attr == "open":
        return ".open() for writing" if _writes_with(_mode(call, 0)) else None
    if attr in ("replace", "rename") and len(call.args) == 1 and not call.keywords:
        return f".{attr}()"
    if attr == "SummaryWriter":
        return ".SummaryWriter()"
    return None


def _writer_reference(node: ast.AST, imports: dict[str, str]) -> str | None:
    """A writing function or class named without being called here (``os.replace`` passed on, the
    ``SummaryWriter`` class returned), or imported by name (``from torch.utils.tensorboard import
    SummaryWriter``)."""
    if isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
        for a in node.names:
            name = f"{node.module}.{a.name}"
            if name in WRITE_FUNCTIONS or (node.module == "shutil" and name not in SHUTIL_READ_ONLY):
                return f"import of {name}"
        return None
    if isinstance(node, (ast.Attribute, ast.Name)):
        name = _full_name(node, imports)
        if name in WRITE_FUNCTIONS or (name or "").endswith(".SummaryWriter"):
            return f"{name} (not called here)"
    return None


def write_calls(source: str, file: str = "<string>") -> list[WriteCall]:
    """Every write call in ``source``, in line order (and every writing function named without a call)."""
    tree = ast.parse(source, filename=file)
    imports = _imports(tree)
    called = {id(n.func) for n in ast.walk(tree) if isinstance(n, ast.Call)}
    found = [WriteCall(file, node.lineno, what) for node in ast.walk(tree)
             if isinstance(node, ast.Call) and (what := _what(node, imports)) is not None]
    found += [WriteCall(file, node.lineno, what) for node in ast.walk(tree)
              if id(node) not in called and (what := _writer_reference(node, imports)) is not None]
    return sorted(found, key=lambda w: (w.line, w.what))


def write_calls_under(root: Path, folders: tuple[str, ...]) -> list[WriteCall]:
    """Every write call in the Python files of ``folders`` (relative to ``root``)."""
    out: list[WriteCall] = []
    for folder in folders:
        for path in sorted((root / folder).rglob("*.py")):
            out += write_calls(path.read_text(encoding="utf-8"), str(path.relative_to(root)))
    return out
